"""Log compaction (cleanup.policy=compact) on real files: Kafka's cleaning semantics, one
test per setting, the swap protocol cut at every storage call, and a hypothesis property
test against a model with crashes injected at every step of the swap."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparklog.errors import InvalidConfigError
from sparklog.format.frame import encode_frame, raw_batch
from sparklog.format.marker import ABORT, COMMIT, encode_marker, marker_type
from sparklog.log import LogReader, PartitionLog
from sparklog.log.cleaner import clean, cleanable_state
from sparklog.log.layout import PartitionListing
from sparklog.log.transactions import TransactionTracker
from sparklog.storage import open_fileio
from tests.support.logfiles import RecordingFileIO, SimulatedCrash


class Clock:
    """A settable clock (ms) for the log and the cleaner."""

    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def keyed_frame(pairs, ts: int, **kw) -> bytes:
    """A raw frame of (key, value) pairs (value None: a tombstone), all at time ``ts``."""
    keys = [k.encode() for k, _ in pairs]
    values = [None if v is None else v.encode() for _, v in pairs]
    return encode_frame(raw_batch(values, keys=keys), timestamps=[ts] * len(pairs), **kw)


FRAME = len(keyed_frame([("k0", "v000")], 0))
BASE_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 3 * FRAME,
               "index.interval.bytes": 1, "min.cleanable.dirty.ratio": 0.01,
               "delete.retention.ms": 1000, "file.delete.delay.ms": 0}


def config(**overrides):
    out = dict(BASE_CONFIG)
    out.update({k.replace("_", "."): v for k, v in overrides.items()})
    return out


def records(fio, directory):
    """(offset, key, value) of every record a LogReader reads now, in offset order."""
    reader = LogReader(fio, directory)
    end = reader.log_end_offset()
    out = []
    for batch in reader.read_batches(reader.log_start_offset(), end):
        for o, k, v in zip(batch.column("__offset").to_pylist(), batch.column("key").to_pylist(),
                           batch.column("value").to_pylist()):
            out.append((o, k.decode(), None if v is None else v.decode()))
    return out


def write(plog, clock, pairs):
    for key, value in pairs:
        plog.append(keyed_frame([(key, value)], clock.now))
    plog.flush()


def test_latest_value_per_key_keeps_offsets_and_the_active_segment(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(), clock=clock) as plog:
        write(plog, clock, [("a", "1"), ("b", "1"), ("a", "2"), ("c", "1"), ("b", "2"),
                            ("a", "3"), ("d", "1"), ("a", "4")])
        active_before = plog.segments[-1]
        result = clean(plog, clock.now)
        assert result is not None and result.end_offset == 6  # two sealed segments
        assert plog.segments[-1] is active_before  # the active segment is never touched
        expected = [(3, "c", "1"), (4, "b", "2"), (5, "a", "3"), (6, "d", "1"),
                    (7, "a", "4")]
        assert records(fio, d) == expected
        # the broker's fetch path reads the cleaned segment too, from a removed offset
        fetched = plog.read(0, 1 << 20)
        assert fetched.size > 0 and fetched.segment_path.endswith(".c1.log")
        # appends go on; a second cleaning reaches the newer records
        write(plog, clock, [("b", "3"), ("c", "2"), ("e", "1")])
        assert clean(plog, clock.now) is not None
    # c's newest record is in the active segment: not in the key map, c1 stays
    assert records(fio, d) == [(3, "c", "1"), (6, "d", "1"), (7, "a", "4"), (8, "b", "3"),
                               (9, "c", "2"), (10, "e", "1")]
    listing = PartitionListing.scan(fio, d)
    assert [f.generation for f in listing.logs()] == [2, 1, 0]
    # reopening (recovery) gives the same log
    with PartitionLog.open(fio, d, config(), clock=clock) as plog:
        assert plog.log_end_offset == 11
    assert records(fio, d)[0] == (3, "c", "1")


def test_tombstone_kept_delete_retention_ms_after_the_cleaning_that_reached_it(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(delete_retention_ms=5000), clock=clock) as plog:
        write(plog, clock, [("a", "1"), ("b", "1"), ("a", None), ("c", "1"), ("c", "2"),
                            ("d", "1"), ("x", "1")])
        assert clean(plog, clock.now) is not None
        # the tombstone stays, the value before it is gone
        assert [r for r in records(fio, d) if r[1] == "a"] == [(2, "a", None)]
        clock.now += 4999
        write(plog, clock, [("y", "1"), ("y", "2"), ("y", "3")])
        assert clean(plog, clock.now) is not None
        assert (2, "a", None) in records(fio, d)  # still within delete.retention.ms
        clock.now += 2
        write(plog, clock, [("z", "1"), ("z", "2"), ("z", "3")])
        result = clean(plog, clock.now)
        assert result.tombstones_removed == 1
    assert [r for r in records(fio, d) if r[1] == "a"] == []


def test_min_compaction_lag_ms_keeps_recent_segments_dirty(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(min_compaction_lag_ms=10_000), clock=clock) as plog:
        write(plog, clock, [("a", "1"), ("a", "2"), ("a", "3")])
        clock.now += 6000
        write(plog, clock, [("a", "4"), ("a", "5"), ("a", "6"), ("b", "1")])
        assert clean(plog, clock.now) is None  # every record is younger than the lag
        clock.now += 5000  # the first segment is now older than the lag, the second not
        state = cleanable_state(plog, clock.now)
        assert state.first_uncleanable == 3
        assert clean(plog, clock.now).end_offset == 3
        assert [r[0] for r in records(fio, d)] == [2, 3, 4, 5, 6]


def test_min_cleanable_dirty_ratio_and_max_compaction_lag_ms(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    cfg = config(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=60_000)
    with PartitionLog.open(fio, d, cfg, clock=clock) as plog:
        write(plog, clock, [(f"k{i}", "1") for i in range(6)] + [("k0", "2")])
        assert clean(plog, clock.now, force=True) is not None  # first 6 records clean
        write(plog, clock, [("k0", "3"), ("k1", "3"), ("k2", "3"), ("x", "1")])
        state = cleanable_state(plog, clock.now)
        assert 0 < state.dirty_ratio < 0.9
        assert clean(plog, clock.now) is None  # below min.cleanable.dirty.ratio
        clock.now += 60_001  # the oldest dirty record passed max.compaction.lag.ms
        assert clean(plog, clock.now) is not None
        assert cleanable_state(plog, clock.now).dirty_bytes == 0


def test_segment_bytes_bounds_cleaned_segments(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(), clock=clock) as plog:
        write(plog, clock, [(f"k{i}", "1") for i in range(12)] + [("z", "1")])
        result = clean(plog, clock.now)
        # nothing to remove: each group of segments fits segment.bytes = 3 frames
        assert result.segments_replaced == 4 and result.segments_written == 4
        write(plog, clock, [(f"k{i}", "2") for i in range(12)] + [("z", "2")])
        assert clean(plog, clock.now) is not None  # grouped by their sizes before it
        write(plog, clock, [("y", "1"), ("y", "2"), ("y", "3")])
        result = clean(plog, clock.now)
        # the first 4 cleaned segments are now empty and merge with the next ones
        assert result.segments_written < result.segments_replaced
        for seg in plog.segments:
            assert seg.size <= 3 * FRAME
    keys = [r[1] for r in records(fio, d)]
    assert keys[:13] == [f"k{i}" for i in range(12)] + ["z"] and set(keys[13:]) == {"y"}


def test_dedupe_buffer_size_bounds_the_key_map(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(), clock=clock) as plog:
        write(plog, clock, [(f"k{i}", "1") for i in range(9)] + [("z", "1")])
        # 4 keys of 24 bytes: one segment (3 keys) fits, a second would not
        result = clean(plog, clock.now, dedupe_buffer_size=4 * 24)
        assert result.end_offset == 3
        with pytest.raises(InvalidConfigError, match="dedupe.buffer.size"):
            clean(plog, clock.now, dedupe_buffer_size=2 * 24)


def test_typed_topic_compacts_on_its_key_column_or_is_refused(fio, tmp_path):
    clock = Clock()
    schema = pa.schema([pa.field("key", pa.string()), pa.field("n", pa.int64())])
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(), clock=clock) as plog:
        for k, n in [("a", 1), ("b", 2), ("a", 3), ("z", 0)]:
            batch = pa.RecordBatch.from_arrays([pa.array([k]), pa.array([n])], schema=schema)
            plog.append(encode_frame(batch, timestamps=[clock.now]))
        plog.roll()
        assert clean(plog, clock.now) is not None
        reader = LogReader(fio, d)
        rows = [b.to_pylist() for b in reader.read_batches(0, reader.log_end_offset())]
        assert [(r["__offset"], r["key"], r["n"]) for b in rows for r in b] == \
            [(1, "b", 2), (2, "a", 3), (3, "z", 0)]
    keyless = pa.schema([pa.field("n", pa.int64())])
    d2 = str(tmp_path / "u" / "0")
    with PartitionLog.open(fio, d2, config(), clock=clock) as plog:
        for n in range(4):
            batch = pa.RecordBatch.from_arrays([pa.array([n])], schema=keyless)
            plog.append(encode_frame(batch, timestamps=[clock.now]))
        plog.roll()
        with pytest.raises(InvalidConfigError, match="no 'key' column"):
            clean(plog, clock.now)


def test_typed_topic_compacts_on_its_declared_key_columns(fio, tmp_path):
    from sparklog.metadata.topic import TopicConfig

    clock = Clock()
    schema = pa.schema([("tenant", pa.string()), ("id", pa.int64()), ("n", pa.int64())])
    d = str(tmp_path / "t" / "0")
    rows = [("a", 1, 10), ("a", 2, 20), ("b", 1, 30), ("a", 1, 40), ("ab", 1, 50), ("z", 0, 0)]
    with PartitionLog.open(fio, d, config(compaction_key_columns="tenant, id"),
                           clock=clock) as plog:
        for t, i, n in rows:
            batch = pa.RecordBatch.from_arrays([pa.array([t]), pa.array([i]), pa.array([n])],
                                               schema=schema)
            plog.append(encode_frame(batch, timestamps=[clock.now]))
        plog.roll()
        assert clean(plog, clock.now).records_removed == 1  # ("a", 1) at offset 0
        reader = LogReader(fio, d)
        got = [(r["__offset"], r["tenant"], r["id"], r["n"]) for b in
               reader.read_batches(0, reader.log_end_offset()) for r in b.to_pylist()]
    assert got == [(1, "a", 2, 20), (2, "b", 1, 30), (3, "a", 1, 40), (4, "ab", 1, 50),
                   (5, "z", 0, 0)]
    # a topic declaring columns its schema lacks is refused at creation, naming them
    with pytest.raises(InvalidConfigError, match="no 'tenantid' column"):
        TopicConfig("bad", 1, schema=schema, configs={"cleanup.policy": "compact",
                                       "compaction.key.columns": "tenantid"})
    with pytest.raises(InvalidConfigError, match="typed topics only"):
        TopicConfig("raw", 1, configs={"compaction.key.columns": "tenant"})
    assert TopicConfig("ok", 1, schema=schema, configs={"cleanup.policy": "compact",
                                         "compaction.key.columns": "tenant,id"})


def test_replaced_files_kept_file_delete_delay_ms_for_planned_readers(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(file_delete_delay_ms=30_000), clock=clock) as plog:
        write(plog, clock, [("a", "1"), ("a", "2"), ("a", "3"), ("a", "4"), ("b", "1")])
        planned = LogReader(fio, d)  # lists the old segments
        planned_frames = planned.iter_frames(0, 5)
        first = next(planned_frames)
        old = [s.path for s in plog.segments[:-1]]
        clean(plog, clock.now)
        assert all(os.path.exists(p) for p in old)  # kept for readers that planned them
        # the planned reader finishes on the old files: the same offsets, as planned
        assert [first.header.base_offset] + [f.header.base_offset for f in planned_frames] \
            == [0, 1, 2, 3, 4]
        # a reader planned before the swap whose files are then deleted re-plans
        stale = LogReader(fio, d)
        clean(plog, clock.now)  # nothing dirty: no-op
        clock.now += 30_001
        plog.delete_replaced_files()
        assert not any(os.path.exists(p) for p in old)
        # a's record in the active segment is not in the key map: (2, a) stays
        assert [(o, k) for o, k, _ in records(fio, d)] == [(2, "a"), (3, "a"), (4, "b")]
        assert [f.header.base_offset for f in stale.iter_frames(0, 5)] == [2, 3, 4]


def test_reader_planned_before_the_swap_reads_the_replacement(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(), clock=clock) as plog:  # delay 0
        write(plog, clock, [("a", "1"), ("a", "2"), ("a", "3"), ("a", "4"), ("b", "1")])
        reader = LogReader(fio, d)
        reader.log_end_offset()
        clean(plog, clock.now)  # the old files are deleted at the next pass
        plog.delete_replaced_files()
        got = [(b.column("__offset").to_pylist()) for b in reader.read_batches(0, 5)]
        assert [o for offs in got for o in offs] == [2, 3, 4]


def _crash_steps(fio, tmp_path, make):
    """Run ``make(fileio, dir)`` then clean, crashing at step 1, 2, ...; after each
    crash, reopen with fence=True and return the list of (step, records, listing)."""
    outcomes, step = [], 0
    while True:
        step += 1
        d = str(tmp_path / f"s{step}" / "t" / "0")
        clock = Clock()
        with PartitionLog.open(fio, d, config(), clock=clock) as plog:
            make(plog, clock)
        recording = RecordingFileIO(fio)
        plog = PartitionLog.open(recording, d, config(), clock=clock, fence=True)
        recording.crash_at(step)
        try:
            clean(plog, clock.now)
        except SimulatedCrash as crash:
            outcomes.append((str(crash).split()[0], d))
            continue
        recording.crash_at(None)
        plog.close()
        return outcomes, d


def test_crash_at_every_step_of_the_swap_recovers_old_or_new(fio, tmp_path):
    pairs = [("a", "1"), ("b", "1"), ("a", "2"), ("b", "2"), ("a", "3"), ("c", "1"),
             ("x", "1")]

    def make(plog, clock):
        write(plog, clock, pairs)

    full = [(o, k, v) for o, (k, v) in enumerate(pairs)]
    cleaned = [(3, "b", "2"), (4, "a", "3"), (5, "c", "1"), (6, "x", "1")]
    outcomes, final = _crash_steps(fio, tmp_path, make)
    assert {m for m, _ in outcomes} >= {"create", "write", "sync", "close", "rename"}
    old_seen = new_seen = 0
    for method, d in outcomes:
        # every reader sees the old set or the new one, before and after recovery
        before = records(fio, d)
        with PartitionLog.open(fio, d, config(), fence=True) as plog:
            assert plog.log_end_offset == 7
            state = before if before == full else None
        after = records(fio, d)
        assert after == before and after in (full, cleaned), (method, after)
        old_seen += after == full
        new_seen += after == cleaned
        listing = PartitionListing.scan(fio, d)
        assert listing.uncommitted() == []  # recovery removed half-written copies
        del state
    assert old_seen and new_seen
    assert records(fio, final) == cleaned


# --- the property test ------------------------------------------------------------------

KEYS = ["a", "b", "c", "d"]
OPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(KEYS),
              st.one_of(st.none(), st.text("xyz", min_size=1, max_size=3))),
    st.tuples(st.just("roll")),
    st.tuples(st.just("tick"), st.integers(1, 700)),
    st.tuples(st.just("clean"), st.one_of(st.none(), st.integers(1, 40))),
    st.tuples(st.just("txn"), st.sampled_from(KEYS), st.text("xyz", min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.sampled_from([ABORT, COMMIT])),
), min_size=1, max_size=40)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS)
@example(ops=[("write", "a", "x"), ("txn", "a", "y"), ("txn", "b", "y"), ("roll",),
              ("clean", None), ("end", ABORT), ("txn", "b", "z"), ("roll",), ("clean", None),
              ("end", COMMIT), ("roll",), ("clean", 3), ("clean", None)])
def test_property_reads_match_the_model_through_cleanings_and_crashes(fio, tmp_path_factory, ops):
    """Any sequence of keyed writes, tombstones, rolls, cleanings, crashes at any step
    of a cleaning, and a transactional producer's writes, aborts and commits: every read
    returns records with their original offsets, in offset order, a subset of what was
    written holding each key's latest committed record (a tombstone until
    delete.retention.ms after the cleaning that first reached it) and every record of
    the open transaction; below the end of the last finished cleaning, only each key's
    latest committed record, no aborted one; a read_committed read is the same less the
    aborted records."""
    d = str(tmp_path_factory.mktemp("prop") / "t" / "0")
    clock = Clock()
    cfg = config(delete_retention_ms=1000)
    written: dict[int, tuple[str, str | None]] = {}
    reached: dict[int, int] = {}  # offset -> time of the first cleaning attempt reaching it
    cleaned_end = 0
    open_txn: list[int] = []  # offsets of the open transaction's records
    aborted: set[int] = set()
    plog = PartitionLog.open(fio, d, cfg, clock=clock)

    def check():
        got = records(fio, d)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets))
        for o, k, v in got:
            assert written[o] == (k, v)  # original offset, original record
        assert committed_records(fio, d) == [r for r in got if r[0] not in aborted]
        present = {o for o in offsets}
        assert set(open_txn) <= present  # nothing undecided is cleaned
        committed = {o: kv for o, kv in written.items()
                     if o not in aborted and o not in open_txn}
        latest: dict[str, int] = {}
        for o, (k, _) in sorted(committed.items()):
            latest[k] = o
        for k, o in latest.items():
            if written[o][1] is not None or clock.now - reached.get(o, clock.now) < 1000:
                assert o in present, (k, o, got)
        for o in offsets:
            k = written[o][0]
            later = [p for p, (kk, _) in committed.items() if kk == k and o < p < cleaned_end]
            if o < cleaned_end:
                assert not later and o not in aborted, (o, k, got)

    try:
        for op in ops:
            if op[0] == "write":
                offset = plog.log_end_offset
                plog.append(keyed_frame([(op[1], op[2])], clock.now))
                plog.flush()
                written[offset] = (op[1], op[2])
            elif op[0] == "txn":
                offset = plog.log_end_offset
                txn_write(plog, clock, 9, [(op[1], op[2])])
                written[offset] = (op[1], op[2])
                open_txn.append(offset)
            elif op[0] == "end":
                if open_txn:
                    txn_end(plog, clock, 9, op[1])
                    if op[1] == ABORT:
                        aborted.update(open_txn)
                    open_txn.clear()
            elif op[0] == "roll":
                plog.roll()
            elif op[0] == "tick":
                clock.now += op[1]
            else:
                for seg in plog.segments[:-1]:
                    for o in range(seg.base_offset, seg.next_offset):
                        reached.setdefault(o, clock.now)
                recording = RecordingFileIO(fio)
                if op[1] is not None:
                    plog.close()
                    plog = PartitionLog.open(recording, d, cfg, clock=clock, fence=True)
                    recording.crash_at(op[1])
                try:
                    result = clean(plog, clock.now)
                    if result is not None:
                        cleaned_end = result.end_offset
                except SimulatedCrash:
                    check()  # a reader during the crash's aftermath
                    plog = PartitionLog.open(fio, d, cfg, clock=clock, fence=True)
                    assert PartitionListing.scan(fio, d).uncommitted() == []
                else:
                    if op[1] is not None:
                        recording.crash_at(None)
                        plog.close()
                        plog = PartitionLog.open(fio, d, cfg, clock=clock, fence=True)
            check()
    finally:
        if not plog.closed:
            try:
                plog.close()
            except BaseException:  # noqa: BLE001 - a crashed log's close may fail too
                pass


def test_producer_fields_survive_cleaning_and_dump_log_reads_the_live_set(fio, tmp_path,
                                                                         capsys):
    from sparklog.cli.main import main

    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(), clock=clock) as plog:
        for seq in range(0, 8, 2):  # an idempotent producer's frames of two records
            plog.append(encode_frame(
                raw_batch([b"x%d" % seq, b"y%d" % seq], keys=[b"a", b"k%d" % seq]),
                timestamps=[clock.now] * 2, producer_id=77, producer_epoch=3,
                base_sequence=seq))
        plog.roll()
        clean(plog, clock.now)
        headers = [f.header for f in LogReader(fio, d).iter_frames(0, 8)]
    # the frames keep their producer id, epoch, base sequence and offset span (so the
    # producer's last sequence of each is unchanged); the superseded "a" records went
    assert [(h.base_offset, h.last_offset_delta, h.producer_id, h.producer_epoch,
             h.base_sequence, h.record_count) for h in headers] == \
        [(0, 1, 77, 3, 0, 1), (2, 1, 77, 3, 2, 1), (4, 1, 77, 3, 4, 1), (6, 1, 77, 3, 6, 2)]
    assert all(h.explicit_offsets for h in headers[:3])
    # dump-log of the directory prints the live set: the cleaned segment, not the old ones
    assert main(["dump-log", d, "--deep-iteration"]) == 0
    out = capsys.readouterr().out
    assert ".c1.log" in out and "00000000000000000000.log\n" not in out
    assert out.count("| offset:") == 5


def test_transaction_marker_after_removed_records_is_kept(fio, tmp_path):
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    txn = {"producer_id": 5, "producer_epoch": 0, "transactional": True}
    with PartitionLog.open(fio, d, config(segment_bytes=1 << 20), clock=clock) as plog:
        plog.append(keyed_frame([("a", "1"), ("b", "1")], clock.now, base_sequence=0, **txn))
        plog.append(keyed_frame([("ctl", "commit")], clock.now, control=True, **txn))
        write(plog, clock, [("a", "2"), ("b", "2")])
        plog.roll()
        assert clean(plog, clock.now).records_removed == 2
        headers = [f.header for f in LogReader(fio, d).iter_frames(0, 5)]
    # the marker follows the removed records: it stays, with explicit offsets, at its offset
    assert [(h.base_offset, h.is_control, h.explicit_offsets) for h in headers] == \
        [(2, True, True), (3, False, False), (4, False, False)]
    assert records(fio, d) == [(3, "a", "2"), (4, "b", "2")]


def txn_write(plog, clock, pid: int, pairs):
    """A transactional producer's frame of ``pairs`` (producer ``pid``, epoch 0)."""
    plog.append(keyed_frame(pairs, clock.now, producer_id=pid, producer_epoch=0,
                            base_sequence=0, transactional=True))
    plog.flush()


