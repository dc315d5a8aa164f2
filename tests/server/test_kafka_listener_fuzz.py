"""Hostile bytes on the Kafka listener (docs/kafka-protocol.md, "Security"; issue #33's
spirit): hypothesis sends a live broker mutated valid Produce, Fetch, Metadata,
JoinGroup and ApiVersions frames, random bytes and truncated frames, and sizes up to
2 GiB before authentication. Each connection is answered or closed, as Kafka's broker
does (an answer always carries the request's correlation id); the broker logs no
crash, a well-behaved client is served throughout, and the topic holds only records
that were really produced, readable end to end.

One in-process broker for the module: a PLAINTEXT Kafka listener (``KAFKA``), a
SASL_PLAINTEXT one (``KAFKA_SASL``, SCRAM and PLAIN) and sparklog's loopback
listener (``LOCAL``) to read back what was stored.
"""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from sparklog.clients.admin import Admin
from sparklog.format.kafka_batch import KafkaRecord, encode_batch
from sparklog.protocol import Connection
from sparklog.protocol.kafka import RequestHeader, encode_request
from sparklog.protocol.kafka.entities import build
from sparklog.server.embedded import EmbeddedBroker
from tests.support.kafkaconn import KafkaConn
from tests.support.wire import read_values

TOPIC = "fuzzed"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
GROUP = "fuzz-group"
MAX_REQUEST = 1 << 20
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


