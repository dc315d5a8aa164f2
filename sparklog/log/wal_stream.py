"""One WAL stream's writer (docs/storage.md section 4, "A commit turn" and "Rolling").

Writer threads queue a partition's stamped frames with :meth:`WalStream.append` and
wait on the returned :class:`WalAppend`. The stream's committer thread, repeatedly,
takes everything queued (up to ``block_max_bytes``, at least one request), groups it by
partition in queue order, writes one block (:mod:`sparklog.format.wal`), then
``hsync``s when a request in the turn asked for acks=all and ``hflush``es otherwise, and
only when that returns completes the turn's waiters: a waiter is never completed before
a sync (or, for acks=1, a flush) that covers its frames.

Before a turn, the committer rolls when the current file reached ``roll_bytes`` or is
``roll_ms`` old: it creates file ``seq + 1`` with ``FileIO.create(path,
parents=False)`` (a directory renamed away by a broker that took the incarnation over
refuses it), writes its header, and closes the old file with its index block and
trailer. :meth:`WalStream.close` drains the queue and closes the current file the same
way.

A failed write, sync, roll or close fails the stream: the waiters of the failed turn and
of every later one get :class:`WalStreamFailedError` (a StorageError; the broker answers
KAFKA_STORAGE_ERROR), and so does every later append. Nothing here is used by the
broker yet (``log.write.mode`` stays ``partition``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import InvalidArgumentError, RequestTimedOutError, StorageError
from ..format.wal import (
    EntryFrames,
    WalEntry,
    WalFileEncoder,
    WalFileHeader,
    entry_offsets,
    wal_file_name,
)
from ..storage.base import FileIO, OutputStream

log = logging.getLogger(__name__)

#: ``log.wal.roll.bytes``, ``log.wal.roll.ms``, ``log.wal.block.max.bytes`` defaults
ROLL_BYTES = 64 << 20
ROLL_MS = 60_000
BLOCK_MAX_BYTES = 8 << 20


class WalStreamFailedError(StorageError):
    """The WAL stream failed (a write, sync, roll or close did): the request's frames
    may or may not be in the file; retriable once a new stream serves the partition."""


@dataclass(frozen=True)
class WalWritten:
    """Where a request's frames went: WAL file ``path``, block ``turn``, the block
    ``entry`` holding them (with the other requests of its partition in that turn),
    and whether the turn was ``synced`` (hsync) or only flushed (hflush)."""

    path: str
    turn: int
    entry: WalEntry
    synced: bool


class WalAppend:
    """A queued request: completed by the committer after the sync or flush covering
    it (:meth:`wait`)."""

    __slots__ = ("topic", "partition", "leader_epoch", "frames", "size", "base_offset",
                 "next_offset", "acks_all", "_done", "_result", "_error")

    def __init__(self, topic: str, partition: int, leader_epoch: int, frames: list,
                 size: int, base_offset: int, next_offset: int, acks_all: bool):
        self.topic, self.partition, self.leader_epoch = topic, partition, leader_epoch
        self.frames, self.size = frames, size
        self.base_offset, self.next_offset = base_offset, next_offset
        self.acks_all = acks_all
        self._done = threading.Event()
        self._result: WalWritten | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once completed (written and synced or flushed, or failed)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> WalWritten:
        """Where the frames went, once the sync or flush covering them returned; raises
        WalStreamFailedError when the stream failed, RequestTimedOutError after
        ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise RequestTimedOutError(
                f"WAL append of {self.topic}-{self.partition} [{self.base_offset}, "
                f"{self.next_offset}) not completed within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def complete(self, result: WalWritten | None, error: BaseException | None) -> None:
        """Record where the frames went (or why they did not) and wake :meth:`wait`:
        called by the stream's committer once, after the sync or flush covering them."""
        self._result, self._error = result, error
        self._done.set()


class WalStream:
    """The writer of one WAL stream in ``directory`` (``wal/<broker id>/<incarnation>``,
    which must exist): files ``<seq:020d>.wal`` from ``first_seq`` on. ``clock``
    (seconds, monotonic) times ``roll_ms``; ``wall_clock`` (ms) gives blocks their
    append time."""

    def __init__(self, fileio: FileIO, directory: str, *, broker_id: int, incarnation: int,
                 first_seq: int = 0, roll_bytes: int = ROLL_BYTES, roll_ms: int = ROLL_MS,
                 block_max_bytes: int = BLOCK_MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], int] = lambda: int(time.time() * 1000)):
        for name, value in (("roll_bytes", roll_bytes), ("roll_ms", roll_ms),
                            ("block_max_bytes", block_max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        WalFileHeader(broker_id, incarnation, first_seq).to_bytes()  # checks the fields
        self.fileio, self.directory = fileio, directory
        self.broker_id, self.incarnation = broker_id, incarnation
        self.roll_bytes, self.roll_ms, self.block_max_bytes = roll_bytes, roll_ms, block_max_bytes
        self.clock, self.wall_clock = clock, wall_clock
        self.seq = first_seq
        self.path: str | None = None
        self.turn = 0
        #: the paths of the files closed with their index block and trailer
        self.closed_files: list[str] = []
        #: the error that failed the stream, None while it works
        self.error: BaseException | None = None
        self._out: OutputStream | None = None
        self._encoder: WalFileEncoder | None = None
        self._opened_at = 0.0
        self._queue: deque[WalAppend] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None

    # --- writer threads ------------------------------------------------------------------
    def start(self) -> "WalStream":
        """Create the first file and start the committer thread."""
        if self._thread is not None:
            raise InvalidArgumentError("the WAL stream was started already")
        self._out, self._encoder, self.path = self._create(self.seq)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"wal-committer-{self.broker_id}-{self.incarnation}")
        self._thread.start()
        return self

    def append(self, topic: str, partition: int, leader_epoch: int, frames: Sequence, *,
               acks_all: bool = False) -> WalAppend:
        """Queue a partition's stamped frames (bytes-like buffers of whole frames, in
        offset order, stamped with ``leader_epoch``: InvalidArgumentError otherwise) for
        the next turn; ``acks_all``: the turn is hsynced, not only hflushed. After the
        stream failed, the returned request has failed already."""
        frames = list(frames)
        base, next_offset, size, _ = entry_offsets(
            EntryFrames(topic, partition, leader_epoch, frames))
        request = WalAppend(topic, partition, leader_epoch, frames, size, base, next_offset,
                            acks_all)
        with self._cond:
            if self._thread is None or self._closing:
                raise InvalidArgumentError("the WAL stream is not running (start() it; "
                                           "closed streams take no appends)")
            if self.error is not None:
                request.complete(None, self._failed_error())
                return request
            self._queue.append(request)
            self._cond.notify()
        return request

    def close(self) -> None:
        """Write what is queued, close the current file with its index block and
        trailer, stop the committer. Raises WalStreamFailedError if the stream failed."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self._failed_error()

    def __enter__(self) -> "WalStream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the committer -------------------------------------------------------------------
    def _create(self, seq: int) -> tuple[OutputStream, WalFileEncoder, str]:
        path = self.fileio.join(self.directory, wal_file_name(seq))
        out = self.fileio.create(path, parents=False)
        encoder = WalFileEncoder(WalFileHeader(self.broker_id, self.incarnation, seq))
        out.write(encoder.header())
        self._opened_at = self.clock()
        return out, encoder, path

    def _take(self) -> list[WalAppend] | None:
        """The next turn's requests (None: closing with nothing queued)."""
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return None
            batch = [self._queue.popleft()]
            size = batch[0].size
            while self._queue and size + self._queue[0].size <= self.block_max_bytes:
                size += self._queue[0].size
                batch.append(self._queue.popleft())
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                break
            if self.error is not None:
                self._fail_requests(batch)
                continue
            try:
                written = self._commit(batch)
            except Exception as exc:  # a failed write, sync or roll fails the stream
                self._fail(exc, batch)
                continue
            for request, result in zip(batch, written):
                request.complete(result, None)
        if self.error is None:
            try:
                self._close_file()
            except Exception as exc:
                self._fail(exc, [])

    def _roll_due(self) -> bool:
        assert self._encoder is not None
        if self._encoder.last_turn is None:
            return False  # never roll an empty file
        return self._encoder.position >= self.roll_bytes \
            or (self.clock() - self._opened_at) * 1000 >= self.roll_ms

    def _commit(self, batch: list[WalAppend]) -> list[WalWritten]:
        """Write one block of ``batch``, sync or flush it; each request's result."""
        if self._roll_due():
            self._roll()
        out, encoder, path = self._out, self._encoder, self.path
        assert out is not None and encoder is not None and path is not None
        groups: list[list[WalAppend]] = []
        last: dict[tuple[str, int, int], list[WalAppend]] = {}
        for request in batch:
            key = (request.topic, request.partition, request.leader_epoch)
            group = last.get(key)
            if group is None or group[-1].next_offset != request.base_offset:
                group = []
                groups.append(group)
                last[key] = group
            group.append(request)
        entries = [EntryFrames(g[0].topic, g[0].partition, g[0].leader_epoch,
                               [f for r in g for f in r.frames]) for g in groups]
        self.turn += 1
        parts, block = encoder.block(self.turn, self.wall_clock(), entries)
        for part in parts:
            out.write(part)
        synced = any(r.acks_all for r in batch)
        if synced:
            out.sync()
        else:
            out.flush()
        where = {}
        for group, entry in zip(groups, block.entries):
            for request in group:
                where[id(request)] = WalWritten(path, block.turn, entry, synced)
        return [where[id(r)] for r in batch]

    def _roll(self) -> None:
        """Create the next file, then close the current one with its index."""
        new = self._create(self.seq + 1)
        self._close_file()
        self._out, self._encoder, self.path = new
        self.seq += 1

    def _close_file(self) -> None:
        out, encoder, path = self._out, self._encoder, self.path
        assert out is not None and encoder is not None and path is not None
        out.write(encoder.close())
        out.close()
        self.closed_files.append(path)

    def _failed_error(self) -> WalStreamFailedError:
        error = WalStreamFailedError(
            f"WAL stream of broker {self.broker_id} incarnation {self.incarnation} failed "
            f"at file {self.path}: {self.error}")
        error.__cause__ = self.error
        return error

    def _fail_requests(self, batch: list[WalAppend]) -> None:
        for request in batch:
            request.complete(None, self._failed_error())

    def _fail(self, exc: BaseException, batch: list[WalAppend]) -> None:
        log.error("WAL stream %s failed: %s", self.path, exc)
        with self._cond:
            self.error = exc
            queued = list(self._queue)
            self._queue.clear()
        self._fail_requests(batch + queued)
        out = self._out
        if out is not None and not out.closed:
            try:
                out.close()
            except Exception as close_exc:  # a fenced stream cannot close cleanly
                log.debug("closing the failed WAL file %s: %s", self.path, close_exc)
