"""The storage contract (DESIGN.md section 3), one suite for every backend.

``local`` runs on a temporary directory; ``hdfs`` and ``webhdfs`` run on the run's real
HDFS cluster (the ``hdfs_cluster`` fixture: Apache Hadoop's NameNode and DataNode
daemons, tests/support/hdfscluster.py), or on an external cluster when
``SPARKLOG_TEST_HDFS_URI`` names scratch directories on it (comma-separated), e.g.
``SPARKLOG_TEST_HDFS_URI=hdfs://nn:8020/tmp/sparklog,webhdfs://nn:9870/tmp/sparklog``.
Multi-process cases run real child interpreters (subprocess) that open the same storage
through ``open_fileio`` (with the cluster's ``HADOOP_CONF_DIR``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from sparklog.errors import (
    FileAlreadyExistsError,
    InvalidArgumentError,
    LeaseExpiredError,
    LeaseHeldError,
    SparklogError,
    StorageError,
    StorageFileNotFoundError,
)
from sparklog.storage import FileInfo, FileIO, open_fileio
from sparklog.storage.paths import url_scheme

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HDFS_URIS = [u.strip() for u in os.environ.get("SPARKLOG_TEST_HDFS_URI", "").split(",")
             if u.strip()]


def _remote_uri(scheme: str) -> str | None:
    for uri in HDFS_URIS:
        if url_scheme(uri) == scheme:
            return uri
    return None


@pytest.fixture(params=["local", "hdfs", "webhdfs"])
def backend(request, tmp_path, monkeypatch):
    """(fileio, root URL of a fresh empty directory, backend name)."""
    name = request.param
    if name == "local":
        base = tmp_path.as_uri()
    else:
        base = _remote_uri(name)
        if base is None:
            cluster = request.getfixturevalue("hdfs_cluster")
            base = ((cluster.hdfs_uri if name == "hdfs" else cluster.webhdfs_uri)
                    + "/tmp/sparklog-contract")
            # as an operator's shell would: this test and its child processes see it
            monkeypatch.setenv("HADOOP_CONF_DIR", cluster.conf_dir)
    fs = open_fileio(base)
    root = fs.join(base, f"contract-{uuid.uuid4().hex[:12]}")
    fs.mkdirs(root)
    yield fs, root, name
    if name != "local":
        fs.delete(root, recursive=True)
    fs.close()


# --- child processes --------------------------------------------------------------------

_CHILD_PRELUDE = """
import json, os, sys, time
from sparklog.storage import open_fileio
from sparklog.errors import *
fs = open_fileio(ROOT)
def say(**kw):
    print(json.dumps(kw), flush=True)
