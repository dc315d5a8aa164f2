"""LogSegment: one segment of a partition log (a ``.log`` file and, once sealed, its
``.index`` and ``.timeindex``).

An *active* segment keeps its counters and sparse indexes in memory, fed by
:meth:`LogSegment.track` for every appended (or recovered) frame. A *sealed* segment
is immutable; its summary (end offset, size, max timestamp) is read lazily from the
72-byte header of its ``.index`` and its index entries only when a lookup needs them,
so opening a partition never reads sealed ``.log`` files. A missing or corrupt index is
rebuilt by scanning the ``.log`` (and rewritten when the segment is ``writable``).
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa

from ..errors import (
    CorruptRecordError,
    DataLossError,
    FileAlreadyExistsError,
    InvalidArgumentError,
    StorageFileNotFoundError,
)
from ..format.frame import TIMESTAMP_COLUMN, Frame
from ..storage.base import FileIO
from .index import (
    INDEX_HEADER_SIZE,
    IndexPoints,
    OffsetIndex,
    SegmentSummary,
    TimeIndex,
    parse_index_header,
)
from .layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    SegmentFiles,
    cleaned_stem,
    segment_file_name,
)
from .scan import FrameScan

log = logging.getLogger(__name__)
_NO_REPLICATION_NOTED: set[str] = set()  # storage schemes whose note was logged


def write_replacing(fileio: FileIO, path: str, data: bytes) -> None:
    """write_atomic ``path``, first deleting a stale copy left by an interrupted run
    (only the partition's writer may call this). The partition directory must exist:
    nothing is created when it was renamed away (StorageFileNotFoundError)."""
    parents = fileio.in_existing_dir()
    try:
        fileio.write_atomic(path, data, parents=parents)
    except FileAlreadyExistsError:
        fileio.delete(path)
        fileio.write_atomic(path, data, parents=parents)


def first_offset_at_or_after(frame: Frame, timestamp: int, min_offset: int = 0) -> int | None:
    """Offset of the first record of ``frame`` at or after ``min_offset`` whose
    timestamp is ``>= timestamp``; None if there is none."""
    found = first_record_at_or_after(frame, timestamp, min_offset)
    return None if found is None else found[0]


def first_record_at_or_after(frame: Frame, timestamp: int,
                             min_offset: int = 0) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of ``frame`` at or after ``min_offset``
    whose timestamp is ``>= timestamp`` (every record of a LogAppendTime frame has the
    frame's max timestamp); None if there is none."""
    header = frame.header
    if header.max_timestamp < timestamp or header.last_offset < min_offset:
        return None
    import pyarrow.compute as pc  # here: planner processes need no compute kernels

    offsets = frame.offsets()
    if header.log_append_time:
        mask = pc.greater_equal(offsets, pa.scalar(min_offset, pa.int64()))
        index = pc.index(mask, True).as_py()
        return None if index < 0 else (offsets[index].as_py(), header.max_timestamp)
    batch = frame.batch()
    times = batch.column(batch.schema.get_field_index(TIMESTAMP_COLUMN)).cast(pa.int64())
    mask = pc.greater_equal(times, pa.scalar(timestamp, pa.int64()))
    if min_offset > header.base_offset:
        mask = pc.and_(mask, pc.greater_equal(offsets, pa.scalar(min_offset, pa.int64())))
    index = pc.index(mask, True).as_py()
    return None if index < 0 else (offsets[index].as_py(), times[index].as_py())


class LogSegment:
    """A segment of ``directory`` starting at ``base_offset``.

    Attributes ``size``, ``next_offset`` (one past the last offset), ``max_timestamp``
    (-1 when empty), ``max_timestamp_offset``, ``record_count`` and ``frame_count``
    describe its content; for a sealed segment they load from the index on first use.

    A cleaned segment (compaction, ``generation`` >= 1) holds offsets
    ``[base_offset, end_offset)`` under its own names (:func:`~.layout.cleaned_stem`);
    its ``next_offset`` is ``end_offset`` even when compaction removed its last records.
    """

    def __init__(self, fileio: FileIO, directory: str, base_offset: int, *,
                 sealed: bool = False, listed_size: int | None = None,
                 index_interval_bytes: int = 4096, writable: bool = False,
                 replication: int = -1, generation: int = 0,
                 end_offset: int | None = None):
        self.fileio = fileio
        self.directory = directory
        self.base_offset = base_offset
        self.generation = generation
        self.end_offset = end_offset if generation else None
        if generation and end_offset is None:
            raise InvalidArgumentError(
                f"segment {base_offset} of generation {generation} (cleaned) needs the "
                "end_offset of the range it replaced")
        stem = cleaned_stem(base_offset, end_offset, generation) \
            if generation and end_offset is not None else segment_file_name(base_offset, "")
        self.path = fileio.join(directory, stem + LOG_SUFFIX)
        self.index_path = fileio.join(directory, stem + INDEX_SUFFIX)
        self.timeindex_path = fileio.join(directory, stem + TIMEINDEX_SUFFIX)
        self.sealed = sealed
        self.listed_size = listed_size
        self.index_interval_bytes = index_interval_bytes
        self.writable = writable
        self.replication = replication
        self.created_ms = int(time.time() * 1000)
        #: (bound, jitter): this segment's random part of ``segment.jitter.ms``
        #: (:class:`~sparklog.log.partition.PartitionLog`'s roll check draws it)
        self.roll_jitter: tuple[int, int] | None = None
        self.first_frame_max_timestamp: int | None = None
        self._lazy = sealed  # counters still to be read from the index header
        self.offset_index: OffsetIndex | None = None if sealed else OffsetIndex(base_offset)
        self.time_index: TimeIndex | None = None if sealed else TimeIndex(base_offset)
        self._size = 0
        self._next_offset = base_offset
        self._max_timestamp = -1
        self._max_timestamp_offset = -1
        self._record_count = 0
        self._frame_count = 0
        self._no_control = True
        self._index_points = IndexPoints(index_interval_bytes)

    @classmethod
    def of(cls, fileio: FileIO, directory: str, files: SegmentFiles, **kw) -> "LogSegment":
        """The segment of listed ``files`` (appended or cleaned)."""
        return cls(fileio, directory, files.base_offset, generation=files.generation,
                   end_offset=files.end_offset, **kw)

    def __repr__(self):
        state = "sealed" if self.sealed else "active"
        return f"LogSegment({self.base_offset}, {state}, path={self.path!r})"

    # --- counters (lazy for sealed segments) ---------------------------------------------
    def _counter(self, name: str):
        if self._lazy:
            self._load_summary()
        return getattr(self, name)

    size = property(lambda self: self._counter("_size"), doc="Bytes in the ``.log``.")
    next_offset = property(lambda self: self._counter("_next_offset"),
                           doc="One past the last offset (base_offset when empty).")
    max_timestamp = property(lambda self: self._counter("_max_timestamp"),
                             doc="Largest record timestamp, -1 when empty.")
    max_timestamp_offset = property(lambda self: self._counter("_max_timestamp_offset"),
                                    doc="Base offset of the frame with max_timestamp.")
    record_count = property(lambda self: self._counter("_record_count"),
                            doc="Records in the segment.")
    frame_count = property(lambda self: self._counter("_frame_count"),
                           doc="Frames in the segment.")

    @property
    def summary(self) -> SegmentSummary:
        """The segment's :class:`SegmentSummary` (what its ``.index`` header stores)."""
        if self._lazy:
            self._load_summary()
        return SegmentSummary(self.base_offset, self._next_offset, self._size,
                              self._max_timestamp, self._max_timestamp_offset,
                              self._record_count, self._frame_count, self._no_control)

    def _set_summary(self, s: SegmentSummary) -> None:
        self._size, self._next_offset = s.size, s.next_offset
        self._max_timestamp, self._max_timestamp_offset = s.max_timestamp, s.max_timestamp_offset
        self._record_count, self._frame_count = s.record_count, s.frame_count
        self._no_control = s.no_control
        self._lazy = False

    def _load_summary(self) -> None:
        try:
            data = self.fileio.read_range(self.index_path, 0, INDEX_HEADER_SIZE)
            summary, _, _ = parse_index_header(data, self.index_path)
            if summary.base_offset != self.base_offset or (
                    self.listed_size is not None and summary.size != self.listed_size):
                raise CorruptRecordError(
                    f"offset index {self.index_path} describes base offset "
                    f"{summary.base_offset} and {summary.size} bytes, the segment has "
                    f"base offset {self.base_offset} and {self.listed_size} bytes")
        except (CorruptRecordError, StorageFileNotFoundError) as exc:
            # a missing index is normal for a segment whose writer is still sealing it
            level = logging.DEBUG if isinstance(exc, StorageFileNotFoundError) else logging.WARNING
            log.log(level, "rebuilding the indexes of %s: %s", self.path, exc)
            self.rebuild_indexes()
            return
        self._set_summary(summary)

    # --- appending ---------------------------------------------------------------------
    def track(self, base_offset: int, next_offset: int, max_timestamp: int,
              record_count: int, size: int, position: int, *, control: bool) -> None:
        """Account for a frame of ``size`` bytes at ``position`` (appended or found by a
        scan; ``control``: a control frame): counters, and a sparse index entry every
        ``index.interval.bytes``."""
        if self._index_points.due(size):
            offsets, times = self.load_indexes()
            IndexPoints.add(offsets, times, base_offset, position, self._max_timestamp)
        if self.first_frame_max_timestamp is None:
            self.first_frame_max_timestamp = max_timestamp
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._max_timestamp_offset = base_offset
        self._next_offset = next_offset
        self._record_count += record_count
        self._frame_count += 1
        if control:
            self._no_control = False
        self._size = position + size

    def scan(self, position: int = 0, end: int | None = None, *, contiguous: bool = False,
             verify_crc: bool = True, expected_offset: int | None = None) -> FrameScan:
        """A :class:`FrameScan` of this segment's ``.log`` from ``position`` (where a frame
        starting at ``expected_offset`` must be; the segment's base offset at 0)."""
        expected = expected_offset if expected_offset is not None else \
            self.base_offset if position == 0 else None
        return FrameScan(self.fileio, self.path, position, end, expected_offset=expected,
                         contiguous=contiguous, verify_crc=verify_crc,
                         cleaned=self.generation > 0)

    def scan_for(self, offset: int, *, check_body: bool | None = None) -> FrameScan:
        """A contiguous scan of this sealed segment from the index entry at or before
        ``offset`` to its recorded size: the first frame must start at the entry's
        offset and each next one where the previous ended (see :meth:`check_end`).
        ``check_body`` as :func:`~sparklog.format.frame.validate_frame`."""
        entry_offset, position = self.entry_for(offset)
        scan = self.scan(position, self.size, contiguous=True, expected_offset=entry_offset)
        scan.check_body = check_body
        return scan

    def check_end(self, scan: FrameScan) -> None:
        """After ``scan`` (from :meth:`scan_for`) stopped, raise DataLossError naming the
        file and the unreadable offsets unless it read every frame up to the recorded
        end of this sealed segment (size and next offset of its ``.index`` summary)."""
        expected = scan.next_offset
        if scan.error is None and scan.valid_end == self.size and (
                expected == self.next_offset
                or self.generation and expected <= self.next_offset):
            return
        if scan.error is not None:
            why = str(scan.error)
        elif scan.valid_end != self.size:
            why = (f"the file ends at byte {scan.valid_end}, the log recorded "
                   f"{self.size} bytes")
        else:
            why = f"its frames end at offset {expected}, the log recorded {self.next_offset}"
        position = scan.error.position if scan.error is not None else scan.valid_end
        raise DataLossError(
            f"sealed segment {self.path} is damaged ({why}): offsets "
            f"[{expected}, {self.next_offset}) cannot be read",
            path=self.path, position=position, first_offset=expected,
            end_offset=self.next_offset)

    def scan_new(self, end: int | None = None, *, contiguous: bool = True,
                 headers_only: bool = False) -> FrameScan:
        """A scan of the bytes after the tracked ``size`` (new frames of an active
        segment); pass it to :meth:`tracking` to account for them. ``headers_only``:
        see :class:`~sparklog.log.scan.FrameScan`."""
        return FrameScan(self.fileio, self.path, self._size, end,
                         expected_offset=self._next_offset, contiguous=contiguous,
                         headers_only=headers_only, cleaned=self.generation > 0)

    def tracking(self, scan: FrameScan):
        """Yield ``(position, frame)`` of ``scan`` (from :meth:`scan_new`), tracking
        each frame before it is yielded."""
        for pos, frame in scan:
            h = frame.header
            self.track(h.base_offset, h.next_offset, h.max_timestamp, h.record_count,
                       h.size, pos, control=h.is_control)
            yield pos, frame

    def extend(self, end: int | None = None, *, contiguous: bool = True,
               headers_only: bool = False) -> FrameScan:
        """Scan the active segment's file from the tracked ``size`` and track every valid
        frame found; returns the finished scan (its ``error`` says why it stopped).
        ``headers_only`` reads the frames' headers, and only the last frame whole (see
        :class:`~sparklog.log.scan.FrameScan`)."""
        scan = self.scan_new(end, contiguous=contiguous, headers_only=headers_only)
        for _ in self.tracking(scan):
            pass
        return scan

    def time_waited_for_roll(self, now_ms: int, timestamp: int) -> int:
        """What ``segment.ms`` is compared with, as in Kafka: the incoming frame's
        ``timestamp`` minus the first frame's max timestamp (so backfills with old
        timestamps do not roll every frame), or the segment's age by the clock when it
        has no timestamp yet."""
        first = self.first_frame_max_timestamp
        if first is not None and first >= 0:
            return timestamp - first
        return now_ms - self.created_ms

    def reach_end_offset(self) -> None:
        """A cleaned segment's next offset is its ``end_offset`` (the range it replaced)
        even when compaction removed its last records; no-op for an appended one."""
        if self.end_offset is not None:
            self._next_offset = max(self._next_offset, self.end_offset)

    # --- sealing and indexes -------------------------------------------------------------
    def seal(self) -> SegmentSummary:
        """Write the ``.timeindex`` then the ``.index`` (the seal marker); the segment's
        ``.log`` must be complete and closed."""
        summary = self.summary
        offsets, times = self.load_indexes()
        write_replacing(self.fileio, self.timeindex_path, times.to_bytes())
        write_replacing(self.fileio, self.index_path, offsets.to_bytes(summary))
        self.apply_replication(self.timeindex_path, self.index_path)
        self.sealed = True
        return summary

    def apply_replication(self, *paths: str) -> None:
        """Give ``paths`` (default: the ``.log``) the topic's ``replication.factor`` (HDFS
        dfs.replication); a storage without replication (file://) ignores it, with one
        INFO note per storage scheme."""
        if self.replication < 1:
            return
        for path in paths or (self.path,):
            if not self.fileio.set_replication(path, self.replication):
                scheme = self.fileio.scheme or "file"
                if scheme not in _NO_REPLICATION_NOTED:
                    _NO_REPLICATION_NOTED.add(scheme)
                    log.info("replication.factor=%d ignored: %s:// storage has no "
                             "replication", self.replication, scheme)
                return

    def load_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """The segment's offset and time indexes (read for a sealed segment at first
        use, rebuilt from the ``.log`` when missing or corrupt)."""
        if self.offset_index is None or self.time_index is None:
            self._read_indexes()
        offsets, times = self.offset_index, self.time_index
        assert offsets is not None and times is not None, "read or rebuilt just above"
        return offsets, times

    def _read_indexes(self) -> None:
        try:
            summary, offset_index = OffsetIndex.from_bytes(
                self.fileio.read_all(self.index_path), self.index_path)
            time_index = TimeIndex.from_bytes(
                self.fileio.read_all(self.timeindex_path), self.timeindex_path)
            if summary.base_offset != self.base_offset or time_index.base_offset != self.base_offset:
                raise CorruptRecordError(f"indexes of {self.path} name another base offset")
        except (CorruptRecordError, StorageFileNotFoundError) as exc:
            # a missing index is normal for a segment whose writer is still sealing it
            level = logging.DEBUG if isinstance(exc, StorageFileNotFoundError) else logging.WARNING
            log.log(level, "rebuilding the indexes of %s: %s", self.path, exc)
            self.rebuild_indexes()
            return
        self._set_summary(summary)
        self.offset_index, self.time_index = offset_index, time_index

    def rebuild_indexes(self) -> None:
        """Rebuild counters and indexes of a sealed segment by scanning its ``.log``;
        rewrite its index files when ``writable``. A bad frame inside a sealed segment
        raises CorruptRecordError (path and position)."""
        self.offset_index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        self._size, self._next_offset = 0, self.base_offset
        self._index_points = IndexPoints(self.index_interval_bytes)
        self._max_timestamp = self._max_timestamp_offset = -1
        self._record_count = self._frame_count = 0
        self._no_control = True
        self.first_frame_max_timestamp = None
        self._lazy = False
        scan = self.extend(contiguous=True)
        if scan.error is not None:
            raise DataLossError(
                f"sealed segment {self.path} is corrupt ({scan.error}): offsets from "
                f"{scan.next_offset} on in it cannot be read",
                path=self.path, position=scan.error.position, first_offset=scan.next_offset)
        self.reach_end_offset()
        if self.writable:
            self.fileio.delete(self.index_path)
            self.fileio.delete(self.timeindex_path)
            self.seal()

    # --- lookups -------------------------------------------------------------------------
    def position_for(self, offset: int) -> int:
        """File position of a frame at or before the one holding ``offset`` (from the
        sparse offset index; scan forward from there)."""
        return self.entry_for(offset)[1]

    def entry_for(self, offset: int) -> tuple[int, int]:
        """(base offset, file position) of a frame at or before the one holding
        ``offset``: the sparse offset index entry to scan forward from."""
        offsets, _ = self.load_indexes()
        return offsets.lookup(offset)

    def offset_for_timestamp(self, timestamp: int, end: int | None = None,
                             min_offset: int = 0, max_offset: int | None = None) -> int | None:
        """First offset in [``min_offset``, ``max_offset``) of this segment whose record
        timestamp is ``>= timestamp``, looking only at frames before file position
        ``end``; None if there is none."""
        found = self.record_for_timestamp(timestamp, end, min_offset, max_offset)
        return None if found is None else found[0]

    def record_for_timestamp(self, timestamp: int, end: int | None = None, min_offset: int = 0,
                             max_offset: int | None = None) -> tuple[int, int] | None:
        """As :meth:`offset_for_timestamp`: (offset, timestamp) of that record."""
        if self.max_timestamp < timestamp:
            return None
        offsets, times = self.load_indexes()
        start = max(times.lookup(timestamp), offsets.lookup(min_offset)[0])
        _, position = offsets.lookup(start)
        for _, frame in self.scan(position, end if end is not None else self.size):
            if max_offset is not None and frame.header.base_offset >= max_offset:
                return None
            found = first_record_at_or_after(frame, timestamp, min_offset)
            if found is not None:
                return found if max_offset is None or found[0] < max_offset else None
        return None

    def delete_files(self) -> None:
        """Delete the ``.log`` first, then its indexes (a crash leaves only stray
        indexes, which the next open removes)."""
        for path in (self.path, self.timeindex_path, self.index_path):
            self.fileio.delete(path)
