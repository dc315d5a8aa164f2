"""DeleteTopics through the Kafka listener is answered once the deletion is decided, as
Kafka answers it (docs/operations.md, "Deleting a topic"): the topic is gone at once for
Metadata, Kafka's and sparklog's consumers and readers of the storage; a topic created
under its name right after the answer starts empty (no old segment, no committed
offset); its data is removed ``file.delete.delay.ms`` later, and a broker killed
(SIGKILL) before that removes it after its restart. Real broker processes, real
librdkafka clients (confluent-kafka); standalone and on a real ZooKeeper."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import sparklog
from sparklog.clients.types import TopicPartition
from sparklog.log.reader import LogReader
from sparklog.metadata import TopicStore
from tests.support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")

from tests.server.test_kafka_listener_cluster import KafkaListenerBroker  # noqa: E402

#: the broker's file.delete.delay.ms (Kafka's log.segment.delete.delay.ms) in these tests:
#: long enough that the data of a deleted topic is still there when a test looks
_KEEP = ["--override", "log.segment.delete.delay.ms=3600000"]


def _topic() -> str:
    return f"del-{uuid.uuid4().hex[:8]}"


def _admin(address: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": address})


def _create(address: str, topic: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(address)  # kept while its futures are pending
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(60)


def _delete(address: str, topic: str) -> None:
    admin = _admin(address)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)


def _produce(address: str, topic: str, values: list[bytes], partitions: int = 3) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": address, "enable.idempotence": True})
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions)
    assert p.flush(60) == 0


def _consume(address: str, topic: str, group: str, n: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of the first ``n`` records a member of ``group`` reads
    (earliest when the group has no committed offset), committed before it leaves."""
    c = confluent_kafka.Consumer({"bootstrap.servers": address, "group.id": group,
                                  "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
    got: list = []
    try:
        c.subscribe([topic])

        def more():
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset(), m.value()))
            return len(got) >= n
        wait_until(more, what=f"{n} records of {topic} for group {group} (got {got})")
        c.commit(asynchronous=False)
    finally:
        c.close()
    return sorted(got)


def _trash(root: Path, topic: str) -> list[Path]:
    """The retired directories (deleted-topics/<ms>-<hex>/<topic>) of ``topic``."""
    return sorted((root / "deleted-topics").glob(f"*/{topic}"))


def _gone_everywhere(address: str, sparklog_address: str, root: Path, topic: str) -> None:
    """``topic`` is unknown to Metadata, to sparklog's clients and on the storage."""
    assert topic not in _admin(address).list_topics(timeout=30).topics
    store = TopicStore(root.as_uri())
    assert topic not in store.list_topics()
    assert not store.topic_exists(topic)
    assert not (root / "topics" / topic).exists()
    with sparklog.Admin(sparklog_address) as admin:
        assert topic not in admin.list_topics()


def _sparklog_read(address: str, topic: str, n: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of the first ``n`` records of partition 0 read by
    sparklog's own consumer through the sparklog listener, from the earliest offset."""
    got: list = []
    with sparklog.Consumer(bootstrap_servers=address, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])

        def more():
            got.extend((r.partition, r.offset, r.value)
                       for records in c.poll(500).values() for r in records)
            return len(got) >= n
        wait_until(more, what=f"{n} records of {topic} by sparklog's consumer (got {got})")
    return sorted(got)


