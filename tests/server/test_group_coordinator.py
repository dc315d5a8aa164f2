"""Consumer groups and the topics they read: deleting a topic deletes every group's
committed offsets of it (Kafka's behaviour), in standalone and in cluster mode, so a
topic re-created under the name starts each group from its reset policy; standalone,
FindCoordinator names the broker itself (cluster mode: test_group_coordinator_cluster.py)."""

from __future__ import annotations

import itertools
import time

import pytest

import sparklog
from sparklog.clients.types import TopicPartition

_names = itertools.count()


def _commit(address: str, group: str, tp: TopicPartition, offset: int) -> None:
    with sparklog.Consumer(bootstrap_servers=address, group_id=group) as c:
        c.assign([tp])
        c.commit({tp: offset})


def _consume_first(address: str, group: str, topic: str, partitions: int) -> list:
    """The first records a consumer of ``group`` reads from ``topic`` (earliest reset)."""
    with sparklog.Consumer(bootstrap_servers=address, group_id=group,
                           auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = [r.offset for records in c.poll(500).values() for r in records]
            if got:
                return got
    return []


def _deleted_topic_forgets_offsets(address: str) -> None:
    n = next(_names)
    topic, other, group = f"gc{n}", f"gc{n}other", f"gcgroup{n}"
    tp, tp_other = TopicPartition(topic, 0), TopicPartition(other, 0)
    with sparklog.Admin(address) as admin:
        admin.create_topic(topic, 1)
        admin.create_topic(other, 1)
        with sparklog.Producer(address) as p:
            for i in range(5):
                p.send(topic, f"v{i}".encode(), partition=0)
            p.flush(30)
        _commit(address, group, tp, 4)
        _commit(address, group, tp_other, 2)
        assert admin.list_consumer_group_offsets(group)[tp].offset == 4
        admin.delete_topics([topic])
        offsets = admin.list_consumer_group_offsets(group)
        assert tp not in offsets
        assert offsets[tp_other].offset == 2  # other topics' offsets are kept
        admin.create_topic(topic, 1)
        with sparklog.Producer(address) as p:
            for i in range(3):
                p.send(topic, f"w{i}".encode(), partition=0)
            p.flush(30)
    # the re-created topic starts from the reset policy (earliest: offset 0), not at 4
    got = _consume_first(address, group, topic, 1)
    assert got and got[0] == 0


def test_deleting_a_topic_deletes_its_committed_offsets_standalone(broker):
    _deleted_topic_forgets_offsets(broker.address)


@pytest.mark.zookeeper
def test_deleting_a_topic_deletes_its_committed_offsets_in_a_cluster(
        zookeeper, storage_root, tmp_path):
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")
    from tests.support.clusterproc import BrokerCluster

    with BrokerCluster(storage_root, zookeeper.connect, 2, log_dir=tmp_path) as cluster:
        _deleted_topic_forgets_offsets(cluster.bootstrap)


def test_find_coordinator_standalone_names_the_broker_itself(broker):
    from sparklog.protocol import ApiKey, Connection

    with Connection(broker.address) as conn:
        found = conn.request(ApiKey.FIND_COORDINATOR, {"key": "any-group"})
        assert f"{found['host']}:{found['port']}" == broker.address
        api = conn.request(ApiKey.API_VERSIONS, {})
        assert found["node_id"] == api["broker_id"]
        assert [10, 0, 0] in api["api_versions"]
        conn.send(ApiKey.FIND_COORDINATOR, {"key": ""})
        bad = conn.receive()
        assert bad["error_code"] == 24 and "group id" in bad["error_message"]


def test_a_known_member_rejoining_a_stable_group_unchanged_gets_its_generation(broker, admin):
    """Kafka's coordinator answers a JoinGroup of a known member of a Stable group whose
    subscription did not change with the current generation, without a rebalance (a
    client re-sending its JoinGroup must not make the group rebalance again, which made
    two kafka-python members rebalance each other forever); a changed subscription or a
    subscribed topic with more partitions does rebalance."""
    from sparklog.protocol import ApiKey, Connection

    n = next(_names)
    topic, other, group = f"rj{n}", f"rj{n}other", f"rjgroup{n}"
    admin.create_topic(topic, 2)
    admin.create_topic(other, 1)
    with Connection(broker.address) as conn:
        def join(member_id: str, topics: list) -> dict:
            return conn.request(ApiKey.JOIN_GROUP, {"group_id": group, "member_id": member_id,
                                                    "topics": topics})

        first = join("", [topic])
        member = first["member_id"]
        again = join(member, [topic])
        assert again["generation_id"] == first["generation_id"]
        assert again["assignment"] == first["assignment"]
        assert conn.request(ApiKey.HEARTBEAT, {"group_id": group, "member_id": member,
                                               "generation_id": first["generation_id"]})
        admin.create_partitions(topic, 3)  # more partitions: the rejoin rebalances
        grown = join(member, [topic])
        assert grown["generation_id"] == first["generation_id"] + 1
        assert grown["assignment"] == [{"name": topic, "partitions": [0, 1, 2]}]
        changed = join(member, [topic, other])  # another subscription: rebalances too
        assert changed["generation_id"] == grown["generation_id"] + 1
        assert {t["name"] for t in changed["assignment"]} == {topic, other}
        conn.request(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": member})
