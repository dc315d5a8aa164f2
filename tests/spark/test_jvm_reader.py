"""The JVM reader of format("sparklog") (sparklog/spark/jvm): with its jar on the test
session's classpath (tests/conftest.py) batch scans run on the JVM; these tests check
that the JVM path is the one used, compare its rows with chispa against the Python
reader (option sparklog.jvmReader=false) over frames of every kind, and check its
errors (corrupt frames, retention racing the scan) and its fallbacks."""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
chispa = pytest.importorskip("chispa", reason="chispa is not installed")

from sparklog.format.frame import encode_frame, raw_batch
from sparklog.format.header import (
    ATTRIBUTES,
    BASE_OFFSET,
    BASE_SEQUENCE,
    CRC,
    FIRST_TIMESTAMP,
    HEADER_SIZE,
    LAST_OFFSET_DELTA,
    LENGTH,
    LOG_OVERHEAD,
    MAGIC_FIELD,
    MAX_TIMESTAMP,
    PRODUCER_ID,
    RECORD_COUNT,
)
from sparklog.log.partition import PartitionLog
from sparklog.metadata import TopicStore
from sparklog.spark.jvm import COUNT_PUSHDOWN_OPTION, JVM_READER_OPTION, jar_path
from sparklog.storage import open_fileio
from tests.support.logdata import BASE_TS, append_more, expected_rows, make_topic, record, ts
from tests.support.sparkread import (
    JVM,
    assert_same,
    jvm_and_python,
    load,
    output,
    run_available_now,
    scan_of,
    stream,
)

pytestmark = pytest.mark.spark


def append(store, topic, partition, frames, config=None, log_append_time_ms=None):
    """Append encoded frames (bytes) to a partition's log."""
    plog = PartitionLog.open(store.fileio, store.partition_dir(topic, partition), config or {})
    try:
        for frame in frames:
            plog.append(frame, log_append_time_ms=log_append_time_ms)
        plog.flush()
    finally:
        plog.close()


def raw_frame(topic, partition, offsets, *, compression="none", headers=True, **kw):
    recs = [record(topic, partition, o, headers=headers) for o in offsets]
    batch = raw_batch([r["value"] for r in recs], [r["key"] for r in recs],
                      [r["headers"] for r in recs])
    return encode_frame(batch, timestamps=[r["timestamp"] for r in recs],
                        compression=compression, **kw)


def test_codecs_headers_splits_and_mid_frame_ranges(jspark, storage_root):
    store = TopicStore(storage_root, open_fileio(storage_root))
    config = {"segment.bytes": "4000", "index.interval.bytes": "300"}
    store.create_topic("c", 2, configs=config)
    for p in range(2):
        frames = [raw_frame("c", p, range(i, i + 7), compression=("lz4", "zstd", "none")[i % 3])
                  for i in range(0, 70, 7)]
        append(store, "c", p, frames, config)
    assert len(store.fileio.list(store.partition_dir("c", 0))) > 3  # several segments
    starts = '{"c":{"0":3,"1":0}}'
    ends = '{"c":{"0":66,"1":45}}'
    for opts in ({}, {"minPartitions": "7"}, {"maxRecordsPerPartition": "5"}):
        jvm, python = jvm_and_python(jspark, storage_root, subscribe="c", includeHeaders="true",
                                     startingOffsets=starts, endingOffsets=ends, **opts)
        assert_same(jvm, python)
        want = expected_rows("c", {0: range(3, 66), 1: range(0, 45)}, headers=True)
        assert sorted(tuple(r) for r in jvm.collect()) == sorted(
            (k, v, t, p, o, stamp, tt, [tuple(h) for h in hs])
            for k, v, t, p, o, stamp, tt, hs in want)
    jvm, python = jvm_and_python(jspark, storage_root, subscribe="c", minPartitions="5")
    assert jvm.count() == python.count() == 140
    # pruned columns and pushed filters
    for query in (lambda df: df.select("offset", "timestamp").where("offset % 9 = 1"),
                  lambda df: df.where("partition = 1 and offset >= 30").select("value"),
                  lambda df: df.groupBy("partition").count()):
        assert_same(query(jvm), query(python))


