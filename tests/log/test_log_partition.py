"""PartitionLog on the real local storage: append, read, roll, indexes, retention,
epochs, leases and bad input."""

from __future__ import annotations

import os

import pytest

from sparklog.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidArgumentError,
    LeaseExpiredError,
    LeaseHeldError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from sparklog.format.frame import decode_frame, iter_frames, validate_frame
from sparklog.format.header import unpack_header
from sparklog.log import LogReader, PartitionLog
from sparklog.log.config import LogConfig
from tests.support.logdata import lock_held_elsewhere
from tests.support.logfiles import RecordingFileIO, raw_frame, typed_frame


@pytest.fixture
def pdir(fio, tmp_path):
    return fio.join(tmp_path.as_uri(), "topics", "orders", "3")


def fill(plog, frames=10, per=5, ts0=1_000):
    """Append ``frames`` typed frames of ``per`` records (values = offsets)."""
    for i in range(frames):
        first = plog.log_end_offset
        plog.append(typed_frame(list(range(first, first + per)),
                                [ts0 + first + j for j in range(per)]))
    plog.flush()


def test_append_assigns_offsets_and_stamps_in_place(fio, pdir):
    with PartitionLog.open(fio, pdir, leader_epoch=4) as plog:
        assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (0, 0, 0)
        frame = bytearray(typed_frame([1, 2, 3]))
        r1 = plog.append(frame)
        assert (r1.base_offset, r1.last_offset, r1.position, r1.segment_base) == (0, 2, 0, 0)
        assert r1.log_append_time == -1
        header = unpack_header(frame)
        assert (header.base_offset, header.leader_epoch) == (0, 4)  # stamped in place
        immutable = typed_frame([4, 5])
        r2 = plog.append(immutable)
        assert (r2.base_offset, r2.last_offset, r2.position) == (3, 4, len(frame))
        assert unpack_header(immutable).base_offset == 0  # bytes are copied, not changed
        assert plog.log_end_offset == 5 and plog.high_watermark == 0
        assert plog.read(0, 1 << 20).size == 0  # nothing visible before flush
        plog.flush()
        assert plog.high_watermark == 5
        got = plog.read(0, 1 << 20)
        frames = list(iter_frames(got.data))
        assert [f.header.base_offset for f in frames] == [0, 3]
        assert frames[1].batch().column("n").to_pylist() == [4, 5]
        assert got.high_watermark == 5 and got.log_start_offset == 0
        assert got.segment_path.endswith("00000000000000000000.log")


def test_read_whole_frames_at_least_one_and_max_bytes(fio, pdir):
    with PartitionLog.open(fio, pdir, {"index.interval.bytes": 600}) as plog:
        fill(plog, frames=20, per=5)
        size = plog.active_segment.size // 20
        one = plog.read(37, 1)  # smaller than a frame: still one whole frame
        (frame,) = iter_frames(one.data)
        assert frame.header.base_offset == 35 and one.size == size
        assert one.position == 7 * size
        three = plog.read(37, 3 * size + 10)
        assert [f.header.base_offset for f in iter_frames(three.data)] == [35, 40, 45]
        capped = plog.read(37, 1 << 20, max_offset=50)
        assert [f.header.base_offset for f in iter_frames(capped.data)] == [35, 40, 45]
        assert plog.read(100, 100).size == 0  # at the log end: empty, not an error


def test_offset_out_of_range_names_partition_offset_and_range(fio, pdir):
    with PartitionLog.open(fio, pdir) as plog:
        fill(plog, frames=2, per=5)
        with pytest.raises(OffsetOutOfRangeError) as info:
            plog.read(11, 100)
        err = info.value
        assert (err.topic, err.partition, err.offset) == ("orders", 3, 11)
        assert (err.log_start_offset, err.log_end_offset) == (0, 10)
        assert "orders-3" in str(err) and pdir in str(err) and "[0, 10]" in str(err)


@pytest.mark.parametrize("bad, error, fragment", [
    ("text", InvalidArgumentError, "got str"),
    (12, InvalidArgumentError, "got int"),
    ([b"x"], InvalidArgumentError, "got list"),
    (b"\x00" * 10, CorruptRecordError, "truncated frame"),
])
def test_bad_frames_are_refused(fio, pdir, bad, error, fragment):
    with PartitionLog.open(fio, pdir) as plog:
        with pytest.raises(error, match=fragment) as info:
            plog.append(bad)
        assert "orders-3" in str(info.value)
        assert plog.log_end_offset == 0


