"""The RecordAccumulator: per-partition queues of record batches, filled by
:meth:`Producer.send` and drained by the :class:`~.sender.Sender` thread (Kafka's
RecordAccumulator/Sender split).

A batch keeps its records as columns (Python lists of values, keys, headers and
timestamps): ``send()`` only appends to lists, and the frame (Arrow IPC body, one per
partition and request) is built once per drain by the sender thread, so there is no
per-record frame work. Kafka's knobs:

* ``batch.size``: the bytes of one batch, which becomes one frame: a batch is full (and
  ready) when its records' estimated frame size reaches it (or the topic's frame limit,
  if smaller: see :meth:`RecordAccumulator.set_batch_limit`), and a new one starts;
* ``linger.ms``: how long a not-full batch waits for more records;
* ``buffer.memory``: bytes of unsent records held; ``send()`` blocks up to
  ``max.block.ms`` when the buffer is full (back-pressure), then raises;
* ``max.request.size``: one drain takes several ready batches (frames) of a partition
  into one request, up to this many bytes.

A record's size (``RECORD_OVERHEAD`` plus its key, value and header bytes) is an upper
bound of what it adds to an Arrow frame, so frames stay within their limit; the sender
checks each encoded frame anyway and splits the batch when it is larger (see
:mod:`.sender`). A batch split after it was appended to (before sending, or because the
broker refused its frame as too large) keeps its records' futures: its
:class:`ProduceRequestResult` completes when every piece has.

Up to ``max.in.flight.requests.per.connection`` requests per partition are in flight
(pipelined on the leader's connection, which the broker answers and appends in order).
A failed batch is retried before anything newer of its partition, once the partition's
in-flight requests are answered. As in Kafka, a retry can reorder records of a producer
without idempotence when more than one request is in flight (set the limit to 1 to
forbid that); an idempotent producer keeps order: the broker refuses a sequence gap
(OutOfOrderSequence, retried while an earlier batch is pending) and acknowledges a
resent batch once. The broker remembers an idempotent producer's last 5 frames per
partition, so such a producer keeps at most 5 frames in flight per partition (one frame
per request, at most 5 requests).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING

from ...errors import RequestTimedOutError
from ..types import RecordMetadata

if TYPE_CHECKING:
    from ..network.wakeup import Wakeup

log = logging.getLogger(__name__)

#: bytes counted per record beyond key, value and headers: an upper bound of what a
#: record adds to a raw topic's Arrow frame (key, value and headers offsets, timestamp,
#: validity bits: 28 bytes measured)
RECORD_OVERHEAD = 32
#: bytes counted per header beyond its key and value (offsets, validity)
HEADER_OVERHEAD = 12


class ProduceRequestResult:
    """Completion of one batch, shared by the futures of its records. A batch that was
    split has ``pieces`` (first record index, result, record count): each record's
    outcome is its piece's (:meth:`leaf`), and this result completes after them all."""

    __slots__ = ("topic", "partition", "event", "base_offset", "log_append_time", "error",
                 "callbacks", "pieces", "parent", "pending")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.event = threading.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        #: (index, timestamp, fn, on_error) of the callbacks, once one is added
        self.callbacks: list[tuple] | None = None
        self.pieces: list[tuple[int, ProduceRequestResult, int]] | None = None
        self.parent: ProduceRequestResult | None = None
        self.pending = 0

    def metadata(self, index: int, timestamp: int) -> RecordMetadata:
        """RecordMetadata of the record at ``index`` of the batch."""
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        ts = self.log_append_time if self.log_append_time >= 0 else timestamp
        return RecordMetadata(self.topic, self.partition, offset, ts)

    def split(self, counts: list[int]) -> list["ProduceRequestResult"]:
        """Results of consecutive pieces of ``counts`` records each of this batch."""
        children, start = [], 0
        for count in counts:
            child = ProduceRequestResult(self.topic, self.partition)
            child.parent = self
            children.append((start, child, count))
            start += count
        self.pending = len(children)
        self.pieces = children
        return [c for _, c, _ in children]

    def leaf(self, index: int) -> tuple["ProduceRequestResult", int]:
        """The result that holds record ``index`` of the batch, and its index there."""
        result = self
        while result.pieces is not None:
            for start, child, count in result.pieces:
                if index < start + count:
                    result, index = child, index - start
                    break
        return result, index

    def leaves(self, count: int):
        """``(result, record count)`` of each unsplit piece, in record order."""
        if self.pieces is None:
            yield self, count
            return
        for _, child, n in self.pieces:
            yield from child.leaves(n)


