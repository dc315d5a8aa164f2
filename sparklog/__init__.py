"""sparklog: a PySpark-native partitioned log on HDFS."""
__version__ = "0.1.0"