def test_corrupt_and_oversized_frames_are_refused(fio, pdir):
    with PartitionLog.open(fio, pdir, {"max.message.bytes": 2000, "segment.bytes": 1500}) as plog:
        frame = bytearray(typed_frame([1]))
        frame[-3] ^= 0x10
        with pytest.raises(CorruptRecordError, match="CRC32C mismatch"):
            plog.append(frame)
        with pytest.raises(CorruptRecordError, match="follow the"):
            plog.append(typed_frame([1]) + b"xx")
        with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
            plog.append(raw_frame([b"x" * 3000]))
        with pytest.raises(RecordTooLargeError, match="segment.bytes=1500"):
            plog.append(raw_frame([b"x" * 700]))
        with pytest.raises(InvalidArgumentError, match="offset must be an int"):
            plog.read("0", 10)
        with pytest.raises(InvalidArgumentError, match="max_bytes must be >= 0"):
            plog.read(0, -1)
        assert plog.log_end_offset == 0
        plog.append(typed_frame([1]))  # still usable
        assert plog.log_end_offset == 1


def test_rolls_by_segment_bytes_and_reads_across_segments(fio, pdir):
    size = len(typed_frame([0] * 5))
    with PartitionLog.open(fio, pdir, {"segment.bytes": 3 * size + 10}) as plog:
        fill(plog, frames=10, per=5)
        assert [s.base_offset for s in plog.segments] == [0, 15, 30, 45]
        plog.sync()  # rolled segments are sealed in the background; sync waits for it
        assert [s.sealed for s in plog.segments] == [True, True, True, False]
        names = sorted(os.listdir(fio.local_path(pdir)))
        assert "00000000000000000015.index" in names and "00000000000000000015.timeindex" in names
        assert "00000000000000000045.index" not in names  # active: no index yet
        for offset in range(50):
            (first, *_) = iter_frames(plog.read(offset, 1).data)
            assert first.header.base_offset == offset - offset % 5


def _run(frames):
    """One buffer holding ``frames`` back to back, and their (position, header) pairs."""
    buf, run = bytearray(), []
    for f in frames:
        run.append((len(buf), validate_frame(f)))
        buf += f
    return buf, run


@pytest.mark.parametrize("segment_frames", [1, 3, 100])
def test_append_frames_matches_one_append_per_frame(fio, tmp_path, segment_frames):
    frames = [typed_frame(list(range(i, i + 1 + i % 4)), [2_000 + 7 * i] * (1 + i % 4))
              for i in range(12)]
    config = {"segment.bytes": segment_frames * len(frames[-1]) + 5,
              "index.interval.bytes": 1}
    one = PartitionLog.open(fio, fio.join(tmp_path.as_uri(), "one", "0"), config)
    run = PartitionLog.open(fio, fio.join(tmp_path.as_uri(), "run", "0"), config)
    with one, run:
        singles = [one.append(f) for f in frames]
        buf, pairs = _run(frames)
        result = run.append_frames(memoryview(buf), pairs)
        assert (result.base_offset, result.last_offset) == \
            (singles[0].base_offset, singles[-1].last_offset)
        assert (result.position, result.segment_base) == (0, 0)
        for log in (one, run):
            log.flush()
        assert [s.base_offset for s in run.segments] == [s.base_offset for s in one.segments]
        assert len(one.segments) > 1 or segment_frames == 100
        for seg_one, seg_run in zip(one.segments, run.segments):  # same stamped bytes
            assert fio.read_all(seg_run.path) == fio.read_all(seg_one.path)
            assert seg_run.offset_index.entries() == seg_one.offset_index.entries()
            assert seg_run.time_index.entries() == seg_one.time_index.entries()
        for ts in (0, 2_000, 2_040, 2_077, 9_999):
            assert run.offset_for_timestamp(ts) == one.offset_for_timestamp(ts)


def test_append_frames_stamps_log_append_time_on_every_frame(fio, pdir):
    buf, pairs = _run([typed_frame([1, 2], [5, 6]), typed_frame([3], [7])])
    with PartitionLog.open(fio, pdir, {"message.timestamp.type": "LogAppendTime"}) as plog:
        result = plog.append_frames(buf, pairs, log_append_time_ms=9_000)
        assert (result.base_offset, result.last_offset, result.log_append_time) == (0, 2, 9_000)
        headers = [validate_frame(buf, pos) for pos, _ in pairs]  # CRCs recomputed
        assert [(h.base_offset, h.max_timestamp, h.log_append_time) for h in headers] == \
            [(0, 9_000, True), (2, 9_000, True)]


