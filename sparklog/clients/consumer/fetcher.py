"""The consumer's fetcher: pipelined Fetch requests and the decoding of their frames.

One Fetch is in flight per broker at a time, on the broker's *polled* connection
(:mod:`sparklog.clients.network.network`): its response is read by the polling thread itself,
in :meth:`Fetcher.read_responses` and :meth:`Fetcher.wait` (called from ``poll()``), as
Kafka's consumer reads its fetches in ``poll()``: no reader thread hands the response
over. When a response is read, the frames are queued as they came and the partitions'
*fetch offsets* advance past them (read from the frame headers only); ``poll()`` takes
the records it returns, then sends the next Fetch to that broker before returning them,
so it is answered while the application works on them (the send, a syscall, comes after
the hand-over is ready rather than before it). A partition with about
``max_partition_fetch_bytes`` already buffered is left out of the next fetch (bounded
memory).

Decoding happens in the polling thread: frames are validated (CRC32C when
``check_crcs``), records before the partition's *position* (the frame that holds the
fetch offset may start earlier) are skipped, and records become
:class:`~sparklog.clients.types.ConsumerRecord` s (``poll``) or Arrow record batches
with ``__offset`` and ``__timestamp`` columns (``poll_batches``). A Kafka client's
record batch stored as it sent it (magic 2, beside the Arrow frames) is decoded here
too, by :meth:`~sparklog.format.frame.Frame.batch` as every reader of the log decodes
it: the same records as an Arrow frame of them.

A seek bumps the partition's epoch; responses fetched for an older epoch are dropped.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import pyarrow as pa

from ...errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    FencedLeaderEpochError,
    NotLeaderError,
    SparklogError,
    UnknownTopicOrPartitionError,
)
from ...format.frame import (
    RESERVED_COLUMNS,
    TIMESTAMP_COLUMN,
    TIMESTAMP_TYPE,
    iter_frames,
    offset_range,
)
from ...format.header import HEADER_SIZE, unpack_header
from ...protocol.apis import ApiKey
from ...protocol.codec import error_from
from ..network.network import NetworkClient
from ..types import ConsumerRecord

log = logging.getLogger(__name__)

OFFSET_COLUMN = "__offset"
_METADATA_ERRORS = (NotLeaderError, UnknownTopicOrPartitionError, FencedLeaderEpochError,
                    BrokerNotAvailableError)


class TopicPartitionState:
    """Consumption state of one assigned partition."""

    __slots__ = ("position", "fetch_offset", "paused", "high_watermark",
                 "log_start_offset", "epoch", "buffered_bytes", "retry_at", "typed")

    def __init__(self):
        self.position = None       # next offset poll() returns
        self.fetch_offset = None   # next offset to fetch (>= position)
        self.paused = False
        self.high_watermark = -1
        self.log_start_offset = -1
        self.epoch = 0
        self.buffered_bytes = 0
        self.retry_at = 0.0
        self.typed = False

    def seek(self, offset: int) -> None:
        """Move to ``offset``: drop buffered and in-flight data of the partition."""
        self.position = offset
        self.fetch_offset = offset
        self.epoch += 1
        self.buffered_bytes = 0


class CompletedFetch:
    """One partition's part of a Fetch response, waiting to be consumed."""

    __slots__ = ("tp", "epoch", "data", "error", "frames", "current", "row", "cache",
                 "size", "offset", "corrupt")

    def __init__(self, tp, epoch, data, error=None, offset=None):
        self.tp = tp
        self.epoch = epoch
        self.data = data
        self.size = len(data) if data else 0
        self.error = error
        self.offset = offset   # the fetch offset the data answers
        self.corrupt = None    # the CorruptRecordError met in the data, once met
        self.frames = None   # iterator of Frame, created on first use
        self.current = None  # (frame, batch, explicit offsets or None) being consumed
        self.row = 0
        self.cache = None    # decoded python columns of the current frame (poll)


