"""Planning a scan: from options and log state to offset ranges, one Spark task each.

Every input partition is a :class:`PlannedRange` ``[start, end)`` of one topic-partition.
Ranges are resolved from the offset specs with Kafka's rules (``-2`` earliest, ``-1``
latest, timestamps through the time index), checked for data loss (a start below the
log start offset), narrowed by pushed-down filters, then split for parallelism the way
Spark's Kafka source does (``maxRecordsPerPartition``, then ``minPartitions``
proportionally to range sizes), with split points moved onto segment boundaries when one
is near so that a task rarely decodes a frame another task also reads.
"""

from __future__ import annotations

import json
import logging
import math
from bisect import bisect_left
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from ...errors import InvalidArgumentError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from .options import EARLIEST, LATEST, OffsetSpec, SourceOptions, Subscription

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogSnapshot:
    """What the catalog knows of one topic-partition: its log start offset, high
    watermark and segments as ``(base_offset, size_in_bytes)`` in offset order."""

    topic: str
    partition: int
    log_start: int
    high_watermark: int
    segments: tuple = ()

    def bytes_per_record(self) -> float:
        """Average stored bytes per offset (for byte limits); 1.0 when unknown."""
        if not self.segments or self.high_watermark <= self.segments[0][0]:
            return 1.0
        total = sum(size for _, size in self.segments)
        return max(total / (self.high_watermark - self.segments[0][0]), 1.0)


#: Version of the planned-range descriptor (docs/format.md, "Planned ranges"): the JVM
#: reader reads the versions it knows and refuses any other, naming it.
RANGE_DESCRIPTOR_VERSION = 1
#: The descriptor's fields in version 1, in their order (JSON names).
RANGE_DESCRIPTOR_FIELDS = ("version", "topic", "partition", "start", "end", "root",
                           "failOnDataLoss", "storageOptions")


