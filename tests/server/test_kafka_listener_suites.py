"""Cases found by running librdkafka's and franz-go's own test suites against the Kafka
listener (scripts/kafka-suites.sh; docs/kafka-protocol.md, "librdkafka's and franz-go's
test suites"), each reproduced here with a client of the test extras or raw frames."""

from __future__ import annotations

import struct
import uuid

import pytest

from sparklog.protocol.kafka import RequestHeader
from tests.support.kafkaconn import (
    KafkaConn,
    create_with_librdkafka,
    start_with_kafka_listener,
    topic_name,
)

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-suites"), num_partitions=2)
    yield b
    b.stop()


def test_librdkafka_metadata_of_every_topic(kafka_address):
    """librdkafka (0017_compression, 0029_assign_offset... wait for their topics with it;
    confluent-kafka's ``list_topics()``) asks Metadata v9+ of every topic with a null
    array written in 4 bytes where 1 is due, then its last 3 fields: Kafka's broker
    reads the fields and ignores what follows, and so must the listener (it closed the
    connection: "3 trailing bytes", the client's "Broker transport failure")."""
    name = create_with_librdkafka(kafka_address, topic_name("s-"), 2)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_address})
    metadata = producer.list_topics(timeout=30)
    assert name in metadata.topics
    assert len(metadata.topics[name].partitions) == 2


def test_metadata_request_with_librdkafkas_bytes(kafka_address):
    """The same request as raw bytes (librdkafka 2.x's Metadata v12 of every topic), so
    that the case stays covered when a client fixes its encoder: answered with every
    topic, as Kafka answers it."""
    name = create_with_librdkafka(kafka_address, topic_name("s-"), 2)
    header = RequestHeader(3, 12, 7, "rdkafka")
    client_id = header.client_id.encode()
    body = (struct.pack(">hhih", 3, 12, 7, len(client_id)) + client_id + b"\x00"  # tags
            + b"\x00\x00\x00\x00"      # topics: null (0) and librdkafka's 3 extra bytes
            + b"\x01"                  # allow_auto_topic_creation
            + b"\x00"                  # include_topic_authorized_operations
            + b"\x00")                 # tagged fields
    with KafkaConn(kafka_address) as conn:
        conn.sock.sendall(struct.pack(">i", len(body)) + body)
        answer = conn.receive(header)
    assert name in {t.name for t in answer.topics}


def test_pipelined_offset_commits_apply_in_order(kafka_address):
    """librdkafka's 0030_offset_commit: a consumer's asynchronous commits go out on one
    connection without waiting for the answers; Kafka handles a connection's requests
    one after the other, so the last commit acknowledged is what OffsetFetch answers.
    The listener handled them concurrently, and an earlier commit could land last
    (committed() answered 43 after the commit of 50 was acknowledged)."""
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
    from kio.static.primitive import i32, i64

    name = create_with_librdkafka(kafka_address, topic_name("s-"), 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with KafkaConn(kafka_address) as conn:
        sent = [conn.send(8, 8, OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=i32(-1), member_id="",
            group_instance_id=None, topics=(OffsetCommitRequestTopic(name=name, partitions=(
                OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(n),
                                             committed_leader_epoch=i32(-1),
                                             committed_metadata=""),)),)))
            for n in range(1, 41)]
        answers = [conn.receive(header) for header in sent]
        assert all(a.topics[0].partitions[0].error_code == 0 for a in answers), answers
        fetched = conn.request(9, 7, OffsetFetchRequest(
            group_id=group, topics=(OffsetFetchRequestTopic(
                name=name, partition_indexes=(i32(0),)),), require_stable=False))
    assert fetched.topics[0].partitions[0].committed_offset == 40
