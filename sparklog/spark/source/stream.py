"""``spark.readStream.format("sparklog")``: micro-batches of offset ranges.

Offsets are JSON per topic and partition, as Spark's Kafka source writes them in the
checkpoint: ``{"events": {"0": 1200, "1": 1187}}`` (the next offset to read).

* ``initialOffset`` resolves ``startingOffsets`` / timestamps for a new query; a
  restarted query resumes from its checkpoint instead (Spark's choice).
* ``latestOffset`` lists the subscription again, so new partitions and, with
  ``subscribePattern``, new topics join between batches; they are read from their
  earliest offset. ``maxOffsetsPerTrigger`` / ``maxBytesPerTrigger`` cap each batch,
  shared among partitions in proportion to their backlog (Kafka's rule).
* ``partitions(start, end)`` plans ``[start, end)`` per partition (data-loss checks,
  ``minPartitions`` splits); the tasks read storage directly.
* with ``kafka.group.id`` and a broker, the processed offsets are published to that
  consumer group for lag monitoring (the checkpoint stays the truth): on ``commit(end)``,
  and, since Spark commits a batch to its source only when it constructs the next one
  (never the last batch of a ``Trigger.AvailableNow`` run), also when Spark next asks
  for ``latestOffset()``: Spark runs one micro-batch at a time, so by then the batch
  planned last has been processed. A run that drained its backlog therefore leaves the
  group at the offsets it processed (with the JVM provider: without it Spark asks for
  the latest offset once per AvailableNow run, see below).

PySpark 4.1 gives Python sources no admission control (``latestOffset()`` takes no
start or limit, and a Python stream cannot implement ``SupportsTriggerAvailableNow`` or
``reportLatestOffset``), so the reader caps batches itself from the last end offset it
handed out or saw planned (Spark re-plans the last checkpointed batch on restart, which
tells a new reader process where the query stands). Under ``Trigger.AvailableNow`` the
JVM provider (``JvmMicroBatchStream``) clamps these capped ends to the offsets available
when the run started, so a capped run drains in several batches: it gives the source the
internal option ``__sparklog.reportAvailable``, and a capped answer of ``latestOffset()``
then also carries the uncapped end under the key ``@available`` (the same partition
states, no extra read), which the provider takes as the run's end and removes before
Spark sees the offsets. Without the jar Spark asks for the latest offset only once and a
capped run stops after one batch.
"""

from __future__ import annotations

import logging
import math

from pyspark.sql.datasource import DataSourceStreamReader

from .catalogs import open_catalog
from .options import AVAILABLE_KEY
from .planning import (
    PlannedRange,
    partition_states,
    report_data_loss,
    resolve_offsets,
    split_ranges,
    subscribed_partitions,
)
from .scan import read_range
from .schema import arrow_schema

log = logging.getLogger(__name__)


def offsets_to_json(offsets: dict) -> dict:
    """{(topic, partition): offset} -> {"topic": {"partition": offset}} (sorted)."""
    out: dict = {}
    for (topic, partition), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(off)
    return out


def offsets_from_json(doc: dict) -> dict:
    """Inverse of :func:`offsets_to_json` (an ``@available`` entry is not an offset)."""
    return {(topic, int(p)): int(off) for topic, parts in (doc or {}).items()
            if topic != AVAILABLE_KEY for p, off in parts.items()}


def rate_limit(begin: dict, latest: dict, states: dict, max_offsets: int | None,
               max_bytes: int | None) -> dict:
    """Cap ``latest`` so the batch from ``begin`` holds at most ``max_offsets`` records
    and about ``max_bytes`` stored bytes, shared by backlog (a share below one record
    rounds up so every partition with data advances)."""
    sizes = {tp: end - begin.get(tp, states[tp].log_start) for tp, end in latest.items()}
    sizes = {tp: s for tp, s in sizes.items() if s > 0}
    out = dict(latest)
    limits = []
    if max_offsets:
        limits.append((max_offsets, {tp: 1.0 for tp in sizes}))
    if max_bytes:
        limits.append((max_bytes, {tp: states[tp].bytes_per_record() for tp in sizes}))
    for limit, weight in limits:
        total = sum(sizes[tp] * weight[tp] for tp in sizes)
        if total <= limit:
            continue
        for tp, size in sizes.items():
            share = limit * (size * weight[tp] / total) / weight[tp]
            records = math.ceil(share) if share < 1 else math.floor(share)
            start = begin.get(tp, states[tp].log_start)
            out[tp] = min(out[tp], start + records)
    return out


