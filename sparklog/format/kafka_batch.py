"""Apache Kafka's record batches (magic 2), the second frame kind a segment may hold.

A Kafka client's batch is stored as the client sent it; the broker checks it
(:func:`validate_client_batch`, as Kafka's ``LogValidator``) and patches only the two
fields outside the CRC (:func:`stamp`), and on a LogAppendTime topic the timestamp type
and ``maxTimestamp`` (:func:`set_log_append_time`, which redoes the CRC). Readers of
the log read its records with :func:`records_columns` (through
:meth:`sparklog.format.frame.Frame.batch`, which dispatches on the magic byte), or
:func:`decode_batch`; a Kafka consumer of an Arrow-framed topic gets batches built by
:func:`encode_batch`.

Layout (all integers big-endian; the same 61-byte prefix as an Arrow frame's header,
see :mod:`sparklog.format.header`, with ``magic`` 2 at byte 16 where an Arrow frame
has 1)::

    0   baseOffset            int64   stamped by the broker (outside the CRC)
    8   batchLength           int32   bytes after this field
    12  partitionLeaderEpoch  int32   stamped by the broker (outside the CRC)
    16  magic                 int8    2
    17  crc                   uint32  CRC-32C of bytes [21, end of batch)
    21  attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                      3 lz4, 4 zstd), 3 timestamp type (LogAppendTime),
                                      4 transactional, 5 control, 6 delete horizon set
    23  lastOffsetDelta       int32
    27  baseTimestamp         int64
    35  maxTimestamp          int64
    43  producerId            int64
    51  producerEpoch         int16
    53  baseSequence          int32
    57  recordCount           int32
    61  records               the records, compressed as one block by the codec

Each record: ``length`` varint (bytes after it), ``attributes`` int8 (unused),
``timestampDelta`` varlong, ``offsetDelta`` varint, ``keyLength`` varint (-1: null),
``key``, ``valueLength`` varint (-1: null), ``value``, ``headersCount`` varint, then
per header ``headerKeyLength`` varint, ``headerKey`` (UTF-8), ``headerValueLength``
varint (-1: null), ``headerValue``. Varints are zigzag-encoded base-128 as in
protobuf (Kafka's ``ByteUtils.readVarint``/``readVarlong``).

Errors: bytes that are not a well-formed batch (short, bad magic, CRC, length,
compression, records that do not parse) raise :class:`~sparklog.errors.CorruptRecordError`
(Kafka's CORRUPT_MESSAGE), except that :func:`validate_client_batch` answers a client's
records that do not parse as Kafka does, with :class:`~sparklog.errors.InvalidRecordError`
(INVALID_RECORD), which is also what a well-formed batch a client may not write raises;
records decompressing to more than the caller's bound raise
:class:`~sparklog.errors.RecordTooLargeError` (MESSAGE_TOO_LARGE). Nothing else escapes
from the decoding functions.
"""

from __future__ import annotations

import struct
import zlib
from itertools import islice
from typing import Iterable, NamedTuple, Sequence

import crc32c as _crc32c
import numpy as np
import pyarrow as pa

from ..errors import (
    CorruptRecordError,
    InvalidArgumentError,
    InvalidRecordError,
    RecordTooLargeError,
)
from .header import (  # attribute bits at the same places in both frame kinds
    CONTROL_BIT,
    KAFKA_CODEC_NAMES,
    KAFKA_MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
)

MAGIC = KAFKA_MAGIC
#: bytes of the batch header (Kafka's RECORD_BATCH_OVERHEAD)
HEADER_SIZE = 61
#: baseOffset + batchLength: the bytes ``batchLength`` does not count
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
#: the CRC covers [ATTRIBUTES_OFFSET, end of batch)
ATTRIBUTES_OFFSET = 21
BASE_OFFSET_OFFSET = 0
PARTITION_LEADER_EPOCH_OFFSET = 12
MAX_TIMESTAMP_OFFSET = 35

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
assert _HEADER.size == HEADER_SIZE

COMPRESSION_MASK = 0x07
#: Kafka's compression type ids (attributes bits 0-2)
COMPRESSION_NAMES = KAFKA_CODEC_NAMES
COMPRESSION_IDS = {name: cid for cid, name in COMPRESSION_NAMES.items()}
#: KIP-534: baseTimestamp is the delete horizon (written by the log cleaner only)
DELETE_HORIZON_BIT = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

#: default bound on a batch's decompressed records (the parameter
#: ``max_decompressed_bytes`` of the functions that decompress)
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 << 20
#: the bound readers of the log put on a stored batch's decompressed records
#: (:func:`records_columns`): the most one binary Arrow column holds. The broker bounds
#: what it accepts far lower (``socket.request.max.bytes``), so a stored batch is
#: never refused by a reader for its size.
STORED_MAX_DECOMPRESSED_BYTES = (1 << 31) - 1