"""


def _child(root: str, body: str) -> subprocess.Popen:
    """Start a child interpreter running ``body`` with ``fs``, ``say`` and ROOT defined."""
    code = f"ROOT = {root!r}\n" + _CHILD_PRELUDE + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _next_msg(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise AssertionError(f"child exited {proc.returncode}: {proc.stderr.read()}")
    return json.loads(line)


def _finish(proc: subprocess.Popen) -> list[dict]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"child failed ({proc.returncode}): {err}"
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def _race(procs, go) -> tuple[list, list[dict]]:
    """Release ``procs`` (each waiting for the ``go`` file after its first message) at
    once; return the ids that reported ``won`` and every first result."""
    try:
        for p in procs:
            _next_msg(p)
        go.touch()
        results = [_finish(p)[0] for p in procs]
    finally:
        for p in procs:
            _kill(p)
    return [r["won"] for r in results if "won" in r], results


# --- visibility and durability ----------------------------------------------------------


def test_permission_mode_owner_and_group_are_set(backend):
    """set_permission gives a directory its mode, owner and group (HDFS setPermission
    and setOwner; chmod and chown locally), as permission() then reports; a local
    chown to an unknown user is refused naming it."""
    import grp
    import pwd

    fs, root, name = backend
    directory = fs.join(root, "topic")
    fs.mkdirs(directory)
    _mode, owner, group = fs.permission(directory)
    if name == "local":  # chown needs root: to the owner and the group we are
        owner, group = pwd.getpwuid(os.getuid())[0], grp.getgrgid(os.getgid())[0]
    else:  # the tests' HDFS runs as its superuser: any group
        group = "sparklog-readers"
    assert fs.set_permission(directory, 0o750, owner, group)
    assert fs.permission(directory) == (0o750, owner, group)
    fs.set_permission(directory, 0o700)
    assert fs.permission(directory) == (0o700, owner, group)
    if name == "local":
        with pytest.raises(StorageError, match="no-such-user-here"):
            fs.set_permission(directory, owner="no-such-user-here")


def test_flush_makes_bytes_visible_before_close(backend):
    fs, root, _ = backend
    path = fs.join(root, "a.log")
    with fs.create(path) as out:
        out.write(b"hello ")
        out.write(bytearray(b"world"))
        out.flush()
        assert out.tell() == 11
        assert fs.size(path) == 11
        assert fs.read_range(path, 0, 100) == b"hello world"
        with fs.open_input(path) as f:
            assert f.size() == 11
            assert f.read() == b"hello world"
            f.seek(6)
            assert f.read(3) == b"wor"
        out.write(memoryview(b"!"))
        out.flush()
        assert fs.read_all(path) == b"hello world!"
    assert out.closed
    assert fs.read_all(path) == b"hello world!"


def test_local_writes_stay_in_user_space_until_flush(backend):
    fs, root, name = backend
    if name != "local":
        pytest.skip("HDFS may ship full packets before hflush; only local promises this")
    path = fs.join(root, "buffered.log")
    with fs.create(path) as out:
        out.write(b"x" * 100)
        assert fs.size(path) == 0
        assert out.tell() == 100
        out.flush()
        assert fs.size(path) == 100


def _dirty_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Dirty line in /proc/meminfo")


def test_local_sync_behind_writes_starts_writeback_early(tmp_path):
    """Pages handed to writeback stop counting as Dirty: a writer with the hint leaves
    far fewer of its bytes dirty than one without (until the kernel's own flusher runs,
    which the test detects and then skips). Dirty is a machine-wide count, so other
    writers add to both figures: the hinted one must stay under half the unhinted one,
    in one of three rounds."""
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("needs Linux's /proc/meminfo to see dirty pages")
    data = os.urandom(64 << 20)
    rounds = []
    for attempt in range(3):
        dirtied = {}
        for name, behind in (("unhinted.log", 0), ("hinted.log", 1 << 20)):
            fs = open_fileio(tmp_path.as_uri(), sync_behind_writes=behind)
            path = fs.join(tmp_path.as_uri(), f"{attempt}-{name}")
            with fs.create(path) as out:
                before = _dirty_bytes()
                for i in range(0, len(data), 1 << 20):
                    out.write(data[i:i + (1 << 20)])
                out.flush()
                dirtied[name] = _dirty_bytes() - before
            assert fs.read_all(path) == data
            fs.delete(path)
        rounds.append(dirtied)
        if dirtied["unhinted.log"] < len(data) * 3 // 4:
            continue  # the kernel's flusher ran: this round tells nothing
        if dirtied["hinted.log"] < dirtied["unhinted.log"] // 2:
            break
    else:
        if all(r["unhinted.log"] < len(data) * 3 // 4 for r in rounds):
            pytest.skip(f"the kernel's flusher ran during every round ({rounds}): "
                        "the hint cannot be told apart")
        raise AssertionError(f"the hinted writer left as much dirty as the unhinted: {rounds}")
    with pytest.raises(InvalidArgumentError):
        open_fileio(tmp_path.as_uri(), sync_behind_writes=-1)


def test_borrowed_writes_keep_order_and_are_written_from_the_callers_memory(backend):
    fs, root, _ = backend
    path = fs.join(root, "borrowed.log")
    frames = [bytearray(b"%04d|" % i) for i in range(1200)]  # > MAX_HELD_PARTS views
    with fs.create(path) as out:
        out.write(b"<copied>")
        for i, frame in enumerate(frames):
            out.write(frame, borrow=True)
            if i % 100 == 0:
                out.write(b"+")  # copied bytes between borrowed views keep their place
        assert out.tell() == 8 + 5 * 1200 + 12
        frames[-1][:4] = b"LAST"  # not pushed yet: the stream holds the memory, no copy
        out.flush()
        frames[-1][:4] = b"late"  # pushed: later changes do not reach the file
    expected = b"<copied>" + b"".join(
        bytes(f) + (b"+" if i % 100 == 0 else b"") for i, f in enumerate(frames))
    assert fs.read_all(path) == expected.replace(b"late|", b"LAST|")


def test_fenced_writer_drops_and_reports_borrowed_bytes(backend):
    fs, root, _ = backend
    path = fs.join(root, "fenced-borrowed.log")
    out = fs.create(path)
    out.write(b"kept|")
    out.flush()
    out.write(bytearray(b"held"), borrow=True)
    out.write(b"+copied")
    fs.recover_lease(path)
    with pytest.raises(LeaseExpiredError, match="11 unflushed bytes dropped"):
        out.flush()
    out.close()
    assert fs.read_all(path) == b"kept|"


def test_synced_bytes_survive_sigkill_of_writer(backend):
    fs, root, _ = backend
    path = fs.join(root, "synced.log")
    proc = _child(root, f"""
        out = fs.create({path!r})
        out.write(b"durable")
        out.sync()
        out.write(b"-unflushed")
        say(synced=out.tell())
        time.sleep(60)
    """)
    try:
        assert _next_msg(proc)["synced"] == 17
    finally:
        _kill(proc)
    assert fs.read_all(path) == b"durable"


def test_started_syncs_overlap_later_writes_and_close_waits_for_them(backend):
    """``start_sync`` (pipelined syncs): writes and a second sync go on before the first
    sync's finish is called, each finish returns once its bytes are synced (and
    visible); close waits for a sync still running. On HDFS the first ``hsync`` is
    still waiting for the DataNodes while the second starts (``pipelined_persist``)."""
    fs, root, _ = backend
    path = fs.join(root, "pipelined.log")
    out = fs.create(path)
    out.write(b"first|")
    first = out.start_sync()
    out.write(b"second|")
    second = out.start_sync()
    first()
    assert fs.read_all(path).startswith(b"first|")
    second()
    assert fs.read_all(path) == b"first|second|"
    out.write(b"third")
    pending = out.start_sync()
    done = threading.Thread(target=pending)
    done.start()
    out.close()  # waits for the sync in flight, then releases the lease
    done.join(60)
    assert not done.is_alive()
    assert fs.read_all(path) == b"first|second|third"


def test_a_writer_fenced_while_its_sync_waits_refuses_it_and_then_drops_its_handle(backend):
    """The lease is recovered between ``start_sync`` and its finish (on storage whose
    persist runs beside writes, the finish still needs the handle): the next write is
    refused, the finish raises LeaseExpiredError instead of syncing a closed or reused
    handle, and the writer is closed afterwards. The bytes of an earlier sync are kept;
    those of the unfinished one were never promised (HDFS ships them with the hsync)."""
    fs, root, _ = backend
    fs_out = fs.create(fs.join(root, "fenced-sync.log"))
    if not fs_out.concurrent_persist:
        fs_out.close()
        pytest.skip(f"{type(fs_out).__name__} syncs before start_sync returns")
    path = fs_out.path
    fs_out.write(b"kept|")
    fs_out.sync()
    fs_out.write(b"pending|")
    finish = fs_out.start_sync()
    fs.recover_lease(path)
    with pytest.raises(LeaseExpiredError):
        fs_out.write(b"refused")
        fs_out.flush()
    with pytest.raises(LeaseExpiredError):
        finish()
    assert fs_out.closed
    fs_out.close()  # silent: the writer was told of the loss
    assert fs.read_all(path) in (b"kept|", b"kept|pending|")


# --- single writer (leases) ---------------------------------------------------------------


def test_second_writer_in_same_process_gets_lease_held(backend):
    fs, root, _ = backend
    path = fs.join(root, "one-writer.log")
    out = fs.create(path)
    try:
        out.write(b"a")
        out.flush()
        with pytest.raises(LeaseHeldError):
            fs.append(path)
        with pytest.raises(FileAlreadyExistsError):
            fs.create(path)
        out.write(b"b")  # the first writer keeps its lease
        out.flush()
    finally:
        out.close()
    with fs.append(path) as again:  # released on close
        again.write(b"c")
    assert fs.read_all(path) == b"abc"


def test_second_writer_from_another_process_gets_lease_held(backend):
    fs, root, _ = backend
    path = fs.join(root, "held.log")
    with fs.create(path) as out:
        out.write(b"mine")
        out.flush()
        msgs = _finish(_child(root, f"""
            try:
                fs.append({path!r})
                say(result="appended")
            except LeaseHeldError as e:
                say(result="lease-held", msg=str(e))
        """))
        assert msgs[0]["result"] == "lease-held"
        assert "lease" in msgs[0]["msg"]
        out.write(b"!")
    assert fs.read_all(path) == b"mine!"


def test_killed_writer_lease_expires_and_append_works(backend):
    fs, root, name = backend
    path = fs.join(root, "orphan.log")
    proc = _child(root, f"""
        out = fs.create({path!r})
        out.write(b"before-crash|")
        out.flush()
        say(ready=True)
        time.sleep(60)
    """)
    try:
        assert _next_msg(proc)["ready"]
        with pytest.raises(LeaseHeldError):
            fs.append(path)  # the writer is alive: its lease holds
    finally:
        _kill(proc)  # SIGKILL: no close, no lease release
    if name != "local":
        fs.recover_lease(path)  # HDFS: soft limit is 60 s; recoverLease ends it now
    with fs.append(path) as out:
        assert out.tell() == 13
        out.write(b"after")
    assert fs.read_all(path) == b"before-crash|after"


def test_local_zombie_writer_counts_as_dead(backend):
    fs, root, name = backend
    if name != "local":
        pytest.skip("process liveness is a local-backend rule")
    path = fs.join(root, "zombie.log")
    proc = _child(root, f"""
        out = fs.create({path!r})
        out.write(b"z")
        out.flush()
        say(ready=True)
        time.sleep(60)
    """)
    try:
        assert _next_msg(proc)["ready"]
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:  # killed but not reaped (no wait()): a zombie with a live pid
            try:
                with fs.append(path) as out:
                    out.write(b"!")
                break
            except LeaseHeldError:
                assert time.monotonic() < deadline, "zombie writer kept its lease"
                time.sleep(0.05)
    finally:
        _kill(proc)
    assert fs.read_all(path) == b"z!"


def _fenced_writer(fs, path, *steps):
    """A writer of the new file ``path`` that wrote each ``(data, "flush" | "sync" |
    None)`` step and then had its lease recovered behind its back."""
    out = fs.create(path)
    for data, op in steps:
        out.write(data)
        if op is not None:
            getattr(out, op)()
    fs.recover_lease(path)
    return out


def test_recover_lease_fences_live_writer_in_process(backend):
    fs, root, _ = backend
    path = fs.join(root, "fenced.log")
    old = _fenced_writer(fs, path, (b"old1|", "flush"), (b"lost-in-buffer|", None))
    new = fs.append(path)
    with pytest.raises(LeaseExpiredError):
        old.flush()
    assert old.closed
    with pytest.raises(LeaseExpiredError):
        old.write(b"old2|")
    with pytest.raises(LeaseExpiredError):
        old.sync()
    old.close()  # idempotent after the loss, raises nothing more
    new.write(b"new|")
    new.close()
    assert fs.read_all(path) == b"old1|new|"


def test_recover_lease_fences_live_writer_in_other_process(backend):
    fs, root, name = backend
    if name == "webhdfs":
        pytest.skip("webhdfs: WebHDFS has no open stream: each flush is a whole APPEND "
                    "request (open, write, close by a DataNode), and sparklog's lease is "
                    "advisory: an APPEND in flight when recover_lease revokes it still "
                    "lands, and can collide with the new writer's APPEND on the NameNode's "
                    "one-request lease (docs/storage.md, webhdfs://)")
    path = fs.join(root, "fenced-proc.log")
    # Records of 512 bytes, one HDFS checksum chunk: a DataNode whose writer thread is
    # interrupted by block recovery while it repositions the checksum file for a packet
    # that starts mid-chunk (FileChannel.position -> ClosedByInterruptException, after
    # the data was written) leaves a replica whose length on disk disagrees with its
    # record ("Block length mismatch"), and every later recovery of it fails until the
    # DataNode restarts (docs/storage.md). Chunk-aligned flushes never reposition.
    proc = _child(root, f"""
        out = fs.create({path!r})
        i = 0
        say(ready=True)
        end = time.monotonic() + 20
        try:
            while time.monotonic() < end:
                out.write((b"o%06d|" % i).ljust(512, b"."))
                out.flush()
                i += 1
            say(fenced=False, flushed=i, msg="never fenced")
        except LeaseExpiredError as e:
            say(fenced=True, flushed=i, msg=str(e))
    """)
    try:
        assert _next_msg(proc)["ready"]
        deadline = time.monotonic() + 30
        while fs.size(path) < 10 * 512:  # let it write a while (10 flushes)
            assert time.monotonic() < deadline
            time.sleep(0.01)
        fs.recover_lease(path)
        out = fs.append(path)
        fenced_at = out.tell()
        out.write(b"NEW|")
        out.sync()
        msg = _next_msg(proc)
        out.write(b"END")
        out.close()
    finally:
        _kill(proc)
    assert msg["fenced"] and "lease" in msg["msg"]
    data = fs.read_all(path)
    assert data.endswith(b"NEW|END")
    old = data[:fenced_at]
    # every acknowledged flush is kept; the one the fencing interrupted may have reached
    # the DataNodes before its acknowledgement failed (then it is kept too, whole)
    kept = len(old) // 512
    assert len(old) % 512 == 0 and msg["flushed"] <= kept <= msg["flushed"] + 1, (kept, msg)
    assert old == b"".join((b"o%06d|" % i).ljust(512, b".") for i in range(kept))


def test_close_of_fenced_writer_fails_if_bytes_were_pushed_since_the_last_sync(backend):
    fs, root, name = backend
    # flushed (visible, not durable) after the last sync; the fence goes unnoticed until
    # close
    old = _fenced_writer(fs, fs.join(root, "fenced-close.log"),
                         (b"synced|", "sync"), (b"flushed|", "flush"))
    with pytest.raises(LeaseExpiredError, match="since the last sync"):
        old.close()
    assert old.closed
    old.close()  # idempotent after the loss, raises nothing more

    path = fs.join(root, "fenced-close-synced.log")
    quiet = _fenced_writer(fs, path, (b"synced|", "sync"))
    if name == "local":
        quiet.close()  # nothing pushed since the last sync: nothing can be lost
    else:  # a remote backend may still refuse to release a lease it no longer holds
        try:
            quiet.close()
        except LeaseExpiredError:
            pass
    assert quiet.closed
    assert fs.read_all(path) == b"synced|"


def test_recover_lease_without_holder_is_noop_and_missing_file_raises(backend):
    fs, root, _ = backend
    path = fs.join(root, "closed.log")
    with fs.create(path) as out:
        out.write(b"x")
    fs.recover_lease(path)
    assert fs.read_all(path) == b"x"
    with pytest.raises(StorageFileNotFoundError):
        fs.recover_lease(fs.join(root, "missing.log"))


def _open_streams_in_child(root: str, paths: list[str], go: str | None = None):
    """A child process writing each of ``paths``: ``synced|`` and sync, ``flushed|`` and
    flush, ``buffered`` left unflushed in its stream; it reports the flushed lengths
    (``ready``). With ``go``: once that file exists it writes and flushes each stream
    again and reports, per path, whether the storage refused it (``fenced``)."""
    return _child(root, f"""
        outs = []
        for path in {paths!r}:
            out = fs.create(path)
            out.write(b"synced|")
            out.sync()
            out.write(b"flushed|")
            out.flush()
            out.write(b"buffered")
            outs.append(out)
        say(ready=[out.tell() - len(b"buffered") for out in outs])
        go = {go!r}
        if go is None:
            time.sleep(120)
            sys.exit(0)
        while not os.path.exists(go):
            time.sleep(0.01)
        fenced = {{}}
        for out in outs:
            try:
                out.write(b"late")
                out.flush()
                fenced[out.path] = "not refused"
            except LeaseExpiredError as e:
                fenced[out.path] = str(e)
        say(fenced=fenced)
    """)


def test_recover_leases_of_many_files_at_once_fences_dead_and_paused_writers(backend,
                                                                              tmp_path):
    """The files a SIGKILLed writer process left open and those of a writer process
    that is alive but paused (an old WAL writer that has not noticed its fence) are
    recovered in one call: afterwards every file has its final length (what was
    flushed; bytes still buffered in the writer never arrive), a new writer appends at
    that length, and the paused writer's next write and flush are refused."""
    fs, root, _ = backend
    wal = fs.join(root, "wal", "1")
    fs.mkdirs(wal)
    dead_paths = [fs.join(wal, f"dead-{i}.wal") for i in range(3)]
    paused_paths = [fs.join(wal, f"paused-{i}.wal") for i in range(3)]
    go = tmp_path / "go"
    dead = _open_streams_in_child(root, dead_paths)
    paused = _open_streams_in_child(root, paused_paths, str(go))
    try:
        assert _next_msg(dead)["ready"] == [len(b"synced|flushed|")] * 3
        assert _next_msg(paused)["ready"] == [len(b"synced|flushed|")] * 3
        _kill(dead)  # SIGKILL: its streams stay open, their leases held
        for path in paused_paths:
            with pytest.raises(LeaseHeldError):
                fs.append(path)  # a live writer's lease holds until it is recovered
        fs.recover_leases(dead_paths + paused_paths + dead_paths[:1])  # once each
        final = {path: fs.size(path) for path in dead_paths + paused_paths}
        assert set(final.values()) == {len(b"synced|flushed|")}, final
        go.touch()
        fenced = _finish(paused)[-1]["fenced"]
    finally:
        _kill(dead)
        _kill(paused)
    assert sorted(fenced) == sorted(paused_paths)
    assert all("lease" in msg for msg in fenced.values()), fenced
    for path in dead_paths + paused_paths:
        assert fs.read_all(path) == b"synced|flushed|"  # nothing late arrived
        with fs.append(path) as out:  # the new leader takes each file over
            assert out.tell() == final[path]
            out.write(b"new")
        assert fs.read_all(path) == b"synced|flushed|new"


