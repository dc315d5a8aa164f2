"""The broker's retention task: applies :mod:`sparklog.retention.policy` to every
partition it leads, every ``log.retention.check.interval.ms`` (Kafka's LogManager
cleanup loop). Deletions run on the broker's I/O threads; each is logged with the
partition, the new log start offset and the rule that caused it.

``cleanup.policy=compact`` alone deletes nothing here, as in Kafka: such partitions are
left to the log cleaner (:mod:`sparklog.retention.cleaner`); ``compact,delete`` gets
both.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..errors import SparklogError
from .policy import apply_retention

log = logging.getLogger(__name__)


class RetentionManager:
    """Periodic retention over ``partitions()`` (a callable returning the open
    partition writers, each with ``.name`` and ``.log``), using ``run_io`` to call
    storage off the event loop."""

    def __init__(self, partitions, run_io, interval_ms: int, clock=None):
        self.partitions = partitions
        self.run_io = run_io
        self.interval = interval_ms / 1000.0
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start the loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Cancel the loop and wait for it."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check_once()

    async def check_once(self) -> int:
        """One pass over every partition; returns the number of segments deleted."""
        deleted = 0
        for writer in list(self.partitions()):
            plog = writer.log
            if plog.closed:
                continue
            if not plog.config.delete:  # compact only: the log cleaner's
                continue
            try:
                cut = await self.run_io(apply_retention, plog, self.clock())
            except SparklogError as exc:
                log.warning("partition %s: retention failed: %s", writer.name, exc)
                continue
            if cut is not None:
                deleted += cut.segments
                log.info("partition %s: retention deleted %d segment(s) (%d by retention.ms, "
                         "%d by retention.bytes); log start offset now %d", writer.name,
                         cut.segments, cut.by_time, cut.by_size, cut.offset)
        return deleted
