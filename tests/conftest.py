"""Shared fixtures: one local Spark session per test run, one HDFS cluster per test run
(``hdfs_cluster``, tests/support/hdfscluster.py), loopback ports, tmp roots, a broker process
per test module.

Spark workers must run the driver's interpreter (PYSPARK_PYTHON), or they would import
another environment's packages.
"""

from __future__ import annotations

import os
import sys

import pytest

#: The fixture modules of tests/support/, registered once for every test: the run's check
#: that it leaves no multiprocessing child running (``no_leftover_processes``, autouse),
#: ``hdfs_cluster`` (one HDFS cluster per run, on demand), ``zookeeper_server`` and
#: ``zookeeper``, ``kafka_broker``.
pytest_plugins = ["tests.support.leftovers", "tests.support.hdfscluster",
                  "tests.support.zkserver", "tests.support.kafkaserver"]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """When a test failed, name the logs of the HDFS daemons the run started."""
    from tests.support import hdfscluster

    if not hdfscluster.STARTED or not (terminalreporter.stats.get("failed")
                                       or terminalreporter.stats.get("error")):
        return
    terminalreporter.section("HDFS daemon logs")
    for cluster in hdfscluster.STARTED:
        for name, path in cluster.log_paths().items():
            terminalreporter.write_line(f"{name}: {path}")


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory):
    """Spark's scratch files (block managers, spark-*, artifacts, native libraries) of
    every Spark JVM of the run, subprocesses included, go under pytest's temporary
    directory instead of the system's: a JVM that is stopped without its shutdown hooks
    leaves them behind, and pytest prunes its old runs."""
    scratch = tmp_path_factory.mktemp("spark-scratch")
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -Djava.io.tmpdir={scratch}".strip()
    return scratch


#: Java artifact sets of ``sparklog/maven/`` whose jars the run's Spark session loads
#: (resolved on first use, cached after); a set that cannot be resolved here is left out
#: and the tests needing it skip. spark-kafka: Spark's Kafka source, the peer of the
#: same-job test (tests/spark/test_kafka_same_job.py).
SPARK_JAR_SETS = ["spark-kafka"]


def spark_jar_set_jars() -> list[str]:
    """The jars of :data:`SPARK_JAR_SETS` that resolve here (reasons on stderr)."""
    from sparklog.maven import MavenError, classpath

    jars = []
    for name in SPARK_JAR_SETS:
        try:
            jars += classpath(name, quiet=True)
        except MavenError as exc:
            print(f"\nSpark session without the {name!r} jars: {exc}", file=sys.stderr)
    return jars


@pytest.fixture(scope="session")
def spark():
    """The run's local Spark session (local[2], UI off, 2 shuffle partitions), with the
    JVM reader's jar on its classpath when it can be built (no JDK: the Python reader
    only), so every Spark test runs batch scans on the JVM reader, and with delta-spark
    on (its jars resolved from Maven; without Maven the Delta tests skip and say why)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    from sparklog.maven import MavenError
    from sparklog.spark import delta_conf, local_session
    from sparklog.spark.jvm import jar_path

    conf = {"spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.python.worker.reuse": "true",
            "spark.jars": ",".join(spark_jar_set_jars())}
    if jar_path(quiet=True) is None:
        print("\nsparklog JVM reader jar unavailable (no javac?): Spark tests use the "
              "Python reader", file=sys.stderr)
    try:  # Delta's snapshot state in 2 partitions rather than 50: tiny test tables
        conf = delta_conf({**conf, "spark.databricks.delta.snapshotPartitions": "2"})
    except MavenError as e:
        print(f"\ndelta-spark unavailable, the format('delta') tests skip: {e}",
              file=sys.stderr)
    session = local_session("sparklog-tests", shuffle_partitions=2, register_source=False,
                            conf=conf)  # adds the jar when it is built
    yield session
    session.stop()


@pytest.fixture
def storage_root(tmp_path):
    """A fresh file:// storage root."""
    root = tmp_path / "log"
    root.mkdir()
    return root.as_uri()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, request):
    """A broker process (:class:`brokerproc.BrokerProcess`) on a fresh storage root,
    shared by the tests of one module; its log is ``broker.log`` beside the root."""
    from tests.support.brokerproc import BrokerProcess

    root = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])
    with BrokerProcess((root / "log").as_uri(), log_path=root / "broker.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def admin(broker):
    """An Admin client of the module's broker."""
    from sparklog.clients.admin import Admin

    with Admin(broker.address) as a:
        yield a


@pytest.fixture
def hdfs_env(hdfs_cluster, monkeypatch):
    """The run's HDFS cluster, with its client configuration (``HADOOP_CONF_DIR``: the
    small cluster's client settings, such as not replacing DataNodes of a write pipeline
    that has no spare) in the environment of this process and of the processes the test
    starts (brokers, jobs)."""
    monkeypatch.setenv("HADOOP_CONF_DIR", hdfs_cluster.conf_dir)
    return hdfs_cluster


def pytest_sessionfinish(session, exitstatus):
    """Remember the run's exit status for :func:`pytest_unconfigure`."""
    session.config.sparklog_exitstatus = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """With Hadoop's client loaded in-process (JPype), leave without the interpreter's
    teardown: the JVM's shutdown at interpreter exit crashed once (SIGSEGV, exit 139)
    after every test had passed. Everything is reported and flushed by now."""
    jpype = sys.modules.get("jpype")
    if jpype is None or not jpype.isJVMStarted():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(getattr(config, "sparklog_exitstatus", 0))


@pytest.fixture(scope="module")
def metered_broker(tmp_path_factory):
    """A broker process of the test module serving its Prometheus metrics
    (``.metrics_port``), with its storage root path (``.root``) and an Admin (``.admin``)."""
    from sparklog.clients.admin import Admin
    from tests.support.brokerproc import BrokerProcess
    from tests.support.processes import free_port

    root = tmp_path_factory.mktemp("limits")
    port = free_port()
    with BrokerProcess((root / "log").as_uri(), ["--metrics-port", str(port)],
                       log_path=root / "broker.log") as proc:
        proc.metrics_port = port
        proc.root = root / "log"
        with Admin(proc.address) as admin:
            proc.admin = admin
            yield proc
