"""Kafka record batches (magic 2): sparklog/format/kafka_batch.py against real clients.

The references are the clients' own codecs: kafka-python's DefaultRecordBatchBuilder and
DefaultRecordBatch (both directions, every codec; the venv has no python-snappy, lz4 or
zstandard, so for those three kafka-python's code runs over pyarrow's primitives, see
``kafka_python_codecs``), byte strings kafka-python and librdkafka wrote (golden; the
live librdkafka producer and consumer are in test_kafka_batch_librdkafka.py), and a
record encoder written here from Kafka's spec to build the malformed batches a hostile
client could send. Every validation rule is refused with its message, and a fuzz checks
that random and mutated bytes only ever raise the module's error classes.
"""

from __future__ import annotations

import io
import struct

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    InvalidRecordError,
    RecordTooLargeError,
)
from sparklog.format import kafka_batch as kb
from sparklog.format.kafka_batch import KafkaRecord

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
#: Kafka's RecordBatch v2 header, stated here independently of the module
HEADER = struct.Struct(">qiibIhiqqqhii")
FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
          "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
          "producer_id", "producer_epoch", "base_sequence", "record_count")
DECODE_ERRORS = (CorruptRecordError, RecordTooLargeError)
VALIDATE_ERRORS = (CorruptRecordError, RecordTooLargeError, InvalidRecordError)
T0 = 1732850000000

# --- golden bytes -------------------------------------------------------------------

#: kafka-python 3.0.12's DefaultRecordBatchBuilder, uncompressed: three records with a
#: key and a header, without a key, and with a null value and a null-valued header
KAFKA_PYTHON_PLAIN = bytes.fromhex(
    "0000000000000000000000740000000002a4f202ad0000000000020000019375e8a0800000019375e8"
    "a085ffffffffffffffffffffffffffff00000003440000000c757365722d311a7b22636c69636b7322"
    "3a20337d020a747261636504000118000a02010c6e6f206b657900240013040c757365722d32010402"
    "6101026200")
KAFKA_PYTHON_PLAIN_RECORDS = [
    KafkaRecord(0, T0, b"user-1", b'{"clicks": 3}', (("trace", b"\x00\x01"),)),
    KafkaRecord(1, T0 + 5, None, b"no key", ()),
    KafkaRecord(2, T0 - 10, b"user-2", None, (("a", None), ("b", b""))),
]
#: kafka-python, gzip, an idempotent producer's batch (producer id 4242, epoch 3,
#: base sequence 17)
KAFKA_PYTHON_GZIP = bytes.fromhex(
    "00000000000000000000006d0000000002a33213c90001000000030000019375e8a0800000019375e8"
    "a0830000000000001092000300000011000000041f8b0800da9e0b6b02ff8b60606060caf6ca48cdc9"
    "c957c04f1a304430303111a9d810a898858548c54640c56c6c442a3666000082907019b4000000")
KAFKA_PYTHON_GZIP_RECORDS = [
    KafkaRecord(i, T0 + i, b"k", b"hello hello hello hello hello hello %d" % i, ())
    for i in range(4)]

#: librdkafka 2.16.0 (confluent-kafka 2.16.1), one batch of the same three records per
#: codec, captured from its Produce requests (tests/format/test_kafka_batch_librdkafka.py
#: produces such batches live); its snappy is raw (no xerial framing), its lz4 frame has
#: the descriptor 60 40 82 the module writes too
LIBRDKAFKA_GOLDEN = {
    "gzip": "00000000000000000000007b0000000002764f8e5c0001000000020000019375e8a08000000193"
            "75e8a082ffffffffffffffffffffffffffff000000031f8b0800000000000003cb606060e0cb"
            "2f4a492dd235b44b2e4a4d2c494d51c04133b1151725b395a726b9313031315a152466a628e0"
            "2218a41858586006333200008b25df5e67000000",
    "snappy": "00000000000000000000007300000000023b4622bd0002000000020000019375e8a0800000"
              "019375e8a082ffffffffffffffffffffffffffff000000036750680000000e6f726465722d"
              "313e63726561746564205a08004c02067372630677656246000202013a70616964205e0500"
              "38001a0004040e6f726465722d310100",
    "lz4": "00000000000000000000008400000000022a838e710003000000020000019375e8a08000000193"
           "75e8a082ffffffffffffffffffffffffffff0000000304224d1860408244000000ff0668000000"
           "0e6f726465722d313e6372656174656420080004ff0502067372630677656246000202013a7061"
           "696420050005f000001a0004040e6f726465722d31010000000000",
    "zstd": "00000000000000000000007600000000023cef86840004000000020000019375e8a08000000193"
            "75e8a082ffffffffffffffffffffffffffff0000000328b52ffd0058e501000403680000000e"
            "6f726465722d313e637265617465642002067372630677656246000202013a7061696420001a"
            "000404010003005c203414905d5d98",
}
LIBRDKAFKA_GOLDEN_RECORDS = [
    KafkaRecord(0, T0, b"order-1", b"created created created created", (("src", b"web"),)),
    KafkaRecord(1, T0 + 1, None, b"paid paid paid paid paid paid", ()),
    KafkaRecord(2, T0 + 2, b"order-1", None, ()),
]