def test_recover_leases_names_missing_files_and_refuses_a_single_path(backend):
    fs, root, _ = backend
    closed, missing = fs.join(root, "closed.wal"), fs.join(root, "missing.wal")
    with fs.create(closed) as out:
        out.write(b"x")
    fs.recover_leases([])  # nothing to do
    with pytest.raises(StorageFileNotFoundError) as ei:
        fs.recover_leases([missing, closed])
    assert "missing.wal" in str(ei.value) and "closed.wal" not in str(ei.value)
    assert fs.read_all(closed) == b"x"
    with pytest.raises(InvalidArgumentError, match="paths"):
        fs.recover_leases(closed)  # one path, not a list of them


def test_create_without_parents_fails_once_the_directory_was_renamed_away(backend):
    """``create(path, parents=False)`` (HDFS createNonRecursive): a writer whose
    directory a splitter renamed away cannot start a new file in it, nor bring the
    directory back; in an existing directory it creates as ``create`` does, with the
    same permission, and refuses an existing file. The writer of a file in the renamed
    directory is fenced at once locally; on HDFS it writes on into the moved file
    until ``recover_leases`` fences it (docs/storage.md, section 8)."""
    fs, root, name = backend
    incarnation = fs.join(root, "wal", "1", "00000000000000000007")
    fs.mkdirs(incarnation)
    first = fs.join(incarnation, "00000000000000000000.wal")
    if name == "webhdfs":
        with pytest.raises(InvalidArgumentError, match="parents=False"):
            fs.create(first, parents=False)
        assert fs.list(incarnation) == []
        return
    out = fs.create(first, parents=False)  # the old writer's file, open
    out.write(b"block|")
    out.flush()
    fs.write_atomic(fs.join(incarnation, "other"), b"o")
    assert fs.permission(first) == fs.permission(fs.join(incarnation, "other"))
    with pytest.raises(FileAlreadyExistsError):
        fs.create(first, parents=False)
    fs.rename(incarnation, incarnation + ".splitting")
    moved = fs.join(incarnation + ".splitting", "00000000000000000000.wal")
    if name == "local":  # stricter: the writer's path is gone, so is its lease
        with pytest.raises(LeaseExpiredError):
            out.write(b"late|")
            out.flush()
    else:  # HDFS keeps an open file's writer across a rename, until it is fenced
        out.write(b"late|")
        out.flush()
        assert fs.read_all(moved) == b"block|late|"
        fs.recover_leases([moved])
        with pytest.raises(LeaseExpiredError):
            out.write(b"later|")
            out.flush()
    out.close()
    assert fs.read_all(moved) in (b"block|", b"block|late|")
    second = fs.join(incarnation, "00000000000000000001.wal")
    with pytest.raises(StorageFileNotFoundError) as ei:
        fs.create(second, parents=False)
    assert "parent directory" in str(ei.value) and "00000000000000000007" in str(ei.value)
    assert not fs.exists(incarnation)  # not made again
    assert [i.name for i in fs.list(fs.join(root, "wal", "1"))] == [
        "00000000000000000007.splitting"]
    with fs.create(fs.join(root, "wal", "1", "x", "y.wal")) as out:  # parents=True
        out.write(b"made")
    assert fs.read_all(fs.join(root, "wal", "1", "x", "y.wal")) == b"made"


