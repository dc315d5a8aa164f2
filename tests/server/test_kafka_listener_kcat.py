"""The broker's Kafka listener (docs/kafka-protocol.md) with kcat (librdkafka's
command-line client, Debian's package), unchanged: its idempotent producer with every
codec; its consumer starting at the beginning, relative to the end (ListOffsets latest)
and at a timestamp (``-o s@``, and ``-Q``'s offset query); its balanced consumer group
(``-G``) committing and resuming where it committed."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from tests.support.kafkaconn import create_with_librdkafka, start_with_kafka_listener, topic_name
from tests.support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


@pytest.fixture(scope="module")
def kafka_address(tmp_path_factory):
    """The Kafka listener of one broker (a sparklog listener beside it)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-listener-kcat"))
    yield b.broker.listener_addresses["KAFKA"]
    b.stop()


def kcat(address: str, *args: str, stdin: str | None = None) -> list[str]:
    """Run kcat against ``address``; its output lines (AssertionError with its
    standard error when it fails)."""
    done = subprocess.run(["kcat", "-b", address, *args], capture_output=True, timeout=60,
                          input=None if stdin is None else stdin.encode())
    assert done.returncode == 0, f"kcat {' '.join(args)}: {done.stderr.decode()[-2000:]}"
    return done.stdout.decode().splitlines()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_idempotent_codec_and_where_consuming_starts(kafka_address, codec):
    """kcat's idempotent producer (acks=all) with the codec writes two runs of keyed
    lines; kcat reads them all from the beginning, the last 10 from the end (-o -10),
    the second run from a time between the runs (-o s@), and -Q answers that time with
    the second run's first offset."""
    topic = create_with_librdkafka(kafka_address, topic_name("kc-"), 1)
    produce = ["-P", "-t", topic, "-p", "0", "-K", ":", "-X", "enable.idempotence=true",
               "-X", "acks=all", "-X", f"compression.codec={codec}"]
    first = [f"k{i}:{codec} value {i} " + "x" * (i % 30) for i in range(50)]
    kcat(kafka_address, *produce, stdin="\n".join(first) + "\n")
    between = _now_ms() + 1
    wait_until(lambda: _now_ms() > between, what="the clock passing the runs' boundary")
    second = [f"k{i}:{codec} value {i}" for i in range(50, 100)]
    kcat(kafka_address, *produce, stdin="\n".join(second) + "\n")
    consume = ["-C", "-t", topic, "-p", "0", "-e", "-f", "%o %k:%s\n"]
    expected = [f"{i} {line}" for i, line in enumerate(first + second)]
    assert kcat(kafka_address, *consume, "-o", "beginning") == expected
    assert kcat(kafka_address, *consume, "-o", "-10") == expected[-10:]
    assert kcat(kafka_address, *consume, "-o", f"s@{between}") == expected[50:]
    answer = " ".join(kcat(kafka_address, "-Q", "-t", f"{topic}:0:{between}"))
    assert re.search(r"offset 50\b", answer), answer


def test_kcat_balanced_consumer_group_commits_and_resumes(kafka_address):
    """kcat -G (librdkafka's KafkaConsumer, auto-commit) reads a 3-partition topic to
    its end and commits; the group's commits are the log end; a second run of the group
    gets only what was produced since."""
    topic = create_with_librdkafka(kafka_address, topic_name("kc-"), 3)
    group = "g-" + topic
    lines = [f"k{i}:v{i}" for i in range(300)]
    kcat(kafka_address, "-P", "-t", topic, "-K", ":", "-X", "enable.idempotence=true",
         stdin="\n".join(lines) + "\n")
    members = ["-G", group, "-e", "-f", "%p %o %k:%s\n", "-X", "auto.offset.reset=earliest",
               topic]
    got = kcat(kafka_address, *members)
    assert sorted(line.split(" ", 2)[2] for line in got) == sorted(lines)
    ends: dict[int, int] = {}
    for line in got:
        p, o = map(int, line.split(" ", 2)[:2])
        ends[p] = max(ends.get(p, 0), o + 1)
    c = confluent_kafka.Consumer({"bootstrap.servers": kafka_address, "group.id": group})
    try:
        committed = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(3)],
                                timeout=30)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    more = [f"k{i}:v{i}" for i in range(300, 330)]
    kcat(kafka_address, "-P", "-t", topic, "-K", ":", stdin="\n".join(more) + "\n")
    again = kcat(kafka_address, *members)
    assert sorted(line.split(" ", 2)[2] for line in again) == sorted(more)
