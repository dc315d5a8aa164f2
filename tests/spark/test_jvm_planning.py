"""The JVM provider plans path-mode batch scans itself (io.sparklog.spark.BatchPlanner):
its offset ranges equal the Python planner's (planning.plan_batch) on the same log and
options (splits, JSON offsets, subscriptions, a compacted topic's live set), a scan it
plans reads the same rows, and whatever it leaves to Python is planned there."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")

from sparklog.spark.jvm import JVM_PLANNING_OPTION  # noqa: E402
from sparklog.spark.source.catalog import StorageCatalog  # noqa: E402
from sparklog.spark.source.options import parse_options  # noqa: E402
from sparklog.spark.source.planning import plan_batch  # noqa: E402
from tests.support.logdata import BASE_TS, cleaned_topic, expected_rows, make_topic  # noqa: E402
from tests.support.sparkread import JVM, assert_same, load, scan_of  # noqa: E402

pytestmark = pytest.mark.spark

PLANNED_ON_JVM = "planned on the JVM"

#: option sets compared on the same log (topics "ev": 3 partitions, several segments)
CASES = [
    {"subscribe": "ev"},
    {"subscribe": "ev", "minPartitions": "7"},
    {"subscribe": "ev", "minPartitions": "20", "maxRecordsPerPartition": "13"},
    {"subscribe": "ev", "maxRecordsPerPartition": "9"},
    {"subscribePattern": "e.*", "minPartitions": "5"},
    {"assign": '{"ev": [2, 0]}', "minPartitions": "4"},
    {"subscribe": "ev", "startingOffsets": '{"ev": {"0": 5, "1": -2, "2": 40}}',
     "endingOffsets": '{"ev": {"0": 61, "1": -1, "2": 41}}', "minPartitions": "6"},
]


def python_plan(root: str, options: dict) -> str:
    """The Python planner's ranges, in BatchPlanner.describe's text form."""
    opts = parse_options({"path": root, **options}, streaming=False)
    catalog = StorageCatalog(root)
    try:
        ranges = plan_batch(catalog, opts)
    finally:
        catalog.close()
    return "".join(f"{r.topic}-{r.partition}:[{r.start},{r.end})\n" for r in ranges)


def jvm_plan(spark, root: str, options: dict) -> str:
    """BatchPlanner's ranges for the same options ("unsupported: ..." when it leaves
    the scan to Python)."""
    jvm = spark.sparkContext._jvm
    jmap = jvm.java.util.HashMap()
    for k, v in {"path": root, **options}.items():
        jmap.put(k, v)
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    return jvm.io.sparklog.spark.BatchPlanner.describe(jmap, conf)


def assert_same_plan(spark, root, options):
    want = python_plan(root, options)
    got = jvm_plan(spark, root, options)
    assert got == want, f"options {options}"
    return got


def test_jvm_ranges_equal_the_python_planners(jspark, storage_root):
    make_topic(storage_root, "ev", partitions=3, count=97, per_frame=4,
               config={"segment.bytes": "2500"})
    make_topic(storage_root, "empty", partitions=1, count=0)
    for options in CASES:
        plan = assert_same_plan(jspark, storage_root, options)
        assert plan.count("\n") >= 3, plan
    assert assert_same_plan(jspark, storage_root, {"subscribe": "empty"}) == ""
    # the scan it plans reads the records, and says where it was planned
    df = load(jspark, storage_root, subscribe="ev", minPartitions="5")
    assert PLANNED_ON_JVM in scan_of(df)
    assert_same(df, load(jspark, storage_root, subscribe="ev",
                         **{JVM_PLANNING_OPTION: "false"}))
    assert sorted(tuple(r) for r in df.collect()) == sorted(
        expected_rows("ev", {p: range(97) for p in range(3)}))


def test_what_the_jvm_leaves_to_the_python_planner(jspark, storage_root):
    make_topic(storage_root, "lp", partitions=2, count=20, per_frame=5)
    for options, why in [
        ({"subscribe": "lp", "startingTimestamp": str(BASE_TS)}, "startingtimestamp"),
        ({"subscribe": "lp", "startingOffsets": '{"lp": {"0": 1}}'}, "offsets miss lp-1"),
        ({"subscribe": "nope"}, "does not exist"),
        ({"subscribe": "lp", JVM_PLANNING_OPTION: "false"}, JVM_PLANNING_OPTION),
    ]:
        assert why in jvm_plan(jspark, storage_root, options).lower().replace(
            JVM_PLANNING_OPTION.lower(), JVM_PLANNING_OPTION)
    df = load(jspark, storage_root, subscribe="lp", startingTimestamp=str(BASE_TS + 3))
    assert JVM in scan_of(df) and PLANNED_ON_JVM not in scan_of(df)
    planned = python_plan(storage_root, {"subscribe": "lp", "startingTimestamp": str(BASE_TS + 3)})
    ranges = [line.split(":")[1].strip("[)").split(",") for line in planned.splitlines()]
    assert 0 < sum(int(b) - int(a) for a, b in ranges) < 40
    assert df.count() == sum(int(b) - int(a) for a, b in ranges)  # the timestamp resolved
    # a filter pushed to the Python source keeps the plan it makes
    assert load(jspark, storage_root, subscribe="lp").where("offset >= 15").count() == 10
    # Python's errors stay Python's
    bad = load(jspark, storage_root, subscribe="lp", endingOffsets='{"lp": {"0": 99, "1": 2}}')
    with pytest.raises(Exception, match="beyond the latest offset"):
        bad.count()


def test_compacted_topic_plans_the_live_set(jspark, storage_root):
    cleaned = cleaned_topic(storage_root)  # replaced segments stay beside the cleaned ones
    assert cleaned.segments_replaced >= 2
    for options in ({"subscribe": "cp"}, {"subscribe": "cp", "minPartitions": "4"},
                    {"subscribe": "cp", "maxRecordsPerPartition": "7"}):
        assert_same_plan(jspark, storage_root, options)
    df = load(jspark, storage_root, subscribe="cp", minPartitions="3")
    assert PLANNED_ON_JVM in scan_of(df)
    assert_same(df, load(jspark, storage_root, subscribe="cp", minPartitions="3",
                         **{JVM_PLANNING_OPTION: "false"}))


def test_available_now_target_read_on_the_jvm(jspark, storage_root, tmp_path):
    """A capped AvailableNow stream in path mode takes its target (the log ends when the
    run starts) from the JVM, equal to the Python stream's uncapped latest offset, and
    drains the backlog in several micro-batches."""
    import json

    from sparklog.spark.source.stream import SparklogStreamReader
    from tests.support.sparkread import output, stream

    make_topic(storage_root, "an", partitions=2, count=30, per_frame=4,
               config={"segment.bytes": "2000"})
    options = {"subscribe": "an", "maxOffsetsPerTrigger": "16"}
    jvm = jspark.sparkContext._jvm
    jmap = jvm.java.util.HashMap()
    for k, v in {"path": storage_root, **options}.items():
        jmap.put(k, v)
    ends = jvm.io.sparklog.spark.BatchPlanner.describeLogEnds(
        jmap, jspark._jsparkSession.sessionState().newHadoopConf())
    reader = SparklogStreamReader(parse_options({"path": storage_root, "subscribe": "an"},
                                                streaming=True), None)
    assert json.loads(ends) == reader.latestOffset() == {"an": {"0": 30, "1": 30}}
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(jspark, storage_root, startingOffsets="earliest", **options)
    q = (df.writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 60 and max(sizes) <= 16 and len(sizes) >= 4, sizes
    assert output(jspark, out).count() == 60
