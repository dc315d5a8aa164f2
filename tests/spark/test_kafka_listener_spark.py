"""Spark and the broker's Kafka listener (docs/kafka-protocol.md): Spark's own Kafka
source and sink (``format("kafka")``, spark-sql-kafka-0-10 from Maven) pointed at a
sparklog broker's Kafka listener: reading gives the same rows as ``format("sparklog")`` on
the same topic, and what the sink writes ``format("sparklog")`` reads back; and what a Kafka client (kcat) produced is read by Spark straight from the storage root,
with no broker running."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest

from tests.support.kafkaconn import create_with_librdkafka, start_with_kafka_listener

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from pyspark.sql import functions as F  # noqa: E402

from sparklog.server import EmbeddedBroker  # noqa: E402
from sparklog.spark.jvm import class_loaded  # noqa: E402
from tests.support.sparkread import assert_same, load  # noqa: E402

pytestmark = [pytest.mark.spark]

try:  # the 3-broker cluster of the Kafka listener's cluster tests (it needs kazoo)
    from tests.server.test_kafka_listener_cluster import cluster  # noqa: F401 (a fixture)
except pytest.skip.Exception as _missing:
    _why = str(_missing)

    @pytest.fixture(scope="module")
    def cluster():
        pytest.skip(_why)

TOPIC = "via-kafka"
PARTITIONS = 3
COUNT = 60  # records per partition
BASE_TS = (time.time_ns() // 10**9 - 3600) * 1000


def _start(root) -> EmbeddedBroker:
    return start_with_kafka_listener(root, num_partitions=PARTITIONS)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker with a Kafka listener; TOPIC written through it by librdkafka (explicit
    partitions, CreateTime timestamps, keys, null keys, headers, lz4 batches)."""
    b = _start(tmp_path_factory.mktemp("kafka-listener-spark"))
    kafka_address = b.broker.listener_addresses["KAFKA"]
    create_with_librdkafka(kafka_address, TOPIC, PARTITIONS)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_address, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 5,
                                         "compression.type": "lz4"})
    for o in range(COUNT):
        for p in range(PARTITIONS):
            key = None if o % 9 == 4 else f"k-{p}-{o}".encode()
            producer.produce(TOPIC, f"value {p}/{o}".encode() * (1 + o % 4), key, partition=p,
                             timestamp=BASE_TS + 1000 * o + p,
                             headers=[("trace", f"t{o}".encode()), ("p", str(p).encode())])
    assert producer.flush(60) == 0, "the broker did not acknowledge every record"
    yield b
    b.stop()


@pytest.fixture(scope="module")
def kafka_source(sl_spark):
    if not class_loaded(sl_spark, "org.apache.spark.sql.kafka010.KafkaSourceProvider"):
        pytest.skip("Spark's Kafka source is not on the session's classpath (the "
                    "spark-kafka jars did not resolve: see the run's stderr)")
    return sl_spark


