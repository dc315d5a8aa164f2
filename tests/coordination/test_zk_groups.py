"""Consumer groups in ZooKeeper (Kafka 0.8's layout and rebalance) on a real server."""

from __future__ import annotations

import json

import pytest

from sparklog.coordination.base import CommittedOffset
from sparklog.errors import InvalidArgumentError
from sparklog.metadata import TopicStore
from tests.support.waiting import wait_until

pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")

from sparklog.coordination import zkadmin  # noqa: E402
from sparklog.coordination.zkgroups import ZkGroupMember, describe_group  # noqa: E402
from sparklog.coordination.zkstore import ZkCoordinationStore  # noqa: E402

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def store(zookeeper, storage_root):
    s = ZkCoordinationStore(zookeeper.connect, topic_store=TopicStore(storage_root),
                            session_timeout_ms=2000)
    yield s
    s.close()


@pytest.fixture
def members(zookeeper):
    made = []

    def make(group, topics, cid, **kw):
        m = ZkGroupMember(zookeeper.connect, group, topics, consumer_id=cid,
                          session_timeout_ms=2000, rebalance_backoff_ms=50, **kw).start()
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def settled(ms, topic_counts):
    """Every partition owned by exactly one of ``ms`` (and nothing else)."""
    owned = [tp for m in ms for tp in m.assignment()]
    want = sorted((t, p) for t, n in topic_counts.items() for p in range(n))
    return sorted(owned) == want


def test_range_assignment_across_members_and_rebalance_on_leave(store, members, zookeeper):
    zkadmin.create_topic(store, "t", 10, wait_s=0)
    a = members("g", ["t"], "c0")
    assert a.assignment() == [("t", p) for p in range(10)]
    b = members("g", ["t"], "c1")
    c = members("g", ["t"], "c2")
    wait_until(lambda: settled([a, b, c], {"t": 10}), what="three members settled")
    assert [len(m.assignment()) for m in (a, b, c)] == [4, 3, 3]
    assert a.assignment() == [("t", p) for p in range(4)]
    # the owner nodes say who owns what (Kafka 0.8's /consumers/g/owners/t/p)
    zk = zookeeper.client()
    try:
        assert zk.get("/consumers/g/owners/t/5")[0] == b"c1"
        sub = json.loads(zk.get("/consumers/g/ids/c2")[0])
        assert sub["subscription"] == {"t": 1} and sub["pattern"] == "static"
    finally:
        zk.stop()
        zk.close()
    b.close()
    wait_until(lambda: settled([a, c], {"t": 10}), what="two members settled")
    assert [len(m.assignment()) for m in (a, c)] == [5, 5]


def test_more_partitions_trigger_a_rebalance(store, members):
    zkadmin.create_topic(store, "t", 2, wait_s=0)
    a, b = members("g", ["t"], "a"), members("g", ["t"], "b")
    wait_until(lambda: settled([a, b], {"t": 2}), what="settled on 2")
    zkadmin.alter_topic(store, "t", partitions=6, wait_s=0)
    wait_until(lambda: settled([a, b], {"t": 6}), what="settled on 6")
    assert [len(m.assignment()) for m in (a, b)] == [3, 3]


def test_member_with_different_subscriptions_and_missing_topic(store, members):
    zkadmin.create_topic(store, "x", 2, wait_s=0)
    a = members("g", ["x", "later"], "a")
    b = members("g", ["x"], "b")
    wait_until(lambda: settled([a, b], {"x": 2}), what="settled")
    zkadmin.create_topic(store, "later", 3, wait_s=0)  # a watches its creation
    wait_until(lambda: settled([a, b], {"x": 2, "later": 3}), what="new topic owned")
    assert [tp for tp in a.assignment() if tp[0] == "later"] == [("later", p) for p in range(3)]


def test_lost_session_gives_partitions_to_the_others(store, members, zookeeper):
    from tests.support.zkserver import TcpProxy

    zkadmin.create_topic(store, "t", 4, wait_s=0)
    proxy = TcpProxy(("127.0.0.1", zookeeper.server.port))
    try:
        cut = ZkGroupMember(proxy.address + zookeeper.chroot, "g", ["t"], consumer_id="cut",
                            session_timeout_ms=1000, rebalance_backoff_ms=50).start()
        other = members("g", ["t"], "other")
        wait_until(lambda: settled([cut, other], {"t": 4}), what="settled")
        proxy.cut()
        wait_until(lambda: settled([other], {"t": 4}), what="the other member owns all")
        proxy.restore()
        wait_until(lambda: settled([cut, other], {"t": 4}) and cut.assignment(),
                   what="the member rejoined")
        cut.close()
    finally:
        proxy.close()


def test_describe_group_and_offsets(store, members):
    zkadmin.create_topic(store, "t", 2, wait_s=0)
    a = members("g", ["t"], "a")
    store.commit_offsets("g", {("t", 0): CommittedOffset(17)})
    got = describe_group(store, "g")
    assert got["members"] == {"a": ["t"]}
    assert got["owners"] == {("t", 0): "a", ("t", 1): "a"}
    assert got["offsets"][("t", 0)].offset == 17
    assert "g" in store.list_groups()
    a.close()
    assert describe_group(store, "g")["members"] == {}


def test_bad_arguments(zookeeper):
    with pytest.raises(InvalidArgumentError, match="group id"):
        ZkGroupMember(zookeeper.connect, "a\tb", ["t"])  # '/' is escaped, not refused
    with pytest.raises(InvalidArgumentError, match="consumer id"):
        ZkGroupMember(zookeeper.connect, "g", ["t"], consumer_id="c/1")
    with pytest.raises(InvalidArgumentError, match="at least one topic"):
        ZkGroupMember(zookeeper.connect, "g", [])
