"""Filter pushdown: filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` narrow
the planned offset ranges so whole partitions, segments and frames are never read.

* ``topic`` and ``partition`` (=, IN, <, <=, >, >=) drop topic-partitions; exact.
* ``offset`` (=, <, <=, >, >=) cuts each range; exact. ``offset IN (...)`` cuts to
  [min, max] and is still evaluated by Spark.
* ``timestamp >= t`` / ``> t`` starts each range at the first offset whose timestamp is
  >= t (the time index, as Kafka's offsetsForTimes); Spark still evaluates it, because
  CreateTime timestamps need not grow with offsets.

Any other filter is left to Spark.
"""

from __future__ import annotations

import datetime as _dt

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

_EQ = (EqualTo, EqualNullSafe)
_BOUNDS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


def _to_ms(value) -> int | None:
    """Milliseconds since the epoch (rounded down) of a pushed timestamp value."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000
                + delta.microseconds) // 1000
    return None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Interval:
    """Integer interval [lo, hi) plus an optional set of allowed values."""

    def __init__(self):
        self.lo = None
        self.hi = None
        self.values = None

    def add(self, f) -> bool:
        """Apply one filter; True if it is applied exactly."""
        if isinstance(f, _EQ):
            v = _int(f.value)
            if v is None:
                return False
            self._allow({v})
            return True
        if isinstance(f, In):
            vals = [_int(v) for v in f.value]
            if any(v is None for v in vals):
                return False
            self._allow(set(vals))
            return True
        v = _int(f.value)
        if v is None:
            return False
        if isinstance(f, GreaterThan):
            self._lower(v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self._lower(v)
        elif isinstance(f, LessThan):
            self._upper(v)
        else:
            self._upper(v + 1)
        return True

    def _allow(self, vals: set) -> None:
        self.values = vals if self.values is None else self.values & vals

    def _lower(self, v: int) -> None:
        self.lo = v if self.lo is None else max(self.lo, v)

    def _upper(self, v: int) -> None:
        self.hi = v if self.hi is None else min(self.hi, v)

    def keeps(self, v: int) -> bool:
        """True if ``v`` satisfies every applied filter."""
        return (self.lo is None or v >= self.lo) and (self.hi is None or v < self.hi) \
            and (self.values is None or v in self.values)

    def bounds(self) -> tuple:
        """(lo, hi) including the span of allowed values."""
        lo, hi = self.lo, self.hi
        if self.values is not None:
            lo = min(self.values) if lo is None else max(lo, min(self.values, default=lo))
            top = max(self.values, default=-1) + 1
            hi = top if hi is None else min(hi, top)
        return lo, hi


class PushedFilters:
    """The filters a batch reader accepted; picklable, consulted when planning."""

    def __init__(self):
        self.topics = None
        self.partition = _Interval()
        self.offset = _Interval()
        self.min_timestamp_ms = None

    def push(self, filters) -> list:
        """Apply the filters that can narrow the scan; return those Spark must still
        evaluate (the unsupported ones and the inexact ones), by reference."""
        remaining = []
        for f in filters:
            if not self._push_one(f):
                remaining.append(f)
        return remaining

    def _push_one(self, f) -> bool:
        column = f.attribute[0] if len(f.attribute) == 1 else None
        if column == "topic":
            if isinstance(f, _EQ) and isinstance(f.value, str):
                vals = {f.value}
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                vals = set(f.value)
            else:
                return False
            self.topics = vals if self.topics is None else self.topics & vals
            return True
        if column == "partition" and isinstance(f, (*_EQ, In, *_BOUNDS)):
            return self.partition.add(f)
        if column == "offset" and isinstance(f, (*_EQ, In, *_BOUNDS)):
            return self.offset.add(f) and not isinstance(f, In)
        if column == "timestamp" and isinstance(f, (GreaterThan, GreaterThanOrEqual)):
            ms = _to_ms(f.value)
            if ms is not None:
                self.min_timestamp_ms = ms if self.min_timestamp_ms is None \
                    else max(self.min_timestamp_ms, ms)
            return False
        return False

    def keeps_partition(self, topic: str, partition: int) -> bool:
        """True if topic-partition may hold matching rows."""
        return (self.topics is None or topic in self.topics) and self.partition.keeps(partition)

    def narrow(self, catalog, state, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` cut by the offset and timestamp filters."""
        lo, hi = self.offset.bounds()
        if lo is not None:
            start = max(start, lo)
        if hi is not None:
            end = min(end, hi)
        if self.min_timestamp_ms is not None and end > start:
            first = catalog.offset_for_timestamp(state.topic, state.partition,
                                                 self.min_timestamp_ms)
            start = end if first is None else max(start, first)
        return start, end
