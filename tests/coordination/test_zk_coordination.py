"""ZooKeeper coordination against a real ZooKeeper server: registration, controller
election and epochs, leader assignment and failover, controlled shutdown, fencing of a
stale controller, session loss, producer ids, group offsets, topic admin."""

from __future__ import annotations

import json
import threading
import time

import pytest

from sparklog.coordination.base import NO_LEADER, BrokerInfo, CommittedOffset
from sparklog.errors import (
    CoordinationError,
    InvalidArgumentError,
    InvalidConfigError,
    NotLeaderError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata import TopicStore
from tests.support.zkserver import TcpProxy

pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")

from sparklog.coordination import zkadmin  # noqa: E402
from sparklog.coordination.zkclient import connect_zk  # noqa: E402
from sparklog.coordination.zkstore import ZkCoordinationStore  # noqa: E402
from tests.support.waiting import DEFAULT_WAIT  # noqa: E402
from tests.support.waiting import wait_until as _wait_until  # noqa: E402

pytestmark = pytest.mark.zookeeper

SESSION_MS = 2000
#: how long a connect may wait for the server: longer than the short session the tests
#: expire on purpose, so that a loaded machine's slow first answer is not a failure
CONNECT_MS = 20000


def wait_until(cond, timeout=DEFAULT_WAIT, what="condition", accept=bool):
    # a view that has not seen the partition yet raises AttributeError/TypeError
    return _wait_until(cond, timeout, what, ignore=(AttributeError, TypeError), accept=accept)


@pytest.fixture
def cluster(zookeeper, storage_root):
    """Factory of broker stores on the test's chroot; closes them all afterwards."""
    stores = []

    def make(broker_id=None, connect=None, **kw):
        kw.setdefault("session_timeout_ms", SESSION_MS)
        kw.setdefault("connection_timeout_ms", CONNECT_MS)
        store = ZkCoordinationStore(connect or zookeeper.connect,
                                    topic_store=TopicStore(storage_root), **kw)
        stores.append(store)
        if broker_id is not None:
            store.register_broker(BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id))
        return store

    yield make
    for s in reversed(stores):
        s.close()


def leaders(store, topic, n):
    return [store.view.state(topic, p) for p in range(n)]


def all_led(store, topic, n, what=None):
    """The states of ``topic``'s ``n`` partitions once ``store``'s view shows a leader for
    each (``zkadmin.create_topic`` waits for that only up to its ``wait_s``)."""
    return wait_until(lambda: leaders(store, topic, n),
                      accept=lambda st: all(s is not None and s.leader != NO_LEADER for s in st),
                      what=what or f"a leader for each of {topic}'s {n} partitions")


# --- connecting --------------------------------------------------------------------------


def test_connect_creates_chroot_and_kafka_layout(zookeeper):
    client = connect_zk(zookeeper.connect, session_timeout_ms=SESSION_MS,
                        connection_timeout_ms=CONNECT_MS)
    try:
        assert set(client.get_children("/")) >= {"brokers", "admin", "config", "consumers"}
        assert client.exists("/brokers/ids") and client.exists("/brokers/topics")
    finally:
        client.stop()
        client.close()
    root = zookeeper.client()
    try:
        assert root.exists("/brokers/ids")  # really under the chroot
    finally:
        root.stop()
        root.close()


@pytest.mark.parametrize("bad", ["", "127.0.0.1", "host:notaport", ":2181", "h:99999",
                                 "h:2181/a//b", "h:2181/a/../b", 42])
def test_bad_connect_strings_are_refused(bad):
    with pytest.raises(InvalidConfigError, match="zookeeper.connect"):
        connect_zk(bad)


def test_unreachable_zookeeper_is_a_coordination_error():
    from tests.support.processes import free_port

    port = free_port()
    with pytest.raises(CoordinationError, match=f"127.0.0.1:{port}"):
        connect_zk(f"127.0.0.1:{port}", session_timeout_ms=1000, connection_timeout_ms=500)


# --- registration and controller ---------------------------------------------------------------


def test_broker_registration_is_ephemeral_kafka_json(cluster, zookeeper):
    store = cluster(1)
    zk = zookeeper.client()
    try:
        data, stat = zk.get("/brokers/ids/1")
        value = json.loads(data)
        assert value["host"] == "127.0.0.1" and value["port"] == 9001 and value["version"] == 1
        assert stat.ephemeralOwner == store.client.client_id[0]
        store.close()
        assert zk.exists("/brokers/ids/1") is None
    finally:
        zk.stop()
        zk.close()


