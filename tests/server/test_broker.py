"""A real broker process over TCP: produce/fetch, pipelining, long poll, bad input,
groups, metrics. (Crash, restart and idempotence tests: test_broker_recovery.py.)"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request

import msgpack
import pyarrow as pa
import pytest

from sparklog.errors import (
    CorruptRecordError,
    IllegalGenerationError,
    InvalidRecordError,
    InvalidTopicError,
    RebalanceInProgressError,
    RecordTooLargeError,
    SchemaMismatchError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
)
from sparklog.format.frame import encode_frame, iter_frames
from sparklog.protocol import ApiKey, Connection, encode_request
from tests.support.brokerproc import BrokerProcess
from tests.support.processes import free_port
from tests.support.waiting import wait_until
from tests.support.wire import (
    closed_within,
    create,
    fetch,
    fetch_body,
    frame_of,
    produce,
    read_values,
)

MAX_REQUEST = 200_000
MAX_MESSAGE = 50_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("broker")
    (root / "log").mkdir()
    metrics_port = free_port()
    proc = BrokerProcess((root / "log").as_uri(), [
        "--override", f"socket.request.max.bytes={MAX_REQUEST}",
        "--override", f"message.max.bytes={MAX_MESSAGE}",
        "--metrics-port", str(metrics_port)], log_path=root / "broker.log")
    proc.metrics_port = metrics_port
    with proc:
        yield proc


@pytest.fixture
def conn(broker):
    with Connection(broker.address, client_id="test") as c:
        yield c


def error_of(item):
    return error_for_code(item["error_code"])


@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_produce_fetch_round_trip(conn, acks, compression):
    topic = f"rt-{compression}-{acks + 1}"
    assert create(conn, topic, 2)["error_code"] == 0
    expected = {0: [], 1: []}
    for i in range(6):
        p = i % 2
        values = [f"{topic}-{i}-{j}".encode() for j in range(i + 1)]
        expected[p] += values
        records = frame_of(values, compression=compression)
        if acks == 0:
            conn.send(ApiKey.PRODUCE, {"acks": 0, "topics": [
                {"name": topic, "partitions": [{"partition": p, "records": records}]}]})
        else:
            item = produce(conn, topic, p, records, acks)
            assert item["error_code"] == 0
    if acks == 0:  # no responses: wait until everything is visible
        deadline = time.monotonic() + 60
        while sum(len(read_values(conn, topic, p)) for p in (0, 1)) < 21:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    for p in (0, 1):
        assert read_values(conn, topic, p) == expected[p]
        codec = {frame.header.codec for frame in iter_frames(fetch(conn, topic, p, 0)["records"])}
        assert codec == {compression}


def test_stored_bytes_returned_unchanged_but_stamped(conn):
    create(conn, "unchanged")
    frames = [frame_of([b"x" * 10]), frame_of([b"y", b"z"])]
    produce(conn, "unchanged", 0, frames[0])
    base = produce(conn, "unchanged", 0, frames[1])["base_offset"]
    assert base == 1
    data = fetch(conn, "unchanged", 0, 0)["records"]
    n = len(frames[0])
    assert len(data) == n + len(frames[1])
    # only base offset (bytes 0-7) and leader epoch (12-15) differ from what was sent
    for got, sent in ((data[:n], frames[0]), (data[n:], frames[1])):
        assert got[8:12] == sent[8:12] and got[16:] == sent[16:]
    got = list(iter_frames(data))
    assert [f.header.base_offset for f in got] == [0, 1]
    assert got[0].header.leader_epoch >= 0


def test_pipelined_requests_answered_in_order(conn):
    create(conn, "pipe")
    ids = [conn.send(ApiKey.PRODUCE, {"acks": 1, "topics": [{"name": "pipe", "partitions": [
        {"partition": 0, "records": frame_of([str(i)])}]}]}) for i in range(50)]
    conn.send(ApiKey.METADATA, {"topics": ["pipe"]})
    offsets = [conn.receive()["topics"][0]["partitions"][0]["base_offset"] for _ in ids]
    assert offsets == list(range(50))
    assert conn.receive()["topics"][0]["name"] == "pipe"


def test_fetch_long_poll_wakes_on_produce(broker, conn):
    create(conn, "poll")
    produce(conn, "poll", 0, frame_of(["a"]))
    start = time.monotonic()
    empty = fetch(conn, "poll", 0, 1, max_wait_ms=300)
    assert empty["records"] == b"" and time.monotonic() - start >= 0.25

    def later():
        time.sleep(0.3)
        with Connection(broker.address) as other:
            produce(other, "poll", 0, frame_of(["b"]))

    t = threading.Thread(target=later)
    t.start()
    start = time.monotonic()
    item = fetch(conn, "poll", 0, 1, max_wait_ms=60_000)
    elapsed = time.monotonic() - start
    t.join()
    assert [f.header.base_offset for f in iter_frames(item["records"])] == [1]
    assert elapsed < 30  # woken by the produce, not by the poll's 60 s


def test_list_offsets(conn):
    create(conn, "times")
    for ts in (1000, 2000, 3000):
        produce(conn, "times", 0, frame_of(["v"], timestamps=[ts]))
    res = conn.request(ApiKey.LIST_OFFSETS, {"topics": [{"name": "times", "partitions": [
        {"partition": 0, "timestamp": t} for t in (-1, -2, 1500, 3000, 9999)]}]})
    got = [p["offset"] for p in res["topics"][0]["partitions"]]
    assert got == [3, 0, 1, 2, -1]


def test_unknown_topic_partition_and_invalid_name(conn):
    assert error_of(produce(conn, "nope", 0, frame_of(["a"]))) is UnknownTopicOrPartitionError
    create(conn, "one")
    assert error_of(produce(conn, "one", 5, frame_of(["a"]))) is UnknownTopicOrPartitionError
    assert error_of(fetch(conn, "nope", 0, 0)) is UnknownTopicOrPartitionError
    for bad in ("a/b", "..", "bad\x01name", ""):
        item = create(conn, bad)
        assert error_of(item) is InvalidTopicError, bad
        assert item["error_message"]


def test_wrong_crc_refused_nothing_appended(conn):
    create(conn, "crc")
    good = frame_of(["ok"])
    bad = bytearray(frame_of(["bad"]))
    bad[-1] ^= 0xFF
    for records in (good + bytes(bad), bytes(bad), bytes(bad) + good):
        item = produce(conn, "crc", 0, records)
        assert error_of(item) is CorruptRecordError and "CRC32C" in item["error_message"]
        assert fetch(conn, "crc", 0, 0)["high_watermark"] == 0
    assert produce(conn, "crc", 0, good)["base_offset"] == 0


def test_truncated_frame_and_garbage_records(conn):
    create(conn, "trunc")
    f = frame_of(["abc"])
    assert error_of(produce(conn, "trunc", 0, f[:-5])) is CorruptRecordError
    assert error_of(produce(conn, "trunc", 0, b"\x00" * 100)) is CorruptRecordError
    assert produce(conn, "trunc", 0, f)["base_offset"] == 0


def test_oversized_frame_and_request(conn):
    create(conn, "big")
    item = produce(conn, "big", 0, frame_of([b"x" * (MAX_MESSAGE + 10)]))
    assert error_of(item) is RecordTooLargeError
    # a request above socket.request.max.bytes: error response, connection stays usable
    conn.send(ApiKey.PRODUCE, {"acks": 1, "topics": [{"name": "big", "partitions": [
        {"partition": 0, "records": b"\x00" * (MAX_REQUEST + 1000)}]}]})
    with pytest.raises(RecordTooLargeError, match="socket.request.max.bytes"):
        raise error_for_code(conn.receive()["error_code"])(
            "socket.request.max.bytes")
    assert produce(conn, "big", 0, frame_of(["small"]))["base_offset"] == 0


def test_unknown_api_and_version_keep_connection(conn):
    conn.send(999, {})
    res = conn.receive()
    assert error_for_code(res["error_code"]) is UnsupportedVersionError
    res = conn.request(ApiKey.API_VERSIONS)
    assert [ApiKey.FETCH, 0, 0] in res["api_versions"]
    conn.send(ApiKey.FETCH, {}, api_version=3)
    assert error_for_code(conn.receive()["error_code"]) is UnsupportedVersionError
    conn.send(ApiKey.PRODUCE, {"topics": "not a list"})
    res = conn.receive()
    assert res["error_code"] == 42 and "Produce.topics" in res["error_message"]


def test_typed_topic_schema_mismatch(conn):
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert create(conn, "typed", schema=schema.serialize().to_pybytes())["error_code"] == 0
    good = encode_frame(pa.record_batch([pa.array([1, 2]), pa.array(["a", "b"])], schema=schema))
    assert produce(conn, "typed", 0, good)["base_offset"] == 0
    wrong = encode_frame(pa.record_batch([pa.array(["1"]), pa.array(["a"])], names=["id", "name"]))
    item = produce(conn, "typed", 0, wrong)
    assert error_of(item) is SchemaMismatchError and "typed" in item["error_message"]
    # its own code, not Kafka's INVALID_RECORD (87: a keyless record on a compacted topic)
    assert item["error_code"] == 1002 and InvalidRecordError.code == 87
    item = produce(conn, "typed", 0, frame_of(["raw"]))
    assert error_of(item) is SchemaMismatchError
    item = produce(conn, "unchanged", 0, good)  # typed frame into a raw topic
    assert error_of(item) is SchemaMismatchError
    res = conn.request(ApiKey.DESCRIBE_CONFIGS, {"topics": ["typed"]})["topics"][0]
    assert pa.ipc.read_schema(pa.py_buffer(res["schema"])).equals(schema)


def _assert_serving(broker):
    with Connection(broker.address) as other:
        assert other.request(ApiKey.API_VERSIONS)["error_code"] == 0


def _raw_socket(broker):
    s = socket.create_connection((broker.host, broker.port), timeout=10)
    return s


def test_large_request_arriving_in_slow_pieces(broker, conn):
    # a request larger than the receiver's staging buffer, trickled in: the socket
    # fills the request's own buffer across many reads before it is decoded
    from sparklog.protocol.codec import decode_response
    from sparklog.protocol.stream import recv_message

    create(conn, "trickle")
    values = [b"%06d" % i + b"x" * 200 for i in range(400)]
    body = {"acks": 1, "topics": [{"name": "trickle", "partitions": [
        {"partition": 0, "records": b"".join(frame_of(values[i:i + 100])
                                              for i in range(0, len(values), 100))}]}]}
    message = encode_request(ApiKey.PRODUCE, body, correlation_id=7)
    assert 64 * 1024 < len(message) < 200_000  # staging buffer < it < request limit
    with _raw_socket(broker) as s:
        for start in range(0, len(message), 10_000):
            s.sendall(message[start:start + 10_000])
            time.sleep(0.01)
        correlation_id, res = decode_response(recv_message(s), ApiKey.PRODUCE)
    assert correlation_id == 7
    part = res["topics"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["base_offset"] == 0
    assert read_values(conn, "trickle", 0) == values


def test_garbage_and_truncated_requests_close_only_that_connection(broker):
    s = _raw_socket(broker)
    s.sendall(b"\xff\xff\xff\xfe garbage")  # negative size
    assert closed_within(s) == b""
    s.close()
    s = _raw_socket(broker)
    s.sendall(struct.pack(">i", 4) + b"abcd")  # too short for a header
    assert closed_within(s) == b""
    s.close()
    s = _raw_socket(broker)  # truncated: half a request, then the client goes away
    msg = encode_request(ApiKey.METADATA, {}, 1)
    s.sendall(msg[: len(msg) // 2])
    s.close()
    s = _raw_socket(broker)  # a valid header then a garbage body: answered with an error
    s.sendall(struct.pack(">ihhih", 10 + 3, ApiKey.METADATA, 0, 77, 0) + b"\xc1\xc1\xc1")
    s.settimeout(10)
    size = struct.unpack(">i", s.recv(4))[0]
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    assert struct.unpack(">i", data[:4])[0] == 77
    assert msgpack.unpackb(data[4:])["error_code"] == 42
    s.close()
    _assert_serving(broker)
    wait_until(lambda: all(s in broker.log_text() for s in (
        "invalid request size", "header truncated", "connection closed after")),
        what="the broker's log of the three bad connections")


def test_random_bytes_over_the_wire(broker):
    import random

    rng = random.Random(7)
    for _ in range(20):
        s = _raw_socket(broker)
        s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))))
        s.shutdown(socket.SHUT_WR)
        s.settimeout(10)
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
        s.close()
    _assert_serving(broker)


def test_groups_join_assign_heartbeat_commit(broker, conn):
    create(conn, "grp", 4)
    results = {}

    def join(name):
        with Connection(broker.address, client_id=name) as c:
            results[name] = c.request(ApiKey.JOIN_GROUP, {
                "group_id": "g1", "topics": ["grp"], "rebalance_timeout_ms": 2000,
                "session_timeout_ms": 5000})

    first = threading.Thread(target=join, args=("a",))
    first.start()
    first.join()
    assert results["a"]["assignment"] == [{"name": "grp", "partitions": [0, 1, 2, 3]}]
    member_a, gen = results["a"]["member_id"], results["a"]["generation_id"]
    # b joins: a must learn about the rebalance from its heartbeat, then rejoin
    second = threading.Thread(target=join, args=("b",))
    second.start()
    wait_until(lambda: conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": ["g1"]})
               ["groups"][0]["state"] == "PreparingRebalance", what="b's join rebalancing g1")
    hb = conn.send(ApiKey.HEARTBEAT, {"group_id": "g1", "generation_id": gen,
                                      "member_id": member_a})
    assert hb and error_for_code(conn.receive()["error_code"]) is RebalanceInProgressError
    again = conn.request(ApiKey.JOIN_GROUP, {"group_id": "g1", "member_id": member_a,
                                             "topics": ["grp"], "session_timeout_ms": 5000})
    second.join()
    parts = sorted(again["assignment"][0]["partitions"] + results["b"]["assignment"][0]["partitions"])
    assert parts == [0, 1, 2, 3] and again["generation_id"] == gen + 1
    conn.send(ApiKey.OFFSET_COMMIT, {"group_id": "g1", "generation_id": gen,
                                     "member_id": member_a, "topics": [
                                         {"name": "grp", "partitions": [{"partition": 0, "offset": 5}]}]})
    item = conn.receive()["topics"][0]["partitions"][0]
    assert error_of(item) is IllegalGenerationError
    res = conn.request(ApiKey.OFFSET_COMMIT, {"group_id": "g1", "generation_id": gen + 1,
                                              "member_id": member_a, "topics": [
                                                  {"name": "grp", "partitions": [
                                                      {"partition": 0, "offset": 5, "metadata": "m"}]}]})
    assert res["topics"][0]["partitions"][0]["error_code"] == 0
    got = conn.request(ApiKey.OFFSET_FETCH, {"group_id": "g1", "topics": [
        {"name": "grp", "partitions": [0, 1]}]})["topics"][0]["partitions"]
    assert [(p["offset"], p["metadata"]) for p in got] == [(5, "m"), (-1, "")]
    desc = conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": ["g1", "none"]})["groups"]
    assert desc[0]["state"] == "Stable" and len(desc[0]["members"]) == 2
    assert desc[1]["state"] == "Dead"
    assert {"group_id": "g1", "state": "Stable", "protocol_type": "consumer"} \
        in conn.request(ApiKey.LIST_GROUPS)["groups"]
    # both members stop heartbeating: sessions expire after 5 s... leave instead
    conn.request(ApiKey.LEAVE_GROUP, {"group_id": "g1", "member_id": member_a})


def test_session_timeout_removes_member(broker, conn):
    create(conn, "sess")
    res = conn.request(ApiKey.JOIN_GROUP, {"group_id": "g2", "topics": ["sess"],
                                           "session_timeout_ms": 300})
    wait_until(lambda: not conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": ["g2"]})
               ["groups"][0]["members"], what="g2's only member expired (300 ms session)")
    conn.send(ApiKey.HEARTBEAT, {"group_id": "g2", "generation_id": res["generation_id"],
                                 "member_id": res["member_id"]})
    assert conn.receive()["error_code"] == 25  # UnknownMemberId


def test_metrics_endpoint(broker, conn):
    create(conn, "metered")
    produce(conn, "metered", 0, frame_of(["m"]))
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    assert 'sparklog_network_requestmetrics_requests_total{request="Produce"}' in text
    assert 'sparklog_log_log_logendoffset{partition="0",topic="metered"} 1.0' in text
    assert "sparklog_network_requestmetrics_totaltime_seconds_bucket" in text
    assert 'sparklog_server_brokertopicmetrics_bytesin_total{topic="metered"}' in text


def _connection_count(broker) -> float:
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    line = next(x for x in text.splitlines()
                if x.startswith("sparklog_server_socket_server_metrics_connection_count "))
    return float(line.split()[1])


def test_client_closing_with_a_fetch_in_flight_is_no_warning(broker, conn):
    # a consumer that closes while its long-poll fetch waits is a normal close: the
    # broker's answer finds the socket gone, which it logs at DEBUG, not as a WARNING
    create(conn, "closing")
    wait_until(lambda: _connection_count(broker) == 1, timeout=30,
               what="only the test's own connection open")
    before = broker.log_text().count("cannot send response")
    for _ in range(3):
        s = _raw_socket(broker)
        s.sendall(encode_request(ApiKey.FETCH, fetch_body("closing", 0, 0, max_wait_ms=200), 7,
                                 client_id="closing-consumer"))
        s.close()
    wait_until(lambda: _connection_count(broker) == 1, timeout=30,
               what="the closed connections served to their end")
    assert broker.log_text().count("cannot send response") == before, broker.log_text()[-2000:]
