"""Real Apache Kafka brokers (KRaft) for tests and benchmarks, from Maven Central's jars.

:class:`KafkaCluster` runs ``n`` nodes of Apache Kafka 4.x (the ``kafka`` artifact set of
``sparklog/maven/``, resolved into ``~/.m2`` on first use), each ``java -cp ... kafka.Kafka
server.properties`` in combined mode (``process.roles=broker,controller``) on free
127.0.0.1 ports, with its log directory under ``base_dir`` (a test's temporary directory:
the same disk as sparklog's storage). Storage is formatted first with Kafka's own
``kafka.tools.StorageTool format`` (what ``kafka-storage.sh format`` runs). :meth:`start`
waits for real readiness: every node logged ``Kafka Server started`` and answers an
ApiVersions request on its broker listener. Only processes this object started are ever
signalled; each node's output is kept in ``base_dir/kafka-<id>.log`` (the tail goes into
every error).

Fixture (registered for every test by ``tests/conftest.py``'s ``pytest_plugins``):

* ``kafka_broker`` (session scope, one per test run): a started one-node cluster; skips
  with the reason when java or Maven's artifacts are unavailable.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from .processes import file_tail, free_port, kill_process, serve_until_interrupted, stop_process

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
READY_LINE = b"Kafka Server started"

LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.ready.name = kafka.server.KafkaRaftServer
logger.ready.level = INFO
"""


def kafka_classpath(quiet: bool = True) -> list[str]:
    """The jars of Apache Kafka's broker and tools (``sparklog.maven`` set ``kafka``),
    resolved with ``mvn`` on first use; MavenError when they cannot be."""
    from sparklog.maven import classpath

    return classpath("kafka", quiet=quiet)


def kafka_unavailable() -> str | None:
    """Why a Kafka broker cannot be started here (None when it can)."""
    if shutil.which("java") is None:
        return "java is not installed (Kafka 4 needs Java 17+)"
    from sparklog.maven import MavenError

    try:
        kafka_classpath()
    except MavenError as exc:
        return f"Apache Kafka's jars are unavailable: {exc}"
    return None


def kafka_tool(main: str, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    """Run one of Kafka's command-line tools (``main``, e.g.
    ``org.apache.kafka.tools.TopicCommand``, what ``kafka-topics.sh`` runs) with Kafka's
    jars; its standard output. AssertionError with both outputs when it exits non-zero
    or reports an exception (some tools print one and still exit 0)."""
    cp = ":".join(kafka_classpath())
    done = subprocess.run(["java", "-cp", cp, main, *args], capture_output=True,
                          input=None if stdin is None else stdin.encode(), timeout=timeout)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0 and "Exception" not in out + err, (
        f"{main} {' '.join(args)} exited {done.returncode}\n--- stdout\n{out[-3000:]}\n"
        f"--- stderr\n{err[-3000:]}")
    return out


def api_versions(host: str, port: int, timeout: float = 2.0) -> int:
    """Send Kafka's ApiVersions request (v0) and return the answer's error code (0: the
    broker is serving requests)."""
    client = b"sparklog-test"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 10:  # size, correlation id, error code
            chunk = s.recv(10 - len(head))
            if not chunk:
                raise ConnectionError("closed before answering ApiVersions")
            head += chunk
    _size, correlation, error = struct.unpack(">iih", head)
    if correlation != 1:
        raise ConnectionError(f"ApiVersions answered correlation id {correlation}")
    return error


def new_cluster_id() -> str:
    """A random KRaft cluster id (a base64url UUID, as ``kafka-storage random-uuid``
    prints), never starting with '-': the storage tool would read it as an option (as
    Kafka's own Uuid.randomUuid avoids)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class KafkaNode:
    """One Kafka process of a :class:`KafkaCluster` (node id ``node_id``)."""

    def __init__(self, cluster: "KafkaCluster", node_id: int):
        self.cluster = cluster
        self.node_id = node_id
        self.port = free_port()
        self.controller_port = free_port()
        self.dir = os.path.join(cluster.base_dir, f"kafka-{node_id}")
        self.log_dirs = os.path.join(self.dir, "data")
        self.config = os.path.join(self.dir, "server.properties")
        self.log_path = os.path.join(cluster.base_dir, f"kafka-{node_id}.log")
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:port`` of the broker listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id while running."""
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def write_config(self, voters: str) -> None:
        """Write ``server.properties`` (combined broker and controller, loopback only)."""
        os.makedirs(self.log_dirs, exist_ok=True)
        n = len(self.cluster.nodes)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": self.log_dirs,
            "num.partitions": "1",
            "default.replication.factor": str(n),
            "offsets.topic.replication.factor": str(n),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(n),
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": str(n),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            **self.cluster.properties,
        }
        with open(self.config, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())

    def _java(self, main: str, *args: str, heap: str) -> list[str]:
        return ["java", f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.cluster.log4j_config}",
                "-cp", os.pathsep.join(self.cluster.classpath), main, *args]

    def format(self, cluster_id: str) -> None:
        """Format the log directory (``kafka-storage.sh format -t ID -c server.properties``)."""
        done = subprocess.run(
            self._java(STORAGE_TOOL, "format", "-t", cluster_id, "-c", self.config,
                       "--ignore-formatted", heap="128m"),
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format of node {self.node_id} failed "
                               f"(exit {done.returncode}): {done.stdout}{done.stderr}"[-3000:])

    def spawn(self) -> None:
        """Start the process (no wait; :meth:`wait_ready` waits)."""
        if self.pid is not None:
            return
        with open(self.log_path, "ab") as log:
            self._ready_from = log.tell()
            self.proc = subprocess.Popen(
                self._java(MAIN_CLASS, self.config, heap=self.cluster.heap),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def ready(self) -> bool:
        """True when this run of the process logged its start and answers ApiVersions;
        RuntimeError (with the log's tail) when it exited."""
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"Kafka node {self.node_id} exited with {code}: "
                               f"{self.log_tail()}")
        with open(self.log_path, "rb") as f:
            f.seek(self._ready_from)
            if READY_LINE not in f.read():
                return False
        try:
            return api_versions("127.0.0.1", self.port) == 0
        except OSError:
            return False

    def log_tail(self, n: int = 3000) -> str:
        """The last ``n`` characters of the node's output."""
        return file_tail(self.log_path, n)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (controlled shutdown), SIGKILL after ``timeout``, and reap."""
        stop_process(self.proc, timeout)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the process (a crash) and reap it."""
        kill_process(self.proc)
        self.proc = None


