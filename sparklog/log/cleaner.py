"""Log compaction of one partition log (Kafka's LogCleaner, ``cleanup.policy=compact``).

A cleaning of the partition log ``plog`` (its writer, in the writer's process):

1. **What is cleanable.** The *dirty* part starts at the cleaner checkpoint's offset
   (everything below it was cleaned before) and ends at the *first uncleanable offset*:
   the active segment's base, or the base of the first segment holding a record newer
   than ``min.compaction.lag.ms``. The dirty ratio is the dirty bytes over all the
   bytes below that offset; a cleaning runs when it reaches
   ``min.cleanable.dirty.ratio``, or when the oldest dirty record is older than
   ``max.compaction.lag.ms``.
2. **The key map.** The dirty segments are read in offset order into a map key ->
   latest offset, bounded by ``dedupe_buffer_size`` (24 bytes an entry, as Kafka's
   16-byte hash and 8-byte offset): when the next segment would not fit, the cleaning
   stops at the end of the last segment mapped.
3. **Rewriting.** Every sealed segment below the mapped end is read; a record stays
   when no later record of its key is in the map, and a tombstone (a null ``value``)
   also only until ``delete.retention.ms`` after the cleaning that first reached it.
   Records without a key are dropped (a compacted topic refuses them on produce).
   Each frame keeps its base offset, leader epoch, producer fields and last offset
   delta, and stays in its own kind; an Arrow frame that lost records is re-encoded
   with explicit offsets (docs/format.md section 1), a Kafka batch that lost records
   is rebuilt as a Kafka batch of its kept records, each with its own offset delta, in
   its own codec (:func:`~sparklog.format.kafka_batch.retained_batch`, as Kafka's
   cleaner does), so Kafka consumers still fetch it as a byte range; a frame that lost
   all of them is dropped. Transactions
   (:mod:`.transactions`): the key map ends where no transaction is open and leaves
   out aborted records; the frames of aborted transactions are dropped, and a
   transaction marker goes ``delete.retention.ms`` after the cleaning that reached
   it unless records of its transaction stay (in any cleaned segment: a cleaning
   rewrites every sealed segment below its end, :class:`MarkerGuard`).
   Consecutive segments are grouped into cleaned segments of at most ``segment.bytes``.
4. **The swap** (docs/format.md, "Compaction"): each cleaned segment is written under
   its own name ``<base>.<end>.c<generation>``, synced, then its ``.timeindex`` and
   last its ``.index`` (the commit); from then on :func:`~.layout.live_segments` selects
   it instead of the segments it replaces, whose files are deleted
   ``file.delete.delay.ms`` later.
5. The cleaner checkpoint records the new dirty offset and the time of this cleaning
   (the tombstone clock).

Steps 2 and 3 are a function of the partition's files (:func:`run_task` of a
:class:`CleaningTask`), so the broker can run them in a helper process
(:mod:`sparklog.retention.cleaner_process`) and commit the result itself.

Records are keyed by their ``key`` column, or for typed topics by the column(s)
their ``compaction.key.columns`` declares (:class:`CompactionKey`); a topic whose schema
lacks them cannot be compacted (:class:`~sparklog.errors.InvalidConfigError`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DataLossError, InvalidConfigError
from ..format.frame import (
    OFFSET_DELTA_COLUMN,
    TIMESTAMP_COLUMN,
    encode_frame,
    may_follow_gap,
    reseal,
)
from ..format.header import LAST_OFFSET_DELTA, MAX_TIMESTAMP, RECORD_COUNT, TRANSACTIONAL_BIT
from ..format.kafka_batch import retained_batch
from ..format.marker import marker_type
from .checkpoint import JsonCheckpoint
from .index import fits_relative
from .layout import PartitionListing
from .segment import LogSegment, write_replacing
from .transactions import AbortedTransactions, TransactionTracker

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT_SUFFIX = ".cleaner-offset-checkpoint"
#: Bytes of dedupe buffer one key takes (Kafka's SkimpyOffsetMap: MD5 + offset).
BYTES_PER_KEY = 24
#: Records of dirty segments read before they are merged into the key map at once.
MERGE_ROWS = 1 << 22
KEY_COLUMN = "key"
VALUE_COLUMN = "value"


@dataclass(frozen=True)
class CleanableState:
    """Where the dirty part of a partition lies and how dirty it is."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    #: the oldest timestamp of a dirty record (-1: none known)
    oldest_dirty_timestamp: int

    @property
    def dirty_ratio(self) -> float:
        """Dirty bytes over the bytes below the first uncleanable offset (0 if none)."""
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass
class CleanResult:
    """What one cleaning did."""

    first_dirty: int
    end_offset: int
    bytes_read: int = 0
    bytes_written: int = 0
    segments_replaced: int = 0
    segments_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0
    seconds: float = 0.0
    replaced: list = field(default_factory=list)


class CleanerCheckpoint:
    """The cleaner's state in the partition directory (versioned JSON
    ``<v>.cleaner-offset-checkpoint``): ``dirty_offset`` (everything below was cleaned)
    and ``cleanings``, ``[[end offset, time ms], ...]``: the cleaning at that time
    reached the offsets below that end (and above the previous entry's end)."""

    def __init__(self, fileio, directory: str):
        self.file = JsonCheckpoint(fileio, directory, CLEANER_CHECKPOINT_SUFFIX)

    def read(self) -> tuple[int, list[list[int]]]:
        """(dirty offset, cleanings) of the latest version ((0, []) if none)."""
        doc = self.file.read() or {}
        return int(doc.get("dirty_offset", 0)), [list(c) for c in doc.get("cleanings", [])]

    def write(self, dirty_offset: int, cleanings: list[list[int]]) -> None:
        """Store a new version."""
        self.file.write({"dirty_offset": dirty_offset, "cleanings": cleanings})


def reached_at(cleanings: list[list[int]], offset: int) -> int | None:
    """When the first cleaning reached ``offset`` (ms), None if none did (entries
    whose tombstones all expired are kept collapsed into one, with time 0)."""
    for end, when in cleanings:
        if offset < end:
            return when
    return None