class _Errors(logging.Handler):
    """Collects the broker's ERROR records (a connection or request that crashed)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-fuzz") / "log"
    root.mkdir()
    props = {
        "listeners": "LOCAL://127.0.0.1:0,KAFKA://127.0.0.1:0,KAFKA_SASL://127.0.0.1:0",
        "listener.security.protocol.map":
            "LOCAL:PLAINTEXT,KAFKA:PLAINTEXT,KAFKA_SASL:SASL_PLAINTEXT",
        "kafka.listener.names": "KAFKA,KAFKA_SASL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
        "socket.request.max.bytes": str(MAX_REQUEST),
        "sasl.server.max.receive.size": "4096",
        "authentication.timeout.ms": "3000",
        "request.read.timeout.ms": "3000",
        "connection.failed.authentication.delay.ms": "0",
    }
    errors = _Errors()
    logging.getLogger("sparklog").addHandler(errors)
    try:
        with EmbeddedBroker(root.as_uri(), props) as embedded:
            addresses = embedded.broker.listener_addresses
            with Admin(addresses["LOCAL"]) as admin:
                admin.alter_user_scram_credentials([
                    (user, "SCRAM-SHA-256", password) for user, password in USERS.items()])
                admin.create_topic(TOPIC, 1)
            yield addresses, errors
    finally:
        logging.getLogger("sparklog").removeHandler(errors)


# --- valid frames to start from ----------------------------------------------------------

def _frame(api_key: int, version: int, values: dict, correlation_id: int = 1) -> bytes:
    request = build(load_request_schema(api_key, version), values)
    return encode_request(RequestHeader(api_key, version, correlation_id, "fuzz"), request)


def _good_batch(n: int = 2) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([KafkaRecord(i, now, b"key-%d" % i, b"value-%d" % i)
                         for i in range(n)], compression="gzip")


#: every key and value a fuzzed Produce may have stored (its records' CRC holds them)
PRODUCED = {b"value-%d" % i for i in range(4)}


def _subscription(topic: str) -> bytes:
    name = topic.encode()
    return b"\x00\x00" + struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", -1)


def valid_frames() -> list[bytes]:
    """One valid frame of each API the fuzz starts from."""
    return [
        _frame(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": _good_batch()}]}]}),
        _frame(1, 11, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 16, "topics": [
            {"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": 1 << 16,
                                             "current_leader_epoch": -1,
                                             "log_start_offset": -1}]}]}),
        _frame(3, 9, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}),
        _frame(11, 5, {"group_id": GROUP, "session_timeout": 6000, "rebalance_timeout": 100,
                       "member_id": "", "protocol_type": "consumer",
                       "protocols": [{"name": "range", "metadata": _subscription(TOPIC)}]}),
        _frame(18, 3, {"client_software_name": "fuzz", "client_software_version": "1"}),
    ]


FRAMES = valid_frames()


# --- sending and judging -------------------------------------------------------------------

def exchange(address: str, data: bytes, seconds: float = 30, quiet: float = 0.5) -> bytes:
    """Send ``data`` on a new connection and return what the broker sent: until it
    closed the connection, or answered every whole request in ``data``, or said nothing
    for ``quiet`` seconds (it waits for the rest of a request, or owes no answer: a
    Produce with acks=0); then our side is ended and the broker must close (Kafka's
    broker drops a half-closed client). AssertionError when it keeps the connection
    beyond ``seconds``."""
    host, port = address.rsplit(":", 1)
    expected = len(request_correlations(data))
    with socket.create_connection((host, int(port)), timeout=seconds) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed already: what was sent is refused
        out = b""
        deadline = time.monotonic() + seconds
        ended = False
        while True:
            assert time.monotonic() < deadline, "the broker kept the connection open"
            sock.settimeout(quiet if not ended else max(0.1, deadline - time.monotonic()))
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                return out
            except socket.timeout:
                chunk = None
            if chunk == b"":
                return out
            if chunk:
                out += chunk
                if ended or _whole_answers(out) < expected:
                    continue
            if not ended:  # every answer came, or a quiet spell: end our side
                ended = True
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    return out


def _whole_answers(data: bytes) -> int:
    count, pos = 0, 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or pos + 4 + size > len(data):
            break
        count, pos = count + 1, pos + 4 + size
    return count


def answered_frames(data: bytes) -> list[bytes]:
    """The size-prefixed frames of a response stream (the last may be cut short by a
    close only if the broker stopped mid-write, which it must not)."""
    frames, pos = [], 0
    while pos < len(data):
        assert pos + 4 <= len(data), f"a response size cut short: {data[pos:]!r}"
        (size,) = struct.unpack_from(">i", data, pos)
        assert 4 <= size <= len(data) - pos - 4, f"a response of {size} bytes cut short"
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames


def request_correlations(data: bytes) -> list[int]:
    """The correlation ids of the whole requests in ``data`` (as the broker framed them)."""
    ids, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 8 or pos + 4 + size > len(data):
            break
        ids.append(struct.unpack_from(">i", data, pos + 8)[0])
        pos += 4 + size
    return ids


def check_answers(sent: bytes, received: bytes) -> None:
    """Answers come whole, in order, each carrying a correlation id of a request sent."""
    answers = answered_frames(received)
    asked = request_correlations(sent)
    got = [struct.unpack_from(">i", a, 0)[0] for a in answers]
    assert len(got) <= len(asked), (got, asked)
    assert got == asked[:len(got)], (got, asked)


def healthy(addresses, errors: _Errors) -> None:
    """A well-behaved client is served (Metadata through the Kafka listener), and the
    broker logged no crash."""
    frame = _frame(3, 9, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False},
                   99)
    with KafkaConn(addresses["KAFKA"]) as conn:
        conn.sock.sendall(frame)
        answer = conn.receive(RequestHeader(3, 9, 99, "healthy"))
    assert answer.topics[0].error_code == 0 and answer.topics[0].partitions
    assert not errors.records, [r.getMessage() for r in errors.records]


def stored_values(addresses) -> list[bytes]:
    with Connection(addresses["LOCAL"], timeout=30) as conn:
        return read_values(conn, TOPIC, 0)


# --- strategies ----------------------------------------------------------------------------

@st.composite
def mutated(draw) -> bytes:
    """A valid frame with some of its bytes (the size prefix included) flipped,
    overwritten, cut, inserted or appended."""
    data = bytearray(draw(st.sampled_from(FRAMES)))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "extend", "size"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del data[pos:pos + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=32))
        elif kind == "size" and len(data) >= 4:
            struct.pack_into(">i", data, 0, draw(st.sampled_from(
                [len(data) - 4, len(data) - 5, len(data) + 10, 0, 1, 7, -1, -(1 << 31)])))
    return bytes(data)


# --- the fuzz ------------------------------------------------------------------------------

@FUZZ
@given(data=mutated())
def test_mutated_frames_are_answered_or_closed(broker, data):
    """Mutated Produce/Fetch/Metadata/JoinGroup/ApiVersions frames on the PLAINTEXT
    Kafka listener: each connection ends with whole answers to the requests it sent
    (in order) or a close; the broker serves a good client after each."""
    addresses, errors = broker
    check_answers(data, exchange(addresses["KAFKA"], data))
    healthy(addresses, errors)


@FUZZ
@given(frames=st.lists(st.sampled_from(FRAMES), min_size=1, max_size=4),
       cut=st.integers(1, 400), junk=st.binary(max_size=64))
def test_truncated_frames_and_random_bytes_are_closed(broker, frames, cut, junk):
    """Valid requests, then one cut short (or random bytes): the whole ones are
    answered, then the connection is closed; nothing hangs."""
    addresses, errors = broker
    stream = b"".join(frames)
    data = stream[:max(0, len(stream) - cut)] + junk
    check_answers(data, exchange(addresses["KAFKA"], data))
    healthy(addresses, errors)


@FUZZ
@given(size=st.sampled_from([-1, -(1 << 31), 4097, 1 << 20, (1 << 26), (1 << 31) - 1]),
       body=st.binary(max_size=256),
       listener=st.sampled_from(["KAFKA", "KAFKA_SASL"]))
def test_huge_sizes_are_closed_at_once(broker, size, body, listener):
    """A size above what the listener takes (socket.request.max.bytes; before
    authentication sasl.server.max.receive.size) or negative closes the connection
    before any payload is read, unanswered (Kafka's InvalidReceiveException)."""
    addresses, errors = broker
    if listener == "KAFKA" and 0 <= size <= MAX_REQUEST:
        size = MAX_REQUEST + 1
    started = time.monotonic()
    assert exchange(addresses[listener], struct.pack(">i", size) + body) == b""
    assert time.monotonic() - started < 10
    healthy(addresses, errors)


@FUZZ
@given(data=st.one_of(mutated(), st.binary(min_size=0, max_size=200)))
def test_before_authentication_only_sasl_is_answered(broker, data):
    """On the SASL listener, fuzzed frames from a client that never authenticated get
    no answer but ApiVersions' or the SASL APIs', then a close: never a topic's name,
    never a stored record."""
    addresses, errors = broker
    answers = answered_frames(exchange(addresses["KAFKA_SASL"], data))
    for answer in answers:
        assert TOPIC.encode() not in answer and b"value-" not in answer
    healthy(addresses, errors)


@pytest.fixture(scope="module")
def alices_producer_id(broker) -> tuple[int, int]:
    """(producer id, epoch) alice obtained through the SASL Kafka listener."""
    addresses, _ = broker
    with KafkaConn(addresses["KAFKA_SASL"], "alice", USERS["alice"]) as alice:
        answer = alice.init_producer_id()
    assert answer.error_code == 0
    return int(answer.producer_id), int(answer.producer_epoch)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delta=st.sampled_from([0, 0, 0, 1, 2, 3]), epoch=st.integers(-1, 3),
       sequence=st.integers(-1, 1 << 20), records=st.integers(1, 3))
