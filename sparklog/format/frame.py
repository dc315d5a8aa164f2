"""Encoding and decoding of frames: a 61-byte header plus an Arrow IPC body.

The body is an Arrow IPC *stream* holding the schema and exactly one record batch, so a
frame (and therefore a segment) decodes with no outside metadata. Its columns are the
topic's record columns (:data:`RAW_SCHEMA` for raw topics, the declared schema for typed
topics) followed by :data:`TIMESTAMP_COLUMN` and, for compacted data only,
:data:`OFFSET_DELTA_COLUMN`. Buffers are compressed with Arrow IPC's own lz4/zstd codecs.

A segment holds a second frame kind, told apart by the header's ``magic``: a Kafka
record batch (magic 2, :mod:`~sparklog.format.kafka_batch`), stored as a Kafka client
sent it. Validation, scanning and stamping are the same for both (the header layout is
the same); :meth:`Frame.batch` gives a Kafka batch's records as the raw topic's
columns (:data:`RAW_BODY_SCHEMA`), the same values an Arrow frame of the same records
holds, and :meth:`Frame.offsets` their offsets, so every reader of frames reads both.
"""

from __future__ import annotations

import array
import struct
import time
from dataclasses import dataclass, field
from typing import Iterator

import crc32c as _crc32c
import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import (
    CorruptRecordError,
    DataLossError,
    InvalidArgumentError,
    InvalidRecordError,
    RecordTooLargeError,
)
from . import rawipc
from .header import (
    ATTRIBUTES,
    BASE_OFFSET,
    BASE_OFFSET_POS,
    CODEC_IDS,
    CONTROL_BIT,
    CRC,
    CRC_START,
    EXPLICIT_OFFSETS_BIT,
    HEADER_SIZE,
    KAFKA_MAGIC,
    LEADER_EPOCH,
    LEADER_EPOCH_POS,
    LOG_OVERHEAD,
    MAGIC,
    MAGICS,
    MAX_TIMESTAMP,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PRODUCER_FIELDS,
    PRODUCER_ID,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    FrameHeader,
    unpack_header,
)
from .ipc import IPC_EOS, check_ipc_body
from .kafka_batch import records_columns

TIMESTAMP_COLUMN = "__timestamp"
OFFSET_DELTA_COLUMN = "__offset_delta"
RESERVED_COLUMNS = frozenset({TIMESTAMP_COLUMN, OFFSET_DELTA_COLUMN})
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
#: Record columns of a raw topic (Kafka's record shape; the timestamp is added per frame).
RAW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
])

# hot path of the broker's stamp_run: the two stamped fields' structs, built once
_I64 = struct.Struct(">" + BASE_OFFSET.code)
_I32 = struct.Struct(">" + LEADER_EPOCH.code)


def _compute():
    """pyarrow.compute, imported on first use (processes that only plan need none)."""
    import pyarrow.compute as pc

    return pc