def test_golden_kafka_python_batch_decodes_and_our_encoder_writes_the_same_bytes():
    batch = kb.decode_batch(KAFKA_PYTHON_PLAIN)
    assert batch.records == KAFKA_PYTHON_PLAIN_RECORDS
    h = batch.header
    assert (h.base_offset, h.magic, h.record_count, h.last_offset_delta) == (0, 2, 3, 2)
    assert (h.base_timestamp, h.max_timestamp) == (T0, T0 + 5)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    assert h.size == len(KAFKA_PYTHON_PLAIN) and h.compression == "none"
    # kafka-python writes partitionLeaderEpoch 0; with it, our bytes are its bytes
    assert kb.encode_batch(KAFKA_PYTHON_PLAIN_RECORDS, partition_leader_epoch=0) \
        == KAFKA_PYTHON_PLAIN
    assert kb.validate_client_batch(KAFKA_PYTHON_PLAIN) == h


def test_golden_kafka_python_gzip_batch():
    batch = kb.decode_batch(KAFKA_PYTHON_GZIP)
    assert batch.records == KAFKA_PYTHON_GZIP_RECORDS
    h = batch.header
    assert h.compression == "gzip" and h.attributes == 1
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (4242, 3, 17)
    assert kb.validate_client_batch(KAFKA_PYTHON_GZIP) == h



@pytest.mark.parametrize("codec", sorted(LIBRDKAFKA_GOLDEN))
def test_golden_librdkafka_batches(codec):
    data = bytes.fromhex(LIBRDKAFKA_GOLDEN[codec])
    header = kb.validate_client_batch(data)
    assert header.compression == codec and header.max_timestamp == T0 + 2
    assert kb.decode_batch(data).records == LIBRDKAFKA_GOLDEN_RECORDS
    # what the module writes with the codec decodes to the same records
    assert kb.decode_batch(kb.encode_batch(LIBRDKAFKA_GOLDEN_RECORDS,
                                           compression=codec)).records == \
        LIBRDKAFKA_GOLDEN_RECORDS

# --- kafka-python as the reference, every codec ---------------------------------------


class _Snappy:
    """python-snappy's two calls kafka.codec makes (raw snappy blocks), over pyarrow."""

    @staticmethod
    def compress(data):
        return pa.compress(bytes(data), codec="snappy", asbytes=True)

    @staticmethod
    def decompress(data):
        data = bytes(data)
        size = shift = i = 0
        while True:  # the block's uncompressed length: an unsigned base-128 varint
            size |= (data[i] & 0x7F) << shift
            shift += 7
            i += 1
            if data[i - 1] < 0x80:
                break
        return pa.decompress(data, decompressed_size=size, codec="snappy", asbytes=True)


def _stream_decompress(data, codec):
    return pa.CompressedInputStream(pa.BufferReader(bytes(data)), codec).read()


class _Zstd:
    """zstandard's ZstdCompressor / ZstdDecompressor as kafka.codec uses them (3.x reads
    through stream_reader, 2.x through decompress)."""

    ZstdError = OSError

    class ZstdCompressor:
        def compress(self, data):
            return pa.compress(bytes(data), codec="zstd", asbytes=True)

    class ZstdDecompressor:
        def stream_reader(self, source, read_across_frames=True):
            return io.BytesIO(_stream_decompress(source.read(), "zstd"))

        def decompress(self, data, max_output_size=0):
            return _stream_decompress(data, "zstd")


class _Lz4Frame:
    """lz4.frame's compress/decompress (LZ4 frames), over pyarrow."""

    @staticmethod
    def compress(data, **kwargs):
        return pa.compress(bytes(data), codec="lz4", asbytes=True)

    @staticmethod
    def decompress(data):
        return _stream_decompress(data, "lz4")


@pytest.fixture
def kafka_python_codecs(monkeypatch):
    """kafka-python with all four codecs: its gzip is its own; python-snappy, lz4 and
    zstandard are not in the venv, so their primitive calls go to pyarrow while
    kafka-python's own framing code (xerial snappy blocks, the record layout) runs."""
    import kafka.codec as codec
    import kafka.record.default_records as records

    monkeypatch.setattr(codec, "snappy", _Snappy)
    monkeypatch.setattr(codec, "zstd", _Zstd)
    monkeypatch.setattr(codec, "lz4", _Lz4Frame)
    monkeypatch.setattr(records, "lz4_encode", _Lz4Frame.compress)
    monkeypatch.setattr(records, "lz4_decode", _Lz4Frame.decompress)
    return records


