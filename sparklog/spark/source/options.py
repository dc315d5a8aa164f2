"""Options of the ``sparklog`` Spark source, with the names and meaning of Spark's Kafka source.

A job moves from ``format("kafka")`` by changing only the format (and, if it wants no
broker, ``kafka.bootstrap.servers`` for ``path``): every option below is spelt as the
Kafka source spells it, ``kafka.bootstrap.servers`` is accepted as an alias of
``bootstrap.servers``, and other ``kafka.*`` consumer settings are accepted and ignored.

=============================  ==========================================================
option                         meaning
=============================  ==========================================================
bootstrap.servers              broker address(es) ``host:port,...``: offsets from the broker
path                           a storage root URL: offsets from storage alone (no broker);
                               with bootstrap.servers, where the tasks read the segments
                               (when executors see the storage under another URL)
subscribe                      comma-separated topic list
subscribePattern               regular expression matched against whole topic names
assign                         JSON ``{"topicA":[0,1],"topicB":[2]}``
startingOffsets                ``earliest`` | ``latest`` | JSON ``{"t":{"0":23,"1":-2}}``
                               (-2 earliest, -1 latest)
endingOffsets                  ``latest`` | ``earliest``... (batch only), same JSON form
startingTimestamp              one timestamp (ms) for every partition (wins over the two
                               options below)
startingOffsetsByTimestamp     JSON ``{"t":{"0":1700000000000}}``
startingOffsetsByTimestampStrategy  ``error`` (default) | ``latest``: what to do when no
                               record has a timestamp >= the requested one
endingTimestamp / endingOffsetsByTimestamp  same for the end (no match -> latest)
failOnDataLoss                 ``true`` (default): fail when offsets are gone; ``false``:
                               skip the missing range and log a warning
minPartitions                  split offset ranges until there are at least this many tasks
maxRecordsPerPartition         split offset ranges so no task reads more records
includeHeaders                 add the ``headers`` column (default false)
maxOffsetsPerTrigger           streams: at most this many records per micro-batch
maxBytesPerTrigger             streams: about this many bytes of log per micro-batch
kafka.group.id / groupIdPrefix streams: publish processed offsets to this consumer group
                               (lag monitoring only; the checkpoint stays the truth)
storage.kerberos.principal     a Kerberized HDFS: the tasks (and the driver, without a
storage.kerberos.keytab        broker) log in as this principal from this keytab (a path
                               every executor can read), the ticket renewed before it
                               expires; the broker's property names
storage.kerberos.ticket.renew.period.ms  how often the ticket is checked (default 60000)
=============================  ==========================================================

Bad values raise :class:`~sparklog.errors.InvalidArgumentError` naming the option.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field

from ...errors import InvalidArgumentError
from ...names import validate_topic_name

log = logging.getLogger(__name__)

#: The JSON offset values of Spark's Kafka source.
EARLIEST = -2
LATEST = -1

#: Kafka source options accepted for compatibility but without effect here.
_IGNORED = {"fetchoffset.numretries", "fetchoffset.retryintervalms", "kafkaconsumer.polltimeoutms",
            "maxtriggerdelay", "minoffsetspertrigger"}


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions to read: exactly one of ``subscribe`` (``topics``),
    ``subscribePattern`` (``pattern``) or ``assign`` (``assignment``)."""

    kind: str
    topics: tuple = ()
    pattern: str | None = None
    assignment: dict = field(default_factory=dict)

    def matches(self, topic: str) -> bool:
        """True if ``topic`` is selected (a pattern must match the whole name)."""
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        if self.kind == "assign":
            return topic in self.assignment
        return topic in self.topics

    def describe(self) -> str:
        """Human-readable form for messages."""
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern!r}"
        if self.kind == "assign":
            return f"assign={json.dumps({t: list(p) for t, p in self.assignment.items()})}"
        return f"subscribe={','.join(self.topics)}"


@dataclass(frozen=True)
class OffsetSpec:
    """Where a scan starts or ends.

    ``kind`` is ``earliest``, ``latest``, ``offsets`` (``values`` maps (topic, partition)
    to an offset or -2/-1), ``timestamp`` (one ``timestamp`` for every partition) or
    ``timestamps`` (``values`` maps (topic, partition) to a timestamp in ms).
    """

    kind: str
    values: dict = field(default_factory=dict)
    timestamp: int | None = None

    @property
    def by_time(self) -> bool:
        """True for the two timestamp kinds."""
        return self.kind in ("timestamp", "timestamps")


