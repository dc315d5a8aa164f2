"""The Structured Streaming exactly-once pattern: the sparklog source, a checkpoint, and a
foreachBatch sink committing each micro-batch with its batch id as the transaction
version. A batch that fails before or after its commit is replayed by Spark from the
checkpoint; the output still holds every offset once."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")

import sparklog.spark
from sparklog.spark.jobs import exactly_once_batch_writer, open_sink
from sparklog.spark.jobs.faults import ENV_VAR
from tests.support.jobs import SQL, add_records, assert_exactly_once, commit_docs, make_topic

pytestmark = pytest.mark.spark


def start(spark, root, out, fmt, checkpoint):
    sparklog.spark.register(spark)
    stream = (spark.readStream.format("sparklog").option("path", root)
              .option("subscribe", "events").option("startingOffsets", "earliest").load())
    writer = exactly_once_batch_writer(open_sink(out, fmt), "stream", SQL)
    return (stream.writeStream.option("checkpointLocation", checkpoint)
            .foreachBatch(writer).start())


def drain(query):
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_foreach_batch_replays_are_committed_once(spark, storage_root, tmp_path, monkeypatch):
    """(Delta; the Parquet sink runs the same writer code and commit contract.)"""
    fmt = "delta"
    store = make_topic(storage_root, "events", partitions=2, count=10)
    out = (tmp_path / "out").as_uri()
    ckpt = str(tmp_path / "checkpoint")
    drain(start(spark, storage_root, out, fmt, ckpt))
    assert [d["version"] for d in commit_docs(out, fmt, "stream")] == [0]
    expected = {("events", 0): 10, ("events", 1): 10}
    for step, new in (("after-commit", 4), ("before-commit", 3)):
        add_records(store, "events", 0, expected[("events", 0)], new)
        expected[("events", 0)] += new
        monkeypatch.setenv(ENV_VAR, f"{step}:raise")
        query = start(spark, storage_root, out, fmt, ckpt)
        with pytest.raises(Exception, match="injected fault"):
            drain(query)
        monkeypatch.delenv(ENV_VAR)
        done = len(commit_docs(out, fmt, "stream"))
        # restart on the same checkpoint: Spark replays the failed batch with its id
        drain(start(spark, storage_root, out, fmt, ckpt))
        assert len(commit_docs(out, fmt, "stream")) == done + (step == "before-commit")
        assert_exactly_once(out, fmt, "stream", expected)
    docs = commit_docs(out, fmt, "stream")
    assert [d["extra"]["batchId"] for d in docs] == [0, 1, 2]
