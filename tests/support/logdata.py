"""Writing test topics straight through the real log layer (TopicStore + PartitionLog),
and the rows Spark's Kafka-shaped output should hold for them."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading

from sparklog.format.frame import encode_frame, raw_batch
from sparklog.log.partition import PartitionLog
from sparklog.metadata import TopicStore
from sparklog.storage import open_fileio

BASE_TS = 1_700_000_000_000  # ms


def ts(ms: int) -> dt.datetime:
    """The Spark (UTC session) value of a timestamp in ms."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).replace(tzinfo=None)


@contextlib.contextmanager
def lock_held_elsewhere(plog: PartitionLog, timeout: float = 30):
    """Within the block, another thread holds ``plog``'s lock (as retention or the
    cleaner would, on an I/O thread); released and joined on the way out."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with plog.try_lock() as locked:
            if locked:
                held.set()
                release.wait(2 * timeout)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert held.wait(timeout), "the other thread did not take the log's lock"
        yield
    finally:
        release.set()
        holder.join(timeout)


def compaction_round_keys(r: int) -> list[bytes]:
    """The keys of the 3 records of round ``r`` of a compacted partition's writes:
    rounds 1, 5, 9, ... write keys a, b, c only (the earlier rounds lose every record:
    gaps); rounds 2, 6, 10, ... new keys only (all stay, after a gap); the others a new
    key and the shared ``s`` and ``t`` (the earlier rounds lose some)."""
    if r % 4 == 1:
        return [b"a", b"b", b"c"]
    if r % 4 == 2:
        return [b"u%d%s" % (r, x) for x in (b"a", b"b", b"c")]
    return [b"u%d" % r, b"s", b"t"]


def record(topic: str, partition: int, offset: int, *, headers=False, ts_ms=None):
    """The deterministic record at ``offset`` (key, value, timestamp, headers)."""
    return {
        "key": f"k{partition}-{offset % 7}".encode(),
        "value": f"{topic}/{partition}/{offset}".encode(),
        "timestamp": BASE_TS + offset * 1000 + partition if ts_ms is None else ts_ms,
        "headers": [("h", f"{offset}".encode())] if headers else None,
    }


def append_frames(store: TopicStore, topic: str, partition: int, frames: list, *,
                  config: dict | None = None, log_append_time_ms: int | None = None) -> None:
    """Append frames given as ``(record_batch, timestamps_ms)`` to the partition's log."""
    plog = PartitionLog.open(store.fileio, store.partition_dir(topic, partition), config or {})
    try:
        for batch, stamps in frames:
            plog.append(encode_frame(batch, timestamps=stamps),
                        log_append_time_ms=log_append_time_ms)
        plog.flush()
    finally:
        plog.close()


def append_records(store: TopicStore, topic: str, partition: int, records: list, *,
                   per_frame: int = 10, config: dict | None = None,
                   log_append_time_ms: int | None = None) -> None:
    """Append ``records`` (dicts of key/value/timestamp/headers) as frames of
    ``per_frame`` records to the partition's log."""
    frames = []
    for i in range(0, len(records), per_frame):
        chunk = records[i:i + per_frame]
        frames.append((raw_batch([r["value"] for r in chunk], [r["key"] for r in chunk],
                                 [r["headers"] for r in chunk]),
                       [r["timestamp"] for r in chunk]))
    append_frames(store, topic, partition, frames, config=config,
                  log_append_time_ms=log_append_time_ms)


def make_topic(root: str, topic: str, partitions: int = 2, count: int = 30, *,
               headers: bool = False, per_frame: int = 10, config: dict | None = None,
               log_append_time_ms: int | None = None) -> TopicStore:
    """Create a raw topic with ``count`` deterministic records per partition."""
    store = TopicStore(root, open_fileio(root))
    store.create_topic(topic, partitions, configs=config)
    for p in range(partitions):
        recs = [record(topic, p, o, headers=headers) for o in range(count)]
        append_records(store, topic, p, recs, per_frame=per_frame, config=config,
                       log_append_time_ms=log_append_time_ms)
    return store


def expected_rows(topic: str, ranges: dict, *, headers=None) -> list:
    """Kafka-shaped rows for {partition: range(offsets)} of a topic made by make_topic.
    ``headers``: None for no headers column, else whether records carry headers."""
    rows = []
    for p, offsets in sorted(ranges.items()):
        for o in offsets:
            r = record(topic, p, o, headers=bool(headers))
            row = (r["key"], r["value"], topic, p, o, ts(r["timestamp"]), 0)
            if headers is not None:
                row += ([(k, v) for k, v in r["headers"]] if r["headers"] else None,)
            rows.append(row)
    return rows


def append_more(store, topic, partition, offsets):
    """Append the records of ``offsets`` (as :func:`record` makes them) to a partition."""
    append_records(store, topic, partition, [record(topic, partition, o) for o in offsets])


def cleaned_topic(root: str, topic: str = "cp"):
    """A compacted topic of one partition (segments of 3000 bytes, replaced files kept
    ten minutes for planned readers): 80 records over 6 keys in frames of 5, then one
    cleaning, which must have cleaned something; returns its CleanResult."""
    from sparklog.log.cleaner import clean

    store = TopicStore(root, open_fileio(root))
    config = {"cleanup.policy": "compact", "segment.bytes": "3000",
              "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "600000"}
    store.create_topic(topic, 1, configs=config)
    plog = PartitionLog.open(store.fileio, store.partition_dir(topic, 0), config)
    try:
        for i in range(0, 80, 5):
            plog.append(encode_frame(
                raw_batch([b"v%d" % o for o in range(i, i + 5)],
                          [f"k{o % 6}".encode() for o in range(i, i + 5)]),
                timestamps=[BASE_TS + o for o in range(i, i + 5)]))
        result = clean(plog)
        assert result is not None, f"{topic}: the cleaning cleaned nothing"
        return result
    finally:
        plog.close()