def _sample_records(n=300, base=0):
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else b"key-%d" % (i % 13)
        value = None if i % 11 == 5 else (b"value %d " % i) * (i % 9) + bytes(range(i % 256))
        headers = () if i % 3 else (("trace", b"t-%d" % i), ("empty", b""), ("nil", None),
                                    ("ünïcode", b"\xff"))
        ts = T0 + (i * 37) % 1000 - 400  # out of order, some before the first
        out.append(KafkaRecord(base + i, ts, key, value, headers))
    return out


def _kafka_python_batch(records_module, records, codec, **producer):
    builder = records_module.DefaultRecordBatchBuilder(
        magic=2, compression_type=CODEC_IDS[codec], is_transactional=False,
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1), batch_size=1 << 30)
    for r in records:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, list(r.headers))
    return bytes(builder.build())


def _kafka_python_read(records_module, data):
    batch = records_module.DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    return [KafkaRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
            for r in batch]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batch_decodes(kafka_python_codecs, codec):
    records = _sample_records()
    data = _kafka_python_batch(kafka_python_codecs, records, codec, producer_id=77,
                               producer_epoch=2, base_sequence=1000)
    header = kb.validate_client_batch(data)
    assert header.compression == codec  # kafka-python kept the codec (it compressed)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 1000)
    assert header.max_timestamp == max(r.timestamp for r in records)
    decoded = kb.decode_batch(data)
    assert decoded.header == header
    assert decoded.records == records == _kafka_python_read(kafka_python_codecs, data)


@pytest.mark.parametrize("codec", CODECS)
def test_our_batch_reads_in_kafka_python(kafka_python_codecs, codec):
    records = _sample_records(base=5000)
    data = kb.encode_batch(records, compression=codec, base_offset=5000,
                           partition_leader_epoch=9, producer_id=12, producer_epoch=1,
                           base_sequence=40)
    assert _kafka_python_read(kafka_python_codecs, data) == records
    batch = kafka_python_codecs.DefaultRecordBatch(bytearray(data))
    assert (batch.base_offset, batch.leader_epoch, batch.compression_type) == \
        (5000, 9, CODEC_IDS[codec])
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (12, 1, 40)
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert batch.first_timestamp == records[0].timestamp
    assert batch.last_offset_delta == len(records) - 1
    assert kb.decode_batch(data).records == records


def test_raw_snappy_reads_in_kafka_python_and_in_both_framings_here(kafka_python_codecs):
    records = _sample_records(50)
    raw = kb.encode_batch(records, compression="snappy", snappy_framing="raw")
    xerial = kb.encode_batch(records, compression="snappy")
    assert kb.records_section(xerial)[:8].tobytes() == b"\x82SNAPPY\x00"
    assert kb.records_section(raw)[:8].tobytes() != b"\x82SNAPPY\x00"
    for data in (raw, xerial):
        assert _kafka_python_read(kafka_python_codecs, data) == records
        assert kb.decode_batch(data).records == records


def test_xerial_snappy_of_many_blocks(kafka_python_codecs):
    """More than one 32 KiB xerial block, written by kafka-python's framing and ours."""
    records = [KafkaRecord(i, T0, None, bytes([i % 251]) * 5000 + b"%d" % i) for i in range(40)]
    ours = kb.encode_batch(records, compression="snappy")
    theirs = _kafka_python_batch(kafka_python_codecs, records, "snappy")
    for data in (ours, theirs):
        assert kb.decode_batch(data).records == records
    assert _kafka_python_read(kafka_python_codecs, ours) == records


def test_log_append_time_batch_reads_every_timestamp_as_max_timestamp(kafka_python_codecs):
    records = _sample_records(20)
    data = kb.encode_batch(records, log_append_time=T0 + 99_999)
    header = kb.parse_header(data)
    assert header.timestamp_type == 1 and header.max_timestamp == T0 + 99_999
    ours = kb.decode_batch(data).records
    assert [r.timestamp for r in ours] == [T0 + 99_999] * 20
    assert ours == _kafka_python_read(kafka_python_codecs, data)


def test_broker_sets_log_append_time_in_place(kafka_python_codecs):
    """A client's CreateTime batch on a LogAppendTime topic: the broker sets the bit and
    maxTimestamp and redoes the CRC; every reader then gives the records that time."""
    records = _sample_records(20)
    client = kb.encode_batch(records, compression="zstd")
    buf = bytearray(b"prefix" + client)
    kb.set_log_append_time(buf, 6, T0 + 5555)
    data = bytes(buf[6:])
    header = kb.parse_header(data)  # the CRC was redone
    assert (header.timestamp_type, header.max_timestamp) == (1, T0 + 5555)
    assert [r.timestamp for r in kb.decode_batch(data).records] == [T0 + 5555] * 20
    assert _kafka_python_read(kafka_python_codecs, data) == \
        [r._replace(timestamp=T0 + 5555) for r in records]
    with pytest.raises(InvalidArgumentError, match="buf must be a bytearray"):
        kb.set_log_append_time(client, 0, T0)

