"""The broker's Kafka listener (docs/kafka-protocol.md) with Apache Kafka's Java client,
unchanged: Kafka's own command-line tools (kafka-topics, kafka-console-producer and
-consumer, kafka-producer-perf-test, kafka-consumer-groups, kafka-get-offsets), run as
``java -cp <kafka's jars> <main class>`` from the ``kafka`` Maven artifact set, against
a real broker. The Java client is stricter than kafka-python and librdkafka: these are
the requests it makes and the fields it reads."""

from __future__ import annotations

import re

import pytest

from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from tests.support.kafkaconn import start_with_kafka_listener, topic_name
from tests.support.kafkaserver import kafka_tool
from tests.support.waiting import wait_until

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PERF_PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-listener-java"), num_partitions=3)
    yield b
    b.stop()


def test_kafka_topics_creates_lists_and_describes(kafka_tools, kafka_address):
    """kafka-topics --create (CreateTopics v7: the Java admin reads the created topic's
    configs and replication factor), --list, --describe (Metadata, DescribeConfigs)."""
    topic = topic_name("j-")
    out = kafka_tool(TOPICS, "--bootstrap-server", kafka_address, "--create",
                     "--topic", topic, "--partitions", "3", "--replication-factor", "1",
                     "--config", "retention.ms=3600000")
    assert f"Created topic {topic}." in out
    assert topic in kafka_tool(TOPICS, "--bootstrap-server", kafka_address,
                               "--list").split()
    out = kafka_tool(TOPICS, "--bootstrap-server", kafka_address, "--describe",
                     "--topic", topic)
    assert re.search(rf"Topic: {topic}\s+TopicId: \S+\s+PartitionCount: 3", out) \
        or re.search(rf"Topic: {topic}\s+PartitionCount: 3", out), out
    assert "retention.ms=3600000" in out
    leaders = re.findall(rf"Topic: {topic}\s+Partition: (\d)\s+Leader: (\d+)", out)
    assert sorted(int(p) for p, _ in leaders) == [0, 1, 2]


def test_console_producer_idempotent_acks_all_then_group_consumer(kafka_tools, broker,
                                                                  kafka_address):
    """kafka-console-producer (acks=all, idempotence: InitProducerId and sequences)
    writes keyed lines; kafka-console-consumer in a group reads every one, commits,
    and kafka-consumer-groups describes the group at the log end; sparklog's own
    consumer reads the same records."""
    topic = topic_name("j-")
    kafka_tool(TOPICS, "--bootstrap-server", kafka_address, "--create",
               "--topic", topic, "--partitions", "3", "--replication-factor", "1")
    lines = [f"key{i % 5}:value {i}" for i in range(300)]
    kafka_tool(CONSOLE_PRODUCER, "--bootstrap-server", kafka_address,
               "--topic", topic, "--command-property", "acks=all",
               "--command-property", "enable.idempotence=true",
               "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
               stdin="\n".join(lines) + "\n")
    group = "g-" + topic
    out = kafka_tool(CONSOLE_CONSUMER, "--bootstrap-server", kafka_address,
                     "--topic", topic, "--group", group, "--from-beginning",
                     "--max-messages", "300", "--timeout-ms", "60000",
                     "--formatter-property", "print.key=true",
                     "--formatter-property", "key.separator=:")
    assert sorted(out.splitlines()) == sorted(lines)
    out = kafka_tool(GROUPS, "--bootstrap-server", kafka_address, "--describe",
                     "--group", group)
    rows = re.findall(rf"{group}\s+{topic}\s+(\d)\s+(\d+)\s+(\d+)\s+(\d+)", out)
    assert sorted(int(r[0]) for r in rows) == [0, 1, 2], out
    assert sum(int(r[1]) for r in rows) == 300
    assert all(r[1] == r[2] and r[3] == "0" for r in rows), out  # committed at the end
    assert group in kafka_tool(GROUPS, "--bootstrap-server", kafka_address,
                               "--list").split()
    c = Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest")
    got = []
    try:
        def more():
            for recs in c.poll(timeout_ms=500).values():
                got.extend(f"{r.key.decode()}:{r.value.decode()}" for r in recs)
            return len(got) >= 300
        wait_until(more, timeout=60, what="300 records by sparklog's consumer")
    finally:
        c.close()
    assert sorted(got) == sorted(lines)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_console_producer_every_codec(kafka_tools, broker, kafka_address, codec):
    """kafka-console-producer (idempotent, acks=all) with each codec: its batches are
    stored as they came and sparklog's own consumer reads every line back (the broker's
    readers decompress each codec of the Java client)."""
    topic = topic_name("j-")
    kafka_tool(TOPICS, "--bootstrap-server", kafka_address, "--create",
               "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    lines = [f"{codec} line {i} " + "x" * (i % 40) for i in range(200)]
    kafka_tool(CONSOLE_PRODUCER, "--bootstrap-server", kafka_address, "--topic", topic,
               "--command-property", "acks=all", "--command-property", "enable.idempotence=true",
               "--command-property", f"compression.type={codec}",
               stdin="\n".join(lines) + "\n")
    c = Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest")
    got: list[str] = []
    try:
        def more():
            for recs in c.poll(timeout_ms=500).values():
                got.extend(r.value.decode() for r in recs)
            return len(got) >= len(lines)
        wait_until(more, timeout=60, what=f"the {codec} lines by sparklog's consumer")
    finally:
        c.close()
    assert got == lines


def test_producer_perf_test_idempotent_acks_all(kafka_tools, kafka_address):
    """kafka-producer-perf-test: 20,000 records through the idempotent Java producer at
    acks=all, every one acknowledged (the broker's high watermarks add up)."""
    topic = topic_name("j-")
    out = kafka_tool(PERF_PRODUCER, "--topic", topic, "--num-records", "20000",
                     "--record-size", "100", "--throughput", "-1", "--command-property",
                     f"bootstrap.servers={kafka_address}", "acks=all",
                     "enable.idempotence=true", "linger.ms=5")
    assert "20000 records sent" in out
    out = kafka_tool(GET_OFFSETS, "--bootstrap-server", kafka_address,
                     "--topic", topic, "--time", "-1")
    ends = dict(re.findall(rf"{topic}:(\d+):(\d+)", out))
    assert sum(int(v) for v in ends.values()) == 20000, out


def test_get_offsets_latest_earliest_and_max_timestamp(kafka_tools, broker, kafka_address):
    """kafka-get-offsets with -1, -2 and -3 (ListOffsets v7's MAX_TIMESTAMP, KIP-734:
    the first record carrying the largest timestamp, not the last one)."""
    topic = topic_name("j-")
    kafka_tool(TOPICS, "--bootstrap-server", kafka_address, "--create",
               "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    stamps = [1_000, 5_000, 9_000, 3_000, 9_000, 2_000]
    p = Producer(bootstrap_servers=broker.address)
    for i, ts in enumerate(stamps):
        p.send(topic, value=b"%d" % i, partition=0, timestamp_ms=1_700_000_000_000 + ts)
    p.flush()
    p.close()

    def offset(time: str) -> int:
        out = kafka_tool(GET_OFFSETS, "--bootstrap-server", kafka_address,
                         "--topic", topic, "--time", time)
        return int(re.search(rf"{topic}:0:(\d+)", out).group(1))

    assert offset("-1") == len(stamps)
    assert offset("-2") == 0
    assert offset("-3") == 2
    assert offset(str(1_700_000_000_000 + 4_000)) == 1  # the first at or after a time
