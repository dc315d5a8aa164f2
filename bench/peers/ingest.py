"""Broker ingest MB/s, the same load on both brokers: Kafka's own Java perf tool
(``org.apache.kafka.tools.ProducerPerformance``, kafka-producer-perf-test) against Kafka,
and sparklog's pipelined Produce requests of pre-built frames (bench/bench_broker_ingest.py)
against sparklog. 100-byte values, one partition, requests of one ~0.85 MB batch
(8,000 records), 5 requests in flight, no compression, on each side.

``acks=1`` is the page-cache regime; ``acks=all`` the durable one: sparklog syncs
(hsync/fdatasync) before acknowledging acks=all, so Kafka's topic has
``flush.messages=1`` (an fsync per appended batch)."""

from __future__ import annotations

import os
import re
import subprocess

from bench_broker_ingest import broker_ingest, build_requests  # noqa: E402

from sparklog.protocol import Connection

RECORDS_PER_REQUEST = 8000
IN_FLIGHT = 5
BATCH_BYTES = 900_000  # one Kafka batch holds the 8,000 records (~0.86 MB)


def kafka_perf(classpath: list[str], bootstrap: str, topic: str, records: int,
               acks: str) -> float:
    """MB/s (10^6 bytes of values) that kafka-producer-perf-test reports."""
    cmd = ["java", "-Xmx512m", "-cp", os.pathsep.join(classpath),
           "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
           "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
           "--warmup-records", str(records // 5),
           "--command-property", f"bootstrap.servers={bootstrap}", f"acks={acks}",
           f"batch.size={BATCH_BYTES}", "linger.ms=50",
           f"max.in.flight.requests.per.connection={IN_FLIGHT}", "max.request.size=2097152",
           "buffer.memory=67108864", "compression.type=none"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    # with --warmup-records the last summary is of the steady-state records
    lines = [ln for ln in done.stdout.splitlines() if "records sent" in ln]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"ProducerPerformance failed ({done.returncode}): "
                           f"{(done.stdout + done.stderr)[-2000:]}")
    rate = float(re.search(r"records sent, ([\d.]+) records/sec", lines[-1]).group(1))
    return rate * 100 / 1e6


_payloads = None


def sparklog_ingest(address: str, topic: str, records: int, acks_all: bool) -> float:
    """MB/s of values for the same load sent to sparklog as Produce requests of one
    pre-built frame of 8,000 records each."""
    global _payloads
    if _payloads is None:
        _payloads = build_requests(RECORDS_PER_REQUEST, 1)
    count = max(1, records // RECORDS_PER_REQUEST)
    with Connection(address, client_id="bench-peers") as conn:
        seconds = broker_ingest(conn, _payloads, count, IN_FLIGHT,
                                f"sparklog ingest acks={'all' if acks_all else 1}",
                                topic=topic, acks=-1 if acks_all else 1)
    return count * RECORDS_PER_REQUEST * 100 / 1e6 / seconds
