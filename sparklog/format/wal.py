"""The write-ahead log file codec (docs/storage.md, "The write-ahead log", file format).

A WAL file is a 32-byte file header followed by *blocks*, one per commit turn of its
stream, each a table of entries (a partition's frames of that turn) followed by the
entries' frames, stored exactly as in a segment (stamped, either kind, each with its own
CRC). The writer closes a file with an *index block* (the pieces of each partition)
and a 24-byte *trailer*. All integers big-endian, CRCs CRC32C::

    file header   0 4 "SLWL", 4 2 version (1), 6 2 flags (0), 8 4 broker id,
                  12 8 incarnation, 20 8 seq, 28 4 CRC32C of [0, 28)
    block         0 4 "SLWB", 4 4 length (bytes after this field), 8 8 turn,
                  16 8 append time (ms), 24 4 entry count N, 28 4 CRC32C of the entry
                  table, 32 4 CRC32C of [0, 32), 36 .. entry table, then the frames
    entry         2 topic length L, L bytes UTF-8, 4 partition, 4 leader epoch,
                  8 base offset, 8 next offset, 4 bytes of frames, 4 frame count
    index block   0 4 "SLWI", 4 4 length (bytes after this field), 8 4 partition
                  count, 12 4 CRC32C of the partitions, 16 .. per partition (sorted by
                  topic, partition): topic (u16 + UTF-8), partition i32, piece count
                  u32, per piece: position i64, size u32, base offset i64, next offset i64
    trailer       0 4 "SLWT", 4 8 index block position, 12 4 index block size (bytes),
                  16 4 CRC32C of the index block, 20 4 CRC32C of [0, 20)

A block is valid when its header CRC and table CRC check out, it lies within the file,
its turn is greater than the previous block's, its frames fill exactly what its table
lists, and every listed frame passes :func:`~sparklog.format.frame.validate_frame` and
follows the one before (:func:`~sparklog.format.frame.check_follows`) from the entry's
base offset to its next offset, stamped with the entry's leader epoch. The valid part of
a file is its header and the blocks up to the first that is not (:func:`scan_wal`): a
torn tail is not an error, only where the valid part ends.

A closed file (a valid trailer) is read through its index (:func:`read_wal_index`,
then :func:`read_piece`); an open or crashed one sequentially (:func:`scan_wal`).
Everything that does not check out raises :class:`CorruptWalError` naming the file,
position and field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import pyarrow as pa

from ..errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from .frame import Frame, check_follows, crc32c, validate_frame, validate_header
from .header import HEADER_SIZE

FILE_MAGIC = b"SLWL"
BLOCK_MAGIC = b"SLWB"
INDEX_MAGIC = b"SLWI"
TRAILER_MAGIC = b"SLWT"
VERSION = 1
#: suffix of a WAL file's name (``<seq:020d>.wal``)
WAL_SUFFIX = ".wal"

_FILE_HEADER = struct.Struct(">4sHHiqq")
FILE_HEADER_SIZE = _FILE_HEADER.size + 4
assert FILE_HEADER_SIZE == 32
_BLOCK_HEAD = struct.Struct(">4sIqqiI")
BLOCK_HEADER_SIZE = _BLOCK_HEAD.size + 4
assert BLOCK_HEADER_SIZE == 36
_ENTRY = struct.Struct(">iiqqII")
_INDEX_HEAD = struct.Struct(">4sIII")
INDEX_HEADER_SIZE = _INDEX_HEAD.size
assert INDEX_HEADER_SIZE == 16
_PIECE = struct.Struct(">qIqq")
_PARTITION = struct.Struct(">iI")
_TRAILER = struct.Struct(">4sqII")
TRAILER_SIZE = _TRAILER.size + 4
assert TRAILER_SIZE == 24
_U16 = struct.Struct(">H")
_U32_MAX = (1 << 32) - 1
#: the 8 bytes of a block or index block not counted in its length field
_BLOCK_OVERHEAD = 8


class CorruptWalError(CorruptRecordError):
    """A WAL file's bytes do not check out: the message names the file, the position
    and the field (which CRC, which count, which frame)."""


def wal_file_name(seq: int) -> str:
    """The name of WAL file ``seq`` (docs/storage.md, "Layout and names")."""
    return f"{seq:020d}{WAL_SUFFIX}"


def _where(path, pos: int) -> str:
    return f"WAL file {path or '<bytes>'} at position {pos}"


def _fail(path, pos: int, what: str) -> CorruptWalError:
    return CorruptWalError(f"{_where(path, pos)}: {what}", path=path, position=pos)


@dataclass(frozen=True)
class WalFileHeader:
    """The 32-byte header of a WAL file: which broker process wrote it, and its seq."""

    broker_id: int
    incarnation: int
    seq: int

    def to_bytes(self) -> bytes:
        """The header's 32 bytes."""
        for name, value, bits in (("broker_id", self.broker_id, 32),
                                  ("incarnation", self.incarnation, 64),
                                  ("seq", self.seq, 64)):
            if isinstance(value, bool) or not isinstance(value, int) \
                    or not 0 <= value < (1 << (bits - 1)):
                raise InvalidArgumentError(
                    f"WAL file header: {name} must be an int in [0, 2**{bits - 1}), "
                    f"got {value!r}")
        head = _FILE_HEADER.pack(FILE_MAGIC, VERSION, 0, self.broker_id, self.incarnation,
                                 self.seq)
        return head + struct.pack(">I", crc32c(head))

    @classmethod
    def from_bytes(cls, data, path=None) -> "WalFileHeader":
        """Parse the first 32 bytes of ``data``: CorruptWalError if they are short, not
        a WAL file's (magic, version, flags) or fail their CRC32C."""
        view = memoryview(data).cast("B")
        if len(view) < FILE_HEADER_SIZE:
            raise _fail(path, 0, f"truncated file header: {len(view)} bytes, it needs "
                                 f"{FILE_HEADER_SIZE}")
        magic, version, flags, broker, incarnation, seq = _FILE_HEADER.unpack_from(view, 0)
        if magic != FILE_MAGIC:
            raise _fail(path, 0, f"not a WAL file: magic {bytes(magic)!r}, expected "
                                 f"{FILE_MAGIC!r}")
        if version != VERSION:
            raise _fail(path, 0, f"WAL format version {version} is not known (this "
                                 f"reader reads version {VERSION})")
        (crc,) = struct.unpack_from(">I", view, _FILE_HEADER.size)
        if crc32c(view[:_FILE_HEADER.size]) != crc:
            raise _fail(path, 0, "file header CRC32C mismatch")
        if flags:
            raise _fail(path, 0, f"file header flags {flags:#06x} are not known (0 expected)")
        return cls(broker, incarnation, seq)