def txn_end(plog, clock, pid: int, kind: int):
    """The marker (ABORT or COMMIT) ending producer ``pid``'s transaction, as its
    transaction coordinator writes it."""
    plog.append(encode_marker(kind, producer_id=pid, producer_epoch=0, timestamp=clock.now))
    plog.flush()


def committed_records(fio, directory):
    """What a read_committed reader returns: the (offset, key, value) of the records of
    every frame but those of aborted transactions (a two-pass read: the markers first,
    as the aborted-transactions list of a read_committed fetch)."""
    reader = LogReader(fio, directory)
    frames = list(reader.iter_frames(reader.log_start_offset(), reader.log_end_offset()))
    txns = TransactionTracker()
    for f in frames:
        if f.header.is_control:
            txns.marker(f.header, marker_type(f))
        else:
            txns.data(f.header)
    out = []
    for f in frames:
        if f.header.is_control or txns.aborted.holds(f.header):
            continue
        batch = f.batch()
        for o, k, v in zip(f.offsets().to_pylist(), batch.column("key").to_pylist(),
                           batch.column("value").to_pylist()):
            out.append((o, k.decode(), None if v is None else v.decode()))
    return out


def markers(fio, directory):
    """(offset, type) of the transaction markers a reader meets."""
    reader = LogReader(fio, directory)
    return [(f.header.base_offset, marker_type(f)) for f in
            reader.iter_frames(reader.log_start_offset(), reader.log_end_offset())
            if f.header.is_control]