@dataclass(frozen=True)
class SourceOptions:
    """Parsed and checked options of one ``sparklog`` read (see the module docstring)."""

    bootstrap_servers: str | None
    path: str | None
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    group_id: str | None = None
    #: TLS and SASL of the broker connection, from ``kafka.security.protocol``,
    #: ``kafka.ssl.truststore.location``, ``kafka.sasl.jaas.config`` ... (kafka-python's
    #: names: :mod:`sparklog.security.client`)
    security: dict = field(default_factory=dict, repr=False)
    #: ``open_fileio`` options of the tasks' storage reads: a Kerberos keytab login
    #: (:func:`sparklog.storage.kerberos.kerberos_options`)
    storage_options: dict = field(default_factory=dict, repr=False)
    #: the stream's ``latestOffset()`` also reports the uncapped end (set by the JVM
    #: provider, which reads it: :data:`REPORT_AVAILABLE_OPTION`)
    report_available: bool = False


#: Internal option the JVM provider gives the Python source (never set by users): a
#: capped stream's ``latestOffset()`` answer then also carries the offsets available now,
#: uncapped, under :data:`AVAILABLE_KEY`, which the provider takes as the end of a
#: ``Trigger.AvailableNow`` run and removes before Spark sees the offsets.
REPORT_AVAILABLE_OPTION = "__sparklog.reportAvailable"
#: The key of the uncapped offsets in such an answer (no topic can have this name).
AVAILABLE_KEY = "@available"


# --- small parsers --------------------------------------------------------------------


def _bool(opts: dict, name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"option {name}={raw!r} must be true or false")


def _positive(opts: dict, name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name}={raw!r} must be a positive integer") from None
    if value <= 0:
        raise InvalidArgumentError(f"option {name}={raw!r} must be a positive integer")
    return value


def _json_object(name: str, raw: str) -> dict:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"option {name} is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(doc, dict):
        raise InvalidArgumentError(f"option {name} must be a JSON object, got {raw!r}")
    return doc


def _int_value(name: str, where: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"option {name}: {where} must be an integer, got {value!r}")
    return value


def parse_partition_json(name: str, raw: str) -> dict:
    """Parse ``{"topic":{"0":v,...},...}`` into {(topic, partition): int}."""
    out = {}
    for topic, parts in _json_object(name, raw).items():
        validate_topic_name(topic)
        if not isinstance(parts, dict):
            raise InvalidArgumentError(
                f"option {name}: topic {topic!r} must map partition numbers to values, "
                f"got {parts!r}")
        for key, value in parts.items():
            try:
                partition = int(key)
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"option {name}: topic {topic!r} has a non-numeric partition {key!r}") from None
            if partition < 0:
                raise InvalidArgumentError(
                    f"option {name}: topic {topic!r} partition {partition} is negative")
            out[(topic, partition)] = _int_value(name, f"{topic}-{partition}", value)
    return out


def _subscription(opts: dict) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k) is not None]
    if len(given) != 1:
        raise InvalidArgumentError(
            "exactly one of the options subscribe, subscribePattern, assign must be set"
            + (f" (got {len(given)})" if given else ""))
    key = given[0]
    raw = str(opts[key])
    if key == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise InvalidArgumentError(f"option subscribe={raw!r} names no topic")
        for t in topics:
            validate_topic_name(t)
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        if not raw.strip():
            raise InvalidArgumentError("option subscribePattern is empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidArgumentError(
                f"option subscribePattern={raw!r} is not a valid regular expression: {exc}") from None
        return Subscription("subscribePattern", pattern=raw)
    assignment = {}
    for topic, parts in _json_object("assign", raw).items():
        validate_topic_name(topic)
        if not isinstance(parts, list) or not parts:
            raise InvalidArgumentError(
                f"option assign: topic {topic!r} must map to a non-empty list of partitions")
        nums = []
        for p in parts:
            if _int_value("assign", f"a partition of {topic!r}", p) < 0:
                raise InvalidArgumentError(f"option assign: topic {topic!r} partition {p} is negative")
            nums.append(p)
        assignment[topic] = tuple(sorted(set(nums)))
    if not assignment:
        raise InvalidArgumentError("option assign names no topic")
    return Subscription("assign", assignment=assignment)


