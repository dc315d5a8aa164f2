"""LogReader: exact offset ranges as Arrow batches, explicit offsets, control frames,
timestamps, bad ranges, and reading while a writer appends and rolls."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from sparklog.errors import CorruptRecordError, InvalidArgumentError, OffsetOutOfRangeError
from sparklog.format.frame import encode_frame
from sparklog.log import LogReader, PartitionLog
from tests.support.logfiles import TYPED, RecordingFileIO, raw_frame, typed_frame

FRAME5 = len(typed_frame([0] * 5))


@pytest.fixture
def pdir(tmp_path):
    return str(tmp_path / "topics" / "clicks" / "0")


def write_numbers(fio, pdir, frames=12, per=5, config=None):
    with PartitionLog.open(fio, pdir, config or {"segment.bytes": 3 * FRAME5}) as plog:
        for i in range(frames):
            plog.append(typed_frame(list(range(i * per, (i + 1) * per)),
                                    [10_000 + i * per + j for j in range(per)]))


def rows(batches):
    return [(o, n) for b in batches
            for o, n in zip(b.column("__offset").to_pylist(), b.column("n").to_pylist())]


def test_read_batches_is_exact_for_every_range(fio, pdir):
    write_numbers(fio, pdir)
    reader = LogReader(fio, pdir)
    assert (reader.log_start_offset(), reader.log_end_offset()) == (0, 60)
    assert LogReader(fio, pdir).offsets() == reader.offsets() == (0, 60)
    assert [s.base_offset for s in reader.segments()] == [0, 15, 30, 45]
    for start in range(0, 61, 7):
        for end in range(start, 61, 11):
            batches = list(reader.read_batches(start, end))
            assert rows(batches) == [(o, o) for o in range(start, end)], (start, end)
            for b in batches:
                assert b.schema.field("__offset").type == pa.int64()
                assert b.column("__timestamp").cast(pa.int64()).to_pylist() == \
                    [10_000 + o for o in b.column("__offset").to_pylist()]
    assert rows(reader.read_batches(58)) == [(58, 58), (59, 59)]  # end defaults to the log end


def test_raw_records_and_timestamp_type_column(fio, pdir):
    with PartitionLog.open(fio, pdir) as plog:
        plog.append(raw_frame([b"a", b"b"], [5, 6], keys=[b"k1", None]))
    batch, = LogReader(fio, pdir).read_batches(0, 2, timestamp_type=True)
    assert batch.column("key").to_pylist() == [b"k1", None]
    assert batch.column("value").to_pylist() == [b"a", b"b"]
    assert batch.column("__timestamp_type").to_pylist() == [0, 0]


def test_explicit_offset_frames_of_compacted_data(fio, pdir):
    batch = pa.RecordBatch.from_arrays([pa.array([10, 12, 15], pa.int64())], schema=TYPED)
    with PartitionLog.open(fio, pdir) as plog:
        plog.append(encode_frame(batch, timestamps=[1, 2, 3], offset_deltas=[0, 2, 5]))
        plog.append(typed_frame([16]))
        assert plog.log_end_offset == 7
    reader = LogReader(fio, pdir)
    got = list(reader.read_batches(0, 7))
    assert "__offset_delta" not in got[0].schema.names
    assert rows(got) == [(0, 10), (2, 12), (5, 15), (6, 16)]
    assert rows(reader.read_batches(1, 5)) == [(2, 12)]
    assert rows(reader.read_batches(3, 4)) == []


def test_control_frames_are_skipped_by_read_batches(fio, pdir):
    with PartitionLog.open(fio, pdir) as plog:
        plog.append(typed_frame([1]))
        plog.append(typed_frame([0], control=True))
        plog.append(typed_frame([3]))
    reader = LogReader(fio, pdir)
    assert rows(reader.read_batches(0, 3)) == [(0, 1), (2, 3)]
    assert [f.header.is_control for f in reader.iter_frames(0, 3)] == [False, True, False]


def test_bad_ranges(fio, pdir):
    write_numbers(fio, pdir, frames=2)
    reader = LogReader(fio, pdir)
    with pytest.raises(OffsetOutOfRangeError) as info:
        list(reader.read_batches(5, 11))
    err = info.value
    assert (err.topic, err.partition, err.offset, err.log_end_offset) == ("clicks", 0, 11, 10)
    assert "clicks-0" in str(err) and pdir in str(err)
    with pytest.raises(OffsetOutOfRangeError, match="offset 12 is outside"):
        list(reader.read_batches(12))
    with pytest.raises(InvalidArgumentError, match="start offset 6 is after end offset 5"):
        list(reader.read_batches(6, 5))
    with pytest.raises(InvalidArgumentError, match="start offset must be an int"):
        list(reader.read_batches("0", 5))
    with pytest.raises(InvalidArgumentError, match="timestamp must be an int"):
        reader.offset_for_timestamp("now")
    with pytest.raises(InvalidArgumentError, match="fileio must be a FileIO"):
        LogReader(None, pdir)


def test_locate_and_offset_for_timestamp(fio, pdir):
    write_numbers(fio, pdir, config={"segment.bytes": 3 * FRAME5, "index.interval.bytes": 1})
    reader = LogReader(fio, pdir)
    seg, position = reader.locate(33)
    assert seg.base_offset == 30 and position == 0
    seg, position = reader.locate(41)
    assert seg.base_offset == 30 and position == 2 * FRAME5
    assert reader.locate(60)[1] == reader.segments()[-1].size
    assert reader.offset_for_timestamp(10_037) == 37
    assert reader.offset_for_timestamp(0) == 0
    assert reader.offset_for_timestamp(10_060) is None


def test_missing_index_is_rebuilt_in_memory_only(fio, pdir):
    write_numbers(fio, pdir)
    index = os.path.join(pdir, "00000000000000000015.index")
    os.remove(index)
    recording = RecordingFileIO(fio)
    reader = LogReader(recording, pdir)
    assert rows(reader.read_batches(16, 18)) == [(16, 16), (17, 17)]
    assert not os.path.exists(index)
    assert not [c for c in recording.calls if c[0] in recording.MUTATING]


def test_corrupt_sealed_segment_raises_with_path_and_position(fio, pdir):
    write_numbers(fio, pdir)
    path = os.path.join(pdir, "00000000000000000015.log")
    with open(path, "r+b") as f:
        f.seek(FRAME5 + 200)
        f.write(b"\x00\x01\x02")
    with pytest.raises(CorruptRecordError) as info:
        list(LogReader(fio, pdir).read_batches(15, 30))
    assert info.value.position == FRAME5 and info.value.path.endswith("00000000000000000015.log")
    assert f"position {FRAME5}" in str(info.value)


def test_reading_while_a_writer_appends_and_rolls(fio, pdir):
    per, frames = 10, 150
    stop = threading.Event()
    errors = []

    def write():
        try:
            with PartitionLog.open(fio, pdir, {"segment.bytes": 4 * len(typed_frame([0] * per))}) as plog:
                for i in range(frames):
                    plog.append(typed_frame(list(range(i * per, (i + 1) * per))))
                    if i % 3 == 0:
                        plog.flush()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    PartitionLog.open(fio, pdir).close()
    writer = threading.Thread(target=write)
    writer.start()
    seen, reads = 0, 0
    try:
        while True:
            done = stop.is_set()  # checked before reading: the last pass sees everything
            reader = LogReader(fio, pdir)
            end = reader.log_end_offset()
            assert end >= seen
            assert rows(reader.read_batches(0, end)) == [(o, o) for o in range(end)]
            seen, reads = end, reads + 1
            if done:
                break
    finally:
        writer.join()
    assert not errors
    assert seen == per * frames and reads > 2


def test_a_fresh_reader_reads_the_active_segment_once(fio, pdir):
    write_numbers(fio, pdir, frames=6, config={"segment.bytes": 100 * FRAME5})
    recording = RecordingFileIO(fio)
    reader = LogReader(recording, pdir)
    assert rows(reader.read_batches(10, 25)) == [(o, o) for o in range(10, 25)]
    active = reader.segments()[-1].path
    assert recording.read_paths().count(active) == 1  # no separate scan for the log end
    assert reader.log_end_offset() == 30


# --- the end of the active segment: frame headers, and the last frame whole ----------------


def active_segment_file(pdir) -> str:
    return sorted(f for f in os.listdir(pdir) if f.endswith(".log"))[-1]


def flip_body_byte(pdir, frame_index: int) -> int:
    """Flip a byte in the body of frame ``frame_index`` of the active segment (its
    header stays sound, its CRC no longer matches); returns the frame's position."""
    path = os.path.join(pdir, active_segment_file(pdir))
    with open(path, "r+b") as f:
        pos = frame_index * FRAME5
        f.seek(pos + FRAME5 - 3)
        b = f.read(1)
        f.seek(pos + FRAME5 - 3)
        f.write(bytes([b[0] ^ 0xFF]))
    return pos


