"""The shared segment codec (sparklog/log/shared_segment.py; docs/storage.md, "Shared
segment format"): round trips, a run's index entries the same as a segment's of the
same frames, reads from every offset, every byte of the trailer and footer and the
runs' frames corrupted and refused by name, writer refusals, and a fuzz in which any
bytes decode or fail with CorruptSharedSegmentError only."""

from __future__ import annotations

import io
import random
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.errors import InvalidArgumentError
from sparklog.format.frame import crc32c, stamp
from sparklog.format.kafka_batch import KafkaRecord, encode_batch
from sparklog.log.partition import PartitionLog
from sparklog.log.shared_segment import (
    RUN_SIZE,
    SOURCE_SHARED,
    SOURCE_WAL,
    TRAILER_SIZE,
    CorruptSharedSegmentError,
    PlacedRun,
    SharedSegmentWriter,
    Source,
    open_shared_segment,
    read_run,
    shared_segment_name,
)
from sparklog.storage import open_fileio
from tests.support.logfiles import raw_frame

EPOCH = 7
TS = 1_700_000_000_000


def arrow(base: int, n: int = 1, ts: int | None = None) -> bytes:
    """A stamped Arrow frame of ``n`` records at ``base``."""
    ts = TS + base if ts is None else ts
    frame = bytearray(raw_frame([b"v%d" % (base + i) for i in range(n)],
                                timestamps=[ts + i for i in range(n)]))
    stamp(frame, 0, base, EPOCH)
    return bytes(frame)


def kafka(base: int, n: int = 1, ts: int | None = None) -> bytes:
    """A stamped Kafka record batch of ``n`` records at ``base``."""
    ts = TS + base if ts is None else ts
    frame = bytearray(encode_batch(
        [KafkaRecord(i, ts + i, b"k", b"kv%d" % (base + i)) for i in range(n)]))
    stamp(frame, 0, base, EPOCH)
    return bytes(frame)


#: the runs of build(): (topic, partition, frames)
RUNS = [
    ("t", 0, [arrow(0, 2), kafka(2), kafka(3, 2, ts=TS - 50), arrow(5)]),
    ("t", 3, [kafka(100)]),
    ("t", 3, [kafka(104, 3)]),
    ("u", 1, [arrow(7, 3), kafka(10)]),
]


def build(tmp_path, runs=RUNS, interval: int = 100, placed=(("s", 2, 0, 9000),)):
    """A shared segment of ``runs`` written to a file: (fileio, path, data, written)."""
    out = io.BytesIO()
    writer = SharedSegmentWriter(out, level=0, index_interval_bytes=interval)
    for topic, partition, frames in runs:
        writer.add_run(topic, partition, frames)
    writer.add_source(SOURCE_WAL, "00000000000000000041.wal")
    writer.add_source(SOURCE_SHARED, shared_segment_name(0, 3, 12, 40))
    for p in placed:
        writer.add_placed(*p)
    written = writer.finish()
    data = out.getvalue()
    name = shared_segment_name(0, 3, 12, 41)
    (tmp_path / name).write_bytes(data)
    return open_fileio(str(tmp_path)), str(tmp_path / name), data, written


def test_round_trip(tmp_path):
    fileio, path, data, written = build(tmp_path)
    assert path.endswith("L0-00003-00000000000000000012-0000000041.seg")
    seg = open_shared_segment(fileio, path)
    assert seg.runs == written.runs and seg.level == 0
    assert seg.sources == (Source(SOURCE_WAL, "00000000000000000041.wal"),
                           Source(SOURCE_SHARED, "L0-00003-00000000000000000012-0000000040.seg"))
    assert seg.placed == (PlacedRun("s", 2, 0, 9000),)
    assert [(r.topic, r.partition, r.base_offset, r.next_offset) for r in seg.runs] == [
        ("t", 0, 0, 6), ("t", 3, 100, 101), ("t", 3, 104, 107), ("u", 1, 7, 11)]
    first = seg.runs[0]
    assert (first.record_count, first.frame_count, first.no_control) == (6, 4, True)
    # the max timestamp is the third frame's (its timestamps went back)
    assert (first.max_timestamp, first.max_timestamp_offset) == (TS + 5, 5)
    assert first.position == 0 and seg.runs[1].position == first.size
    assert seg.footer_position == sum(r.size for r in seg.runs)
    for run, (_, _, frames) in zip(seg.runs, RUNS):
        assert data[run.position:run.position + run.size] == b"".join(frames)
        got = list(read_run(fileio, seg, run))
        assert [f.header.base_offset for f in got] == [
            struct.unpack_from(">q", f)[0] for f in frames]
    assert seg.runs_of("t", 3) == list(seg.runs[1:3])


