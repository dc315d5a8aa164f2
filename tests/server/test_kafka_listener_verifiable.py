"""The broker's Kafka listener (docs/kafka-protocol.md) with Kafka's VerifiableProducer
and VerifiableConsumer (``org.apache.kafka.tools``, what ``kafka-verifiable-producer.sh``
and ``kafka-verifiable-consumer.sh`` run; Kafka's system tests are built on them): the
idempotent Java producer at acks=all reports every acknowledged record, three Java
consumers of one group report their assignments, records and commits as JSON events, and
the test checks those reports against each other: no acknowledged record lost, none
delivered twice, every partition owned by one member at a time."""

from __future__ import annotations

import pytest

from tests.support.kafkaconn import start_with_kafka_listener, topic_name
from tests.support.kafkaserver import kafka_tool
from tests.support.kafkatools import JavaTool
from tests.support.waiting import wait_until

TOPICS = "org.apache.kafka.tools.TopicCommand"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-listener-verifiable"))
    yield b
    b.stop()


def owned(consumer: JavaTool) -> set[int]:
    """The partitions ``consumer`` owns now, by its partitions_assigned and
    partitions_revoked events (the eager protocol revokes all before reassigning)."""
    mine: set[int] = set()
    for e in consumer.events():
        if e["name"] == "partitions_assigned":
            mine |= {p["partition"] for p in e["partitions"]}
        elif e["name"] == "partitions_revoked":
            mine -= {p["partition"] for p in e["partitions"]}
    return mine


def consumed_since(consumer: JavaTool, name: str) -> bool:
    """True when ``consumer`` reported records after its last event named ``name``."""
    events = consumer.events()
    last = max((i for i, e in enumerate(events) if e["name"] == name), default=-1)
    return any(e["name"] == "records_consumed" for e in events[last + 1:])


def split_between(*members: JavaTool) -> bool:
    """Every partition owned by exactly one of ``members``, each owning some."""
    sets = [owned(m) for m in members]
    return (all(sets) and sum(len(s) for s in sets) == PARTITIONS
            and set().union(*sets) == set(range(PARTITIONS)))


def test_verifiable_producer_and_three_verifiable_consumers_through_rebalances(
        kafka_tools, broker, tmp_path):
    """VerifiableProducer (idempotent, acks=all, keyed) writes 100 records a second
    while VerifiableConsumers of one group join one after another (the partitions split
    1, 2, then 3 ways, each member consuming) and one leaves (the other two take its
    partitions and consume), committing after every poll; then the producer stops (its
    report: every record sent was acknowledged). From their JSON events: every
    acknowledged record was consumed exactly once with its value, nothing else was
    consumed, every commit succeeded and the last ones are the log end."""
    address = broker.broker.listener_addresses["KAFKA"]
    topic = topic_name("v-")
    kafka_tool(TOPICS, "--bootstrap-server", address, "--create", "--topic", topic,
               "--partitions", str(PARTITIONS), "--replication-factor", "1")
    producer_config = tmp_path / "producer.properties"
    # the tool sets retries=0 unless told (idempotence needs retries)
    producer_config.write_text("enable.idempotence=true\nretries=2147483647\nlinger.ms=5\n")
    consumer_config = tmp_path / "consumer.properties"
    consumer_config.write_text("heartbeat.interval.ms=500\n")
    group = "g-" + topic

    def consumer(name: str) -> JavaTool:
        return JavaTool(VERIFIABLE_CONSUMER, "--bootstrap-server", address, "--topic", topic,
                        "--group-id", group, "--verbose", "--session-timeout", "10000",
                        "--reset-policy", "earliest", "--command-config", str(consumer_config),
                        log_path=tmp_path / f"consumer-{name}.log")

    tools: list[JavaTool] = []
    try:
        producer = JavaTool(VERIFIABLE_PRODUCER, "--bootstrap-server", address,
                            "--topic", topic, "--max-messages", "-1", "--throughput", "100",
                            "--acks", "-1", "--repeating-keys", "60",
                            "--command-config", str(producer_config),
                            log_path=tmp_path / "producer.log")
        tools.append(producer)
        a = consumer("a")
        tools.append(a)
        wait_until(lambda: owned(a) == set(range(PARTITIONS)), timeout=90,
                   what=f"the first member owning every partition: {a.describe()}")
        b = consumer("b")
        tools.append(b)
        wait_until(lambda: split_between(a, b), timeout=90,
                   what=f"two members splitting the partitions: {a.describe()}{b.describe()}")
        c = consumer("c")
        tools.append(c)
        wait_until(lambda: split_between(a, b, c), timeout=90,
                   what="three members splitting the partitions: "
                        f"{a.describe()}{b.describe()}{c.describe()}")
        wait_until(lambda: consumed_since(c, "partitions_assigned"), timeout=90,
                   what=f"the third member consuming: {c.describe()}")
        # its shutdown hook closes the consumer: it commits and leaves the group
        assert c.stop() and c.events("shutdown_complete"), c.describe()
        wait_until(lambda: split_between(a, b), timeout=90,
                   what=f"the two members left taking all partitions: {a.describe()}{b.describe()}")
        wait_until(lambda: consumed_since(a, "partitions_assigned")
                   and consumed_since(b, "partitions_assigned"), timeout=90,
                   what=f"both members consuming after the third left: {a.describe()}{b.describe()}")
        # its shutdown hook flushes, closes and reports
        assert producer.stop() and producer.events("tool_data"), producer.describe()
        acked = {(e["partition"], e["offset"]): e["value"]
                 for e in producer.events("producer_send_success")}
        assert not producer.events("producer_send_error"), producer.describe()
        summary = producer.events("tool_data")[-1]
        assert summary["sent"] == summary["acked"] == len(acked) > 0, summary
        assert {int(v) for v in acked.values()} == set(range(len(acked)))
        ends: dict[int, int] = {}
        for partition, offset in acked:
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        assert set(ends) == set(range(PARTITIONS))

        def committed() -> dict[int, int]:
            last: dict[int, int] = {}
            for member in (a, b, c):
                for e in member.events("offsets_committed"):
                    for o in e["offsets"]:
                        last[o["partition"]] = max(last.get(o["partition"], 0), o["offset"])
            return last

        wait_until(lambda: committed() == ends, timeout=90,
                   what=f"the group's commits reaching the log end {ends}: "
                        f"{committed()} {a.describe()}{b.describe()}")
        members = (a, b, c)
        for member in members:
            assert member.stop() and member.events("shutdown_complete"), member.describe()
            commits = member.events("offsets_committed")
            assert commits and all(e["success"] for e in commits), member.describe()
            # a member's record events add up to its records_consumed summaries
            assert len(member.events("record_data")) == sum(
                e["count"] for e in member.events("records_consumed"))
        consumed = [(e["partition"], e["offset"], e["value"])
                    for m in members for e in m.events("record_data")]
        where = [(p, o) for p, o, _ in consumed]
        assert len(where) == len(set(where)), "a record was delivered twice"
        assert {(p, o): v for p, o, v in consumed} == acked
        # each member was in the group through each change it lived through
        assert len(a.events("partitions_assigned")) >= 4  # alone, with b, with c, after c
        assert len(c.events("partitions_assigned")) >= 1
    finally:
        for tool in reversed(tools):
            tool.stop()