def test_aborted_transactions_removed_and_markers_expire(fio, tmp_path):
    """A cleaning removes the records of aborted transactions (an aborted record never
    hides an older committed one of its key) and keeps committed ones per key; markers
    stay delete.retention.ms after the cleaning that reached them, a COMMIT marker as
    long as a record of its transaction stays."""
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(segment_bytes=1 << 20, delete_retention_ms=5000),
                           clock=clock) as plog:
        write(plog, clock, [("a", "1"), ("b", "1")])                 # 0, 1
        txn_write(plog, clock, 7, [("a", "aborted"), ("c", "aborted")])  # 2, 3
        write(plog, clock, [("d", "1")])                             # 4: between them
        txn_write(plog, clock, 8, [("b", "2")])                      # 5
        txn_end(plog, clock, 7, ABORT)                               # 6
        txn_end(plog, clock, 8, COMMIT)                              # 7
        plog.roll()
        # before: a read_uncommitted reader sees the aborted records, read_committed not
        assert (2, "a", "aborted") in records(fio, d)
        model = [(0, "a", "1"), (4, "d", "1"), (5, "b", "2")]
        assert committed_records(fio, d) == [(0, "a", "1"), (1, "b", "1")] + model[1:]
        result = clean(plog, clock.now)
        assert result.records_removed == 3  # two aborted, b=1 replaced
        assert records(fio, d) == committed_records(fio, d) == model
        assert markers(fio, d) == [(6, ABORT), (7, COMMIT)]  # within delete.retention.ms
        clock.now += 5001
        write(plog, clock, [("e", "1")])
        plog.roll()
        result = clean(plog, clock.now, force=True)
        # the ABORT marker's transaction left nothing: it goes; b=2 keeps the COMMIT
        assert result.markers_removed == 1
        assert markers(fio, d) == [(7, COMMIT)]
        write(plog, clock, [("b", "3")])
        plog.roll()
        result = clean(plog, clock.now, force=True)
        assert result.markers_removed == 1 and markers(fio, d) == []
        assert records(fio, d) == committed_records(fio, d) == \
            [(0, "a", "1"), (4, "d", "1"), (8, "e", "1"), (9, "b", "3")]