def _run(result, index, timestamp, fn, on_error):
    result, index = result.leaf(index)
    try:
        if result.error is None and not on_error:
            fn(result.metadata(index, timestamp))
        elif result.error is not None and on_error:
            fn(result.error)
    except Exception:  # a user callback must not stop the I/O thread
        log.exception("producer callback %r raised", fn)


class FutureRecordMetadata:
    """The future :meth:`Producer.send` returns: ``get(timeout)`` gives the record's
    :class:`~sparklog.clients.types.RecordMetadata` (or raises its delivery error);
    ``add_callback(fn)`` / ``add_errback(fn)`` run on the producer's I/O thread."""

    __slots__ = ("_result", "_index", "_timestamp")

    def __init__(self, result: ProduceRequestResult, index: int, timestamp: int):
        self._result = result
        self._index = index
        self._timestamp = timestamp

    @property
    def is_done(self) -> bool:
        """True once the record is acknowledged or failed."""
        return self._result.event.is_set()

    def succeeded(self) -> bool:
        """True when acknowledged."""
        return self._result.event.is_set() and self.exception is None

    def failed(self) -> bool:
        """True when delivery failed."""
        return self._result.event.is_set() and self.exception is not None

    @property
    def exception(self):
        """The delivery error, or None."""
        return self._result.leaf(self._index)[0].error

    @property
    def value(self) -> RecordMetadata | None:
        """The metadata once acknowledged, else None."""
        if not self.succeeded():
            return None
        result, index = self._result.leaf(self._index)
        return result.metadata(index, self._timestamp)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds for the acknowledgement; RecordMetadata or the
        delivery error (RequestTimedOutError if the wait times out)."""
        result = self._result
        if not result.event.wait(timeout):
            raise RequestTimedOutError(
                f"record for {result.topic}-{result.partition} not acknowledged "
                f"within {timeout} s")
        result, index = result.leaf(self._index)
        if result.error is not None:
            raise result.error
        return result.metadata(index, self._timestamp)

    def _add(self, fn, on_error: bool):
        result = self._result
        entry = (self._index, self._timestamp, fn, on_error)
        with _CALLBACK_LOCK:
            if not result.event.is_set():
                if result.callbacks is None:
                    result.callbacks = []
                result.callbacks.append(entry)
                return self
        _run(result, *entry)
        return self

    def add_callback(self, fn, *args, **kwargs) -> "FutureRecordMetadata":
        """Call ``fn(*args, record_metadata, **kwargs)`` when acknowledged."""
        return self._add((lambda m: fn(*args, m, **kwargs)) if args or kwargs else fn, False)

    def add_errback(self, fn, *args, **kwargs) -> "FutureRecordMetadata":
        """Call ``fn(*args, exception, **kwargs)`` when delivery fails."""
        return self._add((lambda e: fn(*args, e, **kwargs)) if args or kwargs else fn, True)


# callbacks registered while a batch completes must run exactly once: registration and
# completion (complete_result) both hold this lock while they look at the event
_CALLBACK_LOCK = threading.Lock()


def complete_result(result: ProduceRequestResult, base_offset: int,
                    log_append_time: int = -1, error=None) -> None:
    """Complete ``result`` so that callbacks added concurrently run exactly once (and the
    batch it is a piece of, once its last piece is complete)."""
    with _CALLBACK_LOCK:
        result.base_offset = base_offset
        result.log_append_time = log_append_time
        result.error = error
        result.event.set()
        callbacks, result.callbacks = result.callbacks, None
        parent = result.parent
        if parent is not None:
            parent.pending -= 1
            if parent.pending:
                parent = None
    if callbacks:
        for index, timestamp, fn, on_error in callbacks:
            _run(result, index, timestamp, fn, on_error)
    if parent is not None and parent.pieces:  # every piece is complete
        first = parent.pieces[0][1]
        error = next((c.error for _, c, _ in parent.pieces if c.error is not None), None)
        complete_result(parent, first.base_offset, first.log_append_time, error)


class ProducerBatch:
    """Records appended to one partition, as columns (see the module docstring), then
    its frame once encoded (``frame`` is set at once for a frame ``send_batch`` built,
    or for a piece of a split batch)."""

    __slots__ = ("tp", "values", "keys", "headers", "timestamps", "size", "count",
                 "created", "result", "has_keys", "frame")

    def __init__(self, tp: tuple, now: float):
        self.tp = tp
        self.values: list = []
        self.keys: list = []
        self.headers: list | None = None  # created by the first record with headers
        self.timestamps: list[int] = []
        self.size = 0
        self.count = 0
        self.created = now
        self.result = ProduceRequestResult(tp[0], tp[1])
        self.has_keys = False
        self.frame: bytes | None = None  # the encoded frame (lists are dropped then)

    def piece(self, frame: bytes, count: int, size: int,
              result: ProduceRequestResult) -> "ProducerBatch":
        """A batch holding part of this one's records as ``frame``."""
        piece = ProducerBatch(self.tp, self.created)
        piece.frame, piece.count, piece.size, piece.result = frame, count, size, result
        return piece


