"""The ``sparklog`` command line: Kafka-style shell tools (topics, produce, consume, groups,
broker, dump-log) and the etl and quickstart commands; see :mod:`sparklog.cli.main`."""
