"""Memory and availability before authentication (issue #33, items 5-9): refused requests
that kept themselves alive, trickling clients holding the request byte budget and
outliving the authentication timeout, quota buckets never freed and bypassed by
rotating client ids, an unbounded rebalance timeout, duplicate topics and partitions.

Every test talks to a real broker (a process where its memory is measured, from
``/proc/<pid>/status``) over loopback; the loads are the issue's, scaled down."""

from __future__ import annotations

import gc
import socket
import struct
import threading
import time
import weakref

import pytest

from sparklog.clients.admin import Admin
from sparklog.errors import InvalidArgumentError
from sparklog.protocol import ApiKey, Connection, encode_request
from sparklog.protocol.codec import MAX_CLIENT_ID_BYTES
from sparklog.protocol.schema import check
from sparklog.security.quotas import DEFAULT
from sparklog.server.embedded import EmbeddedBroker
from tests.support.brokerproc import BrokerProcess
from tests.support.processes import rss_bytes
from tests.support.waiting import wait_until
from tests.support.wire import closed_within, create, frame_of

MiB = 1 << 20


def broker(tmp_path, *overrides) -> BrokerProcess:
    args = [a for o in overrides for a in ("--override", o)]
    return BrokerProcess((tmp_path / "log").as_uri(), args, log_path=tmp_path / "b.log")


def pipelined(address, count, body_of, client_id_of=lambda i: "sparklog",
              api_key=ApiKey.API_VERSIONS, window=64) -> list:
    """Send ``count`` requests on one connection, at most ``window`` in flight; their
    responses (unvalidated)."""
    out = []
    with Connection(address, timeout=60) as conn:
        for i in range(count):
            conn.client_id = client_id_of(i)
            conn.send(api_key, body_of(i))
            if conn.in_flight >= window:
                out.append(conn.receive(validate=False))
        while conn.in_flight:
            out.append(conn.receive(validate=False))
    return out


# --- item 5: a refused request is not kept ----------------------------------------------------


class _Payload:
    """A value of no type any spec accepts."""


def test_a_value_refused_by_the_schema_is_not_kept():
    refs = []
    for _ in range(3):
        value = _Payload()
        refs.append(weakref.ref(value))
        with pytest.raises(InvalidArgumentError, match=r"body\.topics\[0\]"):
            check({"topics": [value]}, {"topics": [str]})
        del value
    gc.collect()
    assert [r() for r in refs] == [None, None, None], \
        "the schema check keeps refused values alive (an exception raised again)"


def test_requests_refused_by_the_schema_do_not_grow_the_broker(tmp_path):
    """400 KiB Metadata requests whose topics are not strings, unauthenticated: each is
    answered with an error and forgotten (they used to stay referenced from the
    traceback of one exception instance raised again, 274 MiB for 300 of them)."""
    blob = b"x" * (400 << 10)
    body = {"topics": [blob]}  # a bin where a str is due: refused by the schema
    with broker(tmp_path) as b:
        def batch():
            answers = pipelined(b.address, 60, lambda i: body, api_key=ApiKey.METADATA,
                                window=4)
            assert all(a["error_code"] != 0 for a in answers)
        batch()  # warm up: the allocator's pools, the receive buffers
        before = rss_bytes(b.pid)
        for _ in range(3):
            batch()
        grown = rss_bytes(b.pid) - before
        # kept, 180 requests of 400 KiB would be 70 MiB
        assert grown < 24 * MiB, f"RSS grew {grown / MiB:.0f} MiB over 180 refused requests"


def _depth(exc: BaseException) -> int:
    tb, n = exc.__traceback__, 0
    while tb is not None:
        tb, n = tb.tb_next, n + 1
    return n


def test_an_offline_partition_raises_a_new_error_each_time(tmp_path):
    """The same pattern in the log: an offline partition's error, raised again on every
    append, grew its traceback by each refused call's frames (and their frames' bytes)."""
    from sparklog.errors import StorageError
    from sparklog.format.frame import encode_frame, raw_batch
    from sparklog.log import PartitionLog
    from sparklog.storage import open_fileio

    d = tmp_path / "t" / "0"
    d.mkdir(parents=True)
    frame = encode_frame(raw_batch([b"v"] * 10))
    with PartitionLog.open(open_fileio(tmp_path.as_uri()), d.as_uri()) as plog:
        plog.append(frame)
        plog.flush()
        for f in d.glob("*.log"):
            f.unlink()  # the active segment vanishes under its writer
        with pytest.raises(StorageError):
            plog.append(frame)
            plog.flush()
        depths = []
        for _ in range(4):
            with pytest.raises(StorageError, match="offline") as refused:
                plog.append(frame)
            depths.append(_depth(refused.value))
        assert len(set(depths)) == 1, f"traceback depths {depths}: one error raised again"
        assert plog.offline is not plog.offline


# --- item 6: trickling clients --------------------------------------------------------------


