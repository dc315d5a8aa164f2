"""Frame codec: round trips for every codec, and a fuzz that only CorruptRecordError
ever comes out of corrupt input (never another exception, never a silent wrong decode)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    RecordTooLargeError,
    SchemaMismatchError,
    SparklogError,
)
from sparklog.format.frame import (
    OFFSET_DELTA_COLUMN,
    RAW_SCHEMA,
    TIMESTAMP_COLUMN,
    decode_frame,
    encode_frame,
    iter_frames,
    offset_range,
    raw_batch,
    record_schema,
    reseal,
    set_log_append_time,
    stamp,
    to_record_batch,
    validate_frame,
)
from sparklog.format.header import (
    CRC_START,
    HEADER_SIZE,
    LAST_OFFSET_DELTA,
    LENGTH,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_COUNT,
    FrameHeader,
    unpack_header,
)

CODECS = ["none", "lz4", "zstd"]
FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- strategies ------------------------------------------------------------------------

binaries = st.one_of(st.none(), st.binary(max_size=40))
headers_st = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
             max_size=3))
timestamps_ms = st.integers(min_value=0, max_value=253402300799999)  # up to year 9999


@st.composite
def raw_records(draw):
    n = draw(st.integers(min_value=1, max_value=20))
    values = draw(st.lists(binaries, min_size=n, max_size=n))
    keys = draw(st.lists(binaries, min_size=n, max_size=n))
    headers = draw(st.lists(headers_st, min_size=n, max_size=n))
    ts = draw(st.lists(timestamps_ms, min_size=n, max_size=n))
    return keys, values, headers, ts


_TYPED = [
    (pa.int64(), st.integers(min_value=-2**63, max_value=2**63 - 1)),
    (pa.int8(), st.integers(min_value=-128, max_value=127)),
    (pa.float64(), st.floats(allow_nan=False)),
    (pa.bool_(), st.booleans()),
    (pa.string(), st.text(max_size=12)),
    (pa.binary(), st.binary(max_size=12)),
    (pa.date32(), st.dates(min_value=dt.date(1, 1, 1))),
    (pa.timestamp("us", tz="UTC"),
     st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1),
                  timezones=st.just(dt.timezone.utc))),
    (pa.decimal128(12, 3), st.decimals(min_value=-10**8, max_value=10**8, places=3,
                                       allow_nan=False, allow_infinity=False)),
    (pa.list_(pa.int32()), st.lists(st.integers(-2**31, 2**31 - 1), max_size=4)),
    (pa.struct([("a", pa.int32()), ("b", pa.string())]),
     st.fixed_dictionaries({"a": st.integers(-2**31, 2**31 - 1), "b": st.text(max_size=5)})),
    (pa.map_(pa.string(), pa.int64()),
     st.dictionaries(st.text(max_size=4), st.integers(-10, 10), max_size=3)
     .map(lambda d: list(d.items()))),
]


@st.composite
def typed_tables(draw):
    ncols = draw(st.integers(min_value=1, max_value=4))
    picks = draw(st.lists(st.sampled_from(range(len(_TYPED))), min_size=ncols,
                          max_size=ncols))
    n = draw(st.integers(min_value=1, max_value=15))
    arrays, fields = [], []
    for i, k in enumerate(picks):
        typ, vals = _TYPED[k]
        nullable = draw(st.booleans())
        col = draw(st.lists(st.one_of(st.none(), vals) if nullable else vals,
                            min_size=n, max_size=n))
        arrays.append(pa.array(col, typ))
        fields.append(pa.field(f"c{i}", typ, nullable=nullable))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _sample_frame(codec="none", n=5) -> bytes:
    batch = raw_batch([b"v%d" % i for i in range(n)], keys=[b"k"] * n,
                      headers=[[("h", b"x")]] * n)
    return encode_frame(batch, timestamps=list(range(1000, 1000 + n)), compression=codec,
                        producer_id=7, producer_epoch=1, base_sequence=3)


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=30, deadline=None)
@given(rec=raw_records(), base=st.integers(0, 2**62), epoch=st.integers(-1, 2**31 - 1))
def test_raw_records_round_trip(codec, rec, base, epoch):
    keys, values, headers, ts = rec
    buf = encode_frame(raw_batch(values, keys=keys, headers=headers), timestamps=ts,
                       compression=codec, base_offset=base, leader_epoch=epoch)
    frame = decode_frame(buf)
    h = frame.header
    assert (h.base_offset, h.leader_epoch, h.record_count) == (base, epoch, len(values))
    assert h.codec == codec and h.magic == MAGIC and h.size == len(buf)
    assert h.first_timestamp == ts[0] and h.max_timestamp == max(ts)
    assert h.last_offset == base + len(values) - 1
    batch = frame.batch()
    assert record_schema(batch.schema) == RAW_SCHEMA
    assert batch.column("value").to_pylist() == values
    assert batch.column("key").to_pylist() == keys
    want_headers = [None if hs is None else [{"key": k, "value": v} for k, v in hs]
                    for hs in headers]
    assert batch.column("headers").to_pylist() == want_headers
    assert batch.column(TIMESTAMP_COLUMN).cast(pa.int64()).to_pylist() == ts
    assert frame.offsets().to_pylist() == list(range(base, base + len(values)))


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=30, deadline=None)
@given(table=typed_tables(), ts=timestamps_ms)
def test_typed_tables_round_trip(codec, table, ts):
    buf = encode_frame(table, timestamps=[ts] * table.num_rows, compression=codec)
    batch = decode_frame(buf).batch()
    assert record_schema(batch.schema) == table.schema
    records = batch.select(table.schema.names)
    assert pa.Table.from_batches([records]).equals(table)
    assert batch.schema.field(TIMESTAMP_COLUMN).nullable is False


@pytest.mark.parametrize("codec", CODECS)
def test_explicit_offsets_round_trip(codec):
    deltas = [0, 3, 4, 9]
    buf = encode_frame(raw_batch([b"a", b"b", b"c", b"d"]), timestamps=[1, 2, 3, 4],
                       compression=codec, base_offset=100, offset_deltas=deltas)
    frame = decode_frame(buf)
    assert frame.header.explicit_offsets and frame.header.last_offset == 109
    assert frame.offsets().to_pylist() == [100, 103, 104, 109]
    assert frame.batch().column(OFFSET_DELTA_COLUMN).to_pylist() == deltas


@pytest.mark.parametrize("count", [0, 1, 10, 4096, 4097, 70_000])
def test_offset_range_small_and_large(count):
    """Small ranges are filled in Python, large ones by a compute kernel: both give the
    int64 offsets from the first on, with no nulls."""
    got = offset_range(2**40, count)
    assert got.type == pa.int64() and got.null_count == 0 and len(got) == count
    assert got.to_pylist() == list(range(2**40, 2**40 + count))


def test_flags_and_producer_fields_round_trip():
    buf = encode_frame(raw_batch([b"x"]), timestamps=[5], producer_id=2**40,
                       producer_epoch=3, base_sequence=77, control=True, transactional=True,
                       log_append_time=True)
    h = decode_frame(buf).header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (2**40, 3, 77)
    assert h.is_control and h.log_append_time and h.timestamp_type == 1


def test_iter_frames_walks_a_segment():
    frames = [_sample_frame(c, n) for c, n in [("none", 1), ("lz4", 3), ("zstd", 2)]]
    seg = bytearray()
    for i, f in enumerate(frames):
        b = bytearray(f)
        stamp(b, 0, 10 * i, 4)
        seg += b
    got = list(iter_frames(bytes(seg)))
    assert [f.header.base_offset for f in got] == [0, 10, 20]
    assert [f.header.record_count for f in got] == [1, 3, 2]
    assert all(f.header.leader_epoch == 4 for f in got)
    assert list(iter_frames(b"")) == []


# --- stamping ----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(base=st.integers(-2**63, 2**63 - 1), epoch=st.integers(-2**31, 2**31 - 1),
       codec=st.sampled_from(CODECS))
def test_stamp_keeps_crc_valid(base, epoch, codec):
    original = _sample_frame(codec)
    buf = bytearray(b"PREFIX" + original)
    stamp(buf, 6, base, epoch)
    h = validate_frame(buf, 6)
    assert (h.base_offset, h.leader_epoch) == (base, epoch)
    assert bytes(buf[6 + CRC_START:]) == original[CRC_START:]  # body and CRC untouched
    assert decode_frame(bytes(buf), 6).batch().equals(decode_frame(original).batch())


def test_set_log_append_time_keeps_crc_valid():
    buf = bytearray(_sample_frame("zstd"))
    set_log_append_time(buf, 0, 123456789)
    h = validate_frame(buf)
    assert h.log_append_time and h.max_timestamp == 123456789


# --- size limit ----------------------------------------------------------------------------


def test_record_too_large():
    buf = _sample_frame()
    assert validate_frame(buf, max_size=len(buf)).size == len(buf)
    with pytest.raises(RecordTooLargeError) as ei:
        validate_frame(buf, max_size=len(buf) - 1)
    assert str(len(buf)) in str(ei.value) and str(len(buf) - 1) in str(ei.value)


# --- corruption fuzz -------------------------------------------------------------------------


def _decode_everything(buf, pos=0):
    """Run every entry point over ``buf``; return the decoded frames (or raise)."""
    validate_frame(buf, pos)
    frame = decode_frame(buf, pos)
    batch = frame.batch()
    frames = list(iter_frames(buf, pos))
    return frame, batch, frames


@pytest.mark.parametrize("codec", CODECS)
def test_every_single_byte_flip_is_detected_or_harmless(codec):
    good = _sample_frame(codec)
    ref = decode_frame(good)
    ref_batch = ref.batch()
    for i in range(len(good)):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(good)
            bad[i] ^= flip
            if 0 <= i < 8 or 12 <= i < 16:
                # base offset / leader epoch: broker-stamped, outside the CRC by design
                frame, batch, _ = _decode_everything(bytes(bad))
                assert batch.equals(ref_batch)
                assert frame.header.with_(base_offset=0, leader_epoch=-1) == ref.header
                continue
            with pytest.raises(CorruptRecordError):
                _decode_everything(bytes(bad))


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_is_detected(codec):
    good = _sample_frame(codec) + _sample_frame(codec, 2)
    first = validate_frame(good).size
    for cut in range(len(good)):
        data = good[:cut]
        if cut == first:  # exactly one whole frame: a valid, shorter segment
            assert len(list(iter_frames(data))) == 1
            continue
        if cut == 0:
            assert list(iter_frames(data)) == []
        with pytest.raises(CorruptRecordError) as ei:
            list(iter_frames(data)) if cut > first else _decode_everything(data)
        assert ei.value.position in (0, first)


@FUZZ
@given(data=st.binary(max_size=400), pos=st.integers(0, 8))
def test_random_bytes_raise_only_corrupt_record(data, pos):
    try:
        _decode_everything(data, pos)
    except CorruptRecordError:
        return
    raise AssertionError("random bytes decoded as a valid frame")


def _reseal(buf: bytearray) -> bytes:
    """Recompute length and CRC so that only the Arrow body decoder can notice."""
    LENGTH.write(buf, 0, len(buf) - LOG_OVERHEAD)
    reseal(buf)
    return bytes(buf)


@FUZZ
@given(body=st.binary(max_size=600))
def test_crc_valid_garbage_body_raises_only_corrupt_record(body):
    header = FrameHeader(0, 0, -1, MAGIC, 0, 0, 0, 0, 0, -1, -1, -1, 1)
    buf = _reseal(bytearray(header.pack()) + body)
    try:  # header and CRC are fine: the body check or the decode refuses it
        decode_frame(buf).batch()
    except CorruptRecordError:
        return
    raise AssertionError("garbage body decoded")


@FUZZ
@given(data=st.data(), codec=st.sampled_from(CODECS))
def test_resealed_body_mutations_never_escape_as_other_errors(data, codec):
    good = bytearray(_sample_frame(codec))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(HEADER_SIZE, len(good) - 1))
        good[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(HEADER_SIZE, len(good)))
    buf = _reseal(good[:cut])
    try:
        frame = decode_frame(buf)
        batch = frame.batch()
    except CorruptRecordError:
        return
    # decoded: the batch must be internally valid and match the header's count
    batch.validate(full=True)
    assert batch.num_rows == frame.header.record_count


def test_corrupt_error_names_position_and_path():
    seg = _sample_frame() + b"\x00" * 10
    with pytest.raises(CorruptRecordError) as ei:
        list(iter_frames(seg, path="t/0/00000000000000000000.log"))
    assert ei.value.position == len(_sample_frame())
    assert ei.value.path == "t/0/00000000000000000000.log"
    assert "00000000000000000000.log" in str(ei.value)


def test_record_count_mismatch_with_body_is_corrupt():
    good = bytearray(_sample_frame("none", 5))
    RECORD_COUNT.write(good, 0, 4)  # header claims 4 records, body has 5
    LAST_OFFSET_DELTA.write(good, 0, 3)
    with pytest.raises(CorruptRecordError, match="header says 4 records, the Arrow body holds 5"):
        decode_frame(_reseal(good))  # found from the body's metadata, before any decode


# --- bad arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize("call, words", [
    (lambda: encode_frame(raw_batch([b"x"]), compression="gzip"), "gzip"),
    (lambda: encode_frame(raw_batch([b"x"]), compression=7), "compression"),
    (lambda: encode_frame("not a batch"), "str"),
    (lambda: encode_frame(None), "NoneType"),
    (lambda: encode_frame([b"a", b"b"]), "record 0 is of type bytes, not a dict"),
    (lambda: encode_frame([{"value": b"a"}, "b"]), "record 1 is of type str"),
    (lambda: encode_frame(raw_batch([])), "at least one record"),
    (lambda: encode_frame(raw_batch([b"x"]), timestamps=[1, 2]), "timestamps"),
    (lambda: encode_frame(raw_batch([b"x"]), timestamps=[None]), "null"),
    (lambda: encode_frame(raw_batch([b"x", b"y"]), offset_deltas=[0]), "offset deltas"),
    (lambda: encode_frame(raw_batch([b"x"]), base_offset="0"), "base_offset"),
    (lambda: encode_frame(raw_batch([b"x"]), leader_epoch=2**40), "leader_epoch"),
    (lambda: validate_frame("a string"), "bytes-like"),
    (lambda: validate_frame(None), "bytes-like"),
    (lambda: validate_frame(_sample_frame(), -1), "pos"),
    (lambda: decode_frame(12345), "bytes-like"),
    (lambda: list(iter_frames(None)), "bytes-like"),
    (lambda: stamp(_sample_frame(), 0, 1, 1), "bytearray"),
    (lambda: stamp(bytearray(10), 0, 1, 1), "frame"),
])
def test_bad_arguments_raise_invalid_argument(call, words):
    with pytest.raises(InvalidArgumentError) as ei:
        call()
    assert isinstance(ei.value, SparklogError)
    assert words in str(ei.value)


def test_schema_mismatch():
    schema = pa.schema([("a", pa.int64())])
    with pytest.raises(SchemaMismatchError):
        to_record_batch([{"b": 1}], schema)
    with pytest.raises(SchemaMismatchError):
        to_record_batch(pa.table({"a": ["x"]}), schema)
    assert to_record_batch(pa.table({"a": pa.array([1], pa.int32())}), schema).schema == schema


def test_restamp_producer_rewrites_the_producer_fields_and_the_crc():
    """The producer's frames get their id, epoch and sequence after encoding: a copy with
    those fields and a valid CRC, every other byte unchanged, the original untouched."""
    from sparklog.format.frame import restamp_producer
    from sparklog.format.header import BASE_SEQUENCE, CRC, PRODUCER_EPOCH, PRODUCER_ID

    original = _sample_frame("lz4", 4)
    out = restamp_producer(original, 77, 5, 123)
    header = validate_frame(out)  # CRC and body checked
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 5, 123)
    assert unpack_header(original).producer_id == 7  # as _sample_frame made it
    changed = {i for i in range(len(out)) if out[i] != original[i]}
    allowed = set()
    for field in (CRC, PRODUCER_ID, PRODUCER_EPOCH, BASE_SEQUENCE):
        allowed |= set(range(field.position, field.position + field.size))
    assert changed and changed <= allowed
    with pytest.raises(InvalidArgumentError, match="producer_epoch 70000 does not fit"):
        restamp_producer(original, 1, 70000, 0)
    with pytest.raises(InvalidArgumentError, match="not a frame: 10 bytes"):
        restamp_producer(original[:10], 1, 1, 0)


def test_encode_body_writes_the_stream_writers_bytes():
    """Uncompressed bodies are assembled from a cached schema message: byte for byte
    what Arrow's stream writer writes, for raw, typed (with metadata), sliced nested
    and dictionary columns alike."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from sparklog.format.frame import encode_body, raw_batch

    def written(batch):
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue().to_pybytes()

    typed = pa.record_batch({"a": pa.array([1, None]), "l": pa.array([[1], None]),
                             "st": pa.array([{"q": 1.5}, None])})
    batches = [raw_batch([b"v", b"w"], [None, b"k"], [[("h", b"x")], None]),
               typed, typed.replace_schema_metadata({"k": "v"}), typed.slice(1, 1),
               pa.record_batch({"d": pa.array(["a", "b", "a"]).dictionary_encode()})]
    for batch in batches + batches:  # the second time from the cache
        assert encode_body(batch).to_pybytes() == written(batch)
