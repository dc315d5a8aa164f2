"""The removal of deleted topics' data, ``file.delete.delay.ms`` after their deletion.

Deleting a topic (DeleteTopics, standalone or through the controller) renames its
directory under ``<root>/deleted-topics/`` (:meth:`TopicStore.retire_topic
<sparklog.metadata.store.TopicStore.retire_topic>`): from then on no reader sees it and a
topic created under its name starts empty, so the answer does not wait for the data to
go. As Kafka removes a deleted log's ``-delete`` directory after ``file.delete.delay.ms``,
:class:`RetiredTopics` removes each retired directory once its deletion time (in its
name) plus the broker's ``file.delete.delay.ms`` has passed: it looks at start (what a
broker that stopped or crashed left, so the removal is resumed), whenever this broker
retires a topic (:meth:`RetiredTopics.poke`), and at least every
``log.retention.check.interval.ms`` (retirements by another broker's controller).
Several brokers removing the same directory is harmless.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..errors import SparklogError
from ..metadata import TopicStore

log = logging.getLogger(__name__)


class RetiredTopics:
    """Removes retired topic directories of ``topics`` (see the module docstring);
    ``delay_ms`` is the broker's ``file.delete.delay.ms``, ``interval_ms`` the longest
    wait between two looks, ``run_io`` runs a blocking call on the I/O threads."""

    def __init__(self, topics: TopicStore, run_io, *, delay_ms: int, interval_ms: int):
        self.topics = topics
        self.run_io = run_io
        self.delay_ms = max(int(delay_ms), 0)
        self.interval_ms = max(int(interval_ms), 1)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start removing (on the running event loop)."""
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def poke(self) -> None:
        """A topic was just retired: look again (its removal time is known then)."""
        if self._wake is not None:
            self._wake.set()

    async def stop(self) -> None:
        """Stop removing (what is left is removed after the next start)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                wait_s = await self.run_io(self.remove_due)
            except SparklogError as exc:  # the storage is unavailable: try again later
                log.warning("removing deleted topics' data failed (retried): %s", exc)
                wait_s = self.interval_ms / 1000
            try:
                await asyncio.wait_for(self._wake.wait(), wait_s)
            except asyncio.TimeoutError:
                pass

    def remove_due(self, now_ms: int | None = None) -> float:
        """Remove the retired directories that are due; return the seconds until the
        next one is due (at most the interval). Blocking: call through ``run_io``."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        wait_ms = self.interval_ms
        for directory, deleted_ms in self.topics.retired():
            due = deleted_ms + self.delay_ms
            if due > now:
                wait_ms = min(wait_ms, due - now)
                continue
            self.topics.remove_retired(directory)
            log.info("data of a deleted topic removed: %s", directory)
        return wait_ms / 1000