class CompactionKey:
    """How compaction keys the records of partition ``name``: by ``columns``
    (``compaction.key.columns``; ``("key",)`` by default, a raw topic's key). One
    column is compared by value; several by a composite key (each column's bytes or
    text, length-prefixed, so no two different tuples meet); a record with a null in a
    key column has no key."""

    def __init__(self, name: str, columns=(KEY_COLUMN,)):
        self.name = name
        self.columns = tuple(columns)

    @classmethod
    def of(cls, name: str, config) -> "CompactionKey":
        """The key of a partition with LogConfig ``config``."""
        return cls(name, key_columns(getattr(config, "compaction_key_columns", KEY_COLUMN)))

    def check(self, schema: pa.Schema) -> None:
        """InvalidConfigError naming the partition and the columns unless ``schema``
        has every key column."""
        missing = [c for c in self.columns if c not in schema.names]
        if missing:
            have = ', '.join(n for n in schema.names if not n.startswith('__'))
            raise InvalidConfigError(
                f"partition {self.name}: cleanup.policy=compact needs a record key, but the "
                f"topic's schema has no {', '.join(repr(c) for c in missing)} column "
                f"(columns: {have}); declare the key with compaction.key.columns or use "
                f"cleanup.policy=delete")

    def keys(self, batch: pa.RecordBatch) -> pa.Array:
        """The key of each record of ``batch`` (null: none)."""
        self.check(batch.schema)
        if len(self.columns) == 1:
            return plain_keys(batch.column(self.columns[0]))
        parts = []
        for c in self.columns:
            v = plain_keys(batch.column(c))
            if not (pa.types.is_binary(v.type) or pa.types.is_string(v.type)
                    or pa.types.is_large_binary(v.type) or pa.types.is_large_string(v.type)):
                v = v.cast(pa.string())
            v = v.cast(pa.large_binary())
            parts += [pc.binary_length(v).cast(pa.string()).cast(pa.large_binary()),
                      pa.scalar(b":", pa.large_binary()), v]
        return pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))

    def type(self, batch: pa.RecordBatch) -> pa.DataType:
        """The Arrow type of :meth:`keys` for ``batch``."""
        return self.keys(batch.slice(0, 0)).type


def key_columns(value: str) -> tuple[str, ...]:
    """The columns of a ``compaction.key.columns`` value (comma-separated, at least
    one); InvalidConfigError otherwise."""
    columns = tuple(c.strip() for c in str(value).split(","))
    if not columns or not all(columns) or len(set(columns)) != len(columns):
        raise InvalidConfigError(
            f"compaction.key.columns={value!r}: expected distinct column names, "
            f"comma-separated")
    return columns


def tombstone_mask(batch: pa.RecordBatch, key: CompactionKey) -> np.ndarray | None:
    """Per row whether it is a tombstone (a null ``value``; for typed topics without a
    value column, every column but the key columns null), as numpy bools; None when
    no row is one (the common case, found from the columns' null counts alone)."""
    if VALUE_COLUMN in batch.schema.names and VALUE_COLUMN not in key.columns:
        values = batch.column(VALUE_COLUMN)
        if values.null_count == 0:
            return None
        return values.is_null().to_numpy(zero_copy_only=False)
    cols = [batch.column(i) for i, n in enumerate(batch.schema.names)
            if n not in key.columns and not n.startswith("__")]
    if not cols or any(c.null_count == 0 for c in cols):
        return None
    out = np.ones(batch.num_rows, np.bool_)
    for c in cols:
        out &= c.is_null().to_numpy(zero_copy_only=False)
    return out if out.any() else None


def cleanable_state(plog, now_ms: int, max_offset: int | None = None) -> CleanableState:
    """The cleanable part of ``plog`` now (see the module docstring, step 1); with
    ``max_offset``, no segment holding an offset at or above it is cleanable (the
    broker passes the offset its producer-state snapshot covers, so the frames a
    restarted broker replays to rebuild that state are never cleaned away)."""
    segments = plog.segments
    first_dirty, _ = CleanerCheckpoint(plog.fileio, plog.dir_url).read()
    first_dirty = max(first_dirty, plog.log_start_offset)
    lag = plog.config.min_compaction_lag_ms
    uncleanable = segments[-1].base_offset
    for seg in segments[:-1]:
        if (seg.next_offset > first_dirty and lag > 0 and seg.max_timestamp > now_ms - lag
                or max_offset is not None and seg.next_offset > max_offset):
            uncleanable = seg.base_offset
            break
    clean = dirty = 0
    oldest = -1
    for seg in segments[:-1]:
        if seg.base_offset >= uncleanable:
            break
        if seg.next_offset <= first_dirty:
            clean += seg.size
        else:
            dirty += seg.size
            if oldest < 0 and seg.max_timestamp >= 0:
                oldest = _first_timestamp(seg)
    return CleanableState(first_dirty, uncleanable, clean, dirty, oldest)


def _first_timestamp(seg: LogSegment) -> int:
    """The smallest record-time bound known for ``seg`` cheaply: its first frame's
    max timestamp (read from one header), else its max timestamp."""
    for _, frame in seg.scan(0, seg.size, verify_crc=False):
        return frame.header.max_timestamp
    return seg.max_timestamp


def needs_cleaning(plog, now_ms: int, state: CleanableState | None = None) -> bool:
    """Whether ``plog`` is due: compacted, something dirty below the first uncleanable
    offset, and the dirty ratio at ``min.cleanable.dirty.ratio`` or the oldest dirty
    record older than ``max.compaction.lag.ms``."""
    if not plog.config.compact:
        return False
    state = state or cleanable_state(plog, now_ms)
    if state.dirty_bytes == 0:
        return False
    if state.dirty_ratio >= plog.config.min_cleanable_dirty_ratio:
        return True
    lag = plog.config.max_compaction_lag_ms
    return 0 <= state.oldest_dirty_timestamp and now_ms - state.oldest_dirty_timestamp > lag