def _offset_spec(opts: dict, prefix: str, default: str) -> OffsetSpec:
    """startingX / endingX: Timestamp > OffsetsByTimestamp > Offsets (Kafka's precedence)."""
    ts_name, by_ts_name, off_name = f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp", \
        f"{prefix}Offsets"
    if opts.get(ts_name.lower()) is not None:
        raw = opts[ts_name.lower()]
        try:
            ts = int(str(raw).strip())
        except ValueError:
            raise InvalidArgumentError(
                f"option {ts_name}={raw!r} must be a timestamp in milliseconds") from None
        if ts < 0:
            raise InvalidArgumentError(f"option {ts_name}={raw!r} must not be negative")
        return OffsetSpec("timestamp", timestamp=ts)
    if opts.get(by_ts_name.lower()) is not None:
        values = parse_partition_json(by_ts_name, str(opts[by_ts_name.lower()]))
        for (t, p), ts in values.items():
            if ts < 0:
                raise InvalidArgumentError(
                    f"option {by_ts_name}: timestamp {ts} of {t}-{p} must not be negative")
        return OffsetSpec("timestamps", values=values)
    raw = opts.get(off_name.lower())
    text = default if raw is None else str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    if text.startswith("{"):
        values = parse_partition_json(off_name, text)
        for (t, p), off in values.items():
            if off < EARLIEST:
                raise InvalidArgumentError(
                    f"option {off_name}: offset {off} of {t}-{p} is invalid "
                    "(use an offset >= 0, -2 for earliest or -1 for latest)")
        return OffsetSpec("offsets", values=values)
    raise InvalidArgumentError(
        f"option {off_name}={text!r} must be 'earliest', 'latest' or a JSON object "
        '{"topic":{"partition":offset}}')


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Kafka's batch rules: no 'latest' start, no 'earliest' end."""
    if starting.kind == "latest":
        raise InvalidArgumentError("option startingOffsets='latest' is not valid for batch queries")
    if ending.kind == "earliest":
        raise InvalidArgumentError("option endingOffsets='earliest' is not valid for batch queries")
    for (t, p), off in starting.values.items() if starting.kind == "offsets" else ():
        if off == LATEST:
            raise InvalidArgumentError(
                f"option startingOffsets: {t}-{p} can't be latest (-1) for batch queries")
    for (t, p), off in ending.values.items() if ending.kind == "offsets" else ():
        if off == EARLIEST:
            raise InvalidArgumentError(
                f"option endingOffsets: {t}-{p} can't be earliest (-2) for batch queries")


def _check_spec_topics(spec: OffsetSpec, sub: Subscription, name: str) -> None:
    """Offsets given per partition must belong to the subscription."""
    for (t, p) in spec.values:
        if not sub.matches(t) or (sub.kind == "assign" and p not in sub.assignment[t]):
            raise InvalidArgumentError(
                f"option {name} names {t}-{p}, which is not in the subscription ({sub.describe()})")


def _security(options) -> dict:
    """The client security configs among the ``kafka.*`` options (names as given:
    values such as file paths keep their case)."""
    from ...security.client import security_properties

    return security_properties({str(k)[len("kafka."):]: v for k, v in dict(options or {})
                                .items() if str(k).lower().startswith("kafka.")},
                               what="sparklog source options", strict=False)


def _storage_options(opts: dict) -> dict:
    """The storage client options among the (lower-cased) source options."""
    from ...storage.kerberos import KEYTAB_KEY, PRINCIPAL_KEY, RENEW_PERIOD_KEY, kerberos_options

    return kerberos_options(opts.get(PRINCIPAL_KEY), opts.get(KEYTAB_KEY),
                            opts.get(RENEW_PERIOD_KEY))


def parse_options(options, *, streaming: bool | None = False) -> SourceOptions:
    """Check and parse the options of a read: ``streaming`` True for readStream, False
    for read, None to skip the checks that depend on the mode (schema inference)."""
    opts = {str(k).lower(): v for k, v in dict(options or {}).items()}
    servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    path = opts.get("path")
    if not servers and not path:
        raise InvalidArgumentError(
            "set the option bootstrap.servers (a broker) or path (a storage root URL)")
    for key in opts:
        if key in _IGNORED:
            log.warning("option %s of the Kafka source has no effect on sparklog", key)
    sub = _subscription(opts)
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    has_end = any(opts.get(k) is not None for k in
                  ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"))
    if streaming and has_end:
        raise InvalidArgumentError(
            "options endingOffsets/endingTimestamp/endingOffsetsByTimestamp are not valid "
            "for streaming queries")
    ending = _offset_spec(opts, "ending", "latest")
    if streaming is False:
        _check_batch_bounds(starting, ending)
    _check_spec_topics(starting, sub, "startingOffsets")
    _check_spec_topics(ending, sub, "endingOffsets")
    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidArgumentError(
            f"option startingOffsetsByTimestampStrategy={strategy!r} must be error or latest")
    if streaming is False:
        for name in ("maxOffsetsPerTrigger", "maxBytesPerTrigger"):
            if opts.get(name.lower()) is not None:
                log.warning("option %s only applies to streaming queries", name)
    group = opts.get("kafka.group.id") or opts.get("group.id")
    if not group and opts.get("groupidprefix"):
        group = str(opts["groupidprefix"])
    return SourceOptions(
        bootstrap_servers=str(servers) if servers else None,
        path=str(path) if path else None,
        subscription=sub,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_positive(opts, "minPartitions"),
        max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
        max_bytes_per_trigger=_positive(opts, "maxBytesPerTrigger"),
        group_id=str(group) if group else None,
        security=_security(options),
        storage_options=_storage_options(opts),
        report_available=_bool(opts, REPORT_AVAILABLE_OPTION, False),
    )
