"""The broker's Kafka listener (docs/kafka-protocol.md) with Kafka Connect, unchanged,
standalone and distributed: ``org.apache.kafka.connect.cli.ConnectStandalone`` and
``ConnectDistributed`` (what ``connect-standalone.sh`` and ``connect-distributed.sh``
run, the ``kafka-connect`` Maven artifact set) with the FileStream source and sink
connectors shipped in Kafka's distribution. The source's Java producer writes a file's
lines into a sparklog topic, the sink's consumer group writes them out to another
file; after a restart neither sends nor writes a line twice (standalone: the source's
offsets are in a local file, the sink's are the group's commits). Distributed workers
form a group of protocol type ``connect`` on the broker's coordinator, keep their
configs, offsets and statuses in compacted topics they create, and share the
connectors and tasks; when one stops, another takes its work over."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest

from tests.support.kafkaconn import KafkaConn, start_with_kafka_listener, topic_name
from tests.support.kafkaserver import kafka_tool, kafka_unavailable
from tests.support.kafkatools import JavaTool
from tests.support.processes import free_port
from tests.support.waiting import wait_until

CONNECT_STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"
CONNECT_DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
#: a distributed worker's log: its rebalances (the assignments it got) and warnings
_WORKER_LOG4J2 = """rootLogger.level=WARN
rootLogger.appenderRef.stderr.ref=STDERR
appender.stderr.type=Console
appender.stderr.name=STDERR
appender.stderr.target=SYSTEM_ERR
appender.stderr.layout.type=PatternLayout
appender.stderr.layout.pattern=%d{ISO8601} %p %c{1}: %m%n
logger.herder.name=org.apache.kafka.connect.runtime.distributed
logger.herder.level=INFO
"""
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.fixture(scope="module")
def connect_classpath() -> list[str]:
    """Kafka Connect's jars; skips (saying why) when they or Kafka's tools cannot run."""
    why = kafka_unavailable()
    if why:
        pytest.skip(why)
    from sparklog.maven import MavenError, classpath

    try:
        return classpath("kafka-connect", quiet=True)
    except MavenError as exc:
        pytest.skip(f"Kafka Connect's jars are unavailable: {exc}")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-listener-connect"))
    yield b
    b.stop()


def _properties(path, **props) -> str:
    path.write_text("".join(f"{k.replace('_', '.')}={v}\n" for k, v in props.items()))
    return str(path)


def file_connectors(classpath: list[str], address: str, topic: str, tmp_path,
                    worker_props: dict | None = None, sink: bool = True):
    """A function starting (``run`` numbers its log) Connect standalone bootstrapping
    from ``address`` with a FileStreamSource of ``tmp_path/input.txt`` into ``topic``
    and (unless ``sink`` is false) a FileStreamSink (group ``connect-file-sink``) of it
    into ``tmp_path/output.txt``; the source's offsets in ``tmp_path/connect.offsets``.
    ``worker_props`` add to the worker's configuration (Kafka's names: ``producer.``
    and ``consumer.`` prefixed ones configure the source's producer and the sink's
    consumer)."""
    worker = _properties(
        tmp_path / "worker.properties", bootstrap_servers=address,
        key_converter=STRING_CONVERTER, value_converter=STRING_CONVERTER,
        offset_storage_file_filename=tmp_path / "connect.offsets",
        offset_flush_interval_ms=500, listeners="http://127.0.0.1:0", **(worker_props or {}))
    connectors = [
        _properties(tmp_path / "source.properties", name="file-source", tasks_max=1,
                    connector_class=FILE_SOURCE,
                    file=tmp_path / "input.txt", topic=topic)]
    if sink:
        connectors.append(
            _properties(tmp_path / "sink.properties", name="file-sink", tasks_max=1,
                        connector_class=FILE_SINK,
                        file=tmp_path / "output.txt", topics=topic))

    def connect(run: int) -> JavaTool:
        return JavaTool(CONNECT_STANDALONE, worker, *connectors, classpath=classpath,
                        log_path=tmp_path / f"connect-{run}.log", heap="384m")
    return connect


class DistributedWorker(JavaTool):
    """A Kafka Connect distributed worker (``ConnectDistributed``, started at once) of
    the Connect cluster ``group`` (its ``group.id``) bootstrapping from ``address``:
    its configs, offsets and statuses in the topics ``<group>-configs``,
    ``-offsets`` and ``-status``, which the first worker creates (compacted, one
    partition each, ``*.storage.replication.factor=1``); its REST API at ``url``, on a
    free loopback port; ``worker_id`` is its id in the connectors' status. A worker
    that leaves hands its connectors and tasks to the others after
    ``scheduled.rebalance.max.delay.ms`` (Kafka's default 5 minutes; 2 s here).
    ``worker_props`` add to its configuration; its log is ``tmp_path/<name>.log``."""

    def __init__(self, classpath: list[str], address: str, group: str, tmp_path, name: str,
                 worker_props: dict | None = None):
        port = free_port()
        self.worker_id = f"127.0.0.1:{port}"
        self.url = f"http://{self.worker_id}"
        log4j = tmp_path / "connect-log4j2.properties"
        log4j.write_text(_WORKER_LOG4J2)
        worker = _properties(
            tmp_path / f"{name}.properties", bootstrap_servers=address, group_id=group,
            key_converter=STRING_CONVERTER, value_converter=STRING_CONVERTER,
            config_storage_topic=f"{group}-configs", offset_storage_topic=f"{group}-offsets",
            status_storage_topic=f"{group}-status", config_storage_replication_factor=1,
            offset_storage_replication_factor=1, status_storage_replication_factor=1,
            offset_storage_partitions=1, status_storage_partitions=1,
            offset_flush_interval_ms=500, scheduled_rebalance_max_delay_ms=2000,
            listeners=self.url, **(worker_props or {}))
        super().__init__(CONNECT_DISTRIBUTED, worker, classpath=classpath,
                         log_path=tmp_path / f"{name}.log", heap="384m",
                         jvm_args=[f"-Dlog4j2.configurationFile={log4j}"])

    def rest(self, path: str, body: dict | None = None):
        """The decoded answer of ``GET path`` (``POST`` of ``body`` as JSON when given);
        urllib's errors as they come (a worker starting, an HTTP error status)."""
        request = urllib.request.Request(
            self.url + path, method="GET" if body is None else "POST",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    def serving(self) -> bool:
        """Whether its REST API answers (the worker has joined its cluster)."""
        try:
            return isinstance(self.rest("/connectors"), list)
        except (OSError, ValueError):
            return False

    def owners(self, connectors) -> dict[str, str] | None:
        """``{connector or task: worker id}`` of ``connectors`` and their tasks as this
        worker's REST API shows them, once every one is RUNNING (else None)."""
        owners = {}
        for name in connectors:
            try:
                status = self.rest(f"/connectors/{name}/status")
            except (OSError, ValueError):
                return None
            units = [(name, status["connector"])] + [
                (f"{name}-{t['id']}", t) for t in status["tasks"]]
            if not status["tasks"] or any(u["state"] != "RUNNING" for _, u in units):
                return None
            owners.update((unit, u["worker_id"]) for unit, u in units)
        return owners


def lines_of(path) -> list[str]:
    """The lines of a file ([] while it does not exist)."""
    return path.read_text().splitlines() if path.exists() else []


def test_file_source_into_a_topic_and_file_sink_out_of_it(connect_classpath, broker, tmp_path):
    """Connect standalone with a FileStreamSource (input file -> topic) and a
    FileStreamSink (topic -> output file): the output file has the input's lines, in
    order (one partition), also those appended while it runs; the sink's group has
    committed the log end; restarted, Connect resumes from its offsets and the output
    gets only the lines appended since."""
    address = broker.broker.listener_addresses["KAFKA"]
    topic = topic_name("connect-")
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", address,
               "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    source, sink = tmp_path / "input.txt", tmp_path / "output.txt"
    lines = [f"line {i}: {'x' * (i % 50)}" for i in range(500)]
    source.write_text("\n".join(lines) + "\n")
    connect = file_connectors(connect_classpath, address, topic, tmp_path)
    with connect(1) as worker1:
        wait_until(lambda: lines_of(sink) == lines, timeout=120,
                   what=f"the sink file holding the source's lines: {worker1.describe()}")
        more = [f"appended {i}" for i in range(100)]
        with source.open("a") as f:
            f.write("\n".join(more) + "\n")
        lines += more
        wait_until(lambda: lines_of(sink) == lines, timeout=60,
                   what=f"the lines appended while it runs: {worker1.describe()}")
        # the source's offsets reach its file (flushed every 500 ms) before it stops
        wait_until(lambda: (tmp_path / "connect.offsets").exists(), timeout=30,
                   what="the source's offsets file")
        assert worker1.stop(), worker1.describe()  # graceful: the sink commits its offsets
    out = kafka_tool(GROUPS, "--bootstrap-server", address, "--describe",
                     "--group", "connect-file-sink")
    assert f"connect-file-sink {topic} 0 {len(lines)} {len(lines)} 0" in " ".join(out.split()), out
    shutil.copy(sink, tmp_path / "output-before-restart.txt")
    later = [f"after restart {i}" for i in range(50)]
    with source.open("a") as f:
        f.write("\n".join(later) + "\n")
    lines += later
    with connect(2) as worker2:
        wait_until(lambda: len(lines_of(sink)) >= len(lines), timeout=120,
                   what=f"the restarted sink writing the new lines: {worker2.describe()}")
        assert worker2.stop(), worker2.describe()
    assert lines_of(sink) == lines  # nothing sent or written twice
    out = kafka_tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", address,
                     "--topic", topic, "--time", "-1")
    assert f"{topic}:0:{len(lines)}" in out


def _topic_configs(conn: KafkaConn, topic: str) -> dict[str, str | None]:
    """The topic's configs, as DescribeConfigs answers them."""
    from kio.schema.describe_configs.v4.request import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )
    from kio.static.primitive import i8

    result = conn.request(32, 4, DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=i8(2), resource_name=topic, configuration_keys=None),),
        include_synonyms=False, include_documentation=False)).results[0]
    assert result.error_code == 0, result
    return {c.name: c.value for c in result.configs}