class InFlightBatch:
    """What one produce request carries for one partition: one or more ProducerBatches,
    one frame each (``frame`` holds them all, the first one's sequence number is
    ``base_sequence``; ``token`` is the producer token of the identity it was stamped
    under, sent with it); kept unchanged across retries."""

    __slots__ = ("tp", "batches", "record_count", "size", "frame", "base_sequence",
                 "epoch", "producer_id", "token", "attempts", "retry_at", "created", "last_error",
                 "finished", "order")

    def __init__(self, tp: tuple, batches: list):
        self.tp = tp
        self.set_batches(batches)
        self.frame: bytes | None = None
        self.base_sequence = -1
        self.epoch = -1
        self.producer_id = -1  # with epoch: the producer identity its sequence belongs to
        self.token: bytes | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.created = batches[0].created
        self.last_error: BaseException | None = None
        self.finished = False
        #: drain order within the partition; pieces of a split: (n, i)
        self.order: tuple[int, ...] = (0,)

    def set_batches(self, batches: list) -> None:
        """Carry ``batches`` (what the item's buffer accounting covers)."""
        self.batches = batches
        self.record_count = sum(b.count for b in batches)
        self.size = sum(b.size for b in batches)

    def complete(self, base_offset: int, log_append_time: int = -1) -> bool:
        """Acknowledge every record (offsets from ``base_offset`` on; -1 for acks=0).
        Returns False (doing nothing) if the batch was already finished."""
        if self.finished:
            return False
        self.finished = True
        offset = base_offset
        for batch in self.batches:
            complete_result(batch.result, offset, log_append_time)
            if offset >= 0:
                offset += batch.count
        return True

    def fail(self, error) -> bool:
        """Fail every record of the frame with ``error`` (False if already finished)."""
        if self.finished:
            return False
        self.finished = True
        for batch in self.batches:
            complete_result(batch.result, -1, -1, error)
        return True


