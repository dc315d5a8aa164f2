"""``sparklog compact --spark``: log compaction as a Spark job (sparklog.spark.jobs.compaction)
on the session's local[2], against the broker cleaner's result on the same records (raw
and typed topics, over several cleanings), and refused on a partition whose lease a
live writer holds."""

from __future__ import annotations

import os
import random
import re
import sys

import pyarrow as pa
import pytest

from sparklog.cli.main import main
from sparklog.format.frame import decode_frame, encode_frame, raw_batch
from sparklog.format.marker import ABORT, COMMIT, encode_marker
from sparklog.log import LogReader, PartitionLog
from sparklog.log.cleaner import clean
from sparklog.log.layout import PartitionListing
from sparklog.metadata import TopicStore
from sparklog.spark.jobs import compaction
from sparklog.spark.jobs.compaction import chunk_segments, compact_partition, key_hash
from sparklog.storage import open_fileio
from tests.log.test_log_compaction import FRAME, keyed_frame, records
from tests.support.jobs import REPO, run_killed


def test_spark_job_cleans_as_the_broker_cleaner_does(spark, tmp_path, capsys):
    root = tmp_path.as_uri()
    fio = open_fileio(root)
    store = TopicStore(root, fio)
    cfg = {"cleanup.policy": "compact", "segment.bytes": 3 * FRAME,
           "index.interval.bytes": 1, "min.cleanable.dirty.ratio": 0.01,
           "file.delete.delay.ms": 0}
    store.create_topic("ct", 3, configs=cfg)
    pairs = [(f"k{i % 4}", f"v{i:03d}") for i in range(14)] + [("k1", None), ("z", "end")]
    for p in range(3):
        with PartitionLog.open(fio, store.partition_dir("ct", p), cfg) as plog:
            for pair in pairs:
                plog.append(keyed_frame([pair], 1_700_000_000_000))
    with PartitionLog.open(fio, store.partition_dir("ct", 0), cfg) as plog:
        assert clean(plog) is not None  # the broker cleaner's result: the reference
    held = PartitionLog.open(fio, store.partition_dir("ct", 2), cfg)  # a live "leader"
    try:
        assert main(["compact", "ct", "--storage", root, "--partitions", "1,2",
                     "--spark"]) == 1
    finally:
        held.close()
    captured = capsys.readouterr()
    assert "[compact] partition ct-1: key map over 5 dirty segment(s)" in captured.err
    assert "[compact] partition ct-1: committed" in captured.err
    assert "ct-1: cleaned offsets below 15" in captured.out
    assert "ct-2: led by a live broker" in captured.out
    expected = records(fio, store.partition_dir("ct", 0))
    assert [r[1:] for r in expected] == [("k2", "v010"), ("k3", "v011"), ("k0", "v012"),
                                         ("k1", None), ("z", "end")]
    assert records(fio, store.partition_dir("ct", 1)) == expected
    assert any(f.generation for f in
               PartitionListing.scan(fio, store.partition_dir("ct", 1)).logs())
    assert len(records(fio, store.partition_dir("ct", 2))) == len(pairs)  # untouched


def _frames_of(fio, directory):
    """Per frame of the live set: what a cleaning must keep as the broker's cleaner
    does (offsets, producer fields, control flag, time). Not the explicit-offsets bit:
    a frame after a gap in its cleaned segment gets it, and where cleaned segments
    start depends on how the segments were grouped."""
    reader = LogReader(fio, directory)
    return [(h.base_offset, h.last_offset_delta, h.record_count, h.is_control,
             h.producer_id, h.base_sequence, h.max_timestamp)
            for h in (f.header for f in reader.iter_frames(0, reader.log_end_offset()))]


#: keys of short and long bytes (a key's bucket must not depend on its neighbours)
KEYS = [f"k{i}" for i in range(11)] + ["k11, a key longer than sixteen bytes"]


