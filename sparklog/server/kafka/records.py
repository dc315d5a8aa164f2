"""Record batches between Kafka clients and the log (docs/kafka-protocol.md, "Records").

Produce: a Kafka client's batch (magic 2) is stored as it sent it, the second frame
kind beside Arrow frames (docs/format.md, "Kafka record batches (magic 2)"): the
listener only checks that a partition's records are one Kafka batch
(:func:`client_batch`); the broker's Produce path checks each as Kafka's
``LogValidator`` does, against the producer state, and patches its base offset and
leader epoch (:class:`~sparklog.server.partition.PartitionWriter`). Fetch: stored Kafka
batches go to a Kafka consumer unchanged, byte for byte; Arrow frames are converted to
Kafka batches (:func:`batches_of_frames`).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa

from ...errors import InvalidRecordError, SparklogError
from ...format.frame import (
    OFFSET_DELTA_COLUMN,
    RAW_SCHEMA,
    TIMESTAMP_COLUMN,
    decode_frame,
    validate_frame,
)
from ...format.header import KAFKA_MAGIC, MAGIC_FIELD
from ...format.kafka_batch import (
    VECTOR_MIN_RECORDS,
    KafkaBatchHeader,
    KafkaRecord,
    encode_batch,
    encode_batch_arrays,
    kept_header_fields,
    parse_header,
)
from ...protocol.codec import FileRegion


def client_batch(data, partition: str, version: int) -> KafkaBatchHeader:
    """The header of ``data``, one partition's records in a Kafka client's Produce
    request of ``version``, which must be exactly one record batch of magic 2, as Kafka
    takes a Produce v3+ (``ProduceRequest.validateRecords``: INVALID_RECORD otherwise):
    a legacy message set (magic 0 or 1, the latter an Arrow frame's magic) is never
    stored, nor a second batch. Header fields only, no CRC: the broker checks the batch
    whole. InvalidRecordError or CorruptRecordError naming ``partition``."""
    view = memoryview(data)
    try:
        if not len(view):
            raise InvalidRecordError(
                f"the records are empty: a Produce v{version} needs one record batch")
        at = MAGIC_FIELD.position
        if len(view) > at and view[at] != KAFKA_MAGIC:
            raise InvalidRecordError(
                f"the record batch has magic {view[at]}: a Produce v{version} takes "
                f"record batches of magic {KAFKA_MAGIC} only")
        header = parse_header(view, 0, verify_crc=False)
        if header.size < len(view):
            raise InvalidRecordError(
                f"a Produce v{version} carries exactly one record batch per partition: "
                f"{len(view) - header.size} bytes follow the batch of {header.size} bytes")
    except SparklogError as exc:
        raise type(exc)(f"partition {partition}: {exc}") from None
    return header


def _stored_bytes(records) -> bytes:
    """The bytes of a Fetch answer's ``records`` (a FileRegion is read from its file)."""
    if isinstance(records, FileRegion):
        fd = os.open(records.path, os.O_RDONLY)
        try:
            return os.pread(fd, records.size, records.offset)
        finally:
            os.close(fd)
    return bytes(records)


def _int64(timestamps: pa.Array) -> pa.Array:
    """A frame's timestamps as int64 (a timestamp column's values viewed, not cast: the
    same numbers, without a compute call's cost on every fetched frame)."""
    if pa.types.is_timestamp(timestamps.type):
        return timestamps.view(pa.int64())
    return timestamps.cast(pa.int64())


def _typed_value(row: dict) -> bytes:
    return json.dumps(row, default=str, separators=(",", ":")).encode()


def batches_of_frames(records) -> bytes:
    """The Kafka batches (concatenated) of the frames a Fetch read: a stored Kafka batch
    as it is stored (its bytes unchanged, so a range of Kafka batches only is sent as
    read), an Arrow frame converted (:func:`batch_of_frame`)."""
    data = _stored_bytes(records)
    out: list = []
    view = memoryview(data)
    pos = arrow = 0
    while pos < len(data):
        header = validate_frame(data, pos, verify_crc=False)  # whole, a known kind
        if header.is_kafka:
            out.append(view[pos:pos + header.size])
        else:
            out.append(batch_of_frame(decode_frame(data, pos)))
            arrow += 1
        pos += header.size
    return data if not arrow else b"".join(out)


def batch_of_frame(frame) -> bytes:
    """The Kafka batch of an Arrow frame (checked, CRC included): the frame's base
    offset, leader epoch, producer fields, timestamps (LogAppendTime kept) and records
    at their offsets (implicit or explicit), sent uncompressed: the frame's codec (lz4
    or zstd of Arrow IPC) need not be one the consumer has (gzip is the only codec every
    Kafka client reads, and costs more CPU than the bytes it saves on a cluster's
    network). A control frame (a transaction marker) becomes a control batch with the
    same key and value. A typed topic's rows go out as JSON values with a null key (as
    ``dump-log --print-data-log`` prints them)."""
    h = frame.header
    kept = kept_header_fields(h)
    batch = frame.batch()
    names = batch.schema.names
    raw = all(n in names for n in RAW_SCHEMA.names)
    if raw and batch.num_rows >= VECTOR_MIN_RECORDS \
            and not len(batch.column(names.index("headers")).flatten()):
        # no record has headers: every record written at once from the columns
        ts = _int64(batch.column(names.index(TIMESTAMP_COLUMN)))
        return encode_batch_arrays(
            frame.offsets(batch).to_numpy() - h.base_offset,
            ts.to_numpy(zero_copy_only=False),
            batch.column(names.index("key")), batch.column(names.index("value")),
            **kept)
    offsets = frame.offsets(batch).to_pylist()
    timestamps = _int64(batch.column(names.index(TIMESTAMP_COLUMN))).to_pylist()
    if raw:
        keys = batch.column(names.index("key")).to_pylist()
        values = batch.column(names.index("value")).to_pylist()
        headers = [tuple((x["key"], x["value"]) for x in hs) if hs else ()
                   for hs in batch.column(names.index("headers")).to_pylist()]
    else:
        user = [n for n in names if n not in (TIMESTAMP_COLUMN, OFFSET_DELTA_COLUMN)]
        rows = batch.select(user).to_pylist()
        keys = [None] * len(rows)
        values = [_typed_value(r) for r in rows]
        headers = [()] * len(rows)
    kafka_records = [KafkaRecord(o, t, k, v, hs)
                     for o, t, k, v, hs in zip(offsets, timestamps, keys, values, headers)]
    return encode_batch(kafka_records, compression="none", **kept)
