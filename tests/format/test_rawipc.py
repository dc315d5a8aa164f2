"""A producer's frames of raw records written and read without pyarrow
(sparklog.format.rawipc): the same bytes as pyarrow's writer for any records, the same
lists as pyarrow's reader, and pyarrow's path for whatever the direct one does not cover
(other layouts, damaged bodies)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.errors import CorruptRecordError, InvalidArgumentError
from sparklog.format.frame import (
    RAW_BODY_SCHEMA,
    RAW_COLUMNS_MAX,
    decode_frame,
    encode_frame,
    encode_raw_frame,
    raw_batch,
    reseal,
)
from sparklog.format.header import HEADER_SIZE
from sparklog.format.rawipc import record_batch_message

optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
int64 = st.integers(-(2 ** 63), 2 ** 63 - 1)


def pyarrow_frame(values, keys=None, headers=None, *, timestamps, compression="none"):
    return encode_frame(raw_batch(values, keys, headers), timestamps=timestamps,
                        compression=compression)


def draw_records(data, most: int, stamp=int64):
    """n, values, keys (None: every key null) and timestamps of a batch of records."""
    n = data.draw(st.integers(1, most), label="records")
    values = data.draw(st.lists(optional_bytes, min_size=n, max_size=n), label="values")
    keys = data.draw(st.one_of(st.none(), st.lists(optional_bytes, min_size=n, max_size=n)),
                     label="keys")
    return n, values, keys, data.draw(st.lists(stamp, min_size=n, max_size=n))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_frames_are_the_bytes_pyarrow_writes(data):
    n, values, keys, stamps = draw_records(data, 70, st.integers(0, 2 ** 45))
    frame = encode_raw_frame(values, keys, timestamps=stamps)
    assert frame == pyarrow_frame(values, keys, timestamps=stamps)
    batch = decode_frame(frame).batch()
    batch.validate(full=True)
    assert batch.column("value").to_pylist() == values
    assert batch.column("key").to_pylist() == (keys or [None] * n)


def test_the_message_is_written_without_pyarrow_for_a_producers_batch():
    """The direct path is taken (not a fallback that happens to give the same bytes)."""
    values, keys = [b"v" * 100] * 10, [b"k", None] * 5
    message = record_batch_message(RAW_BODY_SCHEMA, values, keys, list(range(10)))
    assert message is not None
    batch = pa.ipc.read_message(pa.py_buffer(message))
    assert pa.ipc.read_record_batch(batch, RAW_BODY_SCHEMA).column("key").to_pylist() == keys


@pytest.mark.parametrize("values", [[bytearray(b"a"), b"b"], [memoryview(b"a")]])
def test_values_other_than_bytes_take_pyarrows_path(values):
    stamps = [1] * len(values)
    assert record_batch_message(RAW_BODY_SCHEMA, values, None, stamps) is None
    assert encode_raw_frame(values, timestamps=stamps) == pyarrow_frame(values, timestamps=stamps)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_headers_and_compression_take_pyarrows_path(codec):
    values, headers, stamps = [b"a", b"b"], [None, [("h", b"x")]], [5, 3]
    assert encode_raw_frame(values, headers=headers, timestamps=stamps) == \
        pyarrow_frame(values, headers=headers, timestamps=stamps)
    decoded = decode_frame(encode_raw_frame(values, timestamps=stamps, compression=codec))
    assert decoded.batch().column("value").to_pylist() == values
    assert decoded.header.max_timestamp == 5


@given(st.lists(int64, min_size=1, max_size=5))
def test_any_int64_timestamp_is_kept(stamps):
    values = [b"x"] * len(stamps)
    assert encode_raw_frame(values, timestamps=stamps) == pyarrow_frame(values, timestamps=stamps)


@pytest.mark.parametrize("values,stamps", [([b"a"], [2 ** 63]),
                                           ([b"a", b"b"], [1]), ([], [])])
def test_bad_input_is_refused_as_pyarrows_path_refuses_it(values, stamps):
    with pytest.raises((InvalidArgumentError, pa.ArrowException, OverflowError, TypeError)):
        pyarrow_frame(values, timestamps=stamps)
    with pytest.raises((InvalidArgumentError, pa.ArrowException, OverflowError, TypeError)):
        encode_raw_frame(values, timestamps=stamps)


def pyarrow_columns(frame):
    batch = frame.batch()
    stamps = batch.column("__timestamp").cast(pa.int64()).to_pylist()
    return batch.column("key").to_pylist(), batch.column("value").to_pylist(), stamps


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_producers_frame_is_read_back_without_pyarrow(data):
    n, values, keys, stamps = draw_records(data, 40)
    for frame in (encode_raw_frame(values, keys, timestamps=stamps),
                  pyarrow_frame(values, keys, timestamps=stamps)):
        decoded = decode_frame(frame)
        assert decoded.raw_columns() == (keys or [None] * n, values, stamps)
        assert decoded.raw_columns() == pyarrow_columns(decoded)


def test_frames_of_another_shape_are_left_to_pyarrow():
    stamps = [1, 2]
    with_headers = pyarrow_frame([b"a", b"b"], headers=[None, [("h", b"x")]], timestamps=stamps)
    compressed = pyarrow_frame([b"a", b"b"], timestamps=stamps, compression="zstd")
    typed = encode_frame(pa.record_batch({"x": [1, 2]}), timestamps=stamps)
    large = encode_raw_frame([b"v"] * (RAW_COLUMNS_MAX + 1), timestamps=[0] * (RAW_COLUMNS_MAX + 1))
    for frame in (with_headers, compressed, typed, large):
        assert decode_frame(frame).raw_columns() is None


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_damaged_body_is_read_as_pyarrow_reads_it_or_left_to_it(data):
    """Bytes of the body changed (the CRC redone, as a hostile client would): what
    raw_columns returns is exactly what pyarrow decodes, and it returns None for every
    body pyarrow's full validation refuses."""
    n, values, keys, stamps = draw_records(data, 12)
    frame = bytearray(encode_raw_frame(values, keys, timestamps=stamps))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(HEADER_SIZE, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    reseal(frame)
    try:
        decoded = decode_frame(bytes(frame))
    except CorruptRecordError:
        return  # refused before any decoding (the structural check)
    got = decoded.raw_columns()
    if got is not None:  # accepted: pyarrow must accept it too, and read the same
        assert got == pyarrow_columns(decoded)
