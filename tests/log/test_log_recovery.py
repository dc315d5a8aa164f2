"""Crash recovery of the partition log on real files: torn and corrupt tails cut at every
byte, crashes at every step of the tail repair and of a roll, a real killed process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from sparklog.errors import CorruptRecordError, StorageFileNotFoundError
from sparklog.log import LogReader, PartitionLog
from tests.support.logfiles import RecordingFileIO, SimulatedCrash, typed_frame

#: The repository's root (a child process imports the tests' helpers from it).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FRAME = len(typed_frame([0]))
CONFIG = {"segment.bytes": 2 * FRAME, "index.interval.bytes": 1}
IGNORE_LEASES = shutil.ignore_patterns("*.sparklog-lease")


def build(fio, directory, count=4):
    """A log of ``count`` one-record frames (values = offsets), two per segment."""
    with PartitionLog.open(fio, directory, CONFIG) as plog:
        for i in range(count):
            plog.append(typed_frame([i], [100 + i]))
    return directory


def values(fio, directory):
    reader = LogReader(fio, directory)
    end = reader.log_end_offset()
    return [v for b in reader.read_batches(0, end) for v in b.column("n").to_pylist()]


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap", ".tmp"))]


def check_recovered(fio, directory, expected_end, append=True):
    """Open (fencing), check the state, append once more and check again."""
    with PartitionLog.open(fio, directory, CONFIG, fence=True) as plog:
        assert plog.log_end_offset == expected_end
        if append:
            plog.append(typed_frame([1000], [999]))
    assert values(fio, directory) == list(range(expected_end)) + ([1000] if append else [])
    assert leftovers(directory) == []


def test_torn_tail_cut_at_every_byte(fio, tmp_path):
    base = build(fio, str(tmp_path / "base"))
    active = os.path.join(base, "00000000000000000002.log")
    data = open(active, "rb").read()
    assert len(data) == 2 * FRAME
    for cut in range(FRAME, 2 * FRAME + 1):
        d = str(tmp_path / f"cut{cut}")
        shutil.copytree(base, d, ignore=IGNORE_LEASES)
        with open(os.path.join(d, "00000000000000000002.log"), "wb") as f:
            f.write(data[:cut])
        # a reader sees exactly the complete frames, before and after recovery
        reader = LogReader(fio, d)
        assert reader.log_end_offset() == (4 if cut == 2 * FRAME else 3)
        assert (reader.tail_error is None) == (cut in (FRAME, 2 * FRAME))
        # appending again is checked on a sample of cuts (each costs a few fsyncs)
        check_recovered(fio, d, 4 if cut == 2 * FRAME else 3,
                        append=cut % 16 == 0 or cut - FRAME < 70)


def test_flipped_byte_anywhere_in_the_last_frame(fio, tmp_path):
    base = build(fio, str(tmp_path / "base"))
    active = os.path.join(base, "00000000000000000002.log")
    data = open(active, "rb").read()
    # bytes 12-15 (leader epoch) are outside the CRC by design, as in Kafka's v2 batches;
    # every header byte is flipped, and a spread of body bytes
    positions = [FRAME + p for p in range(FRAME) if (p < 61 or p % 7 == 0 or p > FRAME - 5)
                 and not 12 <= p < 16]
    for n, pos in enumerate(positions):
        d = str(tmp_path / f"flip{pos}")
        shutil.copytree(base, d, ignore=IGNORE_LEASES)
        damaged = bytearray(data)
        damaged[pos] ^= 0x01
        with open(os.path.join(d, "00000000000000000002.log"), "wb") as f:
            f.write(damaged)
        check_recovered(fio, d, 3, append=n % 8 == 0)


def test_corrupt_frame_in_the_middle_cuts_everything_after_it(fio, tmp_path):
    d = str(tmp_path / "p")
    with PartitionLog.open(fio, d) as plog:
        for i in range(6):
            plog.append(typed_frame([i]))
    path = os.path.join(d, "00000000000000000000.log")
    with open(path, "r+b") as f:
        f.seek(2 * FRAME + 100)
        byte = f.read(1)
        f.seek(2 * FRAME + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with PartitionLog.open(fio, d) as plog:
        assert plog.log_end_offset == 2
    assert os.path.getsize(path) == 2 * FRAME


def test_crash_at_every_step_of_the_tail_repair(fio, tmp_path):
    base = build(fio, str(tmp_path / "base"))
    with open(os.path.join(base, "00000000000000000002.log"), "ab") as f:
        f.write(typed_frame([99])[:100])  # a torn frame
    step, crashed_in = 0, []
    while True:
        step += 1
        d = str(tmp_path / f"step{step}")
        shutil.copytree(base, d, ignore=IGNORE_LEASES)
        recording = RecordingFileIO(fio)
        recording.crash_at(step)
        try:
            PartitionLog.open(recording, d, CONFIG).close()
        except SimulatedCrash as crash:
            crashed_in.append(str(crash).split()[0])
            check_recovered(fio, d, 4)
            continue
        break
    # the crash hit each step of copy-prefix-and-swap, and each was finished or undone
    for needed in ("create", "write", "sync", "close", "rename", "delete"):
        assert needed in crashed_in, crashed_in
    assert crashed_in.count("rename") >= 2


def test_recording_fileio_creates_as_the_fileio_it_wraps(fio, tmp_path):
    """RecordingFileIO.create takes FileIO.create's arguments: ``parents=False`` is
    the non-recursive create (a missing parent directory is StorageFileNotFoundError
    naming it, no directory made), ``overwrite`` replaces; each call is recorded."""
    recording = RecordingFileIO(fio)
    missing = tmp_path / "gone"
    with pytest.raises(StorageFileNotFoundError, match="gone"):
        recording.create(fio.join(missing.as_uri(), "f"), parents=False)
    assert not missing.exists()
    path = fio.join(tmp_path.as_uri(), "f")
    for overwrite in (False, True):
        out = recording.create(path, overwrite=overwrite, parents=False)
        out.write(b"x")
        out.close()
    assert [m for m, _ in recording.calls].count("create") == 3
    assert (tmp_path / "f").read_bytes() == b"x"


def test_crash_at_every_step_of_a_roll(fio, tmp_path):
    base = build(fio, str(tmp_path / "base"), count=3)  # the active segment holds 1 frame
    step = 0
    while True:
        step += 1
        d = str(tmp_path / f"step{step}")
        shutil.copytree(base, d, ignore=IGNORE_LEASES)
        recording = RecordingFileIO(fio)
        plog = PartitionLog.open(recording, d, CONFIG)
        plog.append(typed_frame([3], [103]))
        plog.flush()
        recording.crash_at(step)
        try:
            plog.append(typed_frame([4], [104]))  # rolls first; the old segment is sealed
            plog.close()                           # in the background, close waits for it
        except SimulatedCrash:
            # frame 4 (buffered in the new segment's stream) reached the file only if
            # that stream's sync got past the crash point
            new_sync = ("sync", os.path.join(d, "00000000000000000004.log"))
            pushed = recording.calls.count(new_sync) - (
                recording.crashed == " ".join(new_sync))
            check_recovered(fio, d, 5 if pushed else 4)
            continue
        break
    assert step > 6
    assert {"verify_lease", "close", "rename", "create"} <= {m for m, _ in recording.calls}


def test_rolled_segment_left_unsealed_is_sealed_on_open(fio, tmp_path):
    d = build(fio, str(tmp_path / "p"), count=6)  # segments 0, 2 (sealed), 4 (active)
    for ext in ("index", "timeindex"):
        os.remove(os.path.join(d, f"00000000000000000002.{ext}"))  # the crash came first
    check_recovered(fio, d, 6)
    assert os.path.exists(os.path.join(d, "00000000000000000002.index"))


def test_rolled_segment_with_a_torn_tail_cuts_the_log_there(fio, tmp_path):
    # a power loss before the background sync: the rolled segment lost its tail, while
    # the segment after it (never synced either) survived
    d = build(fio, str(tmp_path / "p"), count=6)
    rolled = os.path.join(d, "00000000000000000002.log")
    for ext in ("index", "timeindex"):
        os.remove(os.path.join(d, f"00000000000000000002.{ext}"))
    os.truncate(rolled, FRAME + 100)
    check_recovered(fio, d, 3)
    assert not os.path.exists(os.path.join(d, "00000000000000000004.log"))
    assert os.path.getsize(rolled) == FRAME + len(typed_frame([1000], [999]))


def test_sealed_segment_corruption_is_reported_with_path_and_position(fio, tmp_path):
    d = build(fio, str(tmp_path / "p"), count=6)
    sealed = os.path.join(d, "00000000000000000002.log")
    os.remove(os.path.join(d, "00000000000000000002.index"))  # forces a rebuild by scanning
    with open(sealed, "r+b") as f:
        f.seek(FRAME + 70)
        f.write(b"\xff\xff")
    with pytest.raises(CorruptRecordError) as info:
        PartitionLog.open(fio, d, CONFIG)
    assert info.value.position == FRAME
    assert "00000000000000000002.log" in str(info.value) and info.value.path.endswith(".log")


def test_killed_writer_process_loses_nothing_it_flushed(fio, tmp_path):
    d = str(tmp_path / "p")
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {ROOT!r})
        from sparklog.storage import open_fileio
        from sparklog.log import PartitionLog
        from tests.support.logfiles import typed_frame
        fio = open_fileio({tmp_path.as_uri()!r})
        plog = PartitionLog.open(fio, {d!r}, {CONFIG!r})
        for i in range(5):
            plog.append(typed_frame([i]))
        plog.flush()
        plog._out.write(typed_frame([5])[:150])   # half a frame reaches the file...
        plog._out.flush()
        os._exit(0)                               # ...and the process dies holding its lease
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert any(n.endswith(".sparklog-lease") for n in os.listdir(d))
    with PartitionLog.open(fio, d, CONFIG) as plog:  # a dead owner's lease expires: no fence
        assert plog.log_end_offset == 5
        plog.append(typed_frame([5]))
    assert values(fio, d) == [0, 1, 2, 3, 4, 5]