def crc32c(data, value: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``value``."""
    return _crc32c.crc32c(data, value)


#: the most records :meth:`Frame.raw_columns` reads in Python (a larger frame is read by
#: pyarrow, whose vectorised decoding is then the faster)
RAW_COLUMNS_MAX = 256


@dataclass
class Frame:
    """One decoded frame: its header and a zero-copy view of its body (an Arrow IPC
    stream, or a Kafka batch's records section when ``header.magic`` is 2)."""

    header: FrameHeader
    body: pa.Buffer
    #: a Kafka batch's records once decoded: (batch, offset deltas)
    _kafka: tuple | None = field(default=None, repr=False, compare=False)

    def batch(self) -> pa.RecordBatch:
        """The body's record batch (zero-copy for uncompressed Arrow bodies). Raises
        CorruptRecordError if its row count differs from the header's record count.
        A Kafka batch's records come as a raw topic's body columns
        (:data:`RAW_BODY_SCHEMA`: key, value, headers, ``__timestamp`` with each
        record's own timestamp), the values an Arrow frame of the same records holds."""
        if self.header.magic == KAFKA_MAGIC:
            return self._kafka_records()[0]
        batch = decode_body(self.body)
        if batch.num_rows != self.header.record_count:
            raise CorruptRecordError(
                f"frame at offset {self.header.base_offset}: header says "
                f"{self.header.record_count} records, body holds {batch.num_rows}")
        return batch

    def raw_columns(self) -> tuple | None:
        """(keys, values, timestamps) as Python lists, read without pyarrow, when the
        body is a raw topic's batch of the layout :mod:`~sparklog.format.rawipc` writes
        (no headers, uncompressed: what a producer sends) and holds at most
        :data:`RAW_COLUMNS_MAX` records; None otherwise (read :meth:`batch`). The same
        checks as :meth:`batch`: anything Arrow's full validation would refuse is None
        here, and :meth:`batch` then raises."""
        n = self.header.record_count
        if n > RAW_COLUMNS_MAX or self.header.explicit_offsets \
                or self.header.magic != MAGIC:
            return None
        data = self.body.to_pybytes()
        head = _schema_message(RAW_BODY_SCHEMA)
        if not data.startswith(head):
            return None
        return rawipc.record_batch_columns(RAW_BODY_SCHEMA, data, len(head), n)

    def offsets(self, batch: pa.RecordBatch | None = None) -> pa.Array:
        """Offsets of the frame's records (implicit unless the explicit-offsets bit): the
        one place every reader takes them from.

        Implicit offsets are ``base_offset + row``. Explicit ones (compacted data, the
        log cleaner's frames) are ``base_offset`` plus the body's
        :data:`OFFSET_DELTA_COLUMN`, which must be an int32 column without nulls whose
        deltas strictly increase within ``[0, last_offset_delta]``. A frame that breaks
        this (the column missing, a negative, repeated, decreasing or too large delta:
        only a forged frame stored before the broker refused them could) cannot give its
        records offsets that stay in its own span and in order: it raises DataLossError
        naming the frame, the field and its offsets ``[base_offset, next_offset)``. The
        frame's span comes from its header alone, so every record after it is read at
        its offset: a consumer seeks past the range, the Spark Python reader with
        ``failOnDataLoss=false`` skips it. ``batch``: the body's batch when the caller
        decoded it already."""
        header = self.header
        base = header.base_offset
        if not header.explicit_offsets:
            return offset_range(base, header.record_count)
        if header.magic == KAFKA_MAGIC:  # each record's own offset delta, checked
            return _compute().add(self._kafka_records()[1], pa.scalar(base, pa.int64()))
        if batch is None:
            batch = self.batch()
        names = batch.schema.names
        problem = None
        if OFFSET_DELTA_COLUMN not in names:
            problem = f"the body has no {OFFSET_DELTA_COLUMN} column"
        else:
            column = batch.column(names.index(OFFSET_DELTA_COLUMN))
            if column.type != pa.int32():
                problem = f"its {OFFSET_DELTA_COLUMN} column is of type {column.type}"
            elif column.null_count:
                problem = f"its {OFFSET_DELTA_COLUMN} column has nulls"
            else:
                deltas = column.cast(pa.int64())
                problem = _explicit_deltas_problem(deltas, header.last_offset_delta)
        if problem is not None:
            raise DataLossError(
                f"frame at offset {base}: explicit-offsets bit set but {problem}: its "
                f"records cannot be given offsets, so offsets [{base}, "
                f"{header.next_offset}) cannot be read",
                first_offset=base, end_offset=header.next_offset)
        return _compute().add(deltas, pa.scalar(base, pa.int64()))

    def _kafka_records(self) -> tuple[pa.RecordBatch, pa.Array]:
        """A Kafka batch's records, decoded once: (the raw topic's body batch, the
        records' offset deltas as int64). The deltas must strictly increase within
        ``[0, last_offset_delta]`` (hence be ``0..n-1`` when the records fill the
        batch's span), as an Arrow frame's explicit ones: DataLossError otherwise."""
        if self._kafka is None:
            h = self.header
            where = f"Kafka record batch at offset {h.base_offset}"
            columns, deltas = records_columns(h, self.body, where=where)
            raw = raw_batch(columns.values, keys=columns.keys, headers=columns.headers)
            ts = pa.array(columns.timestamps, pa.int64()).view(TIMESTAMP_TYPE)
            batch = pa.RecordBatch.from_arrays(raw.columns + [ts], schema=RAW_BODY_SCHEMA)
            offsets = pa.array(deltas, pa.int64())
            # (n strictly increasing deltas in [0, n - 1] are 0..n-1: base + row)
            problem = _explicit_deltas_problem(offsets, h.last_offset_delta)
            if problem is not None:
                raise DataLossError(
                    f"{where}: {problem} ({h.record_count} records, last offset delta "
                    f"{h.last_offset_delta}): its records cannot be given offsets, so "
                    f"offsets [{h.base_offset}, {h.next_offset}) cannot be read",
                    first_offset=h.base_offset, end_offset=h.next_offset)
            self._kafka = (batch, offsets)
        return self._kafka


def _explicit_deltas_problem(deltas: pa.Array, last_offset_delta: int) -> str | None:
    """What is wrong with a frame's explicit offset deltas (int64, no nulls), or None
    when they strictly increase within ``[0, last_offset_delta]``."""
    values = deltas.to_numpy(zero_copy_only=False)
    if not len(values):
        return None
    first, last = int(values[0]), int(values[-1])
    if first < 0:
        return f"its first offset delta is {first} (negative)"
    if len(values) > 1:
        steps = values[1:] - values[:-1]
        bad = int((steps <= 0).argmax())
        if steps[bad] <= 0:
            return (f"its offset deltas do not increase: record {bad + 1} has delta "
                    f"{int(values[bad + 1])} after {int(values[bad])}")
    if last > last_offset_delta:
        return (f"its last record's offset delta {last} is beyond the header's "
                f"last_offset_delta {last_offset_delta}")
    return None


_IOTA: pa.Array | None = None


def _iota(n: int) -> pa.Array:
    # built from raw int64 bytes: pa.array() on a sequence imports pandas (~0.2 s)
    values = array.array("q", range(n))
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(values)])


