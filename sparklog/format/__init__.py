"""Frame format: the one byte format shared by producer, broker, segment files and Spark.

See :mod:`sparklog.format.header` for the header layout and :mod:`sparklog.format.frame`
for the Arrow IPC body.
"""
