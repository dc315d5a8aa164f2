"""One planner per mode: the Python planner (``planning.plan_batch``) plans every batch
scan of ``format("sparklog")``, ``path`` mode with the jar included, and the JVM reader
reads exactly the ranges it planned, received as versioned descriptors (docs/spark.md,
"Who owns what"; docs/format.md, "Planned ranges"). The JVM carries no planner of its
own, and refuses a descriptor version it does not know, naming it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")

from sparklog.spark.jvm import class_loaded  # noqa: E402
from sparklog.spark.source.catalog import StorageCatalog  # noqa: E402
from sparklog.spark.source.options import parse_options  # noqa: E402
from sparklog.spark.source.planning import PlannedRange, plan_batch  # noqa: E402
from tests.support.logdata import BASE_TS, cleaned_topic, expected_rows, make_topic  # noqa: E402
from tests.support.sparkread import JVM, assert_same, load, scan_of  # noqa: E402

pytestmark = pytest.mark.spark

#: the JVM's former copy of the planner (deleted: the Python planner is the only one)
FORMER_JVM_PLANNER = ("io.sparklog.spark.BatchPlanner", "io.sparklog.spark.PlanOptions",
                      "io.sparklog.spark.LogEnd")

#: option sets planned on the same log (topics "ev": 3 partitions, several segments)
CASES = [
    {"subscribe": "ev"},
    {"subscribe": "ev", "minPartitions": "7"},
    {"subscribe": "ev", "minPartitions": "20", "maxRecordsPerPartition": "13"},
    {"subscribe": "ev", "maxRecordsPerPartition": "9"},
    {"subscribePattern": "e.*", "minPartitions": "5"},
    {"assign": '{"ev": [2, 0]}', "minPartitions": "4"},
    {"subscribe": "ev", "startingOffsets": '{"ev": {"0": 5, "1": -2, "2": 40}}',
     "endingOffsets": '{"ev": {"0": 61, "1": -1, "2": 41}}', "minPartitions": "6"},
    {"subscribe": "ev", "startingTimestamp": str(BASE_TS + 30)},
]


def python_plan(root: str, options: dict) -> list:
    """(topic, partition, start, end) of the Python planner's ranges."""
    opts = parse_options({"path": root, **options}, streaming=False)
    catalog = StorageCatalog(root)
    try:
        return [(r.topic, r.partition, r.start, r.end) for r in plan_batch(catalog, opts)]
    finally:
        catalog.close()


def jvm_ranges(df) -> list:
    """(topic, partition, start, end) of the ranges the JVM reader's scan of ``df`` reads."""
    from py4j.java_gateway import get_field

    leaf = df._jdf.queryExecution().executedPlan().collectLeaves().head()
    out = []
    it = leaf.inputPartitions().iterator()
    while it.hasNext():
        r = it.next()
        out.append((get_field(r, "topic"), get_field(r, "partition"), get_field(r, "start"),
                    get_field(r, "end")))
    return out


def assert_reads_python_plan(spark, root, options) -> list:
    """The JVM scan of ``options`` reads exactly the Python planner's ranges."""
    df = load(spark, root, **options)
    assert JVM in scan_of(df), scan_of(df)
    want = python_plan(root, options)
    assert jvm_ranges(df) == want, f"options {options}"
    return want


def test_the_jvm_has_no_planner_of_its_own(jspark):
    """The jar holds the reader, not a second planner (the classes that restated the
    Python planner are gone); the reader's range class is there."""
    assert class_loaded(jspark, "io.sparklog.spark.RangePartition")
    for name in FORMER_JVM_PLANNER:
        assert not class_loaded(jspark, name), name


def test_the_jvm_reads_the_python_planners_ranges(jspark, storage_root):
    make_topic(storage_root, "ev", partitions=3, count=97, per_frame=4,
               config={"segment.bytes": "2500"})
    make_topic(storage_root, "empty", partitions=1, count=0)
    for options in CASES:
        assert len(assert_reads_python_plan(jspark, storage_root, options)) >= 3, options
    assert assert_reads_python_plan(jspark, storage_root, {"subscribe": "empty"}) == []
    df = load(jspark, storage_root, subscribe="ev", minPartitions="5")
    assert_same(df, load(jspark, storage_root, subscribe="ev", **{"sparklog.jvmReader": "false"}))
    assert sorted(tuple(r) for r in df.collect()) == sorted(
        expected_rows("ev", {p: range(97) for p in range(3)}))
    # a filter pushed to the Python source narrows the plan the JVM reads
    assert load(jspark, storage_root, subscribe="ev").where("offset >= 90").count() == 3 * 7
    # the Python planner's errors are the scan's errors
    bad = load(jspark, storage_root, subscribe="ev",
               endingOffsets='{"ev": {"0": 99, "1": 2, "2": 2}}')
    with pytest.raises(Exception, match="beyond the latest offset"):
        bad.count()


