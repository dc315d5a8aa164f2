"""Kafka's classic group protocol on the broker's coordinator (docs/kafka-protocol.md,
"Consumer groups"): the members' protocol metadata reaches the leader untouched and the
leader's assignment reaches each member verbatim, so KIP-429's cooperative rebalancing
moves a partition in two generations (its owner revokes it before another member gets
it: no partition consumed by two members at once); KIP-345's static members
(``group.instance.id``) keep their partitions across a restart without a rebalance, and
a second member with the same instance id fences the first. The coordinator serves
any protocol type, as Kafka's: Kafka Connect's distributed workers (``connect``) and
Schema Registry (``sr``) form groups of opaque metadata and assignments.

On the wire first (one connection per member, the requests a client would send), then
with confluent-kafka's (librdkafka's) consumers and Java's VerifiableConsumer with the
CooperativeStickyAssignor, unchanged."""

from __future__ import annotations

import datetime
import importlib
import struct
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.kafkaconn import KafkaConn, create_with_librdkafka, start_with_kafka_listener
from tests.support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

PARTITIONS = 4
#: Kafka's error codes the tests expect
NONE, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 0, 23, 25, 27
FENCED_INSTANCE_ID = 82


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-group-protocols"))
    yield b
    b.stop()


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def subscription(topics: list[str], owned: dict[str, list[int]], user_data: bytes) -> bytes:
    """A ConsumerProtocolSubscription v1 (KIP-429's, with the partitions the member
    owns), encoded by hand."""
    out = struct.pack(">hi", 1, len(topics)) + b"".join(_string(t) for t in topics)
    out += struct.pack(">i", len(user_data)) + user_data
    out += struct.pack(">i", len(owned))
    for topic, partitions in owned.items():
        out += _string(topic) + struct.pack(f">i{len(partitions)}i", len(partitions),
                                             *partitions)
    return out


def assignment(partitions: dict[str, list[int]], user_data: bytes = b"") -> bytes:
    """A ConsumerProtocolAssignment v1, encoded by hand."""
    out = struct.pack(">hi", 1, len(partitions))
    for topic, ps in partitions.items():
        out += _string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out + struct.pack(">i", len(user_data)) + user_data


class WireMember:
    """One group member speaking Kafka's protocol on its own connection (JoinGroup v5,
    SyncGroup v3, Heartbeat v3, OffsetCommit v7, LeaveGroup v3), a member of
    ``protocol_type`` (Kafka's consumers unless told). ``flexible`` sends JoinGroup v7
    and SyncGroup v5 instead, whose answers carry the group's protocol type and
    protocol; SyncGroup v5 names the member's protocol type and the protocol of its
    last JoinGroup answer, as Kafka's clients do."""

    def __init__(self, address: str, group: str, instance_id: str | None = None,
                 protocol_type: str = "consumer", flexible: bool = False):
        self.conn = KafkaConn(address)
        self.group = group
        self.instance_id = instance_id
        self.protocol_type = protocol_type
        self.join_version, self.sync_version = (7, 5) if flexible else (5, 3)
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None

    def join(self, metadata: bytes, protocol: str = "cooperative-sticky", member_id=None):
        from kio.static.primitive import i32Timedelta

        v = self.join_version
        request = importlib.import_module(f"kio.schema.join_group.v{v}.request")
        answer = self.conn.request(11, v, request.JoinGroupRequest(
            group_id=self.group, member_id=self.member_id if member_id is None else member_id,
            session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            group_instance_id=self.instance_id, protocol_type=self.protocol_type,
            protocols=(request.JoinGroupRequestProtocol(name=protocol, metadata=metadata),)))
        if answer.error_code == NONE:
            self.member_id, self.generation = answer.member_id, answer.generation_id
            self.protocol = answer.protocol_name
        return answer

    def sync(self, assignments: dict[str, bytes] | None = None, member_id=None):
        from kio.static.primitive import i32

        v = self.sync_version
        request = importlib.import_module(f"kio.schema.sync_group.v{v}.request")
        protocol = {"protocol_type": self.protocol_type,
                    "protocol_name": self.protocol} if v >= 5 else {}
        return self.conn.request(14, v, request.SyncGroupRequest(
            group_id=self.group, generation_id=i32(self.generation),
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id, **protocol,
            assignments=tuple(request.SyncGroupRequestAssignment(member_id=m, assignment=a)
                              for m, a in (assignments or {}).items())))

    def heartbeat(self, member_id=None) -> int:
        from kio.schema.heartbeat.v3.request import HeartbeatRequest
        from kio.static.primitive import i32

        return self.conn.request(12, 3, HeartbeatRequest(
            group_id=self.group, generation_id=i32(self.generation),
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id)).error_code

    def commit(self, topic: str, partition: int, offset: int, member_id=None) -> int:
        from kio.schema.offset_commit.v7.request import (
            OffsetCommitRequest,
            OffsetCommitRequestPartition,
            OffsetCommitRequestTopic,
        )
        from kio.static.primitive import i32, i64

        answer = self.conn.request(8, 7, OffsetCommitRequest(
            group_id=self.group, generation_id_or_member_epoch=i32(self.generation),
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id,
            topics=(OffsetCommitRequestTopic(name=topic, partitions=(
                OffsetCommitRequestPartition(partition_index=i32(partition),
                                             committed_offset=i64(offset),
                                             committed_metadata=None),)),)))
        return answer.topics[0].partitions[0].error_code

    def leave(self, member_id: str, instance_id: str | None):
        from kio.schema.leave_group.v3.request import LeaveGroupRequest, MemberIdentity

        return self.conn.request(13, 3, LeaveGroupRequest(group_id=self.group, members=(
            MemberIdentity(member_id=member_id, group_instance_id=instance_id),)))

    def close(self) -> None:
        self.conn.sock.close()


