"""A graceful stop of a broker leading many partitions (#31): the closes overlap, the
end offsets are recorded with one write per topic and the leaderships released together,
and the stop still guarantees what it did one partition at a time: every acknowledged
record readable after the restart, every leadership released, every log's end recorded.
"""

from __future__ import annotations

import pytest

from sparklog.coordination.base import NO_LEADER, LogEnd
from sparklog.coordination.local import LocalCoordinationStore
from sparklog.protocol import Connection
from sparklog.server.embedded import EmbeddedBroker
from tests.support.waiting import wait_until
from tests.support.wire import create, produce, read_values

PARTITIONS = 40


def test_a_stop_of_many_partitions_keeps_every_acknowledged_record_and_releases_all(
        storage_root):
    acked: dict[int, list[str]] = {}
    with EmbeddedBroker(storage_root) as broker:
        with Connection(broker.address) as c:
            assert create(c, "wide", PARTITIONS)["error_code"] == 0
            for p in range(PARTITIONS):
                acked[p] = [f"p{p}-{i}" for i in range(p % 3 + 1)]
                assert produce(c, "wide", p, acked[p], acks=-1)["error_code"] == 0
        assert len(broker.broker.partitions.writers) == PARTITIONS
    # stopped: every leadership released, every log's end recorded
    store = LocalCoordinationStore(storage_root)
    for p in range(PARTITIONS):
        state = store.partition_state("wide", p)
        assert state is not None and state.leader == NO_LEADER, (p, state)
        end = store.log_end("wide", p)
        assert end is not None and end.end_offset == len(acked[p]), (p, end)
    with EmbeddedBroker(storage_root) as broker, Connection(broker.address) as c:
        for p in range(PARTITIONS):
            assert [v.decode() for v in read_values(c, "wide", p)] == acked[p], p


def test_log_ends_of_a_topic_are_recorded_in_one_write_with_each_partitions_rules(
        storage_root):
    store = LocalCoordinationStore(storage_root)
    store.record_log_end("t", 0, 5, 10, opening=True)
    store.record_log_end("t", 1, 5, 10, opening=True)
    writes = []
    update = store.update_document
    store.update_document = lambda name, change: writes.append(name) or update(name, change)
    store.record_log_ends("t", {0: LogEnd(5, 12),   # same epoch, further: recorded
                                1: LogEnd(4, 20),   # an older leader's: dropped
                                2: LogEnd(5, 3)})   # never opened: dropped
    assert len(writes) == 1
    assert store.log_end("t", 0) == LogEnd(5, 12)
    assert store.log_end("t", 1) == LogEnd(5, 10)
    assert store.log_end("t", 2) is None
    store.record_log_ends("t", {0: LogEnd(5, 11)})  # behind: nothing to write
    assert len(writes) == 1


def test_leaderships_are_released_together_and_only_where_the_broker_leads(storage_root):
    store = LocalCoordinationStore(storage_root)
    for p in range(6):
        store.acquire_leadership("t", p, 1 if p < 4 else 2)
    assert store.release_leaderships([("t", p) for p in range(6)], 1) == {}
    for p in range(6):
        state = store.partition_state("t", p)
        assert state.leader == (NO_LEADER if p < 4 else 2)
        assert state.leader_epoch == 0


@pytest.mark.zookeeper
def test_zookeeper_releases_a_brokers_leaderships_with_one_controlled_shutdown(
        zookeeper, storage_root):
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")
    from sparklog.coordination import zkadmin
    from sparklog.coordination.base import BrokerInfo
    from sparklog.coordination.zkstore import ZkCoordinationStore
    from sparklog.metadata import TopicStore

    stores = []
    try:
        for broker_id in (1, 2):
            store = ZkCoordinationStore(zookeeper.connect, topic_store=TopicStore(storage_root),
                                        session_timeout_ms=2000, connection_timeout_ms=20000)
            stores.append(store)
            store.register_broker(BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id))
        a = stores[0]
        wait_until(lambda: len(a.live_brokers()) == 2, what="2 brokers")
        zkadmin.create_topic(a, "t", 6)
        states = wait_until(lambda: [a.view.state("t", p) for p in range(6)],
                            accept=lambda st: all(s is not None and s.leader != NO_LEADER
                                                  for s in st),
                            what="a leader for each partition", ignore=(AttributeError,))
        led = [("t", p) for p, s in enumerate(states) if s.leader == 1]
        assert led
        calls = []
        shutdown = a.controlled_shutdown
        a.controlled_shutdown = lambda broker_id: calls.append(broker_id) or shutdown(broker_id)
        assert a.release_leaderships([("t", p) for p in range(6)], 1) == {}
        assert calls == [1]
        assert all(a.view.state("t", p).leader == 2 for p in range(6))
        assert a.release_leaderships(led, 1) == {}  # leads none now: nothing to do
        assert calls == [1]
    finally:
        for s in reversed(stores):
            s.close()