def test_write_after_close_is_refused(backend):
    fs, root, _ = backend
    path = fs.join(root, "closed2.log")
    out = fs.create(path)
    out.close()
    out.close()
    assert out.closed
    with pytest.raises(StorageError):
        out.write(b"x")


# --- atomic create and rename ---------------------------------------------------------------


def test_create_no_overwrite_race_exactly_one_wins(backend, tmp_path):
    fs, root, _ = backend
    path = fs.join(root, "contested")
    go = tmp_path / "go"
    n = 6
    procs = [_child(root, f"""
        me = {i}
        say(ready=me)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.002)
        try:
            with fs.create({path!r}) as out:
                out.write(b"winner-%d" % me)
            say(won=me)
        except (FileAlreadyExistsError, LeaseHeldError) as e:
            say(lost=me, err=type(e).__name__)
    """) for i in range(n)]
    winners, results = _race(procs, go)
    assert len(winners) == 1, results
    assert fs.read_all(path) == b"winner-%d" % winners[0]
    assert [i.name for i in fs.list(root)] == ["contested"]


def test_create_overwrite_replaces_closed_file(backend):
    fs, root, _ = backend
    path = fs.join(root, "over")
    fs.write_atomic(path, b"first")
    with fs.create(path, overwrite=True) as out:
        out.write(b"2nd")
    assert fs.read_all(path) == b"2nd"


