"""The broker's short path from a produce to the fetch it wakes (docs/performance.md,
"Latency"): a small acks=1 append to an idle local partition is appended and answered
within ``submit()``, anything else waits its turn behind queued work without the event
loop ever waiting for the log's lock; a parked fetch of several partitions is woken by
an append to any of them; a connection's answers keep the request order when a later
request finishes first (a handler the sender waits for writes its own answer)."""

from __future__ import annotations

import asyncio
import time

import pytest

from sparklog.format.frame import iter_frames
from sparklog.protocol import ApiKey, Connection
from sparklog.server import EmbeddedBroker
from sparklog.server.server import ClientConnection
from tests.support.logdata import lock_held_elsewhere
from tests.support.waiting import wait_until
from tests.support.wire import create, fetch, fetch_body, frame_of, produce


@pytest.fixture
def eb(tmp_path):
    """An in-process broker on the local disk with topic ``short`` (2 partitions)."""
    with EmbeddedBroker((tmp_path / "log").as_uri()) as broker:
        with Connection(broker.address) as conn:
            assert create(conn, "short", 2)["error_code"] == 0
        yield broker


def wait_parked(eb, *partitions) -> None:
    """Wait until a fetch waits on each of ``partitions`` of ``short``."""
    writers = eb.broker.partitions.writers
    wait_until(lambda: all(("short", p) in writers and writers[("short", p)]._waiters
                           for p in partitions), 30,
               f"a fetch parked on partitions {partitions}")


def on_loop(eb, coro):
    """Run ``coro`` on the broker's event loop; its result."""
    return asyncio.run_coroutine_threadsafe(coro, eb.broker.loop).result(60)


def test_a_small_acks1_append_to_an_idle_local_partition_is_done_in_submit(eb):
    async def submit_one():
        writer = await eb.broker.partitions.writer("short", 0)
        future = writer.submit(frame_of(["a", "b"]), 1)
        return future.done(), (await future)

    done_on_return, result = on_loop(eb, submit_one())
    assert done_on_return, "appended on the spot: answered before submit() returned"
    assert result.error is None and result.base_offset == 0 and result.records == 2
    with Connection(eb.address) as conn:
        frames = list(iter_frames(fetch(conn, "short", 0, 0)["records"]))
    assert [v.as_py() for f in frames for v in f.batch().column("value")] == [b"a", b"b"]


def test_a_request_behind_queued_work_waits_its_turn_in_order(eb):
    async def behind_a_durable_one():
        writer = await eb.broker.partitions.writer("short", 0)
        durable = writer.submit(frame_of(["synced"]), -1)  # acks=all: never on the spot
        quick = writer.submit(frame_of(["after"]), 1)
        waited = not durable.done() and not quick.done()
        return waited, (await durable), (await quick)

    waited, durable, quick = on_loop(eb, behind_a_durable_one())
    assert waited, "a request submitted behind a queued one is queued too"
    assert durable.error is None and quick.error is None
    assert (durable.base_offset, quick.base_offset) == (0, 1)


def test_the_event_loop_never_waits_for_a_log_lock_another_thread_holds(eb):
    writer = on_loop(eb, eb.broker.partitions.writer("short", 1))
    with lock_held_elsewhere(writer.log):
        async def submit_while_held():
            future = writer.submit(frame_of(["x"]), 1)
            return future, future.done()

        future, done_on_return = on_loop(eb, submit_while_held())
        assert not done_on_return, "appended although another thread held the log's lock"
        # the loop keeps serving meanwhile (the writer task has had its turns): a
        # metadata request is answered, the append still waits for the lock
        with Connection(eb.address) as conn:
            assert conn.request(ApiKey.METADATA, {"topics": ["short"]})["topics"]
        assert not future.done()
    result = asyncio.run_coroutine_threadsafe(asyncio.wait_for(
        asyncio.shield(future), 30), eb.broker.loop).result(60)
    assert result.error is None and result.base_offset == 0


def test_a_parked_fetch_of_two_partitions_is_woken_by_either(eb):
    with Connection(eb.address) as conn, Connection(eb.address) as other:
        produce(other, "short", 0, ["old"])
        body = {"max_wait_ms": 60_000, "min_bytes": 1, "topics": [{"name": "short", "partitions": [
            {"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 20},
            {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
        started = time.monotonic()
        conn.send(ApiKey.FETCH, body)
        writers = eb.broker.partitions.writers
        wait_parked(eb, 0, 1)
        produce(other, "short", 1, ["new"])
        parts = {p["partition"]: p for p in conn.receive()["topics"][0]["partitions"]}
        assert time.monotonic() - started < 30, "woken by the append, not by max_wait_ms"
    assert parts[0]["records"] == b""
    got = list(iter_frames(parts[1]["records"]))
    assert [f.header.base_offset for f in got] == [0]
    assert not any(writers[("short", p)]._waiters for p in (0, 1)), \
        "the answered fetch left a waiter behind"


def test_answers_keep_the_request_order_when_a_later_request_finishes_first(eb):
    with Connection(eb.address) as conn, Connection(eb.address) as other:
        conn.send(ApiKey.FETCH, fetch_body("short", 0, 0, max_wait_ms=60_000))
        conn.send(ApiKey.PRODUCE, {"acks": 1, "topics": [{"name": "short", "partitions": [
            {"partition": 1, "records": frame_of(["done first"])}]}]})
        # the produce is appended (visible to another connection) while the fetch waits
        deadline = time.monotonic() + 30
        while not fetch(other, "short", 1, 0)["records"]:
            assert time.monotonic() < deadline, "the pipelined produce was not appended"
            time.sleep(0.01)
        produce(other, "short", 0, ["wakes the fetch"])
        first = conn.receive()   # Connection checks the correlation ids: fetch, then produce
        second = conn.receive()
    assert [f.header.base_offset for f in iter_frames(
        first["topics"][0]["partitions"][0]["records"])] == [0]
    assert second["topics"][0]["partitions"][0]["base_offset"] == 0


def test_a_fetch_woken_by_an_append_is_answered_before_the_append(eb, monkeypatch):
    """The fetch a small local append wakes is written before that produce's answer (as
    Kafka's purgatory completes it in the appending thread): the consumer following the
    tail gets its records one response write earlier. The broker's writes are recorded
    in the order it makes them (the real write goes on)."""
    written = []
    real_write = ClientConnection._write

    async def recording_write(self, loop, correlation_id, response):
        parts = [p for t in response.get("topics", ()) for p in t["partitions"]]
        written.append("fetch" if any("records" in p for p in parts) else "produce")
        return await real_write(self, loop, correlation_id, response)

    monkeypatch.setattr(ClientConnection, "_write", recording_write)
    with Connection(eb.address) as consumer, Connection(eb.address) as producer:
        for round_ in range(3):
            consumer.send(ApiKey.FETCH, fetch_body("short", 0, round_, max_wait_ms=60_000))
            wait_parked(eb, 0)
            del written[:]
            produce(producer, "short", 0, [f"record {round_}"])
            got = list(iter_frames(consumer.receive()["topics"][0]["partitions"][0]["records"]))
            assert [f.header.base_offset for f in got] == [round_]
            assert written == ["fetch", "produce"], \
                f"round {round_}: the broker wrote {written}"
