"""Requests over the broker's wire protocol, as a test writes them by hand: create a
topic, produce one frame, fetch from an offset, read a partition's values back; and on
a raw socket: reading exactly n bytes, waiting for the broker to close it."""

from __future__ import annotations

import socket
import ssl
import time

from sparklog.format.frame import encode_frame, iter_frames, raw_batch
from sparklog.protocol import ApiKey


def create(conn, name, partitions=1, **extra):
    """CreateTopics of one topic; its result (``error_code``...)."""
    res = conn.request(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": partitions, **extra}]})
    return res["topics"][0]


def produce(conn, topic, partition, records, acks=1, token=None):
    """Produce to one partition; ``records`` is a frame's bytes, or values (str or bytes)
    sent as one frame; ``token``: the producer token InitProducerId answered, for frames
    with a producer id. The partition's result (``error_code``, ``base_offset``...)."""
    if not isinstance(records, (bytes, bytearray, memoryview)):
        records = frame_of(records)
    res = conn.request(ApiKey.PRODUCE, {"acks": acks, "topics": [
        {"name": topic, "partitions": [{"partition": partition, "records": records,
                                        "producer_token": token}]}]})
    return res["topics"][0]["partitions"][0]


def forge_next(conn, topic, partition=0, *, bump_epoch=False, token=None):
    """A forger's Produce: read the partition's last frame (as any reader may) and send a
    frame in its producer's name: its producer id, its epoch and next sequence (or, with
    ``bump_epoch``, its next epoch from sequence 0), with ``token`` (none by default).
    The partition's result."""
    from sparklog.format.header import unpack_header

    item = fetch(conn, topic, partition, 0)
    assert item["error_code"] == 0 and item["records"], item
    records, pos, h = item["records"], 0, None
    while pos < len(records):
        h = unpack_header(records, pos)
        pos += h.size
    epoch, seq = (h.producer_epoch + 1, 0) if bump_epoch else \
        (h.producer_epoch, h.base_sequence + h.last_offset_delta + 1)
    forged = encode_frame(raw_batch([b"forged"]), producer_id=h.producer_id,
                          producer_epoch=epoch, base_sequence=seq)
    return produce(conn, topic, partition, forged, acks=-1, token=token)


def fetch_body(topic, partition, offset, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20):
    """The body of a Fetch request of one partition from ``offset``."""
    return {"max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "topics": [
        {"name": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                        "partition_max_bytes": max_bytes}]}]}


def fetch(conn, topic, partition, offset, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20):
    """Fetch one partition from ``offset``; the partition's result (``records``...)."""
    res = conn.request(ApiKey.FETCH, fetch_body(topic, partition, offset, max_wait_ms,
                                                min_bytes, max_bytes))
    return res["topics"][0]["partitions"][0]


def read_values(conn, topic, partition, start=0):
    """Every value from ``start`` to the high watermark, in offset order."""
    return try_read_values(conn, topic, partition, start, strict=True)


def try_read_values(conn, topic, partition, start=0, strict=False):
    """As :func:`read_values`, or None when the broker answers a fetch with an error
    (it no longer leads the partition, for one) and ``strict`` is false."""
    values, offset = [], start
    while True:
        item = fetch(conn, topic, partition, offset)
        if item["error_code"] and not strict:
            return None
        assert item["error_code"] == 0, item
        if not item["records"]:
            return values
        for frame in iter_frames(item["records"]):
            batch = frame.batch()
            for i, v in enumerate(batch.column("value").to_pylist()):
                if frame.header.base_offset + i >= offset:
                    values.append(v)
            offset = frame.header.next_offset


def frame_of(values, **kw):
    """One raw frame of ``values`` (str values encoded as UTF-8)."""
    return encode_frame(raw_batch([v if isinstance(v, bytes) else v.encode() for v in values]),
                        **kw)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    """The next ``n`` bytes of ``sock``; ConnectionError when the peer closes it first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the peer closed the connection after {len(data)} of "
                                  f"{n} bytes")
        data += chunk
    return data


def closed_within(sock: socket.socket, seconds: float = 60.0) -> bytes:
    """Read until the peer closes the socket (bounded by ``seconds``, AssertionError
    after: the broker kept it open); return what arrived before."""
    sock.settimeout(seconds)
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return data
        except socket.timeout:
            break
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the broker kept the connection open for {seconds}s")
