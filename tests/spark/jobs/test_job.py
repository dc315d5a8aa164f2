"""Incremental jobs over real topics (written through the log layer) into both sinks:
each run reads exactly what is new, failures at every step followed by a rerun give
every offset exactly once, and two runs racing for one version never both commit."""

from __future__ import annotations

import os
import threading
import traceback

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")

from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from sparklog.spark.jobs import (
    IncrementalJob,
    describe_application,
    list_applications,
    open_sink,
    run_incremental,
)
from sparklog.spark.jobs.faults import ENV_VAR, STEPS, InjectedFault
from tests.support.jobs import (
    SQL,
    add_records,
    assert_exactly_once,
    commit_docs,
    local,
    make_topic,
    output_rows,
)

pytestmark = pytest.mark.spark


@pytest.fixture
def topic(storage_root):
    """Topic ``events``: 3 partitions of 20 records each."""
    store = make_topic(storage_root, "events", partitions=3, count=20, per_frame=7)
    return storage_root, store


def job(spark, root, out, fmt, app="app", **kw):
    return IncrementalJob(spark, app_id=app, sink=open_sink(out, fmt), subscribe="events",
                          path=root, **kw)


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_runs_pick_up_exactly_the_new_records(spark, topic, tmp_path, fmt):
    root, store = topic
    out = (tmp_path / "out").as_uri()
    lines = []
    r0 = run_incremental(spark, app_id="app", subscribe="events", path=root, output=out,
                         format=fmt, transform=SQL, progress=lines.append)
    assert (r0.committed, r0.version, r0.input_records, r0.output_records) == (True, 0, 60, 60)
    assert any("planned transaction version 0" in line for line in lines)
    add_records(store, "events", 0, 20, 10)
    add_records(store, "events", 2, 20, 5)
    r1 = run_incremental(spark, app_id="app", subscribe="events", path=root, output=out,
                         format=fmt, transform=SQL)
    assert (r1.version, r1.input_records) == (1, 15)
    assert [(r.partition, r.from_offset, r.until_offset) for r in r1.ranges] == \
        [(0, 20, 30), (2, 20, 25)]
    assert "committed transaction version 1" in r1.summary()
    r2 = run_incremental(spark, app_id="app", subscribe="events", path=root, output=out,
                         format=fmt, transform=SQL)
    assert (r2.committed, r2.version, r2.ranges) == (False, 1, [])
    assert "nothing new since transaction version 1" in r2.summary()
    assert_exactly_once(out, fmt, "app", {("events", 0): 30, ("events", 1): 20,
                                          ("events", 2): 25})


def test_per_run_limit_is_shared_by_lag(spark, topic, tmp_path):
    root, store = topic
    add_records(store, "events", 1, 20, 40)  # lags: 20, 60, 20
    out = (tmp_path / "out").as_uri()
    j = job(spark, root, out, "parquet", max_records_per_run=25)
    first = j.run(SQL)
    counts = {r.partition: r.count for r in first.ranges}
    assert sum(counts.values()) <= 25 and counts[1] > counts[0] > 0 and counts[2] > 0
    runs = 1
    while j.run(SQL).committed:
        runs += 1
    assert runs == 4  # 100 offsets, at most 25 per run
    assert_exactly_once(out, "parquet", "app", {("events", 0): 20, ("events", 1): 60,
                                                ("events", 2): 20})


def test_callable_transform_partitioning_and_latest_start(spark, topic, tmp_path):
    root, store = topic
    out = (tmp_path / "out").as_uri()

    def transform(df):
        from pyspark.sql import functions as F

        return df.select("topic", "partition", "offset",
                         F.col("value").cast("string").alias("value"))

    j = IncrementalJob(spark, app_id="late", sink=open_sink(out, "delta",
                                                            partition_by=["partition"]),
                       subscribe=["events"], path=root, starting_offsets="latest")
    r0 = j.run(transform)  # the first run pins the start even with nothing to read
    assert (r0.committed, r0.input_records, r0.offsets[("events", 0)]) == (True, 0, 20)
    add_records(store, "events", 1, 20, 4)
    r1 = j.run(transform)
    assert [(r.partition, r.from_offset, r.until_offset) for r in r1.ranges] == [(1, 20, 24)]
    assert sorted((p, o) for _, p, o, _ in output_rows(out, "delta", "late")) == \
        [(1, o) for o in range(20, 24)]
    from deltalake import DeltaTable

    assert DeltaTable(out).metadata().partition_columns == ["partition"]