def test_commit_marker_kept_while_its_records_stay_in_another_cleaned_segment(fio, tmp_path):
    """A transaction whose records and marker land in different cleaned segments (one
    frame per cleaned segment here): its COMMIT marker stays past delete.retention.ms as
    long as one of its records stays anywhere, and goes once none does (the rule does
    not depend on how the cleaning grouped segments)."""
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(segment_bytes=FRAME + 8, delete_retention_ms=5000),
                           clock=clock) as plog:
        txn_write(plog, clock, 8, [("x", "1")])                     # 0
        write(plog, clock, [("y", "1"), ("z", "1")])                 # 1, 2
        txn_end(plog, clock, 8, COMMIT)                              # 3
        write(plog, clock, [("w", "1")])                             # 4
        plog.roll()
        assert clean(plog, clock.now) is not None
        assert len([f for f in PartitionListing.scan(fio, d).logs() if f.generation]) >= 4
        clock.now += 5001
        write(plog, clock, [("y", "2")])
        plog.roll()
        assert clean(plog, clock.now, force=True).markers_removed == 0
        assert markers(fio, d) == [(3, COMMIT)]  # x=1 stays, in the first cleaned segment
        write(plog, clock, [("x", "2")])
        plog.roll()
        assert clean(plog, clock.now, force=True).markers_removed == 1
        assert markers(fio, d) == []


