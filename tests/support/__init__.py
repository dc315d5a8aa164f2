"""What the tests share, and nothing the test runner collects: real daemons started as
processes (``processes``, ``hdfscluster``, ``zkserver``, ``kafkaserver``, ``brokerproc``,
``clusterproc``), bounded waits for cluster state (``waiting``), and data builders of the
log, Spark and exactly-once tests (``logfiles``, ``logdata``, ``jobs``).

The fixture modules run by hand from the repository's root, e.g.
``python -m tests.support.zkserver`` (one ZooKeeper until Ctrl-C).
"""