def test_cooperative_metadata_reaches_the_leader_untouched_and_a_revoking_rejoin_rebalances(
        kafka_address):
    """KIP-429 on the wire: the leader's JoinGroup answer carries each member's metadata
    byte for byte (with the partitions it owns); the leader's assignment reaches each
    member verbatim, including one that leaves partitions out (the first round of a
    cooperative move); a follower re-sending its JoinGroup unchanged gets the same
    generation (no rebalance), while the owner's rejoin with its revoked partitions gone
    from its metadata starts the next generation, where the leader hands them out."""
    topic = create_with_librdkafka(kafka_address, f"coop-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = "g-" + topic
    a, b = WireMember(kafka_address, group), WireMember(kafka_address, group)
    pool = ThreadPoolExecutor(2)
    try:
        meta_a0 = subscription([topic], {}, b"a")
        first = a.join(meta_a0)
        assert first.error_code == NONE and first.leader == a.member_id
        assert [(m.member_id, m.metadata) for m in first.members] == [(a.member_id, meta_a0)]
        everything = assignment({topic: list(range(PARTITIONS))}, b"gen1")
        assert a.sync({a.member_id: everything}).assignment == everything

        # b joins: a learns of the rebalance and rejoins, owning every partition
        meta_b = subscription([topic], {}, b"b-user-data")
        b_join = pool.submit(b.join, meta_b)
        wait_until(lambda: a.heartbeat() == REBALANCE_IN_PROGRESS, what="a rebalance")
        meta_a1 = subscription([topic], {topic: list(range(PARTITIONS))}, b"a")
        second = a.join(meta_a1)
        b_second = b_join.result(30)
        assert second.error_code == NONE == b_second.error_code
        assert second.generation_id == b_second.generation_id == first.generation_id + 1
        assert second.leader == a.member_id == b_second.leader and not b_second.members
        assert second.protocol_name == "cooperative-sticky"
        assert {m.member_id: m.metadata for m in second.members} == {
            a.member_id: meta_a1, b.member_id: meta_b}  # untouched

        # the first round: a keeps half, the other half is assigned to nobody yet
        keep = assignment({topic: [0, 1]}, b"round1")
        b_sync = pool.submit(b.sync)
        assert a.sync({a.member_id: keep, b.member_id: assignment({})}).assignment == keep
        assert b_sync.result(30).assignment == assignment({})
        # b re-sends its JoinGroup unchanged: the same generation, no rebalance
        again = b.join(meta_b)
        assert again.error_code == NONE and again.generation_id == second.generation_id
        assert a.heartbeat() == NONE

        # a revoked 2 and 3 and rejoins owning 0 and 1: the second round
        meta_a2 = subscription([topic], {topic: [0, 1]}, b"a")
        a_join = pool.submit(a.join, meta_a2)
        wait_until(lambda: b.heartbeat() == REBALANCE_IN_PROGRESS, what="the second round")
        third_b = b.join(meta_b)
        third = a_join.result(30)
        assert third.generation_id == second.generation_id + 1 == third_b.generation_id
        assert {m.member_id: m.metadata for m in third.members} == {
            a.member_id: meta_a2, b.member_id: meta_b}
        given = assignment({topic: [2, 3]}, b"round2")
        b_sync = pool.submit(b.sync)
        a.sync({a.member_id: keep, b.member_id: given})
        assert b_sync.result(30).assignment == given  # verbatim, user data included
    finally:
        pool.shutdown(wait=False)
        a.close()
        b.close()


def test_a_leader_rejoining_unchanged_rebalances_only_when_its_assignment_left_some_out(
        kafka_address):
    """The leader re-sending its JoinGroup unchanged (kafka-python's does when its poll
    gave up on a join that then completed) keeps the generation while its assignment
    covers every subscribed partition; one that left partitions out (it lacked their
    metadata) starts a new generation, to assign again."""
    topic = create_with_librdkafka(kafka_address, f"lead-{uuid.uuid4().hex[:8]}", PARTITIONS)
    leader = WireMember(kafka_address, "g-" + topic)
    try:
        meta = subscription([topic], {}, b"")
        first = leader.join(meta, protocol="range")
        leader.sync({leader.member_id: assignment({topic: [0]})})  # missing 1 to 3
        second = leader.join(meta, protocol="range")
        assert second.generation_id == first.generation_id + 1 and second.members
        everything = assignment({topic: list(range(PARTITIONS))})
        assert leader.sync({leader.member_id: everything}).assignment == everything
        third = leader.join(meta, protocol="range")
        assert third.generation_id == second.generation_id and third.members
        assert leader.sync({leader.member_id: b"ignored"}).assignment == everything
    finally:
        leader.close()


def test_a_static_member_restarting_keeps_its_assignment_and_fences_its_old_id(kafka_address):
    """KIP-345 on the wire: a static member rejoining with an empty member id gets a new
    member id in the same generation (no rebalance) and the assignment its old id had;
    the old id's Heartbeat, SyncGroup, OffsetCommit and JoinGroup answer
    FENCED_INSTANCE_ID; LeaveGroup v3 names the member by its instance id (a member id
    given with it must be the instance's current one)."""
    topic = create_with_librdkafka(kafka_address, f"static-{uuid.uuid4().hex[:8]}",
                                   PARTITIONS)
    group = "g-" + topic
    old = WireMember(kafka_address, group, instance_id="host-1")
    new = WireMember(kafka_address, group, instance_id="host-1")
    try:
        meta = subscription([topic], {}, b"")
        first = old.join(meta)
        given = assignment({topic: list(range(PARTITIONS))}, b"mine")
        assert old.sync({old.member_id: given}).assignment == given

        # the process restarts: same instance id, no member id
        again = new.join(meta)
        assert again.error_code == NONE and again.member_id != old.member_id
        assert again.generation_id == first.generation_id  # no rebalance
        assert again.leader == new.member_id  # it was the leader: it still is
        assert new.sync().assignment == given  # the old id's assignment, kept
        assert new.heartbeat() == NONE

        assert old.heartbeat() == FENCED_INSTANCE_ID
        assert old.sync({old.member_id: given}).error_code == FENCED_INSTANCE_ID
        assert old.commit(topic, 0, 5) == FENCED_INSTANCE_ID
        assert old.join(meta).error_code == FENCED_INSTANCE_ID
        assert new.commit(topic, 0, 5) == NONE

        assert new.leave(old.member_id, "host-1").members[0].error_code == FENCED_INSTANCE_ID
        left = new.leave("", "host-1")
        assert left.error_code == NONE and left.members[0].error_code == NONE
        assert new.heartbeat() == UNKNOWN_MEMBER_ID
        assert new.leave("", "host-1").members[0].error_code == UNKNOWN_MEMBER_ID
    finally:
        old.close()
        new.close()


def _describe(conn: KafkaConn, group: str):
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    return conn.request(15, 5, DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False)).groups[0]