def test_an_empty_segment_is_a_footer_and_a_trailer(tmp_path):
    fileio, path, data, _ = build(tmp_path, runs=[], placed=())
    seg = open_shared_segment(fileio, path)
    assert seg.runs == () and seg.footer_position == 0 and len(seg.sources) == 2


def test_run_index_entries_are_those_of_a_segment_of_the_same_frames(tmp_path):
    """One rule (docs/format.md 4): a run's sparse entries are the entries a partition's
    segment gets for the same frames and ``index.interval.bytes``."""
    frames = [raw_frame([b"x" * (i * 37 % 300)], timestamps=[TS + (i * 7919) % 50])
              for i in range(40)]
    for interval in (1, 700, 4096):
        directory = tmp_path / f"p{interval}"
        fileio = open_fileio(str(tmp_path))
        with PartitionLog.open(fileio, str(directory),
                               {"index.interval.bytes": str(interval)}) as plog:
            for frame in frames:
                plog.append(frame, leader_epoch=EPOCH)
            plog.flush()
            segment = plog.segments[0]
            offsets, times = segment.load_indexes()
            log_bytes = fileio.read_all(segment.path)
            summary = segment.summary
        out = io.BytesIO()
        writer = SharedSegmentWriter(out, level=0, index_interval_bytes=interval)
        run = writer.add_run("t", 0, [log_bytes])
        assert run.offset_index.entries() == offsets.entries(), interval
        assert run.time_index.entries() == times.entries(), interval
        assert run.summary == summary
        if interval < 4096:
            assert offsets.entries() and times.entries()


def test_read_run_from_every_offset(tmp_path):
    fileio, path, _, _ = build(tmp_path, interval=1)
    seg = open_shared_segment(fileio, path)
    for run in seg.runs:
        assert len(run.offset_index) == run.frame_count - 1
        for offset in range(run.base_offset, run.next_offset):
            got = list(read_run(fileio, seg, run, offset))
            assert got[0].header.base_offset <= offset < got[0].header.next_offset
            assert got[-1].header.next_offset == run.next_offset
    with pytest.raises(InvalidArgumentError, match="offset 6 is not in the run"):
        list(read_run(fileio, seg, seg.runs[0], 6))


def _expected(data: bytes, seg, pos: int) -> str:
    """What a flip of byte ``pos`` must be refused as."""
    trailer = len(data) - TRAILER_SIZE
    if pos >= trailer:
        rel = pos - trailer
        return "not a shared segment" if rel < 4 else "trailer CRC32C mismatch"
    if pos >= seg.footer_position:
        return "footer CRC32C mismatch"
    run = next(r for r in seg.runs if r.position <= pos < r.position + r.size)
    frame_pos = run.position
    while True:
        size = struct.unpack_from(">i", data, frame_pos + 8)[0] + 12
        if frame_pos + size > pos:
            break
        frame_pos += size
    rel = pos - frame_pos
    if rel < 8:
        return "base offset|frames end at offset"
    if rel < 12:
        return "invalid frame length|truncated frame|CRC32C mismatch"
    if rel < 16:  # the leader epoch is not checked in a run (runs span epochs)
        return ""
    if rel < 21:
        return "format version|CRC32C mismatch"
    return "CRC32C mismatch"


