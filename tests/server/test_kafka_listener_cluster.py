"""The Kafka listener in cluster mode (docs/kafka-protocol.md): three real broker processes
on a real ZooKeeper, each with a Kafka listener. Kafka's clients bootstrapping from any
one broker see all three brokers' Kafka addresses and each partition's leader, produce
to the leaders and consume in one group whose coordinator is the same from every
broker."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.support.brokerproc import BrokerProcess
from tests.support.clusterproc import BrokerCluster
from tests.support.kafkaconn import create_with_kafka_python, topic_name, wait_until_split
from tests.support.kafkaserver import kafka_tool
from tests.support.waiting import wait_until
from tests.support.zkserver import ZkEndpoint

pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")
kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (the peers extra)")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

pytestmark = pytest.mark.zookeeper

_KAFKA_LINE = re.compile(r"^listener KAFKA \(PLAINTEXT\) on (\S+)$")


class KafkaListenerBroker(BrokerProcess):
    """A broker process with a sparklog listener and a Kafka listener (KAFKA), both on
    ports the OS chooses; the Kafka one is read from the broker's start-up lines."""

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index("--listen") + 1
        cmd[at] = f"PLAINTEXT://{self.host}:{self.port},KAFKA://{self.host}:0"
        return [*cmd, "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,"
                "KAFKA:PLAINTEXT", "--override", "kafka.listener.names=KAFKA"]

    @property
    def kafka_address(self) -> str:
        """The Kafka listener's address from the line the broker prints after its
        "listening on" line; the reader thread may not have it yet when start() returns
        (start waits for the first line only), so wait for the one after the latest."""

        def printed():
            lines = list(self._lines)
            starts = [i for i, line in enumerate(lines) if " listening on " in line]
            after = lines[starts[-1] + 1:] if starts else []
            return [m.group(1) for line in after if (m := _KAFKA_LINE.match(line.strip()))]

        return wait_until(printed, what=f"the Kafka listener line of broker "
                          f"{self.address} (its output so far: {self._lines})")[-1]


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-cluster")
    (root / "log").mkdir()
    zk = ZkEndpoint(zookeeper_server, f"/sparklog-test-{uuid.uuid4().hex[:12]}")
    c = BrokerCluster((root / "log").as_uri(), zk.connect, 3, log_dir=root,
                      extra_args=["--override", "num.partitions=6"])
    for i, b in list(c.brokers.items()):
        c.brokers[i] = KafkaListenerBroker(b.storage_uri, b.extra_args, log_path=b.log_path)
    with c:
        yield c


def _kafka_addresses(cluster) -> dict[int, str]:
    return {i: b.kafka_address for i, b in cluster.brokers.items()}


def test_metadata_through_every_broker_names_all_three_and_the_leaders(cluster):
    """librdkafka's Metadata through each broker's Kafka listener alone: the three
    brokers at their Kafka addresses (not their sparklog ones) and every partition's
    leader as the controller decided it."""
    from confluent_kafka.admin import AdminClient

    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[1], topic, partitions=6)
    expected_brokers = {i: a for i, a in addresses.items()}
    for i, address in addresses.items():
        admin = AdminClient({"bootstrap.servers": address})

        def answer(admin=admin):
            md = admin.list_topics(topic, timeout=10)
            t = md.topics[topic]
            if t.error is not None or len(t.partitions) != 6:
                return None
            leaders = {p: t.partitions[p].leader for p in t.partitions}
            want = {p: cluster.leader_of(topic, p) for p in range(6)}
            return md if leaders == want and -1 not in leaders.values() else None

        md = wait_until(answer, timeout=60, what=f"broker {i}'s Kafka metadata of {topic}")
        assert {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()} == expected_brokers
        assert {p.leader for p in md.topics[topic].partitions.values()} == {1, 2, 3}


