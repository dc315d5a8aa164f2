"""The same Spark job on Apache Kafka and on sparklog: code written for
``format("kafka")`` (a batch with JSON offsets, timestamps and headers; a stream with
``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger``) runs unchanged against a live Kafka
broker (tests/support/kafkaserver.py) and a sparklog broker process, only the format and the
server address swapped, over the same records; chispa compares the results.

The remaining differences between the two sources are listed in docs/spark.md ("Beside
Spark's Kafka source").
"""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
chispa = pytest.importorskip("chispa", reason="chispa is not installed")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from pyspark.sql import functions as F

from sparklog import Admin, NewTopic, Producer
from sparklog.spark.jvm import class_loaded
from tests.support.sparkread import assert_same

pytestmark = [pytest.mark.spark, pytest.mark.peers]

TOPIC = "same-job"
PARTITIONS = 2
COUNT = 40  # records per partition
# an hour ago, whole seconds: within both brokers' retention (7 days by default), where a
# fixed date in the past would be deleted by Kafka's retention check during the run
BASE_TS = (time.time_ns() // 10**9 - 3600) * 1000


def records():
    """(partition, key, value, timestamp ms, headers) of every record, in offset order."""
    for o in range(COUNT):
        for p in range(PARTITIONS):
            key = None if o % 7 == 3 else f"k-{p}-{o}".encode()
            headers = [("trace", f"t{o}".encode()), ("part", str(p).encode())]
            yield p, key, f"value {p}/{o}".encode() * (1 + o % 3), BASE_TS + 1000 * o + p, \
                headers


@pytest.fixture(scope="module")
def kafka_topic(kafka_broker):  # noqa: F811
    """The records on the Kafka broker (explicit partitions and CreateTime timestamps)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as KafkaNewTopic

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for future in admin.create_topics([KafkaNewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(60)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_broker.bootstrap,
                                         "acks": "all", "linger.ms": 5})
    for p, key, value, ts, headers in records():
        producer.produce(TOPIC, value, key, partition=p, timestamp=ts, headers=headers)
    assert producer.flush(60) == 0, "Kafka did not acknowledge every record"
    return kafka_broker.bootstrap


@pytest.fixture(scope="module")
def sparklog_topic(broker):
    """The same records on a sparklog broker process."""
    with Admin(broker.address) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])
    with Producer(broker.address, acks="all", linger_ms=5) as producer:
        futures = [producer.send(TOPIC, value, key=key, headers=headers, partition=p,
                                 timestamp=ts)
                   for p, key, value, ts, headers in records()]
        producer.flush()
        for f in futures:
            f.get(timeout=30)
    return broker.address


@pytest.fixture(scope="module")
def sources(sl_spark, kafka_topic, sparklog_topic):
    """format name -> server address, for the job to swap."""
    if not class_loaded(sl_spark, "org.apache.spark.sql.kafka010.KafkaSourceProvider"):
        pytest.skip("Spark's Kafka source is not on the session's classpath (the "
                    "spark-kafka jars did not resolve: see the run's stderr)")
    return {"kafka": kafka_topic, "sparklog": sparklog_topic}


# --- the job, as written for Spark's Kafka source ---------------------------------------


def batch_job(spark, fmt, servers):
    """A batch over JSON offset bounds, with headers, decoded and projected."""
    df = (spark.read.format(fmt)
          .option("kafka.bootstrap.servers", servers)
          .option("subscribe", TOPIC)
          .option("startingOffsets", json.dumps({TOPIC: {"0": 5, "1": -2}}))
          .option("endingOffsets", json.dumps({TOPIC: {"0": -1, "1": 33}}))
          .option("includeHeaders", "true")
          .load())
    return df.select(F.col("key").cast("string").alias("k"), F.col("value").cast("string").alias("v"),
                     "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def timestamp_job(spark, fmt, servers):
    """A batch bounded by timestamps (Kafka's ListOffsets by time), aggregated."""
    df = (spark.read.format(fmt)
          .option("kafka.bootstrap.servers", servers)
          .option("subscribe", TOPIC)
          .option("startingTimestamp", str(BASE_TS + 10_000))
          .option("endingOffsetsByTimestamp",
                  json.dumps({TOPIC: {"0": BASE_TS + 30_000, "1": BASE_TS + 20_001}}))
          .load())
    return (df.where(F.col("timestamp") >= F.timestamp_millis(F.lit(BASE_TS + 12_000)))
            .groupBy("partition")
            .agg(F.count("*").alias("n"), F.min("offset").alias("first"),
                 F.max("offset").alias("last"), F.sum(F.length("value")).alias("bytes")))


def stream_job(spark, fmt, servers, out, checkpoint):
    """A capped AvailableNow stream into Parquet; returns the rows of each batch."""
    df = (spark.readStream.format(fmt)
          .option("kafka.bootstrap.servers", servers)
          .option("subscribe", TOPIC)
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "16")
          .load())
    query = (df.selectExpr("CAST(key AS STRING) AS k", "value", "partition", "offset",
                           "timestamp")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    progress = [json.loads(p.json) for p in query.recentProgress]
    return [p["numInputRows"] for p in progress if p["numInputRows"]]


# --- the comparisons ----------------------------------------------------------------------


def test_batch_with_json_offsets_and_headers_gives_the_same_rows(sl_spark, sources):
    got = {fmt: batch_job(sl_spark, fmt, servers) for fmt, servers in sources.items()}
    assert got["kafka"].count() == (COUNT - 5) + 33
    assert_same(got["sparklog"], got["kafka"])


def test_batch_bounded_by_timestamps_gives_the_same_aggregate(sl_spark, sources):
    got = {fmt: timestamp_job(sl_spark, fmt, servers) for fmt, servers in sources.items()}
    assert got["kafka"].count() == PARTITIONS
    assert_same(got["sparklog"], got["kafka"])


def test_capped_available_now_stream_drains_the_same_rows_in_several_batches(
        sl_spark, sources, tmp_path):
    sizes, outputs = {}, {}
    for fmt, servers in sources.items():
        out = str(tmp_path / fmt / "out")
        sizes[fmt] = stream_job(sl_spark, fmt, servers, out, str(tmp_path / fmt / "ckpt"))
        outputs[fmt] = sl_spark.read.parquet(out)
    for fmt, per_batch in sizes.items():
        assert sum(per_batch) == PARTITIONS * COUNT, (fmt, per_batch)
        assert max(per_batch) <= 16 and len(per_batch) >= PARTITIONS * COUNT // 16, \
            (fmt, per_batch)
    assert_same(outputs["sparklog"], outputs["kafka"])