def test_control_batch_decodes_as_kafka_python_reads_it(kafka_python_codecs):
    commit = KafkaRecord(30, T0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5))
    data = kb.encode_batch([commit], base_offset=30, producer_id=8, producer_epoch=0,
                           transactional=True, control=True)
    batch = kb.decode_batch(data)
    assert batch.header.is_control and batch.header.is_transactional
    assert batch.records == [commit]
    ref = kafka_python_codecs.DefaultRecordBatch(bytearray(data))
    assert ref.is_control_batch and ref.is_transactional
    (marker,) = list(ref)
    assert marker.commit and marker.offset == 30


# --- LZ4 framing as Kafka's Java client requires it -------------------------------------


def test_lz4_frames_are_what_kafkas_java_client_reads():
    """Kafka's Java client (Lz4BlockInputStream) refuses LZ4 frames with dependent blocks
    ("Dependent block stream is unsupported"), reserved bits, or block sizes outside
    64 KiB..4 MiB. pyarrow's own lz4 codec writes dependent blocks, so the module frames
    the blocks itself: version 1, independent 64 KiB blocks, no checksums, and the
    descriptor checksum Kafka's Java client writes for them (0x82)."""
    incompressible = b"".join(crc32c.crc32c(b"%d" % i).to_bytes(4, "big") for i in range(50_000))
    records = [KafkaRecord(0, T0, None, b"abc" * 60_000), KafkaRecord(1, T0, None, incompressible)]
    data = kb.encode_batch(records, compression="lz4")
    frame = kb.records_section(data).tobytes()
    assert frame[:7] == b"\x04\x22\x4d\x18\x60\x40\x82"
    pos, blocks = 7, []
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            break
        stored_raw, size = bool(size & 0x80000000), size & 0x7FFFFFFF
        blocks.append((stored_raw, size))
        pos += size
    assert pos == len(frame)
    assert len(blocks) > 3 and any(raw for raw, _ in blocks) and not all(raw for raw, _ in blocks)
    assert all(size <= 64 * 1024 for _, size in blocks)
    assert kb.decode_batch(data).records == records
    # pyarrow's LZ4 frame decoder checks the descriptor checksum too
    body = pa.CompressedInputStream(pa.BufferReader(frame), "lz4").read()
    assert len(body) > 330_000


# --- errors: corrupt bytes ---------------------------------------------------------------


def _header(data) -> dict:
    return dict(zip(FIELDS, HEADER.unpack_from(data, 0)))


def _patched(data, reseal=True, **fields) -> bytes:
    """``data`` with header fields changed and (unless ``reseal`` is False) its CRC-32C
    redone, computed here with the crc32c package."""
    values = _header(data)
    values.update(fields)
    out = bytearray(data)
    HEADER.pack_into(out, 0, *(values[f] for f in FIELDS))
    if reseal:
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def _with_records(data, section: bytes, **fields) -> bytes:
    """``data``'s header over another records section (lengths and CRC redone)."""
    out = data[:61] + section
    return _patched(out, batch_length=len(out) - 12, **fields)


def _corrupt(match, data, client_error=CorruptRecordError):
    """A reader finds ``data`` corrupt; a client that sends it gets ``client_error``
    (records that do not parse: InvalidRecordError, as Kafka answers them)."""
    with pytest.raises(CorruptRecordError, match=match):
        kb.decode_batch(data)
    with pytest.raises(client_error, match=match):
        kb.validate_client_batch(data)


