"""Options parsing, planning, splitting, rate limits and filter pushdown of the Spark
source, on real partition logs but without a Spark session (fast)."""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan

from sparklog.errors import (
    InvalidArgumentError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from sparklog.log.partition import PartitionLog
from sparklog.spark.source.catalog import StorageCatalog
from sparklog.spark.source.filters import PushedFilters
from sparklog.spark.source.options import parse_options
from sparklog.spark.source.planning import PlannedRange, plan_batch, split_ranges
from sparklog.spark.source.scan import read_range
from sparklog.spark.source.schema import arrow_schema, spark_schema
from sparklog.spark.source.stream import rate_limit
from tests.support.logdata import BASE_TS, make_topic


def opts(root, **kw):
    base = {"path": root, "subscribe": "t"}
    base.update(kw)
    return parse_options(base)


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "t"}, "bootstrap.servers"),
    ({"path": "x"}, "exactly one of the options subscribe"),
    ({"path": "x", "subscribe": "a", "assign": '{"a":[0]}'}, "(got 2)"),
    ({"path": "x", "subscribePattern": "("}, "not a valid regular expression"),
    ({"path": "x", "assign": '{"a": 0}'}, "non-empty list"),
    ({"path": "x", "assign": "[1]"}, "must be a JSON object"),
    ({"path": "x", "subscribe": "t", "startingOffsets": "first"}, "startingOffsets='first'"),
    ({"path": "x", "subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "offset -3 of t-0"),
    ({"path": "x", "subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, "non-numeric partition"),
    ({"path": "x", "subscribe": "t", "startingOffsets": '{"u":{"0":1}}'}, "u-0, which is not in"),
    ({"path": "x", "subscribe": "t", "startingOffsets": "latest"}, "not valid for batch"),
    ({"path": "x", "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, "can't be earliest"),
    ({"path": "x", "subscribe": "t", "minPartitions": "0"}, "minPartitions='0'"),
    ({"path": "x", "subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss='maybe'"),
    ({"path": "x", "subscribe": "t", "startingTimestamp": "soon"}, "startingTimestamp='soon'"),
    ({"path": "x", "subscribe": "t", "startingOffsetsByTimestampStrategy": "x"}, "error or latest"),
])
def test_bad_options_name_the_problem(options, message):
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_options(options)


def test_bad_topic_name_and_stream_only_rules():
    with pytest.raises(InvalidTopicError, match="illegal characters"):
        parse_options({"path": "x", "subscribe": "a/b"})
    with pytest.raises(InvalidArgumentError, match="not valid for streaming"):
        parse_options({"path": "x", "subscribe": "t", "endingOffsets": "latest"}, streaming=True)


def test_kafka_names_aliases_and_precedence():
    o = parse_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a, b",
                       "startingOffsets": '{"a":{"0":-2},"b":{"0":5}}',
                       "startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"a":{"0":1}}',
                       "endingOffsetsByTimestamp": '{"a":{"0":2000}}', "includeHeaders": "TRUE",
                       "kafka.group.id": "g", "kafka.security.protocol": "PLAINTEXT"})
    assert o.bootstrap_servers == "127.0.0.1:9092" and o.subscription.topics == ("a", "b")
    # startingTimestamp wins over startingOffsetsByTimestamp and startingOffsets (Kafka's rule)
    assert o.starting.kind == "timestamp" and o.starting.timestamp == 1000
    assert o.ending.kind == "timestamps" and o.ending.values == {("a", 0): 2000}
    assert o.include_headers and o.group_id == "g" and o.fail_on_data_loss
    s = parse_options({"path": "x", "subscribePattern": "ev.*"}, streaming=True)
    assert s.starting.kind == "latest" and s.subscription.matches("events")
    assert not s.subscription.matches("xevents")  # the pattern must match the whole name


# --- planning on real logs ----------------------------------------------------------------------


@pytest.fixture
def topic_t(storage_root):
    make_topic(storage_root, "t", partitions=2, count=30, per_frame=10,
               config={"segment.bytes": "2000"})
    return storage_root


def spans(ranges):
    return [(r.topic, r.partition, r.start, r.end) for r in ranges]


def test_missing_storage_root_is_named(tmp_path):
    from sparklog.errors import StorageFileNotFoundError

    missing = (tmp_path / "nowhere").as_uri()
    with pytest.raises(StorageFileNotFoundError, match="nowhere.*option path"):
        StorageCatalog(missing)


def test_plan_offset_specs(topic_t):
    cat = StorageCatalog(topic_t)
    assert spans(plan_batch(cat, opts(topic_t))) == [("t", 0, 0, 30), ("t", 1, 0, 30)]
    o = opts(topic_t, startingOffsets='{"t":{"0":5,"1":-2}}', endingOffsets='{"t":{"0":-1,"1":12}}')
    assert spans(plan_batch(cat, o)) == [("t", 0, 5, 30), ("t", 1, 0, 12)]
    with pytest.raises(InvalidArgumentError, match="missing: t-1"):
        plan_batch(cat, opts(topic_t, startingOffsets='{"t":{"0":5}}'))
    with pytest.raises(OffsetOutOfRangeError, match="ending offset 31 is beyond the latest offset 30"):
        plan_batch(cat, opts(topic_t, endingOffsets='{"t":{"0":31,"1":-1}}'))
    with pytest.raises(InvalidArgumentError, match="starting offset 20 is after the ending offset 10"):
        plan_batch(cat, opts(topic_t, startingOffsets='{"t":{"0":20,"1":0}}',
                             endingOffsets='{"t":{"0":10,"1":-1}}'))
    with pytest.raises(UnknownTopicOrPartitionError, match=r"partitions \[5\] of topic 't'"):
        plan_batch(cat, parse_options({"path": topic_t, "assign": '{"t":[0,5]}'}))


def test_plan_timestamps(topic_t):
    cat = StorageCatalog(topic_t)
    # record o of partition p has timestamp BASE_TS + 1000*o + p
    o = opts(topic_t, startingOffsetsByTimestamp=f'{{"t":{{"0":{BASE_TS + 4500},"1":0}}}}',
             endingTimestamp=str(BASE_TS + 20_000))
    assert spans(plan_batch(cat, o)) == [("t", 0, 5, 20), ("t", 1, 0, 20)]
    late = str(BASE_TS + 10**9)
    with pytest.raises(InvalidArgumentError, match=r"partition 0 has no record with a timestamp"):
        plan_batch(cat, opts(topic_t, startingTimestamp=late))
    o = opts(topic_t, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest")
    assert plan_batch(cat, o) == []


def test_splits_follow_kafka_and_segments(topic_t):
    cat = StorageCatalog(topic_t)
    states = cat.partition_states("t", [0, 1])
    bases = [b for b, _ in states[0].segments]
    assert len(bases) > 2  # small segment.bytes gave several segments
    r = [PlannedRange("t", 0, 0, 30, topic_t), PlannedRange("t", 1, 0, 10, topic_t)]
    st = {("t", p): s for p, s in states.items()}
    by_max = split_ranges(r, st, max_records=7)
    assert all(x.size <= 7 for x in by_max)
    assert sum(x.size for x in by_max) == 40 and len(by_max) == 5 + 2
    by_min = split_ranges(r, st, min_partitions=8)
    assert sum(x.size for x in by_min) == 40 and len(by_min) == 8  # 30:10 -> 6 + 2
    # cut points of partition 0 snap to segment bases when one is near
    cuts = {x.start for x in by_min if x.partition == 0} - {0}
    assert cuts & set(bases)
    # pieces tile the ranges: no gap, no overlap
    for p, whole in ((0, 30), (1, 10)):
        pieces = sorted((x.start, x.end) for x in by_min if x.partition == p)
        assert pieces[0][0] == 0 and pieces[-1][1] == whole
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))


def test_pushed_filters_narrow_and_report_leftovers(topic_t):
    cat = StorageCatalog(topic_t)
    f = PushedFilters()
    ts_filter = GreaterThanOrEqual(("timestamp",), dt.datetime.fromtimestamp(
        (BASE_TS + 12_000) / 1000, dt.timezone.utc))
    filters = [EqualTo(("partition",), 1), LessThan(("offset",), 25), ts_filter,
               In(("offset",), [3, 40]), EqualTo(("value",), b"x")]
    left = f.push(filters)
    assert left == [ts_filter, filters[3], filters[4]]  # inexact or unsupported: Spark keeps them
    assert spans(plan_batch(cat, opts(topic_t), f)) == [("t", 1, 12, 25)]
    g = PushedFilters()
    assert g.push([EqualTo(("topic",), "other")]) == []
    assert plan_batch(cat, opts(topic_t), g) == []
    h = PushedFilters()
    h.push([GreaterThan(("offset",), 100)])
    assert plan_batch(cat, opts(topic_t), h) == []


def test_rate_limit_shares_by_backlog(topic_t):
    states = {("t", p): s for p, s in StorageCatalog(topic_t).partition_states("t", [0, 1]).items()}
    begin = {("t", 0): 0, ("t", 1): 28}
    latest = {("t", 0): 30, ("t", 1): 30}
    assert rate_limit(begin, latest, states, 8, None) == {("t", 0): 7, ("t", 1): 29}
    assert rate_limit(begin, latest, states, 100, None) == latest
    per_record = states[("t", 0)].bytes_per_record()
    capped = rate_limit(begin, latest, states, None, int(per_record * 10))
    assert 0 < capped[("t", 0)] <= 10 and capped[("t", 1)] >= 29


def test_running_stream_sees_new_partitions_and_caps_batches(topic_t):
    from pyspark.sql.types import StructType

    from sparklog.metadata import TopicStore
    from sparklog.spark.source.stream import SparklogStreamReader
    from tests.support.logdata import append_records, record

    options = {"path": topic_t, "subscribe": "t", "startingOffsets": "earliest",
               "maxOffsetsPerTrigger": "40"}
    reader = SparklogStreamReader(parse_options(options, streaming=True), StructType())
    start = reader.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    first = reader.latestOffset()
    assert first == {"t": {"0": 20, "1": 20}}  # 40 records shared by backlog
    assert spans(reader.partitions(start, first)) == [("t", 0, 0, 20), ("t", 1, 0, 20)]
    store = TopicStore(topic_t)
    store.alter_topic("t", partitions=3)
    append_records(store, "t", 2, [record("t", 2, o) for o in range(5)])
    second = reader.latestOffset()  # the same reader: no restart, no new process
    assert second == {"t": {"0": 30, "1": 30, "2": 5}}  # 25 records left: under the cap
    assert spans(reader.partitions(first, second)) == \
        [("t", 0, 20, 30), ("t", 1, 20, 30), ("t", 2, 0, 5)]
    reader.stop()


def test_capped_stream_reports_its_uncapped_end_when_the_jvm_asks(topic_t):
    """With the JVM provider's internal option, a capped stream's latestOffset() answer
    also carries the offsets available now, uncapped, under "@available" (the end of an
    AvailableNow run: no second, uncapped stream is needed to find it); the capped part
    and the stream's position are those of the answer without the option, and an answer
    passed back (offsets_from_json) reads the capped offsets only. Users never see it:
    without the option, or without a cap, there is no such entry."""
    from pyspark.sql.types import StructType

    from sparklog.spark.source.options import AVAILABLE_KEY, REPORT_AVAILABLE_OPTION
    from sparklog.spark.source.stream import SparklogStreamReader, offsets_from_json

    def reader(**extra):
        options = {"path": topic_t, "subscribe": "t", "startingOffsets": "earliest", **extra}
        return SparklogStreamReader(parse_options(options, streaming=True), StructType())

    jvm = reader(maxOffsetsPerTrigger="40", **{REPORT_AVAILABLE_OPTION: "true"})
    first = jvm.latestOffset()
    assert first == {"t": {"0": 20, "1": 20}, AVAILABLE_KEY: {"t": {"0": 30, "1": 30}}}
    assert offsets_from_json(first) == {("t", 0): 20, ("t", 1): 20}
    assert jvm.latestOffset() == {"t": {"0": 30, "1": 30},
                                  AVAILABLE_KEY: {"t": {"0": 30, "1": 30}}}
    jvm.stop()
    plain = reader(maxOffsetsPerTrigger="40")
    assert plain.latestOffset() == {"t": {"0": 20, "1": 20}}
    plain.stop()
    uncapped = reader(**{REPORT_AVAILABLE_OPTION: "true"})
    assert uncapped.latestOffset() == {"t": {"0": 30, "1": 30}}
    uncapped.stop()


# --- data loss -------------------------------------------------------------------------------------


def delete_before(root, topic, partition, offset):
    cat = StorageCatalog(root)
    plog = PartitionLog.open(cat.store.fileio, cat.store.partition_dir(topic, partition),
                             {"segment.bytes": "2000"})
    try:
        plog.delete_segments_before(offset)
    finally:
        plog.close()


def test_data_loss_at_planning_and_during_the_scan(topic_t, caplog):
    cat = StorageCatalog(topic_t)
    plan_first = plan_batch(cat, opts(topic_t, startingOffsets='{"t":{"0":0,"1":-2}}'))
    delete_before(topic_t, "t", 0, 20)
    o = opts(topic_t, startingOffsets='{"t":{"0":0,"1":-2}}')
    with pytest.raises(OffsetOutOfRangeError, match=r"topic 't' partition 0: offsets \[0, 20\)"):
        plan_batch(StorageCatalog(topic_t), o)
    o = opts(topic_t, startingOffsets='{"t":{"0":0,"1":-2}}', failOnDataLoss="false")
    with caplog.at_level(logging.WARNING):
        assert spans(plan_batch(StorageCatalog(topic_t), o))[0] == ("t", 0, 20, 30)
    assert "offsets [0, 20) are no longer available" in caplog.text
    # retention raced a planned scan: the task fails, or skips and warns
    target = arrow_schema(spark_schema(None))
    r0 = plan_first[0]
    assert (r0.partition, r0.start) == (0, 0)
    with pytest.raises(OffsetOutOfRangeError, match=r"topic 't' partition 0: offsets \[0, 20\)"):
        list(read_range(r0, target))
    r0.fail_on_data_loss = False
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        got = pa.Table.from_batches(list(read_range(r0, target)))
    assert got.column("offset").to_pylist() == list(range(20, 30))
    assert "deleted while the scan ran" in caplog.text
