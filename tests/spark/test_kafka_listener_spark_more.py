"""Spark's ``format("kafka")`` (spark-sql-kafka-0-10) on the broker's Kafka listener, the
checks of the client matrix (docs/kafka-protocol.md, "Clients tested") beyond
test_kafka_listener_spark.py: several topics by ``subscribe`` and ``subscribePattern``,
SCRAM over TLS, and a leader SIGKILL in cluster mode under Spark's Kafka sink. Each read
gives the same rows as ``format("sparklog")`` on the same topic.

Spark's Kafka source joins no consumer group: its driver lists and sizes the partitions
with Kafka's Admin client, its executors ``assign`` one partition each under a group id
made for the query, and it never commits (its offsets live in Spark's checkpoint). So
there is no group to rebalance and no commit to check."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from tests.spark.test_kafka_listener_spark import (  # noqa: F401 (fixtures)
    PARTITIONS,
    _sink_then_read_back,
    cluster,
    kafka_source,
)
from tests.support.waiting import wait_until

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from pyspark.sql import functions as F  # noqa: E402

from sparklog.clients.admin import Admin  # noqa: E402
from tests.support.sparkread import assert_same, load  # noqa: E402

pytestmark = [pytest.mark.spark]

try:  # the SASL_SSL broker, users and ACLs of the Kafka listener's security tests
    from tests.security.test_kafka_listener_security import PROTOCOLS, pki, secure  # noqa: F401 (fixtures)
    from tests.security.test_kafka_listener_security_clients import java_client_properties
except pytest.skip.Exception as _missing:
    _why = str(_missing)

    @pytest.fixture(scope="module")
    def secure():
        pytest.skip(_why)

    pki = secure


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _spark_read(spark, fmt: str, servers: str, **options):
    """``spark.read.format(fmt)`` through ``servers`` with ``options``."""
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", servers)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.mark.zookeeper
def test_kafka_source_reads_several_topics_by_name_and_by_pattern(kafka_source, cluster):  # noqa: F811
    """Two topics written by librdkafka through a 3-broker cluster, beside a third the
    pattern does not match: ``subscribe`` of both names and ``subscribePattern``
    (Spark's Admin client lists every topic through Metadata and keeps the matching
    ones) by format("kafka") through broker 2 give the same rows as format("sparklog")
    with the same option through the cluster's sparklog listeners."""
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = _tag()
    a, b, other = f"spark-topics-a-{tag}", f"spark-topics-b-{tag}", f"spark-other-{tag}"
    kafka_address = {i: broker.kafka_address for i, broker in cluster.brokers.items()}
    admin = AdminClient({"bootstrap.servers": kafka_address[1]})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (a, b, other)]).values():
        future.result(60)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_address[1],
                                         "enable.idempotence": True})
    for i in range(40):
        for topic in (a, b, other):
            producer.produce(topic, f"{topic} {i}".encode(), f"k{i}".encode(), partition=i % 2)
    assert producer.flush(60) == 0, "the cluster did not acknowledge every record"
    for option, value in (("subscribe", f"{a},{b}"),
                          ("subscribePattern", f"spark-topics-.-{tag}")):
        read = {fmt: _spark_read(kafka_source, fmt, servers, **{option: value})
                for fmt, servers in (("kafka", kafka_address[2]),
                                     ("sparklog", cluster.bootstrap))}
        counts = {r["topic"]: r["n"] for r in
                  read["kafka"].groupBy("topic").agg(F.count("*").alias("n")).collect()}
        assert counts == {a: 40, b: 40}, (option, counts)
        assert_same(read["sparklog"], read["kafka"])


def test_kafka_source_and_sink_with_scram_over_tls(kafka_source, secure, pki, tmp_path):  # noqa: F811
    """Spark's Kafka sink and source with SCRAM-SHA-512 over SASL_SSL (the JAAS
    ScramLoginModule, the run's CA as a PEM trust store, host name verification on), as
    alice, on the broker of the Kafka listener's security tests (ACLs on: alice may read
    and write ``shared-`` topics, and has no group to read): the sink writes keyed,
    null-keyed rows with headers to chosen partitions; format("kafka") through the
    SASL_SSL listener reads them back, the same rows as format("sparklog") through the
    broker's local listener. A wrong password fails the read with Kafka's
    SaslAuthenticationException, not a hang."""
    topic = f"shared-spark-{_tag()}"
    with Admin(secure["LOCAL"]) as admin:
        admin.create_topic(topic, PARTITIONS)
    address = secure[PROTOCOLS["SASL_SSL"]]
    client = java_client_properties(pki, "SCRAM-SHA-512")
    _sink_then_read_back(kafka_source, address, secure["LOCAL"], topic, client)
    wrong = {f"kafka.{k}": v.replace('password="', 'password="not-')
             for k, v in client.items()}
    with pytest.raises(Exception, match="SaslAuthenticationException"):
        _spark_read(kafka_source, "kafka", address, subscribe=topic, **wrong).count()


