"""The Spark source and sink against a real broker process (``bootstrap.servers``):
offsets from DescribeLog, data from storage, writes through the Producer, group offsets
published by a stream's commit."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
chispa = pytest.importorskip("chispa", reason="chispa is not installed")

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from sparklog.clients.admin import Admin
from sparklog.errors import SchemaMismatchError
from tests.support.brokerproc import BrokerProcess
from tests.support.logdata import BASE_TS, expected_rows, make_topic
from tests.support.sparkread import (
    KAFKA_SCHEMA,
    KAFKA_SCHEMA_HEADERS,
    assert_same,
    output,
    run_available_now,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-broker")
    (root / "log").mkdir()
    storage = (root / "log").as_uri()
    # topics written straight to storage before the broker starts: it serves them
    make_topic(storage, "pre", partitions=2, count=25, headers=True)
    with BrokerProcess(storage, log_path=root / "broker.log") as proc:
        proc.storage = storage
        yield proc


@pytest.fixture(scope="module")
def admin(broker):
    with Admin(broker.address) as a:
        yield a


def kafka_read(spark, broker, **options):
    reader = spark.read.format("sparklog").option("kafka.bootstrap.servers", broker.address)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_kafka_options_through_the_broker(sl_spark, broker):
    # a format("kafka") job's options, unchanged but for the format
    df = kafka_read(sl_spark, broker, subscribe="pre", startingOffsets='{"pre":{"0":20,"1":-2}}',
                    endingOffsets='{"pre":{"0":-1,"1":3}}', includeHeaders="true",
                    failOnDataLoss="true", **{"kafka.security.protocol": "PLAINTEXT"})
    assert df.schema == KAFKA_SCHEMA_HEADERS
    # timestamps through the broker's ListOffsets (record o of partition p: BASE_TS+1000o+p)
    by_time = kafka_read(sl_spark, broker, subscribe="pre", includeHeaders="true",
                         startingTimestamp=BASE_TS + 22_000, endingTimestamp=BASE_TS + 24_000)
    want = expected_rows("pre", {0: range(20, 25), 1: range(3)}, headers=True) + \
        expected_rows("pre", {0: range(22, 24), 1: range(22, 24)}, headers=True)
    assert_same(df.unionByName(by_time), sl_spark.createDataFrame(want, KAFKA_SCHEMA_HEADERS))


def test_count_pushed_down_through_the_broker(jspark, broker):
    """One planner in both modes: the Python planner's ranges of a broker-mode read
    (offsets from the broker's DescribeLog) are counted by the JVM from the files, so
    count() is answered on the driver as in path mode (before, only the JVM's own
    path-mode plans were counted)."""
    from tests.spark.test_count_pushdown import check

    assert check(kafka_read(jspark, broker, subscribe="pre"), "driver") == 2 * 25
    cut = kafka_read(jspark, broker, subscribe="pre", startingOffsets='{"pre":{"0":20,"1":-2}}')
    assert check(cut, "driver") == 5 + 25


def test_write_read_round_trip(sl_spark, broker, admin):
    admin.create_topic("w", partitions=2)
    rows = [(f"k{i}".encode(), f"v{i}", [("h", str(i).encode())] if i % 2 else None, i % 2)
            for i in range(12)]
    schema = StructType([
        StructField("key", BinaryType()), StructField("value", StringType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())]))),
        StructField("partition", IntegerType())])
    (sl_spark.createDataFrame(rows, schema).write.format("sparklog")
     .option("kafka.bootstrap.servers", broker.address).option("topic", "w")
     .option("kafka.linger.ms", "0").mode("append").save())
    got = kafka_read(sl_spark, broker, subscribe="w", includeHeaders="true")
    got = got.select("key", "value", "headers", "partition", "offset")
    assert sorted((r.partition, r.offset) for r in got.collect()) == \
        [(p, o) for p in (0, 1) for o in range(6)]
    want = sl_spark.createDataFrame(
        [(k, v.encode(), h, p) for k, v, h, p in rows],
        StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                    schema["headers"], StructField("partition", IntegerType())]))
    assert_same(got.drop("offset"), want)


def test_typed_topic_write_and_read(sl_spark, broker, admin):
    arrow = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    admin.create_topic("typed-w", partitions=1, schema=arrow)
    schema = StructType([StructField("id", LongType()), StructField("name", StringType()),
                         StructField("score", DoubleType())])
    rows = [(i, f"n{i}", i * 1.5) for i in range(7)]
    (sl_spark.createDataFrame(rows, schema).select("score", "id", "name")  # any column order
     .coalesce(1).write.format("sparklog")
     .option("bootstrap.servers", broker.address).option("topic", "typed-w").mode("append")
     .save())
    got = kafka_read(sl_spark, broker, subscribe="typed-w")
    assert got.schema.fieldNames() == ["id", "name", "score", "topic", "partition", "offset",
                                       "timestamp", "timestampType"]
    assert_same(got.select("id", "name", "score", "offset"),
                sl_spark.createDataFrame([(*r, r[0]) for r in rows], StructType(
                    schema.fields + [StructField("offset", LongType())])))
    # a DataFrame that does not fit the typed topic is refused before anything is sent
    bad = sl_spark.createDataFrame([(1, "x")], "id long, label string")
    with pytest.raises(Exception, match="do not match the columns"):
        bad.write.format("sparklog").option("bootstrap.servers", broker.address) \
            .option("topic", "typed-w").mode("append").save()
    latest = admin.list_offsets({("typed-w", 0): "latest"})
    assert [v.offset for v in latest.values()] == [7]


def test_write_with_the_default_save_mode_appends(jspark, broker, admin):
    """``save()`` without ``mode()`` (Spark's ErrorIfExists) appends, as Spark's Kafka sink
    does; a second save appends again (a topic that exists is not an error)."""
    admin.create_topic("dflt", partitions=1)
    df = jspark.createDataFrame([(f"v{i}",) for i in range(3)], "value string")
    for _ in range(2):
        (df.coalesce(1).write.format("sparklog").option("kafka.bootstrap.servers", broker.address)
         .option("topic", "dflt").save())
    got = kafka_read(jspark, broker, subscribe="dflt").select("value", "offset")
    assert sorted((r.offset, bytes(r.value)) for r in got.collect()) == \
        [(o, f"v{o % 3}".encode()) for o in range(6)]


def test_bad_schema_and_overwrite_write_nothing(sl_spark, broker, admin):
    admin.create_topic("guarded", partitions=1)
    no_value = sl_spark.createDataFrame([(b"k",)], "key binary")
    with pytest.raises(Exception, match="needs a value column"):
        no_value.write.format("sparklog").option("bootstrap.servers", broker.address) \
            .option("topic", "guarded").mode("append").save()
    ok = sl_spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="overwrite is not supported"):
        ok.write.format("sparklog").option("bootstrap.servers", broker.address) \
            .option("topic", "guarded").mode("overwrite").save()
    with pytest.raises(Exception, match="ignore is not supported"):
        ok.write.format("sparklog").option("bootstrap.servers", broker.address) \
            .option("topic", "guarded").mode("ignore").save()
    latest = admin.list_offsets({("guarded", 0): "latest"})
    assert [v.offset for v in latest.values()] == [0]
    with pytest.raises(SchemaMismatchError):
        from sparklog.spark.sink import check_schema

        check_schema(no_value.schema, "guarded", {"guarded": None})


def test_stream_publishes_group_offsets(sl_spark, broker, admin, tmp_path):
    from sparklog.clients.producer import Producer

    def run():
        df = (sl_spark.readStream.format("sparklog").option("bootstrap.servers", broker.address)
              .option("subscribe", "pre").option("startingOffsets", "earliest")
              .option("kafka.group.id", "spark-lag").load())
        q = run_available_now(df, str(tmp_path / "out"), str(tmp_path / "ckpt"))
        assert q.exception() is None

    def committed():
        got = admin.list_consumer_group_offsets("spark-lag")
        return {(tp.topic, tp.partition): om.offset for tp, om in got.items()}

    run()
    want = expected_rows("pre", {0: range(25), 1: range(25)})
    assert_same(output(sl_spark, str(tmp_path / "out")),
                sl_spark.createDataFrame(want, KAFKA_SCHEMA))
    # the run drained the backlog: the group shows what it processed, although Spark
    # never commits the last batch of an AvailableNow run to its source
    assert committed() == {("pre", 0): 25, ("pre", 1): 25}
    with Producer(broker.address, linger_ms=0) as producer:
        for p in (0, 1):
            producer.send("pre", b"more", partition=p).get(30)
    run()
    assert committed() == {("pre", 0): 26, ("pre", 1): 26}
    assert output(sl_spark, str(tmp_path / "out")).count() == 52
