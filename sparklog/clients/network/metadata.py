"""The client's cache of cluster metadata: brokers, topics, partitions and leaders.

Filled from Metadata responses by :class:`~sparklog.clients.network.network.NetworkClient`;
read on every send by the producer (a dict lookup), so updates replace whole objects
instead of mutating shared ones.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ...errors import SparklogError, UnknownTopicOrPartitionError
from ...protocol.codec import error_from
from ...protocol.types import BrokerInfo
from ..types import PartitionInfo


@dataclass(frozen=True)
class TopicInfo:
    """A topic: its partitions (index = partition number) and whether it is typed."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    typed: bool = False
    errors: dict = field(default_factory=dict)  # partition -> exception

    @property
    def num_partitions(self) -> int:
        """Number of partitions."""
        return len(self.partitions)


class ClusterMetadata:
    """Brokers and topics as last reported; thread-safe, versioned by update count."""

    def __init__(self):
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""
        self.controller_id = -1
        self.version = 0
        self.last_refresh = 0.0
        self.unknown: dict[str, SparklogError] = {}  # topics the last refresh rejected
        self._changed = threading.Condition()

    def update(self, body: dict, requested_topics=None) -> None:
        """Apply a Metadata response body."""
        brokers = {b["node_id"]: BrokerInfo(b["node_id"], b["host"], b["port"])
                   for b in body["brokers"]}
        topics = dict(self.topics) if requested_topics is not None else {}
        unknown = dict(self.unknown)
        for t in body["topics"]:
            name = t["name"]
            exc = error_from(t, f"topic {name!r}")
            if exc is not None:
                topics.pop(name, None)
                unknown[name] = exc
                continue
            unknown.pop(name, None)
            parts = sorted(t["partitions"], key=lambda p: p["partition"])
            errors = {p["partition"]: error_from(p) for p in parts if p.get("error_code")}
            topics[name] = TopicInfo(
                name,
                tuple(PartitionInfo(name, p["partition"], p["leader"], p["leader_epoch"],
                                    p.get("dirty_ratio", -1.0))
                      for p in parts),
                bool(t.get("typed")), errors)
        with self._changed:
            self.brokers = brokers
            self.topics = topics
            self.unknown = unknown
            self.cluster_id = body.get("cluster_id", "")
            self.controller_id = body.get("controller_id", -1)
            self.version += 1
            self.last_refresh = time.monotonic()
            self._changed.notify_all()

    def topic(self, name: str) -> TopicInfo | None:
        """The cached topic, or None."""
        return self.topics.get(name)

    def partitions_for(self, topic: str) -> set[int] | None:
        """Partition numbers of ``topic`` (None if unknown), like kafka-python."""
        info = self.topics.get(topic)
        return None if info is None else {p.partition for p in info.partitions}

    def leader_for(self, tp) -> int:
        """Node id of the leader of ``tp`` (a ``(topic, partition)`` pair; -1 if none is
        known). Raises UnknownTopicOrPartitionError if the topic is cached and the
        partition is outside it."""
        topic, partition = tp
        info = self.topics.get(topic)
        if info is None:
            return -1
        if not 0 <= partition < len(info.partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {partition} does not exist in topic {topic!r} "
                f"(it has {len(info.partitions)})")
        return info.partitions[partition].leader

    def missing(self, topic: str) -> SparklogError:
        """A new exception saying why ``topic`` is not in the cache (the broker's error
        from the last refresh, else UnknownTopicOrPartitionError)."""
        exc = self.unknown.get(topic)
        if exc is not None:
            return type(exc)(str(exc))
        return UnknownTopicOrPartitionError(f"topic {topic!r} is not in the cluster metadata")

    def broker(self, node_id: int) -> BrokerInfo | None:
        """The broker with that id, or None."""
        return self.brokers.get(node_id)