def _listed(conn: KafkaConn, group: str):
    from kio.schema.list_groups.v4.request import ListGroupsRequest

    return next(g for g in conn.request(16, 4, ListGroupsRequest(states_filter=())).groups
                if g.group_id == group)


def test_a_connect_group_gets_its_workers_metadata_and_assignments_verbatim(kafka_address):
    """Kafka Connect's distributed workers on the wire (protocol type ``connect``, as
    Kafka's coordinator serves any): the broker reads nothing of their metadata (bytes
    that are no consumer subscription), the leader gets every worker's verbatim and
    SyncGroup hands each the leader's bytes, answering the group's protocol type and
    protocol; a worker joining rebalances, and so does a rejoin of the leader that
    changes nothing (Kafka's rule, kept for every type but ``consumer``: the broker
    cannot tell what changed); DescribeGroups and ListGroups show the type."""
    group = f"connect-cluster-{uuid.uuid4().hex[:8]}"
    a, b, c = (WireMember(kafka_address, group, protocol_type="connect", flexible=True)
               for _ in range(3))
    # a Connect worker's metadata starts with its version (0-2); -1 is no consumer's
    meta = {w: struct.pack(">h", -1) + f"worker {n} at http://127.0.0.1:{8083 + n}".encode()
            for n, w in enumerate((a, b, c))}
    pool = ThreadPoolExecutor(3)
    try:
        first = a.join(meta[a], protocol="sessioned")
        assert first.error_code == NONE and first.leader == a.member_id
        assert (first.protocol_type, first.protocol_name) == ("connect", "sessioned")
        assert [(m.member_id, m.metadata) for m in first.members] == [(a.member_id, meta[a])]
        synced = a.sync({a.member_id: b"\x00\x01 all tasks: a"})
        assert synced.error_code == NONE and synced.assignment == b"\x00\x01 all tasks: a"
        assert (synced.protocol_type, synced.protocol_name) == ("connect", "sessioned")

        # b joins: a rejoins, unchanged, and gets both workers' metadata
        b_join = pool.submit(b.join, meta[b], "sessioned")
        wait_until(lambda: a.heartbeat() == REBALANCE_IN_PROGRESS, what="b's rebalance")
        second, b_second = a.join(meta[a], protocol="sessioned"), b_join.result(30)
        assert second.error_code == NONE == b_second.error_code
        assert second.generation_id == b_second.generation_id == first.generation_id + 1
        assert second.leader == a.member_id == b_second.leader and not b_second.members
        assert {m.member_id: m.metadata for m in second.members} == {
            a.member_id: meta[a], b.member_id: meta[b]}
        given = {a.member_id: b"\x00\x01 connector x", b.member_id: b"\x00\x01 task x-0"}
        b_sync = pool.submit(b.sync)
        assert a.sync(given).assignment == given[a.member_id]
        b_synced = b_sync.result(30)
        assert b_synced.assignment == given[b.member_id]
        assert (b_synced.protocol_type, b_synced.protocol_name) == ("connect", "sessioned")

        with KafkaConn(kafka_address) as admin:
            described = _describe(admin, group)
            assert (described.error_code, described.group_state, described.protocol_type,
                    described.protocol_data) == (NONE, "Stable", "connect", "sessioned")
            assert {m.member_id: (m.member_metadata, m.member_assignment)
                    for m in described.members} == {
                w.member_id: (meta[w], given[w.member_id]) for w in (a, b)}
            listed = _listed(admin, group)
            assert (listed.protocol_type, listed.group_state) == ("connect", "Stable")

        # the leader rejoins with nothing changed: a new generation all the same
        a_join = pool.submit(a.join, meta[a], "sessioned")
        wait_until(lambda: b.heartbeat() == REBALANCE_IN_PROGRESS, what="the leader's rebalance")
        third_b, third = b.join(meta[b], protocol="sessioned"), a_join.result(30)
        assert third.generation_id == third_b.generation_id == second.generation_id + 1
        assert len(third.members) == 2
        b_sync = pool.submit(b.sync)
        a.sync(given)
        assert b_sync.result(30).assignment == given[b.member_id]

        # a third worker joins: both rejoin, the leader gets the three workers' metadata
        c_join = pool.submit(c.join, meta[c], "sessioned")
        wait_until(lambda: a.heartbeat() == REBALANCE_IN_PROGRESS, what="c's rebalance")
        b_join = pool.submit(b.join, meta[b], "sessioned")
        fourth, fourth_b, fourth_c = a.join(meta[a], protocol="sessioned"), \
            b_join.result(30), c_join.result(30)
        assert fourth.generation_id == fourth_b.generation_id == fourth_c.generation_id \
            == third.generation_id + 1
        assert {m.member_id: m.metadata for m in fourth.members} == {
            w.member_id: meta[w] for w in (a, b, c)}
        given[c.member_id] = b"\x00\x01 task x-1"
        follower_syncs = [pool.submit(w.sync) for w in (b, c)]
        a.sync(given)
        assert [f.result(30).assignment for f in follower_syncs] == [
            given[b.member_id], given[c.member_id]]
    finally:
        pool.shutdown(wait=False)
        for w in (a, b, c):
            w.close()


