"""LocalFileIO: the local disk under the HDFS storage contract (DESIGN.md section 3).

How each rule of the contract is enforced on a POSIX file system:

* **Single writer (lease).** A writer holds a sidecar lease file ``.<name>.sparklog-lease``
  beside the data file, created with ``O_CREAT|O_EXCL`` and naming the owner's host,
  pid, process start time, a random token and an epoch. A second writer (same process
  or another) gets :class:`LeaseHeldError`. A lease whose owner process is gone (or a
  zombie, or its pid reused by another process) counts as expired, like HDFS's soft
  limit, and the next ``append`` takes it over. Lease files never appear in ``list()``.
* **Lease transitions are serialised** with ``flock`` on the parent directory's file
  descriptor: exclusive for create/append/recover/release, shared while a writer checks
  its lease and hands bytes to the OS. So ``recover_lease`` waits for an in-flight flush,
  and once it returns the fenced writer cannot add a single byte: its next flush or
  sync (or a write into an empty buffer) raises :class:`LeaseExpiredError`.
* **flush/sync.** ``write`` buffers in user space (or holds a borrowed view); ``flush``
  checks the lease and ``writev(2)``s the buffer (visible to every new reader, as
  hflush); ``sync`` flushes then ``fsync(2)``s (durable, as hsync). Creating or renaming
  a file also fsyncs the directory so the name itself is durable. Writeback is started
  behind the writer every ``sync_behind_writes`` bytes (see :class:`LocalFileIO`).
* **create-no-overwrite** is ``open(O_CREAT|O_EXCL)``: the kernel lets exactly one of
  concurrent creators win. With ``parents=False`` (a non-recursive create) the same
  open, without making the directory first, fails when the directory is missing.
* **rename-no-replace** is ``renameat2(RENAME_NOREPLACE)`` (Linux >= 3.15, glibc >= 2.28),
  falling back to ``link(2)`` + ``unlink(2)`` for files (``link`` fails atomically when
  the target exists). There is never a check-then-rename window.

Deliberately stricter than POSIX so that code passing here also passes on HDFS: no
seek/random writes, renaming a file with a live writer raises LeaseHeldError, renaming
into a missing parent directory raises StorageFileNotFoundError.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat as stat_mod

from sparklog.errors import (
    FileAlreadyExistsError,
    InvalidArgumentError,
    LeaseExpiredError,
    LeaseHeldError,
    StorageError,
    StorageFileNotFoundError,
)
from sparklog.storage.base import FileInfo, FileIO, check_create_flags
from sparklog.storage.paths import check_int, check_normal, check_path, is_lease_file, strip_scheme
from sparklog.storage.posix import (
    DirLock,
    WriteBehind,
    acquire_lease,
    fsync_dir,
    lease_path,
    owner_alive,
    read_lease,
    rename_noreplace,
)
from sparklog.storage.stream import BufferedOutputStream, LeaseLost

DEFAULT_BUFFER_SIZE = 1 << 20  # bytes buffered before write() hands them to the OS
DEFAULT_SYNC_BEHIND_WRITES = 8 << 20  # bytes handed to the OS before writeback starts

# --- streams -----------------------------------------------------------------------------


def _token_of(fd: int) -> str | None:
    """The token of the lease record in the open file ``fd``."""
    raw = os.pread(fd, 4096, 0)
    try:
        return json.loads(raw).get("token")
    except (ValueError, AttributeError):
        return None


#: most buffers one writev(2) takes
_IOV_MAX = 1024


class LocalOutputStream(BufferedOutputStream):
    """Append-only writer of one local file under a lease (see module docstring).

    The fsync(2) of a sync started with ``start_sync`` runs outside the stream's lock
    (``concurrent_persist``): the partition's next batches are written while the disk
    syncs, and the next sync covers them all (group commit). It covers every byte
    written before it started, as fsync does."""

    concurrent_persist = True

    def __init__(self, path: str, os_path: str, fd: int, lease: dict, length: int,
                 buffer_size: int, sync_behind_writes: int = 0, on_sync=None):
        super().__init__(path, length, buffer_size, on_sync)
        self._write_behind = WriteBehind(sync_behind_writes, length)
        self._os_path = os_path
        self._dir = os.path.dirname(os_path)
        self._lease_path = lease_path(os_path)
        self._token = lease["token"]
        # Holding our lease file open pins its inode: while it is open no other file of
        # this filesystem can get its inode number, and every lease is a new file
        # (O_EXCL create after an unlink), so "the sidecar is still our inode" is exact.
        self._fd = fd
        st = os.fstat(fd)
        self._file_id = (st.st_dev, st.st_ino)
        self._lease_fd = os.open(self._lease_path, os.O_RDONLY)
        st = os.fstat(self._lease_fd)
        self._lease_id = (st.st_dev, st.st_ino)
        if _token_of(self._lease_fd) != self._token:  # the pinned file is not our lease
            self._lost = True
            self._abandon()
            raise LeaseExpiredError(f"{path}: lease taken over while it was being acquired")

    def _lease_ok(self) -> bool:
        try:
            st = os.stat(self._lease_path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self._lease_id

    def _check_lease(self) -> None:
        """Raise LeaseLost unless our lease holds and the path is still our file (as
        HDFS fails the writer of a file deleted under it): the file deleted or replaced
        under the writer raises LeaseLost(vanished=True)."""
        if not self._lease_ok():
            raise LeaseLost()
        try:
            st = os.stat(self._os_path)
        except FileNotFoundError:
            raise LeaseLost(vanished=True) from None
        if (st.st_dev, st.st_ino) != self._file_id:
            raise LeaseLost(vanished=True)

    def _precheck_write(self) -> None:
        # two stat(2)s; _push repeats them under the directory lock, which is authoritative
        self._check_lease()

    def _push(self, data: memoryview) -> None:
        self._push_parts([data])

    def _push_parts(self, parts: list) -> None:
        try:
            lock = DirLock(self._dir, shared=True).__enter__()
        except StorageFileNotFoundError:  # the directory was deleted: so was the lease
            raise LeaseLost() from None
        try:  # recover_lease (exclusive) waits for this write
            self._check_lease()
            pending = [p for p in parts if len(p)]
            end = self._pushed + sum(len(p) for p in pending)  # file length once written
            while pending:  # writev(2), resumed after a partial write
                n = os.writev(self._fd, pending[:_IOV_MAX])
                while n:
                    if n >= len(pending[0]):
                        n -= len(pending.pop(0))
                    else:
                        pending[0] = pending[0][n:]
                        n = 0
        finally:
            lock.__exit__()
        self._write_behind.written(self._fd, end)

    def _verify_lease(self) -> None:
        self._check_lease()

    def _persist(self) -> None:
        self._check_lease()
        os.fsync(self._fd)

    def _release(self) -> None:
        try:
            with DirLock(self._dir):
                if self._lease_ok():
                    os.unlink(self._lease_path)
        except StorageFileNotFoundError:
            pass  # directory deleted meanwhile: nothing left to release
        finally:
            self._abandon()

    def _abandon(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lease_fd >= 0:
            os.close(self._lease_fd)
            self._lease_fd = -1


class LocalInputStream:
    """Random-access reader of a local file: read/readinto/seek/tell/size/close."""

    def __init__(self, path: str, f):
        self.path = path
        self._f = f

    def read(self, n: int = -1) -> bytes:
        """Read up to ``n`` bytes (all remaining if negative)."""
        return self._f.read(n)

    def readinto(self, buf) -> int:
        """Read into a writable buffer; return the count."""
        return self._f.readinto(buf)

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move the read position (os.SEEK_SET/CUR/END)."""
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        """Current read position."""
        return self._f.tell()

    def size(self) -> int:
        """Current visible length of the file."""
        return os.fstat(self._f.fileno()).st_size

    def fileno(self) -> int:
        """The OS file descriptor (for sendfile)."""
        return self._f.fileno()

    def close(self) -> None:
        """Close the reader."""
        self._f.close()

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._f.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --- the file system ----------------------------------------------------------------


