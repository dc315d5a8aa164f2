"""The broker's Kafka listener (docs/kafka-protocol.md) with Kafka's own clients, unchanged:
kafka-python (admin, producer, consumer group), librdkafka (confluent-kafka's idempotent
producer with every codec, its consumer group; kcat), and sparklog's clients reading
what they wrote (and the other way round). Hostile bytes get Kafka's errors."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess

import pytest

from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.format.kafka_batch import KafkaRecord, encode_batch
from sparklog.protocol.kafka import RequestHeader, encode_request
from tests.support.kafkaconn import (
    KafkaConn,
    create_with_kafka_python,
    librdkafka_read,
    start_with_kafka_listener,
    topic_name,
    wait_until_split,
)
from tests.support.waiting import wait_until

kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (the peers extra)")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-listener"), num_partitions=3)
    yield b
    b.stop()


def _sparklog_records(broker, topic, n):
    """(partition, offset, key, value, headers) of the first ``n`` records, read by
    sparklog's own consumer through the broker's sparklog listener."""
    c = Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest")
    out = []
    try:
        def more():
            for recs in c.poll(timeout_ms=500).values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers)) for r in recs)
            return len(out) >= n
        wait_until(more, timeout=60, what=f"{n} records of {topic}")
    finally:
        c.close()
    return sorted(out)


def test_kafka_python_admin_produce_group_consume_commit(broker, kafka_address):
    """kafka-python end to end: CreateTopics, gzip batches with keys, null keys and
    headers at acks=all, a consumer group reading all of it, committed offsets."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = create_with_kafka_python(kafka_address, topic_name(), partitions=3)
    p = KafkaProducer(bootstrap_servers=kafka_address, acks="all", compression_type="gzip")
    sent = {}
    for i in range(200):
        md = p.send(topic, key=None if i % 10 == 0 else b"k%d" % i, value=b"v%d" % i,
                    headers=[("n", str(i).encode())]).get(timeout=30)
        sent[(md.partition, md.offset)] = i
    p.close()
    assert len(sent) == 200
    c = KafkaConsumer(topic, bootstrap_servers=kafka_address, group_id="g-" + topic,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    got = {}
    try:
        def more():
            for recs in c.poll(timeout_ms=500).values():
                for r in recs:
                    got[(r.partition, r.offset)] = (r.key, r.value, r.headers)
            return len(got) >= 200
        wait_until(more, timeout=60, what="200 records through the Kafka listener")
        c.commit()
        committed = {tp.partition: c.committed(TopicPartition(topic, tp.partition))
                     for tp in c.assignment()}
    finally:
        c.close()
    assert set(got) == set(sent)
    for where, i in sent.items():
        key, value, headers = got[where]
        assert value == b"v%d" % i and key == (None if i % 10 == 0 else b"k%d" % i)
        assert headers == [("n", str(i).encode())]
    ends = {}
    for (partition, offset) in sent:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    assert committed == ends
    # the same records through sparklog's own consumer and listener
    mine = _sparklog_records(broker, topic, 200)
    assert {(p, o) for p, o, *_ in mine} == set(sent)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_idempotent_producer_every_codec(broker, kafka_address, codec):
    """confluent-kafka's idempotent producer (InitProducerId, sequences) with each codec;
    its consumer group reads every record back with its key, value and headers."""
    from confluent_kafka import Producer as CKProducer

    topic = create_with_kafka_python(kafka_address, topic_name(), partitions=2)
    p = CKProducer({"bootstrap.servers": kafka_address, "enable.idempotence": True,
                    "compression.type": codec, "linger.ms": 5})
    errors = []
    for i in range(300):
        p.produce(topic, key=b"k%d" % (i % 7), value=b"value-%d" % i,
                  headers=[("i", str(i).encode())],
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors
    got = {(m.partition(), m.offset()): (m.key(), m.value(), m.headers())
           for m in librdkafka_read(kafka_address, topic, 300)}
    values = sorted(int(v.split(b"-")[1]) for _, v, _ in got.values())
    assert values == list(range(300))
    for key, value, headers in got.values():
        i = int(value.split(b"-")[1])
        assert key == b"k%d" % (i % 7) and headers == [("i", str(i).encode())]


def test_kafka_consumer_reads_what_sparklog_producer_wrote(broker, kafka_address):
    """Arrow frames written by sparklog's Producer are served to a Kafka consumer as
    Kafka batches, same offsets, keys, values, headers and timestamps."""
    from kafka import KafkaConsumer, TopicPartition

    topic = create_with_kafka_python(kafka_address, topic_name(), partitions=1)
    p = Producer(bootstrap_servers=broker.address)
    for i in range(50):
        p.send(topic, value=b"s%d" % i, key=b"k", headers=[("h", b"x")],
               partition=0, timestamp_ms=1_700_000_000_000 + i)
    p.flush()
    p.close()
    c = KafkaConsumer(bootstrap_servers=kafka_address, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    got = []
    try:
        def more():
            for recs in c.poll(timeout_ms=500).values():
                got.extend(recs)
            return len(got) >= 50
        wait_until(more, timeout=60, what="50 records by a Kafka consumer")
    finally:
        c.close()
    assert [r.offset for r in got] == list(range(50))
    assert [r.value for r in got] == [b"s%d" % i for i in range(50)]
    assert [r.timestamp for r in got] == [1_700_000_000_000 + i for i in range(50)]
    assert all(r.key == b"k" and r.headers == [("h", b"x")] for r in got)


def test_two_kafka_consumers_of_one_group_share_the_partitions(broker, kafka_address):
    """Two kafka-python consumers of one group split a 4-partition topic: every
    partition to exactly one of them once both are in."""
    from kafka import KafkaConsumer, KafkaProducer

    topic = create_with_kafka_python(kafka_address, topic_name(), partitions=4)
    p = KafkaProducer(bootstrap_servers=kafka_address)
    for i in range(40):
        p.send(topic, value=b"%d" % i, partition=i % 4)
    p.flush()
    p.close()
    group = "g-" + topic
    a = KafkaConsumer(topic, bootstrap_servers=kafka_address, group_id=group,
                      auto_offset_reset="earliest")
    b = KafkaConsumer(topic, bootstrap_servers=kafka_address, group_id=group,
                      auto_offset_reset="earliest")
    try:
        wait_until_split([a, b], 4, timeout=90,
                         what="the group's partitions split between two members")
    finally:
        a.close()
        b.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_produces_and_consumes(broker, kafka_address):
    """kcat (librdkafka's CLI) produces lines and reads them back; sparklog's consumer
    sees the same records."""
    topic = create_with_kafka_python(kafka_address, topic_name(), partitions=1)
    lines = "\n".join(f"key{i}:line {i}" for i in range(20)) + "\n"
    subprocess.run(["kcat", "-b", kafka_address, "-P", "-t", topic, "-K", ":", "-p", "0"],
                   input=lines.encode(), check=True, timeout=60)
    out = subprocess.run(["kcat", "-b", kafka_address, "-C", "-t", topic, "-o", "beginning",
                          "-e", "-f", "%k=%s\n"], capture_output=True, check=True, timeout=60)
    assert out.stdout.decode().splitlines() == [f"key{i}=line {i}" for i in range(20)]
    mine = _sparklog_records(broker, topic, 20)
    assert [(k, v) for _, _, k, v, _ in mine] == [(b"key%d" % i, b"line %d" % i)
                                                  for i in range(20)]


# --- hostile bytes --------------------------------------------------------------------

def test_forged_batches_are_refused_by_name(broker, kafka_address):
    """A bad CRC is CORRUPT_MESSAGE (2); a control batch, a LogAppendTime batch and one
    whose lastOffsetDelta disagrees with its count are INVALID_RECORD (87), each naming
    the field; nothing of them is stored."""
    topic = create_with_kafka_python(kafka_address, topic_name(), partitions=1)
    good = encode_batch([KafkaRecord(0, 1_700_000_000_000, b"k", b"v")])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with KafkaConn(kafka_address) as conn:
        r = conn.produce(topic, bytes(bad_crc))
        assert int(r.error_code) == 2 and "CRC" in (r.error_message or "")
        r = conn.produce(topic, encode_batch(
            [KafkaRecord(0, 1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
            control=True))
        assert int(r.error_code) == 87 and "control" in r.error_message
        r = conn.produce(topic, encode_batch(
            [KafkaRecord(0, 5, b"k", b"v"), KafkaRecord(1, 5, b"k", b"v")], last_offset_delta=5))
        assert int(r.error_code) == 87 and "lastOffsetDelta" in r.error_message
        r = conn.produce(topic, good)
        assert int(r.error_code) == 0 and r.base_offset == 0  # nothing refused was stored


def test_api_versions_above_the_max_gets_kip_511s_answer(kafka_address):
    """ApiVersions v99: error 35 with the versions served, in a v0 response."""
    from kio.schema.api_versions.v0.request import ApiVersionsRequest as V0
    from kio.schema.api_versions.v0.response import ApiVersionsResponse

    header = RequestHeader(18, 0, 3, "probe")
    frame = bytearray(encode_request(header, V0()))
    struct.pack_into(">h", frame, 6, 99)  # the version of the header
    with KafkaConn(kafka_address) as conn:
        conn.sock.sendall(bytes(frame))
        resp = conn.receive(header)  # a v0 response to the request's correlation id
    assert isinstance(resp, ApiVersionsResponse) and int(resp.error_code) == 35
    assert {int(k.api_key) for k in resp.api_keys} >= {0, 1, 2, 3, 18}


def test_garbage_closes_the_connection_and_the_broker_keeps_serving(kafka_address):
    """A frame that is not a Kafka request closes that connection (Kafka's behaviour);
    the next client is served."""
    host, port = kafka_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", 6) + b"\x00\x03\x00\x63\xff\xff")
        assert s.recv(10) == b""
    from kio.schema.metadata.v1.request import MetadataRequest

    with KafkaConn(kafka_address) as conn:
        resp = conn.request(3, 1, MetadataRequest(topics=None))
    assert resp.brokers and resp.brokers[0].port == int(port)
