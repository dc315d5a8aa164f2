"""Coordinator slots: Kafka's group -> slot arithmetic, and slots held through a real
ZooKeeper (claimed by the preferred candidate, handed back on arrival, taken over when a
session ends, CoordinatorNotAvailable while nobody holds one)."""

from __future__ import annotations

import pytest

from sparklog.coordination.coordinators import (
    COORDINATOR_SLOTS,
    LocalCoordinators,
    coordinator_slot,
    java_string_hash,
    slot_path,
)
from sparklog.errors import CoordinatorNotAvailableError, InvalidGroupIdError, NotCoordinatorError
from tests.support.waiting import wait_until


def test_slot_is_kafkas_abs_hashcode_modulo_fifty():
    # Java's String.hashCode values
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -2**31  # Integer.MIN_VALUE
    assert java_string_hash("\U0001F600") == 1772899  # a surrogate pair: two code units
    assert coordinator_slot("hello") == 99162322 % 50
    assert coordinator_slot("polygenelubricants") == 0  # Utils.abs clears the sign bit
    assert coordinator_slot("billing") == (java_string_hash("billing") & 0x7FFFFFFF) % 50
    assert COORDINATOR_SLOTS == 50
    with pytest.raises(InvalidGroupIdError):
        coordinator_slot("")


def test_standalone_coordinates_every_group():
    local = LocalCoordinators(7)
    assert local.coordinator("any") == 7
    local.check("any")
    with pytest.raises(InvalidGroupIdError):
        local.check("")


@pytest.mark.zookeeper
def test_slots_claimed_handed_back_and_taken_over_through_zookeeper(zookeeper):
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")
    from sparklog.coordination.coordinators import ZkCoordinators
    from sparklog.coordination.zkclient import close_zk, connect_zk

    clients = {i: connect_zk(zookeeper.connect, session_timeout_ms=2000) for i in (1, 2)}
    slots = {i: ZkCoordinators(clients[i], i).start() for i in (1, 2)}
    lost: list = []
    slots[1].add_listener(lost.append)
    # two groups: one in an even slot, one in an odd one (preferred by 1 and 2 of [1, 2])
    groups = {}
    n = 0
    while len(groups) < 2:
        groups.setdefault(coordinator_slot(f"g{n}") % 2, f"g{n}")
        n += 1
    even, odd = groups[0], groups[1]
    try:
        # announced but not registered in /brokers/ids: no candidate, nobody holds a slot
        for i in (1, 2):
            assert slots[i].coordinator(even) == -1
            with pytest.raises(CoordinatorNotAvailableError, match="no broker coordinates"):
                slots[i].check(even)
        clients[1].create("/brokers/ids/1", b"{}", ephemeral=True, makepath=True)
        wait_until(lambda: slots[2].coordinator(even) == slots[2].coordinator(odd) == 1,
                   what="broker 1, the only candidate, holding every slot")
        slots[1].check(even)
        slots[1].check(odd)
        with pytest.raises(NotCoordinatorError, match="slot .*: broker 1"):
            slots[2].check(even)
        clients[2].create("/brokers/ids/2", b"{}", ephemeral=True, makepath=True)
        # broker 2 arrives: the odd slots move to it (their preferred broker)
        wait_until(lambda: slots[1].coordinator(odd) == 2 and slots[2].coordinator(odd) == 2,
                   what="the odd slots handed to broker 2")
        slots[2].check(odd)
        assert slots[1].coordinator(even) == 1
        assert coordinator_slot(odd) in set().union(*lost)  # broker 1 heard it lost them
        # broker 2's session ends: broker 1 takes its slots over
        close_zk(clients.pop(2))
        wait_until(lambda: slots[1].coordinator(odd) == 1, what="broker 1 taking over")
        slots[1].check(odd)
        # a stopping broker deletes its slot nodes
        slots[1].stop()
        assert not clients[1].exists(slot_path(coordinator_slot(even)))
    finally:
        for s in slots.values():
            s.stop()
        for c in clients.values():
            close_zk(c)
