"""Sequential reading of a segment file through FileIO: frame scans and fetch reads.

Segment files are read in large chunks with :meth:`FileIO.read_range` (one round trip
per chunk on HDFS) and frames are decoded zero-copy from the chunk buffer.
:class:`FrameScan` validates every frame (CRC32C, length, magic, offsets) and stops at
the first invalid or incomplete one, recording where and why; :func:`read_frame_bytes`
serves fetches: whole frames as stored, without decoding.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from ..errors import CorruptRecordError, DataLossError
from ..format.frame import Frame, check_follows, counts_consistent, decode_frame, validate_header
from ..format.header import HEADER_SIZE, LOG_OVERHEAD, unpack_header
from ..storage.base import FileIO

#: Bytes read per round trip while scanning a segment.
SCAN_CHUNK_BYTES = 8 << 20
#: A headers-only scan skips the body of a frame at least this large with a new read at
#: the next header (a round trip costs about what reading this many bytes does); it
#: reads through smaller frames in SCAN_CHUNK_BYTES chunks.
SKIP_BODY_BYTES = 512 << 10
#: Bytes read at the next header after a skipped body (that header, and the next ones
#: if they are close).
HEADER_READ_BYTES = 64 << 10


def relocate_error(exc: CorruptRecordError, buffer_pos: int, file_pos: int,
                   path: str) -> CorruptRecordError:
    """Re-issue a frame error found at ``buffer_pos`` of a read buffer as one at
    ``file_pos`` of the file ``path`` (the message names both)."""
    text = str(exc)
    here = f" at position {buffer_pos}"
    if here in text:
        text = text.replace(here, f" at position {file_pos} of {path}", 1)
    else:
        text = f"{path} at position {file_pos}: {text}"
    return CorruptRecordError(text, path=path, position=file_pos)


class FrameScan:
    """Iterate ``(position, Frame)`` over a segment file from ``position`` to ``end``
    (default: the end of the file).

    Every frame is validated (``verify_crc`` on by default). Offsets must grow: each
    frame's base offset must be ``>= expected_offset`` (the segment's base offset at
    first, then the previous frame's next offset), or ``==`` it when ``contiguous``
    (frames appended by a live log are contiguous; compacted ones may skip offsets:
    :func:`~sparklog.format.frame.check_follows`, ``cleaned`` for a cleaned segment's).

    The scan stops at the end or at the first bad frame. Afterwards ``valid_end`` is
    the position after the last good frame, ``next_offset`` the offset after its last
    record, and ``error`` the CorruptRecordError that stopped it (None for a clean
    end); ``truncated`` is True when that frame was merely incomplete (a torn tail or
    a frame still being written) rather than corrupt.
    """

    def __init__(self, fileio: FileIO, path: str, position: int = 0, end: int | None = None,
                 *, expected_offset: int | None = None, contiguous: bool = False,
                 verify_crc: bool = True, chunk_bytes: int = SCAN_CHUNK_BYTES,
                 headers_only: bool = False, check_body: bool | None = None,
                 cleaned: bool = False):
        self.fileio = fileio
        self.path = path
        self.position = position
        self.end = end
        self.expected_offset = expected_offset
        self.contiguous = contiguous
        self.cleaned = cleaned
        self.verify_crc = verify_crc
        self.chunk_bytes = chunk_bytes
        self.headers_only = headers_only
        self.check_body = check_body
        self.valid_end = position
        self.next_offset = expected_offset
        self.error: CorruptRecordError | None = None
        self.truncated = False

    def _fail(self, message: str, pos: int, truncated: bool = False) -> None:
        self.error = CorruptRecordError(message, path=self.path, position=pos)
        self.truncated = truncated

    def _follows(self, header, expected, pos: int) -> bool:
        """Check the offsets of the frame at ``pos`` against the expected next offset;
        False (with ``error`` set) when it may not come there."""
        path = self.path
        if expected is not None and self.contiguous:
            try:
                check_follows(header, expected, f" at position {pos} of {path}",
                              cleaned=self.cleaned, path=path, position=pos)
            except DataLossError as exc:
                self.error = exc
                return False
        elif expected is not None and header.base_offset < expected:
            self._fail(f"frame at position {pos} of {path} has base offset "
                       f"{header.base_offset}, expected at least {expected}", pos)
            return False
        return True

    def __iter__(self) -> Iterator[tuple[int, Frame]]:
        if self.headers_only:
            yield from self._headers()
            return
        fileio, path = self.fileio, self.path
        # without an end, read to the end of file as read_range sees it: on HDFS the
        # length a listing reports for a file being written can lag its visible bytes
        end = self.end if self.end is not None else 1 << 62
        pos = self.position
        buf, buf_start = pa.py_buffer(b""), pos
        while pos < end:
            rel = pos - buf_start
            if buf.size - rel < HEADER_SIZE or \
                    buf.size - rel < unpack_header(buf, rel).length + LOG_OVERHEAD:
                want = max(self.chunk_bytes, HEADER_SIZE)
                if buf.size - rel >= HEADER_SIZE:
                    want = max(want, unpack_header(buf, rel).length + LOG_OVERHEAD)
                buf = pa.py_buffer(fileio.read_range(path, pos, min(want, end - pos)))
                buf_start, rel = pos, 0
                if buf.size < min(want, end - pos):  # the file is shorter than expected
                    end = pos + buf.size
                if buf.size == 0:
                    break
            try:
                frame = decode_frame(buf, rel, verify_crc=self.verify_crc,
                                     check_body=self.check_body)
            except CorruptRecordError as exc:
                self.error = relocate_error(exc, rel, pos, path)
                self.truncated = str(exc).startswith("truncated frame")
                return
            header = frame.header
            if not self._follows(header, self.next_offset, pos):
                return
            yield pos, frame
            pos += header.size
            self.valid_end = pos
            self.next_offset = header.next_offset

    def _headers(self) -> Iterator[tuple[int, Frame]]:
        """The ``headers_only`` scan: one open reader; a frame is yielded once the next
        header proves the file goes on past it, the last one after reading it whole
        (see the class docstring). Bodies of SKIP_BODY_BYTES or more are skipped with a
        new read at the next header; smaller ones are read through in chunks."""
        path = self.path
        pos = self.position
        pending = None  # (position, header) read, not yet yielded
        buf, buf_start = b"", pos
        last_size = SKIP_BODY_BYTES  # until a frame shows the size: a header's read
        with self.fileio.open_input(path) as f:
            end = f.size() if self.end is None else min(self.end, f.size())

            def have(at: int, n: int) -> bool:
                return buf_start <= at and at + n <= buf_start + len(buf)

            expected = self.next_offset
            while pos < end:
                if not have(pos, min(HEADER_SIZE, end - pos)):
                    want = SCAN_CHUNK_BYTES if last_size < SKIP_BODY_BYTES \
                        else HEADER_READ_BYTES
                    f.seek(pos)
                    buf, buf_start = f.read(min(max(want, HEADER_SIZE), end - pos)), pos
                rel = pos - buf_start
                head = memoryview(buf)[rel:rel + HEADER_SIZE]
                try:
                    header = validate_header(head, end - pos, position=pos, path=path)
                except CorruptRecordError as exc:
                    self.error = exc
                    self.truncated = str(exc).startswith("truncated frame")
                    break
                if not self._follows(header, expected, pos):
                    break
                if pending is not None:
                    yield self._accept(*pending)
                pending = (pos, header)
                expected = header.next_offset
                last_size = header.size
                pos += header.size
            if pending is None:
                return
            last, header = pending
            if have(last, header.size):
                data = memoryview(buf)[last - buf_start:last - buf_start + header.size]
            else:
                f.seek(last)
                data = f.read(header.size)
        try:
            frame = decode_frame(pa.py_buffer(data), 0, path=path)
        except CorruptRecordError as exc:  # damaged at the tail: the scan ends before it
            self.error = relocate_error(exc, 0, last, path)
            self.truncated = str(exc).startswith("truncated frame")
            return
        yield self._accept(last, frame.header)

    def _accept(self, pos: int, header) -> tuple[int, Frame]:
        self.valid_end = pos + header.size
        self.next_offset = header.next_offset
        return pos, Frame(header, None)


def read_frame_bytes(fileio: FileIO, path: str, position: int, end: int, offset: int,
                     max_bytes: int, max_offset: int, *, position_offset: int,
                     end_offset: int, cleaned: bool = False) -> tuple[bytes, int]:
    """Whole frames of a segment for a fetch: ``(data, start position)``.

    Starts at the first frame at or after ``position`` whose last offset is
    ``>= offset``; takes consecutive frames whose base offset is ``< max_offset`` and
    that lie before file position ``end``, while the total stays within ``max_bytes``,
    but always at least one frame. CRCs are not re-checked (they were on append;
    consumers check them again), but every header read is checked against the log's
    own records: the frame at ``position`` starts at offset ``position_offset`` (its
    offset index entry), each next frame where the previous one ended
    (:func:`~sparklog.format.frame.check_follows`), no frame runs past ``end``, and the
    frame at ``end`` would start at ``end_offset``. A damaged frame (a flipped base
    offset or length) or a file shorter than ``end`` stops the read after the good
    frames before it; with none before it, it raises DataLossError naming the file and
    the offsets ``[first unreadable, end_offset)``. In a ``cleaned`` segment
    (compaction) the frames may end before ``end_offset`` (its last records removed)
    and a Kafka batch may start after the previous frame's end (whole batches removed).
    """
    chunk = min(end - position, max(max_bytes, 64 << 10) + (64 << 10))
    buf = fileio.read_range(path, position, chunk)
    buf_start = position
    pos = position
    start = None
    expected = position_offset

    def damaged(why: str) -> DataLossError:
        return DataLossError(
            f"{path} at position {pos}: {why}: offsets [{expected}, {end_offset}) "
            f"cannot be read", path=path, position=pos, first_offset=expected,
            end_offset=end_offset)

    try:
        while pos < end:
            rel = pos - buf_start
            if len(buf) - rel < HEADER_SIZE:
                if start is not None:
                    break
                want = min(chunk, end - pos)
                buf, buf_start, rel = fileio.read_range(path, pos, want), pos, 0
                if len(buf) < min(HEADER_SIZE, want):
                    raise damaged(f"the file ends at byte {pos + len(buf)}, the log "
                                  f"recorded {end} bytes")
            header = unpack_header(buf, rel)
            if header.length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
                raise damaged(f"a frame length of {header.length} does not fit the "
                              f"{end - pos} bytes left of the segment")
            check_follows(header, expected, f" at position {pos} of {path}",
                          cleaned=cleaned, path=path, position=pos, end_offset=end_offset)
            if not counts_consistent(header):
                raise damaged(f"the frame header says {header.record_count} records and "
                              f"last offset delta {header.last_offset_delta}")
            if header.base_offset >= max_offset:
                break
            if start is None and header.last_offset < offset:
                pos += header.size
                expected = header.next_offset
                continue
            if start is None:
                start = pos
            elif pos + header.size - start > max_bytes:
                break
            if rel + header.size > len(buf):
                if pos > start:
                    break
                # the first frame is larger than the chunk: read it whole
                buf, buf_start = fileio.read_range(path, pos, header.size), pos
                if len(buf) < header.size:
                    raise damaged(f"the file ends at byte {pos + len(buf)}, the log "
                                  f"recorded {end} bytes")
            pos += header.size
            expected = header.next_offset
            if pos - start >= max_bytes:
                break
        if pos == end and expected != end_offset and not (cleaned and expected < end_offset):
            raise damaged(f"the segment's frames end at offset {expected}, the log "
                          f"recorded {end_offset}")
    except DataLossError:
        if start is None or pos == start:
            raise
    if start is None:
        return b"", position
    rel = start - buf_start
    if rel == 0 and pos - start == len(buf):
        return buf, start
    return bytes(memoryview(buf)[rel:pos - buf_start]), start
