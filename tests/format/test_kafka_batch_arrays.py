"""encode_batch_arrays (records from Arrow columns, vectorised) writes the same bytes as
encode_batch (one record at a time) for every shape a frame's records take;
decode_client_batch is validate_client_batch and decode_batch in one pass; and
decode_client_columns (vectorised) reads what decode_client_batch reads and refuses, with
the same error, what validate_client_batch refuses, damaged bytes included."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from sparklog.errors import InvalidArgumentError, InvalidRecordError, SparklogError
from sparklog.format.kafka_batch import (
    CRC_OFFSET,
    HEADER_SIZE,
    VECTOR_MIN_RECORDS,
    KafkaRecord,
    decode_batch,
    decode_client_batch,
    decode_client_columns,
    encode_batch,
    encode_batch_arrays,
    validate_client_batch,
)


def _both(deltas, ts, keys, values, **kw):
    base = kw.pop("base_offset", 1000)
    expected = encode_batch(
        [KafkaRecord(base + d, t, k, v, ()) for d, t, k, v in zip(deltas, ts, keys, values)],
        base_offset=base, **kw)
    got = encode_batch_arrays(np.array(deltas), np.array(ts, np.int64),
                              pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                              base_offset=base, **kw)
    return expected, got


@pytest.mark.parametrize("seed", range(6))
def test_same_bytes_as_encode_batch(seed):
    """Nulls, empty and long values (varints of 1-3 bytes), gaps in the offsets,
    timestamps going back and far forward, producer fields, LogAppendTime."""
    rnd = random.Random(seed)
    n = rnd.choice([1, 2, 7, 300])
    deltas = sorted(rnd.sample(range(0, 5 * n), n)) if seed % 2 else list(range(n))
    now = 1_700_000_000_000
    ts = [now + rnd.choice([0, -1, 5, -70_000, 3_000_000_000]) for _ in range(n)]

    def blob():
        return rnd.choice([None, b"", b"x" * rnd.choice([1, 63, 64, 200, 9000, 20000])])
    keys, values = [blob() for _ in range(n)], [blob() for _ in range(n)]
    kw = dict(producer_id=7, producer_epoch=2, base_sequence=11) if seed % 3 == 0 else {}
    if seed == 4:
        kw.update(log_append_time=now + 9, transactional=True, last_offset_delta=deltas[-1] + 3)
    expected, got = _both(deltas, ts, keys, values, **kw)
    assert got == expected


def test_sliced_arrays_and_extreme_timestamps():
    """A slice of a column (an Arrow offset) reads its own values; timestamps beyond the
    vectorised range take encode_batch's path with the same result."""
    keys = pa.array([b"a", None, b"ccc", b"dd"], pa.binary()).slice(1)
    values = pa.array([b"0", b"11", None, b"3333"], pa.binary()).slice(1)
    got = encode_batch_arrays(np.arange(3), np.array([5, 4, 9], np.int64), keys, values)
    assert got == encode_batch([KafkaRecord(i, t, k, v, ()) for i, t, k, v in
                                zip(range(3), [5, 4, 9], [None, b"ccc", b"dd"],
                                    [b"11", None, b"3333"])])
    far = [1 << 61, 1 << 62]
    expected, got = _both([0, 1], far, [b"k", b"k"], [b"v", b"v"])
    assert got == expected


def test_bad_columns_are_clear_errors():
    with pytest.raises(InvalidArgumentError, match="one length"):
        encode_batch_arrays(np.arange(2), np.zeros(1, np.int64), pa.array([b"", b""]),
                            pa.array([b"", b""]))
    with pytest.raises(InvalidArgumentError, match="does not follow"):
        encode_batch_arrays(np.array([1, 1]), np.zeros(2, np.int64), pa.array([b"", b""]),
                            pa.array([b"", b""]))


def test_decode_client_batch_is_validate_and_decode():
    batch = encode_batch([KafkaRecord(i, 1000 + i, b"k", b"v" * i, (("h", b"x"),))
                          for i in range(5)], producer_id=3, producer_epoch=0,
                         base_sequence=0)
    decoded = decode_client_batch(batch)
    assert decoded.header == validate_client_batch(batch)
    assert decoded == decode_batch(batch)
    bad = encode_batch([KafkaRecord(i, 0, None, b"v", ()) for i in range(2)])
    with pytest.raises(InvalidRecordError, match="compacted"):
        decode_client_batch(bad, compacted=True)


def _columns_of(batch):
    """What decode_client_batch reads, as the columns decode_client_columns gives."""
    records = decode_client_batch(batch).records
    return ([r.timestamp for r in records], [r.key for r in records],
            [r.value for r in records], [r.headers for r in records])


def _client_batch(rnd, n, headers=False):
    now = 1_700_000_000_000
    records = [KafkaRecord(i, now + rnd.choice([0, 3, -9, 200_000]),
                           rnd.choice([None, b"", b"k" * rnd.choice([1, 70, 300])]),
                           rnd.choice([None, b"", b"v" * rnd.choice([1, 100, 9000])]),
                           (("h", b"x"),) if headers and i % 3 == 0 else ())
               for i in range(n)]
    return encode_batch(records, producer_id=5, producer_epoch=0, base_sequence=0)


