"""POSIX primitives of the local backend: directory fsync, no-replace rename, directory
flock, and the sidecar lease files that give local files HDFS's single-writer lease
(see :mod:`sparklog.storage.local` for how they combine)."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import socket
import time
import uuid

from sparklog.errors import LeaseHeldError, StorageError, StorageFileNotFoundError
from sparklog.storage.paths import lease_name

HOST = socket.gethostname()


# --- small OS helpers ------------------------------------------------------------------


def fsync_dir(dirpath: str) -> None:
    """fsync a directory so that names created or renamed in it are durable."""
    fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def proc_start(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks since boot ('' for a zombie, None if gone
    or unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except FileNotFoundError:
        return None
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    if fields and fields[0] in ("Z", "X"):
        return ""
    return fields[19] if len(fields) > 19 else None


def owner_alive(record: dict) -> bool:
    """True if the process named by a lease record is (as far as we can tell) alive."""
    if record.get("host") != HOST:
        return True  # cannot see another host's processes: only recover_lease ends it
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    start = proc_start(pid)
    if start == "":
        return False  # zombie: dead but not yet reaped
    if start is not None and record.get("start") not in (None, start):
        return False  # pid reused by another process
    return True


_LIBC = ctypes.CDLL(None, use_errno=True)
_RENAMEAT2 = getattr(_LIBC, "renameat2", None)
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


_SYNC_FILE_RANGE = getattr(_LIBC, "sync_file_range", None)
if _SYNC_FILE_RANGE is not None:
    _SYNC_FILE_RANGE.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                 ctypes.c_uint)
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Ask the kernel to start writing ``length`` bytes of ``fd`` from ``offset`` to the
    device without waiting for it (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``):
    a hint that promises no durability. False where the call does not exist."""
    if _SYNC_FILE_RANGE is None:
        return False
    return _SYNC_FILE_RANGE(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0


class WriteBehind:
    """Starts the writeback of a file's new bytes every ``every`` bytes written to it
    (0 = never), from ``start`` on; stops asking where the call does not exist."""

    def __init__(self, every: int, start: int = 0):
        self.every, self.start = every, start

    def written(self, fd: int, end: int) -> None:
        """The file is now ``end`` bytes long."""
        if self.every and end - self.start >= self.every:
            if not start_writeback(fd, self.start, end - self.start):
                self.every = 0
            self.start = end


def _into_itself(src: str, dst: str) -> bool:
    """True if ``dst`` is ``src`` or inside it, or either names '.' or '..' (the other
    causes of EINVAL from rename(2), besides a file system without RENAME_NOREPLACE)."""
    if os.path.basename(src) in (".", "..") or os.path.basename(dst) in (".", ".."):
        return True
    real_src = os.path.realpath(src)
    real_dst = os.path.realpath(os.path.dirname(dst))
    return real_dst == real_src or real_dst.startswith(real_src.rstrip("/") + "/")


def rename_noreplace(src: str, dst: str) -> None:
    """Atomically rename src to dst, raising FileExistsError if dst exists."""
    if _RENAMEAT2 is not None:
        rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst),
                        _RENAME_NOREPLACE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EINVAL and _into_itself(src, dst):
            raise StorageError(
                f"cannot rename {src!r} to {dst!r}: the destination is inside the source "
                "(or a name is '.' or '..')")
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), src, None, dst)
    if os.path.isdir(src):
        raise StorageError(
            f"cannot rename directory {src!r} to {dst!r} atomically without replacing: "
            "this file system lacks renameat2(RENAME_NOREPLACE)")
    os.link(src, dst)  # FileExistsError if dst exists: the atomic no-replace check
    os.unlink(src)


class DirLock:
    """flock on a directory's fd: exclusive for lease transitions, shared for flushes."""

    def __init__(self, dirpath: str, shared: bool = False):
        self.dirpath = dirpath
        self.mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        self.fd = -1

    def __enter__(self):
        try:
            self.fd = os.open(self.dirpath, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            raise StorageFileNotFoundError(
                f"directory {self.dirpath!r} does not exist") from None
        fcntl.flock(self.fd, self.mode)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing the only descriptor releases the flock


# --- leases ------------------------------------------------------------------------------


def lease_path(os_path: str) -> str:
    """The sidecar lease file of data file ``os_path``."""
    head, name = os.path.split(os_path)
    return os.path.join(head, lease_name(name))


def read_lease(os_path: str) -> dict | None:
    """The lease record of ``os_path`` (dict), or None if nobody holds a lease."""
    try:
        with open(lease_path(os_path), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # no lease can have that name (a directory
            return None                      # with a long name: leases are for files)
        raise
    try:
        record = json.loads(raw)
        return record if isinstance(record, dict) else {}
    except ValueError:
        return {}  # torn lease file (writer died while writing it): counts as expired


def acquire_lease(os_path: str, display: str) -> dict:
    """Take the lease of ``os_path`` (LeaseHeldError if a live writer has it); the caller
    holds the directory's exclusive DirLock."""
    lpath = lease_path(os_path)
    old = read_lease(os_path)
    if old is not None:
        if owner_alive(old):
            raise LeaseHeldError(
                f"{display}: lease held by pid {old.get('pid')} on host {old.get('host')} "
                f"(epoch {old.get('epoch')}); call recover_lease() to take it over")
        os.unlink(lpath)  # expired (owner dead): soft-limit takeover
    pid = os.getpid()  # read now, not at import: a forked child has its own pid and start
    record = {"host": HOST, "pid": pid, "start": proc_start(pid),
              "token": uuid.uuid4().hex,
              "epoch": max(time.time_ns(), int((old or {}).get("epoch") or 0) + 1)}
    fd = os.open(lpath, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return record
