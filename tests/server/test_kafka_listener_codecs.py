"""The broker's Kafka listener (docs/kafka-protocol.md) with kafka-python's producer and
every codec it has (gzip built in; lz4, snappy and zstd from its optional packages, the
``peers`` extra installs them): idempotent at acks=all, its batches stored as they came,
read back by kafka-python's own consumer and by sparklog's."""

from __future__ import annotations

import pytest

from sparklog.clients.consumer import Consumer
from tests.support.kafkaconn import create_with_kafka_python, start_with_kafka_listener, topic_name
from tests.support.waiting import wait_until

kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (the peers extra)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker with a sparklog listener and a Kafka listener (KAFKA)."""
    b = start_with_kafka_listener(tmp_path_factory.mktemp("kafka-listener-codecs"))
    yield b
    b.stop()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_idempotent_producer_every_codec(broker, codec):
    """kafka-python's idempotent producer (acks=all) with the codec writes keyed records
    with headers to 2 partitions; its consumer and sparklog's read every one back."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.codec import has_gzip, has_lz4, has_snappy, has_zstd

    if not {"gzip": has_gzip, "snappy": has_snappy, "lz4": has_lz4, "zstd": has_zstd}[codec]():
        pytest.skip(f"kafka-python's {codec} codec package is not installed (the peers extra)")
    address = broker.broker.listener_addresses["KAFKA"]
    topic = create_with_kafka_python(address, topic_name(f"kp-{codec}-"), partitions=2)
    p = KafkaProducer(bootstrap_servers=address, acks="all", enable_idempotence=True,
                      compression_type=codec, linger_ms=20)
    futures = [p.send(topic, key=b"k%d" % (i % 5), value=b"%s value %d " % (codec.encode(), i)
                      + b"x" * (i % 40), headers=[("i", str(i).encode())], partition=i % 2)
               for i in range(300)]
    p.flush(30)
    sent = {(md.partition, md.offset): i for i, md in
            ((i, f.get(timeout=30)) for i, f in enumerate(futures))}
    p.close()
    assert len(sent) == 300

    def expected(i: int) -> tuple:
        return (b"k%d" % (i % 5), b"%s value %d " % (codec.encode(), i) + b"x" * (i % 40),
                [("i", str(i).encode())])

    c = KafkaConsumer(topic, bootstrap_servers=address, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    got: dict = {}
    try:
        def more() -> bool:
            for recs in c.poll(timeout_ms=500).values():
                for r in recs:
                    got[(r.partition, r.offset)] = (r.key, r.value, r.headers)
            return len(got) >= 300
        wait_until(more, timeout=60, what=f"300 {codec} records by kafka-python's consumer")
    finally:
        c.close()
    assert got == {where: expected(i) for where, i in sent.items()}
    mine = Consumer(topic, bootstrap_servers=broker.address, auto_offset_reset="earliest")
    seen: dict = {}
    try:
        def more_mine() -> bool:
            for recs in mine.poll(timeout_ms=500).values():
                for r in recs:
                    seen[(r.partition, r.offset)] = (r.key, r.value, list(r.headers))
            return len(seen) >= 300
        wait_until(more_mine, timeout=60, what=f"300 {codec} records by sparklog's consumer")
    finally:
        mine.close()
    assert seen == got