def test_append_frames_rolls_by_segment_ms_on_the_runs_largest_timestamp(fio, pdir):
    with PartitionLog.open(fio, pdir, {"segment.ms": 1000}, clock=lambda: 10_000_000) as plog:
        plog.append(typed_frame([1], [5_000]))
        buf, pairs = _run([typed_frame([2], [5_900]), typed_frame([3], [6_001])])
        plog.append_frames(buf, pairs)  # like Kafka's record set: one check, largest ts
        assert [s.base_offset for s in plog.segments] == [0, 1]
        buf, pairs = _run([typed_frame([4], [6_500]), typed_frame([5], [6_800])])
        plog.append_frames(buf, pairs)  # within segment.ms of the segment's first frame
        assert [s.base_offset for s in plog.segments] == [0, 1]


def test_append_frames_refuses_gaps_and_read_only_buffers(fio, pdir):
    frames = [typed_frame([1]), typed_frame([2])]
    buf, pairs = _run(frames)
    with PartitionLog.open(fio, pdir) as plog:
        with pytest.raises(InvalidArgumentError, match="must follow each other"):
            plog.append_frames(buf, [pairs[1], pairs[0]])
        with pytest.raises(InvalidArgumentError, match="writable memoryview"):
            plog.append_frames(bytes(buf), pairs)
        with pytest.raises(InvalidArgumentError, match="no frames to append"):
            plog.append_frames(buf, [])
        assert plog.log_end_offset == 0
        assert plog.append_frames(buf, pairs).last_offset == 1


def test_rolls_by_segment_ms_like_kafka(fio, pdir):
    now = [10_000_000]
    with PartitionLog.open(fio, pdir, {"segment.ms": 1000}, clock=lambda: now[0]) as plog:
        plog.append(typed_frame([1], [5_000]))
        plog.append(typed_frame([2], [5_900]))   # 900 ms after the first frame: same segment
        plog.append(typed_frame([3], [6_001]))   # 1001 ms: roll
        assert [s.base_offset for s in plog.segments] == [0, 2]
        plog.roll()
        plog.roll()  # empty active segment: no-op
        assert [s.base_offset for s in plog.segments] == [0, 2, 3]
        assert plog.high_watermark == 3  # sealing made everything visible


def test_log_append_time_topic_stamps_the_broker_clock(fio, pdir):
    with PartitionLog.open(fio, pdir, {"message.timestamp.type": "LogAppendTime"}) as plog:
        frame = bytearray(typed_frame([1, 2], [5, 6]))
        result = plog.append(frame, log_append_time_ms=1_234_567)
        assert result.log_append_time == 1_234_567
        header = validate_frame(frame)  # CRC recomputed and valid
        assert header.log_append_time and header.max_timestamp == 1_234_567
        plog.flush()
        batch = next(LogReader(fio, pdir).read_batches(0, 2, timestamp_type=True))
        assert batch.column("__timestamp").cast("int64").to_pylist() == [1_234_567] * 2
        assert batch.column("__timestamp_type").to_pylist() == [1, 1]


def test_max_timestamp_offset_is_the_first_record_of_the_largest_timestamp(fio, pdir):
    """Kafka's ListOffsets MAX_TIMESTAMP (KIP-734): the first record, from the log start
    on, carrying the log's largest timestamp (not its frame's base offset); None while
    the log holds no record."""
    size = len(typed_frame([0, 0]))
    with PartitionLog.open(fio, pdir, {"segment.bytes": 2 * size + 1,
                                       "index.interval.bytes": 1}) as plog:
        assert plog.max_timestamp_offset() is None
        for i, ts in enumerate([[50, 10], [20, 100], [30, 40], [70, 100], [80, 90]]):
            plog.append(typed_frame([2 * i, 2 * i + 1], ts))
        plog.flush()
        assert plog.max_timestamp_offset() == (3, 100)
        plog.delete_segments_before(4)  # the first record of 100 is below the log start
        assert plog.max_timestamp_offset() == (7, 100)


def test_offset_for_timestamp_with_unordered_timestamps(fio, pdir):
    size = len(typed_frame([0, 0]))
    with PartitionLog.open(fio, pdir, {"segment.bytes": 2 * size + 1,
                                       "index.interval.bytes": 1}) as plog:
        stamps = [[50, 10], [20, 60], [30, 40], [100, 70], [80, 90]]
        for i, ts in enumerate(stamps):
            plog.append(typed_frame([2 * i, 2 * i + 1], ts))
        flat = [t for pair in stamps for t in pair]
        assert plog.high_watermark == 8  # the rolls made the sealed segments visible
        assert plog.offset_for_timestamp(0) == 0
        assert plog.offset_for_timestamp(95) == 6
        plog.flush()
        for target in range(0, 110, 5):
            expected = next((o for o, t in enumerate(flat) if t >= target), None)
            assert plog.offset_for_timestamp(target) == expected, target
        with pytest.raises(InvalidArgumentError, match="timestamp must be an int"):
            plog.offset_for_timestamp(1.5)