def test_crc_corruption_is_refused_and_the_stamped_fields_are_outside_it():
    good = kb.encode_batch(_sample_records(10), compression="zstd")
    for pos in (21, 30, 60, 61, len(good) // 2, len(good) - 1):  # attributes .. the end
        bad = bytearray(good)
        bad[pos] ^= 0x01
        _corrupt(r"crc 0x[0-9a-f]{8} does not match the batch's CRC-32C", bytes(bad))
    bad = bytearray(good)
    bad[17] ^= 0xFF  # the crc field itself
    _corrupt("does not match the batch's CRC-32C", bytes(bad))
    # baseOffset and partitionLeaderEpoch are outside the CRC
    assert kb.validate_client_batch(_patched(good, False, base_offset=99,
                                             partition_leader_epoch=4))


def test_truncated_batch_is_refused_naming_what_is_missing():
    good = kb.encode_batch(_sample_records(10), compression="gzip")
    for size in (0, 1, 12, 60):
        _corrupt(rf"{size} bytes, a record batch header needs 61", good[:size])
    for size in (61, 100, len(good) - 1):
        _corrupt(rf"batchLength {len(good) - 12} runs past the data: the batch needs "
                 rf"{len(good)} bytes, {size} are present", good[:size])


def test_bad_magic_length_and_compression_type_are_refused():
    good = kb.encode_batch(_sample_records(3))
    for magic in (0, 1, 3, -1):
        _corrupt(rf"magic {magic}, a Kafka record batch \(v2\) has magic 2",
                 _patched(good, magic=magic))
    _corrupt("batchLength 48 is below the minimum 49", _patched(good, batch_length=48))
    _corrupt("batchLength -5 is below", _patched(good, batch_length=-5))
    for cid in (5, 6, 7):
        _corrupt(rf"unknown compression type {cid}", _patched(good, attributes=cid))


def test_records_that_do_not_match_the_count_or_the_length_are_refused():
    good = kb.encode_batch(_sample_records(5))
    bad = InvalidRecordError
    _corrupt(r"record 5: length: the records end inside it \(recordCount 6\)",
             _patched(good, record_count=6, last_offset_delta=5), bad)
    _corrupt(r"bytes remain after the last of its 4 records",
             _patched(good, record_count=4, last_offset_delta=3), bad)
    _corrupt(r"recordCount 1000 cannot fit in", _patched(good, record_count=1000,
                                                         last_offset_delta=999), bad)
    section = kb.records_section(good).tobytes()
    _corrupt("bytes remain after the last", _with_records(good, section + b"\x00"), bad)
    _corrupt(r"record 4: length: length (\d+) is not within \[6, \d+\] \(the bytes left\)",
             _with_records(good, section[:-1]), bad)


def test_compressed_records_that_do_not_decompress_are_refused():
    plain = kb.encode_batch(_sample_records(5))
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        _corrupt(rf"{codec} records cannot be decompressed",
                 _patched(plain, attributes=CODEC_IDS[codec]))
    zstd = kb.encode_batch(_sample_records(50), compression="zstd")
    section = kb.records_section(zstd).tobytes()
    _corrupt("zstd records cannot be decompressed", _with_records(zstd, section[:-7]))


# --- a record encoder from Kafka's spec, for batches no client library would build --------


def _varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)  # zigzag
    out = bytearray()
    while True:
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append(v & 0x7F | 0x80)
        v >>= 7


def _field(value) -> bytes:
    return _varint(-1) if value is None else _varint(len(value)) + value


def _record(offset_delta, ts_delta=0, key=None, value=b"v", headers=(), length_fix=0) -> bytes:
    body = b"\x00" + _varint(ts_delta) + _varint(offset_delta) + _field(key) + _field(value)
    body += _varint(len(headers))
    for hk, hv in headers:
        body += _field(hk) + _field(hv)
    return _varint(len(body) + length_fix) + body


def _batch(records: list[bytes], *, count=None, last_offset_delta=None, attributes=0,
           base_ts=T0, max_ts=None, producer_id=-1, producer_epoch=-1, base_sequence=-1,
           compress=None) -> bytes:
    section = b"".join(records)
    if compress is not None:
        section = compress(section)
    count = len(records) if count is None else count
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    header = HEADER.pack(0, 49 + len(section), -1, 2, 0, attributes, lod, base_ts,
                         base_ts if max_ts is None else max_ts, producer_id,
                         producer_epoch, base_sequence, count)
    out = bytearray(header + section)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_spec_encoder_agrees_with_ours():
    records = [_record(0, 0, b"k", b"v", ((b"h", b"x"),)), _record(1, 3, None, None)]
    data = _batch(records, max_ts=T0 + 3)
    assert kb.decode_batch(data).records == [
        KafkaRecord(0, T0, b"k", b"v", (("h", b"x"),)), KafkaRecord(1, T0 + 3, None, None, ())]
    assert kb.encode_batch(kb.decode_batch(data).records) == data


def _refused(match, data, **kwargs):
    with pytest.raises(InvalidRecordError, match=match):
        kb.validate_client_batch(data, **kwargs)


def test_client_may_not_set_the_brokers_attribute_bits():
    records = [_record(0), _record(1)]
    _refused(r"attributes 0x0020 set the control bit \(0x20\): clients are not allowed to "
             r"write control records", _batch(records, attributes=0x20))
    _refused(r"attributes 0x0008 set the timestamp-type bit \(0x08\): only the broker "
             r"stamps LogAppendTime", _batch(records, attributes=0x08))
    _refused(r"attributes 0x0040 set the delete-horizon bit \(0x40\)",
             _batch(records, attributes=0x40))
    _refused(r"attributes 0x0010 set the transactional bit \(0x10\)",
             _batch(records, attributes=0x10, producer_id=5, producer_epoch=0,
                    base_sequence=0))