def test_duplicate_broker_id_is_refused(cluster):
    cluster(1)
    other = cluster(session_timeout_ms=1000)
    t0 = time.monotonic()
    with pytest.raises(InvalidConfigError, match="broker.id 1 is already registered"):
        other.register_broker(BrokerInfo(1, "127.0.0.1", 9999))
    assert time.monotonic() - t0 < 15
    assert other.live_brokers()[1].port == 9001


def test_controller_election_and_epoch(cluster, zookeeper):
    a = cluster(1)
    wait_until(lambda: a.controller and a.controller.active, what="broker 1 controller")
    b = cluster(2)
    wait_until(lambda: b.controller_id() == 1, what="b sees controller 1")
    assert not b.controller.active
    zk = zookeeper.client()
    try:
        assert zk.get("/controller_epoch")[0] == b"1"
        assert json.loads(zk.get("/controller")[0])["brokerid"] == 1
        a.close()
        wait_until(lambda: b.controller.active, what="broker 2 takes over")
        assert zk.get("/controller_epoch")[0] == b"2"
        assert b.controller.epoch == 2
        wait_until(lambda: b.controller_id() == 2, what="view shows controller 2")
    finally:
        zk.stop()
        zk.close()


# --- leaders ------------------------------------------------------------------------------------


def test_topic_leaders_balanced_and_failover_bumps_epoch(cluster):
    a, b, c = cluster(1), cluster(2), cluster(3)
    wait_until(lambda: len(a.live_brokers()) == 3, what="3 brokers")
    zkadmin.create_topic(a, "orders", 6)
    states = all_led(a, "orders", 6)
    assert all(s is not None and s.leader in (1, 2, 3) for s in states)
    counts = {b_: sum(s.leader == b_ for s in states) for b_ in (1, 2, 3)}
    assert sorted(counts.values()) == [2, 2, 2], counts
    assert all(s.leader_epoch == 0 for s in states)
    # every store's view agrees (each is refreshed by its own watches: wait for all three)
    for name, store in (("broker 1", a), ("broker 2", b), ("broker 3", c)):
        wait_until(lambda store=store: leaders(store, "orders", 6) == states,
                   what=f"{name}'s view of orders' leaders to match the controller's")
    # the broker leads exactly what the view says, nobody else can acquire it
    for p, s in enumerate(states):
        owner = {1: a, 2: b, 3: c}[s.leader]
        assert owner.acquire_leadership("orders", p, s.leader) == s
        other_id = 1 if s.leader != 1 else 2
        with pytest.raises(NotLeaderError, match=f"leader is broker {s.leader}"):
            {1: a, 2: b, 3: c}[other_id].acquire_leadership("orders", p, other_id)
    # broker 3 dies (session closed): its partitions move, epochs bump, others keep theirs
    victims = [p for p, s in enumerate(states) if s.leader == 3]
    c.close()
    after = wait_until(lambda: leaders(a, "orders", 6),
                       accept=lambda st: all(x.leader in (1, 2) for x in st),
                       what="leaders moved off broker 3")
    for p in range(6):
        if p in victims:
            assert after[p].leader_epoch == states[p].leader_epoch + 1
        else:
            assert after[p] == states[p]


def test_broker_arrival_rebalances_leaders(cluster):
    a = cluster(1)
    wait_until(lambda: a.controller.active, what="controller")
    zkadmin.create_topic(a, "t", 4)
    assert all(s.leader == 1 for s in all_led(a, "t", 4))
    cluster(2)
    wait_until(lambda: sum(s.leader == 2 for s in leaders(a, "t", 4)) == 2,
               what="two partitions moved to broker 2")
    moved = [s for s in leaders(a, "t", 4) if s.leader == 2]
    assert all(s.leader_epoch == 1 for s in moved)


def test_a_topic_created_with_no_broker_says_its_partitions_have_no_leader(cluster, caplog):
    """create_topic with no broker registered (so no controller either) still creates
    the topic, but warns, naming them, that its partitions have no leader after its
    wait; the first broker to arrive leads them."""
    admin = cluster()  # an admin-side store, no broker
    with caplog.at_level("WARNING", logger="sparklog.coordination.zkadmin"):
        config = zkadmin.create_topic(admin, "lonely", 3, wait_s=0.5)
    assert config.partitions == 3
    warned = [r.getMessage() for r in caplog.records if "lonely" in r.getMessage()]
    assert warned and "partitions [0, 1, 2] have no leader" in warned[0], caplog.text
    cluster(1)
    assert all(s.leader == 1 for s in all_led(admin, "lonely", 3))


