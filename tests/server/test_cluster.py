"""Cluster mode with real broker processes and a real ZooKeeper: metadata across brokers,
produce and consume through any bootstrap broker, duplicate broker ids, controlled
shutdown, and a broker cut off from ZooKeeper that stops acknowledging."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.zkserver import TcpProxy

pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")

from sparklog import Admin, Consumer, Producer  # noqa: E402
from sparklog.clients.types import TopicPartition  # noqa: E402
from sparklog.errors import InvalidProducerIdMappingError, NotLeaderError, SparklogError  # noqa: E402
from sparklog.protocol import ApiKey, Connection  # noqa: E402
from tests.support.brokerproc import ROOT, BrokerProcess  # noqa: E402
from tests.support.clusterproc import BrokerCluster, produce_accepted, produce_one  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402
from tests.support.wire import forge_next, try_read_values  # noqa: E402

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def cluster(zookeeper, storage_root, tmp_path):
    with BrokerCluster(storage_root, zookeeper.connect, 3, log_dir=tmp_path) as c:
        yield c


def test_metadata_names_every_broker_and_spread_leaders(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 6)
        desc = admin.describe_topics(["t"])[0]
    leaders = {p.leader for p in desc.partitions}
    assert leaders == {1, 2, 3}, desc.partitions
    expected = {p.partition: p.leader for p in desc.partitions}

    def answer(b):
        with Connection(b.address) as conn:
            return conn.request(ApiKey.METADATA, {"topics": ["t"]})

    for i, b in cluster.brokers.items():  # every broker answers the same metadata
        # (each once its own watched view has caught up with the controller's writes)
        meta = wait_until(lambda b=b: answer(b), accept=lambda m: {
            p["partition"]: p["leader"] for p in m["topics"][0]["partitions"]} == expected,
            what=f"broker {i}'s metadata naming t's leaders")
        assert sorted(x["node_id"] for x in meta["brokers"]) == [1, 2, 3]
        assert meta["controller_id"] in (1, 2, 3)


def test_produce_and_consume_through_any_bootstrap_broker(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 3)
    with Producer(cluster.brokers[2].address, acks="all", enable_idempotence=True) as producer:
        futures = [producer.send("t", f"v{i}".encode(), partition=i % 3) for i in range(90)]
        offsets = [f.get(30) for f in futures]
    assert {m.partition for m in offsets} == {0, 1, 2}
    consumer = Consumer(bootstrap_servers=cluster.brokers[3].address,
                        auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition("t", p) for p in range(3)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 90 and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(90))


def test_brokers_on_a_wildcard_listener_register_their_advertised_name(
        zookeeper, storage_root, tmp_path):
    """Brokers bound to 0.0.0.0 (as the deploy kit configures them) register the
    advertised host in ZooKeeper, and a client bootstrapping from one broker reaches
    every leader through the advertised names."""
    args = ["--listen", "0.0.0.0:0", "--override", "advertised.listeners=PLAINTEXT://localhost:0"]
    with BrokerCluster(storage_root, zookeeper.connect, 2, log_dir=tmp_path,
                       extra_args=args) as c:
        registered = c.view.live_brokers()
        assert {b.host for b in registered.values()} == {"localhost"}, registered
        assert {i: b.port for i, b in registered.items()} == \
            {i: b.port for i, b in c.brokers.items()}
        with Admin(c.brokers[1].address) as admin:
            admin.create_topic("t", 4)
        c.wait(lambda: {c.leader_of("t", p) for p in range(4)} == {1, 2}, 20,
               "leaders of t on both brokers")
        with Producer(c.brokers[1].address, acks="all") as producer:
            sent = [producer.send("t", b"v", partition=p).get(30) for p in range(4)]
        assert sorted(m.partition for m in sent) == [0, 1, 2, 3]


def test_a_non_leader_refuses_writes_with_not_leader(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 1)
    cluster.wait(lambda: cluster.leader_of("t", 0) > 0, what="a leader")
    leader = cluster.leader_of("t", 0)
    with Connection(cluster.brokers[leader].address) as conn:
        produce_accepted(conn, "t", 0, b"x")
    other = next(i for i in cluster.brokers if i != leader)
    with Connection(cluster.brokers[other].address) as conn:
        # the other broker's watched view may not know the topic or its leader yet: it
        # refuses then too, naming no leader; wait until it names the leader (an accepted
        # write ends the wait and fails the test)
        item = wait_until(lambda: produce_one(conn, "t", 0, b"x"),
                          accept=lambda it: it["error_code"] == 0
                          or f"leader: broker {leader}" in it["error_message"],
                          what=f"broker {other} naming broker {leader} as t-0's leader")
    assert item["error_code"] == NotLeaderError.code, item


def test_a_producer_id_stays_bound_on_other_brokers_and_across_a_leader_move(cluster):
    """The producer gets its id from broker 1 and writes to partitions every broker
    leads; a frame forged in its name is refused by the leader, and again by the new
    leader after the partition moved (its broker stopped), where the producer writes on
    with the same id at its own offsets (docs/security.md, "Producer ids")."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("bound", 3)
    cluster.wait(lambda: {cluster.leader_of("bound", p) for p in range(3)} == {1, 2, 3}, 20,
                 "a leader of bound on every broker")
    with Producer(cluster.brokers[1].address, acks="all", enable_idempotence=True,
                  linger_ms=0) as producer:
        acked = [producer.send("bound", b"a%d" % p, partition=p).get(30) for p in range(3)]
        assert [m.offset for m in acked] == [0, 0, 0]
        pid = producer.metrics()["producer_id"]
        leader = cluster.leader_of("bound", 0)
        with Connection(cluster.brokers[leader].address) as attacker:
            refused = forge_next(attacker, "bound", 0)
            assert refused["error_code"] == InvalidProducerIdMappingError.code, refused
        assert cluster.brokers[leader].stop() == 0
        moved = wait_until(lambda: cluster.state("bound", 0),
                           accept=lambda st: st.leader not in (-1, leader),
                           what="a new leader of bound-0")
        assert producer.send("bound", b"b0", partition=0).get(30).offset == 1
        with Connection(cluster.brokers[moved.leader].address) as attacker:
            for bump in (False, True):
                refused = forge_next(attacker, "bound", 0, bump_epoch=bump)
                assert refused["error_code"] == InvalidProducerIdMappingError.code, refused
        assert producer.send("bound", b"c0", partition=0).get(30).offset == 2
        assert producer.metrics()["producer_id"] == pid
    with Connection(cluster.brokers[moved.leader].address) as conn:
        assert try_read_values(conn, "bound", 0, strict=True) == [b"a0", b"b0", b"c0"]


