"""The broker: lifecycle, partition ownership, request dispatch, produce and fetch.

A :class:`Broker` runs on one asyncio event loop. ``await broker.start()`` recovers
every partition found on the storage (each opened by its own
:class:`~sparklog.writer.broker.partition.PartitionWriter`), registers the broker in the
coordination store and listens; ``await broker.stop()`` shuts down gracefully: stop
accepting, stop reading new requests, answer those already read, drain every
partition's queue, sync, snapshot producer state, close the logs (releasing their
leases) and withdraw the registration.

API handlers of topics and of groups live in :mod:`.admin` and :mod:`.groups_api`;
networking (framing, ordering, limits, sendfile) in :mod:`.server`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import time

from ...coordination.base import BrokerInfo, CoordinationStore
from ...coordination.local import LocalCoordinationStore
from ...names import printable, validate_transactional_id
from ...errors import (
    InvalidArgumentError, InvalidPartitionsError, InvalidProducerEpochError, LeaseHeldError,
    OffsetOutOfRangeError, PolicyViolationError, RequestTimedOutError, SparklogError,
    UnknownTopicOrPartitionError, UnsupportedVersionError,
)
from ...log.config import LogConfig
from ...metadata import TopicStore, validate_partition
from ...metadata.topic import TopicConfig
from ...protocol.apis import (
    ACKS_ALL, ACKS_LEADER, ACKS_NONE, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NO_OFFSET,
    SUPPORTED_VERSIONS, ApiKey, api_name,
)
from ...protocol.codec import FileRegion, RequestHeader, decode_request_body, error_fields
from ...storage import FileIO, open_fileio
from ...storage.paths import storage_root, url_scheme
from . import admin, groups_api, resources, server
from .acceptor import Acceptor
from ...retention.manager import RetentionManager
from .config import BrokerConfig
from .group import GroupCoordinator
from .instance import InstanceRecord
from .partition import PartitionWriter, ProduceResult
from .refusals import RefusalLog

log = logging.getLogger(__name__)

_NO_ERROR = {"error_code": 0, "error_message": ""}


class RequestContext:
    """Who sent a request (client id and host), the connection's ordering lock
    (produce requests of one connection reach their partitions' queues in the order
    they arrived, though they are handled concurrently), ``closed``, a future done
    once the connection is gone (a long poll of a closed connection ends at once), and
    ``io_slots``, the connection's share of the I/O threads for fetch reads."""

    __slots__ = ("client_id", "client_host", "order", "closed", "io_slots")

    def __init__(self, client_id: str, client_host: str, order: asyncio.Lock | None = None,
                 closed: asyncio.Future | None = None,
                 io_slots: asyncio.Semaphore | None = None):
        self.client_id = printable(client_id)  # logged and part of member ids
        self.client_host = client_host
        self.order = order or asyncio.Lock()
        self.closed = closed
        self.io_slots = io_slots or asyncio.Semaphore(server.IO_SLOTS_PER_CONNECTION)


def _nothing_to_read(plog, offset: int) -> bool:
    """True when a fetch at ``offset`` finds no data without reading anything: at or
    past the high watermark, within the log (a read would answer empty)."""
    return plog.high_watermark <= offset <= plog.log_end_offset \
        and offset >= plog.log_start_offset


def _warn_unauthenticated(sockets) -> None:
    """Log a WARNING for every listening socket not bound to a loopback address: the
    broker has no authentication yet, so every client reaching it may create, read and
    delete any topic and group."""
    import ipaddress

    for sock in sockets:
        host = sock.getsockname()[0]
        try:
            loopback = ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            log.warning("listener %s is not a loopback address and sparklog has no "
                        "authentication yet: every client that can reach it may create, "
                        "read and delete any topic and group; bind 127.0.0.1 or restrict "
                        "access with a firewall", host)


