"""``df.write.format("sparklog")`` and ``writeStream.format("sparklog")``: produce a
DataFrame's rows to topics through the broker, with the write semantics of Spark's Kafka
sink.

Columns, as Spark's Kafka sink takes them:

* raw topics: ``value`` (binary or string, required), ``key`` (binary or string),
  ``headers`` (array<struct<key string, value binary>>), and ``timestamp`` (timestamp
  or long ms: the CreateTime; the send time when absent);
* typed topics: the topic's columns, all of them (plus an optional ``timestamp``);
* routing: the ``topic`` option, else a ``topic`` column (the option wins, as in Spark's
  Kafka sink), and an optional ``partition`` int column (else key hashing / sticky
  partitioning; a null partition too).

Every other column is ignored, as Spark's Kafka sink ignores columns it does not take:
a frame read from a topic (``offset``, ``timestampType``...) is written as it is. The
schema is checked on the driver when the write is planned, before any task runs, so a
bad schema writes nothing; a topic named only by the ``topic`` column is checked when a
task first meets it. Each task sends Arrow batches with the idempotent Producer's
``send_batch`` (broker retries within a task attempt are de-duplicated by producer id and
sequence); a re-run task attempt sends its rows again, so delivery across attempts is at
least once, as with Spark's Kafka sink. The log is append-only: a batch
``mode("overwrite")`` is refused.

The streaming sink (:class:`SparklogStreamWriter`) writes each micro-batch the same way.
Spark records a micro-batch in the query's checkpoint (``checkpointLocation``) after its
tasks have written and :meth:`SparklogStreamWriter.commit` ran, so a query restarted
from its checkpoint writes only what follows; a query that failed after a micro-batch's
records were acknowledged and before its commit writes that micro-batch again on
restart: at least once, as Spark's Kafka sink. The ``complete`` output mode appends each
result, as Spark's Kafka sink does (a log cannot be truncated).

Producer settings pass as ``kafka.<name>`` options with Kafka's names
(``kafka.acks``, ``kafka.compression.type``, ``kafka.linger.ms``...).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

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
    from ..clients.producer.producer import DEFAULT_CONFIG
    from ..security.client import security_properties

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


def taken_columns(names, arrow_schema) -> list[str]:
    """The columns of ``names`` a write to a topic of ``arrow_schema`` (None: a raw
    topic) sends as records: the payload columns and ``timestamp``, in the topic's
    order. The others (routing columns aside) are ignored."""
    payload = RAW_COLUMNS if arrow_schema is None else tuple(arrow_schema.names)
    return [c for c in (*payload, TIMESTAMP) if c in names]


def ignored_columns(names, arrow_schema) -> list[str]:
    """The columns of ``names`` a write to a topic of ``arrow_schema`` ignores."""
    taken = set(taken_columns(names, arrow_schema)) | set(ROUTING_COLUMNS)
    return [c for c in names if c not in taken]


def check_schema(schema, topic_option: str | None, topic_schemas: dict) -> None:
    """Refuse a DataFrame schema that cannot be written (SchemaMismatchError naming the
    column). ``topic_schemas`` maps known target topics to their Arrow schema (None for
    raw topics). Columns a topic does not take are not an error (see the module
    docstring)."""
    names = schema.fieldNames()
    if topic_option is None and "topic" not in names:
        raise InvalidArgumentError(
            "no target topic: set the option topic or give the DataFrame a topic column")
    checked = (("partition", ("integer", "short", "byte")),
               (TIMESTAMP, ("timestamp", "timestamp_ntz", "long")))
    if topic_option is None:  # the option wins: the column is then ignored
        checked = (("topic", ("string",)),) + checked
    for col, kinds in checked:
        kind = _field_kind(schema, col)
        if kind is not None and kind not in kinds:
            raise SchemaMismatchError(
                f"column {col!r} must be of type {' or '.join(kinds)}, not {kind}")
    for topic, arrow_schema in topic_schemas.items():
        if arrow_schema is None:
            if "value" not in names:
                raise SchemaMismatchError(
                    f"writing to raw topic {topic!r} needs a value column; columns: {names}")
            for col in ("key", "value"):
                kind = _field_kind(schema, col)
                if kind is not None and kind not in ("binary", "string"):
                    raise SchemaMismatchError(
                        f"column {col!r} must be binary or string, not {kind}")
        else:
            missing = [c for c in arrow_schema.names if c not in names]
            if missing:
                raise SchemaMismatchError(
                    f"columns {names} do not match the columns {arrow_schema.names} of typed "
                    f"topic {topic!r}: {missing} missing")


class _SparklogSink:
    """What the batch and the streaming writer share: the options, the schema check and
    the sending of one task's rows (:meth:`write`)."""

    def __init__(self, options: dict, schema):
        opts = {str(k).lower(): v for k, v in options.items()}
        self.servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
        if not self.servers:
            raise InvalidArgumentError(
                "writing needs the option bootstrap.servers (records go through the broker)")
        self.topic = opts.get("topic")
        self.configs = producer_configs(opts)
        self.schema = schema
        self.topic_schemas = self._topic_schemas()
        check_schema(schema, self.topic, self.topic_schemas)
        for topic, arrow_schema in self.topic_schemas.items():
            ignored = ignored_columns(schema.fieldNames(), arrow_schema)
            if ignored:
                log.info("columns %s are not written to topic %r (as Spark's Kafka sink, "
                         "the sink ignores columns it does not take)", ignored, topic)

    def _topic_schemas(self) -> dict:
        if not self.topic:
            return {}
        from ..clients.admin import Admin
        from ..security.client import CLIENT_SECURITY_DEFAULTS

        security = {k: v for k, v in self.configs.items() if k in CLIENT_SECURITY_DEFAULTS}
        with Admin(self.servers, client_id="sparklog-spark-writer", **security) as admin:
            (desc,) = admin.describe_topics([self.topic])
        return {self.topic: desc.schema}

    def _groups(self, batch: pa.RecordBatch):
        """(topic, partition or None, rows) groups of one Arrow batch."""
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

    def _payload(self, producer, topic: str, rows: pa.Table) -> pa.Table:
        """The columns of ``rows`` that ``topic`` takes, timestamps in ms."""
        if topic in self.topic_schemas:
            typed = self.topic_schemas[topic]
        else:  # a topic named by the topic column: checked when first met
            typed = producer.topic_schema(topic)
            check_schema(self.schema, self.topic, {topic: typed})
            self.topic_schemas[topic] = typed
        payload = rows.select(taken_columns(rows.column_names, typed))
        if TIMESTAMP in payload.column_names and \
                pa.types.is_timestamp(payload.schema.field(TIMESTAMP).type):
            ts = payload.column(TIMESTAMP).cast(pa.timestamp("ms", tz="UTC"))
            payload = payload.set_column(payload.schema.get_field_index(TIMESTAMP),
                                         TIMESTAMP, ts)
        return payload

    def write(self, iterator) -> SparklogCommitMessage:
        """Send every batch of this task and wait for all acknowledgements."""
        from ..clients.producer import Producer

        counts: dict = {}
        futures = []
        with Producer(self.servers, **self.configs) as producer:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                for topic, partition, rows in self._groups(batch):
                    futures.append(producer.send_batch(
                        topic, self._payload(producer, topic, rows), partition=partition))
            producer.flush()
            for future in futures:
                for meta in future.get():
                    key = (meta.topic, meta.partition)
                    counts[key] = counts.get(key, 0) + meta.record_count
        return SparklogCommitMessage(counts)