def test_a_member_of_another_protocol_type_or_of_none_is_refused(kafka_address):
    """A group's members share one protocol type (Kafka's INCONSISTENT_GROUP_PROTOCOL,
    23, for a consumer or a Schema Registry member joining a group of Connect workers,
    and for a JoinGroup naming no protocol type); a SyncGroup v5 naming another
    protocol type or protocol than the group's is refused the same way. A group of
    another type (Schema Registry's ``sr``) forms on its own."""
    group = f"connect-cluster-{uuid.uuid4().hex[:8]}"
    worker = WireMember(kafka_address, group, protocol_type="connect", flexible=True)
    others = [WireMember(kafka_address, group, protocol_type=kind, flexible=True)
              for kind in ("consumer", "sr", "")]
    registry = WireMember(kafka_address, f"schema-registry-{uuid.uuid4().hex[:8]}",
                          protocol_type="sr", flexible=True)
    try:
        assert worker.join(b"\x00\x01worker", protocol="sessioned").error_code == NONE
        assert worker.sync({worker.member_id: b"tasks"}).assignment == b"tasks"
        assert [o.join(subscription(["t"], {}, b""), protocol="sessioned").error_code
                for o in others] == [INCONSISTENT_GROUP_PROTOCOL] * 3
        worker.protocol_type = "consumer"
        assert worker.sync().error_code == INCONSISTENT_GROUP_PROTOCOL
        worker.protocol_type, worker.protocol = "connect", "default"
        assert worker.sync().error_code == INCONSISTENT_GROUP_PROTOCOL
        worker.protocol = "sessioned"
        assert worker.sync().assignment == b"tasks"
        assert worker.heartbeat() == NONE  # the group was not disturbed

        joined = registry.join(b"\x00\x00sr leader metadata", protocol="v0")
        assert (joined.error_code, joined.protocol_type, joined.protocol_name) == (
            NONE, "sr", "v0")
        assert [m.metadata for m in joined.members] == [b"\x00\x00sr leader metadata"]
        assert registry.sync({registry.member_id: b"leader"}).assignment == b"leader"
    finally:
        for w in (worker, registry, *others):
            w.close()


