"""The FileIO's ``on_sync`` observer (what the broker's ``sparklog_storage_sync_seconds``
histogram is fed by) on every backend: the local disk, and HDFS through Hadoop's client
and through WebHDFS on the run's real cluster (tests/support/hdfscluster.py). Each
completed hflush and hsync is reported once; a started sync is timed by its push and
its wait for the storage, not by the time its caller takes before waiting; a sync that
fails is not reported."""

from __future__ import annotations

import time
import uuid

import pytest

from sparklog.errors import LeaseExpiredError
from sparklog.storage import open_fileio


@pytest.fixture(params=["local", "hdfs", "webhdfs"])
def observed(request, tmp_path, monkeypatch):
    """(fileio whose ``on_sync`` appends to the list, a fresh directory, that list)."""
    if request.param == "local":
        base = tmp_path.as_uri()
    else:
        cluster = request.getfixturevalue("hdfs_cluster")
        monkeypatch.setenv("HADOOP_CONF_DIR", cluster.conf_dir)
        base = (cluster.hdfs_uri if request.param == "hdfs" else cluster.webhdfs_uri) \
            + "/tmp/sparklog-sync-timing"
    fs = open_fileio(base)
    root = fs.join(base, uuid.uuid4().hex[:12])
    fs.mkdirs(root)
    seen: list = []
    fs.on_sync = lambda kind, seconds: seen.append((kind, seconds))
    yield fs, root, seen
    if request.param != "local":
        fs.delete(root, recursive=True)
    fs.close()


def test_each_completed_hflush_and_hsync_is_reported_once(observed):
    fs, root, seen = observed
    out = fs.create(fs.join(root, "a.log"))
    out.write(b"flushed|")
    out.flush()
    out.write(b"synced|")
    out.sync()
    out.write(b"started|")
    out.start_sync()()
    out.write(b"closed")
    out.close()  # pushes (an hflush) and makes the pushed bytes durable (an hsync)
    assert [kind for kind, _ in seen] == ["hflush", "hsync", "hsync", "hflush", "hsync"]
    assert all(seconds >= 0 for _, seconds in seen)
    assert fs.read_all(out.path) == b"flushed|synced|started|closed"


def test_a_started_sync_is_timed_by_its_wait_not_by_the_callers_gap(observed):
    fs, root, seen = observed
    out = fs.create(fs.join(root, "b.log"))
    out.write(b"x" * 1000)
    t0 = time.perf_counter()
    finish = out.start_sync()
    t1 = time.perf_counter()
    time.sleep(0.5)  # the caller's own work between starting the sync and waiting
    t2 = time.perf_counter()
    finish()
    t3 = time.perf_counter()
    out.close()
    [(kind, seconds)] = seen
    assert kind == "hsync"
    assert seconds <= (t1 - t0) + (t3 - t2)


def test_a_failed_sync_is_not_reported(observed):
    fs, root, seen = observed
    out = fs.create(fs.join(root, "c.log"))
    out.write(b"kept|")
    out.sync()
    out.write(b"fenced|")
    fs.recover_lease(out.path)
    with pytest.raises(LeaseExpiredError):
        out.sync()
    out.close()
    assert [kind for kind, _ in seen] == ["hsync"]