@dataclass(frozen=True)
class WalEntry:
    """One entry of a block: a partition's frames of one turn, ``size`` bytes
    (``frame_count`` frames) from file position ``position``, offsets
    ``[base_offset, next_offset)``, all stamped with ``leader_epoch``."""

    topic: str
    partition: int
    leader_epoch: int
    base_offset: int
    next_offset: int
    position: int
    size: int
    frame_count: int


@dataclass(frozen=True)
class WalBlock:
    """A valid block: ``size`` bytes from ``position``, its turn, append time and
    entries in table order."""

    position: int
    size: int
    turn: int
    append_time: int
    entries: tuple[WalEntry, ...]

    @property
    def end(self) -> int:
        """The file position after the block."""
        return self.position + self.size


@dataclass(frozen=True)
class WalPiece:
    """A partition's frames in a closed WAL file, from its index block: ``size`` bytes
    from ``position``, offsets ``[base_offset, next_offset)``."""

    position: int
    size: int
    base_offset: int
    next_offset: int


@dataclass
class WalScan:
    """What a sequential read of a WAL file found (:func:`scan_wal`).

    ``blocks`` are the valid prefix's blocks; ``valid_end`` the position after the last
    (the header's end when none). ``error`` says why the valid part ends before the
    data does (a torn or corrupt block, a torn index block), None when every byte
    checked out. ``index`` is the file's index when it ends with a valid index block
    and trailer (a closed file), else None."""

    header: WalFileHeader
    blocks: list[WalBlock] = field(default_factory=list)
    valid_end: int = FILE_HEADER_SIZE
    error: CorruptWalError | None = None
    index: dict[tuple[str, int], list[WalPiece]] | None = None

    @property
    def closed(self) -> bool:
        """True when the file ends with its index block and trailer."""
        return self.index is not None


# --- encoding --------------------------------------------------------------------------