def _time_out(futures, timeout_ms: int) -> None:
    """Answer the produce futures still pending after ``timeout_ms``."""
    for topic, partition, fut in futures:
        if not fut.done():
            fut.set_result(ProduceResult(error=RequestTimedOutError(
                f"partition {topic}-{partition}: not appended within "
                f"timeout_ms={timeout_ms}")))


class Broker:
    """A sparklog broker serving ``storage_uri`` (see the module docstring).

    ``config`` holds the broker properties (Kafka's names); ``store`` the coordination
    store (default: ZooKeeper when ``zookeeper.connect`` is set, else the storage's
    local store); ``fileio`` the storage (default: opened from ``storage_uri``);
    ``metrics`` turns the Prometheus metrics on; ``refusal_log_level`` is the logging
    level of refused partition writes (WARNING; an embedded broker, whose in-process
    client reports each refusal to its caller, uses DEBUG).
    """

    def __init__(self, storage_uri: str, config: BrokerConfig | None = None, *,
                 store: CoordinationStore | None = None, fileio: FileIO | None = None,
                 metrics: bool = True, refusal_log_level: int = logging.WARNING):
        if not isinstance(storage_uri, str) or not storage_uri:
            raise InvalidArgumentError(
                f"storage URI must be a non-empty string, got {storage_uri!r}")
        self.storage_uri = storage_root(storage_uri)
        self.config = config or BrokerConfig()
        #: (host, port) registered and returned in Metadata (port 0: the bound port);
        #: checked before anything is opened (a wildcard is refused)
        self.advertised = self.config.advertised_host_port
        self.fileio = fileio or open_fileio(self.storage_uri, **self._storage_options())
        self.topics = TopicStore(self.storage_uri, self.fileio)
        if store is None and self.config.zookeeper_connect:  # cluster mode
            from ...coordination.zkstore import ZkCoordinationStore

            store = ZkCoordinationStore(
                self.config.zookeeper_connect, topic_store=self.topics,
                session_timeout_ms=self.config.zookeeper_session_timeout_ms,
                connection_timeout_ms=self.config.zookeeper_connection_timeout_ms or None,
                auto_leader_rebalance=self.config.auto_leader_rebalance_enable)
        self.store = store or LocalCoordinationStore(self.storage_uri, self.fileio)
        #: cluster mode: opens/closes partitions as ZooKeeper assigns leaders (else None)
        self.leadership = None
        self.broker_id = self.config.broker_id
        self.metrics = None
        if metrics:
            try:
                from .metrics import BrokerMetrics

                self.metrics = BrokerMetrics()
            except ImportError:  # prometheus-client is an optional extra
                log.warning("prometheus-client is not installed: broker metrics are off")
        self.refusals = RefusalLog(self.metrics, level=refusal_log_level)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool = concurrent.futures.ThreadPoolExecutor(
            self.config.num_io_threads, thread_name_prefix="sparklog-io")
        self.partitions: dict[tuple[str, int], PartitionWriter] = {}
        self._opening: dict[tuple[str, int], asyncio.Task] = {}
        #: open partitions, least recently used first (see _close_idle)
        self._recent: collections.OrderedDict = collections.OrderedDict()
        #: leader epoch of partitions closed while idle (reopened without a new epoch)
        self._closed_idle: dict[tuple[str, int], int] = {}
        self._idle_closes: dict[tuple[str, int], asyncio.Task] = {}
        self.limits: resources.ResourceLimits | None = None
        self._topic_cache: dict[str, TopicConfig] = {}
        self.deleting: set[str] = set()
        self._refence: set[tuple[str, int]] = set()
        #: standalone mode: who ran this broker before, and whether it died (then every
        #: partition is fenced as it opens: its dead leases are revoked at once)
        self.instance: InstanceRecord | None = None
        self._fence_all = False
        self.groups: GroupCoordinator | None = None
        if self.metrics is not None:
            self.metrics.watch_logs(lambda: list(self.partitions.values()), self.store)
        self.stopping = False
        self.host, self.port = self.config.listen_host_port
        self._server: Acceptor | None = None
        self.connections: set = set()
        self.budget: server.ByteBudget | None = None
        self._pid_next = self._pid_end = 0
        #: transactional id -> (producer id, epoch) of its current holder (in memory)
        self._transactional: dict[str, tuple[int, int]] = {}
        self._stopped: asyncio.Event | None = None
        self.retention: RetentionManager | None = None
        #: api key -> ``handler(broker, body, ctx)``
        self.handlers = {
            ApiKey.API_VERSIONS: Broker._api_versions,
            ApiKey.PRODUCE: Broker._produce,
            ApiKey.FETCH: Broker._fetch,
            ApiKey.LIST_OFFSETS: Broker._list_offsets,
            ApiKey.INIT_PRODUCER_ID: Broker._init_producer_id,
            **admin.HANDLERS, **groups_api.HANDLERS,
        }

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """``host:port`` the broker listens on (the real port after binding port 0)."""
        return f"{self.host}:{self.port}"

    def _storage_options(self) -> dict:
        """The FileIO options the broker's settings give its storage's backend."""
        if url_scheme(self.storage_uri) in ("", "file"):
            return {"sync_behind_writes": self.config.sync_behind_writes_bytes}
        return {}

    async def run_io(self, fn, *args):
        """Run a blocking storage call on the broker's I/O threads."""
        return await self.loop.run_in_executor(self.pool, fn, *args)

    async def start(self) -> str:
        """Recover every partition, start listening, register; return the address."""
        self.loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self.budget = server.ByteBudget(self.config.queued_max_request_bytes)
        self.groups = GroupCoordinator(
            self.loop, self.partition_counts,
            min_session_ms=self.config.group_min_session_timeout_ms,
            max_session_ms=self.config.group_max_session_timeout_ms)
        started = time.monotonic()
        await self.run_io(self.store.cluster_id)
        from ...coordination.zkstore import ZkCoordinationStore

        if isinstance(self.store, ZkCoordinationStore):
            from ...coordination.handover import BrokerLeadership

            self.leadership = BrokerLeadership(self, self.store)
        # cluster mode: partitions open when the controller makes this broker their leader
        names = [] if self.leadership else await self.run_io(self.topics.list_topics)
        if self.leadership is None:
            self.instance = InstanceRecord(self.fileio, self.storage_uri, self.broker_id)
            self._fence_all = await self.run_io(self.instance.claim)
        served = []
        for name in names:
            try:
                tc = await self.topic_config(name)
                self.check_served(tc)
            except SparklogError as exc:
                log.error("topic %s: not served: %s", name, exc)
                continue
            served.append(tc)
        total = sum(tc.partitions for tc in served)
        if total > self.config.max_broker_partitions:
            log.error("the storage root holds %d partitions, above max.broker.partitions=%d: "
                      "creating topics or partitions is refused until topics are deleted or "
                      "the limit raised", total, self.config.max_broker_partitions)
        self.limits = resources.plan(self.config.max_open_partitions,
                                     self.config.max_connections, total)
        opened = await self._recover_existing(served)
        self._server = Acceptor(
            self.loop, server.protocol_factory(self, lambda r: self._server.on_closed(r.peer_ip)),
            self.host, self.port, max_connections=self.limits.max_connections,
            max_connections_per_ip=self.config.max_connections_per_ip)
        self.host, self.port = self._server.address
        self._server.start()
        _warn_unauthenticated([self._server.sock])
        if self.leadership is not None:
            self.leadership.start()
        self.retention = RetentionManager(lambda: self.partitions.values(), self.run_io,
                                          self.config.retention_check_interval_ms)
        self.retention.start()
        if self.advertised[1] == 0:
            self.advertised = (self.advertised[0], self.port)
        await self.run_io(self.store.register_broker, BrokerInfo(self.broker_id, *self.advertised))
        if self.metrics is not None and self.config.metrics_port >= 0:
            port = self.metrics.serve(self.config.metrics_port, self.host)
            log.info("metrics on http://%s:%d/metrics", self.host, port)
        log.info("broker %d listening on %s, advertised as %s:%d (storage %s): %d "
                 "partition(s) of %d topic(s) recovered in %.2fs", self.broker_id,
                 self.address, *self.advertised, self.storage_uri, opened, len(names),
                 time.monotonic() - started)
        return self.address

    async def _recover_existing(self, topics: list[TopicConfig]) -> int:
        """Open (recover) the partitions that have a directory (partitions never
        written have none: they open on first use), at most ``max.open.partitions``;
        return how many opened."""
        room = self.limits.max_open_partitions
        keys = []
        for tc in topics:
            listed = await self.run_io(self.fileio.list, self.topics.topic_dir(tc.name))
            numbers = sorted(int(i.name) for i in listed if i.is_dir and i.name.isdigit())
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

    async def stop(self) -> None:
        """Graceful shutdown (see the module docstring). Idempotent."""
        if self.stopping:
            await self._stopped.wait()
            return
        self.stopping = True
        try:
            if self.retention is not None:
                await self.retention.stop()
            if self.leadership is not None and self.config.controlled_shutdown_enable:
                # move every leadership to another broker before closing anything
                await self.run_io(self.store.controlled_shutdown, self.broker_id,
                                  self.config.shutdown_timeout_ms / 1000)
            if self._server is not None:
                self._server.close()
            timeout = self.config.shutdown_timeout_ms / 1000
            conns = list(self.connections)
            for conn in conns:
                conn.stop_reading()
            if self.groups is not None:
                self.groups.close()  # pending joins answer now
            for w in self.partitions.values():
                w.wake_fetchers()  # long polls answer now with what they have
            if conns:
                await asyncio.wait([c.task for c in conns], timeout=timeout)
            if self._idle_closes:
                await asyncio.gather(*self._idle_closes.values(), return_exceptions=True)
            writers = list(self.partitions.items())
            self.partitions.clear()
            await asyncio.gather(*(w.close() for _, w in writers), return_exceptions=True)
            for (topic, p), _ in writers:
                try:
                    await self.run_io(self.store.release_leadership, topic, p, self.broker_id)
                except SparklogError as exc:
                    log.warning("partition %s-%d: releasing leadership failed: %s", topic, p, exc)
            await self.run_io(self.store.unregister_broker, self.broker_id)
            if self.instance is not None:
                await self.run_io(self.instance.release)
            if self.leadership is not None:
                self.leadership.stop()
                await self.run_io(self.store.close)
            if self.metrics is not None:
                self.metrics.close()
            log.info("broker %d stopped: %d partition(s) synced and closed", self.broker_id,
                     len(writers))
        finally:
            self.pool.shutdown(wait=True)
            self._stopped.set()

    async def wait_stopped(self) -> None:
        """Return once :meth:`stop` finished."""
        await self._stopped.wait()

    # --- topics and partitions ---------------------------------------------------------------
    async def topic_config(self, name: str, refresh: bool = False) -> TopicConfig:
        """The topic's config (cached; UnknownTopicOrPartitionError if absent)."""
        if name in self.deleting:
            raise UnknownTopicOrPartitionError(f"topic {name!r} is being deleted")
        tc = None if refresh else self._topic_cache.get(name)
        if tc is None:
            tc = await self.run_io(self.topics.describe_topic, name)
            self._topic_cache[name] = tc
        return tc

    def forget_topic(self, name: str) -> None:
        """Drop a topic from the cache (after create/alter/delete)."""
        self._topic_cache.pop(name, None)

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
        brokers = 1
        if self.leadership is not None:
            brokers = max(len(self.leadership.metadata()["brokers"]), 1)
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

    async def writer(self, topic: str, partition: int) -> PartitionWriter:
        """The partition's writer, opened (and recovered) on first use."""
        key = (topic, partition)
        if self.leadership is not None:
            self.leadership.check(topic, partition)  # NotLeaderError unless provably ours
        found = self.partitions.get(key)
        if found is not None:
            if found.log.offline is not None:  # storage changed under it: until restart
                raise found.log.offline
            if not found.failed:
                self._recent.move_to_end(key)
                return found
            if self.leadership is not None:
                self.leadership.check_failed_writer(found)  # fenced: NotLeaderError
            # the log failed (a storage error): close it and recover it afresh
            log.warning("partition %s-%d: reopening after a storage failure", topic, partition)
            if self.partitions.get(key) is found:
                del self.partitions[key]
                self._refence.add(key)  # our own dead stream may still hold the lease
            await found.close()
        tc = await self.topic_config(topic)
        if partition >= tc.partitions:  # maybe grown by another broker/process
            tc = await self.topic_config(topic, refresh=True)
        validate_partition(partition, tc.partitions, topic)
        self.check_served(tc)
        if self.stopping:
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

    async def _open(self, tc: TopicConfig, partition: int) -> PartitionWriter:
        name = f"{tc.name}-{partition}"
        closing = self._idle_closes.get((tc.name, partition))
        if closing is not None:  # its idle close must release the lease first
            await asyncio.shield(closing)

        closed_epoch = self._closed_idle.pop((tc.name, partition), None)

        def open_blocking():
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
                or (tc.name, partition) in self._refence or self.leadership is not None \
                or self._fence_all
            self._refence.discard((tc.name, partition))
            opened = PartitionWriter.open_blocking(
                self.fileio, self.topics.partition_dir(tc.name, partition), self.log_config(tc),
                state.leader_epoch, f"partition {name}", fence=fence)
            return opened, state.leader_epoch

        (plog, state, snapshots), epoch = await self.run_io(open_blocking)
        writer = PartitionWriter(tc, partition, plog, state, snapshots, loop=self.loop,
                                 pool=self.pool,
                                 snapshot_interval_ms=self.config.producer_snapshot_interval_ms)
        self.partitions[(tc.name, partition)] = writer
        self._recent[(tc.name, partition)] = None
        self._close_idle()
        if self.metrics is not None:
            self.metrics.open_partitions.set(len(self.partitions))
        log.info("partition %s: leader epoch %d, log [%d, %d), %d producer(s)", name, epoch,
                 plog.log_start_offset, plog.log_end_offset, len(state.producers))
        return writer

    def _close_idle(self) -> None:
        """Above ``max.open.partitions``: close the least recently used partitions that
        nobody waits on (reopened on their next use, see :mod:`.resources`)."""
        if self.limits is None or self.stopping:
            return
        excess = len(self.partitions) - self.limits.max_open_partitions
        if excess <= 0:
            return
        for key in list(self._recent):
            if excess <= 0:
                break
            w = self.partitions.get(key)
            if w is None:
                del self._recent[key]
                continue
            if w.busy:
                continue
            del self.partitions[key], self._recent[key]
            self._closed_idle[key] = w.log.leader_epoch
            excess -= 1
            task = self._idle_closes[key] = self.loop.create_task(self._close_writer(w))
            task.add_done_callback(lambda t, k=key: self._idle_closes.get(k) is t
                                   and self._idle_closes.pop(k))

    async def _close_writer(self, w: PartitionWriter) -> None:
        try:
            await w.close()
        except Exception as exc:  # noqa: BLE001 - logged; the next open recovers it
            log.warning("partition %s: closing it (idle) failed: %s", w.name, exc)
        else:
            log.debug("partition %s: closed while idle (max.open.partitions)", w.name)

    # --- dispatch -------------------------------------------------------------------------------
    async def handle(self, header: RequestHeader, payload, position: int,
                     ctx: RequestContext) -> dict | None:
        """Decode and answer one request; None when no response is due (acks=0)."""
        started = time.perf_counter()
        name = api_name(header.api_key)
        try:
            body = decode_request_body(header, payload, position)
            response = await self.handlers[header.api_key](self, body, ctx)
        except SparklogError as exc:
            log.info("%s request %d from %s (%s) refused: %s", name, header.correlation_id,
                     ctx.client_host, ctx.client_id, exc)
            response = error_fields(exc)
            if isinstance(exc, UnsupportedVersionError) and header.api_key == ApiKey.API_VERSIONS:
                response.update(self._versions_body())
        except Exception as exc:  # a bug: answer it, log it, keep serving
            log.exception("%s request %d from %s failed", name, header.correlation_id,
                          ctx.client_host)
            response = error_fields(exc)
        if self.metrics is not None:
            self.metrics.request_done(name, time.perf_counter() - started,
                                      response.get("error_code", 0) if response else 0)
        return response

    def _versions_body(self) -> dict:
        return {"api_versions": [[k, lo, hi] for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
                "broker_id": self.broker_id}

    async def _api_versions(self, body, ctx) -> dict:
        return {**_NO_ERROR, **self._versions_body(),
                "cluster_id": await self.run_io(self.store.cluster_id)}

    # --- produce ---------------------------------------------------------------------------------
    async def _produce(self, body, ctx) -> dict | None:
        acks = body["acks"]
        if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
            raise InvalidArgumentError(f"Produce.acks={acks} must be 0, 1 or -1 (all)")
        pending = []   # (topic, partition, future | error, size)
        async with ctx.order:  # requests of a connection are queued in arrival order
            for t in body["topics"]:
                for p in t["partitions"]:
                    try:
                        w = await self.writer(t["name"], p["partition"])
                        pending.append((t["name"], p["partition"],
                                        w.submit(p["records"], acks), len(p["records"])))
                    except SparklogError as exc:
                        pending.append((t["name"], p["partition"], exc, 0))
        futures = [(t, p, f) for t, p, f, _ in pending if isinstance(f, asyncio.Future)]
        if futures:
            # one timer answers what is still pending at the deadline (the writer skips
            # a future already done); cheaper per request than asyncio.wait
            timer = self.loop.call_later(max(body["timeout_ms"], 0) / 1000, _time_out,
                                         futures, body["timeout_ms"])
            try:
                for _, _, fut in futures:
                    await fut
            finally:
                timer.cancel()
        topics: dict[str, list] = {}
        for topic, partition, fut, size in pending:
            if not isinstance(fut, asyncio.Future):
                error = fut
                item = {"partition": partition, **error_fields(fut), "base_offset": -1}
            else:
                res = fut.result()
                if self.leadership is not None:
                    res = self.leadership.checked_result(topic, partition, res)
                error = res.error
                item = {"partition": partition, **error_fields(res.error),
                        "base_offset": res.base_offset,
                        "log_append_time_ms": res.log_append_time_ms,
                        "log_start_offset": res.log_start_offset}
                if res.error is None and self.metrics is not None:
                    self.metrics.produced(topic, size, res.records)
            if error is not None:
                self.refusals.refused("Produce", topic, partition, error, size,
                                      f"{ctx.client_host} ({ctx.client_id})")
            topics.setdefault(topic, []).append(item)
        if acks == ACKS_NONE:
            for topic, items in topics.items():
                for item in items:
                    if item["error_code"]:
                        log.warning("acks=0 produce to %s-%d from %s failed: %s", topic,
                                    item["partition"], ctx.client_host, item["error_message"])
            return None
        return {**_NO_ERROR, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}

    # --- fetch -----------------------------------------------------------------------------------
    async def _fetch(self, body, ctx) -> dict:
        deadline = self.loop.time() + max(body["max_wait_ms"], 0) / 1000
        while True:
            results, total, waiters, errors = await self._fetch_once(body, ctx)
            remaining = deadline - self.loop.time()
            gone = ctx.closed is not None and ctx.closed.done()
            if total >= body["min_bytes"] or errors or remaining <= 0 or self.stopping \
                    or not waiters or gone:
                for w, fut in waiters:
                    w.forget_waiter(fut)
                break
            futures = [fut for _, fut in waiters]
            if ctx.closed is not None:
                futures.append(ctx.closed)
            if self.metrics is not None:
                self.metrics.purgatory.inc()
            try:
                await asyncio.wait(futures, timeout=remaining,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w, fut in waiters:
                    w.forget_waiter(fut)
                if self.metrics is not None:
                    self.metrics.purgatory.dec()
        if self.metrics is not None:
            self.metrics.fetched(results)
        topics: dict[str, list] = {}
        for topic, item in results:
            topics.setdefault(topic, []).append(item)
        return {**_NO_ERROR, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}

    async def _fetch_once(self, body, ctx):
        wanted = []
        waiters = []   # (writer, future): given back to the writer once done
        errors = 0
        for t in body["topics"]:
            for p in t["partitions"]:
                try:
                    w = await self.writer(t["name"], p["partition"])
                    waiters.append((w, w.data_waiter()))  # before reading: no lost wake-up
                    wanted.append((t["name"], p, w, None))
                except SparklogError as exc:
                    wanted.append((t["name"], p, None, exc))
                except BaseException:
                    for w, fut in waiters:
                        w.forget_waiter(fut)
                    raise
        budget = max(min(body["max_bytes"], self.config.fetch_max_bytes), 1)

        def read_all():
            out, total, errs = [], 0, 0
            oversized = False
            for topic, p, w, exc in wanted:
                base = {"partition": p["partition"], "high_watermark": -1,
                        "log_start_offset": -1, "records": b""}
                if exc is None:
                    try:
                        limit = min(p["partition_max_bytes"], budget - total)
                        res = None if limit <= 0 and total else \
                            w.log.read(p["fetch_offset"], max(limit, 1))
                        if res is not None and res.size > limit:
                            # one frame larger than the limits is returned whole (as
                            # Kafka's first record batch), one per response: clients
                            # bound a response by max_bytes + one frame
                            res = None if oversized else res
                            oversized = True
                        if res is None:
                            base.update(_NO_ERROR, high_watermark=w.log.high_watermark,
                                        log_start_offset=w.log.log_start_offset)
                            out.append((topic, base))
                            continue
                        records = res.data
                        local = self.fileio.local_path(res.segment_path) if res.size else None
                        if local is not None:
                            records = FileRegion(local, res.position, res.size)
                        base.update(_NO_ERROR, high_watermark=res.high_watermark,
                                    log_start_offset=res.log_start_offset, records=records)
                        total += res.size
                        if self.metrics is not None and res.size:
                            self.metrics.sent(topic, res.size)
                    except OffsetOutOfRangeError as e:
                        base.update(error_fields(e), high_watermark=w.log.high_watermark,
                                    log_start_offset=w.log.log_start_offset)
                        errs += 1
                    except SparklogError as e:
                        base.update(error_fields(e))
                        errs += 1
                else:
                    base.update(error_fields(exc))
                    errs += 1
                out.append((topic, base))
            return out, total, errs

        try:
            if all(exc is None and _nothing_to_read(w.log, p["fetch_offset"])
                   for _, p, w, exc in wanted):
                results, total, errors = read_all()  # no I/O: a long poll parks at once
            else:
                async with ctx.io_slots:  # one connection cannot fill the I/O threads
                    results, total, errors = await self.run_io(read_all)
        except BaseException:
            for w, fut in waiters:
                w.forget_waiter(fut)
            raise
        return results, total, waiters, errors

    # --- offsets and producer ids --------------------------------------------------------------
    async def _list_offsets(self, body, ctx) -> dict:
        topics = []
        for t in body["topics"]:
            items = []
            for p in t["partitions"]:
                item = {"partition": p["partition"], "offset": NO_OFFSET, "timestamp": -1}
                try:
                    w = await self.writer(t["name"], p["partition"])
                    ts = p["timestamp"]
                    if ts == LATEST_TIMESTAMP:
                        item["offset"] = w.log.high_watermark
                    elif ts == EARLIEST_TIMESTAMP:
                        item["offset"] = w.log.log_start_offset
                    elif ts < 0:
                        raise InvalidArgumentError(
                            f"ListOffsets timestamp {ts} for {t['name']}-{p['partition']}: use "
                            "-1 (latest), -2 (earliest) or a time in ms")
                    else:
                        found = await self.run_io(w.log.offset_for_timestamp, ts)
                        if found is not None:
                            item["offset"], item["timestamp"] = found, ts
                    item.update(_NO_ERROR)
                except SparklogError as exc:
                    item.update(error_fields(exc))
                items.append(item)
            topics.append({"name": t["name"], "partitions": items})
        return {**_NO_ERROR, "topics": topics}

    async def _init_producer_id(self, body, ctx) -> dict:
        """Kafka's InitProducerId (KIP-98, with KIP-360's rules for a given id/epoch):

        * with a ``transactional_id``: its holder's producer id with the epoch bumped
          (fencing older instances of it), a fresh id the first time; a ``producer_id``
          and ``producer_epoch`` given with it must be its current pair
          (InvalidProducerEpochError otherwise);
        * without one: always a fresh producer id at epoch 0. A given ``producer_id``
          and ``producer_epoch`` (a producer restarting its sequences) is accepted when
          no partition of this broker knows that producer under a newer epoch, and
          refused otherwise (a fenced producer: InvalidProducerEpochError); either way
          the id is never bumped for the caller, so nobody can fence another client's
          producer id.
        """
        if body["transactional_id"] is not None:
            validate_transactional_id(body["transactional_id"])
        pid, epoch = body["producer_id"], body["producer_epoch"]
        tid = body["transactional_id"]
        if pid >= 0 and epoch < 0:
            raise InvalidArgumentError(
                f"InitProducerId: producer_id {pid} given without its producer_epoch")
        if pid < 0 and epoch >= 0:
            raise InvalidArgumentError(
                f"InitProducerId: producer_epoch {epoch} given without its producer_id")
        if tid:
            current = self._transactional.get(tid)
            if pid >= 0 and current is not None and (pid, epoch) != current:
                raise InvalidProducerEpochError(
                    f"InitProducerId: producer id {pid} epoch {epoch} is not the current "
                    f"producer of transactional id {tid!r} (fenced)")
            if current is not None and current[1] < 32766:
                pid, epoch = current[0], current[1] + 1
            else:  # a new transactional id, or its epochs are used up
                pid, epoch = await self._new_producer_id(), 0
            self._transactional[tid] = (pid, epoch)
            return {**_NO_ERROR, "producer_id": pid, "producer_epoch": epoch}
        if pid >= 0:
            for w in list(self.partitions.values()):
                known = w.state.producers.get(pid)
                if known is not None and known.epoch > epoch:
                    raise InvalidProducerEpochError(
                        f"InitProducerId: producer id {pid} epoch {epoch} is older than "
                        f"epoch {known.epoch} already used on partition {w.name} (fenced)")
        return {**_NO_ERROR, "producer_id": await self._new_producer_id(), "producer_epoch": 0}

    async def _new_producer_id(self) -> int:
        """The next producer id of the block this broker reserved (a new block when it
        is used up)."""
        if self._pid_next >= self._pid_end:
            size = self.config.producer_id_block_size
            self._pid_next = await self.run_io(self.store.allocate_producer_ids, size)
            self._pid_end = self._pid_next + size
        pid, self._pid_next = self._pid_next, self._pid_next + 1
        return pid
