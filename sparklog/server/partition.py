"""One partition on the broker: its log, its single writer task, its fetch waiters.

Produce requests for a partition are queued; one writer task per partition drains the
queue and hands the whole batch to an I/O thread, which validates each request's
frames (size, CRC32C, offsets against the record count, no attribute bit that only the
broker or the cleaner may set, record columns against the topic's schema, producer
sequences; a Kafka client's record batch, the second frame kind, as Kafka's
``LogValidator`` checks one, and only on a raw topic), appends them, and then does ONE flush — or one sync when any request in the
batch asked for acks=all — for all of them (group commit). The sync runs beside the
appends, on an I/O thread of its own turn (the sync worker): the thread that appended a
batch for acks=all hands it to the worker directly, starting it when none runs, without a trip
through the event loop; while one sync waits for the storage (HDFS's DataNodes
fsyncing), the writer validates and appends the next batches, and the worker's next
sync, started in the same thread as soon as this one returns, covers all of them. On
storage that pipelines syncs (HDFS: an ``hsync`` waits for its own packet's
acknowledgement outside the stream's lock, so several threads' hsyncs overlap, each
returning once its own bytes are durable), up to ``syncs_in_flight`` turns of the
worker (the broker's ``storage.syncs.in.flight``, default 2) run at once: when at
least ``PIPELINED_SYNC_BYTES`` were appended while one sync waits, they start a sync of
their own at once instead of waiting for that one to return first, so their transfer
overlaps its wait (as HBase's WAL runs several sync threads); smaller batches wait and
go together with the next sync, since more, smaller syncs only queue at the DataNodes
(docs/operations.md, "acks=all: the JVM stopped by Python's collector"). The worker
posts each sync's outcome to the event loop, which answers the syncs in the order they
started. A request is answered only once a sync started after its bytes were written
has completed, so no acks=all answer precedes the durability of its records. Fetches
that found too little data wait on the partition until the next flush or sync advances
the high watermark, or their timeout; the frames each request appended are kept, once
visible, in the partition's :class:`~.tail.TailCache`, from which such a fetch is
answered.

Calls into :class:`~sparklog.log.partition.PartitionLog` run on I/O threads (HDFS calls
are network round trips), with one exception: on the local disk, where a flush is a
``writev(2)`` into the page cache, a small batch (at most ``inline_append_bytes``, no
acks=all, no ``flush.messages``/``flush.ms``, no segment roll and no producer-state
snapshot due: nothing that syncs or creates files), while no other thread holds the
log's lock, is appended on the event loop itself, saving the two thread hand-offs that
cost more than the append. When the writer is idle (nothing queued, no batch in
progress), such a request is appended by :meth:`PartitionWriter.submit` itself, in the
handler's own turn of the event loop (as Kafka's request handler appends to the log and
completes the waiting fetches itself): its answer and the fetches it wakes need no
turn of the writer task in between. The fetches such an append woke are answered
before the produce request that woke them (the handler lets them have the loop's next
turn first, as Kafka's purgatory completes them in the appending thread): a consumer
following the tail gets the records one response write earlier, the producer's
acknowledgement comes one write later.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from ..errors import (
    CorruptRecordError,
    DataLossError,
    InvalidRecordError,
    RecordTooLargeError,
    SchemaMismatchError,
    SparklogError,
    StorageError,
)
from ..format.frame import (
    OFFSET_DELTA_COLUMN,
    TIMESTAMP_COLUMN,
    body_schema,
    check_client_frame,
    iter_frames,
    validate_frame,
)
from ..format.header import HEADER_SIZE, KAFKA_MAGIC, MAGIC_FIELD, NO_PRODUCER_ID, FrameHeader
from ..format.kafka_batch import DEFAULT_MAX_DECOMPRESSED_BYTES, validate_client_batch
from ..format.nullability import check_not_null, constrained_fields
from ..log.cleaner import KEY_COLUMN, key_columns
from ..log.config import LogConfig
from ..log.partition import PartitionLog
from ..metadata.topic import TopicConfig
from ..protocol.apis import ACKS_ALL
from .producer_state import ProducerSnapshots, ProducerState
from .tail import TailCache

log = logging.getLogger(__name__)

_IPC_PREFIX = struct.Struct("<Ii")  # Arrow IPC continuation marker + metadata length
#: most queued requests one drain hands to a single append batch
MAX_BATCH_REQUESTS = 1024
#: most waiting fetches woken per turn of the event loop
WAKE_BATCH = 128
#: largest batch (request bytes) appended on the event loop when the log is local
INLINE_APPEND_BYTES = 64 << 10
#: bytes waiting for a sync that start another turn of the sync worker beside a running
#: one (storage that pipelines syncs, ``storage.syncs.in.flight`` > 1): one HDFS packet.
#: Smaller batches wait for the running sync and go with the next (group commit): a
#: sync of a few KiB is the DataNodes' fsyncs, which queue behind each other anyway,
#: while a large one is mostly its transfer, which overlaps the running sync's wait
PIPELINED_SYNC_BYTES = 64 << 10
#: syncs one turn of a partition's sync worker runs back to back before it gives its
#: I/O thread to the other queued work (and queues itself again if more is waiting)
SYNC_TURN = 8


@dataclass
class ProduceItem:
    """One partition's part of a Produce request, waiting for the writer."""

    records: bytes
    acks: int
    future: asyncio.Future
    frames: list = field(default_factory=list)
    #: ``bound(frames)`` raises unless the sender may use the frames' producer ids
    bound: Callable[[list], None] | None = None


