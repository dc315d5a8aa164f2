"""The broker's Kafka listener (docs/kafka-protocol.md) with kafka-python's and
confluent-kafka's (librdkafka's) consumers, unchanged: a 3-member group through
rebalances (members join one after another, one leaves; each partition owned by exactly
one member; committed offsets resume in a new member), and where a consumer starts
(earliest, latest, a timestamp through offsets_for_times)."""

from __future__ import annotations

import pytest

from tests.support.kafkaconn import create_with_librdkafka, start_with_kafka_listener, topic_name
from tests.support.waiting import wait_until

kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (the peers extra)")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

PARTITIONS = 6
CLIENTS = ["kafka-python", "confluent-kafka"]
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-listener-groups"))
    yield b
    b.stop()


def _produce(address: str, topic: str, first: int, n: int, partitions: int = PARTITIONS,
             timestamps: bool = False) -> dict[tuple[int, int], bytes]:
    """Records ``first``..``first+n-1`` (value ``r<i>``, partition ``i % partitions``,
    timestamp ``BASE_TS + 1000 i`` when ``timestamps``) at acks=all, idempotent; the
    acknowledged (partition, offset) of each value."""
    p = confluent_kafka.Producer({"bootstrap.servers": address, "enable.idempotence": True,
                                  "linger.ms": 5})
    acked: dict[tuple[int, int], bytes] = {}
    errors = []

    def on_delivery(err, msg):
        if err:
            errors.append(err)
        else:
            acked[(msg.partition(), msg.offset())] = msg.value()

    for i in range(first, first + n):
        p.produce(topic, value=b"r%d" % i, key=b"k%d" % i, partition=i % partitions,
                  on_delivery=on_delivery, **({"timestamp": BASE_TS + 1000 * i}
                                              if timestamps else {}))
    assert p.flush(60) == 0 and not errors, errors
    assert len(acked) == n
    return acked


class KafkaPythonMember:
    """A kafka-python group member committing synchronously after each poll."""

    def __init__(self, address: str, topic: str, group: str):
        self.topic = topic
        self.c = kafka.KafkaConsumer(
            topic, bootstrap_servers=address, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, heartbeat_interval_ms=500, session_timeout_ms=10000)

    def poll(self) -> list[tuple[int, int, bytes]]:
        got = [(r.partition, r.offset, r.value)
               for recs in self.c.poll(timeout_ms=100).values() for r in recs]
        try:
            self.c.commit()
        except (kafka.errors.CommitFailedError, kafka.errors.RebalanceInProgressError):
            pass  # the group is rebalancing: the records may come again (at least once)
        return got

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def committed(self) -> dict[int, int | None]:
        return {p: self.c.committed(kafka.TopicPartition(self.topic, p))
                for p in range(PARTITIONS)}

    def close(self) -> None:
        self.c.close()  # commits nothing more (no auto-commit) and leaves the group


