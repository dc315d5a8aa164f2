"""LogConfig: the topic-level settings the partition log obeys, under Kafka's names.

``LogConfig.from_props({"segment.bytes": "1048576", ...})`` parses and checks Kafka's
property names (values may be strings, as from a command line); an unknown key or an
invalid value raises :class:`~sparklog.errors.InvalidConfigError` naming the key.
:data:`LOG_CONFIGS` lists every key with its default; ``-1`` means "disabled" for the
limits Kafka also disables that way (``retention.bytes``, ``flush.messages``...).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..errors import InvalidConfigError
from ..format.header import HEADER_SIZE

_DAY_MS = 24 * 3600 * 1000
_INT32_MAX = (1 << 31) - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

#: Kafka property name -> (attribute, type, default: a value of that type).
LOG_CONFIGS: dict[str, tuple[str, type, Any]] = {
    "segment.bytes": ("segment_bytes", int, 256 * 1024 * 1024),
    "segment.ms": ("segment_ms", int, 7 * _DAY_MS),
    # Kafka's: each segment rolls up to this much (a random part of it) before segment.ms
    "segment.jitter.ms": ("segment_jitter_ms", int, 0),
    "index.interval.bytes": ("index_interval_bytes", int, 4096),
    "max.message.bytes": ("max_message_bytes", int, 16 * 1024 * 1024),
    "retention.ms": ("retention_ms", int, 7 * _DAY_MS),
    "retention.bytes": ("retention_bytes", int, -1),
    "cleanup.policy": ("cleanup_policy", str, "delete"),
    "compression.type": ("compression_type", str, "producer"),
    "message.timestamp.type": ("message_timestamp_type", str, CREATE_TIME),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int, 0),
    "delete.retention.ms": ("delete_retention_ms", int, _DAY_MS),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", int, (1 << 63) - 1),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float, 0.5),
    "file.delete.delay.ms": ("file_delete_delay_ms", int, 60000),
    "flush.messages": ("flush_messages", int, -1),
    "flush.ms": ("flush_ms", int, -1),
    # HDFS replication (dfs.replication) of the topic's files, where the storage has one
    # (Kafka's --replication-factor; -1: the storage's default)
    "replication.factor": ("replication_factor", int, -1),
    # sparklog's own: the column(s) compaction keys a typed topic's records by
    # (comma-separated; a raw topic's key is its "key" column)
    "compaction.key.columns": ("compaction_key_columns", str, "key"),
}

_CHOICES = {
    "cleanup.policy": ("delete", "compact", "compact,delete", "delete,compact"),
    # the broker stores each batch as its producer compressed it (no recompression)
    "compression.type": ("producer",),
    "message.timestamp.type": (CREATE_TIME, LOG_APPEND_TIME),
}

# (minimum, maximum) of the integer settings; -1 is allowed where it means "disabled".
_RANGES: dict[str, tuple[float, float | None]] = {
    "segment.bytes": (HEADER_SIZE, _INT32_MAX),
    "segment.ms": (1, None),
    "segment.jitter.ms": (0, None),
    "index.interval.bytes": (1, _INT32_MAX),
    "max.message.bytes": (HEADER_SIZE, _INT32_MAX),
    "retention.ms": (-1, None),
    "retention.bytes": (-1, None),
    "min.compaction.lag.ms": (0, None),
    "delete.retention.ms": (0, None),
    "max.compaction.lag.ms": (1, None),
    "min.cleanable.dirty.ratio": (0.0, 1.0),
    "file.delete.delay.ms": (0, None),
    "flush.messages": (-1, None),
    "flush.ms": (-1, None),
    "replication.factor": (-1, 32767),
}


def parse_log_config_value(key: str, value):
    """Parse and check one value of ``key``; InvalidConfigError names key and value."""
    if key not in LOG_CONFIGS:
        raise InvalidConfigError(
            f"unknown log config {key!r}; known: {', '.join(sorted(LOG_CONFIGS))}")
    _, kind, _ = LOG_CONFIGS[key]
    if kind is int:
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise InvalidConfigError(f"log config {key}={value!r} is not an integer")
        try:
            parsed = int(value.strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"log config {key}={value!r} is not an integer") from None
        low, high = _RANGES[key]
        if parsed < low:
            raise InvalidConfigError(f"log config {key}={parsed} must be >= {low}")
        if high is not None and parsed > high:
            raise InvalidConfigError(f"log config {key}={parsed} must be <= {high}")
        if key == "replication.factor" and parsed == 0:
            raise InvalidConfigError("log config replication.factor=0: give -1 (the "
                                     "storage's default) or a replication >= 1")
        return parsed
    if kind is float:
        if isinstance(value, bool):
            raise InvalidConfigError(f"log config {key}={value!r} is not a number")
        try:
            number = float(value.strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"log config {key}={value!r} is not a number") from None
        low, high = _RANGES[key]
        if not (low <= number and (high is None or number <= high)):  # NaN too
            raise InvalidConfigError(
                f"log config {key}={number} must be between {low} and {high}")
        return number
    if not isinstance(value, str):
        raise InvalidConfigError(
            f"log config {key}={value!r} must be a string, got {type(value).__name__}")
    text = value.strip()
    if key == "compression.type" and text != "producer":
        raise InvalidConfigError(
            f"log config compression.type={value!r}: sparklog keeps each batch as its "
            f"producer compressed it, so only 'producer' is supported (set the producers' "
            f"compression_type instead)")
    if key in _CHOICES and text not in _CHOICES[key]:
        raise InvalidConfigError(
            f"log config {key}={value!r} is not one of {', '.join(_CHOICES[key])}")
    return text


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log (attributes are Kafka's names with ``_``).

    Construct with :meth:`from_props` (Kafka names) or with keyword attributes; both
    validate every value.
    """

    segment_bytes: int = LOG_CONFIGS["segment.bytes"][2]
    segment_ms: int = LOG_CONFIGS["segment.ms"][2]
    segment_jitter_ms: int = LOG_CONFIGS["segment.jitter.ms"][2]
    index_interval_bytes: int = LOG_CONFIGS["index.interval.bytes"][2]
    max_message_bytes: int = LOG_CONFIGS["max.message.bytes"][2]
    retention_ms: int = LOG_CONFIGS["retention.ms"][2]
    retention_bytes: int = LOG_CONFIGS["retention.bytes"][2]
    cleanup_policy: str = LOG_CONFIGS["cleanup.policy"][2]
    compression_type: str = LOG_CONFIGS["compression.type"][2]
    message_timestamp_type: str = LOG_CONFIGS["message.timestamp.type"][2]
    min_compaction_lag_ms: int = LOG_CONFIGS["min.compaction.lag.ms"][2]
    delete_retention_ms: int = LOG_CONFIGS["delete.retention.ms"][2]
    max_compaction_lag_ms: int = LOG_CONFIGS["max.compaction.lag.ms"][2]
    min_cleanable_dirty_ratio: float = LOG_CONFIGS["min.cleanable.dirty.ratio"][2]
    file_delete_delay_ms: int = LOG_CONFIGS["file.delete.delay.ms"][2]
    flush_messages: int = LOG_CONFIGS["flush.messages"][2]
    flush_ms: int = LOG_CONFIGS["flush.ms"][2]
    replication_factor: int = LOG_CONFIGS["replication.factor"][2]
    compaction_key_columns: str = LOG_CONFIGS["compaction.key.columns"][2]

    def __post_init__(self):
        for key, (attr, _, _) in LOG_CONFIGS.items():
            object.__setattr__(self, attr, parse_log_config_value(key, getattr(self, attr)))

    @classmethod
    def from_props(cls, props=None, *, ignore_unknown: bool = False) -> "LogConfig":
        """Build from a mapping of Kafka property names (missing keys take defaults).

        Unknown keys raise InvalidConfigError unless ``ignore_unknown`` is true.
        """
        if props is None:
            props = {}
        if not hasattr(props, "items"):
            raise InvalidConfigError(
                f"log config must be a mapping of Kafka property names, got {type(props).__name__}")
        kwargs = {}
        for key, value in props.items():
            if key not in LOG_CONFIGS:
                if ignore_unknown:
                    continue
                parse_log_config_value(key, value)  # raises, naming the key
            kwargs[LOG_CONFIGS[key][0]] = parse_log_config_value(key, value)
        return cls(**kwargs)

    def to_props(self) -> dict:
        """Every setting under its Kafka name."""
        return {key: getattr(self, attr) for key, (attr, _, _) in LOG_CONFIGS.items()}

    @property
    def log_append_time(self) -> bool:
        """True when the log stamps its own clock as the record time (LogAppendTime)."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def compact(self) -> bool:
        """True when ``cleanup.policy`` includes compact."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """True when ``cleanup.policy`` includes delete (time/size retention)."""
        return "delete" in self.cleanup_policy


assert {f.name for f in fields(LogConfig)} == {a for a, _, _ in LOG_CONFIGS.values()}
