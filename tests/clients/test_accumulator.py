"""The producer's RecordAccumulator on its own: which acknowledgements wake the sender.

An answer wakes the threads waiting on the accumulator only when one of them can act on
it (the sender held back by the in-flight limit or by a retry, a flush, a send blocked on
buffer.memory, a closing producer); at a steady rate the sender waits for a linger
deadline and a wake-up per answer would only hand the interpreter lock around. The
wake-ups are counted on the accumulator's own condition.
"""

from __future__ import annotations

import threading
import time

from sparklog.clients.producer.accumulator import RecordAccumulator
from tests.support.waiting import wait_until

TP = ("t", 0)


def accumulator(max_in_flight: int) -> tuple[RecordAccumulator, list]:
    """An accumulator whose batches linger for a minute, and the list its condition's
    ``notify_all`` calls are counted in."""
    acc = RecordAccumulator(linger_ms=60_000, max_in_flight=max_in_flight)
    calls: list = []
    notify_all = acc.cond.notify_all

    def counted():
        calls.append(1)
        notify_all()

    acc.cond.notify_all = counted
    return acc, calls


def in_flight(acc: RecordAccumulator, count: int) -> list:
    """``count`` one-record batches of TP, each drained (sent) in turn."""
    items = []
    for i in range(count):
        acc.append(TP, 0, None, b"v%d" % i, None, 40)
        with acc.cond:
            drained, _ = acc.drain(time.monotonic() + 3600)  # past their linger
        items += drained
    assert len(items) == count
    return items


def test_an_answer_nobody_waits_for_wakes_no_thread():
    acc, calls = accumulator(max_in_flight=5)
    first, _second = in_flight(acc, 2)
    calls.clear()
    acc.release(first)
    assert calls == [], "an answer below the in-flight limit woke the waiting threads"
    assert acc.incomplete == 1


def test_an_answer_at_the_in_flight_limit_wakes_the_sender():
    """The partition was held back (1 in flight of 1, a batch queued): the sender wakes
    at once and drains the queued batch, instead of sleeping out its idle wait."""
    acc, calls = accumulator(max_in_flight=1)
    (first,) = in_flight(acc, 1)
    acc.append(TP, 0, None, b"queued", None, 40)
    drained: list = []

    def sender():
        with acc.cond:
            while not drained:
                items, _ = acc.drain(time.monotonic() + 3600)
                if items:
                    drained.extend(items)
                else:
                    acc.cond.wait()  # no timeout: only a wake-up lets it go on

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    calls.clear()
    acc.release(first)
    wait_until(lambda: drained, timeout=10, what="the sender draining the queued batch")
    assert calls, "the answer that freed the only in-flight slot woke nobody"
    thread.join(10)


def test_an_answer_wakes_a_flush():
    acc, calls = accumulator(max_in_flight=5)
    first, second = in_flight(acc, 2)
    done = threading.Event()
    thread = threading.Thread(target=lambda: acc.await_complete(None) and done.set(),
                              daemon=True)
    thread.start()
    wait_until(lambda: acc._completion_waiters == 1, timeout=10, what="the flush waiting")
    calls.clear()
    acc.release(first)
    acc.release(second)
    wait_until(done.is_set, timeout=10, what="the flush returning after both answers")
    assert len(calls) == 2
