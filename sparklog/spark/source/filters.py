"""Filter pushdown: filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` narrow
the planned offset ranges so whole partitions, segments and frames are never read.

* ``topic``: =, IN, <, <=, >, >=, LIKE 'a%' / '%a' / '%a%' (``StringStartsWith``,
  ``StringEndsWith``, ``StringContains``) and their negations drop topics; exact.
* ``partition`` (=, IN, <, <=, >, >= and their negations, ``<>`` and ``NOT IN`` included)
  drops topic-partitions; exact.
* ``offset`` (=, <, <=, >, >=, and the negated bounds) cuts each range; exact.
  ``offset IN (...)`` cuts to [min, max] and is still evaluated by Spark.
* ``timestamp >= t`` / ``> t`` (or ``NOT timestamp < t`` / ``<= t``) starts each range at
  the first offset whose timestamp is >= t (the time index, as Kafka's offsetsForTimes);
  Spark still evaluates it, because CreateTime timestamps need not grow with offsets.
* ``IS NULL`` / ``IS NOT NULL`` on these columns (never null): an empty scan, or nothing
  to do; exact.

Every other filter PySpark can push (any filter on another column, ``offset <> n``,
``NOT offset IN (...)``, string predicates on a number...) is left to Spark, never an
error. PySpark pushes the conjuncts of a ``WHERE`` one by one and never pushes ``OR``
(it stays with Spark whole), so only ``NOT`` of a single comparison reaches here.
"""

from __future__ import annotations

import datetime as _dt

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

_EQ = (EqualTo, EqualNullSafe)
_BOUNDS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_STRINGS = (StringStartsWith, StringEndsWith, StringContains)
#: NOT of a bound on a column that is never null is the opposite bound.
_COMPLEMENT = {GreaterThan: LessThanOrEqual, GreaterThanOrEqual: LessThan,
               LessThan: GreaterThanOrEqual, LessThanOrEqual: GreaterThan}
#: The metadata columns the filters here concern: every record has them, never null.
NOT_NULL_COLUMNS = frozenset({"topic", "partition", "offset", "timestamp", "timestampType"})


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


def _column(f) -> str | None:
    """The top-level column a leaf filter names (None for a nested field)."""
    attribute = getattr(f, "attribute", ())
    return attribute[0] if len(attribute) == 1 else None


def _normalized(f):
    """``(filter, negated)``: NOT of a bound on a never-null column becomes the opposite
    bound (``NOT offset < 5`` is ``offset >= 5``); any other NOT stays negated."""
    negated = False
    while isinstance(f, Not):
        f, negated = f.child, not negated
    if negated and type(f) in _COMPLEMENT and _column(f) in NOT_NULL_COLUMNS:
        return _COMPLEMENT[type(f)](f.attribute, f.value), False
    return f, negated


class _Interval:
    """Integer interval [lo, hi) plus an optional set of allowed values and a set of
    excluded ones."""

    def __init__(self):
        self.lo = None
        self.hi = None
        self.values = None
        self.excluded: set = set()

    def add(self, f, negated: bool = False) -> bool:
        """Apply one filter (its negation with ``negated``: only = and IN can be
        negated here, as exclusions); True if it is applied exactly."""
        if isinstance(f, (*_EQ, In)):
            vals = [_int(v) for v in (f.value if isinstance(f, In) else (f.value,))]
            if any(v is None for v in vals):
                return False
            if negated:
                self.excluded |= set(vals)
            else:
                self._allow(set(vals))
            return True
        v = _int(f.value)
        if v is None or negated:
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
            and (self.values is None or v in self.values) and v not in self.excluded

    def bounds(self) -> tuple:
        """(lo, hi) including the span of allowed values."""
        lo, hi = self.lo, self.hi
        if self.values is not None and not self.values:
            return 0, 0  # contradictory equalities: nothing
        if self.values is not None:
            lo = min(self.values) if lo is None else max(lo, min(self.values, default=lo))
            top = max(self.values, default=-1) + 1
            hi = top if hi is None else min(hi, top)
        return lo, hi


def _topic_test(f, negated: bool):
    """A picklable test of topic names for a filter on ``topic``, or None when the
    filter's values are not strings (left to Spark)."""
    values = f.value if isinstance(f, In) else (f.value,)
    if not all(isinstance(v, str) for v in values):
        return None
    kind = type(f).__name__
    return kind, tuple(values), negated


def _topic_passes(test, topic: str) -> bool:
    kind, values, negated = test
    if kind in ("EqualTo", "EqualNullSafe", "In"):
        hit = topic in values
    elif kind == "GreaterThan":
        hit = topic > values[0]
    elif kind == "GreaterThanOrEqual":
        hit = topic >= values[0]
    elif kind == "LessThan":
        hit = topic < values[0]
    elif kind == "LessThanOrEqual":
        hit = topic <= values[0]
    elif kind == "StringStartsWith":
        hit = topic.startswith(values[0])
    elif kind == "StringEndsWith":
        hit = topic.endswith(values[0])
    else:
        hit = values[0] in topic
    return hit != negated


class PushedFilters:
    """The filters a batch reader accepted; picklable, consulted when planning."""

    def __init__(self):
        self.topic_tests: list = []
        self.partition = _Interval()
        self.offset = _Interval()
        self.min_timestamp_ms = None
        self.empty = False

    def push(self, filters) -> list:
        """Apply the filters that can narrow the scan; return those Spark must still
        evaluate (the unsupported ones and the inexact ones), by reference."""
        remaining = []
        for f in filters:
            if not self._push_one(f):
                remaining.append(f)
        return remaining

    def _push_one(self, f) -> bool:
        f, negated = _normalized(f)
        column = _column(f)
        if column not in NOT_NULL_COLUMNS:
            return False
        if isinstance(f, (IsNull, IsNotNull)):
            # never null: IS NULL keeps nothing, IS NOT NULL everything
            if isinstance(f, IsNull) != negated:
                self.empty = True
            return True
        if column == "topic" and isinstance(f, (*_EQ, In, *_BOUNDS, *_STRINGS)):
            test = _topic_test(f, negated)
            if test is None:
                return False
            self.topic_tests.append(test)
            return True
        if column == "partition" and isinstance(f, (*_EQ, In, *_BOUNDS)):
            return self.partition.add(f, negated)
        if column == "offset" and isinstance(f, (*_EQ, In, *_BOUNDS)) and not negated:
            return self.offset.add(f) and not isinstance(f, In)
        if column == "timestamp" and isinstance(f, (GreaterThan, GreaterThanOrEqual)) \
                and not negated:
            ms = _to_ms(f.value)
            if ms is not None:
                self.min_timestamp_ms = ms if self.min_timestamp_ms is None \
                    else max(self.min_timestamp_ms, ms)
            return False
        return False

    def keeps_partition(self, topic: str, partition: int) -> bool:
        """True if topic-partition may hold matching rows."""
        return not self.empty and all(_topic_passes(t, topic) for t in self.topic_tests) \
            and self.partition.keeps(partition)

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
