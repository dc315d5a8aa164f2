"""Spark over the same records: ``format("sparklog")`` (JVM reader, storage read
directly) vs ``format("kafka")`` (Spark's Kafka source, spark-sql-kafka-0-10 from Maven,
reading through the Kafka broker) vs Parquet files of the same rows, in one local[2]
session; and a ``Trigger.AvailableNow`` + ``maxOffsetsPerTrigger`` stream draining the
whole topic into the ``noop`` sink, both sources. With an HDFS cluster
(``--spark-hdfs``), the same log and Parquet files are also read from ``hdfs://``."""

from __future__ import annotations

import tempfile
import time

PARTITIONS = 4
VALUE_BYTES = 100


def session():
    """A local[2] session with sparklog registered (JVM reader) and Spark's Kafka source."""
    from sparklog.maven import classpath
    from sparklog.spark import local_session

    return local_session("bench-peers", conf={
        "spark.jars": ",".join(classpath("spark-kafka")),
        "spark.driver.memory": "2g",
        "spark.sql.shuffle.partitions": "4"})


def fill(systems, topic: str, records: int, progress) -> None:
    """``records`` 100-byte values over :data:`PARTITIONS` partitions on both brokers
    (sparklog: ``send_batch``; Kafka: confluent-kafka, 1 MB batches, lz4 off)."""
    import pyarrow as pa
    from confluent_kafka import Producer as KafkaProducer

    from sparklog import Producer

    systems.create_topic(topic, PARTITIONS)
    rows = 100_000
    values = pa.array([(b"%012d" % i).ljust(VALUE_BYTES, b"v") for i in range(rows)],
                      pa.binary())
    with Producer(systems.sparklog, acks=1, buffer_memory=64 << 20,
                  max_request_size=4 << 20) as producer:
        futures = []
        for i in range(0, records, rows):
            n = min(rows, records - i)
            futures.append(producer.send_batch(topic, pa.table({"value": values.slice(0, n)}),
                                               partition=(i // rows) % PARTITIONS))
            progress(f"sparklog: {i + n:,} of {records:,} records")
        for f in futures:
            f.get(300)
    kp = KafkaProducer({"bootstrap.servers": systems.bootstrap, "acks": 1, "linger.ms": 20,
                        "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000})
    py_values = values.to_pylist()
    for i in range(0, records, rows):
        n = min(rows, records - i)
        part = (i // rows) % PARTITIONS
        for v in py_values[:n]:
            try:
                kp.produce(topic, v, partition=part)
            except BufferError:
                kp.poll(0.05)
                kp.produce(topic, v, partition=part)
        kp.poll(0)
        progress(f"Kafka: {i + n:,} of {records:,} records")
    if kp.flush(300):
        raise RuntimeError("Kafka did not acknowledge every record")


def frames(spark, systems, topic: str, parquet_dir: str) -> dict:
    """format name -> a DataFrame over the topic (Parquet written once from sparklog's);
    ``sparklog-path`` reads the same log by its storage root (``path``: offsets from
    storage, planned by the Python planner, no broker) where ``sparklog`` asks the broker."""
    sl = (spark.read.format("sparklog").option("kafka.bootstrap.servers", systems.sparklog)
          .option("subscribe", topic).load())
    kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", systems.bootstrap)
             .option("subscribe", topic).load())
    sl.write.mode("overwrite").parquet(parquet_dir)
    by_path = (spark.read.format("sparklog").option("path", systems.storage)
               .option("subscribe", topic).load())
    return {"sparklog": sl, "sparklog-path": by_path, "kafka": kafka,
            "parquet": spark.read.parquet(parquet_dir)}


def hdfs_frames(spark, systems, topic: str, parquet_dir: str, hdfs_uri: str) -> dict:
    """``sparklog-hdfs`` and ``parquet-hdfs``: the broker's storage root and the Parquet
    files copied to ``hdfs_uri`` (after the records are written), read from there;
    ``sparklog-hdfs`` by ``path``, so the Python planner lists and reads HDFS (through
    its planning worker's Hadoop client) and the JVM tasks read the segments from HDFS."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path
    root, parquet = f"{hdfs_uri}/sparklog", f"{hdfs_uri}/parquet"
    for src, dst in ((systems.storage, root), (parquet_dir, parquet)):
        path(dst).getFileSystem(conf).copyFromLocalFile(False, True, path(src), path(dst))
    return {"sparklog-hdfs": (spark.read.format("sparklog").option("path", root)
                              .option("subscribe", topic).load()),
            "parquet-hdfs": spark.read.parquet(parquet)}


def queries(df, t_mid):
    """query name -> a callable running it on ``df``."""
    from pyspark.sql import functions as F

    return {
        "count": lambda: df.count(),
        "aggregate over value": lambda: df.agg(F.sum(F.length("value")),
                                               F.max("value")).collect(),
        "filter on timestamp": lambda: df.where(F.col("timestamp") >= F.lit(t_mid)).count(),
    }


def midpoint(df):
    """The timestamp halfway between the first and the last record's."""
    from pyspark.sql import functions as F

    lo, hi = df.agg(F.min("timestamp"), F.max("timestamp")).first()
    return lo + (hi - lo) / 2


def timed(action) -> float:
    """Seconds ``action()`` takes."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def drain(spark, fmt: str, servers: str | None, topic: str, cap: int,
          path: str | None = None) -> tuple[float, int]:
    """(seconds, micro-batches) of an AvailableNow stream capped at ``cap`` records per
    trigger reading the whole topic into the noop sink (fresh checkpoint); ``path``
    instead of ``servers``: sparklog by its storage root."""
    import json

    reader = spark.readStream.format(fmt)
    reader = reader.option("path", path) if path else \
        reader.option("kafka.bootstrap.servers", servers)
    df = (reader.option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(cap)).load())
    with tempfile.TemporaryDirectory(prefix="bench-peers-ckpt-") as ckpt:
        start = time.perf_counter()
        query = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        seconds = time.perf_counter() - start
        if query.exception() is not None:
            raise RuntimeError(f"{fmt} stream failed: {query.exception()}")
        batches = sum(1 for p in query.recentProgress if json.loads(p.json)["numInputRows"])
    return seconds, batches
