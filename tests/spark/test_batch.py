"""spark.read.format("sparklog") on a real local Spark session, compared with chispa
against the rows the log holds. Several reads share one Spark action (a union tagged by
case) to keep the suite fast."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
chispa = pytest.importorskip("chispa", reason="chispa is not installed")

from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, LongType, StringType, StructField, StructType

from sparklog.metadata import TopicStore
from sparklog.storage import open_fileio
from tests.support.logdata import BASE_TS, append_frames, expected_rows, make_topic, ts
from tests.support.sparkread import KAFKA_SCHEMA, KAFKA_SCHEMA_HEADERS, assert_same, load

pytestmark = pytest.mark.spark


def tagged(spark, cases: dict, schema=KAFKA_SCHEMA):
    """Union of DataFrames tagged with their case name, and its expected counterpart."""
    got = None
    expected = []
    for name, (df, rows) in cases.items():
        df = df.withColumn("case", F.lit(name))
        got = df if got is None else got.unionByName(df)
        expected += [(*row, name) for row in rows]
    want = spark.createDataFrame(expected, StructType(schema.fields + [
        StructField("case", StringType(), False)]))
    return got, want


def test_offset_specs_and_empty_ranges(sl_spark, storage_root):
    make_topic(storage_root, "t", partitions=2, count=30, config={"segment.bytes": "3000"})
    TopicStore(storage_root, open_fileio(storage_root)).create_topic("empty", 1)
    r = storage_root
    cases = {
        "default": (load(sl_spark, r, subscribe="t"),
                    expected_rows("t", {0: range(30), 1: range(30)})),
        "earliest-latest": (load(sl_spark, r, subscribe="t", startingOffsets="earliest",
                                 endingOffsets="latest"),
                            expected_rows("t", {0: range(30), 1: range(30)})),
        "json": (load(sl_spark, r, subscribe="t", startingOffsets='{"t":{"0":5,"1":-2}}',
                      endingOffsets='{"t":{"0":-1,"1":12}}'),
                 expected_rows("t", {0: range(5, 30), 1: range(12)})),
        "assign": (load(sl_spark, r, assign='{"t":[1]}', startingOffsets='{"t":{"1":25}}'),
                   expected_rows("t", {1: range(25, 30)})),
        "start-equals-end": (load(sl_spark, r, subscribe="t",
                                  startingOffsets='{"t":{"0":30,"1":7}}',
                                  endingOffsets='{"t":{"0":30,"1":7}}'), []),
        "empty-topic": (load(sl_spark, r, subscribe="empty"), []),
    }
    assert_same(*tagged(sl_spark, cases))


def test_timestamp_specs_and_log_append_time(sl_spark, storage_root):
    make_topic(storage_root, "t", partitions=2, count=30)
    make_topic(storage_root, "appended", partitions=1, count=5, log_append_time_ms=BASE_TS + 7,
               config={"message.timestamp.type": "LogAppendTime"})
    r = storage_root
    # record o of partition p has timestamp BASE_TS + 1000*o + p
    by_ts = json.dumps({"t": {"0": BASE_TS + 4500, "1": BASE_TS + 20_001}})
    end_ts = json.dumps({"t": {"0": BASE_TS + 9000, "1": BASE_TS + 10**9}})
    appended = [(row[0], row[1], "appended", 0, row[4], ts(BASE_TS + 7), 1)
                for row in expected_rows("appended", {0: range(5)})]
    cases = {
        "startingTimestamp": (load(sl_spark, r, subscribe="t", startingTimestamp=BASE_TS + 27_000),
                              expected_rows("t", {0: range(27, 30), 1: range(27, 30)})),
        "byTimestamp": (load(sl_spark, r, subscribe="t", startingOffsetsByTimestamp=by_ts,
                             endingOffsetsByTimestamp=end_ts),
                        expected_rows("t", {0: range(5, 9), 1: range(20, 30)})),
        "endingTimestamp": (load(sl_spark, r, subscribe="t", endingTimestamp=BASE_TS + 2000),
                            expected_rows("t", {0: range(2), 1: range(2)})),
        "strategy-latest": (load(sl_spark, r, subscribe="t", startingTimestamp=BASE_TS + 10**9,
                                 startingOffsetsByTimestampStrategy="latest"), []),
        "logAppendTime": (load(sl_spark, r, subscribe="appended"), appended),
    }
    assert_same(*tagged(sl_spark, cases))


def test_pattern_subscription_with_headers(sl_spark, storage_root):
    make_topic(storage_root, "ev-a", partitions=1, count=12, headers=True)
    make_topic(storage_root, "ev-b", partitions=2, count=4)
    make_topic(storage_root, "other", partitions=1, count=3)
    df = load(sl_spark, storage_root, subscribePattern="ev-.*", includeHeaders="true")
    assert df.schema == KAFKA_SCHEMA_HEADERS
    want = expected_rows("ev-a", {0: range(12)}, headers=True) + \
        expected_rows("ev-b", {0: range(4), 1: range(4)}, headers=False)
    assert_same(df, sl_spark.createDataFrame(want, KAFKA_SCHEMA_HEADERS))


def test_typed_topic_columns_plus_metadata(sl_spark, storage_root):
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                        ("tags", pa.list_(pa.string()))])
    store = TopicStore(storage_root, open_fileio(storage_root))
    store.create_topic("typed", 1, schema=schema)
    rows = [{"id": i, "name": f"n{i}", "score": i / 4, "tags": ["a"] * (i % 3)} for i in range(9)]
    frames = [(pa.RecordBatch.from_pylist(rows[i:i + 4], schema=schema),
               [BASE_TS + j for j in range(i, min(i + 4, 9))]) for i in range(0, 9, 4)]
    append_frames(store, "typed", 0, frames)
    df = load(sl_spark, storage_root, subscribe="typed", startingOffsets='{"typed":{"0":2}}')
    want_schema = StructType([
        StructField("id", LongType()), StructField("name", StringType()),
        StructField("score", DoubleType()), StructField("tags", ArrayType(StringType())),
        *KAFKA_SCHEMA.fields[2:]])
    assert df.schema == want_schema
    want = [(r["id"], r["name"], r["score"], r["tags"], "typed", 0, r["id"],
             ts(BASE_TS + r["id"]), 0) for r in rows[2:]]
    assert_same(df, sl_spark.createDataFrame(want, want_schema))


def test_splits_and_pushdown(sl_spark, storage_root):
    make_topic(storage_root, "t", partitions=2, count=40, config={"segment.bytes": "3000"})
    r = storage_root
    by_min = load(sl_spark, r, subscribe="t", minPartitions=6)
    by_max = load(sl_spark, r, subscribe="t", maxRecordsPerPartition=7)
    pushed = load(sl_spark, r, subscribe="t").where(
        "partition = 1 AND offset >= 10 AND offset < 23")
    assert by_min.rdd.getNumPartitions() == 6
    assert by_max.rdd.getNumPartitions() == 12  # ceil(40 / 7) = 6 per partition
    assert pushed.rdd.getNumPartitions() == 1  # partition 0 pruned at planning
    everything = expected_rows("t", {0: range(40), 1: range(40)})
    cases = {"minPartitions": (by_min, everything), "maxRecords": (by_max, everything),
             "pushdown": (pushed, expected_rows("t", {1: range(10, 23)}))}
    assert_same(*tagged(sl_spark, cases))


def test_kafka_job_options_swap_in_unchanged(sl_spark, storage_root):
    make_topic(storage_root, "events", partitions=1, count=3)
    # the options of a format("kafka") job, as written for Kafka; only the format and
    # the connection (path: no broker here) change
    kafka_job = {"subscribe": "events", "startingOffsets": "earliest", "endingOffsets": "latest",
                 "failOnDataLoss": "false", "minPartitions": "1",
                 "kafka.security.protocol": "PLAINTEXT", "kafka.request.timeout.ms": "30000"}
    df = load(sl_spark, storage_root, **kafka_job)
    assert df.schema == KAFKA_SCHEMA
    with_headers = load(sl_spark, storage_root, includeHeaders="true", **kafka_job)
    assert with_headers.schema == KAFKA_SCHEMA_HEADERS
    assert [r.offset for r in df.select("offset").collect()] == [0, 1, 2]


def test_data_loss_fails_or_skips(sl_spark, storage_root):
    from sparklog.log.partition import PartitionLog

    store = make_topic(storage_root, "t", partitions=1, count=30, config={"segment.bytes": "3000"})
    plog = PartitionLog.open(store.fileio, store.partition_dir("t", 0), {"segment.bytes": "3000"})
    plog.delete_segments_before(20)
    plog.close()
    start = '{"t":{"0":0}}'
    with pytest.raises(Exception, match=r"topic 't' partition 0: offsets \[0, 20\) are no longer"):
        load(sl_spark, storage_root, subscribe="t", startingOffsets=start).collect()
    df = load(sl_spark, storage_root, subscribe="t", startingOffsets=start, failOnDataLoss="false")
    assert_same(df, sl_spark.createDataFrame(expected_rows("t", {0: range(20, 30)}), KAFKA_SCHEMA))