def test_open_transaction_bounds_the_cleaning(fio, tmp_path):
    """A transaction without its marker yet (Kafka's last stable offset): nothing is
    cleaned from the segment holding its first record, so an undecided record never
    replaces a committed one; once aborted, its records go and the older value stays."""
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    with PartitionLog.open(fio, d, config(segment_bytes=1 << 20), clock=clock) as plog:
        write(plog, clock, [("a", "1"), ("b", "1"), ("b", "2")])     # 0-2
        plog.roll()
        txn_write(plog, clock, 7, [("a", "open")])                   # 3
        write(plog, clock, [("c", "1")])                             # 4
        plog.roll()
        write(plog, clock, [("c", "2")])                             # 5
        plog.roll()
        result = clean(plog, clock.now)
        assert result.end_offset == 3  # the open transaction's segment is left dirty
        assert records(fio, d) == [(0, "a", "1"), (2, "b", "2"), (3, "a", "open"),
                                   (4, "c", "1"), (5, "c", "2")]
        txn_end(plog, clock, 7, ABORT)                               # 6
        plog.roll()
        result = clean(plog, clock.now, force=True)
        assert result.end_offset == 7
        assert records(fio, d) == committed_records(fio, d) == \
            [(0, "a", "1"), (2, "b", "2"), (5, "c", "2")]


