"""Kafka's own load generators pointed at both brokers: Apache Kafka, and a sparklog
broker's Kafka listener (``kafka.listener.names``, docs/kafka-protocol.md). The same
client, the same settings and the same topic layout on each side; only the bootstrap
address differs.

* ``kafka-producer-perf-test`` (``org.apache.kafka.tools.ProducerPerformance``, Java):
  broker ingest at acks=1 and acks=all (:func:`bench.peers.ingest.kafka_perf`, the same
  settings as the ``ingest`` rows);
* ``kafka-consumer-perf-test`` (``org.apache.kafka.tools.ConsumerPerformance``, Java): a
  consumer group of one reading the records the producer tool wrote; the figure is the
  tool's ``fetch.nMsg.sec`` (records/s once the group is joined, so neither broker's
  group-join delay counts);
* librdkafka (confluent-kafka) producer and consumer records/s from one Python process
  (:mod:`bench.peers.clients`' functions);
* produce->consume latency at 10k records/s with librdkafka on both ends
  (:func:`bench.peers.clients.kafka_latency`)."""

from __future__ import annotations

import os
import subprocess
import time


def consumer_perf(classpath: list[str], bootstrap: str, topic: str, records: int) -> float:
    """records/s of kafka-consumer-perf-test reading ``records`` records of ``topic``
    (from the earliest offset, a new group each run)."""
    cmd = ["java", "-Xmx512m", "-cp", os.pathsep.join(classpath),
           "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
           "--topic", topic, "--num-records", str(records), "--timeout", "60000",
           "--group", f"perf-{time.time_ns()}",
           "--command-property", "auto.offset.reset=earliest",
           "--command-property", "fetch.max.bytes=52428800",
           "--command-property", "max.partition.fetch.bytes=10485760"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    header = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if done.returncode != 0 or header is None or header + 1 >= len(lines):
        raise RuntimeError(f"ConsumerPerformance failed ({done.returncode}): "
                           f"{(done.stdout + done.stderr)[-2000:]}")
    names = [n.strip() for n in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    row = dict(zip(names, values))
    if int(row["data.consumed.in.nMsg"]) < records:
        raise RuntimeError(f"ConsumerPerformance read {row['data.consumed.in.nMsg']} of "
                           f"{records} records of {topic} at {bootstrap}")
    return float(row["fetch.nMsg.sec"])
