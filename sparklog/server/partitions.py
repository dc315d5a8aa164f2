"""The owner of a broker's partitions: :class:`PartitionManager` (Kafka's ReplicaManager,
without replicas).

It is the one place that opens (and recovers) a partition, looks up its writer, closes
the least recently used ones above ``max.open.partitions``, closes them on deletion or
shutdown, and caches topic configs. Request handlers, leadership handover and retention
reach partitions only through it.

It also keeps, in the coordination store, how far each partition's log went
(:class:`~sparklog.coordination.base.LogEnd`, recorded at open, seal, close and
failure): a log found ending below it lost its tail (its directory or newest segments
deleted outside the broker) and stays offline (KAFKA_STORAGE_ERROR) until an operator
accepts the loss with DeleteRecords (:meth:`PartitionManager.delete_records`), which
restarts it at the recorded end: no offset is handed out twice, across restarts and
leaders.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
import time
from typing import Callable

from ..coordination.base import CoordinationStore, LogEnd
from ..errors import (
    InvalidArgumentError,
    InvalidPartitionsError,
    LeaseHeldError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    SparklogError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from ..log.config import LogConfig
from ..log.partition import lost_tail_error, restart_lost_log
from ..metadata import TopicStore, validate_partition
from ..metadata.topic import TopicConfig
from ..storage import FileIO
from . import resources
from .config import BrokerConfig
from .partition import INLINE_APPEND_BYTES, PartitionWriter
from .retired import RetiredTopics

log = logging.getLogger(__name__)

#: Most partitions a broker's stop closes at once (:meth:`PartitionManager.close_all`):
#: each close waits for storage round trips (hsync, the producer snapshot's create and
#: rename, the stream's close), not for CPU, so more of them overlap than the broker's
#: num.io.threads serve requests with
STOP_CLOSE_THREADS = 64


def _collect_end(ends: dict, partition: int, epoch: int, end_offset: int) -> None:
    """A closing log's :attr:`~sparklog.log.partition.PartitionLog.record_end` during a
    stop: kept in ``ends`` (the furthest), recorded with its topic's others at once."""
    old = ends.get(partition)
    if old is None or end_offset > old.end_offset:
        ends[partition] = LogEnd(epoch, end_offset)


