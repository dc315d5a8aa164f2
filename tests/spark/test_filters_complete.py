"""Every filter class PySpark can push to a Python data source (``pyspark.sql.datasource``:
EqualTo, EqualNullSafe, GreaterThan(OrEqual), LessThan(OrEqual), In, IsNull, IsNotNull,
Not, StringStartsWith, StringEndsWith, StringContains) is used or left to Spark, never
an error: first on the planner alone (random filter sets against an independent
evaluation of the records), then through Spark on every read route, with the queries
of issue 30 (``partition != 3``, ``~offset.isin(...)``, ``exceptAll``) and ``OR`` /
``AND`` / ``NOT`` combinations, whose JVM filters (``Not``, ``Or``, ``And`` of
``org.apache.spark.sql.sources``) the JVM provider hands to the same Python pushdown."""

from __future__ import annotations

import datetime as dt
import random

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")

from pyspark.sql import functions as F
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

from sparklog.spark.source.catalog import StorageCatalog
from sparklog.spark.source.filters import PushedFilters
from sparklog.spark.source.options import parse_options
from sparklog.spark.source.planning import plan_batch
from tests.support.logdata import BASE_TS, make_topic, record, ts
from tests.support.sparkread import ROUTES, load_route, register_routes

#: topic -> (partitions, records per partition) of the test log
LAYOUT = {"ta": (3, 20), "tb": (2, 20), "xc": (4, 12)}

COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")


@pytest.fixture(scope="module")
def layout_root(tmp_path_factory):
    root = (tmp_path_factory.mktemp("filters") / "log").as_uri()
    for topic, (partitions, count) in LAYOUT.items():
        make_topic(root, topic, partitions, count, per_frame=5,
                   config={"segment.bytes": "1200"})
    return root


def all_records():
    """Every record of the layout as a dict of the filterable columns."""
    out = []
    for topic, (partitions, count) in LAYOUT.items():
        for p in range(partitions):
            for o in range(count):
                r = record(topic, p, o)
                out.append({"topic": topic, "partition": p, "offset": o,
                            "timestamp": ts(r["timestamp"]), "key": r["key"],
                            "value": r["value"], "timestampType": 0})
    return out


def holds(f, row) -> bool | None:
    """SQL's three-valued truth of the pushed filter ``f`` on ``row`` (None: unknown),
    written from the classes' documentation, not from the planner."""
    if isinstance(f, Not):
        inner = holds(f.child, row)
        return None if inner is None else not inner
    path = f.attribute
    value = row.get(path[0]) if len(path) == 1 else None
    if isinstance(f, IsNull):
        return value is None
    if isinstance(f, IsNotNull):
        return value is not None
    if isinstance(f, EqualNullSafe):
        return value == f.value
    if value is None or (not isinstance(f, In) and f.value is None):
        return None
    if isinstance(f, EqualTo):
        return value == f.value
    if isinstance(f, In):
        return value in f.value
    if isinstance(f, (StringStartsWith, StringEndsWith, StringContains)):
        if not isinstance(value, str):
            return None
        return {StringStartsWith: value.startswith, StringEndsWith: value.endswith,
                StringContains: value.__contains__}[type(f)](f.value)
    ops = {GreaterThan: lambda a, b: a > b, GreaterThanOrEqual: lambda a, b: a >= b,
           LessThan: lambda a, b: a < b, LessThanOrEqual: lambda a, b: a <= b}
    return ops[type(f)](value, f.value)


def random_leaf(rng: random.Random):
    """One pushed filter of any class on any column (a nested path now and then)."""
    column = rng.choice(COLUMNS + (("headers", "key"), "timestampType"))
    path = column if isinstance(column, tuple) else (column,)
    if column == "topic":
        values = ["ta", "tb", "xc", "t", "zz", "a"]
    elif column in ("partition", "timestampType"):
        values = [-1, 0, 1, 2, 3, 5]
    elif column == "offset":
        values = [-1, 0, 3, 7, 11, 12, 19, 20, 40]
    elif column == "timestamp":
        values = [ts(BASE_TS + ms) for ms in (-5, 0, 2_500, 7_000, 11_002, 30_000)]
    else:
        values = [b"k0-1", b"ta/0/3", b"k1-3"]
    kind = rng.choice([EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan,
                       LessThanOrEqual, In, IsNull, IsNotNull, StringStartsWith,
                       StringEndsWith, StringContains])
    if kind in (IsNull, IsNotNull):
        leaf = kind(path)
    elif kind is In:
        leaf = In(path, tuple(rng.sample(values, rng.randint(1, 3))))
    elif kind in (StringStartsWith, StringEndsWith, StringContains):
        leaf = kind(path, rng.choice(["t", "a", "b", "x", "ta", "c"]))
    else:
        leaf = kind(path, rng.choice(values + [None] if kind is EqualNullSafe else values))
    return Not(leaf) if rng.random() < 0.4 else leaf


def planned_records(root, pushed):
    catalog = StorageCatalog(root)
    try:
        ranges = plan_batch(catalog, parse_options({"path": root, "subscribePattern": ".*"}),
                            pushed)
    finally:
        catalog.close()
    return {(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)}