def test_bad_input_is_refused_with_a_clear_error(spark, topic, tmp_path):
    root, store = topic
    out = (tmp_path / "out").as_uri()
    sink = open_sink(out, "parquet")
    with pytest.raises(InvalidArgumentError, match="application id"):
        IncrementalJob(spark, app_id="../x", sink=sink, subscribe="events", path=root)
    with pytest.raises(InvalidArgumentError, match="exactly one of path"):
        IncrementalJob(spark, app_id="a", sink=sink, subscribe="events")
    with pytest.raises(InvalidArgumentError, match="set by the job"):
        IncrementalJob(spark, app_id="a", sink=sink, subscribe="events", path=root,
                       source_options={"endingOffsets": "latest"})
    with pytest.raises(InvalidArgumentError, match="max_records_per_run"):
        IncrementalJob(spark, app_id="a", sink=sink, subscribe="events", path=root,
                       max_records_per_run=0)
    with pytest.raises(InvalidArgumentError, match="startingOffsets"):
        IncrementalJob(spark, app_id="a", sink=sink, subscribe="events", path=root,
                       starting_offsets="yesterday")
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        IncrementalJob(spark, app_id="a", sink=sink, subscribe="events,nope", path=root).plan()
    with pytest.raises(InvalidArgumentError, match="must return a DataFrame"):
        IncrementalJob(spark, app_id="a", sink=sink, subscribe="events",
                       path=root).run(lambda df: None)


def test_committed_offsets_beyond_the_log_end(spark, topic, tmp_path):
    root, store = topic
    out = (tmp_path / "out").as_uri()
    job(spark, root, out, "delta").run(SQL)
    store.delete_topic("events")  # recreated with less data: committed 20 > log end 5
    make_topic(root, "events", partitions=3, count=5)
    with pytest.raises(OffsetOutOfRangeError, match="committed offset 20 .* log ends at 5"):
        job(spark, root, out, "delta").run(SQL)
    r = job(spark, root, out, "delta", fail_on_data_loss=False).run(SQL)
    assert r.input_records == 15 and r.offsets[("events", 1)] == 5
    assert commit_docs(out, "delta", "app")[-1]["extra"]["dataLoss"][0]["committed"] == 20


def _leftover_attempts(out, fmt, app="app"):
    base = os.path.join(local(out), "sparklog-runs" if fmt == "delta" else
                        "_sparklog/staging", app)
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_failure_at_each_step_then_rerun_is_exactly_once(spark, topic, tmp_path, monkeypatch,
                                                         fmt):
    """One output goes through a failure at every step, each followed by new records
    and a rerun: the state accumulates across failures."""
    root, store = topic
    out = (tmp_path / "out").as_uri()
    job(spark, root, out, fmt).run(SQL)
    expected = {("events", p): 20 for p in range(3)}
    for i, step in enumerate(STEPS):
        for p, n in ((0, 6), (1, 3 + i)):
            add_records(store, "events", p, expected[("events", p)], n)
            expected[("events", p)] += n
        before = len(commit_docs(out, fmt, "app"))
        monkeypatch.setenv(ENV_VAR, f"{step}:raise")
        with pytest.raises(Exception) as info:
            job(spark, root, out, fmt).run(SQL)
        assert "injected fault" in str(info.value), step
        if step != "mid-write":  # mid-write fails inside a Spark task
            assert isinstance(info.value, InjectedFault), step
        monkeypatch.delenv(ENV_VAR)
        after = len(commit_docs(out, fmt, "app"))
        assert after == before + (step == "after-commit"), step
        rerun = job(spark, root, out, fmt).run(SQL)
        assert rerun.committed == (step != "after-commit"), step
        assert_exactly_once(out, fmt, "app", expected)
        # no files of the failed attempt are left once its version is committed
        committed = {f"{d['version']:010d}-{d['attempt']}"
                     for d in commit_docs(out, fmt, "app")}
        assert set(_leftover_attempts(out, fmt)) <= committed, step


