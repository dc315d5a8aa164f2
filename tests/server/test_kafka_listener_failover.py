"""The Kafka listener in cluster mode through a crash (docs/kafka-protocol.md): three
broker processes on ZooKeeper (the cluster of test_kafka_listener_cluster.py), an
idempotent librdkafka producer (confluent-kafka, acks=all) writing without pause, and
the leader of some partitions killed with SIGKILL; the same with kafka-python's and the
Java client's (Kafka's VerifiableProducer) idempotent producers. The producer finds the
new leaders (a metadata refresh) and goes on; afterwards every acknowledged record is
read back exactly once, by a Kafka consumer and from the storage."""

from __future__ import annotations

import threading

import pytest

from tests.server.test_kafka_listener_cluster import (
    _kafka_addresses,
    cluster,  # noqa: F401 (the fixture)
)
from tests.support.failover import make_value, parse_value, read_partition
from tests.support.kafkaconn import create_with_kafka_python, topic_name
from tests.support.kafkaserver import kafka_unavailable
from tests.support.kafkatools import JavaTool
from tests.support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

pytestmark = pytest.mark.zookeeper

PARTITIONS = 3


class _PythonProducer:
    """Sends make_value(p, seq) round-robin to every partition from a thread and records
    which (partition, seq) were acknowledged at which offset; subclasses wrap a client."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.acked: dict[int, dict[int, int]] = {p: {} for p in range(PARTITIONS)}
        self.failed: list = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _acked(self, value: bytes, offset: int) -> None:
        p, seq = parse_value(value)
        with self._lock:
            self.acked[p][seq] = offset

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                self.send(make_value(p, seq), p)
            seq += 1
            if seq % 20 == 0:
                self._stop.wait(0.01)

    def send(self, value: bytes, partition: int) -> None:
        raise NotImplementedError

    def acked_count(self, p: int) -> int:
        with self._lock:
            return len(self.acked[p])

    def stop(self) -> int:
        """Stop sending; the number of records still unacknowledged after a flush."""
        self._stop.set()
        self._thread.join(30)
        return self.flush()

    def flush(self) -> int:
        raise NotImplementedError


class LibrdkafkaProducer(_PythonProducer):
    """confluent-kafka's idempotent producer at acks=all."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "retry.backoff.ms": 50, "message.timeout.ms": 120000})
        super().__init__(bootstrap, topic)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append((msg.partition(), err))
        else:
            self._acked(msg.value(), msg.offset())

    def send(self, value: bytes, partition: int) -> None:
        self.producer.produce(self.topic, value, partition=partition,
                              on_delivery=self._delivered)
        # bounded outstanding work: serve the delivery reports while many wait
        self.producer.poll(0.05 if len(self.producer) > 600 else 0)

    def flush(self) -> int:
        return self.producer.flush(120)


class KafkaPythonProducer(_PythonProducer):
    """kafka-python's idempotent producer at acks=all."""

    def __init__(self, bootstrap: str, topic: str):
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True,
            linger_ms=2, retry_backoff_ms=50, delivery_timeout_ms=120000)
        self.pending: list = []
        super().__init__(bootstrap, topic)

    def send(self, value: bytes, partition: int) -> None:
        future = self.producer.send(self.topic, value, partition=partition)
        future.add_callback(lambda md, value=value: self._acked(value, md.offset))
        future.add_errback(lambda exc: self.failed.append((partition, exc)))
        self.pending.append(future)
        if len(self.pending) > 600:  # bounded outstanding work
            self.pending = [f for f in self.pending if not f.is_done]
            if len(self.pending) > 600:
                try:
                    self.pending[0].get(130)
                except Exception:  # noqa: BLE001 - recorded by the errback
                    pass

    def flush(self) -> int:
        self.producer.flush(120)
        self.producer.close(30)
        return sum(not f.is_done for f in self.pending)


class JavaProducer:
    """Kafka's VerifiableProducer (the Java client, idempotent, acks=all, keyed: the
    partitioner spreads the records) at a bounded rate; its values are the numbers
    0, 1, ... in the order sent."""

    def __init__(self, bootstrap: str, topic: str, config):
        # the tool sets retries=0 unless told (idempotence needs retries)
        config.write_text("enable.idempotence=true\nretries=2147483647\nlinger.ms=2\n"
                          "retry.backoff.ms=50\ndelivery.timeout.ms=120000\n")
        self.tool = JavaTool("org.apache.kafka.tools.VerifiableProducer",
                             "--bootstrap-server", bootstrap, "--topic", topic,
                             "--max-messages", "-1", "--throughput", "1500", "--acks", "-1",
                             "--repeating-keys", "30", "--command-config", str(config),
                             log_path=config.with_suffix(".log"))

    @property
    def acked(self) -> dict[int, dict[int, int]]:
        out: dict[int, dict[int, int]] = {p: {} for p in range(PARTITIONS)}
        for e in self.tool.events("producer_send_success"):
            out[e["partition"]][int(e["value"])] = e["offset"]
        return out

    @property
    def failed(self) -> list:
        return self.tool.events("producer_send_error")

    def acked_count(self, p: int) -> int:
        return sum(e["partition"] == p for e in self.tool.events("producer_send_success"))

    def stop(self) -> int:
        assert self.tool.stop(), self.tool.describe()  # its shutdown hook flushes
        summary = self.tool.events("tool_data")
        assert summary, self.tool.describe()
        return summary[-1]["sent"] - summary[-1]["acked"]


