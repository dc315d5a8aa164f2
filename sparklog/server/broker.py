"""The broker: its lifecycle, its collaborators, and request dispatch.

A :class:`Broker` runs on one asyncio event loop. ``await broker.start()`` recovers
every partition found on the storage, registers the broker in the coordination store and
listens; ``await broker.stop()`` shuts down gracefully: stop accepting, stop reading new
requests, answer those already read, let leadership handovers under way end, drain
every partition's queue, sync, snapshot producer state, close the logs (releasing their
leases) and withdraw the registration.

The broker assembles its collaborators (as Kafka's ``KafkaServer`` builds a
``ReplicaManager`` and a ``GroupCoordinator`` and hands them to ``KafkaApis``), and owns
none of their state:

* :class:`~.partitions.PartitionManager` owns the partitions: opening and recovery,
  writer lookup, idle closing, deletion, the topic config cache;
* the leadership, given at construction (default: :func:`~.leadership.leadership_for`
  the store): :class:`~.leadership.StandaloneLeadership` (this broker leads what it
  opens; its instance record tells whether its predecessor died) or, in cluster mode (a
  coordination store whose ``assigns_leaders`` is true),
  :class:`~.leadership.BrokerLeadership`, which opens and closes partitions as the
  controller assigns their leaders;
* :class:`~.group.GroupCoordinator` holds consumer-group membership;
* :class:`~.producer_ids.ProducerIdManager` hands out producer ids;
* the request handlers receive the collaborators they use: :class:`~.records_api.RecordApis`
  (Produce, Fetch, ListOffsets), :class:`~.topics_api.TopicApis` (Metadata, topics,
  DescribeLog), :class:`~.groups_api.GroupApis` (groups and offsets);
* :mod:`.server` and :mod:`.acceptor` carry connections (framing, ordering, limits,
  sendfile); each connection knows of the broker only its
  :class:`~.server.ConnectionContext` (limits, security, metrics, and
  :meth:`Broker.handle`, called for each request).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time

from ..coordination.base import BrokerInfo, CoordinationStore
from ..coordination.coordinators import coordinators_for
from ..coordination.local import LocalCoordinationStore
from ..errors import InvalidArgumentError, SparklogError, UnsupportedVersionError
from ..log.config import LogConfig
from ..metadata import TopicStore
from ..protocol.apis import SUPPORTED_VERSIONS, ApiKey, api_name
from ..protocol.codec import RequestHeader, decode_request_body, error_fields
from ..retention.cleaner import LogCleanerManager
from ..retention.manager import RetentionManager
from ..security.api import SecurityApis
from ..security.enforce import authorize
from ..security.listeners import WILDCARD_HOSTS, canonical_host_name
from ..storage import FileIO, open_fileio
from ..storage.paths import storage_root, url_scheme
from . import server
from .acceptor import Acceptor
from .config import BrokerConfig
from .context import RequestContext
from .group import GroupCoordinator
from .groups_api import GroupApis
from .leadership import check_leadership, leadership_for
from .partitions import PartitionManager
from .producer_ids import ProducerIdManager
from .records_api import RecordApis
from .refusals import RefusalLog
from .resources import ResourceLimits
from .retired import RetiredTopics
from .topics_api import TopicApis, deduplicate

log = logging.getLogger(__name__)

_NO_ERROR = {"error_code": 0, "error_message": ""}


def _kafka_apis():
    from .kafka.apis import KafkaApis

    return KafkaApis


class Broker:
    """A sparklog broker serving ``storage_uri`` (see the module docstring).

    ``config`` holds the broker properties (Kafka's names); ``store`` the coordination
    store (default: ZooKeeper when ``zookeeper.connect`` is set, else the storage's
    local store); ``fileio`` the storage (default: opened from ``storage_uri``);
    ``metrics`` turns the Prometheus metrics on; ``refusal_log_level`` is the logging
    level of refused partition writes (WARNING; an embedded broker, whose in-process
    client reports each refusal to its caller, uses DEBUG); ``authorizer`` replaces the
    ACL authorizer ``authorizer.class.name`` configures (see
    :class:`~sparklog.security.session.BrokerSecurity`); ``leadership`` who leads the
    partitions (default: :func:`~.leadership.leadership_for` the store; one given must
    fit the store: InvalidArgumentError otherwise).
    """

    def __init__(self, storage_uri: str, config: BrokerConfig | None = None, *,
                 store: CoordinationStore | None = None, fileio: FileIO | None = None,
                 metrics: bool = True, refusal_log_level: int = logging.WARNING,
                 authorizer=None, leadership=None):
        if not isinstance(storage_uri, str) or not storage_uri:
            raise InvalidArgumentError(
                f"storage URI must be a non-empty string, got {storage_uri!r}")
        self.storage_uri = storage_root(storage_uri)
        self.config = config or BrokerConfig()
        self.broker_id = self.config.broker_id
        # the address clients are told must be reachable, checked before anything is
        # opened: a wildcard in advertised.listeners is refused; a listener bound to a
        # wildcard is advertised by this host's canonical name, which must resolve
        # (InvalidConfigError naming the key and value, or advertised.listeners)
        self.config.advertised_host_port
        self._canonical_name = self._wildcard_advertised_name()
        self.fileio = fileio or open_fileio(self.storage_uri,
                                            **self._storage_options(probe=True))
        self._own_fileio = fileio is None  # helper processes can open the same one
        self.topics = TopicStore(self.storage_uri, self.fileio,
                                 dir_mode=self.config.topic_dir_mode,
                                 dir_owner=self.config.topic_dir_owner or None,
                                 dir_group=self.config.topic_dir_group or None)
        if store is None and self.config.zookeeper_connect:  # cluster mode
            from ..coordination.zkstore import ZkCoordinationStore

            zk_security = None
            if self.config.zookeeper_set_acl or self.config.zookeeper_digest_credentials:
                from ..security.zkacl import kazoo_security

                zk_security = kazoo_security(self.config.zookeeper_digest_credentials)
            store = ZkCoordinationStore(
                self.config.zookeeper_connect, topic_store=self.topics, security=zk_security,
                session_timeout_ms=self.config.zookeeper_session_timeout_ms,
                connection_timeout_ms=self.config.zookeeper_connection_timeout_ms or None,
                auto_leader_rebalance=self.config.auto_leader_rebalance_enable)
        self.store = store or LocalCoordinationStore(self.storage_uri, self.fileio)
        if leadership is None:
            leadership = leadership_for(self.store, self.fileio, self.storage_uri,
                                        self.broker_id)
        else:
            check_leadership(leadership, self.store, self.broker_id)
        #: who leads the partitions: this broker (standalone) or ZooKeeper's controller
        self.leadership = leadership
        from ..security.session import BrokerSecurity

        #: listeners, TLS, SASL, credentials and the authorizer (sparklog.security)
        self.security = BrokerSecurity(self.config.security, self.store,
                                       authorizer=authorizer)
        self.metrics = None
        if metrics:
            try:
                from .metrics import BrokerMetrics

                self.metrics = BrokerMetrics()
            except ImportError:  # prometheus-client is an optional extra
                log.warning("prometheus-client is not installed: broker metrics are off")
            else:  # before any partition opens a writer
                self.metrics.watch_storage(self.fileio)
        self.refusals = RefusalLog(self.metrics, level=refusal_log_level)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool = concurrent.futures.ThreadPoolExecutor(
            self.config.num_io_threads, thread_name_prefix="sparklog-io")
        #: the owner of the partitions this broker serves
        self.partitions = PartitionManager(self.config, self.fileio, self.topics, self.store,
                                           run_io=self.run_io, pool=self.pool,
                                           leadership=self.leadership, metrics=self.metrics)
        self.producer_ids = ProducerIdManager(
            self.store, self.partitions, block_size=self.config.producer_id_block_size,
            run_io=self.run_io, binding=self.security.producer_ids)
        self.groups: GroupCoordinator | None = None
        self.retention: RetentionManager | None = None
        #: compaction of the partitions led here (None when log.cleaner.enable=false)
        self.cleaner: LogCleanerManager | None = None
        if self.metrics is not None:
            self.metrics.watch_logs(lambda: list(self.partitions.writers.values()), self.store)
        #: what the connections need of the broker (limits, security, handler...)
        #: Kafka's APIs, for the listeners named in kafka.listener.names (imported only
        #: then: Kafka's generated codecs are many modules)
        self.kafka = _kafka_apis()(self.dispatch, broker_id=self.broker_id,
                               address=self.advertised_address,
                               binding=self.security.producer_ids) \
            if self.config.kafka_listener_names.strip() else None
        self.connection_context = server.ConnectionContext.of_config(
            self.config, handle=self.handle, security=self.security, run_io=self.run_io,
            metrics=self.metrics, kafka=self.kafka)
        #: the cluster id (read by :meth:`start`)
        self.cluster_id = ""
        self.host, self.port = self.config.listen_host_port
        self._server: Acceptor | None = None  # the first listener's
        self._servers: list[Acceptor] = []
        self._stopped = asyncio.Event()  # set once stop() ended
        #: api key -> ``handler(body, ctx)`` (the others are added by :meth:`start`)
        self.handlers: dict = {ApiKey.API_VERSIONS: self._api_versions}

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` began."""
        return self.connection_context.stopping

    @property
    def address(self) -> str:
        """``host:port`` the broker listens on (the real port after binding port 0)."""
        return f"{self.host}:{self.port}"

    def _storage_options(self, probe: bool = False) -> dict:
        """The FileIO options the broker's settings give its storage's backend;
        ``probe``: with the NameNode probe (the broker's own storage, not its helper
        processes': one probe per broker)."""
        scheme = url_scheme(self.storage_uri)
        if scheme in ("", "file"):
            return {"sync_behind_writes": self.config.sync_behind_writes_bytes}
        if scheme == "hdfs":
            from ..storage.kerberos import kerberos_options

            options = kerberos_options(self.config.storage_kerberos_principal,
                                       self.config.storage_kerberos_keytab,
                                       self.config.storage_kerberos_renew_period_ms)
            if probe:
                options["namenode_probe_interval"] = \
                    self.config.storage_namenode_probe_interval_ms / 1000.0
            return options
        return {}

    async def run_io(self, fn, *args):
        """Run a blocking storage call on the broker's I/O threads."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def start(self) -> str:
        """Recover every partition, start listening, register; return the address."""
        self.loop = asyncio.get_running_loop()
        self.groups = GroupCoordinator(
            self.loop, self.partitions.partition_counts,
            min_session_ms=self.config.group_min_session_timeout_ms,
            max_session_ms=self.config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
            coordinators=coordinators_for(
                self.store, self.broker_id,
                rebalance=self.config.auto_leader_rebalance_enable).start())
        started = time.monotonic()
        # read once: Metadata and ApiVersions answers name it without an I/O thread
        self.cluster_id = await self.run_io(self.store.cluster_id)
        # cluster mode: partitions open when the controller makes this broker their leader
        names = [] if self.leadership.cluster else await self.run_io(self.topics.list_topics)
        fence_all = await self.run_io(self.leadership.claim)
        self.partitions.start(self.loop, fence_all=fence_all)
        if self.config.log_cleaner_enable:
            self.cleaner = LogCleanerManager.for_broker(
                lambda: list(self.partitions.writers.values()), self.config,
                storage=(self.storage_uri, self._storage_options())
                if self._own_fileio else None)
        self.handlers = self._make_handlers()
        served = []
        for name in names:
            try:
                tc = await self.partitions.topic_config(name)
                self.partitions.check_served(tc)
            except SparklogError as exc:
                log.error("topic %s: not served: %s", name, exc)
                continue
            served.append(tc)
        opened = await self.partitions.recover_existing(served)
        for lst in self.security.listeners:
            try:
                self._servers.append(self._listen(lst))
            except BaseException:
                for acceptor in self._servers:
                    acceptor.close()
                raise
        self._server = self._servers[0]
        self.host, self.port = self._server.address
        for acceptor in self._servers:
            acceptor.start()
        self.security.warn_unauthenticated()
        self.security.warn_plain_in_clear()
        await self.run_io(self.security.warn_readable_storage, self.topics)
        self.leadership.start(self.partitions)
        self.retention = RetentionManager(lambda: self.partitions.writers.values(),
                                          self.run_io, self.config.retention_check_interval_ms)
        self.retention.start()
        # deleted topics' data: removed file.delete.delay.ms after their deletion, and
        # what a stopped or crashed broker left is removed now that it is due
        self.partitions.retired = RetiredTopics(
            self.topics, self.run_io,
            delay_ms=LogConfig.from_props(self.config.log_defaults,
                                          ignore_unknown=True).file_delete_delay_ms,
            interval_ms=self.config.retention_check_interval_ms)
        self.partitions.retired.start()
        if self.cleaner is not None:
            if self.metrics is not None:
                self.metrics.registry.register(self.cleaner)
            self.cleaner.start()
        advertised = self.advertised_address()
        endpoints = tuple((lst.name, *self._advertised(lst)) for lst in self.security.listeners)
        await self.run_io(self.store.register_broker,
                          BrokerInfo(self.broker_id, *advertised, endpoints))
        if self.metrics is not None and self.config.metrics_port >= 0:
            port = self.metrics.serve(self.config.metrics_port, self.host)
            log.info("metrics on http://%s:%d/metrics", self.host, port)
        log.info("broker %d listening on %s, advertised as %s:%d (storage %s): %d "
                 "partition(s) of %d topic(s) recovered in %.2fs", self.broker_id,
                 self.address, *advertised, self.storage_uri, opened, len(names),
                 time.monotonic() - started)
        return self.address

    def _listen(self, listener) -> Acceptor:
        """Bind one listener (its TLS context, its own connection count)."""
        holder: list[Acceptor] = []
        acceptor = Acceptor(
            asyncio.get_running_loop(), server.protocol_factory(self.connection_context,
                                               lambda r: holder[0].on_closed(r.peer_ip),
                                               listener),
            listener.host, listener.port, max_connections=self._limits().max_connections,
            max_connections_per_ip=self.config.max_connections_per_ip,
            ssl=self.security.ssl_context(listener),
            ssl_handshake_timeout=self.security.authentication_timeout(listener),
            per_ip_overrides=self.security.config.per_ip_overrides())
        holder.append(acceptor)
        return acceptor

    def _limits(self) -> ResourceLimits:
        """The resource limits :meth:`PartitionManager.recover_existing` planned."""
        limits = self.partitions.limits
        if limits is None:
            raise RuntimeError("resource limits are planned as the broker starts")
        return limits

    def advertised_address(self, session=None) -> tuple[str, int]:
        """(host, port) clients of ``session``'s listener (default: the first listener,
        the registration's ``host``/``port``) are told to use: the listener's
        ``advertised.listeners`` entry (port 0: the bound port), else its bound address.
        Every listener's is registered too (``endpoints``), so in cluster mode
        Metadata names each broker by its address on the client's listener."""
        listener = session.listener if session is not None else None
        if listener is None and self.security.listeners:
            listener = self.security.listeners[0]
        return self._advertised(listener)

    def _advertised(self, listener) -> tuple[str, int]:
        if listener is None or listener not in self.security.listeners or not self._servers:
            return self.host, self.port
        bound = tuple(self._servers[self.security.listeners.index(listener)].address[:2])
        if listener.advertised_host:
            return listener.advertised_host, listener.advertised_port or bound[1]
        if listener.host in WILDCARD_HOSTS and self._canonical_name:
            return self._canonical_name, bound[1]
        return bound

    def _wildcard_advertised_name(self) -> str | None:
        """This host's canonical name when a listener bound to a wildcard address has no
        ``advertised.listeners`` entry (Kafka advertises that name), else None."""
        listeners = self.config.security.listeners
        if not any(lst.host in WILDCARD_HOSTS and not lst.advertised_host
                   for lst in listeners):
            return None
        name = canonical_host_name(self.config.listeners)
        log.info("listeners=%s binds every interface: advertising this host's canonical "
                 "name %s (set advertised.listeners to advertise another)",
                 self.config.listeners, name)
        return name

    @property
    def listener_addresses(self) -> dict[str, str]:
        """Listener name -> ``host:port`` it is bound to (the real port after binding
        port 0), once started."""
        return {lst.name: "%s:%d" % acc.address[:2]
                for lst, acc in zip(self.security.listeners, self._servers)}

    def _make_handlers(self) -> dict:
        """Every API's handler, each bound to the collaborators it uses."""
        assert self.groups is not None, "the group coordinator is made by start()"
        records = RecordApis(self.partitions, self.config, run_io=self.run_io,
                             refusals=self.refusals, metrics=self.metrics,
                             producer_ids=self.producer_ids)
        topics = TopicApis(self.partitions, self.store, self.config, run_io=self.run_io,
                           leadership=self.leadership, listener=self.advertised_address,
                           storage_uri=self.storage_uri, cleaner=self.cleaner,
                           cluster_id=self.cluster_id)
        groups = GroupApis(self.groups, self.store, self.partitions, run_io=self.run_io,
                           cluster=self.leadership.cluster,
                           listener=self.advertised_address)
        return {ApiKey.API_VERSIONS: self._api_versions, **records.handlers(),
                **self.producer_ids.handlers(), **topics.handlers(), **groups.handlers(),
                **SecurityApis(self.security, self.run_io).handlers()}

    async def stop(self) -> None:
        """Graceful shutdown (see the module docstring). Idempotent."""
        if self.stopping:
            await self._stopped.wait()
            return
        self.connection_context.begin_stop()
        self.partitions.closing = True
        try:
            if self.retention is not None:
                await self.retention.stop()
            if self.partitions.retired is not None:
                await self.partitions.retired.stop()
            if self.cleaner is not None:
                await self.run_io(self.cleaner.stop)
            if self.config.controlled_shutdown_enable:
                # move every leadership to another broker before closing anything
                await self.run_io(self.leadership.controlled_shutdown,
                                  self.config.shutdown_timeout_ms / 1000)
            for acceptor in self._servers:
                acceptor.close()
            timeout = self.config.shutdown_timeout_ms / 1000
            conns = self.connection_context.stop_reading()
            if self.groups is not None:
                self.groups.close()  # pending joins answer now
            self.partitions.wake_fetchers()  # long polls answer now with what they have
            if conns:
                await asyncio.wait([c.task for c in conns if c.task is not None],
                                   timeout=timeout)
            await self.leadership.stop(timeout)
            closed = await self.partitions.close_all()
            await self.run_io(self.store.unregister_broker, self.broker_id)
            await self.run_io(self.leadership.release)
            if self.leadership.cluster:
                await self.run_io(self.store.close)
            if self.metrics is not None:
                self.metrics.close()
            if self._own_fileio:  # its client resources (hdfs://: the NameNode probe)
                await self.run_io(self.fileio.close)
            log.info("broker %d stopped: %d partition(s) synced and closed", self.broker_id,
                     closed)
        finally:
            self.pool.shutdown(wait=True)
            self._stopped.set()

    # --- dispatch -------------------------------------------------------------------------------
    async def handle(self, header: RequestHeader, payload, position: int,
                     ctx: RequestContext) -> dict | None:
        """Decode and answer one request; None when no response is due (acks=0)."""
        started = time.perf_counter()
        name = api_name(header.api_key)
        try:
            body = decode_request_body(header, payload, position)
            response = await self.dispatch(header.api_key, body, ctx)
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

    async def dispatch(self, api_key: int, body: dict, ctx: RequestContext) -> dict | None:
        """The answer of the handler of ``api_key`` to a decoded request ``body``, through
        the authorizer (the Kafka listener's translated requests come here too);
        SparklogError when refused whole."""
        deduplicate(api_key, body)
        handler = self.handlers[api_key]
        if self.security.authorizer is None:
            return await handler(body, ctx)
        return await authorize(api_key, handler, body, ctx, self.security.authorizer)

    def _versions_body(self) -> dict:
        return {"api_versions": [[k, lo, hi] for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())],
                "broker_id": self.broker_id}

    async def _api_versions(self, body, ctx) -> dict:
        return {**_NO_ERROR, **self._versions_body(),
                "cluster_id": self.cluster_id or await self.run_io(self.store.cluster_id)}