class Trickler(threading.Thread):
    """A client that announces a request of ``size`` bytes, sends ``first`` bytes of it,
    then one byte every ``every`` seconds until the broker closes the connection
    (:attr:`closed_after`: seconds from its first trickled byte, None while open)."""

    def __init__(self, address, size, first, every=0.2, prefix=b""):
        super().__init__(daemon=True)
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.size, self.first, self.every, self.prefix = size, first, every, prefix
        self.sent_first = threading.Event()
        self.closed_after: float | None = None
        self.stop = threading.Event()

    def run(self):
        try:
            self.sock.sendall(struct.pack(">i", self.size) + self.prefix
                              + b"\0" * (self.first - len(self.prefix)))
        except OSError:
            pass
        self.sent_first.set()
        started = time.monotonic()
        try:
            while not self.stop.is_set():
                self.sock.send(b"\0")
                self.sock.settimeout(self.every)
                try:
                    if self.sock.recv(1 << 16) == b"":
                        break
                except TimeoutError:
                    continue
        except OSError:
            pass
        self.closed_after = time.monotonic() - started

    def close(self):
        self.stop.set()
        self.join(10)
        self.sock.close()


def test_trickling_requests_do_not_block_others_and_are_dropped_at_the_deadline(tmp_path):
    """Five connections send 300 KiB of a 512 KiB request, then a byte every 0.2 s:
    between them they hold more than ``queued.max.request.bytes`` (1 MiB). Another
    client's ApiVersions and Metadata are still answered at once, and each trickled
    request is dropped once it has not arrived whole within ``request.read.timeout.ms``
    (it used to live as long as bytes kept coming, blocking everyone)."""
    with broker(tmp_path, "queued.max.request.bytes=1048576",
                "request.read.timeout.ms=2000") as b:
        tricklers = [Trickler(b.address, 512 << 10, 300 << 10) for _ in range(5)]
        try:
            for t in tricklers:
                t.start()
            for t in tricklers:
                assert t.sent_first.wait(30)
            time.sleep(0.3)  # their first 300 KiB are read (a false pass at worst)
            for _ in range(5):
                started = time.monotonic()
                with Connection(b.address, timeout=20) as conn:
                    conn.request(ApiKey.API_VERSIONS)
                    conn.request(ApiKey.METADATA, {"topics": []})
                assert time.monotonic() - started < 5.0, "a trickling client blocked others"
            wait_until(lambda: all(t.closed_after is not None for t in tricklers), 60,
                       "the trickled requests dropped")
            # each at its deadline: 2 s of trickling, or after a wait for the budget
            assert all(t.closed_after < 20 for t in tricklers), \
                [t.closed_after for t in tricklers]
            assert "request.read.timeout.ms" in b.log_text()
            with Connection(b.address, timeout=20) as conn:  # the budget is free again
                assert create(conn, "after")["error_code"] == 0
                big = frame_of([b"v" * 1000] * 600)
                res = conn.request(ApiKey.PRODUCE, {"acks": 1, "topics": [{
                    "name": "after", "partitions": [{"partition": 0, "records": big}]}]})
                assert res["topics"][0]["partitions"][0]["error_code"] == 0
        finally:
            for t in tricklers:
                t.close()


def test_authentication_is_bounded_while_a_request_trickles_in(tmp_path):
    """On a SASL listener ``authentication.timeout.ms`` bounds the whole
    authentication, also while a request's bytes trickle in (a byte every 0.2 s used to
    keep the connection open past it, 38 s for this request)."""
    (tmp_path / "log").mkdir()
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
             "sasl.enabled.mechanisms": "PLAIN",
             "authentication.timeout.ms": "1000"}
    with EmbeddedBroker((tmp_path / "log").as_uri(), props) as eb:
        header = encode_request(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}, 1)[4:14]
        # a 200-byte request: its header, then a byte every 0.2 s
        t = Trickler(eb.address, 200, len(header), every=0.2, prefix=header)
        try:
            t.start()
            wait_until(lambda: t.closed_after is not None, 30, "the connection closed")
            assert t.closed_after < 5.0, f"closed after {t.closed_after:.1f} s of trickling"
        finally:
            t.close()


# --- items 7 and 8: quotas ----------------------------------------------------------------


def test_a_client_id_above_the_limit_is_refused(tmp_path):
    with broker(tmp_path) as b:
        host, port = b.address.rsplit(":", 1)
        header = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, 32767)
        payload = header + b"c" * 32767 + b"\x80"  # Kafka's largest client id
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(struct.pack(">i", len(payload)) + payload)
            assert closed_within(s) == b"", "a 32 KiB client id was answered"
        wait_until(lambda: f"the limit is {MAX_CLIENT_ID_BYTES}" in b.log_text(), 10,
                   "the refusal logged")
        with Connection(b.address, client_id="c" * 255) as conn:  # the longest allowed
            conn.request(ApiKey.API_VERSIONS)