def test_two_runs_racing_for_one_version(spark, topic, tmp_path):
    root, store = topic
    out = (tmp_path / "out").as_uri()
    loser = job(spark, root, out, "delta")
    batch = loser.begin()  # plans version 0 and reads...
    winner = job(spark, root, out, "delta").run(SQL)  # ...while another run commits it
    assert winner.version == 0
    with pytest.raises(ConcurrentTransactionsError, match="already committed"):
        loser.commit(batch, batch.df.selectExpr("topic", "partition", "offset",
                                                "CAST(value AS STRING) AS value"))
    winner_attempt = commit_docs(out, "delta", "app")[0]["attempt"]
    assert _leftover_attempts(out, "delta") == [f"0000000000-{winner_attempt}"]
    assert_exactly_once(out, "delta", "app", {("events", p): 20 for p in range(3)})


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_write_failing_after_another_run_committed_is_a_lost_race(spark, topic, tmp_path,
                                                                  monkeypatch, fmt):
    """The winner's cleanup removes the loser's staging files, which fails the loser's
    Spark write mid-way (simulated by the mid-write fault): the loser reports the lost
    race, not the storage error, and leaves nothing behind."""
    root, store = topic
    out = (tmp_path / "out").as_uri()
    loser = job(spark, root, out, fmt)
    batch = loser.begin()
    job(spark, root, out, fmt).run(SQL)
    monkeypatch.setenv(ENV_VAR, "mid-write:raise")
    with pytest.raises(ConcurrentTransactionsError, match="committed by another run") as info:
        loser.commit(batch, batch.df.selectExpr("topic", "partition", "offset",
                                                "CAST(value AS STRING) AS value"))
    assert "injected fault" in str(info.value.__cause__)
    monkeypatch.delenv(ENV_VAR)
    winner_attempt = commit_docs(out, fmt, "app")[0]["attempt"]
    assert set(_leftover_attempts(out, fmt)) <= {f"0000000000-{winner_attempt}"}
    assert_exactly_once(out, fmt, "app", {("events", p): 20 for p in range(3)})


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_concurrent_threads_one_commit_wins(spark, topic, tmp_path, fmt):
    root, store = topic
    out = (tmp_path / "out").as_uri()
    outcomes = []
    go = threading.Barrier(2)

    def worker():
        j = job(spark, root, out, fmt)
        go.wait()
        try:
            outcomes.append(j.run(SQL).committed)
        except ConcurrentTransactionsError:
            outcomes.append("lost")
        except Exception:  # shown by the assertion below
            outcomes.append(traceback.format_exc())

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(map(str, outcomes)) in (["True", "lost"], ["False", "True"]), \
        "\n".join(map(str, outcomes))
    assert_exactly_once(out, fmt, "app", {("events", p): 20 for p in range(3)})


def test_applications_and_lag(spark, topic, tmp_path):
    root, store = topic
    out = (tmp_path / "out").as_uri()
    job(spark, root, out, "delta", app="a1", max_records_per_run=30).run(SQL)
    job(spark, root, out, "delta", app="a2").run(SQL)
    add_records(store, "events", 2, 20, 7)
    assert list_applications(out) == ["a1", "a2"]
    d1 = describe_application(out, "a1", path=root)
    assert (d1.app_id, d1.format, d1.version) == ("a1", "delta", 0)
    assert [(p.partition, p.current_offset, p.log_end_offset, p.lag) for p in d1.partitions] \
        == [(0, 10, 20, 10), (1, 10, 20, 10), (2, 10, 27, 17)]
    assert d1.total_lag == 37
    d2 = describe_application(out, "a2")  # no log given: offsets only
    assert [(p.current_offset, p.lag) for p in d2.partitions] == [(20, None)] * 3