class SparklogStreamReader(DataSourceStreamReader):
    """The micro-batch reader (see the module docstring). Picklable: the catalog
    connection is opened lazily and not pickled."""

    def __init__(self, opts, schema):
        self.opts = opts
        self.schema = schema
        self._position: dict | None = None
        self._catalog = None
        self._unpublished: dict | None = None  # end of the batch planned last

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_catalog"] = None
        return state

    def _cat(self):
        if self._catalog is None:
            self._catalog = open_catalog(self.opts)
        return self._catalog

    def _states(self) -> dict:
        cat = self._cat()
        cat.refresh()
        return partition_states(cat, subscribed_partitions(cat, self.opts.subscription))

    def _advance(self, offsets: dict) -> None:
        pos = dict(self._position or {})
        for tp, off in offsets.items():
            pos[tp] = max(pos.get(tp, off), off)
        self._position = pos

    def initialOffset(self) -> dict:
        """Offsets a new query starts at (``startingOffsets``, default latest)."""
        states = self._states()
        starts = resolve_offsets(self._cat(), self.opts.starting, states, is_start=True,
                                 strategy=self.opts.timestamp_strategy)
        return offsets_to_json(starts)

    def latestOffset(self) -> dict:
        """The high watermark of every subscribed partition, capped by the per-trigger
        limits from the current position. Spark asks once the batch planned last has
        been processed: its end is published to ``kafka.group.id`` first. When capped
        and the JVM provider asks for it (``__sparklog.reportAvailable``), the uncapped
        high watermarks come along under ``@available`` (see the module docstring)."""
        if self._unpublished:
            self._publish(self._unpublished)
            self._unpublished = None
        states = self._states()
        available = latest = {tp: s.high_watermark for tp, s in states.items()}
        capped = bool(self.opts.max_offsets_per_trigger or self.opts.max_bytes_per_trigger)
        if capped:
            if self._position is None:
                self._position = offsets_from_json(self.initialOffset())
            begin = {tp: self._position[tp] for tp in latest if tp in self._position}
            latest = rate_limit(begin, latest, states, self.opts.max_offsets_per_trigger,
                                self.opts.max_bytes_per_trigger)
            for tp, off in self._position.items():  # a vanished partition keeps its place
                latest.setdefault(tp, off)
        self._advance(latest)
        answer = offsets_to_json(latest)
        if capped and self.opts.report_available:
            answer[AVAILABLE_KEY] = offsets_to_json(available)
        return answer

    def partitions(self, start: dict, end: dict) -> list:
        """Offset ranges of the micro-batch ``(start, end]`` (data-loss checks, splits)."""
        begin, until = offsets_from_json(start), offsets_from_json(end)
        self._advance(until)
        if begin == until:
            return []
        self._publish(begin)
        self._unpublished = until
        fail = self.opts.fail_on_data_loss
        for tp in sorted(set(begin) - set(until)):
            report_data_loss(fail, tp[0], tp[1], begin[tp], None,
                             "the partition no longer exists")
        cat = self._cat()
        wanted: dict = {}
        for topic, partition in until:
            wanted.setdefault(topic, []).append(partition)
        states = partition_states(cat, wanted)
        ranges = []
        for tp, end_off in sorted(until.items()):
            state = states[tp]
            first = begin.get(tp, 0)  # a new partition is read from its beginning
            if end_off < first:
                report_data_loss(fail, tp[0], tp[1], end_off, first,
                                 f"its offsets went back from {first} to {end_off}; "
                                 "was the topic re-created?")
                continue
            if first < state.log_start:
                report_data_loss(fail, tp[0], tp[1], first, min(state.log_start, end_off),
                                 f"the log now starts at offset {state.log_start}",
                                 state.log_start, state.high_watermark)
                first = min(state.log_start, end_off)
            if end_off > state.high_watermark:
                report_data_loss(fail, tp[0], tp[1], state.high_watermark, end_off,
                                 f"the log now ends at offset {state.high_watermark}",
                                 state.log_start, state.high_watermark)
                end_off = state.high_watermark
            if end_off > first:
                ranges.append(PlannedRange(tp[0], tp[1], first, end_off, cat.root, fail,
                                          cat.storage_options))
        return split_ranges(ranges, states, self.opts.min_partitions, None)

    def read(self, partition):
        """Records of one offset range as Arrow batches."""
        return read_range(partition, arrow_schema(self.schema))

    def commit(self, end: dict) -> None:
        """Spark finished every offset before ``end``: publish them to the consumer group
        (``kafka.group.id``, broker mode only)."""
        self._advance(offsets_from_json(end))
        self._publish(offsets_from_json(end))

    def _publish(self, offsets: dict) -> None:
        if self.opts.group_id and self.opts.bootstrap_servers and offsets:
            try:
                self._cat().commit_group_offsets(self.opts.group_id, offsets)
            except Exception as exc:  # monitoring only: never fail the query for it
                log.warning("could not publish offsets of group %r: %s",
                            self.opts.group_id, exc)

    def stop(self) -> None:
        """Close the catalog connection."""
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None
