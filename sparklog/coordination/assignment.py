"""Pure assignment algorithms: partition leaders among brokers, partitions among consumers.

No I/O here: the controller (:mod:`sparklog.coordination.controller`) and the ZooKeeper
group member (:mod:`sparklog.coordination.zkgroups`) call these with what they read from
ZooKeeper, so the algorithms are tested on their own.

* :func:`preferred_replicas` spreads a new topic's preference lists round-robin over
  the brokers (Kafka's ``AdminUtils.assignReplicasToBrokers`` without racks).
* :func:`elect_leaders` gives every partition without a live leader the least-loaded
  live broker (ties: the earlier in the partition's preference list, then the lower id),
  and optionally moves leaderships from the most to the least loaded broker until no
  two brokers differ by more than one leadership (``auto.leader.rebalance.enable``).
  With HDFS as shared storage every live broker can lead any partition.
* :func:`range_assign` is the range assignment of Kafka 0.8's consumer rebalance.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError
from .base import NO_LEADER

TopicPartition = tuple  # (topic, partition)


def preferred_replicas(num_partitions: int, brokers, start: int = 0) -> dict[int, list[int]]:
    """Preference lists of a new topic: partition p prefers brokers rotated by p + start.

    ``brokers`` are the live broker ids; an empty list gives empty preference lists (the
    controller then picks among whichever brokers are live later).
    """
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) \
            or num_partitions < 1:
        raise InvalidArgumentError(f"num_partitions must be a positive int, got {num_partitions!r}")
    ids = sorted(set(brokers))
    if not ids:
        return {p: [] for p in range(num_partitions)}
    n = len(ids)
    return {p: [ids[(p + start + i) % n] for i in range(n)] for p in range(num_partitions)}


def _rank(preferred: dict, tp, broker: int) -> int:
    prefs = preferred.get(tp) or ()
    try:
        return prefs.index(broker)
    except ValueError:
        return len(prefs)


def elect_leaders(partitions, current: dict, live, *, preferred: dict | None = None,
                  excluded=(), rebalance: bool = True) -> dict:
    """Return {tp: new leader} for the partitions whose leader must change.

    ``partitions``: every (topic, partition) of the cluster; ``current``: {tp: leader id}
    (missing or -1 = none); ``live``: ids of live brokers; ``excluded``: live brokers that
    must lose their leaderships (controlled shutdown); ``preferred``: {tp: [ids]}.
    A partition keeps its leader while that broker is live and not excluded (unless a
    rebalance moves it); when no broker can lead, its new leader is -1.
    """
    preferred = preferred or {}
    excluded = set(excluded)
    candidates = sorted(set(live) - excluded)
    load = {b: 0 for b in candidates}
    leader = {}
    orphans = []
    for tp in sorted(partitions):
        cur = current.get(tp, NO_LEADER)
        if cur in load:
            load[cur] += 1
            leader[tp] = cur
        else:
            orphans.append(tp)
    changes = {}
    for tp in orphans:
        if not candidates:
            if current.get(tp, NO_LEADER) != NO_LEADER:
                changes[tp] = NO_LEADER
            continue
        best = min(candidates, key=lambda b: (load[b], _rank(preferred, tp, b), b))
        load[best] += 1
        leader[tp] = best
        changes[tp] = best
    if rebalance and len(candidates) > 1:
        while True:
            most = max(candidates, key=lambda b: (load[b], b))
            least = min(candidates, key=lambda b: (load[b], b))
            if load[most] - load[least] <= 1:
                break
            owned = [tp for tp, b in leader.items() if b == most]
            # move the partition that prefers the target most (then the first one)
            tp = min(owned, key=lambda t: (_rank(preferred, t, least), t))
            leader[tp] = least
            load[most] -= 1
            load[least] += 1
            if current.get(tp, NO_LEADER) == least:
                changes.pop(tp, None)
            else:
                changes[tp] = least
    return changes


def range_assign(partition_counts: dict, subscriptions: dict) -> dict:
    """Kafka 0.8's range assignment.

    ``partition_counts``: {topic: number of partitions}; ``subscriptions``:
    {consumer id: iterable of topics}. For each topic, its subscribers sorted by id
    divide its partitions in order: with P partitions and C consumers, consumer i gets
    P // C partitions, plus one more when i < P % C. Returns {consumer id: sorted
    [(topic, partition)]} with an entry for every consumer (possibly empty). Topics a
    consumer subscribes to that do not exist are ignored.
    """
    out: dict = {member: [] for member in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        count = partition_counts.get(topic)
        if not count:
            continue
        members = sorted(m for m, ts in subscriptions.items() if topic in set(ts))
        per, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = per * i + min(i, extra)
            n = per + (1 if i < extra else 0)
            out[member].extend((topic, p) for p in range(start, start + n))
    for member in out:
        out[member].sort()
    return out