def _written(messages) -> int:
    return sum(sum(m.counts.values()) for m in messages if m is not None)


class SparklogWriter(_SparklogSink, DataSourceArrowWriter):
    """Batch writer of ``format("sparklog")`` (see the module docstring)."""

    def __init__(self, options: dict, schema, overwrite: bool):
        if overwrite:
            raise InvalidArgumentError(
                "save mode overwrite is not supported: a topic is an append-only log "
                "(use mode('append'))")
        super().__init__(options, schema)

    def commit(self, messages) -> None:
        """Every task succeeded; its records are already in the log."""
        log.info("wrote %d records with format('sparklog')", _written(messages))

    def abort(self, messages) -> None:
        """A task failed: records of successful tasks stay in the log (a log cannot
        take records back), as with Spark's Kafka sink."""
        log.warning("write with format('sparklog') aborted; %d records of finished tasks "
                    "remain in the log", _written(messages))


class SparklogStreamWriter(_SparklogSink, DataSourceStreamArrowWriter):
    """Streaming sink of ``writeStream.format("sparklog")``: each micro-batch is written
    as a batch write is, at least once (see the module docstring). ``overwrite`` (the
    ``complete`` output mode) appends, as Spark's Kafka sink does."""

    def __init__(self, options: dict, schema, overwrite: bool):
        super().__init__(options, schema)

    def commit(self, messages, batchId: int) -> None:
        """Every task of micro-batch ``batchId`` succeeded; its records are in the log.
        Spark records the micro-batch in the checkpoint after this."""
        log.info("micro-batch %d: wrote %d records with format('sparklog')", batchId,
                 _written(messages))

    def abort(self, messages, batchId: int) -> None:
        """A task of micro-batch ``batchId`` failed: the records of its finished tasks
        stay in the log, and the micro-batch is written again when the query reruns
        it (at least once, as with Spark's Kafka sink)."""
        log.warning("micro-batch %d with format('sparklog') aborted; %d records of "
                    "finished tasks remain in the log", batchId, _written(messages))