def _random_frames(rng, count: int, now: int, open_txn: bool):
    """``count`` frames of 1 to 4 records over :data:`KEYS`: tombstones, a record
    without a key, an idempotent producer's frames, transactions of one frame committed
    or aborted (values ``ab...``), and a longer transaction of producer 10 spanning
    other frames (and segments), aborted; with ``open_txn`` the frames start with
    producer 10's COMMIT (its transaction was left open before) and end with one of its
    transactions open, which the key map must not pass."""
    out = [encode_marker(COMMIT, producer_id=10, producer_epoch=0, timestamp=now)] \
        if open_txn else []
    long_txn = {"producer_id": 10, "producer_epoch": 0, "transactional": True}
    for i in range(count):
        pairs = [(KEYS[rng.randrange(len(KEYS))], None if rng.random() < 0.12 else f"v{i}.{j}")
                 for j in range(rng.randint(1, 4))]
        if i % 9 == 4:
            kind = rng.choice((COMMIT, ABORT))
            if kind == ABORT:  # its solo key's older record must stay
                out.append(keyed_frame([(f"solo{i}", "kept")], now))
                pairs = [(k, f"ab{i}") for k, _ in pairs] + [(f"solo{i}", f"ab{i}")]
            elif rng.random() < 0.5:  # a record that stays: the marker too
                pairs.append((f"t{i}", "committed"))
            txn = {"producer_id": 9, "producer_epoch": 0, "transactional": True}
            out.append(keyed_frame(pairs, now, base_sequence=i, **txn))
            out.append(encode_marker(kind, producer_id=9, producer_epoch=0, timestamp=now))
        elif i % 13 == 6:
            out.append(keyed_frame([(f"solo{i}", "kept")], now))
            out.append(keyed_frame([(k, f"ab{i}") for k, _ in pairs] + [(f"solo{i}", f"ab{i}")],
                                   now, **long_txn))
        elif i % 13 == 12:
            out.append(encode_marker(ABORT, producer_id=10, producer_epoch=0, timestamp=now))
        elif i % 7 == 3:
            out.append(keyed_frame(pairs, now, producer_id=4, producer_epoch=1,
                                   base_sequence=i))
        elif i == 5:
            out.append(encode_frame(raw_batch([b"no key", b"x"], keys=[None, b"k1"]),
                                    timestamps=[now] * 2))
        else:
            out.append(keyed_frame(pairs, now))
    if open_txn:
        out.append(keyed_frame([("k3", "open")], now, **long_txn))
    return out


def test_spark_job_keeps_what_the_broker_cleaner_keeps_over_cleanings(spark, tmp_path,
                                                                     monkeypatch):
    """The same writes cleaned by both, three times (tombstones reached, kept within
    delete.retention.ms, then expired; clean segments from earlier cleanings beside
    dirty ones; frames that keep all, some or none of their records; committed and
    aborted transactions, one spanning chunks, one left open across a cleaning, and
    their markers, expired once no record of theirs stays; producer fields): the same
    live records at the same offsets, frame by frame, the same counts, and the Spark
    job's cleaned segments within segment.bytes. Chunks and key buckets are bounded
    small, so the job runs more of each than cores."""
    monkeypatch.setattr(compaction, "CHUNK_MAX_BYTES", 20_000)
    monkeypatch.setattr(compaction, "BUCKET_MAX_RECORDS", 40)
    rng = random.Random(15)
    fio = open_fileio(tmp_path.as_uri())
    cfg = {"cleanup.policy": "compact", "segment.bytes": 1500, "index.interval.bytes": 1,
           "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 1000,
           "file.delete.delay.ms": 0}
    broker, job = str(tmp_path / "broker" / "0"), str(tmp_path / "job" / "0")
    now = 1_700_000_000_000
    markers = 0
    for n, (writes, step) in enumerate(((60, 0), (30, 500), (12, 2000))):
        now += step
        frames = _random_frames(rng, writes, now, open_txn=n > 0) + \
            [keyed_frame([(f"gone{n}", None)], now)]
        results = []
        said: list[str] = []
        for directory, cleaner in ((broker, clean), (job, lambda p, t: compact_partition(
                spark, p, t, progress=said.append))):
            with PartitionLog.open(fio, directory, cfg) as plog:
                for frame in frames:
                    plog.append(frame)
                plog.roll()
                results.append(cleaner(plog, now))
        ref, got = results
        tasks, buckets = map(int, re.search(r"in (\d+) task\(s\), (\d+) key bucket",
                                            said[0]).groups())
        assert n or tasks > 2 and buckets > 2, said  # the first cleaning, of 60 frames
        assert (got.end_offset, got.records_removed, got.tombstones_removed,
                got.markers_removed) == (ref.end_offset, ref.records_removed,
                                         ref.tombstones_removed, ref.markers_removed)
        markers += ref.markers_removed
        if n:  # the key map stopped before producer 10's open transaction
            assert got.end_offset < records(fio, job)[-1][0]
        assert records(fio, job) == records(fio, broker)
        assert _frames_of(fio, job) == _frames_of(fio, broker)
        cleaned = [f for f in PartitionListing.scan(fio, job).logs() if f.generation]
        assert cleaned and all(f.log.size <= cfg["segment.bytes"] for f in cleaned)
    assert got.tombstones_removed >= 1  # the last cleaning removed expired tombstones
    assert markers >= 2  # markers expired
    live = records(fio, job)
    assert not [r for r in live if r[0] < got.end_offset and r[2] and r[2].startswith("ab")]
    solo = [r for r in live if r[1].startswith("solo")]
    assert len(solo) > 5 and {r[2] for r in solo if r[0] < got.end_offset} == {"kept"}
    # gone1 followed an open transaction: first reached by the last cleaning, it stays
    assert [r[1] for r in live if r[1].startswith("gone")] == ["gone1", "gone2"]


