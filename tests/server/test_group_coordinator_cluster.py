"""One group coordinator per group for the whole cluster (Kafka's model), with real broker
processes on a real ZooKeeper: FindCoordinator names the same broker from every broker,
other brokers answer the group's requests NOT_COORDINATOR, consumers bootstrapping from
different brokers form one group, and when the coordinator's broker is killed the group
re-forms on another broker from its committed offsets."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")

from sparklog import Admin, Consumer, Producer  # noqa: E402
from sparklog.clients.types import TopicPartition  # noqa: E402
from sparklog.coordination.coordinators import COORDINATOR_SLOTS, coordinator_slot  # noqa: E402
from sparklog.errors import InvalidArgumentError, NotCoordinatorError  # noqa: E402
from sparklog.protocol import ApiKey, Connection  # noqa: E402
from tests.support.clusterproc import BrokerCluster  # noqa: E402
from tests.support.waiting import DEFAULT_WAIT, wait_until  # noqa: E402

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def cluster(zookeeper, storage_root, tmp_path):
    with BrokerCluster(storage_root, zookeeper.connect, 3, log_dir=tmp_path) as c:
        yield c


def _answer(conn, api_key: int, body: dict) -> dict:
    """The response body, its error fields included (not raised)."""
    conn.send(api_key, body)
    return conn.receive()


def _find(address: str, group: str, **fields) -> dict:
    with Connection(address) as conn:
        return _answer(conn, ApiKey.FIND_COORDINATOR, {"key": group, **fields})


def _coordinator(cluster, group: str, brokers=None, timeout: float = DEFAULT_WAIT) -> int:
    """The coordinator's id once every (listed) live broker names the same one, at its
    own address."""
    ids = brokers or list(cluster.brokers)

    def answers():
        return [_find(cluster.brokers[i].address, group) for i in ids]

    def agreed(found):
        if any(f["error_code"] for f in found):
            return False
        nodes = {f["node_id"] for f in found}
        if len(nodes) != 1:
            return False
        (node,) = nodes
        return node in ids and {f"{f['host']}:{f['port']}" for f in found} == \
            {cluster.brokers[node].address}

    return wait_until(answers, timeout, accept=agreed, what=f"every broker naming group {group!r}'s "
                      "coordinator at its address")[0]["node_id"]


def _settled_coordinator(cluster, group: str) -> int:
    """The coordinator once the slots settled on their preferred brokers (while the
    brokers start, the first one holds every slot and hands them over as the others
    register)."""
    preferred = sorted(cluster.brokers)[coordinator_slot(group) % len(cluster.brokers)]
    return wait_until(lambda: _coordinator(cluster, group), accept=lambda c: c == preferred,
                      what=f"group {group!r} coordinated by its slot's preferred broker")


def _groups_of_each_preferred_broker() -> list[str]:
    """Three group ids whose slots are preferred by brokers 1, 2 and 3 (slot % 3)."""
    out: dict[int, str] = {}
    n = 0
    while len(out) < 3:
        group = f"spread{n}"
        out.setdefault(coordinator_slot(group) % 3, group)
        n += 1
    return [out[r] for r in range(3)]


class Member:
    """A subscribed consumer polled on its own thread (a member blocks in JoinGroup until
    the rebalance completes, as Kafka's does), recording every record it returns."""

    def __init__(self, topic: str, **configs):
        self.consumer = Consumer(topic, **configs)
        self.records: list = []
        self.assigned: frozenset = frozenset(self.consumer.assignment())
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                got = self.consumer.poll(timeout_ms=100)
                with self._lock:
                    for records in got.values():
                        self.records += [(r.partition, r.offset, r.value) for r in records]
                    self.assigned = frozenset(self.consumer.assignment())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def values(self) -> list:
        with self._lock:
            return list(self.records)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.consumer.close(autocommit=False)


def _settled(members, partitions: int) -> bool:
    mine = [m.assigned for m in members]
    every = frozenset().union(*mine)
    return all(mine) and len(every) == partitions and \
        sum(len(a) for a in mine) == partitions


def test_find_coordinator_names_the_same_broker_from_every_broker(cluster):
    groups = _groups_of_each_preferred_broker()
    # the slots spread over the brokers: each slot's preferred broker takes it over
    # (auto.leader.rebalance.enable), whichever broker claimed it first
    coordinators = wait_until(lambda: [_coordinator(cluster, g) for g in groups],
                              accept=lambda c: c == [1, 2, 3],
                              what="each group coordinated by its slot's preferred broker")
    group = groups[0]
    coordinator = coordinators[0]
    others = [i for i in cluster.brokers if i != coordinator]
    requests = {
        ApiKey.JOIN_GROUP: {"group_id": group, "topics": ["t"]},
        ApiKey.HEARTBEAT: {"group_id": group, "generation_id": 1, "member_id": "m"},
        ApiKey.LEAVE_GROUP: {"group_id": group, "member_id": "m"},
        ApiKey.OFFSET_COMMIT: {"group_id": group, "topics": [
            {"name": "t", "partitions": [{"partition": 0, "offset": 1}]}]},
        ApiKey.OFFSET_FETCH: {"group_id": group, "topics": None},
    }
    for i in others:  # the others refuse the group's requests: NOT_COORDINATOR (16)
        with Connection(cluster.brokers[i].address) as conn:
            for key, body in requests.items():
                resp = _answer(conn, key, body)
                assert resp["error_code"] == NotCoordinatorError.code == 16, (key, resp)
                assert f"group {group!r}" in resp["error_message"]
            described = conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
            assert described["groups"][0]["error_code"] == NotCoordinatorError.code
    with Connection(cluster.brokers[coordinator].address) as conn:
        resp = conn.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None})
        assert resp["error_code"] == 0
        bad = _answer(conn, ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 1})
        assert bad["error_code"] == InvalidArgumentError.code
        assert "key_type 1" in bad["error_message"]
    assert 0 <= coordinator_slot(group) < COORDINATOR_SLOTS