def test_every_pushed_filter_class_is_used_or_left_to_spark(layout_root):
    """Random conjunctions of every filter class, negated or not: pushing never fails,
    the plan keeps every matching record, and the filters taken as exact (not handed
    back to Spark) hold on every record the plan keeps."""
    rows = all_records()
    rng = random.Random(30)
    for _ in range(400):
        filters = [random_leaf(rng) for _ in range(rng.randint(1, 3))]
        pushed = PushedFilters()
        left = pushed.push(filters)
        assert all(any(g is f for f in filters) for g in left)
        exact = [f for f in filters if not any(f is g for g in left)]
        planned = planned_records(layout_root, pushed)
        key = [(r["topic"], r["partition"], r["offset"]) for r in rows]
        matching = {k for k, r in zip(key, rows) if all(holds(f, r) for f in filters)}
        assert matching <= planned, (filters, sorted(matching - planned)[:5])
        for k, r in zip(key, rows):
            if k in planned:
                assert all(holds(f, r) for f in exact), (filters, exact, k)


def test_negations_and_string_predicates_narrow_the_plan(layout_root):
    """What each new case takes: NOT of =/IN on topic and partition drops them, NOT of a
    bound is the opposite bound, topic LIKE patterns drop topics, IS NULL on a column
    that is never null plans nothing; NOT on offset equality stays with Spark."""
    def plan(*filters):
        pushed = PushedFilters()
        return pushed.push(list(filters)), planned_records(layout_root, pushed)

    left, got = plan(Not(EqualTo(("partition",), 1)), Not(In(("topic",), ("tb",))))
    assert left == [] and {(t, p) for t, p, _ in got} == {
        ("ta", 0), ("ta", 2), ("xc", 0), ("xc", 2), ("xc", 3)}
    left, got = plan(Not(GreaterThanOrEqual(("offset",), 4)), StringStartsWith(("topic",), "x"))
    assert left == [] and {o for _, _, o in got} == {0, 1, 2, 3} and {t for t, _, _ in got} == {"xc"}
    left, got = plan(Not(StringContains(("topic",), "t")), Not(LessThan(("partition",), 3)))
    assert left == [] and {(t, p) for t, p, _ in got} == {("xc", 3)}
    left, got = plan(IsNull(("offset",)))
    assert left == [] and got == set()
    left, got = plan(Not(IsNull(("topic",))), IsNotNull(("timestamp",)))
    assert left == [] and len(got) == sum(p * n for p, n in LAYOUT.values())
    ne, not_in = Not(EqualTo(("offset",), 3)), Not(In(("offset",), (1, 2)))
    left, got = plan(ne, not_in, EqualTo(("offset",), 3), EqualTo(("offset",), 4))
    assert left == [ne, not_in] and got == set()  # offset = 3 AND offset = 4: nothing
    after = Not(LessThan(("timestamp",), dt.datetime(2023, 11, 14, 22, 13, 35)))
    left, _ = plan(after)
    assert left == [after]  # inexact (CreateTime): Spark still checks it


# --- through Spark, on every route --------------------------------------------------------


def counts_on(spark, root, route):
    df = load_route(spark, route, root, subscribePattern=".*")
    col = F.col
    return [
        df.where(col("partition") != 1).count(),
        df.where(~col("offset").isin(0, 5, 19)).count(),
        df.where(~(col("topic") == "tb") & ~col("partition").isin(0, 2)).count(),
        df.exceptAll(df.where(col("partition") != 0)).count(),
        df.where((col("partition") == 1) | (col("offset") < 2)).count(),
        df.where(~((col("offset") >= 3) & (col("topic") != "xc"))).count(),
        df.where(col("topic").startswith("t") & ~col("topic").endswith("b")
                 & col("topic").contains("a")).count(),
        df.where(col("offset").isNull() | col("key").isNull()).count(),
        df.where(~col("timestamp").between(ts(BASE_TS + 3_000), ts(BASE_TS + 9_000))).count(),
        df.where(col("offset").eqNullSafe(4) & col("value").isNotNull()).count(),
        df.where(~(col("key") == b"k0-1") & (col("value").substr(1, 2) != b"ta")).count(),
    ]


def expected_counts():
    rows = all_records()
    lo, hi = ts(BASE_TS + 3_000), ts(BASE_TS + 9_000)

    def n(pred):
        return sum(1 for r in rows if pred(r))

    return [
        n(lambda r: r["partition"] != 1),
        n(lambda r: r["offset"] not in (0, 5, 19)),
        n(lambda r: r["topic"] != "tb" and r["partition"] not in (0, 2)),
        n(lambda r: r["partition"] == 0),
        n(lambda r: r["partition"] == 1 or r["offset"] < 2),
        n(lambda r: not (r["offset"] >= 3 and r["topic"] != "xc")),
        n(lambda r: r["topic"] == "ta"),
        0,
        n(lambda r: not (lo <= r["timestamp"] <= hi)),
        n(lambda r: r["offset"] == 4),
        n(lambda r: r["key"] != b"k0-1" and not r["value"].startswith(b"ta")),
    ]


@pytest.mark.spark
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_not_or_and_queries_on_every_route(jspark, layout_root, route):
    """The queries that failed with "'Not' object has no attribute 'attribute'" (and
    their OR / AND / string-predicate relatives) count what the records say, on every
    read route (the JVM provider's pushed Not/Or/And go through the same pushdown)."""
    register_routes(jspark)
    assert counts_on(jspark, layout_root, route) == expected_counts()