def test_log_append_time_control_frames_and_explicit_offsets(jspark, storage_root):
    store = TopicStore(storage_root, open_fileio(storage_root))
    lat = {"message.timestamp.type": "LogAppendTime"}
    store.create_topic("lat", 1, configs=lat)
    append(store, "lat", 0, [raw_frame("lat", 0, range(0, 5)), raw_frame("lat", 0, range(5, 9))],
           lat, log_append_time_ms=BASE_TS + 777)
    store.create_topic("ctl", 1)
    append(store, "ctl", 0, [raw_frame("ctl", 0, range(0, 4)),
                             raw_frame("ctl", 0, range(4, 6), control=True),
                             raw_frame("ctl", 0, range(6, 10), compression="zstd")])
    store.create_topic("cmp", 1)
    # compacted frames: explicit offsets with gaps (offsets 0, 2, 5 then 6, 9)
    append(store, "cmp", 0, [raw_frame("cmp", 0, [0, 2, 5], offset_deltas=[0, 2, 5]),
                             raw_frame("cmp", 0, [6, 9], offset_deltas=[0, 3],
                                       compression="lz4")])
    jvm, python = jvm_and_python(jspark, storage_root, subscribe="lat")
    assert_same(jvm, python)
    assert {(r.timestamp, r.timestampType) for r in jvm.collect()} == {(ts(BASE_TS + 777), 1)}
    jvm, python = jvm_and_python(jspark, storage_root, subscribe="ctl",
                                 startingOffsets='{"ctl":{"0":2}}')
    assert_same(jvm, python)
    assert sorted(r.offset for r in jvm.collect()) == [2, 3, 6, 7, 8, 9]
    for start, end, want in ((0, 10, [0, 2, 5, 6, 9]), (1, 9, [2, 5, 6]), (3, 7, [5, 6]),
                             (7, 9, [])):
        jvm, python = jvm_and_python(jspark, storage_root, subscribe="cmp",
                                     startingOffsets=f'{{"cmp":{{"0":{start}}}}}',
                                     endingOffsets=f'{{"cmp":{{"0":{end}}}}}')
        assert_same(jvm, python)
        assert sorted(r.offset for r in jvm.collect()) == want
        assert sorted(r.value for r in jvm.collect()) == sorted(
            record("cmp", 0, o)["value"] for o in want)


