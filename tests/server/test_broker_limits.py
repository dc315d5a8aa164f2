"""Resource limits of the broker (issue #18, "Hardening"): partitions per topic and per
broker, lazily made partition directories, a root holding an over-limit topic,
connections (prefix-only requests, idle and stalled connections, max.connections),
waiting fetches, file descriptors, and the client's bound on response sizes.

Every test talks to real broker processes (or an in-process broker) over loopback."""

from __future__ import annotations

import json
import os
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from sparklog.errors import (
    BrokerNotAvailableError,
    InvalidPartitionsError,
    PolicyViolationError,
    SparklogError,
    error_for_code,
)
from sparklog.metadata import TopicConfig
from sparklog.protocol import ApiKey, Connection, encode_request
from tests.support.brokerproc import ROOT, BrokerProcess
from tests.support.processes import rss_bytes
from tests.support.waiting import wait_until
from tests.support.wire import closed_within, create, fetch, fetch_body, produce


def timed_request(address, api_key=ApiKey.METADATA, body=None, timeout=10):
    """Seconds a fresh connection takes to get an answer."""
    started = time.monotonic()
    with Connection(address, timeout=timeout) as conn:
        conn.request(api_key, body if body is not None else {"topics": []})
    return time.monotonic() - started


def partition_dirs(root, topic):
    base = root / "topics" / topic
    return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def limited_nofile(soft, hard):
    """preexec_fn: run the child under RLIMIT_NOFILE (soft, hard)."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class LimitedBroker(BrokerProcess):
    """A broker process started under a lowered RLIMIT_NOFILE."""

    def __init__(self, *args, nofile=None, **kw):
        super().__init__(*args, **kw)
        self.nofile = nofile

    def start(self):
        if self.nofile is None:
            return super().start()
        real = subprocess.Popen

        def popen(*a, **kw):
            return real(*a, preexec_fn=limited_nofile(*self.nofile), **kw)

        subprocess.Popen = popen
        try:
            return super().start()
        finally:
            subprocess.Popen = real


# --- partitions (item 3) -------------------------------------------------------------------


def test_partition_counts_are_bounded_per_topic_and_per_broker(tmp_path):
    with BrokerProcess((tmp_path / "log").as_uri(), [
            "--override", "max.topic.partitions=100",
            "--override", "max.broker.partitions=150"], log_path=tmp_path / "b.log") as b, \
            Connection(b.address) as conn:
        started = time.monotonic()
        item = create(conn, "huge", 5000)  # the 10**9 is refused the same way
        assert time.monotonic() - started < 15  # refused up front, no partition created
        assert error_for_code(item["error_code"]) is InvalidPartitionsError, item
        assert "max.topic.partitions=100" in item["error_message"]
        assert not (tmp_path / "log" / "topics" / "huge").exists()
        started = time.monotonic()
        item = create(conn, "huge", 10 ** 9)
        assert error_for_code(item["error_code"]) is InvalidPartitionsError, item
        assert time.monotonic() - started < 15
        assert create(conn, "a", 100)["error_code"] == 0
        item = create(conn, "b", 60)  # 160 > 150 on this one broker
        assert error_for_code(item["error_code"]) is PolicyViolationError, item
        assert "max.broker.partitions=150" in item["error_message"]
        assert create(conn, "b", 50)["error_code"] == 0
        res = conn.request(ApiKey.ALTER_CONFIGS, {"topics": [
            {"name": "b", "set": {}, "delete": [], "num_partitions": 51}]})["topics"][0]
        assert error_for_code(res["error_code"]) is PolicyViolationError, res
        res = conn.request(ApiKey.ALTER_CONFIGS, {"topics": [
            {"name": "a", "set": {}, "delete": [], "num_partitions": 101}]})["topics"][0]
        assert error_for_code(res["error_code"]) is InvalidPartitionsError, res


def test_partition_directories_are_made_on_first_use(tmp_path):
    root = tmp_path / "log"
    with BrokerProcess(root.as_uri(), log_path=tmp_path / "b.log") as b, \
            Connection(b.address) as conn:
        assert create(conn, "lazy", 2000)["error_code"] == 0
        assert partition_dirs(root, "lazy") == []
        assert produce(conn, "lazy", 1234, ["x"])["error_code"] == 0
        assert partition_dirs(root, "lazy") == ["1234"]
        b.restart()
    with BrokerProcess(root.as_uri(), log_path=tmp_path / "b.log") as b, \
            Connection(b.address) as conn:
        assert fetch(conn, "lazy", 1234, 0)["records"]
        assert fetch(conn, "lazy", 7, 0)["error_code"] == 0  # never written: empty
        res = conn.request(ApiKey.DELETE_TOPICS, {"topics": ["lazy"]})["topics"][0]
        assert res["error_code"] == 0
    assert not (root / "topics" / "lazy").exists()


def test_broker_starts_on_a_root_with_an_over_limit_topic(tmp_path):
    root = tmp_path / "log"
    # what the CreateTopics(num_partitions=10**9) left: the topic's config
    config = root / "topics" / "huge" / "config"
    config.mkdir(parents=True)
    (config / "0000000001.json").write_bytes(TopicConfig("huge", 10 ** 9).to_json())
    for p in range(3):  # and some of its partitions' directories
        (root / "topics" / "huge" / str(p)).mkdir(parents=True)
    with BrokerProcess(root.as_uri(), log_path=tmp_path / "b.log",
                       start_timeout=30) as b, Connection(b.address) as conn:
        assert "topic huge: not served" in b.log_text()
        assert "max.topic.partitions=10000" in b.log_text()
        assert create(conn, "ok", 2)["error_code"] == 0
        assert produce(conn, "ok", 1, ["fine"])["error_code"] == 0
        res = conn.request(ApiKey.METADATA, {"topics": None})
        by_name = {t["name"]: t for t in res["topics"]}
        assert error_for_code(by_name["huge"]["error_code"]) is InvalidPartitionsError
        assert "sparklog topics delete huge" in by_name["huge"]["error_message"]
        assert by_name["ok"]["error_code"] == 0
        item = produce(conn, "huge", 0, ["no"])
        assert error_for_code(item["error_code"]) is InvalidPartitionsError
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cli = [sys.executable, "-m", "sparklog.cli.main", "topics"]
        alter = subprocess.run(cli + ["alter", "--bootstrap-server", b.address, "--topic",
                                      "huge", "--config", "retention.ms=1000"],
                               capture_output=True, text=True, env=env, timeout=60)
        assert alter.returncode == 0, alter.stderr
        started = time.monotonic()
        delete = subprocess.run(cli + ["delete", "--bootstrap-server", b.address, "--topic",
                                       "huge"], capture_output=True, text=True, env=env,
                                timeout=60)
        assert delete.returncode == 0, delete.stderr
        assert time.monotonic() - started < 30
        assert not (root / "topics" / "huge").exists()


# --- connections (item 4) -------------------------------------------------------------------


def test_prefix_only_connections_do_not_block_other_clients(tmp_path):
    with BrokerProcess((tmp_path / "log").as_uri(), [
            "--override", "queued.max.request.bytes=1048576",
            "--override", "socket.request.max.bytes=10485760"],
            log_path=tmp_path / "b.log") as b:
        squatters = []
        try:
            for _ in range(6):  # each announces a 5 MiB request and sends nothing more
                s = socket.create_connection((b.host, b.port))
                s.sendall(struct.pack(">i", 5 << 20))
                squatters.append(s)
            for s in squatters[:2]:  # and some send a little of it, then stall
                s.sendall(b"\0" * 100_000)
            time.sleep(0.3)  # the squatters' bytes are in (a false pass at worst)
            for _ in range(5):  # a broker blocked by them would not answer at all
                assert timed_request(b.address) < 5.0
        finally:
            for s in squatters:
                s.close()


def test_idle_and_stalled_connections_are_closed(tmp_path):
    with BrokerProcess((tmp_path / "log").as_uri(), [
            "--override", "connections.max.idle.ms=300",
            "--override", "request.read.timeout.ms=300"], log_path=tmp_path / "b.log") as b:
        idle = socket.create_connection((b.host, b.port))
        stalled = socket.create_connection((b.host, b.port))
        msg = encode_request(ApiKey.METADATA, {"topics": []}, 1)
        stalled.sendall(msg[:len(msg) - 3])
        prefix_only = socket.create_connection((b.host, b.port))
        prefix_only.sendall(struct.pack(">i", 1 << 20))
        for s in (idle, stalled, prefix_only):
            assert closed_within(s) == b"", "the broker answered before closing"
            s.close()
        text = b.log_text()
        assert "connections.max.idle.ms" in text and "request.read.timeout.ms" in text
        # a long poll is not idleness: it is answered, not cut
        with Connection(b.address) as conn:
            assert create(conn, "t")["error_code"] == 0
            res = conn.request(ApiKey.FETCH, fetch_body("t", 0, 0, max_wait_ms=1000))
            assert res["topics"][0]["partitions"][0]["error_code"] == 0


def test_max_connections_and_per_ip(tmp_path):
    with BrokerProcess((tmp_path / "log").as_uri(), [
            "--override", "max.connections=3"], log_path=tmp_path / "b.log") as b:
        held = [Connection(b.address) for _ in range(3)]
        for c in held:
            c.request(ApiKey.API_VERSIONS)
        waiting = Connection(b.address, timeout=10)
        waiting.send(ApiKey.API_VERSIONS)
        waiting.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):  # not accepted while 3 are open
            waiting.sock.recv(1, socket.MSG_PEEK)
        held.pop().close()
        waiting.sock.settimeout(10)
        assert waiting.receive()["error_code"] == 0  # accepted once one closed
        waiting.close()
        for c in held:
            c.close()
    with BrokerProcess((tmp_path / "log").as_uri(), [
            "--override", "max.connections.per.ip=2"], log_path=tmp_path / "c.log") as b:
        def two_accepted():
            conns = []
            try:
                for _ in range(2):
                    conns.append(Connection(b.address, timeout=10))
                    conns[-1].request(ApiKey.API_VERSIONS)
                return conns
            except (OSError, SparklogError):
                for c in conns:
                    c.close()
                return None

        held = wait_until(two_accepted,
                          what="two connections accepted (the readiness probe's one gone)")
        extra = socket.create_connection((b.host, b.port))
        assert closed_within(extra) == b""
        assert "max.connections.per.ip=2" in b.log_text()
        for c in held:
            c.close()


# --- waiting fetches (item 5) ---------------------------------------------------------------


@pytest.fixture
def polled(tmp_path):
    """An in-process broker and the writer of its opened partition polls-0."""
    from sparklog.server import EmbeddedBroker

    with EmbeddedBroker((tmp_path / "log").as_uri()) as eb:
        with Connection(eb.address) as conn:
            assert create(conn, "polls")["error_code"] == 0
            fetch(conn, "polls", 0, 0)
        yield eb, eb.broker.partitions.writers[("polls", 0)]


def test_long_polls_of_a_closed_connection_are_freed(polled):
    eb, writer = polled

    def waiting():
        return len(writer._waiters)

    conns = [Connection(eb.address) for _ in range(4)]
    for c in conns:
        for _ in range(100):
            c.send(ApiKey.FETCH, fetch_body("polls", 0, 0, max_wait_ms=60000))
    wait_until(lambda: waiting() >= 400, what="400 parked fetches")
    for c in conns:
        c.close()
    wait_until(lambda: waiting() == 0, what="the closed connections' fetches to go")


def test_parking_a_fetch_costs_the_same_with_thousands_parked(polled):
    import asyncio

    eb, writer = polled

    async def park(n):
        started = time.perf_counter()
        futures = [writer.data_waiter() for _ in range(n)]
        took = time.perf_counter() - started
        writer.wake_fetchers()
        await asyncio.gather(*futures)
        return took

    took = asyncio.run_coroutine_threadsafe(park(20000), eb.broker.loop).result(120)
    assert took < 10.0, f"parking 20000 fetches on one partition took {took:.1f}s"


# --- the client's bound on responses (item 11) -----------------------------------------------


class FakeServer:
    """Accepts one connection, reads a request, answers with ``reply`` bytes."""

    def __init__(self, reply: bytes):
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.conns.append(conn)
        conn.recv(65536)
        conn.sendall(self.reply)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def current_rss() -> int:
    return rss_bytes(os.getpid())


def test_client_refuses_a_response_larger_than_the_request_can_get():
    from sparklog.clients.network.connection import BrokerConnection

    fake = FakeServer(struct.pack(">i", 0x3FFFFFFF))
    try:
        conn = BrokerConnection("127.0.0.1", fake.port, request_timeout_ms=30000)
        before = current_rss()
        started = time.monotonic()
        with pytest.raises(BrokerNotAvailableError) as err:
            conn.request(ApiKey.API_VERSIONS, {})
        assert time.monotonic() - started < 15  # not the 30 s request timeout
        assert "announces 1073741823 bytes" in str(err.value)
        assert current_rss() - before < 32 << 20
        conn.close()
    finally:
        fake.close()


def test_client_memory_follows_the_bytes_received():
    from sparklog.clients.network.connection import BrokerConnection

    fake = FakeServer(struct.pack(">i", 48 << 20) + b"\0" * 1000)  # a Fetch may be 48 MiB
    try:
        conn = BrokerConnection("127.0.0.1", fake.port, request_timeout_ms=1500)
        before = current_rss()
        future = conn.send(ApiKey.FETCH, {**fetch_body("t", 0, 0), "max_bytes": 50 << 20})
        time.sleep(0.5)
        assert current_rss() - before < 16 << 20
        with pytest.raises(Exception) as err:
            future.get(10)
        assert "announced and did not arrive in full" in str(err.value)
        conn.close()
    finally:
        fake.close()


# --- file descriptors (item 10) --------------------------------------------------------------


def test_more_partitions_than_the_fd_limit_are_served(tmp_path):
    root = tmp_path / "log"
    with BrokerProcess(root.as_uri(), log_path=tmp_path / "b.log") as b, \
            Connection(b.address) as conn:
        assert create(conn, "many", 200)["error_code"] == 0
        for p in range(200):
            assert produce(conn, "many", p, [f"v{p}"])["error_code"] == 0
    with LimitedBroker(root.as_uri(), log_path=tmp_path / "b.log", nofile=(256, 256),
                       start_timeout=60) as b:
        with Connection(b.address) as conn:
            for p in range(200):
                item = produce(conn, "many", p, [f"w{p}"])
                assert item["error_code"] == 0, (p, item)
            for p in range(0, 200, 7):  # reopened transparently, nothing lost
                item = fetch(conn, "many", p, 0)
                assert item["error_code"] == 0 and item["high_watermark"] == 2
        for _ in range(3):
            assert timed_request(b.address) < 1.0
        text = b.log_text()
        assert "Too many open files" not in text
        assert "file descriptors: limit 256" in text
        assert "200 partition(s) would need" in text


def test_soft_fd_limit_is_raised_to_the_hard_limit(tmp_path):
    with LimitedBroker((tmp_path / "log").as_uri(), log_path=tmp_path / "b.log",
                       nofile=(256, 4096)) as b:
        assert "file descriptors: limit 4096 (raised from 256)" in b.log_text()


ACCEPT_SCRIPT = r"""
import asyncio, logging, os, sys
from sparklog.server.acceptor import Acceptor

