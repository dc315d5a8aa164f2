"""The Producer over a real broker process: every acks and compression setting consumed
back in order, futures and callbacks, send_batch, typed topics, idempotent retries
through a loopback proxy that drops a response, back-pressure, bad arguments."""

from __future__ import annotations

import itertools
import socket
import time

import pyarrow as pa
import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.producer.partitioner import murmur2, to_positive
from sparklog.clients.types import TopicPartition
from sparklog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTopicError,
    RecordTooLargeError,
    RequestTimedOutError,
    SchemaMismatchError,
    UnknownTopicOrPartitionError,
)
from tests.support.brokerproc import BrokerProcess
from tests.support.clients import consume_all
from tests.support.proxy import Proxy
from tests.support.waiting import wait_until

_names = itertools.count()


def new_topic(admin, partitions=1, **kw) -> str:
    name = f"p{next(_names)}"
    admin.create_topic(name, partitions, **kw)
    return name


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_every_acks_and_compression_round_trip(broker, admin, acks, compression):
    topic = new_topic(admin, 3)
    sent = {p: [] for p in range(3)}
    with Producer(broker.address, acks=acks, compression_type=compression,
                  linger_ms=2) as producer:
        futures = []
        for i in range(600):
            key = b"key-%d" % (i % 13)
            value = b"value-%d-" % i + bytes([i % 256]) * (i % 50)
            headers = [("n", str(i).encode())] if i % 3 == 0 else None
            futures.append(producer.send(topic, value, key=key, headers=headers))
            sent[to_positive(murmur2(key)) % 3].append((key, value, headers or []))
        producer.flush(30)
        metas = [f.get(5) for f in futures]
    assert all(m.topic == topic for m in metas)
    if acks != 0:
        # offsets are consecutive per partition, in send order
        for p in range(3):
            offsets = [m.offset for m in metas if m.partition == p]
            assert offsets == list(range(len(sent[p])))
    got = consume_all(broker.address, topic, 3, 600)
    for p in range(3):
        assert [(r.key, r.value, r.headers) for r in got[p]] == sent[p]
        assert [r.offset for r in got[p]] == list(range(len(sent[p])))


def test_future_get_callbacks_and_timestamps(broker, admin):
    topic = new_topic(admin, 2)
    acked, failed = [], []
    with Producer(broker.address, linger_ms=50) as producer:
        f1 = producer.send(topic, b"a", partition=1, timestamp=1_600_000_000_000)
        f1.add_callback(acked.append).add_errback(failed.append)
        assert not f1.is_done  # lingering
        f2 = producer.send(topic, "text value", partition=1)
        m1, m2 = f1.get(10), f2.get(10)
        f2.add_callback(acked.append)  # added after completion: runs at once
    assert (m1.partition, m1.offset, m1.timestamp) == (1, 0, 1_600_000_000_000)
    assert (m2.partition, m2.offset) == (1, 1)
    assert acked == [m1, m2] and failed == []
    got = consume_all(broker.address, topic, 2, 2)
    assert [r.value for r in got[1]] == [b"a", b"text value"]
    assert got[1][0].timestamp == 1_600_000_000_000


def test_null_keys_stick_to_a_partition_then_move(broker, admin):
    topic = new_topic(admin, 4)
    with Producer(broker.address, batch_size=2000, linger_ms=0) as producer:
        metas = [producer.send(topic, b"x" * 84) for _ in range(200)]
        producer.flush(10)
        parts = [f.get().partition for f in metas]
    runs = [len(list(g)) for _, g in itertools.groupby(parts)]
    assert len(set(parts)) > 1  # moved on
    assert max(runs) >= 10  # but in runs of about batch.size bytes (20 x 100 bytes)


def test_linger_gathers_records_into_one_frame(broker, admin):
    topic = new_topic(admin)
    with Producer(broker.address, linger_ms=300, batch_size=1 << 20) as producer:
        futures = [producer.send(topic, b"r%d" % i) for i in range(50)]
        producer.flush(10)
        assert [f.get().offset for f in futures] == list(range(50))
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        batches = []
        deadline = time.monotonic() + 60
        while sum(b.num_rows for b in batches) < 50 and time.monotonic() < deadline:
            for bs in c.poll_batches(timeout_ms=200).values():
                batches.extend(bs)
    assert [b.num_rows for b in batches] == [50]  # one frame, one Arrow batch
    assert batches[0].column("__offset").to_pylist() == list(range(50))