class ProduceResult(NamedTuple):
    """What the writer did with one request: the first frame's offsets (or the error)."""

    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error: BaseException | None = None
    duplicate: bool = False
    #: records the request appended (0 for an error or a resent duplicate)
    records: int = 0


def _same_columns(got: pa.Schema, expected: pa.Schema) -> bool:
    if len(got) != len(expected):
        return False
    return all(a.name == b.name and a.type.equals(b.type) for a, b in zip(got, expected))


class SchemaChecker:
    """Checks that frame bodies carry the topic's record columns (plus the timestamp);
    remembers the schema messages already accepted so a repeated schema costs a byte
    comparison instead of a parse."""

    def __init__(self, topic: TopicConfig):
        self.topic = topic
        self.expected = topic.record_schema
        self._accepted: set[bytes] = set()

    def check(self, buf, pos: int, header: FrameHeader, partition: str) -> None:
        """Raise SchemaMismatchError (or CorruptRecordError) for the frame at byte
        ``pos`` of a request to ``partition`` whose body does not have the topic's
        columns."""
        body = memoryview(buf)[pos + HEADER_SIZE:pos + header.size]
        if len(body) >= 8:
            marker, meta_len = _IPC_PREFIX.unpack_from(body, 0)
            if marker == 0xFFFFFFFF and 0 < meta_len <= len(body) - 8:
                key = bytes(body[:8 + meta_len])
                if key in self._accepted:
                    return
            else:
                key = None
        else:
            key = None
        where = f"partition {partition}, frame at byte {pos} of the request"
        schema = body_schema(pa.py_buffer(body))
        names = schema.names
        if TIMESTAMP_COLUMN not in names:
            raise CorruptRecordError(f"{where}: frame body has no {TIMESTAMP_COLUMN} column")
        if OFFSET_DELTA_COLUMN in names:  # explicit offsets: the cleaner's alone
            raise InvalidRecordError(
                f"{where}: frame body has an {OFFSET_DELTA_COLUMN} column (explicit "
                f"offsets, which only the log cleaner writes)")
        records = pa.schema([f for f in schema if not f.name.startswith("__")])
        if not _same_columns(records, self.expected):
            kind = "typed topic schema" if self.topic.typed else "raw record columns"
            raise SchemaMismatchError(
                f"{where}: frame columns {records} do not match the {kind} {self.expected}")
        if key is not None and len(self._accepted) < 64:
            self._accepted.add(key)


