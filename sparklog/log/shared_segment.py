"""The shared segment codec (``.seg``; docs/storage.md, "Shared segment format").

A shared segment holds *runs*, each a partition's frames of consecutive offsets, sorted
by topic, partition and offset, then a footer describing them and a 40-byte trailer.
All integers big-endian, CRCs CRC32C::

    [frames of run 1][frames of run 2]...[footer][trailer]

    trailer   0 4 "SLSS", 4 2 version (1), 6 2 level, 8 8 footer position,
              16 4 footer length, 20 4 CRC32C of the footer, 24 8 source count,
              32 4 flags (0), 36 4 CRC32C of [0, 36)
    footer    topic count u32; per topic (sorted by name): name (u16 + UTF-8),
                first run u32, run count u32
              run count u32; per run (80 bytes): partition i32, base offset i64,
                next offset i64, position i64, size u32, max timestamp i64,
                max timestamp offset i64, record count i64, frame count u32, flags u16
                (bit 0: no control frame), reserved u16, first index entry u32, index
                entry count u32, first time entry u32, time entry count u32
              index entry count u32; per entry: u32 offset relative to the run's base,
                u32 position relative to the run
              time entry count u32; per entry: i64 timestamp, u32 relative offset
              source count u32; per source: kind u8 (0 a WAL file, 1 a shared
                segment), name (u16 + UTF-8)
              placed count u32; per run placed in own segments: topic index u32,
                partition i32, base offset i64, next offset i64

A run's index and time entries follow the sparse rules of ``.index`` and
``.timeindex`` (docs/format.md 4, :class:`~sparklog.log.index.IndexPoints`), built into
the same :class:`~sparklog.log.index.OffsetIndex` and
:class:`~sparklog.log.index.TimeIndex`, with positions relative to the run. Runs follow
each other from position 0 and the footer follows the last one.

:class:`SharedSegmentWriter` writes one to an output stream; :func:`open_shared_segment`
reads the trailer (one positioned read of the last 40 bytes) and the footer, and
:func:`read_run` a run's frames from an offset through its index entries. Anything
that does not check out raises :class:`CorruptSharedSegmentError`, naming the file,
position and field: such a file is not committed and is never read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from ..errors import CorruptRecordError, DataLossError, InvalidArgumentError
from ..format.frame import Frame, check_follows, crc32c, validate_frame
from ..format.wal import check_frames
from ..storage.base import FileIO
from .index import IndexPoints, OffsetIndex, SegmentSummary, TimeIndex, fits_relative

SEGMENT_MAGIC = b"SLSS"
VERSION = 1
#: suffix of a shared segment's name
SHARED_SUFFIX = ".seg"
#: a source's kind: a WAL file, or a shared segment (a merge's input)
SOURCE_WAL, SOURCE_SHARED = 0, 1
#: run flag: the run holds no control frame (as the ``.index`` summary's bit 0)
RUN_NO_CONTROL = 1

_TRAILER = struct.Struct(">4sHHqIIqI")
TRAILER_SIZE = _TRAILER.size + 4
assert TRAILER_SIZE == 40
_RUN = struct.Struct(">iqqqIqqqIHHIIII")
RUN_SIZE = _RUN.size
assert RUN_SIZE == 80
_TOPIC_RUNS = struct.Struct(">II")
_INDEX_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_PLACED = struct.Struct(">Iiqq")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U32_MAX = (1 << 32) - 1


class CorruptSharedSegmentError(DataLossError):
    """A shared segment's bytes do not check out (its trailer, footer or a run's
    frames): the message names the file, the position and the field."""


def _fail(path, pos: int, what: str) -> CorruptSharedSegmentError:
    return CorruptSharedSegmentError(f"shared segment {path or '<bytes>'} at position "
                                     f"{pos}: {what}", path=path, position=pos)


def shared_segment_name(level: int, broker_id: int, incarnation: int, seq: int) -> str:
    """``L<level>-<broker id:05d>-<incarnation:020d>-<seq:010d>.seg`` (docs/storage.md,
    "Layout and names")."""
    return f"L{level}-{broker_id:05d}-{incarnation:020d}-{seq:010d}{SHARED_SUFFIX}"


@dataclass(frozen=True)
class SharedRun:
    """A run of a shared segment: ``topic``-``partition``'s frames of offsets
    ``[base_offset, next_offset)``, ``size`` bytes from file position ``position``,
    with its summary and its sparse indexes (positions relative to the run)."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    position: int
    size: int
    max_timestamp: int
    max_timestamp_offset: int
    record_count: int
    frame_count: int
    no_control: bool
    offset_index: OffsetIndex = field(compare=False, repr=False)
    time_index: TimeIndex = field(compare=False, repr=False)

    @property
    def summary(self) -> SegmentSummary:
        """The run's summary, as a sealed segment's ``.index`` header holds one."""
        return SegmentSummary(self.base_offset, self.next_offset, self.size,
                              self.max_timestamp, self.max_timestamp_offset,
                              self.record_count, self.frame_count, self.no_control)