def test_rotating_client_ids_keep_no_quota_buckets(tmp_path):
    """With a default client-id quota every client id has its own bucket (Kafka's
    semantics); a bucket that refilled is dropped, so 20,000 unauthenticated ApiVersions
    with distinct client ids leave nothing behind (they used to keep a bucket each)."""
    with broker(tmp_path) as b:
        with Admin(b.address) as admin:
            admin.alter_client_quotas("clients", DEFAULT, {"request_percentage": 100})
        ids = lambda base: lambda i: f"{base}-{i:06d}-" + "x" * 240  # noqa: E731
        pipelined(b.address, 2000, lambda i: {}, ids("warm"))
        before = rss_bytes(b.pid)
        for n in range(4):
            pipelined(b.address, 5000, lambda i: {}, ids(f"round{n}"))
        grown = rss_bytes(b.pid) - before
        # a bucket each would be about 20000 x 0.6 KiB = 12 MiB
        assert grown < 6 * MiB, f"RSS grew {grown / MiB:.1f} MiB over 20000 client ids"


def test_buckets_are_dropped_once_refilled_and_bounded(tmp_path):
    """The quota manager itself: buckets that refilled go, and never more than
    MAX_BUCKETS are kept."""
    from sparklog.coordination.local import LocalCoordinationStore
    from sparklog.security import quotas
    from sparklog.security.store import SecurityStore

    manager = quotas.QuotaManager(SecurityStore(LocalCoordinationStore(tmp_path.as_uri())))
    manager.alter("clients", DEFAULT, {"request_percentage": 100}, [])
    for i in range(50):
        manager.record("request_percentage", None, f"c{i}", 0.001)
    assert manager.buckets == 50
    time.sleep(quotas.SWEEP_SECONDS)  # the next sweep is due; they all refilled
    manager.record("request_percentage", None, "last", 0.001)
    assert manager.buckets == 1
    for i in range(quotas.MAX_BUCKETS + 10):
        manager.record("request_percentage", None, f"d{i}", 1.0)  # in debt: kept
    assert manager.buckets == quotas.MAX_BUCKETS


def test_a_user_quota_is_shared_by_all_its_client_ids(tmp_path):
    """A user's quota (here ANONYMOUS's, on a plaintext listener) holds whatever client
    ids its connections use: rotating them per request used to get a fresh bucket each
    time (a user limited to 100 KB/s sustained 6.8 MB/s)."""
    quota = 100_000
    with broker(tmp_path) as b:
        with Admin(b.address) as admin:
            admin.create_topic("q", 1)
            admin.alter_client_quotas("users", "ANONYMOUS", {"producer_byte_rate": quota})
        record = frame_of([b"p" * 1000] * 20)  # about 20 KB a request
        body = {"acks": 1, "topics": [{"name": "q", "partitions": [
            {"partition": 0, "records": record}]}]}
        sent = 0
        with Connection(b.address, timeout=60) as conn:
            started = time.monotonic()
            i = 0
            while time.monotonic() - started < 3.0:
                conn.client_id = f"rotating-{i}"
                i += 1
                res = conn.request(ApiKey.PRODUCE, body)
                assert res["topics"][0]["partitions"][0]["error_code"] == 0
                sent += len(record)
            rate = sent / (time.monotonic() - started)
        # the quota plus one burst (0.2 s) over 3 s, and one request's worth
        assert rate < 1.5 * quota, f"{rate:,.0f} B/s against a user quota of {quota:,}"


# --- item 9: small ----------------------------------------------------------------------------


def test_duplicates_are_asked_once_and_the_rebalance_timeout_is_bounded(tmp_path):
    with broker(tmp_path) as b, Connection(b.address, timeout=60) as conn:
        assert create(conn, "dup", 2)["error_code"] == 0
        res = conn.request(ApiKey.METADATA, {"topics": ["dup"] * 100_000})
        assert [t["name"] for t in res["topics"]] == ["dup"]
        res = conn.request(ApiKey.DESCRIBE_LOG, {"topics": [
            {"name": "dup", "partitions": [1] * 100_000},
            {"name": "dup", "partitions": [0, 1]}, {"name": "dup", "partitions": [1]}]})
        assert [(t["name"], [p["partition"] for p in t["partitions"]])
                for t in res["topics"]] == [("dup", [1, 0])]
        conn.send(ApiKey.JOIN_GROUP, {"group_id": "g", "topics": ["dup"],
                                      "rebalance_timeout_ms": 2**63 - 1})
        res = conn.receive(validate=False)
        assert res["error_code"] != 0 and "rebalance_timeout_ms" in res["error_message"]
        res = conn.request(ApiKey.JOIN_GROUP, {"group_id": "g", "topics": ["dup"],
                                               "rebalance_timeout_ms": 2**31 - 1})
        assert res["member_id"]
