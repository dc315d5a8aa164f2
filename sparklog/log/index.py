"""Sparse offset and time indexes of a segment, and the sealed-segment summary.

Both indexes are built in memory while a segment is active (one entry per
``index.interval.bytes`` of frames, always at a frame boundary) and written once, when
the segment is sealed, with :meth:`FileIO.write_atomic`. Lookups use ``bisect``.

``.index`` file (big-endian)::

    0   4  magic b"SLOI"            40  8  max_timestamp_offset (-1 if empty)
    4   2  version (1)              48  8  record_count
    6   2  flags                    56  4  frame_count
    8   8  base_offset              60  4  entry_count
    16  8  next_offset              64  4  CRC32C of bytes [0, 64)
    24  8  size of the .log         68  4  CRC32C of the entries
    32  8  max_timestamp (-1)       72  .. entries: u32 relative offset, u32 position

The first 72 bytes are the :class:`SegmentSummary`: what the log needs to know about a
sealed segment (end offset, size, max timestamp) without reading its ``.log``. Flags:
bit 0 (:data:`FLAG_NO_CONTROL`) says the segment holds no control frame, so
``record_count`` is what a read of the whole segment returns (a count answered without
the ``.log``); indexes written before the flags existed have 0 there (unknown).

``.timeindex`` file::

    0 4 magic b"SLTI", 4 2 version (1), 6 2 reserved, 8 8 base_offset, 16 4 entry_count,
    20 4 CRC32C of bytes [0, 20) followed by the entries,
    24 .. entries: i64 timestamp, u32 relative offset

A time index entry ``(T, r)`` promises that every record of the segment *before*
relative offset ``r`` has a timestamp ``<= T``; so the first record with a timestamp
``>= ts`` is at or after the frame at ``r`` of the last entry with ``T < ts``. Each
``r`` also has an exact offset index entry, which gives its file position.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..format.frame import crc32c

INDEX_MAGIC = b"SLOI"
TIMEINDEX_MAGIC = b"SLTI"
INDEX_VERSION = 1
FLAG_NO_CONTROL = 1
"""``.index`` flag: no control frame in the segment (``record_count`` is all data)."""

_SUMMARY = struct.Struct(">4sHHqqqqqqii")
_INDEX_HEADER = struct.Struct(">4sHHqqqqqqiiII")
INDEX_HEADER_SIZE = _INDEX_HEADER.size
assert INDEX_HEADER_SIZE == 72
_TIME_HEADER = struct.Struct(">4sHHqiI")
TIMEINDEX_HEADER_SIZE = _TIME_HEADER.size
assert TIMEINDEX_HEADER_SIZE == 24
_U32_MAX = (1 << 32) - 1


@dataclass(frozen=True)
class SegmentSummary:
    """What a sealed segment holds, stored in its ``.index`` header.

    ``next_offset`` is one past the last offset, ``size`` the ``.log`` length,
    ``max_timestamp`` the largest record timestamp (-1 if none) and
    ``max_timestamp_offset`` the first offset of the frame that carries it;
    ``no_control`` is True when the segment is known to hold no control frame (then
    ``record_count`` counts exactly the records a read returns).
    """

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int = -1
    max_timestamp_offset: int = -1
    record_count: int = 0
    frame_count: int = 0
    no_control: bool = False


def _entries_to_bytes(fmt: str, columns) -> bytes:
    n = len(columns[0])
    flat = [v for row in zip(*columns) for v in row]
    return struct.pack(f">{fmt * n}", *flat)


class OffsetIndex:
    """Sparse map relative offset (u32) -> file position (u32) of a frame's start."""

    __slots__ = ("base_offset", "relative_offsets", "positions")

    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.relative_offsets = array("I")
        self.positions = array("I")

    def __len__(self) -> int:
        return len(self.positions)

    def append(self, offset: int, position: int) -> None:
        """Add an entry for the frame starting at absolute ``offset`` and ``position``
        (both must grow strictly; relative offsets and positions must fit in u32)."""
        rel = offset - self.base_offset
        if self.positions and (rel <= self.relative_offsets[-1]
                               or position <= self.positions[-1]):
            raise ValueError(f"index entries must grow: ({rel}, {position}) after "
                             f"({self.relative_offsets[-1]}, {self.positions[-1]})")
        self.relative_offsets.append(rel)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before absolute ``offset``, or
        (base_offset, 0) if none: where to start scanning for ``offset``."""
        i = bisect.bisect_right(self.relative_offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.relative_offsets[i], self.positions[i]

    def entries(self) -> list[tuple[int, int]]:
        """Every entry as (absolute offset, position)."""
        return [(self.base_offset + r, p) for r, p in zip(self.relative_offsets, self.positions)]

    def to_bytes(self, summary: SegmentSummary) -> bytes:
        """The ``.index`` file: summary header followed by the entries."""
        body = _entries_to_bytes("II", (self.relative_offsets, self.positions))
        head = _SUMMARY.pack(
            INDEX_MAGIC, INDEX_VERSION, FLAG_NO_CONTROL if summary.no_control else 0,
            summary.base_offset, summary.next_offset,
            summary.size, summary.max_timestamp, summary.max_timestamp_offset,
            summary.record_count, summary.frame_count, len(self))
        return head + struct.pack(">II", crc32c(head), crc32c(body)) + body

    @classmethod
    def from_bytes(cls, data, path: str = "") -> tuple[SegmentSummary, "OffsetIndex"]:
        """Parse a whole ``.index`` file; CorruptRecordError names the path."""
        summary, count, body_crc = parse_index_header(data, path)
        body = memoryview(data)[INDEX_HEADER_SIZE:]
        if len(body) != 8 * count:
            raise CorruptRecordError(
                f"offset index {path}: {len(body)} entry bytes, header says {count} entries",
                path=path, position=INDEX_HEADER_SIZE)
        if crc32c(body) != body_crc:
            raise CorruptRecordError(f"offset index {path}: entries fail their CRC32C",
                                     path=path, position=INDEX_HEADER_SIZE)
        index = cls(summary.base_offset)
        flat = struct.unpack(f">{2 * count}I", body)
        index.relative_offsets = array("I", flat[0::2])
        index.positions = array("I", flat[1::2])
        return summary, index


def parse_index_header(data, path: str = "") -> tuple[SegmentSummary, int, int]:
    """(summary, entry count, entries CRC) from the first 72 bytes of an ``.index``
    file; CorruptRecordError (naming ``path``) if they are short, foreign or corrupt."""
    if len(data) < INDEX_HEADER_SIZE:
        raise CorruptRecordError(
            f"offset index {path}: {len(data)} bytes, its header needs {INDEX_HEADER_SIZE}",
            path=path, position=0)
    (magic, version, flags, base, next_offset, size, max_ts, max_ts_off, records, frames,
     count, head_crc, body_crc) = _INDEX_HEADER.unpack_from(data, 0)
    if magic != INDEX_MAGIC or version != INDEX_VERSION:
        raise CorruptRecordError(
            f"offset index {path}: not a sparklog index (magic {magic!r}, version {version})",
            path=path, position=0)
    if crc32c(memoryview(data)[:_SUMMARY.size]) != head_crc:
        raise CorruptRecordError(f"offset index {path}: header fails its CRC32C",
                                 path=path, position=0)
    summary = SegmentSummary(base, next_offset, size, max_ts, max_ts_off, records, frames,
                             bool(flags & FLAG_NO_CONTROL))
    return summary, count, body_crc


class TimeIndex:
    """Sparse map timestamp (i64, growing) -> relative offset (u32); see module doc."""

    __slots__ = ("base_offset", "timestamps", "relative_offsets")

    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.relative_offsets = array("I")

    def __len__(self) -> int:
        return len(self.timestamps)

    def maybe_append(self, max_timestamp_before: int, offset: int) -> None:
        """Record that records before absolute ``offset`` have timestamps
        ``<= max_timestamp_before``. Keeps timestamps strictly growing: an equal
        timestamp moves the last entry forward to ``offset``."""
        rel = offset - self.base_offset
        if self.timestamps and max_timestamp_before <= self.timestamps[-1]:
            if max_timestamp_before == self.timestamps[-1] and rel > self.relative_offsets[-1]:
                self.relative_offsets[-1] = rel
            return
        self.timestamps.append(max_timestamp_before)
        self.relative_offsets.append(rel)

    def lookup(self, timestamp: int) -> int:
        """Absolute offset of a frame start from which to scan for the first record
        with a timestamp >= ``timestamp`` (base_offset if no entry helps)."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.base_offset + (self.relative_offsets[i] if i >= 0 else 0)

    def entries(self) -> list[tuple[int, int]]:
        """Every entry as (timestamp, absolute offset)."""
        return [(t, self.base_offset + r) for t, r in zip(self.timestamps, self.relative_offsets)]

    def to_bytes(self) -> bytes:
        """The ``.timeindex`` file."""
        body = _entries_to_bytes("qI", (self.timestamps, self.relative_offsets))
        head = _TIME_HEADER.pack(TIMEINDEX_MAGIC, INDEX_VERSION, 0, self.base_offset,
                                 len(self), 0)[:20]
        return head + struct.pack(">I", crc32c(body, crc32c(head))) + body

    @classmethod
    def from_bytes(cls, data, path: str = "") -> "TimeIndex":
        """Parse a whole ``.timeindex`` file; CorruptRecordError names the path."""
        if len(data) < TIMEINDEX_HEADER_SIZE:
            raise CorruptRecordError(
                f"time index {path}: {len(data)} bytes, its header needs "
                f"{TIMEINDEX_HEADER_SIZE}", path=path, position=0)
        magic, version, _, base, count, crc = _TIME_HEADER.unpack_from(data, 0)
        if magic != TIMEINDEX_MAGIC or version != INDEX_VERSION:
            raise CorruptRecordError(
                f"time index {path}: not a sparklog time index (magic {magic!r}, "
                f"version {version})", path=path, position=0)
        view = memoryview(data)
        body = view[TIMEINDEX_HEADER_SIZE:]
        if len(body) != 12 * count or crc32c(body, crc32c(view[:20])) != crc:
            raise CorruptRecordError(
                f"time index {path}: entries are truncated or fail their CRC32C",
                path=path, position=TIMEINDEX_HEADER_SIZE)
        index = cls(base)
        flat = struct.unpack(f">{'qI' * count}", body)
        index.timestamps = array("q", flat[0::2])
        index.relative_offsets = array("I", flat[1::2])
        return index