@dataclass(frozen=True)
class EntryFrames:
    """What a block entry is made of: a partition's stamped frames of one turn, in
    offset order, all with ``leader_epoch``. ``frames``: bytes-like buffers, each
    holding one or more whole frames."""

    topic: str
    partition: int
    leader_epoch: int
    frames: Sequence


def _encode_topic(topic: str) -> bytes:
    if not isinstance(topic, str):
        raise InvalidArgumentError(f"topic must be a str, got {type(topic).__name__}")
    name = topic.encode("utf-8")
    if not name or len(name) > 0xFFFF:
        raise InvalidArgumentError(
            f"topic name {topic!r} must be 1 to 65535 bytes of UTF-8")
    return _U16.pack(len(name)) + name


def entry_offsets(entry: EntryFrames) -> tuple[int, int, int, int]:
    """(base offset, next offset, bytes, frame count) of ``entry``'s frames, checked:
    whole frames, contiguous offsets, the entry's leader epoch (InvalidArgumentError
    naming the partition and the frame)."""
    where = f"entry of {entry.topic}-{entry.partition}"
    if isinstance(entry.partition, bool) or not isinstance(entry.partition, int) \
            or not 0 <= entry.partition < (1 << 31):
        raise InvalidArgumentError(f"{where}: partition must be an int >= 0")
    if isinstance(entry.leader_epoch, bool) or not isinstance(entry.leader_epoch, int) \
            or not -(1 << 31) <= entry.leader_epoch < (1 << 31):
        raise InvalidArgumentError(f"{where}: leader_epoch must be a 32-bit int")
    base = expected = None
    size = count = 0
    for buf in entry.frames:
        view = memoryview(buf).cast("B")
        pos = 0
        while pos < len(view):
            try:
                header = validate_header(view[pos:pos + HEADER_SIZE], len(view) - pos,
                                         position=pos)
            except CorruptRecordError as exc:
                raise InvalidArgumentError(f"{where}: {exc}") from None
            if header.leader_epoch != entry.leader_epoch:
                raise InvalidArgumentError(
                    f"{where}: frame at offset {header.base_offset} is stamped with "
                    f"leader epoch {header.leader_epoch}, the entry's is "
                    f"{entry.leader_epoch}")
            if expected is None:
                base = header.base_offset
            else:
                try:
                    check_follows(header, expected, f" of the {where}")
                except CorruptRecordError as exc:
                    raise InvalidArgumentError(str(exc)) from None
            expected = header.next_offset
            pos += header.size
            count += 1
        size += len(view)
    if base is None or expected is None:
        raise InvalidArgumentError(f"{where}: no frames (an entry holds at least one)")
    if size > _U32_MAX:
        raise InvalidArgumentError(f"{where}: {size} bytes of frames, over 2**32 - 1")
    return base, expected, size, count