def _read(spark, fmt, servers, **options):
    reader = (spark.read.format(fmt).option("kafka.bootstrap.servers", servers)
              .option("subscribe", TOPIC).option("includeHeaders", "true"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_kafka_source_on_the_kafka_listener_gives_the_sparklog_rows(kafka_source, broker):
    """The whole topic, then JSON offset bounds, then timestamp bounds (ListOffsets by
    time): format("kafka") on the Kafka listener and format("sparklog") on the sparklog
    listener give the same rows, headers and timestamps included."""
    spark = kafka_source
    servers = {"kafka": broker.broker.listener_addresses["KAFKA"],
               "sparklog": broker.address}
    whole = {fmt: _read(spark, fmt, s) for fmt, s in servers.items()}
    assert whole["kafka"].count() == PARTITIONS * COUNT
    assert_same(whole["sparklog"], whole["kafka"])
    bounded = {fmt: _read(spark, fmt, s, startingOffsets=f'{{"{TOPIC}":{{"0":5,"1":-2,"2":7}}}}',
                          endingOffsets=f'{{"{TOPIC}":{{"0":-1,"1":33,"2":50}}}}')
               for fmt, s in servers.items()}
    assert bounded["kafka"].count() == (COUNT - 5) + 33 + 43
    assert_same(bounded["sparklog"], bounded["kafka"])
    by_time = {fmt: _read(spark, fmt, s, startingTimestamp=str(BASE_TS + 10_000))
               .groupBy("partition").agg(F.count("*").alias("n"), F.min("offset").alias("first"))
               for fmt, s in servers.items()}
    assert sorted(r["first"] for r in by_time["kafka"].collect()) == [10, 10, 10]
    assert_same(by_time["sparklog"], by_time["kafka"])


def _sink_then_read_back(spark, kafka_address: str, sparklog_address: str, topic: str,
                         client: dict[str, str] | None = None):
    """A batch ``df.write.format("kafka")`` through ``kafka_address`` writes keyed,
    null-keyed rows with headers to chosen partitions of ``topic`` (PARTITIONS, made by
    the caller); ``format("sparklog")`` through ``sparklog_address`` reads the same rows
    back, and the same rows (offsets and timestamps included) as ``format("kafka")``
    through ``kafka_address``. ``client``: the Kafka client settings (security) of the
    sink and of ``format("kafka")``, given to Spark as options prefixed ``kafka.``."""
    options = {f"kafka.{k}": v for k, v in (client or {}).items()}
    rows = [(None if i % 7 == 3 else f"key {i}".encode(), f"value {i}".encode() * (1 + i % 3),
             i % PARTITIONS, [("n", str(i).encode()), ("from", b"spark")]) for i in range(300)]
    written = spark.createDataFrame(rows, "key binary, value binary, partition int, "
                                          "headers array<struct<key: string, value: binary>>")
    (written.repartition(4).write.format("kafka").options(**options)
     .option("kafka.bootstrap.servers", kafka_address).option("topic", topic).save())
    read = {fmt: (spark.read.format(fmt).options(**opts)
                  .option("kafka.bootstrap.servers", servers)
                  .option("subscribe", topic).option("includeHeaders", "true").load())
            for fmt, servers, opts in (("sparklog", sparklog_address, {}),
                                       ("kafka", kafka_address, options))}
    assert_same(read["sparklog"].select("key", "value", "partition", "headers"), written)
    assert_same(read["sparklog"], read["kafka"])


def test_kafka_sink_writes_through_the_kafka_listener_and_sparklog_reads_the_rows(
        kafka_source, broker):
    """A batch ``df.write.format("kafka")`` (Spark's Kafka sink: its idempotent Java
    producer) with ``kafka.bootstrap.servers`` on the Kafka listener; what it wrote,
    ``format("sparklog")`` on the sparklog listener reads back, and ``format("kafka")``
    on the Kafka listener reads the same (:func:`_sink_then_read_back`)."""
    kafka_address = broker.broker.listener_addresses["KAFKA"]
    create_with_librdkafka(kafka_address, "written-by-spark", PARTITIONS)
    _sink_then_read_back(kafka_source, kafka_address, broker.address, "written-by-spark")


@pytest.mark.zookeeper
def test_kafka_sink_and_source_across_a_cluster(kafka_source, cluster):  # noqa: F811
    """The same through a 3-broker cluster on ZooKeeper (the cluster of
    tests/server/test_kafka_listener_cluster.py): the sink bootstraps from broker 1's
    Kafka listener and writes to the leaders on all three; format("sparklog") reads
    through the cluster's sparklog listeners, format("kafka") through broker 2's Kafka
    listener."""
    kafka_addresses = {i: b.kafka_address for i, b in cluster.brokers.items()}
    spark = kafka_source
    topic = "written-across-the-cluster"
    create_with_librdkafka(kafka_addresses[1], topic, PARTITIONS)
    _sink_then_read_back(spark, kafka_addresses[1], cluster.bootstrap, topic)
    assert {cluster.leader_of(topic, p) for p in range(PARTITIONS)} == {1, 2, 3}
    again = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_addresses[2])
             .option("subscribe", topic).load())
    assert again.count() == 300


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("storage", ["file", "hdfs"])
def test_kcat_records_read_by_spark_from_storage_without_a_broker(sl_spark, tmp_path,
                                                                  request, storage):
    """kcat writes keyed lines with headers through the Kafka listener of a broker whose
    storage root is local or in HDFS (the run's HDFS cluster); the broker stops;
    format("sparklog") with the ``path`` option reads them from the storage root: the
    same keys, values, headers and offsets as kcat's own consumer saw."""
    if storage == "hdfs":
        root = f"{request.getfixturevalue('hdfs_env').hdfs_uri}/kcat-{uuid.uuid4().hex[:8]}"
    else:
        (tmp_path / "log").mkdir()
        root = (tmp_path / "log").as_uri()
    b = _start(root)
    try:
        address = b.broker.listener_addresses["KAFKA"]
        lines = "\n".join(f"key{i}:line {i}" for i in range(50)) + "\n"
        subprocess.run(["kcat", "-b", address, "-P", "-t", "kc", "-K", ":", "-p", "0",
                        "-H", "origin=kcat", "-z", "snappy"],
                       input=lines.encode(), check=True, timeout=60)
        seen = subprocess.run(["kcat", "-b", address, "-C", "-t", "kc", "-o", "beginning",
                               "-e", "-f", "%o %k %s\n"], capture_output=True, check=True,
                              timeout=60).stdout.decode().splitlines()
    finally:
        b.stop()
    assert seen == [f"{i} key{i} line {i}" for i in range(50)]
    df = load(sl_spark, root, subscribe="kc", includeHeaders="true")
    rows = sorted(df.select(F.col("offset"), F.col("key").cast("string").alias("k"),
                            F.col("value").cast("string").alias("v"), "partition",
                            "headers").collect(), key=lambda r: r["offset"])
    assert [(r["offset"], r["k"], r["v"], r["partition"]) for r in rows] == \
        [(i, f"key{i}", f"line {i}", 0) for i in range(50)]
    assert all([(h["key"], bytes(h["value"])) for h in r["headers"]] == [("origin", b"kcat")]
               for r in rows)