def test_send_batch_raw_table_partitions_like_send(broker, admin):
    topic = new_topic(admin, 3)
    n = 5000
    keys = [None if i % 10 == 0 else b"k%d" % (i % 97) for i in range(n)]
    table = pa.table({
        "key": pa.array(keys, pa.binary()),
        "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        "timestamp": pa.array(range(1_700_000_000_000, 1_700_000_000_000 + n), pa.int64()),
    })
    with Producer(broker.address) as producer:
        result = producer.send_batch(topic, table).get(30)
    assert sum(m.record_count for m in result) == n
    got = consume_all(broker.address, topic, 3, n)
    for p in range(3):
        for r in got[p]:
            if r.key is not None:
                assert to_positive(murmur2(r.key)) % 3 == p
        # rows keep their order within a partition
        idx = [int(r.value[1:]) for r in got[p]]
        assert idx == sorted(idx)
    everything = sorted((r.value, r.key, r.timestamp) for rs in got.values() for r in rs)
    assert everything == sorted(
        (b"v%d" % i, keys[i], 1_700_000_000_000 + i) for i in range(n))


def test_send_batch_pandas_and_record_batch_to_one_partition(broker, admin):
    pd = pytest.importorskip("pandas", reason="pandas is not installed")
    topic = new_topic(admin, 2)
    df = pd.DataFrame({"value": [b"a", b"b", b"c"], "key": [b"1", None, b"3"]})
    rb = pa.record_batch({"value": pa.array([b"d", b"e"])})
    with Producer(broker.address) as producer:
        m1 = producer.send_batch(topic, df, partition=1).get(10)
        m2 = producer.send_batch(topic, rb, partition=1).get(10)
    assert [(m.partition, m.base_offset, m.record_count) for m in m1 + m2] == \
        [(1, 0, 3), (1, 3, 2)]
    got = consume_all(broker.address, topic, 2, 5)
    assert [(r.key, r.value) for r in got[1]] == [
        (b"1", b"a"), (None, b"b"), (b"3", b"c"), (None, b"d"), (None, b"e")]


def test_typed_topic_send_and_send_batch(broker, admin):
    topic = new_topic(admin, 1, schema="id int64 not null, name string")
    with Producer(broker.address) as producer:
        producer.send(topic, {"id": 1, "name": "one"}).get(10)
        producer.send_batch(topic, pa.table({"id": [2, 3], "name": ["two", None]})).get(10)
        with pytest.raises(SchemaMismatchError, match="typed"):
            producer.send(topic, b"raw bytes")
        with pytest.raises(SchemaMismatchError, match="columns"):
            producer.send_batch(topic, pa.table({"other": [1]}))
        bad = producer.send(topic, {"id": "not a number", "name": "x"})
        with pytest.raises(SchemaMismatchError):
            bad.get(10)
    got = consume_all(broker.address, topic, 1, 3)
    assert [r.value for r in got[0]] == [{"id": 1, "name": "one"}, {"id": 2, "name": "two"},
                                         {"id": 3, "name": None}]


def test_partitions_added_later_are_used(broker, admin):
    topic = new_topic(admin, 1)
    key = next(k for k in (b"k%d" % i for i in range(100)) if to_positive(murmur2(k)) % 3 == 1)
    with Producer(broker.address, metadata_max_age_ms=200) as producer:
        assert producer.send(topic, b"before", key=key).get(10).partition == 0
        admin.create_partitions(topic, 3)
        time.sleep(0.3)
        producer.send(topic, b"tick").get(10)  # the sender refreshes stale metadata
        assert producer.send(topic, b"keyed", key=key).get(10).partition == 1
    with Producer(broker.address) as producer:
        producer.send(topic, b"x").get(10)
        admin.create_partitions(topic, 4)
        assert producer.send(topic, b"explicit", partition=3).get(10).partition == 3