logging.basicConfig(level=logging.INFO, stream=sys.stderr)

class Hello(asyncio.Protocol):
    def connection_made(self, transport):
        transport.write(b"hi")
        self.t = transport

async def main():
    loop = asyncio.get_running_loop()
    acc = None
    def lost(ip):
        acc.on_closed(ip)
    acc = Acceptor(loop, Hello, "127.0.0.1", 0, max_connections=1000,
                   max_connections_per_ip=1000)
    acc.start()
    hog = []
    try:
        while True:
            hog.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    print(acc.address[1], flush=True)
    await asyncio.sleep(float(sys.argv[1]))   # clients knock: accept fails (EMFILE)
    for fd in hog:
        os.close(fd)
    print("freed", flush=True)
    await asyncio.sleep(5)

asyncio.run(main())
"""


def test_accept_failures_back_off_and_are_logged_sparingly(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", ACCEPT_SCRIPT, "3"], stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "acc.log", "wb"), env=env, text=True,
                            preexec_fn=limited_nofile(64, 64))
    try:
        port = int(proc.stdout.readline())
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        assert proc.stdout.readline().strip() == "freed"
        for c in clients:  # served once descriptors are free again
            c.settimeout(5)
            assert c.recv(2) == b"hi"
            c.close()
    finally:
        proc.kill()
        proc.wait()
    text = (tmp_path / "acc.log").read_text()
    assert text.count("cannot accept connections") <= 2, text[:2000]
    assert "Too many open files" in text
    assert len(text) < 20_000


# --- stress: everything at once --------------------------------------------------------------

#: broker RSS bound asserted under the stress load (documented in docs/operations.md)
STRESS_RSS_BOUND = 256 << 20


def metric(port, name) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    for line in text.decode().splitlines():
        if line.split("{")[0].split(" ")[0] == name and not line.startswith("#"):
            return float(line.split()[1])
    return 0.0


PROBE_SCRIPT = r"""
import json, sys, threading, time
from sparklog.protocol import ApiKey, Connection
from tests.support.processes import rss_bytes
from tests.support.wire import fetch, produce