def test_typed_topics_and_their_fallback(jspark, storage_root):
    store = TopicStore(storage_root, open_fileio(storage_root))
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                        ("ok", pa.bool_()), ("day", pa.date32()), ("amount", pa.decimal128(9, 2)),
                        ("at", pa.timestamp("us", tz="UTC")), ("tags", pa.list_(pa.string())),
                        ("pt", pa.struct([("x", pa.int32()), ("y", pa.float32())]))])
    store.create_topic("typed", 1, schema=schema)
    rows = [{"id": i, "name": None if i == 3 else f"n{i}", "score": i / 4, "ok": i % 2 == 0,
             "day": 19000 + i, "amount": None, "at": 1_700_000_000_000_000 + i,
             "tags": ["a"] * (i % 3), "pt": {"x": i, "y": i / 2}} for i in range(11)]
    frames = [encode_frame(pa.RecordBatch.from_pylist(rows[i:i + 4], schema=schema),
                           timestamps=[BASE_TS + j for j in range(i, min(i + 4, 11))],
                           compression="zstd" if i else "none") for i in range(0, 11, 4)]
    append(store, "typed", 0, frames)
    jvm, python = jvm_and_python(jspark, storage_root, subscribe="typed",
                                 startingOffsets='{"typed":{"0":2}}', minPartitions="3")
    assert_same(jvm, python)
    assert sorted(r.id for r in jvm.collect()) == list(range(2, 11))

    # an unsigned column is widened by Python: the scan falls back when it is queried...
    wide = pa.schema([("id", pa.int64()), ("n", pa.uint32())])
    store.create_topic("wide", 1, schema=wide)
    append(store, "wide", 0, [encode_frame(pa.RecordBatch.from_pylist(
        [{"id": i, "n": 4_000_000_000 + i} for i in range(6)], schema=wide),
        timestamps=[BASE_TS] * 6)])
    df = load(jspark, storage_root, subscribe="wide")
    plan = scan_of(df)
    assert "Python reader" in plan and "column n of topic wide" in plan, plan
    python = load(jspark, storage_root, subscribe="wide", **{JVM_READER_OPTION: "false"})
    assert_same(df, python)
    assert sorted(r.n for r in df.collect()) == [4_000_000_000 + i for i in range(6)]
    # ...pruned columns still come back right from the Python fallback...
    pruned = df.select("n", "offset")
    assert "Python reader" in scan_of(pruned)
    assert_same(pruned, python.select("n", "offset"))
    # ...and the JVM reads the topic when that column is not needed
    ids = load(jspark, storage_root, subscribe="wide").select("id", "offset")
    assert JVM in scan_of(ids)
    assert sorted(tuple(r) for r in ids.collect()) == [(i, i) for i in range(6)]


def test_empty_ranges_and_the_opt_out(jspark, storage_root):
    make_topic(storage_root, "e", partitions=2, count=12)
    store = TopicStore(storage_root, open_fileio(storage_root))
    store.create_topic("none", 1)
    same = '{"e":{"0":5,"1":12}}'
    jvm, python = jvm_and_python(jspark, storage_root, subscribe="e", startingOffsets=same,
                                 endingOffsets=same)
    assert jvm.collect() == [] and python.collect() == []
    jvm, _ = jvm_and_python(jspark, storage_root, subscribe="none")
    assert jvm.count() == 0
    assert jvm.collect() == []
    one = load(jspark, storage_root, subscribe="e", startingOffsets='{"e":{"0":5,"1":11}}',
               endingOffsets='{"e":{"0":6,"1":12}}')
    assert sorted((r.partition, r.offset) for r in one.collect()) == [(0, 5), (1, 11)]
    with pytest.raises(Exception, match="sparklog.jvmReader=maybe must be true or false"):
        load(jspark, storage_root, subscribe="e", **{JVM_READER_OPTION: "maybe"}).collect()


