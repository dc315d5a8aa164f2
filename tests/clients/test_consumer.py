"""The Consumer over a real broker process: assign/subscribe, poll and iteration,
positions and seeks, pause/resume, commits and group resumption, two members of one
group splitting partitions, Arrow batches, offset lookups, bad arguments."""

from __future__ import annotations

import itertools
import threading
import time

import pyarrow as pa
import pytest

from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import OffsetAndMetadata, TopicPartition
from sparklog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

_names = itertools.count()


@pytest.fixture(scope="module")
def producer(broker):
    with Producer(broker.address, linger_ms=0) as p:
        yield p


def filled_topic(admin, producer, partitions=2, per_partition=50, prefix="c") -> str:
    """A topic whose partition p holds values b"p:i" for i in range(per_partition),
    with timestamps 1000 * (i + 1)."""
    name = f"{prefix}{next(_names)}"
    admin.create_topic(name, partitions)
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(name, b"%d:%d" % (p, i), partition=p, timestamp=1000 * (i + 1))
    producer.flush(20)
    return name


def drain(consumer, n, timeout=60.0, **kw) -> dict:
    out: dict = {}
    deadline = time.monotonic() + timeout
    while sum(map(len, out.values())) < n and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=100, **kw).items():
            out.setdefault(tp, []).extend(records)
    return out


def values(records):
    return [r.value for r in records]


def test_subscribe_without_group_reads_every_partition_in_order(broker, admin, producer):
    topic = filled_topic(admin, producer, 3, 40)
    with Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        assert c.subscription() == {topic}
        assert c.assignment() == {TopicPartition(topic, p) for p in range(3)}
        got = drain(c, 120)
        assert c.poll(timeout_ms=200) == {}
        for p in range(3):
            tp = TopicPartition(topic, p)
            assert values(got[tp]) == [b"%d:%d" % (p, i) for i in range(40)]
            assert [r.offset for r in got[tp]] == list(range(40))
            assert [r.timestamp for r in got[tp]] == [1000 * (i + 1) for i in range(40)]
            assert c.position(tp) == 40 and c.highwater(tp) == 40


def test_latest_reset_sees_only_new_records_and_poll_waits(broker, admin, producer):
    topic = filled_topic(admin, producer, 1, 10)
    with Consumer(topic, bootstrap_servers=broker.address) as c:  # latest
        assert c.poll(timeout_ms=300) == {}
        assert c.position(TopicPartition(topic, 0)) == 10
        timer = threading.Timer(0.3, lambda: producer.send(topic, b"late", partition=0))
        timer.start()
        start = time.monotonic()
        got = drain(c, 1, timeout=10)
        waited = time.monotonic() - start
        timer.join()
    assert values(got[TopicPartition(topic, 0)]) == [b"late"]
    assert waited >= 0.25  # the poll really waited for the record


def test_iteration_max_poll_records_and_consumer_timeout(broker, admin, producer):
    topic = filled_topic(admin, producer, 1, 30)
    with Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest",
                  max_poll_records=7, consumer_timeout_ms=500) as c:
        first = c.poll(timeout_ms=5000)
        assert sum(map(len, first.values())) == 7
        rest = list(c)  # stops after 500 ms without records
    assert values(first[TopicPartition(topic, 0)] + rest) == [b"0:%d" % i for i in range(30)]


def test_assign_seek_positions_and_offset_lookups(broker, admin, producer):
    topic = filled_topic(admin, producer, 2, 20)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        c.assign([tp0, tp1])
        c.seek(tp0, 15)
        c.seek_to_end(tp1)
        got = drain(c, 5)
        assert values(got[tp0]) == [b"0:%d" % i for i in range(15, 20)]
        assert tp1 not in got and c.position(tp1) == 20
        c.seek_to_beginning(tp1)
        assert values(drain(c, 20)[tp1])[:3] == [b"1:0", b"1:1", b"1:2"]
        c.seek(tp0, 3)  # seeking back into the middle of a frame
        assert values(drain(c, 17)[tp0])[0] == b"0:3"
        assert c.beginning_offsets([tp0]) == {tp0: 0}
        assert c.end_offsets([tp0, tp1]) == {tp0: 20, tp1: 20}
        found = c.offsets_for_times({tp0: 5500, tp1: 10**9})
        assert found[tp0].offset == 5  # first record with timestamp >= 5500 (6000)
        assert found[tp0].timestamp == 6000  # that record's, as Kafka answers
        assert found[tp1] is None
        with pytest.raises(InvalidArgumentError, match="not assigned"):
            c.seek(TopicPartition(topic, 5), 0)
        with pytest.raises(InvalidArgumentError, match=">= 0"):
            c.seek(tp0, -1)


def test_seek_past_the_end_resets_by_policy(broker, admin, producer):
    topic = filled_topic(admin, producer, 1, 5)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1000)  # out of range: the broker says so, the consumer resets
        assert values(drain(c, 5)[tp]) == [b"0:%d" % i for i in range(5)]
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(OffsetOutOfRangeError):
            c.poll(timeout_ms=100)  # no committed offset and no reset policy
        c.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError, match=topic):
            for _ in range(50):
                c.poll(timeout_ms=100)


def test_pause_and_resume(broker, admin, producer):
    topic = filled_topic(admin, producer, 2, 10)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        c.assign([tp0, tp1])
        c.pause(tp1)
        assert c.paused() == {tp1}
        got = drain(c, 10)
        assert set(got) == {tp0}
        assert c.poll(timeout_ms=300) == {}  # tp1 stays silent while paused
        c.resume(tp1)
        assert values(drain(c, 10)[tp1]) == [b"1:%d" % i for i in range(10)]


