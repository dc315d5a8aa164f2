"""Kafka record batches (magic 2) stored beside Arrow frames (docs/format.md, "Kafka
record batches (magic 2)"; docs/storage.md section 11): a log holding both kinds, every
codec of each, is read by LogReader exactly as a log of Arrow frames only holding the
same records; its indexes, counts and time lookups are the same; a torn or damaged
Kafka batch is cut or reported as an Arrow frame is; ``dump-log`` prints both."""

from __future__ import annotations

import io
import os
import shutil

import pyarrow as pa
import pytest

from sparklog.cli.dump_log import dump_segment
from sparklog.errors import CorruptRecordError, DataLossError
from sparklog.format.frame import decode_frame, encode_frame, raw_batch, reseal, validate_frame
from sparklog.format.header import LEADER_EPOCH, MAGIC_FIELD
from sparklog.format.kafka_batch import KafkaRecord, encode_batch
from sparklog.log import LogReader, PartitionLog
from sparklog.storage import open_fileio

T0 = 1_700_000_000_000
#: (kind, codec, records) of the log, in order; Kafka's snappy in both framings
#: (xerial: Kafka's Java client; raw: librdkafka); one Kafka batch of 200 records
#: (decoded with array arithmetic) and one Arrow frame as large
FRAMES = [
    ("arrow", "none", 5), ("kafka", "none", 4), ("arrow", "lz4", 3), ("kafka", "gzip", 6),
    ("kafka", "snappy", 5), ("kafka", "snappy-raw", 3), ("arrow", "zstd", 4),
    ("kafka", "lz4", 7), ("kafka", "zstd", 5), ("kafka", "none", 200),
    ("arrow", "none", 200), ("kafka", "gzip", 1),
]
TOTAL = sum(n for _, _, n in FRAMES)


def record(offset: int, plain: bool = False) -> tuple:
    """(key, value, timestamp, headers) of the record at ``offset``: null keys, empty
    values, no headers, several headers, a header with a null value and a non-ASCII
    key, timestamps out of order, mixed (``plain``: no headers)."""
    headers = None if plain else \
        (None, [("h", b"%d" % offset), ("n", None)], [("cl\u00e9", b"")])[offset % 3]
    return (None if offset % 5 == 0 else b"k%d" % (offset % 4),
            b"" if offset % 7 == 3 else b"v%d" % offset * (1 + offset % 11),
            T0 + 1000 * offset - 7 * (offset % 2), headers)


def arrow_frame(offsets: range, codec: str = "none") -> bytes:
    recs = [record(o, len(offsets) > 100) for o in offsets]
    return encode_frame(raw_batch([r[1] for r in recs], [r[0] for r in recs],
                                  [r[3] for r in recs]),
                        timestamps=[r[2] for r in recs], compression=codec)


def kafka_batch(offsets: range, codec: str = "none", **fields) -> bytes:
    recs = [record(o, len(offsets) > 100) for o in offsets]
    framing = "raw" if codec == "snappy-raw" else "xerial"
    return encode_batch(
        [KafkaRecord(o - offsets[0], r[2], r[0], r[1], tuple(r[3] or ())) for o, r in
         zip(offsets, recs)], compression=codec.replace("-raw", ""), snappy_framing=framing,
        **fields)


def frames(mixed: bool) -> list[bytes]:
    """The log's frames: of FRAMES' kinds (``mixed``) or all Arrow frames, same records."""
    out, offset = [], 0
    for kind, codec, n in FRAMES:
        offsets = range(offset, offset + n)
        if kind == "kafka" and mixed:
            out.append(kafka_batch(offsets, codec))
        else:
            out.append(arrow_frame(offsets, codec if kind == "arrow" else "none"))
        offset += n
    return out


@pytest.fixture
def fio(tmp_path):
    return open_fileio(tmp_path.as_uri())


def write(fio, directory: str, data: list[bytes], config: dict | None = None,
          append_time: int | None = None) -> str:
    with PartitionLog.open(fio, directory, config or {"segment.bytes": 10000,
                                                      "index.interval.bytes": 1}) as plog:
        for frame in data:
            plog.append(frame, log_append_time_ms=append_time)
    return directory


def table(reader: LogReader, start: int, end: int) -> pa.Table:
    batches = list(reader.read_batches(start, end, timestamp_type=True))
    return pa.Table.from_batches(batches).combine_chunks() if batches else None


