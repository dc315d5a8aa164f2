"""The broker cleaner's helper processes (log.cleaner.process.enable): a cleaning run
in a real helper process equals the same cleaning in this process; a helper killed
mid-cleaning leaves only uncommitted files, the live set untouched, and the next
cleaning (a new helper) deletes them and succeeds; a helper dies with its broker, even
one still starting when its broker died; stopping the cleaner lets each thread's
cleaning finish, whichever thread started its helper."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from sparklog.errors import SparklogError
from sparklog.format.frame import encode_frame, raw_batch
from sparklog.log import LogReader, PartitionLog
from sparklog.log.cleaner import clean
from sparklog.log.layout import PartitionListing
from sparklog.retention.cleaner_process import CleanerProcesses
from sparklog.storage import open_fileio
from tests.support.processes import child_processes, kill_process, process_info
from tests.support.waiting import wait_until

CONFIG = {"cleanup.policy": "compact", "segment.bytes": 8000, "file.delete.delay.ms": 0}


def write_log(fio, d: str, frames: int = 60, keys: int = 40) -> None:
    """``frames`` frames of 20 keyed records each, keys cycling through ``keys``."""
    with PartitionLog.open(fio, d, CONFIG) as plog:
        for f in range(frames):
            ks = [b"k%03d" % ((f * 20 + i) % keys) for i in range(20)]
            vs = [b"v%06d" % (f * 20 + i) for i in range(20)]
            plog.append(encode_frame(raw_batch(vs, keys=ks), timestamps=[1000] * 20))
        plog.roll()


def records(fio, d: str):
    reader = LogReader(fio, d)
    return [(o, k, v) for b in reader.read_batches(reader.log_start_offset(),
                                                    reader.log_end_offset())
            for o, k, v in zip(b.column("__offset").to_pylist(), b.column("key").to_pylist(),
                               b.column("value").to_pylist())]


@pytest.fixture
def helpers(tmp_path):
    procs = CleanerProcesses(tmp_path.as_uri(), workers=1)
    yield procs
    procs.close()


def test_cleaning_in_a_helper_process_equals_the_cleaning_in_process(tmp_path, helpers):
    fio = open_fileio(tmp_path.as_uri())
    here, there = str(tmp_path / "a" / "0"), str(tmp_path / "b" / "0")
    write_log(fio, here)
    shutil.copytree(here, there)
    with PartitionLog.open(fio, here, CONFIG) as plog:
        local = clean(plog, 5000, force=True)
    with PartitionLog.open(fio, there, CONFIG) as plog:
        remote = clean(plog, 5000, force=True, worker=helpers)
        assert plog.segments[0].generation == 1  # the writer's live set is the new one
    assert helpers.pid() != os.getpid()
    assert (remote.end_offset, remote.records_removed, remote.segments_written) == \
        (local.end_offset, local.records_removed, local.segments_written)
    assert records(fio, there) == records(fio, here)
    assert len(records(fio, here)) == 40
    assert PartitionListing.scan(fio, there).uncommitted() == []


def test_helper_killed_mid_cleaning_leaves_only_uncommitted_files(tmp_path):
    fio = open_fileio(tmp_path.as_uri())
    d = str(tmp_path / "t" / "0")
    write_log(fio, d, frames=120, keys=2400)  # nothing to remove: every frame rewritten
    before = records(fio, d)
    size = sum(f.log.size for f in PartitionListing.scan(fio, d).logs())
    # throttled so that reading takes ~1 s and rewriting ~2 s: time to kill it writing
    procs = CleanerProcesses(tmp_path.as_uri(), workers=1, rate=size)
    try:
        pid = procs.pid()
        with PartitionLog.open(fio, d, CONFIG) as plog:
            outcome: list = []

            def cleaning():
                try:
                    outcome.append(clean(plog, 5000, force=True, worker=procs))
                except SparklogError as exc:
                    outcome.append(exc)

            t = threading.Thread(target=cleaning)
            t.start()
            wait_until(lambda: PartitionListing.scan(fio, d).uncommitted(), timeout=30,
                       what="the helper writing an uncommitted cleaned segment")
            os.kill(pid, signal.SIGKILL)
            t.join(30)
            assert isinstance(outcome[0], SparklogError), outcome
            assert "helper process died" in str(outcome[0])
            assert PartitionListing.scan(fio, d).uncommitted()  # left for recovery
            assert all(s.generation == 0 for s in plog.segments)
            assert records(fio, d) == before  # readers see the old set, whole
            result = clean(plog, 5000, force=True, worker=procs)  # a new helper
            assert result is not None and result.segments_written >= 1
            assert procs.pid() != pid
        assert PartitionListing.scan(fio, d).uncommitted() == []
        assert records(fio, d) == before  # every key distinct: all kept
    finally:
        procs.close()


HOLDER = """
import sys
from sparklog.retention.cleaner_process import CleanerProcesses
procs = CleanerProcesses(sys.argv[1], workers=1)
print(procs.pid(), flush=True)
sys.stdin.read()
"""


def test_helper_dies_with_its_broker(tmp_path):
    """A broker killed (SIGKILL) takes its helper with it: no helper keeps writing."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, tmp_path.as_uri()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        helper = int(proc.stdout.readline())
        os.kill(helper, 0)  # running
    finally:
        kill_process(proc)

    def gone():
        try:
            os.kill(helper, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, timeout=10, what=f"the helper process {helper} ending with its parent")