#: below this many offsets, :func:`offset_range` fills the buffer in Python: a compute
#: kernel's dispatch costs more than a few thousand int64 writes
_SMALL_RANGE = 4096


def offset_range(first: int, count: int) -> pa.Array:
    """int64 array ``first, first + 1, ..., first + count - 1`` (vectorised)."""
    global _IOTA
    if count <= _SMALL_RANGE:
        values = array.array("q", range(first, first + count))
        return pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(values)])
    if _IOTA is None or count > len(_IOTA):
        _IOTA = _iota(max(count, 1 << 16, 2 * len(_IOTA) if _IOTA is not None else 0))
    return _compute().add(_IOTA.slice(0, count), pa.scalar(first, pa.int64()))


def _normalise_compression(compression: str | None) -> str:
    if compression is not None and not isinstance(compression, str):
        raise InvalidArgumentError(
            f"compression must be a str (none, lz4, zstd), got {type(compression).__name__}")
    name = (compression or "none").lower()
    if name in ("uncompressed", "producer"):
        name = "none"
    if name not in CODEC_IDS:
        raise InvalidArgumentError(
            f"unknown compression type {compression!r}: expected one of none, lz4, zstd")
    return name


_INT_RANGES = {
    "base_offset": 64, "leader_epoch": 32, "producer_id": 64, "producer_epoch": 16,
    "base_sequence": 32,
}


def _check_header_int(name: str, value) -> None:
    bits = _INT_RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__}")
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise InvalidArgumentError(f"{name} {value} does not fit in a signed {bits}-bit field")


def _frame_view(buf, pos) -> memoryview:
    """memoryview of ``buf`` after checking the argument types (InvalidArgumentError)."""
    if isinstance(pos, bool) or not isinstance(pos, int) or pos < 0:
        raise InvalidArgumentError(f"pos must be an int >= 0, got {pos!r}")
    if isinstance(buf, str):
        raise InvalidArgumentError("frame data must be bytes-like, got str")
    try:
        return memoryview(buf)
    except TypeError:
        raise InvalidArgumentError(
            f"frame data must be bytes-like, got {type(buf).__name__}") from None


def to_record_batch(data, schema: pa.Schema | None = None) -> pa.RecordBatch:
    """Coerce a pyarrow Table/RecordBatch, pandas DataFrame or list of dicts into one
    RecordBatch of ``schema`` (cast where safe). Raises SchemaMismatchError."""
    from ..errors import SchemaMismatchError

    if isinstance(data, pa.RecordBatch):
        batch = data
    elif isinstance(data, pa.Table):
        batch = data.combine_chunks().to_batches()[0] if data.num_rows else \
            pa.RecordBatch.from_pylist([], schema=data.schema)
    elif isinstance(data, list):
        known = None if schema is None else set(schema.names) | RESERVED_COLUMNS
        for i, row in enumerate(data):
            if not isinstance(row, dict):
                raise InvalidArgumentError(
                    f"record {i} is of type {type(row).__name__}, not a dict: a list of records "
                    "holds one dict of fields per record (raw values: raw_batch(values))")
            extra = None if known is None else sorted(set(row) - known)
            if extra and schema is not None:
                raise SchemaMismatchError(
                    f"record {i} has fields {extra} that are not in the topic schema "
                    f"{schema.names}")
        try:
            batch = pa.RecordBatch.from_pylist(data, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as exc:
            raise SchemaMismatchError(f"records do not match the schema: {exc}") from None
    elif type(data).__name__ == "DataFrame" and hasattr(data, "to_dict"):
        try:
            batch = pa.RecordBatch.from_pandas(data, schema=schema, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
            raise SchemaMismatchError(f"DataFrame does not match the schema: {exc}") from None
    else:
        raise InvalidArgumentError(
            f"expected a pyarrow Table/RecordBatch, a pandas DataFrame or a list of dicts, "
            f"got {type(data).__name__}")
    if schema is not None:
        record_names = [n for n in batch.schema.names if n not in RESERVED_COLUMNS]
        if record_names != schema.names:
            raise SchemaMismatchError(
                f"columns {record_names} do not match the topic schema {schema.names}")
        if not batch.schema.equals(schema) and record_names == batch.schema.names:
            try:
                batch = batch.cast(schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError,
                    ValueError) as exc:  # ValueError: nulls in a not-null field
                raise SchemaMismatchError(
                    f"columns cannot be converted to the topic schema: {exc}") from None
    return batch


def raw_batch(values, keys=None, headers=None) -> pa.RecordBatch:
    """A RecordBatch of :data:`RAW_SCHEMA` from lists of values, keys and headers
    (headers: list of ``[(str, bytes), ...]`` or None per record)."""
    n = len(values)
    if keys is None:
        keys = pa.nulls(n, pa.binary())
    if headers is None:
        headers = pa.nulls(n, HEADER_TYPE)
    elif not isinstance(headers, pa.Array):
        headers = pa.array(
            [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
            HEADER_TYPE)
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.binary()) if not isinstance(keys, pa.Array) else keys,
         pa.array(values, pa.binary()) if not isinstance(values, pa.Array) else values,
         headers],
        schema=RAW_SCHEMA)


