"""Kafka clients' record batches stored unchanged (docs/storage.md section 11, build step
1): the bytes on disk are the client's batch with only its base offset and leader epoch
patched (its CRC untouched), a Kafka consumer fetches them byte for byte, sparklog's
consumer decodes them to the same records; Arrow frames of the same partition are
still converted for Kafka consumers; every field a client may not set is refused by
name and nothing of the request is stored; typed topics take Arrow frames only."""

from __future__ import annotations

import datetime
import glob
import os

import pyarrow as pa
import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.format.frame import crc32c, iter_frames, reseal
from sparklog.format.header import CRC_START, MAGIC_FIELD
from sparklog.format.kafka_batch import KafkaRecord, decode_batch, encode_batch, iter_batches
from tests.support.kafkaconn import (
    KafkaConn,
    librdkafka_read,
    start_with_kafka_listener,
    topic_name,
)
from tests.support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

T0 = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("kafka-batches")


@pytest.fixture(scope="module")
def broker(root):
    b = start_with_kafka_listener(root, num_partitions=1)
    yield b
    b.stop()


def _topic(broker, configs: dict | None = None, schema=None) -> str:
    name = topic_name()
    admin = Admin(bootstrap_servers=broker.address)
    try:
        admin.create_topic(name, 1, configs=configs, schema=schema)
    finally:
        admin.close()
    return name


def _stored(root, topic: str) -> bytes:
    """The bytes of partition 0's segments, in order."""
    files = sorted(glob.glob(os.path.join(str(root), "topics", topic, "0", "*.log")))
    return b"".join(open(f, "rb").read() for f in files)


def _records(offsets, codec_seed: int = 0) -> list:
    return [KafkaRecord(o, T0 + o * 10 - (o % 3), None if o % 4 == 0 else b"k%d" % (o % 3),
                        b"value-%d" % o * (1 + o % 5),
                        (("h", b"%d" % o), ("n", None)) if o % 2 else ())
            for o in offsets]


def _batch(offsets, codec: str = "none", **fields) -> bytes:
    """A Kafka batch of the records at ``offsets`` as a client writes it (offsets
    relative: the broker assigns them)."""
    return encode_batch([r._replace(offset=r.offset - offsets[0]) for r in _records(offsets)],
                        compression=codec, **fields)


def _fetch(address: str, topic: str, offset: int, max_bytes: int = 1 << 20) -> bytes:
    """The records bytes of partition 0 a Fetch v11 from ``offset`` answers."""
    from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    with KafkaConn(address) as conn:
        answer = conn.request(1, 11, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)),
            min_bytes=i32(1), max_bytes=i32(max_bytes), isolation_level=i8(0),
            session_id=i32(0), session_epoch=i32(-1), rack_id="", forgotten_topics_data=(),
            topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                partition=i32(0), fetch_offset=i64(offset),
                partition_max_bytes=i32(max_bytes)),)),)))
    part = answer.responses[0].partitions[0]
    assert part.error_code == 0, part
    return part.records or b""


def _sparklog_read(broker, topic: str, n: int) -> list:
    """(offset, timestamp, key, value, headers) of the first ``n`` records read by
    sparklog's own consumer over sparklog's protocol."""
    c = Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest")
    out: list = []
    try:
        def more():
            for recs in c.poll(timeout_ms=500).values():
                out.extend((r.offset, r.timestamp, r.key, r.value, tuple(r.headers or ()))
                           for r in recs)
            return len(out) >= n
        wait_until(more, timeout=60, what=f"{n} records of {topic} by sparklog's consumer")
    finally:
        c.close()
    return out


def _librdkafka_read(kafka_address: str, topic: str, n: int) -> list:
    """(offset, timestamp, key, value, headers) of the first ``n`` records of ``topic``
    as librdkafka's consumer (confluent-kafka) reads them through the Kafka listener."""
    return [(m.offset(), m.timestamp()[1], m.key(), m.value(), tuple(m.headers() or ()))
            for m in librdkafka_read(kafka_address, topic, n)]


