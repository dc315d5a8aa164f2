"""Rows measured from one Python process: producer records/s, consumer records/s and
produce->consume latency, sparklog's clients against a sparklog broker and the Python
Kafka clients users pick (confluent-kafka, kafka-python) against Kafka.

Every client runs at the settings its users would pick for throughput (acks=1, a few ms
of linger, large batches); the records are 100-byte values without keys, to one
partition."""

from __future__ import annotations

import threading
import time

from pathtrace import PAD, STAMP  # a latency record's value: its send() time, padding

VALUE = b"v" * 100
LINGER_MS = 5
BATCH_BYTES = 256 * 1024


# --- producers: seconds to send n records and get every acknowledgement --------------


def sparklog_send(address: str, topic: str, n: int) -> float:
    """sparklog ``Producer.send()``, one call per record, then ``flush()``."""
    from sparklog import Producer

    with Producer(address, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES) as producer:
        producer.send(topic, VALUE).get(10)  # metadata and connection ready
        send = producer.send
        start = time.perf_counter()
        for _ in range(n):
            send(topic, VALUE)
        producer.flush()
        return time.perf_counter() - start


def sparklog_send_batch(address: str, topic: str, n: int) -> float:
    """sparklog ``Producer.send_batch()`` of pyarrow Tables of 100k rows."""
    import pyarrow as pa

    from sparklog import Producer

    rows = 100_000
    table = pa.table({"value": pa.array([VALUE] * rows, pa.binary())})
    with Producer(address, acks=1, buffer_memory=64 << 20, max_request_size=4 << 20) as producer:
        producer.send_batch(topic, table.slice(0, 10)).get(10)
        start = time.perf_counter()
        futures = [producer.send_batch(topic, table.slice(0, min(rows, n - i)))
                   for i in range(0, n, rows)]
        for f in futures:
            f.get(120)
        return time.perf_counter() - start


def confluent_produce(bootstrap: str, topic: str, n: int) -> float:
    """confluent-kafka ``Producer.produce()``, one call per record (``poll(0)`` when its
    queue is full, as its documentation shows), then ``flush()``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": LINGER_MS,
                         "batch.size": BATCH_BYTES, "queue.buffering.max.messages": 1_000_000})
    producer.produce(topic, VALUE)
    producer.flush(10)
    produce = producer.produce
    start = time.perf_counter()
    for _ in range(n):
        try:
            produce(topic, VALUE)
        except BufferError:
            producer.poll(0.01)
            produce(topic, VALUE)
    if producer.flush(120):
        raise RuntimeError("confluent-kafka: records left unacknowledged")
    return time.perf_counter() - start


def kafka_python_send(bootstrap: str, topic: str, n: int) -> float:
    """kafka-python ``KafkaProducer.send()``, one call per record, then ``flush()``."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=LINGER_MS,
                             batch_size=BATCH_BYTES)
    try:
        producer.send(topic, VALUE).get(10)
        send = producer.send
        start = time.perf_counter()
        for _ in range(n):
            send(topic, VALUE)
        producer.flush(120)
        return time.perf_counter() - start
    finally:
        producer.close(10)


# --- consumers: seconds to read n records from the start of partition 0 ---------------


def _drain(consumer, topic_partition, n: int, name: str) -> float:
    """Seconds for a consumer with Kafka's Java-style API (sparklog's and kafka-python's:
    assign, seek_to_beginning, poll(timeout_ms)) to read ``n`` records of one partition."""
    consumer.assign([topic_partition])
    consumer.seek_to_beginning(topic_partition)
    got = 0
    start = time.perf_counter()
    while got < n:
        for records in consumer.poll(timeout_ms=1000).values():
            got += len(records)
        if time.perf_counter() - start > 300:
            raise RuntimeError(f"{name} consumer: {got} of {n} records in 300 s")
    return time.perf_counter() - start


def sparklog_consume(address: str, topic: str, n: int) -> float:
    """sparklog ``Consumer.poll()`` from the beginning until ``n`` records."""
    from sparklog import Consumer, TopicPartition

    with Consumer(bootstrap_servers=address, max_poll_records=100_000,
                  enable_auto_commit=False) as consumer:
        return _drain(consumer, TopicPartition(topic, 0), n, "sparklog")


