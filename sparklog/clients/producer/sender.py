"""The producer's Sender: a background thread that drains the
:class:`~.accumulator.RecordAccumulator`, encodes each partition's records as one frame,
sends one Produce request per broker, and completes, retries or fails the batches when
the responses arrive (Kafka's Sender).

Frames are built here, not in ``send()``: the records of a batch become one Arrow
record batch (:func:`~sparklog.format.frame.raw_batch` for raw topics, the topic's
schema for typed ones) encoded by :func:`~sparklog.format.frame.encode_frame` with the
producer's ``compression_type``: one frame per batch, several frames of a partition per
request (one with idempotence).

Frame sizes: an encoded frame of several records larger than ``batch.size`` (a frame
``send_batch`` built: larger than the frame limit) is split in halves until the pieces
fit; the frame limit is the smallest of ``max.request.size`` and the topic's
``max.message.bytes`` and ``segment.bytes``. A frame of one record over the frame limit
fails that record with RecordTooLargeError naming the sizes. When the broker refuses a
frame as too large anyway (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE: its limits changed,
or differ from what the producer knows), the request's frames are retried one per
request, and a single frame of several records is split in halves and retried, as
Kafka's producer splits a batch (``splitAndReenqueue``); the pieces keep the records'
futures and, with idempotence, the frame's sequence range.

Retries keep the frame bytes, hence the idempotent producer's producer id, epoch and
sequence numbers, so a broker that already appended a retried frame acknowledges it
with its original offset instead of appending it twice. Retriable errors (a broken
connection, a timeout, NotLeader, an unknown partition) mark the topic's metadata stale
and retry after ``retry.backoff.ms`` until ``retries`` or ``delivery.timeout.ms`` run
out. With idempotence, the producer id, epoch and sequences, and what an error means for
them (a sequence gap, a batch lost with an unknown outcome, a new identity), belong to
the :class:`~.idempotence.IdempotenceManager`: the Sender stamps frames and routes
failures through it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

import pyarrow as pa

from ...errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    NotLeaderError,
    RecordTooLargeError,
    RequestTimedOutError,
    SparklogError,
    UnknownTopicOrPartitionError,
)
from ...format.frame import decode_frame, encode_frame, encode_raw_frame, to_record_batch
from ...format.nullability import check_not_null
from ...protocol.apis import ACKS_NONE, ApiKey
from ...protocol.codec import error_from
from ..network.network import NetworkClient
from ..network.wakeup import Wakeup
from .accumulator import InFlightBatch, RecordAccumulator
from .idempotence import IdempotenceManager, Recovery

log = logging.getLogger(__name__)

#: errors after which the topic's leaders are asked again before the retry. A request
#: that timed out is one: its broker may be on a lost host whose partitions have new
#: leaders by then (its ZooKeeper session is shorter than request.timeout.ms); retrying
#: on the old leader first meant a connect timeout more to the lost host (as Kafka's
#: client, which asks for metadata after a timed-out request).
_METADATA_ERRORS = (NotLeaderError, UnknownTopicOrPartitionError, FencedLeaderEpochError,
                    BrokerNotAvailableError, RequestTimedOutError)


class Sender(threading.Thread):
    """See the module docstring. ``topic_of(topic)`` returns what the producer knows of
    a topic it sent to: ``schema`` (None for raw topics), ``not_null`` (the schema's
    constrained fields), ``frame_limit`` and ``limits`` (a text naming them)."""

    def __init__(self, client: NetworkClient, accumulator: RecordAccumulator, *,
                 acks: int, retries: int, retry_backoff_ms: int, request_timeout_ms: int,
                 delivery_timeout_ms: int, compression_type: str,
                 idempotence: IdempotenceManager | None, topic_of, client_id: str = "",
                 refresh_topics=None, metadata_max_age_ms: int = 300000):
        super().__init__(name=f"sparklog-producer-sender-{client_id}", daemon=True)
        self.client = client
        self.acc = accumulator
        self.acks = acks
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.compression = compression_type
        self.idempotence = idempotence
        self.topic_of = topic_of
        self.refresh_topics = refresh_topics
        self.metadata_max_age = metadata_max_age_ms / 1000.0
        self._topics_refreshed = time.monotonic()
        self._stale: set[str] = set()
        self._closing = False
        self._forced = False

    # --- lifecycle ----------------------------------------------------------------
    def initiate_close(self) -> None:
        """Send what is buffered, wait for the responses, then stop."""
        self._closing = True
        self.acc.close()

    def force_close(self) -> None:
        """Stop at once; unsent records fail."""
        self._forced = True
        self.initiate_close()

    # --- main loop ----------------------------------------------------------------
    def run(self) -> None:
        """The sender thread: drain ready batches into requests and read the answers
        until closed. Its requests go out on polled connections
        (:mod:`sparklog.clients.network.network`), whose answers this thread reads itself, as
        Kafka's Sender does: while nothing is ready to send it waits in one poll for
        an answer, the next linger deadline, or the accumulator's wake-up (a new
        batch, a flush, a close)."""
        acc = self.acc
        wakeup = Wakeup()
        with acc.cond:
            acc.wakeup, acc.sender_ident = wakeup, threading.get_ident()
        try:
            while True:
                with acc.cond:
                    if self._forced:
                        break
                    items, wait = acc.drain(time.monotonic())
                    if not items:
                        if self._closing and acc.incomplete <= 0:
                            return
                        acc.sender_waiting = True
                if items:
                    try:
                        self._send(items)
                    except Exception as exc:  # a bug must not leave callers waiting forever
                        log.exception("producer sender failed on %d batches", len(items))
                        for item in items:
                            self._finish_failed(item, exc)
                    self.client.poll(0.0)  # the answers that arrived meanwhile
                    continue
                try:
                    self.client.poll(min(wait, 1.0), wakeup)
                finally:
                    with acc.cond:
                        acc.sender_waiting = False
                        wakeup.clear()
        finally:
            with acc.cond:
                acc.sender_waiting = False
                acc.wakeup = None
            wakeup.close()
            self._drop_unsent()

    def _drop_unsent(self) -> None:
        for item in self.acc.unsent():
            self._finish_failed(item, BrokerNotAvailableError(
                f"producer closed before records for {item.tp[0]}-{item.tp[1]} were sent"))

    def _send(self, items: list[InFlightBatch]) -> None:
        by_node: dict[int, list[InFlightBatch]] = defaultdict(list)
        if self._stale:
            self._refresh_metadata()
        if self.refresh_topics is not None and \
                time.monotonic() - self._topics_refreshed > self.metadata_max_age:
            self._topics_refreshed = time.monotonic()
            self.refresh_topics()
        if self.idempotence is not None:
            try:
                self.idempotence.init_if_needed()
            except SparklogError as exc:
                for item in items:
                    self._handle_error(item, exc, outcome_known=True)
                return
        for item in items:
            try:
                leader = self.client.metadata.leader_for(item.tp)
                if leader < 0:
                    self._refresh_metadata(item.tp[0])
                    leader = self.client.metadata.leader_for(item.tp)
                if leader < 0:
                    raise NotLeaderError(
                        f"no leader known for partition {item.tp[0]}-{item.tp[1]}")
                if item.frame is None and not self._build_frame(item):
                    continue  # every record of it failed
            except SparklogError as exc:
                self._handle_error(item, exc, outcome_known=True)
                continue
            by_node[leader].append(item)
        for node_id, group in by_node.items():
            self._send_request(node_id, group)

    def _refresh_metadata(self, topic: str | None = None) -> None:
        topics, self._stale = self._stale, set()
        if topic is not None:
            topics.add(topic)
        try:
            self.client.refresh_metadata(sorted(topics))
        except SparklogError as exc:
            log.info("metadata refresh for %s failed: %s", sorted(topics), exc)
            self._stale.update(topics)

    def _build_frame(self, item: InFlightBatch) -> bool:
        """Encode the item's batches (one frame each, split to fit their limits), keep
        what fits one request (the rest goes back to the front of the queue) and give
        the frames this producer's id and sequences. False when nothing is left to
        send (every record failed: too large, or not matching a typed topic)."""
        tp = item.tp
        info = self.topic_of(tp[0])
        fitting: list = []
        failed: list = []
        for b in item.batches:
            cap = info.frame_limit
            if b.frame is None:
                try:
                    self._encode(b, info)
                except SparklogError as exc:
                    failed.append((b, exc))
                    continue
                if b.count > 1:
                    cap = min(cap, self.acc.batch_size)
            self._fit(b, cap, info, fitting, failed)
        for b, error in failed:
            self._finish_failed(InFlightBatch(tp, [b]), error)
        limit = self.acc.frames_per_request
        taken, size = 0, 0
        for b in fitting:
            if taken and (taken == limit or size + len(b.frame) > self.acc.max_request_size):
                break
            taken += 1
            size += len(b.frame)
        if taken < len(fitting):
            self.acc.push_front(tp, fitting[taken:])
        item.set_batches(fitting[:taken])
        if not taken:
            self.acc.release(item)
            return False
        frames = [b.frame for b in item.batches]
        if self.idempotence is not None:
            frames = self.idempotence.stamp(item, [(b.frame, b.count) for b in item.batches])
        item.frame = frames[0] if len(frames) == 1 else b"".join(frames)
        return True

    def _encode(self, b, info) -> None:
        """Encode the records of a ``send()`` batch as its frame (no producer id yet)."""
        if info.schema is None:
            b.frame = encode_raw_frame(b.values, b.keys if b.has_keys else None, b.headers,
                                       timestamps=b.timestamps, compression=self.compression)
        else:
            records = to_record_batch(b.values, info.schema)
            if info.not_null:  # send() checked each row; this is the last line
                check_not_null(records, info.not_null,
                               f"records for {b.tp[0]}-{b.tp[1]}")
            b.frame = encode_frame(records, timestamps=b.timestamps,
                                   compression=self.compression)
        b.values = b.keys = b.timestamps = b.headers = None

    def _fit(self, b, cap: int, info, fitting: list, failed: list) -> None:
        """Append ``b`` to ``fitting`` if its frame is at most ``cap`` bytes, else its
        halves (recursively); a single record over the frame limit goes to ``failed``."""
        if len(b.frame) <= cap:
            fitting.append(b)
        elif b.count == 1:
            failed.append((b, RecordTooLargeError(
                f"record for {b.tp[0]}-{b.tp[1]} is a frame of {len(b.frame)} bytes "
                f"(Arrow IPC, compression {self.compression}), over the largest frame "
                f"the producer may send: {info.frame_limit} bytes ({info.limits})")))
        else:
            for half in self.halves(b):
                self._fit(half, info.frame_limit if half.count == 1 else cap, info,
                          fitting, failed)

    def halves(self, b) -> list:
        """Split a batch's frame into two frames of half its records each (new batches
        whose results are pieces of ``b``'s)."""
        body = decode_frame(b.frame).batch()  # record columns and timestamps
        n = b.count
        counts = [n // 2, n - n // 2]
        results = b.result.split(counts)
        sizes = [b.size * counts[0] // n]
        sizes.append(b.size - sizes[0])
        out, start = [], 0
        for count, size, result in zip(counts, sizes, results):
            # take, not slice: a slice keeps its parent's validity buffers and offsets,
            # which made a one-record piece larger than the record's own frame
            rows = pa.array(range(start, start + count), pa.int64())
            frame = encode_frame(body.take(rows), compression=self.compression)
            out.append(b.piece(frame, count, size, result))
            start += count
        return out

    def _send_request(self, node_id: int, group: list[InFlightBatch]) -> None:
        topics: dict[str, list] = defaultdict(list)
        for item in group:
            part = {"partition": item.tp[1], "records": item.frame}
            if item.token:  # the identity's token: the broker refuses its frames without
                part["producer_token"] = item.token
            topics[item.tp[0]].append(part)
        body = {"acks": self.acks, "timeout_ms": self.request_timeout_ms,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}
        expect = self.acks != ACKS_NONE
        try:
            future = self.client.send(node_id, ApiKey.PRODUCE, body, expect_response=expect,
                                      extra_timeout_ms=self.request_timeout_ms, polled=True)
        except SparklogError as exc:
            for item in group:
                self._handle_error(item, exc, outcome_known=True)
            return
        if expect:
            future.add_callback(self._on_response, group)
        else:
            future.add_callback(self._on_written, group)
        future.add_errback(self._on_failure, group, expect)

    # --- completion (this thread, reading its polled connections; a close's thread) ---
    def _on_written(self, group, _none) -> None:
        for item in group:  # acks=0: no offsets are known
            if item.complete(-1):
                self.acc.release(item)

    def _on_response(self, group, body: dict) -> None:
        request_error = error_from(body, "Produce")
        results = {}
        for topic in body.get("topics", ()):
            for p in topic["partitions"]:
                results[(topic["name"], p["partition"])] = p
        for item in group:
            result = results.get(item.tp)
            if request_error is not None:
                self._handle_error(item, request_error, outcome_known=True)
            elif result is None:
                self._handle_error(item, BrokerNotAvailableError(
                    f"Produce response has no answer for {item.tp[0]}-{item.tp[1]}"),
                    outcome_known=False)
            else:
                exc = error_from(result, f"{item.tp[0]}-{item.tp[1]}")
                if exc is None:
                    if item.complete(result["base_offset"],
                                     result.get("log_append_time_ms", -1)):
                        self.acc.release(item)
                else:
                    self._handle_error(item, exc, outcome_known=True)

    def _on_failure(self, group, expect_response: bool, exc) -> None:
        for item in group:
            self._handle_error(item, exc, outcome_known=False)

    def _handle_error(self, item: InFlightBatch, exc: BaseException, *,
                      outcome_known: bool) -> None:
        """Retry, re-stamp, split or fail a batch whose request failed with ``exc``
        (``outcome_known``: the broker answered, so the batch was not appended)."""
        item.attempts += 1
        item.last_error = exc
        expired = time.monotonic() - item.created >= self.delivery_timeout
        may_retry = not self._forced and item.attempts <= self.retries and not expired
        retriable = isinstance(exc, SparklogError) and exc.retriable
        idem = self.idempotence
        if idem is not None:
            recovery = idem.recovery(item, exc, lambda: self.acc.earlier_pending(item))
            if recovery is Recovery.RESEQUENCE and may_retry:
                item.frame, item.base_sequence = None, -1  # stamped anew when sent
                self.acc.requeue(item, 0)
                return
            if recovery is Recovery.RETRY:
                retriable = True
        if isinstance(exc, _METADATA_ERRORS):
            self._stale.add(item.tp[0])
        if isinstance(exc, RecordTooLargeError) and item.frame is not None \
                and item.record_count > 1 and not self._forced:
            self._topics_refreshed = float("-inf")  # learn the topic's limits again
            self.acc.replace(item, self._split_refused(item))
            return
        if retriable and may_retry:
            log.debug("retrying %s-%s (attempt %d): %s", item.tp[0], item.tp[1],
                      item.attempts, exc)
            self.acc.requeue(item, self.retry_backoff)
            return
        if idem is not None:
            idem.batch_failed(item, exc, outcome_known=outcome_known,
                              others_pending=self.acc.others_pending(item))
        self._finish_failed(item, exc)

    def _split_refused(self, item: InFlightBatch) -> list[InFlightBatch]:
        """Pieces of a sent item the broker refused as too large: one per frame, or the
        two halves of a single frame; each keeps its part of the item's sequence range
        and epoch, and sorts where the item did among the partition's batches."""
        batches = item.batches if len(item.batches) > 1 else self.halves(item.batches[0])
        log.info("%s-%s: frame(s) of %d records refused as too large: retrying as %d "
                 "frames", item.tp[0], item.tp[1], item.record_count, len(batches))
        pieces = []
        for i, b in enumerate(batches):
            piece = InFlightBatch(item.tp, [b])
            piece.created, piece.order = item.created, item.order + (i,)
            piece.frame = b.frame
            pieces.append(piece)
        if self.idempotence is not None and item.base_sequence >= 0:
            self.idempotence.stamp_pieces(item, pieces)
        return pieces

    def _finish_failed(self, item: InFlightBatch, exc: BaseException) -> None:
        if not isinstance(exc, SparklogError):
            exc = BrokerNotAvailableError(f"producer sender failed: {exc!r}")
        if item.fail(exc):
            self.acc.release(item)