#: the smallest record: length, attributes, timestampDelta, offsetDelta, keyLength,
#: valueLength and headersCount of one byte each
MIN_RECORD_SIZE = 7

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class KafkaBatchHeader(NamedTuple):
    """The 61-byte header of a Kafka record batch, Kafka's field names in snake case."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch (``batch_length`` + 12)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset the next batch starts at."""
        return self.last_offset + 1

    @property
    def compression(self) -> str:
        """'none', 'gzip', 'snappy', 'lz4', 'zstd' (or 'unknown')."""
        return COMPRESSION_NAMES.get(self.attributes & COMPRESSION_MASK, "unknown")

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime (every record's timestamp is ``max_timestamp``)."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        """True for a batch of a transaction."""
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        """True for a control batch (transaction markers: not user records)."""
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        """True when the batch is an idempotent or transactional producer's."""
        return self.producer_id > NO_PRODUCER_ID

    def pack(self) -> bytes:
        """The 61 header bytes."""
        return _HEADER.pack(*self)


class KafkaRecord(NamedTuple):
    """One record: absolute offset and timestamp (ms), key and value (None for null)
    and headers as ``(key, value)`` pairs (a header key is a str, its value bytes or
    None)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


class KafkaBatch(NamedTuple):
    """A decoded batch: its header and its records."""

    header: KafkaBatchHeader
    records: list


# --- header ----------------------------------------------------------------------


def _view(buf, pos) -> memoryview:
    if isinstance(pos, bool) or not isinstance(pos, int) or pos < 0:
        raise InvalidArgumentError(f"pos must be an int >= 0, got {pos!r}")
    if isinstance(buf, str):
        raise InvalidArgumentError("a Kafka record batch must be bytes-like, got str")
    try:
        view = memoryview(buf)
    except TypeError:
        raise InvalidArgumentError(
            f"a Kafka record batch must be bytes-like, got {type(buf).__name__}") from None
    if view.ndim != 1 or view.format != "B":  # e.g. a pyarrow Buffer's signed bytes
        view = view.cast("B")
    return view


def _where(pos: int) -> str:
    return f"Kafka record batch at position {pos}"


def parse_header(buf, pos: int = 0, *, verify_crc: bool = True) -> KafkaBatchHeader:
    """Read and check the header of the batch at ``buf[pos:]`` (bytes, bytearray,
    memoryview or any buffer; nothing is copied): the 61 header bytes present,
    ``batchLength`` at least 49 and the whole batch inside ``buf``, ``magic`` 2, a
    known compression type, and (unless ``verify_crc`` is False, for bytes the log
    checked already) the CRC-32C over ``attributes`` to the end. Raises
    CorruptRecordError naming the field."""
    view = _view(buf, pos)
    have = len(view) - pos
    where = _where(pos)
    if have < HEADER_SIZE:
        raise CorruptRecordError(
            f"{where}: {have} bytes, a record batch header needs {HEADER_SIZE}",
            position=pos)
    header = KafkaBatchHeader._make(_HEADER.unpack_from(view, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"{where}: magic {header.magic}, a Kafka record batch (v2) has magic {MAGIC}",
            position=pos)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"{where}: batchLength {header.batch_length} is below the minimum "
            f"{HEADER_SIZE - LOG_OVERHEAD}", position=pos)
    if header.size > have:
        raise CorruptRecordError(
            f"{where}: batchLength {header.batch_length} runs past the data: the batch "
            f"needs {header.size} bytes, {have} are present", position=pos)
    if header.attributes & COMPRESSION_MASK not in COMPRESSION_NAMES:
        raise CorruptRecordError(
            f"{where}: attributes {header.attributes:#06x} name unknown compression "
            f"type {header.attributes & COMPRESSION_MASK}", position=pos)
    if verify_crc:
        actual = _crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET:pos + header.size])
        if actual != header.crc:
            raise CorruptRecordError(
                f"{where}: crc {header.crc:#010x} does not match the batch's CRC-32C "
                f"{actual:#010x}", position=pos)
    return header


def records_section(buf, pos: int = 0, header: KafkaBatchHeader | None = None) -> memoryview:
    """Zero-copy view of the batch's records section (compressed as stored)."""
    view = _view(buf, pos)
    if header is None:
        header = parse_header(view, pos, verify_crc=False)
    return view[pos + HEADER_SIZE:pos + header.size]


# --- patching --------------------------------------------------------------------


def _check_int(name: str, value, bits: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__}")
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise InvalidArgumentError(f"{name} {value} does not fit in a signed {bits}-bit field")


def stamp(buf: bytearray | memoryview, pos: int, base_offset: int,
          partition_leader_epoch: int) -> None:
    """Write the broker-assigned ``baseOffset`` and ``partitionLeaderEpoch`` into the
    batch at ``buf[pos:]`` in place (``buf``: a bytearray or writable memoryview). Both
    lie outside the CRC, which stays valid."""
    if not (isinstance(buf, bytearray) or (isinstance(buf, memoryview) and not buf.readonly)):
        raise InvalidArgumentError(
            "stamp() patches in place: buf must be a bytearray or a writable memoryview, "
            f"got {type(buf).__name__}")
    view = _view(buf, pos)
    if len(view) - pos < HEADER_SIZE:
        raise InvalidArgumentError(
            f"no Kafka record batch header at position {pos}: {len(view) - pos} bytes "
            f"left, {HEADER_SIZE} needed")
    _check_int("base_offset", base_offset, 64)
    _check_int("partition_leader_epoch", partition_leader_epoch, 32)
    _I64.pack_into(view, pos + BASE_OFFSET_OFFSET, base_offset)
    _I32.pack_into(view, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def stamped(batch, base_offset: int, partition_leader_epoch: int) -> bytes:
    """A copy of ``batch`` (one whole batch) with these ``baseOffset`` and
    ``partitionLeaderEpoch``: :func:`stamp` on new bytes."""
    out = bytearray(_view(batch, 0))
    stamp(out, 0, base_offset, partition_leader_epoch)
    return bytes(out)


def set_log_append_time(buf: bytearray | memoryview, pos: int, ts_ms: int) -> None:
    """Mark the batch at ``buf[pos:]`` LogAppendTime with ``maxTimestamp = ts_ms`` and
    redo its CRC, in place: what the broker does to a client's batch on a topic whose
    ``message.timestamp.type`` is LogAppendTime (Kafka's ``setMaxTimestamp``). Readers
    then give every record of the batch that timestamp."""
    if not (isinstance(buf, bytearray) or (isinstance(buf, memoryview) and not buf.readonly)):
        raise InvalidArgumentError(
            "set_log_append_time() patches in place: buf must be a bytearray or a "
            f"writable memoryview, got {type(buf).__name__}")
    view = _view(buf, pos)
    header = parse_header(view, pos, verify_crc=False)
    _check_int("ts_ms", ts_ms, 64)
    struct.pack_into(">h", view, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(view, pos + MAX_TIMESTAMP_OFFSET, ts_ms)
    _U32.pack_into(view, pos + CRC_OFFSET,
                   _crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET:pos + header.size]))


# --- decompression ---------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic, version int32, compatible version int32
_XERIAL_BLOCK = 32 * 1024  # the block size of snappy-java's stream (Kafka's Java client)
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000


def _too_large(where: str, cap: int) -> RecordTooLargeError:
    err = RecordTooLargeError(
        f"{where}: the records decompress to more than max_decompressed_bytes {cap}")
    return err


def _snappy_length(chunk: memoryview, where: str) -> int:
    """The uncompressed length a raw snappy block starts with (an unsigned base-128
    varint of at most 5 bytes)."""
    value = shift = 0
    for i in range(min(5, len(chunk))):
        b = chunk[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    raise CorruptRecordError(f"{where}: snappy block has no valid length prefix")


def _snappy_block(chunk: memoryview, budget: int, where: str, cap: int) -> bytes:
    size = _snappy_length(chunk, where)
    if size > budget:
        raise _too_large(where, cap)
    if size == 0:
        return b""
    return pa.decompress(chunk, decompressed_size=size, codec="snappy", asbytes=True)


def _unsnappy(data: memoryview, cap: int, where: str) -> bytes:
    if data[:len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:  # raw snappy (librdkafka and others)
        return _snappy_block(data, cap, where, cap)
    # xerial framing (snappy-java, Kafka's Java client): header, then blocks of
    # [int32 compressed length][raw snappy block]
    if len(data) < _XERIAL_HEADER_SIZE:
        raise CorruptRecordError(f"{where}: truncated xerial snappy header")
    parts = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"{where}: truncated xerial snappy block length")
        size = _I32.unpack_from(data, pos)[0]
        pos += 4
        if size < 0 or size > end - pos:
            raise CorruptRecordError(
                f"{where}: xerial snappy block of {size} bytes at byte {pos - 4} of the "
                f"records runs past them")
        block = _snappy_block(data[pos:pos + size], cap - total, where, cap)
        total += len(block)
        parts.append(block)
        pos += size
    return b"".join(parts)


def _stream(data: memoryview, codec: str, cap: int, where: str) -> bytes:
    stream = pa.CompressedInputStream(pa.BufferReader(pa.py_buffer(data)), codec)
    parts = []
    total = 0
    chunk = max(1 << 20, 4 * len(data))
    while True:
        part = stream.read(min(chunk, cap + 1 - total))
        if not part:
            break
        total += len(part)
        if total > cap:
            raise _too_large(where, cap)
        parts.append(part)
        chunk *= 2
    return parts[0] if len(parts) == 1 else b"".join(parts)


def decompress_records(buf, pos: int = 0, header: KafkaBatchHeader | None = None, *,
                       max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """The records of the batch at ``buf[pos:]``, decompressed (a copy of the section
    when uncompressed). Snappy is read in both framings: xerial's (Kafka's Java client)
    and raw (librdkafka). Raises CorruptRecordError for data the codec cannot read and
    RecordTooLargeError once more than ``max_decompressed_bytes`` come out (reading
    stops there: a small batch that would decompress to gigabytes takes no more
    memory than the bound)."""
    if isinstance(max_decompressed_bytes, bool) or not isinstance(max_decompressed_bytes, int) \
            or max_decompressed_bytes < 0:
        raise InvalidArgumentError(
            f"max_decompressed_bytes must be an int >= 0, got {max_decompressed_bytes!r}")
    view = _view(buf, pos)
    if header is None:
        header = parse_header(view, pos, verify_crc=False)
    return _decompress(view[pos + HEADER_SIZE:pos + header.size], header, _where(pos), pos,
                       max_decompressed_bytes)


def _decompress(section: memoryview, header, where: str, pos: int, cap: int) -> bytes:
    """The records section ``section`` of a batch with ``header``, decompressed
    (:func:`decompress_records`)."""
    codec = header.compression
    if codec == "none":
        if len(section) > cap:
            raise _too_large(where, cap)
        return bytes(section)
    try:
        if codec == "snappy":
            return _unsnappy(section, cap, where)
        if codec == "unknown":
            raise CorruptRecordError(
                f"{where}: unknown compression type {header.attributes & COMPRESSION_MASK}")
        return _stream(section, "gzip" if codec == "gzip" else codec, cap, where)
    except (pa.ArrowException, OSError, ValueError, zlib.error) as exc:
        raise CorruptRecordError(
            f"{where}: {codec} records cannot be decompressed: {exc}", position=pos) from None


# --- records ---------------------------------------------------------------------


def _uvarint(data: bytes, pos: int, limit: int) -> tuple[int, int]:
    """The raw (not yet zigzag-decoded) base-128 varint at ``data[pos:]`` of at most
    ``limit`` bytes (5 for an int32, 10 for an int64) and the position after it;
    IndexError when the data ends first, ValueError when it is too long or its value
    does not fit (Kafka's "illegal varint")."""
    value = shift = 0
    for i in range(pos, pos + limit):
        b = data[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> (32 if limit == 5 else 64):
                raise ValueError
            return value, i + 1
        shift += 7
    raise ValueError


class _Problem(Exception):
    """A record that does not parse: carries the field and what is wrong."""


_new_record = tuple.__new__


def _parse_records(data: bytes, header: KafkaBatchHeader, where: str, want: bool,
                   client: bool, compacted: bool = False) -> tuple[list, int, int]:
    """Walk the ``header.record_count`` records of ``data``; returns (the records when
    ``want``, the smallest and the largest timestamp). With ``client``, raises
    InvalidRecordError for an offset delta other than the record's index (Kafka: "does
    not have incremental offsets"), and with ``compacted`` for a record without a key. One pass, one step per
    field: a varint of one or
    two bytes (every length below 8 KiB) is read inline, longer ones by
    :func:`_uvarint`; keys and values are single slices."""
    count = header.record_count
    end = len(data)
    if count < 0:
        raise CorruptRecordError(f"{where}: recordCount {count} is negative")
    if count * MIN_RECORD_SIZE > end:
        raise CorruptRecordError(
            f"{where}: recordCount {count} cannot fit in {end} bytes of records "
            f"(a record takes at least {MIN_RECORD_SIZE})")
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    out: list = []
    append = out.append
    record_type = KafkaRecord
    new = _new_record
    max_ts = _INT64_MIN
    min_ts = _INT64_MAX
    pos = 0
    index = 0
    field = "length"
    uvarint = _uvarint
    try:
        for index in range(count):
            field = "length"
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = uvarint(data, pos, 5)
            length = (b >> 1) ^ -(b & 1)
            rec_end = pos + length
            if length < MIN_RECORD_SIZE - 1 or rec_end > end:
                raise _Problem(f"length {length} is not within [{MIN_RECORD_SIZE - 1}, "
                               f"{end - pos}] (the bytes left)")
            field = "timestampDelta"
            pos += 1  # attributes: unused
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = uvarint(data, pos, 10)
            ts_delta = (b >> 1) ^ -(b & 1)
            field = "offsetDelta"
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = uvarint(data, pos, 5)
            off_delta = (b >> 1) ^ -(b & 1)
            if client and off_delta != index:
                raise InvalidRecordError(
                    f"{where}: record {index} has offsetDelta {off_delta}, expected "
                    f"{index}: a client batch's records have incremental offsets "
                    f"0..recordCount-1")
            field = "keyLength"
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = uvarint(data, pos, 5)
            size = (b >> 1) ^ -(b & 1)
            if size < 0:
                if size != -1:
                    raise _Problem(f"keyLength {size}")
                if compacted:
                    raise InvalidRecordError(
                        f"{where}: record {index} has no key: a compacted topic "
                        "(cleanup.policy compact) cannot accept a record without a key")
                key = None
            else:
                if pos + size > rec_end:
                    raise _Problem(f"keyLength {size} runs past the record")
                key = data[pos:pos + size]
                pos += size
            field = "valueLength"
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = uvarint(data, pos, 5)
            size = (b >> 1) ^ -(b & 1)
            if size < 0:
                if size != -1:
                    raise _Problem(f"valueLength {size}")
                value = None
            else:
                if pos + size > rec_end:
                    raise _Problem(f"valueLength {size} runs past the record")
                value = data[pos:pos + size]
                pos += size
            field = "headersCount"
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = uvarint(data, pos, 5)
            nheaders = (b >> 1) ^ -(b & 1)
            if nheaders:
                if nheaders < 0 or nheaders * 2 > rec_end - pos:
                    raise _Problem(f"headersCount {nheaders} does not fit the record")
                headers = []
                for h in range(nheaders):
                    field = f"header {h} key"
                    b = data[pos]
                    if b < 0x80:
                        pos += 1
                    else:
                        c = data[pos + 1]
                        if c < 0x80:
                            b = (b & 0x7F) | (c << 7)
                            pos += 2
                        else:
                            b, pos = uvarint(data, pos, 5)
                    size = (b >> 1) ^ -(b & 1)
                    if size < 0 or pos + size > rec_end:
                        raise _Problem(f"headerKeyLength {size}")
                    hkey = data[pos:pos + size].decode("utf-8")
                    pos += size
                    field = f"header {h} value"
                    b = data[pos]
                    if b < 0x80:
                        pos += 1
                    else:
                        c = data[pos + 1]
                        if c < 0x80:
                            b = (b & 0x7F) | (c << 7)
                            pos += 2
                        else:
                            b, pos = uvarint(data, pos, 5)
                    size = (b >> 1) ^ -(b & 1)
                    if size < 0:
                        if size != -1:
                            raise _Problem(f"headerValueLength {size}")
                        hvalue = None
                    else:
                        if pos + size > rec_end:
                            raise _Problem(f"headerValueLength {size} runs past the record")
                        hvalue = data[pos:pos + size]
                        pos += size
                    headers.append((hkey, hvalue))
                hs = tuple(headers)
            else:
                hs = ()
            if pos != rec_end:
                field = "length"
                raise _Problem(f"its fields take {pos - rec_end + length} bytes, its "
                               f"length says {length}")
            ts = base_ts + ts_delta
            if ts > max_ts:
                max_ts = ts
            if ts < min_ts:
                min_ts = ts
            if want:
                append(new(record_type, (base_offset + off_delta, ts, key, value, hs)))
    except _Problem as exc:
        raise CorruptRecordError(f"{where}: record {index}: {field}: {exc}") from None
    except InvalidRecordError:  # a ValueError too: not a malformed field
        raise
    except IndexError:
        raise CorruptRecordError(
            f"{where}: record {index}: {field}: the records end inside it (recordCount "
            f"{count})") from None
    except ValueError:  # a varint too long, or a header key that is not UTF-8
        raise CorruptRecordError(
            f"{where}: record {index}: {field} is malformed (a varint too long or a "
            f"header key that is not UTF-8)") from None
    if pos != end:
        raise CorruptRecordError(
            f"{where}: {end - pos} bytes remain after the last of its {count} records "
            f"(recordCount disagrees with the records)")
    if count and not (_INT64_MIN <= min_ts and max_ts <= _INT64_MAX):
        raise CorruptRecordError(
            f"{where}: record timestamps (baseTimestamp {base_ts} plus their deltas) "
            "overflow int64")
    return out, min_ts, max_ts


def decode_batch(buf, pos: int = 0, *, verify_crc: bool = True,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> KafkaBatch:
    """Decode the batch at ``buf[pos:]``: its header (checked as :func:`parse_header`)
    and its records with absolute offsets (``baseOffset + offsetDelta``) and
    timestamps (``baseTimestamp + timestampDelta``; on a LogAppendTime batch every
    record's timestamp is ``max_timestamp``, as Kafka's consumer reads it). Control
    batches decode too (their records are markers; readers skip them by
    ``header.is_control``). Raises CorruptRecordError (or RecordTooLargeError past
    ``max_decompressed_bytes``) and nothing else for any bytes."""
    view = _view(buf, pos)
    header = parse_header(view, pos, verify_crc=verify_crc)
    data = decompress_records(view, pos, header, max_decompressed_bytes=max_decompressed_bytes)
    records, _, _ = _parse_records(data, header, _where(pos), True, False)
    if header.timestamp_type and records:
        ts = header.max_timestamp
        records = [r._replace(timestamp=ts) for r in records]
    return KafkaBatch(header, records)


def iter_batches(buf, pos: int = 0, *, verify_crc: bool = True):
    """Yield ``(position, header)`` of each consecutive batch of ``buf`` from ``pos``
    (headers only; CorruptRecordError at the first that is incomplete or invalid)."""
    view = _view(buf, pos)
    end = len(view)
    while pos < end:
        header = parse_header(view, pos, verify_crc=verify_crc)
        yield pos, header
        pos += header.size


# --- validation of a client's batch ------------------------------------------------

#: attribute bits a client's batch may not set: the field each is named by
CLIENT_REFUSED_BITS = (
    (CONTROL_BIT, "control bit (0x20): clients are not allowed to write control records"),
    (TIMESTAMP_TYPE_BIT, "timestamp-type bit (0x08): only the broker stamps "
                         "LogAppendTime (the topic's message.timestamp.type)"),
    (DELETE_HORIZON_BIT, "delete-horizon bit (0x40): only the log cleaner sets it"),
)


def validate_client_batch(buf, pos: int = 0, *,
                          max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                          allow_transactional: bool = False, compacted: bool = False,
                          now_ms: int | None = None,
                          timestamp_before_max_ms: int | None = None,
                          timestamp_after_max_ms: int | None = None) -> KafkaBatchHeader:
    """Check a batch a Kafka client sent, as Kafka's ``LogValidator`` checks one from a
    client, treating the client as hostile; returns its header. ``baseOffset`` and
    ``partitionLeaderEpoch`` are not checked (the broker stamps both, :func:`stamp`).

    CorruptRecordError: what :func:`parse_header` checks (size, magic, CRC-32C,
    compression) and records the codec cannot decompress. RecordTooLargeError: records
    decompressing to more than ``max_decompressed_bytes``. InvalidRecordError, naming
    the field:

    - records that do not parse or do not fill the batch exactly (as Kafka answers
      them: INVALID_RECORD; :func:`decode_batch` raises CorruptRecordError for the same
      bytes, damage to a reader);

    - the control, timestamp-type (LogAppendTime) or delete-horizon attribute bit; the
      transactional bit unless ``allow_transactional``;
    - ``recordCount`` below 1, or ``lastOffsetDelta`` other than ``recordCount - 1``;
      a record whose ``offsetDelta`` is not its index (0, 1, ... in order);
    - a producer id without a base sequence (``baseSequence`` < 0), a transactional
      batch without a producer id;
    - with ``compacted`` (the topic's ``cleanup.policy`` includes compact), a record
      without a key;
    - ``maxTimestamp`` other than the largest record timestamp; with ``now_ms``, a
      timestamp more than ``timestamp_before_max_ms`` before it or
      ``timestamp_after_max_ms`` after it (Kafka's ``message.timestamp.before.max.ms``
      and ``message.timestamp.after.max.ms``; None: no bound).
    """
    return _checked_client_batch(
        buf, pos, _HEADER_ONLY, max_decompressed_bytes=max_decompressed_bytes,
        allow_transactional=allow_transactional, compacted=compacted, now_ms=now_ms,
        timestamp_before_max_ms=timestamp_before_max_ms,
        timestamp_after_max_ms=timestamp_after_max_ms)[0]


def decode_client_batch(buf, pos: int = 0, *,
                        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                        allow_transactional: bool = False, compacted: bool = False,
                        now_ms: int | None = None,
                        timestamp_before_max_ms: int | None = None,
                        timestamp_after_max_ms: int | None = None) -> KafkaBatch:
    """:func:`validate_client_batch` and :func:`decode_batch` of a client's batch in one
    pass (one CRC, one decompression, one walk of the records): the same checks and
    errors as :func:`validate_client_batch`, and the batch with its records as
    :func:`decode_batch` gives them."""
    return KafkaBatch(*_checked_client_batch(
        buf, pos, _RECORDS, max_decompressed_bytes=max_decompressed_bytes,
        allow_transactional=allow_transactional, compacted=compacted, now_ms=now_ms,
        timestamp_before_max_ms=timestamp_before_max_ms,
        timestamp_after_max_ms=timestamp_after_max_ms))


class KafkaColumns(NamedTuple):
    """A batch's records as columns: ``timestamps`` (int64 numpy array, ms), ``keys``
    and ``values`` (binary Arrow arrays, null for a null key or value), ``headers``
    (None when no record has any, else one tuple of ``(str, bytes | None)`` pairs per
    record). Offsets are the batch's ``baseOffset`` plus the row (a client's batch)."""

    timestamps: np.ndarray
    keys: pa.Array
    values: pa.Array
    headers: list | None


def decode_client_columns(buf, pos: int = 0, *,
                          max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                          allow_transactional: bool = False, compacted: bool = False,
                          now_ms: int | None = None,
                          timestamp_before_max_ms: int | None = None,
                          timestamp_after_max_ms: int | None = None,
                          ) -> tuple[KafkaBatchHeader, KafkaColumns]:
    """:func:`decode_client_batch` giving the records as :class:`KafkaColumns` (what an
    Arrow frame is built from). Records without headers, :data:`VECTOR_MIN_RECORDS` or
    more, are read with array arithmetic (their lengths one Python step per record or
    per run of records of one length, :func:`_record_spans`; the fields of all of them
    at once); a smaller batch, one with headers, or one the
    array path does not accept, is walked by
    :func:`decode_client_batch`'s parser, which raises the same errors as
    :func:`validate_client_batch`."""
    return _checked_client_batch(
        buf, pos, _COLUMNS, max_decompressed_bytes=max_decompressed_bytes,
        allow_transactional=allow_transactional, compacted=compacted, now_ms=now_ms,
        timestamp_before_max_ms=timestamp_before_max_ms,
        timestamp_after_max_ms=timestamp_after_max_ms)


def records_columns(header, section, *, position: int = 0, where: str | None = None,
                    max_decompressed_bytes: int = STORED_MAX_DECOMPRESSED_BYTES,
                    ) -> tuple[KafkaColumns, np.ndarray]:
    """The records of a stored batch as :class:`KafkaColumns` and their offset deltas
    (int64 numpy array: each record's offset minus ``baseOffset``, as stored): how
    every reader of the log reads a Kafka batch. ``header`` is the batch's header
    already read and checked (a :class:`KafkaBatchHeader`, or the same 13 fields as
    :class:`~sparklog.format.header.FrameHeader` reads them), ``section`` its records
    section (the bytes after the 61-byte header) and ``position`` where the batch lies,
    for messages (``where``: what they call the batch instead). The records are read
    as :func:`decode_batch` reads them (a batch of :data:`VECTOR_MIN_RECORDS` or more
    records without headers, with array arithmetic);
    timestamps are the records' own (a reader of a LogAppendTime batch gives every
    record ``maxTimestamp``). The offset deltas are not checked against
    ``lastOffsetDelta`` here (the caller does, as for an Arrow frame's explicit
    offsets). Raises CorruptRecordError (or RecordTooLargeError past
    ``max_decompressed_bytes``)."""
    header = KafkaBatchHeader._make(header)
    where = _where(position) if where is None else where
    count = header.record_count
    if count < 1:
        raise CorruptRecordError(f"{where}: recordCount {count}: a batch holds at least "
                                 "one record", position=position)
    data = _decompress(_view(section, 0), header, where, position, max_decompressed_bytes)
    fast = _client_columns(data, header, False) if count >= VECTOR_MIN_RECORDS else None
    if fast is not None:  # its records' offset deltas are 0..count-1
        return fast[0], np.arange(count, dtype=np.int64)
    records, _, _ = _parse_records(data, header, where, True, False)
    base = header.base_offset
    deltas = np.fromiter((r[0] - base for r in records), np.int64, count)
    return _columns_of(records), deltas


def _columns_of(records: list) -> KafkaColumns:
    """:class:`KafkaColumns` of decoded :class:`KafkaRecord` s (at least one)."""
    _, ts, keys, values, headers = zip(*records)
    return KafkaColumns(np.array(ts, np.int64), pa.array(keys, pa.binary()),
                        pa.array(values, pa.binary()),
                        [h or None for h in headers] if any(headers) else None)


_HEADER_ONLY, _RECORDS, _COLUMNS = range(3)

#: from this many records on, a batch is read (:func:`decode_client_columns`) or written
#: (:func:`encode_batch_arrays`) with array arithmetic; below it, a record at a time is
#: faster (each array step costs some microseconds however few records it covers)
VECTOR_MIN_RECORDS = 128


def _checked_client_batch(buf, pos: int, want: int, *, max_decompressed_bytes: int,
                          allow_transactional: bool, compacted: bool, now_ms: int | None,
                          timestamp_before_max_ms: int | None,
                          timestamp_after_max_ms: int | None) -> tuple:
    """The checks of :func:`validate_client_batch`: (header, None), (header, records)
    or (header, :class:`KafkaColumns`) by ``want``."""
    view = _view(buf, pos)
    header = parse_header(view, pos, verify_crc=True)
    where = _where(pos)
    attributes = header.attributes
    for bit, claim in CLIENT_REFUSED_BITS:
        if attributes & bit:
            raise InvalidRecordError(f"{where}: attributes {attributes:#06x} set the {claim}")
    if attributes & TRANSACTIONAL_BIT:
        if not allow_transactional:
            raise InvalidRecordError(
                f"{where}: attributes {attributes:#06x} set the transactional bit (0x10): "
                "transactions are not accepted here")
        if not header.has_producer_id:
            raise InvalidRecordError(
                f"{where}: transactional batch without a producer id (producerId "
                f"{header.producer_id})")
    count = header.record_count
    if count < 1:
        raise InvalidRecordError(f"{where}: invalid recordCount {count}: a batch holds at "
                                 "least one record")
    if header.last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"{where}: inconsistent offset range and count of records: lastOffsetDelta "
            f"{header.last_offset_delta} with recordCount {count} (a client batch's "
            f"records take consecutive offsets: lastOffsetDelta must be {count - 1})")
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecordError(
            f"{where}: invalid baseSequence {header.base_sequence} in a batch with "
            f"producerId {header.producer_id}")
    data = decompress_records(view, pos, header, max_decompressed_bytes=max_decompressed_bytes)
    # a large batch is checked (and read) with array arithmetic when it can be: also
    # when only checked, as the broker checks every batch it stores
    fast = _client_columns(data, header, compacted, columns=want == _COLUMNS) \
        if want != _RECORDS and count >= VECTOR_MIN_RECORDS else None
    if fast is not None:
        records, lowest, max_ts = fast
        if want == _HEADER_ONLY:
            records = None
    else:
        try:
            records, lowest, max_ts = _parse_records(data, header, where, want != _HEADER_ONLY,
                                                     True, compacted)
        except CorruptRecordError as exc:  # Kafka answers a client's malformed records so
            raise InvalidRecordError(str(exc)) from None  # (INVALID_RECORD, not CORRUPT)
        if want == _COLUMNS:
            records = _columns_of(records)
    if max_ts != header.max_timestamp:
        raise InvalidRecordError(
            f"{where}: maxTimestamp {header.max_timestamp} is not the largest record "
            f"timestamp {max_ts}")
    if now_ms is not None:
        # the records' timestamps lie in [lowest, max_ts]: the extremes are checked
        if timestamp_before_max_ms is not None and lowest < now_ms - timestamp_before_max_ms:
            raise InvalidRecordError(
                f"{where}: timestamp {lowest} of a record is more than "
                f"message.timestamp.before.max.ms {timestamp_before_max_ms} before the "
                f"broker's time {now_ms}")
        if timestamp_after_max_ms is not None and max_ts > now_ms + timestamp_after_max_ms:
            raise InvalidRecordError(
                f"{where}: timestamp {max_ts} of a record is more than "
                f"message.timestamp.after.max.ms {timestamp_after_max_ms} after the "
                f"broker's time {now_ms}")
    return header, records


def _read_varints(buf: np.ndarray, at: np.ndarray, limit: int) -> tuple | None:
    """The zigzag varints (``limit`` bytes at most: 5 for an int32, 10 for an int64) at
    the positions ``at`` of ``buf`` (padded with ``limit`` zero bytes): (values,
    sizes), or None when one is too long or does not fit."""
    raw = np.zeros(len(at), np.uint64)
    sizes = np.zeros(len(at), np.int64)
    open_ = np.arange(len(at))
    for k in range(limit):
        b = buf[at[open_] + k].astype(np.uint64)
        raw[open_] |= (b & np.uint64(0x7F)) << np.uint64(7 * k)
        ends = b < 0x80
        sizes[open_[ends]] = k + 1
        open_ = open_[~ends]
        if not len(open_):
            break
    else:
        return None
    if limit == 5 and (raw >> np.uint64(32)).any():
        return None
    return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64), sizes


def _gather_binary(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary Arrow array of ``buf[starts[i]:starts[i] + lengths[i]]`` (null where
    ``lengths[i]`` is -1), the bytes copied at once."""
    sizes = np.maximum(lengths, 0)
    offsets = np.zeros(len(sizes) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    data = buf[_spans(len(buf), starts, sizes)] if offsets[-1] else buf[:0]
    nulls = lengths < 0
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    return pa.Array.from_buffers(pa.binary(), len(sizes),
                                 [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=int(nulls.sum()))


def _record_spans(padded: bytes, end: int, count: int) -> tuple | None:
    """(starts, ends), int64 arrays: where each of the ``count`` records of ``padded[:end]``
    (the records section, followed by at least 10 zero bytes) begins (after its length
    varint) and ends; None when a length is not a positive varint or the records do not
    fill the section exactly. The walk is sequential (a record's length gives the next
    one's start), but a run of records of one length is taken at once: after a record
    of length L at p whose length varint is s bytes, the next ones are at p + k(s + L)
    as long as the bytes there repeat the same varint, which is checked for a window of
    them with array arithmetic (the window grows while whole windows repeat). A
    client's records mostly come in such runs (a record's length changes with its key
    and value sizes, and with its offset and timestamp deltas' varint sizes)."""
    starts = [0] * count
    ends = [0] * count
    runs = []  # (index of the run's first record, records, its position, size, step)
    buf = None
    window = 32
    pos = 0
    todo = iter(range(count))
    try:
        for i in todo:
            first = b = padded[pos]
            if b < 0x80:
                after = pos + 1
            else:
                c = padded[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    after = pos + 2
                else:
                    b, after = _uvarint(padded, pos, 5)
            nxt = after + ((b >> 1) ^ -(b & 1))
            if nxt <= after:
                return None
            starts[i] = after
            ends[i] = nxt
            step = nxt - pos
            # the next three records' first bytes looked at first: a short run costs
            # no array step
            if padded[nxt] != first or padded[nxt + step:nxt + 3 * step:step] != padded[
                    pos:pos + 2 * step:step] or count - i < 4:
                pos = nxt
                continue
            if buf is None:
                buf = np.frombuffer(padded, np.uint8)
            m = min(count - i, (end - pos) // step, window)
            heads = np.arange(pos, pos + m * step, step, dtype=np.int64)
            same = buf[heads] == first
            for j in range(1, after - pos):
                same &= buf[heads + j] == padded[pos + j]
            k = m if same.all() else int(same.argmin())  # the record at pos is the same
            window = window * 4 if k == m else 32
            runs.append((i, k, pos, after - pos, step))
            pos += k * step
            if k > 1:
                next(islice(todo, k - 2, None), None)  # the run's records are read
    except (IndexError, ValueError):
        return None
    if pos != end:
        return None
    if not runs:
        return np.array(starts, np.int64), np.array(ends, np.int64)
    begin, stop = np.empty(count, np.int64), np.empty(count, np.int64)
    done = 0  # the records before the runs' (read one at a time) are copied by range
    for i, k, pos, size, step in runs:
        if i > done:
            begin[done:i] = starts[done:i]
            stop[done:i] = ends[done:i]
        heads = np.arange(pos, pos + k * step, step, dtype=np.int64)
        begin[i:i + k] = heads + size
        stop[i:i + k] = heads + step
        done = i + k
    if done < count:
        begin[done:] = starts[done:]
        stop[done:] = ends[done:]
    return begin, stop


def _client_columns(data: bytes, header: KafkaBatchHeader, compacted: bool, *,
                    columns: bool = True) -> tuple | None:
    """(KafkaColumns, smallest and largest timestamp) of a client's records without
    headers, every field of every record read at once; None for anything else (records
    with headers, or any record :func:`_parse_records` would refuse: it then names the
    problem). Without ``columns`` the records are only checked (the KafkaColumns is
    None: no key or value is copied)."""
    count = header.record_count
    end = len(data)
    if count * MIN_RECORD_SIZE > end or abs(header.base_timestamp) >= _VECTOR_LIMIT:
        return None
    padded = data + bytes(10)
    buf = np.frombuffer(padded, np.uint8)
    spans = _record_spans(padded, end, count)
    if spans is None:
        return None
    at, rec_end = spans
    at = at + 1  # after attributes
    fields = []
    for limit in (10, 5, 5):  # timestampDelta, offsetDelta, keyLength
        got = _read_varints(buf, at, limit)
        if got is None:
            return None
        fields.append(got[0])
        at = at + got[1]
        if (at > rec_end).any():  # a varint runs past its record
            return None
    ts_delta, off_delta, key_len = fields
    if (ts_delta >= _VECTOR_LIMIT).any() or (ts_delta <= -_VECTOR_LIMIT).any() \
            or not (off_delta == np.arange(count)).all() \
            or (key_len < -1).any() or (compacted and (key_len < 0).any()):
        return None
    key_at = at
    at = at + np.maximum(key_len, 0)
    if (at >= rec_end).any():  # a field runs past its record
        return None
    got = _read_varints(buf, at, 5)
    if got is None:
        return None
    value_len = got[0]
    value_at = at = at + got[1]
    if (value_len < -1).any():
        return None
    at = at + np.maximum(value_len, 0)
    if (at >= rec_end).any() or buf[at].any():  # headersCount 0 (headers: the parser)
        return None
    if not (at + 1 == rec_end).all():  # each record's fields fill its length exactly
        return None
    ts = header.base_timestamp + ts_delta
    read = KafkaColumns(ts, _gather_binary(buf, key_at, key_len),
                        _gather_binary(buf, value_at, value_len), None) if columns else None
    return read, int(ts.min()), int(ts.max())


# --- encoding --------------------------------------------------------------------


def _zigzag(value: int) -> bytes:
    """Zigzag base-128 varint of ``value`` (int64 range)."""
    v = (value << 1) ^ (value >> 63)
    if v < 0x80:
        return _SMALL[v]
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]
_NULL = _zigzag(-1)
_ZERO = _zigzag(0)


def _bytes_field(value, what: str) -> bytes:
    if value is None:
        return _NULL
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"{what} must be bytes or None, got {type(value).__name__}")
    return _zigzag(len(value)) + bytes(value)


def _encode_record(record, base_offset: int, base_ts: int, index: int) -> bytes:
    offset, ts, key, value = record[0], record[1], record[2], record[3]
    headers = record[4] if len(record) > 4 else ()
    parts = [b"\x00", _zigzag(ts - base_ts), _zigzag(offset - base_offset),
             _bytes_field(key, f"record {index}'s key"),
             _bytes_field(value, f"record {index}'s value")]
    if headers:
        parts.append(_zigzag(len(headers)))
        for h in headers:
            try:
                hkey, hvalue = h
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"record {index}'s headers must be (str, bytes | None) pairs, got "
                    f"{h!r}") from None
            if not isinstance(hkey, str):
                raise InvalidArgumentError(
                    f"record {index}'s header key must be a str, got {type(hkey).__name__}")
            raw = hkey.encode("utf-8")
            parts.append(_zigzag(len(raw)))
            parts.append(raw)
            parts.append(_bytes_field(hvalue, f"record {index}'s header {hkey!r} value"))
    else:
        parts.append(_ZERO)
    body = b"".join(parts)
    return _zigzag(len(body)) + body


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (an LZ4 frame descriptor's checksum)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF
    assert len(data) < 16

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = (seed + p5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        h = (rotl((h + int.from_bytes(data[i:i + 4], "little") * p3) & mask, 17) * p4) & mask
        i += 4
    for b in data[i:]:
        h = (rotl((h + b * p5) & mask, 11) * p1) & mask
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    h ^= h >> 16
    return h


#: LZ4 frame descriptor as Kafka's Java client writes and requires: version 1, block
#: independence (FLG 0x60), 64 KiB blocks (BD 0x40), and its header checksum
_LZ4_DESCRIPTOR = b"\x60\x40"
_LZ4_HEADER = _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes(((_xxh32_short(_LZ4_DESCRIPTOR) >> 8) & 0xFF,))


def _lz4_frame(data: bytes) -> bytes:
    """An LZ4 frame of independent 64 KiB blocks. (pyarrow's 'lz4' codec writes linked
    blocks, which Kafka's Java client refuses: "Dependent block stream is
    unsupported".)"""
    parts = [_LZ4_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _LZ4_BLOCK):
        block = view[start:start + _LZ4_BLOCK]
        packed = pa.compress(block, codec="lz4_raw", asbytes=True)
        if len(packed) >= len(block):
            parts.append(struct.pack("<I", len(block) | _LZ4_UNCOMPRESSED))
            parts.append(bytes(block))
        else:
            parts.append(struct.pack("<I", len(packed)))
            parts.append(packed)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def _xerial_snappy(data: bytes) -> bytes:
    parts = [_XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        packed = pa.compress(view[start:start + _XERIAL_BLOCK], codec="snappy", asbytes=True)
        parts.append(_I32.pack(len(packed)))
        parts.append(packed)
    return b"".join(parts)


def compress_records(data: bytes, compression: str, *, level: int | None = None,
                     snappy_framing: str = "xerial") -> bytes:
    """``data`` (a batch's records) compressed as Kafka's clients do: gzip, snappy
    (``snappy_framing`` 'xerial' as Kafka's Java client writes, or 'raw' as librdkafka
    does), lz4 (an LZ4 frame of independent blocks) or zstd; ``level`` for gzip and
    zstd."""
    if compression == "none":
        return data
    if compression == "gzip":
        packer = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return packer.compress(data) + packer.flush()
    if compression == "snappy":
        if snappy_framing == "raw":
            return pa.compress(data, codec="snappy", asbytes=True)
        if snappy_framing != "xerial":
            raise InvalidArgumentError(
                f"unknown snappy_framing {snappy_framing!r}: expected 'xerial' or 'raw'")
        return _xerial_snappy(data)
    if compression == "lz4":
        return _lz4_frame(data)
    if compression == "zstd":
        return pa.Codec("zstd", compression_level=level).compress(data, asbytes=True)
    raise InvalidArgumentError(
        f"unknown compression type {compression!r}: expected one of "
        f"{', '.join(COMPRESSION_IDS)}")


def encode_batch(
    records: Sequence[KafkaRecord] | Iterable[KafkaRecord],
    *,
    compression: str = "none",
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    log_append_time: int | None = None,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
    snappy_framing: str = "xerial",
) -> bytes:
    """One Kafka record batch (magic 2) of ``records``, CRC-32C computed.

    Each record is a :class:`KafkaRecord` (or a tuple of its fields): its ``offset``
    is absolute, stored as ``offset - base_offset``; offsets must increase (gaps are
    allowed: compacted data) and start at or after ``base_offset``. ``baseTimestamp``
    is the first record's timestamp and ``maxTimestamp`` the largest, as Kafka's
    builder writes them; ``log_append_time`` (ms) marks the batch LogAppendTime with
    that ``maxTimestamp``. ``last_offset_delta`` defaults to the last record's delta
    (the log cleaner keeps a larger one). ``compression``: 'none', 'gzip', 'snappy',
    'lz4', 'zstd' (see :func:`compress_records`)."""
    records = list(records)
    if not records:
        raise InvalidArgumentError("a Kafka record batch needs at least one record")
    if compression not in COMPRESSION_IDS:
        raise InvalidArgumentError(
            f"unknown compression type {compression!r}: expected one of "
            f"{', '.join(COMPRESSION_IDS)}")
    for name, value, bits in (("base_offset", base_offset, 64),
                              ("partition_leader_epoch", partition_leader_epoch, 32),
                              ("producer_id", producer_id, 64),
                              ("producer_epoch", producer_epoch, 16),
                              ("base_sequence", base_sequence, 32)):
        _check_int(name, value, bits)
    previous = base_offset - 1
    max_ts = NO_TIMESTAMP
    for i, record in enumerate(records):
        if not isinstance(record, tuple) or len(record) not in (4, 5):
            raise InvalidArgumentError(
                f"record {i} must be a KafkaRecord (offset, timestamp, key, value, "
                f"headers), got {type(record).__name__}")
        offset, ts = record[0], record[1]
        _check_int(f"record {i}'s offset", offset, 64)
        _check_int(f"record {i}'s timestamp", ts, 64)
        if offset <= previous:
            raise InvalidArgumentError(
                f"record {i}'s offset {offset} does not follow {previous}: offsets "
                f"increase from base_offset {base_offset}")
        if offset - base_offset > _INT32_MAX:
            raise InvalidArgumentError(
                f"record {i}'s offset {offset} is more than 2**31-1 after base_offset")
        previous = offset
        if ts > max_ts:
            max_ts = ts
    base_ts = records[0][1]
    for i, record in enumerate(records):
        if not _INT64_MIN <= record[1] - base_ts <= _INT64_MAX:
            raise InvalidArgumentError(
                f"record {i}'s timestamp {record[1]} is too far from the first's {base_ts}")
    last_delta = records[-1][0] - base_offset
    if last_offset_delta is not None:
        _check_int("last_offset_delta", last_offset_delta, 32)
        if last_offset_delta < last_delta:
            raise InvalidArgumentError(
                f"last_offset_delta {last_offset_delta} is below the last record's "
                f"offset delta {last_delta}")
        last_delta = last_offset_delta
    body = b"".join([_encode_record(r, base_offset, base_ts, i)
                     for i, r in enumerate(records)])
    return _finish_batch(body, len(records), compression, base_offset,
                         partition_leader_epoch, producer_id, producer_epoch, base_sequence,
                         transactional, control, log_append_time, last_delta, base_ts,
                         max_ts, compression_level, snappy_framing)


def _finish_batch(body: bytes, count: int, compression: str, base_offset: int,
                  partition_leader_epoch: int, producer_id: int, producer_epoch: int,
                  base_sequence: int, transactional: bool, control: bool,
                  log_append_time: int | None, last_delta: int, base_ts: int, max_ts: int,
                  compression_level: int | None, snappy_framing: str) -> bytes:
    """The batch of the records ``body`` (encoded, uncompressed): compressed, header,
    CRC-32C."""
    packed = compress_records(body, compression, level=compression_level,
                              snappy_framing=snappy_framing)
    attributes = COMPRESSION_IDS[compression]
    if log_append_time is not None:
        _check_int("log_append_time", log_append_time, 64)
        attributes |= TIMESTAMP_TYPE_BIT
        max_ts = log_append_time
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    header = KafkaBatchHeader(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(packed), partition_leader_epoch,
        MAGIC, 0, attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch,
        base_sequence, count)
    out = bytearray(header.pack())
    out += packed
    _U32.pack_into(out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


# --- the same batch from Arrow columns, vectorised ---------------------------------

_VARINT_STEPS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]
#: a timestamp or offset delta beyond this is encoded by :func:`encode_batch` (the
#: zigzag of int64 arithmetic below must not overflow)
_VECTOR_LIMIT = 1 << 61


def _zigzag_u64(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _varint_sizes(u: np.ndarray) -> np.ndarray:
    sizes = np.ones(len(u), np.int64)
    for step in _VARINT_STEPS:
        sizes += u >= step
    return sizes


def _put_varints(out: np.ndarray, at: np.ndarray, u: np.ndarray, sizes: np.ndarray) -> None:
    """Write the base-128 varints ``u`` (uint64, ``sizes`` bytes each) at ``out[at]``."""
    if not len(u):
        return
    for k in range(int(sizes.max())):
        more = sizes > k
        if not more.all():
            at, u, sizes = at[more], u[more], sizes[more]
        byte = (u >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(sizes > k + 1, np.uint64(0x80), np.uint64(0))
        out[at + k] = byte.astype(np.uint8)


def _binary_parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lengths with -1 for null, start of each value in ``data``, ``data``) of a binary
    Arrow array (any offset, nulls anywhere)."""
    array = array.cast(pa.binary()) if array.type != pa.binary() else array
    n = len(array)
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, n + 1, array.offset * 4).astype(np.int64) \
        if offsets_buf is not None else np.zeros(n + 1, np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None and data_buf.size \
        else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if array.null_count:
        lengths[np.asarray(array.is_null())] = -1
    return lengths, offsets[:-1], data


def _put_bytes(out: np.ndarray, at: np.ndarray, lengths: np.ndarray, starts: np.ndarray,
               data: np.ndarray) -> None:
    """Copy value i (``lengths[i]`` bytes of ``data`` from ``starts[i]``; none when -1)
    to ``out[at[i]:]``, all at once."""
    sizes = np.maximum(lengths, 0)
    if not sizes.any():
        return
    first, last = int(starts[0]), int(starts[-1] + max(lengths[-1], 0))
    if int(sizes.sum()) == last - first:  # the values lie back to back (no null's bytes)
        source = data[first:last]
    else:
        before = np.cumsum(sizes) - sizes
        step = np.arange(int(sizes.sum()), dtype=np.int64)
        source = data[step + np.repeat(starts - before, sizes)]
    out[_spans(len(out), at, sizes)] = source


def _spans(size: int, at: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A mask of ``size`` bytes, True in each ``[at[i], at[i] + sizes[i])`` (spans in
    order that do not overlap: each value follows its length varint), built as runs of
    False and True (a repeat, no per-byte arithmetic)."""
    n = len(at)
    ends = at + sizes
    runs = np.empty(2 * n + 1, np.int64)
    runs[0] = at[0]
    runs[1:-1:2] = sizes
    runs[2:-1:2] = at[1:] - ends[:-1]
    runs[-1] = size - ends[-1]
    flags = np.zeros(2 * n + 1, np.bool_)
    flags[1::2] = True
    return np.repeat(flags, runs)


def encode_batch_arrays(
    offset_deltas: np.ndarray,
    timestamps: np.ndarray,
    keys: pa.Array,
    values: pa.Array,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    log_append_time: int | None = None,
    last_offset_delta: int | None = None,
    compression: str = "none",
    snappy_framing: str = "xerial",
) -> bytes:
    """The batch :func:`encode_batch` builds for records without headers, from
    columns: ``offset_deltas`` (int, increasing from 0 or more, relative to
    ``base_offset``; gaps allowed), ``timestamps`` (int64 ms), ``keys`` and ``values``
    (binary Arrow arrays, nulls allowed), all of one length; ``compression`` and
    ``snappy_framing`` as :func:`encode_batch`. Every record is written at once with
    array arithmetic (no Python step per record): the same bytes as
    :func:`encode_batch`, which it falls back to for deltas beyond 2**61."""
    n = len(offset_deltas)
    if not n or len(timestamps) != n or len(keys) != n or len(values) != n:
        raise InvalidArgumentError(
            f"encode_batch_arrays needs columns of one length, at least 1: offset_deltas "
            f"{n}, timestamps {len(timestamps)}, keys {len(keys)}, values {len(values)}")
    deltas = np.asarray(offset_deltas, np.int64)
    ts = np.asarray(timestamps, np.int64)
    base_ts = int(ts[0])
    ts_deltas = ts - base_ts
    if (n > 1 and not (np.diff(deltas) > 0).all()) or deltas[0] < 0 \
            or int(deltas[-1]) > _INT32_MAX or int(ts.min()) <= -_VECTOR_LIMIT \
            or int(ts.max()) >= _VECTOR_LIMIT:
        return encode_batch(
            [KafkaRecord(base_offset + int(d), int(t), k, v, ())
             for d, t, k, v in zip(deltas, ts, keys.to_pylist(), values.to_pylist())],
            base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
            producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_sequence, transactional=transactional, control=control,
            log_append_time=log_append_time, last_offset_delta=last_offset_delta,
            compression=compression, snappy_framing=snappy_framing)
    if compression not in COMPRESSION_IDS:
        raise InvalidArgumentError(
            f"unknown compression type {compression!r}: expected one of "
            f"{', '.join(COMPRESSION_IDS)}")
    for name, value, bits in (("base_offset", base_offset, 64),
                              ("partition_leader_epoch", partition_leader_epoch, 32),
                              ("producer_id", producer_id, 64),
                              ("producer_epoch", producer_epoch, 16),
                              ("base_sequence", base_sequence, 32)):
        _check_int(name, value, bits)
    last_delta = int(deltas[-1])
    if last_offset_delta is not None:
        _check_int("last_offset_delta", last_offset_delta, 32)
        if last_offset_delta < last_delta:
            raise InvalidArgumentError(
                f"last_offset_delta {last_offset_delta} is below the last record's "
                f"offset delta {last_delta}")
        last_delta = last_offset_delta
    ts_z, off_z = _zigzag_u64(ts_deltas), _zigzag_u64(deltas)
    ts_n, off_n = _varint_sizes(ts_z), _varint_sizes(off_z)
    key_len, key_start, key_data = _binary_parts(keys)
    value_len, value_start, value_data = _binary_parts(values)
    key_z, value_z = _zigzag_u64(key_len), _zigzag_u64(value_len)
    key_n, value_n = _varint_sizes(key_z), _varint_sizes(value_z)
    # attributes, the four varints, key and value bytes, headersCount 0
    body = 1 + ts_n + off_n + key_n + np.maximum(key_len, 0) + value_n \
        + np.maximum(value_len, 0) + 1
    body_z = _zigzag_u64(body)
    body_n = _varint_sizes(body_z)
    ends = np.cumsum(body_n + body)
    out = np.zeros(int(ends[-1]), np.uint8)  # attributes and headersCount stay 0
    at = ends - body_n - body
    _put_varints(out, at, body_z, body_n)
    at = at + body_n + 1
    _put_varints(out, at, ts_z, ts_n)
    at = at + ts_n
    _put_varints(out, at, off_z, off_n)
    at = at + off_n
    _put_varints(out, at, key_z, key_n)
    at = at + key_n
    _put_bytes(out, at, key_len, key_start, key_data)
    at = at + np.maximum(key_len, 0)
    _put_varints(out, at, value_z, value_n)
    at = at + value_n
    _put_bytes(out, at, value_len, value_start, value_data)
    return _finish_batch(out.tobytes(), n, compression, base_offset, partition_leader_epoch,
                         producer_id, producer_epoch, base_sequence, transactional, control,
                         log_append_time, last_delta, base_ts, int(ts.max()), None,
                         snappy_framing)


def snappy_framing_of(section) -> str:
    """The snappy framing of a snappy-compressed records section: 'xerial' (Kafka's
    Java client's, starting with the xerial magic) or 'raw' (librdkafka's)."""
    return "xerial" if bytes(_view(section, 0)[:len(_XERIAL_MAGIC)]) == _XERIAL_MAGIC \
        else "raw"


def kept_header_fields(header) -> dict:
    """The arguments of :func:`encode_batch` / :func:`encode_batch_arrays` that keep
    the header fields of an existing frame of either kind (``header``: a
    :class:`KafkaBatchHeader` or the same 13 fields, as
    :class:`~sparklog.format.header.FrameHeader` holds them): base offset, leader
    epoch, producer id, epoch and base sequence, transactional and control bits,
    LogAppendTime (as ``maxTimestamp``) and ``lastOffsetDelta``."""
    header = KafkaBatchHeader._make(header)
    return dict(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, transactional=header.is_transactional,
        control=header.is_control,
        log_append_time=header.max_timestamp if header.timestamp_type else None,
        last_offset_delta=header.last_offset_delta)


def retained_batch(header, section, keep, *, where: str | None = None) -> bytes:
    """The stored batch of ``header`` (a :class:`KafkaBatchHeader` or the same 13
    fields) and records ``section`` holding only the records ``keep`` tells (numpy
    bools, one per record, at least one True), rebuilt as Kafka's log cleaner rebuilds
    a batch that loses records (``MemoryRecords.filterTo``): the same ``baseOffset``,
    ``partitionLeaderEpoch``, ``lastOffsetDelta``, producer id, epoch and base
    sequence, timestamp type, transactional and control bits; each kept record with its
    own offset delta, timestamp, key, value and headers; compressed with the batch's
    own codec (snappy in its own framing); ``baseTimestamp`` the first kept record's
    timestamp, ``maxTimestamp`` the largest kept one (a LogAppendTime batch keeps its
    own); CRC-32C computed. Records are read as :func:`records_columns` reads them
    (its errors)."""
    header = KafkaBatchHeader._make(header)
    columns, deltas = records_columns(header, section, position=0, where=where)
    keep = np.asarray(keep, np.bool_)
    if len(keep) != header.record_count or not keep.any():
        raise InvalidArgumentError(
            f"keep must tell each of the batch's {header.record_count} records, at least "
            f"one kept: got {len(keep)} values, {int(keep.sum())} True")
    compression = header.compression
    framing = snappy_framing_of(section) if compression == "snappy" else "xerial"
    fields = dict(kept_header_fields(header), compression=compression,
                  snappy_framing=framing)
    rows = np.flatnonzero(keep)
    if columns.headers is None:
        mask = pa.array(keep)
        return encode_batch_arrays(deltas[rows], columns.timestamps[rows],
                                   columns.keys.filter(mask), columns.values.filter(mask),
                                   **fields)
    keys, values = columns.keys.to_pylist(), columns.values.to_pylist()
    base = header.base_offset
    return encode_batch(
        [KafkaRecord(base + int(deltas[i]), int(columns.timestamps[i]), keys[i], values[i],
                     tuple(columns.headers[i] or ())) for i in rows.tolist()],
        **fields)