address, pid = sys.argv[1], int(sys.argv[2])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
latencies, rss, n = [], [], 0
conn = Connection(address, timeout=30)
produce(conn, "wide", 0, ["warm-up"])  # the first call of this process is slow (imports)
print("probing", flush=True)
while not stop.is_set():
    n += 1
    started = time.monotonic()
    if n % 5 == 0:  # a new client, not only an old connection
        conn.close()
        conn = Connection(address, timeout=30)
    p = n % 100
    assert produce(conn, "wide", p, [f"p{n}"])["error_code"] == 0
    assert fetch(conn, "wide", p, 0)["error_code"] == 0
    conn.request(ApiKey.METADATA, {"topics": ["wide"]})
    latencies.append(time.monotonic() - started)
    rss.append(rss_bytes(pid))
    stop.wait(0.05)
print(json.dumps([latencies, rss]), flush=True)
"""


PARK_CONNS, PARK_EACH = 10, 400
PARKED = PARK_CONNS * PARK_EACH


def park_fetches(address, connections, per_connection, topic="hot"):
    conns = []
    for _ in range(connections):
        c = Connection(address, timeout=60)
        for _ in range(per_connection):
            c.send(ApiKey.FETCH, fetch_body(topic, 0, 0, max_wait_ms=60000))
        conns.append(c)
    return conns


def test_stress_parked_fetches_prefix_only_connections_and_an_fd_limit(tmp_path):
    from tests.support.processes import free_port

    metrics_port = free_port()
    b = LimitedBroker((tmp_path / "log").as_uri(), [
        "--override", "queued.max.request.bytes=8388608",
        "--override", "socket.request.max.bytes=4194304",
        "--metrics-port", str(metrics_port)],
        log_path=tmp_path / "b.log", nofile=(300, 300))
    b.start()
    prober = None
    try:
        with Connection(b.address) as conn:
            assert create(conn, "hot")["error_code"] == 0
            assert create(conn, "wide", 100)["error_code"] == 0
            for p in range(100):  # more partitions than the fd limit keeps open (59)
                assert produce(conn, "wide", p, [f"v{p}"])["error_code"] == 0
            # "hot" is opened by the first of the parked fetches

        # the other client: its own process (the GIL of this one is busy with the load)
        prober = subprocess.Popen(
            [sys.executable, "-c", PROBE_SCRIPT, b.address, str(b.pid)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert prober.stdout.readline().strip() == "probing"
        squatters = []
        for i in range(40):  # prefix-only requests, two of them half sent
            s = socket.create_connection((b.host, b.port))
            s.sendall(struct.pack(">i", 4 << 20) + (b"\0" * (1 << 20) if i < 2 else b""))
            squatters.append(s)
        parked = park_fetches(b.address, PARK_CONNS, PARK_EACH)  # long polls, one partition
        wait_until(lambda: metric(metrics_port, "sparklog_server_delayedoperationpurgatory_purgatorysize") >= PARKED,
                   30, f"{PARKED} parked fetches")
        time.sleep(2)  # the probe keeps going under the load
        started = time.monotonic()
        with Connection(b.address) as conn:
            assert produce(conn, "hot", 0, ["wake"])["error_code"] == 0
        for c in parked:  # every long poll answered with the new record
            for _ in range(PARK_EACH):
                assert c.receive()["topics"][0]["partitions"][0]["records"]
            c.close()
        woken = time.monotonic() - started
        parked = []  # park them again (past the new record), then SIGTERM
        for c in (Connection(b.address, timeout=60) for _ in range(PARK_CONNS)):
            for _ in range(PARK_EACH):
                c.send(ApiKey.FETCH, fetch_body("hot", 0, 1, max_wait_ms=60000))
            parked.append(c)
        wait_until(lambda: metric(metrics_port, "sparklog_server_delayedoperationpurgatory_purgatorysize") >= PARKED,
                   30, f"{PARKED} parked fetches again")
        prober.stdin.close()
        latencies, rss = json.loads(prober.stdout.readline())
        prober.wait(30)
        started = time.monotonic()
        assert b.stop(timeout=10) == 0
        stopped = time.monotonic() - started
        for s in squatters:
            s.close()
        for c in parked:
            c.close()
    finally:
        if prober is not None and prober.poll() is None:
            prober.kill()
            prober.wait()
        if b.running:
            b.kill()
    assert latencies and max(latencies) < 1.0, (max(latencies), len(latencies))
    assert max(rss) < STRESS_RSS_BOUND, max(rss)
    assert woken < 10, woken
    assert stopped < 10, stopped
    print(f"probes {len(latencies)}, worst {max(latencies):.3f}s; broker RSS max "
          f"{max(rss) >> 20} MiB; {PARKED} long polls woken in {woken:.2f}s; "
          f"SIGTERM honoured in {stopped:.2f}s")