@pytest.mark.parametrize("seed", range(4))
def test_columns_read_what_the_parser_reads(seed, monkeypatch):
    """Records without headers, VECTOR_MIN_RECORDS or more, never reach the
    record-at-a-time parser; fewer, or with headers, they do; either way the columns
    hold what the parser reads."""
    from sparklog.format import kafka_batch

    rnd = random.Random(seed)
    n = [1, VECTOR_MIN_RECORDS, 400, 300][seed]
    batch = _client_batch(rnd, n, headers=seed == 3)
    if n >= VECTOR_MIN_RECORDS and seed != 3:
        with monkeypatch.context() as m:
            m.setattr(kafka_batch, "_parse_records", None)  # any call fails
            header, columns = decode_client_columns(batch)
    else:
        header, columns = decode_client_columns(batch)
    assert header == validate_client_batch(batch)
    ts, keys, values, headers = _columns_of(batch)
    assert columns.timestamps.tolist() == ts
    assert columns.keys.to_pylist() == keys and columns.values.to_pylist() == values
    assert columns.headers == (None if seed != 3 else [h or None for h in headers])


def _recrc(buf: bytearray) -> bytes:
    import crc32c

    buf[CRC_OFFSET:CRC_OFFSET + 4] = crc32c.crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf)


@pytest.mark.parametrize("seed", range(3))
def test_columns_refuse_damage_as_the_validator_does(seed):
    """Bytes of the records changed (CRC redone, so only the records' own checks can
    see it): decode_client_columns and validate_client_batch (both with array
    arithmetic where they can) raise what decode_client_batch (a record at a time)
    raises, or all accept and read the same records."""
    rnd = random.Random(100 + seed)
    good = _client_batch(rnd, VECTOR_MIN_RECORDS + 2)
    for _ in range(300):
        buf = bytearray(good)
        for _ in range(rnd.choice([1, 2])):
            at = rnd.randrange(HEADER_SIZE, len(buf))
            buf[at] = rnd.choice([0, 1, 2, 0x7F, 0x80, 0xFF, rnd.randrange(256)])
        batch = _recrc(buf)
        try:
            validate_client_batch(batch)
        except SparklogError as exc:
            for other in (decode_client_columns, decode_client_batch):
                with pytest.raises(type(exc)) as got:
                    other(batch)
                assert str(got.value) == str(exc)
            continue
        _, columns = decode_client_columns(batch)
        ts, keys, values, _ = _columns_of(batch)
        assert (columns.timestamps.tolist(), columns.keys.to_pylist(),
                columns.values.to_pylist()) == (ts, keys, values)


def _runs_batch(rnd, n):
    """A client's batch whose records come in runs of one length (the shape the array
    path takes a run at a time): values of one size for a run of 1-400 records, sizes
    whose length varints take 1, 2 and 3 bytes, offset and timestamp deltas crossing
    their varints' 1- and 2-byte limits."""
    now = 1_700_000_000_000
    records, i = [], 0
    while i < n:
        size = rnd.choice([0, 5, 50, 100, 9000])
        key = rnd.choice([None, b"k"])
        for _ in range(min(n - i, rnd.choice([1, 2, 3, 4, 5, 40, 400]))):
            records.append(KafkaRecord(i, now + i // 3, key, b"v" * size, ()))
            i += 1
    return encode_batch(records)


@pytest.mark.parametrize("seed", range(3))
def test_runs_of_one_length_read_and_refused_as_the_parser_does(seed, monkeypatch):
    """Records in runs of one length are read a run at a time, and read what the
    record-at-a-time parser reads; a byte changed anywhere in such a batch (CRC redone)
    is refused with the parser's error, or the records read are the parser's."""
    from sparklog.format import kafka_batch

    rnd = random.Random(200 + seed)
    good = _runs_batch(rnd, [VECTOR_MIN_RECORDS, 600, 9000][seed])
    with monkeypatch.context() as m:
        m.setattr(kafka_batch, "_parse_records", None)  # any call fails
        _, columns = decode_client_columns(good)
        validate_client_batch(good)
    ts, keys, values, _ = _columns_of(good)
    assert (columns.timestamps.tolist(), columns.keys.to_pylist(),
            columns.values.to_pylist()) == (ts, keys, values)
    for _ in range(100):
        buf = bytearray(good)
        at = rnd.randrange(HEADER_SIZE, len(buf))
        buf[at] = rnd.choice([0, 1, 2, 0x7F, 0x80, 0xFF, buf[at] + 2 & 0xFF, buf[at] - 2 & 0xFF])
        batch = _recrc(buf)
        try:
            validate_client_batch(batch)
        except SparklogError as exc:
            for other in (decode_client_columns, decode_client_batch):
                with pytest.raises(type(exc)) as got:
                    other(batch)
                assert str(got.value) == str(exc)
            continue
        _, columns = decode_client_columns(batch)
        ts, keys, values, _ = _columns_of(batch)
        assert (columns.timestamps.tolist(), columns.keys.to_pylist(),
                columns.values.to_pylist()) == (ts, keys, values)
