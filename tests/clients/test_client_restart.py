"""Clients ride through a broker restart (graceful SIGTERM and SIGKILL of a real broker
process), as kafka-python's do: ``Consumer.poll()`` retries inside itself with
``reconnect_backoff_ms`` instead of raising, keeps its place (no record lost or
repeated, committed offsets included), the console consumer keeps printing, the
Producer's sends are retried; and a pattern subscription picks up a topic created
later within ``metadata_max_age_ms``."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import TopicPartition
from tests.support.brokerproc import ROOT, BrokerProcess
from tests.support.waiting import wait_until

_names = itertools.count()
FAST = {"reconnect_backoff_ms": 20, "reconnect_backoff_max_ms": 200}


@pytest.fixture
def proc(tmp_path):
    with BrokerProcess((tmp_path / "log").as_uri(), log_path=tmp_path / "broker.log") as p:
        yield p


def _restart(proc, how: str) -> None:
    if how == "SIGTERM":
        assert proc.stop() == 0
    else:
        proc.kill()
    proc.start()


def _produce(address, topic, values, partitions=2) -> None:
    with Producer(address, acks="all", linger_ms=0) as p:
        for i, v in enumerate(values):
            p.send(topic, v, partition=i % partitions)
        p.flush(30)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_consumer_loop_rides_through_broker_restart(proc, how):
    topic = f"r{next(_names)}"
    with Admin(proc.address) as admin:
        admin.create_topic(topic, 2)
    first = [b"a%d" % i for i in range(60)]
    second = [b"b%d" % i for i in range(60)]
    _produce(proc.address, topic, first)
    got, restarted = [], False
    with Consumer(topic, bootstrap_servers=proc.address, group_id=f"g-{topic}",
                  auto_offset_reset="earliest", enable_auto_commit=False,
                  session_timeout_ms=6000, heartbeat_interval_ms=200, **FAST) as c:
        deadline = time.monotonic() + 90
        while len(got) < len(first) + len(second):
            assert time.monotonic() < deadline, f"only {len(got)} records after 90 s"
            batch = c.poll(timeout_ms=100, max_records=7)  # must not raise
            for records in batch.values():
                got.extend(r.value for r in records)
            if batch:
                c.commit()  # must not raise either: retried over the restart
            if not restarted and len(got) >= 30:
                _restart(proc, how)
                restarted = True
                _produce(proc.address, topic, second)
        committed = {p: c.committed(TopicPartition(topic, p)) for p in range(2)}
    assert sorted(got) == sorted(first + second)  # none lost, none twice
    assert committed == {0: 60, 1: 60}
    by_partition = {0: [v for v in got if int(v[1:]) % 2 == 0 and v[:1] == b"a"]}
    assert by_partition[0] == [v for v in first if int(v[1:]) % 2 == 0]  # in order


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_producer_rides_through_broker_restart(proc, how):
    """Records sent while the broker is down, to a topic already used and to one first
    used then (its metadata is waited for, within max_block_ms), are all delivered."""
    topic, later = f"p{next(_names)}", f"q{next(_names)}"
    with Admin(proc.address) as admin:
        admin.create_topic(topic, 1)
        admin.create_topic(later, 1)
    with Producer(proc.address, acks="all", linger_ms=0, metadata_max_age_ms=100,
                  **FAST) as p:
        futures = [p.send(topic, b"x%d" % i) for i in range(20)]
        p.flush(30)
        if how == "SIGTERM":
            assert proc.stop() == 0
        else:
            proc.kill()
        restart = threading.Thread(target=proc.start)
        restart.start()  # the broker answers again a second or two later
        try:
            futures += [p.send(topic, b"x%d" % i) for i in range(20, 40)]
            first_of_later = p.send(later, b"y")
        finally:
            restart.join()
        p.flush(60)
        offsets = [f.get(30).offset for f in futures]
        assert first_of_later.get(30).offset == 0
    assert offsets == list(range(40))


def test_pattern_subscription_picks_up_a_new_topic(proc):
    prefix = f"pat{next(_names)}"
    with Admin(proc.address) as admin:
        admin.create_topic(f"{prefix}-a", 1)
        _produce(proc.address, f"{prefix}-a", [b"1"], 1)
        with Consumer(bootstrap_servers=proc.address, auto_offset_reset="earliest",
                      metadata_max_age_ms=300) as c:
            c.subscribe(pattern=rf"{prefix}-.*")
            assert c.subscription() == {f"{prefix}-a"}
            admin.create_topic(f"{prefix}-b", 1)
            _produce(proc.address, f"{prefix}-b", [b"2"], 1)
            seen = []

            def both():
                for records in c.poll(timeout_ms=100).values():
                    seen.extend(r.value for r in records)
                return sorted(seen) == [b"1", b"2"]

            wait_until(both, what="the records of the topic created after subscribe()")
            assert c.subscription() == {f"{prefix}-a", f"{prefix}-b"}


def test_pattern_subscription_of_a_group_picks_up_a_new_topic(proc):
    prefix = f"gpat{next(_names)}"
    with Admin(proc.address) as admin:
        admin.create_topic(f"{prefix}-a", 1)
        with Consumer(bootstrap_servers=proc.address, auto_offset_reset="earliest",
                      group_id=f"g-{prefix}", metadata_max_age_ms=300) as c:
            c.subscribe(pattern=rf"{prefix}-.*")
            admin.create_topic(f"{prefix}-b", 2)
            wait_until(lambda: c.poll(timeout_ms=50) is not None and len(c.assignment()) == 3,
                       10, "the new topic's partitions in the group's assignment")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_console_consumer_rides_through_broker_restart(proc, tmp_path, how):
    topic = f"cc{next(_names)}"
    with Admin(proc.address) as admin:
        admin.create_topic(topic, 1)
    _produce(proc.address, topic, [b"a%d" % i for i in range(10)], 1)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    out_path = tmp_path / "out.txt"
    with open(out_path, "wb") as out:
        cmd = [sys.executable, "-m", "sparklog.cli.main", "consume", topic,
               "--bootstrap-server", proc.address, "--from-beginning", "--group", "cc",
               "--max-messages", "20", "--consumer-property", "auto.commit.interval.ms=50"]
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env,
                                 cwd=str(ROOT))
        try:
            wait_until(lambda: Path(out_path).read_bytes().count(b"\n") >= 10, 30,
                       "the console consumer printing the first 10 records")
            _restart(proc, how)
            assert child.poll() is None, child.stderr.read().decode()
            _produce(proc.address, topic, [b"b%d" % i for i in range(10)], 1)
            _, err = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 0, err.decode()
    lines = out_path.read_bytes().decode().split()
    assert lines == [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)]