def test_no_live_broker_means_no_leader_then_recovery(cluster):
    a = cluster(1)
    wait_until(lambda: a.controller.active, what="controller")
    zkadmin.create_topic(a, "t", 2)
    watcher = cluster()  # an admin-side view with no broker
    a.close()
    # nobody can elect: the states still name broker 1 (its registration is gone)
    wait_until(lambda: 1 not in watcher.live_brokers(), what="broker 1 gone")
    b = cluster(2)
    wait_until(lambda: all(s.leader == 2 for s in leaders(watcher, "t", 2)),
               what="broker 2 leads everything")
    assert all(s.leader_epoch == 1 for s in leaders(watcher, "t", 2))
    del b


def test_controlled_shutdown_moves_leadership_first(cluster):
    a, b = cluster(1), cluster(2)
    wait_until(lambda: len(a.live_brokers()) == 2, what="2 brokers")
    zkadmin.create_topic(a, "t", 4)
    before = all_led(a, "t", 4)
    assert any(s.leader == 1 for s in before)
    t0 = time.monotonic()
    assert a.controlled_shutdown(1, timeout_s=10)
    assert time.monotonic() - t0 < 10  # its timeout_s; a's session never expired
    after = leaders(a, "t", 4)
    assert all(s.leader == 2 for s in after)
    for s0, s1 in zip(before, after):
        assert s1.leader_epoch == s0.leader_epoch + (1 if s0.leader == 1 else 0)
    with pytest.raises(NotLeaderError):
        a.acquire_leadership("t", 0, 1)
    # the shutting-down broker gets nothing back while it is still registered
    zkadmin.create_topic(b, "u", 2)
    wait_until(lambda: all(s is not None for s in leaders(a, "u", 2)), what="a sees u")
    assert all(s.leader == 2 for s in leaders(a, "u", 2))


def test_stale_controller_cannot_write_states(cluster, zookeeper):
    a = cluster(1)
    wait_until(lambda: a.controller.active, what="controller")
    zkadmin.create_topic(a, "t", 2)
    zk = zookeeper.client()
    try:
        seen = []
        zk.DataWatch("/brokers/topics/t/partitions/1/state",
                     lambda data, stat: seen.append(json.loads(data)) if data else None)
        # another controller was elected meanwhile: the epoch moved behind a's back
        data, stat = zk.get("/controller_epoch")
        stale = int(data)
        zk.set("/controller_epoch", str(stale + 1).encode(), version=stat.version)
        cluster(2)  # arrival: a tries to move one partition onto broker 2
        # a's write with the stale epoch is refused; a notices, re-elects itself (it still
        # owns /controller) with a fresh epoch, and only then moves the partition
        wait_until(lambda: a.controller.active and a.controller.epoch == stale + 2,
                   what="a re-elected with a new epoch")
        wait_until(lambda: sorted(s.leader for s in leaders(a, "t", 2)) == [1, 2],
                   what="one partition moved to broker 2")
        moved = [v for v in seen if v["leader"] == 2]
        assert moved or json.loads(zk.get("/brokers/topics/t/partitions/0/state")[0])[
            "controller_epoch"] == stale + 2
        assert all(v["controller_epoch"] in (stale, stale + 2) for v in seen)
        assert all(v["controller_epoch"] == stale + 2 for v in moved)
    finally:
        zk.stop()
        zk.close()


# --- session loss --------------------------------------------------------------------------------


def test_session_loss_stops_leadership_and_recovers(cluster, zookeeper):
    proxy = TcpProxy(("127.0.0.1", zookeeper.server.port))
    try:
        a = cluster(1, connect=proxy.address + zookeeper.chroot)
        b = cluster(2)
        wait_until(lambda: len(b.live_brokers()) == 2, what="2 brokers")
        zkadmin.create_topic(b, "t", 2)
        wait_until(lambda: all(s is not None for s in leaders(a, "t", 2))
                   and any(s.leader == 1 for s in leaders(a, "t", 2)),
                   what="broker 1 leads something")
        mine = [p for p, s in enumerate(leaders(a, "t", 2)) if s.leader == 1]
        assert a.leader_epoch("t", mine[0]) is not None
        proxy.cut()
        # broker 1 stops claiming leadership as soon as its connection is gone
        wait_until(lambda: a.leader_epoch("t", mine[0]) is None, timeout=SESSION_MS / 1000,
                   what="broker 1 stops proving leadership")
        with pytest.raises(NotLeaderError, match="cannot prove"):
            a.acquire_leadership("t", mine[0], 1)
        # its session expires: the controller moves the partitions to broker 2
        wait_until(lambda: all(s.leader == 2 for s in leaders(b, "t", 2)), timeout=10,
                   what="partitions moved to broker 2")
        proxy.restore()
        # broker 1 comes back: new session, re-registered, view trusted again
        wait_until(lambda: 1 in b.live_brokers(), what="broker 1 re-registered")
        wait_until(lambda: a.view.trusted, timeout=10, what="broker 1's view trusted")
        assert a.view.state("t", mine[0]).leader_epoch > 0
        a.close()
    finally:
        proxy.close()