@dataclass
class PlannedRange(InputPartition):
    """One Spark task: records ``[start, end)`` of ``topic``/``partition``, read from the
    storage root ``root``. ``fail_on_data_loss`` decides what a range that retention
    deleted during the scan does (raise, or skip with a warning).

    It crosses to the tasks and to the JVM reader as its descriptor
    (:meth:`descriptor`: versioned JSON, docs/format.md, "Planned ranges"): Spark
    pickles the range, and its pickled state is that descriptor alone, which the JVM
    reader reads whatever class carried it."""

    topic: str
    partition: int
    start: int
    end: int
    root: str
    fail_on_data_loss: bool = True
    storage_options: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of offsets in the range."""
        return max(self.end - self.start, 0)

    def descriptor(self) -> str:
        """The range as its version-:data:`RANGE_DESCRIPTOR_VERSION` descriptor: one JSON
        object of :data:`RANGE_DESCRIPTOR_FIELDS` (compact, in that order)."""
        values = (RANGE_DESCRIPTOR_VERSION, self.topic, self.partition, self.start,
                  self.end, self.root, self.fail_on_data_loss, self.storage_options)
        return json.dumps(dict(zip(RANGE_DESCRIPTOR_FIELDS, values)), separators=(",", ":"))

    @classmethod
    def from_descriptor(cls, text: str) -> "PlannedRange":
        """The range a descriptor holds; InvalidArgumentError naming the problem (another
        version, a missing, extra or mistyped field)."""
        try:
            d = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"planned-range descriptor is not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise InvalidArgumentError(f"planned-range descriptor is not a JSON object: {text!r}")
        if d.get("version") != RANGE_DESCRIPTOR_VERSION:
            raise InvalidArgumentError(
                f"planned-range descriptor version {d.get('version')!r} is not known here "
                f"(this sparklog reads version {RANGE_DESCRIPTOR_VERSION})")
        if set(d) != set(RANGE_DESCRIPTOR_FIELDS):
            raise InvalidArgumentError(
                f"planned-range descriptor version {RANGE_DESCRIPTOR_VERSION} has fields "
                f"{sorted(d)}, not {sorted(RANGE_DESCRIPTOR_FIELDS)}")
        types = {"topic": str, "partition": int, "start": int, "end": int, "root": str,
                 "failOnDataLoss": bool, "storageOptions": dict}
        for name, kind in types.items():
            value = d[name]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise InvalidArgumentError(
                    f"planned-range descriptor field {name} is {value!r}, not a {kind.__name__}")
        return cls(d["topic"], d["partition"], d["start"], d["end"], d["root"],
                   d["failOnDataLoss"], d["storageOptions"])

    def __getstate__(self) -> dict:
        return {"descriptor": self.descriptor()}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(PlannedRange.from_descriptor(state["descriptor"]).__dict__)


OffsetRange = PlannedRange  # the class's earlier name (still imported by some tests)


def data_loss_message(topic: str, partition: int, first: int, end: int | None,
                      why: str) -> str:
    """The text of a data-loss error or warning: names the topic, the partition and the
    missing offset range ``[first, end)`` (``end`` None: from ``first`` on)."""
    span = f"offsets [{first}, {end})" if end is not None else f"offsets from {first} on"
    return (f"topic {topic!r} partition {partition}: {span} are no longer "
            f"available ({why}); some data may have been lost. If you don't want the query "
            "to fail on such cases, set the source option failOnDataLoss to false.")


def report_data_loss(fail: bool, topic: str, partition: int, first: int, end: int | None,
                     why: str, log_start=None, log_end=None, *, error=None) -> None:
    """Raise OffsetOutOfRangeError (``fail``; ``error=DataLossError`` for damaged
    files) or log a warning for a lost range."""
    message = data_loss_message(topic, partition, first, end, why)
    if fail and error is not None:
        raise error(message, topic=topic, partition=partition, first_offset=first,
                    end_offset=end)
    if fail:
        raise OffsetOutOfRangeError(message, topic=topic, partition=partition, offset=first,
                                    log_start_offset=log_start, log_end_offset=log_end)
    log.warning("%s Skipping them (failOnDataLoss=false).", message.split(" If you")[0])


# --- which partitions ---------------------------------------------------------------------


def subscribed_partitions(catalog, sub: Subscription, *, missing_ok: bool = True) -> dict:
    """{topic: [partition, ...]} selected by the subscription now. Subscribed topics that
    do not exist (yet) are skipped with a warning (a stream reads them once they are
    created), or with ``missing_ok=False`` (a batch read, an ``etl run``) raise
    UnknownTopicOrPartitionError naming them; an assigned partition that does not exist
    raises it too."""
    out = {}
    if not missing_ok and sub.kind == "subscribe":
        missing = [t for t in sub.topics if catalog.topic_config(t) is None]
        if missing:
            names = ", ".join(repr(t) for t in missing)
            raise UnknownTopicOrPartitionError(
                f"subscribed topic{'s' if len(missing) > 1 else ''} {names} "
                f"{'do' if len(missing) > 1 else 'does'} not exist in {catalog.root} "
                "(create it first, or check the name)")
    if sub.kind == "subscribePattern":
        topics = [t for t in catalog.list_topics() if sub.matches(t)]
    elif sub.kind == "assign":
        topics = list(sub.assignment)
    else:
        topics = list(sub.topics)
    for topic in topics:
        config = catalog.topic_config(topic)
        if config is None:
            if sub.kind == "assign":
                raise UnknownTopicOrPartitionError(f"assigned topic {topic!r} does not exist")
            log.warning("subscribed topic %r does not exist (yet); reading nothing from it", topic)
            continue
        if sub.kind == "assign":
            missing = [p for p in sub.assignment[topic] if p >= config.partitions]
            if missing:
                raise UnknownTopicOrPartitionError(
                    f"assigned partitions {missing} of topic {topic!r} do not exist "
                    f"(it has {config.partitions})")
            out[topic] = list(sub.assignment[topic])
        else:
            out[topic] = list(range(config.partitions))
    return out


def partition_states(catalog, partitions: dict) -> dict:
    """{(topic, partition): LogSnapshot} for ``{topic: [partition...]}``."""
    out = {}
    for topic, parts in partitions.items():
        states = catalog.partition_states(topic, parts)
        for p in parts:
            out[(topic, p)] = states[p]
    return out


# --- offsets from specs ---------------------------------------------------------------------


def resolve_offsets(catalog, spec: OffsetSpec, states: dict, *, is_start: bool,
                    strategy: str = "error") -> dict:
    """{(topic, partition): offset} for every partition of ``states`` under ``spec``.

    Specific offsets must name every partition (Kafka's rule); -2/-1 map to the log
    start / high watermark. Timestamps map to the first offset whose timestamp is >= the
    given one; when there is none the end (and, with ``strategy`` 'latest', the start)
    is the high watermark, else InvalidArgumentError names the partition.
    """
    name = "startingOffsets" if is_start else "endingOffsets"
    if spec.kind in ("offsets", "timestamps"):
        missing = sorted(set(states) - set(spec.values))
        if missing:
            label = name if spec.kind == "offsets" else name.replace("Offsets", "OffsetsByTimestamp")
            raise InvalidArgumentError(
                f"option {label} must give every partition of the subscription; missing: "
                + ", ".join(f"{t}-{p}" for t, p in missing)
                + " (use -2 for earliest, -1 for latest)")
    out = {}
    for tp, state in states.items():
        if spec.kind == "earliest":
            off = state.log_start
        elif spec.kind == "latest":
            off = state.high_watermark
        elif spec.kind == "offsets":
            off = spec.values[tp]
            off = state.log_start if off == EARLIEST else state.high_watermark if off == LATEST \
                else off
        else:
            ts = spec.timestamp if spec.kind == "timestamp" else spec.values[tp]
            found = catalog.offset_for_timestamp(tp[0], tp[1], ts)
            if found is None:
                if is_start and strategy == "error":
                    raise InvalidArgumentError(
                        f"topic {tp[0]!r} partition {tp[1]} has no record with a timestamp "
                        f">= {ts} (set startingOffsetsByTimestampStrategy=latest to start at "
                        "the latest offset instead)")
                found = state.high_watermark
            off = max(found, state.log_start)
        out[tp] = off
    return out


def check_range(state: LogSnapshot, start: int, end: int,
                fail_on_data_loss: bool) -> tuple[int, int] | None:
    """Validate ``[start, end)`` against the log; returns the range to read, or None
    when nothing is left. Below the log start is data loss; beyond the high watermark
    is an error."""
    topic, partition = state.topic, state.partition
    if end > state.high_watermark:
        raise OffsetOutOfRangeError(
            f"topic {topic!r} partition {partition}: ending offset {end} is beyond the latest "
            f"offset {state.high_watermark}", topic=topic, partition=partition, offset=end,
            log_start_offset=state.log_start, log_end_offset=state.high_watermark)
    if start > end:
        raise InvalidArgumentError(
            f"topic {topic!r} partition {partition}: starting offset {start} is after the "
            f"ending offset {end}")
    if start < state.log_start:
        lost_end = min(state.log_start, end)
        report_data_loss(fail_on_data_loss, topic, partition, start, lost_end,
                         f"the log now starts at offset {state.log_start}",
                         state.log_start, state.high_watermark)
        start = lost_end
    return (start, end) if end > start else None


# --- splitting ---------------------------------------------------------------------------------


def _snap(point: int, lo: int, hi: int, bases: list, tolerance: float) -> int:
    """``point`` moved to the nearest segment base strictly inside (lo, hi) and within
    ``tolerance`` offsets of it, else unchanged."""
    i = bisect_left(bases, point)
    near = [bases[j] for j in (i - 1, i)
            if 0 <= j < len(bases) and lo < bases[j] < hi and abs(bases[j] - point) <= tolerance]
    return min(near, key=lambda b: abs(b - point)) if near else point


def _split(r: PlannedRange, parts: int, bases: list, limit: int | None = None) -> list:
    """``r`` cut into ``parts`` near-equal pieces, cut points snapped to segment bases
    when one is within a quarter piece; no piece exceeds ``limit`` offsets if given."""
    if parts <= 1 or r.size <= 1:
        return [r]
    points = [r.start]
    for left in range(min(parts, r.size) - 1, 0, -1):  # pieces after the next one
        prev = points[-1]
        step = (r.end - prev) / (left + 1)
        point = _snap(prev + round(step), prev, r.end, bases, step / 4)
        if limit:
            point = max(min(point, prev + limit), r.end - limit * left)
        if prev < point < r.end:
            points.append(point)
    points.append(r.end)
    return [PlannedRange(r.topic, r.partition, a, b, r.root, r.fail_on_data_loss,
                        r.storage_options)
            for a, b in zip(points, points[1:])]


def split_ranges(ranges: list, states: dict, min_partitions: int | None = None,
                 max_records: int | None = None) -> list:
    """Split ranges for parallelism: first so that none exceeds ``max_records``
    offsets, then, if fewer than ``min_partitions`` ranges remain, each range into a
    share of ``min_partitions`` proportional to its size (Spark's Kafka source)."""
    ranges = [r for r in ranges if r.size > 0]
    bases = {tp: [b for b, _ in s.segments] for tp, s in states.items()}
    if max_records:
        ranges = [piece for r in ranges
                  for piece in _split(r, math.ceil(r.size / max_records),
                                      bases.get((r.topic, r.partition), []), max_records)]
    if min_partitions and len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        if total:
            ranges = [piece for r in ranges
                      for piece in _split(r, max(1, round(r.size / total * min_partitions)),
                                          bases.get((r.topic, r.partition), []), max_records)]
    return ranges


# --- a batch scan ---------------------------------------------------------------------------------


def plan_batch(catalog, opts: SourceOptions, pushed=None) -> list:
    """The offset ranges of a batch read (``pushed`` narrows them: see
    :class:`~sparklog.spark.source.filters.PushedFilters`)."""
    parts = subscribed_partitions(catalog, opts.subscription, missing_ok=False)
    if pushed is not None:
        parts = {t: [p for p in ps if pushed.keeps_partition(t, p)] for t, ps in parts.items()}
        parts = {t: ps for t, ps in parts.items() if ps}
    states = partition_states(catalog, parts)
    starts = resolve_offsets(catalog, opts.starting, states, is_start=True,
                             strategy=opts.timestamp_strategy)
    ends = resolve_offsets(catalog, opts.ending, states, is_start=False)
    ranges = []
    for tp, state in sorted(states.items()):
        start, end = starts[tp], ends[tp]
        if pushed is not None:
            start, end = pushed.narrow(catalog, state, start, end)
            if end <= start:
                continue
        checked = check_range(state, start, end, opts.fail_on_data_loss)
        if checked is None:
            continue
        ranges.append(PlannedRange(tp[0], tp[1], checked[0], checked[1],
                                  catalog.root, opts.fail_on_data_loss,
                                  catalog.storage_options))
    return split_ranges(ranges, states, opts.min_partitions, opts.max_records_per_partition)
