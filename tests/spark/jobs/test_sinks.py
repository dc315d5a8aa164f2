"""The two sinks' commit protocol with plain DataFrames and made-up offset ranges: atomic
commit with offsets, idempotent retry, the loser of a race, cleanup of failed attempts,
and the output read back without the writer's code."""

from __future__ import annotations

import json
import os
import uuid

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")

from sparklog.errors import ConcurrentTransactionsError, InvalidArgumentError, SchemaMismatchError
from sparklog.spark.jobs import (
    CommitRecord,
    DeltaSink,
    OffsetRange,
    ParquetSink,
    committed_files,
    list_applications,
    open_sink,
    read_committed,
)
from tests.support.jobs import (
    delta_commits,
    delta_rows,
    delta_spark_available,
    delta_spark_transactions,
    delta_txn_version,
    local,
    manifest_docs,
    parquet_rows,
)

pytestmark = pytest.mark.spark

SINKS = {"delta": DeltaSink, "parquet": ParquetSink}


def rows_df(spark, topic, partition, start, end):
    """A DataFrame shaped like the test jobs' output for offsets [start, end)."""
    data = [(topic, partition, o, f"{topic}/{partition}/{o}") for o in range(start, end)]
    return spark.createDataFrame(data, "topic string, partition int, offset long, value string")


def stage_and_record(sink, spark, app, version, start, end, prev=None):
    attempt = uuid.uuid4().hex[:12]
    staged = sink.stage(rows_df(spark, "t", 0, start, end).repartition(2), app, version,
                        attempt)
    offsets = dict(prev or {})
    offsets[("t", 0)] = end
    record = CommitRecord.for_staged(staged, offsets, [OffsetRange("t", 0, start, end)])
    return staged, record


def written(uri, fmt, app):
    rows = delta_rows(uri) if fmt == "delta" else parquet_rows(uri, app)
    return sorted(o for _, _, o, _ in rows)


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_commit_retry_conflict_and_cleanup(spark, tmp_path, fmt):
    uri = (tmp_path / "out").as_uri()
    sink = SINKS[fmt](uri)
    assert sink.last_commit("app") is None
    s0, r0 = stage_and_record(sink, spark, "app", 0, 0, 10)
    assert len(s0.files) >= 1 and s0.records == 10
    # staged files are invisible before the commit
    if fmt == "parquet":
        assert manifest_docs(uri, "app") == []
    assert sink.commit(s0, r0) == r0
    assert written(uri, fmt, "app") == list(range(10))
    # a retried commit of the same attempt is a no-op
    assert sink.commit(s0, r0).attempt == r0.attempt
    assert written(uri, fmt, "app") == list(range(10))
    # two attempts at version 1: the second to commit loses and writes nothing
    a, ra = stage_and_record(sink, spark, "app", 1, 10, 20, r0.offsets)
    b, rb = stage_and_record(sink, spark, "app", 1, 10, 25, r0.offsets)
    sink.commit(a, ra)
    with pytest.raises(ConcurrentTransactionsError, match="already committed"):
        sink.commit(b, rb)
    assert written(uri, fmt, "app") == list(range(20))
    last = sink.last_commit("app")
    assert (last.version, last.attempt, last.offsets) == (1, ra.attempt, {("t", 0): 20})
    # b's files are still there (the loser did not abort here); cleanup removes them,
    # never the winners'
    assert os.path.isdir(local(b.location))
    assert sink.cleanup("app") == 1
    assert not os.path.exists(local(b.location))
    assert written(uri, fmt, "app") == list(range(20))
    # an attempt at a version nobody committed yet (maybe still running) is kept
    c, _ = stage_and_record(sink, spark, "app", 2, 20, 30, last.offsets)
    assert sink.cleanup("app") == 0 and os.path.isdir(local(c.location))
    assert sink.applications() == ["app"] == list_applications(uri)
    assert open_sink(uri).format == fmt


