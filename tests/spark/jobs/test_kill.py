"""Real process kills: ``sparklog etl run`` (and the kit's submit script,
``deploy/hadoop-ha/bin/submit-etl.sh``, with a local master) runs in its own
process and SIGKILLs itself at an injected step (no ``finally``, no cleanup, partial
files left as a lost YARN container leaves them); a rerun then gives every offset
exactly once and the committed offsets equal the ranges written."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")

from sparklog.spark.jobs import run_incremental
from tests.support.jobs import (
    SQL,
    add_records,
    assert_exactly_once,
    cli,
    commit_docs,
    local,
    make_topic,
    run_killed,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = str(Path(__file__).resolve().parents[3])
SUBMIT_SCRIPT = os.path.join(REPO, "deploy", "hadoop-ha", "bin", "submit-etl.sh")


def submit(root, out, fmt):
    """The kit's submit path (the one the lab runs on YARN), with a local master."""
    bin_dir = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(bin_dir, "spark-submit")):
        pytest.skip("spark-submit is not installed beside the interpreter (pyspark's bin)")
    return ["env", f"PATH={bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "bash",
            SUBMIT_SCRIPT, "--master", "local[1]", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.driver.host=127.0.0.1", "--", "--subscribe", "events",
            "--app-id", "app", "--path", root, "--output", out, "--format", fmt, "--sql", SQL,
            "--quiet"]


#: (output format, step, how the job is started). Every step of both sinks also fails by
#: an exception in test_job.py; these kill a whole driver (JVM included) while Spark
#: tasks write, and with all files written just before the commit (under spark-submit).
CASES = [
    ("delta", "mid-write", cli),
    ("parquet", "before-commit", submit),
]


@pytest.mark.parametrize("fmt,step,launcher", CASES,
                         ids=[f"{f}-{s}-{l.__name__}" for f, s, l in CASES])
def test_sigkill_at_step_then_rerun(spark, storage_root, tmp_path, fmt, step, launcher):
    store = make_topic(storage_root, "events", partitions=2, count=15)
    out = (tmp_path / "out").as_uri()
    run_incremental(spark, app_id="app", subscribe="events", path=storage_root, output=out,
                    format=fmt, transform=SQL)
    add_records(store, "events", 0, 15, 9)
    add_records(store, "events", 1, 15, 4)
    done = run_killed(launcher(storage_root, out, fmt), f"{step}:kill")
    assert done.returncode != 0, done.stdout
    if launcher is cli:
        assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert "committed transaction version" not in done.stdout
    versions = [d["version"] for d in commit_docs(out, fmt, "app")]
    assert versions == ([0, 1] if step == "after-commit" else [0]), done.stderr[-2000:]
    runs = os.path.join(local(out), "sparklog-runs" if fmt == "delta" else "_sparklog/staging",
                        "app")
    attempts = [a for a in os.listdir(runs) if a.startswith("0000000001-")]
    if step != "after-commit":  # the killed attempt's files are left behind...
        assert attempts, f"no files of the killed attempt at {step}"
    if step == "mid-write":  # ...mid-write: only Spark's uncommitted task output
        assert any(os.path.isdir(os.path.join(runs, a, "_temporary")) for a in attempts)
    rerun = run_incremental(spark, app_id="app", subscribe="events", path=storage_root,
                            output=out, format=fmt, transform=SQL)
    assert rerun.committed == (step != "after-commit")
    assert_exactly_once(out, fmt, "app", {("events", 0): 24, ("events", 1): 19})
    # ...and removed once another attempt committed version 1
    winner = f"0000000001-{commit_docs(out, fmt, 'app')[1]['attempt']}"
    left = [a for a in os.listdir(runs) if a.startswith("0000000001-")] \
        if os.path.isdir(runs) else []
    assert left in ([], [winner])