def test_create_makes_parents(backend):
    fs, root, _ = backend
    path = fs.join(root, "t", "0", "00000000000000000000.log")
    with fs.create(path) as out:
        out.write(b"1")
    assert [i.name for i in fs.list(fs.join(root, "t"))] == ["0"]
    assert fs.list(fs.join(root, "t"))[0].is_dir


def test_rename_moves_file(backend):
    fs, root, _ = backend
    src, dst = fs.join(root, "src"), fs.join(root, "dst")
    fs.write_atomic(src, b"payload")
    fs.rename(src, dst)
    assert not fs.exists(src)
    assert fs.read_all(dst) == b"payload"


def test_rename_onto_existing_fails_and_keeps_both(backend):
    fs, root, _ = backend
    src, dst = fs.join(root, "src"), fs.join(root, "dst")
    fs.write_atomic(src, b"new")
    fs.write_atomic(dst, b"old")
    with pytest.raises(FileAlreadyExistsError) as ei:
        fs.rename(src, dst)
    assert "dst" in str(ei.value)
    assert fs.read_all(src) == b"new"
    assert fs.read_all(dst) == b"old"


def test_rename_of_missing_source(backend):
    fs, root, _ = backend
    with pytest.raises(StorageFileNotFoundError) as ei:
        fs.rename(fs.join(root, "nope"), fs.join(root, "other"))
    assert "nope" in str(ei.value)
    assert not fs.exists(fs.join(root, "other"))