def confluent_consume(bootstrap: str, topic: str, n: int) -> float:
    """confluent-kafka ``Consumer.consume()`` (batches of 10k) from the beginning."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = 0
        start = time.perf_counter()
        while got < n:
            # consume() waits for all it asks for (or the timeout): never ask past n
            for m in consumer.consume(min(10_000, n - got), 1.0):
                if m.error() is None:
                    got += 1
            if time.perf_counter() - start > 300:
                raise RuntimeError(f"confluent-kafka consumer: {got} of {n} records in 300 s")
        return time.perf_counter() - start
    finally:
        consumer.close()


def kafka_python_consume(bootstrap: str, topic: str, n: int) -> float:
    """kafka-python ``KafkaConsumer.poll()`` from the beginning."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_poll_records=100_000)
    try:
        return _drain(consumer, TopicPartition(topic, 0), n, "kafka-python")
    finally:
        consumer.close()


# --- latency: produce -> consume at a fixed rate ------------------------------------------

#: linger.ms of each system's producer in the latency rows: each at its best setting
#: (docs/performance.md, "Latency", has the sweep that chose sparklog's)
KAFKA_LATENCY_LINGER_MS = 1
SPARKLOG_LATENCY_LINGER_MS = 1


def percentiles(samples: list[float]) -> dict:
    """p50, p99, p99.9 (ms) of ``samples`` (seconds)."""
    s = sorted(samples)
    if not s:
        return {"p50": float("nan"), "p99": float("nan"), "p99.9": float("nan"), "n": 0}
    pick = lambda q: s[min(len(s) - 1, int(len(s) * q))] * 1e3  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "p99.9": pick(0.999), "n": len(s)}


def _paced(total: int, rate: int, send) -> None:
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(STAMP.pack(time.monotonic_ns()) + PAD)


def _warm_up(send_one, latencies: list, timeout: float = 60.0) -> None:
    """Send warm-up records until the consumer has received one (its connection, offsets
    and fetch loop are up), then forget them: measured records meet a running consumer."""
    deadline = time.monotonic() + timeout
    while not latencies:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the consumer received no record within {timeout} s")
        send_one()
        time.sleep(0.1)
    time.sleep(0.2)
    latencies.clear()


def _collect(latencies: list, total: int, deadline: float) -> None:
    while len(latencies) < total and time.monotonic() < deadline:
        time.sleep(0.05)


def kafka_latency(bootstrap: str, topic: str, rate: int, seconds: float,
                  linger_ms: float) -> list[float]:
    """Latencies of ``rate * seconds`` records produced at ``rate``/s with confluent-kafka
    and consumed by a confluent-kafka consumer in another thread of this process."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    total = int(rate * seconds)
    latencies: list[float] = []
    ready, done = threading.Event(), threading.Event()

    def consume():
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{time.time_ns()}",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 500})
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        consumer.consume(1, 0.5)
        ready.set()
        while len(latencies) < total and not done.is_set():
            m = consumer.poll(0.1)  # returns at the first record (consume() waits it out)
            if m is not None and m.error() is None:
                latencies.append((time.monotonic_ns() - STAMP.unpack_from(m.value())[0]) / 1e9)
        consumer.close()

    thread = threading.Thread(target=consume)
    thread.start()
    ready.wait(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": linger_ms})

    def warm_up():
        producer.produce(topic, STAMP.pack(time.monotonic_ns()) + PAD)
        producer.flush(10)

    _warm_up(warm_up, latencies)

    def send(value):
        try:
            producer.produce(topic, value)
        except BufferError:
            producer.poll(0.01)
            producer.produce(topic, value)
        producer.poll(0)

    _paced(total, rate, send)
    producer.flush(30)
    _collect(latencies, total, time.monotonic() + 30)
    done.set()
    thread.join()
    return latencies


def sparklog_latency(address: str, topic: str, rate: int, seconds: float,
                     linger_ms: float) -> list[float]:
    """The same load with sparklog's Producer and Consumer."""
    from bench_latency import consume_latencies

    from sparklog import Producer

    total = int(rate * seconds)
    latencies: list[float] = []
    ready, done = threading.Event(), threading.Event()

    thread = threading.Thread(target=consume_latencies,
                              args=(address, topic, total, latencies, ready, done))
    thread.start()
    ready.wait(30)
    with Producer(address, acks=1, linger_ms=linger_ms) as producer:
        _warm_up(lambda: producer.send(topic, STAMP.pack(time.monotonic_ns()) + PAD)
                 .get(10), latencies)
        send = producer.send
        _paced(total, rate, lambda value: send(topic, value))
        producer.flush()
    _collect(latencies, total, time.monotonic() + 30)
    done.set()
    thread.join()
    return latencies
