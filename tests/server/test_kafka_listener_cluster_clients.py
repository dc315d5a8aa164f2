"""kcat and Kafka Connect standalone against the Kafka listeners of a 3-broker cluster on
ZooKeeper (the cluster of test_kafka_listener_cluster.py; kafka-python, confluent-kafka
and the Java tools are there): each bootstraps from one broker and reaches the leaders
and the group coordinator wherever they are."""

from __future__ import annotations

import pytest

from tests.server.test_kafka_listener_cluster import (
    _kafka_addresses,
    cluster,  # noqa: F401 (a fixture)
)
from tests.server.test_kafka_listener_connect import (
    connect_classpath,  # noqa: F401 (a fixture)
    file_connectors,
    lines_of,
)
from tests.server.test_kafka_listener_kcat import kcat
from tests.server.test_kafka_listener_kcat import pytestmark as kcat_marks
from tests.support.kafkaconn import create_with_kafka_python, topic_name
from tests.support.waiting import wait_until

pytestmark = pytest.mark.zookeeper


@kcat_marks
def test_kcat_produces_through_one_broker_and_its_group_reads_through_another(
        cluster):  # noqa: F811
    """kcat's idempotent producer bootstrapping from broker 1 writes to the leaders of
    six partitions on all three brokers; kcat -G bootstrapping from broker 2 reads
    every line and commits; a second run bootstrapping from broker 3 resumes at the
    group's commits."""
    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[1], topic, partitions=6)
    cluster.wait(lambda: {cluster.leader_of(topic, p) for p in range(6)} == {1, 2, 3}, 60,
                 f"leaders of {topic} on every broker")
    lines = [f"k{i}:v{i}" for i in range(600)]
    kcat(addresses[1], "-P", "-t", topic, "-K", ":", "-X", "enable.idempotence=true",
         stdin="\n".join(lines) + "\n")
    group = ["-G", "g-" + topic, "-e", "-f", "%k:%s\n", "-X", "auto.offset.reset=earliest",
             topic]
    assert sorted(kcat(addresses[2], *group)) == sorted(lines)
    more = [f"k{i}:v{i}" for i in range(600, 660)]
    kcat(addresses[1], "-P", "-t", topic, "-K", ":", stdin="\n".join(more) + "\n")
    assert sorted(kcat(addresses[3], *group)) == sorted(more)


def test_connect_file_source_and_sink_through_one_broker(cluster, connect_classpath,  # noqa: F811
                                                         tmp_path):
    """Connect standalone bootstrapping from a broker that does not lead the topic's
    partition: the FileStreamSource writes the input file's lines to the leader, the
    FileStreamSink's group (its coordinator wherever the cluster put it) writes them
    out: the output file equals the input."""
    topic = topic_name()
    addresses = _kafka_addresses(cluster)
    create_with_kafka_python(addresses[1], topic, partitions=1)
    leader = cluster.wait(lambda: cluster.leader_of(topic, 0) if cluster.leader_of(topic, 0) > 0
                          else None, 60, f"a leader of {topic}")
    elsewhere = next(a for i, a in addresses.items() if i != leader)
    lines = [f"line {i}" for i in range(300)]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
    connect = file_connectors(connect_classpath, elsewhere, topic, tmp_path)
    with connect(1) as worker:
        wait_until(lambda: lines_of(tmp_path / "output.txt") == lines, timeout=120,
                   what=f"the sink file holding the source's lines: {worker.describe()}")
        assert worker.stop(), worker.describe()