def test_another_principals_producer_id_is_refused(broker, alices_producer_id, delta,
                                                   epoch, sequence, records):
    """bob's batches naming alice's producer id (or ids near it, which bob never
    obtained), with any epoch and sequence, are INVALID_PRODUCER_ID_MAPPING and store
    nothing."""
    addresses, errors = broker
    pid, alices_epoch = alices_producer_id
    before = len(stored_values(addresses))
    now = int(time.time() * 1000)
    batch = encode_batch([KafkaRecord(i, now, None, b"value-%d" % i) for i in range(records)],
                         producer_id=pid + delta,
                         producer_epoch=alices_epoch if epoch < 0 else epoch,
                         base_sequence=max(0, sequence))
    with KafkaConn(addresses["KAFKA_SASL"], "bob", USERS["bob"]) as bob:
        answer = bob.produce(TOPIC, batch)
    assert answer.error_code == 49, answer
    assert len(stored_values(addresses)) == before
    assert not errors.records, [r.getMessage() for r in errors.records]


def test_what_was_stored_is_only_what_was_produced(broker):
    """After the fuzz (this test runs last), every stored record is one a valid batch
    carried (a mutation inside a batch fails its CRC; one outside it changes fields
    the broker sets itself), and the partition reads end to end."""
    addresses, errors = broker
    before = stored_values(addresses)
    answers = answered_frames(exchange(addresses["KAFKA"], FRAMES[0]))
    assert len(answers) == 1
    values = stored_values(addresses)
    assert len(values) == len(before) + 2
    assert set(values) <= PRODUCED, set(values) - PRODUCED
    assert not errors.records, [r.getMessage() for r in errors.records]