def test_transactional_batch_when_allowed_needs_a_producer_id():
    records = [_record(0), _record(1)]
    ok = _batch(records, attributes=0x10, producer_id=5, producer_epoch=0, base_sequence=0)
    assert kb.validate_client_batch(ok, allow_transactional=True).is_transactional
    _refused(r"transactional batch without a producer id \(producerId -1\)",
             _batch(records, attributes=0x10), allow_transactional=True)


def test_record_count_and_last_offset_delta_must_agree():
    _refused(r"invalid recordCount 0: a batch holds at least one record",
             _batch([], count=0, last_offset_delta=-1))
    _refused(r"invalid recordCount -3", _batch([], count=-3, last_offset_delta=-4))
    for lod in (0, 1, 3, 1000, 2 ** 31 - 1, -1, -(2 ** 31)):
        _refused(rf"inconsistent offset range and count of records: lastOffsetDelta "
                 rf"{lod} with recordCount 3 \(.*lastOffsetDelta must be 2\)",
                 _batch([_record(0), _record(1), _record(2)], last_offset_delta=lod))


@pytest.mark.parametrize("deltas", [[0, 1, 1000], [0, 2, 1], [0, 0, 1], [1, 2, 3],
                                    [0, 1, -2], [-1, 0, 1]])
def test_record_offset_deltas_must_be_0_to_n_minus_1_in_order(deltas):
    """The forged offsets of issue #33 item 1, in Kafka's own batch format: the header is
    consistent (lastOffsetDelta 2, recordCount 3), the records' deltas are not."""
    data = _batch([_record(d) for d in deltas])
    bad = next(i for i, d in enumerate(deltas) if d != i)
    _refused(rf"record {bad} has offsetDelta {deltas[bad]}, expected {bad}: a client "
             rf"batch's records have incremental offsets", data)
    # a reader still decodes it, at the offsets it carries (it was never acknowledged)
    assert [r.offset for r in kb.decode_batch(data).records] == deltas


def test_compressed_records_with_forged_offsets_are_refused_too():
    section = [_record(0), _record(5), _record(2)]
    data = _batch(section, attributes=1, compress=lambda b: kb.compress_records(b, "gzip"))
    _refused("record 1 has offsetDelta 5, expected 1", data)


def test_producer_id_without_a_sequence_is_refused():
    _refused(r"invalid baseSequence -1 in a batch with producerId 7",
             _batch([_record(0)], producer_id=7, producer_epoch=0))
    # the base offset and leader epoch a client sends are ignored (the broker stamps)
    idempotent = _patched(_batch([_record(0)], producer_id=7, producer_epoch=0,
                                 base_sequence=0), False, base_offset=-55,
                          partition_leader_epoch=12345)
    assert kb.validate_client_batch(idempotent).base_offset == -55


def test_max_timestamp_must_be_the_largest_record_timestamp():
    records = [_record(0, 0), _record(1, 50), _record(2, -20)]
    assert kb.validate_client_batch(_batch(records, max_ts=T0 + 50))
    for max_ts in (T0, T0 + 49, T0 + 51, -1):
        _refused(rf"maxTimestamp {max_ts} is not the largest record timestamp {T0 + 50}",
                 _batch(records, max_ts=max_ts))


def test_compacted_topic_refuses_a_record_without_a_key():
    data = _batch([_record(0, key=b"k"), _record(1, key=None)])
    assert kb.validate_client_batch(data)
    _refused(r"record 1 has no key: a compacted topic \(cleanup.policy compact\) cannot "
             r"accept a record without a key", data, compacted=True)
    assert kb.validate_client_batch(_batch([_record(0, key=b"")]), compacted=True)

def test_timestamps_outside_the_brokers_bounds_are_refused():
    records = [_record(0, 0), _record(1, 50), _record(2, -20)]
    data = _batch(records, max_ts=T0 + 50)
    now = T0 + 1000
    assert kb.validate_client_batch(data, now_ms=now, timestamp_before_max_ms=1020,
                                    timestamp_after_max_ms=0)
    _refused(rf"timestamp {T0 - 20} of a record is more than "
             rf"message.timestamp.before.max.ms 1019 before the broker's time {now}",
             data, now_ms=now, timestamp_before_max_ms=1019)
    _refused(rf"timestamp {T0 + 50} of a record is more than "
             rf"message.timestamp.after.max.ms 10 after the broker's time {T0 + 30}",
             data, now_ms=T0 + 30, timestamp_after_max_ms=10)


