"""Polled connections (no reader thread: the owner reads its answers in ``poll()``) and
the consumer that fetches on them: the responses complete in the polling thread, an
answer that arrived in time survives a late poll, a silent peer and a peer that stops
in the middle of a response fail the request with errors that say so."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from sparklog.clients.consumer import Consumer
from sparklog.clients.network.connection import BrokerConnection
from sparklog.clients.network.network import NetworkClient
from sparklog.clients.producer import Producer
from sparklog.clients.types import TopicPartition
from sparklog.errors import RequestTimedOutError
from sparklog.protocol.apis import ApiKey
from sparklog.protocol.codec import SIZE, encode_request
from sparklog.protocol.stream import recv_message
from tests.support.waiting import wait_until


def reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sparklog-conn-")]


def test_a_polled_connection_completes_its_futures_in_the_polling_thread(broker):
    before = reader_threads()
    conn = BrokerConnection(*broker.address.split(":"), polled=True)
    try:
        assert reader_threads() == before  # no reader thread of its own
        ran_in = []
        future = conn.send(ApiKey.API_VERSIONS, {})
        future.add_callback(lambda body: ran_in.append(threading.current_thread()))
        wait_until(conn.ready, 30, "the ApiVersions answer to arrive")
        assert not future.is_done  # arrived, but nobody polled yet
        assert conn.poll(5.0)
        assert future.succeeded() and ran_in == [threading.current_thread()]
        assert conn.request(ApiKey.API_VERSIONS, {})["api_versions"]  # request() polls
    finally:
        conn.close()


def test_an_answer_that_arrived_in_time_survives_a_late_poll(broker):
    conn = BrokerConnection(*broker.address.split(":"), polled=True, request_timeout_ms=200)
    try:
        future = conn.send(ApiKey.API_VERSIONS, {})
        deadline = conn.next_deadline
        wait_until(conn.ready, 30, "the ApiVersions answer to arrive")
        wait_until(lambda: time.monotonic() > deadline + 0.3, 5, "the request's deadline")
        conn.poll(0.0)  # the watchdog left it alone: nobody was reading
        assert future.succeeded() and conn.connected
    finally:
        conn.close()


@pytest.fixture
def silent_peer():
    """A listening socket that accepts and keeps its connections, answering only what
    the test writes to them."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept():
        try:
            accepted.append(server.accept()[0])
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    for s in accepted:
        s.close()
    server.close()


def test_a_silent_peer_times_the_request_out_in_poll(silent_peer):
    port, _ = silent_peer
    conn = BrokerConnection("127.0.0.1", port, polled=True, request_timeout_ms=300)
    future = conn.send(ApiKey.API_VERSIONS, {})
    started = time.monotonic()
    while not future.is_done and time.monotonic() - started < 30:
        conn.poll(1.0)
    with pytest.raises(RequestTimedOutError, match="got no response within its timeout"):
        future.get(0)
    assert not conn.connected


def test_a_peer_that_stops_mid_response_is_cut_off_by_the_watchdog(silent_peer):
    port, accepted = silent_peer
    conn = BrokerConnection("127.0.0.1", port, polled=True, request_timeout_ms=300)
    future = conn.send(ApiKey.API_VERSIONS, {})
    wait_until(lambda: accepted, 30, "the peer to accept")
    accepted[0].sendall(struct.pack(">i", 1000) + b"\0" * 10)  # 10 of 1000 bytes
    # the request's deadline may pass before the bytes arrive (a loaded machine); the
    # bytes that arrived are read first and the read gets its own timeout from then on
    wait_until(conn.ready, 30, "the first bytes of the response to arrive")
    started = time.monotonic()
    while not future.is_done and time.monotonic() - started < 30:
        conn.poll(30.0)  # blocks in the read until the watchdog closes the connection
    with pytest.raises(RequestTimedOutError, match="1000 bytes was announced"):
        future.get(0)