#: rows and Spark tasks of the sink's write through a leader SIGKILL
TASKS, PER_TASK = 6, 100


def _gated_rows(spark, marker: str):
    """A DataFrame of TASKS * PER_TASK rows (key ``k<i>``, value ``row <i>``, partition
    ``i % PARTITIONS``) in TASKS Spark partitions; every task but the first waits until
    the file ``marker`` exists before it gives a row, so the first task's rows are
    written while the rest wait for the test."""

    def rows(task: int):
        if task > 0:
            deadline = time.monotonic() + 300
            while not os.path.exists(marker):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"task {task}: the test never let the write go on")
                time.sleep(0.05)
        for i in range(task * PER_TASK, (task + 1) * PER_TASK):
            yield (f"k{i}".encode(), f"row {i}".encode(), i % PARTITIONS)

    rdd = spark.sparkContext.parallelize(range(TASKS), TASKS).flatMap(rows)
    return spark.createDataFrame(rdd, "key binary, value binary, partition int")


@pytest.mark.zookeeper
def test_kafka_sink_through_a_leader_sigkill_in_cluster_mode(kafka_source, cluster,  # noqa: F811
                                                             tmp_path):
    """Spark's Kafka sink (its idempotent producer, acks=all) writes TASKS * PER_TASK
    rows through the Kafka listeners of a 3-broker cluster; once the first task's rows
    are in partition 0, the broker leading it is killed (SIGKILL) and the other tasks
    go on: the producer finds the new leaders and the job ends successfully. Every row
    is in the topic exactly once (the idempotent producer's retries are not written
    twice), as format("kafka") through a surviving broker reads it; and that read of
    the topic whose leader was killed gives the same rows (offsets, timestamps) as
    format("sparklog") from the storage root, with no broker in the way."""
    spark = kafka_source
    topic = f"spark-kill-{_tag()}"
    kafka_address = {i: broker.kafka_address for i, broker in cluster.brokers.items()}
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    cluster.wait(lambda: all(cluster.leader_of(topic, p) > 0 for p in range(PARTITIONS)), 60,
                 f"leaders of {topic}")
    victim = cluster.leader_of(topic, 0)
    led = [p for p in range(PARTITIONS) if cluster.leader_of(topic, p) == victim]
    survivor = next(a for i, a in kafka_address.items() if i != victim)
    marker = tmp_path / "go-on"
    rows = _gated_rows(spark, str(marker))
    outcome: dict = {}

    def write():
        try:
            (rows.write.format("kafka").option("topic", topic)
             .option("kafka.bootstrap.servers", ",".join(kafka_address.values())).save())
            outcome["done"] = True
        except Exception as exc:  # noqa: BLE001 - reported by the test
            outcome["error"] = exc

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    first = len([i for i in range(PER_TASK) if i % PARTITIONS == 0])
    consumer = confluent_kafka.Consumer({"bootstrap.servers": survivor, "group.id": topic})

    def first_rows_landed() -> bool:
        assert "error" not in outcome, f"the sink failed before the kill: {outcome['error']}"
        return consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=10)[1] >= first

    try:
        wait_until(first_rows_landed, timeout=180, what=f"the first task's rows in {topic}-0",
                   ignore=(confluent_kafka.KafkaException,))
        cluster.brokers[victim].kill()
    finally:  # the other tasks go on (a failed wait leaves no Spark job waiting)
        consumer.close()
        marker.touch()
    writer.join(300)
    assert not writer.is_alive(), "the Spark job did not end"
    assert outcome.get("done"), f"the sink failed after the SIGKILL of broker {victim} " \
        f"(leader of {led}): {outcome.get('error')}\n{cluster.logs()}"
    assert all(cluster.leader_of(topic, p) not in (victim, -1) for p in led)
    read = _spark_read(spark, "kafka", survivor, subscribe=topic)
    values = [bytes(r["value"]) for r in read.select("value").collect()]
    expected = [f"row {i}".encode() for i in range(TASKS * PER_TASK)]
    assert len(values) == len(set(values)), \
        f"{len(values) - len(set(values))} rows written twice"
    assert sorted(values) == sorted(expected)
    assert_same(load(spark, cluster.storage_uri, subscribe=topic), read)
