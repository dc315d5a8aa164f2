"""bench.peers: sparklog beside Apache Kafka, Kafka's Python clients and Spark's Kafka
source, measured in the same run (``python -m bench.peers``; see ``__main__``)."""