class KafkaCluster:
    """``n`` KRaft nodes (ids 1..n, each broker and controller) under ``base_dir``.

    ``properties`` add to or override every node's server.properties (e.g.
    ``{"flush.messages": "1"}``); ``heap`` is each JVM's -Xmx/-Xms.
    """

    def __init__(self, base_dir: str, n: int = 1, *, heap: str = "512m",
                 properties: dict | None = None, log_level: str = "WARN"):
        self.base_dir = os.path.abspath(base_dir)
        os.makedirs(self.base_dir, exist_ok=True)
        self.classpath = kafka_classpath()
        self.heap = heap
        self.properties = {k: str(v) for k, v in (properties or {}).items()}
        self.log4j_config = os.path.join(self.base_dir, "log4j2.properties")
        with open(self.log4j_config, "w") as f:
            f.write(LOG4J2.format(level=log_level))
        self.nodes: dict[int, KafkaNode] = {}
        for i in range(1, n + 1):
            self.nodes[i] = KafkaNode(self, i)
        self.cluster_id = new_cluster_id()
        self._formatted = False

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of every node's broker listener."""
        return ",".join(n.address for n in self.nodes.values())

    def start(self, timeout: float = 120.0) -> "KafkaCluster":
        """Format (first time), start every node not running, and wait until each is
        ready."""
        if not self._formatted:
            voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}"
                              for n in self.nodes.values())
            for node in self.nodes.values():
                node.write_config(voters)
                node.format(self.cluster_id)
            self._formatted = True
        pending = [n for n in self.nodes.values() if n.pid is None]
        for node in pending:
            node.spawn()
        self.wait_ready(pending, timeout)
        return self

    def wait_ready(self, nodes, timeout: float = 120.0) -> None:
        """Wait until every node of ``nodes`` is ready (RuntimeError naming the first one
        that is not, with its log's tail)."""
        deadline = time.monotonic() + timeout
        for node in nodes:
            try:
                while not node.ready():
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"Kafka node {node.node_id} was not serving on {node.address} "
                            f"within {timeout}s: {node.log_tail()}")
                    time.sleep(0.1)
            except RuntimeError:
                self.stop()
                raise

    def stop(self) -> None:
        """Stop every node this object started (their data and logs stay)."""
        for node in self.nodes.values():
            node.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """One real single-node Kafka (KRaft) per test run, log dirs under pytest's temporary
    directory; skips with the reason when it cannot run here. Its output is
    ``kafka-1.log`` beside its data, and kept there (pytest keeps its last runs)."""
    reason = kafka_unavailable()
    if reason:
        pytest.skip(reason)
    cluster = KafkaCluster(str(tmp_path_factory.mktemp("kafka")), heap="256m")
    cluster.start()
    yield cluster
    cluster.stop()


if __name__ == "__main__":  # manual use: python -m tests.support.kafkaserver [N] -> until Ctrl-C
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with KafkaCluster(tempfile.mkdtemp(prefix="sparklog-kafka-"), n) as kc:
        serve_until_interrupted(f"Kafka on {kc.bootstrap}")