def test_duplicate_broker_id_process_exits_with_a_clear_error(cluster, storage_root, zookeeper):
    cmd = [sys.executable, "-m", "sparklog.cli.main", "broker", "start", "--storage",
           storage_root, "--listen", "127.0.0.1:0", "--zookeeper", zookeeper.connect,
           "--broker-id", "2", "--override", "zookeeper.session.timeout.ms=1000"]
    proc = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "broker.id 2 is already registered" in proc.stderr


def test_sigterm_moves_leadership_before_exit(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 3)
    cluster.wait(lambda: cluster.leader_of("t", 0) > 0, what="a leader")
    leader = cluster.leader_of("t", 0)
    before = cluster.state("t", 0)
    t0 = time.monotonic()
    assert cluster.brokers[leader].stop() == 0
    elapsed = time.monotonic() - t0
    # the controller moved the partition while the broker was still shutting down
    # (the test's own watched view learns it a moment later)
    after = wait_until(lambda: cluster.state("t", 0), accept=lambda st: st.leader != leader,
                       what="the test's view of t-0's new leader")
    assert after.leader not in (-1, leader) and after.leader_epoch == before.leader_epoch + 1
    assert "controlled shutdown" not in cluster.brokers[leader].log_text() or elapsed < 30
    with Connection(cluster.brokers[after.leader].address) as conn:
        produce_accepted(conn, "t", 0, b"after")