class Throttle:
    """Kafka's cleaner I/O throttle: ``bytes_per_second`` (None: unlimited) over all
    the cleaning threads sharing it."""

    def __init__(self, bytes_per_second: float | None = None):
        self.rate = bytes_per_second
        self._start = time.monotonic()
        self._bytes = 0

    def account(self, n: int) -> None:
        """Count ``n`` bytes of I/O, sleeping as long as the rate is exceeded."""
        if not self.rate or self.rate == float("inf"):
            return
        self._bytes += n
        ahead = self._bytes / self.rate - (time.monotonic() - self._start)
        if ahead > 0:
            time.sleep(ahead)


def clean(plog, now_ms: int | None = None, *, dedupe_buffer_size: int = 128 << 20,
          throttle: Throttle | None = None, force: bool = False,
          max_offset: int | None = None, worker=None) -> CleanResult | None:
    """Clean ``plog`` once if it is due (or ``force``); None when nothing was done.
    Holds ``plog.maintenance`` throughout (retention waits). ``max_offset`` bounds
    what is cleanable (:func:`cleanable_state`). With ``worker``, a callable running a
    :class:`CleaningTask` as :func:`run_task` does (e.g. in a helper process), steps 2
    and 3 run there and this process commits the cleaned segments it returns, in
    offset order (the swap and the checkpoint stay with the partition's writer). See
    the module docstring."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if not plog.config.compact:
        return None
    with plog.maintenance:
        state = due_cleaning(plog, now, force, max_offset)
        if state is None:
            return None
        return _clean(plog, now, state, dedupe_buffer_size, throttle or Throttle(), worker)


def due_cleaning(plog, now: int, force: bool = False, max_offset: int | None = None):
    """Under ``plog.maintenance``: wait for sealing, delete the replaced files whose delay
    passed, and return the partition's cleanable state when a cleaning is due (or
    ``force`` and anything is dirty), else None. Shared by :func:`clean` and the Spark
    job (:mod:`sparklog.spark.jobs.compaction`)."""
    plog.wait_sealed()
    plog.delete_replaced_files(now)
    state = cleanable_state(plog, now, max_offset)
    if not (force and state.dirty_bytes) and not needs_cleaning(plog, now, state):
        return None
    return state


@dataclass(frozen=True)
class CleaningTask:
    """Everything a cleaning reads besides the partition's files (steps 2 and 3 are a
    function of both, :func:`run_task`): picklable, so a helper process can run it."""

    directory: str
    config: object  # the partition's LogConfig
    name: str
    #: ``(base offset, generation, end offset, size)`` of each sealed segment
    segments: tuple
    first_dirty: int
    first_uncleanable: int
    cleanings: tuple
    now: int
    buffer_size: int

    def open_segments(self, fileio) -> list[LogSegment]:
        """The sealed segments of the task, opened on ``fileio``."""
        return [LogSegment(fileio, self.directory, base, sealed=True, generation=gen,
                           end_offset=end, listed_size=size)
                for base, gen, end, size in self.segments]


@dataclass(frozen=True)
class CleanedGroup:
    """A cleaned segment written but not committed (no ``.index`` yet): the base offsets
    of the segments it replaces, its offsets, generation and ``.index`` bytes."""

    replaces: tuple
    base: int
    end: int
    generation: int
    index: bytes


def run_task(fileio, task: CleaningTask, throttle: Throttle | None = None):
    """Steps 2 and 3 of a cleaning with every cleaned segment left uncommitted (what a
    helper process runs): ``(map end, [CleanedGroup], CleanResult)``, map end None
    when nothing could be cleaned. Its files are the uncommitted ones
    :func:`delete_uncommitted` removes if the caller never commits them."""
    result = CleanResult(task.first_dirty, task.first_dirty)
    groups: list[CleanedGroup] = []

    def keep(group, new, index):
        groups.append(CleanedGroup(tuple(s.base_offset for s in group), new.base_offset,
                                   new.end_offset, new.generation, index))

    map_end = clean_segments(fileio, task.directory, task.config, task.name,
                             task.open_segments(fileio), task.first_dirty,
                             task.first_uncleanable, list(task.cleanings), task.now,
                             task.buffer_size, throttle or Throttle(), result, keep,
                             commit=False)
    return map_end, groups, result


def _clean(plog, now: int, state: CleanableState, buffer_size: int,
           throttle: Throttle, worker=None) -> CleanResult | None:
    started = time.monotonic()
    fileio, config = plog.fileio, plog.config
    checkpoint = CleanerCheckpoint(fileio, plog.dir_url)
    _, cleanings = checkpoint.read()
    delete_uncommitted(plog)
    segments = plog.segments[:-1]  # sealed; the active segment is never touched
    if worker is None:  # in this process: each cleaned segment committed as written
        result = CleanResult(state.first_dirty, state.first_dirty)

        def swap(group, new, _):
            plog.replace_segments(group, new)
            _count_swap(result, group)

        map_end = clean_segments(fileio, plog.dir_url, config, plog.name, segments,
                                 state.first_dirty, state.first_uncleanable, cleanings,
                                 now, buffer_size, throttle, result, swap)
    else:  # by ``worker`` (a helper process), committed here in offset order
        task = CleaningTask(plog.dir_url, config, plog.name,
                            tuple((s.base_offset, s.generation, s.next_offset, s.size)
                                  for s in segments),
                            state.first_dirty, state.first_uncleanable, tuple(cleanings),
                            now, buffer_size)
        map_end, groups, result = worker(task)
        by_base = {s.base_offset: s for s in segments}
        for g in groups:
            group = [by_base[b] for b in g.replaces]
            new = commit_cleaned(fileio, plog.dir_url, config, g.base, g.end, g.generation,
                                 g.index)
            plog.replace_segments(group, new)
            _count_swap(result, group)
    if map_end is None:
        return None
    result.end_offset = map_end
    finish_cleaning(plog, checkpoint, cleanings, map_end, now, started, result)
    return result


def _count_swap(result: CleanResult, group) -> None:
    result.segments_replaced += len(group)
    result.segments_written += 1
    result.replaced.extend(s.path for s in group)


def clean_segments(fileio, directory: str, config, name: str, segments: list[LogSegment],
                   first_dirty: int, first_uncleanable: int, cleanings, now: int,
                   buffer_size: int, throttle: Throttle, result: CleanResult, on_group, *,
                   commit: bool = True) -> int | None:
    """Steps 2 and 3 over the sealed ``segments`` of partition ``name``: the key map of
    the dirty ones in ``[first_dirty, first_uncleanable)``, then every segment below
    its end rewritten in groups, ``on_group(group, new segment, index bytes)`` called
    for each (committed first with ``commit``, see :func:`write_cleaned`). Returns the
    map's end (the new dirty offset), None when nothing could be mapped."""
    # 2. the key map over the dirty segments, whole segments while they fit
    capacity = max(buffer_size // BYTES_PER_KEY, 1)
    key = CompactionKey.of(name, config)
    offsets, map_end = KeyMap(), first_dirty
    # (segment, its KnownKeys, no transaction open at its end) read but not merged
    pending: list = []
    txns = TransactionTracker()

    def mapped(seg, keys: KnownKeys):
        """The (keys, offsets) ``seg`` adds to the map: its records but those of
        aborted transactions."""
        if not keys.rows:
            return []
        drop = [(row, n) for path, row, n in txns.aborted_tags if path == seg.path]
        if not drop:
            return [(keys.keys, keys.offsets)]
        mask = np.ones(keys.rows, dtype=bool)
        for row, n in drop:
            mask[row:row + n] = False
        return [(keys.keys.filter(pa.array(mask)), keys.offsets.filter(pa.array(mask)))]

    def merge_pending() -> bool:
        """Merge the pending segments up to the last one at whose end no transaction
        is open into the map (one hash aggregation for all of them); when that would
        pass the capacity, merge them one by one up to the last that fits (and ends
        with no open transaction). False when a segment did not fit (the map ends
        before it)."""
        nonlocal offsets, map_end
        free = max((i for i, p in enumerate(pending) if p[2]), default=-1)
        if free < 0:
            return True
        ready, rest = pending[:free + 1], pending[free + 1:]
        merged = offsets.merged([p for seg, k, _ in ready for p in mapped(seg, k)])
        if len(merged) <= capacity:
            offsets, map_end = merged, ready[-1][0].next_offset
            pending[:] = rest
            return True
        candidate = offsets
        for seg, k, closed in ready:
            candidate = candidate.merged(mapped(seg, k))
            if len(candidate) > capacity:
                if map_end == first_dirty:
                    raise InvalidConfigError(
                        f"partition {name}: segment {seg.path} holds more distinct "
                        f"keys than log.cleaner.dedupe.buffer.size={buffer_size} maps "
                        f"({capacity} keys of {BYTES_PER_KEY} bytes) (with the segments "
                        f"of the transactions open at its start); raise it")
                pending.clear()
                return False
            if closed:
                offsets, map_end = candidate, seg.next_offset
        pending[:] = rest
        return True

    rows = 0
    known = SegmentKeys(buffer_size)
    for seg in segments:
        if seg.next_offset <= first_dirty:
            continue
        if seg.base_offset >= first_uncleanable:
            break
        keys = known.read(seg, segment_frames(seg, throttle, result, decoded=True), key, txns)
        pending.append((seg, keys, not txns.open))
        rows += keys.rows
        if rows >= max(capacity, MERGE_ROWS) and not txns.open:  # bound pending keys
            rows = 0
            if not merge_pending():
                break
    if pending:
        merge_pending()  # segments after the last with no open transaction are left
    if map_end <= first_dirty:
        return None
    result.end_offset = map_end
    # 3. rewrite every sealed segment below the mapped end, in groups
    horizon = now - config.delete_retention_ms
    cleaned = [seg for seg in segments if seg.next_offset <= map_end]
    aborted = txns.aborted
    known.plan(cleaned, offsets, aborted)

    def kept(seg):  # the bytes a segment may keep: grouped by them, not by its size
        seen = known.by_path.get(seg.path)
        return seg.size if seen is None else seen.kept_bytes(offsets, aborted)

    markers = MarkerGuard()  # over all the groups: a transaction may span two
    for group in group_segments(cleaned, config.segment_bytes, kept):
        new, index = write_cleaned(fileio, directory, config, name, group, offsets,
                                   cleanings, horizon, throttle, result, known,
                                   commit=commit, aborted=aborted, markers=markers)
        on_group(group, new, index)
    return map_end


def finish_cleaning(plog, checkpoint: CleanerCheckpoint, cleanings: list[list[int]],
                    map_end: int, now: int, started: float, result: CleanResult) -> None:
    """Step 5 (the checkpoint: the new dirty offset ``map_end`` and this cleaning's time
    ``now`` for its tombstones) and the cleaning's log line."""
    horizon = now - plog.config.delete_retention_ms
    expired = [c[0] for c in cleanings if c[1] <= horizon]  # collapsed into one entry
    cleanings = ([[max(expired), 0]] if expired else []) + \
        [c for c in cleanings if c[1] > horizon] + [[map_end, now]]
    checkpoint.write(map_end, cleanings)
    result.seconds = time.monotonic() - started
    log.info("partition %s: cleaned offsets [%d, %d): %d segment(s) into %d, %d bytes "
             "read, %d written, %d records, %d tombstones and %d transaction markers "
             "removed in %.2f s",
             plog.name, plog.log_start_offset, map_end, result.segments_replaced,
             result.segments_written, result.bytes_read, result.bytes_written,
             result.records_removed, result.tombstones_removed, result.markers_removed,
             result.seconds)


class KeyMap:
    """The cleaner's key map, key -> latest offset, as two Arrow arrays (unique keys),
    built and probed by Arrow's hash kernels rather than per record in Python."""

    def __init__(self, keys: pa.Array | None = None, offsets: pa.Array | None = None):
        self.keys, self.offsets = keys, offsets

    def __len__(self) -> int:
        return 0 if self.keys is None else len(self.keys)

    def merged(self, parts) -> "KeyMap":
        """A new map of this one and ``parts`` ((keys, offsets) arrays of later
        records): each key's highest offset; null keys are ignored."""
        keys = [] if self.keys is None else [self.keys]
        offs = [] if self.offsets is None else [self.offsets]
        for k, o in parts:
            k = plain_keys(k)
            if keys and k.type != keys[0].type:
                k = k.cast(keys[0].type)
            keys.append(k)
            offs.append(o.cast(pa.int64()))
        if not keys:
            return KeyMap()
        table = pa.table({"k": pa.chunked_array(keys), "o": pa.chunked_array(offs)})
        if table.column("k").null_count:
            table = table.filter(pc.is_valid(table.column("k")))
        # one thread: faster here than acero's pool, and a cleaning takes one core only
        grouped = table.group_by("k", use_threads=False).aggregate([("o", "max")])
        return KeyMap(grouped.column("k").combine_chunks(),
                      grouped.column("o_max").combine_chunks())

    def latest(self, keys: pa.Array) -> pa.Array:
        """Per key of ``keys``: the map's offset for it, null when not mapped."""
        if self.keys is None:
            return pa.nulls(len(keys), pa.int64())
        keys = plain_keys(keys)
        if keys.type != self.keys.type:
            keys = keys.cast(self.keys.type)
        return pc.take(self.offsets, pc.index_in(keys, value_set=self.keys))


def plain_keys(array: pa.Array) -> pa.Array:
    """``array`` without dictionary encoding (compared by value)."""
    if pa.types.is_dictionary(array.type):
        return array.dictionary_decode()
    return array


def segment_frames(seg: LogSegment, throttle: Throttle, result: CleanResult, *,
                   decoded: bool = False):
    """``(position, frame)`` of the validated frames of sealed segment ``seg``
    (throttled, counted); ``decoded``: the caller decodes every data frame's body
    (:meth:`~sparklog.format.frame.Frame.batch` checks it fully), so the scan checks
    only framing and CRC (control frames' bodies are checked anyway)."""
    scan = seg.scan_for(seg.base_offset, check_body=False if decoded else None)
    for pos, frame in scan:
        throttle.account(frame.header.size)
        result.bytes_read += frame.header.size
        yield pos, frame
    seg.check_end(scan)


def frames_at(seg: LogSegment, runs, throttle: Throttle, result: CleanResult):
    """``(position, frame)`` of the frames of ``seg`` in ``runs`` (``(position, end,
    base offset)`` of consecutive frames), each run read with one scan that must end
    exactly at its end (a DataLossError naming the file otherwise)."""
    for position, end, base in runs:
        scan = seg.scan(position, end, contiguous=True, expected_offset=base)
        for pos, frame in scan:
            throttle.account(frame.header.size)
            result.bytes_read += frame.header.size
            yield pos, frame
        if scan.error is not None or scan.valid_end != end:
            raise DataLossError(
                f"partition segment {seg.path}: the frames at bytes [{position}, {end}) "
                f"read in the key-map pass cannot be read again"
                + (f": {scan.error}" if scan.error is not None else ""),
                path=seg.path, position=scan.valid_end)


class KnownKeys:
    """The keys and offsets of one sealed segment's records, read in the key-map pass
    (copied out of the read buffers), with each frame's ``(position, size, base
    offset, first row, rows, header)`` (rows -1: a control frame)."""

    def __init__(self, keys, offsets, frames):
        self.keys, self.offsets, self.frames = keys, offsets, frames
        self.rows = 0 if keys is None else len(keys)
        self._plan = None

    @property
    def planned(self) -> bool:
        """True once :meth:`plan` decided which records stay."""
        return self._plan is not None

    def plan(self, offsets: "KeyMap", aborted: AbortedTransactions | None = None,
             stays=None):
        """Which records stay (done once): ``(stays, runs, wanted, dropped)``: per
        record, whether it stays by the key map ``offsets`` (a numpy bool array, the
        map probed with all the keys at once unless ``stays`` is given), the
        ``(position, end, base offset)`` runs of consecutive frames that keep a record
        (control frames always do; frames of ``aborted`` transactions never),
        ``{position: (first row, rows)}`` of those frames, and the number of records of
        the frames left out."""
        if self._plan is None:
            if self.rows and stays is None:
                stays = _stays(self.keys, self.offsets, offsets.latest(self.keys))
            runs: list[list[int]] = []
            wanted, dropped = {}, 0
            for pos, size, base, row, rows, header in self.frames:
                if rows >= 0 and (not stays[row:row + rows].any()
                                  or aborted and aborted.holds(header)):
                    dropped += rows
                    continue
                wanted[pos] = (row, rows)
                if runs and runs[-1][1] == pos:
                    runs[-1][1] = pos + size
                else:
                    runs.append([pos, pos + size, base])
            self._plan = (stays, runs, wanted, dropped)
        return self._plan

    def kept_bytes(self, offsets: "KeyMap",
                   aborted: AbortedTransactions | None = None) -> int:
        """An upper bound of the bytes this segment keeps: its frames that keep a
        record (a frame that loses some gets smaller)."""
        return sum(end - pos for pos, end, _ in self.plan(offsets, aborted)[1])


class SegmentKeys:
    """What the key-map pass read of each dirty segment, kept for the rewrite (up to
    ``budget`` bytes of keys and offsets in all): the rewrite then looks up a whole
    segment's keys at once and reads only the frames that keep a record (and control
    frames); segments beyond the budget are read whole again."""

    def __init__(self, budget: int):
        self.budget = budget
        self.by_path: dict[str, KnownKeys] = {}

    def plan(self, segments, offsets: "KeyMap",
             aborted: AbortedTransactions | None = None) -> None:
        """:meth:`KnownKeys.plan` for those of ``segments`` (all merged into the key
        map ``offsets``) whose keys are kept, without probing the map by key: a record
        of a mapped segment stays exactly when its offset is its key's offset in the
        map, so the map's offsets, sorted once, are looked up by offset (numpy)."""
        todo = [k for k in (self.by_path.get(seg.path) for seg in segments)
                if k is not None and k.rows and not k.planned]
        if not todo or offsets.offsets is None:
            return
        mapped = np.sort(offsets.offsets.to_numpy(zero_copy_only=False))
        for k in todo:
            offs = k.offsets.to_numpy(zero_copy_only=False)
            if len(offs) > 1 and not (offs[1:] > offs[:-1]).all():
                continue  # not in offset order: planned by key instead
            lo, hi = np.searchsorted(mapped, (offs[0], offs[-1] + 1))
            rows = np.searchsorted(offs, mapped[lo:hi])
            stays = np.zeros(k.rows, dtype=bool)
            stays[rows] = True
            k.plan(offsets, aborted, stays)

    def read(self, seg: LogSegment, frames, key: CompactionKey,
             txns: TransactionTracker | None = None) -> KnownKeys:
        """Read ``frames`` (``(position, frame)`` of all of ``seg``): its keys and
        offsets (remembered while within the budget); ``txns`` follows the
        transactions (its tags: ``(segment path, first row, rows)``)."""
        keys: list = []
        offsets: list = []
        layout: list = []
        row = 0
        for pos, frame in frames:
            h = frame.header
            if h.is_control:
                layout.append((pos, h.size, h.base_offset, row, -1, h))
                if txns is not None:
                    txns.marker(h, marker_type(frame))
                continue
            batch = frame.batch()
            k = key.keys(batch)
            if keys and k.type != keys[0].type:
                k = k.cast(keys[0].type)
            keys.append(k)
            # implicit offsets are filled in below, all frames at once
            offsets.append(frame.offsets() if h.explicit_offsets else None)
            layout.append((pos, h.size, h.base_offset, row, len(k), h))
            if txns is not None:
                txns.data(h, (seg.path, row, len(k)))
            row += len(k)
        if not keys:
            known = KnownKeys(None, None, layout)
        else:  # concatenated: copies, so the read buffers are freed
            known = KnownKeys(pa.concat_arrays(keys), _offsets(layout, offsets, row), layout)
        size = 0 if known.keys is None else known.keys.nbytes + known.offsets.nbytes
        if size <= self.budget:
            self.budget -= size
            self.by_path[seg.path] = known
        return known


def _offsets(layout, explicit, rows: int) -> pa.Array:
    """The offsets of the ``rows`` records of a segment's data frames (``layout`` as
    :class:`KnownKeys`; ``explicit``: per data frame, its offsets when it has explicit
    ones, else None), computed with numpy for all of them at once."""
    frames = [f for f in layout if f[4] >= 0]
    counts = np.fromiter((f[4] for f in frames), np.int64, len(frames))
    starts = np.fromiter((f[2] - f[3] for f in frames), np.int64, len(frames))
    out = np.arange(rows, dtype=np.int64) + np.repeat(starts, counts)
    for (_, _, _, row, n, _), given in zip(frames, explicit):
        if given is not None:
            out[row:row + n] = given.to_numpy(zero_copy_only=False)
    return pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(out)])


