"""spark.readStream.format("sparklog"): restart from a checkpoint with no gap and no
duplicate, Trigger.AvailableNow, per-trigger limits, new partitions and topics picked up
between runs, and data loss in streams. Output goes to Spark's exactly-once file sink."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
chispa = pytest.importorskip("chispa", reason="chispa is not installed")

from sparklog.log.partition import PartitionLog
from tests.support.logdata import append_more, expected_rows, make_topic
from tests.support.sparkread import KAFKA_SCHEMA, assert_same, output, run_available_now, stream

pytestmark = pytest.mark.spark


def test_restart_from_checkpoint_available_now(sl_spark, storage_root, tmp_path):
    store = make_topic(storage_root, "s", partitions=2, count=10)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(sl_spark, storage_root, subscribe="s", startingOffsets="earliest")
    q = run_available_now(df, out, ckpt)
    assert q.exception() is None
    assert_same(output(sl_spark, out),
                sl_spark.createDataFrame(expected_rows("s", {0: range(10), 1: range(10)}),
                                         KAFKA_SCHEMA))
    # more records, and a new partition: the restarted query reads exactly the rest
    for p in (0, 1):
        append_more(store, "s", p, range(10, 15))
    store.alter_topic("s", partitions=3)
    append_more(store, "s", 2, range(3))
    q = run_available_now(stream(sl_spark, storage_root, subscribe="s"), out, ckpt)
    assert q.exception() is None
    want = expected_rows("s", {0: range(15), 1: range(15), 2: range(3)})
    assert_same(output(sl_spark, out), sl_spark.createDataFrame(want, KAFKA_SCHEMA))


def test_max_offsets_per_trigger_across_restart(sl_spark, storage_root, tmp_path):
    store = make_topic(storage_root, "r", partitions=2, count=10)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run():
        df = stream(sl_spark, storage_root, subscribe="r", startingOffsets="earliest",
                    maxOffsetsPerTrigger=7)
        q = (df.writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt).trigger(processingTime="0 seconds").start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    sizes = run()
    assert sum(sizes) == 20 and max(sizes) <= 7 and len(sizes) >= 3
    for p in (0, 1):
        append_more(store, "r", p, range(10, 16))
    sizes = run()  # a new reader process learns the position from the checkpoint
    assert sum(sizes) == 12 and max(sizes) <= 7
    want = expected_rows("r", {0: range(16), 1: range(16)})
    assert_same(output(sl_spark, out), sl_spark.createDataFrame(want, KAFKA_SCHEMA))


def test_new_topics_and_data_loss_in_streams(sl_spark, storage_root, tmp_path):
    config = {"segment.bytes": "3000"}
    store = make_topic(storage_root, "p-a", partitions=1, count=10, config=config)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    q = run_available_now(stream(sl_spark, storage_root, subscribePattern="p-.*",
                                 startingOffsets="earliest"), out, ckpt)
    assert q.exception() is None
    # a new topic matching the pattern, and retention removing unread records of p-a
    make_topic(storage_root, "p-b", partitions=1, count=4, config=config)
    append_more(store, "p-a", 0, range(10, 40))
    plog = PartitionLog.open(store.fileio, store.partition_dir("p-a", 0), config)
    plog.delete_segments_before(25)
    plog.close()
    start = plog.log_start_offset
    assert start == 25
    q = run_available_now(stream(sl_spark, storage_root, subscribePattern="p-.*"), out, ckpt)
    assert q.exception() is not None
    assert "topic 'p-a' partition 0: offsets [10, 25) are no longer available" in str(q.exception())
    q = run_available_now(stream(sl_spark, storage_root, subscribePattern="p-.*",
                                 failOnDataLoss="false"), out, ckpt)
    assert q.exception() is None
    want = expected_rows("p-a", {0: list(range(10)) + list(range(25, 40))}) + \
        expected_rows("p-b", {0: range(4)})
    assert_same(output(sl_spark, out), sl_spark.createDataFrame(want, KAFKA_SCHEMA))


def test_available_now_with_cap_drains_the_backlog_in_several_batches(sl_spark, storage_root,
                                                                     tmp_path):
    make_topic(storage_root, "an", partitions=2, count=10)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(sl_spark, storage_root, subscribe="an", startingOffsets="earliest",
                maxOffsetsPerTrigger=6)
    q = run_available_now(df, out, ckpt)
    assert q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 20 and max(sizes) <= 6 and len(sizes) >= 4, sizes
    want = expected_rows("an", {0: range(10), 1: range(10)})
    assert_same(output(sl_spark, out), sl_spark.createDataFrame(want, KAFKA_SCHEMA))
    # Spark's own progress JSON (progress.json): the run's end is the latest offset
    last = json.loads(q.lastProgress.json)["sources"][0]
    assert last["endOffset"] == last["latestOffset"] == {"an": {"0": 10, "1": 10}}