def test_broker_cut_off_from_zookeeper_stops_acknowledging(zookeeper, storage_root, tmp_path):
    proxy = TcpProxy(("127.0.0.1", zookeeper.server.port))
    cut_off = BrokerProcess(storage_root, [
        "--zookeeper", proxy.address + zookeeper.chroot, "--broker-id", "1",
        "--override", "zookeeper.session.timeout.ms=2000"], log_path=tmp_path / "b1.log")
    try:
        with BrokerCluster(storage_root, zookeeper.connect, 0, session_ms=2000) as cluster:
            cut_off.start()
            cluster.wait(lambda: 1 in cluster.view.live_brokers(), what="broker 1 registered")
            with Admin(cut_off.address) as admin:
                admin.create_topic("t", 1)
            cluster.wait(lambda: cluster.leader_of("t", 0) == 1, what="broker 1 leads t-0")
            with Connection(cut_off.address) as conn:
                produce_accepted(conn, "t", 0, b"before")
                proxy.cut()

                def refused():
                    item = produce_one(conn, "t", 0, b"during")
                    return item if item["error_code"] == NotLeaderError.code else None

                item = wait_until(refused, what="broker 1, cut off from ZooKeeper, "
                                  "refusing to acknowledge")
                assert "cannot prove" in item["error_message"]
                assert "ZooKeeper session" in cut_off.log_text()
                proxy.restore()  # it comes back: new session, leads again, acknowledges
                wait_until(lambda: produce_one(conn, "t", 0, b"after")["error_code"] == 0,
                           what="broker 1 acknowledging again after ZooKeeper came back")
    finally:
        try:
            cut_off.stop(timeout=30)
        except (RuntimeError, SparklogError):
            pass
        proxy.close()