_DEFAULT_IDS = (0, -1, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)


def encode_frame(
    batch,
    *,
    timestamps=None,
    compression: str | None = "none",
    base_offset: int = 0,
    leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    log_append_time: bool = False,
    offset_deltas=None,
    control: bool = False,
    transactional: bool = False,
) -> bytes:
    """Encode one frame.

    ``batch`` holds the record columns (a RecordBatch or Table; see
    :func:`to_record_batch`). ``timestamps`` gives per-record milliseconds since the
    epoch (a sequence, an Arrow array, or None for "now"); a batch that already has a
    ``__timestamp`` column keeps it. ``offset_deltas`` (compacted data) stores explicit
    offsets relative to ``base_offset`` and sets the explicit-offsets bit.
    """
    ids = (base_offset, leader_epoch, producer_id, producer_epoch, base_sequence)
    if ids != _DEFAULT_IDS or any(v.__class__ is not int for v in ids):
        for name, value in zip(("base_offset", "leader_epoch", "producer_id",
                                "producer_epoch", "base_sequence"), ids):
            _check_header_int(name, value)
    batch = to_record_batch(batch)
    n = batch.num_rows
    if n == 0:
        raise InvalidArgumentError("a frame needs at least one record")
    codec = _normalise_compression(compression)
    names = batch.schema.names
    if TIMESTAMP_COLUMN in names:
        ts = batch.column(names.index(TIMESTAMP_COLUMN)).cast(TIMESTAMP_TYPE)
        batch = batch.drop_columns([TIMESTAMP_COLUMN]) if hasattr(batch, "drop_columns") \
            else pa.RecordBatch.from_arrays(
                [c for c, f in zip(batch.columns, names) if f != TIMESTAMP_COLUMN],
                names=[f for f in names if f != TIMESTAMP_COLUMN])
    elif timestamps is None:
        ts = pa.array([int(time.time() * 1000)] * n, pa.int64()).cast(TIMESTAMP_TYPE)
    else:
        ts = timestamps if isinstance(timestamps, pa.Array) else pa.array(timestamps, pa.int64())
        if len(ts) != n:
            raise InvalidArgumentError(f"{len(ts)} timestamps given for {n} records")
        ts = ts.view(TIMESTAMP_TYPE) if ts.type == pa.int64() else ts.cast(TIMESTAMP_TYPE)
    if ts.null_count:
        raise InvalidArgumentError("record timestamps must not be null")
    if isinstance(timestamps, list) and TIMESTAMP_COLUMN not in names:
        # ints (pa.array checked them): no compute kernels for a small frame's bounds
        first_ts, max_ts = timestamps[0], max(timestamps)
    else:
        ts_int = ts.cast(pa.int64())
        first_ts = ts_int[0].as_py()
        max_ts = _compute().min_max(ts_int)["max"].as_py()
    columns = [_compact(c) for c in batch.columns] + [ts]
    fields = list(batch.schema) + [pa.field(TIMESTAMP_COLUMN, TIMESTAMP_TYPE, nullable=False)]
    attributes = CODEC_IDS[codec]
    if offset_deltas is not None:
        deltas = pa.array(offset_deltas, pa.int32())
        if len(deltas) != n:
            raise InvalidArgumentError(f"{len(deltas)} offset deltas given for {n} records")
        columns.append(deltas)
        fields.append(pa.field(OFFSET_DELTA_COLUMN, pa.int32(), nullable=False))
        last_delta = _compute().max(deltas).as_py()
        attributes |= EXPLICIT_OFFSETS_BIT
    else:
        last_delta = n - 1
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_BIT
    if control:
        attributes |= CONTROL_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    body_batch = pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))
    return _sealed(encode_body(body_batch, codec), FrameHeader(
        base_offset, 0, leader_epoch, MAGIC, 0, attributes, last_delta, first_ts,
        max_ts, producer_id, producer_epoch, base_sequence, n))