def test_concurrent_readers_while_the_cleaner_swaps(fio, tmp_path):
    """A writer appends keyed records and rolls, a cleaner thread cleans and deletes the
    replaced files at once (file.delete.delay.ms=0, the hardest case for readers), while
    a LogReader (Spark's path mode, dump-log) and a fetch loop (the broker's read path,
    frames checked as a consumer checks them) read the whole log again and again. Every
    read: no error, offsets strictly growing, each record the one written at its offset,
    and every key's newest record (when the read ended) present if within its range."""
    import threading
    import time as _time

    from sparklog.format.frame import iter_frames

    d = str(tmp_path / "t" / "0")
    cfg = config(segment_bytes=6 * FRAME)
    plog = PartitionLog.open(fio, d, cfg)
    written: dict[int, tuple[str, str]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    counts = {"reads": 0, "fetch reads": 0, "cleanings": 0}

    def guarded(fn):
        def run():
            try:
                while not stop.is_set():
                    fn()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
                stop.set()
        return run

    def write_some():
        for _ in range(5):
            with lock:
                offset = plog.log_end_offset
                key, value = f"k{offset % 13}", f"v{offset}"
                plog.append(keyed_frame([(key, value)], int(_time.time() * 1000)))
                written[offset] = (key, value)
        plog.flush()
        _time.sleep(0.03)

    def clean_some():
        if clean(plog) is not None:
            counts["cleanings"] += 1
        plog.delete_replaced_files()

    def check(got, end):
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)), offsets
        with lock:
            snapshot = dict(written)
        newest = {}
        for o, (k, _) in sorted(snapshot.items()):
            newest[k] = o
        for o, k, v in got:
            assert snapshot[o] == (k, v)
        present = set(offsets)
        missing = [o for o in newest.values() if o < end and o not in present]
        assert not missing, (missing, end)

    def read_with_log_reader():
        reader = LogReader(fio, d)
        end = reader.log_end_offset()
        got = []
        for batch in reader.read_batches(0, end):
            got += zip(batch.column("__offset").to_pylist(),
                       [k.decode() for k in batch.column("key").to_pylist()],
                       [v.decode() for v in batch.column("value").to_pylist()])
        check(got, end)
        counts["reads"] += 1
        _time.sleep(0.02)

    def read_by_fetching():
        end = plog.high_watermark
        offset, got = 0, []
        while offset < end:
            fetched = plog.read(offset, 1 << 16, max_offset=end)
            assert fetched.size, offset
            for frame in iter_frames(fetched.data, expected_offset=offset):
                batch = frame.batch()
                for o, k, v in zip(frame.offsets().to_pylist(),
                                   batch.column("key").to_pylist(),
                                   batch.column("value").to_pylist()):
                    if offset <= o < end:
                        got.append((o, k.decode(), v.decode()))
                offset = max(offset, frame.header.next_offset)
        check(got, end)
        counts["fetch reads"] += 1
        _time.sleep(0.02)

    threads = [threading.Thread(target=guarded(fn)) for fn in
               (write_some, clean_some, read_with_log_reader, read_by_fetching)]
    for t in threads:
        t.start()
    deadline = _time.monotonic() + 120
    while not stop.is_set() and _time.monotonic() < deadline and (
            counts["cleanings"] < 10 or min(counts["reads"], counts["fetch reads"]) < 10):
        _time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    plog.close()
    if errors:
        raise errors[0]
    assert counts["cleanings"] >= 10 and min(counts["reads"], counts["fetch reads"]) >= 10, \
        counts


