"""BufferedOutputStream: the write-buffering and lease-loss logic every backend shares.

A backend subclasses it and supplies four hooks: ``_push`` (hand the buffered bytes to
the storage so new readers see them: write(2), Java write + hflush, WebHDFS APPEND),
``_persist`` (make them durable), ``_release`` (close and give the lease back) and
``_abandon`` (drop the handle after the lease was lost). A hook signals that the lease
is gone by raising :class:`LeaseLost`; the stream then drops its buffer, refuses every
later write/flush/sync with LeaseExpiredError and reports ``closed``.

Syncs beside writes: ``start_sync`` pushes the buffered bytes under the stream's lock and
returns a function that makes them durable. A backend whose ``_persist`` may run while
other threads write and push (``concurrent_persist``: a local fsync(2); HDFS's ``hsync``
waits for its own packet's acknowledgement outside the DFSOutputStream's lock) runs it
outside the lock, so the next batch is written (and on HDFS its sync started:
``pipelined_persist``) while this one waits for the disk or the DataNodes; every persist
still covers at least the bytes pushed before it started. ``close`` waits for the
persists in flight, and a writer fenced meanwhile drops its handle only after them.

Borrowed writes (``write(data, borrow=True)``) are not copied: the stream keeps a view
of the caller's memory and hands it to ``_push_parts`` with the rest at the next push,
so a batch of frames costs one vectored write and no user-space copy. The caller must
leave that memory unchanged until the next ``flush``, ``sync`` or ``close`` returns.

Timing (``on_sync``, the FileIO's observer: :attr:`~sparklog.storage.base.FileIO.on_sync`):
each push that is not followed by a persist (a ``flush``, a ``write`` that filled the
buffer, the push of ``close``) is reported as ``("hflush", seconds)``; each sync as
``("hsync", seconds)``: its push plus its persist, not the time a caller of
``start_sync`` spends between starting the sync and calling the function it returned.
Only completed ones are reported (a push or persist that raised is not).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from time import perf_counter

from sparklog.errors import LeaseExpiredError, StorageError, StorageFileNotFoundError
from sparklog.storage.base import OutputStream
from sparklog.storage.paths import check_bytes

log = logging.getLogger(__name__)

#: borrowed views held before a push is forced (well below IOV_MAX = 1024)
MAX_HELD_PARTS = 512
#: borrowed bytes held before a push is forced
MAX_HELD_BYTES = 64 << 20


class LeaseLost(Exception):
    """Raised by a backend hook when the writer's lease was revoked (internal);
    ``vanished``: rather, the file itself was deleted or replaced under the writer."""

    def __init__(self, vanished: bool = False):
        super().__init__()
        self.vanished = vanished


def _nothing() -> None:
    """The finish of a sync already complete."""


class BufferedOutputStream(OutputStream):
    """Buffers writes in user space until flush (or ``buffer_size``), tracks the length,
    turns a lost lease into LeaseExpiredError. Thread-safe."""

    #: ``_persist`` may run outside the stream's lock, beside writes, pushes and other
    #: persists of other threads (see the module docstring); default False
    concurrent_persist: bool = False

    def __init__(self, path: str, length: int, buffer_size: int,
                 on_sync: Callable[[str, float], None] | None = None):
        self.path = path
        #: ``on_sync(kind, seconds)`` after each hflush and hsync (module docstring)
        self.on_sync = on_sync
        self._pushed = length
        self._buf = bytearray()     # copied bytes, after every held part
        self._held: list = []       # borrowed views and sealed copies, in file order
        self._held_bytes = 0
        self._buffer_size = buffer_size
        self._closed = False
        self._lost = False
        self._dirty = False  # bytes pushed since the last _persist
        self._lock = threading.RLock()
        self._persisting = 0  # persists running outside the lock
        self._idle = threading.Condition(self._lock)

    # hooks ------------------------------------------------------------------------------
    def _precheck_write(self) -> None:
        """Cheap lease check on a write into an empty buffer (raise LeaseLost); default
        none."""

    def _push(self, data: memoryview) -> None:
        """Hand ``data`` to the storage, visible to new readers (raise LeaseLost)."""
        raise NotImplementedError

    def _push_parts(self, parts: list) -> None:
        """Push several views in order, as one ``_push`` of their concatenation (raise
        LeaseLost). The default joins them; a backend with a vectored write overrides
        it to avoid the copy."""
        self._push(parts[0] if len(parts) == 1 else memoryview(b"".join(parts)))

    def _persist(self) -> None:
        """Make everything pushed so far durable (raise LeaseLost)."""
        raise NotImplementedError

    def _push_parts_for_persist(self, parts: list) -> None:
        """Hand ``parts`` to the storage when ``_persist`` follows at once (raise
        LeaseLost). Default: ``_push_parts``. A backend whose durable call also publishes
        the bytes (HDFS's hsync does what hflush does, and more) overrides it to skip the
        publishing step, paying one round trip to the storage per sync instead of two."""
        self._push_parts(parts)

    def _release(self) -> None:
        """Close the handle and release the lease."""
        raise NotImplementedError

    def _abandon(self) -> None:
        """Drop the handle after the lease was lost (no release)."""

    def _verify_lease(self) -> None:
        """Check the lease, nothing else (raise LeaseLost); default: ``_persist``."""
        self._persist()

    # machinery ------------------------------------------------------------------------
    def _guarded(self, op: str, step) -> None:
        """Run the lease-checking ``step``; a lost lease fences this writer and raises
        the LeaseExpiredError of ``op``."""
        try:
            step()
        except LeaseLost as exc:
            raise self._fenced(op, exc.vanished) from None

    def _fenced(self, op: str, vanished: bool = False) -> StorageError:
        """Fence this writer; the error to raise: LeaseExpiredError, or
        StorageFileNotFoundError when the file ``vanished`` under it."""
        dropped = len(self._buf) + self._held_bytes
        self._buf.clear()
        self._held, self._held_bytes = [], 0
        self._lost = True
        if not self._persisting:  # else the last persist in flight drops the handle
            self._drop_handle()
        if vanished:
            return StorageFileNotFoundError(
                f"{self.path}: the file was deleted or replaced while being written; {op} "
                f"refused, {dropped} unflushed bytes dropped (bytes written earlier are "
                f"gone with the file)")
        return LeaseExpiredError(
            f"{self.path}: lease lost (the file was recovered or deleted by another "
            f"writer); {op} refused, {dropped} unflushed bytes dropped")

    def _drop_handle(self) -> None:
        """Drop the handle of a fenced writer (lock held)."""
        try:
            self._abandon()
        except Exception:  # the handle is useless anyway
            pass

    def _check_open(self, op: str) -> None:
        if self._lost:
            raise LeaseExpiredError(f"{self.path}: lease lost earlier; {op} refused")
        if self._closed:
            raise StorageError(f"{self.path}: stream is closed; {op} refused")

    def _buffered(self) -> int:
        return self._held_bytes + len(self._buf)

    def _push_buffer(self, op: str, data: memoryview | None = None, *,
                     persist_next: bool = False) -> float:
        """Push the held parts and the buffer, followed by ``data`` (pushed from the
        caller's memory); ``persist_next``: a ``_persist`` follows at once (its caller
        reports the push with it as one hsync), else the push is reported as an hflush.
        Return the seconds the push took (0.0: nothing to push)."""
        if not self._buffered() and data is None:
            return 0.0
        started = perf_counter()
        try:
            with memoryview(self._buf) as view:
                parts = self._held + ([view] if self._buf else [])
                if data is not None:
                    parts.append(data)
                if persist_next:
                    self._push_parts_for_persist(parts)
                else:
                    self._push_parts(parts)
        except LeaseLost as exc:
            raise self._fenced(op, exc.vanished) from None
        took = perf_counter() - started
        self._pushed += self._buffered() + (len(data) if data is not None else 0)
        self._buf.clear()
        self._held, self._held_bytes = [], 0
        self._dirty = True
        if not persist_next:
            self._report("hflush", took)
        return took

    def _persist_timed(self, op: str, pushed: float) -> None:
        """``_persist`` as the end of a sync whose push took ``pushed`` seconds; report
        the two as one hsync (raise LeaseExpiredError of ``op`` on a lost lease)."""
        started = perf_counter()
        self._guarded(op, self._persist)
        self._report("hsync", pushed + perf_counter() - started)

    def _report(self, kind: str, seconds: float) -> None:
        """Tell ``on_sync`` of a completed hflush or hsync; a failing observer is
        logged, never fails the write."""
        if self.on_sync is None:
            return
        try:
            self.on_sync(kind, seconds)
        except Exception:  # noqa: BLE001 - metrics must not fail the storage
            log.exception("%s: on_sync observer failed", self.path)

    # OutputStream ---------------------------------------------------------------------
    def write(self, data, *, borrow: bool = False) -> int:
        """Buffer ``data`` (bytes-like); push the buffer once it reaches buffer_size.

        Large data (half of buffer_size or more) is not copied into the buffer: it is
        pushed at once, after the buffered bytes, straight from the caller's memory.
        ``borrow=True`` holds a view of smaller data instead, pushed with the rest at
        the next flush (see the module docstring): the caller leaves it unchanged until
        then."""
        view = check_bytes(data)
        with self._lock:
            self._check_open("write")
            if not self._buffered():  # later writes of a batch leave it to the push
                self._guarded("write", self._precheck_write)
            if len(view) * 2 >= self._buffer_size:
                self._push_buffer("write", view)
                return len(view)
            if borrow:
                if self._buf:  # the copied bytes so far go first
                    self._held.append(self._buf)
                    self._held_bytes += len(self._buf)
                    self._buf = bytearray()
                self._held.append(view)
                self._held_bytes += len(view)
                if len(self._held) >= MAX_HELD_PARTS or self._held_bytes >= MAX_HELD_BYTES:
                    self._push_buffer("write")
                return len(view)
            self._buf += view
            if len(self._buf) >= self._buffer_size:
                self._push_buffer("write")
            return len(view)

    def flush(self) -> None:
        """hflush: push the buffer; the bytes are visible to readers opening now."""
        with self._lock:
            self._check_open("flush")
            if not self._buffered():  # an empty flush still notices a lost lease
                self._guarded("flush", self._precheck_write)
            self._push_buffer("flush")

    def sync(self) -> None:
        """hsync: flush, then make the bytes durable (one step when the backend can:
        see ``_push_parts_for_persist``)."""
        with self._lock:
            self._check_open("sync")
            self._persist_timed("sync", self._push_buffer("sync", persist_next=True))
            self._dirty = False

    def start_sync(self) -> Callable[[], None]:
        """Push the buffered bytes now; return the function that makes them (and every
        byte pushed before) durable, raising as :meth:`sync` does. With
        ``concurrent_persist`` that function runs outside the stream's lock, so other
        threads keep writing (and with ``pipelined_persist`` syncing) meanwhile; otherwise the
        sync is done before ``start_sync`` returns."""
        with self._lock:
            self._check_open("sync")
            pushed = self._push_buffer("sync", persist_next=True)
            if not self.concurrent_persist:
                self._persist_timed("sync", pushed)
                self._dirty = False
                return _nothing
            covered = self._pushed
            self._persisting += 1

        def finish() -> None:
            # timed here: the wait for the storage, not the caller's time before it
            started = perf_counter()
            try:
                self._persist()
            except LeaseLost as exc:
                with self._lock:
                    raise self._fenced("sync", exc.vanished) from None
            finally:
                with self._lock:
                    self._persisting -= 1
                    self._idle.notify_all()
                    if self._lost and not self._persisting:  # fenced meanwhile
                        self._drop_handle()
            self._report("hsync", pushed + perf_counter() - started)
            with self._lock:
                if self._pushed == covered:  # nothing pushed since: all durable
                    self._dirty = False

        return finish

    def verify_lease(self) -> None:
        """Raise LeaseExpiredError if the lease was lost (nothing is pushed)."""
        with self._lock:
            self._check_open("verify_lease")
            self._guarded("verify_lease", self._verify_lease)

    def tell(self) -> int:
        """Length of the file including bytes still buffered here."""
        return self._pushed + self._buffered()

    def close(self) -> None:
        """Flush, persist, release the lease; idempotent.

        Raises LeaseExpiredError if the lease turns out lost while this writer still
        had bytes it had not made durable: bytes still buffered (they were not
        written), or bytes pushed since the last successful sync (they could not be
        synced and may be lost). A fenced writer with nothing pushed since its last
        sync, or one that was already told of the loss, closes silently."""
        with self._lock:
            while self._persisting:  # pipelined syncs still waiting for the storage
                self._idle.wait()
            if self._closed or self._lost:
                self._closed = True
                return
            try:
                self._push_buffer("close")
                try:
                    if self._dirty:
                        started = perf_counter()
                        self._persist()
                        self._report("hsync", perf_counter() - started)
                except LeaseLost:
                    self._fenced("close")
                    raise LeaseExpiredError(
                        f"{self.path}: lease lost (the file was recovered or deleted by "
                        "another writer) before close could sync; the bytes flushed since "
                        "the last sync may be lost") from None
                self._release()
            finally:
                self._closed = True

    @property
    def closed(self) -> bool:
        """True after close() or once the lease was found lost."""
        return self._closed or self._lost

    def __repr__(self):
        return f"{type(self).__name__}({self.path!r}, tell={self.tell()})"