def _sealed(body, header: FrameHeader) -> bytes:
    """The frame of ``body`` under ``header`` (its length set here), CRC computed."""
    out = bytearray(header._replace(length=HEADER_SIZE - LOG_OVERHEAD + len(body)).pack())
    out += body
    reseal(out)
    return bytes(out)


_I64_MIN, _I64_MAX = -(2 ** 63), 2 ** 63 - 1
#: the body schema of a raw topic's frames: the record columns, then the timestamps
RAW_BODY_SCHEMA = pa.schema(list(RAW_SCHEMA) + [
    pa.field(TIMESTAMP_COLUMN, TIMESTAMP_TYPE, nullable=False)])


def encode_raw_frame(values: list, keys: list | None = None, headers: list | None = None,
                     *, timestamps: list, compression: str | None = "none") -> bytes:
    """``encode_frame(raw_batch(values, keys, headers), timestamps=timestamps,
    compression=compression)``: the frame of a producer's batch of a raw topic
    (``timestamps``: ints, milliseconds). Uncompressed, without headers, and with bytes
    values and keys, the body's record batch is written by
    :mod:`~sparklog.format.rawipc` (the same bytes, without pyarrow's Python layer: what
    a small frame's latency is made of); otherwise through pyarrow."""
    n = len(values)
    message = None
    if headers is None and n and len(timestamps) == n \
            and _normalise_compression(compression) == "none" \
            and all(t.__class__ is int and _I64_MIN <= t <= _I64_MAX for t in timestamps):
        message = rawipc.record_batch_message(RAW_BODY_SCHEMA, values, keys, timestamps)
    if message is None:  # pyarrow's path (which also raises what is wrong with the input)
        return encode_frame(raw_batch(values, keys, headers), timestamps=timestamps,
                            compression=compression)
    body = b"".join((_schema_message(RAW_BODY_SCHEMA), message, IPC_EOS))
    return _sealed(body, FrameHeader(
        0, 0, -1, MAGIC, 0, CODEC_IDS["none"], n - 1, timestamps[0], max(timestamps),
        NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, n))


def _compact(column: pa.Array) -> pa.Array:
    """``column``, copied when it is a slice of a larger nested array: Arrow IPC writes
    the whole child buffers of a sliced struct (in a list), so a frame of a few rows
    sliced from a large batch would carry the bytes of all of them."""
    if not pa.types.is_nested(column.type) or \
            column.get_total_buffer_size() <= 2 * column.nbytes + 4096:
        return column
    if column.null_count == len(column):
        return pa.nulls(len(column), column.type)
    return column.take(offset_range(0, len(column)))


#: (schema, its IPC schema message or None when it needs the stream writer), newest
#: first; looked up with Schema.equals, which is much cheaper than hashing a schema
_SCHEMA_MESSAGES: list = []


def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def _schema_message(schema: pa.Schema):
    """The IPC message of ``schema``, cached (a producer sends the same one in every
    frame); None for schemas with dictionaries (their batches need dictionary
    messages, which the stream writer adds)."""
    for known, message in _SCHEMA_MESSAGES:
        if known.equals(schema, check_metadata=True):
            return message
    message = None if any(_has_dictionary(f.type) for f in schema) else \
        schema.serialize().to_pybytes()
    _SCHEMA_MESSAGES.insert(0, (schema, message))
    del _SCHEMA_MESSAGES[16:]
    return message


def encode_body(batch: pa.RecordBatch, codec: str = "none") -> pa.Buffer:
    """Arrow IPC stream bytes (schema + one batch) of ``batch``. Uncompressed bodies are
    assembled from the cached schema message, the batch's own message and the
    end-of-stream marker: the bytes the stream writer writes, without building one per
    frame."""
    if codec == "none":
        head = _schema_message(batch.schema)
        if head is not None:
            return pa.py_buffer(b"".join((head, batch.serialize(), IPC_EOS)))
    options = ipc.IpcWriteOptions(compression=None if codec == "none" else codec)
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def decode_body(body) -> pa.RecordBatch:
    """Decode an Arrow IPC body into its single record batch, fully checked
    (``RecordBatch.validate(full=True)``: buffer sizes, and every offset of variable-size
    and nested columns within its child's bounds, UTF-8 of strings; about 10 ns a
    record) so that a body whose CRC matches but whose content is not valid Arrow (a
    writer's bug, a hostile client: the CRC only proves the bytes are the ones written)
    is a CorruptRecordError, never an array that is unsafe to read."""
    try:
        reader = ipc.open_stream(body if isinstance(body, pa.Buffer) else pa.py_buffer(body))
        batch = reader.read_next_batch()
        batch.validate(full=True)
    except (pa.ArrowInvalid, StopIteration, OSError) as exc:
        raise CorruptRecordError(f"frame body is not a valid Arrow IPC batch: {exc}") from None
    return batch