class WalFileEncoder:
    """The bytes of one WAL file, written in order: :meth:`header`, a :meth:`block`
    per turn, :meth:`close` (index block and trailer). It tracks the file position and
    the pieces of every partition for the index; it writes nothing itself."""

    def __init__(self, header: WalFileHeader):
        self.file_header = header
        self.position = 0
        self.last_turn: int | None = None
        self.closed = False
        self._pieces: dict[tuple[str, int], list[list[int]]] = {}

    def header(self) -> bytes:
        """The file header (the file's first bytes)."""
        if self.position:
            raise InvalidArgumentError("the WAL file header is written once, first")
        data = self.file_header.to_bytes()
        self.position = len(data)
        return data

    def block(self, turn: int, append_time: int,
              entries: Iterable[EntryFrames]) -> tuple[list, WalBlock]:
        """One block of ``entries`` for commit ``turn`` (greater than the previous
        block's): the buffers to write in order (the block's header and table, then
        the entries' frame buffers as given) and the :class:`WalBlock` they make."""
        if not self.position or self.closed:
            raise InvalidArgumentError(
                "a block follows the file header and precedes close()")
        for name, value in (("turn", turn), ("append_time", append_time)):
            if isinstance(value, bool) or not isinstance(value, int) \
                    or not -(1 << 63) <= value < (1 << 63):
                raise InvalidArgumentError(f"block {name} must be a 64-bit int, got {value!r}")
        if self.last_turn is not None and turn <= self.last_turn:
            raise InvalidArgumentError(
                f"block turn {turn} after turn {self.last_turn}: turns strictly increase "
                "within a WAL file")
        entries = list(entries)
        table = bytearray()
        described = []
        for entry in entries:
            base, next_offset, size, count = entry_offsets(entry)
            table += _encode_topic(entry.topic)
            table += _ENTRY.pack(entry.partition, entry.leader_epoch, base, next_offset,
                                 size, count)
            described.append((entry, base, next_offset, size, count))
        frames_size = sum(d[3] for d in described)
        size = BLOCK_HEADER_SIZE + len(table) + frames_size
        if size - _BLOCK_OVERHEAD > _U32_MAX:
            raise InvalidArgumentError(f"a block of {size} bytes is over the format's limit")
        head = _BLOCK_HEAD.pack(BLOCK_MAGIC, size - _BLOCK_OVERHEAD, turn, append_time,
                                len(entries), crc32c(table))
        parts: list = [head + struct.pack(">I", crc32c(head)) + bytes(table)]
        pos = self.position + BLOCK_HEADER_SIZE + len(table)
        made = []
        for entry, base, next_offset, esize, count in described:
            made.append(WalEntry(entry.topic, entry.partition, entry.leader_epoch, base,
                                 next_offset, pos, esize, count))
            pieces = self._pieces.setdefault((entry.topic, entry.partition), [])
            if pieces and pieces[-1][0] + pieces[-1][1] == pos \
                    and pieces[-1][3] == base:
                pieces[-1][1] += esize
                pieces[-1][3] = next_offset
            else:
                pieces.append([pos, esize, base, next_offset])
            parts.extend(entry.frames)
            pos += esize
        block = WalBlock(self.position, size, turn, append_time, tuple(made))
        self.position += size
        self.last_turn = turn
        return parts, block

    def close(self) -> bytes:
        """The index block and trailer that end the file."""
        if not self.position or self.closed:
            raise InvalidArgumentError("close() ends a WAL file once, after its header")
        body = bytearray()
        for (topic, partition) in sorted(self._pieces):
            pieces = self._pieces[(topic, partition)]
            body += _encode_topic(topic) + _PARTITION.pack(partition, len(pieces))
            for piece in pieces:
                body += _PIECE.pack(*piece)
        index = _INDEX_HEAD.pack(INDEX_MAGIC, len(body) + INDEX_HEADER_SIZE - _BLOCK_OVERHEAD,
                                 len(self._pieces), crc32c(body)) + bytes(body)
        trailer = _TRAILER.pack(TRAILER_MAGIC, self.position, len(index), crc32c(index))
        self.closed = True
        self.position += len(index) + TRAILER_SIZE
        return index + trailer + struct.pack(">I", crc32c(trailer))

    def index(self) -> dict[tuple[str, int], list[WalPiece]]:
        """The pieces written so far, as :meth:`close` indexes them."""
        return {key: [WalPiece(*p) for p in pieces]
                for key, pieces in sorted(self._pieces.items())}


# --- decoding --------------------------------------------------------------------------

def _read_topic(view, pos: int, end: int, path, what: str) -> tuple[str, int]:
    if pos + 2 > end:
        raise _fail(path, pos, f"{what}: truncated topic name length")
    (n,) = _U16.unpack_from(view, pos)
    if n == 0 or pos + 2 + n > end:
        raise _fail(path, pos, f"{what}: topic name of {n} bytes does not fit")
    try:
        name = bytes(view[pos + 2:pos + 2 + n]).decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(path, pos, f"{what}: topic name is not UTF-8") from None
    return name, pos + 2 + n


