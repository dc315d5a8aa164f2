"""Consumer-group membership on the broker (Kafka's group coordinator, simplified).

Membership lives in the broker's memory; committed offsets live in the coordination
store. Assignment is computed here (Kafka 0.8's range assignment,
:func:`sparklog.coordination.assignment.range_assign`) instead of by a client leader,
so a join returns the member's partitions directly (no SyncGroup round).

Life of a group: ``Empty`` -> a JoinGroup moves it to ``PreparingRebalance``; the
rebalance completes when every known member has rejoined or the largest rebalance
timeout of its members has passed (members that did not rejoin are dropped); then the
generation is bumped, partitions are assigned and the group is ``Stable``. Members keep
their session alive with Heartbeat; a heartbeat during a rebalance answers
RebalanceInProgress (rejoin), a stale generation IllegalGeneration, an unknown member
UnknownMemberId. A member silent for its session timeout is removed (a rebalance
follows), as is one that sends LeaveGroup.

One broker coordinates a group for the whole cluster (Kafka's model): ``coordinators``
(:mod:`sparklog.coordination.coordinators`) says which; every request of a group this
broker does not coordinate raises NotCoordinator (CoordinatorNotAvailable while no
broker does), and when the broker loses a coordinator slot the groups of that slot are
forgotten here (pending joins answer NotCoordinator; members find the new coordinator
and join it). The methods take plain values, not protocol bodies, so the handlers of
either wire protocol call the same coordinator.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from ..coordination.coordinators import LocalCoordinators
from ..errors import (
    IllegalGenerationError,
    InvalidArgumentError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from ..names import validate_group_id
from .config import MAX_INT

log = logging.getLogger(__name__)

EMPTY, PREPARING, STABLE, DEAD = "Empty", "PreparingRebalance", "Stable", "Dead"
#: the largest JoinGroup rebalance timeout: Kafka's field is an INT32 (a consumer's
#: ``max.poll.interval.ms`` may be as large as Integer.MAX_VALUE)
MAX_REBALANCE_TIMEOUT_MS = MAX_INT


@dataclass
class Member:
    """One consumer in a group."""

    member_id: str
    client_id: str
    client_host: str
    topics: list
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen: float = field(default_factory=time.monotonic)
    join: asyncio.Future | None = None
    assignment: list = field(default_factory=list)
    #: the JoinGroup answer of its current generation (None before the first)
    response: dict | None = None


@dataclass
class Group:
    """A group's membership state."""

    group_id: str
    state: str = EMPTY
    generation: int = 0
    members: dict = field(default_factory=dict)
    leader: str = ""
    deadline: float = 0.0
    timer: asyncio.TimerHandle | None = None
    completing: bool = False
    #: partition counts of the subscribed topics the current generation assigned
    counts: dict = field(default_factory=dict)


