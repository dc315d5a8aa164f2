"""The network client shared by the producer, the consumer and the admin client:
bootstrap handling, one connection per broker, metadata refresh and request routing.

``bootstrap_servers`` is Kafka's: ``"host:port"``, ``"h1:p1,h2:p2"`` or a list of such
strings (or ``(host, port)`` tuples). The first reachable bootstrap address answers the
first Metadata request; afterwards requests go to brokers by node id, as the metadata
names them. A connection that broke is reopened on its next use.

Two kinds of connections are kept (:mod:`sparklog.clients.network.connection`): threaded ones,
whose own reader thread completes the futures (metadata, offsets, groups, anything a
thread may wait for), and, for a request sent with ``polled=True``, polled ones, read
only when their owner calls :meth:`NetworkClient.poll` (the consumer's fetches, read in
its polling thread). A broker gets one connection of each kind that is used, as Kafka's
consumer keeps a connection for its group coordinator beside the one it fetches on.

An address that refused a connection is not tried again before its reconnect backoff
has passed (Kafka's ``reconnect.backoff.ms``, doubling per failure up to
``reconnect.backoff.max.ms``, with +-20% jitter; reset by a successful connection):
meanwhile a request to it fails at once with the retriable BrokerNotAvailableError,
which the clients retry (a restarting broker is waited for, not hammered).
"""

from __future__ import annotations

import logging
import random
import threading
import time

from ...errors import (
    BrokerNotAvailableError,
    InvalidArgumentError,
    SparklogError,
    UnsupportedVersionError,
)
from ...names import validate_client_id
from ...protocol.apis import SUPPORTED_VERSIONS, ApiKey, api_name
from ...protocol.codec import raise_for_error
from ...protocol.connection import parse_address
from .connection import BrokerConnection, wait_readable
from .metadata import ClusterMetadata, TopicInfo

log = logging.getLogger(__name__)


def parse_bootstrap_servers(servers) -> list[tuple[str, int]]:
    """``[(host, port), ...]`` from Kafka's bootstrap.servers forms; raises
    InvalidArgumentError naming the bad entry."""
    if servers is None:
        raise InvalidArgumentError("bootstrap_servers is required (\"host:port\")")
    items: list
    if isinstance(servers, str):
        items = [s for s in (p.strip() for p in servers.split(",")) if s]
    elif isinstance(servers, tuple) and len(servers) == 2 and isinstance(servers[1], int):
        items = [servers]
    else:
        try:
            items = list(servers)
        except TypeError:
            raise InvalidArgumentError(
                f"bootstrap_servers must be \"host:port[,host:port]\" or a list, "
                f"got {type(servers).__name__}") from None
    out = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:
            host, port = item
            if not isinstance(port, int) or not 0 < port < 65536:
                raise InvalidArgumentError(f"bootstrap server {item!r}: bad port")
        elif isinstance(item, str):
            text = item.strip()
            host, port = parse_address(text.split("://", 1)[-1])  # PLAINTEXT://host:port
        else:
            raise InvalidArgumentError(f"bootstrap server {item!r} is not host:port")
        out.append((host, port))
    if not out:
        raise InvalidArgumentError("bootstrap_servers is empty")
    return out


