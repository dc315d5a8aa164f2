"""Kafka record batches against Apache Kafka itself (a real 4.x broker, tests/support/
kafkaserver.py): the batches encode_batch writes, with each codec, are accepted by
Kafka's own LogValidator (its Java codecs: lz4-java's frame reader refuses dependent
blocks, snappy-java reads xerial's framing, zstd-jni, java.util.zip) and stored unchanged
but for baseOffset and partitionLeaderEpoch; the forged batches of issue #33 item 1 get
the same answer from Kafka as from validate_client_batch, and where sparklog is stricter
than Kafka (it stores batches unchanged, so it cannot repair them as Kafka does) the test
says so.

Produce v7 and Fetch v4 are written by hand here: the point is to send exact bytes.
"""

from __future__ import annotations

import itertools
import socket
import struct

import pytest

from sparklog.errors import CorruptRecordError, InvalidRecordError
from sparklog.format import kafka_batch as kb
from tests.format.test_kafka_batch import T0, _batch, _patched, _record, _sample_records, _varint

pytestmark = pytest.mark.peers

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TOPIC = "kafka-batch-codec"
_ids = itertools.count(1)


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(value.encode())) + value.encode()


class _Conn:
    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)

    def close(self):
        self.sock.close()

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        cid = next(_ids)
        frame = struct.pack(">hhi", api_key, version, cid) + _string("kafka-batch-test") + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._recv(4))[0]
        reply = self._recv(size)
        assert struct.unpack_from(">i", reply)[0] == cid
        return reply[4:]

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "Kafka closed the connection"
            out += chunk
        return out

    def produce(self, records: bytes) -> tuple[int, int]:
        """(error code, base offset) of Produce v7 of ``records`` to partition 0."""
        body = _string(None) + struct.pack(">hi", -1, 30_000) + struct.pack(">i", 1) + \
            _string(TOPIC) + struct.pack(">iii", 1, 0, len(records)) + records
        reply = self.request(0, 7, body)
        pos = 4 + 2 + len(TOPIC.encode()) + 4  # one topic, its name, one partition
        index, error, base_offset = struct.unpack_from(">ihq", reply, pos)
        assert index == 0
        return error, base_offset

    def fetch(self, offset: int) -> bytes:
        """The record batches Fetch v4 returns from ``offset`` of partition 0."""
        body = struct.pack(">iiiib", -1, 1000, 1, 16 << 20, 0) + struct.pack(">i", 1) + \
            _string(TOPIC) + struct.pack(">iiqi", 1, 0, offset, 16 << 20)
        reply = self.request(1, 4, body)
        pos = 4 + 4 + 2 + len(TOPIC.encode()) + 4
        _index, error, _hw, _lso, aborted = struct.unpack_from(">ihqqi", reply, pos)
        assert error == 0, f"Fetch answered error {error}"
        pos += 4 + 2 + 8 + 8 + 4 + max(aborted, 0) * 16
        size = struct.unpack_from(">i", reply, pos)[0]
        return reply[pos + 4:pos + 4 + size]