@pytest.mark.parametrize("key_columns", ["tenant,id", "id"])
def test_spark_job_compacts_typed_topics_on_their_key_columns(spark, tmp_path, key_columns):
    schema = pa.schema([("tenant", pa.string()), ("id", pa.int64()), ("n", pa.int64())])
    cfg = {"cleanup.policy": "compact", "segment.bytes": 2000,
           "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 0,
           "compaction.key.columns": key_columns}
    fio = open_fileio(tmp_path.as_uri())
    rows = [(t, i, n) for n, (t, i) in enumerate(
        [("a", 1), ("a", 2), ("b", 1), ("a", 1), ("ab", 1), ("b", 2)] * 6)]
    out = []
    for name, cleaner in (("broker", clean),
                          ("job", lambda p, t: compact_partition(spark, p, t))):
        d = str(tmp_path / name / "0")
        with PartitionLog.open(fio, d, cfg) as plog:
            for start in range(0, len(rows), 3):
                part = rows[start:start + 3]
                batch = pa.RecordBatch.from_arrays(
                    [pa.array([r[c] for r in part]) for c in range(3)], schema=schema)
                plog.append(encode_frame(batch, timestamps=[1_700_000_000_000] * len(part)))
            plog.roll()
            cleaner(plog, 1_700_000_000_000)
        reader = LogReader(fio, d)
        out.append([(r["__offset"], r["tenant"], r["id"], r["n"]) for b in
                    reader.read_batches(0, reader.log_end_offset()) for r in b.to_pylist()])
    assert out[1] == out[0]
    assert len(out[0]) == (5 if key_columns == "tenant,id" else 2)


def test_key_hash_and_chunks():
    """Buckets agree whatever the key array's type or slicing; chunks are consecutive
    segments of about equal input, within the bound."""
    one = key_hash(pa.array([b"xyz", b"a much longer key than eight bytes", None, b""]))
    assert key_hash(pa.array(["xyz", "a much longer key than eight bytes"]))[:2].tolist() \
        == one[:2].tolist()
    assert key_hash(pa.array([b"--", b"xyz"]).slice(1)).tolist() == one[:1].tolist()
    assert key_hash(pa.array([b"xyz"], pa.large_binary())).tolist() == one[:1].tolist()
    assert one[0] != one[1] and one[2] == 0
    assert key_hash(pa.array([12, 13])).tolist() == key_hash(pa.array(["12", "13"])).tolist()
    assert chunk_segments([10] * 9, cores=2) == [[0, 1, 2, 3, 4], [5, 6, 7, 8]]
    assert chunk_segments([10] * 9, cores=2, max_bytes=20) == \
        [[0, 1], [2, 3], [4, 5], [6, 7], [8]]
    assert chunk_segments([50, 1, 1], cores=4) == [[0], [1, 2]]


def test_record_codes_of_implicit_and_explicit_offsets():
    """A reading task's codes (offset times two) come from the header for implicit
    offsets and from the body for explicit ones, as :meth:`Frame.offsets` gives them."""
    implicit = decode_frame(encode_frame(raw_batch([b"a", b"b", b"c"], keys=[b"1", b"2", b"3"]),
                                         base_offset=40))
    explicit = decode_frame(encode_frame(raw_batch([b"a", b"c"], keys=[b"1", b"3"]),
                                         base_offset=40, offset_deltas=[0, 2]))
    assert compaction._codes(implicit).tolist() == [80, 82, 84]
    assert compaction._codes(explicit).tolist() == [80, 84]
    for frame in (implicit, explicit):
        assert compaction._codes(frame).tolist() == \
            [2 * o for o in frame.offsets().to_pylist()]


