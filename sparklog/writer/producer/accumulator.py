"""The RecordAccumulator: per-partition queues of record batches, filled by
:meth:`Producer.send` and drained by the :class:`~.sender.Sender` thread (Kafka's
RecordAccumulator/Sender split).

A batch keeps its records as columns (Python lists of values, keys, headers and
timestamps): ``send()`` only appends to lists, and the frame (Arrow IPC body, one per
partition and request) is built once per drain by the sender thread, so there is no
per-record frame work. Kafka's knobs:

* ``batch.size``: bytes after which a batch is full (and ready) and a new one starts;
* ``linger.ms``: how long a not-full batch waits for more records;
* ``buffer.memory``: bytes of unsent records held; ``send()`` blocks up to
  ``max.block.ms`` when the buffer is full (back-pressure), then raises;
* ``max.request.size``: one drain takes several full batches of a partition into one
  frame (or, for the frames ``send_batch`` builds, several frames into one request),
  up to this many bytes.

One request per partition is in flight at a time (the partition is *muted* until its
response arrives), which keeps records in order across retries and lets an idempotent
producer keep its sequence numbers without gaps.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from ...client.types import RecordMetadata
from ...errors import RequestTimedOutError

log = logging.getLogger(__name__)

#: bytes counted per record beyond key and value (offset, timestamp, lengths)
RECORD_OVERHEAD = 16


class ProduceRequestResult:
    """Completion of one batch, shared by the futures of its records."""

    __slots__ = ("topic", "partition", "event", "base_offset", "log_append_time", "error",
                 "callbacks")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.event = threading.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error = None
        self.callbacks = None  # list of (index, timestamp, fn, on_error) once used

    def metadata(self, index: int, timestamp: int) -> RecordMetadata:
        """RecordMetadata of the record at ``index`` of the batch."""
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        ts = self.log_append_time if self.log_append_time >= 0 else timestamp
        return RecordMetadata(self.topic, self.partition, offset, ts)


def _run(result, index, timestamp, fn, on_error):
    try:
        if result.error is None and not on_error:
            fn(result.metadata(index, timestamp))
        elif result.error is not None and on_error:
            fn(result.error)
    except Exception:  # a user callback must not stop the I/O thread
        log.exception("producer callback %r raised", fn)


class FutureRecordMetadata:
    """The future :meth:`Producer.send` returns: ``get(timeout)`` gives the record's
    :class:`~sparklog.client.types.RecordMetadata` (or raises its delivery error);
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
        return self._result.event.is_set() and self._result.error is None

    def failed(self) -> bool:
        """True when delivery failed."""
        return self._result.event.is_set() and self._result.error is not None

    @property
    def exception(self):
        """The delivery error, or None."""
        return self._result.error

    @property
    def value(self) -> RecordMetadata | None:
        """The metadata once acknowledged, else None."""
        return self._result.metadata(self._index, self._timestamp) if self.succeeded() \
            else None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds for the acknowledgement; RecordMetadata or the
        delivery error (RequestTimedOutError if the wait times out)."""
        result = self._result
        if not result.event.wait(timeout):
            raise RequestTimedOutError(
                f"record for {result.topic}-{result.partition} not acknowledged "
                f"within {timeout} s")
        if result.error is not None:
            raise result.error
        return result.metadata(self._index, self._timestamp)

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
    """Complete ``result`` so that callbacks added concurrently run exactly once."""
    with _CALLBACK_LOCK:
        result.base_offset = base_offset
        result.log_append_time = log_append_time
        result.error = error
        result.event.set()
        callbacks, result.callbacks = result.callbacks, None
    if callbacks:
        for index, timestamp, fn, on_error in callbacks:
            _run(result, index, timestamp, fn, on_error)


class ProducerBatch:
    """Records appended to one partition, as columns (see the module docstring)."""

    __slots__ = ("tp", "values", "keys", "headers", "timestamps", "size", "count",
                 "created", "result", "has_keys", "frame")

    def __init__(self, tp: tuple, now: float):
        self.tp = tp
        self.values = []
        self.keys = []
        self.headers = None  # list, created by the first record with headers
        self.timestamps = []
        self.size = 0
        self.count = 0
        self.created = now
        self.result = ProduceRequestResult(tp[0], tp[1])
        self.has_keys = False
        self.frame = None  # a frame built by send_batch (no lists then)


class InFlightBatch:
    """What one produce request carries for one partition: one or more ProducerBatches
    encoded as one frame, with its sequence number; kept unchanged across retries."""

    __slots__ = ("tp", "batches", "record_count", "size", "frame", "base_sequence",
                 "epoch", "attempts", "retry_at", "created", "last_error", "finished")

    def __init__(self, tp: tuple, batches: list):
        self.tp = tp
        self.batches = batches
        self.record_count = sum(b.count for b in batches)
        self.size = sum(b.size for b in batches)
        self.frame = None
        self.base_sequence = -1
        self.epoch = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.created = batches[0].created
        self.last_error = None
        self.finished = False

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
    runs in callers' threads, ``drain``/``requeue``/``release`` in the I/O threads."""

    def __init__(self, *, batch_size: int = 16384, linger_ms: float = 5,
                 buffer_memory: int = 32 * 1024 * 1024, max_block_ms: int = 60000,
                 max_request_size: int = 1048576):
        self.batch_size = int(batch_size)
        self.linger = linger_ms / 1000.0
        self.buffer_memory = int(buffer_memory)
        self.max_block = max_block_ms / 1000.0
        self.max_request_size = int(max_request_size)
        self._lock = threading.Lock()  # taken directly on the hot path (cheaper than cond)
        self.cond = threading.Condition(self._lock)
        self._queues: dict[tuple, collections.deque] = {}
        self._retries: dict[tuple, InFlightBatch] = {}
        self._muted: set[tuple] = set()
        self._used = 0
        self._incomplete = 0  # InFlight/ProducerBatches not yet completed (records)
        self._flushing = 0
        self._closing = False
        self._memory_waiters = 0
        self.sender_waiting = False

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
            if batch is None or batch.frame is not None or (
                    batch.count and batch.size + size > self.batch_size):
                batch = ProducerBatch(tp, time.monotonic())
                queue.append(batch)
                if self.sender_waiting:  # a new linger deadline, or a full batch before
                    self.cond.notify_all()
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
            if self.sender_waiting and batch.size >= self.batch_size:
                self.cond.notify_all()  # full: ready now
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
                self.cond.notify_all()
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
            self.cond.notify_all()  # let the sender drain at once
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
        """Take what is ready to send: retries due, and per unmuted partition its full,
        lingered or flushed batches (up to max.request.size). Mutes each partition taken.
        Returns (in-flight batches, seconds until the next batch gets ready)."""
        out: list[InFlightBatch] = []
        wait = 3600.0
        hurry = self._flushing or self._closing or self._memory_waiters
        for tp, item in list(self._retries.items()):
            if item.retry_at <= now:
                del self._retries[tp]
                out.append(item)
                self._muted.add(tp)  # its queue waits until the retry is answered
            else:
                wait = min(wait, item.retry_at - now)
        for tp, queue in self._queues.items():
            if not queue or tp in self._muted or tp in self._retries:
                continue
            first = queue[0]
            if not (hurry or len(queue) > 1 or first.size >= self.batch_size
                    or first.frame is not None or now - first.created >= self.linger):
                wait = min(wait, first.created + self.linger - now)
                continue
            taken = [queue.popleft()]
            size = first.size
            while queue and (first.frame is None) == (queue[0].frame is None) \
                    and size + queue[0].size <= self.max_request_size and (
                    hurry or len(queue) > 1 or queue[0].size >= self.batch_size
                    or now - queue[0].created >= self.linger):
                size += queue[0].size
                taken.append(queue.popleft())
            out.append(InFlightBatch(tp, taken))
        for item in out:
            self._muted.add(item.tp)
        return out, max(wait, 0.0)

    def requeue(self, item: InFlightBatch, backoff: float) -> None:
        """Put a failed in-flight batch back for a retry after ``backoff`` seconds (its
        frame and sequence are kept)."""
        with self.cond:
            item.retry_at = time.monotonic() + backoff
            self._retries[item.tp] = item
            self._muted.discard(item.tp)
            self.cond.notify_all()

    def release(self, item: InFlightBatch) -> None:
        """The batch is done (acknowledged or failed): unmute its partition, free its
        buffer memory, wake the sender and waiting senders/flushers."""
        with self.cond:
            self._muted.discard(item.tp)
            self._used -= item.size
            self._incomplete -= item.record_count
            self.cond.notify_all()

    def unsent(self) -> list[InFlightBatch]:
        """Remove and return everything not yet sent (used when closing without waiting)."""
        with self.cond:
            items = list(self._retries.values())
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
            self.cond.notify_all()

    def end_flush(self) -> None:
        """Undo one begin_flush."""
        with self.cond:
            self._flushing -= 1

    def await_complete(self, timeout: float | None) -> bool:
        """Wait until every appended record is acknowledged or failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while self._incomplete > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.cond.wait(left if left is not None else 1.0)
            return True

    def close(self) -> None:
        """Stop accepting waits for memory; every batch becomes ready."""
        with self.cond:
            self._closing = True
            self.cond.notify_all()