@pytest.fixture(scope="module")
def kafka(kafka_broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(60)
    conn = _Conn(kafka_broker.bootstrap)
    yield conn
    conn.close()


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_accepts_our_batches_and_stores_them_unchanged(kafka, codec):
    records = _sample_records(300)
    ours = kb.encode_batch(records, compression=codec, base_offset=0)
    error, base = kafka.produce(ours)
    assert error == 0, f"Kafka refused our {codec} batch with error {error}"
    fetched = kafka.fetch(base)
    stored = next(fetched[pos:pos + h.size] for pos, h in kb.iter_batches(fetched)
                  if h.base_offset == base)
    # Kafka stamped baseOffset and partitionLeaderEpoch (bytes 0-15) and kept the rest,
    # so its own check of maxTimestamp and the CRC found nothing to redo
    assert stored[16:] == ours[16:]
    assert kb.parse_header(stored).base_offset == base
    assert kb.decode_batch(stored).records == \
        [r._replace(offset=base + r.offset) for r in records]


def _gzip(section: bytes) -> bytes:
    return kb.compress_records(section, "gzip")


def _three(deltas=(0, 1, 2), **kwargs):
    kwargs.setdefault("max_ts", T0 + max(deltas))
    return _batch([_record(d, ts_delta=d) for d in deltas], **kwargs)


#: forged batches both refuse: (name, batch, Kafka's error codes, sparklog's error class).
#: Kafka 4.4 answers some with UNKNOWN_SERVER_ERROR (-1): an exception it did not expect
#: (java.util.zip's, zstd-jni's, or "key is skipped in PartialDefaultRecord" while it
#: formats its "does not have incremental offsets" message); sparklog names the problem.
REFUSED_BY_BOTH = [
    ("lastOffsetDelta beyond count - 1", _three(last_offset_delta=5), {87}, InvalidRecordError),
    ("negative lastOffsetDelta", _three(last_offset_delta=-1), {87}, InvalidRecordError),
    ("compressed, lastOffsetDelta beyond count - 1",
     _batch([_record(0), _record(1)], attributes=1, compress=_gzip, last_offset_delta=5),
     {87}, InvalidRecordError),
    ("no records", _batch([], count=0, last_offset_delta=-1), {87}, InvalidRecordError),
    ("control bit", _three(attributes=0x20), {87}, InvalidRecordError),
    ("producer id without a sequence", _three(producer_id=7, producer_epoch=0), {87},
     InvalidRecordError),
    ("compressed records with forged offset deltas",
     _batch([_record(0), _record(1), _record(1000)], attributes=1, compress=_gzip),
     {87, -1}, InvalidRecordError),
    ("compressed records with decreasing offset deltas",
     _batch([_record(0), _record(2), _record(1)], attributes=1, compress=_gzip),
     {87, -1}, InvalidRecordError),
    ("records shorter than recordCount",
     _patched(_three(), record_count=4, last_offset_delta=3), {87}, InvalidRecordError),
    ("a record longer than the batch", _batch([_record(0, length_fix=1)]), {87},
     InvalidRecordError),
    ("a record shorter than its fields", _batch([_record(0, length_fix=-1)]), {87},
     InvalidRecordError),
    ("a key past its record",
     _batch([_varint(7) + b"\x00\x00\x00" + _varint(60) + b"\x00\x00\x00"]), {87},
     InvalidRecordError),
    ("key length -2", _batch([_varint(7) + b"\x00\x00\x00" + _varint(-2) + b"\x00\x00\x00"]),
     {87}, InvalidRecordError),
    ("bad CRC", _patched(_three(), False, crc=12345), {2}, CorruptRecordError),
    ("gzip that is not gzip",
     _batch([_record(0)], attributes=1, compress=lambda b: b"\x1f\x8b" + b"garbage" * 5),
     {-1}, CorruptRecordError),
    ("truncated gzip",
     _batch([_record(0), _record(1)], attributes=1, compress=lambda b: _gzip(b)[:-6]),
     {-1}, CorruptRecordError),
    ("lz4 that is not lz4", _batch([_record(0)], attributes=3, compress=lambda b: b"x" * 14),
     {-1}, CorruptRecordError),
    ("zstd that is not zstd", _batch([_record(0)], attributes=4, compress=lambda b: b"x" * 14),
     {-1}, CorruptRecordError),
    ("unknown compression type 5", _patched(_three(), attributes=5), {-1},
     CorruptRecordError),
]


@pytest.mark.parametrize("name, data, codes, error", REFUSED_BY_BOTH,
                         ids=[c[0] for c in REFUSED_BY_BOTH])
def test_kafka_and_validate_client_batch_refuse_the_same_forged_batches(kafka, name, data,
                                                                        codes, error):
    code, _ = kafka.produce(data)
    assert code in codes, f"{name}: Kafka answered {code}"
    with pytest.raises(error):
        kb.validate_client_batch(data)


#: batches Kafka accepts and repairs or ignores, sparklog refuses: it stores a client's
#: batch unchanged and every reader takes its offsets and times from it
STRICTER_THAN_KAFKA = [
    # Kafka does not look at an uncompressed batch's record offsets (it reads them as
    # baseOffset + delta later: a consumer would jump); sparklog refuses them
    ("uncompressed records with forged offset deltas",
     _batch([_record(0), _record(1), _record(1000)])),
    # Kafka rewrites maxTimestamp (and the CRC); sparklog's time index reads it as sent
    ("maxTimestamp not the largest timestamp", _three(max_ts=T0)),
    # Kafka keeps the bit: every record then reads as maxTimestamp on a CreateTime topic
    ("LogAppendTime bit from a client", _three(attributes=0x08)),
    # only Kafka's log cleaner sets the delete horizon
    ("delete-horizon bit from a client", _three(attributes=0x40)),
    # Kafka reads header keys as Java strings (malformed UTF-8 becomes U+FFFD); the raw
    # topic's Arrow column holds them as UTF-8 strings
    ("a header key that is not UTF-8", _batch([_record(0, headers=((b"\xff\xfe", b"x"),))])),
]


@pytest.mark.parametrize("name, data", STRICTER_THAN_KAFKA,
                         ids=[c[0] for c in STRICTER_THAN_KAFKA])
def test_where_sparklog_is_stricter_than_kafka(kafka, name, data):
    error, _ = kafka.produce(data)
    assert error == 0, f"{name}: Kafka answered {error} (it accepted this before)"
    with pytest.raises(InvalidRecordError):
        kb.validate_client_batch(data)
