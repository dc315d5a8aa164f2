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
from tests.support.logdata import compaction_round_keys

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


def compaction_round(r: int, codec: str) -> bytes:
    """Round ``r`` of a compacted mixed partition: 3 records, keys by
    :func:`tests.support.logdata.compaction_round_keys`, in a Kafka batch of ``codec``
    (an Arrow frame every fourth round), with headers on some records. Timestamps not
    in record order."""
    keys = compaction_round_keys(r)
    recs = [(keys[i], b"v%d-%d" % (r, i), T0 + r * 10 + (2 - i) % 3,
             (("h", b"%d" % r), ("n", None)) if r % 4 == 0 and i != 1 else ())
            for i in range(3)]
    if r % 4 == 3:
        return encode_frame(raw_batch([v for _, v, _, _ in recs], [k for k, _, _, _ in recs],
                                      [list(h) or None for _, _, _, h in recs]),
                            timestamps=[t for _, _, t, _ in recs], compression="lz4")
    framing = "raw" if codec == "snappy-raw" else "xerial"
    return encode_batch([KafkaRecord(i, t, k, v, h) for i, (k, v, t, h) in enumerate(recs)],
                        compression=codec.replace("-raw", ""), snappy_framing=framing,
                        producer_id=7, producer_epoch=1, base_sequence=3 * r)


def stored_frames(reader: LogReader) -> dict:
    """base offset -> (header, whole bytes) of every frame ``reader`` reads."""
    return {f.header.base_offset: (f.header, f.header.pack() + f.body.to_pybytes())
            for f in reader.iter_frames(reader.log_start_offset())}


def rows(reader: LogReader) -> dict:
    """offset -> (key, value, timestamp, headers) of every record ``reader`` reads."""
    got = table(reader, reader.log_start_offset(), reader.log_end_offset())
    return dict(zip(got.column("__offset").to_pylist(), zip(
        got.column("key").to_pylist(), got.column("value").to_pylist(),
        got.column("__timestamp").cast(pa.int64()).to_pylist(),
        got.column("headers").to_pylist())))


COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": 0, "segment.bytes": 1500,
             "index.interval.bytes": 1, "file.delete.delay.ms": 0}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "snappy-raw", "lz4", "zstd"])
def test_compaction_of_a_mixed_partition_keeps_offsets_and_kinds(fio, tmp_path, codec):
    """docs/storage.md section 11: each cleaned frame stays in its own kind. A Kafka
    batch that loses records is rebuilt as a Kafka batch: same base offset,
    lastOffsetDelta, producer fields and codec (snappy in its own framing), its records
    at their own offset deltas, a CRC-32C Kafka's parser accepts; one that keeps all of
    them after removed batches is copied as stored (a cleaned segment lets it follow
    the gap). The reader gives the records it gave before, minus the compacted ones; a
    second cleaning reads the cleaned segments (Kafka batches after gaps) again."""
    from sparklog.format.kafka_batch import decode_batch, snappy_framing_of
    from sparklog.log.cleaner import clean

    d = str(tmp_path / "p")
    with PartitionLog.open(fio, d, COMPACTED) as plog:
        for r in range(12):
            plog.append(compaction_round(r, codec))
        plog.flush()
        before = LogReader(fio, d)
        old_rows, old_frames = rows(before), stored_frames(before)
        result = clean(plog, force=True)
        assert result is not None and result.records_removed > 0
        end = result.end_offset
        assert end > 20  # most of the log was cleanable
    last = {k: o for o, (k, _, _, _) in sorted(old_rows.items()) if o < end}
    kept = [o for o in sorted(old_rows) if o >= end or last[old_rows[o][0]] == o]
    after = LogReader(fio, d)
    assert rows(after) == {o: old_rows[o] for o in kept}
    assert [s.generation for s in PartitionListing_of(fio, d)][0] == 1
    rebuilt = copied_after_gap = 0
    expected = 0
    for base, (h, data) in stored_frames(after).items():
        old, old_data = old_frames[base]
        assert (h.magic, h.last_offset_delta, h.codec, h.producer_id, h.producer_epoch,
                h.base_sequence, h.leader_epoch) == (
            old.magic, old.last_offset_delta, old.codec, old.producer_id,
            old.producer_epoch, old.base_sequence, old.leader_epoch), base
        validate_frame(data)  # CRC-32C over its bytes
        if h.magic == 2:
            batch = decode_batch(data)  # Kafka's parse: CRC, records, varints
            offsets = [rec.offset for rec in batch.records]
            assert offsets == [o for o in kept if base <= o <= h.last_offset]
            assert [(rec.key, rec.value, rec.timestamp, list(rec.headers) or None)
                    for rec in batch.records] == [
                (old_rows[o][0], old_rows[o][1], old_rows[o][2], None if old_rows[o][3]
                 is None else [(x["key"], x["value"]) for x in old_rows[o][3]])
                for o in offsets]
            assert batch.header.base_timestamp == batch.records[0].timestamp
            assert batch.header.max_timestamp == max(rec.timestamp for rec in batch.records)
            if h.codec == "snappy":
                assert snappy_framing_of(data[61:]) == snappy_framing_of(old_data[61:])
            if h.record_count < old.record_count:
                rebuilt += 1
            elif base > expected:
                assert data == old_data  # as stored
                copied_after_gap += 1
        expected = h.next_offset
    assert rebuilt and copied_after_gap
    # appends go on; a second cleaning reads the cleaned segments again
    with PartitionLog.open(fio, d, COMPACTED) as plog:
        for r in range(12, 18):
            plog.append(compaction_round(r, codec))
        plog.flush()
        new_rows = rows(LogReader(fio, d))
        assert clean(plog, force=True) is not None
    last = {k: o for o, (k, _, _, _) in sorted(new_rows.items())}
    got = rows(LogReader(fio, d))
    assert set(last.values()) <= set(got) and got == {o: new_rows[o] for o in got}