def test_delta_commit_carries_offsets_and_app_transaction(spark, tmp_path):
    uri = (tmp_path / "table").as_uri()
    sink = DeltaSink(uri, partition_by=["partition"])
    s0, r0 = stage_and_record(sink, spark, "etl-1", 0, 0, 7)
    sink.commit(s0, r0)
    s1, r1 = stage_and_record(sink, spark, "etl-1", 1, 7, 12, r0.offsets)
    sink.commit(s1, r1)
    # the Delta log itself, read as JSON: one txn per commit, the offsets in commitInfo
    assert delta_txn_version(uri, "etl-1") == 1
    docs = delta_commits(uri)
    assert [d["version"] for d in docs] == [0, 1]
    assert docs[1]["offsets"] == {"t": {"0": 12}}
    assert docs[1]["ranges"] == [{"topic": "t", "partition": 0, "fromOffset": 7,
                                  "untilOffset": 12}]
    from deltalake import DeltaTable

    dt = DeltaTable(uri)
    assert dt.metadata().partition_columns == ["partition"]
    assert dt.transaction_version("etl-1") == 1
    assert sorted(delta_rows(uri)) == [("t", 0, o, f"t/0/{o}") for o in range(12)]
    # every data file of the table lives in a run directory of the app
    assert all("sparklog-runs/etl-1/" in p for p in dt.file_uris())


def test_delta_rejects_other_schema_and_partitioning(spark, tmp_path):
    uri = (tmp_path / "table").as_uri()
    sink = DeltaSink(uri)
    s0, r0 = stage_and_record(sink, spark, "a", 0, 0, 3)
    sink.commit(s0, r0)
    other = spark.createDataFrame([(1, "x")], "id long, name string")
    with pytest.raises(SchemaMismatchError, match="does not match the schema"):
        DeltaSink(uri).validate(other)
    with pytest.raises(InvalidArgumentError, match="partitioned by"):
        DeltaSink(uri, partition_by=["topic"]).validate(rows_df(spark, "t", 0, 0, 1))
    # an omitted partitioning adopts the table's
    adopt = DeltaSink(uri)
    adopt.validate(rows_df(spark, "t", 0, 0, 1))
    assert adopt.partition_by == []


def test_parquet_manifest_is_create_if_absent_and_publishes(spark, tmp_path):
    uri = (tmp_path / "out").as_uri()
    sink = ParquetSink(uri, partition_by=["partition"])
    s0, r0 = stage_and_record(sink, spark, "app", 0, 0, 10)
    sink.commit(s0, r0)
    (doc,) = manifest_docs(uri, "app")
    assert doc["commit"]["offsets"] == {"t": {"0": 10}}
    assert doc["partitionBy"] == ["partition"]
    # published: Hive layout in the output directory, staging gone
    base = local(uri)
    for f in doc["files"]:
        assert f["path"].startswith("partition=0/")
        assert os.path.exists(os.path.join(base, f["path"]))
    assert not os.path.exists(local(s0.location))
    # plain Spark and the manifest reader see the same rows
    plain = spark.read.parquet(uri)
    assert sorted(r.offset for r in plain.collect()) == list(range(10))
    table = read_committed(uri)
    assert table.column_names == ["topic", "partition", "offset", "value"]
    assert sorted(table.column("offset").to_pylist()) == list(range(10))
    assert table.column("partition").type.bit_width == 32
    assert len(committed_files(uri)) == len(doc["files"])


def test_parquet_crash_while_publishing_is_finished_by_cleanup(spark, tmp_path, monkeypatch):
    uri = (tmp_path / "out").as_uri()
    sink = ParquetSink(uri)
    s0, r0 = stage_and_record(sink, spark, "app", 0, 0, 10)
    assert len(s0.files) == 2
    real_rename = sink.fileio.rename
    calls = []

    def crash_after_one(src, dst):  # the manifest's own rename passes, then one file
        if dst.endswith(".parquet"):
            if calls:
                raise OSError("injected crash while publishing")
            calls.append(dst)
        real_rename(src, dst)

    monkeypatch.setattr(sink.fileio, "rename", crash_after_one)
    with pytest.raises(OSError, match="injected"):
        sink.commit(s0, r0)
    monkeypatch.setattr(sink.fileio, "rename", real_rename)
    # committed (the manifest exists) although half published: the exact view has it all
    assert sink.last_commit("app").attempt == r0.attempt
    files = committed_files(uri)
    assert sum("/_sparklog/staging/" in f for f in files) == 1
    assert sorted(read_committed(uri).column("offset").to_pylist()) == list(range(10))
    assert sorted(r[2] for r in parquet_rows(uri, "app")) == list(range(10))
    # the next run's cleanup finishes the publication
    assert ParquetSink(uri).cleanup("app") == 0
    assert not any("/_sparklog/" in f for f in committed_files(uri))
    assert not os.path.exists(local(s0.location))
    assert sorted(r.offset for r in spark.read.parquet(uri).collect()) == list(range(10))