def test_commit_committed_and_resume_in_a_new_consumer(broker, admin, producer):
    topic = filled_topic(admin, producer, 2, 10)
    group = f"g{next(_names)}"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Consumer(topic, bootstrap_servers=broker.address, group_id=group,
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        drain(c, 20)
        assert c.committed(tp0) is None
        c.commit({tp0: 4, tp1: OffsetAndMetadata(7, "note")})
        assert (c.committed(tp0), c.committed(tp1)) == (4, 7)
        with pytest.raises(InvalidArgumentError, match=">= 0"):
            c.commit({tp0: -5})
    assert admin.list_consumer_group_offsets(group) == {
        tp0: OffsetAndMetadata(4, ""), tp1: OffsetAndMetadata(7, "note")}
    with Consumer(topic, bootstrap_servers=broker.address, group_id=group) as c:
        got = drain(c, 9)
        assert values(got[tp0]) == [b"0:%d" % i for i in range(4, 10)]
        assert values(got[tp1]) == [b"1:%d" % i for i in range(7, 10)]
        # auto-commit on close stores the positions
    assert admin.list_consumer_group_offsets(group)[tp0].offset == 10


def test_two_members_of_a_group_split_the_partitions(broker, admin, producer):
    topic = filled_topic(admin, producer, 4, 5)
    group = f"g{next(_names)}"
    common = dict(bootstrap_servers=broker.address, group_id=group,
                  auto_offset_reset="earliest", heartbeat_interval_ms=100,
                  session_timeout_ms=3000)
    a = Consumer(topic, **common)
    assert len(a.assignment()) == 4
    seen: list = []
    stop = threading.Event()

    def poll_a():  # a keeps polling so that it rejoins when b arrives
        while not stop.is_set():
            for rs in a.poll(timeout_ms=50).values():
                seen.extend(rs)

    thread = threading.Thread(target=poll_a)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        b = Consumer(topic, **common)
        deadline = time.monotonic() + 60
        while len(a.assignment()) != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(a.assignment()) == 2 and len(b.assignment()) == 2
        assert a.assignment().isdisjoint(b.assignment())
        for p in range(4):  # new records: each member gets those of its partitions
            for i in range(5, 10):
                producer.send(topic, b"%d:%d" % (p, i), partition=p)
        producer.flush(10)
        got_b = drain(b, 10)
        assert set(got_b) == b.assignment()
        b.close()  # commits and leaves: a owns everything again
        deadline = time.monotonic() + 60
        while len(a.assignment()) != 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(a.assignment()) == 4
        deadline = time.monotonic() + 60
        while len(seen) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
        a.close()
    every = sorted(r.value for r in seen + [r for rs in got_b.values() for r in rs])
    # each record exactly once across both members: commits on rebalance hand over
    assert every == sorted(b"%d:%d" % (p, i) for p in range(4) for i in range(10))


def test_poll_batches_returns_arrow_with_offsets(broker, admin, producer):
    topic = filled_topic(admin, producer, 1, 12)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 2)
        batches = []
        deadline = time.monotonic() + 60
        while sum(b.num_rows for b in batches) < 10 and time.monotonic() < deadline:
            batches += c.poll_batches(timeout_ms=100).get(tp, [])
    table = pa.Table.from_batches(batches)
    assert table.column_names == ["key", "value", "headers", "__timestamp", "__offset"]
    assert table.column("__offset").to_pylist() == list(range(2, 12))
    assert table.column("value").to_pylist() == [b"0:%d" % i for i in range(2, 12)]


def test_typed_topic_rows_through_a_group(broker, admin, producer):
    topic = f"typed{next(_names)}"
    admin.create_topic(topic, 1, schema="value double, key string")  # raw-looking names
    producer.send_batch(topic, pa.table({"value": [1.5, 2.5], "key": ["a", None]})).get(10)
    with Consumer(topic, bootstrap_servers=broker.address, group_id=f"g{next(_names)}",
                  auto_offset_reset="earliest") as c:
        got = drain(c, 2)[TopicPartition(topic, 0)]
    assert [r.value for r in got] == [{"value": 1.5, "key": "a"}, {"value": 2.5, "key": None}]
    assert all(r.key is None for r in got)


def test_bad_arguments(broker, admin, producer):
    topic = filled_topic(admin, producer, 1, 1)
    with pytest.raises(InvalidConfigError, match="auto_offset_reset"):
        Consumer(bootstrap_servers=broker.address, auto_offset_reset="oldest")
    with pytest.raises(InvalidConfigError, match="grop_id"):
        Consumer(bootstrap_servers=broker.address, grop_id="x")
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        Consumer("nope", bootstrap_servers=broker.address)
    with Consumer(bootstrap_servers=broker.address) as c:
        with pytest.raises(InvalidArgumentError, match="subscribe"):
            c.poll()
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 3"):
            c.assign([TopicPartition(topic, 3)])
        with pytest.raises(InvalidArgumentError, match="group_id"):
            c.commit()
        c.assign([TopicPartition(topic, 0)])
        with pytest.raises(InvalidArgumentError, match="unsubscribe"):
            c.subscribe([topic])
        c.unsubscribe()
        c.subscribe([topic])
    with pytest.raises(InvalidArgumentError, match="closed"):
        c.poll()
