"""The embedded coordination store: epochs, producer ids, group offsets on real files."""

from __future__ import annotations

import threading

import pytest

from sparklog.coordination import (
    BrokerInfo,
    CommittedOffset,
    LocalCoordinationStore,
    validate_group_id,
)
from sparklog.errors import InvalidArgumentError, InvalidTopicError


def test_epochs_grow_and_survive_reopen(storage_root):
    store = LocalCoordinationStore(storage_root)
    assert store.partition_state("t", 0) is None
    s1 = store.acquire_leadership("t", 0, 1)
    s2 = store.acquire_leadership("t", 0, 1)
    assert (s1.leader, s1.leader_epoch, s2.leader_epoch) == (1, 0, 1)
    store.release_leadership("t", 0, 1)
    again = LocalCoordinationStore(storage_root)
    assert again.partition_state("t", 0).leader == -1
    assert again.acquire_leadership("t", 0, 2).leader_epoch == 2


def test_producer_ids_unique_across_stores_and_threads(storage_root):
    stores = [LocalCoordinationStore(storage_root) for _ in range(3)]
    got = []

    def worker(store):
        for _ in range(5):
            got.append(store.allocate_producer_ids(10))

    threads = [threading.Thread(target=worker, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    blocks = sorted(got)  # disjoint blocks of 10 (a writer that retries may leave a gap)
    assert len(blocks) == 15 and all(b - a >= 10 for a, b in zip(blocks, blocks[1:]))


def test_group_offsets_merge_and_persist(storage_root):
    store = LocalCoordinationStore(storage_root)
    store.commit_offsets("g1", {("a", 0): CommittedOffset(5, "m"), ("a", 1): CommittedOffset(7)})
    other = LocalCoordinationStore(storage_root)
    other.commit_offsets("g1", {("b", 0): CommittedOffset(1)})
    store.commit_offsets("g1", {("a", 0): CommittedOffset(6)})  # stale cache: must merge
    got = LocalCoordinationStore(storage_root).fetch_offsets("g1")
    assert {k: v.offset for k, v in got.items()} == {("a", 0): 6, ("a", 1): 7, ("b", 0): 1}
    assert got[("a", 1)].commit_timestamp > 0
    assert store.fetch_offsets("g1", [("a", 1)]) == {("a", 1): got[("a", 1)]}
    assert store.list_groups() == ["g1"]
    store.delete_offsets("g1", ["a"])
    assert set(store.fetch_offsets("g1")) == {("b", 0)}
    store.delete_offsets("g1")
    assert store.list_groups() == []


def test_bad_input_named(storage_root):
    store = LocalCoordinationStore(storage_root)
    for bad in ("", "x\n", "y\x7f", "g" * 250, 5):  # "a/b" and ".." are escaped, not bad
        with pytest.raises(InvalidArgumentError):
            validate_group_id(bad)
    with pytest.raises(InvalidTopicError):
        store.commit_offsets("g", {("bad/topic", 0): CommittedOffset(1)})
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        CommittedOffset(-3)
    with pytest.raises(InvalidArgumentError, match="positive"):
        store.allocate_producer_ids(0)


def test_brokers_and_cluster_id(storage_root):
    store = LocalCoordinationStore(storage_root)
    cid = store.cluster_id()
    assert cid == LocalCoordinationStore(storage_root).cluster_id()
    store.register_broker(BrokerInfo(0, "127.0.0.1", 9092))
    assert store.controller_id() == 0
    with pytest.raises(InvalidArgumentError, match="already registered"):
        store.register_broker(BrokerInfo(0, "127.0.0.1", 9093))
    store.unregister_broker(0)
    assert store.live_brokers() == {}