def test_idempotent_producer_and_group_consumer_across_the_cluster(cluster):
    """confluent-kafka's idempotent producer (acks=all) bootstrapping from broker 1
    writes to the leaders on all three; a kafka-python consumer group bootstrapping
    from broker 3 reads every record once and commits."""
    from confluent_kafka import Producer as CKProducer
    from kafka import KafkaConsumer, TopicPartition

    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[2], topic, partitions=6)
    p = CKProducer({"bootstrap.servers": addresses[1], "enable.idempotence": True,
                    "acks": "all", "linger.ms": 5})
    delivered: dict[tuple[int, int], bytes] = {}
    errors = []

    def on_delivery(err, msg):
        if err:
            errors.append(err)
        else:
            delivered[(msg.partition(), msg.offset())] = msg.value()

    for i in range(600):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, on_delivery=on_delivery)
    assert p.flush(60) == 0 and not errors, errors
    assert len(delivered) == 600 and {part for part, _ in delivered} == set(range(6))
    group = "g-" + topic
    c = KafkaConsumer(topic, bootstrap_servers=addresses[3], group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    got: dict[tuple[int, int], bytes] = {}
    try:
        def more():
            for recs in c.poll(timeout_ms=500).values():
                for r in recs:
                    got[(r.partition, r.offset)] = r.value
            return len(got) >= 600
        wait_until(more, timeout=90, what="600 records through the cluster's Kafka listeners")
        c.commit()
        committed = {p: c.committed(TopicPartition(topic, p)) for p in range(6)}
    finally:
        c.close()
    assert got == delivered
    ends: dict[int, int] = {}
    for part, offset in delivered:
        ends[part] = max(ends.get(part, 0), offset + 1)
    assert committed == ends


def test_two_consumers_of_one_group_through_different_brokers_share_the_partitions(cluster):
    """Two kafka-python consumers of one group, one bootstrapping from broker 1 and one
    from broker 2, find the same coordinator and split the partitions."""
    from kafka import KafkaConsumer

    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[3], topic, partitions=4)
    group = "g-" + topic
    a = KafkaConsumer(topic, bootstrap_servers=addresses[1], group_id=group,
                      auto_offset_reset="earliest")
    b = KafkaConsumer(topic, bootstrap_servers=addresses[2], group_id=group,
                      auto_offset_reset="earliest")
    try:
        wait_until_split([a, b], 4, timeout=120,
                         what="the group's partitions split across brokers")
    finally:
        a.close()
        b.close()


def test_java_client_produces_and_consumes_across_the_cluster(kafka_tools, cluster):
    """Kafka's Java client (its tools): kafka-topics through broker 1, the idempotent
    console producer at acks=all through broker 2 (to the leaders on all three), the
    console consumer in a group through broker 3, kafka-consumer-groups through broker 1
    seeing the group's committed offsets at the log end."""
    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", addresses[1],
               "--create", "--topic", topic, "--partitions", "6", "--replication-factor", "1")
    lines = [f"key{i}:value {i}" for i in range(300)]
    kafka_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", addresses[2],
               "--topic", topic, "--command-property", "acks=all",
               "--command-property", "enable.idempotence=true",
               "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
               stdin="\n".join(lines) + "\n")
    group = "g-" + topic
    out = kafka_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                     addresses[3], "--topic", topic, "--group", group, "--from-beginning",
                     "--max-messages", "300", "--timeout-ms", "60000",
                     "--formatter-property", "print.key=true",
                     "--formatter-property", "key.separator=:")
    assert sorted(out.splitlines()) == sorted(lines)
    out = kafka_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                     "--bootstrap-server", addresses[1], "--describe", "--group", group)
    rows = re.findall(rf"{group}\s+{topic}\s+(\d)\s+(\d+)\s+(\d+)\s+(\d+)", out)
    assert sorted(int(r[0]) for r in rows) == list(range(6)), out
    assert sum(int(r[1]) for r in rows) == 300
    assert all(r[1] == r[2] and r[3] == "0" for r in rows), out
