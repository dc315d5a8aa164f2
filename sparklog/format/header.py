"""Frame header: the fixed 61-byte prefix of every frame (layout of Kafka's RecordBatch v2).

All integers are big-endian. ``base_offset`` and ``leader_epoch`` are stamped by the
broker and lie outside the CRC; the CRC32C covers every byte from ``attributes`` to the
end of the frame.

======  =====  ==================  =============================================
offset  size   field               meaning
======  =====  ==================  =============================================
0       8      base_offset         offset of the first record (stamped by broker)
8       4      length              bytes after this field (frame size - 12)
12      4      leader_epoch        epoch of the leader that appended (stamped)
16      1      magic               frame kind: 1 an Arrow frame, 2 a Kafka record batch
17      4      crc                 CRC32C (Castagnoli) of bytes [21, end)
21      2      attributes          bits 0-2 codec, 3 timestamp type, 4 transactional,
                                   5 control, 6 explicit offsets
23      4      last_offset_delta   last record's offset - base_offset
27      8      first_timestamp     ms since epoch of the first record
35      8      max_timestamp       largest record timestamp (ms)
43      8      producer_id         -1 if not idempotent
51      2      producer_epoch      -1 if not idempotent
53      4      base_sequence       -1 if not idempotent
57      4      record_count        number of records in the body
61      ...    body                Arrow IPC stream (schema + one record batch)
======  =====  ==================  =============================================

A Kafka record batch (magic 2, :mod:`sparklog.format.kafka_batch`) has the same layout
and is the second frame kind a segment holds: everything that reads headers alone
(framing, stamping, CRC, offsets, timestamps, producer fields, record counts) is the
same for both. What differs is read after dispatching on ``magic``: attributes bits 0-2
(Kafka's codecs: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 6 (Kafka's delete
horizon, not explicit offsets) and the body (Kafka's records, each with its own offset
delta).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + length: the bytes not counted in ``length``
MAGIC = 1
#: magic of the second frame kind: a Kafka record batch (v2), stored as a client sent it
KAFKA_MAGIC = 2
#: the frame kinds a segment holds
MAGICS = (MAGIC, KAFKA_MAGIC)


class HeaderField(NamedTuple):
    """One field of the header: its name, byte position in the frame and struct code
    (big-endian). The one place a field's position is stated (docs/format.md and the
    JVM reader's ``FrameHeader.java`` mirror it; the golden tests pin all three)."""

    name: str
    position: int
    code: str

    @property
    def size(self) -> int:
        """Width of the field in bytes."""
        return struct.calcsize(">" + self.code)

    def read(self, buf, pos: int = 0) -> int:
        """The field of the frame at ``buf[pos:]``."""
        return struct.unpack_from(">" + self.code, buf, pos + self.position)[0]

    def write(self, buf, pos: int, value: int) -> None:
        """Set the field of the frame at ``buf[pos:]`` in place (the CRC is not redone:
        see :func:`sparklog.format.frame.reseal`)."""
        struct.pack_into(">" + self.code, buf, pos + self.position, value)


BASE_OFFSET = HeaderField("base_offset", 0, "q")
LENGTH = HeaderField("length", 8, "i")
LEADER_EPOCH = HeaderField("leader_epoch", 12, "i")
MAGIC_FIELD = HeaderField("magic", 16, "b")
CRC = HeaderField("crc", 17, "I")
ATTRIBUTES = HeaderField("attributes", 21, "h")
LAST_OFFSET_DELTA = HeaderField("last_offset_delta", 23, "i")
FIRST_TIMESTAMP = HeaderField("first_timestamp", 27, "q")
MAX_TIMESTAMP = HeaderField("max_timestamp", 35, "q")
PRODUCER_ID = HeaderField("producer_id", 43, "q")
PRODUCER_EPOCH = HeaderField("producer_epoch", 51, "h")
BASE_SEQUENCE = HeaderField("base_sequence", 53, "i")
RECORD_COUNT = HeaderField("record_count", 57, "i")

#: The header's fields in byte order (the fields of :class:`FrameHeader`).
HEADER_FIELDS = (BASE_OFFSET, LENGTH, LEADER_EPOCH, MAGIC_FIELD, CRC, ATTRIBUTES,
                 LAST_OFFSET_DELTA, FIRST_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID,
                 PRODUCER_EPOCH, BASE_SEQUENCE, RECORD_COUNT)

