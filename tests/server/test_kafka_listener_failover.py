"""The Kafka listener in cluster mode through a crash (docs/kafka-protocol.md): three
broker processes on ZooKeeper (the cluster of test_kafka_listener_cluster.py), an
idempotent librdkafka producer (confluent-kafka, acks=all) writing without pause, and
the leader of some partitions killed with SIGKILL. The producer finds the new leaders
(a metadata refresh) and goes on; afterwards every acknowledged record is read back
exactly once, by a Kafka consumer and from the storage."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.server.test_kafka_listener_cluster import (
    _create,
    _kafka_addresses,
    cluster,  # noqa: F401 (the fixture)
)
from tests.support.failover import assert_exactly_once, make_value, parse_value, read_partition
from tests.support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

pytestmark = pytest.mark.zookeeper

PARTITIONS = 3


class LibrdkafkaProducer:
    """Sends make_value(p, seq) round-robin to every partition from a thread with
    confluent-kafka's idempotent producer at acks=all, and records which (partition,
    seq) were acknowledged at which offset."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "retry.backoff.ms": 50, "message.timeout.ms": 120000})
        self.acked: dict[int, dict[int, int]] = {p: {} for p in range(PARTITIONS)}
        self.failed: list = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append((msg.partition(), err))
            return
        p, seq = parse_value(msg.value())
        with self._lock:
            self.acked[p][seq] = msg.offset()

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                self.producer.produce(self.topic, make_value(p, seq), partition=p,
                                      on_delivery=self._delivered)
            seq += 1
            # bounded outstanding work: serve the delivery reports while many wait
            self.producer.poll(0.05 if len(self.producer) > 600 else 0)
            if seq % 20 == 0:
                self._stop.wait(0.01)

    def acked_count(self, p: int) -> int:
        with self._lock:
            return len(self.acked[p])

    def stop(self) -> int:
        """Stop sending; the number of records still unacknowledged after a flush."""
        self._stop.set()
        self._thread.join(30)
        return self.producer.flush(120)


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


def test_leader_sigkill_under_an_idempotent_librdkafka_producer(cluster):  # noqa: F811
    """SIGKILL of the broker leading partition 0 while the producer writes to all
    three: writes to every partition are acknowledged again (the producer found the new
    leaders), no record failed; every acknowledged record is in the log once, at the
    offset it was acknowledged with, in the order sent (a retried batch is not written
    twice: the new leader knows the producer's sequences from the log)."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    addresses = _kafka_addresses(cluster)
    _create(addresses[1], topic, partitions=PARTITIONS)
    cluster.wait(lambda: all(cluster.leader_of(topic, p) > 0 for p in range(PARTITIONS)), 60,
                 f"leaders of {topic}")
    producer = LibrdkafkaProducer(",".join(addresses.values()), topic)
    victim = cluster.leader_of(topic, 0)
    led = [p for p in range(PARTITIONS) if cluster.leader_of(topic, p) == victim]
    try:
        cluster.wait(lambda: all(producer.acked_count(p) > 100 for p in range(PARTITIONS)), 60,
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
    for p in range(PARTITIONS):
        acked = producer.acked[p]
        assert_exactly_once([v for _, v in consumed[p]], p, set(acked), f" ({len(acked)} acked)")
        at = {parse_value(v)[1]: o for o, v in consumed[p]}
        assert all(at[seq] == offset for seq, offset in acked.items()), f"t-{p}: offsets differ"
        # the storage holds the same records (what Spark reads)
        assert read_partition(cluster.storage_uri, topic, p) == [v for _, v in consumed[p]]