def _consumed(address: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record of every partition, by a confluent-kafka
    consumer reading from the beginning to the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": address, "group.id": "read-" + topic,
                  "enable.auto.commit": False})
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(PARTITIONS)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

        def more() -> bool:
            for msg in c.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.value()))
            return all(len(got[p]) >= ends[p] for p in range(PARTITIONS))
        wait_until(more, timeout=90, what=f"every record of {topic} up to {ends}")
    finally:
        c.close()
    return got


def _seq(client: str, value: bytes, p: int) -> int:
    """The send order of a record's value (checksum and partition checked)."""
    if client == "java":
        return int(value)
    vp, seq = parse_value(value)
    assert vp == p, f"record of partition {vp} in partition {p}"
    return seq


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "java"])
def test_leader_sigkill_under_an_idempotent_producer(cluster, client, tmp_path):  # noqa: F811
    """SIGKILL of the broker leading partition 0 while the producer writes to all
    three: writes to every partition are acknowledged again (the producer found the new
    leaders), no record failed; every acknowledged record is in the log once, at the
    offset it was acknowledged with, in the order sent (a retried batch is not written
    twice: the new leader knows the producer's sequences from the log). The killed
    broker is restarted for the next client."""
    if client == "java":
        why = kafka_unavailable()
        if why:
            pytest.skip(why)
    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[1], topic, partitions=PARTITIONS)
    cluster.wait(lambda: all(cluster.leader_of(topic, p) > 0 for p in range(PARTITIONS)), 60,
                 f"leaders of {topic}")
    bootstrap = ",".join(addresses.values())
    producer = (JavaProducer(bootstrap, topic, tmp_path / "producer.properties")
                if client == "java" else
                {"confluent-kafka": LibrdkafkaProducer,
                 "kafka-python": KafkaPythonProducer}[client](bootstrap, topic))
    victim = cluster.leader_of(topic, 0)
    led = [p for p in range(PARTITIONS) if cluster.leader_of(topic, p) == victim]
    try:
        cluster.wait(lambda: all(producer.acked_count(p) > 100 for p in range(PARTITIONS)), 90,
                     "the producer got going")
        before = {p: producer.acked_count(p) for p in range(PARTITIONS)}
        cluster.brokers[victim].kill()
        cluster.wait(lambda: all(producer.acked_count(p) > before[p] + 200
                                 for p in range(PARTITIONS)), 90,
                     f"writes to every partition acknowledged again after SIGKILL of broker "
                     f"{victim} (leader of {led}); failed: {producer.failed[:5]}\n"
                     + cluster.logs())
    finally:
        unacknowledged = producer.stop()
    assert unacknowledged == 0 and not producer.failed, (unacknowledged, producer.failed[:5])
    assert all(cluster.leader_of(topic, p) not in (victim, -1) for p in led)
    survivor = next(a for i, a in addresses.items() if i != victim)
    consumed = _consumed(survivor, topic)
    acked_all = producer.acked
    for p in range(PARTITIONS):
        acked = acked_all[p]
        seqs = [_seq(client, v, p) for _, v in consumed[p]]
        assert len(seqs) == len(set(seqs)), f"t-{p}: a record is in the log twice"
        assert seqs == sorted(seqs), f"t-{p}: records out of order"
        missing = set(acked) - set(seqs)
        assert not missing, f"t-{p}: acknowledged but lost: {sorted(missing)[:10]}"
        at = {_seq(client, v, p): o for o, v in consumed[p]}
        assert all(at[seq] == offset for seq, offset in acked.items()), f"t-{p}: offsets differ"
        # the storage holds the same records (what Spark reads)
        assert read_partition(cluster.storage_uri, topic, p) == [v for _, v in consumed[p]]
    cluster.brokers[victim].start()
    cluster.wait(lambda: len(cluster.view.live_brokers()) == len(cluster.brokers), 60,
                 f"broker {victim} back in the cluster")
