"""kcat and Kafka Connect standalone against the Kafka listeners of a 3-broker cluster on
ZooKeeper (the cluster of test_kafka_listener_cluster.py), beyond
test_kafka_listener_cluster_clients.py: kcat's metadata listing through each broker,
and the leader SIGKILL of test_kafka_listener_failover.py under kcat's idempotent
producer and under Connect's FileStream source with an idempotent producer. Every
line written is in the topic exactly once afterwards, read by a Kafka consumer and
from the storage."""

from __future__ import annotations

import json
import re
import threading

import pytest

from sparklog.log.reader import LogReader
from sparklog.metadata import TopicStore
from tests.server.test_kafka_listener_cluster import (
    _kafka_addresses,
    cluster,  # noqa: F401 (a fixture)
)
from tests.server.test_kafka_listener_connect import (
    connect_classpath,  # noqa: F401 (a fixture)
    file_connectors,
)
from tests.server.test_kafka_listener_failover import PARTITIONS, _consumed
from tests.server.test_kafka_listener_kcat import kcat
from tests.server.test_kafka_listener_kcat import pytestmark as kcat_marks
from tests.server.test_kafka_listener_kcat_group import KcatProcess
from tests.support.failover import read_partition
from tests.support.kafkaconn import create_with_kafka_python, topic_name

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

pytestmark = pytest.mark.zookeeper

_DELIVERED = re.compile(r"Message delivered to partition (\d+) \(offset (\d+)\)")


def _numbered(start: int, n: int) -> list[str]:
    return [f"line {i:06d}" for i in range(start, start + n)]


class _Lines:
    """Writes numbered lines (:func:`_numbered`) from a thread, a few at a time, to
    ``write`` until stopped, after the ``written`` ones; ``sent`` is every line."""

    def __init__(self, write, written: list[str] = ()):
        self.sent: list[str] = list(written)
        self._write = write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            lines = _numbered(len(self.sent), 10)
            self._write("".join(f"{line}\n" for line in lines))
            self.sent += lines
            self._stop.wait(0.02)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(60)
        return self.sent


def _leaders(cluster, topic: str, partitions: int) -> dict[int, int]:  # noqa: F811
    """Each partition's leader, once the controller has chosen them all."""
    def chosen():
        leaders = {p: cluster.leader_of(topic, p) for p in range(partitions)}
        return leaders if -1 not in leaders.values() else None
    return cluster.wait(chosen, 60, f"leaders of {topic}")


def _assert_each_line_once(cluster, survivor: str, topic: str, sent: list[str],  # noqa: F811
                           acked: set[tuple[int, int]] | None = None) -> None:
    """Every line of ``sent`` in the topic once, each partition's in the order sent,
    read by a Kafka consumer through ``survivor`` and from the storage; ``acked``
    (partition, offset) pairs, when known, are exactly the records' positions."""
    consumed = _consumed(survivor, topic)
    got = [v.decode() for p in range(PARTITIONS) for _, v in consumed[p]]
    assert len(got) == len(set(got)), "a line is in the topic twice"
    assert sorted(got) == sent, f"lines lost: {sorted(set(sent) - set(got))[:10]}"
    for p in range(PARTITIONS):
        values = [v.decode() for _, v in consumed[p]]
        assert values == sorted(values), f"{topic}-{p}: lines out of order"
        assert read_partition(cluster.storage_uri, topic, p) == [v for _, v in consumed[p]]
    if acked is not None:
        assert acked == {(p, o) for p in range(PARTITIONS) for o, _ in consumed[p]}


def _restart(cluster, victim: int) -> None:  # noqa: F811
    """The killed broker back in the cluster, for the module's next test."""
    if not cluster.brokers[victim].running:
        cluster.brokers[victim].start()
    cluster.wait(lambda: len(cluster.view.live_brokers()) == len(cluster.brokers), 60,
                 f"broker {victim} back in the cluster")


@kcat_marks
def test_kcat_lists_the_cluster_through_each_broker(cluster):  # noqa: F811
    """kcat -L -J through each broker's Kafka listener alone: the three brokers at
    their Kafka addresses and each of the topic's six partitions with the leader the
    controller chose (on all three brokers)."""
    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[1], topic, partitions=6)
    cluster.wait(lambda: {cluster.leader_of(topic, p) for p in range(6)} == {1, 2, 3}, 60,
                 f"leaders of {topic} on every broker")
    want = {p: cluster.leader_of(topic, p) for p in range(6)}
    for i, address in addresses.items():
        md = json.loads(kcat(address, "-L", "-J", "-t", topic)[0])
        assert md["originating_broker"]["id"] == i
        assert {b["id"]: b["name"] for b in md["brokers"]} == addresses
        [listed] = md["topics"]
        assert {q["partition"]: q["leader"] for q in listed["partitions"]} == want
        assert all(q["replicas"] == [{"id": q["leader"]}] for q in listed["partitions"])