def test_open_does_not_read_sealed_segments(fio, pdir):
    size = len(typed_frame([0] * 5))
    config = {"segment.bytes": 2 * size}
    with PartitionLog.open(fio, pdir, config) as plog:
        fill(plog, frames=21, per=5)
        assert len(plog.segments) == 11
        sealed_logs = [s.path for s in plog.segments[:-1]]
        active = plog.segments[-1].path
    recording = RecordingFileIO(fio)
    with PartitionLog.open(recording, pdir, config) as plog:
        read = recording.read_paths()
        assert not set(read) & set(sealed_logs), read
        assert active in read  # only the active segment is scanned
        index_reads = [p for p in read if p.endswith(".index")]
        assert len(index_reads) <= 1  # at most the last sealed summary (a 72-byte header)
        assert plog.log_end_offset == 105
        recording.calls.clear()
        (frame, *_) = iter_frames(plog.read(52, 1).data)  # a read loads one index only
        assert frame.header.base_offset == 50
        touched = {p for p in recording.read_paths()}
        assert touched <= {plog.segments[5].path, plog.segments[5].index_path,
                           plog.segments[5].timeindex_path}, touched


def test_missing_and_corrupt_indexes_are_rebuilt(fio, pdir):
    size = len(typed_frame([0] * 5))
    config = {"segment.bytes": 3 * size, "index.interval.bytes": 1}
    with PartitionLog.open(fio, pdir, config) as plog:
        fill(plog, frames=9, per=5)
        first, second = plog.segments[0], plog.segments[1]
        entries = first.offset_index.entries()
    os.remove(fio.local_path(first.index_path))
    os.remove(fio.local_path(first.timeindex_path))
    with open(fio.local_path(second.index_path), "r+b") as f:  # flip a summary byte
        f.seek(20)
        b = f.read(1)
        f.seek(20)
        f.write(bytes([b[0] ^ 1]))
    with PartitionLog.open(fio, pdir, config) as plog:
        assert os.path.exists(fio.local_path(first.index_path))  # rebuilt at open
        seg = plog.segments[0]
        seg.load_indexes()
        assert seg.offset_index.entries() == entries
        assert plog.segments[1].next_offset == 30  # corrupt summary rebuilt on use
        (frame, *_) = iter_frames(plog.read(27, 1).data)
        assert frame.header.base_offset == 25
        assert plog.offset_for_timestamp(1_000 + 27) == 27


def test_delete_segments_before_persists_log_start(fio, pdir):
    size = len(typed_frame([0] * 5))
    config = {"segment.bytes": 2 * size}
    with PartitionLog.open(fio, pdir, config) as plog:
        fill(plog, frames=7, per=5)
        assert [s.base_offset for s in plog.segments] == [0, 10, 20, 30]
        assert plog.delete_segments_before(12) == [0]
        assert plog.log_start_offset == 12
        assert not os.path.exists(fio.local_path(fio.join(pdir, "00000000000000000000.log")))
        with pytest.raises(OffsetOutOfRangeError, match=r"\[12, 35\]"):
            plog.read(11, 100)
        (frame, *_) = iter_frames(plog.read(12, 1).data)
        assert frame.header.base_offset == 10
        assert plog.delete_segments_before(5) == []  # never moves back
        with pytest.raises(OffsetOutOfRangeError, match="high watermark is 35"):
            plog.delete_segments_before(36)
        assert plog.delete_segments_before(35) == [10, 20]  # the active one stays
        assert plog.log_start_offset == 35
    with PartitionLog.open(fio, pdir, config) as plog:
        assert (plog.log_start_offset, plog.log_end_offset) == (35, 35)
    assert LogReader(fio, pdir).log_start_offset() == 35


