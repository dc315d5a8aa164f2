"""Log compaction as a Spark job (``sparklog compact TOPIC --spark``): the cleaning of
:mod:`sparklog.log.cleaner` for partitions too large for one process.

For one partition, whose writer (and storage lease) the driver holds, so no broker
leads it nor cleans it meanwhile (one cleaner per partition at a time):

1. The driver takes the cleanable state (:func:`~sparklog.log.cleaner.cleanable_state`)
   and splits every sealed segment up to the end of the dirty part into *chunks* of
   consecutive segments of about equal size (one per core of the session, at most
   :data:`CHUNK_MAX_BYTES` each).
2. **One columnar pass over the data** (a task per chunk): each segment is read once
   and its frames validated; the task keeps, per record, the key, the offset and
   whether it is a tombstone (Arrow arrays, no per-record Python) and, per frame, where
   it lies (position, size, offsets, record count). Of the dirty segments only the last
   record of each key in the chunk can stay, so only it goes to the *key buckets*
   (:func:`key_hash` of the key), with every keyed record of the clean segments (a
   chunk whose dirty segments hold transactional frames sends all their records); the
   frame layouts go on to the chunk's writing task, the chunk's transactional frames
   and markers to every bucket and writing task.
3. **The key map, built by Spark** (a task per bucket): the bucket's share of the map,
   the highest offset per key over the dirty segments, decides which of the bucket's
   records stay (the rule of :class:`~sparklog.log.cleaner.KeyMap`, expired tombstones
   removed as the broker's cleaner removes them). Transactions as the broker's cleaner
   sees them (:class:`TransactionView`, its
   :class:`~sparklog.log.transactions.TransactionTracker`): the map ends at the last
   dirty segment end where no transaction is open, aborted records never enter it nor
   stay, and a marker whose transaction keeps a record is named to its chunk. Only the
   offsets that stay go on, per segment; no map is broadcast nor held by one process.
4. **Cleaned segments written by tasks** (a task per chunk): from the layouts and the
   offsets that stay, the task knows what each segment keeps before reading it
   (:class:`SegmentPlan`), groups the chunk's segments into cleaned segments of at most
   ``segment.bytes`` by the bytes they keep, and reads only the frames that keep a
   record (:func:`write_planned`): a frame all of whose records stay is copied as
   stored, one that lost some is re-encoded in its own kind (an Arrow frame with
   explicit offsets, a Kafka batch as a Kafka batch of its kept records), by the broker
   cleaner's :class:`~sparklog.log.cleaner.CleanedSegmentWriter` (the same rules for
   aborted frames, markers and tombstones). It writes each cleaned segment's ``.log``
   and ``.timeindex`` and returns its ``.index`` bytes, uncommitted; a retried task
   replaces what its failed attempt left (never live: no ``.index``).
5. **The swap, committed by the driver.** In offset order, the driver writes each
   ``.index`` (the commit of docs/format.md, section 7a) and swaps the segment in, then
   writes the cleaner checkpoint. A driver that dies before leaves uncommitted files,
   which the next cleaning deletes; the old segments stay live.

Steps 2 to 4 are one Spark job of three stages, exchanging Arrow IPC blobs, not rows.
Progress lines go to ``progress`` (one per step and partition).
"""

from __future__ import annotations

import functools
import gc
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...format.marker import marker_type
from ...log.cleaner import (
    CleanedSegmentWriter,
    CleanerCheckpoint,
    CleanResult,
    CompactionKey,
    Throttle,
    commit_cleaned,
    delete_uncommitted,
    due_cleaning,
    finish_cleaning,
    frames_at,
    group_segments,
    plain_keys,
    reached_at,
    segment_frames,
    tombstone_mask,
)
from ...log.segment import LogSegment
from ...log.transactions import TransactionTracker
from ...storage import open_fileio
from ..source import zipcache

