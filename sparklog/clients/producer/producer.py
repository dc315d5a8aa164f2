"""The Producer: Kafka's producer API over sparklog's brokers.

``send()`` picks the partition (explicit, murmur2 of the key, or sticky for null keys),
appends the record to the accumulator's columnar batch and returns a future; the
:class:`~.sender.Sender` thread turns batches into frames and Produce requests.
``send_batch()`` takes whole Arrow tables or pandas frames: partitioning, framing and
sending stay columnar (no per-row Python).

Configuration uses Kafka's names with ``_`` for ``.`` (``linger_ms``, ``batch_size``,
``buffer_memory``, ``max_block_ms``...), as kafka-python does; unknown names raise
InvalidConfigError.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ...errors import (
    BrokerNotAvailableError,
    InvalidArgumentError,
    InvalidConfigError,
    RecordTooLargeError,
    RequestTimedOutError,
    SchemaMismatchError,
    SparklogError,
    UnknownTopicOrPartitionError,
)
from ...format.frame import (
    HEADER_TYPE,
    RAW_SCHEMA,
    TIMESTAMP_COLUMN,
    TIMESTAMP_TYPE,
    encode_frame,
    raw_batch,
    to_record_batch,
)
from ...format.nullability import check_not_null, constrained_fields, row_violation
from ...metadata.topic import validate_partition, validate_topic_name
from ...protocol.apis import ACKS_ALL, ApiKey
from ...protocol.codec import raise_for_error
from ...security.client import CLIENT_SECURITY_DEFAULTS, ClientSecurity
from ..network.network import NetworkClient
from ..network.settings import client_config
from .accumulator import HEADER_OVERHEAD, RECORD_OVERHEAD, RecordAccumulator
from .idempotence import IdempotenceManager
from .partitioner import DefaultPartitioner
from .sender import Sender

log = logging.getLogger(__name__)

_ACKS = {0: 0, 1: 1, -1: ACKS_ALL, "all": ACKS_ALL, "-1": ACKS_ALL, "0": 0, "1": 1}
_CLIENT_IDS = itertools.count(1)
#: target size of the frames send_batch builds
FRAME_TARGET = 1 << 20
#: frames per partition a broker remembers for an idempotent producer (Kafka's 5)
IDEMPOTENT_MAX_IN_FLIGHT = 5

DEFAULT_CONFIG = {
    "client_id": None,
    "acks": 1,
    "compression_type": "none",
    "batch_size": 16384,
    "linger_ms": 5,
    "buffer_memory": 32 * 1024 * 1024,
    "max_block_ms": 60000,
    "max_request_size": 1048576,
    "retries": 2147483647,
    "retry_backoff_ms": 100,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1000,
    "request_timeout_ms": 30000,
    "delivery_timeout_ms": 120000,
    "max_in_flight_requests_per_connection": 5,
    "enable_idempotence": False,
    "key_serializer": None,
    "value_serializer": None,
    "partitioner": None,
    "metadata_max_age_ms": 300000,
    **CLIENT_SECURITY_DEFAULTS,  # security_protocol, ssl_*, sasl_*
}


class BatchMetadata(NamedTuple):
    """Where one frame of a :meth:`Producer.send_batch` call landed: records
    ``base_offset`` to ``base_offset + record_count - 1`` of the partition."""

    topic: str
    partition: int
    base_offset: int
    record_count: int


class BatchFuture:
    """Future of a :meth:`Producer.send_batch` call: ``get(timeout)`` returns the list
    of :class:`BatchMetadata` (one per frame) or raises the first delivery error."""

    def __init__(self, parts: list):
        self._parts = parts  # (ProduceRequestResult, record_count)

    @property
    def is_done(self) -> bool:
        """True once every frame is acknowledged or failed."""
        return all(r.event.is_set() for r, _ in self._parts)

    def get(self, timeout: float | None = None) -> list[BatchMetadata]:
        """Wait for every frame; see the class docstring."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for result, count in self._parts:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.event.wait(left):
                raise RequestTimedOutError(
                    f"batch for {result.topic}-{result.partition} not acknowledged within "
                    f"{timeout} s")
            for piece, n in result.leaves(count):  # a frame split into pieces: each
                if piece.error is not None:
                    raise piece.error
                out.append(BatchMetadata(piece.topic, piece.partition, piece.base_offset, n))
        return out


