"""The differential test of ``format("sparklog")``: random queries (subscriptions and
offset bounds, projections, filters over topic/partition/offset/timestamp/key/value/
headers with AND/OR/NOT, aggregates, ordered limits, joins of two reads) run on every
read route (:data:`tests.support.sparkread.ROUTES`: planned in Python and read on the
JVM, read on Python behind the JVM provider, the Python source alone as without the
jar) and on Parquet of the same records, written from the
records the test appended, not read back through sparklog. Results are compared as
digests (row count, sum and XOR of a 64-bit hash of every row), many queries to a
Spark job; a query whose digests differ is collected on both sides for the message.

Seeded: ``SPARKLOG_FUZZ_SEED`` (default 30) and ``SPARKLOG_FUZZ_QUERIES`` (default 50
queries, each on every route and on Parquet: 200 query runs) make a longer fuzz run, e.g.
``SPARKLOG_FUZZ_QUERIES=5000``. A failure names the seed, the query number and its
description, so ``SPARKLOG_FUZZ_SEED=... SPARKLOG_FUZZ_QUERIES=...`` repeats it.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparklog.metadata import TopicStore
from sparklog.storage import open_fileio
from tests.support.logdata import BASE_TS, append_records, ts
from tests.support.sparkread import KAFKA_SCHEMA_HEADERS, ROUTES, load_route, register_routes

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("SPARKLOG_FUZZ_SEED", "30"))
QUERIES = int(os.environ.get("SPARKLOG_FUZZ_QUERIES", "50"))
#: queries per Spark job (one union of their hashed rows)
CHUNK = 25

#: topic -> (partitions, records per partition)
LAYOUT = {"da": (3, 40), "db": (2, 30), "dc": (1, 25)}


def record_of(topic: str, p: int, o: int, count: int) -> dict:
    """The record at offset ``o``: null keys, tombstones, empty and missing headers,
    timestamps that do not grow with offsets (CreateTime)."""
    shuffled = (o * 17) % count
    return {
        "key": None if o % 11 == 3 else f"k{p}-{o % 5}".encode(),
        "value": None if o % 13 == 7 else f"{topic}/{p}/{o}".encode() * (1 + o % 3),
        "timestamp": BASE_TS + shuffled * 1000 + p,
        "headers": (None if o % 4 == 0 else [] if o % 4 == 1
                    else [("h", f"{o}".encode()), ("g", None if o % 3 else b"x")]),
    }


@pytest.fixture(scope="module")
def data(jspark, tmp_path_factory):
    """(storage root, Parquet directory) of :func:`write_data`, with the routes'
    sources registered."""
    register_routes(jspark)
    return write_data(jspark, tmp_path_factory.mktemp("differential"))


def write_data(spark, base):
    """The storage root holding the layout (small segments, frames of 3 to 7 records)
    and the Parquet directory of the same records in the Kafka source's schema, under
    the directory ``base``."""
    root = (base / "log").as_uri()
    store = TopicStore(root, open_fileio(root))
    rows = []
    for topic, (partitions, count) in LAYOUT.items():
        store.create_topic(topic, partitions, configs={"segment.bytes": "1500"})
        for p in range(partitions):
            recs = [record_of(topic, p, o, count) for o in range(count)]
            start = 0
            for size in [3, 7, 5, 4, 6] * count:
                if start >= count:
                    break
                append_records(store, topic, p, recs[start:start + size], per_frame=size,
                               config={"segment.bytes": "1500"})
                start += size
            for o, r in enumerate(recs):
                rows.append((r["key"], r["value"], topic, p, o, ts(r["timestamp"]), 0,
                             None if r["headers"] is None else list(r["headers"])))
    parquet = str(base / "records.parquet")
    spark.createDataFrame(rows, KAFKA_SCHEMA_HEADERS).coalesce(2).write.parquet(parquet)
    return root, parquet


# --- the query generator ---------------------------------------------------------------------


@dataclass
class Read:
    """One read: its sparklog options and the restriction that makes Parquet's rows the
    same (topic-partitions, offset bounds, headers column)."""

    options: dict
    tps: dict  # (topic, partition) -> (start, end)
    headers: bool
    description: str = ""

    def on_parquet(self, spark, parquet: str) -> DataFrame:
        df = spark.read.parquet(parquet)
        cond = functools.reduce(lambda a, b: a | b, [
            (F.col("topic") == t) & (F.col("partition") == p) & (F.col("offset") >= s)
            & (F.col("offset") < e) for (t, p), (s, e) in sorted(self.tps.items())])
        df = df.where(cond)
        return df if self.headers else df.drop("headers")

    def on_sparklog(self, spark, root: str, route: str) -> DataFrame:
        return load_route(spark, route, root, **self.options)


def random_read(rng: random.Random) -> Read:
    topics = sorted(LAYOUT)
    kind = rng.choice(["subscribe", "subscribe", "pattern", "assign"])
    if kind == "pattern":
        pattern = rng.choice(["d.*", "d[ab]", "dc", "d(a|c)", ".*b", "x.*"])
        chosen = [t for t in topics if re.fullmatch(pattern, t)]
        options = {"subscribePattern": pattern}
        tps = {(t, p) for t in chosen for p in range(LAYOUT[t][0])}
    elif kind == "assign":
        assign = {}
        for t in rng.sample(topics, rng.randint(1, 3)):
            assign[t] = sorted(rng.sample(range(LAYOUT[t][0]), rng.randint(1, LAYOUT[t][0])))
        options = {"assign": json.dumps(assign)}
        tps = {(t, p) for t, ps in assign.items() for p in ps}
    else:
        chosen = sorted(rng.sample(topics, rng.randint(1, 3)))
        options = {"subscribe": ",".join(chosen)}
        tps = {(t, p) for t in chosen for p in range(LAYOUT[t][0])}
    bounds = {tp: (0, LAYOUT[tp[0]][1]) for tp in tps}
    if tps and rng.random() < 0.35:  # JSON offsets naming every partition, -2/-1 included
        starting, ending = {}, {}
        for (t, p) in sorted(tps):
            count = LAYOUT[t][1]
            s = rng.choice([-2, 0, rng.randint(0, count)])
            e = rng.choice([-1, count, rng.randint(max(s, 0), count)])
            starting.setdefault(t, {})[str(p)] = s
            ending.setdefault(t, {})[str(p)] = e
            bounds[(t, p)] = (max(s, 0), count if e == -1 else e)
        if rng.random() < 0.8:
            options["startingOffsets"] = json.dumps(starting)
        else:
            bounds = {tp: (0, b[1]) for tp, b in bounds.items()}
        options["endingOffsets"] = json.dumps(ending)
    if rng.random() < 0.3:
        options["minPartitions"] = str(rng.randint(1, 12))
    if rng.random() < 0.3:
        options["maxRecordsPerPartition"] = str(rng.randint(1, 25))
    headers = rng.random() < 0.6
    if headers:
        options["includeHeaders"] = "true"
    if not tps:  # a pattern matching nothing: Parquet's restriction needs a term
        bounds = {("", -1): (0, 0)}
    return Read(options, bounds, headers, json.dumps(options, sort_keys=True))


def random_atom(rng: random.Random, headers: bool):
    """One predicate as (Column, text)."""
    c = F.col
    t = ts(BASE_TS + rng.randint(-2, 42) * 1000 + rng.randint(0, 2))
    choices = [
        lambda: (c("topic") == rng.choice(["da", "db", "dc", "zz"]), "topic ="),
        lambda: (c("topic").isin(*rng.sample(["da", "db", "dc"], 2)), "topic in"),
        lambda: (c("topic").startswith(rng.choice(["d", "da", "x"])), "topic startswith"),
        lambda: (c("topic").endswith(rng.choice(["a", "b", "c"])), "topic endswith"),
        lambda: (c("topic").contains(rng.choice(["a", "d"])), "topic contains"),
        lambda: (c("topic") > rng.choice(["da", "db"]), "topic >"),
        lambda: (c("partition") == rng.randint(0, 3), "partition ="),
        lambda: (c("partition") != rng.randint(0, 2), "partition !="),
        lambda: (c("partition") < rng.randint(0, 3), "partition <"),
        lambda: (c("partition").isin(*rng.sample(range(4), 2)), "partition in"),
        lambda: (c("offset") >= rng.randint(-1, 41), "offset >="),
        lambda: (c("offset") > rng.randint(-1, 41), "offset >"),
        lambda: (c("offset") < rng.randint(0, 41), "offset <"),
        lambda: (c("offset") <= rng.randint(0, 41), "offset <="),
        lambda: (c("offset") == rng.randint(0, 41), "offset ="),
        lambda: (c("offset").isin(*rng.sample(range(42), 3)), "offset in"),
        lambda: (c("offset").between(rng.randint(0, 20), rng.randint(10, 40)), "offset between"),
        lambda: (c("timestamp") >= F.lit(t), "timestamp >="),
        lambda: (c("timestamp") > F.lit(t), "timestamp >"),
        lambda: (c("timestamp") < F.lit(t), "timestamp <"),
        lambda: (c("timestamp") == F.lit(t), "timestamp ="),
        lambda: (c("timestampType") == 0, "timestampType = 0"),
        lambda: (c("key").isNull(), "key is null"),
        lambda: (c("key").isNotNull(), "key is not null"),
        lambda: (c("key") == F.lit(f"k{rng.randint(0, 2)}-{rng.randint(0, 4)}".encode()),
                 "key ="),
        lambda: (c("value").isNull(), "value is null"),
        lambda: (F.length("value") > rng.randint(5, 20), "length(value) >"),
        lambda: (F.substring("value", 1, 2) == F.lit(b"da"), "value starts da"),
    ]
    if headers:
        choices += [
            lambda: (c("headers").isNull(), "headers is null"),
            lambda: (F.size("headers") > 0, "size(headers) > 0"),
            lambda: (F.exists("headers", lambda h: h["key"] == "g"), "exists header g"),
            lambda: (F.exists("headers", lambda h: h["value"].isNull()), "header value null"),
        ]
    return rng.choice(choices)()


def random_filter(rng: random.Random, headers: bool, depth: int = 0):
    """A random AND/OR/NOT tree of predicates, as (Column, text)."""
    roll = rng.random()
    if depth >= 2 or roll < 0.45:
        return random_atom(rng, headers)
    if roll < 0.6:
        inner, text = random_filter(rng, headers, depth + 1)
        return ~inner, f"NOT ({text})"
    (a, ta), (b, tb) = (random_filter(rng, headers, depth + 1),
                        random_filter(rng, headers, depth + 1))
    if roll < 0.82:
        return a & b, f"({ta}) AND ({tb})"
    return a | b, f"({ta}) OR ({tb})"


@dataclass
class Query:
    """A query over one or two reads; ``run(make)`` builds it on the DataFrames ``make``
    gives for each read (sparklog on a route, or Parquet)."""

    reads: list
    build: object  # (list of DataFrames) -> DataFrame
    description: str

    def run(self, make) -> DataFrame:
        return self.build([make(r) for r in self.reads])


def random_query(rng: random.Random) -> Query:
    read = random_read(rng)
    filters = [random_filter(rng, read.headers) for _ in range(rng.choice([0, 1, 1, 2]))]
    shape = rng.choice(["project", "project", "aggregate", "aggregate", "count", "limit",
                        "join", "join", "set"])

    def filtered(df, fs=filters):
        for f, _ in fs:
            df = df.where(f)
        return df

    text = f"read {read.description}; where {[t for _, t in filters]}; {shape}"
    columns = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if read.headers:
        columns.append("headers")
    if shape == "project":
        chosen = rng.sample(columns, rng.randint(1, len(columns)))
        extra = rng.choice([[], [F.length("value").alias("len")], [F.hex("key").alias("hk")],
                            [F.year("timestamp").alias("y")]])
        return Query([read], lambda d: filtered(d[0]).select(*chosen, *extra),
                     f"{text} {chosen}")
    if shape == "aggregate":
        keys = rng.sample(["topic", "partition", "key", "timestampType"], rng.randint(0, 2))
        aggs = [F.count("*").alias("n"), F.sum("offset").alias("so"),
                F.min("timestamp").alias("mt"), F.max(F.length("value")).alias("ml"),
                F.count_distinct("key").alias("dk"), F.min("key").alias("mk"),
                F.count("value").alias("nv")]
        chosen_aggs = rng.sample(aggs, rng.randint(1, 4))
        return Query([read], lambda d: filtered(d[0]).groupBy(*keys).agg(*chosen_aggs),
                     f"{text} by {keys}")
    if shape == "count":
        column = rng.choice(["*", "partition", "offset", "topic", "timestamp", "key"])
        return Query([read], lambda d: filtered(d[0]).agg(F.count(column).alias("n")),
                     f"{text} count({column})")
    if shape == "limit":
        n = rng.randint(0, 30)
        chosen = rng.sample(columns, rng.randint(1, len(columns)))
        return Query([read], lambda d: filtered(d[0]).orderBy("topic", "partition", "offset")
                     .limit(n).select(*chosen), f"{text} limit {n} {chosen}")
    other = random_read(rng)
    other_filters = [random_filter(rng, other.headers) for _ in range(rng.choice([0, 1]))]
    text += f" with read {other.description}; where {[t for _, t in other_filters]}"
    if shape == "set":
        op = rng.choice(["union", "intersect", "exceptAll", "subtract"])
        cols = ["topic", "partition", "offset", "key", "value"]

        def build_set(d, op=op, cols=cols):
            a = filtered(d[0]).select(*cols)
            b = filtered(d[1], other_filters).select(*cols)
            return {"union": a.union, "intersect": a.intersect, "exceptAll": a.exceptAll,
                    "subtract": a.subtract}[op](b)

        return Query([read, other], build_set, f"{text} {op}")
    on = rng.choice([["topic", "partition", "offset"], ["key"], ["topic", "key"]])
    how = rng.choice(["inner", "left", "left_semi", "left_anti", "full"])

    def build_join(d, on=on, how=how):
        a = filtered(d[0]).select("topic", "partition", "offset", "key", "value")
        b = filtered(d[1], other_filters)
        b = b.select(*[F.col(x).alias("b_" + x) for x in ("topic", "partition", "offset",
                                                            "key", "timestamp")])
        cond = functools.reduce(lambda x, y: x & y, [F.col(k) == F.col("b_" + k) for k in on])
        return a.join(b, cond, how)

    return Query([read, other], build_join, f"{text} join on {on} {how}")


def hashed(df: DataFrame, qid: int) -> DataFrame:
    """The query number and a 64-bit hash of each row of ``df``."""
    return df.select(F.lit(qid).alias("q"),
                     F.xxhash64(*[F.col(f"`{c}`") for c in df.columns]).alias("h"))


def digests(queries, make) -> dict:
    """{query number: (rows, sum, xor of their hashes)} of ``queries`` ({number:
    Query}) in one Spark job: order-free, duplicates counted."""
    union = functools.reduce(DataFrame.union, [hashed(q.run(make), i)
                                               for i, q in queries.items()])
    got = {r["q"]: (r["n"], r["s"], r["x"]) for r in union.groupBy("q").agg(
        F.count("*").alias("n"), F.sum(F.col("h").cast("decimal(38,0)")).alias("s"),
        F.bit_xor("h").alias("x")).collect()}
    return {i: got.get(i, (0, None, None)) for i in queries}


def rows_of(df: DataFrame) -> list:
    return sorted((repr(tuple(r)) for r in df.collect()))


@pytest.mark.timeout(max(300, QUERIES * 30))
def test_every_route_answers_as_parquet(jspark, data):
    root, parquet = data
    rng = random.Random(SEED)
    queries = {i: random_query(rng) for i in range(QUERIES)}
    problems = []
    started = time.monotonic()
    for first in range(0, QUERIES, CHUNK):
        chunk = {i: queries[i] for i in range(first, min(first + CHUNK, QUERIES))}
        want = digests(chunk, lambda r: r.on_parquet(jspark, parquet))
        for route in ROUTES:
            got = digests(chunk, lambda r, route=route: r.on_sparklog(jspark, root, route))
            print(f"differential: queries {first}-{first + len(chunk) - 1} on {route} "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
            for i, q in chunk.items():
                if got[i] != want[i]:
                    sl = rows_of(q.run(lambda r, route=route: r.on_sparklog(jspark, root, route)))
                    pq = rows_of(q.run(lambda r: r.on_parquet(jspark, parquet)))
                    problems.append(
                        f"seed {SEED} query {i} on {route}: {q.description}\n"
                        f"  sparklog {got[i]} parquet {want[i]}\n"
                        f"  only in sparklog: {sorted(set(sl) - set(pq))[:3]}\n"
                        f"  only in parquet: {sorted(set(pq) - set(sl))[:3]}")
        assert not problems, "\n".join(problems)
    print(f"differential: {QUERIES} queries (seed {SEED}) x {len(ROUTES)} routes agree "
          "with Parquet")
