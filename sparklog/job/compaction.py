"""Log compaction as a Spark job (``sparklog compact TOPIC --spark``): the cleaning of
:mod:`sparklog.log.cleaner` for partitions too large for one process.

For one partition, whose writer (and storage lease) the driver holds, so no broker
leads it nor cleans it meanwhile (one cleaner per partition at a time):

1. The driver takes the cleanable state (:func:`~sparklog.log.cleaner.cleanable_state`)
   and groups every sealed segment up to the end of the dirty part into the groups of
   cleaned segments (``segment.bytes``, Kafka's grouping by size).
2. **The key map, built by Spark** (one Spark job does steps 2 and 3, its stages
   exchanging Arrow IPC blobs, not rows). A task per segment reads its distinct keys
   with their highest offsets and splits them into key buckets (murmur2 of the key);
   a task per bucket builds the bucket's share of the map (the highest offset per key
   over the dirty segments) and looks up every segment's keys of the bucket in it, so
   each group of segments gets only the entries of its own keys (no map is broadcast
   nor held by one process).
3. **Cleaned segments written by tasks.** A task per group writes its cleaned segment
   (``.log`` and ``.timeindex`` under the cleaned names) and returns its ``.index``
   bytes, uncommitted.
4. **The swap, committed by the driver.** In offset order, the driver writes each
   ``.index`` (the commit of docs/format.md, section 7a) and swaps the segment in, then
   writes the cleaner checkpoint. A driver that dies before leaves uncommitted files,
   which the next cleaning deletes; the old segments stay live.

Progress lines go to ``progress`` (one per step and partition).
"""

from __future__ import annotations

import functools
import time

import pyarrow as pa
import pyarrow.compute as pc

from ..log.cleaner import (
    CleanerCheckpoint,
    CleanResult,
    CompactionKey,
    KeyMap,
    Throttle,
    commit_cleaned,
    delete_uncommitted,
    due_cleaning,
    finish_cleaning,
    group_segments,
    segment_keys,
    write_cleaned,
)
from ..log.segment import LogSegment
from ..storage import open_fileio

_SPEC_FIELDS = ("seg", "base", "generation", "end_offset", "size", "dirty", "grp")


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


def _buckets(keys: pa.Array, buckets: int):
    """The bucket of each key (murmur2 of its bytes or text, modulo ``buckets``)."""
    from ..writer.producer.partitioner import murmur2_array

    if not (pa.types.is_binary(keys.type) or pa.types.is_string(keys.type)
            or pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)):
        keys = keys.cast(pa.string())
    return (murmur2_array(keys).astype("int64") & 0x7FFFFFFF) % buckets


def _keys_task(directory: str, key: CompactionKey, buckets: int, spec: dict):
    """Stage 1 (a task per segment): the segment's distinct keys with their highest
    offset, split into key buckets: ``(bucket, (grp, dirty, IPC bytes of key, offset))``."""
    fileio = open_fileio(directory)
    keys = segment_keys(_segment(fileio, directory, spec), key)
    if not len(keys):
        return
    table = pa.table({"key": keys.keys, "offset": keys.offsets})
    bucket = pa.array(_buckets(keys.keys, buckets))
    for b in range(buckets):
        part = table.filter(pc.equal(bucket, b))
        if part.num_rows:
            yield b, (spec["grp"], spec["dirty"], _ipc(part))


def _bucket_task(parts):
    """Stage 2 (a task per key bucket): the key map of the bucket (max offset per key
    over the dirty segments' keys), looked up for each segment's keys: ``(grp, IPC
    bytes of key, latest)`` for the keys the map holds."""
    parts = [(grp, dirty, _table(data)) for grp, dirty, data in parts]
    offsets = KeyMap().merged([(t.column("key").combine_chunks(),
                                t.column("offset").combine_chunks())
                               for _, dirty, t in parts if dirty])
    for grp, _, t in parts:
        keys = t.column("key").combine_chunks()
        latest = offsets.latest(keys)
        mapped = pc.is_valid(latest)
        if pc.any(mapped).as_py():
            yield grp, _ipc(pa.table({"key": keys.filter(mapped),
                                      "latest": latest.filter(mapped)}))