def body_schema(body) -> pa.Schema:
    """The schema of a frame body, read without decoding the batch."""
    try:
        return ipc.open_stream(body if isinstance(body, pa.Buffer) else pa.py_buffer(body)).schema
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptRecordError(f"frame body has no valid Arrow schema: {exc}") from None


def record_schema(schema: pa.Schema) -> pa.Schema:
    """The record columns of a body schema (reserved columns removed)."""
    return pa.schema([f for f in schema if f.name not in RESERVED_COLUMNS])


def _where(pos: int, path) -> str:
    return f" at position {pos}" + (f" of {path}" if path else "")


def _check_framing(view, pos: int, avail: int, max_size, path,
                   at: int | None = None) -> FrameHeader:
    """The checks of a frame's header that need no body: a whole header, a sane length
    within the ``avail`` bytes from ``pos`` on, the known magic. Messages name position
    ``at`` (default ``pos``)."""
    at = pos if at is None else at
    if avail < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated frame{_where(at, path)}: {avail} bytes, a header needs "
            f"{HEADER_SIZE}", path=path, position=at)
    header = unpack_header(view, pos)
    size = header.length + LOG_OVERHEAD
    if header.length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"invalid frame length {header.length}{_where(at, path)}", path=path,
            position=at)
    if max_size is not None and size > max_size:
        raise RecordTooLargeError(
            f"frame{_where(at, path)} is {size} bytes, over the limit of {max_size} bytes")
    if size > avail:
        raise CorruptRecordError(
            f"truncated frame{_where(at, path)}: header says {size} bytes, {avail} present",
            path=path, position=at)
    if header.magic not in MAGICS:
        raise CorruptRecordError(
            f"unknown frame format version {header.magic}{_where(at, path)} (expected "
            f"{MAGIC}, an Arrow frame, or {KAFKA_MAGIC}, a Kafka record batch)",
            path=path, position=at)
    return header


def _check_counts(header: FrameHeader, pos: int, path) -> None:
    if not counts_consistent(header) or header.codec == "unknown":
        raise CorruptRecordError(
            f"inconsistent frame header{_where(pos, path)}: {header.record_count} records, "
            f"last offset delta {header.last_offset_delta}, attributes "
            f"{header.attributes:#x}", path=path, position=pos)


def validate_header(buf, avail: int, *, position: int = 0, path=None) -> FrameHeader:
    """Check a frame from its header alone: ``buf`` holds the header (at least
    ``HEADER_SIZE`` bytes, or fewer when the file ends there), ``avail`` is how many bytes
    of the file there are from the frame's start (``position``, for messages) on. Every
    check of :func:`validate_frame` but the CRC32C and the body's: a whole frame, sane
    length, known magic (1 or 2), record count vs offset delta, known codec. Raises
    CorruptRecordError (a message starting with "truncated frame" when the file ends
    inside the frame)."""
    view = memoryview(buf).cast("B")
    if len(view) < min(HEADER_SIZE, avail):
        raise InvalidArgumentError(
            f"validate_header needs the frame's {HEADER_SIZE}-byte header (or the "
            f"{avail} bytes the file has left), got {len(view)} bytes")
    header = _check_framing(view, 0, avail, None, path, at=position)
    _check_counts(header, position, path)
    return header


def validate_frame(buf, pos: int = 0, *, max_size: int | None = None,
                   verify_crc: bool = True, path=None,
                   check_body: bool | None = None) -> FrameHeader:
    """Check the frame at ``buf[pos:]``: complete, sane length, known magic (1 an Arrow
    frame, 2 a Kafka record batch), CRC32C, record count vs offset delta, a codec of
    its kind, and (``check_body``, by default as ``verify_crc``: a caller that trusts
    the bytes reads headers only) an Arrow body whose one record batch has the header's
    record count and buffers inside the body
    (:func:`~sparklog.format.ipc.check_ipc_body`, metadata only). A Kafka batch's
    records are checked where they are read (:meth:`Frame.batch`) and, from a client,
    by the broker (:func:`~sparklog.format.kafka_batch.validate_client_batch`). Returns its header or
    raises CorruptRecordError (RecordTooLargeError if it exceeds ``max_size``);
    InvalidArgumentError for a ``buf`` that is not bytes-like or a negative ``pos``."""
    view = _frame_view(buf, pos)
    header = _check_framing(view, pos, len(view) - pos, max_size, path)
    size = header.size
    if verify_crc:
        actual = crc32c(view[pos + CRC_START:pos + size])
        if actual != header.crc:
            raise CorruptRecordError(
                f"CRC32C mismatch{_where(pos, path)}: stored {header.crc:#010x}, "
                f"computed {actual:#010x}", path=path, position=pos)
    _check_counts(header, pos, path)
    if (check_body or (check_body is None and verify_crc)) and header.magic == MAGIC:
        try:
            check_ipc_body(view, pos + HEADER_SIZE, pos + size, header.record_count,
                           _where(pos, path))
        except CorruptRecordError as exc:
            raise CorruptRecordError(str(exc), path=path, position=pos) from None
    return header