def group_segments(segments: list[LogSegment], max_bytes: int,
            size=lambda seg: seg.size) -> list[list[LogSegment]]:
    """Consecutive segments grouped so each group fits one cleaned segment of
    ``segment.bytes`` and its offsets fit the relative index (Kafka's
    groupSegmentsBySize, by ``size(segment)``: an upper bound of what the segment
    keeps)."""
    groups: list[list[LogSegment]] = []
    total = 0
    for seg in segments:
        n = size(seg)
        if groups:
            last = groups[-1]
            if total + n <= max_bytes and fits_relative(last[0].base_offset, seg.next_offset):
                last.append(seg)
                total += n
                continue
        groups.append([seg])
        total = n
    return groups


def delete_uncommitted(plog) -> None:
    """Delete cleaned segments left uncommitted by an earlier cleaning that failed."""
    for files in PartitionListing.scan(plog.fileio, plog.dir_url).uncommitted():
        for info in files.files():
            plog.fileio.delete(info.path)


def write_cleaned(fileio, directory: str, config, name: str, group, offsets: "KeyMap",
                  cleanings, horizon: int, throttle: Throttle, result: CleanResult,
                  known: SegmentKeys | None = None, *, commit: bool = True,
                  aborted: AbortedTransactions | None = None,
                  markers: "MarkerGuard | None" = None):
    """Write the cleaned segment replacing the sealed segments ``group`` of the
    partition ``name`` in ``directory`` (LogConfig ``config``), keeping per key the
    records the key map ``offsets`` allows (steps 3 and 4); segments whose keys
    ``known`` holds are probed at once and only their frames that keep something are
    read again. Returns ``(segment, index bytes)`` as :meth:`CleanedSegmentWriter.finish`.

    With ``aborted`` (the aborted transactions, :mod:`.transactions`) the cleaning is
    transaction-aware (:class:`CleanedSegmentWriter`); ``markers`` follows the
    transactions whose records stay over all the groups of one cleaning. Without,
    every control frame stays."""
    writer = CleanedSegmentWriter(fileio, directory, config, name, group, cleanings,
                                  horizon, throttle, result, aborted=aborted,
                                  markers=markers)
    with writer:
        for seg in group:
            seen = known.by_path.get(seg.path) if known is not None else None
            probed = _probed(segment_frames(seg, throttle, result), offsets, writer.key) \
                if seen is None else _probed_known(seg, seen, offsets, throttle, result,
                                                   aborted)
            for frame, keep in probed:
                writer.add(frame, keep)
    return writer.finish(commit)