def test_sparklog_compact_cleans_partitions_no_writer_holds(fio, tmp_path, capsys):
    from sparklog.cli.main import main
    from sparklog.metadata import TopicStore

    root = tmp_path.as_uri()
    store = TopicStore(root, fio)
    cfg = config()
    store.create_topic("ct", 2, configs=cfg)
    clock = Clock()
    for p in range(2):
        with PartitionLog.open(fio, store.partition_dir("ct", p), cfg, clock=clock) as plog:
            write(plog, clock, [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1")])
    held = PartitionLog.open(fio, store.partition_dir("ct", 1), cfg)  # a live "leader"
    try:
        assert main(["compact", "ct", "--storage", root]) == 1
    finally:
        held.close()
    out = capsys.readouterr().out
    assert "ct-0: cleaned offsets below 3" in out and "ct-1: led by a live broker" in out
    assert [o for o, _, _ in records(fio, store.partition_dir("ct", 0))] == [2, 3]
    assert main(["compact", "ct", "--storage", root, "--partitions", "1"]) == 0
    assert [o for o, _, _ in records(fio, store.partition_dir("ct", 1))] == [2, 3]
    store.create_topic("plain", 1)
    assert main(["compact", "plain", "--storage", root]) != 0
    assert "only compacted topics are cleaned" in capsys.readouterr().err


def test_swap_on_hdfs_crashed_before_and_after_its_commit(hdfs_env):
    """On hdfs:// (create-no-overwrite and rename-no-replace of the NameNode as the only
    commit primitives): a cleaning cut just before the rename that commits a cleaned
    segment's .index leaves the old set, cut just after it the new one, for a reader
    and after the writer's recovery (lease recovery of the crashed writer included)."""
    import uuid

    root = f"{hdfs_env.hdfs_uri}/compaction/{uuid.uuid4().hex}"
    fio = open_fileio(root)
    pairs = [("a", "1"), ("b", "1"), ("a", "2"), ("b", "2"), ("a", "3"), ("c", "1"),
             ("x", "1")]
    full = [(o, k, v) for o, (k, v) in enumerate(pairs)]
    cleaned = [(3, "b", "2"), (4, "a", "3"), (5, "c", "1"), (6, "x", "1")]

    def build(d):
        clock = Clock()
        with PartitionLog.open(fio, d, config(), clock=clock) as plog:
            write(plog, clock, pairs)
        return clock

    # a dry run finds the mutation that commits the first cleaned segment: the rename
    # of its .index into place
    d = fio.join(root, "dry", "t", "0")
    clock = build(d)
    recording = RecordingFileIO(fio)
    plog = PartitionLog.open(recording, d, config(), clock=clock)
    recording.crash_at(None)
    before = len(recording.calls)
    clean(plog, clock.now)
    mutating = [(m, p) for m, p in recording.calls[before:] if m in RecordingFileIO.MUTATING]
    plog.close()
    commit = next(i for i, (m, p) in enumerate(mutating)  # write_atomic's temporary file
                  if m == "rename" and ".c1.index." in p and p.endswith(".tmp"))
    assert records(fio, d) == cleaned
    for step, want in ((commit + 1, full), (commit + 2, cleaned)):
        d = fio.join(root, f"s{step}", "t", "0")
        clock = build(d)
        recording = RecordingFileIO(fio)
        plog = PartitionLog.open(recording, d, config(), clock=clock)
        recording.crash_at(step)
        with pytest.raises(SimulatedCrash):
            clean(plog, clock.now)
        assert records(fio, d) == want
        with PartitionLog.open(fio, d, config(), fence=True) as reopened:
            assert reopened.log_end_offset == 7
        assert records(fio, d) == want
        assert PartitionListing.scan(fio, d).uncommitted() == []
