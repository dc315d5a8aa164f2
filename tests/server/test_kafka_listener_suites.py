"""Cases found by running librdkafka's and franz-go's own test suites against the Kafka
listener (scripts/kafka-suites.sh; docs/kafka-protocol.md, "librdkafka's and franz-go's
test suites"), each reproduced here with a client of the test extras or raw frames."""

from __future__ import annotations

import struct
import uuid

import pytest

from sparklog.protocol.kafka import RequestHeader
from tests.support.kafkaconn import KafkaConn, start_with_kafka_listener

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-suites"), num_partitions=2)
    yield b
    b.stop()


@pytest.fixture(scope="module")
def kafka_address(broker) -> str:
    return broker.broker.listener_addresses["KAFKA"]


def _topic(kafka_address) -> str:
    """A new topic (2 partitions), created through the Kafka listener."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"s-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_address})
    for future in admin.create_topics([NewTopic(name, 2, 1)]).values():
        future.result(30)
    return name


def test_librdkafka_metadata_of_every_topic(kafka_address):
    """librdkafka (0017_compression, 0029_assign_offset... wait for their topics with it;
    confluent-kafka's ``list_topics()``) asks Metadata v9+ of every topic with a null
    array written in 4 bytes where 1 is due, then its last 3 fields: Kafka's broker
    reads the fields and ignores what follows, and so must the listener (it closed the
    connection: "3 trailing bytes", the client's "Broker transport failure")."""
    name = _topic(kafka_address)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_address})
    metadata = producer.list_topics(timeout=30)
    assert name in metadata.topics
    assert len(metadata.topics[name].partitions) == 2


def test_metadata_request_with_librdkafkas_bytes(kafka_address):
    """The same request as raw bytes (librdkafka 2.x's Metadata v12 of every topic), so
    that the case stays covered when a client fixes its encoder: answered with every
    topic, as Kafka answers it."""
    name = _topic(kafka_address)
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