def _write_group(fileio, directory: str, config, name: str, specs: list[dict], offsets: KeyMap,
                 cleanings, horizon: int, grp: int) -> dict:
    """Write group ``grp``'s cleaned segment (uncommitted); its result row."""
    group = [_segment(fileio, directory, s) for s in specs]
    result = CleanResult(0, 0)
    new, index = write_cleaned(fileio, directory, config, name, group, offsets, cleanings,
                               horizon, Throttle(), result, commit=False)
    return {"grp": grp, "base": new.base_offset, "end_offset": new.end_offset,
            "generation": new.generation, "index": index, "bytes_read": result.bytes_read,
            "bytes_written": result.bytes_written, "records_removed": result.records_removed,
            "tombstones_removed": result.tombstones_removed}


def _write_task(directory: str, config, name: str, specs_by_grp: dict, cleanings,
                horizon: int, item):
    """Stage 3 (a task per group): the group's cleaned segment, uncommitted, from its
    ``(key, latest)`` entries; ``(grp, result row)``."""
    grp, parts = item
    offsets = KeyMap().merged([(t.column("key").combine_chunks(),
                                t.column("latest").combine_chunks())
                               for t in (_table(data) for data in parts)])
    return grp, _write_group(open_fileio(directory), directory, config, name,
                             specs_by_grp[grp], offsets, cleanings, horizon, grp)


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
        groups = group_segments(rewrite, config.segment_bytes)
        specs, specs_by_grp = [], {}
        for g, group in enumerate(groups):
            for seg in group:
                spec = dict(zip(_SPEC_FIELDS, (
                    len(specs), seg.base_offset, seg.generation, seg.end_offset, seg.size,
                    seg.next_offset > state.first_dirty, g)))
                specs.append(spec)
                specs_by_grp.setdefault(g, []).append(spec)
        key = CompactionKey.of(name, config)
        horizon = now - config.delete_retention_ms
        buckets = max(int(spark.sparkContext.defaultParallelism), 1)
        say(f"partition {name}: key map over {len(dirty)} dirty segment(s), offsets "
            f"[{state.first_dirty}, {map_end}); {len(rewrite)} segment(s) into "
            f"{len(groups)} cleaned segment(s)")
        written = (  # one Spark job: keys read, map built and looked up, segments written
            spark.sparkContext.parallelize(specs, len(specs))
            .flatMap(functools.partial(_keys_task, directory, key, buckets))
            .groupByKey(buckets)  # the key map, one bucket of keys per task
            .flatMap(lambda item: _bucket_task(item[1]))
            .groupByKey(len(groups))  # each group's (key, latest) entries to one task
            .map(functools.partial(_write_task, directory, config, name, specs_by_grp,
                                   cleanings, horizon))
            .collect())
        rows = dict(written)
        say(f"partition {name}: {len(rows)} cleaned segment(s) written by tasks; "
            f"committing the swap")
        for g in range(len(groups)):  # groups without a keyed record: nothing to look up
            if g not in rows:
                rows[g] = _write_group(fileio, directory, config, name, specs_by_grp[g],
                                       KeyMap(), cleanings, horizon, g)
        result = CleanResult(state.first_dirty, map_end)
        for g, group in enumerate(groups):  # the swap, in offset order
            row = rows[g]
            new = commit_cleaned(fileio, directory, config, row["base"], row["end_offset"],
                                 row["generation"], row["index"])
            plog.replace_segments(group, new)
            result.segments_replaced += len(group)
            result.segments_written += 1
            result.replaced.extend(s.path for s in group)
            for k in ("bytes_read", "bytes_written", "records_removed", "tombstones_removed"):
                setattr(result, k, getattr(result, k) + row[k])
        finish_cleaning(plog, checkpoint, cleanings, map_end, now, started, result)
        say(f"partition {name}: committed {result.segments_written} cleaned segment(s), "
            f"{result.records_removed} record(s) removed")
        return result
