"""The instance record of a standalone broker (sparklog/server/instance.py): a
restart after a crash fences, a live broker on the same root is left alone, a record of
another host is taken over without fencing, a graceful stop removes the record."""

from __future__ import annotations

import json
import subprocess
import sys

from sparklog.server.instance import InstanceRecord
from sparklog.storage import open_fileio
from sparklog.storage.posix import HOST, proc_start


def write_record(fs, rec: InstanceRecord, doc: dict) -> None:
    fs.mkdirs(fs.split(rec.path)[0])
    fs.write_atomic(rec.path, json.dumps(doc).encode())


def test_claims_after_a_dead_process_and_fences(storage_root):
    fs = open_fileio(storage_root)
    rec = InstanceRecord(fs, storage_root, 3)
    assert rec.path.endswith("/brokers/3.instance.json")
    assert rec.claim() is False  # first start: nobody before
    mine = json.loads(fs.read_all(rec.path))
    assert mine["host"] == HOST and mine["pid"] > 0
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    fs.delete(rec.path)
    write_record(fs, rec, {"host": HOST, "pid": int(dead.stdout), "start": "1"})
    again = InstanceRecord(fs, storage_root, 3)
    assert again.claim() is True  # the predecessor is gone: fence its partitions
    assert json.loads(fs.read_all(rec.path))["token"] == again.record["token"]
    again.release()
    assert not fs.exists(rec.path)
    assert [f.name for f in fs.list(fs.split(rec.path)[0])] == []


def test_live_broker_on_this_host_is_left_alone(storage_root):
    fs = open_fileio(storage_root)
    rec = InstanceRecord(fs, storage_root, 0)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            doc = {"host": HOST, "pid": live.pid, "start": proc_start(live.pid)}
            write_record(fs, rec, doc)
            assert rec.claim() is False
            assert json.loads(fs.read_all(rec.path)) == doc  # still the live one's
            rec.release()  # not ours: kept
            assert fs.exists(rec.path)
        finally:
            live.kill()


def test_record_of_another_host_is_taken_over_without_fencing(storage_root):
    fs = open_fileio(storage_root)
    rec = InstanceRecord(fs, storage_root, 0)
    write_record(fs, rec, {"host": "elsewhere.example", "pid": 1, "start": "1"})
    assert rec.claim() is False  # its processes cannot be seen: HDFS's soft limit decides
    assert json.loads(fs.read_all(rec.path))["host"] == HOST
