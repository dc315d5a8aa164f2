"""``sparklog dump-log``: frame and record lines, indexes, URLs, and non-zero exits that
name the position and reason of corruption."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sparklog.cli.main import main
from sparklog.format.header import unpack_header
from sparklog.log import PartitionLog
from sparklog.storage import open_fileio
from tests.support.logfiles import raw_frame, typed_frame


@pytest.fixture
def pdir(tmp_path):
    fio = open_fileio(tmp_path.as_uri())
    d = str(tmp_path / "topics" / "events" / "0")
    size = len(raw_frame([b"hello", b"w\xffx"]))
    with PartitionLog.open(fio, d, {"segment.bytes": size + 600, "index.interval.bytes": 1},
                           leader_epoch=3) as plog:
        plog.append(raw_frame([b"hello", b"w\xffx"], [1000, 1001], keys=[b"k", None],
                              producer_id=7, producer_epoch=1, base_sequence=10))
        plog.append(typed_frame([41, 42], [2000, 2001], compression="zstd"))
        plog.append(typed_frame([43], [3000]))
    return d


def dump(capsys, *argv):
    status = main(["dump-log", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_frames_of_a_segment(capsys, pdir):
    status, out, err = dump(capsys, os.path.join(pdir, "00000000000000000000.log"))
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("Dumping ") and lines[0].endswith("00000000000000000000.log")
    first = lines[1]
    for part in ("baseOffset: 0", "lastOffset: 1", "count: 2", "firstTimestamp: 1000",
                 "maxTimestamp: 1001", "producerId: 7", "producerEpoch: 1", "baseSequence: 10",
                 "lastSequence: 11", "partitionLeaderEpoch: 3", "position: 0",
                 "compresscodec: none", "isvalid: true"):
        assert part in first, part
    assert "compresscodec: zstd" in lines[2] and "baseOffset: 2" in lines[2]
    assert lines[-1] == f"2 frames, 4 records, {os.path.getsize(os.path.join(pdir, '00000000000000000000.log'))} bytes: all valid"


def test_deep_iteration_and_print_data_log_on_a_directory(capsys, pdir):
    status, out, _ = dump(capsys, "--deep-iteration", pdir)
    assert status == 0
    assert "| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 5 headerKeys: []" in out
    assert "payload" not in out
    assert out.count("Dumping ") == 2  # both segments, in offset order
    status, out, _ = dump(capsys, "--print-data-log", pdir)
    assert "key: k payload: hello" in out
    assert "key: null payload: w\\xffx" in out
    assert '| offset: 3 CreateTime: 2001 record: {"n": 42}' in out
    assert '| offset: 4 CreateTime: 3000 record: {"n": 43}' in out


def test_indexes_and_urls(capsys, pdir, tmp_path):
    url = (tmp_path / "topics" / "events" / "0" / "00000000000000000000.index").as_uri()
    status, out, _ = dump(capsys, url)
    assert status == 0
    assert "baseOffset: 0 nextOffset: 4" in out and "frames: 2 noControl: true" in out
    assert "offset: 2 position: " in out
    status, out, _ = dump(capsys, os.path.join(pdir, "00000000000000000000.timeindex"))
    assert status == 0 and "timestamp: 1001 offset: 2" in out


def test_corruption_exits_non_zero_naming_position_and_reason(capsys, pdir):
    path = os.path.join(pdir, "00000000000000000000.log")
    first_size = unpack_header(open(path, "rb").read(61)).size
    with open(path, "r+b") as f:
        f.seek(first_size + 200)
        f.write(b"\x00\xff")
    status, out, err = dump(capsys, path)
    assert status == 1
    assert f"position: {first_size}" in out and "isvalid: false" in out
    assert f"CRC32C mismatch at position {first_size} of {path}" in err
    with open(path, "ab") as f:
        f.write(b"tail")
    os.truncate(path, first_size + 30)
    status, out, err = dump(capsys, path)
    assert status == 1 and f"truncated frame at position {first_size}" in err


def test_missing_path_and_real_command(capsys, tmp_path, pdir):
    status, _, err = dump(capsys, str(tmp_path / "nope"))
    assert status == 1 and "nope: does not exist" in err
    with open(os.path.join(pdir, "00000000000000000004.log"), "ab") as f:
        f.write(b"\x01" * 70)  # garbage after the last frame
    proc = subprocess.run([sys.executable, "-m", "sparklog.cli.main", "dump-log", pdir],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "baseOffset: 4" in proc.stdout
    assert "00000000000000000004.log" in proc.stderr and "position 493" in proc.stderr