def _describe_group(conn: KafkaConn, group: str):
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    return conn.request(15, 5, DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False)).groups[0]


def test_distributed_workers_share_the_connectors_and_take_over(connect_classpath, broker,
                                                               tmp_path):
    """Connect distributed: the first worker creates its storage topics (compacted) and
    forms the cluster's group (protocol type ``connect``); a FileStreamSource and a
    FileStreamSink created through its REST API run and the output file gets the
    input's lines. A second worker joins the group: the connectors and tasks are
    shared between the two and keep running, and lines appended reach the output.
    The second stops: the first (the group's leader, which hands out a departed
    worker's work once ``scheduled.rebalance.max.delay.ms`` has passed, in a rebalance
    of its own) runs everything, and later lines still arrive, none twice."""
    address = broker.broker.listener_addresses["KAFKA"]
    group, topic = topic_name("connect-cluster-"), topic_name("connect-lines-")
    source, sink = tmp_path / "input.txt", tmp_path / "output.txt"
    lines = [f"line {i}: {'x' * (i % 50)}" for i in range(200)]
    source.write_text("\n".join(lines) + "\n")
    connectors = {
        "file-source": {"connector.class": FILE_SOURCE, "tasks.max": "1",
                        "file": str(source), "topic": topic},
        "file-sink": {"connector.class": FILE_SINK, "tasks.max": "1", "file": str(sink),
                      "topics": topic}}

    def append(prefix: str, n: int) -> None:
        more = [f"{prefix} {i}" for i in range(n)]
        with source.open("a") as f:
            f.write("\n".join(more) + "\n")
        lines.extend(more)

    first = DistributedWorker(connect_classpath, address, group, tmp_path, "worker-1")
    second = None
    try:
        wait_until(first.serving, timeout=180, what=f"the first worker: {first.describe()}")
        with KafkaConn(address) as conn:
            for suffix in ("configs", "offsets", "status"):
                configs = _topic_configs(conn, f"{group}-{suffix}")
                assert configs["cleanup.policy"] == "compact", (suffix, configs)
            assert [len(t.partitions) for t in conn.metadata(
                [f"{group}-{s}" for s in ("configs", "offsets", "status")]).topics] == [1] * 3
        for name, config in connectors.items():
            first.rest("/connectors", {"name": name, "config": config})
        wait_until(lambda: lines_of(sink) == lines, timeout=120,
                   what=f"the sink file holding the source's lines: {first.describe()}")
        assert set(first.owners(connectors).values()) == {first.worker_id}

        second = DistributedWorker(connect_classpath, address, group, tmp_path, "worker-2")
        wait_until(lambda: set((second.owners(connectors) or {}).values())
                   == {first.worker_id, second.worker_id}, timeout=180,
                   what=f"the two workers sharing the connectors: {second.describe()}")
        with KafkaConn(address) as conn:
            described = _describe_group(conn, group)
        assert (described.protocol_type, described.group_state, len(described.members)) == (
            "connect", "Stable", 2), described
        append("with two workers", 50)
        wait_until(lambda: lines_of(sink) == lines, timeout=120,
                   what=f"the lines appended with two workers: {second.describe()}")

        assert second.stop(), second.describe()
        wait_until(lambda: set((first.owners(connectors) or {}).values())
                   == {first.worker_id}, timeout=120,
                   what=f"the first worker taking the second's work over: {first.describe()}")
        append("after the second stopped", 50)
        wait_until(lambda: lines_of(sink) == lines, timeout=120,
                   what=f"the lines appended after the second stopped: {first.describe()}")
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.stop()
