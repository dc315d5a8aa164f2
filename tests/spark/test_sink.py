"""Spark's Kafka sink's write semantics for ``format("sparklog")`` against a real broker
process: ``writeStream`` with a checkpoint (a topic-to-topic stream, restarted from its
checkpoint), the ``topic`` column routing rows and the ``topic`` option overriding it, and
a frame read from a topic written back with all its columns (those the sink does not
take are ignored, as Spark's Kafka sink ignores them)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from pyspark.sql import functions as F

from sparklog.clients.producer import Producer

pytestmark = pytest.mark.spark


def produce(broker, topic, start, stop, partitions=2):
    """Records ``start..stop-1`` of ``topic``: key k<i>, value v<i>, a header h=<i>, in
    partition i % partitions, each with its own timestamp."""
    with Producer(broker.address, linger_ms=0) as producer:
        futures = [producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode(),
                                 headers=[("h", str(i).encode())], partition=i % partitions,
                                 timestamp_ms=1_700_000_000_000 + i)
                   for i in range(start, stop)]
        for future in futures:
            future.get(30)


def read(spark, broker, topic):
    """The records of ``topic`` as (partition, key, value, headers, timestamp ms) rows,
    sorted."""
    df = (spark.read.format("sparklog").option("kafka.bootstrap.servers", broker.address)
          .option("subscribe", topic).option("includeHeaders", "true").load())
    return sorted(
        (r.partition, bytes(r.key), bytes(r.value),
         tuple((h.key, bytes(h.value)) for h in r.headers or ()),
         int(r.timestamp.timestamp() * 1000))
        for r in df.collect())


def want(start, stop, suffix=b"", partitions=2):
    """What :func:`read` gives for records ``start..stop-1`` of :func:`produce`."""
    return sorted((i % partitions, f"k{i}".encode(), f"v{i}".encode() + suffix,
                   (("h", str(i).encode()),), 1_700_000_000_000 + i)
                  for i in range(start, stop))


def run_copy(spark, broker, checkpoint):
    """readStream sparklog ``src`` -> value + "!" -> writeStream sparklog ``dst`` (the
    ``topic`` option, over the source's ``topic`` column), AvailableNow, from the
    checkpoint; every column of the read frame is passed to the sink."""
    df = (spark.readStream.format("sparklog").option("kafka.bootstrap.servers", broker.address)
          .option("subscribe", "src").option("startingOffsets", "earliest")
          .option("includeHeaders", "true").load()
          .withColumn("value", F.concat(F.col("value"), F.lit(b"!"))))
    query = (df.writeStream.format("sparklog")
             .option("kafka.bootstrap.servers", broker.address).option("topic", "dst")
             .option("kafka.linger.ms", "0").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, query.exception()


def test_stream_copies_a_topic_and_resumes_from_its_checkpoint(sl_spark, broker, admin,
                                                               tmp_path):
    admin.create_topic("src", partitions=2)
    admin.create_topic("dst", partitions=2)
    produce(broker, "src", 0, 20)
    checkpoint = str(tmp_path / "ckpt")
    run_copy(sl_spark, broker, checkpoint)
    assert read(sl_spark, broker, "dst") == want(0, 20, b"!")
    # restarted from its checkpoint, the query writes only what came since: none lost,
    # none written twice (no failure in between)
    produce(broker, "src", 20, 30)
    run_copy(sl_spark, broker, checkpoint)
    assert read(sl_spark, broker, "dst") == want(0, 30, b"!")


def test_topic_column_routes_rows_and_the_topic_option_overrides_it(sl_spark, broker, admin):
    for topic in ("route-a", "route-b", "route-c"):
        admin.create_topic(topic, partitions=1)
    df = sl_spark.createDataFrame(
        [(f"route-{'ab'[i % 2]}", f"v{i}") for i in range(10)], "topic string, value string")
    df.write.format("sparklog").option("kafka.bootstrap.servers", broker.address) \
        .mode("append").save()

    def values(topic):
        got = (sl_spark.read.format("sparklog").option("kafka.bootstrap.servers", broker.address)
               .option("subscribe", topic).load())
        return sorted(bytes(r.value) for r in got.collect())

    assert values("route-a") == sorted(f"v{i}".encode() for i in range(0, 10, 2))
    assert values("route-b") == sorted(f"v{i}".encode() for i in range(1, 10, 2))
    df.write.format("sparklog").option("kafka.bootstrap.servers", broker.address) \
        .option("topic", "route-c").mode("append").save()
    assert values("route-c") == sorted(f"v{i}".encode() for i in range(10))


def test_write_of_a_frame_read_from_a_topic(sl_spark, broker, admin):
    """All the columns of a read (offset, timestampType... included) are accepted; the
    copy has the records' partitions, keys, values, headers and timestamps."""
    admin.create_topic("orig", partitions=2)
    admin.create_topic("copy", partitions=2)
    produce(broker, "orig", 0, 12)
    df = (sl_spark.read.format("sparklog").option("kafka.bootstrap.servers", broker.address)
          .option("subscribe", "orig").option("includeHeaders", "true").load())
    assert {"offset", "timestampType", "topic", "partition", "timestamp"} <= set(df.columns)
    df.write.format("sparklog").option("kafka.bootstrap.servers", broker.address) \
        .option("topic", "copy").mode("append").save()
    assert read(sl_spark, broker, "copy") == want(0, 12)


def test_columns_a_topic_does_not_take_are_ignored_but_its_own_are_required():
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from sparklog.errors import SchemaMismatchError
    from sparklog.spark.sink import check_schema, ignored_columns, taken_columns

    read_frame = StructType([
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestampType", IntegerType()),
        StructField("extra", StringType())])
    check_schema(read_frame, "t", {"t": None})
    assert ignored_columns(read_frame.fieldNames(), None) == \
        ["offset", "timestampType", "extra"]
    assert taken_columns(read_frame.fieldNames(), None) == ["key", "value"]
    # the topic option wins: the topic column is not even type-checked then
    check_schema(StructType([StructField("value", BinaryType()),
                             StructField("topic", LongType())]), "t", {"t": None})
    with pytest.raises(SchemaMismatchError, match="column 'topic' must be of type string"):
        check_schema(StructType([StructField("value", BinaryType()),
                                 StructField("topic", LongType())]), None, {})
    import pyarrow as pa

    typed = pa.schema([("id", pa.int64()), ("name", pa.string())])
    with pytest.raises(SchemaMismatchError, match=r"\['name'\] missing"):
        check_schema(StructType([StructField("id", LongType()),
                                 StructField("offset", LongType())]), "t", {"t": typed})


def test_complete_mode_appends_where_a_batch_overwrite_is_refused(broker, admin):
    """Spark asks the streaming sink to truncate in the ``complete`` output mode; Spark's
    Kafka sink appends then, and so does this one, while a batch ``overwrite`` is
    refused (a log cannot be truncated)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from sparklog.errors import InvalidArgumentError
    from sparklog.spark.sink import SparklogStreamWriter, SparklogWriter

    admin.create_topic("complete", partitions=1)
    options = {"kafka.bootstrap.servers": broker.address, "topic": "complete"}
    schema = StructType([StructField("value", BinaryType())])
    SparklogStreamWriter(options, schema, overwrite=True)
    with pytest.raises(InvalidArgumentError, match="overwrite is not supported"):
        SparklogWriter(options, schema, overwrite=True)