#: Input bytes of one chunk at most (one task of the reading and of the writing stage).
CHUNK_MAX_BYTES = 1 << 30
#: Chunks per core of the session.
CHUNKS_PER_CORE = 1
#: Records of one key bucket at most (a task holds their keys and offsets): more
#: buckets than the session's cores when the partition has more records.
BUCKET_MAX_RECORDS = 20_000_000

_SPEC_FIELDS = ("seg", "base", "generation", "end_offset", "size", "dirty", "chunk",
                "next")
_LAYOUT_FIELDS = ("pos", "size", "base", "next", "records", "control")


def _segment(fileio, directory: str, spec: dict) -> LogSegment:
    """The sealed segment a spec row describes."""
    return LogSegment(fileio, directory, spec["base"], sealed=True,
                      generation=spec["generation"], end_offset=spec["end_offset"],
                      listed_size=spec["size"])


def _ipc(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC stream bytes (what the Spark stages exchange)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(data: bytes) -> pa.Table:
    """The table of IPC stream bytes from :func:`_ipc`."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _task_start() -> None:
    """At the start of a task in a Spark Python worker: stop re-reading zip archives
    per task (:mod:`~sparklog.spark.source.zipcache`), and move the objects alive now
    (the imported modules: the worker collected the last task's garbage) out of the
    garbage collector's sight (``gc.freeze``): the worker runs a full collection after
    every task, which otherwise walks them all each time (tens of ms a task)."""
    zipcache.install()
    if zipcache.in_spark_worker():
        gc.freeze()


#: odd 64-bit multipliers of :func:`key_hash` (fixed: every task must agree)
_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def key_hash(keys: pa.Array) -> np.ndarray:
    """A 64-bit hash of every key of ``keys`` (binary or text; other types by their
    text), the same in every process, for spreading keys over buckets: the key's bytes
    taken 8 at a time (one vectorized gather per 8 bytes of the longest key), mixed with
    its length. Null keys hash to 0."""
    if not (pa.types.is_binary(keys.type) or pa.types.is_string(keys.type)
            or pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)):
        keys = keys.cast(pa.string())
    n = len(keys)
    if n == 0:
        return np.zeros(0, np.uint64)
    width = np.int64 if pa.types.is_large_binary(keys.type) or \
        pa.types.is_large_string(keys.type) else np.int32
    bufs = keys.buffers()
    ends = np.frombuffer(bufs[1], width, n + 1, keys.offset * np.dtype(width).itemsize) \
        .astype(np.int64)
    starts, lengths = ends[:-1], np.diff(ends)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = np.concatenate([data[:ends[-1]], np.zeros(8, np.uint8)])
    # every 8-byte window of the data as one little-endian word (unaligned view)
    words = np.ndarray((len(data) - 7,), "<u8", data, 0, (1,))
    one, m0, m1, m2 = (np.uint64(x) for x in (1, *_MIX))
    h = lengths.astype(np.uint64) * m0
    with np.errstate(over="ignore"):
        for block in range(0, int(lengths.max()), 8):
            left = np.clip(lengths - block, 0, 8).astype(np.uint64)
            word = words[np.minimum(starts + block, len(words) - 1)]
            word &= np.where(left == 8, ~np.uint64(0), (one << (left * np.uint64(8))) - one)
            mixed = (h ^ word) * m1
            mixed ^= mixed >> np.uint64(31)
            h = np.where(left > 0, mixed, h)  # keys shorter than this block are done
        h ^= h >> np.uint64(29)
        h *= m2
        h ^= h >> np.uint64(32)
    if keys.null_count:
        h[np.asarray(keys.is_null())] = 0
    return h


def chunk_segments(sizes: list[int], cores: int, max_bytes: int = CHUNK_MAX_BYTES
                   ) -> list[list[int]]:
    """The indexes of consecutive segments of ``sizes`` (bytes) split into chunks of
    about equal input: :data:`CHUNKS_PER_CORE` per core of ``cores``, none over
    ``max_bytes`` unless one segment is, each at least one segment."""
    total = sum(sizes)
    target = min(max(-(-total // max(cores * CHUNKS_PER_CORE, 1)), 1), max_bytes)
    chunks: list[list[int]] = []
    filled = target
    for i, n in enumerate(sizes):
        if filled >= target or filled + n > max_bytes:
            chunks.append([])
            filled = 0
        chunks[-1].append(i)
        filled += n
    return chunks


#: Kinds of a row of a chunk's transaction events (besides a marker's type, 0 ABORT and
#: 1 COMMIT): a transactional data frame, a control frame of an unknown type.
DATA, OTHER_CONTROL = -1, 2
_EVENT_FIELDS = ("pid", "base", "last", "kind", "txn", "dirty", "chunk")


def _codes(frame) -> np.ndarray:
    """The offsets of ``frame``'s records times two (the ``code`` of :func:`_read_task`
    before its tombstone bit): for implicit offsets straight from the header (one
    numpy range, no Arrow array built per frame)."""
    h = frame.header
    if h.explicit_offsets:
        return frame.offsets().to_numpy() * 2
    return np.arange(2 * h.base_offset, 2 * (h.base_offset + h.record_count), 2, np.int64)


def _read_task(directory: str, key: CompactionKey, buckets: int, specs: list[dict]):
    """Stage 1 (a task per chunk): read each segment once; yield its frames' layout,
    ``(bucket, ("layout", seg, chunk, IPC))`` (passed on to the chunk's writing task by
    the bucket task), the chunk's transaction events (its transactional data frames and
    control frames, :data:`_EVENT_FIELDS`) to every bucket, ``(bucket, ("txns", chunk,
    IPC))``, then the chunk's keyed records that may stay, split by key bucket:
    ``(bucket, ("keys", chunk, IPC of key, code, dirty, pid))``, where ``code`` is the
    offset times two plus one for a tombstone and ``pid`` the producer of a
    transactional record (-1: none; the column is left out when the chunk has none). Of the dirty segments' records only the last of
    each key in the chunk can stay (a later one of its key is in the key map), so only
    that one is sent, unless the chunk's dirty segments hold transaction events (an
    aborted record, or one past where the key map ends, must not hide an earlier one);
    the records of clean segments (before the dirty part) are all sent, as one of them
    stays whenever the map lacks its key."""
    _task_start()
    fileio = open_fileio(directory)
    sent = {True: [], False: []}  # dirty or not: [(keys, codes, pids)] per segment
    events: list[tuple] = []
    chunk = specs[0]["chunk"]
    for spec in specs:
        frames: list[tuple] = []
        keys, codes, pids = [], [], []
        dirty = bool(spec["dirty"])
        for pos, frame in segment_frames(_segment(fileio, directory, spec), Throttle(),
                                         CleanResult(0, 0), decoded=True):
            h = frame.header  # decoded: frame.batch() below checks every data frame's body
            frames.append((pos, h.size, h.base_offset, h.next_offset, h.record_count,
                           h.is_control))
            if h.is_control:
                kind = marker_type(frame)
                events.append((h.producer_id, h.base_offset, h.last_offset,
                               OTHER_CONTROL if kind is None else kind,
                               h.is_transactional, dirty, chunk))
                continue
            if h.is_transactional:
                events.append((h.producer_id, h.base_offset, h.last_offset, DATA, True,
                               dirty, chunk))
            batch = frame.batch()
            k = plain_keys(key.keys(batch))
            if keys and k.type != keys[0].type:
                k = k.cast(keys[0].type)
            code = _codes(frame)
            tombstones = tombstone_mask(batch, key)
            if tombstones is not None:
                code += tombstones
            keys.append(k)
            codes.append(code)
            pids.append(h.producer_id if h.is_transactional else -1)
        columns = zip(*frames) if frames else [()] * len(_LAYOUT_FIELDS)
        layout = pa.table({n: pa.array(np.array(c, np.bool_ if n == "control" else np.int64))
                           for n, c in zip(_LAYOUT_FIELDS, columns)})
        yield spec["chunk"] % buckets, ("layout", spec["seg"], spec["chunk"], _ipc(layout))
        if keys:  # copied out of the segment's read buffers, which can then be freed
            sent[dirty].append((pa.concat_arrays(keys), np.concatenate(codes), np.repeat(
                np.array(pids, np.int64), [len(c) for c in codes])))
    if events:
        table = _ipc(pa.table({n: pa.array(list(c)) for n, c in
                               zip(_EVENT_FIELDS, zip(*events))}))
        for b in range(buckets):
            yield b, ("txns", chunk, table)
    if not sent[True] and not sent[False]:
        return
    any_dirty_events = any(e[5] for e in events)
    tables = []
    for dirty, parts in sent.items():
        if not parts:
            continue
        first = parts[0][0].type
        table = pa.table({"key": pa.concat_arrays([k if k.type == first else k.cast(first)
                                                   for k, _, _ in parts]),
                          "code": pa.array(np.concatenate([c for _, c, _ in parts])),
                          "pid": pa.array(np.concatenate([p for _, _, p in parts]))})
        if table.column("key").null_count:  # no key: never stays
            table = table.filter(pc.is_valid(table.column("key")))
        if dirty and not any_dirty_events:  # the last record of each key (highest code)
            table = table.select(["key", "code"]).group_by("key", use_threads=False) \
                .aggregate([("code", "max")]).rename_columns(["key", "code"])
            table = table.append_column("pid", pa.array(np.full(table.num_rows, -1)))
        tables.append(table.append_column("dirty", pa.array(np.full(table.num_rows, dirty))))
    if len(tables) == 2 and tables[0].schema != tables[1].schema:
        tables[1] = tables[1].cast(tables[0].schema)
    table = pa.concat_tables(tables).combine_chunks()
    if not pc.any(pc.greater_equal(table.column("pid"), 0)).as_py():
        table = table.drop_columns(["pid"])  # no transactional record: none sent
    bucket = (key_hash(table.column("key").chunk(0) if table.num_rows else
                       pa.array([], pa.binary())) % np.uint64(buckets)).astype(np.int64)
    table = table.take(pa.array(np.argsort(bucket, kind="stable")))
    at = 0
    for b, n in enumerate(np.bincount(bucket, minlength=buckets).tolist()):
        if n:
            yield b, ("keys", chunk, _ipc(table.slice(at, n)))
        at += n


class TransactionView:
    """The transactions of the segments to rewrite, from every chunk's transaction
    events (the ``"txns"`` items of :func:`_read_task`), as the broker's cleaner sees
    them in its key-map pass (:class:`~sparklog.log.transactions.TransactionTracker`
    over the dirty segments): :attr:`aborted`, and :attr:`map_end`, the end of the
    last dirty segment (of ``dirty_ends``) at which no transaction is open (None:
    none), where the key map ends. :meth:`marker_after` names the marker that ends a
    producer's transaction (every transactional control frame, clean segments
    included)."""

    def __init__(self, tables: list[pa.Table], dirty_ends: list[int]):
        rows = sorted((row for t in tables for row in zip(
            *(t.column(n).to_pylist() for n in _EVENT_FIELDS))), key=lambda row: row[1])
        tracker = TransactionTracker()
        self.map_end: int | None = None
        ends = sorted(dirty_ends)
        markers: dict[int, list[tuple[int, int]]] = {}
        at = 0
        for pid, base, last, kind, txn, dirty, chunk in rows + [(None, float("inf"))
                                                                 + (None,) * 5]:
            while at < len(ends) and ends[at] <= base:
                if not tracker.open:
                    self.map_end = ends[at]
                at += 1
            if pid is None:
                break
            if kind != DATA and txn:
                markers.setdefault(pid, []).append((base, chunk))
            if not dirty:
                continue
            if kind == DATA:
                tracker.data_at(pid, base)
            else:
                tracker.marker_at(pid, last, None if kind == OTHER_CONTROL else kind)
        self.aborted = tracker.aborted
        self._markers = {pid: (np.array([m[0] for m in ms], np.int64),
                               np.array([m[1] for m in ms], np.int64))
                         for pid, ms in markers.items()}

    def marker_after(self, pid: int, offsets: np.ndarray):
        """``(offsets, chunks)`` of the markers ending the transactions of producer
        ``pid``'s records at ``offsets`` (each the producer's first marker after it)."""
        at_, chunks = self._markers.get(pid, (np.zeros(0, np.int64),) * 2)
        i = np.searchsorted(at_, offsets, side="right")
        i = i[i < len(at_)]
        return at_[i], chunks[i]


def _events(items) -> list[pa.Table]:
    return [_table(item[2]) for item in items if item[0] == "txns"]


def _bucket_task(cleanings, horizon: int, dirty_ends: list[int], chunks: int,
                 index: int, items):
    """Stage 2 (a task per key bucket): the bucket's key map (highest offset per key
    over the dirty segments' records below where the key map ends, aborted records left
    out) and, per chunk, the offsets of its records of the bucket that stay, and of its
    tombstones that expired: ``(chunk, ("survivors", chunk, IPC of offset and
    expired))``; per chunk holding transaction markers, those whose transaction keeps a
    record here: ``(chunk, ("kept", chunk, IPC of offset))``. Layouts pass through to
    their chunk, and bucket 0 passes every chunk's transaction events on to every
    chunk."""
    _task_start()
    parts, txns = [], []
    for _, item in items:
        if item[0] == "layout":
            yield item[2], item
        elif item[0] == "txns":
            txns.append(item)
            if index == 0:
                for c in range(chunks):
                    yield c, item
        else:
            parts.append((item[1], _table(item[2])))
    if not parts:
        return
    view = TransactionView(_events(txns), dirty_ends)
    keys = [plain_keys(t.column("key").combine_chunks()) for _, t in parts]
    keys = pa.concat_arrays([k if k.type == keys[0].type else k.cast(keys[0].type)
                             for k in keys])
    codes = np.concatenate([t.column("code").to_numpy() for _, t in parts])
    pids = np.concatenate([t.column("pid").to_numpy() if "pid" in t.column_names
                           else np.full(t.num_rows, -1, np.int64) for _, t in parts])
    record_offsets = codes >> 1
    dirty_rows = np.concatenate([t.column("dirty").to_numpy(zero_copy_only=False)
                                 for _, t in parts])
    rows = np.cumsum([0] + [t.num_rows for _, t in parts])
    # below the key map's end, not aborted: the records a cleaning considers
    valid = record_offsets < (-1 if view.map_end is None else view.map_end)
    transactional = pids >= 0
    for pid in np.unique(pids[transactional & valid]).tolist():
        mine = pids == pid
        valid[mine] &= ~view.aborted.holds_offsets(pid, record_offsets[mine])
    mapping = dirty_rows & valid
    # the key map: one hash pass numbers the keys, the highest dirty offset per number
    number = pc.dictionary_encode(keys).indices.to_numpy()
    latest = np.full(int(number.max(initial=-1)) + 1, -1, np.int64)
    np.maximum.at(latest, number[mapping], record_offsets[mapping])
    # a record stays when its key has no later dirty record (KeyMap's rule)
    newest = latest[number]
    stays = valid & ((newest < 0) | (record_offsets >= newest))
    expired = np.zeros(len(stays), np.bool_)
    for i in np.flatnonzero((codes & 1).astype(np.bool_) & stays).tolist():  # few
        reached = reached_at(cleanings, int(record_offsets[i]))
        if reached is not None and reached <= horizon:
            stays[i] = False
            expired[i] = True
    for p, (chunk, _) in enumerate(parts):
        span = slice(rows[p], rows[p + 1])
        pick = stays[span] | expired[span]
        yield chunk, ("survivors", chunk, _ipc(pa.table({
            "offset": record_offsets[span][pick], "expired": expired[span][pick]})))
    kept = stays & transactional  # the markers of their transactions stay
    found = [view.marker_after(pid, record_offsets[kept & (pids == pid)])
             for pid in np.unique(pids[kept]).tolist()]
    if found:
        marker_offsets = np.concatenate([f[0] for f in found])
        marker_chunks = np.concatenate([f[1] for f in found])
        for c in np.unique(marker_chunks).tolist():
            yield c, ("kept", c, _ipc(pa.table(
                {"offset": np.unique(marker_offsets[marker_chunks == c])})))


class KeptMarkers:
    """The transaction markers a Spark cleaning keeps because records of their
    transaction stay, by offset, as the key buckets found them (the
    :class:`~sparklog.log.cleaner.MarkerGuard` of a writing task, whose chunk may not
    hold the transaction's records)."""

    def __init__(self, offsets):
        self.offsets = set(offsets)

    def kept(self, header) -> None:
        """Nothing to follow: the buckets did."""

    def holds(self, header) -> bool:
        """Whether records of the transaction the marker ``header`` ends stay."""
        return header.base_offset in self.offsets


class SegmentPlan:
    """What a cleaning keeps of one sealed segment, from its frames' ``layout`` (a
    table of :data:`_LAYOUT_FIELDS`) and the sorted offsets of its records that stay
    (``survivors``): per frame how many records stay; the frames to read (those that
    keep a record, and control frames) as ``(position, end, base offset)`` runs; the
    bytes they hold (an upper bound of what the segment keeps) and the records lost."""

    def __init__(self, spec: dict, layout: pa.Table, survivors: np.ndarray):
        self.spec = spec
        self.survivors = survivors
        col = {n: layout.column(n).to_numpy() for n in _LAYOUT_FIELDS}
        self.first = np.searchsorted(survivors, col["base"])
        counts = np.searchsorted(survivors, col["next"]) - self.first
        control = col["control"].astype(np.bool_)
        keep = control | (counts > 0)
        self.full = control | (counts == col["records"])
        self.kept_bytes = int(col["size"][keep].sum())
        self.records_removed = int((col["records"] - counts)[~control].sum())
        self.frame_at: dict[int, int] = {}
        self.runs: list[list[int]] = []
        for i in np.flatnonzero(keep).tolist():
            pos, size = int(col["pos"][i]), int(col["size"][i])
            self.frame_at[pos] = i
            if self.runs and self.runs[-1][1] == pos:
                self.runs[-1][1] = pos + size
            else:
                self.runs.append([pos, pos + size, int(col["base"][i])])
        self.counts = counts

    def survivors_of(self, i: int) -> np.ndarray:
        """The offsets that stay of frame ``i``."""
        return self.survivors[self.first[i]:self.first[i] + self.counts[i]]


def write_planned(fileio, directory: str, config, name: str, group, cleanings,
                  horizon: int, result: CleanResult, *, aborted=None, markers=None):
    """Write the cleaned segment (uncommitted: ``.log`` and ``.timeindex``) replacing
    ``group``, ``(segment, SegmentPlan)`` of consecutive sealed segments of partition
    ``name``, with the broker cleaner's
    :class:`~sparklog.log.cleaner.CleanedSegmentWriter` (``aborted`` and ``markers``
    as there); returns ``(segment, index bytes)`` for
    :func:`~sparklog.log.cleaner.commit_cleaned`. Only the planned frames are read; one
    whose records all stay is copied as stored when it may follow the previous frame
    kept. ``result`` gets the bytes read and written and the markers removed (the
    records removed are the plans')."""
    scratch = CleanResult(0, 0)
    writer = CleanedSegmentWriter(fileio, directory, config, name,
                                  [seg for seg, _ in group], cleanings, horizon,
                                  Throttle(), scratch, aborted=aborted, markers=markers)
    with writer:
        for seg, plan in group:
            for pos, frame in frames_at(seg, plan.runs, writer.throttle, result):
                h = frame.header
                i = plan.frame_at[pos]
                if h.is_control:
                    writer.add(frame, None, whole=True)
                elif plan.full[i]:
                    writer.add(frame, np.ones(h.record_count, np.bool_), whole=True)
                else:  # the map's verdict, from the offsets that stay
                    writer.add(frame, pc.is_in(frame.offsets(), value_set=pa.array(
                        plan.survivors_of(i))).to_numpy(zero_copy_only=False))
    out = writer.finish(commit=False)
    result.bytes_written += scratch.bytes_written
    result.markers_removed += scratch.markers_removed
    return out


def _write_task(directory: str, config, name: str, specs_by_chunk: dict,
                dirty_ends: list[int], cleanings, horizon: int, chunk: int, items):
    """Stage 3 (a task per chunk): plan each segment of the chunk below where the key
    map ends (:class:`TransactionView`) from its layout and its offsets that stay,
    group the segments into cleaned segments of at most ``segment.bytes`` by the bytes
    they keep, and write each (uncommitted); first a row ``{"map_end": ...}``, then a
    row per cleaned segment."""
    _task_start()
    layouts, found, kept, txns = {}, [], [], []
    for _, item in items:
        if item[0] == "layout":
            layouts[item[1]] = _table(item[3])
        elif item[0] == "survivors":
            found.append(_table(item[2]))
        elif item[0] == "kept":
            kept += _table(item[2]).column("offset").to_pylist()
        else:
            txns.append(item)
    view = TransactionView(_events(txns), dirty_ends)
    yield {"map_end": view.map_end}
    if view.map_end is None:
        return
    found_all = pa.concat_tables(found) if found else \
        pa.table({"offset": pa.array([], pa.int64()), "expired": pa.array([], pa.bool_())})
    offsets = found_all.column("offset").to_numpy()
    expired = found_all.column("expired").to_numpy()
    survivors, lapsed = np.sort(offsets[~expired]), np.sort(offsets[expired])
    fileio = open_fileio(directory)
    planned, expired_of = [], {}
    for spec in specs_by_chunk[chunk]:
        if spec["next"] > view.map_end:
            break
        lo, hi = np.searchsorted(survivors, [spec["base"], spec["next"]])
        seg = _segment(fileio, directory, spec)
        expired_of[id(seg)] = int(np.searchsorted(lapsed, spec["next"])
                                  - np.searchsorted(lapsed, spec["base"]))
        planned.append((seg, SegmentPlan(spec, layouts[spec["seg"]], survivors[lo:hi])))
    plans = {id(seg): plan for seg, plan in planned}
    groups = group_segments([seg for seg, _ in planned], config.segment_bytes,
                            lambda seg: plans[id(seg)].kept_bytes)
    markers = KeptMarkers(kept)
    for group in groups:
        result = CleanResult(0, 0)
        new, index = write_planned(fileio, directory, config, name,
                                   [(seg, plans[id(seg)]) for seg in group], cleanings,
                                   horizon, result, aborted=view.aborted, markers=markers)
        specs = [plans[id(seg)].spec for seg in group]
        tombstones = sum(expired_of[id(seg)] for seg in group)
        yield {"segs": [s["seg"] for s in specs], "base": new.base_offset,
               "end_offset": new.end_offset, "generation": new.generation, "index": index,
               "bytes_read": result.bytes_read, "bytes_written": result.bytes_written,
               "records_removed": sum(plans[id(seg)].records_removed for seg in group)
               - tombstones, "tombstones_removed": tombstones,
               "markers_removed": result.markers_removed}


def compact_partition(spark, plog, now_ms: int | None = None, *, force: bool = False,
                      progress=None) -> CleanResult | None:
    """Clean the partition log ``plog`` (opened as its writer) with Spark, as
    :func:`sparklog.log.cleaner.clean` does in one process; None when nothing was due
    (or, with ``force``, nothing dirty). See the module docstring."""

    say = progress or (lambda line: None)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if not plog.config.compact:
        return None
    with plog.maintenance:
        state = due_cleaning(plog, now, force)
        if state is None:
            return None
        started = time.monotonic()
        fileio, config, name, directory = plog.fileio, plog.config, plog.name, plog.dir_url
        checkpoint = CleanerCheckpoint(fileio, directory)
        _, cleanings = checkpoint.read()
        delete_uncommitted(plog)
        sealed = plog.segments[:-1]
        dirty = [s for s in sealed if s.next_offset > state.first_dirty
                 and s.base_offset < state.first_uncleanable]
        map_end = dirty[-1].next_offset
        rewrite = [s for s in sealed if s.next_offset <= map_end]
        cores = max(int(spark.sparkContext.defaultParallelism), 1)
        chunks = chunk_segments([s.size for s in rewrite], cores, CHUNK_MAX_BYTES)
        buckets = max(cores, -(-sum(s.record_count for s in rewrite) // BUCKET_MAX_RECORDS))
        specs_by_chunk: dict[int, list[dict]] = {}
        for c, members in enumerate(chunks):
            for i in members:
                seg = rewrite[i]
                specs_by_chunk.setdefault(c, []).append(dict(zip(_SPEC_FIELDS, (
                    i, seg.base_offset, seg.generation, seg.end_offset, seg.size,
                    seg.next_offset > state.first_dirty, c, seg.next_offset))))
        key = CompactionKey.of(name, config)
        horizon = now - config.delete_retention_ms
        dirty_ends = [s.next_offset for s in dirty]
        say(f"partition {name}: key map over {len(dirty)} dirty segment(s), offsets "
            f"[{state.first_dirty}, {map_end}); {len(rewrite)} segment(s) to rewrite in "
            f"{len(chunks)} task(s), {buckets} key bucket(s)")
        written = (  # one Spark job: segments read, key map built, cleaned segments written
            spark.sparkContext.parallelize([specs_by_chunk[c] for c in range(len(chunks))],
                                           len(chunks))
            .flatMap(functools.partial(_read_task, directory, key, buckets))
            .partitionBy(buckets, _identity)  # the key map: one bucket of keys per task
            .mapPartitionsWithIndex(functools.partial(
                _bucket_task, cleanings, horizon, dirty_ends, len(chunks)))
            .partitionBy(len(chunks), _identity)  # each chunk's offsets that stay
            .mapPartitionsWithIndex(functools.partial(
                _write_task, directory, config, name, specs_by_chunk, dirty_ends,
                cleanings, horizon))
            .collect())
        map_end = written[0]["map_end"]  # where no transaction is open (every task agrees)
        written = sorted((row for row in written if "segs" in row),
                         key=lambda row: row["base"])
        if map_end is None:
            say(f"partition {name}: a transaction is open from the first dirty segment "
                f"on; nothing cleaned")
            return None
        say(f"partition {name}: {len(written)} cleaned segment(s) written by tasks; "
            f"committing the swap")
        result = CleanResult(state.first_dirty, map_end)
        result.bytes_read = sum(s.size for s in rewrite)  # the pass of stage 1
        for row in written:  # the swap, in offset order
            group = [rewrite[i] for i in row["segs"]]
            new = commit_cleaned(fileio, directory, config, row["base"], row["end_offset"],
                                 row["generation"], row["index"])
            plog.replace_segments(group, new)
            result.segments_replaced += len(group)
            result.segments_written += 1
            result.replaced.extend(s.path for s in group)
            for k in ("bytes_read", "bytes_written", "records_removed", "tombstones_removed",
                      "markers_removed"):
                setattr(result, k, getattr(result, k) + row[k])
        finish_cleaning(plog, checkpoint, cleanings, map_end, now, started, result)
        say(f"partition {name}: committed {result.segments_written} cleaned segment(s), "
            f"{result.records_removed} record(s) removed")
        return result


def _identity(bucket: int) -> int:
    """The Spark partition of a bucket or chunk number: itself."""
    return bucket
