"""Record batches between Kafka clients and the log: Kafka's batches (magic 2) in, Arrow
frames out on Produce; Arrow frames in, Kafka's batches out on Fetch.

This first milestone of the Kafka listener converts at the edge (docs/kafka-protocol.md,
"Records"): a client's batch is checked as Kafka's ``LogValidator`` checks one
(:func:`~sparklog.format.kafka_batch.validate_client_batch`) and stored as one Arrow
frame holding the same records with the same producer id, epoch and base sequence, so
the producer state, idempotence, ACLs and every reader of the log (Spark included) work
unchanged. Storing the client's bytes unchanged as a second frame kind is step 1 of
docs/storage.md's build plan.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa

from ...errors import InvalidRecordError
from ...format.frame import (
    OFFSET_DELTA_COLUMN,
    RAW_SCHEMA,
    TIMESTAMP_COLUMN,
    encode_frame,
    iter_frames,
    raw_batch,
)
from ...format.kafka_batch import (
    VECTOR_MIN_RECORDS,
    KafkaRecord,
    decode_client_columns,
    encode_batch,
    encode_batch_arrays,
)
from ...protocol.codec import FileRegion

#: a Kafka batch's codec -> the Arrow frame's (Arrow IPC compresses with lz4 or zstd only)
_FRAME_CODEC = {"none": "none", "gzip": "zstd", "snappy": "lz4", "lz4": "lz4", "zstd": "zstd"}


def frames_of_batches(data, *, max_decompressed_bytes: int) -> bytes:
    """The Arrow frames (concatenated) holding the records of the Kafka batches ``data``
    a client sent in one partition of a Produce request: one frame per batch, with its
    producer id, epoch, base sequence, record timestamps, keys, values and headers.
    Raises CorruptRecordError / InvalidRecordError / RecordTooLargeError naming the
    batch's position and field (nothing of the partition is then appended)."""
    view = memoryview(data)
    if not len(view):
        raise InvalidRecordError("the partition's records are empty: a Produce needs at "
                                 "least one record batch")
    out = []
    pos = 0
    while pos < len(view):
        # checked and decoded in one pass, straight to columns
        header, columns = decode_client_columns(view, pos,
                                                max_decompressed_bytes=max_decompressed_bytes)
        keys = columns.keys
        arrow = raw_batch(columns.values, keys=keys if keys.null_count < len(keys) else None,
                          headers=columns.headers)
        out.append(encode_frame(
            arrow, timestamps=pa.array(columns.timestamps, pa.int64()),
            compression=_FRAME_CODEC.get(header.compression, "none"),
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence))
        pos += header.size
    return b"".join(out)


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
    """Kafka batches (concatenated) of the Arrow frames a Fetch read: one batch per
    frame with the frame's base offset, leader epoch, producer fields, timestamps
    (LogAppendTime kept) and records at their offsets (implicit or explicit), sent
    uncompressed: the frame's codec (lz4 or zstd of Arrow IPC) need not be one the
    consumer has (gzip is the only codec every Kafka client reads, and costs more CPU
    than the bytes it saves on a cluster's network). A control frame (a transaction marker) becomes a control
    batch with the same key and value. A typed topic's rows go out as JSON values with
    a null key (as ``dump-log --print-data-log`` prints them)."""
    data = _stored_bytes(records)
    if not data:
        return b""
    out = []
    for frame in iter_frames(data):
        h = frame.header
        batch = frame.batch()
        names = batch.schema.names
        raw = all(n in names for n in RAW_SCHEMA.names)
        if raw and batch.num_rows >= VECTOR_MIN_RECORDS \
                and not len(batch.column(names.index("headers")).flatten()):
            # no record has headers: every record written at once from the columns
            ts = _int64(batch.column(names.index(TIMESTAMP_COLUMN)))
            out.append(encode_batch_arrays(
                frame.offsets(batch).to_numpy() - h.base_offset,
                ts.to_numpy(zero_copy_only=False),
                batch.column(names.index("key")), batch.column(names.index("value")),
                base_offset=h.base_offset, partition_leader_epoch=h.leader_epoch,
                producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence, transactional=h.is_transactional,
                control=h.is_control,
                log_append_time=h.max_timestamp if h.log_append_time else None,
                last_offset_delta=h.last_offset_delta))
            continue
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
        out.append(encode_batch(
            kafka_records, compression="none",
            base_offset=h.base_offset, partition_leader_epoch=h.leader_epoch,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, transactional=h.is_transactional,
            control=h.is_control,
            log_append_time=h.max_timestamp if h.log_append_time else None,
            last_offset_delta=h.last_offset_delta))
    return b"".join(out)