class MarkerGuard:
    """Which transaction markers must stay because records of their transaction stay:
    fed the transactional data frames a cleaning keeps (:meth:`kept`), in offset order
    over all the segments it rewrites, it answers for each marker (:meth:`holds`),
    which ends its producer's transaction."""

    def __init__(self):
        self._producers: set[int] = set()

    def kept(self, header) -> None:
        """A transactional data frame of ``header`` keeps records."""
        self._producers.add(header.producer_id)

    def holds(self, header) -> bool:
        """Whether records of the transaction the marker ``header`` ends stay."""
        kept = header.producer_id in self._producers
        self._producers.discard(header.producer_id)
        return kept


class CleanedSegmentWriter:
    """One cleaned segment being written (steps 3 and 4), the same for the broker's
    cleaner (:func:`write_cleaned`) and the Spark job (:mod:`sparklog.spark.jobs.compaction`):
    the segment replacing the consecutive sealed segments ``group`` of partition
    ``name`` (LogConfig ``config``) in ``directory``, under generation one above
    theirs. :meth:`add` takes the frames of ``group`` in offset order with the key
    map's verdict per record; :meth:`finish` ends it. Used as a context manager, which
    closes the file when writing fails (call :meth:`finish` after the block).

    The rules, in one place: a frame of an ``aborted`` transaction goes; a
    transaction marker goes once ``delete.retention.ms`` passed since the cleaning
    that first reached it (``horizon``, ``cleanings``) unless ``markers``
    (:class:`MarkerGuard`, or any object with its methods) says records of its
    transaction stay; a data frame keeps the records the verdict keeps but expired
    tombstones (:func:`cleaned_frame`). Without ``aborted`` every control frame stays.

    The ``.log`` is created without overwrite; a file of that name left by an earlier
    attempt that failed (a retried Spark task) is not live (it has no ``.index``, the
    commit) and no commit can reference it until this writer's caller commits, so it
    is deleted first."""

    def __init__(self, fileio, directory: str, config, name: str, group, cleanings,
                 horizon: int, throttle: Throttle, result: CleanResult, *,
                 aborted: AbortedTransactions | None = None,
                 markers: "MarkerGuard | None" = None):
        self.fileio, self.result, self.throttle = fileio, result, throttle
        self.cleanings, self.horizon, self.aborted = cleanings, horizon, aborted
        self.markers = MarkerGuard() if markers is None else markers
        self.key = CompactionKey.of(name, config)
        base, end = group[0].base_offset, group[-1].next_offset
        self.segment = LogSegment(
            fileio, directory, base, writable=True,
            generation=1 + max(s.generation for s in group), end_offset=end,
            index_interval_bytes=config.index_interval_bytes,
            replication=config.replication_factor)
        if fileio.exists(self.segment.path) and not fileio.exists(self.segment.index_path):
            fileio.delete(self.segment.path)  # an earlier attempt's leftover, never live
        self._out = fileio.create(self.segment.path, parents=fileio.in_existing_dir())
        self.segment.apply_replication()
        self._position, self._expected = 0, base

    def __enter__(self) -> "CleanedSegmentWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:  # failed: closed, left uncommitted
            self._out.close()

    def add(self, frame, keep=None, *, whole: bool = False) -> None:
        """Write what stays of ``frame``: ``keep`` tells per record whether the key map
        keeps it (numpy bools; None for a control frame), ``whole`` that every record
        does (the frame is then copied as stored, unless it must get explicit
        offsets: :func:`~sparklog.format.frame.may_follow_gap` in a cleaned segment)."""
        h = frame.header
        result = self.result
        if self.aborted is not None and h.is_transactional:
            if self.aborted.holds(h):
                result.records_removed += h.record_count
                return
            if h.is_control and _marker_expires(frame, self.markers, self.cleanings,
                                                self.horizon):
                result.markers_removed += 1
                return
        gap = h.base_offset != self._expected
        if whole and (not gap or may_follow_gap(h, cleaned=True)):
            data = frame_bytes(frame)
        else:
            data = cleaned_frame(frame, keep, self.cleanings, self.horizon, result,
                                 self.key, gap=gap)
            if data is None:
                return
        if h.is_transactional and not h.is_control:
            self.markers.kept(h)
        self._expected = h.next_offset
        self._out.write(data)
        self.segment.track(h.base_offset, h.next_offset, h.max_timestamp,
                           RECORD_COUNT.read(data, 0), len(data), self._position,
                           control=h.is_control)
        self._position += len(data)
        self.throttle.account(len(data))
        result.bytes_written += len(data)

    def finish(self, commit: bool = True):
        """Sync and close the ``.log``; returns ``(segment, index bytes)``: with
        ``commit`` its ``.timeindex`` and last its ``.index`` are written (the commit)
        and the bytes are None; without, everything but the ``.index`` is written and
        its bytes are returned, for :func:`commit_cleaned`."""
        self._out.sync()
        self._out.close()
        new = self.segment
        new.reach_end_offset()  # compaction may have removed the last records
        if commit:
            new.seal()  # .timeindex, then .index: the commit
            return new, None
        offsets, times = new.load_indexes()
        write_replacing(self.fileio, new.timeindex_path, times.to_bytes())
        return new, offsets.to_bytes(new.summary)


