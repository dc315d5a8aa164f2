"""Leader failover after SIGKILL, default settings of each: Apache Kafka (3 KRaft nodes,
each broker and controller, replication factor 3) vs sparklog (3 brokers on ZooKeeper,
``zookeeper.session.timeout.ms`` at its default). A probe producer (acks=all,
idempotent, linger 0) writes one record at a time to partition 0; its leader is killed
with SIGKILL and restarted after its turn. The figure is the outage: the longest pause
between two acknowledged writes from the last acknowledgement before the kill until 20
writes were acknowledged after it (bench/bench_failover.py's measure, for both)."""

from __future__ import annotations

import time
from pathlib import Path

from bench_failover import Probe, failover  # noqa: E402  (sparklog's side)

from sparklog.coordination.zkclient import DEFAULT_SESSION_TIMEOUT_MS
from tests.support.kafkaserver import KafkaCluster
from tests.support.zkserver import ZooKeeperServer


class KafkaProbe(Probe):
    """:class:`Probe`'s writer with confluent-kafka against Kafka."""

    def make_producer(self, bootstrap: str):
        """confluent-kafka: acks=all, idempotent, no linger."""
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0})

    def write(self, value: bytes) -> bool:
        """Produce one record to partition 0 and wait for its delivery report."""
        errors = []
        self.producer.produce(self.topic, value, partition=0,
                              on_delivery=lambda err, _msg: errors.append(err))
        self.producer.flush(120)
        return bool(errors) and errors[0] is None

    def close(self):
        self._stop.set()
        self._thread.join(120)
        self.producer.flush(30)


def kafka_failover(base: Path, cycles: int) -> list[float]:
    """Outages (s) of ``cycles`` SIGKILLs of partition 0's leader in a 3-node KRaft
    cluster."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = KafkaCluster(str(base / "kafka-3"), 3, heap="384m")
    out = []
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic("probe", 1, 3)]).values():
            f.result(60)

        def leader() -> int:
            topics = admin.describe_topics(TopicCollection(["probe"]))
            partition = topics["probe"].result(30).partitions[0]
            return partition.leader.id if partition.leader is not None else -1

        probe = KafkaProbe(cluster.bootstrap, "probe")
        try:
            for _ in range(cycles):
                deadline = time.monotonic() + 120
                while not (leader() > 0 and len(probe.acks) > 5):
                    if time.monotonic() > deadline:
                        raise RuntimeError("Kafka: no leader or no acknowledged writes")
                    time.sleep(0.1)
                victim = cluster.nodes[leader()]
                t0 = time.monotonic()
                victim.kill()
                out.append(probe.outage(t0, time.monotonic()))
                victim.spawn()
                cluster.wait_ready([victim])
        finally:
            probe.close()
    return out


def sparklog_failover(base: Path, cycles: int) -> list[float]:
    """Outages (s) of ``cycles`` SIGKILLs of partition 0's leader among 3 sparklog
    brokers on a real ZooKeeper (bench/bench_failover.py, SIGKILL cycles only kept)."""
    zk = ZooKeeperServer(str(base / "zk")).start()
    try:
        return failover(zk, base, cycles, DEFAULT_SESSION_TIMEOUT_MS, kinds=("SIGKILL",))
    finally:
        zk.stop()