def test_bad_arguments_raise_clear_errors(broker, admin):
    topic = new_topic(admin, 2)
    with pytest.raises(InvalidConfigError, match="lingerms"):
        Producer(broker.address, lingerms=5)
    with pytest.raises(InvalidConfigError, match="acks"):
        Producer(broker.address, acks=2)
    with pytest.raises(InvalidConfigError, match="compression_type"):
        Producer(broker.address, compression_type="gzip")
    with pytest.raises(InvalidConfigError, match="idempotence"):
        Producer(broker.address, acks=0, enable_idempotence=True)
    with pytest.raises(InvalidArgumentError, match="port 'x' is not a number"):
        Producer(["localhost:x"])
    with Producer(broker.address, max_request_size=10_000) as producer:
        with pytest.raises(InvalidArgumentError, match="must be bytes or str"):
            producer.send(topic, 12345)
        with pytest.raises(InvalidArgumentError, match="key"):
            producer.send(topic, b"v", key=3.5)
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 7"):
            producer.send(topic, b"v", partition=7)
        with pytest.raises(InvalidTopicError, match="illegal"):
            producer.send("bad/name", b"v")
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            producer.send(topic, b"x" * 20_000)
        with pytest.raises(InvalidArgumentError, match="headers"):
            producer.send(topic, b"v", headers=[(1, b"x")])
        for stamp in (2 ** 63, -(2 ** 63) - 1):
            with pytest.raises(InvalidArgumentError, match=f"timestamp {stamp} does not fit"):
                producer.send(topic, b"v", timestamp=stamp)
        # refused alone: the batch it would have joined is sent
        assert producer.send(topic, b"v", timestamp=2 ** 63 - 1).get(10).timestamp == 2 ** 63 - 1
        with pytest.raises(InvalidArgumentError, match="DataFrame"):
            producer.send_batch(topic, [1, 2, 3])
        with pytest.raises(SchemaMismatchError, match="value"):
            producer.send_batch(topic, pa.table({"key": [b"k"]}))
    with pytest.raises(InvalidArgumentError, match="closed"):
        producer.send(topic, b"late")


def test_no_broker_fails_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    with pytest.raises(Exception, match="no broker reachable"):
        Producer(f"127.0.0.1:{port}")


# --- idempotent retries through a loopback proxy -----------------------------------------


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """A broker process reachable only through a Proxy."""
    root = tmp_path_factory.mktemp("proxied")
    px = Proxy()
    with BrokerProcess((root / "log").as_uri(), log_path=root / "broker.log") as proc:
        px.target = (proc.host, proc.port)
        px.admin = Admin(px.address)
        yield px
        px.admin.close()
    px.close()


def _produce_through_proxy(proxy, idempotent: bool):
    topic = new_topic(proxy.admin)
    proxy.reset(drop_produce=1)
    with Producer(proxy.address, enable_idempotence=idempotent, retry_backoff_ms=20,
                  linger_ms=0) as producer:
        first = producer.send(topic, b"first").get(20)
        second = producer.send(topic, b"second").get(20)
    assert proxy.dropped == 1 and proxy.produce_requests == 3  # one retry happened
    values = [r.value for r in consume_all(proxy.address, topic, 1, 2)[0]]
    return first, second, values


def test_idempotent_retry_after_dropped_response_yields_no_duplicate(proxy):
    first, second, values = _produce_through_proxy(proxy, idempotent=True)
    assert values == [b"first", b"second"]
    assert (first.offset, second.offset) == (0, 1)  # the retry got the original offset


def test_without_idempotence_the_same_retry_duplicates(proxy):
    # the control experiment: proves the proxy really makes the broker append twice
    first, second, values = _produce_through_proxy(proxy, idempotent=False)
    assert values == [b"first", b"first", b"second"]
    assert (first.offset, second.offset) == (1, 2)


