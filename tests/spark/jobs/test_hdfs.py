"""Exactly-once jobs on real HDFS (tests/support/hdfscluster.py): ``sparklog etl run`` reads a
topic in HDFS and writes a Delta table or a Parquet output in HDFS; a run SIGKILLed
while Spark writes leaves its files behind, the rerun gives every offset exactly once
and removes them. delta-spark reads the HDFS table and sees the job's application
transaction."""

from __future__ import annotations

import signal

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")

from sparklog.spark.jobs import run_incremental  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402
from tests.support.jobs import (  # noqa: E402
    SQL,
    add_records,
    assert_exactly_once,
    cli,
    commit_docs,
    delta_spark_available,
    delta_spark_transactions,
    make_topic,
    run_killed,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def attempts(out: str, fmt: str, version: int) -> list:
    """Names of the run directories of ``version`` of application ``app`` in ``out``."""
    fs = open_fileio(out)
    runs = fs.join(out, *(("sparklog-runs",) if fmt == "delta" else ("_sparklog", "staging")),
                   "app")
    return [f.name for f in fs.list(runs) if f.name.startswith(f"{version:010d}-")]


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_etl_on_hdfs_killed_mid_write_then_rerun_exactly_once(spark, hdfs_env, fmt):
    base = f"{hdfs_env.hdfs_uri}/etl-{fmt}"
    root, out = f"{base}/log", f"{base}/out"
    store = make_topic(root, "events", partitions=2, count=15)
    run_incremental(spark, app_id="app", subscribe="events", path=root, output=out,
                    format=fmt, transform=SQL)
    add_records(store, "events", 0, 15, 9)
    add_records(store, "events", 1, 15, 4)
    done = run_killed(cli(root, out, fmt), "mid-write:kill")
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert [d["version"] for d in commit_docs(out, fmt, "app")] == [0], done.stderr[-3000:]
    assert attempts(out, fmt, 1), "the killed run left no files in HDFS"
    rerun = run_incremental(spark, app_id="app", subscribe="events", path=root, output=out,
                            format=fmt, transform=SQL)
    assert rerun.committed
    assert_exactly_once(out, fmt, "app", {("events", 0): 24, ("events", 1): 19})
    winner = f"0000000001-{commit_docs(out, fmt, 'app')[1]['attempt']}"
    assert attempts(out, fmt, 1) in ([], [winner])  # the killed attempt's files are gone
    if fmt == "delta" and delta_spark_available(spark):
        table = spark.read.format("delta").load(out)
        assert sorted((r.partition, r.offset) for r in table.collect()) == \
            [(0, o) for o in range(24)] + [(1, o) for o in range(19)]
        assert delta_spark_transactions(spark, out) == {"app": 1}