@dataclass(frozen=True)
class PlacedRun:
    """A run of the same WAL file that went to the partition's own segments (readers
    ignore these; recovery uses them)."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int


@dataclass(frozen=True)
class Source:
    """A file whose frames the segment holds: ``kind`` :data:`SOURCE_WAL` or
    :data:`SOURCE_SHARED`, and its name."""

    kind: int
    name: str


@dataclass(frozen=True)
class SharedSegment:
    """A shared segment's trailer and footer, as read (or as written)."""

    path: str | None
    level: int
    footer_position: int
    runs: tuple[SharedRun, ...]
    sources: tuple[Source, ...]
    placed: tuple[PlacedRun, ...]

    def runs_of(self, topic: str, partition: int) -> list[SharedRun]:
        """The runs of one partition, in offset order."""
        return [r for r in self.runs if r.topic == topic and r.partition == partition]


def _encode_name(name: str, what: str) -> bytes:
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(name).__name__}")
    data = name.encode("utf-8")
    if not data or len(data) > 0xFFFF:
        raise InvalidArgumentError(f"{what} {name!r} must be 1 to 65535 bytes of UTF-8")
    return _U16.pack(len(data)) + data


def _check_int(what: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
        raise InvalidArgumentError(f"{what} must be an int in [{lo}, {hi}), got {value!r}")


class SharedSegmentWriter:
    """Write a shared segment to ``out`` (anything with ``write(bytes)``: a FileIO
    output stream): :meth:`add_run` per run in (topic, partition, offset) order,
    :meth:`add_source` and :meth:`add_placed` in any order, then :meth:`finish`, which
    writes the footer and trailer. The caller commits the file (hsync, close, rename)."""

    def __init__(self, out, *, level: int, index_interval_bytes: int = 4096):
        _check_int("level", level, 0, 1 << 16)
        _check_int("index_interval_bytes", index_interval_bytes, 0, 1 << 31)
        self.out = out
        self.level = level
        self.index_interval_bytes = index_interval_bytes
        self.position = 0
        self.runs: list[SharedRun] = []
        self.sources: list[Source] = []
        self.placed: list[PlacedRun] = []
        self.finished = False

    def _check_open(self) -> None:
        if self.finished:
            raise InvalidArgumentError("the shared segment was finished already")

    def add_run(self, topic: str, partition: int, frames: Iterable) -> SharedRun:
        """Write a run: ``frames`` are bytes-like buffers, each of one or more whole
        frames, of consecutive offsets. Runs come sorted by topic, partition and base
        offset, a partition's runs not overlapping (InvalidArgumentError otherwise)."""
        self._check_open()
        _encode_name(topic, "topic")
        _check_int("partition", partition, 0, 1 << 31)
        offsets = times = None
        points = IndexPoints(self.index_interval_bytes)
        base = expected = None
        size = records = count = 0
        max_ts, max_ts_offset, no_control = -1, -1, True
        start = self.position
        for buf in frames:
            view = memoryview(buf).cast("B")
            pos = 0
            while pos < len(view):
                try:
                    h = validate_frame(view, pos, check_body=False)
                except CorruptRecordError as exc:
                    raise InvalidArgumentError(
                        f"run of {topic}-{partition}: {exc}") from None
                if expected is None:
                    base = h.base_offset
                    offsets, times = OffsetIndex(base), TimeIndex(base)
                    self._check_order(topic, partition, base)
                else:
                    try:
                        check_follows(h, expected, f" of the run of {topic}-{partition}")
                    except CorruptRecordError as exc:
                        raise InvalidArgumentError(str(exc)) from None
                assert offsets is not None and times is not None and base is not None
                if not fits_relative(base, h.next_offset - 1) or size + h.size > _U32_MAX:
                    raise InvalidArgumentError(
                        f"run of {topic}-{partition} from offset {base}: offset "
                        f"{h.last_offset} or {size + h.size} bytes do not fit a run's "
                        "u32 fields")
                if points.due(h.size):
                    IndexPoints.add(offsets, times, h.base_offset, size, max_ts)
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_offset = h.max_timestamp, h.base_offset
                records += h.record_count
                count += 1
                no_control = no_control and not h.is_control
                expected = h.next_offset
                size += h.size
                pos += h.size
            self.out.write(view)
            self.position += len(view)
        if base is None or expected is None or offsets is None or times is None:
            raise InvalidArgumentError(f"run of {topic}-{partition}: no frames")
        run = SharedRun(topic, partition, base, expected, start, size, max_ts, max_ts_offset,
                        records, count, no_control, offsets, times)
        self.runs.append(run)
        return run

    def _check_order(self, topic: str, partition: int, base: int) -> None:
        if not self.runs:
            return
        last = self.runs[-1]
        if (topic, partition) < (last.topic, last.partition) or (
                (topic, partition) == (last.topic, last.partition)
                and base < last.next_offset):
            raise InvalidArgumentError(
                f"run of {topic}-{partition} from offset {base} after the run of "
                f"{last.topic}-{last.partition} [{last.base_offset}, {last.next_offset}): "
                "runs are written sorted by topic, partition and offset, without overlap")

    def add_source(self, kind: int, name: str) -> None:
        """Name a file whose frames this segment holds (a WAL file, or a merged shared
        segment)."""
        self._check_open()
        if kind not in (SOURCE_WAL, SOURCE_SHARED):
            raise InvalidArgumentError(
                f"source kind {kind!r}: {SOURCE_WAL} (a WAL file) or {SOURCE_SHARED} "
                "(a shared segment)")
        _encode_name(name, "source name")
        self.sources.append(Source(kind, name))

    def add_placed(self, topic: str, partition: int, base_offset: int,
                   next_offset: int) -> None:
        """Record a run that went to the partition's own segments."""
        self._check_open()
        _encode_name(topic, "topic")
        _check_int("partition", partition, 0, 1 << 31)
        _check_int("base_offset", base_offset, 0, 1 << 63)
        _check_int("next_offset", next_offset, base_offset + 1, 1 << 63)
        self.placed.append(PlacedRun(topic, partition, base_offset, next_offset))

    def finish(self) -> SharedSegment:
        """Write the footer and the trailer; the segment as a reader will see it."""
        self._check_open()
        footer = encode_footer(self.runs, self.sources, self.placed)
        trailer = _TRAILER.pack(SEGMENT_MAGIC, VERSION, self.level, self.position,
                                len(footer), crc32c(footer), len(self.sources), 0)
        self.out.write(footer)
        self.out.write(trailer + _U32.pack(crc32c(trailer)))
        self.finished = True
        segment = SharedSegment(None, self.level, self.position, tuple(self.runs),
                                tuple(self.sources), tuple(self.placed))
        self.position += len(footer) + TRAILER_SIZE
        return segment


def encode_footer(runs, sources, placed) -> bytes:
    """The footer of ``runs`` (sorted), ``sources`` and ``placed`` runs."""
    topics = sorted({r.topic for r in runs} | {p.topic for p in placed})
    number = {t: i for i, t in enumerate(topics)}
    out = bytearray(_U32.pack(len(topics)))
    first = 0
    for topic in topics:
        n = sum(1 for r in runs if r.topic == topic)
        out += _encode_name(topic, "topic") + _TOPIC_RUNS.pack(first, n)
        first += n
    index_entries = bytearray()
    time_entries = bytearray()
    out += _U32.pack(len(runs))
    n_index = n_time = 0
    for r in runs:
        offsets, times = r.offset_index, r.time_index
        out += _RUN.pack(r.partition, r.base_offset, r.next_offset, r.position, r.size,
                         r.max_timestamp, r.max_timestamp_offset, r.record_count,
                         r.frame_count, RUN_NO_CONTROL if r.no_control else 0, 0,
                         n_index, len(offsets), n_time, len(times))
        for rel, pos in zip(offsets.relative_offsets, offsets.positions):
            index_entries += _INDEX_ENTRY.pack(rel, pos)
        for ts, rel in zip(times.timestamps, times.relative_offsets):
            time_entries += _TIME_ENTRY.pack(ts, rel)
        n_index += len(offsets)
        n_time += len(times)
    out += _U32.pack(n_index) + index_entries + _U32.pack(n_time) + time_entries
    out += _U32.pack(len(sources))
    for s in sources:
        out += _U8.pack(s.kind) + _encode_name(s.name, "source name")
    out += _U32.pack(len(placed))
    for p in placed:
        out += _PLACED.pack(number[p.topic], p.partition, p.base_offset, p.next_offset)
    return bytes(out)


# --- reading -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SharedTrailer:
    """The fields of a shared segment's trailer."""

    level: int
    footer_position: int
    footer_length: int
    footer_crc: int
    source_count: int


def parse_trailer(data, file_size: int, path=None) -> SharedTrailer:
    """The trailer from the last 40 bytes (``data``) of a file of ``file_size`` bytes;
    CorruptSharedSegmentError when they are not a valid one."""
    view = memoryview(data).cast("B")
    at = file_size - TRAILER_SIZE
    if len(view) != TRAILER_SIZE or at < 0:
        raise _fail(path, max(at, 0), f"no trailer: {len(view)} of its {TRAILER_SIZE} "
                                      "bytes")
    magic, version, level, position, length, footer_crc, sources, flags = \
        _TRAILER.unpack_from(view, 0)
    if magic != SEGMENT_MAGIC:
        raise _fail(path, at, f"not a shared segment: trailer magic {bytes(magic)!r}, "
                              f"expected {SEGMENT_MAGIC!r}")
    if crc32c(view[:_TRAILER.size]) != _U32.unpack_from(view, _TRAILER.size)[0]:
        raise _fail(path, at, "trailer CRC32C mismatch")
    if version != VERSION:
        raise _fail(path, at, f"shared segment format version {version} is not known "
                              f"(this reader reads version {VERSION})")
    if flags:
        raise _fail(path, at, f"trailer flags {flags:#010x} are not known (0 expected)")
    if position < 0 or position + length != at:
        raise _fail(path, at, f"trailer names a footer of {length} bytes at position "
                              f"{position}, which does not end at the trailer")
    return SharedTrailer(level, position, length, footer_crc, sources)


class _Cursor:
    """Reads a footer's fields in order; what runs past its end is corruption."""

    def __init__(self, view, path, base: int):
        self.view, self.path, self.base, self.pos = view, path, base, 0

    def take(self, st: struct.Struct, what: str) -> tuple:
        if self.pos + st.size > len(self.view):
            raise _fail(self.path, self.base + self.pos, f"footer ends inside {what}")
        values = st.unpack_from(self.view, self.pos)
        self.pos += st.size
        return values

    def count(self, what: str, item_size: int) -> int:
        (n,) = self.take(_U32, f"the {what} count")
        if n * item_size > len(self.view) - self.pos:
            raise _fail(self.path, self.base + self.pos,
                        f"{what} count {n} does not fit in the footer")
        return n

    def name(self, what: str) -> str:
        (n,) = self.take(_U16, what)
        if n == 0 or self.pos + n > len(self.view):
            raise _fail(self.path, self.base + self.pos, f"{what} of {n} bytes does not fit")
        try:
            text = bytes(self.view[self.pos:self.pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(self.path, self.base + self.pos, f"{what} is not UTF-8") from None
        self.pos += n
        return text


def parse_footer(data, trailer: SharedTrailer, path=None) -> SharedSegment:
    """The segment described by its footer (``data``, checked against the trailer's
    CRC32C); CorruptSharedSegmentError naming the field that does not check out."""
    view = memoryview(data).cast("B")
    at = trailer.footer_position
    if len(view) != trailer.footer_length:
        raise _fail(path, at, f"footer of {len(view)} bytes, the trailer says "
                              f"{trailer.footer_length}")
    if crc32c(view) != trailer.footer_crc:
        raise _fail(path, at, "footer CRC32C mismatch (the trailer's)")
    c = _Cursor(view, path, at)
    topics: list[tuple[str, int, int]] = []
    for _ in range(c.count("topic", 2 + _TOPIC_RUNS.size)):
        name = c.name("topic name")
        first, n = c.take(_TOPIC_RUNS, "a topic's runs")
        if topics and name <= topics[-1][0]:
            raise _fail(path, at + c.pos, f"topic {name!r} out of order in the topic table")
        if first != (topics[-1][1] + topics[-1][2] if topics else 0):
            raise _fail(path, at + c.pos, f"topic {name!r}: its runs start at {first}, "
                                          "not after the previous topic's")
        topics.append((name, first, n))
    raw_runs = [c.take(_RUN, "the run table") for _ in range(c.count("run", RUN_SIZE))]
    if sum(t[2] for t in topics) != len(raw_runs):
        raise _fail(path, at, f"the topic table names {sum(t[2] for t in topics)} runs, "
                              f"the run table holds {len(raw_runs)}")
    index = [c.take(_INDEX_ENTRY, "the index entries")
             for _ in range(c.count("index entry", _INDEX_ENTRY.size))]
    times = [c.take(_TIME_ENTRY, "the time entries")
             for _ in range(c.count("time entry", _TIME_ENTRY.size))]
    sources = []
    for _ in range(c.count("source", 3)):
        (kind,) = c.take(_U8, "a source's kind")
        name = c.name("source name")
        if kind not in (SOURCE_WAL, SOURCE_SHARED):
            raise _fail(path, at + c.pos, f"source {name!r} of unknown kind {kind}")
        sources.append(Source(kind, name))
    if len(sources) != trailer.source_count:
        raise _fail(path, at, f"footer names {len(sources)} sources, the trailer "
                              f"{trailer.source_count}")
    placed = []
    for _ in range(c.count("placed run", _PLACED.size)):
        topic_no, partition, base, next_offset = c.take(_PLACED, "the placed runs")
        if topic_no >= len(topics) or partition < 0 or next_offset <= base:
            raise _fail(path, at + c.pos, f"placed run of topic #{topic_no} partition "
                                          f"{partition} [{base}, {next_offset}) is impossible")
        placed.append(PlacedRun(topics[topic_no][0], partition, base, next_offset))
    if c.pos != len(view):
        raise _fail(path, at + c.pos, f"{len(view) - c.pos} bytes after the footer's fields")
    runs = _runs(topics, raw_runs, index, times, trailer.footer_position, path)
    return SharedSegment(path, trailer.level, trailer.footer_position, tuple(runs),
                         tuple(sources), tuple(placed))


def _runs(topics, raw_runs, index, times, footer_position: int, path) -> list[SharedRun]:
    runs: list[SharedRun] = []
    position = 0
    for topic, first, n in topics:
        for i in range(first, first + n):
            (partition, base, next_offset, pos, size, max_ts, max_ts_offset, records,
             frames, flags, _, first_index, n_index, first_time, n_time) = raw_runs[i]
            what = f"run {i} ({topic}-{partition} [{base}, {next_offset}))"
            previous = runs[-1] if runs else None
            if partition < 0 or base < 0 or next_offset <= base or size < 1 or frames < 1 \
                    or pos != position or flags & ~RUN_NO_CONTROL \
                    or not fits_relative(base, next_offset - 1):
                raise _fail(path, footer_position, f"{what}: impossible fields (position "
                                                   f"{pos}, size {size}, {frames} frames)")
            if previous is not None and previous.topic == topic and (
                    partition < previous.partition or (
                        partition == previous.partition and base < previous.next_offset)):
                raise _fail(path, footer_position, f"{what}: out of order after "
                                                   f"{previous.partition} "
                                                   f"[{previous.base_offset}, "
                                                   f"{previous.next_offset})")
            if first_index + n_index > len(index) or first_time + n_time > len(times):
                raise _fail(path, footer_position, f"{what}: its index entries lie outside "
                                                   "the footer's")
            offsets, time_index = OffsetIndex(base), TimeIndex(base)
            try:
                for rel, rpos in index[first_index:first_index + n_index]:
                    if rel >= next_offset - base or rpos >= size:
                        raise ValueError(f"entry ({rel}, {rpos}) outside the run")
                    offsets.append(base + rel, rpos)
                for ts, rel in times[first_time:first_time + n_time]:
                    if rel >= next_offset - base or (len(time_index) and (
                            ts <= time_index.timestamps[-1]
                            or rel < time_index.relative_offsets[-1])):
                        raise ValueError(f"time entry ({ts}, {rel}) out of order or range")
                    time_index.maybe_append(ts, base + rel)
            except ValueError as exc:
                raise _fail(path, footer_position, f"{what}: {exc}") from None
            runs.append(SharedRun(topic, partition, base, next_offset, pos, size, max_ts,
                                  max_ts_offset, records, frames,
                                  bool(flags & RUN_NO_CONTROL), offsets, time_index))
            position = pos + size
    if position != footer_position:
        raise _fail(path, footer_position, f"the runs end at {position}, the footer "
                                           f"starts at {footer_position}")
    return runs


def open_shared_segment(fileio: FileIO, path: str, size: int | None = None) -> SharedSegment:
    """Read the trailer (one positioned read of the last 40 bytes; ``size`` from the
    listing, else asked for) and the footer of the shared segment ``path``."""
    if size is None:
        size = fileio.size(path)
    if size < TRAILER_SIZE:
        raise _fail(path, 0, f"no trailer: the file has {size} bytes")
    trailer = parse_trailer(fileio.read_range(path, size - TRAILER_SIZE, TRAILER_SIZE),
                            size, path)
    footer = fileio.read_range(path, trailer.footer_position, trailer.footer_length)
    return parse_footer(footer, trailer, path)


def read_run(fileio: FileIO, segment: SharedSegment, run: SharedRun,
             offset: int | None = None) -> Iterator[Frame]:
    """The frames of ``run`` from the one holding ``offset`` (default: its base
    offset) to its end: one positioned read from the index entry at or before
    ``offset``, every frame checked, contiguous, ending exactly at the run's end
    (CorruptSharedSegmentError naming the offsets that cannot be read)."""
    start = run.base_offset if offset is None else offset
    if not run.base_offset <= start < run.next_offset:
        raise InvalidArgumentError(
            f"offset {start} is not in the run [{run.base_offset}, {run.next_offset})")
    path = segment.path
    if path is None:
        raise InvalidArgumentError("read_run reads a segment opened from storage "
                                   "(open_shared_segment)")
    entry_offset, rel = run.offset_index.lookup(start)
    data = fileio.read_range(path, run.position + rel, run.size - rel)
    if len(data) != run.size - rel:
        raise _fail(path, run.position + rel,
                    f"run [{run.base_offset}, {run.next_offset}) needs {run.size - rel} "
                    f"bytes there, the file has {len(data)}")
    frames = check_frames(memoryview(data).cast("B"), 0, len(data), entry_offset,
                          run.next_offset, path=path, file_offset=run.position + rel,
                          where=f"run of {run.topic}-{run.partition} "
                                f"[{run.base_offset}, {run.next_offset})",
                          frame_count=run.frame_count if rel == 0 else None,
                          fail=_fail)
    for _, frame in frames:
        if frame.header.next_offset > start:
            yield frame


__all__ = [
    "CorruptSharedSegmentError", "PlacedRun", "RUN_SIZE", "SOURCE_SHARED", "SOURCE_WAL",
    "SharedRun", "SharedSegment", "SharedSegmentWriter", "SharedTrailer", "Source",
    "TRAILER_SIZE", "encode_footer", "open_shared_segment", "parse_footer",
    "parse_trailer", "read_run", "shared_segment_name",
]