# --- producer ids and offsets ----------------------------------------------------------------------


def test_producer_id_blocks_are_unique_across_brokers(cluster):
    stores = [cluster(1), cluster(2), cluster(3)]
    got = []
    lock = threading.Lock()

    def grab(store):
        for _ in range(20):
            start = store.allocate_producer_ids(10)
            with lock:
                got.append(start)

    threads = [threading.Thread(target=grab, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = sorted(got)
    assert len(ids) == 60
    assert all(b - a >= 10 for a, b in zip(ids, ids[1:]))
    with pytest.raises(InvalidArgumentError):
        stores[0].allocate_producer_ids(0)


def test_group_offsets_in_kafka_layout(cluster, zookeeper):
    store = cluster(1)
    store.commit_offsets("g1", {("t", 0): CommittedOffset(42),
                                ("t", 1): CommittedOffset(7, "meta")})
    zk = zookeeper.client()
    try:
        assert zk.get("/consumers/g1/offsets/t/0")[0] == b"42"
    finally:
        zk.stop()
        zk.close()
    got = store.fetch_offsets("g1")
    assert {k: (v.offset, v.metadata) for k, v in got.items()} == {
        ("t", 0): (42, ""), ("t", 1): (7, "meta")}
    store.commit_offsets("g1", {("t", 0): CommittedOffset(50)})
    assert store.fetch_offsets("g1", [("t", 0), ("t", 5)])[("t", 0)].offset == 50
    assert ("t", 5) not in store.fetch_offsets("g1", [("t", 5)])
    assert "g1" in store.list_groups()
    store.delete_offsets("g1", ["t"])
    assert store.fetch_offsets("g1") == {}
    with pytest.raises(InvalidArgumentError, match="group id"):
        store.commit_offsets("a\nb", {("t", 0): CommittedOffset(1)})
    with pytest.raises(InvalidArgumentError):
        store.commit_offsets("g", {("t", 0): 5})


def test_group_ids_zookeeper_cannot_hold_are_escaped(cluster, zookeeper):
    """Kafka allows '/', '#', '.' ... in group ids; each is stored under its escaped
    node name, apart from every other group."""
    store = cluster(1)
    groups = {"a/b": 1, "a": 2, "..": 3, "team#1": 4, "x%2Fy": 5, "\ue000": 6, "a:b": 7}
    for group, offset in groups.items():
        store.commit_offsets(group, {("t", 0): CommittedOffset(offset)})
    for group, offset in groups.items():
        assert store.fetch_offsets(group)[("t", 0)].offset == offset
    assert set(groups) <= set(store.list_groups())
    zk = zookeeper.client()
    try:
        assert zk.get("/consumers/a%2Fb/offsets/t/0")[0] == b"1"
        assert zk.get("/consumers/%2E./offsets/t/0")[0] == b"3"
        assert zk.get("/consumers/team#1/offsets/t/0")[0] == b"4"  # Kafka 0.8's node
        assert zk.get("/consumers/a:b/offsets/t/0")[0] == b"7"
    finally:
        zk.stop()
        zk.close()


# --- topic admin ----------------------------------------------------------------------------------


def test_topic_create_alter_delete_through_controller(cluster, storage_root):
    a, b = cluster(1), cluster(2)
    wait_until(lambda: len(a.live_brokers()) == 2, what="2 brokers")
    zkadmin.create_topic(a, "t", 2)
    with pytest.raises(TopicExistsError):
        zkadmin.create_topic(b, "t", 2)
    assert TopicStore(storage_root).describe_topic("t").partitions == 2
    zkadmin.alter_topic(b, "t", partitions=4, configs={"retention.ms": "1000"})
    # alter_topic waited for b's view; a's view follows its own watches
    assert all(s.leader in (1, 2) for s in all_led(a, "t", 4, what=(
        "broker 1's view of a leader for each of t's 4 partitions")))
    assert a.view.topics()["t"] == 4
    zkadmin.delete_topic(b, "t")
    assert not TopicStore(storage_root).topic_exists("t")
    wait_until(lambda: "t" not in a.view.topics(), what="views drop the topic")
    assert a.view.state("t", 0) is None
    with pytest.raises(UnknownTopicOrPartitionError):
        zkadmin.delete_topic(b, "t")


def test_new_controller_registers_storage_only_topics(cluster, storage_root):
    TopicStore(storage_root).create_topic("orphan", 3)  # creator died before ZooKeeper
    a = cluster(1)
    wait_until(lambda: all(s is not None and s.leader == 1 for s in leaders(a, "orphan", 3)),
               what="orphan topic registered and led")
    assert NO_LEADER not in [s.leader for s in leaders(a, "orphan", 3)]