class LibrdkafkaMember:
    """A confluent-kafka group member committing synchronously after each poll."""

    #: a commit's errors that only mean "not now": nothing consumed since the last one,
    #: or a rebalance under way (the records may come again: at least once)
    RETRIABLE = {"_NO_OFFSET", "REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION",
                 "UNKNOWN_MEMBER_ID", "_STATE", "_ASSIGNMENT_LOST"}

    def __init__(self, address: str, topic: str, group: str):
        self.topic = topic
        self.c = confluent_kafka.Consumer({
            "bootstrap.servers": address, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "heartbeat.interval.ms": 500,
            "session.timeout.ms": 10000})
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int, bytes]]:
        got = []
        for msg in self.c.consume(num_messages=500, timeout=0.1):
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
        try:
            self.c.commit(asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            assert exc.args[0].name() in self.RETRIABLE, exc
        return got

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def committed(self) -> dict[int, int | None]:
        tps = self.c.committed([confluent_kafka.TopicPartition(self.topic, p)
                                for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: None if tp.offset < 0 else tp.offset for tp in tps}

    def close(self) -> None:
        self.c.close()


MEMBERS = {"kafka-python": KafkaPythonMember, "confluent-kafka": LibrdkafkaMember}


@pytest.mark.parametrize("client", CLIENTS)
def test_three_member_group_through_joins_and_a_leave_then_resume(kafka_address, client):
    """Members join one at a time (the partitions split 1, 2, 3 ways, each partition
    owned by exactly one member), the third leaves (the other two take its partitions);
    what was produced before and after is consumed, none lost; the group's commits are
    the log end; a new member of the group, after everyone left, starts at the commits:
    it gets only what was produced since."""
    topic = create_with_librdkafka(kafka_address, topic_name("g-"), PARTITIONS)
    group = "g-" + topic
    acked = _produce(kafka_address, topic, 0, 600)
    member = MEMBERS[client]
    members: list = []
    consumed: list[tuple[int, int, bytes]] = []

    def pump() -> None:
        for m in members:
            consumed.extend(m.poll())

    def split() -> bool:
        pump()
        sets = [m.assignment() for m in members]
        return (all(sets) and sum(len(s) for s in sets) == PARTITIONS
                and set().union(*sets) == set(range(PARTITIONS)))

    try:
        for n in range(1, 4):
            members.append(member(kafka_address, topic, group))
            wait_until(split, timeout=90, what=f"{n} {client} members splitting the partitions")
        members.pop().close()
        wait_until(split, timeout=90, what=f"two {client} members taking the third's partitions")
        acked |= _produce(kafka_address, topic, 600, 600)

        def have_all() -> bool:
            pump()
            return {(p, o) for p, o, _ in consumed} >= set(acked)

        wait_until(have_all, timeout=90, what=f"every record by the {client} group")
        assert split(), [m.assignment() for m in members]  # still one owner per partition
        ends: dict[int, int] = {}
        for p, o in acked:
            ends[p] = max(ends.get(p, 0), o + 1)
        wait_until(lambda: pump() or members[0].committed() == ends, timeout=60,
                   what=f"the {client} group's commits at the log end {ends}")
    finally:
        for m in members:
            m.close()
    assert {(p, o): v for p, o, v in consumed} == acked  # none lost, nothing else
    later = _produce(kafka_address, topic, 1200, 60)
    fresh = member(kafka_address, topic, group)
    got: list[tuple[int, int, bytes]] = []
    try:
        def resumed() -> bool:
            got.extend(fresh.poll())
            return len(got) >= len(later)
        wait_until(resumed, timeout=90, what=f"a new {client} member resuming the group")
    finally:
        fresh.close()
    assert {(p, o): v for p, o, v in got} == later and len(got) == len(later)
    assert all(o >= ends[p] for p, o, _ in got)


def _kafka_python_positions(address: str, topic: str) -> dict[str, list[int]]:
    """Offsets read by kafka-python consumers (no group) starting at earliest, at
    latest (then 5 more records are produced) and at a timestamp."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    out: dict[str, list[int]] = {}
    for start in ("earliest", "latest", "timestamp"):
        c = KafkaConsumer(bootstrap_servers=address, auto_offset_reset="earliest"
                          if start == "earliest" else "latest", enable_auto_commit=False)
        try:
            c.assign([tp])
            if start == "timestamp":
                found = c.offsets_for_times({tp: BASE_TS + 40_500})[tp]
                assert found.offset == 41 and found.timestamp == BASE_TS + 41_000, found
                c.seek(tp, found.offset)
            first = c.position(tp)  # the start position is resolved (ListOffsets) here
            if start == "latest":
                assert first == 100
                _produce(address, topic, 100, 5, partitions=1, timestamps=True)
            got: list[int] = []

            def more(c=c, got=got) -> bool:
                got.extend(r.offset for recs in c.poll(timeout_ms=200).values() for r in recs)
                high = c.highwater(tp)  # known after a fetch
                return bool(got) and high is not None and got[-1] == high - 1
            wait_until(more, timeout=60, what=f"kafka-python reading from {start}")
            out[start] = got
        finally:
            c.close()
    return out


def _librdkafka_positions(address: str, topic: str) -> dict[str, list[int]]:
    """As :func:`_kafka_python_positions`, with confluent-kafka's consumer (librdkafka's
    logical offsets OFFSET_BEGINNING and OFFSET_END, offsets_for_times)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    out: dict[str, list[int]] = {}
    for start in ("earliest", "latest", "timestamp"):
        c = Consumer({"bootstrap.servers": address, "group.id": "unused-" + topic,
                      "enable.auto.commit": False})
        try:
            if start == "timestamp":
                found = c.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 40_500)],
                                            timeout=30)[0]
                assert found.error is None and found.offset == 41, found
                offset = found.offset
            else:
                offset = OFFSET_BEGINNING if start == "earliest" else OFFSET_END
            c.assign([TopicPartition(topic, 0, offset)])
            got: list[int] = []
            produced = [105]  # the next record's number

            def more(c=c, got=got, start=start, produced=produced) -> bool:
                if start == "latest" and not got:
                    # librdkafka resolves OFFSET_END in the background and shows no
                    # position before a record: produce one at a time until one arrives
                    _produce(address, topic, produced[0], 1, partitions=1, timestamps=True)
                    produced[0] += 1
                for msg in c.consume(num_messages=500, timeout=0.2):
                    assert msg.error() is None, msg.error()
                    got.append(msg.offset())
                high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
                return bool(got) and got[-1] == high - 1
            wait_until(more, timeout=60, what=f"librdkafka reading from {start}")
            out[start] = got
        finally:
            c.close()
    return out


def test_consumers_start_at_earliest_latest_and_a_timestamp(kafka_address):
    """kafka-python, then confluent-kafka, on one partition of 100 records a second
    apart: from earliest they read offset 0 on; from latest only what is produced after
    they started; from offsets_for_times of a time between records
    41 and 40's, record 41 on (the first at or after the time, Kafka's rule)."""
    topic = create_with_librdkafka(kafka_address, topic_name("g-"), 1)
    _produce(kafka_address, topic, 0, 100, partitions=1, timestamps=True)
    py = _kafka_python_positions(kafka_address, topic)
    assert py["earliest"] == list(range(100))
    assert py["latest"] == list(range(100, 105))
    assert py["timestamp"] == list(range(41, 105))
    rd = _librdkafka_positions(kafka_address, topic)
    assert rd["earliest"] == list(range(105))
    end = rd["latest"][-1] + 1
    assert rd["latest"][0] >= 105 and rd["latest"] == list(range(rd["latest"][0], end))
    assert rd["timestamp"] == list(range(41, end))