def commit_cleaned(fileio, directory: str, config, base: int, end: int, generation: int,
                   index: bytes) -> LogSegment:
    """Commit a cleaned segment written elsewhere (:func:`write_cleaned` without
    ``commit``, e.g. by a Spark task): write its ``.index``; returns it as a sealed
    segment for :meth:`~.partition.PartitionLog.replace_segments`."""
    seg = LogSegment(fileio, directory, base, sealed=True, generation=generation,
                     end_offset=end, index_interval_bytes=config.index_interval_bytes,
                     replication=config.replication_factor)
    write_replacing(fileio, seg.index_path, index)
    seg.apply_replication(seg.timeindex_path, seg.index_path)
    return seg


def _marker_expires(frame, markers: MarkerGuard, cleanings, horizon: int) -> bool:
    """Whether the transaction marker ``frame`` goes: of a known type, no record of
    its transaction kept (``markers``), and ``delete.retention.ms`` passed since the
    cleaning that first reached it."""
    h = frame.header
    if markers.holds(h) or marker_type(frame) is None:
        return False
    reached = reached_at(cleanings, h.base_offset)
    return reached is not None and reached <= horizon


#: bytes of frames whose keys are looked up in the key map together (one hash build)
PROBE_WINDOW_BYTES = 16 << 20