def test_rename_race_exactly_one_wins(backend, tmp_path):
    fs, root, _ = backend
    dst = fs.join(root, "target")
    go = tmp_path / "go"
    n = 4
    srcs = [fs.join(root, f"src{i}") for i in range(n)]
    for i, s in enumerate(srcs):
        fs.write_atomic(s, b"%d" % i)
    procs = [_child(root, f"""
        say(ready=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.002)
        try:
            fs.rename({srcs[i]!r}, {dst!r})
            say(won={i})
        except FileAlreadyExistsError:
            say(lost={i})
    """) for i in range(n)]
    winners, results = _race(procs, go)
    assert len(winners) == 1, results
    assert fs.read_all(dst) == b"%d" % winners[0]
    left = sorted(i.name for i in fs.list(root))
    assert left == sorted(["target"] + [f"src{i}" for i in range(n) if i != winners[0]])


def test_write_atomic(backend):
    fs, root, _ = backend
    path = fs.join(root, "meta", "state.json")
    fs.mkdirs(fs.join(root, "meta"))
    fs.write_atomic(path, b'{"a": 1}')
    assert fs.read_all(path) == b'{"a": 1}'
    with pytest.raises(FileAlreadyExistsError):
        fs.write_atomic(path, b'{"a": 2}')
    assert fs.read_all(path) == b'{"a": 1}'
    assert [i.name for i in fs.list(fs.join(root, "meta"))] == ["state.json"]