@pytest.mark.parametrize("codec", CODECS)
def test_a_clients_batch_is_stored_and_fetched_byte_for_byte(broker, root, kafka_address,
                                                             codec):
    topic = _topic(broker)
    sent = [_batch(range(0, 5), codec), _batch(range(5, 300), codec),
            _batch(range(300, 301), codec)]
    with KafkaConn(kafka_address) as conn:
        bases = [conn.produce(topic, batch) for batch in sent]
    assert [(int(r.error_code), int(r.base_offset)) for r in bases] == [(0, 0), (0, 5), (0, 300)]
    stored = _stored(root, topic)
    assert len(stored) == sum(len(b) for b in sent)
    pos = 0
    for batch, base in zip(sent, (0, 5, 300)):
        on_disk = stored[pos:pos + len(batch)]
        # only baseOffset and partitionLeaderEpoch differ: the CRC is the client's
        assert int.from_bytes(on_disk[:8], "big") == base
        assert on_disk[MAGIC_FIELD.position:] == batch[MAGIC_FIELD.position:]
        assert crc32c(on_disk[CRC_START:]) == int.from_bytes(batch[17:21], "big")
        pos += len(batch)
    # a Kafka consumer's fetch is the stored bytes (from the batch holding the offset)
    assert _fetch(kafka_address, topic, 0) == stored
    assert _fetch(kafka_address, topic, 7) == stored[len(sent[0]):]
    # sparklog's consumer decodes the same records
    expected = [(o, T0 + o * 10 - (o % 3), r.key, r.value, r.headers)
                for o, r in enumerate(_records(range(301)))]
    assert _sparklog_read(broker, topic, 301) == expected


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batches_stored_as_sent_and_read_by_both_consumers(broker, root,
                                                                      kafka_address, codec):
    """confluent-kafka's idempotent producer: its batches are on disk in its codec, with
    its producer id and sequences; its consumer and sparklog's read the same records."""
    from confluent_kafka import Producer as CKProducer

    topic = _topic(broker)
    p = CKProducer({"bootstrap.servers": kafka_address, "enable.idempotence": True,
                    "compression.type": codec, "linger.ms": 20})
    errors: list = []
    for i in range(200):
        p.produce(topic, key=b"k%d" % (i % 7), value=b"value-%d" % i * 3,
                  headers=[("i", str(i).encode())], timestamp=T0 + i,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors
    stored = _stored(root, topic)
    headers = [h for _, h in iter_batches(stored)]  # every CRC checks out as stored
    assert headers and all(h.magic == 2 and h.producer_id >= 0 for h in headers)
    assert {h.compression for h in headers} == {codec}
    assert [h.base_offset for h in headers] == [0] + [h.next_offset for h in headers[:-1]]
    assert [h.base_sequence for h in headers] == [h.base_offset for h in headers]
    expected = [(i, T0 + i, b"k%d" % (i % 7), b"value-%d" % i * 3, (("i", str(i).encode()),))
                for i in range(200)]
    assert _sparklog_read(broker, topic, 200) == expected
    assert sorted(_librdkafka_read(kafka_address, topic, 200)) == expected


def test_kafka_batches_and_arrow_frames_in_one_partition(broker, root, kafka_address):
    """sparklog's Producer (Arrow frames) and a Kafka client (batches) write one
    partition: a Kafka consumer gets the Kafka batches unchanged and the Arrow frames
    converted, sparklog's consumer reads both kinds, same records either way."""

    topic = _topic(broker)
    p = Producer(bootstrap_servers=broker.address)
    with KafkaConn(kafka_address) as conn:
        for round_ in range(3):
            for i in range(10):
                o = round_ * 20 + i
                p.send(topic, value=b"arrow-%d" % o, key=b"k", headers=[("h", b"x")],
                       partition=0, timestamp_ms=T0 + o)
            p.flush()
            batch = encode_batch([KafkaRecord(i, T0 + round_ * 20 + 10 + i, b"k",
                                              b"kafka-%d" % (round_ * 20 + 10 + i),
                                              (("h", b"x"),)) for i in range(10)],
                                 compression="zstd")
            assert int(conn.produce(topic, batch).error_code) == 0
    p.close()
    stored = _stored(root, topic)
    kinds = [f.header.magic for f in iter_frames(stored)]
    assert kinds[-1] == 2 and 1 in kinds
    expected = [(o, T0 + o, b"k", (b"kafka-%d" if o % 20 >= 10 else b"arrow-%d") % o,
                 (("h", b"x"),)) for o in range(60)]
    assert _sparklog_read(broker, topic, 60) == expected
    # poll_batches: one schema for both kinds, the same columns
    c = Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest")
    batches: list = []
    try:
        def more():
            for got in c.poll_batches(timeout_ms=500).values():
                batches.extend(got)
            return sum(b.num_rows for b in batches) >= 60
        wait_until(more, timeout=60, what="60 records of both kinds as Arrow batches")
    finally:
        c.close()
    assert len({b.schema for b in batches}) == 1
    table = pa.Table.from_batches(batches)
    assert list(zip(table.column("__offset").to_pylist(),
                    table.column("__timestamp").cast(pa.int64()).to_pylist(),
                    table.column("key").to_pylist(), table.column("value").to_pylist(),
                    [tuple((h["key"], h["value"]) for h in hs)
                     for hs in table.column("headers").to_pylist()])) == expected
    fetched = _fetch(kafka_address, topic, 0)
    batches = [decode_batch(fetched, pos) for pos, _ in iter_batches(fetched)]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for b in batches for r in b.records] == expected
    kafka_frames = [f for f in iter_frames(stored) if f.header.magic == 2]
    for frame in kafka_frames:  # each stored batch is in the answer, byte for byte
        h = frame.header
        assert stored[stored.index(frame.body.to_pybytes()) - 61:][:h.size] in fetched
    assert _librdkafka_read(kafka_address, topic, 60) == expected


