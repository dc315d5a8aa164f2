"""Opening a partition log as its writer: recovery of whatever a crash left behind.

:class:`LogLoader` (Kafka's ``LogLoader``) runs in
:meth:`~sparklog.log.partition.PartitionLog.open`, before the first append, and returns
what it found as a :class:`LoadedLog` (the segments, the active segment's writer, the
log start and end offsets, the leader epoch history), which the log then adopts:

* interrupted tail repairs are finished or undone (:mod:`sparklog.log.recovery`), and
  stray indexes whose ``.log`` was deleted are removed;
* sealed segments are taken from their index headers (their ``.log`` is not read);
  missing indexes are rebuilt by scanning;
* a rolled segment whose background sealing had not begun (no ``.timeindex``, see
  :mod:`sparklog.log.sealer`) is checked frame by frame: sealed when whole, else it
  becomes the active segment again and the unsynced segments after it are deleted;
* the active segment's lease is taken (``fence`` revokes a live writer's first) and its
  torn or corrupt tail is cut;
* the leader epoch history is truncated to the log end and the new epoch recorded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from ..errors import CorruptRecordError
from ..storage.base import FileIO, OutputStream
from .checkpoint import JsonCheckpoint
from .epoch import LeaderEpochCache
from .layout import LEADER_EPOCH_SUFFIX, PartitionListing
from .recovery import finish_interrupted_repairs, repair_tail
from .segment import LogSegment

log = logging.getLogger(__name__)


@dataclass
class LoadedLog:
    """A recovered partition log, ready for appends: its ``segments`` (oldest first,
    the last one active), ``out`` (the active segment's writer, holding its lease),
    ``log_start_offset``, ``log_end_offset`` (the next offset; also the high watermark,
    every byte being recovered from storage), ``epochs`` (the leader epoch history,
    the new epoch recorded) and ``superseded`` (segments replaced by a compaction,
    still on storage: the log deletes them after ``file.delete.delay.ms``)."""

    segments: list[LogSegment]
    out: OutputStream
    log_start_offset: int
    log_end_offset: int
    epochs: LeaderEpochCache
    superseded: list[LogSegment]


class LogLoader:
    """Recovers the partition log in ``dir_url`` (see the module docstring).

    ``name``: the partition's name in messages; ``new_segment(base, **kw)``: makes a
    writable :class:`~sparklog.log.segment.LogSegment` with the log's settings;
    ``start_checkpoint``: the log start offset's checkpoint.
    """

    def __init__(self, fileio: FileIO, dir_url: str, name: str,
                 new_segment: Callable[..., LogSegment], start_checkpoint: JsonCheckpoint):
        self.fileio = fileio
        self.dir_url = dir_url
        self.name = name
        self._new_segment = new_segment
        self._start_checkpoint = start_checkpoint

    def load(self, leader_epoch: int, fence: bool) -> LoadedLog:
        """Recover the log, take the active segment's lease (``fence`` revokes a live
        writer's first) and record ``leader_epoch``; return what was loaded."""
        fileio = self.fileio
        fileio.mkdirs(self.dir_url)
        listing = PartitionListing.scan(fileio, self.dir_url)
        if finish_interrupted_repairs(fileio, listing):
            listing = PartitionListing.scan(fileio, self.dir_url)
        doc = self._start_checkpoint.read() or {}
        log_start = int(doc.get("log_start_offset", 0))
        for files in listing.all_segments():  # stray indexes whose .log was deleted
            if files.log is None:
                for info in (files.index, files.timeindex):
                    if info is not None:
                        fileio.delete(info.path)
        for files in listing.uncommitted():  # a compaction cut short before its commit
            log.warning("partition %s: deleting uncommitted cleaned segment %s",
                        self.name, files.stem)
            for info in files.files():
                fileio.delete(info.path)
        # replaced by compaction: kept file.delete.delay.ms for readers that planned them
        superseded = [LogSegment.of(fileio, self.dir_url, f) for f in listing.superseded()]
        entries = listing.logs()
        segments = []
        for i, files in enumerate(entries):
            last = i == len(entries) - 1
            if not last and entries[i + 1].base_offset <= log_start:
                LogSegment.of(fileio, self.dir_url, files).delete_files()
                continue  # retention deleted the start offset past it: finish the job
            if last and not files.sealed:
                if files.timeindex is not None:  # sealing was cut short
                    fileio.delete(files.timeindex.path)
                segments.append(self._new_segment(files.base_offset))
            elif (not files.sealed and files.timeindex is None  # sealing had not begun
                  and self._recover_rolled(files, entries[i + 1:], fence)):
                # its tail was lost in a crash: it becomes the active segment again
                segments.append(self._new_segment(files.base_offset))
                break
            else:
                seg = self._new_segment(files.base_offset, sealed=True,
                                        listed_size=files.log_file.size,
                                        generation=files.generation,
                                        end_offset=files.end_offset)
                if not files.sealed or files.timeindex is None:
                    seg.rebuild_indexes()
                segments.append(seg)
        if not segments or segments[-1].sealed:
            base = segments[-1].next_offset if segments else log_start
            active = self._new_segment(base)
            out = fileio.create(active.path, parents=fileio.in_existing_dir())
            active.apply_replication()
            segments.append(active)
        else:
            active = segments[-1]
            if len(segments) > 1 and segments[-2].next_offset > active.base_offset:
                raise CorruptRecordError(
                    f"partition {self.name}: sealed segment {segments[-2].path} ends at "
                    f"offset {segments[-2].next_offset}, after the start of the active "
                    f"segment {active.path}", path=segments[-2].path)
            out = self._take_active(active, fence)
        end = active.next_offset
        try:
            epochs = LeaderEpochCache(
                JsonCheckpoint(fileio, self.dir_url, LEADER_EPOCH_SUFFIX), self.name)
            epochs.truncate_from_end(end)
            epochs.assign(leader_epoch, end)
        except BaseException:
            out.close()
            raise
        return LoadedLog(segments, out, min(max(log_start, segments[0].base_offset), end),
                         end, epochs, superseded)

    def _recover_rolled(self, files, later, fence: bool) -> bool:
        """A rolled segment whose background sealing had not begun (no ``.timeindex``,
        so its ``.log`` may not have been synced) when the process crashed: seal it
        when its frames are whole and return False; when its tail is torn (it was never
        synced, so neither was anything after it), delete the later segments and
        return True: the caller makes it the active segment, whose tail gets cut."""
        if fence:
            self.fileio.recover_lease(files.log.path)
        seg = self._new_segment(files.base_offset, sealed=True, listed_size=files.log.size)
        try:
            seg.rebuild_indexes()
            return False
        except CorruptRecordError as exc:
            if not fence:  # a live writer would still hold the newest segment's lease
                self.fileio.append(later[-1].path).close()
            log.warning("partition %s: rolled segment %s was not sealed and its tail is "
                        "torn (%s); deleting the %d later segment(s) written after it",
                        self.name, files.log.path, exc, len(later))
            for files_after in reversed(later):
                LogSegment.of(self.fileio, self.dir_url, files_after).delete_files()
            return True

    def _take_active(self, active: LogSegment, fence: bool):
        """Lease the active segment, scan it, cut a bad tail; return its writer."""
        if fence:
            self.fileio.recover_lease(active.path)
        out = self.fileio.append(active.path)
        scan = active.extend(contiguous=True)
        if scan.error is None:
            return out
        log.warning("partition %s: cutting the active segment at byte %d (offset %d): %s",
                    self.name, scan.valid_end, active.next_offset, scan.error)
        out.close()
        repair_tail(self.fileio, active.path, scan.valid_end)
        return self.fileio.append(active.path)