# --- confluent-kafka ---------------------------------------------------------------------
class Producing(threading.Thread):
    """Produces records to every partition until stopped (acks=all, idempotent);
    ``acked`` holds the (partition, offset) of each acknowledged record."""

    def __init__(self, address: str, topic: str, partitions: int = PARTITIONS):
        super().__init__(daemon=True, name="producer")
        self.partitions = partitions
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": address, "enable.idempotence": True, "linger.ms": 5})
        self.topic = topic
        self.acked: set[tuple[int, int]] = set()
        self.errors: list = []
        self.halt = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err:
            self.errors.append(err)
        else:
            self.acked.add((msg.partition(), msg.offset()))

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            self.producer.produce(self.topic, value=b"r%d" % i, partition=i % self.partitions,
                                  on_delivery=self._delivered)
            self.producer.poll(0)
            i += 1
            time.sleep(0.005)
        assert self.producer.flush(60) == 0

    def stop(self) -> set[tuple[int, int]]:
        self.halt.set()
        self.join(90)
        assert not self.errors, self.errors
        return self.acked


class Member(threading.Thread):
    """A confluent-kafka group member (it joins when made) polling in its own thread
    once started: what it consumed
    (partition, offset), the time intervals it owned each partition (from its
    rebalance callbacks), and before it gives a partition up (revoked, or at close)
    a synchronous commit of what it consumed of it (``commit_batches``: after each
    batch as well)."""

    def __init__(self, name: str, address: str, topic: str, group: str, *,
                 commit_batches: bool = False, **config):
        super().__init__(daemon=True, name=name)
        self.topic = topic
        self.commit_batches = commit_batches
        self.c = confluent_kafka.Consumer({
            "bootstrap.servers": address, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "heartbeat.interval.ms": 300,
            "session.timeout.ms": 10000, "client.id": name, **config})
        self.lock = threading.Lock()
        self.owned: dict[int, float] = {}       # partition -> since
        self.intervals: list[tuple[int, float, float]] = []
        self.consumed: list[tuple[int, int]] = []
        self.position: dict[int, int] = {}     # partition -> next offset to commit
        self.events = 0                         # rebalance callbacks that changed something
        self.errors: list = []
        self.halt = threading.Event()
        self.c.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                         on_lost=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        with self.lock:
            now = time.monotonic()
            for tp in partitions:
                self.owned.setdefault(tp.partition, now)
            self.events += bool(partitions)

    def _commit(self, partitions) -> None:
        with self.lock:
            commits = [confluent_kafka.TopicPartition(self.topic, p, self.position[p])
                       for p in partitions if p in self.position]
        if commits:
            try:
                self.c.commit(offsets=commits, asynchronous=False)
            except confluent_kafka.KafkaException as exc:
                self.errors.append(exc)

    def _revoked(self, consumer, partitions) -> None:
        self._commit([tp.partition for tp in partitions])
        with self.lock:
            now = time.monotonic()
            for tp in partitions:
                if tp.partition in self.owned:
                    self.intervals.append((tp.partition, self.owned.pop(tp.partition), now))
            self.events += bool(partitions)

    def run(self) -> None:
        while not self.halt.is_set():
            batch = self.c.consume(num_messages=200, timeout=0.1)
            for msg in batch:
                if msg.error():
                    self.errors.append(msg.error())
                    continue
                with self.lock:
                    self.consumed.append((msg.partition(), msg.offset()))
                    self.position[msg.partition()] = msg.offset() + 1
            if batch and self.commit_batches and not self.errors:
                self._commit(self.partitions())
        self.c.close()

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not close"
        with self.lock:  # what it still owned at close (a static member is not revoked)
            now = time.monotonic()
            self.intervals += [(p, since, now) for p, since in self.owned.items()]
            self.owned.clear()