class Fetcher:
    """See the module docstring. ``states`` is the consumer's assignment
    (TopicPartition -> TopicPartitionState); every access to it holds ``cond``."""

    def __init__(self, client: NetworkClient, states: dict, cond: threading.Condition, *,
                 max_wait_ms: int = 500, min_bytes: int = 1, max_bytes: int = 52428800,
                 max_partition_bytes: int = 1048576, check_crcs: bool = True,
                 retry_backoff_ms: int = 100, key_deserializer=None, value_deserializer=None):
        self.client = client
        self.states = states
        self.cond = cond
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.max_partition_bytes = max_partition_bytes
        self.check_crcs = check_crcs
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self._in_flight: set[int] = set()
        self._completed: collections.deque[CompletedFetch] = collections.deque()
        self.stale_metadata = False
        self.closed = False

    # --- sending (any thread) ---------------------------------------------------------
    def send_fetches(self) -> None:
        """Send a Fetch to every broker that leads a fetchable partition and has none in
        flight."""
        if self.closed:
            return
        now = time.monotonic()
        by_node: dict[int, list] = collections.defaultdict(list)
        with self.cond:
            for tp, st in self.states.items():
                if st.paused or st.fetch_offset is None or st.retry_at > now \
                        or st.buffered_bytes >= self.max_partition_bytes:
                    continue
                try:
                    leader = self.client.metadata.leader_for(tp)
                except SparklogError:
                    leader = -1
                if leader < 0:
                    self.stale_metadata = True
                    continue
                if leader not in self._in_flight:
                    by_node[leader].append((tp, st.fetch_offset, st.epoch))
            for node in by_node:
                self._in_flight.add(node)
        for node, parts in by_node.items():
            self._send(node, parts)

    def _send(self, node: int, parts: list) -> None:
        topics: dict[str, list] = collections.defaultdict(list)
        for tp, offset, _ in parts:
            topics[tp.topic].append({"partition": tp.partition, "fetch_offset": offset,
                                     "partition_max_bytes": self.max_partition_bytes})
        body = {"max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}
        try:
            future = self.client.send(node, ApiKey.FETCH, body, block=False, polled=True,
                                      extra_timeout_ms=self.max_wait_ms)
        except SparklogError as exc:
            self._on_failure(node, parts, exc)
            return
        future.add_callback(self._on_response, node, parts)
        future.add_errback(self._on_failure, node, parts)

    def _on_response(self, node: int, parts: list, body: dict) -> None:
        request_error = error_from(body, "Fetch")
        # a quota's throttle: these partitions are not fetched again before it ends
        throttled = time.monotonic() + body.get("throttle_time_ms", 0) / 1000.0
        answers = {}
        for topic in body.get("topics", ()):
            for p in topic["partitions"]:
                answers[(topic["name"], p["partition"])] = p
        with self.cond:
            self._in_flight.discard(node)
            for tp, offset, epoch in parts:
                st = self.states.get(tp)
                if st is None or st.epoch != epoch or st.fetch_offset != offset:
                    continue  # unassigned or sought meanwhile
                st.retry_at = max(st.retry_at, throttled)
                answer = answers.get(tuple(tp))
                error = request_error or (error_from(answer, f"{tp.topic}-{tp.partition}")
                                          if answer is not None else None)
                if error is not None:
                    self._completed.append(CompletedFetch(tp, epoch, None, error))
                    if isinstance(error, _METADATA_ERRORS):
                        self.stale_metadata = True
                        st.retry_at = time.monotonic() + self.retry_backoff
                    continue
                if answer is None:
                    continue
                st.high_watermark = answer["high_watermark"]
                st.log_start_offset = answer["log_start_offset"]
                data = answer["records"]
                end = _next_offset(data)
                if end is not None and end > st.fetch_offset:
                    st.fetch_offset = end
                elif len(data):
                    # frames that do not move the offset on can only be damaged: decoding
                    # them raises for the application; no more fetches until it seeks
                    st.fetch_offset = None
                else:
                    continue
                st.buffered_bytes += len(data)
                self._completed.append(CompletedFetch(tp, epoch, data, offset=offset))
            self.cond.notify_all()

    def _on_failure(self, node: int, parts: list, exc) -> None:
        log.debug("fetch from broker %s failed: %s", node, exc)
        with self.cond:
            self._in_flight.discard(node)
            self.stale_metadata = True
            retry_at = time.monotonic() + self.retry_backoff
            for tp, _, _ in parts:
                st = self.states.get(tp)
                if st is not None:
                    st.retry_at = retry_at
            self.cond.notify_all()

    # --- consuming (the polling thread) ---------------------------------------------------
    def has_data(self) -> bool:
        """True when completed fetches are waiting (call with ``cond`` held)."""
        return bool(self._completed)

    def read_responses(self) -> None:
        """Read the fetch responses that have arrived, without waiting (their data is
        queued and the next fetches are sent, in this thread)."""
        self.client.poll(0.0)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a fetch response and read it (and any
        other that is ready); with no fetch in flight (a backoff, paused or
        unreachable partitions), wait for the consumer's condition instead."""
        if not self.client.poll(timeout):
            with self.cond:
                if not self._completed:
                    self.cond.wait(timeout)

    def next_error(self):
        """Pop and return the first completed fetch that carries an error, or None; an
        error waits until the data fetched before it for its partition is consumed."""
        with self.cond:
            with_data = set()
            for cf in self._completed:
                if cf.error is None:
                    with_data.add(cf.tp)
                elif cf.tp not in with_data:
                    self._completed.remove(cf)
                    return cf
        return None

    def collect(self, max_records: int, *, batches: bool = False) -> dict:
        """Up to ``max_records`` records (``batches``: rows in Arrow batches) from the
        completed fetches, in offset order per partition, advancing positions."""
        out: dict = {}
        left = max_records
        while left > 0:
            with self.cond:
                cf = self._first_usable()
                if cf is None:
                    break
                st = self.states[cf.tp]
                position = st.position
            try:
                taken, new_position, done = self._take(cf, position, left, batches)
            except CorruptRecordError:
                if out:  # deliver what was taken; the next poll raises
                    break
                raise
            with self.cond:
                current = self.states.get(cf.tp)
                if st.epoch == cf.epoch and current is not None and current is st:
                    st.position = new_position
                    if done:
                        st.buffered_bytes = max(0, st.buffered_bytes - cf.size)
                        if st.fetch_offset is None:  # the suspect frames decoded after all
                            st.fetch_offset = new_position
                if done and cf in self._completed:
                    self._completed.remove(cf)
            if taken:
                out.setdefault(cf.tp, []).extend(taken)
                left -= sum(b.num_rows for b in taken) if batches else len(taken)
        return out

    def _first_usable(self):
        """The first completed fetch with data of a non-paused partition; stale ones
        (unassigned or sought partitions) are dropped on the way."""
        for cf in list(self._completed):
            st = self.states.get(cf.tp)
            if st is None or st.epoch != cf.epoch:
                self._completed.remove(cf)
            elif cf.error is None and not st.paused:
                return cf
        return None

    def _take(self, cf: CompletedFetch, position: int, limit: int, batches: bool):
        """Consume up to ``limit`` rows of ``cf`` from ``position``; returns (records or
        batches, new position, cf exhausted?)."""
        out: list = []
        if cf.corrupt is not None:
            raise cf.corrupt
        if cf.frames is None:
            # cleaned: a fetch does not say whether its segment is a cleaned one, where
            # a Kafka batch may follow removed batches (the broker checked the frames
            # against their segment, read_frame_bytes)
            cf.frames = iter_frames(cf.data, verify_crc=self.check_crcs,
                                    path=f"fetch of {cf.tp.topic}-{cf.tp.partition}",
                                    expected_offset=cf.offset, cleaned=True)
        while limit > 0:
            if cf.current is None:
                try:
                    frame = next(cf.frames, None)
                    if frame is None:
                        return out, position, True
                    if frame.header.is_control or frame.header.last_offset < position:
                        continue
                    # a producer's small frame is read without pyarrow, into the lists
                    # records are made of
                    columns = None if batches or self.states[cf.tp].typed \
                        else frame.raw_columns()
                    batch = frame.batch() if columns is None else None
                    # implicit offsets are base + row: no array built for them
                    offsets = frame.offsets() if frame.header.explicit_offsets else None
                except CorruptRecordError as exc:
                    # the records before the bad frame are delivered; from it on, every
                    # poll raises until the application seeks past it
                    cf.corrupt = type(exc)(
                        f"partition {cf.tp.topic}-{cf.tp.partition}: the records from "
                        f"offset {position} on cannot be read: {exc}",
                        path=exc.path, position=exc.position)
                    if out:
                        return out, position, False
                    raise cf.corrupt from None
                cf.current = (frame, batch, offsets)
                cf.cache = None if columns is None else _raw_python_columns(columns, frame)
                # first row at or after position
                cf.row = _first_row_at(offsets, position, frame.header.base_offset,
                                       frame.header.explicit_offsets)
            frame, batch, offsets = cf.current
            n = frame.header.record_count  # batch() checked the body's rows against it
            end = min(n, cf.row + limit)
            if end > cf.row:
                base = frame.header.base_offset
                if batches:
                    out.append(_with_offsets(batch, offsets, base, cf.row, end))
                else:
                    out.extend(self._records(cf, frame, batch, offsets, cf.row, end))
                limit -= end - cf.row
                position = base + end if offsets is None else offsets[end - 1].as_py() + 1
                cf.row = end
            if cf.row >= n:
                cf.current = None
                position = max(position, frame.header.next_offset)
        return out, position, False

    def _records(self, cf, frame, batch, offsets, start, end) -> list:
        if cf.cache is None:
            cf.cache = _python_columns(batch, frame, self.states[cf.tp].typed)
        keys, values, headers, stamps = cf.cache
        base = frame.header.base_offset
        offs = range(base + start, base + end) if offsets is None else \
            offsets.slice(start, end - start).to_pylist()
        topic, partition = cf.tp
        ts_type = frame.header.timestamp_type
        kd, vd = self.key_deserializer, self.value_deserializer
        out = []
        for i, offset in zip(range(start, end), offs):
            key, value = keys[i], values[i]
            if kd is not None and key is not None:
                key = kd(key)
            if vd is not None and value is not None:
                value = vd(value)
            out.append(ConsumerRecord(topic, partition, offset, stamps[i], ts_type, key,
                                      value, headers[i]))
        return out

    def drop(self, tp=None) -> None:
        """Forget buffered data (of one partition, or all)."""
        with self.cond:
            if tp is None:
                self._completed.clear()
            else:
                self._completed = collections.deque(
                    c for c in self._completed if c.tp != tp)


# --- helpers ----------------------------------------------------------------------------------


def _next_offset(data) -> int | None:
    """The offset after the last whole frame of ``data`` (headers only, no CRC)."""
    pos, end, last = 0, len(data), None
    view = memoryview(data)
    while pos + HEADER_SIZE <= end:
        header = unpack_header(view, pos)
        if header.size <= HEADER_SIZE or pos + header.size > end:
            break
        last = header.next_offset
        pos += header.size
    return last


def _first_row_at(offsets: pa.Array | None, position: int, base: int, explicit: bool) -> int:
    if not explicit or offsets is None:  # implicit offsets: base + row index
        return max(0, position - base)
    import pyarrow.compute as pc

    idx = pc.index(pc.greater_equal(offsets, position), True).as_py()
    return len(offsets) if idx < 0 else idx


def _with_offsets(batch: pa.RecordBatch, offsets: pa.Array | None, base: int, start: int,
                  end: int):
    """Rows ``[start, end)`` of ``batch`` with their offsets (``offsets``, or ``base`` +
    row when None: implicit offsets)."""
    names = [n for n in batch.schema.names if n not in RESERVED_COLUMNS or
             n == TIMESTAMP_COLUMN]
    part = batch.select(names).slice(start, end - start)
    column = offset_range(base + start, end - start) if offsets is None else \
        offsets.slice(start, end - start)
    return part.append_column(OFFSET_COLUMN, column)


def _stamps(header, n: int, stored) -> list:
    """The ``n`` records' timestamps: the frame's append time for every one under
    LogAppendTime, else ``stored()`` (their own)."""
    return [header.max_timestamp] * n if header.log_append_time else stored()


def _stored_stamps(batch: pa.RecordBatch) -> list:
    column = batch.column(TIMESTAMP_COLUMN)
    # the frame's own type: a view, no compute kernel (another type is converted)
    column = column.view(pa.int64()) if column.type == TIMESTAMP_TYPE else \
        column.cast(pa.int64())
    return column.to_pylist()


def _raw_python_columns(columns: tuple, frame):
    """``_python_columns`` of a frame from what :meth:`Frame.raw_columns` read."""
    keys, values, stamps = columns
    n = len(values)
    return keys, values, [[]] * n, _stamps(frame.header, n, lambda: stamps)


def _python_columns(batch: pa.RecordBatch, frame, typed: bool):
    n = batch.num_rows
    stamps = _stamps(frame.header, n, lambda: _stored_stamps(batch))
    names = batch.schema.names
    if typed or "value" not in names:
        record_names = [x for x in names if x not in RESERVED_COLUMNS]
        values = batch.select(record_names).to_pylist()
        return [None] * n, values, [[]] * n, stamps
    keys = batch.column(names.index("key")).to_pylist()
    values = batch.column(names.index("value")).to_pylist()
    headers: list[list[tuple]]
    if "headers" in names:
        col = batch.column(names.index("headers"))
        if col.null_count == n:
            headers = [[]] * n
        else:
            headers = [[(h["key"], h["value"]) for h in hs] if hs else []
                       for hs in col.to_pylist()]
    else:
        headers = [[]] * n
    return keys, values, headers, stamps
