"""What the tests share, and nothing the test runner collects.

* real daemons as processes: ``processes`` (the process and port helpers, /proc), ``hdfscluster``,
  ``zkserver``, ``kafkaserver``, ``brokerproc``, ``clusterproc``; their fixtures are
  registered for every test by ``tests/conftest.py`` (``pytest_plugins``);
* bounded waits for cluster state: ``waiting``;
* the run's check that it leaves no multiprocessing child running: ``leftovers``
  (an autouse fixture, registered by ``tests/conftest.py`` too);
* talking to a broker: ``wire`` (hand-written protocol requests), ``clients`` (reading
  back through the Consumer), ``shell`` (the shell tools as subprocesses);
* data: ``logfiles`` (frames and a recording FileIO for the log tests), ``logdata``
  (topics written through the log layer), ``sparkread`` (reads through Spark),
  ``jobs`` (exactly-once jobs and their outputs);
* scenarios shared by several test modules: ``failover``.

The fixture modules run by hand from the repository's root, e.g.
``python -m tests.support.zkserver`` (one ZooKeeper until Ctrl-C).
"""