def test_parquet_failed_attempt_never_visible(spark, tmp_path):
    uri = (tmp_path / "out").as_uri()
    sink = ParquetSink(uri)
    s0, r0 = stage_and_record(sink, spark, "app", 0, 0, 5)
    sink.commit(s0, r0)
    lost, _ = stage_and_record(sink, spark, "app", 0, 0, 8)  # a stale attempt at version 0
    pending, _ = stage_and_record(sink, spark, "app", 1, 5, 9, r0.offsets)  # not committed
    assert sorted(r.offset for r in spark.read.parquet(uri).collect()) == list(range(5))
    import pyarrow.dataset as ds

    assert sorted(ds.dataset(local(uri), format="parquet").to_table()
                  .column("offset").to_pylist()) == list(range(5))
    assert sorted(read_committed(uri).column("offset").to_pylist()) == list(range(5))
    assert sink.cleanup("app") == 1
    assert not os.path.exists(local(lost.location)) and os.path.isdir(local(pending.location))


def test_commit_record_round_trip_and_errors(tmp_path):
    r = CommitRecord("a", 3, "x1", {("t", 0): 5, ("u", 2): 9},
                     (OffsetRange("t", 0, 1, 5),), 4, 1, 123, {"k": 1})
    doc = json.loads(json.dumps(r.to_doc()))
    assert CommitRecord.from_doc(doc) == r
    assert r.input_records == 4
    with pytest.raises(InvalidArgumentError, match="malformed sparklog commit record"):
        CommitRecord.from_doc({"appId": "a"})
    with pytest.raises(InvalidArgumentError, match="no exactly-once job output"):
        open_sink(tmp_path.as_uri())
    with pytest.raises(InvalidArgumentError, match="must be one of"):
        open_sink(tmp_path.as_uri(), "orc")


def test_delta_spark_reads_the_table_and_its_app_transaction(spark, tmp_path):
    if not delta_spark_available(spark):
        pytest.skip("delta-spark's jars are not on the Spark classpath (the 'delta' Java "
                    "artifact set could not be resolved with mvn), so "
                    "spark.read.format('delta') cannot run")
    uri = (tmp_path / "table").as_uri()
    sink = DeltaSink(uri, partition_by=["partition"])
    s0, r0 = stage_and_record(sink, spark, "app", 0, 0, 9)
    sink.commit(s0, r0)
    s1, r1 = stage_and_record(sink, spark, "app", 1, 9, 14, r0.offsets)
    sink.commit(s1, r1)
    lost, _ = stage_and_record(sink, spark, "app", 2, 14, 20, r1.offsets)  # never committed
    df = spark.read.format("delta").load(uri)
    assert sorted(r.offset for r in df.collect()) == list(range(14))
    assert sorted(df.columns) == ["offset", "partition", "topic", "value"]
    # delta-spark's snapshot holds the job's application transaction ...
    assert delta_spark_transactions(spark, uri) == {"app": 1}
    # ... and honours it: a delta-spark write of the same appId at a version already
    # committed is skipped (Delta's idempotent writes, txnAppId/txnVersion), a newer
    # version is written
    for version, end in ((1, 14), (2, 16)):
        (rows_df(spark, "t", 0, 14, 16).write.format("delta").mode("append")
         .option("txnAppId", "app").option("txnVersion", version).save(uri))
        assert spark.read.format("delta").load(uri).count() == end
    assert delta_spark_transactions(spark, uri) == {"app": 2}
    assert delta_txn_version(uri, "app") == 2  # the log's JSON agrees


def test_delta_cleanup_reads_a_bounded_history(spark, tmp_path, monkeypatch):
    from sparklog.spark.jobs import delta_sink

    monkeypatch.setattr(delta_sink, "CLEANUP_WINDOW", 2)
    uri = (tmp_path / "table").as_uri()
    sink = DeltaSink(uri)
    s0, r0 = stage_and_record(sink, spark, "app", 0, 0, 2)
    stale, _ = stage_and_record(sink, spark, "app", 0, 0, 3)  # loses version 0
    sink.commit(s0, r0)
    prev = r0
    for v in (1, 2):
        s, r = stage_and_record(sink, spark, "app", v, 2 * v, 2 * v + 2, prev.offsets)
        prev = sink.commit(s, r)
    assert sink.cleanup("app") == 0 and os.path.isdir(local(stale.location))
    assert sink.cleanup("app", full=True) == 1 and not os.path.exists(local(stale.location))
    assert written(uri, "delta", "app") == list(range(6))