def test_idempotent_send_batch_frames_survive_a_dropped_response(proxy):
    # several ~1 MiB frames built by send_batch get the producer's id and sequences when
    # sent (CRC redone), travel several per request, and are not duplicated by a retry
    topic = new_topic(proxy.admin)
    proxy.reset(drop_produce=1)
    n = 40_000
    table = pa.table({"value": [b"%06d" % i + b"." * 94 for i in range(n)]})
    with Producer(proxy.address, enable_idempotence=True, retry_backoff_ms=20,
                  max_request_size=4 << 20) as producer:
        metas = producer.send_batch(topic, table).get(60)
    assert proxy.dropped == 1
    assert len(metas) >= 4 and sum(m.record_count for m in metas) == n
    assert [m.base_offset for m in metas] == \
        [sum(m.record_count for m in metas[:i]) for i in range(len(metas))]
    got = consume_all(proxy.address, topic, 1, n)[0]
    assert [int(r.value[:6]) for r in got] == list(range(n))


def test_buffer_memory_back_pressure_blocks_then_times_out(proxy):
    topic = new_topic(proxy.admin)
    proxy.reset()
    with Producer(proxy.address, buffer_memory=20_000, batch_size=4_000,
                  max_block_ms=300, linger_ms=0, request_timeout_ms=60_000) as producer:
        producer.send(topic, b"warm").get(10)
        proxy.hold.set()  # the broker's answers stop coming back
        sent = 0
        start = time.monotonic()
        with pytest.raises(RequestTimedOutError, match="buffer.memory"):
            for _ in range(1000):
                producer.send(topic, b"y" * 500)
                sent += 1
        waited = time.monotonic() - start
        assert 20 <= sent < 60  # about buffer.memory / record size got buffered
        assert waited >= 0.3  # send() blocked for max.block.ms before giving up
        proxy.hold.clear()
        producer.flush(20)  # everything buffered is delivered afterwards
    assert len(consume_all(proxy.address, topic, 1, sent + 1)[0]) == sent + 1


def test_a_timed_out_request_asks_for_the_leaders_before_its_retry(proxy):
    """A broker on a lost host answers nothing; by the time a request to it times out its
    partitions may have new leaders: the retry follows fresh metadata, not the cached
    leader (which cost a connect timeout to the lost host more)."""
    topic = new_topic(proxy.admin)
    proxy.reset()
    with Producer(proxy.address, enable_idempotence=True, acks="all", linger_ms=0,
                  request_timeout_ms=1000, retry_backoff_ms=20) as producer:
        producer.send(topic, b"warm").get(10)
        proxy.hold.set()  # no answers: the next Produce request times out
        future = producer.send(topic, b"after")
        asked = proxy.metadata_requests
        wait_until(lambda: proxy.produce_requests >= 2, 10, "the Produce request")
        # past a Produce request's deadline (request_timeout_ms, plus as much again for
        # the broker's own acks timeout): it has timed out
        time.sleep(2.5)
        proxy.hold.clear()
        assert future.get(20).offset == 1  # retried once appended: no duplicate
    assert proxy.metadata_requests > asked, "the retry did not refresh the metadata"
    assert [r.value for r in consume_all(proxy.address, topic, 1, 2)[0]] == [b"warm", b"after"]


def test_broker_restart_mid_stream_loses_and_duplicates_nothing(tmp_path):
    with BrokerProcess((tmp_path / "log").as_uri(), log_path=tmp_path / "b.log") as proc:
        with Admin(proc.address) as a:
            a.create_topic("restart", 2)
        with Producer(proc.address, enable_idempotence=True, acks="all", linger_ms=1,
                      retry_backoff_ms=50) as producer:
            futures = [producer.send("restart", b"%d" % i, key=b"%d" % (i % 5))
                       for i in range(300)]
            producer.flush(30)
            proc.restart()  # graceful stop and start on the same port
            futures += [producer.send("restart", b"%d" % i, key=b"%d" % (i % 5))
                        for i in range(300, 600)]
            producer.flush(60)
            assert all(f.get(1).offset >= 0 for f in futures)
        got = consume_all(proc.address, "restart", 2, 600)
    values = sorted(int(r.value) for rs in got.values() for r in rs)
    assert values == list(range(600))
