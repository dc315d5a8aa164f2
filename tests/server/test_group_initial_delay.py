"""Kafka's ``group.initial.rebalance.delay.ms`` in the group coordinator
(docs/kafka-protocol.md, "Consumer groups"): the first rebalance of an empty group waits
the delay for more members, and again after each window in which one joined, so that
consumers started together share the first generation; with the delay at 0 the first
member is assigned alone and loses partitions to the next in a second rebalance."""

from __future__ import annotations

import threading
import time

import pytest

from sparklog.errors import InvalidConfigError
from sparklog.protocol import ApiKey, Connection
from sparklog.server.config import BrokerConfig
from sparklog.server.embedded import EmbeddedBroker
from tests.support.kafkaconn import create_with_librdkafka, start_with_kafka_listener, topic_name
from tests.support.waiting import wait_until
from tests.support.wire import create

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

DELAY_MS = 1500


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    """A broker (sparklog and Kafka listeners) with a 1.5 s initial rebalance delay."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("initial-delay"),
                                  group_initial_rebalance_delay_ms=DELAY_MS)
    yield b
    b.stop()


@pytest.fixture(scope="module")
def undelayed(tmp_path_factory):
    """A broker (sparklog and Kafka listeners) without an initial rebalance delay."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("no-initial-delay"),
                                  group_initial_rebalance_delay_ms=0)
    yield b
    b.stop()


def _described(broker, group: str) -> dict:
    """The broker's DescribeGroups item of ``group`` (its state and generation)."""
    with Connection(broker.address) as conn:
        return conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})["groups"][0]


class _Member:
    """A librdkafka consumer (eager assignor) recording its rebalance callbacks as
    ``("assign" | "revoke", [partitions])``."""

    def __init__(self, broker, group: str):
        self.events: list[tuple[str, list[int]]] = []
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": broker.broker.listener_addresses["KAFKA"],
            "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 10000})
        self.consumer.list_topics(timeout=30)  # connected: its JoinGroup will come quickly

    def subscribe(self, topic: str) -> None:
        def on_assign(_consumer, partitions):
            self.events.append(("assign", sorted(p.partition for p in partitions)))

        def on_revoke(_consumer, partitions):
            self.events.append(("revoke", sorted(p.partition for p in partitions)))

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

    def assigned(self) -> set[int]:
        self.consumer.poll(0.05)
        return {p.partition for p in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def _members(broker, group: str):
    return _Member(broker, group), _Member(broker, group)


def test_librdkafka_consumers_started_together_share_the_first_generation(delayed):
    topic = create_with_librdkafka(delayed.broker.listener_addresses["KAFKA"],
                                   topic_name(), 2)
    group = "g-" + topic
    first, second = _members(delayed, group)
    try:
        first.subscribe(topic)
        described = wait_until(lambda: _described(delayed, group),
                               accept=lambda d: d["state"] != "Dead",
                               what="the first consumer's JoinGroup reaching the broker")
        # the first member waits in the delay, not assigned yet
        assert described["state"] == "PreparingRebalance", described
        second.subscribe(topic)
        owned = wait_until(lambda: (first.assigned(), second.assigned()),
                           accept=lambda o: o[0] and o[1],
                           what="both consumers assigned")
        assert sorted(owned[0] | owned[1]) == [0, 1] and not owned[0] & owned[1]
        described = _described(delayed, group)
        assert (described["state"], described["generation_id"],
                len(described["members"])) == ("Stable", 1, 2)
        assert first.events == [("assign", sorted(owned[0]))]  # never revoked
        assert second.events == [("assign", sorted(owned[1]))]
    finally:
        first.close()
        second.close()


def test_without_the_delay_the_first_consumer_is_assigned_alone_then_revoked(undelayed):
    topic = create_with_librdkafka(undelayed.broker.listener_addresses["KAFKA"],
                                   topic_name(), 2)
    group = "g-" + topic
    first, second = _members(undelayed, group)
    try:
        first.subscribe(topic)
        wait_until(lambda: first.assigned() == {0, 1}, what="the first consumer alone")
        assert _described(undelayed, group)["generation_id"] == 1
        second.subscribe(topic)
        owned = wait_until(lambda: (first.assigned(), second.assigned()),
                           accept=lambda o: o[0] and o[1],
                           what="both consumers assigned")
        assert sorted(owned[0] | owned[1]) == [0, 1] and not owned[0] & owned[1]
        assert _described(undelayed, group)["generation_id"] == 2
        assert first.events == [("assign", [0, 1]), ("revoke", [0, 1]),
                                ("assign", sorted(owned[0]))]
    finally:
        first.close()
        second.close()


def test_a_broker_assigned_group_waits_the_delay_too_and_a_new_member_extends_it(delayed):
    """sparklog's own consumers' groups (the broker assigns) wait as Kafka's do: the
    second member joins during the first window, so the first generation comes one more
    window later, with both."""
    with Connection(delayed.address) as conn:
        assert create(conn, "own-delay", 2)["error_code"] == 0
    answers: dict[str, dict] = {}
    took: dict[str, float] = {}

    def join(name: str) -> None:
        started = time.monotonic()
        with Connection(delayed.address, client_id=name) as c:
            answers[name] = c.request(ApiKey.JOIN_GROUP, {
                "group_id": "own", "topics": ["own-delay"], "session_timeout_ms": 10000,
                "rebalance_timeout_ms": 30000})
        took[name] = time.monotonic() - started

    threads = [threading.Thread(target=join, args=(name,)) for name in ("a", "b")]
    threads[0].start()
    described = wait_until(lambda: _described(delayed, "own"),
                           accept=lambda d: d["state"] != "Dead",
                           what="a's JoinGroup reaching the broker")
    assert described["state"] == "PreparingRebalance", described  # a waits in the delay
    threads[1].start()
    for t in threads:
        t.join(60)
    assert answers["a"]["generation_id"] == answers["b"]["generation_id"] == 1
    assert sorted(answers["a"]["members"]) == sorted([answers["a"]["member_id"],
                                                      answers["b"]["member_id"]])
    assert [answers[n]["assignment"][0]["partitions"] for n in ("a", "b")] in ([[0], [1]],
                                                                                [[1], [0]])
    # two windows: the one a's join opened, and the one b's join during it added
    assert took["a"] >= 2 * DELAY_MS / 1000, took


def test_the_default_is_kafkas_an_embedded_broker_sets_0_and_a_negative_one_is_refused(
        storage_root):
    assert BrokerConfig.from_props({}).group_initial_rebalance_delay_ms == 3000
    assert EmbeddedBroker(storage_root).config.group_initial_rebalance_delay_ms == 0
    assert EmbeddedBroker(storage_root, {"group.initial.rebalance.delay.ms": "250"}) \
        .config.group_initial_rebalance_delay_ms == 250
    with pytest.raises(InvalidConfigError, match="group.initial.rebalance.delay.ms"):
        BrokerConfig.from_props({"group.initial.rebalance.delay.ms": "-1"})