def test_a_log_of_both_kinds_reads_as_the_same_records_in_arrow_frames(fio, tmp_path):
    mixed = LogReader(fio, write(fio, str(tmp_path / "mixed"), frames(True)))
    arrow = LogReader(fio, write(fio, str(tmp_path / "arrow"), frames(False)))
    assert mixed.offsets() == arrow.offsets() == (0, TOTAL)
    assert len(mixed.segments()) > 2  # rolled: sealed segments with indexes, and a tail
    whole = table(mixed, 0, TOTAL)
    assert whole.equals(table(arrow, 0, TOTAL))
    assert whole.column("__offset").to_pylist() == list(range(TOTAL))
    expected = [record(o, 42 <= o < 442) for o in range(TOTAL)]  # the two large frames
    assert whole.column("key").to_pylist() == [r[0] for r in expected]
    assert whole.column("value").to_pylist() == [r[1] for r in expected]
    assert whole.column("__timestamp").cast(pa.int64()).to_pylist() == \
        [r[2] for r in expected]
    assert whole.column("headers").to_pylist() == [
        None if r[3] is None else [{"key": k, "value": v} for k, v in r[3]]
        for r in expected]
    # every range, cutting every frame anywhere
    for start in range(0, TOTAL + 1, 13):
        for end in range(start, TOTAL + 1, 29):
            got = table(mixed, start, end)
            assert (got is None and end == start) or got.equals(table(arrow, start, end)), \
                (start, end)
    # the same counts and time lookups (every record's timestamp, and between); the
    # segments roll at other offsets (the kinds' sizes differ)
    for log in (mixed, arrow):
        segments = log.segments()
        assert [s.record_count for s in segments if s.sealed] and all(
            s.next_offset == t.base_offset for s, t in zip(segments, segments[1:]))
    assert sum(s.record_count for s in mixed.segments()) == TOTAL
    assert max(s.max_timestamp for s in mixed.segments()) == \
        max(s.max_timestamp for s in arrow.segments())
    for o in range(0, TOTAL, 3):
        t = expected[o][2]
        assert mixed.offset_for_timestamp(t) == arrow.offset_for_timestamp(t)
        assert mixed.offset_for_timestamp(t + 1) == arrow.offset_for_timestamp(t + 1)
    # reopened as the writer (recovery scans the tail; sealed segments keep their index)
    with PartitionLog.open(fio, mixed.dir_url, {"segment.bytes": 10000}, fence=True) as plog:
        assert plog.log_end_offset == TOTAL
        plog.append(kafka_batch(range(TOTAL, TOTAL + 2), "zstd"))
    assert table(LogReader(fio, mixed.dir_url), TOTAL, TOTAL + 2).column(
        "__offset").to_pylist() == [TOTAL, TOTAL + 1]


def test_stored_batches_are_the_clients_bytes_but_for_offset_and_epoch(fio, tmp_path):
    data = frames(True)
    d = write(fio, str(tmp_path / "p"), data)
    stored = b"".join(open(os.path.join(d, n), "rb").read()
                      for n in sorted(os.listdir(d)) if n.endswith(".log"))
    pos = offset = 0
    for (kind, _, n), sent in zip(FRAMES, data):
        frame = stored[pos:pos + len(sent)]
        header = validate_frame(frame)
        assert (header.magic, header.base_offset, header.leader_epoch) == \
            (2 if kind == "kafka" else 1, offset, 0)
        assert frame[LEADER_EPOCH.position + 4:] == sent[LEADER_EPOCH.position + 4:]
        pos, offset = pos + len(sent), offset + n
    assert pos == len(stored)


def test_log_append_time_applies_to_kafka_batches_as_to_arrow_frames(fio, tmp_path):
    config = {"message.timestamp.type": "LogAppendTime"}
    logs = [LogReader(fio, write(fio, str(tmp_path / name), frames(mixed), config,
                                 append_time=T0 + 5))
            for name, mixed in (("mixed", True), ("arrow", False))]
    got = table(logs[0], 0, TOTAL)
    assert got.equals(table(logs[1], 0, TOTAL))
    assert set(got.column("__timestamp").cast(pa.int64()).to_pylist()) == {T0 + 5}
    assert set(got.column("__timestamp_type").to_pylist()) == {1}
    # every frame of either kind marked LogAppendTime, its CRC redone (checked on read)
    assert {(f.header.is_kafka, f.header.log_append_time, f.header.max_timestamp)
            for f in logs[0].iter_frames(0, TOTAL)} == {(True, True, T0 + 5),
                                                       (False, True, T0 + 5)}