def PartitionListing_of(fio, d: str):
    from sparklog.log.layout import PartitionListing

    return PartitionListing.scan(fio, d).logs()


def test_kafka_tombstones_stay_delete_retention_ms_after_the_cleaning_that_reached_them(
        fio, tmp_path):
    """A tombstone (null value) in a Kafka batch is kept as in an Arrow frame: in the
    rebuilt Kafka batch until ``delete.retention.ms`` after the cleaning that first
    reached it, then removed (the batch rebuilt again, or dropped)."""
    from sparklog.log.cleaner import clean

    d = str(tmp_path / "p")
    config = dict(COMPACTED, **{"delete.retention.ms": 5000})
    now = T0 + 100_000
    with PartitionLog.open(fio, d, config) as plog:
        plog.append(encode_batch([KafkaRecord(0, T0, b"a", b"1"),
                                  KafkaRecord(1, T0, b"b", b"1")], compression="zstd"))
        plog.append(encode_batch([KafkaRecord(0, T0, b"a", None),
                                  KafkaRecord(1, T0, b"c", b"1")], compression="gzip"))
        for r in range(8):
            plog.append(encode_batch([KafkaRecord(0, T0, b"x%d" % r, b"y" * 100)]))
        assert clean(plog, now, force=True) is not None
        got = rows(LogReader(fio, d))
        assert got[2][:2] == (b"a", None) and 0 not in got  # a's value gone, tombstone kept
        tomb = stored_frames(LogReader(fio, d))[2][0]
        assert tomb.magic == 2 and tomb.codec == "gzip" and tomb.record_count == 2
        for r in range(10):
            plog.append(encode_batch([KafkaRecord(0, T0, b"w", b"y" * 200)]))
        assert clean(plog, now + 4999, force=True) is not None
        assert rows(LogReader(fio, d))[2][:2] == (b"a", None)  # within delete.retention.ms
        for r in range(10):  # new dirty segments
            plog.append(encode_batch([KafkaRecord(0, T0, b"z", b"y" * 200)]))
        result = clean(plog, now + 5001, force=True)
        assert result is not None and result.tombstones_removed == 1
    got = rows(LogReader(fio, d))
    assert 2 not in got and got[3][:2] == (b"c", b"1")
    h, data = stored_frames(LogReader(fio, d))[2]
    assert h.magic == 2 and h.codec == "gzip" and h.record_count == 1 \
        and h.last_offset_delta == 1
    validate_frame(data)


def test_a_kafka_batch_may_follow_a_gap_only_in_a_cleaned_segment(fio, tmp_path):
    """The contiguity check (docs/storage.md section 11): a Kafka batch starting after
    the previous frame's end is damage (DataLossError naming the offsets) in a segment
    as appended, allowed in a cleaned one; an Arrow frame needs its explicit-offsets
    bit in either."""
    from sparklog.format.frame import check_follows
    from sparklog.log.scan import FrameScan

    gap = decode_frame(kafka_batch(range(5, 7))).header._replace(base_offset=5)
    with pytest.raises(DataLossError, match=r"base offset 5 where offset 3 was expected"):
        check_follows(gap, 3)
    check_follows(gap, 3, cleaned=True)
    arrow = decode_frame(arrow_frame(range(5, 7))).header._replace(base_offset=5)
    with pytest.raises(DataLossError):
        check_follows(arrow, 3, cleaned=True)
    path = str(tmp_path / "gap.log")
    first = bytearray(kafka_batch(range(0, 3)))
    second = bytearray(kafka_batch(range(5, 7)))
    second[:8] = (5).to_bytes(8, "big")  # outside the CRC
    with open(path, "wb") as f:
        f.write(first + second)
    url = (tmp_path / "gap.log").as_uri()
    scan = FrameScan(fio, url, expected_offset=0, contiguous=True)
    assert [p for p, _ in scan] == [0] and isinstance(scan.error, DataLossError)
    scan = FrameScan(fio, url, expected_offset=0, contiguous=True, cleaned=True)
    assert [fr.header.base_offset for _, fr in scan] == [0, 5] and scan.error is None


def test_a_cleaned_log_append_time_batch_keeps_its_append_time(fio, tmp_path):
    """On a LogAppendTime partition a Kafka batch that loses records stays a
    LogAppendTime Kafka batch with the broker's time as ``maxTimestamp`` (Kafka's
    cleaner keeps it): every kept record reads that time, as before the cleaning."""
    from sparklog.log.cleaner import clean

    d = str(tmp_path / "p")
    config = dict(COMPACTED, **{"message.timestamp.type": "LogAppendTime"})
    with PartitionLog.open(fio, d, config) as plog:
        for r in range(12):
            plog.append(compaction_round(r, "zstd"), log_append_time_ms=T0 + 10_000 + r)
        assert clean(plog, force=True) is not None
    reader = LogReader(fio, d)
    rebuilt = [f.header for f in reader.iter_frames(0)
               if f.header.is_kafka and f.header.record_count < f.header.last_offset_delta + 1]
    assert rebuilt and all(h.log_append_time and h.codec == "zstd" for h in rebuilt)
    got = table(reader, 0, reader.log_end_offset())
    assert set(got.column("__timestamp_type").to_pylist()) == {1}
    for h in rebuilt:
        assert h.max_timestamp == T0 + 10_000 + h.base_offset // 3
        stamps = {t for o, t in zip(got.column("__offset").to_pylist(),
                                    got.column("__timestamp").cast(pa.int64()).to_pylist())
                  if h.base_offset <= o <= h.last_offset}
        assert stamps == {h.max_timestamp}
