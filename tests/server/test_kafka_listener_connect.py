"""The broker's Kafka listener (docs/kafka-protocol.md) with Kafka Connect standalone,
unchanged: ``org.apache.kafka.connect.cli.ConnectStandalone`` (what
``connect-standalone.sh`` runs, the ``kafka-connect`` Maven artifact set) with the
FileStream source and sink connectors shipped in Kafka's distribution. The source's
Java producer writes a file's lines into a sparklog topic, the sink's consumer group
writes them out to another file; after a restart neither sends nor writes a line twice
(the source's offsets are in a local file, the sink's are the group's commits)."""

from __future__ import annotations

import shutil

import pytest

from tests.support.kafkaconn import start_with_kafka_listener, topic_name
from tests.support.kafkaserver import kafka_tool, kafka_unavailable
from tests.support.kafkatools import JavaTool
from tests.support.waiting import wait_until

CONNECT_STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"
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
        key_converter="org.apache.kafka.connect.storage.StringConverter",
        value_converter="org.apache.kafka.connect.storage.StringConverter",
        offset_storage_file_filename=tmp_path / "connect.offsets",
        offset_flush_interval_ms=500, listeners="http://127.0.0.1:0", **(worker_props or {}))
    connectors = [
        _properties(tmp_path / "source.properties", name="file-source", tasks_max=1,
                    connector_class="org.apache.kafka.connect.file.FileStreamSourceConnector",
                    file=tmp_path / "input.txt", topic=topic)]
    if sink:
        connectors.append(
            _properties(tmp_path / "sink.properties", name="file-sink", tasks_max=1,
                        connector_class="org.apache.kafka.connect.file.FileStreamSinkConnector",
                        file=tmp_path / "output.txt", topics=topic))

    def connect(run: int) -> JavaTool:
        return JavaTool(CONNECT_STANDALONE, worker, *connectors, classpath=classpath,
                        log_path=tmp_path / f"connect-{run}.log", heap="384m")
    return connect


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
