"""Broker settings under Kafka's property names (``server.properties`` style).

``BrokerConfig.from_props(props)`` parses a mapping of Kafka names (string values, as
read from a properties file, or typed values); :func:`load_properties` reads a Java
``.properties`` file. Broker-wide ``log.*`` settings are the defaults of every topic's
log settings (a topic's own configs override them), as in Kafka:

==============================  ===========================  =================
broker property                 topic config it defaults     default
==============================  ===========================  =================
log.segment.bytes               segment.bytes                256 MiB
log.roll.ms (.hours)            segment.ms                   7 days
log.roll.jitter.ms (.hours)     segment.jitter.ms            0
log.retention.ms (.minutes,     retention.ms                 7 days
  .hours)
log.retention.bytes             retention.bytes              -1
log.index.interval.bytes        index.interval.bytes         4096
message.max.bytes               max.message.bytes            16 MiB
log.flush.interval.messages     flush.messages               -1 (sync only for acks=all)
log.flush.interval.ms           flush.ms                     -1
log.cleanup.policy              cleanup.policy               delete
log.message.timestamp.type      message.timestamp.type       CreateTime
compression.type                compression.type             producer
==============================  ===========================  =================

Kafka's unit variants are honoured with Kafka's precedence: ``log.retention.ms`` over
``log.retention.minutes`` over ``log.retention.hours``, ``log.roll.ms`` over
``log.roll.hours``, ``log.roll.jitter.ms`` over ``log.roll.jitter.hours`` (the first one
set wins; a negative retention means -1, no limit, as in Kafka). Topics have only the
``.ms`` forms, as in Kafka. The compaction settings' broker forms are
``log.cleaner.delete.retention.ms``, ``log.cleaner.min.compaction.lag.ms``,
``log.cleaner.max.compaction.lag.ms``, ``log.cleaner.min.cleanable.ratio`` and
``log.segment.delete.delay.ms``.

Broker-only settings include ``log.retention.check.interval.ms`` (default 300000: how
often retention runs, :mod:`sparklog.retention.manager`), Kafka's ``log.cleaner.enable``,
``log.cleaner.threads``, ``log.cleaner.io.max.bytes.per.second``,
``log.cleaner.dedupe.buffer.size`` and ``log.cleaner.backoff.ms`` (compaction,
:mod:`sparklog.retention.cleaner`), sparklog's ``log.cleaner.process.enable`` (default
true: cleanings run in helper processes, :mod:`sparklog.retention.cleaner_process`)
and, for local storage,
``storage.sync.behind.writes.bytes`` (default 8 MiB, 0 = off: writeback is started
behind each segment's writer, see :class:`~sparklog.storage.local.LocalFileIO`). On a
Kerberized HDFS, ``storage.kerberos.principal`` and ``storage.kerberos.keytab`` are the
broker's identity (logged in from the keytab, the ticket checked every
``storage.kerberos.ticket.renew.period.ms``, default 60000, and renewed before it
expires: :mod:`sparklog.storage.kerberos`). On ``hdfs://`` storage,
``storage.namenode.probe.interval.ms`` (default 1000; 0 = off) is how often the broker
calls each NameNode to find a lost NameNode host's dead connection and the new active
NameNode while a failover happens, not on its next write after it
(:mod:`sparklog.storage.nnprobe`).

Resource limits (``max.connections``, ``max.connections.per.ip``,
``connections.max.idle.ms``, ``request.read.timeout.ms``, ``max.topic.partitions``,
``max.broker.partitions``, ``max.open.partitions``, ``queued.max.request.bytes``...) and
what happens at each are listed in docs/operations.md ("Limits").

Unknown keys are logged and ignored (Kafka does the same), so an existing Kafka
``server.properties`` can be reused; invalid values raise InvalidConfigError naming the
key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..errors import InvalidConfigError
from ..log.config import LOG_CONFIGS, parse_log_config_value
from ..security.listeners import WILDCARD_HOSTS
from ..storage.local import DEFAULT_SYNC_BEHIND_WRITES

log = logging.getLogger(__name__)

#: Kafka's "no limit" for int settings (Integer.MAX_VALUE)
MAX_INT = 2147483647


#: broker property -> topic/log config key it supplies the default of
LOG_DEFAULT_KEYS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.message.timestamp.type": "message.timestamp.type",
    "compression.type": "compression.type",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
}

_HOUR_MS = 3_600_000

#: topic config key -> the broker properties that default it, in Kafka's precedence (the
#: first one set wins), each with the milliseconds of its unit
LOG_DEFAULT_UNITS = {
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                     ("log.retention.hours", _HOUR_MS)),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR_MS)),
}
_UNIT_KEYS = {key: (topic_key, unit_ms) for topic_key, variants in LOG_DEFAULT_UNITS.items()
              for key, unit_ms in variants}

#: broker-only property -> (attribute, type, default, minimum)
BROKER_SETTINGS = {
    "broker.id": ("broker_id", int, 0, 0),
    "listeners": ("listeners", str, "127.0.0.1:9092", None),
    "advertised.listeners": ("advertised_listeners", str, "", None),
    # listeners (by name) that speak Apache Kafka's wire protocol (docs/kafka-protocol.md)
    "kafka.listener.names": ("kafka_listener_names", str, "", None),
    "num.partitions": ("num_partitions", int, 1, 1),
    "auto.create.topics.enable": ("auto_create_topics_enable", bool, True, None),
    "delete.topic.enable": ("delete_topic_enable", bool, True, None),
    "socket.request.max.bytes": ("socket_request_max_bytes", int, 100 * 1024 * 1024, 64),
    "queued.max.requests": ("queued_max_requests", int, 500, 1),
    "queued.max.request.bytes": ("queued_max_request_bytes", int, 512 * 1024 * 1024, 1024),
    "fetch.max.bytes": ("fetch_max_bytes", int, 55 * 1024 * 1024, 1024),
    # resource limits (docs/operations.md, "Limits")
    "max.connections": ("max_connections", int, MAX_INT, 1),
    "max.connections.per.ip": ("max_connections_per_ip", int, MAX_INT, 1),
    "connections.max.idle.ms": ("connections_max_idle_ms", int, 600000, 1),
    "request.read.timeout.ms": ("request_read_timeout_ms", int, 30000, 1),
    "max.topic.partitions": ("max_topic_partitions", int, 10000, 1),
    "max.broker.partitions": ("max_broker_partitions", int, 50000, 1),
    "max.open.partitions": ("max_open_partitions", int, 0, 0),
    "num.io.threads": ("num_io_threads", int, 8, 1),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", int, 100, 1),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", int, 1800000, 1),
    # how long the first rebalance of an empty group waits for more members (Kafka's)
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", int, 3000, 0),
    "producer.id.block.size": ("producer_id_block_size", int, 1000, 1),
    "producer.state.snapshot.interval.ms": ("producer_snapshot_interval_ms", int, 60000, 0),
    "controlled.shutdown.timeout.ms": ("shutdown_timeout_ms", int, 30000, 0),
    "metrics.port": ("metrics_port", int, -1, -1),
    "log.retention.check.interval.ms": ("retention_check_interval_ms", int, 300000, 1),
    # the log cleaner (compaction, sparklog.retention.cleaner)
    "log.cleaner.enable": ("log_cleaner_enable", bool, True, None),
    "log.cleaner.threads": ("log_cleaner_threads", int, 1, 1),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", float,
                                            float("inf"), 1.0),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", int, 128 << 20, 1024),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", int, 15000, 1),
    "log.cleaner.process.enable": ("log_cleaner_process_enable", bool, True, None),
    # local storage only (HDFS DataNodes have dfs.datanode.sync.behind.writes)
    "storage.sync.behind.writes.bytes": ("sync_behind_writes_bytes", int,
                                         DEFAULT_SYNC_BEHIND_WRITES, 0),
    # a Kerberized HDFS (hdfs:// storage): the broker's principal, its keytab, and how
    # often the ticket is checked and renewed from the keytab (sparklog.storage.kerberos)
    "storage.kerberos.principal": ("storage_kerberos_principal", str, "", None),
    "storage.kerberos.keytab": ("storage_kerberos_keytab", str, "", None),
    "storage.kerberos.ticket.renew.period.ms": ("storage_kerberos_renew_period_ms", int,
                                                60000, 1),
    # storage that overlaps syncs (HDFS's hsync): most syncs of one partition in flight at
    # once, the second and later ones for at least 64 KiB (sparklog.server.
    # partition); 1 elsewhere whatever this says
    "storage.syncs.in.flight": ("storage_syncs_in_flight", int, 2, 1),
    # hdfs:// storage: how often the broker calls each NameNode (0 = never), so that its
    # HDFS client follows a NameNode failover while it happens (sparklog.storage.nnprobe)
    "storage.namenode.probe.interval.ms": ("storage_namenode_probe_interval_ms", int,
                                           1000, 0),
    # topic directories made with this mode (octal), owner and group (empty: as the
    # storage makes them): HDFS permissions govern the Spark source's broker-less reads
    "storage.topic.dir.permission": ("topic_dir_permission", str, "", None),
    "storage.topic.dir.owner": ("topic_dir_owner", str, "", None),
    "storage.topic.dir.group": ("topic_dir_group", str, "", None),
    # cluster mode (sparklog.coordination.zkstore); empty zookeeper.connect = embedded
    "zookeeper.connect": ("zookeeper_connect", str, "", None),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", int, 6000, 1),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", int, 0, 0),
    # zookeeper.set.acl: nodes writable by the brokers' digest identity only
    # (sparklog.security.zkacl); the credentials are user:password
    "zookeeper.set.acl": ("zookeeper_set_acl", bool, False, None),
    "zookeeper.digest.credentials": ("zookeeper_digest_credentials", str, "", None),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", bool, True, None),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", bool, True, None),
}


def _parse_bool(key: str, value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidConfigError(f"broker config {key}={value!r} is not a boolean (true/false)")


def _parse_setting(key: str, value):
    _, kind, _, minimum = BROKER_SETTINGS[key]
    if kind is bool:
        return _parse_bool(key, value)
    if kind is int:
        if isinstance(value, bool):
            raise InvalidConfigError(f"broker config {key}={value!r} is not an integer")
        try:
            parsed = int(value.strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"broker config {key}={value!r} is not an integer") from None
        if minimum is not None and parsed < minimum:
            raise InvalidConfigError(f"broker config {key}={parsed} must be >= {minimum}")
        return parsed
    if kind is float:
        if isinstance(value, bool):
            raise InvalidConfigError(f"broker config {key}={value!r} is not a number")
        try:
            number = float(value.strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"broker config {key}={value!r} is not a number") from None
        if minimum is not None and not number >= minimum:
            raise InvalidConfigError(f"broker config {key}={number} must be >= {minimum}")
        return number
    return str(value).strip()


def _unit_default(topic_key: str, given: dict):
    """The default of ``topic_key`` from the first of its broker properties (Kafka's
    precedence, :data:`LOG_DEFAULT_UNITS`) in ``given``, in milliseconds."""
    for key, unit_ms in LOG_DEFAULT_UNITS[topic_key]:
        if key not in given:
            continue
        value = given[key]
        if isinstance(value, bool):
            raise InvalidConfigError(f"broker config {key}={value!r} is not an integer")
        try:
            count = int(value.strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"broker config {key}={value!r} is not an integer") from None
        ms = count * unit_ms
        if topic_key == "retention.ms" and ms < 0:
            ms = -1  # Kafka: any negative retention is no limit
        try:
            return parse_log_config_value(topic_key, ms)
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"broker config {key}={value}: {exc}") from None
    return None


@dataclass(frozen=True)
class BrokerConfig:
    """Parsed broker settings; ``log_defaults`` maps topic config keys to the broker's
    defaults for them (only the keys the properties set)."""

    broker_id: int = 0
    listeners: str = "127.0.0.1:9092"
    advertised_listeners: str = ""
    kafka_listener_names: str = ""
    num_partitions: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    socket_request_max_bytes: int = 100 * 1024 * 1024
    queued_max_requests: int = 500
    queued_max_request_bytes: int = 512 * 1024 * 1024
    fetch_max_bytes: int = 55 * 1024 * 1024
    max_connections: int = MAX_INT
    max_connections_per_ip: int = MAX_INT
    connections_max_idle_ms: int = 600000
    request_read_timeout_ms: int = 30000
    max_topic_partitions: int = 10000
    max_broker_partitions: int = 50000
    max_open_partitions: int = 0
    num_io_threads: int = 8
    group_min_session_timeout_ms: int = 100
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    producer_id_block_size: int = 1000
    producer_snapshot_interval_ms: int = 60000
    shutdown_timeout_ms: int = 30000
    metrics_port: int = -1
    retention_check_interval_ms: int = 300000
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = float("inf")
    log_cleaner_dedupe_buffer_size: int = 128 << 20
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_process_enable: bool = True
    sync_behind_writes_bytes: int = DEFAULT_SYNC_BEHIND_WRITES
    storage_kerberos_principal: str = ""
    storage_kerberos_keytab: str = ""
    storage_kerberos_renew_period_ms: int = 60000
    storage_namenode_probe_interval_ms: int = 1000
    storage_syncs_in_flight: int = 2
    topic_dir_permission: str = ""
    topic_dir_owner: str = ""
    topic_dir_group: str = ""
    zookeeper_connect: str = ""
    zookeeper_session_timeout_ms: int = 6000
    zookeeper_connection_timeout_ms: int = 0
    zookeeper_set_acl: bool = False
    zookeeper_digest_credentials: str = field(default="", repr=False)  # a password
    controlled_shutdown_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    log_defaults: dict = field(default_factory=dict)
    #: the security properties as given (``ssl.*``, ``sasl.*``, ``listener.*`` ...),
    #: parsed by :class:`sparklog.security.config.SecurityConfig`
    security_props: dict = field(default_factory=dict, repr=False)  # key passwords

    @classmethod
    def from_props(cls, props=None) -> "BrokerConfig":
        """Build from Kafka property names (see the module docstring)."""
        from ..security.config import is_security_key

        kwargs, defaults, security, units = {}, {}, {}, {}
        for key, value in (props or {}).items():
            key = str(key).strip()
            if is_security_key(key):
                security[key] = value
            elif key in _UNIT_KEYS:
                units[key] = value
            elif key in BROKER_SETTINGS:
                kwargs[BROKER_SETTINGS[key][0]] = _parse_setting(key, value)
            elif key in LOG_DEFAULT_KEYS:
                topic_key = LOG_DEFAULT_KEYS[key]
                try:
                    defaults[topic_key] = parse_log_config_value(topic_key, value)
                except InvalidConfigError as exc:
                    raise InvalidConfigError(f"broker config {key}: {exc}") from None
            elif key in LOG_CONFIGS:
                broker_key = {v: k for k, v in LOG_DEFAULT_KEYS.items()}.get(key)
                hint = f"; its broker-wide default is {broker_key!r}" if broker_key else ""
                raise InvalidConfigError(f"{key!r} is a topic config, not a broker config{hint}")
            else:
                log.warning("the configuration %r was supplied but is not a known broker "
                            "config; ignored", key)
        for topic_key in LOG_DEFAULT_UNITS:
            value = _unit_default(topic_key, units)
            if value is not None:
                defaults[topic_key] = value
        config = cls(**kwargs, log_defaults=defaults, security_props=security)
        config.security  # noqa: B018 - checked now: InvalidConfigError names the key
        return config

    @property
    def security(self):
        """The listeners and security settings
        (:class:`~sparklog.security.config.SecurityConfig`)."""
        from ..security.config import SecurityConfig

        return SecurityConfig.from_props(self.listeners, self.advertised_listeners,
                                         self.security_props)

    @property
    def topic_dir_mode(self) -> int | None:
        """``storage.topic.dir.permission`` as permission bits (None when unset);
        InvalidConfigError unless it is an octal mode such as 750."""
        text = self.topic_dir_permission.strip()
        if not text:
            return None
        try:
            mode = int(text, 8)
        except ValueError:
            mode = -1
        if not 0 <= mode <= 0o7777:
            raise InvalidConfigError(f"broker config storage.topic.dir.permission={text!r} "
                                     "is not an octal permission such as 750")
        return mode

    @property
    def listen_host_port(self) -> tuple[str, int]:
        """(host, port) of the first of ``listeners``."""
        first = self.security.listeners[0]
        return first.host, first.port

    @property
    def advertised_host_port(self) -> tuple[str, int]:
        """(host, port) the broker registers and returns in Metadata responses:
        ``advertised.listeners`` when set, else ``listeners`` (Kafka's rule). Port 0
        stands for the port the broker bound. A listener bound to a wildcard (``0.0.0.0``,
        ``::``, or no host) is advertised by this host's canonical name, as Kafka does
        (:func:`~sparklog.security.listeners.canonical_host_name`, whose error names
        ``advertised.listeners`` when that name is unusable); a wildcard in
        ``advertised.listeners`` itself is refused (InvalidConfigError naming it)."""
        from ..protocol.connection import parse_address
        from ..security.listeners import canonical_host_name

        key, value = (("advertised.listeners", self.advertised_listeners)
                      if self.advertised_listeners else ("listeners", self.listeners))
        text = value.split(",")[0].strip()
        if "://" in text:
            text = text.split("://", 1)[1]
        if text.rpartition(":")[0].strip("[]") == "":
            text = "0.0.0.0" + text  # no host: every interface, as listeners binds it
        try:
            host, port = parse_address(text)
        except Exception as exc:
            raise InvalidConfigError(f"broker config {key}={value!r}: {exc}") from None
        if host in WILDCARD_HOSTS:
            if key == "listeners":
                return canonical_host_name(value), port
            raise InvalidConfigError(
                f"broker config {key}={value!r}: {host} is a wildcard address and is never "
                "advertised to clients: name this host, e.g. PLAINTEXT://broker1.example.com:9092")
        return host, port

    def with_(self, **changes) -> "BrokerConfig":
        """A copy with some attributes changed."""
        from dataclasses import replace

        return replace(self, **changes)


def parse_properties(text: str, source: str = "properties") -> dict:
    """Parse Java ``.properties`` text: ``key=value`` or ``key: value`` lines, ``#``/``!``
    comments, blank lines, backslash line continuations. InvalidConfigError names the
    line of a key without a value separator."""
    props: dict = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        number = i + 1
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#!":
            continue
        positions = [p for p in (line.find("="), line.find(":")) if p >= 0]
        if not positions:
            raise InvalidConfigError(f"{source} line {number}: {line!r} is not key=value")
        cut = min(positions)
        key, value = line[:cut].strip(), line[cut + 1:].strip()
        if not key:
            raise InvalidConfigError(f"{source} line {number}: empty key")
        props[key] = value
    return props


def load_properties(path: str) -> dict:
    """Read a ``broker.properties`` file (InvalidConfigError if it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read broker config file {path}: {exc}") from None
    return parse_properties(text, path)