class LocalFileIO(FileIO):
    """The local disk (``file://`` URLs or plain paths) under the HDFS contract.

    ``buffer_size``: bytes a writer buffers before write() hands them to the OS itself.
    ``sync_behind_writes``: once a writer has handed this many bytes to the OS, it asks
    the kernel to start writing them to the device (``sync_file_range``, Linux), as
    HDFS DataNodes do with ``dfs.datanode.sync.behind.writes``, so the device works
    while the writer goes on and a later sync finds little left; 0 leaves writeback
    to the kernel's own timing. A hint only: durability still comes from sync().
    """

    scheme = "file"

    def __init__(self, root: str | None = None, *, buffer_size: int = DEFAULT_BUFFER_SIZE,
                 sync_behind_writes: int = DEFAULT_SYNC_BEHIND_WRITES):
        self.root = check_path(root, "root") if root is not None else None
        self.buffer_size = check_int(buffer_size, "buffer_size", 1)
        self.sync_behind_writes = check_int(sync_behind_writes, "sync_behind_writes", 0)

    def _os(self, path) -> tuple[str, str]:
        """Return (path as given, absolute OS path)."""
        path = check_path(path)
        authority, p = strip_scheme(path, "file")
        if authority not in ("", "localhost"):
            raise InvalidArgumentError(f"file:// URL with a remote host: {path!r}")
        return path, os.path.abspath(check_normal(p, path))

    def local_path(self, path: str) -> str:
        """The OS path of ``path`` (the broker serves it with sendfile)."""
        return self._os(path)[1]

    # writing ----------------------------------------------------------------------------
    def create(self, path: str, overwrite: bool = False,
               parents: bool = True) -> LocalOutputStream:
        """Create ``path`` (O_EXCL) under a new lease; parents are created unless
        ``parents`` is False (then a missing parent directory raises
        StorageFileNotFoundError: ``open(O_CREAT|O_EXCL)`` makes no directory)."""
        path, p = self._os(path)
        check_create_flags(overwrite, parents)
        parent = os.path.dirname(p)
        if parents:
            self._mkdirs_os(parent, path)
        try:
            lock = DirLock(parent).__enter__()
        except StorageFileNotFoundError:
            raise _no_parent(path, parent) from None
        except NotADirectoryError:
            raise _file_in_the_way(path, parent) from None
        try:
            if overwrite:
                rec = read_lease(p)
                if rec is not None and owner_alive(rec):
                    raise LeaseHeldError(
                        f"{path}: cannot overwrite, lease held by pid {rec.get('pid')} "
                        f"on host {rec.get('host')}")
                if os.path.isdir(p):
                    raise FileAlreadyExistsError(f"{path}: is a directory")
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            try:
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            except FileExistsError:
                raise FileAlreadyExistsError(f"{path}: file already exists") from None
            except FileNotFoundError:  # the directory was renamed or deleted meanwhile
                raise _no_parent(path, parent) from None
            try:
                lease = acquire_lease(p, path)
                fsync_dir(parent)
            except BaseException as exc:
                os.close(fd)
                try:
                    os.unlink(p)
                except FileNotFoundError:  # renamed away with its directory
                    pass
                if isinstance(exc, FileNotFoundError):  # the directory went meanwhile
                    raise _no_parent(path, parent) from None
                raise
        finally:
            lock.__exit__()
        return LocalOutputStream(path, p, fd, lease, 0, self.buffer_size,
                                 self.sync_behind_writes, self.on_sync)

    def append(self, path: str) -> LocalOutputStream:
        """Open an existing file for appending under a new lease (an expired lease of a
        dead writer is taken over; a live one raises LeaseHeldError)."""
        path, p = self._os(path)
        parent = os.path.dirname(p)
        if not os.path.isdir(parent):
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        with DirLock(parent):
            try:
                st = os.stat(p)
            except FileNotFoundError:
                raise StorageFileNotFoundError(f"{path}: file does not exist") from None
            if stat_mod.S_ISDIR(st.st_mode):
                raise StorageError(f"{path}: is a directory, cannot append")
            lease = acquire_lease(p, path)
            try:
                fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            except BaseException:
                os.unlink(lease_path(p))
                raise
        return LocalOutputStream(path, p, fd, lease, os.fstat(fd).st_size, self.buffer_size,
                                 self.sync_behind_writes, self.on_sync)

    def recover_lease(self, path: str) -> None:
        """Revoke whatever lease ``path`` has (live or dead); the fenced writer cannot
        add a byte afterwards. StorageFileNotFoundError if the file does not exist."""
        path, p = self._os(path)
        parent = os.path.dirname(p)
        if not os.path.isfile(p):
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        with DirLock(parent):
            try:
                os.unlink(lease_path(p))
            except FileNotFoundError:
                pass

    # reading ------------------------------------------------------------------------------
    def open_input(self, path: str) -> LocalInputStream:
        """Open ``path`` for random-access reading (sees every flushed byte)."""
        path, p = self._os(path)
        try:
            f = open(p, "rb", buffering=0)
        except FileNotFoundError:
            raise StorageFileNotFoundError(f"{path}: file does not exist") from None
        except IsADirectoryError:
            raise StorageError(f"{path}: is a directory, cannot read") from None
        return LocalInputStream(path, f)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset`` (short or empty past end of file)."""
        check_int(offset, "offset")
        check_int(length, "length")
        path, p = self._os(path)
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            raise StorageFileNotFoundError(f"{path}: file does not exist") from None
        try:
            chunks, pos, left = [], offset, length
            while left > 0:
                b = os.pread(fd, left, pos)
                if not b:
                    break
                chunks.append(b)
                pos += len(b)
                left -= len(b)
            return b"".join(chunks)
        except IsADirectoryError:
            raise StorageError(f"{path}: is a directory, cannot read") from None
        finally:
            os.close(fd)

    # namespace ----------------------------------------------------------------------------
    def rename(self, src: str, dst: str) -> None:
        """Atomic rename that never replaces ``dst`` (FileAlreadyExistsError)."""
        src, sp = self._os(src)
        dst, dp = self._os(dst)
        if not os.path.lexists(sp):
            raise StorageFileNotFoundError(f"rename source {src}: does not exist")
        if not os.path.isdir(os.path.dirname(dp)):
            raise StorageFileNotFoundError(
                f"rename destination {dst}: parent directory does not exist")
        with DirLock(os.path.dirname(sp)):
            rec = read_lease(sp)
            if rec is not None and owner_alive(rec):
                raise LeaseHeldError(
                    f"rename source {src}: a writer (pid {rec.get('pid')}) still holds "
                    "its lease; close it first")
            try:
                rename_noreplace(sp, dp)
            except FileExistsError:
                raise FileAlreadyExistsError(
                    f"rename {src} -> {dst}: destination already exists") from None
            except FileNotFoundError:
                raise StorageFileNotFoundError(
                    f"rename source {src}: does not exist") from None
            except OSError as e:
                if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise FileAlreadyExistsError(
                        f"rename {src} -> {dst}: destination already exists") from None
                raise StorageError(f"rename {src} -> {dst}: {e}") from e
            if rec is not None:  # expired lease of a dead writer: drop it
                try:
                    os.unlink(lease_path(sp))
                except FileNotFoundError:
                    pass
        fsync_dir(os.path.dirname(dp))
        if os.path.dirname(dp) != os.path.dirname(sp):
            fsync_dir(os.path.dirname(sp))

    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete a file (its writer is fenced) or, if ``recursive``, a tree; False if
        absent. A non-empty directory without ``recursive`` raises StorageError."""
        path, p = self._os(path)
        if not os.path.lexists(p):
            return False
        if os.path.isdir(p) and not os.path.islink(p):
            if recursive:
                shutil.rmtree(p, onerror=_vanished_is_deleted)
                return True
            try:
                os.rmdir(p)
            except OSError as e:
                if e.errno == errno.ENOTEMPTY:
                    raise StorageError(
                        f"{path}: directory not empty (use recursive=True)") from None
                raise StorageError(f"{path}: {e}") from e
            return True
        with DirLock(os.path.dirname(p)):
            try:
                os.unlink(p)
            except FileNotFoundError:
                return False
            try:
                os.unlink(lease_path(p))
            except FileNotFoundError:
                pass
        return True

    def exists(self, path: str) -> bool:
        """True if a file or directory exists at ``path``."""
        return os.path.exists(self._os(path)[1])

    def size(self, path: str) -> int:
        """Visible length of the file in bytes (0 for a directory)."""
        path, p = self._os(path)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            raise StorageFileNotFoundError(f"{path}: does not exist") from None
        return 0 if stat_mod.S_ISDIR(st.st_mode) else st.st_size

    def list(self, path: str) -> list[FileInfo]:
        """Entries of directory ``path`` sorted by name (lease sidecars hidden); []
        if absent; StorageError if ``path`` is a file."""
        path, p = self._os(path)
        try:
            entries = list(os.scandir(p))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise StorageError(f"{path}: is a file, not a directory") from None
        out = []
        for e in entries:
            if is_lease_file(e.name):
                continue
            try:
                st = e.stat()
            except FileNotFoundError:
                continue  # deleted while listing
            is_dir = stat_mod.S_ISDIR(st.st_mode)
            out.append(FileInfo(path=self.entry_path(path, e.name), name=e.name,
                                size=0 if is_dir else st.st_size, is_dir=is_dir,
                                mtime=st.st_mtime))
        out.sort(key=lambda i: i.name)
        return out

    def mkdirs(self, path: str) -> None:
        """Create the directory and its parents (no error if present)."""
        path, p = self._os(path)
        self._mkdirs_os(p, path)

    @staticmethod
    def _mkdirs_os(p: str, display: str) -> None:
        try:
            os.makedirs(p, exist_ok=True)
        except FileExistsError:
            raise FileAlreadyExistsError(
                f"{display}: a file is in the way of directory {p!r}") from None
        except NotADirectoryError:
            raise FileAlreadyExistsError(
                f"{display}: a file is in the way of directory {p!r}") from None

    def set_permission(self, path: str, mode: int | None = None, owner: str | None = None,
                       group: str | None = None) -> bool:
        """chmod and chown (by user and group name) of ``path``."""
        import grp
        import pwd

        path, p = self._os(path)
        try:
            uid = pwd.getpwnam(owner).pw_uid if owner else -1
        except KeyError:
            raise StorageError(f"{path}: chown to {owner!r}: no such user") from None
        try:
            gid = grp.getgrnam(group).gr_gid if group else -1
        except KeyError:
            raise StorageError(f"{path}: chown to group {group!r}: no such group") from None
        try:
            if uid != -1 or gid != -1:
                os.chown(p, uid, gid)
            if mode is not None:
                os.chmod(p, mode)
        except FileNotFoundError:
            raise StorageFileNotFoundError(f"{path}: does not exist") from None
        except PermissionError as exc:
            raise StorageError(
                f"{path}: cannot set owner {owner or '-'}, group {group or '-'}, mode "
                f"{'-' if mode is None else oct(mode)}: {exc.strerror} (changing the owner "
                "needs root; the group, membership of it)") from None
        return True

    def permission(self, path: str) -> tuple[int, str, str]:
        """(mode bits, owner name, group name) from stat."""
        import grp
        import pwd

        path, p = self._os(path)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            raise StorageFileNotFoundError(f"{path}: does not exist") from None

        def name(lookup, ident):
            try:
                return lookup(ident)[0]
            except KeyError:
                return str(ident)
        return (stat_mod.S_IMODE(st.st_mode), name(pwd.getpwuid, st.st_uid),
                name(grp.getgrgid, st.st_gid))

    def __repr__(self):
        return f"LocalFileIO(root={self.root!r})"


def _no_parent(path: str, parent: str) -> StorageFileNotFoundError:
    """The refusal of a create whose parent directory is missing (a non-recursive
    create's, or one whose directory was removed after it was made)."""
    return StorageFileNotFoundError(
        f"{path}: create failed: parent directory {parent!r} does not exist (a "
        "non-recursive create, parents=False, makes no directory)")


def _file_in_the_way(path: str, parent: str) -> FileAlreadyExistsError:
    """The refusal of a create whose parent is a file, as HDFS's
    ParentNotDirectoryException."""
    return FileAlreadyExistsError(
        f"{path}: create failed: a file is in the way of directory {parent!r}")


def _vanished_is_deleted(func, path, exc_info) -> None:
    """rmtree error handler: an entry another deleter removed first is deleted, as
    HDFS's recursive delete (one namenode operation) would have it; other errors raise."""
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]