def _decode_columns(buf, pos: int, header: FrameHeader, partition: str,
                    options: pa.ipc.IpcReadOptions) -> pa.RecordBatch:
    """The columns ``options`` selects of the frame at byte ``pos`` of a request to
    ``partition`` (only those are decoded and decompressed); CorruptRecordError naming
    the frame when its body is not a valid Arrow IPC batch."""
    body = pa.py_buffer(memoryview(buf)[pos + HEADER_SIZE:pos + header.size])
    try:
        return pa.ipc.open_stream(body, options=options).read_next_batch()
    except (pa.ArrowInvalid, StopIteration, OSError) as exc:
        raise CorruptRecordError(
            f"partition {partition}, frame at byte {pos} of the request: body is not a "
            f"valid Arrow IPC batch: {exc}") from None


class NotNullChecker:
    """Refuses frames of a typed topic whose body has a null in a field the topic's
    schema declares not null (SchemaMismatchError naming the field and the record).
    Only the constrained columns are decoded (and decompressed)."""

    def __init__(self, topic: TopicConfig):
        self.fields = constrained_fields(topic.schema)
        names = topic.record_schema.names
        self.options = pa.ipc.IpcReadOptions(
            included_fields=sorted(names.index(f.name) for f in self.fields))

    def check(self, buf, pos: int, header: FrameHeader, partition: str) -> None:
        """Check the frame at byte ``pos`` of a request to ``partition`` (whose columns
        SchemaChecker already found to be the topic's)."""
        batch = _decode_columns(buf, pos, header, partition, self.options)
        check_not_null(batch, self.fields,
                       f"partition {partition}, frame at byte {pos} of the request")


class KeyChecker:
    """Refuses, on a compacted topic, frames with a record without a key (Kafka's
    InvalidRecordException, INVALID_RECORD): a null in a key column (``key``, or a
    typed topic's ``compaction.key.columns``). Only the key columns are decoded."""

    def __init__(self, topic: TopicConfig):
        names = topic.record_schema.names
        declared = topic.configs.get("compaction.key.columns")
        self.columns = key_columns(declared if declared is not None else KEY_COLUMN)
        self.missing = [c for c in self.columns if c not in names]
        self.options = pa.ipc.IpcReadOptions(
            included_fields=[] if self.missing else sorted(names.index(c) for c in self.columns))

    def check(self, buf, pos: int, header: FrameHeader, partition: str) -> None:
        """Check the frame at byte ``pos`` of a request to compacted ``partition``."""
        if header.is_control:
            return
        if self.missing:
            raise InvalidRecordError(
                f"Compacted topic cannot accept message without key in topic partition "
                f"{partition} (the topic's schema has no "
                f"{', '.join(repr(c) for c in self.missing)} column)")
        batch = _decode_columns(buf, pos, header, partition, self.options)
        if any(c.null_count for c in batch.columns):
            raise InvalidRecordError(
                f"Compacted topic cannot accept message without key in topic partition "
                f"{partition} (frame at byte {pos} of the request: a null in key column(s) "
                f"{', '.join(self.columns)})")