class _Topic(NamedTuple):
    """What the producer knows of a topic (from Metadata and DescribeConfigs)."""

    num_partitions: int
    schema: pa.Schema | None
    #: top-level fields of a typed topic's schema that are, or hold, not-null fields
    not_null: list
    #: the largest frame the producer sends: min(max.request.size, max.message.bytes,
    #: segment.bytes)
    frame_limit: int
    #: the limits named, for error messages
    limits: str


class Producer:
    """A thread-safe producer; see the module docstring. Use as a context manager or
    call :meth:`close`."""

    def __init__(self, bootstrap_servers=None, **configs):
        cfg = self.config = client_config(
            "producer", DEFAULT_CONFIG, configs,
            positive=("batch_size", "buffer_memory", "max_request_size",
                      "max_in_flight_requests_per_connection", "request_timeout_ms",
                      "delivery_timeout_ms"),
            non_negative=("linger_ms", "max_block_ms", "retries", "retry_backoff_ms"))
        if cfg["acks"] not in _ACKS:
            raise InvalidConfigError(f"acks must be 0, 1 or 'all', got {cfg['acks']!r}")
        self._acks = _ACKS[cfg["acks"]]
        codec = (cfg["compression_type"] or "none").lower()
        if codec not in ("none", "lz4", "zstd"):
            raise InvalidConfigError(
                f"compression_type must be none, lz4 or zstd, got {cfg['compression_type']!r}")
        if cfg["enable_idempotence"] and self._acks == 0:
            raise InvalidConfigError("enable_idempotence requires acks=1 or 'all', not 0")
        if cfg["enable_idempotence"] and cfg["max_in_flight_requests_per_connection"] > \
                IDEMPOTENT_MAX_IN_FLIGHT:
            raise InvalidConfigError(
                "max_in_flight_requests_per_connection must be at most "
                f"{IDEMPOTENT_MAX_IN_FLIGHT} with enable_idempotence (the broker remembers "
                f"an idempotent producer's last {IDEMPOTENT_MAX_IN_FLIGHT} frames)")
        self.client_id = cfg["client_id"] or f"producer-{next(_CLIENT_IDS)}"
        self._key_serializer = cfg["key_serializer"]
        self._value_serializer = cfg["value_serializer"]
        self._max_request_size = cfg["max_request_size"]
        self._compression = codec
        self._partitioner = cfg["partitioner"] or DefaultPartitioner(cfg["batch_size"])
        self._topics: dict[str, _Topic] = {}
        self._closed = False
        self._client = NetworkClient(
            bootstrap_servers, client_id=self.client_id,
            request_timeout_ms=cfg["request_timeout_ms"],
            max_in_flight=cfg["max_in_flight_requests_per_connection"],
            retry_backoff_ms=cfg["retry_backoff_ms"],
            metadata_max_age_ms=cfg["metadata_max_age_ms"],
            reconnect_backoff_ms=cfg["reconnect_backoff_ms"],
            reconnect_backoff_max_ms=cfg["reconnect_backoff_max_ms"],
            security=ClientSecurity.from_configs(cfg))
        self._accumulator = RecordAccumulator(
            batch_size=cfg["batch_size"], linger_ms=cfg["linger_ms"],
            buffer_memory=cfg["buffer_memory"], max_block_ms=cfg["max_block_ms"],
            max_request_size=cfg["max_request_size"],
            max_in_flight=cfg["max_in_flight_requests_per_connection"],
            frames_per_request=1 if cfg["enable_idempotence"] else None)
        idempotence = None
        try:
            self._client.refresh_metadata([])  # fail fast if no broker is reachable
            if cfg["enable_idempotence"]:
                idempotence = IdempotenceManager(self._client)
                idempotence.init_if_needed()
        except BaseException:
            self._client.close()
            raise
        self._idempotence = idempotence
        self._sender = Sender(
            self._client, self._accumulator, acks=self._acks, retries=cfg["retries"],
            retry_backoff_ms=cfg["retry_backoff_ms"],
            request_timeout_ms=cfg["request_timeout_ms"],
            delivery_timeout_ms=cfg["delivery_timeout_ms"], compression_type=codec,
            idempotence=idempotence, topic_of=self._topic_of, client_id=self.client_id,
            refresh_topics=self._refresh_topics,
            metadata_max_age_ms=cfg["metadata_max_age_ms"])
        self._sender.start()

    # --- topic metadata -------------------------------------------------------------
    def _topic(self, topic: str) -> _Topic:
        """The topic's metadata, loaded on first use with Metadata's
        ``allow_auto_topic_creation`` set, as Kafka's producer asks: a broker with
        ``auto.create.topics.enable=true`` (the default) creates a missing topic with its
        defaults (``num.partitions``...) when the principal may Create it. While the
        topic is unknown (not created) or no broker answers (one is restarting) the load
        is retried for up to ``max_block_ms``, as Kafka's send() waits for metadata; then
        UnknownTopicOrPartitionError says the topic was not present in metadata."""
        info = self._topics.get(topic)
        if info is None:
            max_block_ms = self.config["max_block_ms"]
            deadline = time.monotonic() + max_block_ms / 1000.0
            while True:
                try:
                    info = self._topics[topic] = self._load_topic(topic, auto_create=True)
                    return info
                except UnknownTopicOrPartitionError as exc:
                    if time.monotonic() >= deadline:
                        raise UnknownTopicOrPartitionError(
                            f"Topic {topic} not present in metadata after {max_block_ms} ms "
                            f"(max_block_ms): {exc}; the broker creates a missing topic only "
                            "with auto.create.topics.enable=true and for a principal allowed "
                            "to Create it") from None
                except (BrokerNotAvailableError, RequestTimedOutError):
                    if time.monotonic() >= deadline:
                        raise
                time.sleep(self.config["retry_backoff_ms"] / 1000.0)
        return info

    def _load_topic(self, topic: str, *, auto_create: bool = False) -> _Topic:
        """Partition count, schema and size limits of ``topic`` from the broker (asking
        it to create a missing topic when ``auto_create``); sets the accumulator's batch
        limit for the topic."""
        validate_topic_name(topic)
        meta = self._client.topic_info(topic, refresh=True, auto_create=auto_create)
        schema, configs = None, {}
        resp = self._client.request(ApiKey.DESCRIBE_CONFIGS, {"topics": [topic]})
        for t in resp["topics"]:
            raise_for_error(t, f"topic {topic!r}")
            if t.get("schema"):
                schema = pa.ipc.read_schema(pa.py_buffer(t["schema"]))
            configs = t.get("configs", {})
        limits = {"max_request_size": self._max_request_size}
        for key in ("max.message.bytes", "segment.bytes"):
            if configs.get(key):
                limits[f"the topic's {key}"] = int(configs[key])
        frame_limit = min(limits.values())
        info = _Topic(meta.num_partitions, schema, constrained_fields(schema), frame_limit,
                      ", ".join(f"{k}={v}" for k, v in limits.items()))
        # a batch is full when its records' sizes (upper bounds of what each adds to a
        # frame) plus the fixed cost of a frame of this topic reach the smaller of
        # batch.size and the frame limit
        target = min(self.config["batch_size"], frame_limit)
        self._accumulator.set_batch_limit(topic, target - _frame_overhead(schema,
                                                                         self._compression))
        return info

    def _refresh_topics(self) -> None:
        """Reload the metadata of every topic sent to (partition counts grow, schemas
        and max.message.bytes change); called by the sender every metadata_max_age_ms."""
        for topic in list(self._topics):
            try:
                self._topics[topic] = self._load_topic(topic)
            except SparklogError as exc:  # deleted: looked up on next send
                log.info("metadata of topic %r not refreshed: %s", topic, exc)
                if not isinstance(exc, (BrokerNotAvailableError, RequestTimedOutError)):
                    self._topics.pop(topic, None)  # unreachable: the old metadata stays

    def _topic_of(self, topic: str) -> _Topic:
        info = self._topics.get(topic)
        return info if info is not None else self._topic(topic)

    def topic_schema(self, topic: str):
        """The Arrow schema of a typed topic (None for a raw topic)."""
        return self._topic(topic).schema

    def partitions_for(self, topic: str) -> set[int]:
        """Partition numbers of ``topic`` (refreshing its metadata)."""
        self._topics.pop(topic, None)
        return set(range(self._topic(topic).num_partitions))

    # --- send -----------------------------------------------------------------------
    def send(self, topic: str, value=None, key=None, headers=None, partition=None,
             timestamp=None, timestamp_ms=None):
        """Send one record; returns a future of its RecordMetadata (see module doc).

        ``value``/``key``: bytes (str is UTF-8 encoded; other types need a
        value/key_serializer); for a typed topic ``value`` is a dict of the row's columns.
        ``headers``: list of ``(str, bytes)``. ``timestamp`` (or kafka-python's name
        ``timestamp_ms``): the record's CreateTime, ms since the epoch (default now).
        Blocks up to ``max_block_ms`` when the buffer is full.
        """
        if self._closed:
            raise InvalidArgumentError("send() on a closed producer")
        if timestamp_ms is not None:
            if timestamp is not None and timestamp != timestamp_ms:
                raise InvalidArgumentError("send(): timestamp and timestamp_ms differ; give one")
            timestamp = timestamp_ms
        info = self._topics.get(topic)
        if info is None:
            info = self._topic(topic)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if info.schema is None:
            if value.__class__ is not bytes and value is not None:
                value = _to_bytes(value, "value", topic)
            size = RECORD_OVERHEAD + (len(value) if value is not None else 0)
        else:
            if not isinstance(value, dict):
                raise SchemaMismatchError(
                    f"topic {topic!r} is typed: value must be a dict of the columns "
                    f"{info.schema.names}, got {type(value).__name__}")
            if info.not_null:
                field = row_violation(value, info.not_null)
                if field is not None:
                    raise SchemaMismatchError(
                        f"record {_preview(value)} for topic {topic!r}: field {field!r} is "
                        f"declared not null but is null")
            size = RECORD_OVERHEAD + _row_size(value)
        if key is not None:
            if key.__class__ is not bytes:
                key = _to_bytes(key, "key", topic)
            size += len(key)
        if headers is not None:
            headers = _check_headers(headers, topic)
            size += sum(HEADER_OVERHEAD + len(k) + len(v or b"") for k, v in headers)
        if size - RECORD_OVERHEAD > info.frame_limit and self._compression == "none":
            # its frame is larger still (a compressed one may fit: the sender checks)
            raise RecordTooLargeError(
                f"record of {size - RECORD_OVERHEAD} bytes for topic {topic!r} is larger "
                f"than the largest frame the producer may send: {info.frame_limit} bytes "
                f"({info.limits})")
        if partition is None:
            if key is None:
                partition = self._partitioner.sticky_partition(topic, info.num_partitions, size)
            else:
                partition = self._partitioner.partition_for_key(key, info.num_partitions)
        else:
            if isinstance(partition, int) and partition >= info.num_partitions:
                self._topics.pop(topic, None)  # the topic may have grown: look again
                info = self._topic(topic)
            validate_partition(partition, info.num_partitions, topic)
        if timestamp is None:
            timestamp = time.time_ns() // 1000000
        elif isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise InvalidArgumentError(
                f"timestamp must be an int (ms since the epoch), got {type(timestamp).__name__}")
        elif not -(2 ** 63) <= timestamp < 2 ** 63:  # refused here, not by the batch's frame
            raise InvalidArgumentError(
                f"timestamp {timestamp} does not fit in 64 bits (ms since the epoch)")
        return self._accumulator.append((topic, partition), timestamp, key, value, headers,
                                        size)

    def send_batch(self, topic: str, data, *, partition: int | None = None,
                   timestamp: int | None = None) -> BatchFuture:
        """Send many records at once from a pyarrow Table/RecordBatch or a pandas
        DataFrame; returns a :class:`BatchFuture`.

        Raw topics take columns ``value`` (required), ``key``, ``headers`` and
        ``timestamp`` (ms or an Arrow timestamp); rows with a key go to
        ``murmur2(key) % partitions`` (computed vectorized), the others to one sticky
        partition. Typed topics take the topic's schema (plus an optional ``timestamp``
        column). ``partition`` sends everything to one partition; ``timestamp`` sets
        the timestamp of rows that have none.
        """
        if self._closed:
            raise InvalidArgumentError("send_batch() on a closed producer")
        info = self._topic(topic)
        table = _to_table(data)
        if table.num_rows == 0:
            return BatchFuture([])
        ts = _timestamps(table, timestamp)
        if "timestamp" in table.column_names:
            table = table.drop_columns(["timestamp"])
        if info.schema is None:
            table = _raw_table(table, topic)
        else:
            if info.not_null:
                check_not_null(table, info.not_null, f"send_batch to topic {topic!r}")
            table = pa.Table.from_batches([to_record_batch(table, info.schema)]) \
                if table.schema != info.schema else table
        table = table.append_column(pa.field(TIMESTAMP_COLUMN, TIMESTAMP_TYPE, False), ts)
        if partition is not None:
            validate_partition(partition, info.num_partitions, topic)
            groups: list[tuple[int | None, pa.Table]] = [(partition, table)]
        elif info.schema is None and info.num_partitions > 1 and \
                table.column("key").null_count < table.num_rows:
            groups = self._split_by_key(topic, table, info.num_partitions)
        else:
            groups = [(None, table)]
        # frames of about 1 MiB (the broker appends those fastest), at most the frame
        # limit; several of them travel in one request, up to max_request_size
        limit = min(info.frame_limit, FRAME_TARGET) - _frame_overhead(info.schema,
                                                                      self._compression)
        parts = []
        for part, rows in groups:
            for chunk in _chunks(rows, limit):
                p = part if part is not None else self._partitioner.sticky_partition(
                    topic, info.num_partitions, self._partitioner.batch_size)
                # the frame is built here, in the caller's thread, while the sender
                # thread and the broker work on the previous one (which splits it if
                # it came out larger than the frame limit)
                frame = encode_frame(chunk, compression=self._compression)
                result = self._accumulator.append_frame((topic, p), frame, chunk.num_rows)
                parts.append((result, chunk.num_rows))
        return BatchFuture(parts)

    def _split_by_key(self, topic, table, num_partitions):
        keys = table.column("key")
        parts = self._partitioner.partitions_for_keys(keys, num_partitions)
        if (parts < 0).any():  # null keys: one sticky partition for this call
            parts[parts < 0] = self._partitioner.sticky_partition(
                topic, num_partitions, self._partitioner.batch_size)
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [len(parts)]])
        table = table.take(pa.array(order))
        return [(int(sorted_parts[s]), table.slice(s, e - s)) for s, e in zip(starts, ends)]

    # --- flush / close --------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Send every buffered record now and wait until all are acknowledged or failed
        (RequestTimedOutError after ``timeout`` seconds)."""
        self._accumulator.begin_flush()
        try:
            if not self._accumulator.await_complete(timeout):
                raise RequestTimedOutError(
                    f"flush: {self._accumulator.incomplete} records not acknowledged "
                    f"within {timeout} s")
        finally:
            self._accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered (waiting up to ``timeout`` seconds; 0: drop it), stop the
        sender and close the connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if timeout == 0:
            self._sender.force_close()
        else:
            self._sender.initiate_close()
        self._sender.join(timeout)
        if self._sender.is_alive():
            self._sender.force_close()
            self._sender.join(5)
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def metrics(self) -> dict:
        """A few counters: buffered records, producer id and epoch."""
        idem = self._idempotence
        return {"incomplete_records": self._accumulator.incomplete,
                "producer_id": idem.producer_id if idem else -1,
                "producer_epoch": idem.producer_epoch if idem else -1}

    def bootstrap_connected(self) -> bool:
        """True while a connection to a broker of the cluster is open (kafka-python's
        ``bootstrap_connected()``)."""
        return self._client.bootstrap_connected()

    @property
    def bootstrap_servers(self) -> list[str]:
        """The bootstrap addresses as ``host:port`` strings."""
        return [f"{h}:{p}" for h, p in self._client.bootstrap]


# --- helpers ------------------------------------------------------------------------------


def _to_bytes(value, what: str, topic: str) -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidArgumentError(
        f"record {what} for topic {topic!r} must be bytes or str (or configure a "
        f"{what}_serializer), got {type(value).__name__}")


def _check_headers(headers, topic: str) -> list:
    out = []
    try:
        for k, v in headers:
            if not isinstance(k, str):
                raise TypeError(f"header key {k!r} is not a str")
            if v is not None and v.__class__ is not bytes:
                v = _to_bytes(v, "header value", topic)
            out.append((k, v))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"headers for topic {topic!r} must be a list of (str, bytes) pairs: {exc}") \
            from None
    return out


def _to_table(data) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_dict"):
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaMismatchError(f"DataFrame cannot be converted to Arrow: {exc}") \
                from None
    raise InvalidArgumentError(
        f"send_batch takes a pyarrow Table/RecordBatch or a pandas DataFrame, "
        f"got {type(data).__name__}")


def _timestamps(table: pa.Table, default: int | None) -> pa.ChunkedArray:
    now = default if default is not None else time.time_ns() // 1000000
    if "timestamp" not in table.column_names:
        return pa.chunked_array([pa.array(np.full(table.num_rows, now, np.int64))
                                 .cast(TIMESTAMP_TYPE)])
    col = table.column("timestamp")
    try:
        if pa.types.is_integer(col.type):
            col = col.cast(pa.int64()).cast(TIMESTAMP_TYPE)
        else:
            col = col.cast(TIMESTAMP_TYPE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(f"column 'timestamp' is not a timestamp: {exc}") from None
    if col.null_count:
        import pyarrow.compute as pc

        col = pc.fill_null(col, pa.scalar(now, pa.int64()).cast(TIMESTAMP_TYPE))
    return col


def _raw_table(table: pa.Table, topic: str) -> pa.Table:
    names = table.column_names
    if "value" not in names:
        raise SchemaMismatchError(
            f"send_batch to raw topic {topic!r} needs a 'value' column, got {names}")
    extra = set(names) - {"key", "value", "headers"}
    if extra:
        raise SchemaMismatchError(
            f"send_batch to raw topic {topic!r}: unexpected columns {sorted(extra)} "
            "(raw topics take key, value, headers, timestamp)")
    n = table.num_rows
    cols = []
    for field in RAW_SCHEMA:
        if field.name in names:
            col = table.column(field.name)
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SchemaMismatchError(
                    f"send_batch to {topic!r}: column {field.name!r} of type {col.type} "
                    f"cannot become {field.type}: {exc}") from None
        else:
            col = pa.chunked_array([pa.nulls(n, field.type if field.name != "headers"
                                             else HEADER_TYPE)])
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=RAW_SCHEMA)


_OVERHEADS: dict = {}


def _frame_overhead(schema: pa.Schema | None, codec: str) -> int:
    """Bytes of a frame of ``schema`` beyond its records' sizes (as ``send()`` counts
    them): the encoded size of a frame of one empty record, plus padding room."""
    key = (schema, codec)
    size = _OVERHEADS.get(key)
    if size is None:
        rows = raw_batch([b""]) if schema is None else \
            pa.RecordBatch.from_pylist([{}], schema=schema)
        size = len(encode_frame(rows, timestamps=[0], compression=codec)) + \
            8 * (len(schema or RAW_SCHEMA) + 8)
        if len(_OVERHEADS) < 256:
            _OVERHEADS[key] = size
    return size


def _row_size(row: dict) -> int:
    """An upper bound of the bytes a typed row adds to a frame (beyond RECORD_OVERHEAD)."""
    return sum(_value_size(v) for v in row.values())


def _value_size(value) -> int:
    if value is None or value.__class__ in (int, float, bool):
        return 9
    if isinstance(value, str):
        return 9 + (len(value) if value.isascii() else len(value.encode("utf-8", "replace")))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return 9 + len(value)
    if isinstance(value, dict):  # a struct or a map
        return 9 + sum(_value_size(k) + _value_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 9 + sum(_value_size(v) for v in value)
    return 17  # decimals, dates, timestamps


def _preview(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...}"


def _chunks(table: pa.Table, limit: int):
    """Slices of ``table`` of at most about ``limit`` encoded bytes each (at least one
    row); a variable-width or null column costs 4 offset bytes per row in the frame."""
    n = table.num_rows
    per_row = max(1, table.nbytes // max(n, 1) + 4 * table.num_columns)
    rows = max(1, limit // per_row)
    for start in range(0, n, rows):
        yield table.slice(start, rows)


__all__ = ["Producer", "BatchFuture", "BatchMetadata"]
