"""A broker listening on a wildcard address (the README's ``--listen 0.0.0.0:9092``)
advertises this host's canonical name, as Kafka does (issue #32 item 5)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from sparklog.errors import InvalidConfigError
from sparklog.protocol import ApiKey, Connection
from sparklog.security.listeners import WILDCARD_HOSTS, canonical_host_name
from sparklog.server.config import BrokerConfig
from tests.support.brokerproc import ROOT, BrokerProcess


def _usable(name: str) -> bool:
    """True when ``name`` resolves to an address that is not a wildcard."""
    try:
        return bool({i[4][0] for i in socket.getaddrinfo(name, None)} - WILDCARD_HOSTS)
    except OSError:
        return False


FQDN = socket.getfqdn()


@pytest.mark.skipif(not _usable(FQDN), reason="this host's canonical name does not resolve: "
                    "test_wildcard_listener_without_usable_name covers the error")
def test_wildcard_listener_advertises_canonical_name(tmp_path):
    from sparklog import Consumer, Producer
    from sparklog.clients.admin import Admin

    proc = BrokerProcess(tmp_path.joinpath("log").as_uri(), log_path=tmp_path / "broker.log")
    proc.host = "0.0.0.0"
    with proc:
        bootstrap = f"127.0.0.1:{proc.port}"
        with Connection(bootstrap) as conn:
            meta = conn.request(ApiKey.METADATA, {"topics": [],
                                                  "allow_auto_topic_creation": False})
        assert [(b["host"], b["port"]) for b in meta["brokers"]] == [(FQDN, proc.port)]
        assert f"advertising this host's canonical name {FQDN}" in proc.log_text()
        assert f"advertised as {FQDN}:{proc.port}" in proc.log_text()
        with Admin(bootstrap) as admin:
            admin.create_topic("wild", 1)
        with Producer(bootstrap) as producer:
            producer.send("wild", b"v1", key=b"k").get(30)
        with Consumer("wild", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=10_000) as consumer:
            got = [(r.key, r.value) for r in consumer]
        assert got == [(b"k", b"v1")]


def test_wildcard_listener_without_usable_name():
    """The canonical name must resolve; the error says it does not and names
    advertised.listeners (a name under .invalid never resolves: RFC 6761)."""
    with pytest.raises(InvalidConfigError) as err:
        canonical_host_name("PLAINTEXT://0.0.0.0:9092", "no-such-host.invalid")
    text = str(err.value)
    assert "'no-such-host.invalid' does not resolve" in text
    assert "advertised.listeners" in text and "0.0.0.0:9092" in text
    with pytest.raises(InvalidConfigError, match="no canonical name.*advertised.listeners"):
        canonical_host_name("PLAINTEXT://:9092", "")
    if not _usable(FQDN):  # this host: the broker refuses to start, saying why
        with pytest.raises(InvalidConfigError, match="advertised.listeners"):
            BrokerConfig(listeners="PLAINTEXT://0.0.0.0:9092").advertised_host_port


def test_advertised_host_port_rules():
    """The wildcard rule in the config: listeners' wildcard (or empty host) is advertised
    by the canonical name; a wildcard in advertised.listeners is refused."""
    for listeners in ("PLAINTEXT://0.0.0.0:9092", "PLAINTEXT://:9092", "PLAINTEXT://[::]:9092"):
        if _usable(FQDN):
            assert BrokerConfig(listeners=listeners).advertised_host_port == (FQDN, 9092)
    with pytest.raises(InvalidConfigError, match=r"advertised.listeners=.*0\.0\.0\.0 is a "
                       "wildcard address"):
        BrokerConfig(listeners="PLAINTEXT://0.0.0.0:9092",
                     advertised_listeners="PLAINTEXT://0.0.0.0:9092").advertised_host_port
    assert BrokerConfig(listeners="PLAINTEXT://0.0.0.0:9092",
                        advertised_listeners="PLAINTEXT://b1.example.com:9093"
                        ).advertised_host_port == ("b1.example.com", 9093)


def test_readme_quick_tour_command(tmp_path):
    """The README's shell tour as written: the broker on 0.0.0.0 (a free port for 9092,
    a local storage for its HDFS one), then topics create, produce, consume (told to
    stop after the lines: Kafka's console consumer runs until interrupted) and groups
    describe from 127.0.0.1."""
    readme = (ROOT / "README.md").read_text()
    tour = [line.split("#")[0].strip() for line in readme.splitlines()
            if line.startswith("sparklog ")]
    assert tour[0].startswith("sparklog broker start") and "--listen 0.0.0.0:9092" in tour[0]
    if not _usable(FQDN):
        pytest.skip("this host's canonical name does not resolve")
    storage = (tmp_path / "log").as_uri()
    args = [storage if a.startswith("hdfs://") else a.replace("0.0.0.0:9092", "0.0.0.0:0")
            for a in tour[0].split()[1:]]
    proc = BrokerProcess(storage, log_path=tmp_path / "broker.log")
    proc.command = lambda: [sys.executable, "-m", "sparklog.cli.main", *args]  # type: ignore
    (tmp_path / "lines.txt").write_text("one\ntwo\n")
    with proc:
        port = proc.port
        for line in tour[1:5]:
            line = line.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
            if line.startswith("sparklog consume"):
                line += " --max-messages 2"
            out = subprocess.run(f"{sys.executable} -m sparklog.cli.main {line[9:]}",
                                 shell=True, cwd=tmp_path, capture_output=True, text=True,
                                 timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert out.returncode == 0, (line, out.stdout, out.stderr)
            if line.startswith("sparklog consume"):
                assert sorted(out.stdout.split()) == ["one", "two"]
            if line.startswith("sparklog groups describe"):
                assert "events" in out.stdout


@pytest.mark.skipif(not _usable(FQDN), reason="this host's canonical name does not resolve")
def test_cluster_brokers_on_a_wildcard_register_the_canonical_name(
        zookeeper, storage_root, tmp_path):
    """Cluster mode: brokers bound to 0.0.0.0 with no advertised.listeners register this
    host's canonical name in ZooKeeper, and a client bootstrapping from 127.0.0.1
    reaches every leader through it."""
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")
    from sparklog import Admin, Producer
    from tests.support.clusterproc import BrokerCluster

    with BrokerCluster(storage_root, zookeeper.connect, 2, log_dir=tmp_path,
                       extra_args=["--listen", "0.0.0.0:0"]) as c:
        registered = c.view.live_brokers()
        assert {b.host for b in registered.values()} == {FQDN}, registered
        bootstrap = f"127.0.0.1:{c.brokers[1].port}"
        with Admin(bootstrap) as admin:
            admin.create_topic("t", 4)
        c.wait(lambda: {c.leader_of("t", p) for p in range(4)} == {1, 2}, 20,
               "leaders of t on both brokers")
        with Producer(bootstrap, acks="all") as producer:
            sent = [producer.send("t", b"v", partition=p).get(30) for p in range(4)]
        assert sorted(m.partition for m in sent) == [0, 1, 2, 3]


@pytest.mark.skipif(not _usable(FQDN), reason="this host's canonical name does not resolve")
def test_each_wildcard_listener_is_advertised_by_the_canonical_name(storage_root):
    """Not only the first listener: each bound to a wildcard without an
    advertised.listeners entry is named by the canonical name on its own port."""
    from sparklog.server.embedded import EmbeddedBroker

    props = {"listeners": "LOCAL://127.0.0.1:0,EXTERNAL://0.0.0.0:0",
             "listener.security.protocol.map": "LOCAL:PLAINTEXT,EXTERNAL:PLAINTEXT"}
    with EmbeddedBroker(storage_root, props) as broker:
        bound = broker.broker.listener_addresses
        for name, host in (("LOCAL", "127.0.0.1"), ("EXTERNAL", FQDN)):
            port = int(bound[name].rpartition(":")[2])
            with Connection(f"127.0.0.1:{port}") as conn:
                brokers = conn.request(ApiKey.METADATA, {"topics": []})["brokers"]
            assert [(b["host"], b["port"]) for b in brokers] == [(host, port)], name