def test_every_byte_corrupted_is_refused_by_name(tmp_path):
    fileio, path, data, _ = build(tmp_path)
    seg = open_shared_segment(fileio, path)
    # every byte of the footer and trailer and of each frame's header, every 50th of
    # the frames' bodies
    positions = set(range(seg.footer_position, len(data)))
    for run in seg.runs:
        pos = run.position
        while pos < run.position + run.size:
            size = struct.unpack_from(">i", data, pos + 8)[0] + 12
            positions.update(range(pos, pos + 61))
            positions.update(range(pos + 61, pos + size, 50))
            pos += size
    failures = []
    for pos in sorted(positions):
        bad = bytearray(data)
        bad[pos] ^= 0x10
        with open(path, "wb") as f:
            f.write(bad)
        expected = _expected(data, seg, pos)
        try:
            got = open_shared_segment(fileio, path)
            for run in got.runs:
                list(read_run(fileio, got, run))
            if expected:
                failures.append((pos, expected, "accepted"))
        except CorruptSharedSegmentError as exc:
            if not expected or not re.search(expected, str(exc)):
                failures.append((pos, expected, str(exc)))
    assert not failures, failures[:5]


def test_writer_refuses_bad_input_by_name():
    w = SharedSegmentWriter(io.BytesIO(), level=0)
    w.add_run("t", 1, [arrow(0)])
    with pytest.raises(InvalidArgumentError, match="runs are written sorted"):
        w.add_run("t", 0, [arrow(0)])
    with pytest.raises(InvalidArgumentError, match="runs are written sorted"):
        w.add_run("a", 5, [arrow(0)])
    with pytest.raises(InvalidArgumentError, match="without overlap"):
        w.add_run("t", 1, [arrow(0)])
    with pytest.raises(InvalidArgumentError, match="base offset 5 where offset 2"):
        w.add_run("t", 2, [arrow(0, 2), kafka(5)])
    with pytest.raises(InvalidArgumentError, match="CRC32C mismatch"):
        frame = bytearray(arrow(1))
        frame[-1] ^= 1
        w.add_run("t", 3, [bytes(frame)])
    with pytest.raises(InvalidArgumentError, match="no frames"):
        w.add_run("t", 4, [])
    with pytest.raises(InvalidArgumentError, match="source kind 7"):
        w.add_source(7, "x")
    with pytest.raises(InvalidArgumentError, match="next_offset"):
        w.add_placed("t", 0, 5, 5)
    w.finish()
    with pytest.raises(InvalidArgumentError, match="finished already"):
        w.add_run("u", 0, [arrow(0)])


def _recrc(data: bytearray) -> None:
    """Redo the footer and trailer CRCs of a (mutated) shared segment, so that a
    mutation of the footer reaches the structural checks behind them."""
    if len(data) < TRAILER_SIZE:
        return
    t = len(data) - TRAILER_SIZE
    position, length = struct.unpack_from(">qI", data, t + 8)
    if 0 <= position and position + length <= t:
        struct.pack_into(">I", data, t + 20, crc32c(bytes(data[position:position + length])))
    struct.pack_into(">I", data, t + 36, crc32c(bytes(data[t:t + 36])))


def _decode_all(data: bytes, tmp_path) -> None:
    path = tmp_path / "fuzz.seg"
    path.write_bytes(data)
    fileio = open_fileio(str(tmp_path))
    try:
        seg = open_shared_segment(fileio, str(path))
        for run in seg.runs:
            for offset in (run.base_offset, run.next_offset - 1):
                list(read_run(fileio, seg, run, offset))
    except CorruptSharedSegmentError:
        pass


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 6), in_footer=st.booleans(),
       recrc=st.booleans())
def test_fuzz_mutations_decode_or_fail_with_the_codecs_error(tmp_path, seed, flips,
                                                             in_footer, recrc):
    _, _, data, written = build(tmp_path, interval=1)
    rng = random.Random(seed)
    bad = bytearray(data)
    lo = written.footer_position if in_footer else 0
    for _ in range(flips):
        bad[rng.randrange(lo, len(bad))] = rng.randrange(256)
    if recrc:
        _recrc(bad)
    _decode_all(bytes(bad), tmp_path)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(footer=st.binary(max_size=2 * RUN_SIZE + 64), level=st.integers(0, 3))
def test_fuzz_random_footers(tmp_path, footer, level):
    trailer = struct.pack(">4sHHqIIqI", b"SLSS", 1, level, 0, len(footer), crc32c(footer),
                          0, 0)
    _decode_all(footer + trailer + struct.pack(">I", crc32c(trailer)), tmp_path)
