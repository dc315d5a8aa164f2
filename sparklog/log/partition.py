"""PartitionLog: the writer's view of one partition (Kafka's ``Log``).

One PartitionLog per partition, held by the partition's leader. It appends frames to
the active segment under the storage's single-writer lease, rolls segments by
``segment.bytes`` and ``segment.ms``, serves reads of whole frames up to the high
watermark, answers offset-by-timestamp lookups, and deletes whole sealed segments for
retention. See ``docs/format.md`` (segments, indexes, recovery) for the file layout.

Offsets: ``log_start_offset`` (first readable offset, persisted as a versioned
checkpoint) <= ``high_watermark`` (end of the bytes made visible to readers by
:meth:`PartitionLog.flush`) <= ``log_end_offset`` (next offset to assign).

Opening recovers the partition (:class:`~sparklog.log.opening.LogLoader`); rolled
segments are synced and sealed in the background (:mod:`sparklog.log.sealer`).

How far the log went is also recorded outside the partition directory (the broker keeps
it in its coordination store): :attr:`PartitionLog.record_end` is called when a rolled
segment is sealed, at a clean close and when the log fails or goes offline, never on
the append path. A log found at open ending below the recorded end lost its tail (its
directory, or its newest segments, deleted by something else than the broker):
:meth:`PartitionLog.check_end` takes it offline (:func:`lost_tail_error`) until an
operator accepts the loss with :func:`restart_lost_log`, which restarts it at the
recorded end, never below.

Only the open makes the partition directory. Every other file the writer creates inside
it (a rolled segment, indexes, checkpoints, the producer snapshot, a tail repair's copy)
is created non-recursively (``FileIO.in_existing_dir``): a writer whose directory was
renamed away under it (a topic deletion, which in cluster mode does not wait for the old
leader to close) fails with StorageFileNotFoundError, goes offline (KAFKA_STORAGE_ERROR)
and brings nothing back under the topic's old name.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable, NamedTuple

from ..errors import (
    CorruptRecordError,
    DataLossError,
    FileAlreadyExistsError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    StorageFileNotFoundError,
)
from ..format.frame import set_log_append_time, stamp_run, validate_frame
from ..format.header import FrameHeader
from ..storage.base import FileIO, OutputStream
from .checkpoint import JsonCheckpoint
from .config import LogConfig
from .epoch import LeaderEpochCache
from .index import fits_relative
from .layout import LOG_START_SUFFIX, check_offset, describe_partition, segment_file_name
from .opening import LoadedLog, LogLoader
from .scan import read_frame_bytes
from .sealer import SegmentSealer
from .segment import LogSegment

log = logging.getLogger(__name__)


class AppendResult(NamedTuple):
    """Where an appended frame went: its first and last offsets, the LogAppendTime
    stamped (-1 for CreateTime topics), its file position and its segment's base."""

    base_offset: int
    last_offset: int
    log_append_time: int
    position: int
    segment_base: int


class LogView(NamedTuple):
    """One consistent view of a log's offsets and segments (:meth:`PartitionLog.view`):
    ``segments`` holds ``(segment, readable bytes)`` oldest first, the active segment's
    readable bytes ending at the high watermark."""

    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    segments: list


@dataclass(frozen=True)
class FetchResult:
    """Whole frames read from one segment: ``data`` is ``size`` bytes of
    ``segment_path`` from ``position`` (empty when nothing is readable yet), with the
    log's high watermark and log start offset at the time of the read."""

    data: bytes
    segment_path: str
    position: int
    size: int
    high_watermark: int
    log_start_offset: int


def _now_ms() -> int:
    return int(time.time() * 1000)


def lost_tail_error(name: str, dir_url: str, recorded_end: int, recorded_epoch: int,
                    missing: str) -> StorageError:
    """The error of a partition whose log ended at ``recorded_end`` (as recorded by its
    leader of ``recorded_epoch``) and whose storage lacks ``missing`` (what is gone)."""
    topic, partition = describe_partition(dir_url)
    action = (f"sparklog topics delete-records --topic {topic} --partition {partition}"
              if topic is not None else "sparklog topics delete-records")
    return StorageError(
        f"partition {name} ({dir_url}) is offline: its log reached offset {recorded_end} "
        f"(recorded by its leader of epoch {recorded_epoch}), but {missing}. Appends and "
        f"reads are refused (KAFKA_STORAGE_ERROR) so that no offset below {recorded_end} "
        f"is handed out again. To accept the loss and restart the log at offset "
        f"{recorded_end}: {action}")