#: A test-only hook (a ``sitecustomize`` on the job's PYTHONPATH, so it runs in the
#: driver and in every Spark Python worker): the first attempt of each writing task
#: fails right after it wrote its cleaned segment's files.
FAIL_FIRST_ATTEMPT = '''
import sparklog.spark.jobs.compaction as compaction

_write_planned = compaction.write_planned


def write_planned(*args, **kwargs):
    out = _write_planned(*args, **kwargs)
    from pyspark import TaskContext

    task = TaskContext.get()
    if task is not None and task.attemptNumber() == 0:
        raise RuntimeError("test hook: the first attempt fails after writing its files")
    return out


compaction.write_planned = write_planned
'''


def test_spark_job_retried_write_task_replaces_its_earlier_attempt(tmp_path, monkeypatch):
    """A writing task whose first attempt fails after writing its cleaned segment
    (a real failure in a Spark Python worker, retried by Spark: local[1,2]) succeeds on
    its second attempt over the file the first left; the cleaning commits, equals the
    broker cleaner's, and leaves no uncommitted file."""
    root = tmp_path.joinpath("log").as_uri()
    fio = open_fileio(root)
    store = TopicStore(root, fio)
    cfg = {"cleanup.policy": "compact", "segment.bytes": 3 * FRAME,
           "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 0}
    store.create_topic("rt", 2, configs=cfg)
    pairs = [(f"k{i % 3}", f"v{i:03d}") for i in range(10)]
    for p in range(2):
        with PartitionLog.open(fio, store.partition_dir("rt", p), cfg) as plog:
            for pair in pairs:
                plog.append(keyed_frame([pair], 1_700_000_000_000))
            if p == 0:
                assert clean(plog) is not None  # the reference
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAIL_FIRST_ATTEMPT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(hook), REPO, os.environ.get("PYTHONPATH", "")]))
    done = run_killed([sys.executable, "-m", "sparklog.cli.main", "compact", "rt",
                       "--storage", root, "--partitions", "1", "--spark",
                       "--master", "local[1,2]"], "")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test hook: the first attempt fails" in done.stderr  # it did fail, for real
    assert "rt-1: cleaned offsets below 9" in done.stdout, done.stdout
    assert records(fio, store.partition_dir("rt", 1)) == \
        records(fio, store.partition_dir("rt", 0))
    listing = PartitionListing.scan(fio, store.partition_dir("rt", 1))
    assert not listing.uncommitted()
    assert any(f.generation for f in listing.logs())


def test_spark_job_keeps_kafka_batches_kafka_batches_as_the_broker_cleaner(spark, tmp_path):
    """A partition of both kinds (Kafka batches of every codec, snappy in both
    framings, beside Arrow frames), cleaned twice by both: the same live records at the
    same offsets, and the same frames byte for byte, each in its own kind (a Kafka
    batch that lost records rebuilt as a Kafka batch, docs/storage.md section 11)."""
    from tests.log.test_log_kafka_batches import compaction_round

    fio = open_fileio(tmp_path.as_uri())
    cfg = {"cleanup.policy": "compact", "segment.bytes": 1500, "index.interval.bytes": 1,
           "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 0}
    codecs = ["none", "gzip", "snappy", "snappy-raw", "lz4", "zstd"]
    broker, job = str(tmp_path / "broker" / "0"), str(tmp_path / "job" / "0")
    now = 1_700_000_000_000
    for rounds in (range(0, 18), range(18, 30)):
        results = []
        for directory, cleaner in ((broker, clean), (job, lambda p, t: compact_partition(
                spark, p, t))):
            with PartitionLog.open(fio, directory, cfg) as plog:
                for r in rounds:
                    plog.append(compaction_round(r, codecs[r % len(codecs)]))
                plog.roll()
                results.append(cleaner(plog, now))
        ref, got = results
        assert (got.end_offset, got.records_removed) == (ref.end_offset, ref.records_removed)
        assert records(fio, job) == records(fio, broker)
        frames = []
        for directory in (broker, job):
            reader = LogReader(fio, directory)
            frames.append([(f.header, f.body.to_pybytes())
                           for f in reader.iter_frames(0, reader.log_end_offset())])
        assert frames[1] == frames[0]
        assert {h.magic for h, _ in frames[0]} == {1, 2}
    # Kafka batches that lost records, still Kafka batches
    assert any(h.is_kafka and h.record_count < h.last_offset_delta + 1 for h, _ in frames[0])