def counting_reads(fio) -> list:
    """Make ``fio``'s readers note the size of every read; the list of sizes."""
    sizes = []
    open_input = fio.open_input

    def counting_open(path):
        stream = open_input(path)
        real_read = stream.read

        def read(n=-1):
            data = real_read(n)
            sizes.append(len(data))
            return data

        stream.read = read
        return stream

    fio.open_input = counting_open
    return sizes


def test_log_end_skips_large_frame_bodies_and_reads_the_last_frame_whole(
        fio, pdir, monkeypatch):
    from sparklog.log import scan

    write_numbers(fio, pdir, frames=40, config={"segment.bytes": 1000 * FRAME5})
    # frames of FRAME5 bytes count as large: each body is skipped, one header read each
    monkeypatch.setattr(scan, "SKIP_BODY_BYTES", FRAME5 // 2)
    monkeypatch.setattr(scan, "HEADER_READ_BYTES", 1)
    sizes = counting_reads(fio)
    reader = LogReader(fio, pdir)
    assert reader.log_end_offset() == 200 and reader.tail_error is None
    assert sizes == [61] * 40 + [FRAME5]
    assert rows(reader.read_batches(0, 200)) == [(o, o) for o in range(200)]


def test_log_end_reads_small_frames_through_in_chunks(fio, pdir):
    write_numbers(fio, pdir, frames=40, config={"segment.bytes": 1000 * FRAME5})
    sizes = counting_reads(fio)
    reader = LogReader(fio, pdir)
    assert reader.log_end_offset() == 200 and reader.tail_error is None
    assert sizes == [40 * FRAME5]  # one read; the last frame is checked from it


def test_log_end_stops_before_a_last_frame_whose_crc_fails(fio, pdir):
    write_numbers(fio, pdir, frames=6, config={"segment.bytes": 100 * FRAME5})
    pos = flip_body_byte(pdir, 5)
    reader = LogReader(fio, pdir)
    assert reader.log_end_offset() == 25
    assert "CRC32C mismatch" in str(reader.tail_error) and str(pos) in str(reader.tail_error)
    assert rows(reader.read_batches(0, 25)) == [(o, o) for o in range(25)]


def test_a_damaged_frame_behind_the_tail_fails_the_read_that_reaches_it(fio, pdir):
    """The end scan checks the CRC of the last frame only (frames behind it were written
    whole before it); a frame damaged on storage behind the tail is caught by the read:
    the records before it are exact, then CorruptRecordError names its position."""
    write_numbers(fio, pdir, frames=6, config={"segment.bytes": 100 * FRAME5})
    pos = flip_body_byte(pdir, 2)
    reader = LogReader(fio, pdir)
    assert reader.log_end_offset() == 30 and reader.tail_error is None
    got = []
    with pytest.raises(CorruptRecordError, match=f"CRC32C mismatch at position {pos} "):
        for batch in reader.read_batches(0, 30):
            got.extend(rows([batch]))
    assert got == [(o, o) for o in range(10)]
