"""Record APIs of the broker: Produce, Fetch, ListOffsets and DeleteRecords.

:class:`RecordApis` holds the collaborators they use; each handler is
``async (body, ctx) -> response dict`` (None for Produce with acks=0). Appends go through
each partition's :class:`~sparklog.server.partition.PartitionWriter` (one queue
and one writer task per partition); reads run on the I/O threads, except those the
partition's :class:`~sparklog.server.tail.TailCache` answers from memory (a
consumer following the tail: the frames the last appends wrote), which are answered on
the event loop, as are fetches that find nothing to read.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from ..errors import (
    InvalidArgumentError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    SparklogError,
)
from ..protocol.apis import (
    ACKS_ALL,
    ACKS_LEADER,
    ACKS_NONE,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_OFFSET,
    ApiKey,
)
from ..protocol.codec import FileRegion, error_fields
from .config import BrokerConfig
from .partition import ProduceResult
from .partitions import PartitionManager
from .producer_ids import ProducerIdManager
from .refusals import RefusalLog

log = logging.getLogger(__name__)

_NO_ERROR = {"error_code": 0, "error_message": ""}


def _nothing_to_read(plog, offset: int) -> bool:
    """True when a fetch at ``offset`` finds no data without reading anything: at or
    past the high watermark, within the log (a read would answer empty)."""
    return plog.high_watermark <= offset <= plog.log_end_offset \
        and offset >= plog.log_start_offset


def _complete(future: asyncio.Future, *_) -> None:
    """Complete a parked fetch's future (new data, its timeout, its connection closed),
    unless done already."""
    if not future.done():
        future.set_result(None)


def _time_out(futures, timeout_ms: int) -> None:
    """Answer the produce futures still pending after ``timeout_ms``."""
    for topic, partition, fut in futures:
        if not fut.done():
            fut.set_result(ProduceResult(error=RequestTimedOutError(
                f"partition {topic}-{partition}: not appended within "
                f"timeout_ms={timeout_ms}")))


class RecordApis:
    """The record handlers (module docstring) and what they use: ``partitions`` (the
    broker's :class:`~sparklog.server.partitions.PartitionManager`: writers,
    leadership checks, storage), ``config`` (``fetch.max.bytes``), ``run_io`` (runs a
    blocking call on the I/O threads), ``refusals`` (logs refused writes),
    ``metrics`` (or None) and ``producer_ids`` (the broker's
    :class:`~sparklog.server.producer_ids.ProducerIdManager`: whose producer
    ids a Produce request's frames may name)."""

    def __init__(self, partitions: PartitionManager, config: BrokerConfig, *, run_io,
                 refusals: RefusalLog, producer_ids: ProducerIdManager, metrics=None):
        self.producer_ids = producer_ids
        self.partitions = partitions
        self.config = config
        self.run_io = run_io
        self.refusals = refusals
        self.metrics = metrics

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The broker's event loop."""
        return self.partitions.loop

    def handlers(self) -> dict:
        """api key -> ``handler(body, ctx)``."""
        return {ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch,
                ApiKey.LIST_OFFSETS: self.list_offsets,
                ApiKey.DELETE_RECORDS: self.delete_records}

    async def produce(self, body, ctx) -> dict | None:
        """Produce: each partition's records queued on its writer in the connection's
        arrival order; answered once every partition's append is done (acks 1 or all) or
        ``timeout_ms`` passed; no answer with acks=0. A partition whose frames name a
        producer id its ``producer_token`` does not bind to the sender is refused
        (InvalidProducerIdMapping) once its frames are validated, before they reach
        the producer state."""
        acks = body["acks"]
        if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
            raise InvalidArgumentError(f"Produce.acks={acks} must be 0, 1 or -1 (all)")
        pending: list[tuple] = []   # (topic, partition, future | error, size)
        woke = False   # an append done in submit() woke parked fetches
        async with ctx.order:  # requests of a connection are queued in arrival order
            for t in body["topics"]:
                for p in t["partitions"]:
                    try:
                        w = await self.partitions.writer(t["name"], p["partition"])
                        bound = self.producer_ids.binder(
                            p.get("producer_token"), ctx, f"{t['name']}-{p['partition']}")
                        wakes = w.wakes
                        pending.append((t["name"], p["partition"],
                                        w.submit(p["records"], acks, bound),
                                        len(p["records"])))
                        woke = woke or w.wakes != wakes
                    except SparklogError as exc:
                        pending.append((t["name"], p["partition"], exc, 0))
        # a small append to an idle local partition is already answered (appended in
        # submit()): no timer, no wait
        futures = [(t, p, f) for t, p, f, _ in pending
                   if isinstance(f, asyncio.Future) and not f.done()]
        if woke and not futures:
            # the fetches this append woke resume at the loop's next turn: answer them
            # first (as Kafka's purgatory does), this acknowledgement right after
            await asyncio.sleep(0)
        if futures:
            # one timer answers what is still pending at the deadline (the writer skips
            # a future already done); cheaper per request than asyncio.wait
            timer = self.loop.call_later(max(body["timeout_ms"], 0) / 1000, _time_out,
                                         futures, body["timeout_ms"])
            try:
                for _, _, fut in futures:
                    await fut
            finally:
                timer.cancel()
        topics: dict[str, list] = {}
        for topic, partition, fut, size in pending:
            if not isinstance(fut, asyncio.Future):
                error = fut
                item = {"partition": partition, **error_fields(fut), "base_offset": -1}
            else:
                res = fut.result()
                res = self.partitions.leadership.checked_result(topic, partition, res)
                error = res.error
                item = {"partition": partition, **error_fields(res.error),
                        "base_offset": res.base_offset,
                        "log_append_time_ms": res.log_append_time_ms,
                        "log_start_offset": res.log_start_offset}
                if res.error is None and self.metrics is not None:
                    self.metrics.produced(topic, size, res.records)
            if error is not None:
                self.refusals.refused("Produce", topic, partition, error, size,
                                      f"{ctx.client_host} ({ctx.client_id})")
            topics.setdefault(topic, []).append(item)
        if acks == ACKS_NONE:
            for topic, items in topics.items():
                for item in items:
                    if item["error_code"]:
                        log.warning("acks=0 produce to %s-%d from %s failed: %s", topic,
                                    item["partition"], ctx.client_host, item["error_message"])
            return None
        return {**_NO_ERROR, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}

    async def fetch(self, body, ctx) -> dict:
        """Fetch: reads up to ``max_bytes`` (a FileRegion sent with sendfile from local
        storage); with less than ``min_bytes`` it waits on the partitions until more is
        flushed or ``max_wait_ms`` passed (Kafka's fetch purgatory): on one future that
        the partitions' next appends complete, so the append resumes it at the next
        turn of the event loop, which answers it from the tail cache."""
        deadline = self.loop.time() + max(body["max_wait_ms"], 0) / 1000
        while True:
            results, total, waiters, errors = await self._fetch_once(body, ctx)
            remaining = deadline - self.loop.time()
            gone = ctx.closed is not None and ctx.closed.done()
            if total >= body["min_bytes"] or errors or remaining <= 0 or self.partitions.closing \
                    or not waiters or gone:
                for w, fut in waiters:
                    w.forget_waiter(fut)
                break
            # parked on the one future every fetched partition completes at its next
            # append (the timeout and a closed connection complete it too): the append
            # that completes it resumes this handler at the next turn of the loop
            wake = waiters[0][1]
            done = functools.partial(_complete, wake)
            timer = self.loop.call_later(remaining, done)
            if ctx.closed is not None:
                ctx.closed.add_done_callback(done)
            if self.metrics is not None:
                self.metrics.purgatory.inc()
            parked = self.loop.time()
            try:
                await wake
            finally:
                ctx.parked += self.loop.time() - parked
                timer.cancel()
                if ctx.closed is not None:
                    ctx.closed.remove_done_callback(done)
                for w, fut in waiters:
                    w.forget_waiter(fut)
                if self.metrics is not None:
                    self.metrics.purgatory.dec()
        if self.metrics is not None:
            self.metrics.fetched(results)
        topics: dict[str, list] = {}
        for topic, item in results:
            topics.setdefault(topic, []).append(item)
        return {**_NO_ERROR, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}

    async def _fetch_once(self, body, ctx):
        """One pass over the fetched partitions: (results, total bytes, waiters,
        errors)."""
        wanted: list[tuple] = []  # (topic, partition, writer | None, error | None)
        waiters = []   # (writer, future): given back to the writer once done
        wake = self.loop.create_future()  # one for all the partitions (see fetch())
        errors = 0
        for t in body["topics"]:
            for p in t["partitions"]:
                try:
                    w = await self.partitions.writer(t["name"], p["partition"])
                    # registered before reading: no lost wake-up
                    waiters.append((w, w.data_waiter(wake)))
                    wanted.append((t["name"], p, w, None))
                except SparklogError as exc:
                    wanted.append((t["name"], p, None, exc))
                except BaseException:
                    for w, fut in waiters:
                        w.forget_waiter(fut)
                    raise
        budget = max(min(body["max_bytes"], self.config.fetch_max_bytes), 1)
        fileio = self.partitions.fileio

        def from_tail(w, offset: int, limit: int):
            """The frames at ``offset`` from the partition's tail cache, or None."""
            if offset < w.log.log_start_offset:
                return None
            return w.tail.read(offset, max(limit, 1), w.log.active_segment.base_offset)

        def read_all(inline: bool):
            """(results, total bytes, errors); ``inline`` (on the event loop): from the
            tail caches only, None as soon as a partition needs a read of storage."""
            out, total, errs = [], 0, 0
            sent = []  # (topic, bytes) for the metrics
            oversized = False
            for topic, p, w, exc in wanted:
                base = {"partition": p["partition"], "high_watermark": -1,
                        "log_start_offset": -1, "records": b""}
                if exc is None:
                    try:
                        limit = min(p["partition_max_bytes"], budget - total)
                        skip = limit <= 0 and total
                        if inline and not skip:
                            cached = from_tail(w, p["fetch_offset"], limit)
                            if cached is not None:
                                base.update(_NO_ERROR, high_watermark=w.log.high_watermark,
                                            log_start_offset=w.log.log_start_offset,
                                            records=cached)
                                total += len(cached)
                                sent.append((topic, len(cached)))
                                out.append((topic, base))
                                continue
                            if not _nothing_to_read(w.log, p["fetch_offset"]):
                                return None
                        res = None if skip else w.log.read(p["fetch_offset"], max(limit, 1))
                        if res is not None and res.size > limit:
                            # one frame larger than the limits is returned whole (as
                            # Kafka's first record batch), one per response: clients
                            # bound a response by max_bytes + one frame
                            res = None if oversized else res
                            oversized = True
                        if res is None:
                            base.update(_NO_ERROR, high_watermark=w.log.high_watermark,
                                        log_start_offset=w.log.log_start_offset)
                            out.append((topic, base))
                            continue
                        records: bytes | FileRegion = res.data
                        local = fileio.local_path(res.segment_path) if res.size else None
                        if local is not None:
                            records = FileRegion(local, res.position, res.size)
                        base.update(_NO_ERROR, high_watermark=res.high_watermark,
                                    log_start_offset=res.log_start_offset, records=records)
                        total += res.size
                        if res.size:
                            sent.append((topic, res.size))
                    except OffsetOutOfRangeError as e:
                        base.update(error_fields(e), high_watermark=w.log.high_watermark,
                                    log_start_offset=w.log.log_start_offset)
                        errs += 1
                    except SparklogError as e:
                        base.update(error_fields(e))
                        errs += 1
                else:
                    base.update(error_fields(exc))
                    errs += 1
                out.append((topic, base))
            if self.metrics is not None:
                for topic, size in sent:
                    self.metrics.sent(topic, size)
            return out, total, errs

        try:
            # without I/O first: a long poll parks at once, a fetch of the tail is
            # answered from memory; else the reads go to the I/O threads
            done = read_all(True)
            if done is None:
                async with ctx.io_slots:  # one connection cannot fill the I/O threads
                    done = await self.run_io(read_all, False)
            results, total, errors = done
        except BaseException:
            for w, fut in waiters:
                w.forget_waiter(fut)
            raise
        return results, total, waiters, errors

    async def list_offsets(self, body, ctx) -> dict:
        """ListOffsets: latest (-1), earliest (-2), the record of the largest timestamp
        (-3) or the first offset at a time."""
        topics = []
        for t in body["topics"]:
            items = []
            for p in t["partitions"]:
                item = {"partition": p["partition"], "offset": NO_OFFSET, "timestamp": -1}
                try:
                    w = await self.partitions.writer(t["name"], p["partition"])
                    ts = p["timestamp"]
                    if ts == LATEST_TIMESTAMP:
                        item["offset"] = w.log.high_watermark
                    elif ts == EARLIEST_TIMESTAMP:
                        item["offset"] = w.log.log_start_offset
                    elif ts == MAX_TIMESTAMP:
                        largest = await self.run_io(w.log.max_timestamp_offset)
                        if largest is not None:
                            item["offset"], item["timestamp"] = largest
                    elif ts < 0:
                        raise InvalidArgumentError(
                            f"ListOffsets timestamp {ts} for {t['name']}-{p['partition']}: use "
                            "-1 (latest), -2 (earliest), -3 (the largest timestamp) or a time "
                            "in ms")
                    else:
                        found = await self.run_io(w.log.record_for_timestamp, ts)
                        if found is not None:  # the record's own timestamp, as Kafka's
                            item["offset"], item["timestamp"] = found
                    item.update(_NO_ERROR)
                except SparklogError as exc:
                    item.update(error_fields(exc))
                items.append(item)
            topics.append({"name": t["name"], "partitions": items})
        return {**_NO_ERROR, "topics": topics}

    async def delete_records(self, body, ctx) -> dict:
        """DeleteRecords (Kafka's): each partition's log start offset moves up to the
        offset given (-1: the high watermark); on a partition offline because its log
        lost its tail, the operator's acceptance of the loss: the log restarts at its
        old end (:meth:`~.partitions.PartitionManager.delete_records`)."""
        topics = []
        for t in body["topics"]:
            items = []
            for p in t["partitions"]:
                item = {"partition": p["partition"], "low_watermark": -1}
                try:
                    item["low_watermark"] = await self.partitions.delete_records(
                        t["name"], p["partition"], p["offset"])
                    item.update(_NO_ERROR)
                    log.info("DeleteRecords by %s: %s-%d now starts at offset %d",
                             ctx.client_id, t["name"], p["partition"], item["low_watermark"])
                except SparklogError as exc:
                    item.update(error_fields(exc))
                items.append(item)
            topics.append({"name": t["name"], "partitions": items})
        return {**_NO_ERROR, "topics": topics}
