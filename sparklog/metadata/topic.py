"""Topic names, topic configs and their persisted form.

A topic's config is a small JSON document: partition count, Kafka-named settings
(``segment.bytes``, ``retention.ms``, ``cleanup.policy``...) and, for typed topics, the
Arrow schema (serialized as an IPC schema message, base64). It is stored as versioned,
immutable files (see :mod:`sparklog.metadata.store`), never rewritten in place.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import pyarrow as pa

from ..errors import InvalidArgumentError, InvalidConfigError
from ..format.frame import RAW_SCHEMA, RESERVED_COLUMNS
from ..log.cleaner import KEY_COLUMN as COMPACTION_KEY
from ..log.cleaner import key_columns
from ..log.config import LOG_CONFIGS, parse_log_config_value
from ..names import MAX_TOPIC_NAME_LENGTH, validate_topic_name  # noqa: F401 (re-exported)


def validate_partition(partition, num_partitions: int | None = None, topic: str = "") -> int:
    """Check a partition number's type (and range if ``num_partitions`` is given)."""
    from ..errors import UnknownTopicOrPartitionError

    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidArgumentError(
            f"partition must be an int, got {type(partition).__name__}")
    if partition < 0 or (num_partitions is not None and partition >= num_partitions):
        raise UnknownTopicOrPartitionError(
            f"partition {partition} does not exist in topic {topic!r}"
            + (f" (it has {num_partitions})" if num_partitions is not None else ""))
    return partition


#: Topic-level configs: Kafka name -> (type, default); the partition log's table.
TOPIC_CONFIGS: dict[str, tuple] = {k: (kind, default)
                                   for k, (_, kind, default) in LOG_CONFIGS.items()}


def parse_config_value(key: str, value):
    """Parse and check one topic config value; InvalidConfigError names the key."""
    return parse_log_config_value(key, value)


def schema_to_text(schema: pa.Schema) -> str:
    """Serialize an Arrow schema as base64 of its IPC message."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    """Inverse of :func:`schema_to_text`."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass(frozen=True)
class TopicConfig:
    """A topic's persisted description.

    ``schema`` is None for raw topics (Kafka's record shape: key, value, headers, with
    the timestamp carried per frame) and an Arrow schema for typed topics. ``configs``
    holds only explicitly set keys; :meth:`get` falls back to the defaults.
    """

    name: str
    partitions: int
    schema: pa.Schema | None = None
    configs: dict = field(default_factory=dict)
    version: int = 1

    def __post_init__(self):
        validate_topic_name(self.name)
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) \
                or self.partitions < 1:
            raise InvalidArgumentError(
                f"topic {self.name!r}: partitions must be a positive int, got {self.partitions!r}")
        if self.schema is not None:
            if not isinstance(self.schema, pa.Schema):
                raise InvalidArgumentError(
                    f"topic {self.name!r}: schema must be a pyarrow.Schema, "
                    f"got {type(self.schema).__name__}")
            clash = RESERVED_COLUMNS.intersection(self.schema.names)
            if clash:
                raise InvalidArgumentError(
                    f"topic {self.name!r}: column names {sorted(clash)} are reserved")
            if len(self.schema) == 0:
                raise InvalidArgumentError(f"topic {self.name!r}: schema has no columns")
        object.__setattr__(self, "configs",
                           {k: parse_config_value(k, v) for k, v in dict(self.configs).items()})
        self._check_compaction_key()

    def _check_compaction_key(self) -> None:
        """A compacted topic's key columns (``compaction.key.columns``, default
        ``key``) must be columns of its schema; a raw topic is keyed by ``key``."""
        declared = self.configs.get("compaction.key.columns")
        columns = key_columns(declared if declared is not None else COMPACTION_KEY)
        if self.schema is None:
            if columns != (COMPACTION_KEY,):
                raise InvalidConfigError(
                    f"topic {self.name!r}: compaction.key.columns={declared} applies to "
                    f"typed topics only; a raw topic is keyed by its '{COMPACTION_KEY}'")
            return
        if "compact" not in self.configs.get("cleanup.policy", ""):
            return
        missing = [c for c in columns if c not in self.schema.names]
        if missing:
            raise InvalidConfigError(
                f"topic {self.name!r}: cleanup.policy={self.configs['cleanup.policy']} needs "
                f"a record key, and compaction keys this typed topic by "
                f"{', '.join(repr(c) for c in columns)}"
                f"{'' if declared is not None else ' (compaction.key.columns)'}, but its "
                f"schema has no {', '.join(repr(c) for c in missing)} column (columns: "
                f"{', '.join(self.schema.names)}); declare the key with "
                f"compaction.key.columns")

    @property
    def typed(self) -> bool:
        """True for a topic with a declared Arrow schema."""
        return self.schema is not None

    @property
    def record_schema(self) -> pa.Schema:
        """The record columns frames of this topic carry."""
        return self.schema if self.schema is not None else RAW_SCHEMA

    def get(self, key: str):
        """The effective value of a config key (explicit or default)."""
        if key not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {key!r}")
        return self.configs.get(key, TOPIC_CONFIGS[key][1])

    def effective_configs(self) -> dict:
        """Every config key with its effective value."""
        return {k: self.get(k) for k in TOPIC_CONFIGS}

    def to_json(self) -> bytes:
        """The persisted JSON form."""
        doc = {"name": self.name, "partitions": self.partitions, "version": self.version,
               "configs": self.configs,
               "schema": schema_to_text(self.schema) if self.schema is not None else None}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "TopicConfig":
        """Parse the persisted JSON form."""
        doc = json.loads(data)
        schema = schema_from_text(doc["schema"]) if doc.get("schema") else None
        return cls(doc["name"], doc["partitions"], schema, doc.get("configs", {}),
                   doc.get("version", 1))