class NetworkClient:
    """Connections to the cluster's brokers plus the metadata cache (see module doc)."""

    def __init__(self, bootstrap_servers, *, client_id: str = "sparklog",
                 request_timeout_ms: int = 30000, max_in_flight: int = 5,
                 retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300000,
                 connect_timeout_ms: int = 10000, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000, security=None):
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        #: TLS and SASL of every connection (sparklog.security.client.ClientSecurity)
        self.security = security
        self.client_id = validate_client_id(client_id)
        self.request_timeout_ms = int(request_timeout_ms)
        self.max_in_flight = int(max_in_flight)
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.metadata_max_age = metadata_max_age_ms / 1000.0
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect_backoff = reconnect_backoff_ms / 1000.0
        self.reconnect_backoff_max = max(reconnect_backoff_ms, reconnect_backoff_max_ms) / 1000.0
        # address -> (failures in a row, next attempt at, last error)
        self._refused: dict[tuple[str, int], tuple[int, float, str]] = {}
        self.metadata = ClusterMetadata()
        self._lock = threading.RLock()
        self._by_address: dict[tuple[str, int], BrokerConnection] = {}
        self._polled: dict[tuple[str, int], BrokerConnection] = {}  # polled connections
        self._refresh_lock = threading.Lock()
        self._closed = False

    # --- connections ----------------------------------------------------------------
    def _connect(self, host: str, port: int, node_id: int = -1, *,
                 polled: bool = False) -> BrokerConnection:
        pool = self._polled if polled else self._by_address
        with self._lock:
            if self._closed:
                raise BrokerNotAvailableError("the client is closed")
            conn = pool.get((host, port))
            if conn is not None and conn.connected:
                if node_id >= 0:
                    conn.node_id = node_id
                return conn
            failures, retry_at, error = self._refused.get((host, port), (0, 0.0, ""))
        wait = retry_at - time.monotonic()
        if wait > 0:
            raise BrokerNotAvailableError(
                f"{error} (reconnect backoff: next attempt in {wait * 1000:.0f} ms)")
        try:
            conn = BrokerConnection(host, port, node_id=node_id, client_id=self.client_id,
                                    max_in_flight=self.max_in_flight,
                                    request_timeout_ms=self.request_timeout_ms,
                                    connect_timeout_ms=self.connect_timeout_ms,
                                    security=self.security, polled=polled)
        except BrokerNotAvailableError as exc:
            backoff = min(self.reconnect_backoff_max, self.reconnect_backoff * 2 ** failures)
            with self._lock:
                self._refused[(host, port)] = (
                    failures + 1, time.monotonic() + backoff * random.uniform(0.8, 1.2),
                    str(exc))
            raise
        with self._lock:
            self._refused.pop((host, port), None)
        try:
            self._check_versions(conn)
        except SparklogError:
            conn.close()
            raise
        with self._lock:
            old = pool.get((host, port))
            if old is not None and old.connected:  # another thread won the race
                conn.close()
                return old
            if self._closed:  # closed meanwhile: close() did not see this one
                conn.close()
                raise BrokerNotAvailableError("the client is closed")
            pool[(host, port)] = conn
        return conn

    def _check_versions(self, conn: BrokerConnection) -> None:
        body = conn.request(ApiKey.API_VERSIONS, {})
        raise_for_error(body, f"ApiVersions from {conn.address}")
        theirs = {k: (lo, hi) for k, lo, hi in body["api_versions"]}
        if conn.node_id < 0 and body.get("broker_id", -1) >= 0:
            conn.node_id = body["broker_id"]
        for key, (lo, hi) in SUPPORTED_VERSIONS.items():
            if key in theirs and (theirs[key][1] < lo or theirs[key][0] > hi):
                raise UnsupportedVersionError(
                    f"broker {conn.address} speaks {api_name(key)} versions "
                    f"{theirs[key][0]}-{theirs[key][1]}, this client {lo}-{hi}")
        conn.api_versions = theirs

    def connection(self, node_id: int, *, polled: bool = False) -> BrokerConnection:
        """The (re)opened connection to broker ``node_id`` (known from the metadata);
        ``polled``: its polled connection (see the module docstring)."""
        broker = self.metadata.broker(node_id)
        if broker is None:
            self.refresh_metadata()
            broker = self.metadata.broker(node_id)
            if broker is None:
                raise BrokerNotAvailableError(f"broker {node_id} is not in the cluster metadata")
        return self._connect(broker.host, broker.port, node_id, polled=polled)

    def any_connection(self) -> BrokerConnection:
        """A connection to some live broker: the open one with the fewest requests in
        flight (Kafka's least loaded node, so that a broker that stopped answering, its
        requests waiting for their timeout, is not asked again while another is idle),
        else a known broker, else a bootstrap address. Raises BrokerNotAvailableError
        naming every address tried."""
        with self._lock:
            open_ = [c for c in self._by_address.values() if c.connected]
            if open_:
                return min(open_, key=lambda c: c.in_flight)
        addresses = [(b.host, b.port, b.node_id) for b in self.metadata.brokers.values()]
        addresses += [(h, p, -1) for h, p in self.bootstrap]
        errors = []
        for host, port, node_id in addresses:
            try:
                return self._connect(host, port, node_id)
            except BrokerNotAvailableError as exc:
                errors.append(str(exc))
        raise BrokerNotAvailableError(
            "no broker reachable: " + "; ".join(dict.fromkeys(errors)))

    # --- requests -------------------------------------------------------------------
    def send(self, node_id: int, api_key: int, body: dict, *, polled: bool = False,
             **kwargs):
        """Send a request to broker ``node_id`` (-1: any broker); return its future.
        ``polled``: on the broker's polled connection, whose response is read (and the
        future completed) by a later :meth:`poll` in the caller's thread."""
        if polled and node_id >= 0:
            conn = self.connection(node_id, polled=True)
        else:
            conn = self.any_connection() if node_id < 0 else self.connection(node_id)
        return conn.send(api_key, body, **kwargs)

    def poll(self, timeout: float, wakeup=None) -> bool:
        """Read the responses of the polled connections, waiting up to ``timeout``
        seconds for the first; their futures complete (callbacks run) in this thread,
        and a request past its deadline fails its connection. ``wakeup`` (a
        :class:`~sparklog.clients.network.wakeup.Wakeup`) ends the wait early when set by
        another thread. Without ``wakeup``, returns False at once when no polled
        request is waiting (nothing to read); else True."""
        with self._lock:
            conns = [c for c in self._polled.values() if c.connected and c.in_flight]
        if not conns and wakeup is None:
            return False
        if len(conns) == 1 and wakeup is None:
            conns[0].poll(timeout)
            return True
        if not any(c.ready() for c in conns):
            wait = min([timeout] + [c.next_deadline - time.monotonic() for c in conns])
            if wait > 0:
                wait_readable(conns if wakeup is None else conns + [wakeup], wait)
        for conn in conns:
            conn.read_ready()
        return True

    def request(self, api_key: int, body: dict, *, node_id: int = -1,
                timeout: float | None = None, retries: int = 2) -> dict:
        """Send and wait for a response body; request-level errors are raised.
        Retriable failures (a broken connection) are retried ``retries`` times."""
        attempt = 0
        while True:
            try:
                resp = self.send(node_id, api_key, body).get(
                    timeout if timeout is not None else self.request_timeout_ms / 1000 + 1)
                raise_for_error(resp, api_name(api_key))
                return resp
            except SparklogError as exc:
                if not exc.retriable or attempt >= retries or self._closed:
                    raise
                attempt += 1
                time.sleep(self.retry_backoff)

    # --- metadata -------------------------------------------------------------------
    def refresh_metadata(self, topics=None, *, auto_create: bool = False) -> ClusterMetadata:
        """Fetch metadata (of ``topics``, or of every topic) and update the cache."""
        body = {"topics": list(topics) if topics is not None else None,
                "allow_auto_topic_creation": auto_create}
        with self._refresh_lock:
            resp = self.request(ApiKey.METADATA, body)
            self.metadata.update(resp, topics)
            self._adopt_node_ids()
        return self.metadata

    def _adopt_node_ids(self) -> None:
        with self._lock:
            for broker in self.metadata.brokers.values():
                for pool in (self._by_address, self._polled):
                    conn = pool.get((broker.host, broker.port))
                    if conn is not None:
                        conn.node_id = broker.node_id

    def topic_info(self, topic: str, *, refresh: bool = False,
                   auto_create: bool = False) -> TopicInfo:
        """Metadata of one topic, refreshing the cache when missing, stale or asked to.
        Raises UnknownTopicOrPartitionError (or the broker's error) for a bad topic."""
        info = self.metadata.topic(topic)
        stale = time.monotonic() - self.metadata.last_refresh > self.metadata_max_age
        if info is None or refresh or stale:
            self.refresh_metadata([topic], auto_create=auto_create)
            info = self.metadata.topic(topic)
            if info is None:
                raise self.metadata.missing(topic)
        return info

    def connection_count(self) -> int:
        """Open connections to brokers (plain and polled); one the broker closed while
        idle is found closed here (:meth:`BrokerConnection.check_alive`)."""
        with self._lock:
            conns = [c for pool in (self._by_address, self._polled) for c in pool.values()]
        return sum(c.check_alive() for c in conns)

    def bootstrap_connected(self) -> bool:
        """True while a connection to a broker is open (the client reached the
        cluster: kafka-python's ``bootstrap_connected()``)."""
        return not self._closed and self.connection_count() > 0

    def close(self) -> None:
        """Close every connection (waiting requests fail)."""
        with self._lock:
            self._closed = True
            conns = list(self._by_address.values()) + list(self._polled.values())
            self._by_address.clear()
            self._polled.clear()
        for conn in conns:
            conn.close()