# --- namespace ---------------------------------------------------------------------------


def test_list_sorted_hides_leases_and_missing_dir_is_empty(backend):
    fs, root, _ = backend
    for name in ["b", "a", "c10", "c2"]:
        fs.write_atomic(fs.join(root, name), name.encode())
    fs.mkdirs(fs.join(root, "d"))
    with fs.create(fs.join(root, "open.log")) as out:  # lease held while listing
        out.write(b"12345")
        out.flush()
        infos = fs.list(root)
    assert [i.name for i in infos] == ["a", "b", "c10", "c2", "d", "open.log"]
    assert all(isinstance(i, FileInfo) for i in infos)
    by = {i.name: i for i in infos}
    assert by["d"].is_dir and not by["a"].is_dir
    assert by["c10"].size == 3 and by["open.log"].size == 5
    assert by["a"].path.rstrip("/").endswith("/a") and fs.read_all(by["a"].path) == b"a"
    assert by["a"].mtime > 0
    assert fs.list(fs.join(root, "missing")) == []


def test_exists_size_mkdirs(backend):
    fs, root, _ = backend
    d = fs.join(root, "x", "y")
    assert not fs.exists(d)
    fs.mkdirs(d)
    fs.mkdirs(d)
    assert fs.exists(d)
    fs.write_atomic(fs.join(d, "f"), b"abc")
    assert fs.size(fs.join(d, "f")) == 3
    with pytest.raises(StorageFileNotFoundError):
        fs.size(fs.join(d, "g"))


def test_delete(backend):
    fs, root, _ = backend
    f = fs.join(root, "f")
    fs.write_atomic(f, b"1")
    assert fs.delete(f) is True
    assert not fs.exists(f)
    assert fs.delete(f) is False
    d = fs.join(root, "tree")
    fs.write_atomic(fs.join(d, "leaf"), b"1")
    with pytest.raises(StorageError):
        fs.delete(d)
    assert fs.exists(fs.join(d, "leaf"))
    assert fs.delete(d, recursive=True) is True
    assert not fs.exists(d)
    fs.mkdirs(d)
    assert fs.delete(d) is True


def test_concurrent_recursive_deletes_of_one_tree_both_succeed(backend):
    """Two cleaners removing the same directory at once (as two job runs cleaning one
    failed attempt do): neither fails on entries the other removed first."""
    import threading

    fs, root, _ = backend
    for round_ in range(5):
        d = fs.join(root, f"tree{round_}")
        for i in range(40):
            fs.write_atomic(fs.join(d, f"sub{i % 4}", f"leaf{i}"), b"x")
        errors, go = [], threading.Barrier(2)

        def clean():
            go.wait()
            try:
                fs.delete(d, recursive=True)
            except Exception as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=clean) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert not fs.exists(d)


def test_read_range_past_eof_is_short(backend):
    fs, root, _ = backend
    path = fs.join(root, "r")
    fs.write_atomic(path, b"0123456789")
    assert fs.read_range(path, 3, 4) == b"3456"
    assert fs.read_range(path, 8, 100) == b"89"
    assert fs.read_range(path, 10, 5) == b""
    assert fs.read_range(path, 50, 5) == b""
    assert fs.read_range(path, 0, 0) == b""
    with pytest.raises(StorageFileNotFoundError):
        fs.read_range(fs.join(root, "none"), 0, 1)
    with pytest.raises(StorageFileNotFoundError):
        fs.open_input(fs.join(root, "none"))


def test_append_missing_file(backend):
    fs, root, _ = backend
    with pytest.raises(StorageFileNotFoundError) as ei:
        fs.append(fs.join(root, "ghost.log"))
    assert "ghost.log" in str(ei.value)


