"""LogReader: a read-only view of a partition log built from storage alone.

No lease, no writes, no broker: the Spark source's ``path`` mode and ``sparklog
dump-log`` use it. It is safe while a writer appends, rolls or repairs: it reads only
complete, CRC-valid, contiguous frames (the same test the writer's recovery applies, so
both agree on where the valid data of the last segment ends), treats what follows as
"not written yet", rebuilds missing indexes in memory, and re-lists the directory when
a segment vanished under it.

``read_batches(start, end)`` yields Arrow record batches sliced exactly to the offsets
``[start, end)`` with an int64 :data:`OFFSET_COLUMN` added (for explicit-offset frames
of compacted logs the ``__offset_delta`` column becomes absolute offsets), the
``__timestamp`` column holding each record's timestamp (the log append time for
LogAppendTime frames), and control frames skipped. Both frame kinds are read: a Kafka
record batch (magic 2) gives the raw topic's columns (key, value, headers,
``__timestamp``) with the values an Arrow frame of the same records gives
(:meth:`~sparklog.format.frame.Frame.batch`), so what a reader returns does not depend
on which kind a producer wrote.

Record offsets come from :meth:`~sparklog.format.frame.Frame.offsets` alone. A frame whose
explicit offsets cannot be right (the explicit-offsets bit without an ``__offset_delta``
column, deltas negative, not increasing or beyond the header's ``last_offset_delta``:
the broker refuses such frames from clients, so only storage written before it did, or
damaged, holds one) is never read with wrong or out-of-order offsets: reading it raises
DataLossError naming the frame's offsets ``[base_offset, next_offset)``, taken from its
header, and a read that starts after that range (as the Spark Python reader's
``failOnDataLoss=false`` does) reads every later record at its offset.
"""

from __future__ import annotations

import bisect
import time
from typing import Iterator

import pyarrow as pa

from ..errors import (
    CorruptRecordError,
    DataLossError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    SparklogError,
    StorageFileNotFoundError,
)
from ..format.frame import (
    OFFSET_DELTA_COLUMN,
    TIMESTAMP_COLUMN,
    TIMESTAMP_TYPE,
    Frame,
    offset_range,
)
from ..storage.base import FileIO
from .checkpoint import JsonCheckpoint
from .layout import LOG_START_SUFFIX, PartitionListing, check_offset, describe_partition
from .segment import LogSegment

#: Column of absolute record offsets that read_batches adds.
OFFSET_COLUMN = "__offset"
#: Column of Kafka timestamp types (0 CreateTime, 1 LogAppendTime), on request.
TIMESTAMP_TYPE_COLUMN = "__timestamp_type"

_SWAP_WAIT_S, _SWAP_TRIES = 0.05, 40
_REPLAN_TRIES = 8  # segments replaced under one read before it gives up


def frame_batch(frame: Frame, start: int, end: int, *,
                timestamp_type: bool = False) -> pa.RecordBatch | None:
    """The records of ``frame`` (either kind) with offsets in ``[start, end)`` as a
    RecordBatch with an int64 ``__offset`` column (None if no record falls in the
    range); see the module docstring for the columns."""
    h = frame.header
    if h.last_offset < start or h.base_offset >= end:
        return None
    batch = frame.batch()
    if h.explicit_offsets:
        import pyarrow.compute as pc  # here: planner processes need no compute kernels

        offsets = frame.offsets(batch)  # checked: in the frame's span, increasing
        if not h.is_kafka:  # a Kafka batch's records carry their own offset deltas
            batch = batch.drop_columns([OFFSET_DELTA_COLUMN])
        if h.base_offset < start or h.last_offset >= end:
            keep = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
            batch, offsets = batch.filter(keep), offsets.filter(keep)
    else:
        lo = max(start - h.base_offset, 0)
        hi = min(end - h.base_offset, batch.num_rows)
        if lo or hi < batch.num_rows:
            batch = batch.slice(lo, hi - lo)
        offsets = offset_range(h.base_offset + lo, hi - lo)
    n = batch.num_rows
    if n == 0:
        return None
    if h.log_append_time:
        i = batch.schema.get_field_index(TIMESTAMP_COLUMN)
        batch = batch.set_column(i, batch.schema.field(i),
                                 pa.repeat(pa.scalar(h.max_timestamp, TIMESTAMP_TYPE), n))
    batch = batch.append_column(pa.field(OFFSET_COLUMN, pa.int64(), nullable=False), offsets)
    if timestamp_type:
        batch = batch.append_column(pa.field(TIMESTAMP_TYPE_COLUMN, pa.int32(), nullable=False),
                                    pa.repeat(pa.scalar(h.timestamp_type, pa.int32()), n))
    return batch


