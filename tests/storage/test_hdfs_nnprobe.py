"""The NameNode probe of a long-lived hdfs:// client (sparklog/storage/nnprobe.py), on a
real HDFS cluster of its own (its NameNode is stopped and restarted here).

Two NameNodes of a nameservice are two loopback TCP proxies in front of the cluster's one
NameNode: ``a`` forwards, ``b`` refuses (a NameNode that is down). The failover makes
``a`` a lost host (its proxy silent: connections stay open, nothing is answered, no
reset) and ``b`` the NameNode that answers: the probe's call on the dead connection
times out (``ipc.client.rpc-timeout.ms``), the probe sees ``b`` active, says so once,
and the clients made from then on go to ``b`` first instead of waiting on ``a``. Then
the NameNode itself is stopped and restarted: the probe reports it once, never raises,
and the storage works again; ``close()`` ends every probe thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from types import SimpleNamespace

import pytest

from sparklog.server.broker import Broker
from sparklog.server.config import BrokerConfig
from sparklog.storage import jvm, open_fileio
from tests.support.hdfscluster import HdfsCluster, hadoop_unavailable
from tests.support.waiting import wait_until
from tests.support.zkserver import TcpProxy

NS = "probe"
#: a call on a dead connection waits this long (ms) before it fails over
RPC_TIMEOUT_MS = 6000
#: how often the probe calls each NameNode (s)
INTERVAL = 0.2


def _connections_to(port: int) -> int:
    """Established TCP connections of this process to 127.0.0.1:``port``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[3] == "01" and r[9] in inodes
               and int(r[2].split(":")[1], 16) == port and r[2].startswith("0100007F"))


def _probe_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t.name.startswith("sparklog-nn-probe-")]


def test_broker_probes_its_own_hdfs_storage_only():
    """``storage.namenode.probe.interval.ms`` (default 1000, 0 = off) reaches the
    broker's own hdfs:// FileIO; its helper processes' options and other schemes have
    no probe (no JVM is started here)."""
    def options(uri, props, probe):
        fake = SimpleNamespace(storage_uri=uri, config=BrokerConfig.from_props(props))
        return Broker._storage_options(fake, probe=probe)

    assert options("hdfs://ns1/sparklog", {}, True) == {"namenode_probe_interval": 1.0}
    assert options("hdfs://ns1/sparklog", {"storage.namenode.probe.interval.ms": "250"},
                   True) == {"namenode_probe_interval": 0.25}
    assert options("hdfs://ns1/sparklog", {"storage.namenode.probe.interval.ms": "0"},
                   True) == {"namenode_probe_interval": 0.0}
    assert options("hdfs://ns1/sparklog", {}, False) == {}
    assert "namenode_probe_interval" not in options("sparklog-data", {}, True)
    with pytest.raises(Exception, match="storage.namenode.probe.interval.ms"):
        BrokerConfig.from_props({"storage.namenode.probe.interval.ms": "-1"})
    with pytest.raises(Exception, match="namenode_probe_interval"):
        open_fileio("hdfs://ns1/sparklog", namenode_probe_interval=-1)


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory):
    reason = hadoop_unavailable()
    if reason:
        pytest.skip(reason)
    cluster = HdfsCluster(str(tmp_path_factory.mktemp("hdfs-probe")))
    cluster.start()
    yield cluster
    cluster.stop()