def test_zookeeper_consumer_group_splits_partitions_and_groups_describe(cluster, zookeeper):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 4)
    consumers = [Consumer("t", bootstrap_servers=cluster.bootstrap, group_id="g",
                          group_membership="zookeeper", zookeeper_connect=zookeeper.connect,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          session_timeout_ms=2000) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while True:  # the group settles: each member owns two partitions
            for c in consumers:
                c.poll(50)
            mine = [set(c.assignment()) for c in consumers]
            if len(mine[0]) == 2 and len(mine[1]) == 2 and not mine[0] & mine[1]:
                break
            assert time.monotonic() < deadline, mine
        with Producer(cluster.bootstrap, acks="all") as producer:
            for f in [producer.send("t", b"r%d" % i, partition=i % 4) for i in range(200)]:
                f.get(30)
        got = {0: [], 1: []}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < 200 and time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                for records in c.poll(200).values():
                    got[i] += [r.value for r in records]
        assert len(got[0]) == 100 and len(got[1]) == 100
        assert sorted(got[0] + got[1]) == sorted(b"r%d" % i for i in range(200))
        for c in consumers:
            c.commit()
        out = subprocess.run(
            [sys.executable, "-m", "sparklog.cli.main", "groups", "describe", "g",
             "--bootstrap-server", cluster.brokers[1].address],
            cwd=str(ROOT), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rows = [line.split() for line in out.stdout.splitlines() if line.startswith("g ")]
        assert len(rows) == 4, out.stdout
        assert all(r[3] == "50" and r[5] == "0" for r in rows), out.stdout  # offset 50, lag 0
        owners = {r[6] for r in rows}
        assert len(owners) == 2, out.stdout  # each partition names its ZooKeeper owner
    finally:
        for c in consumers:
            c.close()


def test_config_altered_on_one_broker_applies_on_the_leader(cluster, storage_root):
    from sparklog.metadata import TopicStore

    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 1)
    cluster.wait(lambda: cluster.leader_of("t", 0) > 0, what="a leader")
    leader = cluster.leader_of("t", 0)
    other = next(i for i in cluster.brokers if i != leader)
    with Connection(cluster.brokers[leader].address) as conn:
        produce_accepted(conn, "t", 0, b"x")
    with Admin(cluster.brokers[other].address) as admin:  # not the leader
        admin.alter_configs({"t": {"segment.bytes": "1500"}})
    store = TopicStore(storage_root)
    seg_dir = store.partition_dir("t", 0)
    with Connection(cluster.brokers[leader].address) as conn:
        def rolled():  # the leader rolls at the new segment.bytes once it heard of it
            assert produce_one(conn, "t", 0, b"y")["error_code"] == 0
            logs = [i.name for i in store.fileio.list(seg_dir) if i.name.endswith(".log")]
            return len(logs) >= 3

        wait_until(rolled, what="the leader rolling at the segment.bytes altered elsewhere")
    assert "config version 2 applied" in cluster.brokers[leader].log_text()


def _signal_all(cluster, sig) -> None:
    """Send ``sig`` to every broker process of ``cluster``."""
    for broker in cluster.brokers.values():
        os.kill(broker.pid, sig)


@pytest.mark.parametrize("expire", [False, True], ids=["sessions-resume", "sessions-expire"])
def test_zookeeper_down_stops_acks_until_it_returns(storage_root, tmp_path, expire):
    """The whole ensemble stops: the leader refuses to acknowledge. It starts again:
    the partition's leader acknowledges again and the record acknowledged before is
    there once. ``sessions-expire``: the brokers stay paused until the restarted server
    has expired their sessions (as a slow reconnect on a loaded machine does), so they
    register anew and the controller may move the partition to another broker."""
    import signal

    from tests.support.zkserver import ZooKeeperServer

    zk = ZooKeeperServer(str(tmp_path / "zk")).start()
    try:
        with BrokerCluster(storage_root, zk.hosts + "/c", 2, log_dir=tmp_path,
                           session_ms=4000) as cluster:
            with Admin(cluster.bootstrap) as admin:
                admin.create_topic("t", 1)
            cluster.wait(lambda: cluster.leader_of("t", 0) > 0, what="a leader")
            leader = cluster.brokers[cluster.leader_of("t", 0)]
            with Connection(leader.address) as conn:
                produce_accepted(conn, "t", 0, b"before")
                zk.stop()  # the whole ensemble is gone
                item = wait_until(
                    lambda: produce_one(conn, "t", 0, b"during"),
                    accept=lambda it: it["error_code"], what="the leader refusing to acknowledge without ZooKeeper")
                assert item["error_code"] == NotLeaderError.code, item
                if not expire:
                    zk.start()  # same port and data
                else:
                    _signal_all(cluster, signal.SIGSTOP)
                    try:
                        zk.start()
                        cluster.wait(lambda: cluster.view.view.trusted
                                     and not cluster.view.live_brokers(), 60,
                                     what="the paused brokers' sessions expired")
                    finally:
                        _signal_all(cluster, signal.SIGCONT)
            # Sessions resume and the leader re-proves its leadership; or, when a broker
            # reconnects after its session timed out on the restarted server (a loaded
            # machine's slow reconnect), the session expired and the controller may have
            # moved the partition: either way the partition's leader acknowledges again.
            # The controller may move it again right after that acknowledgement, so the
            # values are read from whichever broker leads when they are read.

            def on_leader(request):
                leader = cluster.leader_of("t", 0)
                if leader not in cluster.brokers:
                    return None
                with Connection(cluster.brokers[leader].address) as c:
                    return request(c)

            wait_until(lambda: on_leader(
                lambda c: produce_one(c, "t", 0, b"after")["error_code"] == 0),
                ignore=(OSError,),
                what="the partition's leader acknowledging again once ZooKeeper is back")
            values = wait_until(lambda: on_leader(lambda c: try_read_values(c, "t", 0)),
                                ignore=(OSError,), what="the partition's leader's values")
            assert values.count(b"before") == 1 and values[-1] == b"after", values
            # a lost session is a WARNING line in each log, not a burst of tracebacks
            for i, b in cluster.brokers.items():
                assert "Traceback" not in b.log_text(), f"broker {i}:\n{b.log_text()}"
    finally:
        zk.stop()


def test_metadata_names_the_new_leader_of_a_lost_broker_with_every_io_thread_held(
        zookeeper, storage_root, tmp_path):
    """A broker host lost (its process paused: no answers, its ZooKeeper session
    expires): another broker's Metadata answer names the partitions' new leaders within
    the session timeout plus 2 s (plus this loaded test machine's slack), even while every
    storage I/O thread of the answering broker is held, as a write pipeline through the
    lost host's DataNode holds them until ``dfs.client.socket-timeout``. The answer comes
    from the broker's watched view of ZooKeeper; it used to read the cluster id on an I/O
    thread first and so waited behind the stalled writes."""
    import signal
    import threading

    from sparklog.server import EmbeddedBroker

    slack = 8.0  # the lab's target is the session timeout + 2 s; CI shares its cores
    with BrokerCluster(storage_root, zookeeper.connect, 2, log_dir=tmp_path) as cluster:
        answering = EmbeddedBroker(storage_root, {
            "broker.id": "3", "zookeeper.connect": zookeeper.connect,
            "zookeeper.session.timeout.ms": str(cluster.session_ms),
            "num.io.threads": "2"}).start()
        held = threading.Event()
        lost = None
        try:
            cluster.wait(lambda: len(cluster.view.live_brokers()) == 3,
                         what="broker 3 (in this process) registered")
            with Admin(cluster.bootstrap) as admin:
                admin.create_topic("t", 6)
            cluster.wait(lambda: all(cluster.leader_of("t", p) > 0 for p in range(6)),
                         what="a leader for every partition of t")
            lost = cluster.leader_of("t", 0) if cluster.leader_of("t", 0) != 3 else \
                next(cluster.leader_of("t", p) for p in range(6)
                     if cluster.leader_of("t", p) != 3)
            moved = [p for p in range(6) if cluster.leader_of("t", p) == lost]
            with Connection(answering.address) as conn:

                def leaders() -> dict:
                    meta = conn.request(ApiKey.METADATA, {"topics": ["t"]})
                    return {x["partition"]: x["leader"] for x in meta["topics"][0]["partitions"]}

                assert {leaders()[p] for p in moved} == {lost}  # t's config now cached
                pool = answering.broker.pool
                holds = [pool.submit(held.wait) for _ in range(answering.config.num_io_threads)]
                os.kill(cluster.brokers[lost].pid, signal.SIGSTOP)  # the test's own process
                new = wait_until(
                    leaders, accept=lambda got: all(got[p] not in (-1, lost) for p in moved),
                    timeout=cluster.session_ms / 1000 + 2 + slack,
                    what=f"broker 3's Metadata answer naming new leaders of {moved} (broker "
                         f"{lost} paused) within the session timeout + 2 s, its I/O threads "
                         "held")
                assert not any(h.done() for h in holds)  # held throughout
                cluster.wait(lambda: all(new[p] == cluster.leader_of("t", p) for p in moved),
                             what="the test's own view of ZooKeeper naming the same leaders")
        finally:
            held.set()
            if lost is not None:
                os.kill(cluster.brokers[lost].pid, signal.SIGCONT)
            answering.stop()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_broker_stopped_during_handovers_leaves_no_task_behind(zookeeper, storage_root,
                                                                 caplog):
    """A broker stopped right after a topic of many partitions was created, while it is
    still opening their logs: the handovers end (or are cancelled) before its event loop
    closes. A handover left pending was destroyed with the loop ("Task was destroyed but
    it is pending"), and with another handover of the partition waiting for its lock,
    the lock's release raised "Event loop is closed" (unraisable: an error here)."""
    import gc

    from sparklog.server import EmbeddedBroker

    for i in range(3):
        with EmbeddedBroker(storage_root, {
                "broker.id": "1", "zookeeper.connect": zookeeper.connect,
                "zookeeper.session.timeout.ms": "4000"}) as broker:
            with Admin(broker.bootstrap_servers) as admin:
                admin.create_topic(f"many-{i}", 24)
            leadership = broker.broker.leadership
        assert not leadership._tasks, leadership._tasks
        gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
