"""SegmentSealer: finishing rolled segments off the append path.

Rolling a segment needs only a flush of the old segment (its frames become visible and
the writer's lease is checked) and the creation of the next one; the slow part, making
the old ``.log`` durable (fsync/hsync of up to ``segment.bytes``), releasing its lease
and writing its ``.timeindex`` and ``.index`` (the seal marker), runs on a small shared
thread pool, as Kafka flushes a rolled segment asynchronously. Until then the old
segment is a non-last segment without an ``.index``: readers treat it as sealed and
rebuild its indexes in memory, and the partition's recovery checks its frames (see
:meth:`sparklog.log.partition.PartitionLog.open`).

Durability is unchanged: :meth:`SegmentSealer.wait` runs before every ``sync`` of the
partition (acks=all), its close and retention, so a sync never returns while an older
segment is still unsynced. A failure of the background work is reported to the
partition (which refuses further appends until reopened) and raised by ``wait``.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

log = logging.getLogger(__name__)

#: threads sealing segments for every partition of the process
SEALER_THREADS = 2
#: rolled segments a partition may have in flight before a roll waits for the oldest
MAX_PENDING = 2

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=SEALER_THREADS,
                                       thread_name_prefix="sparklog-sealer")
        return _pool


class SegmentSealer:
    """The background sealing of one partition's rolled segments."""

    def __init__(self, name: str, on_error: Callable[[BaseException], None],
                 on_sealed: Callable[[Any], None] | None = None):
        self.name = name
        self._on_error = on_error
        #: called with each segment once it is sealed (durable)
        self._on_sealed = on_sealed
        self._pending: list[Future] = []
        self._lock = threading.Lock()

    def submit(self, segment, out) -> None:
        """Close ``out`` (sync, release the lease) and seal ``segment`` in the
        background; waits first when MAX_PENDING seals are still running."""
        with self._lock:
            self._pending = [f for f in self._pending if not f.done() or f.exception()]
            backlog = self._pending[:len(self._pending) - MAX_PENDING + 1] \
                if len(self._pending) >= MAX_PENDING else []
        for fut in backlog:
            fut.result()
        fut = _executor().submit(self._seal, segment, out)
        with self._lock:
            self._pending.append(fut)

    def _seal(self, segment, out) -> None:
        try:
            out.close()
            segment.seal()
        except BaseException as exc:
            log.error("partition %s: sealing segment %s failed: %s", self.name, segment.path,
                      exc)
            self._on_error(exc)
            raise
        if self._on_sealed is not None:
            self._on_sealed(segment)

    @property
    def pending(self) -> int:
        """Rolled segments not sealed yet."""
        with self._lock:
            return sum(1 for f in self._pending if not f.done())

    def wait(self) -> None:
        """Wait for every submitted seal; raise the first failure."""
        with self._lock:
            pending, self._pending = self._pending, []
        error = None
        for fut in pending:
            try:
                fut.result()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                error = error or exc
        if error is not None:
            raise error