def test_a_response_read_after_its_deadline_gets_its_own_timeout(broker, silent_peer):
    # a real broker's answer to the first request, replayed by the peer in two parts
    with socket.create_connection(broker.address.split(":")) as raw:
        raw.sendall(encode_request(ApiKey.API_VERSIONS, {}, 1, ""))
        answer = SIZE.pack(len(payload := recv_message(raw))) + bytes(payload)
    port, accepted = silent_peer
    conn = BrokerConnection("127.0.0.1", port, polled=True, request_timeout_ms=500)
    try:
        future = conn.send(ApiKey.API_VERSIONS, {})
        deadline = conn.next_deadline
        wait_until(lambda: accepted, 30, "the peer to accept")
        accepted[0].sendall(answer[:8])
        wait_until(lambda: time.monotonic() > deadline + 0.3, 5, "the request's deadline")
        rest = threading.Timer(0.3, accepted[0].sendall, (answer[8:],))
        rest.start()  # arrives while poll() reads, after the deadline
        conn.poll(30.0)
        rest.join()
        assert future.succeeded() and future.value["api_versions"]
    finally:
        conn.close()


def test_the_consumer_fetches_without_a_reader_thread(broker, admin):
    admin.create_topic("polled-fetch", 1)
    with Producer(broker.address, linger_ms=0) as producer:
        for i in range(20):
            producer.send("polled-fetch", b"v%d" % i)
        producer.flush(20)
    before = len(reader_threads())
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("polled-fetch", 0)])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=100).values():
                got.extend(r.value for r in records)
        assert got == [b"v%d" % i for i in range(20)]
        # one threaded connection (metadata, offsets); the fetches are read by poll()
        assert len(reader_threads()) - before == 1
        client: NetworkClient = c._client
        assert [conn.polled for conn in client._polled.values()] == [True]


def test_poll_returns_its_records_with_the_next_fetch_already_in_flight(broker, admin):
    """Pipelining is kept now that the next Fetch is sent after the records are taken:
    when ``poll()`` returns records, the fetch for what follows them is on its way, and
    it is answered with records produced while the application works."""
    admin.create_topic("pipelined", 1)
    tp = TopicPartition("pipelined", 0)
    with Producer(broker.address, linger_ms=0) as producer, \
            Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest") as c:
        c.assign([tp])
        producer.send("pipelined", b"first").get(20)
        got = wait_until(lambda: c.poll(timeout_ms=100).get(tp), 30,
                         "poll() did not return the first record")
        assert [r.value for r in got] == [b"first"]
        fetcher = c._fetcher
        assert fetcher._in_flight, "poll() returned records with no fetch in flight"
        assert fetcher.states[tp].fetch_offset == 1, "the fetch in flight is not for offset 1"
        producer.send("pipelined", b"second").get(20)
        # the fetch sent before the first poll returned is the one that brings it
        got = wait_until(lambda: c.poll(timeout_ms=100).get(tp), 30,
                         "poll() did not return the second record")
        assert [r.value for r in got] == [b"second"]


def test_the_producer_sender_reads_its_own_answers_and_wakes_for_a_send(broker, admin):
    admin.create_topic("polled-produce", 1)
    before = len(reader_threads())
    with Producer(broker.address, linger_ms=0) as producer:
        producer.send("polled-produce", b"first").get(30)
        acc = producer._accumulator
        took = []
        for i in range(5):  # each send meets a sender waiting in its poll (capped at 1 s)
            wait_until(lambda: acc.sender_waiting, 30, "the sender to wait for work")
            started = time.monotonic()
            producer.send("polled-produce", b"v%d" % i).get(30)
            took.append(time.monotonic() - started)
        assert min(took) < 0.5, took  # woken by the send, not by the poll's 1 s cap
        # one threaded connection (metadata); the Produce answers are read by the sender
        assert len(reader_threads()) - before == 1
        client: NetworkClient = producer._client
        assert [conn.polled for conn in client._polled.values()] == [True]