def _split(members: list[Member]) -> bool:
    """Every partition owned by exactly one member, every member owning some."""
    sets = [m.partitions() for m in members]
    return all(sets) and sum(map(len, sets)) == PARTITIONS and \
        set().union(*sets) == set(range(PARTITIONS))


def _stop_and_wait_consumed(producing: Producing, members: list[Member]) -> set:
    """Stop ``producing`` and wait until ``members`` consumed every record it had
    acknowledged; return those."""
    acked = producing.stop()
    wait_until(lambda: {r for m in members for r in m.consumed} >= acked, timeout=90,
               what="every acknowledged record consumed")
    return acked


def _assert_consumed_once_by_one_owner_at_a_time(members: list[Member], acked: set) -> None:
    """No member saw an error, no record delivered twice, every acknowledged one
    delivered, and no partition owned by two members at overlapping times."""
    for m in members:
        assert not m.errors, (m.name, m.errors)
    consumed = [r for m in members for r in m.consumed]
    twice = sorted({r for r in consumed if consumed.count(r) > 1})
    assert not twice, f"{len(twice)} records consumed twice, first {twice[:10]}"
    assert set(consumed) >= acked, sorted(acked - set(consumed))[:10]
    for partition in range(PARTITIONS):
        held = sorted((start, end, m.name) for m in members
                      for p, start, end in m.intervals if p == partition)
        for (_, end, owner), (start, _, successor) in zip(held, held[1:]):
            assert start >= end, (
                f"partition {partition}: {successor} got it {end - start:.3f}s before "
                f"{owner} gave it up")


