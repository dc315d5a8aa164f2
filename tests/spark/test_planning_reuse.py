"""A planning process keeps one storage client (FileIO) per storage root between plans
(Spark reuses its Python planning workers), and every plan still reads the log afresh:
a topic created or a segment rolled after a query is seen by the next one."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

import sparklog.storage  # noqa: E402
from sparklog.errors import StorageError  # noqa: E402
from sparklog.log.reader import LogReader  # noqa: E402
from sparklog.spark.datasource import SparklogDataSource  # noqa: E402
from sparklog.spark.source.batch import SparklogBatchReader  # noqa: E402
from sparklog.spark.source.catalog import shared_fileio  # noqa: E402
from sparklog.spark.source.catalogs import planning_catalog  # noqa: E402
from sparklog.spark.source.options import parse_options  # noqa: E402
from tests.support.logdata import append_records, make_topic, record  # noqa: E402
from tests.support.sparkread import load  # noqa: E402

#: small segments: a few frames of make_topic's records fill one
SEGMENTS = {"segment.bytes": "3000"}


def plan(root, **options):
    """{(topic, partition): (start, end)} of a batch plan over ``root``, made as a
    planning worker makes it (the schema at ``load()``, then the plan)."""
    options = {"path": root, **options}
    SparklogDataSource(options).schema()
    reader = SparklogBatchReader(parse_options(options, streaming=False), None)
    spans: dict = {}
    for r in reader.partitions():
        lo, hi = spans.get((r.topic, r.partition), (r.start, r.end))
        spans[(r.topic, r.partition)] = (min(lo, r.start), max(hi, r.end))
    return spans


def segment_count(store, topic, partition) -> int:
    return len(LogReader(store.fileio, store.partition_dir(topic, partition)).segments())


def append_rolling(store, topic, offsets) -> None:
    """Append the records of ``offsets`` to partition 0 in :data:`SEGMENTS`-sized
    segments, checking that at least one segment rolled."""
    before = segment_count(store, topic, 0)
    append_records(store, topic, 0, [record(topic, 0, o) for o in offsets], config=SEGMENTS)
    assert segment_count(store, topic, 0) > before


@pytest.fixture
def opened(monkeypatch):
    """The roots of the FileIOs opened from now on, one entry per open."""
    roots: list = []
    real = sparklog.storage.open_fileio

    def counting(url, **options):
        roots.append(url)
        return real(url, **options)

    monkeypatch.setattr(sparklog.storage, "open_fileio", counting)
    return roots


def test_plans_of_a_root_open_its_storage_client_once(storage_root, tmp_path, opened):
    root = storage_root
    make_topic(root, "t", partitions=2, count=20)
    opened.clear()
    for _ in range(3):
        assert plan(root, subscribe="t") == {("t", 0): (0, 20), ("t", 1): (0, 20)}
    assert opened == [root]
    with planning_catalog(parse_options({"path": root, "subscribe": "t"})) as catalog:
        kept = catalog.store.fileio
    # another root, or the same root with other storage options, has a client of its own
    other = (tmp_path / "other").as_uri()
    make_topic(other, "t", partitions=1, count=5)
    opened.clear()
    assert plan(other, subscribe="t") == {("t", 0): (0, 5)}
    assert shared_fileio(root, {"buffer_size": 4096}) is not kept
    assert shared_fileio(root) is kept
    assert opened == [other, root]


def test_a_storage_error_drops_the_kept_client(storage_root):
    root = storage_root
    make_topic(root, "t", partitions=1, count=5)
    opts = parse_options({"path": root, "subscribe": "t"})
    with planning_catalog(opts) as catalog:
        first = catalog.store.fileio
    with pytest.raises(StorageError, match="lost"):
        with planning_catalog(opts) as catalog:
            assert catalog.store.fileio is first
            raise StorageError("connection lost")
    with planning_catalog(opts) as catalog:
        assert catalog.store.fileio is not first
        assert catalog.list_topics() == ["t"]


def test_the_next_plan_sees_a_new_topic_and_a_rolled_segment(storage_root):
    root = storage_root
    store = make_topic(root, "t1", partitions=1, count=20, config=SEGMENTS)
    assert plan(root, subscribePattern="t.*") == {("t1", 0): (0, 20)}
    append_rolling(store, "t1", range(20, 80))
    make_topic(root, "t2", partitions=2, count=7)
    assert plan(root, subscribePattern="t.*") == {
        ("t1", 0): (0, 80), ("t2", 0): (0, 7), ("t2", 1): (0, 7)}


def spark_sees_a_new_topic_and_a_rolled_segment(spark, root):
    """Queries of one session (the same reused planning workers) over ``root``: each
    sees what was written after the one before."""
    store = make_topic(root, "t1", partitions=1, count=20, config=SEGMENTS)
    assert load(spark, root, subscribePattern="t.*").count() == 20
    append_rolling(store, "t1", range(20, 80))
    df = load(spark, root, subscribePattern="t.*")
    assert df.count() == 80
    assert df.where("offset >= 70").count() == 10  # a pushed filter: a plan of its own
    make_topic(root, "t2", partitions=2, count=7)
    rows = load(spark, root, subscribePattern="t.*").groupBy("topic").count().collect()
    assert sorted(tuple(r) for r in rows) == [("t1", 80), ("t2", 14)]


@pytest.mark.spark
def test_spark_queries_see_a_new_topic_and_a_rolled_segment(sl_spark, storage_root):
    spark_sees_a_new_topic_and_a_rolled_segment(sl_spark, storage_root)


@pytest.mark.spark
@pytest.mark.timeout(600)  # alone, the run's HDFS cluster and Spark session start in it
def test_spark_queries_see_a_new_topic_and_a_rolled_segment_on_hdfs(sl_spark, hdfs_env):
    root = f"{hdfs_env.hdfs_uri}/planning-reuse-{uuid.uuid4().hex}"
    spark_sees_a_new_topic_and_a_rolled_segment(sl_spark, root)