class IndexPoints:
    """The sparse rule of docs/format.md 4, for every writer of offset and time index
    entries frame by frame (a segment, a shared segment's run): a frame gets an entry
    when it starts at least ``interval_bytes`` after the previous entry's frame (so
    never the first frame, for a positive interval); beside it, a time entry of the
    running maximum timestamp of the frames before it."""

    __slots__ = ("interval_bytes", "bytes_since")

    def __init__(self, interval_bytes: int):
        self.interval_bytes = interval_bytes
        self.bytes_since = 0

    def due(self, size: int) -> bool:
        """Account for the next frame (``size`` bytes); True when it gets entries
        (:meth:`add` them)."""
        due = self.bytes_since >= self.interval_bytes
        if due:
            self.bytes_since = 0
        self.bytes_since += size
        return due

    @staticmethod
    def add(offsets: OffsetIndex, times: TimeIndex, offset: int, position: int,
            max_timestamp_before: int) -> None:
        """The entries of the frame at absolute ``offset`` and ``position``, the
        frames before it having timestamps up to ``max_timestamp_before`` (-1: none)."""
        offsets.append(offset, position)
        if max_timestamp_before >= 0:
            times.maybe_append(max_timestamp_before, offset)


def fits_relative(base_offset: int, offset: int) -> bool:
    """True if ``offset`` can be stored relative to ``base_offset`` in a u32."""
    return 0 <= offset - base_offset <= _U32_MAX