def counts_consistent(header: FrameHeader) -> bool:
    """True if the header's record count and last offset delta can be right (at least
    one record; the delta at least the count - 1): the cheap part of validation that
    a reader of headers alone can do."""
    return header.record_count > 0 and header.last_offset_delta >= header.record_count - 1


#: attribute bits only the broker or the log cleaner may set (DESIGN: a client frame that
#: claims them is refused): the field each one is named by in the refusal
BROKER_ONLY_BITS = (
    (EXPLICIT_OFFSETS_BIT, "explicit-offsets bit (0x40): only the log cleaner writes "
                           "frames with an offset-delta column"),
    (CONTROL_BIT, "control bit (0x20): clients are not allowed to write control records"),
    (TRANSACTIONAL_BIT, "transactional bit (0x10): only the broker writes transactional "
                        "frames"),
    # a client's LogAppendTime frame would give all its records its max timestamp on a
    # CreateTime topic; the broker stamps the bit itself where message.timestamp.type says
    (TIMESTAMP_TYPE_BIT, "timestamp-type bit (0x08): only the broker stamps LogAppendTime "
                         "(the topic's message.timestamp.type)"),
)


def check_client_frame(header: FrameHeader, where: str) -> None:
    """Refuse a frame a client produced (``where`` names the partition and the frame)
    that claims what only the broker or the log cleaner may write, as Kafka's
    ``LogValidator`` refuses a client's record batch (InvalidRecordError,
    INVALID_RECORD): an attribute bit of :data:`BROKER_ONLY_BITS`, or offsets that do not
    match the record count (``last_offset_delta`` must be ``record_count - 1``: a
    client's records take consecutive offsets). Runs after :func:`validate_frame`, which
    checks what any frame must hold; frames of the log's own writers (the cleaner, the
    compaction job, :meth:`~sparklog.log.partition.PartitionLog.append`) are not
    checked here."""
    for bit, claim in BROKER_ONLY_BITS:
        if header.attributes & bit:
            raise InvalidRecordError(
                f"{where}: attributes {header.attributes:#06x} set the {claim}")
    if header.last_offset_delta != header.record_count - 1:
        raise InvalidRecordError(
            f"{where}: inconsistent offset range and count of records: last_offset_delta "
            f"{header.last_offset_delta} with record_count {header.record_count} (a "
            f"client frame's records take consecutive offsets: last_offset_delta must be "
            f"{header.record_count - 1})")


def may_follow_gap(header: FrameHeader, cleaned: bool) -> bool:
    """Whether a frame with ``header`` may start after the previous frame's end (the
    offsets between removed by compaction): an Arrow frame with the explicit-offsets
    bit (the cleaner's), or a Kafka batch in a ``cleaned`` segment (generation 1 or
    more), where the cleaner removed whole batches before it (its records carry their
    own offset deltas, so it needs no bit); docs/storage.md section 11."""
    if header.magic == KAFKA_MAGIC:
        return cleaned
    return bool(header.attributes & EXPLICIT_OFFSETS_BIT)


def check_follows(header: FrameHeader, expected: int, where: str = "", *,
                  cleaned: bool = False, path=None, position=None,
                  end_offset=None) -> None:
    """Raise DataLossError unless a frame with ``header`` may come where the log's next
    offset is ``expected``: its base offset must equal it (a frame of compacted data
    may start later, :func:`may_follow_gap`; ``cleaned``: the frames are of a cleaned
    segment). A frame that starts elsewhere means a damaged base offset or length, or
    missing frames; the error names the range from ``expected`` (to ``end_offset``
    when the caller knows where the damage ends)."""
    base = header.base_offset
    if base == expected or (base > expected and may_follow_gap(header, cleaned)):
        return
    span = f"[{expected}, {end_offset})" if end_offset is not None else f"from {expected}"
    raise DataLossError(
        f"frame{where} has base offset {base} where offset {expected} was expected "
        f"(a damaged frame or missing data): offsets {span} cannot be read",
        path=path, position=position, first_offset=expected, end_offset=end_offset)


def decode_frame(buf, pos: int = 0, *, verify_crc: bool = True, path=None,
                 check_body: bool | None = None) -> Frame:
    """Validate and return the frame at ``buf[pos:]`` (body as a zero-copy view);
    ``check_body`` as :func:`validate_frame` (False for a caller that decodes every
    body with :meth:`Frame.batch`, which checks it fully)."""
    header = validate_frame(buf, pos, verify_crc=verify_crc, path=path,
                            check_body=check_body)
    data = buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)
    body = data.slice(pos + HEADER_SIZE, header.size - HEADER_SIZE)
    return Frame(header, body)