def _stays(keys: pa.Array, record_offsets: pa.Array, latest: pa.Array):
    """Per record (numpy bools): it has a key, and no later record of its key is in
    the key map (``latest``: the map's offset of each record's key, null if none)."""
    mask = pc.and_(pc.is_valid(keys), pc.or_kleene(
        pc.is_null(latest), pc.greater_equal(record_offsets, latest)))
    return mask.fill_null(False).to_numpy(zero_copy_only=False)


def _probed(frames, offsets: KeyMap, key: CompactionKey):
    """Yield ``(frame, stays)`` for ``frames``: ``stays`` tells, per record, whether
    it stays by the key map (:func:`_stays`; None for control frames). The keys of up
    to PROBE_WINDOW_BYTES of frames are looked up in one call."""
    window: list = []
    size = 0

    def flush():
        keyed = [(f, f.batch()) for f in window if not f.header.is_control]
        columns = [plain_keys(key.keys(b)) for _, b in keyed]
        out = {}
        if columns:
            keys = pa.chunked_array(columns).combine_chunks()
            layout, row = [], 0
            for (f, _), c in zip(keyed, columns):
                layout.append((0, 0, f.header.base_offset, row, len(c), None))
                row += len(c)
            explicit = [f.offsets() if f.header.explicit_offsets else None for f, _ in keyed]
            stays = _stays(keys, _offsets(layout, explicit, len(keys)),
                           offsets.latest(keys))
            at = 0
            for (f, _), c in zip(keyed, columns):
                out[id(f)] = stays[at:at + len(c)]
                at += len(c)
        for f in window:
            yield f, out.get(id(f))

    for _, frame in frames:
        window.append(frame)
        size += frame.header.size
        if size >= PROBE_WINDOW_BYTES:
            yield from flush()
            window, size = [], 0
    yield from flush()


