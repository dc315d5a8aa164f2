"""Kafka listeners in tests: :func:`start_with_kafka_listener` (an embedded broker with a
sparklog listener and a Kafka listener named KAFKA); :func:`topic_name` (a fresh topic
name) and the topic creation of Kafka's clients through a Kafka listener
(:func:`create_with_kafka_python`, :func:`create_with_librdkafka`); a librdkafka
consumer's read of a topic (:func:`librdkafka_read`); kafka-python group members
splitting a topic's partitions (:func:`wait_until_split`); and
:class:`KafkaConn`, a raw Kafka client connection as a test writes it by hand (kio's
codecs): SASL (SaslHandshake v1, SaslAuthenticate v2), Metadata, InitProducerId and
Produce of one partition.

::

    from tests.support.kafkaconn import KafkaConn, create_with_librdkafka, topic_name

    topic = create_with_librdkafka(address, topic_name("g-"), partitions=3)
    with KafkaConn(address, "alice", "alice-secret") as conn:   # PLAIN
        conn.produce("events", batch_bytes)   # the partition's answer
"""

from __future__ import annotations

import datetime
import socket
import struct
import uuid

from sparklog.protocol.kafka import RequestHeader, decode_response, encode_request
from sparklog.server import EmbeddedBroker

from .waiting import wait_until
from .wire import read_exactly


def start_with_kafka_listener(root, **props) -> EmbeddedBroker:
    """A started embedded broker on ``root`` (a local directory, or a storage URI such as
    an ``hdfs://`` one) with a sparklog listener (PLAINTEXT) and a Kafka listener (KAFKA,
    its address in ``broker.broker.listener_addresses["KAFKA"]``); ``props`` add broker
    properties (Kafka's names, ``_`` for ``.``)."""
    return EmbeddedBroker(root if isinstance(root, str) else root.as_uri(), {
        "listeners": "PLAINTEXT://127.0.0.1:0,KAFKA://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KAFKA:PLAINTEXT",
        "kafka.listener.names": "KAFKA",
        **{k.replace("_", "."): str(v) for k, v in props.items()}}).start()


def topic_name(prefix: str = "t-") -> str:
    """A topic name no other test uses: ``prefix`` and 8 random hex digits."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def create_with_kafka_python(address: str, topic: str, partitions: int) -> str:
    """Create ``topic`` (``partitions``, replication factor 1) with kafka-python's
    KafkaAdminClient through the Kafka listener at ``address`` and wait until its
    Metadata lists the topic; ``topic``."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=address)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
        wait_until(lambda: topic in admin.list_topics(), what=f"{topic} in the metadata")
    finally:
        admin.close()
    return topic


def create_with_librdkafka(address: str, topic: str, partitions: int) -> str:
    """Create ``topic`` (``partitions``, replication factor 1) with confluent-kafka's
    AdminClient through the Kafka listener at ``address``, waiting for its answer;
    ``topic``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": address})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(60)
    return topic


def librdkafka_read(address: str, topic: str, n: int, config: dict | None = None) -> list:
    """The first ``n`` messages (confluent-kafka's ``Message``, in the order polled) a
    librdkafka consumer of group ``g-<topic>`` reads from the earliest offsets of
    ``topic`` through the Kafka listener at ``address``, committing nothing; ``config``
    adds to the consumer's configuration (librdkafka's names). AssertionError when a
    message carries an error or ``n`` do not arrive."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": address, "group.id": "g-" + topic,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  **(config or {})})
    c.subscribe([topic])
    got: list = []
    try:
        def more() -> bool:
            msg = c.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
            return len(got) >= n
        wait_until(more, what=f"{n} records of {topic} read by librdkafka")
    finally:
        c.close()
    return got


def wait_until_split(members, partitions: int, timeout: float, what: str) -> None:
    """Poll each of the kafka-python consumers ``members`` (one group) until every one
    owns some of partitions 0..``partitions``-1, none shares one, and together they own
    them all; AssertionError naming ``what`` after ``timeout`` seconds."""
    def split() -> bool:
        owned = []
        for member in members:
            member.poll(timeout_ms=200)
            owned.append({tp.partition for tp in member.assignment()})
        return (all(owned) and sum(map(len, owned)) == len(set().union(*owned))
                and set().union(*owned) == set(range(partitions)))
    wait_until(split, timeout=timeout, what=what)


class KafkaConn:
    """A socket speaking Kafka's protocol to ``address``; ``user`` and ``password``
    authenticate it (SaslHandshake v1, SaslAuthenticate v2 with PLAIN) unless None."""

    def __init__(self, address: str, user: str | None = None, password: str = ""):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0
        if user is not None:
            answers = self.authenticate("PLAIN", [b"\0" + user.encode() + b"\0"
                                                  + password.encode()])
            assert answers[-1].error_code == 0, answers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def send(self, api_key: int, version: int, request) -> RequestHeader:
        self.correlation += 1
        header = RequestHeader(api_key, version, self.correlation, "probe")
        self.sock.sendall(encode_request(header, request))
        return header

    def receive(self, header: RequestHeader):
        size = struct.unpack(">i", read_exactly(self.sock, 4))[0]
        return decode_response(header, read_exactly(self.sock, size))

    def request(self, api_key: int, version: int, request):
        return self.receive(self.send(api_key, version, request))

    def authenticate(self, mechanism: str, tokens) -> list:
        """SaslHandshake then one SaslAuthenticate per token (``tokens`` may be a
        callable of the previous answer's bytes); the answers."""
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        answer = self.request(17, 1, SaslHandshakeRequest(mechanism=mechanism))
        assert answer.error_code == 0, answer
        answers, last = [], b""
        for token in tokens:
            token = token(last) if callable(token) else token
            answers.append(self.request(36, 2, SaslAuthenticateRequest(auth_bytes=token)))
            if answers[-1].error_code != 0:
                break
            last = answers[-1].auth_bytes
        return answers

    def metadata(self, topics: list[str] | None):
        from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic

        return self.request(3, 9, MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(name=t)
                                                     for t in topics),
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))

    def init_producer_id(self):
        from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
        from kio.static.primitive import i16, i32Timedelta

        return self.request(22, 4, InitProducerIdRequest(
            transactional_id=None, producer_id=-1, producer_epoch=i16(-1),
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60))))

    def produce(self, topic: str, records: bytes):
        """Produce v9 (acks=all) of ``records`` to partition 0; its partition answer."""
        from kio.schema.produce.v9.request import (
            PartitionProduceData,
            ProduceRequest,
            TopicProduceData,
        )
        from kio.static.primitive import i16, i32, i32Timedelta

        answer = self.request(0, 9, ProduceRequest(
            transactional_id=None, acks=i16(-1),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=(TopicProduceData(name=topic, partition_data=(
                PartitionProduceData(index=i32(0), records=records),)),)))
        return answer.responses[0].partition_responses[0]