class RecordAccumulator:
    """Per-partition batch queues; see the module docstring. Thread-safe: ``append``
    runs in callers' threads, ``drain``/``requeue``/``release`` in the sender's thread
    (``release`` also in a closing thread)."""

    def __init__(self, *, batch_size: int = 16384, linger_ms: float = 5,
                 buffer_memory: int = 32 * 1024 * 1024, max_block_ms: int = 60000,
                 max_request_size: int = 1048576, max_in_flight: int = 5,
                 frames_per_request: int | None = None):
        self.batch_size = int(batch_size)
        self.linger = linger_ms / 1000.0
        self.buffer_memory = int(buffer_memory)
        self.max_block = max_block_ms / 1000.0
        self.max_request_size = int(max_request_size)
        self.max_in_flight = max(1, int(max_in_flight))
        self.frames_per_request = frames_per_request  # None: as many as fit
        self._lock = threading.Lock()  # taken directly on the hot path (cheaper than cond)
        self.cond = threading.Condition(self._lock)
        self._queues: dict[tuple, collections.deque] = {}
        self._retries: dict[tuple, list] = {}    # tp -> failed batches, in drain order
        self._in_flight: dict[tuple, list] = {}  # tp -> batches sent, not yet answered
        self._orders = itertools.count()
        self._used = 0
        self._incomplete = 0  # InFlight/ProducerBatches not yet completed (records)
        self._flushing = 0
        self._closing = False
        self._memory_waiters = 0
        self._completion_waiters = 0  # threads in await_complete (flush)
        self._batch_limits: dict[str, int] = {}
        #: the sender is waiting (for answers and for this accumulator) in a poll
        #: that ``wakeup`` (a :class:`~sparklog.clients.network.wakeup.Wakeup`) ends
        self.sender_waiting = False
        self.wakeup: Wakeup | None = None
        self.sender_ident: int | None = None  # the sender's thread (needs no wake-up)

    def _notify(self) -> None:
        """Wake the threads waiting on ``cond`` (flushes, sends blocked on
        ``buffer.memory``) and a waiting sender, unless this is the sender's own thread
        (reading its answers in the poll); call with ``cond`` held."""
        self.cond.notify_all()
        if self.sender_waiting and self.wakeup is not None \
                and threading.get_ident() != self.sender_ident:
            self.wakeup.set()

    def set_batch_limit(self, topic: str, limit: int) -> None:
        """Bytes of records (their estimated sizes) after which a batch of ``topic`` is
        full: ``batch.size`` less the topic's fixed frame overhead, or less when the
        topic's frame limit is smaller (see the producer)."""
        self._batch_limits[topic] = max(1, int(limit))

    # --- append (caller threads) ------------------------------------------------------
    def append(self, tp: tuple, timestamp: int, key, value, headers, size: int
               ) -> FutureRecordMetadata:
        """Append one record to the open batch of ``tp``; returns its future."""
        with self._lock:
            if self._used + size > self.buffer_memory:
                self._wait_for_memory(tp, size)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = collections.deque()
            batch = queue[-1] if queue else None
            limit = self._batch_limits.get(tp[0], self.batch_size)
            if batch is None or batch.frame is not None or (
                    batch.count and batch.size + size > limit):
                batch = ProducerBatch(tp, time.monotonic())
                queue.append(batch)
                if self.sender_waiting:  # a new linger deadline, or a full batch before
                    self._notify()
            index = batch.count
            batch.count = index + 1
            batch.size += size
            batch.values.append(value)
            batch.keys.append(key)
            batch.timestamps.append(timestamp)
            if key is not None:
                batch.has_keys = True
            if headers is not None or batch.headers is not None:
                if batch.headers is None:
                    batch.headers = [None] * index
                batch.headers.append(headers)
            self._used += size
            self._incomplete += 1
            if self.sender_waiting and batch.size >= limit:
                self._notify()  # full: ready now
            return FutureRecordMetadata(batch.result, index, timestamp)

    def append_frame(self, tp: tuple, frame: bytes, count: int) -> ProduceRequestResult:
        """Queue a frame of ``count`` records built by ``send_batch`` as its own batch of
        ``tp``; returns the batch's result (its base offset once acknowledged)."""
        size = len(frame)
        with self.cond:
            if self._used + size > self.buffer_memory:
                self._wait_for_memory(tp, size)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = collections.deque()
            batch = ProducerBatch(tp, time.monotonic())
            batch.frame = frame
            batch.count = count
            batch.size = size
            queue.append(batch)
            self._used += size
            self._incomplete += batch.count
            if self.sender_waiting:
                self._notify()
            return batch.result

    def _wait_for_memory(self, tp: tuple, size: int) -> None:
        if size > self.buffer_memory:
            from ...errors import RecordTooLargeError

            raise RecordTooLargeError(
                f"record of {size} bytes for {tp[0]}-{tp[1]} is larger than "
                f"buffer.memory ({self.buffer_memory} bytes)")
        deadline = time.monotonic() + self.max_block
        self._memory_waiters += 1
        try:
            self._notify()  # let the sender drain at once
            while self._used + size > self.buffer_memory:
                left = deadline - time.monotonic()
                if left <= 0 or self._closing:
                    raise RequestTimedOutError(
                        f"producer buffer full ({self._used} of {self.buffer_memory} bytes "
                        f"of buffer.memory) for {self.max_block:g} s (max.block.ms) while "
                        f"sending to {tp[0]}-{tp[1]}")
                self.cond.wait(left)
        finally:
            self._memory_waiters -= 1

    # --- drain (sender thread, under self.cond) ----------------------------------------
    def drain(self, now: float) -> tuple[list[InFlightBatch], float]:
        """Take what is ready to send, at most one request's worth per partition: the
        oldest retry once its partition has nothing in flight, else (below the in-flight
        limit) the full, lingered or flushed batches of the partition's queue, up to
        max.request.size (estimated) and ``frames_per_request``. Returns (in-flight
        batches, seconds until the next is ready)."""
        out: list[InFlightBatch] = []
        wait = 3600.0
        hurry = self._flushing or self._closing or self._memory_waiters
        for tp, pending in list(self._retries.items()):
            if self._in_flight.get(tp):
                continue  # retried after every earlier request is answered
            item = pending[0]
            if item.retry_at > now:
                wait = min(wait, item.retry_at - now)
                continue
            pending.pop(0)
            if not pending:
                del self._retries[tp]
            self._in_flight.setdefault(tp, []).append(item)
            out.append(item)
        for tp, queue in self._queues.items():
            if not queue or tp in self._retries or \
                    len(self._in_flight.get(tp, ())) >= self.max_in_flight or \
                    any(item.tp == tp for item in out):
                continue
            first = queue[0]
            limit = self._batch_limits.get(tp[0], self.batch_size)
            if not (hurry or len(queue) > 1 or first.size >= limit
                    or first.frame is not None or now - first.created >= self.linger):
                wait = min(wait, first.created + self.linger - now)
                continue
            taken = [queue.popleft()]
            size = first.size
            while queue and (self.frames_per_request is None
                             or len(taken) < self.frames_per_request) \
                    and size + queue[0].size <= self.max_request_size and (
                    hurry or len(queue) > 1 or queue[0].size >= limit
                    or queue[0].frame is not None or now - queue[0].created >= self.linger):
                size += queue[0].size
                taken.append(queue.popleft())
            item = InFlightBatch(tp, taken)
            item.order = (next(self._orders),)
            self._in_flight.setdefault(tp, []).append(item)
            out.append(item)
        return out, max(wait, 0.0)

    def _forget(self, item: InFlightBatch) -> None:
        sent = self._in_flight.get(item.tp)
        if sent and item in sent:
            sent.remove(item)

    def requeue(self, item: InFlightBatch, backoff: float) -> None:
        """Put a failed in-flight batch back for a retry after ``backoff`` seconds (its
        frame and sequence are kept), in drain order among the partition's retries."""
        with self.cond:
            self._forget(item)
            item.retry_at = time.monotonic() + backoff
            pending = self._retries.setdefault(item.tp, [])
            pending.insert(bisect.bisect([i.order for i in pending], item.order), item)
            self._notify()

    def push_front(self, tp: tuple, batches: list) -> None:
        """Put batches taken by a drain but not sent (pieces of a split frame that did not
        fit the request) back at the front of their partition's queue, in order; they
        are ready at once."""
        with self.cond:
            queue = self._queues.setdefault(tp, collections.deque())
            queue.extendleft(reversed(batches))
            self._notify()

    def replace(self, item: InFlightBatch, pieces: list) -> None:
        """Replace a sent batch the broker refused (too large) by its ``pieces``, which
        are retried at once, before anything newer of the partition, in order. The
        pieces carry the item's records and buffer bytes."""
        with self.cond:
            self._forget(item)
            pending = self._retries.setdefault(item.tp, [])
            for piece in pieces:
                pending.insert(bisect.bisect([i.order for i in pending], piece.order), piece)
            self._notify()

    def earlier_pending(self, item: InFlightBatch) -> bool:
        """True when a batch of the same partition drained before ``item`` is still in
        flight or waiting for a retry (so a sequence gap at the broker is expected)."""
        with self.cond:
            others = self._in_flight.get(item.tp, []) + self._retries.get(item.tp, [])
            return any(o.order < item.order for o in others if o is not item)

    def others_pending(self, item: InFlightBatch) -> bool:
        """True when another batch of the same partition is in flight or to be retried."""
        with self.cond:
            others = self._in_flight.get(item.tp, []) + self._retries.get(item.tp, [])
            return any(o is not item for o in others)

    def release(self, item: InFlightBatch) -> None:
        """The batch is done (acknowledged or failed): free its in-flight slot and
        buffer memory; wake whoever can act on it: the sender when the partition was
        held back by the in-flight limit (or a retry waited for its requests to be
        answered) or the producer is closing, and waiting flushers and senders blocked
        on ``buffer.memory``. An answer nobody waits for wakes no thread (at a steady
        rate the sender waits for a linger deadline, and every spurious wake-up is a
        hand-off of the interpreter lock on the records' path)."""
        with self.cond:
            self._forget(item)
            self._used -= item.size
            self._incomplete -= item.record_count
            sent = len(self._in_flight.get(item.tp, ()))
            if self._memory_waiters or self._completion_waiters or self._closing \
                    or sent == self.max_in_flight - 1 or (not sent and item.tp in self._retries):
                self._notify()

    def unsent(self) -> list[InFlightBatch]:
        """Remove and return everything not yet sent (used when closing without waiting)."""
        with self.cond:
            items = [i for pending in self._retries.values() for i in pending]
            self._retries.clear()
            for tp, queue in self._queues.items():
                if queue:
                    items.append(InFlightBatch(tp, list(queue)))
                    queue.clear()
            return items

    # --- flush / close -----------------------------------------------------------------
    @property
    def incomplete(self) -> int:
        """Records appended and not yet acknowledged or failed."""
        return self._incomplete

    def begin_flush(self) -> None:
        """Make every batch ready at once (until end_flush)."""
        with self.cond:
            self._flushing += 1
            self._notify()

    def end_flush(self) -> None:
        """Undo one begin_flush."""
        with self.cond:
            self._flushing -= 1

    def await_complete(self, timeout: float | None) -> bool:
        """Wait until every appended record is acknowledged or failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            self._completion_waiters += 1
            try:
                while self._incomplete > 0:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self.cond.wait(left if left is not None else 1.0)
                return True
            finally:
                self._completion_waiters -= 1

    def close(self) -> None:
        """Stop accepting waits for memory; every batch becomes ready."""
        with self.cond:
            self._closing = True
            self._notify()
