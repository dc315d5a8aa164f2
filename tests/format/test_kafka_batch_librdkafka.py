"""Kafka record batches against librdkafka (confluent-kafka): the batches a real
producer writes, with each of its four codecs, decode and validate here; the batches
encode_batch writes, with each codec, are read by a real consumer with its CRC check on.

librdkafka talks to a minimal broker in this file over loopback: ApiVersions, Metadata v1,
Produce v3-7 (its record batches are kept as sent), Fetch v4-10 (serves given batches) and
FindCoordinator v0 (no coordinator: the consumer uses assign()). Only the bytes of the
batches matter here; the broker of issue #29 item 1 is the real listener.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time

import pytest

from sparklog.format import kafka_batch as kb
from sparklog.format.kafka_batch import KafkaRecord
from tests.support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "t"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1732850000000
#: (api key, min, max) this broker offers (zstd needs Produce v7 and Fetch v10: KIP-110)
APIS = [(0, 3, 7), (1, 4, 10), (3, 1, 1), (10, 0, 0), (18, 0, 3)]


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes, pos: int):
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        values = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str | None:
        size = self.take("h")
        if size < 0:
            return None
        value = self.data[self.pos:self.pos + size].decode()
        self.pos += size
        return value

    def bytes_(self) -> bytes | None:
        size = self.take("i")
        if size < 0:
            return None
        value = self.data[self.pos:self.pos + size]
        self.pos += size
        return value


class MiniBroker:
    """One node (id 1) leading partition 0 of :data:`TOPIC`; keeps every produced batch
    in ``produced`` and serves ``served`` (batches, in offset order) to fetches."""

    def __init__(self):
        self.produced: list[bytes] = []
        self.served: list[bytes] = []
        self.requests: list[tuple[int, int]] = []
        broker = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                while True:
                    head = _recv(sock, 4)
                    if head is None:
                        return
                    frame = _recv(sock, struct.unpack(">i", head)[0])
                    if frame is None:
                        return
                    reply = broker.answer(frame)
                    sock.sendall(struct.pack(">i", len(reply)) + reply)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answer(self, frame: bytes) -> bytes:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        self.requests.append((api_key, version))
        r = _Reader(frame, 8)
        r.string()  # client id
        if api_key == 18:  # ApiVersions: the response header is v0 at every version
            if version >= 3:
                body = struct.pack(">hB", 0, len(APIS) + 1) + b"".join(
                    struct.pack(">hhhB", k, lo, hi, 0) for k, lo, hi in APIS) + \
                    struct.pack(">iB", 0, 0)
            else:
                body = struct.pack(">hi", 0, len(APIS)) + b"".join(
                    struct.pack(">hhh", *api) for api in APIS)
                if version >= 1:
                    body += struct.pack(">i", 0)
            return struct.pack(">i", correlation_id) + body
        if api_key == 3:  # Metadata v1
            body = struct.pack(">i", 1) + struct.pack(">i", 1) + _string("127.0.0.1") + \
                struct.pack(">i", self.port) + _string(None) + struct.pack(">i", 1)
            body += struct.pack(">i", 1) + struct.pack(">h", 0) + _string(TOPIC) + b"\x00"
            body += struct.pack(">i", 1) + struct.pack(">hii", 0, 0, 1) + \
                struct.pack(">ii", 1, 1) + struct.pack(">ii", 1, 1)
            return struct.pack(">i", correlation_id) + body
        if api_key == 0:  # Produce v3-7
            r.string()  # transactional id
            r.take("hi")  # acks, timeout
            out = []
            for _ in range(r.take("i")):
                name = r.string()
                parts = []
                for _ in range(r.take("i")):
                    index = r.take("i")
                    records = r.bytes_() or b""
                    base = sum(kb.parse_header(b).record_count for b in self.produced)
                    pos = 0
                    while pos < len(records):
                        header = kb.parse_header(records, pos, verify_crc=False)
                        self.produced.append(records[pos:pos + header.size])
                        pos += header.size
                    parts.append(struct.pack(">ihqq", index, 0, base, -1)
                                 + (struct.pack(">q", 0) if version >= 5 else b""))
                out.append(_string(name) + struct.pack(">i", len(parts)) + b"".join(parts))
            body = struct.pack(">i", len(out)) + b"".join(out) + struct.pack(">i", 0)
            return struct.pack(">i", correlation_id) + body
        if api_key == 1:  # Fetch v4-10
            _replica, max_wait, _min, _max, _iso = r.take("iiiib")
            if version >= 7:
                r.take("ii")  # fetch session id and epoch (no sessions: answered 0)
            out = []
            for _ in range(r.take("i")):
                name = r.string()
                parts = []
                for _ in range(r.take("i")):
                    index = r.take("i")
                    if version >= 9:
                        r.take("i")  # current leader epoch
                    offset = r.take("q")
                    if version >= 5:
                        r.take("q")  # log start offset
                    r.take("i")  # partition max bytes
                    batches = [b for b in self.served
                               if kb.parse_header(b, verify_crc=False).next_offset > offset]
                    if not batches:
                        time.sleep(min(max_wait, 100) / 1000)
                    end = kb.parse_header(self.served[-1], verify_crc=False).next_offset \
                        if self.served else 0
                    records = b"".join(batches)
                    parts.append(struct.pack(">ihqq", index, 0, end, end)
                                 + (struct.pack(">q", 0) if version >= 5 else b"")
                                 + struct.pack(">ii", -1, len(records)) + records)
                out.append(_string(name) + struct.pack(">i", len(parts)) + b"".join(parts))
            body = struct.pack(">i", 0) + (struct.pack(">hi", 0, 0) if version >= 7 else b"")
            body += struct.pack(">i", len(out)) + b"".join(out)
            return struct.pack(">i", correlation_id) + body
        if api_key == 10:  # FindCoordinator v0: COORDINATOR_NOT_AVAILABLE
            body = struct.pack(">hi", 15, -1) + _string("") + struct.pack(">i", -1)
            return struct.pack(">i", correlation_id) + body
        raise AssertionError(f"unexpected request: api key {api_key} v{version}")


def _recv(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        try:
            chunk = sock.recv(size)
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


@pytest.fixture
def broker():
    b = MiniBroker()
    yield b
    b.close()


def _records(n=200, base=0):
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % (i % 17)
        value = None if i % 13 == 7 else b"librdkafka value %d " % i * (1 + i % 6)
        headers = () if i % 4 else (("h1", b"v-%d" % i), ("null", None))
        out.append(KafkaRecord(base + i, T0 + i * 3, key, value, headers))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batches_decode_and_validate(broker, codec):
    records = _records()
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "compression.type": codec,
        "linger.ms": 200, "batch.num.messages": 10_000, "enable.idempotence": False,
        "acks": 1})
    for r in records:
        producer.produce(TOPIC, r.value, r.key, partition=0, timestamp=r.timestamp,
                         headers=list(r.headers) or None)
    assert producer.flush(60) == 0
    decoded = []
    for data in broker.produced:
        header = kb.validate_client_batch(data)
        assert header.compression == codec
        batch = kb.decode_batch(data)
        base = len(decoded)
        decoded += [r._replace(offset=base + r.offset) for r in batch.records]
    assert decoded == records
    if codec == "snappy":  # librdkafka writes raw snappy, not xerial's framing
        assert not any(kb.records_section(b)[:8] == b"\x82SNAPPY\x00" for b in broker.produced)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_consumer_reads_our_batches(broker, codec):
    """Three batches (the middle one compacted: gaps in its offsets), CRC checked by
    librdkafka (check.crcs)."""
    first = _records(150)
    compacted = [r._replace(offset=150 + 2 * i) for i, r in enumerate(_records(20))]
    last = _records(30, base=190)
    broker.served = [
        kb.encode_batch(first, compression=codec, partition_leader_epoch=3),
        kb.encode_batch(compacted, compression=codec, base_offset=150, last_offset_delta=39),
        kb.encode_batch(last, compression=codec, base_offset=190, snappy_framing="raw"),
    ]
    expected = first + compacted + last
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False,
        "check.crcs": True, "fetch.wait.max.ms": 50, "enable.partition.eof": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        got: list = []

        def read_all():
            for msg in consumer.consume(1000, 0.2):
                assert msg.error() is None, msg.error()
                got.append(KafkaRecord(msg.offset(), msg.timestamp()[1], msg.key(),
                                       msg.value(), tuple(msg.headers() or ())))
            return len(got) >= len(expected)

        wait_until(read_all, what=f"librdkafka reading {len(expected)} records")
    finally:
        consumer.close()
    assert got == expected