def _stored(root: Path, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record on the storage, read without a broker
    (as the Spark source's storage path reads a topic)."""
    store = TopicStore(root.as_uri())
    out = []
    for p in range(partitions):
        reader = LogReader(store.fileio, store.partition_dir(topic, p))
        for batch in reader.read_batches(0):
            rows = batch.to_pydict()
            out.extend((p, o, v) for o, v in zip(rows["__offset"], rows["value"]))
    return sorted(out)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A standalone broker process with a Kafka listener that keeps a deleted topic's
    data for an hour (file.delete.delay.ms)."""
    base = tmp_path_factory.mktemp("delete-topics-async")
    (base / "log").mkdir()
    b = KafkaListenerBroker((base / "log").as_uri(), _KEEP, log_path=base / "broker.log")
    b.root = base / "log"
    with b:
        yield b


def test_a_deleted_topic_is_gone_at_once_and_its_name_starts_empty(broker):
    kafka, root, topic, group = broker.kafka_address, broker.root, _topic(), _topic()
    _create(kafka, topic)
    _produce(kafka, topic, [f"old-{i}".encode() for i in range(30)])
    assert len(_consume(kafka, topic, group, 30)) == 30  # and committed at 10 per partition

    _delete(kafka, topic)
    # answered before the data's removal: it waits, renamed away, for file.delete.delay.ms
    assert any(_trash(root, topic)[0].glob("*/*.log"))
    _gone_everywhere(kafka, broker.address, root, topic)

    _create(kafka, topic)  # the same name, right after the answer
    _produce(kafka, topic, [b"new-0", b"new-1"], partitions=1)
    # the group's committed offsets (10 per partition) went with the old topic
    assert _consume(kafka, topic, group, 2) == [(0, 0, b"new-0"), (0, 1, b"new-1")]
    assert _sparklog_read(broker.address, topic, 2) == [(0, 0, b"new-0"), (0, 1, b"new-1")]
    assert _stored(root, topic, 3) == [(0, 0, b"new-0"), (0, 1, b"new-1")]
    assert any(_trash(root, topic)[0].glob("*/*.log"))  # the old data is still apart


def test_a_broker_killed_before_the_removal_removes_it_after_its_restart(tmp_path):
    (tmp_path / "log").mkdir()
    root, topic = tmp_path / "log", _topic()
    b = KafkaListenerBroker(root.as_uri(), _KEEP, log_path=tmp_path / "broker.log")
    with b:
        _create(b.kafka_address, topic)
        _produce(b.kafka_address, topic, [f"v{i}".encode() for i in range(9)])
        _delete(b.kafka_address, topic)
        assert _trash(root, topic)
        b.kill()
        b.extra_args = ["--override", "log.segment.delete.delay.ms=0"]
        b.start()
        wait_until(lambda: not _trash(root, topic), what=f"the data of {topic} removed "
                   f"after the restart (deleted-topics: {list(root.glob('deleted-topics/*'))})")
        _gone_everywhere(b.kafka_address, b.address, root, topic)
        _create(b.kafka_address, topic)
        _produce(b.kafka_address, topic, [b"again"], partitions=1)
        assert _stored(root, topic, 3) == [(0, 0, b"again")]


@pytest.mark.zookeeper
def test_in_a_cluster_a_deleted_topic_is_gone_at_once_and_its_name_starts_empty(
        zookeeper_server, tmp_path):
    from tests.support.clusterproc import BrokerCluster
    from tests.support.zkserver import ZkEndpoint

    (tmp_path / "log").mkdir()
    root = tmp_path / "log"
    zk = ZkEndpoint(zookeeper_server, f"/sparklog-test-{uuid.uuid4().hex[:12]}")
    cluster = BrokerCluster(root.as_uri(), zk.connect, 2, log_dir=tmp_path, extra_args=_KEEP)
    for i, b in list(cluster.brokers.items()):
        cluster.brokers[i] = KafkaListenerBroker(b.storage_uri, b.extra_args,
                                                 log_path=b.log_path)
    with cluster:
        kafka = ",".join(b.kafka_address for b in cluster.brokers.values())
        topic, group = _topic(), _topic()
        _create(kafka, topic)
        _produce(kafka, topic, [f"old-{i}".encode() for i in range(12)])
        assert len(_consume(kafka, topic, group, 12)) == 12

        _delete(kafka, topic)
        assert any(_trash(root, topic)[0].glob("*/*.log"))
        _gone_everywhere(kafka, cluster.bootstrap, root, topic)

        _create(kafka, topic)
        _produce(kafka, topic, [b"new-0", b"new-1"], partitions=1)
        assert _consume(kafka, topic, group, 2) == [(0, 0, b"new-0"), (0, 1, b"new-1")]
        assert _stored(root, topic, 3) == [(0, 0, b"new-0"), (0, 1, b"new-1")]


def test_retired_topics_are_removed_once_their_delay_has_passed(tmp_path):
    """The removal's clock: each retired directory is due at its deletion time (in its
    name) plus file.delete.delay.ms; one of another form (an older broker's) at once."""
    from sparklog.server.retired import RetiredTopics

    store = TopicStore(tmp_path.as_uri())
    for name in ("a", "b"):
        store.create_topic(name, 1)
    assert store.retire_topic("a", now_ms=1000).rsplit("/", 1)[1].startswith("1000-")
    store.retire_topic("b", now_ms=5000)
    older = tmp_path / "deleted-topics" / uuid.uuid4().hex / "c"
    older.mkdir(parents=True)
    removal = RetiredTopics(store, None, delay_ms=2000, interval_ms=60000)
    assert [when for _, when in store.retired()] == [0, 1000, 5000]
    assert removal.remove_due(now_ms=2500) == 0.5  # "a" is due at 3000
    assert [when for _, when in store.retired()] == [1000, 5000]
    assert removal.remove_due(now_ms=3000) == 4.0
    assert [when for _, when in store.retired()] == [5000]
    assert removal.remove_due(now_ms=7000) == 60.0
    assert store.retired() == [] and not store.topic_exists("a")
