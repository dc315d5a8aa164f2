"""The storage contract: one small file-system interface that every backend implements.

Code above this layer may rely only on what HDFS guarantees (DESIGN.md section 3):

1. A file is written sequentially by one writer (append only, no seek). A second writer
   on the same file fails with :class:`~sparklog.errors.LeaseHeldError`.
2. ``OutputStream.flush()`` (HDFS hflush) makes written bytes visible to new readers;
   ``OutputStream.sync()`` (hsync, fsync locally) makes them durable.
3. ``create(path, overwrite=False)`` is atomic (exactly one concurrent creator wins, the
   others get :class:`~sparklog.errors.FileAlreadyExistsError`); ``rename(src, dst)`` is
   atomic and fails with FileAlreadyExistsError when ``dst`` exists.
4. ``recover_lease(path)`` lets a new writer take over a file whose writer died or is
   being fenced; the old writer's later writes fail with LeaseExpiredError.
   ``recover_leases(paths)`` does it for many files with one wait.

``create(path, parents=False)`` is the non-recursive create (HDFS createNonRecursive):
it fails with StorageFileNotFoundError when the parent directory does not exist, so a
writer whose directory was renamed away cannot start a new file in it.

Paths given to a FileIO are URLs or plain paths *inside* the FileIO's root scheme
(``file:///data/log/t/0/00000000000000000000.log``, ``hdfs://nn/log/...``). Helpers here
never touch the network or the disk themselves.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

from sparklog.errors import InvalidArgumentError, StorageFileNotFoundError


@dataclass(frozen=True)
class FileInfo:
    """One directory entry: ``path`` (full URL or path as the FileIO names it),
    ``name`` (last component), ``size`` in bytes, ``is_dir``, ``mtime`` in seconds."""

    path: str
    name: str
    size: int
    is_dir: bool
    mtime: float


def lease_paths(paths) -> list[str]:
    """The paths of a ``recover_leases`` call as a list, each once, in their order;
    InvalidArgumentError for a single path (a str) or anything not iterable."""
    if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__"):
        raise InvalidArgumentError(
            f"paths must be a list (or other iterable) of paths, got {paths!r}")
    return list(dict.fromkeys(paths))


def missing_files_error(missing: list[str]) -> StorageFileNotFoundError:
    """The error of a ``recover_leases`` call given files that do not exist."""
    return StorageFileNotFoundError(
        f"recover leases failed: {len(missing)} file(s) do not exist: "
        + ", ".join(str(m) for m in missing))


def check_create_flags(overwrite, parents) -> None:
    """InvalidArgumentError naming ``overwrite`` or ``parents`` of a ``create`` call
    when it is not a bool."""
    for name, value in (("overwrite", overwrite), ("parents", parents)):
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be a bool, got {value!r}")


def _synced() -> None:
    """The finish of a sync that completed before ``start_sync`` returned."""


class OutputStream(abc.ABC):
    """An append-only byte stream held under a single-writer lease.

    ``write`` buffers; ``flush`` makes bytes visible to new readers (hflush); ``sync``
    makes them durable (hsync/fsync). ``close`` flushes, syncs and releases the lease.
    ``tell`` returns the number of bytes in the file (including buffered ones).
    """

    path: str
    #: True when the function returned by :meth:`start_sync` waits for the storage
    #: while other threads write and flush (an fsync(2) or an hsync outside the
    #: stream's lock), so appends are not held up by a sync in progress
    concurrent_persist: bool = False
    #: True when such functions of several threads may also wait at once and the
    #: storage pipelines them, each returning once its own bytes are durable and a
    #: later one soon after an earlier one (HDFS's hsync: packets acknowledged in
    #: order); a second fsync(2) of a local file only queues behind the first
    pipelined_persist: bool = False

    @abc.abstractmethod
    def write(self, data, *, borrow: bool = False) -> int:
        """Append ``data`` (bytes-like); return the number of bytes accepted.

        ``borrow=True`` lets the stream keep a reference to ``data`` instead of copying
        it; the caller then leaves that memory unchanged until the next ``flush``,
        ``sync`` or ``close`` returns."""

    @abc.abstractmethod
    def flush(self) -> None:
        """hflush: written bytes become visible to readers that open the file now."""

    @abc.abstractmethod
    def sync(self) -> None:
        """hsync: flush, then make the bytes durable on the storage."""

    def start_sync(self):
        """Start a sync: the bytes written so far are handed to the storage now; the
        returned function (no arguments) returns once they are durable, raising as
        ``sync`` does. Backends that can overlap syncs with later writes (pipelined
        syncs: HDFS) return before the storage has acknowledged; the default syncs at
        once and returns a function with nothing left to do."""
        self.sync()
        return _synced

    def verify_lease(self) -> None:
        """Raise LeaseExpiredError if this writer's lease was revoked (a new writer
        recovered the file), without pushing or persisting anything new. The default
        syncs, which every backend fences; backends override it with a cheaper check."""
        self.sync()

    @abc.abstractmethod
    def tell(self) -> int:
        """Current length of the file as this writer sees it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush, sync and release the lease. Idempotent."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True after close() or after the lease was lost."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FileIO(abc.ABC):
    """Abstract file system under the storage contract (see module docstring).

    Obtain one with :func:`sparklog.storage.open_fileio` (dispatch by URL scheme).
    """

    scheme: str = ""
    #: Observer of the writers' hflushes and hsyncs: ``on_sync(kind, seconds)`` with
    #: ``kind`` "hflush" (bytes handed to the storage, visible to new readers: HDFS's
    #: hflush, a write(2) on the local disk) or "hsync" (made durable: HDFS's hsync, an
    #: fsync(2) on the local disk; the time includes handing over the bytes it covers),
    #: called once each completes (see :mod:`sparklog.storage.stream`). Streams take
    #: the observer set when they are opened. None (the default): nothing is timed. The
    #: broker sets it to feed its storage latency histogram; it must be quick and
    #: thread-safe (writers of several threads call it).
    on_sync: Callable[[str, float], None] | None = None
    #: False where ``create(path, parents=False)`` is refused (webhdfs://, see
    #: :data:`sparklog.storage.webhdfs.NO_NON_RECURSIVE_CREATE`): writers that create
    #: files inside a directory that must already exist (a partition's writer) then use
    #: the recursive create, which re-creates a directory renamed away. See
    #: :meth:`in_existing_dir`.
    non_recursive_create: bool = True

    def in_existing_dir(self) -> bool:
        """The ``parents`` argument of a create (or :meth:`write_atomic`) of a file inside
        a directory that must already exist: False (the non-recursive create: a
        directory renamed away is not re-created) unless this storage refuses that
        create (:attr:`non_recursive_create`), then True."""
        return not self.non_recursive_create

    # --- writing ---------------------------------------------------------------------
    @abc.abstractmethod
    def create(self, path: str, overwrite: bool = False, parents: bool = True) -> OutputStream:
        """Create ``path`` and return its writer; with ``parents`` (the default) missing
        parent directories are created.

        ``parents=False`` is a non-recursive create (HDFS ``createNonRecursive``): it
        raises StorageFileNotFoundError naming the parent directory when that does not
        exist (for instance because it was renamed away), and creates no directory.
        Raises FileAlreadyExistsError if ``path`` exists and ``overwrite`` is False
        (atomic among concurrent creators); LeaseHeldError if another writer holds it.
        """

    @abc.abstractmethod
    def append(self, path: str) -> OutputStream:
        """Open an existing file for appending under a new lease.

        Raises StorageFileNotFoundError if absent, LeaseHeldError if another live writer
        holds the lease (call :meth:`recover_lease` first to take it over).
        """

    @abc.abstractmethod
    def recover_lease(self, path: str) -> None:
        """Revoke any writer's lease on ``path`` (HDFS recoverLease). The fenced writer's
        later write/flush/sync raise LeaseExpiredError. No-op if nobody holds it."""

    def recover_leases(self, paths) -> None:
        """Revoke the writers' leases of every file of ``paths`` (a list or other
        iterable of paths) with one wait: when it returns, every file is closed with
        its final length and every fenced writer's later write/flush/sync raise
        LeaseExpiredError. On HDFS all recoveries are started before waiting, so W files
        cost one DataNode heartbeat, not W (``recover_lease`` one after another).

        Files that do not exist raise one StorageFileNotFoundError naming them all,
        after the others were recovered; LeaseHeldError (HDFS) names the files still
        open after ``recover_lease_timeout``. The default recovers one file after
        another, for storage whose ``recover_lease`` does not wait (the local disk,
        WebHDFS's sidecar lease)."""
        missing = []
        for path in lease_paths(paths):
            try:
                self.recover_lease(path)
            except StorageFileNotFoundError:
                missing.append(path)
        if missing:
            raise missing_files_error(missing)

    def write_atomic(self, path: str, data: bytes, *, parents: bool = True) -> None:
        """Write a whole small file atomically: create-no-overwrite of a temporary name
        in the same directory, sync, close, then rename to ``path``.

        Raises FileAlreadyExistsError if ``path`` exists. Readers see either no file or
        the complete file. ``parents=False`` creates the temporary file non-recursively
        (see :meth:`create`): StorageFileNotFoundError when the directory is missing.
        """
        import uuid

        parent, name = self.split(path)
        stem = name.encode("utf-8")[:200].decode("utf-8", "ignore")  # tmp name fits 255 bytes
        tmp = self.join(parent, f".{stem}.{uuid.uuid4().hex}.tmp")
        out = self.create(tmp, parents=parents)
        try:
            out.write(data)
            out.sync()
        finally:
            out.close()
        try:
            self.rename(tmp, path)
        except BaseException:
            self.delete(tmp)
            raise

    # --- reading ---------------------------------------------------------------------
    @abc.abstractmethod
    def open_input(self, path: str):
        """Return a random-access binary reader (``read``, ``seek``, ``tell``, ``close``,
        ``size()``) seeing every byte flushed before the open. StorageFileNotFoundError
        if absent."""

    @abc.abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset`` (short at end of file)."""

    def read_all(self, path: str) -> bytes:
        """Read a whole (small) file."""
        return self.read_range(path, 0, self.size(path))

    # --- namespace -------------------------------------------------------------------
    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomic rename; FileAlreadyExistsError if ``dst`` exists,
        StorageFileNotFoundError if ``src`` does not."""

    @abc.abstractmethod
    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete a file (or a directory tree if ``recursive``). Return False if absent."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """True if a file or directory exists at ``path``."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Visible length of the file in bytes."""

    @abc.abstractmethod
    def list(self, path: str) -> list[FileInfo]:
        """Entries of directory ``path`` sorted by name; [] if the directory is absent."""

    @abc.abstractmethod
    def mkdirs(self, path: str) -> None:
        """Create the directory and its parents (no error if present)."""

    def set_replication(self, path: str, replication: int) -> bool:
        """Set the number of replicas of file ``path`` (HDFS setReplication: the
        NameNode adds or removes block replicas in the background). Returns False,
        doing nothing, where the storage has no replication (the local disk)."""
        return False

    def set_permission(self, path: str, mode: int | None = None, owner: str | None = None,
                       group: str | None = None) -> bool:
        """Set the permission bits (``0o750``) and/or the owner and group of ``path``
        (HDFS setPermission/setOwner; chmod/chown on the local disk). None leaves that
        part as it is. Refusals (not the owner, chown without privilege, an unknown
        user or group) raise StorageError naming them. Returns False, doing nothing,
        where the storage has no permissions."""
        return False

    def permission(self, path: str) -> tuple[int, str, str] | None:
        """(permission bits, owner, group) of ``path``; None where the storage has no
        permissions. StorageFileNotFoundError if absent."""
        return None

    # --- path helpers (pure string work) -------------------------------------------------
    def join(self, *parts: str) -> str:
        """Join path components with '/', keeping the scheme/authority of the first.

        Every part after the first is one or more components ('a' or 'a/b'), each of
        which must be a name no normalisation changes (:func:`check_component`: not
        empty, '.' or '..', no control characters, '\\', '#' or '?', at most 255
        bytes): InvalidArgumentError otherwise, so no name reaches outside its
        directory or onto another name."""
        from .paths import check_relative

        head = parts[0].rstrip("/")
        rest = [check_relative(p, "path component").strip("/") for p in parts[1:]]
        return "/".join([head, *rest]) if rest else parts[0]

    def entry_path(self, directory: str, name: str) -> str:
        """Path of entry ``name`` of ``directory`` as listed (no check: names read
        from the storage are what they are)."""
        return f"{directory.rstrip('/')}/{name}"

    def split(self, path: str) -> tuple[str, str]:
        """Return (parent, name) of ``path``."""
        head, _, name = path.rstrip("/").rpartition("/")
        return head, name

    def local_path(self, path: str) -> str | None:
        """The OS path of ``path`` when the storage is the local disk (for sendfile),
        else None."""
        return None

    def close(self) -> None:
        """Release client resources."""