def restart_lost_log(fileio: FileIO, dir_url: str, end_offset: int) -> None:
    """The operator's acceptance of a lost log tail (Kafka's DeleteRecords up to the
    log's old end): the log start offset checkpoint moves to ``end_offset`` and an empty
    segment starts there, so the next open deletes whatever remains below it and resumes
    at ``end_offset``, never below. The log must not be open."""
    check_offset(end_offset, "end_offset")
    dir_url = dir_url.rstrip("/")
    fileio.mkdirs(dir_url)
    JsonCheckpoint(fileio, dir_url, LOG_START_SUFFIX).write({"log_start_offset": end_offset})
    try:
        fileio.create(fileio.join(dir_url, segment_file_name(end_offset))).close()
    except FileAlreadyExistsError:
        pass


class PartitionLog:
    """The partition log of ``dir_url``; create with :meth:`open`."""

    def __init__(self, fileio: FileIO, dir_url: str, config: LogConfig, *,
                 clock: Callable[[], int] | None = None):
        self.fileio = fileio
        self.dir_url = dir_url
        self._config = config
        self.topic, self.partition = describe_partition(dir_url)
        self.name = f"{self.topic}-{self.partition}" if self.topic else dir_url
        self._clock = clock or _now_ms
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._out: OutputStream | None = None  # the active segment's (None: closed)
        self._leo = 0
        self._hw = 0
        self._hw_position = 0  # bytes of the active segment below the high watermark
        self._log_start = 0
        self._epoch = 0
        self._closed = False
        self._failed: BaseException | None = None
        self._offline: StorageError | None = None
        self._reported: set = set()  # damaged ranges already logged
        self._unsynced_records = 0
        self._last_sync_ms = self._clock()
        self._start_checkpoint = JsonCheckpoint(fileio, dir_url, LOG_START_SUFFIX)
        self._epochs: LeaderEpochCache  # read by open()
        self._sealer = SegmentSealer(self.name, self._seal_failed, self._sealed)
        #: ``record_end(end_offset)``: records outside the partition directory that the
        #: log reached ``end_offset`` (see the module docstring; None: not recorded)
        self.record_end: Callable[[int], None] | None = None
        #: held by compaction for a whole cleaning and by retention's deletions, so a
        #: segment being cleaned is not deleted under the cleaner (Kafka pauses cleaning)
        self.maintenance = threading.Lock()
        #: (deadline ms, segment) replaced by compaction, deleted after the deadline
        self._delete_later_queue: list[tuple[int, LogSegment]] = []

    def _seal_failed(self, exc: BaseException) -> None:
        """Record the failure of a write, flush, sync, roll or seal: the log is unusable
        until reopened; a file that vanished under the writer takes it offline. The
        high watermark (every acknowledged record lies below it) is recorded as the
        log's end: a reopening that finds less keeps the partition offline."""
        if self._failed is None:
            self._failed = exc
            self._record(self._hw)
        if isinstance(exc, StorageFileNotFoundError):
            self._go_offline(f"a segment file or the partition directory vanished under "
                             f"its writer (a deleted topic's stale writer: {exc})")

    def _sealed(self, segment: LogSegment) -> None:
        """A rolled segment is sealed (durable): the log reached its end."""
        self._record(segment.next_offset)

    def _record(self, end_offset: int) -> None:
        """Call :attr:`record_end`; its failure is logged (the next chance records it)."""
        if self.record_end is None:
            return
        try:
            self.record_end(end_offset)
        except Exception as exc:  # noqa: BLE001 - not fatal to the log: logged
            log.warning("partition %s: recording its end offset %d failed: %s", self.name,
                        end_offset, exc)

    def check_end(self, recorded_end: int, recorded_epoch: int) -> None:
        """Compare the opened log with the end recorded outside its directory: when it
        ends below ``recorded_end`` (its tail was lost), close it and raise
        :func:`lost_tail_error` naming the missing offsets."""
        if self._leo >= recorded_end:
            return
        self._closed = True
        if self._out is not None:
            self._out.close()
        if self._leo == self._log_start and len(self._segments) == 1:
            missing = (f"the partition directory holds no records (offsets [{self._leo}, "
                       f"{recorded_end}) are missing: the directory or its segment files "
                       f"were deleted)")
        else:
            missing = (f"its segment files end at offset {self._leo}: the segment files "
                       f"holding offsets [{self._leo}, {recorded_end}) are missing")
        error = lost_tail_error(self.name, self.dir_url, recorded_end, recorded_epoch, missing)
        log.error("%s", error)
        raise error

    def _go_offline(self, reason: str) -> StorageError:
        """Take the partition offline (Kafka's KAFKA_STORAGE_ERROR for a failed log
        dir): every later call raises the returned error, and it is logged as an
        ERROR. For storage that changed under the log: a segment file deleted,
        replaced or truncated by something else than this writer."""
        if self._offline is None:
            self._offline = StorageError(
                f"partition {self.name} ({self.dir_url}) is offline: {reason}. Appends "
                f"and reads are refused (KAFKA_STORAGE_ERROR); acknowledged records may "
                f"be lost. Restart the broker to recover the partition from storage (if "
                f"its newest records are gone it stays offline until "
                f"sparklog topics delete-records restarts it at offset {self._hw})")
            log.error("%s", self._offline)
            self._record(self._hw)
        return self._offline_error()

    def _offline_error(self) -> StorageError:
        """A new instance of the offline error for each raise: one instance raised again
        and again carries an ever longer traceback, and with it the frames (and
        request bytes) of every refused call."""
        return StorageError(str(self._offline))

    @property
    def config(self) -> LogConfig:
        """The log's :class:`~sparklog.log.config.LogConfig` (broker defaults overlaid
        with the topic's configs; replaced by :meth:`update_config`)."""
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply an altered topic config: the next append, roll, flush, retention and
        cleaning check use it (Kafka's ``UnifiedLog.updateConfig``)."""
        if not isinstance(config, LogConfig):
            raise InvalidArgumentError(
                f"partition log {self.name}: update_config takes a LogConfig, got "
                f"{type(config).__name__}")
        self._config = config

    @property
    def failed(self) -> BaseException | None:
        """The storage error that failed the log (appends are refused until it is
        reopened), else None."""
        return self._failed

    @property
    def offline(self) -> StorageError | None:
        """The error of a partition taken offline (see :meth:`_go_offline`), else None
        (a new instance each time, to be raised)."""
        return None if self._offline is None else self._offline_error()

    def _wait_sealed(self) -> None:
        """Wait for the background sealing of rolled segments (see sealer.py)."""
        try:
            self._sealer.wait()
        except BaseException as exc:
            self._seal_failed(exc)
            raise

    # --- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, fileio: FileIO, dir_url: str, config: LogConfig | dict | None = None, *,
             leader_epoch: int = 0, fence: bool = False,
             clock: Callable[[], int] | None = None) -> "PartitionLog":
        """Open (creating if needed) the partition log in ``dir_url`` as its writer.

        Takes the lease of the active segment (LeaseHeldError if a live writer holds
        it; ``fence=True`` first revokes it, as a new leader does), recovers the tail,
        and records ``leader_epoch`` in the epoch history (FencedLeaderEpochError if an
        epoch newer than it was recorded). ``config`` is a LogConfig or a mapping of
        Kafka property names; ``clock`` (ms) replaces the wall clock.
        """
        if not isinstance(fileio, FileIO):
            raise InvalidArgumentError(f"fileio must be a FileIO, got {type(fileio).__name__}")
        if not isinstance(dir_url, str) or not dir_url:
            raise InvalidArgumentError(f"dir_url must be a non-empty str, got {dir_url!r}")
        if config is None or isinstance(config, dict):
            config = LogConfig.from_props(config or {})
        elif not isinstance(config, LogConfig):
            raise InvalidArgumentError(
                f"config must be a LogConfig or a dict, got {type(config).__name__}")
        check_offset(leader_epoch, "leader_epoch")
        self = cls(fileio, dir_url.rstrip("/"), config, clock=clock)
        loader = LogLoader(fileio, self.dir_url, self.name, self._new_segment,
                           self._start_checkpoint)
        self._adopt(loader.load(leader_epoch, fence), leader_epoch)
        return self

    def _adopt(self, loaded: LoadedLog, leader_epoch: int) -> None:
        """Take over what the loader recovered: the log's state before its first
        append."""
        self._segments = loaded.segments
        self._bases = [s.base_offset for s in loaded.segments]
        self._out = loaded.out
        self._leo = self._hw = loaded.log_end_offset
        self._hw_position = loaded.segments[-1].size
        self._log_start = loaded.log_start_offset
        self._epochs = loaded.epochs
        self._epoch = leader_epoch
        self._delete_later(loaded.superseded)

    def _delete_later(self, segments) -> None:
        """Queue ``segments`` (replaced by compaction) for deletion after
        ``file.delete.delay.ms``: readers that planned their files can still read them."""
        deadline = self._clock() + self.config.file_delete_delay_ms
        with self._lock:
            self._delete_later_queue.extend((deadline, seg) for seg in segments)

    def delete_replaced_files(self, now_ms: int | None = None) -> int:
        """Delete the replaced segments whose ``file.delete.delay.ms`` has passed (the
        ``.log`` first, then its indexes); returns how many were deleted."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            due = [seg for t, seg in self._delete_later_queue if t <= now]
            self._delete_later_queue = [(t, s) for t, s in self._delete_later_queue if t > now]
        for seg in due:
            seg.delete_files()
        return len(due)

    @contextlib.contextmanager
    def try_lock(self) -> Iterator[bool]:
        """Hold the log's lock for the ``with`` block if no other thread holds it now,
        never waiting for it; yields whether it does. For a caller that must not block
        (the broker's event loop): when False, it does the work on another thread."""
        locked = self._lock.acquire(blocking=False)
        try:
            yield locked
        finally:
            if locked:
                self._lock.release()

    def wait_sealed(self) -> None:
        """Wait until every rolled segment is sealed (its ``.index`` written)."""
        with self._lock:
            self._check_usable()
            self._wait_sealed()

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Swap the committed cleaned segment ``new`` in for the consecutive sealed
        segments ``old`` (compaction; the caller holds :attr:`maintenance`); the old
        files are deleted after ``file.delete.delay.ms``."""
        with self._lock:
            i = next((k for k, s in enumerate(self._segments) if s is old[0]), None)
            if i is None or self._segments[i:i + len(old)] != old or \
                    i + len(old) >= len(self._segments):
                raise StorageError(
                    f"partition {self.name}: segments {[s.path for s in old]} are no "
                    f"longer consecutive sealed segments of the log")
            new.sealed = True
            self._segments[i:i + len(old)] = [new]
            self._bases = [s.base_offset for s in self._segments]
        self._delete_later(old)

    def _new_segment(self, base: int, **kw) -> LogSegment:
        seg = LogSegment(self.fileio, self.dir_url, base, writable=True,
                         index_interval_bytes=self.config.index_interval_bytes,
                         replication=self.config.replication_factor, **kw)
        seg.created_ms = self._clock()
        return seg

    # --- state ---------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        """First offset readers may fetch."""
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record gets."""
        return self._leo

    @property
    def high_watermark(self) -> int:
        """End of the records visible to readers (advanced by flush, sync and roll)."""
        return self._hw

    @property
    def leader_epoch(self) -> int:
        """Epoch stamped into appended frames."""
        return self._epoch

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first; the last one is active."""
        with self._lock:
            return list(self._segments)

    def view(self) -> LogView:
        """Offsets and segments taken at one moment (appends wait meanwhile)."""
        with self._lock:
            last = len(self._segments) - 1
            return LogView(self._log_start, self._hw, self._leo,
                           [(seg, self._hw_position if i == last else seg.size)
                            for i, seg in enumerate(self._segments)])

    @property
    def active_segment(self) -> LogSegment:
        """The segment appends go to."""
        return self._segments[-1]

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: (largest epoch <= ``epoch``, its end offset)."""
        return self._epochs.end_offset_for(epoch, self._leo)

    def _stream(self) -> OutputStream:
        """The active segment's output stream (StorageError once the log is closed)."""
        out = self._out
        if out is None:
            raise StorageError(f"partition log {self.name} ({self.dir_url}) is closed")
        return out

    def _check_usable(self) -> None:
        if self._offline is not None:
            raise self._offline_error()
        if self._closed:
            raise StorageError(f"partition log {self.name} ({self.dir_url}) is closed")
        if self._failed is not None:
            raise StorageError(
                f"partition log {self.name} ({self.dir_url}) failed earlier "
                f"({self._failed}); reopen it to recover")

    # --- writing -------------------------------------------------------------------------
    def append(self, frame, *, leader_epoch: int | None = None,
               log_append_time_ms: int | None = None,
               validated: FrameHeader | None = None, borrow: bool = False) -> AppendResult:
        """Validate one frame, stamp its base offset (the log end offset) and leader
        epoch in place (a bytearray or writable memoryview is patched where it lies; a
        bytes or read-only frame is copied first), and append it.

        ``validated`` is the header :func:`~sparklog.format.frame.validate_frame`
        returned for this very frame (CRC included) when the caller checked it already:
        the check is not repeated. ``borrow=True`` promises that the frame's memory
        stays unchanged until the next :meth:`flush` or :meth:`sync` returns: it is then
        written from where it lies, with no copy (a bytes frame, copied here anyway, is
        always written so). For LogAppendTime topics the frame gets
        ``log_append_time_ms`` (default: now).
        Rolls first if the frame would overflow ``segment.bytes`` or the segment is
        older than ``segment.ms``. CorruptRecordError for a bad frame,
        RecordTooLargeError over ``max.message.bytes`` (RecordBatchTooLargeError over
        ``segment.bytes``),
        FencedLeaderEpochError for a stale ``leader_epoch``.
        """
        buf: bytearray | memoryview
        if isinstance(frame, bytearray):
            buf = frame
        elif isinstance(frame, memoryview) and not frame.readonly and frame.c_contiguous:
            buf = frame.cast("B") if frame.format != "B" or frame.ndim != 1 else frame
        elif isinstance(frame, (bytes, memoryview)):
            buf = bytearray(frame)
            borrow = True  # our own copy
        else:
            raise InvalidArgumentError(
                f"partition {self.name}: frame must be bytes, bytearray or memoryview, "
                f"got {type(frame).__name__}")
        try:
            header = validated if validated is not None else \
                validate_frame(buf, 0, max_size=self.config.max_message_bytes)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"partition {self.name}: frame refused: {exc}") from None
        except RecordTooLargeError as exc:
            raise RecordTooLargeError(
                f"partition {self.name}: frame refused (max.message.bytes): {exc}") from None
        if header.size != len(buf):
            raise CorruptRecordError(
                f"partition {self.name}: frame refused: {len(buf) - header.size} bytes "
                f"follow the {header.size}-byte frame (one frame per append)")
        return self.append_frames(buf, [(0, header)], leader_epoch=leader_epoch,
                                  log_append_time_ms=log_append_time_ms, borrow=borrow)

    def append_frames(self, buf, frames, *, leader_epoch: int | None = None,
                      log_append_time_ms: int | None = None,
                      borrow: bool = False) -> AppendResult:
        """Append a run of consecutive frames of ``buf`` (a bytearray or writable
        memoryview), as Kafka appends a whole record set: ``frames`` are the
        ``(position, header)`` pairs :func:`~sparklog.format.frame.validate_frame`
        returned for them (CRC included), in order and without gaps between them.

        Each frame is stamped in place with its base offset and the leader epoch, and
        the run goes to storage in one write per segment it lands in (rolling as
        :meth:`append` does). ``leader_epoch``, ``log_append_time_ms`` and ``borrow``
        are as for :meth:`append`. The result covers the run: the first frame's base
        offset, position and segment, the last frame's last offset."""
        if not frames:
            raise InvalidArgumentError(f"partition {self.name}: no frames to append")
        config = self.config
        expected = frames[0][0]
        for pos, header in frames:
            if pos != expected:
                raise InvalidArgumentError(
                    f"partition {self.name}: frames to append must follow each other; "
                    f"one starts at byte {pos}, expected {expected}")
            if header.size > config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"partition {self.name}: frame of {header.size} bytes exceeds "
                    f"segment.bytes={config.segment_bytes}")
            expected = pos + header.size
        if not frames:
            raise InvalidArgumentError(f"partition {self.name}: no frames to append")
        view = memoryview(buf)
        with self._lock:
            self._check_usable()
            epoch = self._epoch
            if leader_epoch is not None and leader_epoch != epoch:
                self._epochs.assign(check_offset(leader_epoch, "leader_epoch"), self._leo)
                self._epoch = epoch = leader_epoch
            now = self._clock()
            append_time = -1
            if config.log_append_time:
                append_time = now if log_append_time_ms is None else log_append_time_ms
                for pos, _ in frames:
                    set_log_append_time(buf, pos, append_time)
            first = None
            i, n = 0, len(frames)
            while i < n:
                seg = self._segments[-1]
                j = self._fitting(seg, frames, i, now, append_time)
                if j == i:  # the next frame starts a new segment
                    self._roll()
                    continue
                start = frames[i][0]
                end = frames[j - 1][0] + frames[j - 1][1].size
                base, position = self._leo, seg.size
                next_offset = stamp_run(buf, frames[i:j], base, epoch)
                try:
                    self._stream().write(view[start:end], borrow=borrow)
                except BaseException as exc:
                    self._seal_failed(exc)
                    raise
                offset = base
                for pos, header in frames[i:j]:
                    after = offset + header.last_offset_delta + 1
                    seg.track(offset, after,
                              append_time if append_time >= 0 else header.max_timestamp,
                              header.record_count, header.size, position + pos - start,
                              control=header.is_control)
                    self._unsynced_records += header.record_count
                    offset = after
                self._leo = next_offset
                if first is None:
                    first = (base, position, seg.base_offset)
                i = j
            if (0 <= config.flush_messages <= self._unsynced_records
                    or 0 <= config.flush_ms <= now - self._last_sync_ms):
                self.sync()
            assert first is not None, "frames is not empty: the first was appended"
            return AppendResult(first[0], self._leo - 1, append_time, first[1], first[2])

    def _fitting(self, seg, frames, i: int, now: int, append_time: int) -> int:
        """How far from ``frames[i]`` the run fits in ``seg``: the index after the last
        frame that does; ``i`` when the segment must roll first (it is not empty, and
        ``segment.ms`` has passed for the rest of the run's largest timestamp, as Kafka
        checks a record set, or the frame overflows ``segment.bytes``, or its offsets do
        not fit the segment's relative index). An empty segment takes at least one
        frame."""
        if seg.size:
            timestamp = append_time if append_time >= 0 else \
                max(header.max_timestamp for _, header in frames[i:])
            if seg.time_waited_for_roll(now, timestamp) > \
                    self.config.segment_ms - self._roll_jitter(seg):
                return i
        room = self.config.segment_bytes - seg.size
        offset, size, j = self._leo, 0, i
        for _, header in frames[i:]:
            after = offset + header.last_offset_delta + 1
            if size + header.size > room or not fits_relative(seg.base_offset, after):
                break
            size += header.size
            offset = after
            j += 1
        return j if j > i or seg.size else i + 1

    def _roll_jitter(self, seg) -> int:
        """What ``seg`` rolls before ``segment.ms``: a random number below
        ``min(segment.jitter.ms, segment.ms)``, drawn once per segment (and again when
        that bound changes), as Kafka's LogSegment does (0 when the jitter is 0)."""
        bound = min(self.config.segment_jitter_ms, self.config.segment_ms)
        if bound <= 0:
            return 0
        if seg.roll_jitter is None or seg.roll_jitter[0] != bound:
            seg.roll_jitter = (bound, random.randrange(bound))
        return seg.roll_jitter[1]

    def flush(self) -> None:
        """hflush the active segment: appended frames become visible to readers and
        the high watermark moves to the log end offset."""
        with self._lock:
            self._check_usable()
            try:
                self._stream().flush()
            except BaseException as exc:
                self._seal_failed(exc)
                raise
            self._hw, self._hw_position = self._leo, self._segments[-1].size

    def sync(self) -> None:
        """hsync the active segment (durable), advancing the high watermark too; the
        segments rolled before it are synced and sealed first."""
        with self._lock:
            self.start_sync()()

    @property
    def pipelines_syncs(self) -> bool:
        """True when the storage overlaps syncs: several threads' :meth:`start_sync`
        functions may wait at once, each returning once its own records are durable
        (HDFS's hsync; see ``OutputStream.pipelined_persist``)."""
        return self._stream().pipelined_persist

    def start_sync(self) -> Callable[[], None]:
        """Start a :meth:`sync` of everything appended so far and return the function
        that completes it: it returns once those records are durable (raising as
        ``sync`` does) and then advances the high watermark to them.

        The log's lock is held only to start: on storage that pipelines syncs (HDFS,
        see :meth:`~sparklog.storage.base.OutputStream.start_sync`) the caller appends
        the next records and starts their sync while this one waits for the storage
        (group commit with syncs in flight); nothing is durable before the returned
        function returns."""
        with self._lock:
            self._check_usable()
            self._wait_sealed()
            try:
                finish = self._stream().start_sync()
            except BaseException as exc:
                self._seal_failed(exc)
                raise
            leo, position = self._leo, self._segments[-1].size
            self._unsynced_records = 0
            self._last_sync_ms = self._clock()

        def complete() -> None:
            try:
                finish()
            except BaseException as exc:
                with self._lock:
                    self._seal_failed(exc)
                raise
            with self._lock:
                # a roll since the start moved the high watermark past ``leo`` already
                if leo > self._hw:
                    self._hw, self._hw_position = leo, position

        return complete

    def roll(self) -> None:
        """Seal the active segment and start a new one at the log end offset (no-op
        when the active segment is empty)."""
        with self._lock:
            self._check_usable()
            if self._segments[-1].size:
                self._roll()

    def _roll(self) -> None:
        old, old_out = self._segments[-1], self._stream()
        try:
            # the lease is checked even with nothing buffered: a writer fenced by a new
            # leader fails here instead of starting a segment of its own
            old_out.flush()
            old_out.verify_lease()
            new = self._new_segment(self._leo)
            self._out = self.fileio.create(new.path, parents=self.fileio.in_existing_dir())
            new.apply_replication()
        except BaseException as exc:
            self._seal_failed(exc)
            raise
        self._hw, self._hw_position = self._leo, 0
        self._segments.append(new)
        self._bases.append(new.base_offset)
        # sync + release + write the indexes of the old segment off the append path
        self._sealer.submit(old, old_out)

    def close(self) -> None:
        """Wait for the sealing of rolled segments, then sync and release the active
        segment's lease (it stays unsealed). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            error = None
            try:
                self._sealer.wait()
            except BaseException as exc:  # noqa: BLE001 - raised after the close below
                self._seal_failed(exc)
                error = exc
            if self._out is not None and self._failed is None:
                self._out.close()
                if error is None and self._offline is None:
                    self._record(self._leo)
            if error is not None:
                raise error

    def abandon(self) -> None:
        """Stop writing a log whose topic is being deleted: later calls are refused as
        on a closed log, with no final sync and no recorded end (its data is going).
        Waits for a cleaning or retention pass in progress (:attr:`maintenance`) and for
        the sealing of rolled segments, so nothing more is written under its directory
        once this returns; the open segment stays open until :meth:`release_abandoned`
        (after the directory was renamed away). Idempotent."""
        with self.maintenance, self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._sealer.wait()
            except BaseException as exc:  # noqa: BLE001 - its data is being deleted
                log.debug("partition %s: sealing before deletion failed: %s", self.name, exc)

    def release_abandoned(self) -> None:
        """Close the open segment of an :meth:`abandon`-ed log (its file handle, its
        storage lease), without a sync; a failure (the file was removed already) is
        logged at debug level."""
        with self._lock:
            out, self._out = self._out, None
        if out is None:
            return
        try:
            out.close()
        except Exception as exc:  # noqa: BLE001 - its data is being deleted
            log.debug("partition %s: closing its deleted segment failed: %s", self.name, exc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- reading -------------------------------------------------------------------------
    def _out_of_range(self, what: str, offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(
            f"{what} {offset} is out of range for partition {self.name} ({self.dir_url}): "
            f"valid offsets are [{self._log_start}, {self._leo}]",
            topic=self.topic, partition=self.partition, offset=offset,
            log_start_offset=self._log_start, log_end_offset=self._leo)

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             _retry: bool = False) -> FetchResult:
        """Whole frames from the one holding ``offset``, below the high watermark (and
        ``max_offset``), up to ``max_bytes`` but at least one frame, all from one
        segment. OffsetOutOfRangeError outside [log start offset, log end offset];
        DataLossError (naming the file and offsets) when the offset lies in a gap
        between segments or the frames read disagree with the log's records (see
        :func:`~sparklog.log.scan.read_frame_bytes`); a segment file that vanished or
        shrank under the log takes the partition offline (StorageError)."""
        check_offset(offset, "offset")
        check_offset(max_bytes, "max_bytes")
        # the segment being looked at and its readable end, for errors
        seg: LogSegment | None = None
        end: int | None = None
        try:
            with self._lock:
                self._check_usable()
                if offset < self._log_start or offset > self._leo:
                    raise self._out_of_range("fetch offset", offset)
                hw, log_start = self._hw, self._log_start
                limit = hw if max_offset is None else \
                    min(hw, check_offset(max_offset, "max_offset"))
                i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
                seg = self._segments[i]
                while i < len(self._segments) - 1 and seg.next_offset <= offset:
                    i += 1
                    seg = self._segments[i]
                active = i == len(self._segments) - 1
                end = self._hw_position if active else seg.size
                if offset >= limit:
                    return FetchResult(b"", seg.path, end, 0, hw, log_start)
                if offset < seg.base_offset:  # the segments before it end earlier
                    before = self._segments[i - 1]
                    raise self._damaged(DataLossError(
                        f"partition {self.name} ({self.dir_url}): no segment holds offsets "
                        f"[{before.next_offset}, {seg.base_offset}): segment {before.path} "
                        f"ends at offset {before.next_offset}, the next one, {seg.path}, "
                        f"starts at {seg.base_offset}", path=seg.path, position=0,
                        topic=self.topic, partition=self.partition,
                        first_offset=before.next_offset, end_offset=seg.base_offset))
                end_offset = hw if active else seg.next_offset
                entry_offset, position = seg.entry_for(offset)
                following = list(self._segments[i + 1:])
            data, start = read_frame_bytes(self.fileio, seg.path, position, end, offset,
                                           max(max_bytes, 1), limit,
                                           position_offset=entry_offset,
                                           end_offset=end_offset, cleaned=bool(seg.generation))
            while not data and following and seg.generation:
                # compaction removed the offsets from here to the end of this cleaned
                # segment: the fetch gets the next records (a gap, as in Kafka)
                seg = following.pop(0)
                active = not following
                with self._lock:
                    end = self._hw_position if active else seg.size
                end_offset = hw if active else seg.next_offset
                entry_offset, position = seg.entry_for(seg.base_offset)
                data, start = read_frame_bytes(
                    self.fileio, seg.path, position, end, seg.base_offset, max(max_bytes, 1),
                    limit, position_offset=entry_offset, end_offset=end_offset,
                    cleaned=bool(seg.generation))
        except StorageFileNotFoundError as exc:
            with self._lock:
                if offset < self._log_start:  # deleted by retention meanwhile
                    raise self._out_of_range("fetch offset", offset) from None
                replaced = seg is not None and all(s is not seg for s in self._segments)
            if replaced and not _retry:  # compaction swapped it out, its delay ran out
                return self.read(offset, max_bytes, max_offset=max_offset, _retry=True)
            if seg is None:  # before any segment was looked at
                raise
            with self._lock:
                raise self._vanished(seg, exc) from None
        except DataLossError as exc:
            if exc.topic is not None:  # a gap, reported above
                raise
            with self._lock:
                shrunk = False
                if seg is not None and end is not None:
                    try:
                        shrunk = self.fileio.size(seg.path) < end
                    except StorageFileNotFoundError:
                        shrunk = True
                if seg is not None and shrunk:
                    if offset < self._log_start:
                        raise self._out_of_range("fetch offset", offset) from None
                    raise self._vanished(seg, exc) from None
                raise self._damaged(DataLossError(
                    f"partition {self.name}: {exc}", path=exc.path, position=exc.position,
                    topic=self.topic, partition=self.partition,
                    first_offset=exc.first_offset, end_offset=exc.end_offset)) from None
        return FetchResult(data, seg.path, start, len(data), hw, log_start)

    def _vanished(self, seg: LogSegment, exc: BaseException) -> StorageError:
        """Take the partition offline for segment ``seg`` whose file vanished or shrank."""
        end = self._leo if seg is self._segments[-1] else seg.next_offset
        return self._go_offline(
            f"segment file {seg.path} holding offsets [{seg.base_offset}, {end}) was "
            f"deleted, replaced or truncated outside the broker ({exc})")

    def _damaged(self, exc: DataLossError) -> DataLossError:
        """Log a damaged range once (ERROR) and return its error for the reader."""
        key = (exc.path, exc.first_offset)
        if key not in self._reported:
            if len(self._reported) < 1024:
                self._reported.add(key)
            log.error("%s", exc)
        return exc

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset at or after the log start, below the high watermark, whose
        record timestamp is ``>= timestamp``; None if there is none (Kafka's
        ListOffsets by timestamp)."""
        found = self.record_for_timestamp(timestamp)
        return None if found is None else found[0]

    def record_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """As :meth:`offset_for_timestamp`: (offset, timestamp) of that record, what
        Kafka's ListOffsets answers."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise InvalidArgumentError(
                f"timestamp must be an int (ms), got {type(timestamp).__name__}")
        with self._lock:
            self._check_usable()
            for i, seg in enumerate(self._segments):
                active = i == len(self._segments) - 1
                if seg.next_offset <= self._log_start:
                    continue
                found = seg.record_for_timestamp(
                    timestamp, self._hw_position if active else None,
                    min_offset=self._log_start, max_offset=self._hw)
                if found is not None:
                    return found
            return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record, at or after the log start and below
        the high watermark, with the largest timestamp of the log; None when the log
        holds no record (Kafka's ListOffsets ``MAX_TIMESTAMP``, KIP-734)."""
        with self._lock:
            self._check_usable()
            largest = max((seg.max_timestamp for seg in self._segments
                           if seg.next_offset > self._log_start), default=-1)
        if largest < 0:
            return None
        found = self.offset_for_timestamp(largest)
        return None if found is None else (found, largest)

    # --- retention -----------------------------------------------------------------------
    def delete_segments_before(self, offset: int) -> list[int]:
        """Move the log start offset up to ``offset`` (persisted first), then delete
        the sealed segments that lie wholly below it. Returns their base offsets.
        OffsetOutOfRangeError if ``offset`` is beyond the high watermark."""
        check_offset(offset, "offset")
        with self.maintenance, self._lock:
            self._check_usable()
            self._wait_sealed()
            if offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before offset {offset} of partition {self.name} "
                    f"({self.dir_url}): the high watermark is {self._hw}",
                    topic=self.topic, partition=self.partition, offset=offset,
                    log_start_offset=self._log_start, log_end_offset=self._leo)
            if offset > self._log_start:
                try:
                    self._start_checkpoint.write({"log_start_offset": offset})
                except StorageFileNotFoundError as exc:  # the directory was renamed away
                    self._seal_failed(exc)
                    raise self._offline_error() from exc
                self._log_start = offset
            deleted = []
            while len(self._segments) > 1 and self._segments[0].next_offset <= self._log_start:
                seg = self._segments.pop(0)
                self._bases.pop(0)
                seg.delete_files()
                deleted.append(seg.base_offset)
            return deleted

    def __repr__(self):
        return (f"PartitionLog({self.name!r}, start={self._log_start}, hw={self._hw}, "
                f"leo={self._leo}, segments={len(self._segments)})")