def test_compacted_topic_reads_the_live_set(jspark, storage_root):
    cleaned = cleaned_topic(storage_root)  # replaced segments stay beside the cleaned ones
    assert cleaned.segments_replaced >= 2
    for options in ({"subscribe": "cp"}, {"subscribe": "cp", "minPartitions": "4"},
                    {"subscribe": "cp", "maxRecordsPerPartition": "7"}):
        assert_reads_python_plan(jspark, storage_root, options)
    df = load(jspark, storage_root, subscribe="cp", minPartitions="3")
    assert_same(df, load(jspark, storage_root, subscribe="cp",
                         **{"sparklog.jvmReader": "false"}))


def test_descriptor_versions_the_jvm_does_not_know_are_refused(jspark):
    """The JVM parses the descriptor Python's PlannedRange sends, and refuses another
    version (or a malformed descriptor) naming the problem."""
    from py4j.java_gateway import get_field

    parse = jspark.sparkContext._jvm.io.sparklog.spark.RangePartition.fromDescriptor
    r = PlannedRange("t.x", 3, 5, 2 ** 40, "file:///r", False)
    j = parse(r.descriptor())
    assert tuple(get_field(j, f) for f in ("topic", "partition", "start", "end", "root",
                                           "failOnDataLoss")) == \
        ("t.x", 3, 5, 2 ** 40, "file:///r", False)
    fields = json.loads(r.descriptor())
    for bad, message in [
        ({**fields, "version": 2}, "descriptor version 2 is not known"),
        ({k: v for k, v in fields.items() if k != "version"}, "descriptor version null"),
        ({**fields, "hosts": []}, "has fields"),
        ({**fields, "start": "5"}, "field start"),
        ({**fields, "storageOptions": {"kerberos": "x"}}, "storage options"),
    ]:
        with pytest.raises(Exception, match=message):  # IllegalArgumentException
            parse(json.dumps(bad))


def test_available_now_target_of_a_capped_path_stream(jspark, storage_root, tmp_path):
    """A capped AvailableNow stream in path mode drains what was there when it started
    in several micro-batches (its target is the Python stream's uncapped latest
    offsets)."""
    from tests.support.sparkread import output, stream

    make_topic(storage_root, "an", partitions=2, count=30, per_frame=4,
               config={"segment.bytes": "2000"})
    options = {"subscribe": "an", "maxOffsetsPerTrigger": "16"}
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(jspark, storage_root, startingOffsets="earliest", **options)
    q = (df.writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 60 and max(sizes) <= 16 and len(sizes) >= 4, sizes
    assert output(jspark, out).count() == 60


def streaming_source_runners(jvm_pid: int) -> set:
    """Pids of the Python stream processes (PySpark's streaming source runner) that the
    Spark JVM ``jvm_pid`` runs now."""
    import psutil

    pids = set()
    try:
        children = psutil.Process(jvm_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return pids
    for child in children:
        try:
            if any("python_streaming_source_runner" in arg for arg in child.cmdline()):
                pids.add(child.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return pids


def test_capped_available_now_run_starts_one_python_stream(jspark, storage_root, tmp_path):
    """The end of a capped AvailableNow run comes from the run's own Python stream (its
    latestOffset() answer carries the uncapped end): no second, uncapped Python stream
    process is started to find it, and the run still stops at what was there when it
    started. Watched as processes: every Python stream process the Spark JVM starts
    during the run, which lives for the whole run (the first, the run's own) or at least
    an interpreter's start (a second one)."""
    import threading

    from tests.support.sparkread import stream

    make_topic(storage_root, "one", partitions=2, count=30, per_frame=4)
    jvm_pid = int(jspark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    before = streaming_source_runners(jvm_pid)
    seen: set = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.update(streaming_source_runners(jvm_pid) - before)
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        df = stream(jspark, storage_root, subscribe="one", startingOffsets="earliest",
                    maxOffsetsPerTrigger="16")
        q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
        q.awaitTermination(180)
    finally:
        done.set()
        watcher.join()
    assert q.exception() is None, q.exception()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 60 and max(sizes) <= 16, sizes
    assert len(seen) == 1, f"Python stream processes started for one run: {sorted(seen)}"
    last = json.loads(q.lastProgress.json)["sources"][0]
    assert last["latestOffset"] == {"one": {"0": 30, "1": 30}}