@pytest.mark.parametrize("record, match", [
    (_record(0, length_fix=1), r"record 0: length: length 8 is not within \[6, 7\]"),
    (_record(0, length_fix=-1), "record 0: length: its fields take 7 bytes, its length says 6"),
    (_varint(3) + b"\x00" * 10, r"record 0: length: length 3 is not within \[6, 10\]"),
    (_varint(-5) + b"\x00" * 6, r"record 0: length: length -5 is not within"),
    (b"\xff" * 20, r"record 0: length is malformed \(a varint too long"),
    (_varint(9) + b"\x00" + b"\xff" * 12, r"record 0: timestampDelta is malformed"),
    (_varint(7) + b"\x00\x00\x00" + _varint(-2) + b"\x00\x00\x00",
     r"record 0: keyLength: keyLength -2"),
    (_varint(7) + b"\x00\x00\x00\x00" + _varint(-3) + b"\x00\x00",
     r"record 0: valueLength: valueLength -3"),
    (_varint(7) + b"\x00\x00\x00" + _varint(60) + b"\x00\x00\x00",
     r"record 0: keyLength: keyLength 60 runs past the record"),
    (_varint(8) + b"\x00\x00\x00\x00\x00" + _varint(1000) + b"\x00\x00",
     r"record 0: headersCount: headersCount 1000 does not fit the record"),
    (_record(0, headers=((b"\xff\xfe", b"x"),)), r"record 0: header 0 key is malformed"),
    (_record(0, headers=((None, b"x"),)), r"record 0: header 0 key: headerKeyLength -1"),
])
def test_records_that_do_not_parse_are_corrupt(record, match):
    data = _batch([record])
    _corrupt(match, data, InvalidRecordError)


def test_a_zip_bomb_stops_at_the_bound():
    """A client's 1 GiB of zeros, compressed to a few hundred KiB: decompression stops at
    max_decompressed_bytes, and the Arrow memory pool never held the gigabyte."""
    pool = pa.default_memory_pool()
    for codec in ("zstd", "lz4", "gzip"):
        sink = pa.BufferOutputStream()
        size = (1 << 30) if codec != "gzip" else (256 << 20)
        with pa.CompressedOutputStream(sink, codec) as out:
            chunk = bytes(1 << 20)
            for _ in range(size >> 20):
                out.write(chunk)
        bomb = _batch([_record(0)], attributes=CODEC_IDS[codec],
                      compress=lambda _, s=sink.getvalue().to_pybytes(): s)
        assert len(bomb) * 50 < size
        for call in (kb.decode_batch, kb.validate_client_batch):
            with pytest.raises(RecordTooLargeError, match=(
                    "records decompress to more than max_decompressed_bytes 1048576")):
                call(bomb, max_decompressed_bytes=1 << 20)
        assert pool.max_memory() < 512 << 20
    # raw snappy states its length first: a forged 4 GiB is refused before allocating
    forged = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    for data in (forged, b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(forged)) + forged):
        bomb = _batch([_record(0)], attributes=2, compress=lambda _, d=data: d)
        with pytest.raises(RecordTooLargeError):
            kb.decode_batch(bomb, max_decompressed_bytes=64 << 20)
    # an uncompressed batch larger than the bound is refused the same way
    with pytest.raises(RecordTooLargeError):
        kb.decode_batch(_batch([_record(0, value=bytes(5000))]), max_decompressed_bytes=4096)


# --- stamping --------------------------------------------------------------------------


def test_stamp_patches_base_offset_and_leader_epoch_in_place_crc_still_valid(
        kafka_python_codecs):
    first = kb.encode_batch(_sample_records(5), compression="lz4")
    second = KAFKA_PYTHON_GZIP
    buf = bytearray(first + second)
    kb.stamp(buf, len(first), 1_000_005, 7)
    kb.stamp(memoryview(buf)[:len(first)], 0, 1_000_000, 7)
    got = list(kb.iter_batches(buf))
    assert [pos for pos, _ in got] == [0, len(first)]
    assert [(h.base_offset, h.partition_leader_epoch) for _, h in got] == \
        [(1_000_000, 7), (1_000_005, 7)]
    second_stamped = bytes(buf[len(first):])
    assert kb.validate_client_batch(second_stamped)
    assert [r.offset for r in kb.decode_batch(second_stamped).records] == \
        [1_000_005 + i for i in range(4)]
    assert [r.offset for r in _kafka_python_read(kafka_python_codecs, second_stamped)] == \
        [1_000_005 + i for i in range(4)]
    assert kb.stamped(second, 1_000_005, 7) == second_stamped
    assert second_stamped[16:] == second[16:]  # nothing else moved