class GroupCoordinator:
    """Coordinates every group of this broker.

    ``partition_counts`` is an ``async (topics) -> {topic: partitions}`` callback (topics
    that do not exist are left out); ``coordinators`` says which groups this broker
    coordinates (default: every group, standalone).
    """

    def __init__(self, loop, partition_counts, *, min_session_ms: int = 100,
                 max_session_ms: int = 1800000, coordinators=None):
        self.loop = loop
        self.partition_counts = partition_counts
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.coordinators = coordinators or LocalCoordinators(-1)
        self.groups: dict[str, Group] = {}
        self._expiry = loop.create_task(self._expire_loop(), name="group-expiry")
        self.coordinators.add_listener(self._slots_lost)

    def check_coordinator(self, group_id: str) -> None:
        """Raise NotCoordinatorError/CoordinatorNotAvailableError unless this broker
        coordinates ``group_id`` now (InvalidGroupIdError for a bad id)."""
        validate_group_id(group_id)
        self.coordinators.check(group_id)

    def _slots_lost(self, slots) -> None:  # the coordinators' thread
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.unload, frozenset(slots))

    def unload(self, slots) -> None:
        """Forget the groups of coordinator ``slots`` this broker no longer holds, as
        Kafka unloads a ``__consumer_offsets`` partition's groups: their pending joins
        answer NotCoordinator (the members find the new coordinator)."""
        for group_id in [g for g in self.groups if self.coordinators.slot(g) in slots]:
            group = self.groups.pop(group_id)
            if group.timer is not None:
                group.timer.cancel()
                group.timer = None
            for member in group.members.values():
                if member.join is not None and not member.join.done():
                    member.join.set_exception(NotCoordinatorError(
                        f"group {group_id!r} moved to another coordinator; find it again"))
            log.info("group %s: no longer coordinated here (%d member(s) forgotten)",
                     group_id, len(group.members))

    def _group(self, group_id: str) -> Group:
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    # --- join ------------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, topics: list, *, client_id: str = "",
                   client_host: str = "", session_timeout_ms: int = 10000,
                   rebalance_timeout_ms: int = 30000) -> dict:
        """JoinGroup: wait for the rebalance and return {generation_id, member_id,
        leader_id, members, assignment}."""
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            raise InvalidArgumentError(
                f"group {group_id!r}: session_timeout_ms={session_timeout_ms} is outside "
                f"[{self.min_session_ms}, {self.max_session_ms}] "
                "(group.min/max.session.timeout.ms)")
        if not 0 <= rebalance_timeout_ms <= MAX_REBALANCE_TIMEOUT_MS:
            raise InvalidArgumentError(
                f"group {group_id!r}: rebalance_timeout_ms={rebalance_timeout_ms} is "
                f"outside [0, {MAX_REBALANCE_TIMEOUT_MS}] (Kafka's INT32 rebalance timeout)")
        group = self._group(group_id)
        if member_id:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(
                    f"group {group_id!r} has no member {member_id!r}; join with an empty "
                    "member id")
            current = await self._current_answer(group, member, topics)
            if current is not None:
                member.session_timeout_ms = session_timeout_ms
                member.rebalance_timeout_ms = rebalance_timeout_ms
                return current
        else:
            member_id = f"{client_id or 'consumer'}-{uuid.uuid4().hex[:16]}"
            member = group.members[member_id] = Member(
                member_id, client_id, client_host, [], session_timeout_ms,
                rebalance_timeout_ms)
        member.topics = sorted(set(topics))
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.last_seen = time.monotonic()
        if member.join is not None and not member.join.done():
            member.join.set_exception(RebalanceInProgressError(
                f"group {group_id!r}: member {member_id!r} joined again"))
        member.join = self.loop.create_future()
        future = member.join
        self._prepare(group)
        self._maybe_complete(group)
        try:
            return await future
        finally:
            member.last_seen = time.monotonic()

    async def _current_answer(self, group: Group, member: Member, topics) -> dict | None:
        """Kafka's answer to a JoinGroup of a known member of a Stable group whose
        subscription did not change: its current generation and assignment, without a
        rebalance (a client that re-sends its JoinGroup, or rejoins after missing a
        generation, must not make the whole group rebalance again). None when a
        rebalance is due: the group is rebalancing, the subscription changed, or a
        subscribed topic's partition count changed since the assignment."""
        if group.state != STABLE or group.completing or member.response is None \
                or sorted(set(topics)) != member.topics \
                or member.join is not None and not member.join.done():
            return None
        generation = group.generation
        counts = await self.partition_counts(
            sorted({t for m in group.members.values() for t in m.topics}))
        if group.state != STABLE or group.generation != generation \
                or group.members.get(member.member_id) is not member or counts != group.counts:
            return None
        member.last_seen = time.monotonic()
        return dict(member.response)

    def _prepare(self, group: Group) -> None:
        if group.state == PREPARING:
            return
        group.state = PREPARING
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.deadline = time.monotonic() + timeout / 1000
        if group.timer is not None:
            group.timer.cancel()
        group.timer = self.loop.call_later(timeout / 1000, self._maybe_complete, group, True)

    def _maybe_complete(self, group: Group, due: bool = False) -> None:
        if group.state != PREPARING or group.completing:
            return
        waiting = [m for m in group.members.values() if m.join is not None and not m.join.done()]
        if len(waiting) < len(group.members) and not due:
            return
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        for member in [m for m in group.members.values() if m not in waiting]:
            log.info("group %s: member %s did not rejoin in time; removed",
                     group.group_id, member.member_id)
            del group.members[member.member_id]
        group.completing = True
        self.loop.create_task(self._complete(group))

    async def _complete(self, group: Group) -> None:
        try:
            await self._assign(group)
        except Exception as exc:  # storage trouble or a bug: fail the joins, stay up
            log.error("group %s: rebalance failed: %s", group.group_id, exc)
            for m in group.members.values():
                if m.join is not None and not m.join.done():
                    m.join.set_exception(exc)
            group.completing = False
            group.state = EMPTY if not group.members else STABLE

    async def _assign(self, group: Group) -> None:
        from ..coordination.assignment import range_assign  # shared with ZooKeeper groups

        topics = sorted({t for m in group.members.values() for t in m.topics})
        counts = await self.partition_counts(topics)
        group.completing = False
        members = dict(group.members)
        group.counts = dict(counts)
        group.generation += 1
        group.state = STABLE if members else EMPTY
        assignment = range_assign(counts, {mid: m.topics for mid, m in members.items()})
        group.leader = min(members) if members else ""
        for mid, member in members.items():
            member.assignment = assignment.get(mid, [])
            by_topic: dict[str, list[int]] = {}
            for topic, partition in member.assignment:
                by_topic.setdefault(topic, []).append(partition)
            response = {
                "error_code": 0, "error_message": "",
                "generation_id": group.generation, "member_id": mid,
                "leader_id": group.leader, "members": sorted(members),
                "assignment": [{"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
            }
            member.response = response
            if member.join is not None and not member.join.done():
                member.join.set_result(response)
        log.info("group %s: generation %d with %d member(s)", group.group_id,
                 group.generation, len(members))

    # --- heartbeat, leave, commit checks ---------------------------------------------------
    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}")
        return group, member

    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> None:
        """Heartbeat: keep the session; raise what the member must do otherwise."""
        group, member = self._member(group_id, member_id)
        member.last_seen = time.monotonic()
        if group.state == PREPARING:
            raise RebalanceInProgressError(
                f"group {group_id!r} is rebalancing: rejoin (generation {group.generation})")
        if generation_id != group.generation:
            raise IllegalGenerationError(
                f"group {group_id!r}: generation {generation_id} is not the current "
                f"generation {group.generation}")

    def leave(self, group_id: str, member_id: str) -> None:
        """LeaveGroup: remove the member; the others rebalance."""
        group, member = self._member(group_id, member_id)
        self._remove(group, member, "left the group")

    def _remove(self, group: Group, member: Member, why: str) -> None:
        group.members.pop(member.member_id, None)
        log.info("group %s: member %s %s", group.group_id, member.member_id, why)
        if member.join is not None and not member.join.done():
            member.join.set_exception(UnknownMemberIdError(
                f"group {group.group_id!r}: member {member.member_id!r} {why}"))
        if group.members:
            self._prepare(group)
            self._maybe_complete(group)
        else:
            if group.timer is not None:
                group.timer.cancel()
                group.timer = None
            group.state = EMPTY

    def check_commit(self, group_id: str, generation_id: int, member_id: str) -> None:
        """Raise unless an OffsetCommit with this generation/member may commit: a simple
        consumer (generation -1) only to a group without members, a member only in the
        current generation."""
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if generation_id < 0:
            if group is not None and group.members:
                raise IllegalGenerationError(
                    f"group {group_id!r} has active members; commit with their "
                    "generation and member id")
            return
        group, member = self._member(group_id, member_id)
        if generation_id != group.generation:
            raise IllegalGenerationError(
                f"group {group_id!r}: generation {generation_id} is not the current "
                f"generation {group.generation}")
        member.last_seen = time.monotonic()

    # --- description ------------------------------------------------------------------------
    def describe(self, group_id: str) -> dict:
        """DescribeGroups item of one group."""
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return {"group_id": group_id, "state": DEAD, "generation_id": -1, "members": [],
                    "error_code": 0, "error_message": ""}
        members = []
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            by_topic: dict[str, list[int]] = {}
            for topic, partition in m.assignment:
                by_topic.setdefault(topic, []).append(partition)
            members.append({"member_id": m.member_id, "client_id": m.client_id,
                            "client_host": m.client_host,
                            "assignment": [{"name": t, "partitions": ps}
                                           for t, ps in sorted(by_topic.items())]})
        return {"group_id": group_id, "state": group.state, "generation_id": group.generation,
                "members": members, "error_code": 0, "error_message": ""}

    # --- sessions ------------------------------------------------------------------------------
    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for member in list(group.members.values()):
                    if member.join is not None and not member.join.done():
                        continue
                    if (now - member.last_seen) * 1000 > member.session_timeout_ms:
                        self._remove(group, member, "session timed out")

    def close(self) -> None:
        """Stop the session checks, fail pending joins and release the coordinator slots
        (their groups move to other brokers at once)."""
        self._expiry.cancel()
        self.coordinators.stop()
        for group in self.groups.values():
            if group.timer is not None:
                group.timer.cancel()
            for member in group.members.values():
                if member.join is not None and not member.join.done():
                    member.join.set_exception(RebalanceInProgressError(
                        f"group {group.group_id!r}: the broker is shutting down"))
