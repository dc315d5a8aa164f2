"""Group membership for subscribed consumers, behind a small pluggable interface.

A :class:`GroupMembership` decides which partitions of the subscribed topics a consumer
owns. :class:`BrokerMembership` (the default for a consumer with a ``group_id``) joins
the group on its coordinator, one broker for the whole cluster (found with
FindCoordinator), which splits the partitions among the members (range assignment) and
rebalances when members come and go. :class:`StaticMembership` (the
default without a ``group_id``, or ``group_membership="static"``) gives every partition
of the subscribed topics to the consumer, picks up partitions added later, and commits
offsets as a simple consumer (generation -1). Another coordinator (e.g. through
ZooKeeper) implements the same methods and is passed as
``Consumer(group_membership=...)``.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from typing import TYPE_CHECKING

from ...errors import (
    IllegalGenerationError,
    InvalidArgumentError,
    RebalanceInProgressError,
    SparklogError,
    UnknownMemberIdError,
)
from ...protocol.apis import ApiKey
from ..network.coordinator import COORDINATOR_ERRORS, GroupCoordinator
from ..network.network import NetworkClient
from ..types import TopicPartition

if TYPE_CHECKING:
    from ...coordination.zkgroups import ZkGroupMember

log = logging.getLogger(__name__)


class GroupMembership(abc.ABC):
    """How a subscribed consumer gets its partitions (see the module docstring).

    ``generation_id`` and ``member_id`` go into OffsetCommit requests (-1 and "" for a
    member whose commits the broker does not check).
    """

    generation_id: int = -1
    member_id: str = ""

    @abc.abstractmethod
    def join(self, group_id: str | None, topics: list[str]) -> list[TopicPartition]:
        """Join (or rejoin) with this subscription; return the assigned partitions."""

    @abc.abstractmethod
    def poll(self) -> list[TopicPartition] | None:
        """Called on every ``Consumer.poll``: heartbeat or re-check; return the new
        assignment when it changed, else None."""

    def leave(self) -> None:
        """Leave the group (on close or unsubscribe)."""

    def close(self) -> None:
        """Release resources; called once by ``Consumer.close``."""


class StaticMembership(GroupMembership):
    """All partitions of the subscribed topics, re-checked every ``refresh_ms``."""

    def __init__(self, client: NetworkClient, refresh_ms: int = 30000):
        self.client = client
        self.refresh = refresh_ms / 1000.0
        self._topics: list[str] = []
        self._assigned: list[TopicPartition] = []
        self._checked = 0.0

    def join(self, group_id, topics) -> list[TopicPartition]:
        self._topics = list(topics)
        self._assigned = self._all_partitions()
        return list(self._assigned)

    def _all_partitions(self) -> list[TopicPartition]:
        self._checked = time.monotonic()
        if not self._topics:
            return []
        meta = self.client.refresh_metadata(self._topics)
        out: list[TopicPartition] = []
        for topic in self._topics:
            info = meta.topic(topic)
            if info is None:
                raise meta.missing(topic)
            out.extend(TopicPartition(topic, p) for p in range(info.num_partitions))
        return out

    def poll(self):
        if time.monotonic() - self._checked < self.refresh:
            return None
        try:
            now = self._all_partitions()
        except Exception:  # keep the current assignment; retried on the next check
            return None
        if now != self._assigned:
            self._assigned = now
            return list(now)
        return None


class ZooKeeperMembership(GroupMembership):
    """Kafka 0.8's consumer groups in ZooKeeper (:mod:`sparklog.coordination.zkgroups`):
    members register under ``/consumers/<group>/ids``, own partitions through ephemeral
    owner nodes and rebalance with the range assignment when members or partitions
    change. ``Consumer(group_membership="zookeeper", zookeeper_connect="host:port/chroot")``
    or ``group_membership=ZooKeeperMembership("host:port/chroot")``."""

    def __init__(self, zookeeper_connect: str, *, session_timeout_ms: int = 6000):
        self.connect = zookeeper_connect
        self.session_timeout_ms = session_timeout_ms
        self._member: ZkGroupMember | None = None
        self._seen = 0

    def _assigned(self, member: ZkGroupMember) -> list[TopicPartition]:
        self._seen = member.generation
        return [TopicPartition(t, p) for t, p in member.assignment()]

    def join(self, group_id, topics) -> list[TopicPartition]:
        from ...coordination.zkgroups import ZkGroupMember

        if not group_id:
            raise InvalidArgumentError("ZooKeeper group membership needs a group_id")
        self.leave()
        member = ZkGroupMember(self.connect, group_id, topics,
                               session_timeout_ms=self.session_timeout_ms).start()
        self._member = member
        return self._assigned(member)

    def poll(self):
        member = self._member
        if member is not None and member.generation != self._seen:
            return self._assigned(member)
        return None

    def leave(self) -> None:
        if self._member is not None:
            self._member.close()
            self._member = None

    def close(self) -> None:
        self.leave()


class BrokerMembership(GroupMembership):
    """Group membership coordinated by the group's coordinator, one broker for the whole
    cluster (FindCoordinator, then JoinGroup/Heartbeat/LeaveGroup sent there).

    The coordinator assigns partitions (range assignment) when members join or leave. A
    daemon thread heartbeats every ``heartbeat_interval_ms``; when the coordinator
    answers that the group is rebalancing (or forgot this member), the next
    :meth:`poll` rejoins, after calling ``before_rejoin()`` (the consumer commits its
    positions there), and returns the new assignment. When the coordinator moves (it
    answers NOT_COORDINATOR, or its broker is gone), it is found again; the new one
    does not know this member, so the member rejoins there, and positions restart at
    the group's committed offsets as Kafka's consumer does.
    """

    def __init__(self, client: NetworkClient, *, session_timeout_ms: int = 10000,
                 rebalance_timeout_ms: int = 30000, heartbeat_interval_ms: int = 3000,
                 before_rejoin=None):
        self.client = client
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000.0
        self.before_rejoin = before_rejoin
        self.group_id: str | None = None
        #: the group's coordinator (set by the first join)
        self.coordinator: GroupCoordinator | None = None
        self._topics: list[str] = []
        self._rejoin = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def coordinator_of(self, group_id: str) -> GroupCoordinator:
        """The :class:`~sparklog.clients.network.coordinator.GroupCoordinator` of
        ``group_id`` this membership uses (the consumer commits through it too)."""
        if self.coordinator is None or self.coordinator.group_id != group_id:
            self.coordinator = GroupCoordinator(self.client, group_id)
        return self.coordinator

    def join(self, group_id, topics) -> list[TopicPartition]:
        if not group_id:
            raise InvalidArgumentError("subscribe() with group coordination needs a group_id")
        self.group_id = group_id
        self._topics = list(topics)
        coordinator = self.coordinator_of(group_id)
        # JoinGroup waits for the rebalance: up to the rebalance timeout, and the
        # coordinator may have to be found again meanwhile
        wait = self.rebalance_timeout_ms / 1000.0 + 30
        deadline = time.monotonic() + max(wait, self.client.request_timeout_ms / 1000.0)
        for attempt in range(3):
            try:
                resp = coordinator.request(ApiKey.JOIN_GROUP, {
                    "group_id": group_id, "member_id": self.member_id, "topics": self._topics,
                    "session_timeout_ms": self.session_timeout_ms,
                    "rebalance_timeout_ms": self.rebalance_timeout_ms},
                    timeout=wait, deadline=deadline)
                break
            except (UnknownMemberIdError, IllegalGenerationError):
                self.member_id = ""  # forgotten by the coordinator: join as a new member
                if attempt == 2:
                    raise
        self.generation_id = resp["generation_id"]
        self.member_id = resp["member_id"]
        self._rejoin.clear()
        self._start_heartbeats()
        return [TopicPartition(t["name"], p) for t in resp.get("assignment", [])
                for p in t["partitions"]]

    def _start_heartbeats(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                            name=f"sparklog-heartbeat-{self.group_id}")
            self._thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            if self._rejoin.is_set() or self.coordinator is None:
                continue
            try:
                self.coordinator.call(ApiKey.HEARTBEAT, {
                    "group_id": self.group_id, "generation_id": self.generation_id,
                    "member_id": self.member_id})
            except (RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError):
                self._rejoin.set()
            except COORDINATOR_ERRORS as exc:  # moved or unreachable: found again next time
                log.debug("heartbeat of group %r: %s", self.group_id, exc)
            except SparklogError as exc:  # retried next interval
                log.debug("heartbeat of group %r failed: %s", self.group_id, exc)

    def poll(self):
        if not self._rejoin.is_set():
            return None
        if self.before_rejoin is not None:
            try:
                self.before_rejoin()
            except SparklogError as exc:
                log.warning("commit before rejoining group %r failed: %s", self.group_id, exc)
        return self.join(self.group_id, self._topics)

    def leave(self) -> None:
        self._stop.set()
        if self.member_id and self.group_id and self.coordinator is not None:
            try:
                self.coordinator.call(ApiKey.LEAVE_GROUP, {
                    "group_id": self.group_id, "member_id": self.member_id})
            except SparklogError as exc:
                log.debug("leaving group %r failed: %s", self.group_id, exc)
        self.member_id = ""
        self.generation_id = -1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.heartbeat_interval + 1)