class GatedHelpers:
    """The cleaner's worker over ``procs``: partition ``first``'s cleaning runs once
    ``second``'s has begun, which then waits for ``release``; records the thread of
    each."""

    def __init__(self, procs, first: str, second: str):
        self.procs, self.first, self.second = procs, first, second
        self.begun, self.release = threading.Event(), threading.Event()
        self.threads: dict[str, threading.Thread] = {}

    def __call__(self, task):
        self.threads[task.directory] = threading.current_thread()
        if task.directory == self.second:
            self.begun.set()
            self.release.wait(60)
        else:
            self.begun.wait(60)
        return self.procs(task)

    def close(self) -> None:
        self.procs.close()


def test_stopping_lets_a_cleaning_finish_on_a_helper_another_thread_started(tmp_path):
    """Two cleaner threads share the helpers, and a helper dies with the thread that
    started it (its parent-death signal): stopping the cleaner while one thread still
    cleans, on the helper the other thread started, lets that cleaning finish (the
    threads leave together), then stops the helpers."""
    from types import SimpleNamespace

    from sparklog.retention.cleaner import LogCleanerManager

    fio = open_fileio(tmp_path.as_uri())
    first, second = str(tmp_path / "a" / "0"), str(tmp_path / "b" / "0")
    write_log(fio, first, frames=20)
    write_log(fio, second, frames=120, keys=2400)  # every frame rewritten
    size = sum(f.log.size for f in PartitionListing.scan(fio, second).logs())
    # throttled: the second partition's cleaning takes ~3 s, long after a stop
    worker = GatedHelpers(CleanerProcesses(tmp_path.as_uri(), workers=2, rate=size),
                          first, second)
    with PartitionLog.open(fio, first, CONFIG) as a, PartitionLog.open(fio, second, CONFIG) as b:
        writers = [SimpleNamespace(name="a-0", topic_name="a", partition=0, log=a),
                   SimpleNamespace(name="b-0", topic_name="b", partition=0, log=b)]
        manager = LogCleanerManager(lambda: writers, threads=2, backoff_ms=60_000,
                                    worker=worker)
        manager.start()
        stopping = None
        try:
            wait_until(lambda: manager.stats.get(("a", 0)) and manager.stats[("a", 0)].cleanings,
                       timeout=60, what="the first partition cleaned on a helper")
            assert worker.threads[first] is not worker.threads[second]
            stopping = threading.Thread(target=manager.stop)
            stopping.start()  # the first partition's thread has nothing left to clean
            worker.release.set()
            stopping.join(60)
            assert not stopping.is_alive()
        finally:
            worker.release.set()
            manager.stop()
        assert manager.stats[("b", 0)].cleanings == 1  # not failed by a killed helper
        assert all(s.generation for s in b.segments[:-1])
    assert not [p for p in child_processes(os.getpid()) if "spawn_main" in p.cmdline]


STARTER = """
import sys, threading
from sparklog.retention.cleaner_process import CleanerProcesses
procs = CleanerProcesses(sys.argv[1], workers=1)
threading.Thread(target=procs.pid, daemon=True).start()  # starts a helper, waits for it
sys.stdin.read()
"""


def test_helper_whose_broker_died_while_it_started_exits(tmp_path):
    """A broker killed while its helper is still starting (before the helper could ask
    for its parent's death signal) leaves no helper waiting for work: the helper is held
    (SIGSTOP) from the moment it appears until its broker is gone, then exits."""
    proc = subprocess.Popen([sys.executable, "-c", STARTER, tmp_path.as_uri()],
                            stdin=subprocess.PIPE)
    helper = None
    try:
        helper = wait_until(lambda: [p.pid for p in child_processes(proc.pid)
                                     if "spawn_main" in p.cmdline],
                            timeout=60, what="the broker's helper process to start")[0]
        os.kill(helper, signal.SIGSTOP)
        kill_process(proc)
        os.kill(helper, signal.SIGCONT)
        wait_until(lambda: process_info(helper) is None
                   or process_info(helper).state == "Z",
                   timeout=30, what=f"the helper {helper} exiting, its broker gone")
    finally:
        kill_process(proc)
        if helper is not None and process_info(helper) is not None:
            os.kill(helper, signal.SIGKILL)


def test_cleaning_in_a_helper_process_on_hdfs(hdfs_env):
    """On hdfs:// the helper opens its own Hadoop client (its own JVM) on the broker's
    storage and writes the cleaned segment there; this process commits it."""
    import uuid

    root = f"{hdfs_env.hdfs_uri}/cleaner-process/{uuid.uuid4().hex}"
    fio = open_fileio(root)
    d = fio.join(root, "t", "0")
    write_log(fio, d, frames=20)
    procs = CleanerProcesses(root, workers=1)
    try:
        with PartitionLog.open(fio, d, CONFIG) as plog:
            result = clean(plog, 5000, force=True, worker=procs)
            assert result.segments_written >= 1
            assert all(s.generation for s in plog.segments[:-1])
    finally:
        procs.close()
    got = records(fio, d)  # each of the 40 keys once, at its last offset
    assert [o for o, _, _ in got] == list(range(400 - 40, 400))
    assert PartitionListing.scan(fio, d).uncommitted() == []