def test_probe_follows_a_lost_namenode_host_and_a_restart_and_stops_on_close(
        own_cluster, caplog):
    cluster = own_cluster
    nn = ("127.0.0.1", cluster.rpc_port)
    proxy_a, proxy_b = TcpProxy(nn), TcpProxy(nn)
    proxy_b.cut()  # b: a NameNode that is down
    conf = {
        "dfs.nameservices": NS,
        f"dfs.ha.namenodes.{NS}": "a,b",
        f"dfs.namenode.rpc-address.{NS}.a": proxy_a.address,
        f"dfs.namenode.rpc-address.{NS}.b": proxy_b.address,
        f"dfs.client.failover.proxy.provider.{NS}":
            "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider",
        "ipc.client.rpc-timeout.ms": str(RPC_TIMEOUT_MS),
        "ipc.client.connect.timeout": "2000",
        "dfs.client.failover.max.attempts": "40",
        "dfs.client.failover.sleep.base.millis": "100",
        "dfs.client.failover.sleep.max.millis": "500",
    }
    url = f"hdfs://{NS}/probe"
    caplog.set_level(logging.INFO, logger="sparklog.storage.nnprobe")
    fs = open_fileio(url, conf_dir=cluster.conf_dir, extra_conf=conf,
                     namenode_probe_interval=INTERVAL)
    try:
        fs.mkdirs(url)  # the first client starts the probe
        probe = fs._probe
        assert probe is not None and [n for n, _ in probe.namenodes] == ["a", "b"]
        wait_until(lambda: probe.active == "a" and (probe.states["b"] or "")
                   .startswith("unavailable"), timeout=60,
                   what="the probe seeing NameNode a active and b down")
        out = fs.create(url + "/open")
        out.write(b"before ")
        out.flush()
        fs.write_atomic(url + "/second", b"z")  # another writer, its own client
        # the probe's calls, the namespace client's and every writer's own client share
        # one connection to NameNode a: what lets the probe find it dead for all of them
        assert _connections_to(proxy_a.port) == 1

        # failover: a's host is lost (silent), b answers
        proxy_a.silence()
        proxy_b.restore()
        wait_until(lambda: probe.active == "b", timeout=RPC_TIMEOUT_MS / 1000 + 60,
                   what="the probe seeing NameNode b active after a's host was lost")
        # the open writer's failover proxy is pointed at b at once, by no call: a call
        # through it would go to a first and wait there (the probe's own call to a is
        # still waiting for its RPC timeout)
        rpc = jvm.jclass("org.apache.hadoop.ipc.RPC")
        writer_nn = out._client.getClient().getNamenode()
        wait_until(lambda: str(rpc.getConnectionIdForProxy(writer_nn))
                   .endswith(f":{proxy_b.port}"), timeout=3.0,
                   what="the open writer's failover proxy pointed at b, well within the "
                        f"{RPC_TIMEOUT_MS} ms a call to a's lost host waits")
        # the probe's call on a's dead connection times out: a is unavailable
        wait_until(lambda: (probe.states["a"] or "").startswith("unavailable"),
                   timeout=RPC_TIMEOUT_MS / 1000 + 30,
                   what="the probe's call to a's lost host timing out")
        # while a does not answer, the probe calls it over a connection of its own, so
        # that its attempts do not hold the connection the clients share
        wait_until(lambda: ("a", True) in probe._proxies, timeout=30,
                   what="the probe calling the lost NameNode a over its own connection")
        shared = rpc.getConnectionIdForProxy(probe._proxies[("a", False)])
        assert not shared.equals(rpc.getConnectionIdForProxy(probe._proxies[("a", True)]))
        changes = [r for r in caplog.records
                   if r.levelno == logging.WARNING and "is active now (was a)" in r.message]
        assert len(changes) == 1, [r.message for r in caplog.records]
        # clients made from now on list b first: the namespace client is a new one and
        # its first call does not wait on the dead connection to a
        assert str(fs._client_conf().get(f"dfs.ha.namenodes.{NS}")) == "b,a"
        namespace_client = fs._fs  # made now, before any call: its proxy starts at b
        first = rpc.getConnectionIdForProxy(namespace_client.getClient().getNamenode())
        assert str(first).endswith(f":{proxy_b.port}"), str(first)  # host/ip:port
        started = time.monotonic()
        assert fs.exists(url + "/open")
        took = time.monotonic() - started
        assert took < RPC_TIMEOUT_MS / 1000, f"a call after the failover took {took:.1f}s"
        fs.write_atomic(url + "/after-failover", b"x")  # a new writer, first to b
        out.write(b"after")
        out.close()  # through the writer's proxy, already at b
        assert fs.read_all(url + "/open") == b"before after"

        # the NameNode stopped, then restarted: reported once, nothing raised
        calls = probe.calls["b"]
        cluster.namenode.stop()
        wait_until(lambda: (probe.states["b"] or "").startswith("unavailable")
                   and probe.calls["b"] >= calls + 5, timeout=60,
                   what="the probe calling the stopped NameNode b five more times")
        down = [r for r in caplog.records if r.levelno == logging.WARNING
                and "NameNode b" in r.message and "does not answer" in r.message]
        assert len(down) == 2, [r.message for r in down]  # at the start, and now
        cluster.namenode.start()
        cluster.wait_live_datanodes(1, timeout=120)
        wait_until(lambda: probe.states["b"] == "active", timeout=60,
                   what="the probe seeing the restarted NameNode b active")
        assert any("NameNode b" in r.message and "answers again" in r.message
                   for r in caplog.records)
        fs.write_atomic(url + "/after-restart", b"y")
        assert fs.read_all(url + "/after-restart") == b"y"
        assert probe.running and _probe_threads()
    finally:
        fs.close()
        proxy_a.close()
        proxy_b.close()
    # close() ended every probe thread (a's was in a call on a silent host)
    assert not probe.running
    assert not _probe_threads(), _probe_threads()
    assert fs._probe is None


def test_probe_is_off_by_default_and_with_zero(own_cluster):
    """Spark tasks and one-off commands open hdfs:// without the option: no probe."""
    for options in ({}, {"namenode_probe_interval": 0}):
        fs = open_fileio(own_cluster.hdfs_uri + "/off", conf_dir=own_cluster.conf_dir,
                         **options)
        try:
            fs.mkdirs(own_cluster.hdfs_uri + "/off")
            assert fs._probe is None and not _probe_threads()
        finally:
            fs.close()


def test_a_broker_on_hdfs_runs_its_probe_and_stops_it(own_cluster, monkeypatch):
    """The broker's own storage starts the probe (``storage.namenode.probe.interval.ms``)
    and the broker's stop ends it: no probe thread left in the process."""
    from sparklog.server import EmbeddedBroker

    monkeypatch.setenv("HADOOP_CONF_DIR", own_cluster.conf_dir)
    broker = EmbeddedBroker(own_cluster.hdfs_uri + "/broker",
                            {"storage.namenode.probe.interval.ms": "200"}).start()
    try:
        probe = broker.broker.fileio._probe
        assert probe is not None and probe.interval == 0.2
        calls = probe.calls[own_cluster.namenode_address]
        wait_until(lambda: probe.calls[own_cluster.namenode_address] >= calls + 3,
                   timeout=60, what="the broker's probe calling its NameNode")
        assert probe.states[own_cluster.namenode_address] == "active"
    finally:
        broker.stop()
    assert not probe.running and not _probe_threads(), _probe_threads()