def check_frames(view, start: int, end: int, base_offset: int, next_offset: int, *,
                 path=None, where: str, file_offset: int = 0,
                 leader_epoch: int | None = None, frame_count: int | None = None,
                 fail=None) -> Iterator[tuple[int, Frame]]:
    """Yield ``(file position, Frame)`` of the frames of ``view[start:end]`` (at file
    position ``file_offset + start``), each checked (:func:`validate_frame`), the first
    at ``base_offset``, each next following the one before, the last ending at
    ``next_offset``, exactly filling the range (and ``frame_count`` frames, stamped with
    ``leader_epoch``, when given): the frames of a WAL entry or piece, or of a shared
    segment's run. Raises ``fail(path, position, message)`` (default CorruptWalError)
    naming ``where``."""
    error = fail or _fail
    pos, expected, count = start, None, 0
    while pos < end:
        at = file_offset + pos
        try:
            header = validate_frame(view[:end], pos, path=path)
        except (CorruptRecordError, RecordTooLargeError) as exc:
            raise error(path, at, f"{where}: {exc}") from None
        if expected is None:
            if header.base_offset != base_offset:
                raise error(path, at, f"{where}: first frame has base offset "
                                      f"{header.base_offset}, the table says {base_offset}")
        else:
            try:
                check_follows(header, expected)
            except CorruptRecordError as exc:
                raise error(path, at, f"{where}: {exc}") from None
        if leader_epoch is not None and header.leader_epoch != leader_epoch:
            raise error(path, at, f"{where}: frame stamped with leader epoch "
                                  f"{header.leader_epoch}, the table says {leader_epoch}")
        expected = header.next_offset
        count += 1
        yield at, Frame(header, _buffer(view, pos, header.size))
        pos += header.size
    if expected != next_offset:
        raise error(path, file_offset + start,
                    f"{where}: frames end at offset {expected}, the table says {next_offset}")
    if frame_count is not None and count != frame_count:
        raise error(path, file_offset + start,
                    f"{where}: {count} frames, the table says {frame_count}")


def _buffer(view, pos: int, size: int) -> pa.Buffer:
    return pa.py_buffer(view[pos + HEADER_SIZE:pos + size])


def parse_block(data, pos: int, *, path=None, file_offset: int = 0,
                previous_turn: int | None = None) -> WalBlock:
    """The block at ``data[pos:]`` (file position ``file_offset + pos``), checked as
    the module doc says; CorruptWalError naming the field that does not check out
    (a block cut short by the end of ``data`` is "truncated block")."""
    view = memoryview(data).cast("B")
    at = file_offset + pos
    avail = len(view) - pos
    if avail < BLOCK_HEADER_SIZE:
        raise _fail(path, at, f"truncated block: {avail} bytes, its header needs "
                              f"{BLOCK_HEADER_SIZE}")
    magic, length, turn, append_time, count, table_crc = _BLOCK_HEAD.unpack_from(view, pos)
    if magic != BLOCK_MAGIC:
        raise _fail(path, at, f"no block here: magic {bytes(magic)!r}, expected "
                              f"{BLOCK_MAGIC!r} (a block) or {INDEX_MAGIC!r} (the index block)")
    (head_crc,) = struct.unpack_from(">I", view, pos + _BLOCK_HEAD.size)
    if crc32c(view[pos:pos + _BLOCK_HEAD.size]) != head_crc:
        raise _fail(path, at, "block header CRC32C mismatch")
    size = length + _BLOCK_OVERHEAD
    if size > avail:
        raise _fail(path, at, f"truncated block: its length says {size} bytes, "
                              f"{avail} present")
    if size < BLOCK_HEADER_SIZE or count < 0:
        raise _fail(path, at, f"block length {length} or entry count {count} is impossible")
    if previous_turn is not None and turn <= previous_turn:
        raise _fail(path, at, f"block turn {turn} does not follow turn {previous_turn}")
    end = pos + size
    p = pos + BLOCK_HEADER_SIZE
    raw = []
    for i in range(count):
        what = f"block entry table, entry {i}"
        topic, p = _read_topic(view, p, end, path, what)
        if p + _ENTRY.size > end:
            raise _fail(path, file_offset + p, f"{what}: truncated entry")
        raw.append((topic,) + _ENTRY.unpack_from(view, p))
        p += _ENTRY.size
    if crc32c(view[pos + BLOCK_HEADER_SIZE:p]) != table_crc:
        raise _fail(path, at, "block entry table CRC32C mismatch")
    entries = []
    fpos = p
    for topic, partition, epoch, base, next_offset, esize, frames in raw:
        what = f"block at {at}, entry {topic}-{partition} [{base}, {next_offset})"
        if partition < 0 or next_offset <= base or frames < 1 or esize < 1 \
                or fpos + esize > end:
            raise _fail(path, file_offset + fpos,
                        f"{what}: impossible entry ({esize} bytes, {frames} frames)")
        for _ in check_frames(view, fpos, fpos + esize, base, next_offset, path=path,
                              where=what, file_offset=file_offset, leader_epoch=epoch,
                              frame_count=frames):
            pass
        entries.append(WalEntry(topic, partition, epoch, base, next_offset,
                                file_offset + fpos, esize, frames))
        fpos += esize
    if fpos != end:
        raise _fail(path, at, f"block length says {size} bytes, its table and frames "
                              f"fill {fpos - pos}")
    return WalBlock(at, size, turn, append_time, tuple(entries))