CRC_START = ATTRIBUTES.position  # CRC covers [CRC_START, end of frame)
# positions of fields patched in place by the broker (outside the CRC)
BASE_OFFSET_POS = BASE_OFFSET.position
LEADER_EPOCH_POS = LEADER_EPOCH.position

_HEADER = struct.Struct(">" + "".join(f.code for f in HEADER_FIELDS))
#: producer id, producer epoch and base sequence: adjacent, restamped together
PRODUCER_FIELDS = struct.Struct(">" + PRODUCER_ID.code + PRODUCER_EPOCH.code
                                + BASE_SEQUENCE.code)
assert _HEADER.size == HEADER_SIZE
assert all(f.position == _HEADER.size - struct.calcsize(
    ">" + "".join(g.code for g in HEADER_FIELDS[i:])) for i, f in enumerate(HEADER_FIELDS))
assert PRODUCER_EPOCH.position == PRODUCER_ID.position + PRODUCER_ID.size
assert BASE_SEQUENCE.position == PRODUCER_EPOCH.position + PRODUCER_EPOCH.size

# attributes bits
CODEC_MASK = 0x07
CODEC_NONE, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2
CODEC_NAMES = {CODEC_NONE: "none", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
CODEC_IDS = {v: k for k, v in CODEC_NAMES.items()}
#: a Kafka batch's codecs (attributes bits 0-2 of a magic-2 frame), Kafka's names
KAFKA_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_TYPE_BIT = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
EXPLICIT_OFFSETS_BIT = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
#: an idempotent producer's sequence numbers wrap at 2**31 (an int32 field), as in Kafka
SEQUENCE_LIMIT = 1 << 31


class FrameHeader(NamedTuple):
    """Decoded frame header; see the module docstring for the byte layout. (A named
    tuple: the broker decodes one per frame it appends, and a tuple is built in C.)"""

    base_offset: int
    length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    # --- derived -----------------------------------------------------------------
    @property
    def size(self) -> int:
        """Total bytes of the frame including the 12-byte log overhead."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the last record in the frame."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset the next frame will start at."""
        return self.last_offset + 1

    @property
    def is_kafka(self) -> bool:
        """True for a Kafka record batch (magic 2), False for an Arrow frame."""
        return self.magic == KAFKA_MAGIC

    @property
    def codec(self) -> str:
        """Compression codec name: an Arrow frame's 'none', 'lz4' or 'zstd'; a Kafka
        batch's 'none', 'gzip', 'snappy', 'lz4' or 'zstd' ('unknown' otherwise)."""
        names = KAFKA_CODEC_NAMES if self.magic == KAFKA_MAGIC else CODEC_NAMES
        return names.get(self.attributes & CODEC_MASK, "unknown")

    @property
    def log_append_time(self) -> bool:
        """True when timestamps are LogAppendTime (max_timestamp applies to all)."""
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def timestamp_type(self) -> int:
        """Kafka's timestampType column value: 0 CreateTime, 1 LogAppendTime."""
        return 1 if self.log_append_time else 0

    @property
    def explicit_offsets(self) -> bool:
        """True when the records' offsets are read from the body rather than being
        ``base_offset + row``: an Arrow frame with the explicit-offsets bit (an
        ``__offset_delta`` column: compacted data); a Kafka batch whose records do not
        fill ``[base_offset, last_offset]`` (records removed by compaction: each record
        carries its own offset delta, and bit 6 is Kafka's delete horizon)."""
        if self.magic == KAFKA_MAGIC:
            return self.record_count != self.last_offset_delta + 1
        return bool(self.attributes & EXPLICIT_OFFSETS_BIT)

    @property
    def is_transactional(self) -> bool:
        """True for frames of a transaction (its data and its marker)."""
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        """True for control frames (not user records)."""
        return bool(self.attributes & CONTROL_BIT)

    def pack(self) -> bytes:
        """The 61 header bytes."""
        return _HEADER.pack(*self)

    def with_(self, **changes) -> "FrameHeader":
        """A copy with some fields changed."""
        return self._replace(**changes)


assert FrameHeader._fields == tuple(f.name for f in HEADER_FIELDS)


def unpack_header(buf, pos: int = 0) -> FrameHeader:
    """Decode the header at ``buf[pos:pos+61]`` (no validation beyond the size)."""
    return _new_header(FrameHeader, _HEADER.unpack_from(buf, pos))


_new_header = tuple.__new__