class LogReader:
    """Read-only view of the partition log in ``dir_url`` (see module docstring)."""

    def __init__(self, fileio: FileIO, dir_url: str):
        if not isinstance(fileio, FileIO):
            raise InvalidArgumentError(f"fileio must be a FileIO, got {type(fileio).__name__}")
        if not isinstance(dir_url, str) or not dir_url:
            raise InvalidArgumentError(f"dir_url must be a non-empty str, got {dir_url!r}")
        self.fileio = fileio
        self.dir_url = dir_url.rstrip("/")
        self.topic, self.partition = describe_partition(self.dir_url)
        self.name = f"{self.topic}-{self.partition}" if self.topic else self.dir_url
        self._segments: list[LogSegment] = []
        self._checkpoint = JsonCheckpoint(fileio, self.dir_url, LOG_START_SUFFIX)
        self._log_start = 0
        #: why the scan of the last segment stopped before its visible end (None if it
        #: did not): a frame still being written, or a torn tail awaiting recovery.
        self.tail_error: CorruptRecordError | None = None
        self.refresh()
        self._just_listed = True  # offsets() needs no second listing

    # --- listing -------------------------------------------------------------------------
    def refresh(self) -> None:
        """List the directory again (new segments, retention, log start offset)."""
        self._just_listed = False
        for _ in range(_SWAP_TRIES):
            listing = PartitionListing.scan(self.fileio, self.dir_url)
            if not any(f.swap is not None and f.log is None for f in listing.segments.values()):
                break
            time.sleep(_SWAP_WAIT_S)  # a writer is swapping a repaired segment in
        old = {s.path: s for s in self._segments}
        entries = listing.logs()
        segments = []
        for i, files in enumerate(entries):
            sealed = files.sealed or i < len(entries) - 1
            listed = files.log_file
            seg = old.get(listed.path)
            if seg is None or (sealed and not seg.sealed) or (
                    not seg.sealed and listed.size < seg.size):  # rolled, or repaired
                seg = LogSegment.of(self.fileio, self.dir_url, files, sealed=sealed,
                                    listed_size=listed.size if sealed else None)
            segments.append(seg)
        self._segments = segments
        doc = self._checkpoint.read() or {}
        first = segments[0].base_offset if segments else 0
        self._log_start = max(int(doc.get("log_start_offset", 0)), first)

    def _extend_tail(self) -> None:
        for attempt in range(2):
            if not self._segments or self._segments[-1].sealed:
                return
            try:
                # headers only: finding the end needs no record bytes (the reads of
                # records check every CRC); the last frame is still checked whole
                self.tail_error = self._segments[-1].extend(contiguous=True,
                                                            headers_only=True).error
                return
            except StorageFileNotFoundError:  # rolled away or being repaired: list again
                if attempt:
                    raise
                self.refresh()

    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (the last one may still be written)."""
        return list(self._segments)

    def log_start_offset(self) -> int:
        """First readable offset (re-lists the directory)."""
        self.refresh()
        return self._log_start

    def log_end_offset(self) -> int:
        """One past the last record of the last complete, valid frame (re-lists the
        directory and scans the new bytes of the last segment)."""
        self.refresh()
        self._extend_tail()
        return self._segments[-1].next_offset if self._segments else self._log_start

    high_watermark = log_end_offset

    def offsets(self) -> tuple[int, int]:
        """``(log start offset, log end offset)`` from one listing of the directory (what
        :meth:`log_start_offset` and :meth:`log_end_offset` answer, with one refresh, or
        none on a reader that was just opened)."""
        if not self._just_listed:
            self.refresh()
        self._just_listed = False
        self._extend_tail()
        return self._log_start, self._segments[-1].next_offset if self._segments \
            else self._log_start

    # --- locating ------------------------------------------------------------------------
    def _out_of_range(self, start: int, end: int | None, bad: int) -> OffsetOutOfRangeError:
        known_end = self._segments[-1].next_offset if self._segments else self._log_start
        shown = "" if end is None else f", {end})"
        return OffsetOutOfRangeError(
            f"offset range [{start}{shown or ', end)'} is out of range for partition "
            f"{self.name} ({self.dir_url}): offset {bad} is outside the valid offsets "
            f"[{self._log_start}, {known_end}]",
            topic=self.topic, partition=self.partition, offset=bad,
            log_start_offset=self._log_start, log_end_offset=known_end)

    def _check_range(self, start: int, end: int | None) -> None:
        """Check types and the log start; an end beyond the frames known so far is
        checked by the reads themselves (the last segment is scanned once, lazily)."""
        check_offset(start, "start offset")
        if end is not None:
            check_offset(end, "end offset")
            if start > end:
                raise InvalidArgumentError(
                    f"partition {self.name}: start offset {start} is after end offset {end}")
        known_end = self._segments[-1].next_offset if self._segments else self._log_start
        if start < self._log_start or (end if end is not None else start) > known_end:
            self.refresh()
        if start < self._log_start:
            raise self._out_of_range(start, end, start)

    def _segment_index(self, offset: int) -> int:
        bases = [s.base_offset for s in self._segments]
        i = max(bisect.bisect_right(bases, offset) - 1, 0)
        while i < len(self._segments) - 1 and self._segments[i].next_offset <= offset:
            i += 1
        if i and offset < self._segments[i].base_offset:
            raise self._gap(i)
        return i

    def _gap(self, i: int) -> DataLossError:
        """The error for segment ``i`` not starting where segment ``i - 1`` ends."""
        before, seg = self._segments[i - 1], self._segments[i]
        first, end = sorted((before.next_offset, seg.base_offset))
        return DataLossError(
            f"partition {self.name} ({self.dir_url}): segment {before.path} ends at offset "
            f"{before.next_offset} but the next one, {seg.path}, starts at "
            f"{seg.base_offset} (a segment file is missing or damaged): offsets "
            f"[{first}, {end}) cannot be read", path=seg.path, position=0,
            topic=self.topic, partition=self.partition, first_offset=first, end_offset=end)

    def locate(self, offset: int) -> tuple[LogSegment, int]:
        """(segment, file position) of the frame holding ``offset`` (or of the first
        frame after it when compaction removed it; the segment's end at the log end)."""
        self._check_range(offset, offset)
        end = self.log_end_offset()
        if offset > end:
            raise self._out_of_range(offset, offset, offset)
        seg = self._segments[self._segment_index(offset)]
        for pos, frame in seg.scan(seg.position_for(offset), seg.size, verify_crc=False):
            if frame.header.last_offset >= offset:
                return seg, pos
        return seg, seg.size

    # --- reading -------------------------------------------------------------------------
    def iter_frames(self, start: int, end: int | None = None) -> Iterator[Frame]:
        """Validated frames holding offsets in ``[start, end)``, control frames included;
        ``end=None`` reads to the current end of the log. OffsetOutOfRangeError when
        the range starts before the log start or ends after the log end (found while
        reading: earlier frames may have been yielded); CorruptRecordError (path,
        position) for a bad frame inside a sealed segment."""
        self._check_range(start, end)
        if end is not None and start == end:
            return
        if not self._segments:
            if end is not None or start > self._log_start:
                raise self._out_of_range(start, end, end if end is not None else start)
            return
        try:
            i = self._segment_index(start)
        except StorageFileNotFoundError:  # a listed segment was replaced and deleted since
            self.refresh()
            i = self._segment_index(start)
        position = start  # the next offset to yield
        continued = False  # whether segment i continues a read of segment i - 1
        replans = 0
        while i < len(self._segments):
            seg = self._segments[i]
            if end is not None and seg.base_offset >= end:
                return
            if continued and self._segments[i - 1].next_offset != seg.base_offset:
                raise self._gap(i)  # the read goes on from the segment before
            try:
                if i == len(self._segments) - 1 and not seg.sealed:
                    frames = self._active_frames(seg, position, end)
                else:
                    frames = self._sealed_frames(seg, position, end)
                for frame in frames:
                    yield frame
                    position = max(position, frame.header.next_offset)
                if i == len(self._segments) - 1 and not seg.sealed:
                    return
            except StorageFileNotFoundError:
                if replans < _REPLAN_TRIES and self._replaced(seg, position):
                    replans += 1  # compaction replaced it: read on from its replacement
                    i, continued = self._segment_index(position), False
                    continue
                raise self._vanished(seg, position) from None
            if end is not None and seg.next_offset >= end:
                return
            i += 1
            continued = True
        last = self._segments[-1].next_offset
        if end is not None and end > last or start > last:
            raise self._out_of_range(start, end, end if end is not None and end > last else start)

    def _replaced(self, seg: LogSegment, position: int) -> bool:
        """After segment ``seg`` vanished while offsets from ``position`` were read:
        True when a new listing no longer has it live and still holds ``position``
        (compaction replaced it, and its delete delay ran out), so the read goes on
        from the replacement."""
        self.refresh()
        return (position >= self._log_start and bool(self._segments)
                and all(s.path != seg.path for s in self._segments))

    def _vanished(self, seg: LogSegment, position: int) -> SparklogError:
        """The error for segment ``seg`` gone while offsets from ``position`` were read:
        OffsetOutOfRangeError if retention moved the log start past them, else
        DataLossError (the file was deleted or replaced outside the log)."""
        self.refresh()
        if position < self._log_start:
            return OffsetOutOfRangeError(
                f"partition {self.name} ({self.dir_url}): segment {seg.path} was deleted "
                f"while being read (retention); offsets [{position}, {self._log_start}) "
                f"are gone", topic=self.topic, partition=self.partition, offset=position,
                log_start_offset=self._log_start)
        try:
            end = seg.next_offset if seg.sealed else None
        except StorageFileNotFoundError:  # its index went with it
            end = None
        return DataLossError(
            f"partition {self.name} ({self.dir_url}): segment {seg.path} vanished while "
            f"offsets from {position} were read, though the log starts at "
            f"{self._log_start} (deleted or replaced outside the log): offsets "
            f"{f'[{position}, {end})' if end is not None else f'from {position}'} cannot "
            f"be read", path=seg.path, topic=self.topic, partition=self.partition,
            first_offset=position, end_offset=end)

    @staticmethod
    def _sealed_frames(seg: LogSegment, start: int, end: int | None):
        """Frames of a sealed segment in [start, end): a contiguous scan from its offset
        index, checked against the segment's recorded end (DataLossError)."""
        scan = seg.scan_for(start)
        for _, frame in scan:
            h = frame.header
            if end is not None and h.base_offset >= end:
                return
            if h.last_offset >= start:
                yield frame
        seg.check_end(scan)

    @staticmethod
    def _frames_in(scan, start: int, end: int | None):
        """Frames of ``scan`` in [start, end); a bad frame raises its CorruptRecordError."""
        for pos, frame in scan:
            h = frame.header
            if end is not None and h.base_offset >= end:
                return
            if h.last_offset >= start:
                yield pos, frame
        if scan.error is not None:
            raise scan.error

    def _active_frames(self, seg: LogSegment, start: int, end: int | None):
        """Frames of the last, unsealed segment: the part already scanned, then new
        frames, tracked as they are read (one pass over the file)."""
        if start < seg.next_offset:
            for _, frame in self._frames_in(seg.scan(seg.position_for(start), seg.size),
                                            start, end):
                yield frame
        scan = seg.scan_new(contiguous=True)
        for _, frame in seg.tracking(scan):
            h = frame.header
            if end is not None and h.base_offset >= end:
                return
            if h.last_offset >= start:
                yield frame
        self.tail_error = scan.error  # the unwritten or torn tail: the end of the log
        last = seg.next_offset
        if end is not None and end > last or start > last:
            raise self._out_of_range(start, end, end if end is not None and end > last else start)

    def read_batches(self, start: int, end: int | None = None, *,
                     timestamp_type: bool = False) -> Iterator[pa.RecordBatch]:
        """RecordBatches of the records with offsets in ``[start, end)``, exactly, with
        an int64 ``__offset`` column (and ``__timestamp_type`` if ``timestamp_type``);
        control frames are skipped. Errors as :meth:`iter_frames`."""
        stop = end if end is not None else 1 << 63
        for frame in self.iter_frames(start, end):
            if frame.header.is_control:
                continue
            try:
                batch = frame_batch(frame, start, stop, timestamp_type=timestamp_type)
            except DataLossError as exc:  # impossible explicit offsets: name the partition
                raise DataLossError(
                    f"partition {self.name} ({self.dir_url}): {exc}", topic=self.topic,
                    partition=self.partition, first_offset=exc.first_offset,
                    end_offset=exc.end_offset) from None
            if batch is not None:
                yield batch

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset at or after the log start whose record timestamp is
        ``>= timestamp``; None if there is none."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise InvalidArgumentError(
                f"timestamp must be an int (ms), got {type(timestamp).__name__}")
        self.log_end_offset()
        for seg in self._segments:
            if seg.next_offset <= self._log_start:
                continue
            found = seg.offset_for_timestamp(timestamp, seg.size, min_offset=self._log_start)
            if found is not None:
                return found
        return None

    def __repr__(self):
        return f"LogReader({self.dir_url!r}, segments={len(self._segments)})"