class PartitionWriter:
    """The broker's handle on one partition it leads (see the module docstring)."""

    def __init__(self, topic: TopicConfig, partition: int, plog: PartitionLog,
                 state: ProducerState, snapshots: ProducerSnapshots, *, loop, pool,
                 snapshot_interval_ms: int = 60000, inline_append_bytes: int = 0,
                 syncs_in_flight: int = 2,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES):
        self.topic = topic
        self.topic_name = topic.name
        self.partition = partition
        self.name = f"{topic.name}-{partition}"
        self.log = plog
        self.state = state
        self.snapshots = snapshots
        self.loop = loop
        self.pool = pool
        self.snapshot_interval_ms = snapshot_interval_ms
        self.schema = SchemaChecker(topic)
        self.not_null = NotNullChecker(topic) if constrained_fields(topic.schema) else None
        self.keys = KeyChecker(topic)
        #: bound on a Kafka batch's records once decompressed (socket.request.max.bytes)
        self.max_decompressed_bytes = max_decompressed_bytes
        self._queue: asyncio.Queue = asyncio.Queue()
        #: (batch, results, runs) appended for acks=all, waiting for the next sync; with
        #: ``_sync_running`` (turns of the sync worker queued or running), their futures
        #: and ``_sync_ticket`` (the number of the next group taken), guarded by
        #: ``_sync_lock`` (appending threads and the worker's turns share them)
        self._unsynced: list[tuple[list[ProduceItem], list[ProduceResult], list]] = []
        self._unsynced_bytes = 0
        self._sync_running = 0
        self._sync_turns: list = []
        self._sync_ticket = 0
        self._sync_lock = threading.Lock()
        #: most turns of the sync worker at once (module docstring)
        self.syncs_in_flight = max(1, syncs_in_flight) if plog.pipelines_syncs else 1
        #: event loop: outcomes of syncs that ended before an earlier one, by ticket,
        #: and the ticket of the next sync to answer
        self._sync_outcomes: dict[int, tuple] = {}
        self._next_answer = 0
        self._waiters: dict[asyncio.Future, None] = {}
        #: how many times waiting fetches were woken (a handler compares it around its
        #: ``submit`` to learn whether its append woke any)
        self.wakes = 0
        self._last_snapshot = time.monotonic()
        #: batches up to this many bytes are appended on the event loop (0: never;
        #: the broker sets it for logs on the local disk: see the module docstring)
        self.inline_append_bytes = inline_append_bytes
        #: the newest appended frames, for the fetches that follow the tail
        self.tail = TailCache()
        #: True while the writer task holds a batch (appending it, on the loop or an
        #: I/O thread): a request submitted meanwhile queues behind it
        self._appending = False
        self._task = loop.create_task(self._run(), name=f"writer-{self.name}")
        self._closing = False
        #: True once the log failed (storage error): the broker reopens the partition
        self.failed = False

    def update_config(self, topic: TopicConfig, log_config: LogConfig) -> None:
        """Apply an altered topic config (``topic``, and ``log_config``: the broker's
        defaults overlaid with it) to the open partition."""
        self.topic = topic
        self.log.update_config(log_config)

    # --- opening (I/O thread) ----------------------------------------------------------------
    @staticmethod
    def open_blocking(fileio, partition_dir: str, log_config: LogConfig, leader_epoch: int,
                      where: str, *, fence: bool = False
                      ) -> tuple[PartitionLog, ProducerState, ProducerSnapshots]:
        """Open the log (recovering its tail; ``fence`` revokes another writer's lease)
        and load or rebuild the producer state."""
        plog = PartitionLog.open(fileio, partition_dir, log_config, leader_epoch=leader_epoch,
                                 fence=fence)
        try:
            state = ProducerState(where)
            snapshots = ProducerSnapshots(fileio, partition_dir)
            covered = snapshots.load(state)
            if covered is None or covered > plog.log_end_offset:
                state.producers = {}
                covered = plog.log_start_offset
            replay_producer_state(plog, state, max(covered, plog.log_start_offset))
        except BaseException:
            plog.close()
            raise
        return plog, state, snapshots

    # --- produce --------------------------------------------------------------------------------
    def submit(self, records: bytes, acks: int, bound=None) -> asyncio.Future:
        """Queue one request's records; the future gets a ProduceResult (already, when
        the request was appended on the spot: module docstring). ``bound(frames)``, once
        the frames are validated, raises if the sender may not use their producer ids
        (:meth:`~sparklog.server.producer_ids.ProducerIdManager.binder`)."""
        future = self.loop.create_future()
        if self._closing:
            future.set_result(ProduceResult(error=SparklogError(
                f"partition {self.name} is shutting down")))
            return future
        item = ProduceItem(records, acks, future, bound=bound)
        # an idle writer (nothing queued, no batch of its own in progress) would take
        # this request alone at its next turn: when it may be appended on the event
        # loop, append it now, in the caller's turn (the future is done on return)
        if self._appending or not self._queue.empty() or not self._append_inline([item]):
            self._queue.put_nowait(item)
        return future

    async def _run(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    break
                batch = [item]
                stop = False
                while len(batch) < MAX_BATCH_REQUESTS and not self._queue.empty():
                    nxt = self._queue.get_nowait()
                    if nxt is None:
                        stop = True
                        break
                    batch.append(nxt)
                self._appending = True
                try:
                    await self._append_queued(batch)
                finally:
                    self._appending = False
                if stop:
                    break
        finally:
            await self._syncs_done()

    async def _append_queued(self, batch: list[ProduceItem]) -> None:
        """The writer task's turn: append ``batch`` on the event loop when allowed, else
        on an I/O thread, and answer it (a durable batch: once synced)."""
        try:
            if self._append_inline(batch):
                return
            results, durable, runs = await self.loop.run_in_executor(
                self.pool, self._append_batch, batch)
        except BaseException as exc:  # the log failed as a whole
            self._append_failed(batch, exc)
            return
        # a durable batch is the sync worker's now (answered after its sync); a flushed
        # one is visible
        if not durable:
            self._visible(batch, results, runs)

    # --- group commit: the sync worker (I/O threads) ------------------------------------------
    def _hand_to_sync(self, batch: list[ProduceItem], results: list[ProduceResult],
                      runs: list, size: int) -> None:
        """I/O thread, right after ``batch`` (``size`` bytes) was appended for acks=all:
        queue it for the next sync, starting a turn of the sync worker when none is
        queued or running, or when fewer than ``syncs_in_flight`` are and
        ``PIPELINED_SYNC_BYTES`` wait."""
        with self._sync_lock:
            self._unsynced.append((batch, results, runs))
            self._unsynced_bytes += size
            running = self._sync_running
            if not running or (running < self.syncs_in_flight
                               and self._unsynced_bytes >= PIPELINED_SYNC_BYTES):
                try:
                    turn = self.pool.submit(self._sync_worker)
                except BaseException:  # the pool is shut down: the batch fails
                    self._unsynced.pop()
                    self._unsynced_bytes -= size
                    raise
                self._sync_running += 1
                self._sync_turns = [t for t in self._sync_turns if not t.done()] + [turn]

    def _sync_worker(self) -> None:
        """I/O thread: one turn of the partition's sync worker. Syncs everything appended
        so far and not taken by another turn (``PartitionLog.start_sync``: the log's
        lock is held only to start, so the writer appends, and another turn starts its
        own sync, meanwhile), posts that sync's outcome to the event loop, and starts
        the next sync at once, in this thread, for the batches appended meanwhile; ends
        when nothing waits, or after ``SYNC_TURN`` syncs queues its next turn behind the
        pool's other work."""
        syncs = 0
        while True:
            with self._sync_lock:
                if not self._unsynced:
                    self._sync_running -= 1
                    return
                if syncs >= SYNC_TURN:
                    try:
                        self._sync_turns.append(self.pool.submit(self._sync_worker))
                        return
                    except RuntimeError:  # the pool is shutting down: go on here
                        pass
                group, self._unsynced = self._unsynced, []
                self._unsynced_bytes = 0
                ticket = self._sync_ticket  # groups are taken in log order
                self._sync_ticket += 1
            syncs += 1
            failure: BaseException | None = None
            try:
                # started after every append of ``group`` returned: covers their bytes
                self.log.start_sync()()
            except BaseException as exc:
                failure = exc
                if isinstance(exc, StorageError):
                    self.failed = True
            self._post(self._sync_ended, ticket, group, failure)

    def _post(self, callback, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the event loop is closed: nobody waits for answers
            pass

    def _sync_ended(self, ticket: int, group: list, failure: BaseException | None) -> None:
        """Event loop: a sync ended; answer its group, and the groups after it whose
        syncs ended first, in log order (the order the tail cache is fed in)."""
        self._sync_outcomes[ticket] = (group, failure)
        while self._next_answer in self._sync_outcomes:
            group, failure = self._sync_outcomes.pop(self._next_answer)
            self._next_answer += 1
            for batch, results, runs in group:
                if failure is None:
                    self._visible(batch, results, runs)
                else:
                    self._append_failed(batch, failure)

    async def _syncs_done(self) -> None:
        """Wait until the sync worker has synced (and posted the answers of) every batch
        handed to it."""
        while True:
            with self._sync_lock:
                running = self._sync_running
                self._sync_turns = turns = [t for t in self._sync_turns if not t.done()]
            if not running:
                return
            if not turns:  # a turn between its last check and its return
                await asyncio.sleep(0.001)
            for turn in turns:
                try:
                    await asyncio.wrap_future(turn)
                except BaseException:  # a turn's failure was posted as its answers
                    pass
            await asyncio.sleep(0)  # let the answers posted before the turns ended run

    def _visible(self, batch: list[ProduceItem], results: list[ProduceResult],
                 runs: list) -> None:
        """A batch's frames are visible (flushed, or synced for acks=all): the one place
        that feeds the tail cache (its runs of frames, in order: a run that does not
        follow the last one kept empties it first), then the batch is answered."""
        for run in runs:
            self.tail.add(*run)
        self._answer(batch, results)

    def _answer(self, batch: list[ProduceItem], results: list[ProduceResult]) -> None:
        for it, res in zip(batch, results):
            if not it.future.done():
                it.future.set_result(res)
        self.wake_fetchers()

    def _append_failed(self, batch: list[ProduceItem], exc: BaseException) -> None:
        """The log failed under ``batch``: the tail cache is emptied (what follows may
        not continue its runs) and every request is answered with ``exc``."""
        self.tail.clear()
        log.error("partition %s: append failed: %s", self.name, exc)
        self._answer(batch, [ProduceResult(error=exc)] * len(batch))

    def _append_inline(self, batch: list[ProduceItem]) -> bool:
        """Append and answer ``batch`` on the event loop when :meth:`_inline` allows it
        and no other thread holds the log's lock (retention, the cleaner, a stuck
        storage call: the event loop never waits for it); False when the batch must go
        to an I/O thread instead."""
        if not self._inline(batch):
            return False
        error = None
        with self.log.try_lock() as locked:
            if not locked:
                return False
            try:
                results, _, runs = self._append_batch(batch)  # never durable: no acks=all
            except BaseException as exc:  # the log failed as a whole
                error = exc
        if error is not None:
            self._append_failed(batch, error)
        else:
            self._visible(batch, results, runs)
        return True

    def _inline(self, batch: list[ProduceItem]) -> bool:
        """True when ``batch`` may be appended on the event loop (module docstring)."""
        limit = self.inline_append_bytes
        if not limit:
            return False
        size = 0
        for it in batch:
            if it.acks == ACKS_ALL:
                return False
            size += len(it.records)
        config = self.log.config
        if size > limit or config.flush_messages >= 0 or config.flush_ms >= 0 \
                or self.log.active_segment.size + size > config.segment_bytes:
            return False
        return not (self.state.changed and (time.monotonic() - self._last_snapshot) * 1000
                    >= self.snapshot_interval_ms)

    def _validate(self, item: ProduceItem, max_size: int) -> None:
        buf = item.records
        if not buf:
            raise CorruptRecordError(f"partition {self.name}: produce request has no frames")
        pos, end = 0, len(buf)
        magic = MAGIC_FIELD.position
        # every frame is checked (CRC included) before any is appended, so a request of
        # several frames is all-or-nothing; the append trusts these checks
        while pos < end:
            # a Kafka batch's CRC is checked with the rest of it, by _validate_kafka
            kafka = end - pos > magic and buf[pos + magic] == KAFKA_MAGIC
            try:
                header = validate_frame(buf, pos, max_size=max_size, verify_crc=not kafka,
                                        check_body=not kafka)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"partition {self.name}: {exc}") from None
            except RecordTooLargeError as exc:
                raise RecordTooLargeError(
                    f"partition {self.name}: {exc} (max.message.bytes)") from None
            if kafka:
                self._validate_kafka(buf, pos)
                item.frames.append((pos, header))
                pos += header.size
                continue
            # what only the broker or the cleaner may write (docs/format.md)
            check_client_frame(header, f"partition {self.name}, frame at byte {pos} of "
                                       f"the request")
            self.schema.check(buf, pos, header, self.name)
            if self.not_null is not None:
                self.not_null.check(buf, pos, header, self.name)
            if self.log.config.compact:
                self.keys.check(buf, pos, header, self.name)
            item.frames.append((pos, header))
            pos += header.size

    def _validate_kafka(self, buf, pos: int) -> None:
        """Check the Kafka record batch at byte ``pos`` of a request as Kafka's
        ``LogValidator`` checks a client's (:func:`validate_client_batch`: CRC-32C,
        codec, records that parse and fill it, consecutive offsets, ``maxTimestamp``,
        no bit only the broker or the cleaner sets, a key in every record of a
        compacted topic); a typed topic takes Arrow frames of its schema only.
        Refusals name the partition, the batch's byte in the request and the field."""
        if self.topic.typed:
            raise InvalidRecordError(
                f"partition {self.name}, Kafka record batch at byte {pos} of the request: "
                f"topic {self.topic_name} is typed and takes Arrow frames of its schema "
                f"{self.topic.record_schema} only (a Kafka client writes raw topics)")
        try:
            validate_client_batch(buf, pos, max_decompressed_bytes=self.max_decompressed_bytes,
                                  compacted=self.log.config.compact)
        except SparklogError as exc:
            raise type(exc)(f"partition {self.name}: {exc}") from None

    def _append_batch(self, batch: list[ProduceItem]):
        """I/O thread: validate, de-duplicate and append every request, then one flush
        for all unless one asked for acks=all, in which case the batch is handed to the
        sync worker (which answers it): the results, whether the batch was handed to a
        sync, and the runs of frames appended (for the tail cache once they are
        visible)."""
        plog, state = self.log, self.state
        max_size = plog.config.max_message_bytes
        results: list[ProduceResult] = []
        appended: list = []  # runs of frames (and their segment) for the tail cache
        keep = self.tail.max_run
        durable = False
        size = 0  # bytes appended
        for item in batch:
            try:
                leo = plog.log_end_offset
                self._validate(item, max_size)
                if item.bound is not None:
                    item.bound(item.frames)
                records = memoryview(item.records)
                if records.readonly:  # a small request arrives as bytes: stamp a copy
                    records = memoryview(bytearray(records))
                if all(h.producer_id == NO_PRODUCER_ID for _, h in item.frames):
                    res = plog.append_frames(records, item.frames, borrow=True)
                    first = ProduceResult(res.base_offset, res.log_append_time,
                                          plog.log_start_offset)
                    appended.append((res.base_offset, res.last_offset + 1,
                                     bytes(records) if len(records) <= keep else None,
                                     res.segment_base))
                else:
                    first = self._append_sequenced(records, item.frames, appended, keep)
                results.append(first._replace(records=plog.log_end_offset - leo))
                durable = durable or item.acks == ACKS_ALL
                size += len(records)
            except StorageError as exc:
                self.failed = True
                results.append(ProduceResult(error=exc))
            except (SparklogError, ValueError) as exc:
                results.append(ProduceResult(error=exc))
            item.records = b""  # release the request bytes early
            item.frames = []
        try:
            if not durable:
                plog.flush()
        except StorageError:
            self.failed = True
            raise
        if state.changed and (time.monotonic() - self._last_snapshot) * 1000 \
                >= self.snapshot_interval_ms:
            self._snapshot()
        if durable:  # answered by the sync worker once a sync covers it
            self._hand_to_sync(batch, results, appended, size)
        return results, durable, appended

    def _append_sequenced(self, records: memoryview, frames, appended: list,
                          keep: int) -> ProduceResult:
        """Append the frames of one request that carry producer ids one by one, each
        checked against (and recorded in) the producer state; a duplicate is answered
        with the offsets it got the first time. Returns the first frame's result; the
        frames appended go to ``appended`` (a copy when at most ``keep`` bytes)."""
        plog, state = self.log, self.state
        first = None
        for pos, header in frames:
            dup = state.check(header)
            if dup is not None:
                if first is None:
                    first = ProduceResult(dup.first_offset, -1, plog.log_start_offset,
                                          duplicate=True)
                continue
            frame = records[pos:pos + header.size]
            res = plog.append(frame, validated=header, borrow=True)
            appended.append((res.base_offset, res.last_offset + 1,
                             bytes(frame) if header.size <= keep else None, res.segment_base))
            state.update(header, res.base_offset)
            if first is None:
                first = ProduceResult(res.base_offset, res.log_append_time,
                                      plog.log_start_offset)
        assert first is not None, "a produce request carries at least one frame"
        return first

    def _snapshot(self) -> None:
        try:
            self.snapshots.write(self.state, self.log.log_end_offset)
        except SparklogError as exc:
            log.warning("partition %s: producer state snapshot failed: %s", self.name, exc)
        self._last_snapshot = time.monotonic()

    # --- fetch ----------------------------------------------------------------------------------
    # Waiting fetches are kept in a dict (insertion-ordered set): registering and
    # forgetting one are O(1) whatever the number parked, and a wake-up touches each
    # waiter once.
    def wake_fetchers(self) -> None:
        """Complete every waiting fetch (new data, or the broker is stopping), at most
        ``WAKE_BATCH`` per turn of the event loop, so other clients are served between
        the batches of thousands of woken long polls."""
        if not self._waiters:
            return
        self.wakes += 1
        waiters, self._waiters = list(self._waiters), {}
        self._wake(waiters, 0)

    def _wake(self, waiters: list, start: int) -> None:
        end = min(start + WAKE_BATCH, len(waiters))
        for w in waiters[start:end]:
            if not w.done():
                w.set_result(None)
        if end < len(waiters):
            self.loop.call_soon(self._wake, waiters, end)

    def data_waiter(self, future: asyncio.Future | None = None) -> asyncio.Future:
        """A future completed at the next advance of the high watermark (or close): the
        given one (a fetch of several partitions waits on one future all of them
        complete) or a new one; give it back with :meth:`forget_waiter` once no longer
        waited for."""
        if future is None:
            future = self.loop.create_future()
        self._waiters[future] = None
        return future

    def forget_waiter(self, future: asyncio.Future) -> None:
        """Drop a waiter (its fetch answered, timed out or its connection closed)."""
        self._waiters.pop(future, None)

    @property
    def busy(self) -> bool:
        """True while produce requests are queued or wait for a sync, or fetches wait on
        the partition."""
        return bool(self._waiters) or not self._queue.empty() or bool(self._unsynced) \
            or self._sync_running > 0

    # --- closing --------------------------------------------------------------------------------
    async def close(self, pool=None) -> None:
        """Drain queued requests, sync, snapshot the producer state, close the log;
        the blocking part runs on ``pool`` (default: the broker's I/O threads)."""
        if self._closing:
            await asyncio.shield(self._task)
            return
        self._closing = True
        self._queue.put_nowait(None)
        await self._task
        self.wake_fetchers()

        def finish():
            try:
                if not self.log.closed:
                    self.log.sync()
                    self.snapshots.write(self.state, self.log.log_end_offset)
            except SparklogError as exc:
                log.warning("partition %s: final sync/snapshot failed: %s", self.name, exc)
            finally:
                self.log.close()

        await self.loop.run_in_executor(pool or self.pool, finish)

    async def abandon(self) -> None:
        """Stop for a topic being deleted: queued requests are answered as
        :meth:`close` answers them, then the log stops writing without a final sync or
        producer state snapshot (:meth:`PartitionLog.abandon
        <sparklog.log.partition.PartitionLog.abandon>`); its open segment is released
        later (:meth:`PartitionLog.release_abandoned
        <sparklog.log.partition.PartitionLog.release_abandoned>`)."""
        if not self._closing:
            self._closing = True
            self._queue.put_nowait(None)
        await asyncio.shield(self._task)
        self.wake_fetchers()
        await self.loop.run_in_executor(self.pool, self.log.abandon)


def replay_producer_state(plog: PartitionLog, state: ProducerState, start: int,
                          chunk: int = 8 << 20) -> int:
    """Apply the headers of the frames from ``start`` to the high watermark to
    ``state`` (recovery after a snapshot); return the number of frames replayed."""
    offset, count = start, 0
    end = plog.high_watermark
    while offset < end:
        try:
            result = plog.read(offset, chunk)
        except DataLossError as exc:  # damaged frames: their producers are not known
            log.error("partition %s: producer state not rebuilt from %s", plog.name, exc)
            if exc.end_offset is None or exc.end_offset <= offset:
                break
            offset = exc.end_offset
            continue
        if not result.size:
            break
        for frame in iter_frames(result.data, verify_crc=False):
            header = frame.header
            if header.last_offset >= start:
                state.update(header, header.base_offset)
                count += 1
            offset = max(offset, header.next_offset)
    state.changed = count > 0
    return count


__all__ = ["PartitionWriter", "ProduceResult", "SchemaChecker", "replay_producer_state"]