def test_two_consumers_bootstrapping_from_different_brokers_share_the_partitions(cluster):
    """The issue's repro: before, each consumer got all 4 partitions from the broker it
    bootstrapped from and every record was processed twice."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 4)
    common = dict(group_id="shared", auto_offset_reset="earliest", enable_auto_commit=False,
                  heartbeat_interval_ms=200, session_timeout_ms=6000,
                  max_poll_interval_ms=20000)
    members = [Member("t", bootstrap_servers=cluster.brokers[1].address, **common),
               Member("t", bootstrap_servers=cluster.brokers[3].address, **common)]
    try:
        wait_until(lambda: _settled(members, 4), what="the two members sharing 4 partitions")
        a, b = (m.assigned for m in members)
        assert len(a) == len(b) == 2 and not a & b
        for i in cluster.brokers:  # the admin finds the group from any broker
            with Admin(cluster.brokers[i].address) as admin:
                assert ("shared", "Stable") in admin.list_consumer_groups()
                (described,) = admin.describe_consumer_groups(["shared"])
                assert described.state == "Stable" and len(described.members) == 2
        with Producer(cluster.bootstrap, acks="all") as producer:
            for f in [producer.send("t", b"r%d" % i, partition=i % 4) for i in range(4000)]:
                f.get(60)
        wait_until(lambda: sum(len(m.values()) for m in members) >= 4000,
                   what="4000 records consumed by the group")
        got = [m.values() for m in members]
        for m, records in zip(members, got):
            assert {TopicPartition("t", p) for p, _, _ in records} <= m.assigned
        every = sorted(v for records in got for _, _, v in records)
        assert every == sorted(b"r%d" % i for i in range(4000))  # each exactly once
        assert all(m.error is None for m in members), [m.error for m in members]
    finally:
        for m in members:
            m.close()


def test_group_reforms_on_another_broker_when_its_coordinator_is_killed(cluster):
    group = "moving"
    coordinator = _settled_coordinator(cluster, group)
    survivors = [i for i in cluster.brokers if i != coordinator]
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("t", 4)
    common = dict(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                  heartbeat_interval_ms=200, session_timeout_ms=6000,
                  max_poll_interval_ms=20000)
    consumers = [Consumer("t", bootstrap_servers=cluster.brokers[i].address, **common)
                 for i in survivors]
    records: dict[int, list] = {0: [], 1: []}
    stop = threading.Event()
    paused = [threading.Event(), threading.Event()]   # set by the test: stop polling
    idle = [threading.Event(), threading.Event()]     # set by the thread: not polling
    errors: list = []

    def run(i: int) -> None:
        try:
            while not stop.is_set():
                if paused[i].is_set():
                    idle[i].set()
                    time.sleep(0.01)
                    continue
                idle[i].clear()
                for rs in consumers[i].poll(timeout_ms=100).values():
                    records[i].extend((r.partition, r.offset, r.value) for r in rs)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in (0, 1)]
    for t in threads:
        t.start()
    producer = Producer(cluster.bootstrap, acks="all", enable_idempotence=True)
    try:
        wait_until(lambda: all(len(c.assignment()) == 2 for c in consumers) and
                   not consumers[0].assignment() & consumers[1].assignment(),
                   what="the two members sharing 4 partitions")
        for f in [producer.send("t", b"a%d" % i, partition=i % 4) for i in range(400)]:
            f.get(60)
        wait_until(lambda: len(records[0]) + len(records[1]) >= 400,
                   what="the first 400 records consumed")
        for i in (0, 1):  # commit what was consumed (the consumer is not thread-safe)
            paused[i].set()
            idle[i].wait(60)
            consumers[i].commit()
            paused[i].clear()
        with Admin(cluster.brokers[survivors[0]].address) as admin:
            committed = admin.list_consumer_group_offsets(group)
        assert sum(om.offset for om in committed.values()) == 400
        # an uncommitted window: consumed, not committed, when the coordinator dies
        for f in [producer.send("t", b"b%d" % i, partition=i % 4) for i in range(200)]:
            f.get(60)
        wait_until(lambda: len(records[0]) + len(records[1]) >= 600,
                   what="the next 200 records consumed")
        cluster.brokers[coordinator].kill()  # SIGKILL: its ZooKeeper session expires
        for f in [producer.send("t", b"c%d" % i, partition=i % 4) for i in range(400)]:
            f.get(120)
        moved = _coordinator(cluster, group, survivors)
        assert moved in survivors
        wanted = {b"a%d" % i for i in range(400)} | {b"b%d" % i for i in range(200)} | \
            {b"c%d" % i for i in range(400)}
        wait_until(lambda: {v for i in (0, 1) for _, _, v in records[i]} >= wanted,
                   what="every record consumed after the coordinator moved")
        with Admin(cluster.brokers[moved].address) as admin:
            wait_until(lambda: admin.describe_consumer_groups([group])[0],
                       accept=lambda d: d.state == "Stable" and len(d.members) == 2,
                       what="the group stable with its two members on the new coordinator")
        assert not errors, errors
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        producer.close()
        for c in consumers:
            c.close(autocommit=False)
    seen: dict = {}
    for i in (0, 1):
        for p, offset, value in records[i]:
            seen.setdefault((p, offset), []).append(value)
    assert {v for vs in seen.values() for v in vs} == wanted  # nothing lost
    for (p, offset), values in seen.items():  # read twice only above the committed offset
        assert len(set(values)) == 1
        if len(values) > 1:
            assert offset >= committed[TopicPartition("t", p)].offset, (p, offset, values)


def test_a_coordinator_stopping_gracefully_hands_its_groups_over_at_once(
        zookeeper, storage_root, tmp_path):
    # a session timeout far longer than the wait below: only the stopping broker's own
    # release of its slots can move the group in time
    with BrokerCluster(storage_root, zookeeper.connect, 3, log_dir=tmp_path,
                       session_ms=60000) as cluster:
        group = "handover"
        coordinator = _settled_coordinator(cluster, group)
        survivors = [i for i in cluster.brokers if i != coordinator]
        cluster.brokers[coordinator].stop(timeout=60)  # SIGTERM
        moved = _coordinator(cluster, group, survivors, timeout=30)
        assert moved in survivors


def test_two_kafka_consumers_through_different_brokers_share_the_partitions(
        zookeeper, storage_root, tmp_path):
    """Kafka's own consumers (kafka-python) on each broker's Kafka listener: FindCoordinator
    through broker 1 and through broker 3 names one coordinator, so the two form one
    group and every record is consumed once."""
    pytest.importorskip("kafka", reason="kafka-python is not installed (the peers extra)")
    from kafka import KafkaConsumer

    kafka_listener = ["--listen", "PLAINTEXT://127.0.0.1:0,KAFKA://127.0.0.1:0",
                      "--override", "listener.security.protocol.map="
                      "PLAINTEXT:PLAINTEXT,KAFKA:PLAINTEXT",
                      "--override", "kafka.listener.names=KAFKA"]
    with BrokerCluster(storage_root, zookeeper.connect, 3, log_dir=tmp_path,
                       extra_args=kafka_listener) as cluster:
        registered = cluster.view.view.brokers()
        kafka_address = {}
        for i in (1, 3):
            (host, port), = [(h, p) for name, h, p in registered[i].endpoints
                             if name == "KAFKA"]
            kafka_address[i] = f"{host}:{port}"
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("t", 4)
        consumers = [KafkaConsumer("t", bootstrap_servers=kafka_address[i], group_id="kg",
                                   auto_offset_reset="earliest", enable_auto_commit=False)
                     for i in (1, 3)]
        got: list = [[], []]
        try:
            def poll_both():
                for i, c in enumerate(consumers):
                    for records in c.poll(timeout_ms=100).values():
                        got[i] += [r.value for r in records]
                mine = [{tp.partition for tp in c.assignment()} for c in consumers]
                return all(mine) and not mine[0] & mine[1] and mine[0] | mine[1] == {0, 1, 2, 3}

            wait_until(poll_both, what="the two Kafka consumers sharing 4 partitions")
            with Producer(cluster.bootstrap, acks="all") as producer:
                for f in [producer.send("t", b"k%d" % i, partition=i % 4) for i in range(400)]:
                    f.get(60)

            def all_consumed():
                poll_both()
                return len(got[0]) + len(got[1]) >= 400

            wait_until(all_consumed, what="400 records consumed by the Kafka group")
            assert got[0] and got[1]
            assert sorted(got[0] + got[1]) == sorted(b"k%d" % i for i in range(400))
        finally:
            for c in consumers:
                c.close()