def test_cooperative_sticky_members_never_share_a_partition(kafka_address):
    """Three confluent-kafka consumers with partition.assignment.strategy
    cooperative-sticky join one by one while a producer writes, then one leaves: each
    moved partition is revoked (its consumption committed) before its next owner gets
    it, so no partition has two owners at once, no record is consumed twice and every
    acknowledged one is consumed."""
    topic = create_with_librdkafka(kafka_address, f"coop-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = "g-" + topic
    producing = Producing(kafka_address, topic)
    producing.start()
    members: list[Member] = []
    everyone: list[Member] = []
    try:
        for n in range(3):
            member = Member(f"coop-{n}", kafka_address, topic, group,
                            **{"partition.assignment.strategy": "cooperative-sticky"})
            members.append(member)
            everyone.append(member)
            member.start()
            wait_until(lambda: _split(members), timeout=90,
                       what=f"{n + 1} cooperative members splitting the partitions")
        members.pop().stop()
        wait_until(lambda: _split(members), timeout=90,
                   what="two cooperative members taking the third's partitions")
        acked = _stop_and_wait_consumed(producing, everyone)
    finally:
        producing.halt.set()
        for m in members:
            m.stop()
    _assert_consumed_once_by_one_owner_at_a_time(everyone, acked)


def test_a_static_member_restarting_within_its_session_disturbs_no_one(kafka_address):
    """Three confluent-kafka consumers with a group.instance.id each; one is closed
    (librdkafka sends no LeaveGroup for a static member) and started again with the
    same instance id: it gets the partitions it had, the other two see no rebalance
    (no callback), and every record is consumed once."""
    topic = create_with_librdkafka(kafka_address, f"static-{uuid.uuid4().hex[:8]}",
                                   PARTITIONS)
    group = "g-" + topic
    producing = Producing(kafka_address, topic)
    producing.start()
    static = {"session.timeout.ms": 30000}
    members: list[Member] = []
    everyone: list[Member] = []
    try:
        for n in range(3):
            member = Member(f"static-{n}", kafka_address, topic, group, commit_batches=True,
                            **{"group.instance.id": f"host-{n}", **static})
            members.append(member)
            everyone.append(member)
            member.start()
            wait_until(lambda: _split(members), timeout=90,
                       what=f"{n + 1} static members splitting the partitions")
        events = [m.events for m in members[:2]]
        had = members[2].partitions()
        members.pop().stop()
        restarted = Member("static-2-again", kafka_address, topic, group, commit_batches=True,
                           **{"group.instance.id": "host-2", **static})
        members.append(restarted)
        everyone.append(restarted)
        restarted.start()
        wait_until(lambda: restarted.partitions() == had, timeout=60,
                   what=f"the restarted static member getting {sorted(had)} back")
        acked = _stop_and_wait_consumed(producing, everyone)
        assert [m.events for m in members[:2]] == events  # no rebalance reached them
        assert _split(members)
    finally:
        producing.halt.set()
        for m in members:
            m.stop()
    _assert_consumed_once_by_one_owner_at_a_time(everyone, acked)


def test_a_second_member_with_the_same_instance_id_fences_the_first(kafka_address):
    """A confluent-kafka consumer started with the group.instance.id of a live one takes
    its place (and its partitions, without a rebalance); the first learns it was fenced
    at its next heartbeat: a fatal FENCED_INSTANCE_ID error."""
    topic = create_with_librdkafka(kafka_address, f"fence-{uuid.uuid4().hex[:8]}",
                                   PARTITIONS)
    group = "g-" + topic
    config = {"group.instance.id": "twin", "session.timeout.ms": 30000}
    first = Member("first", kafka_address, topic, group, **config)
    first.start()
    second = None
    try:
        wait_until(lambda: _split([first]), timeout=60, what="the first member's partitions")
        second = Member("second", kafka_address, topic, group, **config)  # joins now
        second.start()
        wait_until(lambda: _split([second]), timeout=60, what="the second member's partitions")
        wait_until(lambda: first.errors, timeout=30, what="the first member fenced")
        fatal = first.errors[0]
        assert fatal.code() == confluent_kafka.KafkaError._FATAL, fatal
        assert "Static consumer fenced by other consumer" in fatal.str(), fatal
        assert not second.errors, second.errors
    finally:
        if second is not None:
            second.stop()
        first.stop()


# --- Java's CooperativeStickyAssignor ---------------------------------------------------
def test_java_cooperative_sticky_members_never_share_a_partition(kafka_tools, kafka_address,
                                                                  tmp_path):
    """Three of Kafka's VerifiableConsumers (committing after every poll) with the
    CooperativeStickyAssignor join one by one while a producer writes, then one leaves:
    from their JSON events, no partition was owned by two members at overlapping times
    (incremental partitions_assigned/partitions_revoked), every acknowledged record was
    delivered, and none twice but those a refused commit left uncommitted."""
    from tests.server.test_kafka_listener_verifiable import PARTITIONS as SIX
    from tests.server.test_kafka_listener_verifiable import (
        VERIFIABLE_CONSUMER,
        owned,
        split_between,
    )
    from tests.support.kafkatools import JavaTool

    topic = create_with_librdkafka(kafka_address, f"jcoop-{uuid.uuid4().hex[:8]}", SIX)
    config = tmp_path / "consumer.properties"
    config.write_text("heartbeat.interval.ms=300\n")

    def consumer(name: str) -> JavaTool:
        return JavaTool(VERIFIABLE_CONSUMER, "--bootstrap-server", kafka_address,
                        "--topic", topic, "--group-id", "g-" + topic, "--verbose",
                        "--session-timeout", "10000", "--reset-policy", "earliest",
                        "--assignment-strategy",
                        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
                        "--command-config", str(config),
                        log_path=tmp_path / f"consumer-{name}.log")

    producing = Producing(kafka_address, topic, partitions=SIX)
    producing.start()
    members: list[JavaTool] = []
    try:
        for name in "abc":
            members.append(consumer(name))
            wait_until(lambda: split_between(*members), timeout=120,
                       what=f"{len(members)} Java members splitting the partitions: "
                            + "".join(m.describe() for m in members))
        assert members[2].stop(), members[2].describe()  # closes: revokes and leaves
        wait_until(lambda: split_between(*members[:2]), timeout=120,
                   what="two Java members taking the third's partitions: "
                        + "".join(m.describe() for m in members[:2]))
        acked = producing.stop()

        def consumed() -> list[tuple[int, int]]:
            return [(e["partition"], e["offset"]) for m in members
                    for e in m.events("record_data")]

        wait_until(lambda: set(consumed()) >= acked, timeout=120,
                   what="every acknowledged record consumed")
        for m in members:
            assert m.stop(), m.describe()
    finally:
        producing.halt.set()
        for m in members:
            m.stop()
    where = consumed()
    twice = sorted({r for r in where if where.count(r) > 1})
    # a commit refused during a rebalance (REBALANCE_IN_PROGRESS while the group waits
    # for its leader's assignment, as Kafka answers) leaves the records before it to be
    # delivered again where the partition goes next: the only duplicates allowed
    refused = [(o["partition"], o["offset"]) for m in members
               for e in m.events("offsets_committed") if not e["success"]
               for o in e["offsets"]]
    unexplained = [(p, o) for p, o in twice if not any(rp == p and ro > o for rp, ro in refused)]
    assert not unexplained, f"{len(unexplained)} records delivered twice: {unexplained[:10]}"
    assert owned(members[2]) == set()
    for partition in range(SIX):
        held = []
        for m, name in zip(members, "abc"):
            since = None
            for e in m.events():
                mine = {p["partition"] for p in e.get("partitions", ())}
                if e["name"] == "partitions_assigned" and partition in mine:
                    since = e["timestamp"]
                elif e["name"] == "partitions_revoked" and partition in mine:
                    held.append((since, e["timestamp"], name))
                    since = None
            if since is not None:
                held.append((since, float("inf"), name))
        held.sort()
        for (_, end, owner), (start, _, successor) in zip(held, held[1:]):
            assert start >= end, (f"partition {partition}: {successor} got it at {start}, "
                                  f"{owner} gave it up at {end}")
