"""Log compaction as a Spark job (``sparklog compact TOPIC --spark``): the cleaning of
:mod:`sparklog.log.cleaner` for partitions too large for one process.

For one partition, whose writer (and storage lease) the driver holds, so no broker
leads it nor cleans it meanwhile (one cleaner per partition at a time):

1. The driver takes the cleanable state (:func:`~sparklog.log.cleaner.cleanable_state`)
   and groups every sealed segment up to the end of the dirty part into the groups of
   cleaned segments (``segment.bytes``, Kafka's grouping by size).
2. **The key map, built by Spark** (one Spark job does steps 2 and 3). One task per segment reads it and emits its
   distinct keys with their highest offset (``seg, grp, dirty, key, offset``). The map
   is the ``max(offset)`` per key over the dirty segments' rows (a Spark
   aggregation); each key of a segment is joined with it, so each group gets only the
   entries of its own keys (nothing is broadcast: the map may exceed one process).
3. **Cleaned segments written by tasks.** The rows are partitioned by group; a task
   writes each of its groups' cleaned segment (``.log`` and ``.timeindex`` under the
   cleaned names) and returns its ``.index`` bytes, uncommitted.
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
    cleanable_state,
    commit_cleaned,
    delete_uncommitted,
    finish_cleaning,
    group_segments,
    key_type,
    needs_cleaning,
    segment_keys,
    write_cleaned,
)
from ..log.segment import LogSegment
from ..storage import open_fileio

_SPEC_FIELDS = ("seg", "base", "generation", "end_offset", "size", "dirty", "grp")
_RESULT_SCHEMA = pa.schema([
    ("grp", pa.int32()), ("base", pa.int64()), ("end_offset", pa.int64()),
    ("generation", pa.int32()), ("index", pa.binary()), ("bytes_read", pa.int64()),
    ("bytes_written", pa.int64()), ("records_removed", pa.int64()),
    ("tombstones_removed", pa.int64())])


def _segment(fileio, directory: str, spec: dict) -> LogSegment:
    """The sealed segment a spec row describes."""
    return LogSegment(fileio, directory, spec["base"], sealed=True,
                      generation=spec["generation"], end_offset=spec["end_offset"],
                      listed_size=spec["size"])


def _keys_task(directory: str, key: CompactionKey, key_arrow_type, batches):
    """Stage 1 (a task per segment): each segment's distinct keys and highest offsets."""
    fileio = open_fileio(directory)
    for batch in batches:
        for spec in batch.to_pylist():
            keys = segment_keys(_segment(fileio, directory, spec), key)
            n = len(keys)
            if not n:
                continue
            yield pa.RecordBatch.from_arrays([
                pa.array([spec["seg"]] * n, pa.int32()), pa.array([spec["grp"]] * n, pa.int32()),
                pa.array([spec["dirty"]] * n, pa.bool_()), keys.keys.cast(key_arrow_type),
                keys.offsets], names=["seg", "grp", "dirty", "key", "offset"])


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
                horizon: int, batches):
    """Stage 2: the cleaned segments of the groups whose (key, latest) rows came here."""
    fileio = open_fileio(directory)
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    for grp in sorted(set(table.column("grp").to_pylist())):
        rows = table.filter(pc.equal(table.column("grp"), grp))
        offsets = KeyMap().merged([(rows.column("key").combine_chunks(),
                                    rows.column("latest").combine_chunks())])
        out = _write_group(fileio, directory, config, name, specs_by_grp[grp], offsets,
                           cleanings, horizon, grp)
        yield pa.RecordBatch.from_pylist([out], schema=_RESULT_SCHEMA)


def compact_partition(spark, plog, now_ms: int | None = None, *, force: bool = False,
                      progress=None) -> CleanResult | None:
    """Clean the partition log ``plog`` (opened as its writer) with Spark, as
    :func:`sparklog.log.cleaner.clean` does in one process; None when nothing was due
    (or, with ``force``, nothing dirty). See the module docstring."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    say = progress or (lambda line: None)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if not plog.config.compact:
        return None
    with plog.maintenance:
        plog.wait_sealed()
        plog.delete_replaced_files(now)
        state = cleanable_state(plog, now)
        if not (force and state.dirty_bytes) and not needs_cleaning(plog, now, state):
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
        ktype = next((t for t in (key_type(s, key) for s in dirty) if t is not None),
                     pa.binary())
        horizon = now - config.delete_retention_ms
        say(f"partition {name}: key map over {len(dirty)} dirty segment(s), offsets "
            f"[{state.first_dirty}, {map_end}); {len(rewrite)} segment(s) into "
            f"{len(groups)} cleaned segment(s)")
        spec_df = spark.createDataFrame(
            [tuple(s[f] for f in _SPEC_FIELDS) for s in specs],
            "seg int, base long, generation int, end_offset long, size long, "
            "dirty boolean, grp int").repartition(len(specs))
        key_spark = from_arrow_type(ktype).simpleString()
        pairs = spec_df.mapInArrow(
            functools.partial(_keys_task, directory, key, ktype),
            f"seg int, grp int, dirty boolean, key {key_spark}, offset long").persist()
        try:  # kept: both the map and the join read the segments' keys
            latest = pairs.where("dirty").groupBy("key").agg(F.max("offset").alias("latest"))
            needed = pairs.select("grp", "key").join(latest, "key")
            written = needed.repartition(len(groups), "grp").mapInArrow(
                functools.partial(_write_task, directory, config, name, specs_by_grp,
                                  cleanings, horizon),
                "grp int, base long, end_offset long, generation int, index binary, "
                "bytes_read long, bytes_written long, records_removed long, "
                "tombstones_removed long").collect()  # read, map, join and write
        finally:
            pairs.unpersist()
        rows = {r["grp"]: r.asDict() for r in written}
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