@kcat_marks
def test_kcat_idempotent_producer_through_a_leader_sigkill(cluster):  # noqa: F811
    """kcat -P with enable.idempotence=true and acks=all, fed lines without pause
    through a pipe, while the broker leading partition 0 is killed (SIGKILL): writes to
    every partition are delivered again, kcat exits 0 with no failed delivery, and its
    delivery reports (-v -v: partition and offset of each line) name exactly the
    records in the topic, where every line is once, in the order sent."""
    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[1], topic, partitions=PARTITIONS)
    leaders = _leaders(cluster, topic, PARTITIONS)
    victim = leaders[0]
    producer = KcatProcess(",".join(addresses.values()), "-P", "-t", topic, "-v", "-v",
                           "-X", "enable.idempotence=true", "-X", "acks=all",
                           "-X", "linger.ms=2", "-X", "retry.backoff.ms=50", stdin=True)
    lines = _Lines(producer.write)

    def delivered() -> list[tuple[int, int]]:
        return [(int(m.group(1)), int(m.group(2)))
                for m in map(_DELIVERED.search, list(producer.err)) if m]

    def counts() -> dict[int, int]:
        return {p: sum(q == p for q, _ in delivered()) for p in range(PARTITIONS)}

    try:
        try:
            cluster.wait(lambda: min(counts().values()) > 50, 90,
                         f"kcat got going: {producer.describe()}")
            before = counts()
            cluster.brokers[victim].kill()
            cluster.wait(lambda: all(n > before[p] + 100 for p, n in counts().items()), 90,
                         f"writes to every partition delivered again after SIGKILL of broker "
                         f"{victim}: {producer.describe()}\n" + cluster.logs())
        finally:
            sent = lines.stop()
            producer.close_input()
        assert producer.wait(180) == 0, producer.describe()  # every line delivered
        assert not [e for e in producer.err if "Delivery failed" in e], producer.describe()
        acked = delivered()
        assert len(acked) == len(set(acked)) == len(sent)
        survivor = next(a for i, a in addresses.items() if i != victim)
        _assert_each_line_once(cluster, survivor, topic, sent, set(acked))
    finally:
        producer.kill()
        _restart(cluster, victim)


def test_connect_idempotent_file_source_through_a_leader_sigkill(
        cluster, connect_classpath, tmp_path):  # noqa: F811
    """Connect standalone's FileStreamSource with its producer idempotent at acks=all
    (the worker's ``producer.`` properties) copies a file appended without pause into
    the topic while the broker leading partition 0 is killed (SIGKILL): writes to
    partition 0 resume on its new leader, every line of the file is in the topic once
    and each partition's in order, and every stored batch carries a producer id (the
    producer is idempotent)."""
    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[1], topic, partitions=PARTITIONS)
    victim = _leaders(cluster, topic, PARTITIONS)[0]
    source = tmp_path / "input.txt"
    connect = file_connectors(connect_classpath, ",".join(addresses.values()), topic,
                              tmp_path, sink=False, worker_props={
                                  "producer.enable.idempotence": "true",
                                  "producer.acks": "all", "producer.linger.ms": 2,
                                  "producer.retry.backoff.ms": 50})
    store = TopicStore(cluster.storage_uri)

    def written(p: int) -> int:
        """The end offset of partition p in the storage (clients may still be finding
        the new leader)."""
        return LogReader(store.fileio, store.partition_dir(topic, p)).log_end_offset()

    def append(text: str) -> None:
        with source.open("a") as f:
            f.write(text)

    first = _numbered(0, 300)
    append("".join(f"{line}\n" for line in first))
    try:
        with connect(1) as worker:
            cluster.wait(lambda: sum(written(p) for p in range(PARTITIONS)) >= len(first), 120,
                         f"the source got going: {worker.describe()}")
            lines = _Lines(append, first)
            try:
                before = written(0)
                cluster.wait(lambda: written(0) > before + 50, 60,
                             f"the source writing to {topic}-0: {worker.describe()}")
                before = written(0)
                cluster.brokers[victim].kill()
                cluster.wait(lambda: written(0) > before + 200, 120,
                             f"writes to {topic}-0 resumed after SIGKILL of broker {victim}: "
                             f"{worker.describe()}\n" + cluster.logs())
            finally:
                sent = lines.stop()
            cluster.wait(lambda: sum(written(p) for p in range(PARTITIONS)) >= len(sent), 120,
                         f"the source's {len(sent)} lines in the topic: {worker.describe()}")
            assert worker.stop(), worker.describe()
        survivor = next(a for i, a in addresses.items() if i != victim)
        _assert_each_line_once(cluster, survivor, topic, sent)
        for p in range(PARTITIONS):
            frames = LogReader(store.fileio, store.partition_dir(topic, p)).iter_frames(0)
            assert all(f.header.producer_id >= 0 for f in frames), f"{topic}-{p}: not idempotent"
    finally:
        _restart(cluster, victim)
