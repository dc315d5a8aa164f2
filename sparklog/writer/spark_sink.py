"""``df.write.format("sparklog")``: produce a DataFrame's rows to topics through the broker.

Columns, as Spark's Kafka sink takes them:

* raw topics: ``value`` (binary or string, required), ``key`` (binary or string),
  ``headers`` (array<struct<key string, value binary>>), and ``timestamp`` (timestamp
  or long ms; the append time when absent);
* typed topics: the topic's columns (plus an optional ``timestamp``);
* routing: the ``topic`` option, else a ``topic`` column (the option wins), and an
  optional ``partition`` int column (else key hashing / sticky partitioning).

Other columns are an error (a typo must not silently drop data). The schema is checked
on the driver when the write is planned, before any task runs, so a bad schema writes
nothing. Each task sends Arrow batches with the idempotent Producer's ``send_batch``
(broker retries within a task attempt are de-duplicated by producer id and sequence);
a re-run task attempt sends its rows again, so delivery across attempts is at least
once, as with Spark's Kafka sink. The log is append-only: mode("overwrite") is refused.

Producer settings pass as ``kafka.<name>`` options with Kafka's names
(``kafka.acks``, ``kafka.compression.type``, ``kafka.linger.ms``...).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from ..errors import InvalidArgumentError, SchemaMismatchError

log = logging.getLogger(__name__)

ROUTING_COLUMNS = ("topic", "partition")
RAW_COLUMNS = ("key", "value", "headers")
TIMESTAMP = "timestamp"


@dataclass
class SparklogCommitMessage(WriterCommitMessage):
    """What one task wrote: ``{(topic, partition): record count}``."""

    counts: dict = field(default_factory=dict)


def producer_configs(options: dict) -> dict:
    """Producer keyword arguments from ``kafka.<kafka.name>`` options (unknown Kafka
    settings are ignored, as they configure Kafka's client, not this one)."""
    from ..security.client import security_properties
    from .producer.producer import DEFAULT_CONFIG

    out = {"enable_idempotence": True, "acks": "all"}
    # TLS and SASL: Kafka's Java names (kafka.ssl.truststore.location,
    # kafka.sasl.jaas.config ...) or kafka-python's (kafka.ssl.cafile ...)
    out.update(security_properties(
        {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")},
        what="sparklog sink options", strict=False))
    for key, raw in options.items():
        if key[len("kafka."):].replace(".", "_") in out and key.startswith(
                ("kafka.ssl.", "kafka.sasl.", "kafka.security.")):
            continue
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka."):].replace(".", "_")
        if name not in DEFAULT_CONFIG:
            log.debug("option %s has no meaning for sparklog's producer; ignored", key)
            continue
        default = DEFAULT_CONFIG[name]
        text = str(raw).strip()
        if isinstance(default, bool) or name == "enable_idempotence":
            value = text.lower() == "true"
        elif isinstance(default, int) and name != "acks":
            try:
                value = int(text)
            except ValueError:
                raise InvalidArgumentError(f"option {key}={raw!r} must be an integer") from None
        else:
            value = text
        out[name] = value
    return out


def _field_kind(schema, name):
    return schema[name].dataType.typeName() if name in schema.fieldNames() else None


def check_schema(schema, topic_option: str | None, topic_schemas: dict) -> None:
    """Refuse a DataFrame schema that cannot be written (SchemaMismatchError naming the
    column). ``topic_schemas`` maps known target topics to their Arrow schema (None for
    raw topics)."""
    names = schema.fieldNames()
    if topic_option is None and "topic" not in names:
        raise InvalidArgumentError(
            "no target topic: set the option topic or give the DataFrame a topic column")
    for col, kinds in (("topic", ("string",)), ("partition", ("integer", "short", "byte")),
                       (TIMESTAMP, ("timestamp", "timestamp_ntz", "long"))):
        kind = _field_kind(schema, col)
        if kind is not None and kind not in kinds:
            raise SchemaMismatchError(
                f"column {col!r} must be of type {' or '.join(kinds)}, not {kind}")
    payload = [n for n in names if n not in ROUTING_COLUMNS and n != TIMESTAMP]
    for topic, arrow_schema in topic_schemas.items():
        if arrow_schema is None:
            if "value" not in payload:
                raise SchemaMismatchError(
                    f"writing to raw topic {topic!r} needs a value column; columns: {names}")
            extra = sorted(set(payload) - set(RAW_COLUMNS))
            if extra:
                raise SchemaMismatchError(
                    f"columns {extra} cannot be written to raw topic {topic!r} (it takes "
                    "key, value, headers, timestamp, topic, partition)")
            for col in ("key", "value"):
                kind = _field_kind(schema, col)
                if kind is not None and kind not in ("binary", "string"):
                    raise SchemaMismatchError(
                        f"column {col!r} must be binary or string, not {kind}")
        elif sorted(payload) != sorted(arrow_schema.names):
            raise SchemaMismatchError(
                f"columns {payload} do not match the columns {arrow_schema.names} of typed "
                f"topic {topic!r}")


class SparklogWriter(DataSourceArrowWriter):
    """Batch writer of ``format("sparklog")`` (see the module docstring)."""

    def __init__(self, options: dict, schema, overwrite: bool):
        opts = {str(k).lower(): v for k, v in options.items()}
        if overwrite:
            raise InvalidArgumentError(
                "save mode overwrite is not supported: a topic is an append-only log "
                "(use mode('append'))")
        self.servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
        if not self.servers:
            raise InvalidArgumentError(
                "writing needs the option bootstrap.servers (records go through the broker)")
        self.topic = opts.get("topic")
        self.configs = producer_configs(opts)
        self.schema = schema
        self.topic_schemas = self._topic_schemas()
        check_schema(schema, self.topic, self.topic_schemas)

    def _topic_schemas(self) -> dict:
        if not self.topic:
            return {}
        from ..admin import Admin
        from ..security.client import CLIENT_SECURITY_DEFAULTS

        security = {k: v for k, v in self.configs.items() if k in CLIENT_SECURITY_DEFAULTS}
        with Admin(self.servers, client_id="sparklog-spark-writer", **security) as admin:
            (desc,) = admin.describe_topics([self.topic])
        return {self.topic: desc.schema}

    def _groups(self, batch: pa.RecordBatch):
        """(topic, partition or None, payload table) groups of one Arrow batch."""
        table = pa.Table.from_batches([batch])
        names = table.column_names
        if self.topic:
            groups = [(self.topic, table)]
        else:
            topics = table.column("topic")
            if topics.null_count:
                raise InvalidArgumentError("the topic column has null values and no topic "
                                           "option is set")
            groups = [(t.as_py(), table.filter(pc.equal(topics, t)))
                      for t in pc.unique(topics)]
        for topic, rows in groups:
            if "partition" in names:
                parts = rows.column("partition")
                for p in pc.unique(parts):
                    if p.is_valid:
                        chunk = rows.filter(pc.equal(parts, p))
                    else:
                        chunk = rows.filter(pc.is_null(parts))
                    yield topic, p.as_py(), chunk
            else:
                yield topic, None, rows

    def write(self, iterator) -> SparklogCommitMessage:
        """Send every batch of this task and wait for all acknowledgements."""
        from .producer import Producer

        counts: dict = {}
        futures = []
        with Producer(self.servers, **self.configs) as producer:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                for topic, partition, rows in self._groups(batch):
                    payload = rows.drop_columns([c for c in ROUTING_COLUMNS if c in rows.column_names])
                    typed = self.topic_schemas.get(topic)
                    if typed is not None:  # the topic's column order
                        payload = payload.select(typed.names + [
                            c for c in payload.column_names if c == TIMESTAMP])
                    if TIMESTAMP in payload.column_names and \
                            pa.types.is_timestamp(payload.schema.field(TIMESTAMP).type):
                        ts = payload.column(TIMESTAMP).cast(pa.timestamp("ms", tz="UTC"))
                        payload = payload.set_column(payload.schema.get_field_index(TIMESTAMP),
                                                     TIMESTAMP, ts)
                    futures.append(producer.send_batch(topic, payload, partition=partition))
            producer.flush()
            for future in futures:
                for meta in future.get():
                    key = (meta.topic, meta.partition)
                    counts[key] = counts.get(key, 0) + meta.record_count
        return SparklogCommitMessage(counts)

    def commit(self, messages) -> None:
        """Every task succeeded; its records are already in the log."""
        total = sum(sum(m.counts.values()) for m in messages if m is not None)
        log.info("wrote %d records with format('sparklog')", total)

    def abort(self, messages) -> None:
        """A task failed: records of successful tasks stay in the log (a log cannot
        take records back), as with Spark's Kafka sink."""
        written = sum(sum(m.counts.values()) for m in messages if m is not None)
        log.warning("write with format('sparklog') aborted; %d records of finished tasks "
                    "remain in the log", written)