def test_corrupt_frame_names_file_and_position(jspark, storage_root, tmp_path):
    store = make_topic(storage_root, "bad", partitions=1, count=40, per_frame=10,
                       config={"segment.bytes": "1500"})
    part = tmp_path / "log" / "topics" / "bad" / "0"
    segments = sorted(part.glob("*.log"))
    assert len(segments) >= 3
    victim = segments[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside the first frame's body
    victim.write_bytes(bytes(data))
    # a range not touching the damaged segment still reads
    first = load(jspark, storage_root, subscribe="bad",
                 endingOffsets=f'{{"bad":{{"0":{int(segments[1].stem)}}}}}')
    assert first.count() == int(segments[1].stem)
    df = load(jspark, storage_root, subscribe="bad")
    assert JVM in scan_of(df)
    # count() reads frame headers only (as Parquet reads footers): the body is not checked
    assert df.count() == 40
    with pytest.raises(Exception) as info:
        df.collect()
    text = str(info.value)
    assert f"corrupt frame in file:{victim}" in text and "at position 0" in text, text
    assert "CRC32C mismatch" in text and "topic 'bad' partition 0" in text
    assert store.fileio.exists(store.partition_dir("bad", 0))


def test_count_checks_the_headers_it_reads(jspark, storage_root, tmp_path):
    """A count read from frame headers takes their record counts without the CRC, so a
    header whose record count disagrees with its implicit offsets is reported; the same
    damage is a CRC mismatch for a query that reads the body. A pushed-down count
    (docs/spark.md, Counting) reads no frame of a sealed segment with a summary count:
    it answers from the summary, as Parquet's count() from footers, and reports the same
    damage in the active segment, whose headers it reads."""

    make_topic(storage_root, "hdr", partitions=1, count=40, per_frame=10,
               config={"segment.bytes": "1500"})
    make_topic(storage_root, "act", partitions=1, count=40, per_frame=10)  # all active
    segments = sorted((tmp_path / "log" / "topics" / "hdr" / "0").glob("*.log"))
    assert len(segments) >= 3
    active = sorted((tmp_path / "log" / "topics" / "act" / "0").glob("*.log"))
    assert len(active) == 1
    # a sealed segment (the log's end does not depend on it), then the first frame of an
    # active segment (not its last, which the planner reads whole)
    for topic, victim in (("hdr", segments[1]), ("act", active[0])):
        data = bytearray(victim.read_bytes())
        RECORD_COUNT.write(data, 0, 7)  # the first frame's record count: 10 -> 7
        victim.write_bytes(bytes(data))
        unpushed = load(jspark, storage_root, subscribe=topic,
                        **{COUNT_PUSHDOWN_OPTION: "false"})
        pushed = load(jspark, storage_root, subscribe=topic)
        for count in [unpushed.count] + ([pushed.count] if topic == "act" else []):
            with pytest.raises(Exception) as info:
                count()
            text = str(info.value)
            assert f"corrupt frame in file:{victim} at position 0" in text, text
            assert "record count 7, last offset delta 9 (implicit offsets)" in text, text
        if topic == "hdr":
            assert pushed.count() == 40  # from the summary: the frames are not read
        with pytest.raises(Exception, match="CRC32C mismatch"):
            pushed.select("value").collect()


# header fields a reader uses, with their (start, length) in the 61-byte header; the base
# offset and leader epoch (bytes 0-8, 12-16) are outside the CRC by design (the broker
# stamps them, as Kafka's RecordBatch) and are checked only for going back
def _span(first, last=None):
    """(start, length) of header fields ``first`` to ``last`` (adjacent, inclusive)."""
    last = last or first
    return first.position, last.position + last.size - first.position


FUZZED_FIELDS = {"length": _span(LENGTH), "magic": _span(MAGIC_FIELD), "crc": _span(CRC),
                 "attributes": _span(ATTRIBUTES), "last offset delta": _span(LAST_OFFSET_DELTA),
                 "timestamps": _span(FIRST_TIMESTAMP, MAX_TIMESTAMP),
                 "producer": _span(PRODUCER_ID, BASE_SEQUENCE),
                 "record count": _span(RECORD_COUNT)}
CLEAN_ERRORS = ("corrupt frame in file:", "are beyond the end of the log",  # JVM reader
                "sparklog.errors.CorruptRecordError: ",                       # Python reader
                "sparklog.errors.DataLossError: ")  # Python reader: a damaged sealed segment


@pytest.mark.parametrize("jvm", [True, False])
def test_fuzzed_frames_read_right_or_fail_cleanly(jspark, storage_root, tmp_path, jvm):
    """Random bit flips in the headers and bodies of a sealed segment's frames: count()
    (headers only on the JVM) and a query of the values (whole frames) each return the
    right answer or fail with the reader's error naming the file; no other exception, no
    wrong answer (a damaged length is neither skipped over nor allocated: before that
    check, one flip took the JVM down). Both readers."""
    import random
    import re
    from collections import Counter

    make_topic(storage_root, "fz", partitions=1, count=60, per_frame=10,
               config={"segment.bytes": "4000"})
    segments = sorted((tmp_path / "log" / "topics" / "fz" / "0").glob("*.log"))
    assert len(segments) >= 2
    victim = segments[0]  # sealed, with an index
    pristine = victim.read_bytes()
    frames, pos = [], 0
    while pos < len(pristine):
        frames.append(pos)
        pos += LOG_OVERHEAD + LENGTH.read(pristine, pos)
    # count() from the frames (a pushed-down count would answer from the index summary)
    df = load(jspark, storage_root, subscribe="fz", **{JVM_READER_OPTION: str(jvm).lower(),
                                                      COUNT_PUSHDOWN_OPTION: "false"})
    assert (JVM in scan_of(df)) == jvm
    want = sorted(r.value for r in df.select("value").collect())
    rng = random.Random(20261122)
    outcomes = Counter()
    try:
        for case in range(24):
            data = bytearray(pristine)
            frame = rng.choice(frames)
            name, (start, width) = rng.choice(
                list(FUZZED_FIELDS.items()) + [("body", (HEADER_SIZE, 40))])
            at = frame + start + rng.randrange(width)
            data[at] ^= 1 << rng.randrange(8)
            victim.write_bytes(bytes(data))
            for query, right in (("count", lambda: df.count() == len(want)),
                                 ("values", lambda: sorted(
                                     r.value for r in df.select("value").collect()) == want)):
                try:
                    ok = right()
                except Exception as exc:  # noqa: BLE001 - the text is what is checked
                    text = str(exc)
                    assert any(e in text for e in CLEAN_ERRORS), (name, query, text[-3000:])
                    assert re.search(re.escape(str(victim)), text), text[-3000:]
                    outcomes[f"{query}: error"] += 1
                else:
                    assert ok, f"{query} returned a wrong answer after a flip in {name}"
                    outcomes[f"{query}: right"] += 1
    finally:
        victim.write_bytes(pristine)
    print(dict(outcomes))
    assert outcomes["values: error"] > 0 and outcomes["count: error"] > 0, outcomes
    assert df.count() == len(want)


def test_frame_offsets_going_back_are_corruption(jspark, storage_root, tmp_path):
    """A frame whose base offset (outside the CRC, stamped by the broker) is below the
    previous frame's next offset is reported, not read as duplicate offsets."""

    make_topic(storage_root, "back", partitions=1, count=60, per_frame=5,
               config={"segment.bytes": "4000"})
    part = tmp_path / "log" / "topics" / "back" / "0"
    victim = sorted(part.glob("*.log"))[0]
    data = bytearray(victim.read_bytes())
    second = LOG_OVERHEAD + LENGTH.read(data)  # the second frame's position
    BASE_OFFSET.write(data, second, 0)         # its base offset back to 0
    victim.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        load(jspark, storage_root, subscribe="back").collect()
    text = str(info.value)
    assert f"corrupt frame in file:{victim} at position {second}" in text, text
    assert "base offset 0 is below the previous frame's next offset 5" in text, text


@pytest.mark.parametrize("fail", [True, False])
def test_segment_deleted_while_scanning(jspark, storage_root, fail):
    store = make_topic(storage_root, "t", partitions=1, count=30,
                       config={"segment.bytes": "3000"})
    df = load(jspark, storage_root, subscribe="t", failOnDataLoss=str(fail).lower())
    assert JVM in scan_of(df)  # planned now: the whole log, [0, 30)
    plog = PartitionLog.open(store.fileio, store.partition_dir("t", 0), {"segment.bytes": "3000"})
    plog.delete_segments_before(20)  # retention, after planning and before the tasks
    plog.close()
    if fail:
        with pytest.raises(Exception, match=r"topic 't' partition 0: offsets \[0, 20\) are no "
                           r"longer available \(deleted while the scan ran; the log now "
                           r"starts at 20\).*failOnDataLoss"):
            df.collect()
    else:
        assert sorted(r.offset for r in df.collect()) == list(range(20, 30))


REGISTER_SCRIPT = """
import sys, json
from sparklog.spark import local_session
# with the jar: local_session adds the (built) jar itself
spark = local_session("jvm-register", cores=1, jvm_reader=sys.argv[3] == "jar")
rows = (spark.read.format("sparklog").option("path", sys.argv[2]).option("subscribe", "r")
        .load())
plan = rows._jdf.queryExecution().executedPlan().toString()
counts = [rows.where("offset >= 3").count(), rows.count()]
print(json.dumps({"offsets": sorted(r.offset for r in rows.collect()), "plan": plan,
                  "pushdown": spark.conf.get("spark.sql.python.filterPushdown.enabled"),
                  "counts": counts}))
spark.stop()
"""


@pytest.mark.parametrize("classpath", ["jar", "no jar"])
def test_register_behind_the_jvm_provider(jspark, storage_root, tmp_path, classpath):
    """A new local_session() puts the built jar on its classpath by itself, and, with no
    pyspark_sparklog module on its path, register(spark) (local_session calls it)
    succeeds although the JVM provider holds the name: format("sparklog") reads through
    the JVM reader, with filter pushdown. Without the jar, register() leaves pushdown
    off: Spark 4.1 would reuse a filtered scan's plan for the unfiltered count."""
    import json
    import os
    import subprocess

    make_topic(storage_root, "r", partitions=1, count=5)
    script = tmp_path / "register_check.py"
    script.write_text(REGISTER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(script), jar_path(build=False), storage_root,
                           classpath.replace(" ", "")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["offsets"] == [0, 1, 2, 3, 4]
    assert out["counts"] == [2, 5], out
    if classpath == "jar":
        assert JVM in out["plan"] and out["pushdown"] == "true", out
    else:
        assert JVM not in out["plan"] and out["pushdown"] != "true", out


@pytest.mark.parametrize("jvm", [True, False])
def test_each_scan_plans_its_own_offsets(jspark, storage_root, jvm):
    """Spark 4.1 keeps one Python read plan per loaded DataFrame and reuses it for every
    scan of it; the JVM provider pins each scan's own plan, on either reader: a filtered
    count leaves the unfiltered one whole, a later action sees records appended since,
    and one query may scan the DataFrame with and without pushed filters."""
    from tests.support.logdata import append_records

    store = make_topic(storage_root, "pin", partitions=1, count=10)
    df = load(jspark, storage_root, subscribe="pin", **{JVM_READER_OPTION: str(jvm).lower()})
    assert df.where("offset >= 5").count() == 5
    assert df.count() == 10
    assert df.where("offset < 3").count() == 3
    append_records(store, "pin", 0, [record("pin", 0, o) for o in range(10, 15)], per_frame=5)
    assert df.count() == 15
    assert df.union(df.where("offset >= 12")).count() == 18
    assert (JVM in scan_of(df)) == jvm


def test_with_jvm_reader_adds_the_jar_once(jspark):
    from sparklog.spark.jvm import with_jvm_reader

    jar = jar_path(build=False)
    conf = with_jvm_reader({"spark.jars": "other.jar", "spark.ui.enabled": "false"})
    assert conf["spark.jars"] == f"other.jar,{jar}" and conf["spark.ui.enabled"] == "false"
    assert with_jvm_reader(conf) == conf
    assert with_jvm_reader({}) == {"spark.jars": jar}


def test_task_metrics_count_frames_bytes_and_records(jspark, storage_root, tmp_path):
    make_topic(storage_root, "m", partitions=2, count=50, per_frame=10)  # 5 frames each
    df = load(jspark, storage_root, subscribe="m", startingOffsets='{"m":{"0":5,"1":0}}')
    assert len(df.collect()) == 95
    scan = df._jdf.queryExecution().executedPlan().collectLeaves().head()
    assert JVM in scan.toString()
    metrics = {name: scan.metrics().get(name).get().value()
               for name in ("sparklogFramesRead", "sparklogBytesRead", "sparklogRecordsRead")}
    sizes = sum(f.stat().st_size for f in (tmp_path / "log" / "topics" / "m").rglob("*.log"))
    assert metrics == {"sparklogFramesRead": 10, "sparklogBytesRead": sizes,
                       "sparklogRecordsRead": 95}, metrics
    # a query of offsets only reads the frames' 61-byte headers, not their bodies
    offsets = df.select("offset")
    assert len(offsets.collect()) == 95
    scan = offsets._jdf.queryExecution().executedPlan().collectLeaves().head()
    read = {name: scan.metrics().get(name).get().value()
            for name in ("sparklogFramesRead", "sparklogBytesRead")}
    assert read == {"sparklogFramesRead": 10, "sparklogBytesRead": 10 * 61}, read


def _stream_scan_metrics(query) -> dict:
    """The JVM reader's metrics on the scan of the query's last micro-batch."""
    leaf = query._jsq.streamingQuery().lastExecution().executedPlan().collectLeaves().head()
    return {name: leaf.metrics().get(name).get().value()
            for name in ("sparklogFramesRead", "sparklogRecordsRead")
            if leaf.metrics().contains(name)}


@pytest.mark.parametrize("jvm", [True, False])
def test_streams_read_their_micro_batches_on_the_jvm(jspark, storage_root, tmp_path, jvm):
    """Micro-batches of a raw topic run on the JVM reader (its task metrics count them),
    with the opt-out on the Python reader; a restart from the checkpoint reads exactly
    the new records either way."""

    store = make_topic(storage_root, "st", partitions=2, count=40, per_frame=10)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    options = {"subscribe": "st", "startingOffsets": "earliest",
               JVM_READER_OPTION: str(jvm).lower()}
    for expected, more in ((80, None), (10, range(40, 50))):
        if more is not None:
            append_more(store, "st", 0, more)
        query = run_available_now(stream(jspark, storage_root, **options), out, ckpt)
        assert query.exception() is None
        assert query.lastProgress["numInputRows"] == expected
        metrics = _stream_scan_metrics(query)
        if jvm:
            assert metrics["sparklogRecordsRead"] == expected, metrics
            assert metrics["sparklogFramesRead"] > 0, metrics
        else:  # the Python reader declares none of the JVM reader's metrics
            assert not metrics, metrics
    got = sorted((r.partition, r.offset) for r in output(jspark, out).collect())
    assert got == [(0, o) for o in range(50)] + [(1, o) for o in range(40)]


def test_compacted_topic_read_by_both_readers_through_a_swap(jspark, storage_root):
    """A topic cleaned by compaction (cleaned segments beside the replaced ones, kept by
    file.delete.delay.ms): both readers select the same live set; a scan planned before
    the swap whose files are then deleted reads the replacement; removed offsets are
    gaps, not data loss."""
    from sparklog.log.cleaner import clean

    store = TopicStore(storage_root, open_fileio(storage_root))
    config = {"cleanup.policy": "compact", "segment.bytes": "3000",
              "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}
    store.create_topic("cc", 1, configs=config)
    keys = [f"k{o % 7}".encode() for o in range(60)]
    frames = [encode_frame(raw_batch([b"v%d" % o for o in range(i, i + 5)], keys[i:i + 5]),
                           timestamps=[BASE_TS + o for o in range(i, i + 5)])
              for i in range(0, 60, 5)]
    append(store, "cc", 0, frames, config)
    planned_jvm = load(jspark, storage_root, subscribe="cc")
    planned_python = load(jspark, storage_root, subscribe="cc", **{JVM_READER_OPTION: "false"})
    assert JVM in scan_of(planned_jvm)  # planned on the old segments, [0, 60)
    plog = PartitionLog.open(store.fileio, store.partition_dir("cc", 0), config)
    try:
        cleaned = clean(plog)
        assert cleaned is not None and cleaned.segments_replaced >= 2
        plog.delete_replaced_files()  # delay 0: the planned files are gone now
        end = cleaned.end_offset
    finally:
        plog.close()
    # survivors: each key's last record below the cleaned end, and everything after it
    last = {k: o for o, k in enumerate(keys[:end])}
    want = sorted(set(last.values()) | set(range(end, 60)))
    assert len(want) < 60
    for df in (planned_jvm, planned_python):
        assert sorted(r.offset for r in df.collect()) == want
    jvm, python = jvm_and_python(jspark, storage_root, subscribe="cc")
    assert_same(jvm, python)
    assert sorted((r.offset, r.value) for r in jvm.collect()) == [(o, b"v%d" % o) for o in want]
    # a range starting and ending inside removed offsets
    gap = next(o for o in range(end) if o not in want)
    jvm, python = jvm_and_python(jspark, storage_root, subscribe="cc",
                                 startingOffsets=f'{{"cc":{{"0":{gap}}}}}')
    assert_same(jvm, python)
    assert sorted(r.offset for r in jvm.collect()) == [o for o in want if o >= gap]


def test_scans_while_the_cleaner_swaps(jspark, storage_root):
    """Spark scans on the JVM and the Python reader, run again and again while a writer
    appends keyed records and a cleaner thread cleans and deletes the replaced files at
    once: no scan fails, none has a duplicate offset, every row is the record written at
    its offset, and every key's newest record (when the scan ended) within the scan's
    range is there."""
    import threading
    import time

    from sparklog.log.cleaner import clean

    store = TopicStore(storage_root, open_fileio(storage_root))
    config = {"cleanup.policy": "compact", "segment.bytes": "2500",
              "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}
    store.create_topic("cs", 1, configs=config)
    plog = PartitionLog.open(store.fileio, store.partition_dir("cs", 0), config)
    written: dict[int, tuple[bytes, bytes]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    cleanings = [0]

    def append_some(n):
        with lock:
            for _ in range(n):
                o = plog.log_end_offset
                k, v = b"k%d" % (o % 50), b"v%d" % o
                plog.append(encode_frame(raw_batch([v], [k]), timestamps=[BASE_TS + o]))
                written[o] = (k, v)
            plog.flush()

    def background():
        try:
            while not stop.is_set():
                append_some(2)  # each key rewritten every ~2.5 s: scans see most alive
                if clean(plog) is not None:
                    cleanings[0] += 1
                plog.delete_replaced_files()
                time.sleep(0.1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    append_some(100)
    thread = threading.Thread(target=background)
    thread.start()
    scans = nonempty = 0
    # scan (both readers in turn) until the cleaner has swapped segments at least three
    # times under the scans: on a fast machine six scans can end before it has
    deadline = time.monotonic() + 180
    try:
        while scans < 6 or cleanings[0] < 3:
            assert time.monotonic() < deadline, (
                f"the cleaner swapped {cleanings[0]} times during {scans} scans in 180 s")
            for options in ({}, {JVM_READER_OPTION: "false"}):
                rows = load(jspark, storage_root, subscribe="cs", **options).collect()
                with lock:
                    snapshot = dict(written)
                # a key's newest record when the scan ended was never superseded
                # during it, so it cannot have been cleaned away: below the last
                # offset read it must be there (records superseded by writes after
                # the planned end may be gone: the log at a later instant)
                end = max((r.offset for r in rows), default=-1) + 1
                offsets = [r.offset for r in rows]
                assert len(offsets) == len(set(offsets))
                for r in rows:
                    assert snapshot[r.offset] == (r.key, r.value)
                newest = {}
                for o, (k, _) in sorted(snapshot.items()):
                    newest[k] = o
                assert not [o for o in newest.values() if o < end and o not in set(offsets)]
                scans += 1
                nonempty += bool(rows)
    finally:
        stop.set()
        thread.join()
        plog.close()
    if errors:
        raise errors[0]
    assert nonempty >= 3, (scans, cleanings, nonempty)