def segment_keys(seg: LogSegment, key: CompactionKey) -> "KeyMap":
    """The distinct keys (``key``) of the records of sealed segment ``seg``, each with
    its highest offset there (null keys left out): one segment's share of the key map,
    as a Spark task of ``sparklog compact --spark`` reads it."""
    known = SegmentKeys(0).read(seg, segment_frames(seg, Throttle(), CleanResult(0, 0)), key)
    return KeyMap().merged([(known.keys, known.offsets)] if known.rows else [])


def _probed_known(seg: LogSegment, seen: KnownKeys, offsets: KeyMap, throttle, result,
                  aborted: AbortedTransactions | None = None):
    """:func:`_probed` for a segment whose keys the key-map pass kept (probed by
    :meth:`KnownKeys.plan`): frames none of whose records stay are not read again
    (counted as removed), the others are read in runs of consecutive frames."""
    stays, runs, wanted, dropped = seen.plan(offsets, aborted)
    result.records_removed += dropped
    for pos, frame in frames_at(seg, runs, throttle, result):
        row, rows = wanted[pos]
        if rows != frame.header.record_count and not frame.header.is_control:
            raise DataLossError(
                f"partition segment {seg.path}: the frame at byte {pos} changed between "
                f"the key-map pass and the rewrite", path=seg.path, position=pos)
        yield frame, None if rows < 0 else stays[row:row + rows]


def cleaned_frame(frame, keep, cleanings, horizon, result, key: CompactionKey, *,
                   gap: bool):
    """The bytes of ``frame`` after cleaning, ``keep`` telling per record whether the
    key map keeps it (numpy bools): unchanged when every record stays (and it follows
    the previous frame kept, ``gap`` False, or may start after a gap as it is:
    :func:`~sparklog.format.frame.may_follow_gap` in a cleaned segment), None when
    none does, else re-encoded in its own kind (:func:`_reencoded`). A control frame
    (a transaction marker) always stays, re-encoded the same way when records before
    it were removed."""
    h = frame.header
    if h.is_control:
        if not gap or may_follow_gap(h, cleaned=True):
            return frame_bytes(frame)
        return _reencoded(frame, frame.batch(), frame.offsets(), None)
    n = h.record_count
    stays = int(keep.sum())
    if stays == 0:
        result.records_removed += n
        return None
    batch = frame.batch()
    tombstones = tombstone_mask(batch, key)
    if tombstones is not None:  # few: their delete horizon is checked one by one
        keep = keep.copy()
        for i, (tomb, offset) in enumerate(zip(tombstones.tolist(),
                                               frame.offsets().to_pylist())):
            if tomb and keep[i]:
                reached = reached_at(cleanings, offset)
                if reached is not None and reached <= horizon:
                    keep[i] = False
                    stays -= 1
                    result.tombstones_removed += 1
                    result.records_removed -= 1  # counted below
    result.records_removed += n - stays
    if stays == n and (not gap or may_follow_gap(h, cleaned=True)):
        return frame_bytes(frame)
    if stays == 0:
        return None
    return _reencoded(frame, batch, frame.offsets(), pa.array(keep))


def _reencoded(frame, batch: pa.RecordBatch, record_offsets: pa.Array, mask) -> bytes:
    """``frame`` in its own kind holding the records of ``batch`` that ``mask`` keeps
    (all of them when None), keeping its header fields and offset span, so producer
    sequences stay as they were. An Arrow frame is re-encoded with explicit offsets and
    its max timestamp (so the LogAppendTime of its records stays); a Kafka batch is
    rebuilt as a Kafka batch (:func:`~sparklog.format.kafka_batch.retained_batch`:
    each record's own offset delta, its codec, Kafka's timestamps)."""
    h = frame.header
    if h.is_kafka:
        keep = np.ones(h.record_count, np.bool_) if mask is None \
            else mask.to_numpy(zero_copy_only=False)
        return retained_batch(h, frame.body, keep,
                              where=f"Kafka record batch at offset {h.base_offset}")
    kept = batch if mask is None else batch.filter(mask)
    kept_offsets = record_offsets if mask is None else record_offsets.filter(mask)
    deltas = pc.subtract(kept_offsets, pa.scalar(h.base_offset, pa.int64())).cast(pa.int32())
    if OFFSET_DELTA_COLUMN in kept.schema.names:
        kept = kept.drop_columns([OFFSET_DELTA_COLUMN])
    timestamps = kept.column(kept.schema.get_field_index(TIMESTAMP_COLUMN))
    columns = kept.drop_columns([TIMESTAMP_COLUMN])
    data = bytearray(encode_frame(
        columns, timestamps=timestamps, compression=h.codec,
        base_offset=h.base_offset, leader_epoch=h.leader_epoch, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        log_append_time=h.log_append_time, offset_deltas=deltas, control=h.is_control,
        transactional=bool(h.attributes & TRANSACTIONAL_BIT)))
    LAST_OFFSET_DELTA.write(data, 0, h.last_offset_delta)
    MAX_TIMESTAMP.write(data, 0, h.max_timestamp)
    reseal(data)
    return bytes(data)


def frame_bytes(frame) -> bytes:
    """The whole frame's bytes as stored (header and body)."""
    return frame.header.pack() + frame.body.to_pybytes()