def iter_frames(buf, pos: int = 0, *, verify_crc: bool = True, path=None,
                expected_offset: int | None = None,
                cleaned: bool = False) -> Iterator[Frame]:
    """Yield consecutive frames of ``buf`` from ``pos``; raises CorruptRecordError at the
    first invalid or incomplete frame. With ``expected_offset`` (the offset a fetch
    asked for) the first frame must hold it or start after it (compaction removed the
    offsets between), and each next frame must follow the one before
    (:func:`check_follows`, ``cleaned`` as there): DataLossError otherwise."""
    if not isinstance(buf, pa.Buffer):
        _frame_view(buf, pos)
    data = buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)
    end = data.size
    expected = None
    while pos < end:
        frame = decode_frame(data, pos, verify_crc=verify_crc, path=path)
        header = frame.header
        where = f" at position {pos}" + (f" of {path}" if path else "")
        if expected is not None:
            check_follows(header, expected, where, cleaned=cleaned, path=path,
                          position=pos)
        elif expected_offset is not None and not (
                header.base_offset <= expected_offset <= header.last_offset
                or header.base_offset > expected_offset):  # a gap left by compaction
            check_follows(header, expected_offset, where, cleaned=cleaned, path=path,
                          position=pos)
        yield frame
        if expected_offset is not None:
            expected = header.next_offset
        pos += header.size


def _patchable(buf, what: str) -> None:
    if not (isinstance(buf, bytearray)
            or (isinstance(buf, memoryview) and not buf.readonly)):
        raise InvalidArgumentError(
            f"{what} patches in place: buf must be a bytearray or a writable memoryview, "
            f"got {type(buf).__name__}")


def stamp(buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Write the broker-assigned base offset and leader epoch into a frame in place
    (both fields lie outside the CRC)."""
    _patchable(buf, "stamp()")
    _frame_view(buf, pos)
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidArgumentError(
            f"no frame header at position {pos}: {len(buf) - pos} bytes left, "
            f"{HEADER_SIZE} needed")
    _check_header_int("base_offset", base_offset)
    _check_header_int("leader_epoch", leader_epoch)
    _I64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)
    _I32.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)


def stamp_run(buf: bytearray | memoryview, frames, base_offset: int,
              leader_epoch: int) -> int:
    """Stamp a run of frames of ``buf`` in place, as :func:`stamp` does one: ``frames``
    are the ``(position, header)`` pairs of validated frames in log order; the first
    gets ``base_offset``, each next one the offset after the previous frame's last
    record. Returns the offset after the run's last record."""
    _patchable(buf, "stamp_run()")
    _check_header_int("leader_epoch", leader_epoch)
    _check_header_int("base_offset", base_offset)
    pack_offset, pack_epoch = _I64.pack_into, _I32.pack_into
    offset = base_offset
    for pos, header in frames:
        pack_offset(buf, pos + BASE_OFFSET_POS, offset)
        pack_epoch(buf, pos + LEADER_EPOCH_POS, leader_epoch)
        offset += header.last_offset_delta + 1
    return offset


def set_log_append_time(buf: bytearray, pos: int, ts_ms: int) -> None:
    """Mark a frame as LogAppendTime with ``max_timestamp = ts_ms`` and fix its CRC."""
    header = unpack_header(buf, pos)
    ATTRIBUTES.write(buf, pos, header.attributes | TIMESTAMP_TYPE_BIT)
    MAX_TIMESTAMP.write(buf, pos, ts_ms)
    reseal(buf, pos, header.size)


def reseal(buf: bytearray | memoryview, pos: int = 0, size: int | None = None) -> None:
    """Redo in place the CRC32C of the frame of ``size`` bytes (default: to the end of
    ``buf``) at ``buf[pos:]``, after fields it covers were changed."""
    end = len(buf) if size is None else pos + size
    CRC.write(buf, pos, crc32c(memoryview(buf)[pos + CRC_START:end]))


def restamp_producer(frame, producer_id: int, producer_epoch: int,
                     base_sequence: int) -> bytearray:
    """A copy of the whole frame ``frame`` with these producer id, producer epoch and
    base sequence (Kafka's idempotent-producer fields, inside the CRC) and its CRC
    redone: the producer builds a frame before it knows its sequence."""
    for name, value in (("producer_id", producer_id), ("producer_epoch", producer_epoch),
                        ("base_sequence", base_sequence)):
        _check_header_int(name, value)
    out = bytearray(frame)
    if len(out) < HEADER_SIZE:
        raise InvalidArgumentError(
            f"not a frame: {len(out)} bytes, a header needs {HEADER_SIZE}")
    PRODUCER_FIELDS.pack_into(out, PRODUCER_ID.position, producer_id, producer_epoch,
                              base_sequence)
    reseal(out)
    return out