def test_stamp_refuses_what_it_cannot_patch():
    data = kb.encode_batch(_sample_records(2))
    with pytest.raises(InvalidArgumentError, match="buf must be a bytearray or a writable"):
        kb.stamp(data, 0, 1, 1)
    with pytest.raises(InvalidArgumentError, match="no Kafka record batch header at position 5"):
        kb.stamp(bytearray(data[:60]), 5, 1, 1)
    with pytest.raises(InvalidArgumentError, match="base_offset 9223372036854775808 does not fit"):
        kb.stamp(bytearray(data), 0, 2 ** 63, 1)
    with pytest.raises(InvalidArgumentError, match="partition_leader_epoch must be an int"):
        kb.stamp(bytearray(data), 0, 1, "1")


def test_encode_refuses_bad_arguments():
    rec = KafkaRecord(0, T0, None, b"v")
    for kwargs, match in [
        ({"compression": "brotli"}, "unknown compression type 'brotli'"),
        ({"snappy_framing": "hadoop", "compression": "snappy"}, "unknown snappy_framing"),
        ({"producer_epoch": 1 << 15}, "producer_epoch 32768 does not fit in a signed 16-bit"),
        ({"last_offset_delta": -1}, "last_offset_delta -1 is below"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            kb.encode_batch([rec], **kwargs)
    for records, match in [
        ([], "needs at least one record"),
        ([rec, rec], r"record 1's offset 0 does not follow 0"),
        ([KafkaRecord(-1, T0, None, b"v")], r"record 0's offset -1 does not follow -1"),
        ([KafkaRecord(2 ** 31, T0, None, b"v")], "more than 2\\*\\*31-1 after base_offset"),
        ([KafkaRecord(0, T0, "key", b"v")], "record 0's key must be bytes or None, got str"),
        ([KafkaRecord(0, T0, None, b"v", (("h", "x"),))], "header 'h' value must be bytes"),
        ([KafkaRecord(0, T0, None, b"v", ((b"h", b"x"),))], "header key must be a str"),
        (["value"], "record 0 must be a KafkaRecord"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            kb.encode_batch(records)


def test_compacted_batch_keeps_its_offsets_and_last_offset_delta():
    """The log cleaner's batches keep their records' original offsets (gaps) and
    lastOffsetDelta; a reader decodes them at those offsets, a client may not send one."""
    records = [KafkaRecord(103, T0, b"a", b"1"), KafkaRecord(107, T0, b"b", b"2")]
    data = kb.encode_batch(records, base_offset=100, last_offset_delta=9, compression="zstd")
    header = kb.parse_header(data)
    assert (header.last_offset_delta, header.record_count, header.next_offset) == (9, 2, 110)
    assert kb.decode_batch(data).records == records
    _refused("lastOffsetDelta 9 with recordCount 2", data)


# --- fuzz ------------------------------------------------------------------------------

_SEEDS = [kb.encode_batch(_sample_records(12), compression=c, producer_id=3,
                          producer_epoch=0, base_sequence=0) for c in CODECS] + \
         [kb.encode_batch(_sample_records(12), compression="snappy", snappy_framing="raw"),
          KAFKA_PYTHON_PLAIN, KAFKA_PYTHON_GZIP]


def _only_module_errors(data):
    for call in (lambda: kb.decode_batch(data, max_decompressed_bytes=1 << 20),
                 lambda: kb.decode_batch(data, verify_crc=False, max_decompressed_bytes=1 << 20)):
        try:
            call()
        except DECODE_ERRORS:
            pass
    try:
        kb.validate_client_batch(data, max_decompressed_bytes=1 << 20, now_ms=T0,
                                 timestamp_before_max_ms=10 ** 9)
    except VALIDATE_ERRORS:
        pass
    try:
        for _pos, _header_ in kb.iter_batches(data, verify_crc=False):
            pass
    except DECODE_ERRORS:
        pass


@pytest.mark.timeout(240)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    _only_module_errors(data)
    _only_module_errors(HEADER.pack(0, len(data) + 49, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1)
                        + data)


@pytest.mark.timeout(240)
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(_SEEDS))),
       edits=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), min_size=1,
                      max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 10 ** 6)),
       reseal=st.booleans())
def test_fuzz_mutated_batches(seed, edits, cut, reseal):
    data = bytearray(_SEEDS[seed])
    for pos, value in edits:
        data[pos % len(data)] = value
    if cut is not None:
        data = data[:cut % (len(data) + 1)]
    if reseal and len(data) >= 61:  # let the mutation reach the codec and the records
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    _only_module_errors(bytes(data))


@pytest.mark.timeout(240)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(_SEEDS))), data=st.data())
def test_fuzz_mutated_records_sections(seed, data):
    """Mutate the decompressed records and compress them again: the record parser sees
    every mutation behind a valid CRC and a valid codec stream."""
    original = _SEEDS[seed]
    header = kb.parse_header(original)
    section = bytearray(kb.decompress_records(original))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(section) - 1))
        section[pos] = data.draw(st.integers(0, 255))
    packed = kb.compress_records(bytes(section), header.compression)
    _only_module_errors(_with_records(original, packed))

