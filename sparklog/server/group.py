"""Consumer-group membership on the broker (Kafka's group coordinator).

Membership lives in the broker's memory; committed offsets live in the coordination
store. Two kinds of groups, as their members ask:

* sparklog's own consumers (a JoinGroup without protocols): the broker assigns (Kafka
  0.8's range assignment, :func:`sparklog.coordination.assignment.range_assign`), so a
  join returns the member's partitions directly (no SyncGroup round);
* Kafka's clients (a JoinGroup naming a protocol type and its assignment protocols with
  their metadata): Kafka's classic protocol, the broker protocol-agnostic. The protocol
  is the one every member supports that most members prefer (ties: the leader's order);
  the leader's JoinGroup answer carries every member's metadata of that protocol (the
  subscription, and for KIP-429's cooperative protocols the partitions each member
  owns, passed on untouched); the group waits in ``CompletingRebalance`` for the
  leader's SyncGroup and hands each member the bytes the leader assigned it, verbatim.
  A cooperative assignor's two steps (a partition moving between members is left
  unassigned in the first generation; its owner revokes it and rejoins with new
  metadata, which starts the second) need nothing more: a rejoin with changed metadata
  always rebalances. The members of one group share a protocol type and a protocol
  (else InconsistentGroupProtocol). Any protocol type is served, as by Kafka's
  coordinator: ``consumer`` (Kafka's consumers: their subscribed ``topics``, read from
  the metadata by the Kafka listener, let the broker tell when the leader must assign
  again), ``connect`` (Kafka Connect's distributed workers), ``sr`` (Schema Registry's
  leader election) or another; the broker reads nothing of the other types' metadata
  (their ``topics`` are empty).

Life of a group: ``Empty`` -> a JoinGroup moves it to ``PreparingRebalance``; the
rebalance completes when every known member has rejoined or the largest rebalance
timeout of its members has passed (members that did not rejoin are dropped). The first
rebalance of an empty group (of either kind) waits ``group.initial.rebalance.delay.ms``
for more members first (Kafka's InitialDelayedJoin), again after each such window in
which a new member joined, at most until the rebalance timeout (or the delay, if
longer) has passed; members started together then share the first generation. Then the
generation is bumped and the group is ``Stable`` (broker-assigned) or
``CompletingRebalance`` until the leader's SyncGroup (client-assigned). A known member
rejoining a ``Stable`` group unchanged gets its current generation without a rebalance
(Kafka's rule: not the leader, the same subscription, or the same protocols and
metadata; the leader of a ``consumer`` group too, unless the partitions changed). Members keep their session alive with Heartbeat; a heartbeat during a
rebalance answers RebalanceInProgress (rejoin), a stale generation IllegalGeneration, an
unknown member UnknownMemberId. A member silent for its session timeout is removed (a
rebalance follows), as is one that sends LeaveGroup.

Static members (KIP-345, ``group.instance.id``) keep their place across a restart: a
JoinGroup with an empty member id and a known instance id takes over the old member id's
place under a new member id (and, in a ``Stable`` group whose protocol would not change,
its assignment, with no rebalance: the others are not disturbed); the old member id is
fenced (FencedInstanceId to its Heartbeat, SyncGroup, OffsetCommit and JoinGroup). A
static member leaves by LeaveGroup naming its instance id, or when its session times out.

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
from collections import Counter
from dataclasses import dataclass, field
from typing import NoReturn

from ..coordination.coordinators import LocalCoordinators
from ..errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from ..names import validate_group_id
from .config import MAX_INT

log = logging.getLogger(__name__)

EMPTY, PREPARING, STABLE, DEAD = "Empty", "PreparingRebalance", "Stable", "Dead"
#: the protocol type of Kafka's consumers (Kafka's ``ConsumerProtocol.PROTOCOL_TYPE``)
CONSUMER_PROTOCOL_TYPE = "consumer"
#: a client-assigned group between the join and its leader's SyncGroup
COMPLETING = "CompletingRebalance"
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
    #: a Kafka client's protocol type and ``[(name, metadata)]`` in its order of
    #: preference; None for sparklog's own consumers (the broker assigns)
    protocol_type: str | None = None
    protocols: list | None = None
    #: KIP-345's ``group.instance.id`` of a static member
    instance_id: str | None = None
    #: a pending SyncGroup (waiting for the leader's)
    sync: asyncio.Future | None = None
    #: a client-assigned group's assignment of this member (the leader's bytes)
    assigned: bytes = b""

    def metadata(self, protocol: str | None) -> bytes:
        """Its metadata of ``protocol``."""
        return next((m for n, m in self.protocols or () if n == protocol), b"")


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
    #: the protocol of a client-assigned group's current generation
    protocol: str | None = None
    #: static members: group.instance.id -> member id
    static: dict = field(default_factory=dict)
    #: the end (monotonic) of the current window of the initial rebalance delay of a
    #: group that was empty (``group.initial.rebalance.delay.ms``); 0 outside one
    initial_until: float = 0.0
    #: whether a new member joined during the current window (another one follows)
    joined_in_delay: bool = False

    def protocol_type(self) -> str | None:
        """The protocol type of its members (None: sparklog's own, broker-assigned)."""
        return next((m.protocol_type for m in self.members.values()), None)


def _pending(future: asyncio.Future | None) -> bool:
    return future is not None and not future.done()


def _fail(future: asyncio.Future | None, exc: Exception) -> None:
    if future is not None and not future.done():
        future.set_exception(exc)


class GroupCoordinator:
    """Coordinates every group of this broker.

    ``partition_counts`` is an ``async (topics) -> {topic: partitions}`` callback (topics
    that do not exist are left out); ``coordinators`` says which groups this broker
    coordinates (default: every group, standalone).
    """

    def __init__(self, loop, partition_counts, *, min_session_ms: int = 100,
                 max_session_ms: int = 1800000, initial_rebalance_delay_ms: int = 0,
                 coordinators=None):
        self.loop = loop
        self.partition_counts = partition_counts
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
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
                moved = NotCoordinatorError(
                    f"group {group_id!r} moved to another coordinator; find it again")
                _fail(member.join, moved)
                _fail(member.sync, moved)
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
                   rebalance_timeout_ms: int = 30000, protocol_type: str | None = None,
                   protocols: list | None = None,
                   group_instance_id: str | None = None) -> dict:
        """JoinGroup: wait for the rebalance and return {generation_id, member_id,
        leader_id, members, assignment} (broker-assigned), with ``protocol_type``,
        ``protocol_name`` and, to the leader, ``member_protocols`` ([{member_id,
        group_instance_id, metadata}]) for a Kafka client naming its ``protocols``
        ([{name, metadata}] or [(name, metadata)], in its order of preference)."""
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            raise InvalidArgumentError(
                f"group {group_id!r}: session_timeout_ms={session_timeout_ms} is outside "
                f"[{self.min_session_ms}, {self.max_session_ms}] "
                "(group.min/max.session.timeout.ms)")
        if not 0 <= rebalance_timeout_ms <= MAX_REBALANCE_TIMEOUT_MS:
            raise InvalidArgumentError(
                f"group {group_id!r}: rebalance_timeout_ms={rebalance_timeout_ms} is "
                f"outside [0, {MAX_REBALANCE_TIMEOUT_MS}] (Kafka's INT32 rebalance timeout)")
        if group_instance_id == "":
            raise InvalidArgumentError(
                f"group {group_id!r}: an empty group.instance.id (leave it unset for a "
                "dynamic member)")
        if protocols is not None:
            protocols = [(p["name"], bytes(p["metadata"])) if isinstance(p, dict)
                         else (p[0], bytes(p[1])) for p in protocols]
        if (protocol_type is None) != (protocols is None) or protocols == []:
            raise InconsistentGroupProtocolError(
                f"group {group_id!r}: a JoinGroup names a protocol type and at least one "
                f"protocol, or neither (protocol type {protocol_type!r}, "
                f"{len(protocols or [])} protocol(s))")
        group = self._group(group_id)
        self._check_protocols(group, member_id, protocol_type, protocols)
        member: Member | None
        if not member_id and group_instance_id is not None \
                and group_instance_id in group.static:
            member = self._replace_static(group, group_instance_id, client_id, client_host)
            member.protocols = protocols
            member.topics = sorted(set(topics))
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            current = self._static_answer(group, member)
            if current is not None:
                return current
        elif member_id:
            member = group.members.get(member_id)
            if member is None or group_instance_id is not None and \
                    group.static.get(group_instance_id) != member_id:
                self._fenced_or_unknown(group, member_id, group_instance_id)
            current = await self._current_answer(group, member, topics, protocols)
            if current is not None:
                member.session_timeout_ms = session_timeout_ms
                member.rebalance_timeout_ms = rebalance_timeout_ms
                return current
        else:
            member_id = f"{client_id or 'consumer'}-{uuid.uuid4().hex[:16]}"
            member = group.members[member_id] = Member(
                member_id, client_id, client_host, [], session_timeout_ms,
                rebalance_timeout_ms, protocol_type=protocol_type,
                instance_id=group_instance_id)
            if group_instance_id is not None:
                group.static[group_instance_id] = member_id
            if group.initial_until:
                group.joined_in_delay = True  # the initial delay waits once more
        member_id = member.member_id
        member.topics = sorted(set(topics))
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.last_seen = time.monotonic()
        _fail(member.join, RebalanceInProgressError(
            f"group {group_id!r}: member {member_id!r} joined again"))
        member.join = self.loop.create_future()
        future = member.join
        self._prepare(group)
        self._maybe_complete(group)
        try:
            return await future
        finally:
            member.last_seen = time.monotonic()

    def _check_protocols(self, group: Group, member_id: str, protocol_type, protocols) -> None:
        """Kafka's ``supportsProtocols``: a member joining a group with other members
        shares their protocol type and at least one protocol with all of them."""
        others = [m for mid, m in group.members.items() if mid != member_id]
        if not others:
            return
        kind = others[0].protocol_type
        if kind != protocol_type:
            raise InconsistentGroupProtocolError(
                f"group {group.group_id!r}: its members use "
                + (f"protocol type {kind!r}" if kind is not None
                   else "sparklog's own protocol (the broker assigns)")
                + "; this JoinGroup "
                + (f"protocol type {protocol_type!r}" if protocol_type is not None
                   else "sparklog's own protocol"))
        if protocols is None:
            return
        names = {n for n, _ in protocols}
        common = names.intersection(*({n for n, _ in m.protocols} for m in others))
        if not common:
            raise InconsistentGroupProtocolError(
                f"group {group.group_id!r}: none of the protocols {sorted(names)} is "
                "supported by every member (they support "
                + ", ".join(str([n for n, _ in m.protocols]) for m in others) + ")")

    @staticmethod
    def _fenced_or_unknown(group: Group, member_id: str, instance_id: str | None) -> NoReturn:
        """Raise FencedInstanceId when ``instance_id`` belongs to another member id
        now (KIP-345), else UnknownMemberId."""
        if instance_id is not None and group.static.get(instance_id, member_id) != member_id:
            raise FencedInstanceIdError(
                f"group {group.group_id!r}: member {member_id!r} of group.instance.id "
                f"{instance_id!r} was fenced by {group.static[instance_id]!r}, which joined "
                "with the same instance id")
        raise UnknownMemberIdError(
            f"group {group.group_id!r} has no member {member_id!r}; join with an empty "
            "member id")

    def _replace_static(self, group: Group, instance_id: str, client_id: str,
                        client_host: str) -> Member:
        """A static member rejoining with an empty member id: a new member id takes the
        old one's place (its assignment, leadership and pending join); the old one is
        fenced."""
        old = group.members.pop(group.static[instance_id])
        member_id = f"{client_id or 'consumer'}-{uuid.uuid4().hex[:16]}"
        member = Member(member_id, client_id, client_host, old.topics, old.session_timeout_ms,
                        old.rebalance_timeout_ms, protocol_type=old.protocol_type,
                        protocols=old.protocols, instance_id=instance_id,
                        assignment=old.assignment, assigned=old.assigned)
        group.members[member_id] = member
        group.static[instance_id] = member_id
        if group.leader == old.member_id:
            group.leader = member_id
        fenced = FencedInstanceIdError(
            f"group {group.group_id!r}: member {old.member_id!r} of group.instance.id "
            f"{instance_id!r} was fenced by {member_id!r}, which joined with the same "
            "instance id")
        _fail(old.sync, fenced)
        _fail(old.join, fenced)  # its place in a rebalance under way is the new member's
        log.info("group %s: static member %s (instance %s) replaced by %s", group.group_id,
                 old.member_id, instance_id, member_id)
        return member

    def _static_answer(self, group: Group, member: Member) -> dict | None:
        """Kafka's answer to a static member rejoining a ``Stable`` group under a new
        member id: the current generation and the old id's assignment, without a
        rebalance, unless the group's protocol would change (None: rebalance)."""
        if group.state != STABLE or group.completing:
            return None
        if member.protocols is not None and self._select_protocol(group) != group.protocol:
            return None
        member.last_seen = time.monotonic()
        member.response = self._response(group, member)
        if member.protocols is not None and member.member_id == group.leader:
            # the leader gets the members, told not to assign (JoinGroup v9's
            # skip_assignment; older clients' SyncGroup gets the current assignment)
            member.response["skip_assignment"] = True
        return dict(member.response)

    async def _current_answer(self, group: Group, member: Member, topics,
                              protocols) -> dict | None:
        """Kafka's answer to a JoinGroup of a known member that changes nothing: its
        current generation (and assignment), without a rebalance (a client that
        re-sends its JoinGroup, or rejoins after missing a generation, must not make
        the whole group rebalance again). None when a rebalance is due: the group is
        rebalancing; the subscription changed (broker-assigned); the member's protocols
        or their metadata changed (client-assigned: a cooperative member that revoked
        partitions rejoins with the partitions it still owns, and that rejoin starts the
        generation that hands the revoked ones out); a subscribed topic's partition
        count changed since the generation began (broker-assigned, or the rejoin of a
        client-assigned ``consumer`` group's leader: Kafka rebalances at every rejoin of
        the leader so that it can reassign after such a change; here the broker sees
        the change itself, and a leader that rejoins for nothing, as a client whose
        poll gave up on a finished join does, does not make the group rebalance again);
        any rejoin of the leader of a group of another protocol type (Kafka's rule: the
        broker reads nothing of their metadata and cannot tell what changed)."""
        if group.completing or member.response is None or _pending(member.join):
            return None
        if member.protocols is not None:
            if protocols != member.protocols or group.state not in (STABLE, COMPLETING):
                return None
            if group.state == COMPLETING or member.member_id != group.leader:
                member.last_seen = time.monotonic()
                return dict(member.response)
            if member.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return None
        elif group.state != STABLE or sorted(set(topics)) != member.topics:
            return None
        generation = group.generation
        counts = await self.partition_counts(
            sorted({t for m in group.members.values() for t in m.topics}))
        if group.state != STABLE or group.generation != generation \
                or group.members.get(member.member_id) is not member or counts != group.counts:
            return None
        if member.protocols is not None and not self._covered(group):
            return None  # the leader left partitions out (it lacked metadata): reassign
        member.last_seen = time.monotonic()
        return dict(member.response)

    @staticmethod
    def _covered(group: Group) -> bool:
        """Whether the generation's assignment gives out every partition of the
        members' subscribed topics (their counts when the generation began)."""
        given = {tp for m in group.members.values() for tp in m.assignment}
        return all((t, p) in given for m in group.members.values() for t in m.topics
                   for p in range(group.counts.get(t, 0)))

    def _prepare(self, group: Group) -> None:
        """Start a rebalance: ``PreparingRebalance`` until every member has rejoined or
        the largest rebalance timeout has passed. The first rebalance of an empty group
        waits ``group.initial.rebalance.delay.ms`` first (Kafka's InitialDelayedJoin),
        and again after each window in which a new member joined, until no new member
        comes in a window or the rebalance timeout (at least the delay) has passed."""
        if group.state == PREPARING:
            return
        if group.state == COMPLETING:  # the leader's assignment will not come: rejoin
            for m in group.members.values():
                _fail(m.sync, RebalanceInProgressError(
                    f"group {group.group_id!r} is rebalancing again: rejoin"))
        first = group.state == EMPTY
        group.state = PREPARING
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        delay = self.initial_rebalance_delay_ms if first else 0
        group.deadline = time.monotonic() + max(timeout, delay) / 1000
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        group.initial_until = 0.0
        if delay > 0:
            group.joined_in_delay = False
            self._initial_window(group)
            return
        group.timer = self.loop.call_later(timeout / 1000, self._maybe_complete, group, True)

    def _initial_window(self, group: Group) -> None:
        """One window of the initial rebalance delay: the delay, or what is left of the
        rebalance's deadline if less."""
        now = time.monotonic()
        wait = min(self.initial_rebalance_delay_ms / 1000, max(group.deadline - now, 0.0))
        group.initial_until = now + wait
        group.timer = self.loop.call_later(wait, self._initial_window_over, group)

    def _initial_window_over(self, group: Group) -> None:
        group.timer = None
        if group.state != PREPARING or not group.initial_until:
            return
        left = group.deadline - time.monotonic()
        if group.joined_in_delay and left > 0:
            group.joined_in_delay = False
            self._initial_window(group)
            return
        group.initial_until = 0.0
        group.timer = self.loop.call_later(max(left, 0.0), self._maybe_complete, group, True)
        self._maybe_complete(group)

    def _maybe_complete(self, group: Group, due: bool = False) -> None:
        if group.state != PREPARING or group.completing:
            return
        if group.initial_until and not due:
            return  # in the initial rebalance delay: more members may join
        waiting = [m for m in group.members.values() if _pending(m.join)]
        if len(waiting) < len(group.members) and not due:
            return
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        for member in [m for m in group.members.values() if m not in waiting]:
            log.info("group %s: member %s did not rejoin in time; removed",
                     group.group_id, member.member_id)
            del group.members[member.member_id]
            if member.instance_id is not None:
                group.static.pop(member.instance_id, None)
        group.completing = True
        self.loop.create_task(self._complete(group))

    async def _complete(self, group: Group) -> None:
        try:
            await self._assign(group)
        except Exception as exc:  # storage trouble or a bug: fail the joins, stay up
            log.error("group %s: rebalance failed: %s", group.group_id, exc)
            for m in group.members.values():
                _fail(m.join, exc)
            group.completing = False
            group.state = EMPTY if not group.members else STABLE

    def _select_protocol(self, group: Group) -> str | None:
        """Kafka's ``selectProtocol``: of the protocols every member supports, the one
        most members list first among them (ties: the leader's order)."""
        members = list(group.members.values())
        if not members:
            return None
        candidates = set.intersection(*({n for n, _ in m.protocols} for m in members))
        votes = Counter(next(n for n, _ in m.protocols if n in candidates) for m in members)
        leader = group.members.get(group.leader) or members[0]
        order = [n for n, _ in leader.protocols if n in candidates]
        return max(order, key=lambda n: (votes[n], -order.index(n)))

    def _response(self, group: Group, member: Member) -> dict:
        """The JoinGroup answer of ``member`` in the current generation."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in member.assignment:
            by_topic.setdefault(topic, []).append(partition)
        response = {
            "error_code": 0, "error_message": "",
            "generation_id": group.generation, "member_id": member.member_id,
            "leader_id": group.leader, "members": sorted(group.members),
            "assignment": [{"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
        }
        if member.protocols is not None:
            response.update(protocol_type=member.protocol_type, protocol_name=group.protocol,
                            skip_assignment=False, member_protocols=[
                                {"member_id": m.member_id, "group_instance_id": m.instance_id,
                                 "metadata": m.metadata(group.protocol)}
                                for m in group.members.values()]
                            if member.member_id == group.leader else [])
        return response

    async def _assign(self, group: Group) -> None:
        from ..coordination.assignment import range_assign  # shared with ZooKeeper groups

        client_assigned = group.protocol_type() is not None
        counts = await self.partition_counts(
            sorted({t for m in group.members.values() for t in m.topics}))
        group.completing = False
        members = dict(group.members)
        group.counts = dict(counts)
        group.generation += 1
        if not members:
            group.state, group.leader, group.protocol = EMPTY, "", None
        elif client_assigned:
            # Kafka's leader: the one before, while it stays; else the first to join
            if group.leader not in members:
                group.leader = next(iter(members))
            group.protocol = self._select_protocol(group)
            group.state = COMPLETING
            for member in members.values():
                member.assignment, member.assigned = [], b""
        else:
            group.state, group.protocol = STABLE, None
            assignment = range_assign(counts, {mid: m.topics for mid, m in members.items()})
            group.leader = min(members)
            for mid, member in members.items():
                member.assignment = assignment.get(mid, [])
        for member in members.values():
            member.response = self._response(group, member)
            if _pending(member.join):
                member.join.set_result(dict(member.response))
        log.info("group %s: generation %d with %d member(s)%s", group.group_id,
                 group.generation, len(members),
                 f", protocol {group.protocol}, leader {group.leader}" if client_assigned
                 else "")

    # --- sync -------------------------------------------------------------------------------
    async def sync(self, group_id: str, generation_id: int, member_id: str,
                   assignments: list | None = None, *,
                   group_instance_id: str | None = None, protocol_type: str | None = None,
                   protocol_name: str | None = None) -> bytes:
        """SyncGroup of a client-assigned group: the leader's ``assignments``
        ([{member_id, assignment, partitions}]: the bytes, and, of a ``consumer``
        group, the topic-partitions they give, ``[{name, partitions}]``, for
        DescribeGroups and the leader's rejoin; a member it leaves out gets empty
        bytes) are stored verbatim and answered to
        every member of the generation; a follower waits for them. In a ``Stable``
        group, the member's current assignment (the leader's are ignored). A
        ``protocol_type`` or ``protocol_name`` given (SyncGroup v5+) must be the group's
        (else InconsistentGroupProtocol, as Kafka's)."""
        group, member = self._member(group_id, member_id, group_instance_id)
        if member.protocols is None:
            raise InconsistentGroupProtocolError(
                f"group {group_id!r} is assigned by the broker (sparklog's own consumers): "
                "JoinGroup answers the assignment, there is no SyncGroup")
        if group.state == PREPARING:
            raise RebalanceInProgressError(
                f"group {group_id!r} is rebalancing: rejoin (generation {group.generation})")
        self._check_generation(group, generation_id)
        for what, named, own in (("protocol type", protocol_type, group.protocol_type()),
                                 ("protocol", protocol_name, group.protocol)):
            if named is not None and named != own:
                raise InconsistentGroupProtocolError(
                    f"group {group_id!r}: SyncGroup names {what} {named!r}; the group's "
                    f"generation {group.generation} has {own!r}")
        member.last_seen = time.monotonic()
        if group.state == STABLE:
            return member.assigned
        if member_id == group.leader:
            given = {a["member_id"]: a for a in assignments or []}
            consumers = group.protocol_type() == CONSUMER_PROTOCOL_TYPE
            for mid, m in group.members.items():
                a = given.get(mid, {})
                m.assigned = bytes(a.get("assignment", b""))
                m.assignment = sorted((t["name"], p) for t in a.get("partitions") or []
                                      for p in t["partitions"]) if consumers else []
            group.state = STABLE
            log.info("group %s: generation %d assigned by its leader %s", group_id,
                     group.generation, member_id)
            for m in group.members.values():
                if _pending(m.sync):
                    m.sync.set_result(m.assigned)
            return member.assigned
        _fail(member.sync, RebalanceInProgressError(
            f"group {group_id!r}: member {member_id!r} sent SyncGroup again"))
        member.sync = self.loop.create_future()
        future = member.sync
        try:
            return await future
        finally:
            member.last_seen = time.monotonic()

    def protocol(self, group_id: str) -> tuple[str | None, str | None]:
        """(protocol type, protocol) of a client-assigned group's generation; (None,
        None) for a group of sparklog's own consumers or one not known here."""
        group = self.groups.get(group_id)
        if group is None or group.protocol_type() is None:
            return None, None
        return group.protocol_type(), group.protocol

    # --- heartbeat, leave, commit checks ---------------------------------------------------
    def _member(self, group_id: str, member_id: str,
                instance_id: str | None = None) -> tuple[Group, Member]:
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}")
        member = group.members.get(member_id)
        if member is None or instance_id is not None and \
                group.static.get(instance_id) != member_id:
            self._fenced_or_unknown(group, member_id, instance_id)
        return group, member

    @staticmethod
    def _check_generation(group: Group, generation_id: int) -> None:
        if generation_id != group.generation:
            raise IllegalGenerationError(
                f"group {group.group_id!r}: generation {generation_id} is not the current "
                f"generation {group.generation}")

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, *,
                  group_instance_id: str | None = None) -> None:
        """Heartbeat: keep the session; raise what the member must do otherwise."""
        group, member = self._member(group_id, member_id, group_instance_id)
        member.last_seen = time.monotonic()
        if group.state == PREPARING:
            raise RebalanceInProgressError(
                f"group {group_id!r} is rebalancing: rejoin (generation {group.generation})")
        self._check_generation(group, generation_id)

    def leave(self, group_id: str, member_id: str, *,
              group_instance_id: str | None = None) -> None:
        """LeaveGroup: remove the member (named by its instance id, KIP-345's LeaveGroup
        v3+, when given: a member id given with it must be the instance's current one);
        the others rebalance."""
        if group_instance_id is not None:
            self.check_coordinator(group_id)
            group = self.groups.get(group_id)
            current = group.static.get(group_instance_id) if group is not None else None
            if group is None or current is None:
                raise UnknownMemberIdError(
                    f"group {group_id!r} has no member of group.instance.id "
                    f"{group_instance_id!r}")
            member_id = member_id or current
        group, member = self._member(group_id, member_id, group_instance_id)
        self._remove(group, member, "left the group")

    def _remove(self, group: Group, member: Member, why: str) -> None:
        group.members.pop(member.member_id, None)
        if member.instance_id is not None and \
                group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]
        log.info("group %s: member %s %s", group.group_id, member.member_id, why)
        gone = UnknownMemberIdError(
            f"group {group.group_id!r}: member {member.member_id!r} {why}")
        _fail(member.join, gone)
        _fail(member.sync, gone)
        if group.members:
            self._prepare(group)
            self._maybe_complete(group)
        else:
            if group.timer is not None:
                group.timer.cancel()
                group.timer = None
            group.initial_until = 0.0
            group.state, group.leader, group.protocol = EMPTY, "", None

    def check_commit(self, group_id: str, generation_id: int, member_id: str, *,
                     group_instance_id: str | None = None) -> None:
        """Raise unless an OffsetCommit with this generation/member may commit: a simple
        consumer (generation -1) only to a group without members, a member only in the
        current generation, and not while its group waits for the leader's assignment
        (RebalanceInProgress, Kafka's answer in ``CompletingRebalance``)."""
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if generation_id < 0:
            if group is not None and group.members:
                raise IllegalGenerationError(
                    f"group {group_id!r} has active members; commit with their "
                    "generation and member id")
            return
        group, member = self._member(group_id, member_id, group_instance_id)
        if group.state == COMPLETING:
            raise RebalanceInProgressError(
                f"group {group_id!r} waits for its leader's assignment: rejoin")
        self._check_generation(group, generation_id)
        member.last_seen = time.monotonic()

    # --- description ------------------------------------------------------------------------
    def describe(self, group_id: str) -> dict:
        """DescribeGroups item of one group (a client-assigned group's members with their
        instance id, metadata of the group's protocol and the leader's assignment bytes)."""
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
            item = {"member_id": m.member_id, "client_id": m.client_id,
                    "client_host": m.client_host,
                    "assignment": [{"name": t, "partitions": ps}
                                   for t, ps in sorted(by_topic.items())]}
            if m.protocols is not None:
                item.update(group_instance_id=m.instance_id,
                            metadata=m.metadata(group.protocol), assigned=m.assigned)
            members.append(item)
        out = {"group_id": group_id, "state": group.state, "generation_id": group.generation,
               "members": members, "error_code": 0, "error_message": ""}
        if group.protocol_type() is not None:
            out.update(protocol_type=group.protocol_type(), protocol=group.protocol or "")
        return out

    # --- sessions ------------------------------------------------------------------------------
    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for member in list(group.members.values()):
                    if _pending(member.join) or _pending(member.sync):
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
                down = RebalanceInProgressError(
                    f"group {group.group_id!r}: the broker is shutting down")
                _fail(member.join, down)
                _fail(member.sync, down)