def _forged(field: str) -> bytes:
    """A one-partition batch a client may not write, damaged in ``field``."""
    recs = _records(range(0, 3))
    if field == "control":
        return encode_batch([KafkaRecord(0, T0, b"\0\0\0\1", b"\0\0\0\0\0\0")], control=True)
    if field == "transactional":
        return encode_batch(recs, transactional=True, producer_id=1, producer_epoch=0,
                            base_sequence=0)
    if field == "lastOffsetDelta":
        return encode_batch(recs, last_offset_delta=7)
    if field == "offsetDelta":  # record 1 at delta 2, lastOffsetDelta then set to 1
        data = bytearray(encode_batch([recs[0], recs[1]._replace(offset=2)]))
        data[23:27] = (1).to_bytes(4, "big")
        reseal(data)
        return bytes(data)
    if field == "baseSequence":
        return encode_batch(recs, producer_id=5, producer_epoch=0, base_sequence=-1)
    data = bytearray(encode_batch(recs))
    if field == "timestamp-type":
        data[22] |= 0x08
    elif field == "delete-horizon":
        data[22] |= 0x40
    elif field == "maxTimestamp":
        data[35:43] = (T0 + 999_999).to_bytes(8, "big")
    elif field == "compression":
        data[22] |= 0x05
    elif field == "crc":
        data[-1] ^= 0xFF
        return bytes(data)
    elif field == "magic":
        data[16] = 1  # a legacy message set's magic: an Arrow frame's
    reseal(data)
    return bytes(data)


@pytest.mark.parametrize("field,code,named", [
    ("control", 87, "control bit"),
    ("transactional", 87, "transactional bit"),
    ("timestamp-type", 87, "timestamp-type bit"),
    ("delete-horizon", 87, "delete-horizon bit"),
    ("lastOffsetDelta", 87, "lastOffsetDelta 7 with recordCount 3"),
    ("offsetDelta", 87, "offsetDelta"),
    ("baseSequence", 87, "invalid baseSequence -1"),
    ("maxTimestamp", 87, "maxTimestamp"),
    ("compression", 2, "unknown compression type 5"),
    ("crc", 2, "does not match the batch's CRC-32C"),
    ("magic", 87, "magic 1"),
])
def test_each_refused_field_is_named_and_nothing_is_stored(broker, root, kafka_address,
                                                           field, code, named):
    topic = _topic(broker)
    good = _batch(range(0, 2))
    with KafkaConn(kafka_address) as conn:
        answer = conn.produce(topic, _forged(field))
        assert (int(answer.error_code), int(answer.base_offset)) == (code, -1), answer
        assert named in answer.error_message and topic in answer.error_message
        assert _stored(root, topic) == b""
        assert int(conn.produce(topic, good).base_offset) == 0