def test_leader_epochs_are_stamped_recorded_and_fenced(fio, pdir):
    with PartitionLog.open(fio, pdir, leader_epoch=1) as plog:
        plog.append(typed_frame([1, 2]))
        plog.append(typed_frame([3]), leader_epoch=2)
        with pytest.raises(FencedLeaderEpochError, match="epoch 1 is older"):
            plog.append(typed_frame([4]), leader_epoch=1)
        plog.flush()
        epochs = [f.header.leader_epoch for f in iter_frames(plog.read(0, 1 << 20).data)]
        assert epochs == [1, 2]
    with pytest.raises(FencedLeaderEpochError, match="orders-3"):
        PartitionLog.open(fio, pdir, leader_epoch=1)
    with PartitionLog.open(fio, pdir, leader_epoch=5) as plog:
        assert plog.end_offset_for_epoch(1) == (1, 2)
        assert plog.end_offset_for_epoch(2) == (2, 3)
        assert plog.end_offset_for_epoch(4) == (2, 3)
        assert plog.end_offset_for_epoch(9) == (5, 3)
        assert plog.end_offset_for_epoch(0) == (-1, -1)


def test_single_writer_lease_and_fencing(fio, pdir):
    old = PartitionLog.open(fio, pdir)
    old.append(typed_frame([1]))
    old.flush()
    with pytest.raises(LeaseHeldError):
        PartitionLog.open(fio, pdir, leader_epoch=1)
    new = PartitionLog.open(fio, pdir, leader_epoch=1, fence=True)
    assert new.log_end_offset == 1
    assert old.failed is None
    with pytest.raises(LeaseExpiredError):  # the old leader is fenced: at the write
        old.append(typed_frame([2]))         # (or, if only buffered, at the flush)
        old.flush()
    assert isinstance(old.failed, LeaseExpiredError)  # what the broker's leadership reads
    assert new.failed is None
    with pytest.raises(StorageError, match="failed earlier"):
        old.append(typed_frame([3]))
    old.close()
    new.append(typed_frame([9]))
    new.flush()
    assert [f.batch().column("n")[0].as_py() for f in iter_frames(new.read(0, 1 << 20).data)] == [1, 9]
    new.close()
    with pytest.raises(StorageError, match="is closed"):
        new.append(typed_frame([1]))


def test_flush_messages_syncs_and_advances_the_high_watermark(fio, pdir):
    with PartitionLog.open(fio, pdir, {"flush.messages": 3}) as plog:
        plog.append(typed_frame([1, 2]))
        assert plog.high_watermark == 0
        plog.append(typed_frame([3]))
        assert plog.high_watermark == 3


def test_update_config_applies_to_the_next_append(fio, pdir):
    size = len(typed_frame([0] * 5))
    with PartitionLog.open(fio, pdir) as plog:
        fill(plog, frames=3, per=5)
        assert len(plog.segments) == 1
        plog.update_config(LogConfig.from_props({"segment.bytes": str(size + 10)}))
        assert plog.config.segment_bytes == size + 10
        fill(plog, frames=2, per=5)
        assert len(plog.segments) == 3  # the full segment rolled, then each frame's
        with pytest.raises(InvalidArgumentError, match="update_config takes a LogConfig"):
            plog.update_config({"segment.bytes": "1"})
        with pytest.raises(AttributeError):
            plog.config = LogConfig()  # only through update_config


def test_view_is_one_moment_and_try_lock_never_waits(fio, pdir):
    size = len(typed_frame([0] * 5))
    with PartitionLog.open(fio, pdir, {"segment.bytes": 3 * size + 10}) as plog:
        fill(plog, frames=4, per=5)
        plog.append(typed_frame([1, 2]))  # not flushed: beyond the high watermark
        view = plog.view()
        assert (view.log_start_offset, view.high_watermark, view.log_end_offset) == \
            (0, 20, 22)
        assert [(s.base_offset, n) for s, n in view.segments] == [(0, 3 * size), (15, size)]
        with plog.try_lock() as locked:
            assert locked
        with lock_held_elsewhere(plog):
            with plog.try_lock() as locked:
                assert not locked  # held by the other thread: no wait
        with plog.try_lock() as locked:
            assert locked


def test_open_rejects_bad_arguments(fio, pdir):
    with pytest.raises(InvalidArgumentError, match="fileio must be a FileIO"):
        PartitionLog.open("file:///x", pdir)
    with pytest.raises(InvalidArgumentError, match="dir_url"):
        PartitionLog.open(fio, 7)
    with pytest.raises(InvalidArgumentError, match="config must be"):
        PartitionLog.open(fio, pdir, 3)
    with pytest.raises(InvalidArgumentError, match="leader_epoch"):
        PartitionLog.open(fio, pdir, leader_epoch=-1)


def test_stored_frames_decode_with_their_offsets(fio, pdir):
    with PartitionLog.open(fio, pdir) as plog:
        fill(plog, frames=3, per=4)
        data = plog.read(0, 1 << 20).data
    offsets = [decode_frame(data, 0).offsets().to_pylist()]
    assert offsets == [[0, 1, 2, 3]]