def block_frames(data, block: WalBlock, entry: WalEntry, *, path=None,
                 file_offset: int = 0) -> Iterator[tuple[int, Frame]]:
    """``(file position, Frame)`` of ``entry`` of a block :func:`parse_block` checked,
    from ``data`` holding the file from position ``file_offset``."""
    view = memoryview(data).cast("B")
    start = entry.position - file_offset
    return check_frames(view, start, start + entry.size, entry.base_offset,
                        entry.next_offset, path=path, file_offset=file_offset,
                        where=f"entry {entry.topic}-{entry.partition}",
                        leader_epoch=entry.leader_epoch, frame_count=entry.frame_count)


def parse_trailer(data, file_size: int, path=None) -> tuple[int, int, int]:
    """(index block position, its size, its CRC32C) from the last 24 bytes of a file
    of ``file_size`` bytes (``data`` holds them); CorruptWalError when they are not a
    valid trailer."""
    view = memoryview(data).cast("B")
    at = file_size - TRAILER_SIZE
    if len(view) != TRAILER_SIZE or at < FILE_HEADER_SIZE:
        raise _fail(path, max(at, 0), "no trailer: too few bytes")
    magic, position, length, index_crc = _TRAILER.unpack_from(view, 0)
    if magic != TRAILER_MAGIC:
        raise _fail(path, at, f"no trailer: magic {bytes(magic)!r}, expected {TRAILER_MAGIC!r}")
    (crc,) = struct.unpack_from(">I", view, _TRAILER.size)
    if crc32c(view[:_TRAILER.size]) != crc:
        raise _fail(path, at, "trailer CRC32C mismatch")
    if position < FILE_HEADER_SIZE or position + length != at or length < INDEX_HEADER_SIZE:
        raise _fail(path, at, f"trailer names an index block of {length} bytes at "
                              f"position {position}, which does not end at the trailer")
    return position, length, index_crc


def parse_index_block(data, position: int, index_crc: int,
                      path=None) -> dict[tuple[str, int], list[WalPiece]]:
    """The index of a closed file from its index block (``data``, at file
    ``position``, whose CRC32C the trailer gives as ``index_crc``); CorruptWalError
    naming what does not check out."""
    view = memoryview(data).cast("B")
    if crc32c(view) != index_crc:
        raise _fail(path, position, "index block CRC32C mismatch (the trailer's)")
    magic, length, count, body_crc = _INDEX_HEAD.unpack_from(view, 0)
    if magic != INDEX_MAGIC:
        raise _fail(path, position, f"no index block: magic {bytes(magic)!r}")
    if length + _BLOCK_OVERHEAD != len(view):
        raise _fail(path, position, f"index block length {length} does not match the "
                                    f"trailer's {len(view)} bytes")
    if crc32c(view[INDEX_HEADER_SIZE:]) != body_crc:
        raise _fail(path, position, "index block partitions CRC32C mismatch")
    index: dict[tuple[str, int], list[WalPiece]] = {}
    p, end = INDEX_HEADER_SIZE, len(view)
    previous_key = None
    for i in range(count):
        what = f"index partition {i}"
        topic, p = _read_topic(view, p, end, path, what)
        if p + _PARTITION.size > end:
            raise _fail(path, position + p, f"{what}: truncated")
        partition, pieces_count = _PARTITION.unpack_from(view, p)
        p += _PARTITION.size
        key = (topic, partition)
        if partition < 0 or (previous_key is not None and key <= previous_key) \
                or pieces_count < 1 or p + pieces_count * _PIECE.size > end:
            raise _fail(path, position + p, f"{what} ({topic}-{partition}): out of order, "
                                            f"or {pieces_count} pieces do not fit")
        pieces: list[WalPiece] = []
        last_end = FILE_HEADER_SIZE
        for _ in range(pieces_count):
            piece = WalPiece(*_PIECE.unpack_from(view, p))
            if piece.position < last_end or piece.size < 1 \
                    or piece.position + piece.size > position \
                    or piece.next_offset <= piece.base_offset \
                    or (pieces and piece.base_offset < pieces[-1].next_offset):
                raise _fail(path, position + p, f"{what} ({topic}-{partition}): piece "
                                                f"{piece} is out of the file or of order")
            pieces.append(piece)
            last_end = piece.position + piece.size
            p += _PIECE.size
        index[key] = pieces
        previous_key = key
    if p != end:
        raise _fail(path, position + p, f"index block holds {end - p} bytes past its "
                                        f"{count} partitions")
    return index


