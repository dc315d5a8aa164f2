"""The pure assignment algorithms: leader election among brokers, range assignment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.coordination.assignment import (
    NO_LEADER,
    elect_leaders,
    preferred_replicas,
    range_assign,
)
from sparklog.errors import InvalidArgumentError

# --- range assignment (Kafka 0.8's consumer rebalance) ------------------------------------


def test_range_assign_kafka_example():
    # 10 partitions, 3 consumers: C0 gets 0-3, C1 4-6, C2 7-9 (Kafka's documentation)
    got = range_assign({"t": 10}, {"c0": ["t"], "c1": ["t"], "c2": ["t"]})
    assert got == {"c0": [("t", p) for p in range(0, 4)],
                   "c1": [("t", p) for p in range(4, 7)],
                   "c2": [("t", p) for p in range(7, 10)]}


def test_range_assign_more_consumers_than_partitions_and_mixed_topics():
    got = range_assign({"a": 2, "b": 3}, {"x": ["a", "b"], "y": ["a"], "z": ["a", "b"],
                                          "w": ["missing"]})
    assert got["x"] == [("a", 0), ("b", 0), ("b", 1)]
    assert got["y"] == [("a", 1)]
    assert got["z"] == [("b", 2)]
    assert got["w"] == []


@settings(max_examples=60, deadline=None)
@given(counts=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 12), min_size=1),
       subs=st.dictionaries(st.text("mnopq", min_size=1, max_size=3),
                            st.sets(st.sampled_from("abcde"), max_size=3), max_size=6))
def test_range_assign_properties(counts, subs):
    got = range_assign(counts, subs)
    assert set(got) == set(subs)
    owned = [tp for tps in got.values() for tp in tps]
    assert len(owned) == len(set(owned)), "a partition has two owners"
    for topic, n in counts.items():
        members = [m for m, ts in subs.items() if topic in ts]
        mine = {m: [tp for tp in got[m] if tp[0] == topic] for m in members}
        if members:
            assert sorted(tp for tps in mine.values() for tp in tps) == \
                [(topic, p) for p in range(n)], "every partition owned once"
            sizes = [len(v) for v in mine.values()]
            assert max(sizes) - min(sizes) <= 1
    for m, tps in got.items():
        assert all(tp[0] in subs[m] for tp in tps), "only subscribed topics"


# --- leaders ------------------------------------------------------------------------------------


def test_preferred_replicas_round_robin():
    assert preferred_replicas(3, [3, 1, 2]) == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    assert preferred_replicas(2, []) == {0: [], 1: []}
    with pytest.raises(InvalidArgumentError, match="num_partitions"):
        preferred_replicas(0, [1])


def test_elect_keeps_live_leaders_and_replaces_dead_ones():
    parts = [("t", p) for p in range(4)]
    current = {("t", 0): 1, ("t", 1): 2, ("t", 2): 3, ("t", 3): 3}
    got = elect_leaders(parts, current, live={1, 2}, rebalance=False)
    assert set(got) == {("t", 2), ("t", 3)}
    assert sorted(got.values()) == [1, 2]  # least-loaded: one each


def test_elect_without_live_brokers_gives_no_leader():
    parts = [("t", 0), ("t", 1)]
    got = elect_leaders(parts, {("t", 0): 1}, live=set())
    assert got == {("t", 0): NO_LEADER}  # ("t", 1) never had one: nothing to change


def test_elect_excludes_shutting_down_broker():
    parts = [("t", p) for p in range(4)]
    current = {tp: 1 for tp in parts}
    got = elect_leaders(parts, current, live={1, 2, 3}, excluded={1})
    assert set(got) == set(parts)
    assert 1 not in got.values()


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 30), live=st.sets(st.integers(0, 6), max_size=5),
       excluded=st.sets(st.integers(0, 6), max_size=2),
       leaders=st.lists(st.integers(-1, 6), min_size=30, max_size=30),
       rebalance=st.booleans())
def test_elect_properties(n, live, excluded, leaders, rebalance):
    parts = [("t", p) for p in range(n)]
    current = {tp: leaders[i] for i, tp in enumerate(parts)}
    prefs = preferred_replicas(n, range(7))
    got = elect_leaders(parts, current, live, excluded=excluded, rebalance=rebalance,
                        preferred={("t", p): ids for p, ids in prefs.items()})
    final = {tp: got.get(tp, current[tp]) for tp in parts}
    candidates = live - excluded
    for tp, old in current.items():
        if tp in got:
            assert got[tp] != old, "a change must change something"
    if candidates:
        assert all(final[tp] in candidates for tp in parts)
        loads = [sum(1 for b in final.values() if b == c) for c in candidates]
        if rebalance:
            assert max(loads) - min(loads) <= 1
        else:  # live, non-excluded leaders are kept
            assert all(tp not in got for tp in parts if current[tp] in candidates)
    else:
        assert all(final[tp] == NO_LEADER for tp in parts if current[tp] != NO_LEADER)