class PartitionManager:
    """The partitions a broker serves (see the module docstring).

    Collaborators: ``config`` (the broker's properties), ``fileio`` and ``topics`` (the
    storage root and its topic configs), ``store`` (leadership and its epochs),
    ``run_io`` (``await run_io(fn, *args)`` runs a blocking call on the I/O threads),
    ``pool`` (those threads, handed to each writer), ``leadership`` (the broker's
    :class:`~sparklog.server.leadership.StandaloneLeadership` or, in cluster mode,
    :class:`~sparklog.server.leadership.BrokerLeadership`: every lookup then checks
    that this broker provably leads the partition) and ``metrics`` (or None).
    :meth:`start` binds it to the event loop.
    """

    def __init__(self, config: BrokerConfig, fileio: FileIO, topics: TopicStore,
                 store: CoordinationStore, *, run_io, pool, leadership, metrics=None):
        self.config = config
        self.broker_id = config.broker_id
        self.fileio = fileio
        self.topics = topics
        self.store = store
        self.run_io = run_io
        self.pool = pool
        self.metrics = metrics
        self._loop: asyncio.AbstractEventLoop | None = None
        #: who leads the partitions (standalone: this broker; cluster: ZooKeeper)
        self.leadership = leadership
        #: open partitions: (topic, partition) -> writer
        self.writers: dict[tuple[str, int], PartitionWriter] = {}
        self.limits: resources.ResourceLimits | None = None
        #: set once the broker shuts down: nothing opens any more
        self.closing = False
        self._opening: dict[tuple[str, int], asyncio.Task] = {}
        #: open partitions, least recently used first (see _close_idle)
        self._recent: collections.OrderedDict = collections.OrderedDict()
        #: leader epoch of partitions closed while idle (reopened without a new epoch)
        self._closed_idle: dict[tuple[str, int], int] = {}
        self._idle_closes: dict[tuple[str, int], asyncio.Task] = {}
        self._topic_cache: dict[str, TopicConfig] = {}
        self._deleting: set[str] = set()
        self._refence: set[tuple[str, int]] = set()
        #: standalone mode after a crash of the previous process: every partition is
        #: fenced as it opens (its dead leases are revoked at once)
        self._fence_all = False
        #: partitions whose log lost its tail: (error message, recorded end), until
        #: DeleteRecords (a new error is raised each time: one instance raised again
        #: and again would keep every refused request's frames in its traceback)
        self._lost: dict[tuple[str, int], tuple[str, int]] = {}
        #: removes deleted topics' data later (:mod:`.retired`; set by the broker)
        self.retired: RetiredTopics | None = None

    def start(self, loop: asyncio.AbstractEventLoop, *, fence_all: bool = False) -> None:
        """Bind to the broker's event loop; ``fence_all``: the previous broker process on
        this storage root died (see :class:`~.instance.InstanceRecord`)."""
        self._loop = loop
        self._fence_all = fence_all

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The broker's event loop (bound by :meth:`start`)."""
        if self._loop is None:
            raise RuntimeError("PartitionManager.start() binds the event loop first")
        return self._loop

    # --- topics ------------------------------------------------------------------------------
    async def topic_config(self, name: str, refresh: bool = False) -> TopicConfig:
        """The topic's config (cached; UnknownTopicOrPartitionError if absent)."""
        if name in self._deleting:
            raise UnknownTopicOrPartitionError(f"topic {name!r} is being deleted")
        tc = None if refresh else self._topic_cache.get(name)
        if tc is None:
            tc = await self.run_io(self.topics.describe_topic, name)
            self._topic_cache[name] = tc
        return tc

    def cached(self, name: str) -> bool:
        """True when the topic's config is in the cache (this broker has served it)."""
        return name in self._topic_cache

    def forget_topic(self, name: str) -> None:
        """Drop a topic from the cache (after create/alter/delete)."""
        self._topic_cache.pop(name, None)

    async def reload_topic(self, name: str) -> TopicConfig:
        """Re-read the topic's config from the storage and apply it to its open
        writers (after an alteration, here or on another broker)."""
        self.forget_topic(name)
        tc = await self.topic_config(name, refresh=True)
        log_config = self.log_config(tc)
        for (topic, _), w in list(self.writers.items()):
            if topic == name:
                w.update_config(tc, log_config)
        return tc

    def check_served(self, tc: TopicConfig) -> None:
        """InvalidPartitionsError if the topic has more partitions than
        ``max.topic.partitions`` (a topic created under a higher limit, or before there
        was one): it is not served, but can be described, altered and deleted."""
        limit = self.config.max_topic_partitions
        if tc.partitions > limit:
            raise InvalidPartitionsError(
                f"topic {tc.name!r} has {tc.partitions} partitions, above "
                f"max.topic.partitions={limit} of broker {self.broker_id}: it is not served; "
                f"delete it (sparklog topics delete {tc.name}) or raise the limit")

    async def check_new_partitions(self, name: str, count: int, current: int = 0) -> None:
        """Refuse a topic of ``count`` partitions (``current`` before an alteration)
        above ``max.topic.partitions`` (InvalidPartitionsError) or bringing the
        partitions on the storage root above ``max.broker.partitions`` times the
        number of brokers (PolicyViolationError)."""
        limit = self.config.max_topic_partitions
        if count <= current:
            return
        if count > limit:
            raise InvalidPartitionsError(
                f"topic {name!r}: {count} partitions requested, above "
                f"max.topic.partitions={limit} of broker {self.broker_id}")
        names = await self.run_io(self.topics.list_topics)
        counts = await self.partition_counts(n for n in names if n != name)
        total = sum(c for c in counts.values() if c <= limit)
        brokers = self.leadership.broker_count()
        cap = self.config.max_broker_partitions * brokers
        if total + count > cap:
            raise PolicyViolationError(
                f"topic {name!r}: {count - current} more partition(s) would make "
                f"{total + count}, above max.broker.partitions={self.config.max_broker_partitions}"
                f" x {brokers} broker(s); {total + current} exist")

    async def partition_counts(self, topics) -> dict[str, int]:
        """{topic: partition count} of the existing topics among ``topics``."""
        out = {}
        for name in topics:
            try:
                out[name] = (await self.topic_config(name)).partitions
            except SparklogError:
                continue
        return out

    def log_config(self, tc: TopicConfig) -> LogConfig:
        """Broker defaults overlaid with the topic's own configs."""
        return LogConfig.from_props({**self.config.log_defaults, **tc.configs},
                                    ignore_unknown=True)

    def used_partitions(self, name: str) -> set[int]:
        """Numbers of the topic's partitions that have a directory (were ever opened;
        blocking: call through ``run_io``)."""
        listed = self.fileio.list(self.topics.topic_dir(name))
        return {int(i.name) for i in listed if i.is_dir and i.name.isdigit()}

    # --- opening ----------------------------------------------------------------------------
    async def recover_existing(self, topics: list[TopicConfig]) -> int:
        """Plan the resource limits for the partitions of ``topics``, then open (recover)
        those that have a directory (partitions never written have none: they open on
        first use), at most ``max.open.partitions``; return how many opened."""
        total = sum(tc.partitions for tc in topics)
        if total > self.config.max_broker_partitions:
            log.error("the storage root holds %d partitions, above max.broker.partitions=%d: "
                      "creating topics or partitions is refused until topics are deleted or "
                      "the limit raised", total, self.config.max_broker_partitions)
        self.limits = resources.plan(self.config.max_open_partitions,
                                     self.config.max_connections, total)
        room = self.limits.max_open_partitions
        keys = []
        for tc in topics:
            numbers = sorted(await self.run_io(self.used_partitions, tc.name))
            keys += [(tc.name, p) for p in numbers if p < tc.partitions]
        if len(keys) > room:
            log.warning("%d partitions have data; recovering %d now (max.open.partitions), "
                        "the others when first used", len(keys), room)
            keys = keys[:room]
        results = await asyncio.gather(*(self.writer(t, p) for t, p in keys),
                                       return_exceptions=True)
        opened, held = 0, []
        for (t, p), res in zip(keys, results):
            if isinstance(res, LeaseHeldError):
                held.append(f"{t}-{p}")
            elif isinstance(res, BaseException):
                log.error("partition %s-%d: recovery failed: %s", t, p, res)
            else:
                opened += 1
        if held:  # said once; each request for them gets the error itself
            log.info("%d partition(s) not opened, another process writes them (a broker "
                     "serving this storage?): %s", len(held), ", ".join(held))
        return opened

    async def writer(self, topic: str, partition: int) -> PartitionWriter:
        """The partition's writer, opened (and recovered) on first use."""
        key = (topic, partition)
        self.leadership.check(topic, partition)  # NotLeaderError unless provably ours
        lost = self._lost.get(key)
        if lost is not None:  # its tail is gone: until an operator's DeleteRecords
            raise StorageError(lost[0])
        found = self.writers.get(key)
        if found is not None:
            if found.log.offline is not None:  # storage changed under it: until restart
                raise found.log.offline
            if not found.failed:
                self._recent.move_to_end(key)
                return found
            self.leadership.check_failed_writer(found)  # fenced: NotLeaderError
            # the log failed (a storage error): close it and recover it afresh
            log.warning("partition %s-%d: reopening after a storage failure", topic, partition)
            if self.writers.get(key) is found:
                del self.writers[key]
                self._refence.add(key)  # our own dead stream may still hold the lease
            await found.close()
        tc = await self.topic_config(topic)
        if partition >= tc.partitions:  # maybe grown by another broker/process
            tc = await self.topic_config(topic, refresh=True)
        validate_partition(partition, tc.partitions, topic)
        self.check_served(tc)
        if self.closing:
            raise UnknownTopicOrPartitionError(
                f"partition {topic}-{partition}: broker {self.broker_id} is shutting down")
        task = self._opening.get(key)
        if task is None:
            task = self._opening[key] = self.loop.create_task(self._open(tc, partition))
            task.add_done_callback(lambda _t: self._opening.pop(key, None))
        try:
            return await asyncio.shield(task)
        except LeaseHeldError as exc:
            raise LeaseHeldError(
                f"partition {topic}-{partition} is written by another process, probably a "
                f"broker serving this storage: connect to that broker (host:port) instead "
                f"of opening the storage here ({exc})") from None
        except StorageError as exc:
            lost_end = getattr(exc, "lost_end", None)
            if lost_end is not None and not self.closing:
                self._lost[key] = (str(exc), lost_end)
            raise

    async def _open(self, tc: TopicConfig, partition: int) -> PartitionWriter:
        name = f"{tc.name}-{partition}"
        closing = self._idle_closes.get((tc.name, partition))
        if closing is not None:  # its idle close must release the lease first
            await asyncio.shield(closing)

        closed_epoch = self._closed_idle.pop((tc.name, partition), None)

        def open_blocking():
            pdir = self.topics.partition_dir(tc.name, partition)
            recorded = self.store.log_end(tc.name, partition)
            if recorded is not None and recorded.end_offset > 0 \
                    and not self.fileio.exists(pdir):
                gone = "the partition directory does not exist"
                if not self.fileio.exists(self.topics.topic_dir(tc.name)):
                    gone += ", nor its topic's directory"
                error = lost_tail_error(name, pdir, recorded.end_offset,
                                        recorded.leader_epoch, gone)
                log.error("%s", error)
                error.lost_end = recorded.end_offset  # type: ignore[attr-defined]
                raise error
            before = self.store.partition_state(tc.name, partition)
            if before is not None and before.leader == self.broker_id \
                    and before.leader_epoch == closed_epoch:
                state = before  # reopened after an idle close: still ours, same epoch
            else:
                state = self.store.acquire_leadership(tc.name, partition, self.broker_id)
            # taking over from another broker fences its lease; the same broker id (a
            # restart) only takes over an expired lease, so two processes on one root
            # cannot both write: the second gets LeaseHeldError
            # a restart after a crash (the instance record's process is dead) fences too
            fence = (before is not None and before.leader not in (-1, self.broker_id)) \
                or (tc.name, partition) in self._refence or self.leadership.cluster \
                or self._fence_all
            self._refence.discard((tc.name, partition))
            opened = PartitionWriter.open_blocking(
                self.fileio, pdir, self.log_config(tc), state.leader_epoch,
                f"partition {name}", fence=fence)
            self._adopt_log_end(opened[0], tc.name, partition, state.leader_epoch, recorded)
            return opened, state.leader_epoch

        (plog, state, snapshots), epoch = await self.run_io(open_blocking)
        local = self.fileio.local_path(plog.dir_url) is not None
        writer = PartitionWriter(tc, partition, plog, state, snapshots, loop=self.loop,
                                 pool=self.pool,
                                 snapshot_interval_ms=self.config.producer_snapshot_interval_ms,
                                 inline_append_bytes=INLINE_APPEND_BYTES if local else 0,
                                 syncs_in_flight=self.config.storage_syncs_in_flight,
                                 max_decompressed_bytes=self.config.socket_request_max_bytes)
        self.writers[(tc.name, partition)] = writer
        self._recent[(tc.name, partition)] = None
        self._close_idle()
        if self.metrics is not None:
            self.metrics.open_partitions.set(len(self.writers))
        log.info("partition %s: leader epoch %d, log [%d, %d), %d producer(s)", name, epoch,
                 plog.log_start_offset, plog.log_end_offset, len(state.producers))
        return writer

    def _adopt_log_end(self, plog, topic: str, partition: int, epoch: int, recorded) -> None:
        """Check the opened ``plog`` against its ``recorded`` end (closing it and raising
        when its tail was lost), then record its end under ``epoch`` and have it record
        how far it goes from now on (blocking)."""
        if recorded is not None:
            try:
                plog.check_end(recorded.end_offset, recorded.leader_epoch)
            except StorageError as exc:
                exc.lost_end = recorded.end_offset  # type: ignore[attr-defined]
                raise
        try:
            self.store.record_log_end(topic, partition, epoch, plog.log_end_offset,
                                      opening=True)
        except BaseException:
            plog.close()
            raise
        plog.record_end = lambda end: self.store.record_log_end(topic, partition, epoch, end)

    def forget_lost(self, key: tuple[str, int]) -> None:
        """Check the partition's storage afresh at its next use (its leadership changed,
        or its topic was deleted)."""
        self._lost.pop(key, None)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: move the partition's log start offset up to ``offset``
        (-1: the high watermark), deleting the segments wholly below it; return the new
        log start offset (Kafka's low watermark). For a partition whose log lost its tail
        (offline) this is the operator's acceptance of the loss: ``offset`` must be -1
        or the recorded end (never below it), and the log restarts there, empty."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -1:
            raise InvalidArgumentError(
                f"DeleteRecords of {topic}-{partition}: offset must be -1 (the high "
                f"watermark) or >= 0, got {offset!r}")
        key = (topic, partition)
        self.leadership.check(topic, partition)
        found = self.writers.get(key)
        lost = self._lost.get(key)
        if lost is None and found is not None and found.log.offline is not None:
            recorded = await self.run_io(self.store.log_end, topic, partition)
            end = max(found.log.high_watermark, recorded.end_offset if recorded else 0)
            lost = (str(found.log.offline), end)
        if lost is None:
            try:
                w = await self.writer(topic, partition)
            except StorageError as exc:  # found lost as it opened
                if getattr(exc, "lost_end", None) is None:
                    raise
                lost, found = (str(exc), exc.lost_end), None  # type: ignore[attr-defined]
            else:
                target = w.log.high_watermark if offset == -1 else offset
                await self.run_io(w.log.delete_segments_before, target)
                return w.log.log_start_offset
        end = lost[1]
        if offset not in (-1, end):
            raise OffsetOutOfRangeError(
                f"DeleteRecords of {topic}-{partition} to offset {offset} refused: the "
                f"partition is offline, its log reached offset {end} and lost records "
                f"below it; it restarts at {end}, never below: give offset {end} (or -1)",
                topic=topic, partition=partition, offset=offset, log_end_offset=end)
        if found is not None and self.detach(key, found):
            try:
                await found.close()
            except Exception as exc:  # noqa: BLE001 - the log is offline: nothing to save
                log.info("partition %s: closing the offline log: %s", found.name, exc)
            self._refence.add(key)  # our own dead stream may still hold the lease
        tc = await self.topic_config(topic)
        validate_partition(partition, tc.partitions, topic)
        pdir = self.topics.partition_dir(topic, partition)
        await self.run_io(restart_lost_log, self.fileio, pdir, end)
        self._lost.pop(key, None)
        log.warning("partition %s-%d: its lost records were deleted (DeleteRecords): the log "
                    "restarts at offset %d", topic, partition, end)
        w = await self.writer(topic, partition)
        return w.log.log_start_offset

    # --- closing ------------------------------------------------------------------------------
    def _close_idle(self) -> None:
        """Above ``max.open.partitions``: close the least recently used partitions that
        nobody waits on (reopened on their next use, see :mod:`.resources`)."""
        if self.limits is None or self.closing:
            return
        excess = len(self.writers) - self.limits.max_open_partitions
        if excess <= 0:
            return
        for key in list(self._recent):
            if excess <= 0:
                break
            w = self.writers.get(key)
            if w is None:
                del self._recent[key]
                continue
            if w.busy:
                continue
            del self.writers[key], self._recent[key]
            self._closed_idle[key] = w.log.leader_epoch
            excess -= 1
            task = self._idle_closes[key] = self.loop.create_task(self._close_writer(w))
            task.add_done_callback(self._idle_closed(key))

    def _idle_closed(self, key: tuple[str, int]) -> Callable[[asyncio.Task], None]:
        """The done callback of ``key``'s idle close: forget the task (unless a newer
        one replaced it)."""
        def done(task: asyncio.Task) -> None:
            if self._idle_closes.get(key) is task:
                del self._idle_closes[key]
        return done

    async def _close_writer(self, w: PartitionWriter) -> None:
        try:
            await w.close()
        except Exception as exc:  # noqa: BLE001 - logged; the next open recovers it
            log.warning("partition %s: closing it (idle) failed: %s", w.name, exc)
        else:
            log.debug("partition %s: closed while idle (max.open.partitions)", w.name)

    def detach(self, key: tuple[str, int], writer: PartitionWriter) -> bool:
        """Stop serving ``writer`` (leadership moved away); the caller closes it.
        False when another writer already replaced it."""
        if self.writers.get(key) is not writer:
            return False
        del self.writers[key]
        return True

    async def delete_topic(self, name: str) -> None:
        """Delete a topic (standalone mode; in cluster mode the controller deletes
        topics): its writers stop without a final sync (:meth:`PartitionWriter.abandon`),
        its directory is renamed away at once (:meth:`TopicStore.retire_topic`: no
        reader sees it any more, a topic created under the name starts empty), its
        partitions' leadership, recorded log ends and committed offsets are released;
        its data is removed ``file.delete.delay.ms`` later by :attr:`retired`. While
        this runs the topic is unknown to every lookup."""
        self._deleting.add(name)
        try:
            # only partitions ever opened have a directory (and a leader to release):
            # a topic of many partitions, never used, is deleted without visiting each
            used = await self.run_io(self.used_partitions, name)
            closing = [t for k, t in self._idle_closes.items() if k[0] == name]
            if closing:  # an idle close writes under the directory: let it finish
                await asyncio.gather(*closing, return_exceptions=True)
            writers = [self.writers.pop(key) for key in list(self.writers) if key[0] == name]
            for key in [k for k in self._recent if k[0] == name]:
                del self._recent[key]
            await asyncio.gather(*(w.abandon() for w in writers))
            await self.run_io(self.topics.retire_topic, name)
            # independent records, written side by side on the I/O threads
            await asyncio.gather(
                *(self.run_io(self.store.release_leadership, name, p, self.broker_id)
                  for p in sorted(used | {w.partition for w in writers})),
                self.run_io(self.store.forget_log_ends, name),
                self.run_io(self.store.forget_topic_offsets, name))
            for key in [k for k in self._lost if k[0] == name]:
                del self._lost[key]
            for key in [k for k in self._closed_idle if k[0] == name]:
                del self._closed_idle[key]
        finally:
            self._deleting.discard(name)
            self.forget_topic(name)
        if self.metrics is not None:
            self.metrics.forget_topic(name)
        for w in writers:  # its files are under the renamed directory now
            self.loop.run_in_executor(self.pool, w.log.release_abandoned)
        if self.retired is not None:
            self.retired.poke()

    def wake_fetchers(self) -> None:
        """Answer every waiting long poll now with what it has (shutdown)."""
        for w in self.writers.values():
            w.wake_fetchers()

    async def close_all(self) -> int:
        """Close every partition (after idle closes in flight) and give up their
        leadership; return how many were open. Call once :attr:`closing` is set.

        A broker's stop is not one partition after another: up to
        :data:`STOP_CLOSE_THREADS` closes (final sync, producer snapshot, the stream's
        close) run at once on threads of their own, then the closed logs' end offsets
        are recorded with one store write per topic
        (:meth:`~sparklog.coordination.base.CoordinationStore.record_log_ends`) and
        the leaderships released together
        (:meth:`~sparklog.coordination.base.CoordinationStore.release_leaderships`)."""
        if self._idle_closes:
            await asyncio.gather(*self._idle_closes.values(), return_exceptions=True)
        writers = list(self.writers.items())
        self.writers.clear()
        started = time.perf_counter()
        ends: dict[str, dict[int, LogEnd]] = collections.defaultdict(dict)
        for (topic, p), w in writers:  # recorded below, one write per topic
            w.log.record_end = functools.partial(_collect_end, ends[topic], p,
                                                 w.log.leader_epoch)
        threads = min(STOP_CLOSE_THREADS, max(len(writers), 1))
        with concurrent.futures.ThreadPoolExecutor(
                threads, thread_name_prefix="sparklog-stop") as pool:
            await asyncio.gather(*(w.close(pool) for _, w in writers),
                                 return_exceptions=True)
            closed = time.perf_counter()
            loop = asyncio.get_running_loop()
            for topic, topic_ends in ends.items():
                try:
                    await loop.run_in_executor(pool, self.store.record_log_ends, topic,
                                               topic_ends)
                except SparklogError as exc:
                    log.warning("topic %s: recording the end offsets of %d closed "
                                "partition(s) failed: %s", topic, len(topic_ends), exc)
            recorded = time.perf_counter()
            failed = await loop.run_in_executor(pool, self.store.release_leaderships,
                                                [key for key, _ in writers], self.broker_id)
        for (topic, p), error in failed.items():
            log.warning("partition %s-%d: releasing leadership failed: %s", topic, p, error)
        if writers:
            log.info("stop: %d partition(s) closed in %.1f s (%d at once), their end offsets "
                     "recorded in %.1f s, their leaderships released in %.1f s",
                     len(writers), closed - started, threads, recorded - closed,
                     time.perf_counter() - recorded)
        return len(writers)