@pytest.mark.parametrize("extra", ["batch", "forged", "bytes"])
def test_a_produce_carries_exactly_one_batch_per_partition(broker, root, kafka_address,
                                                          extra):
    """Kafka's rule for a Produce v3+: one record batch per partition. A second batch
    (good or forged) or bytes after the first are refused with INVALID_RECORD naming
    the rule and the partition, and nothing of the partition's records is stored."""
    topic = _topic(broker)
    good = _batch(range(0, 2))
    after = {"batch": _batch(range(2, 4)), "forged": _forged("crc"), "bytes": b"\0" * 5}[extra]
    with KafkaConn(kafka_address) as conn:
        answer = conn.produce(topic, good + after)
        assert (int(answer.error_code), int(answer.base_offset)) == (87, -1), answer
        assert "exactly one record batch per partition" in answer.error_message
        assert f"{topic}-0" in answer.error_message
        assert f"{len(after)} bytes follow the batch of {len(good)} bytes" \
            in answer.error_message
        assert _stored(root, topic) == b""
        assert int(conn.produce(topic, good).base_offset) == 0


def test_typed_and_compacted_topics(broker, root, kafka_address):
    """A typed topic takes Arrow frames only: a Kafka batch is INVALID_RECORD naming
    the topic's schema. A compacted raw topic refuses a record without a key."""
    typed = _topic(broker, schema=pa.schema([pa.field("n", pa.int64())]))
    compacted = _topic(broker, configs={"cleanup.policy": "compact"})
    with KafkaConn(kafka_address) as conn:
        answer = conn.produce(typed, _batch(range(0, 2)))
        assert int(answer.error_code) == 87, answer
        assert "is typed and takes Arrow frames of its schema n: int64" in answer.error_message
        answer = conn.produce(compacted, _batch(range(0, 4)))  # record 0 has no key
        assert int(answer.error_code) == 87 and "has no key" in answer.error_message
        answer = conn.produce(compacted, _batch(range(1, 4)))
        assert (int(answer.error_code), int(answer.base_offset)) == (0, 0)
    assert _stored(root, typed) == b""


def test_log_append_time_topic_stamps_the_batch(broker, root, kafka_address):
    topic = _topic(broker, configs={"message.timestamp.type": "LogAppendTime"})
    batch = _batch(range(0, 3), "lz4")
    with KafkaConn(kafka_address) as conn:
        answer = conn.produce(topic, batch)
    assert int(answer.error_code) == 0
    append_time = round(answer.log_append_time.timestamp() * 1000)
    stored = _stored(root, topic)
    (h,) = [h for _, h in iter_batches(stored)]  # CRC redone: it checks
    assert h.timestamp_type == 1 and h.max_timestamp == append_time > T0
    assert stored[61:] == batch[61:]  # the records as sent
    assert {r[1] for r in _sparklog_read(broker, topic, 3)} == {h.max_timestamp}


def test_sequences_are_checked_against_the_producer_state(broker, root, kafka_address):
    """An idempotent producer's batches: a resent batch is answered with the offsets it
    got the first time and stored once; a gap in the sequence is OUT_OF_ORDER_SEQUENCE."""
    topic = _topic(broker)
    with KafkaConn(kafka_address) as conn:
        init = conn.init_producer_id()
        assert init.error_code == 0
        pid, epoch = int(init.producer_id), int(init.producer_epoch)

        def batch(offsets, seq):
            return _batch(offsets, "snappy", producer_id=pid, producer_epoch=epoch,
                          base_sequence=seq)

        first = batch(range(0, 3), 0)
        assert int(conn.produce(topic, first).base_offset) == 0
        again = conn.produce(topic, first)
        assert (int(again.error_code), int(again.base_offset)) == (0, 0)
        assert int(conn.produce(topic, batch(range(3, 5), 3)).base_offset) == 3
        gap = conn.produce(topic, batch(range(5, 6), 9))
        assert int(gap.error_code) == 45, gap  # OUT_OF_ORDER_SEQUENCE_NUMBER
    headers = [h for _, h in iter_batches(_stored(root, topic))]
    assert [(h.base_offset, h.producer_id, h.base_sequence) for h in headers] == \
        [(0, pid, 0), (3, pid, 3)]