def scan_wal(data, path=None) -> WalScan:
    """Read a WAL file's bytes sequentially (an open or crashed file, or any file
    read whole): its header (CorruptWalError when it is not a valid one), then the
    valid prefix of blocks, and the index when a valid index block and trailer end
    the file. Never raises for what follows the header: a block that does not check
    out ends the valid part, with the reason in ``error``."""
    view = memoryview(data).cast("B")
    scan = WalScan(WalFileHeader.from_bytes(view, path))
    pos = FILE_HEADER_SIZE
    turn = None
    while pos < len(view):
        if bytes(view[pos:pos + 4]) == INDEX_MAGIC:
            try:
                scan.index = _closed_index(view, pos, path)
            except CorruptWalError as exc:
                scan.error = exc
            break
        try:
            block = parse_block(view, pos, path=path, previous_turn=turn)
        except CorruptWalError as exc:
            scan.error = exc
            break
        scan.blocks.append(block)
        turn = block.turn
        pos = scan.valid_end = block.end
    return scan


def _closed_index(view, pos: int, path) -> dict[tuple[str, int], list[WalPiece]]:
    """The index of a file whose blocks end at ``pos`` with an index block, checked
    against its trailer."""
    size = len(view)
    if size - pos < INDEX_HEADER_SIZE + TRAILER_SIZE:
        raise _fail(path, pos, "truncated index block or trailer")
    position, length, index_crc = parse_trailer(view[size - TRAILER_SIZE:], size, path)
    if position != pos:
        raise _fail(path, pos, f"the trailer names an index block at {position}, "
                               f"the blocks end at {pos}")
    return parse_index_block(view[position:position + length], position, index_crc, path)


def read_wal_index(fileio, path: str,
                   size: int | None = None) -> dict[tuple[str, int], list[WalPiece]]:
    """The index of the closed WAL file ``path`` (``size`` from a listing, else asked
    for), from a positioned read of its trailer and one of its index block;
    CorruptWalError when the file has no valid trailer or index (an open or crashed
    file: read it with :func:`scan_wal`)."""
    if size is None:
        size = fileio.size(path)
    if size < FILE_HEADER_SIZE + INDEX_HEADER_SIZE + TRAILER_SIZE:
        raise _fail(path, 0, f"no trailer: the file has {size} bytes")
    tail = fileio.read_range(path, size - TRAILER_SIZE, TRAILER_SIZE)
    position, length, index_crc = parse_trailer(tail, size, path)
    return parse_index_block(fileio.read_range(path, position, length), position,
                             index_crc, path)


def read_piece(fileio, path: str, piece: WalPiece) -> list[Frame]:
    """The frames of ``piece`` of WAL file ``path`` (a positioned read), each checked,
    contiguous from its base offset to its next offset; CorruptWalError otherwise."""
    data = fileio.read_range(path, piece.position, piece.size)
    if len(data) != piece.size:
        raise _fail(path, piece.position, f"piece of {piece.size} bytes: the file has "
                                          f"{len(data)} there")
    frames = check_frames(memoryview(data).cast("B"), 0, piece.size, piece.base_offset,
                          piece.next_offset, path=path, file_offset=piece.position,
                          where=f"piece [{piece.base_offset}, {piece.next_offset})")
    return [frame for _, frame in frames]


__all__ = [
    "BLOCK_HEADER_SIZE", "CorruptWalError", "EntryFrames", "FILE_HEADER_SIZE", "TRAILER_SIZE",
    "WalBlock", "WalEntry", "WalFileEncoder", "WalFileHeader", "WalPiece", "WalScan",
    "block_frames", "check_frames", "entry_offsets", "parse_block", "parse_index_block",
    "parse_trailer",
    "read_piece", "read_wal_index", "scan_wal", "wal_file_name",
]