# --- bad arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("call, field", [
    (lambda fs, root: fs.create(None), "path"),
    (lambda fs, root: fs.create(123), "path"),
    (lambda fs, root: fs.create(""), "path"),
    (lambda fs, root: fs.create(fs.join(root, "a"), overwrite="yes"), "overwrite"),
    (lambda fs, root: fs.create(fs.join(root, "a"), parents=0), "parents"),
    (lambda fs, root: fs.append(b"/bytes/path"), "path"),
    (lambda fs, root: fs.read_range(fs.join(root, "a"), -1, 3), "offset"),
    (lambda fs, root: fs.read_range(fs.join(root, "a"), 0, "3"), "length"),
    (lambda fs, root: fs.rename(fs.join(root, "a"), None), "path"),
    (lambda fs, root: fs.list(3.5), "path"),
    (lambda fs, root: fs.delete(fs.join(root, "a\x00b")), "NUL"),
])
def test_bad_arguments_raise_invalid_argument(backend, call, field):
    fs, root, _ = backend
    with pytest.raises(InvalidArgumentError) as ei:
        call(fs, root)
    assert isinstance(ei.value, SparklogError)
    assert field in str(ei.value)


@pytest.mark.parametrize("data", ["text", 12, None, [1, 2]])
def test_write_of_non_bytes_raises_invalid_argument(backend, data):
    fs, root, _ = backend
    with fs.create(fs.join(root, "typed.log")) as out:
        with pytest.raises(InvalidArgumentError) as ei:
            out.write(data)
        assert "bytes-like" in str(ei.value)
        out.write(b"ok")
    assert fs.read_all(fs.join(root, "typed.log")) == b"ok"


# --- dispatch ----------------------------------------------------------------------------


def test_open_fileio_dispatch(tmp_path):
    from sparklog.storage.local import LocalFileIO

    assert isinstance(open_fileio(str(tmp_path)), LocalFileIO)
    fs = open_fileio(tmp_path.as_uri())
    assert isinstance(fs, LocalFileIO) and isinstance(fs, FileIO)
    assert fs.local_path(fs.join(tmp_path.as_uri(), "x")) == str(tmp_path / "x")
    assert isinstance(open_fileio(tmp_path), LocalFileIO)  # os.PathLike
    for bad in ["s3://bucket/x", "gs://b/x", "memory://x"]:
        with pytest.raises(InvalidArgumentError) as ei:
            open_fileio(bad)
        assert bad.split(":")[0] in str(ei.value)
    with pytest.raises(InvalidArgumentError):
        open_fileio(None)
    with pytest.raises(InvalidArgumentError):
        fs.create("hdfs://nn/x")  # another scheme given to the local backend


def test_open_fileio_webhdfs_unreachable_is_storage_error():
    import socket

    with socket.socket() as s:  # a loopback port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fs = open_fileio(f"webhdfs://127.0.0.1:{port}/x", timeout=2)
    with pytest.raises(StorageError) as ei:
        fs.exists("/x")
    assert f"127.0.0.1:{port}" in str(ei.value)


def test_deleting_an_open_file_fences_its_writer(backend):
    fs, root, _ = backend
    d = fs.join(root, "topic", "0")
    path = fs.join(d, "seg.log")
    out = fs.create(path)
    out.write(b"a")
    out.flush()
    assert fs.delete(path) is True
    with pytest.raises(LeaseExpiredError):  # at the write (local) or the flush (HDFS)
        out.write(b"b")
        out.flush()
    out.close()
    assert not fs.exists(path)
    out2 = fs.create(fs.join(d, "seg2.log"))
    out2.write(b"x")
    assert fs.delete(fs.join(root, "topic"), recursive=True) is True
    with pytest.raises(LeaseExpiredError):
        out2.flush()
    out2.close()


def _hold_in_forked_child(path, ready, done):
    from sparklog.storage.local import LocalFileIO

    with LocalFileIO().create(path) as out:
        out.write(b"child")
        out.flush()
        ready.set()
        done.wait(30)


def test_local_lease_of_a_forked_child_is_live(backend):
    """Spark's Python workers are forked: their leases must name their own process."""
    import multiprocessing

    fs, root, name = backend
    if name != "local":
        pytest.skip("process liveness is a local-backend rule")
    ctx = multiprocessing.get_context("fork")
    path = fs.join(root, "forked.log")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_in_forked_child, args=(path, ready, done))
    child.start()
    try:
        assert ready.wait(30)
        with pytest.raises(LeaseHeldError):
            fs.append(path)
    finally:
        done.set()
        child.join(30)
    assert child.exitcode == 0
    with fs.append(path) as out:
        out.write(b"+parent")
    assert fs.read_all(path) == b"child+parent"


def test_set_replication_where_the_storage_has_replication(backend):
    fs, root, name = backend
    path = fs.join(root, "r.log")
    with fs.create(path) as out:
        out.write(b"abc")
    applied = fs.set_replication(path, 1)
    assert applied is (name != "local")  # the local disk has no replication: a no-op
    assert fs.read_all(path) == b"abc"