def test_control_batches_are_skipped_and_counted(fio, tmp_path):
    d = write(fio, str(tmp_path / "p"), [
        kafka_batch(range(0, 3)),
        encode_batch([KafkaRecord(0, T0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
                     control=True, transactional=True, producer_id=7, producer_epoch=0),
        kafka_batch(range(4, 6), "lz4")])
    reader = LogReader(fio, d)
    assert reader.offsets() == (0, 6)
    assert table(reader, 0, 6).column("__offset").to_pylist() == [0, 1, 2, 4, 5]


def test_batches_with_records_removed_keep_their_records_offsets(fio, tmp_path):
    """A batch whose records do not fill its span (as the cleaner leaves one) is read at
    each record's own offset delta; impossible deltas raise DataLossError of the
    batch's span, and the records after it are read."""
    kept = [KafkaRecord(o, T0 + o, b"k", b"v%d" % o) for o in (0, 2, 5)]
    holed = encode_batch(kept, last_offset_delta=6)
    frame = decode_frame(holed)
    assert frame.header.explicit_offsets and frame.offsets().to_pylist() == [0, 2, 5]
    reader = LogReader(fio, write(fio, str(tmp_path / "p"), [
        kafka_batch(range(0, 2)), holed, kafka_batch(range(9, 10))]))
    assert reader.offsets() == (0, 10)
    assert table(reader, 0, 10).column("__offset").to_pylist() == [0, 1, 2, 4, 7, 9]
    assert table(reader, 3, 8).column("__offset").to_pylist() == [4, 7]
    # deltas past lastOffsetDelta (only damage or a forged batch holds them)
    bad = encode_batch([KafkaRecord(o, T0, None, b"x") for o in (0, 1, 4)],
                       last_offset_delta=4)
    bad = bad[:23] + (3).to_bytes(4, "big") + bad[27:]  # lastOffsetDelta 3: count 3 + gap
    bad = bytearray(bad)
    reseal(bad)
    reader = LogReader(fio, write(fio, str(tmp_path / "q"), [bytes(bad), kafka_batch(
        range(4, 6))]))
    with pytest.raises(DataLossError, match=r"beyond the header's last_offset_delta 3.*"
                                            r"offsets \[0, 4\) cannot be read") as err:
        list(reader.read_batches(0, 6))
    assert (err.value.first_offset, err.value.end_offset) == (0, 4)
    assert table(reader, 4, 6).column("__offset").to_pylist() == [4, 5]


def test_torn_kafka_batch_tail_cut_at_every_byte(fio, tmp_path):
    config = {"segment.bytes": 1 << 20}
    first, last = kafka_batch(range(0, 3), "snappy"), kafka_batch(range(3, 7), "gzip")
    base = write(fio, str(tmp_path / "base"), [first, last], config)
    active = os.path.join(base, "00000000000000000000.log")
    data = open(active, "rb").read()
    assert len(data) == len(first) + len(last)
    for cut in range(len(first), len(data) + 1):
        d = str(tmp_path / f"cut{cut}")
        shutil.copytree(base, d, ignore=shutil.ignore_patterns("*.sparklog-lease"))
        with open(os.path.join(d, "00000000000000000000.log"), "wb") as f:
            f.write(data[:cut])
        end = 7 if cut == len(data) else 3
        reader = LogReader(fio, d)
        assert reader.log_end_offset() == end
        assert (reader.tail_error is None) == (cut in (len(first), len(data)))
        if cut % 8 and cut not in (len(first), len(first) + 1, len(data) - 1, len(data)):
            continue  # recovery and an append after it: on a sample of cuts
        with PartitionLog.open(fio, d, config, fence=True) as plog:
            assert plog.log_end_offset == end
            plog.append(kafka_batch(range(end, end + 1), "zstd"))
        assert table(LogReader(fio, d), 0, end + 1).column("__offset").to_pylist() == \
            list(range(end + 1))


def test_a_damaged_kafka_batch_in_a_sealed_segment_is_named(fio, tmp_path):
    d = write(fio, str(tmp_path / "p"), [kafka_batch(range(0, 40), "lz4"),
                                        kafka_batch(range(40, 80), "lz4")],
              {"segment.bytes": 1000})
    seg = os.path.join(d, "00000000000000000000.log")
    data = bytearray(open(seg, "rb").read())
    data[100] ^= 0xFF  # inside the records, under the CRC
    open(seg, "wb").write(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC32C mismatch at position 0 of .*"
                                                 "00000000000000000000.log"):
        list(LogReader(fio, d).read_batches(0, 40))


def test_magic_other_than_1_and_2_is_refused_by_name():
    frame = bytearray(kafka_batch(range(0, 2)))
    MAGIC_FIELD.write(frame, 0, 3)
    with pytest.raises(CorruptRecordError, match=r"unknown frame format version 3 at "
                                                 r"position 0 \(expected 1, an Arrow frame, "
                                                 r"or 2, a Kafka record batch\)"):
        validate_frame(bytes(frame))
    frame = bytearray(kafka_batch(range(0, 2)))
    frame[22] = 5  # Kafka compression type 5 (unknown)
    reseal(frame)
    with pytest.raises(CorruptRecordError, match="inconsistent frame header.*attributes 0x5"):
        validate_frame(bytes(frame))


def test_dump_log_prints_kafka_batches_as_kafka_dump_log(fio, tmp_path):
    d = write(fio, str(tmp_path / "p"), [arrow_frame(range(0, 2), "zstd"),
                                        kafka_batch(range(2, 4), "snappy")],
              {"segment.bytes": 1 << 20})
    out, err = io.StringIO(), io.StringIO()
    dump_segment(fio, fio.join(d, "00000000000000000000.log"), True, True, out, err)
    lines = out.getvalue().splitlines()
    batches = [line for line in lines if line.startswith("baseOffset")]
    assert "magic: 1 compresscodec: zstd" in batches[0]
    assert "baseOffset: 2 lastOffset: 3 count: 2" in batches[1]
    assert "magic: 2 compresscodec: snappy" in batches[1] and "isvalid: true" in batches[1]
    records = [line for line in lines if line.startswith("| offset: ")]
    assert records[3] == (f"| offset: 3 CreateTime: {T0 + 2993} keySize: 2 valueSize: 0 "
                          f"headerKeys: [] key: k3 payload: "), lines
    assert records[2] == (f"| offset: 2 CreateTime: {T0 + 2000} keySize: 2 valueSize: 6 "
                          f"headerKeys: [cl\u00e9] key: k2 payload: v2v2v2"), lines


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compaction_of_kafka_batches_keeps_what_it_keeps_of_arrow_frames(fio, tmp_path, codec):
    """The cleaner reads keys from Kafka batches of every codec, as from Arrow frames:
    the last record of every key stays, each record at its own offset with its own
    key, value and timestamp, and records are removed. (A batch that loses records is
    rewritten as an Arrow frame with explicit offsets, in the Arrow codec nearest its
    own.)"""
    from sparklog.log.cleaner import clean

    def keyed(r: int, i: int) -> tuple:
        return b"k%d" % ((r * 3 + i) % 5), b"v%d-%d" % (r, i), T0 + r * 10 + i

    logs = {}
    for kind in ("kafka", "arrow"):
        d = str(tmp_path / kind)
        config = {"cleanup.policy": "compact", "min.compaction.lag.ms": 0,
                  "segment.bytes": 300 if kind == "kafka" else 2500}  # a few segments
        with PartitionLog.open(fio, d, config) as plog:
            for r in range(12):
                recs = [keyed(r, i) for i in range(3)]
                plog.append(encode_batch([KafkaRecord(i, t, k, v) for i, (k, v, t) in
                                          enumerate(recs)], compression=codec)
                            if kind == "kafka" else
                            encode_frame(raw_batch([v for _, v, _ in recs],
                                                   [k for k, _, _ in recs]),
                                         timestamps=[t for _, _, t in recs]))
            assert clean(plog, force=True).records_removed > 0
        logs[kind] = LogReader(fio, d)
    written = {r * 3 + i: keyed(r, i) for r in range(12) for i in range(3)}
    last = {k: o for o, (k, _, _) in sorted(written.items())}
    for kind, log in logs.items():
        got = table(log, 0, 36)
        offsets = got.column("__offset").to_pylist()
        assert [written[o] for o in offsets] == list(zip(
            got.column("key").to_pylist(), got.column("value").to_pylist(),
            got.column("__timestamp").cast(pa.int64()).to_pylist())), kind
        assert set(last.values()) <= set(offsets) and len(offsets) < 36, kind
