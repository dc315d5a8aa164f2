"""``sparklog etl run`` as a user runs it (issue 32): Ctrl-C in the middle of its Spark
job prints one line saying it was interrupted and is safe to rerun (no py4j errors),
``--quiet`` turns Spark's progress bar off, and ``$SPARKLOG_BOOTSTRAP_SERVERS`` is the
broker when neither ``--path`` nor ``--bootstrap-server`` is given."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from sparklog.cli.main import main
from tests.support.jobs import SQL, assert_exactly_once, group_gone, make_topic
from tests.support.shell import ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

#: a transform whose first task says it runs (a marker file) and then waits, so that the
#: signal comes while the driver waits on a Spark job; it prints the session's
#: spark.ui.showConsoleProgress first
TRANSFORM = '''
import os, sys, time

def slow(df):
    conf = df.sparkSession.sparkContext.getConf()
    print("showConsoleProgress=" + conf.get("spark.ui.showConsoleProgress", "unset"),
          file=sys.stderr, flush=True)
    marker = os.environ["ETL_TEST_MARKER"]

    def wait(batches):
        for batch in batches:
            open(marker, "w").close()
            time.sleep(600)
            yield batch

    return df.selectExpr("topic", "partition", "offset",
                         "CAST(value AS STRING) AS value").mapInArrow(
        wait, "topic string, partition int, offset long, value string")
'''


def test_ctrl_c_during_etl_run_is_one_line_and_the_rerun_is_exact(tmp_path, storage_root):
    make_topic(storage_root, "events", partitions=1, count=20)
    (tmp_path / "etl_slow.py").write_text(TRANSFORM)
    marker = tmp_path / "task-running"
    out = (tmp_path / "out").as_uri()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
               PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               ETL_TEST_MARKER=str(marker),
               PYSPARK_SUBMIT_ARGS="--conf spark.ui.enabled=false pyspark-shell")
    base = [sys.executable, "-m", "sparklog.cli.main", "etl", "run", "--subscribe", "events",
            "--app-id", "app", "--path", storage_root, "--output", out,
            "--format", "parquet", "--master", "local[1]"]
    # a process group of its own, signalled as a terminal's Ctrl-C signals its job
    proc = subprocess.Popen(base + ["--transform", "etl_slow:slow", "--quiet"], env=env,
                            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_until(lambda: marker.exists() or proc.poll() is not None, timeout=300,
                   what="the run's Spark task to start")
        assert proc.poll() is None, "".join(lines)
        before = len(lines)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
        wait_until(lambda: group_gone(proc.pid), what="the run's processes to exit")
    finally:
        if not group_gone(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(10)
    err = "".join(lines)
    assert code == 130, err
    after = [line.rstrip("\n") for line in lines[before:] if line.strip()]
    assert len(after) == 1, err
    assert after[0].startswith("sparklog: etl run app interrupted; it is safe to rerun"), err
    for noise in ("Traceback", "py4j", "Py4J", "ERROR", "[Stage"):
        assert noise not in err, err
    # --quiet: no Spark progress bar
    assert "showConsoleProgress=false" in err, err
    # the rerun commits exactly the records, once
    rerun = subprocess.run(base + ["--sql", SQL, "--quiet"], env=env, cwd=str(ROOT),
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert_exactly_once(out, "parquet", "app", {("events", 0): 20})


def test_etl_run_takes_the_broker_from_the_environment(spark, broker, tmp_path, capsys,
                                                       monkeypatch):
    from sparklog.clients.admin import Admin
    from sparklog.clients.producer import Producer

    with Admin(broker.address) as admin:
        admin.create_topic("envtopic", 1)
    with Producer(broker.address) as p:
        for i in range(5):
            p.send("envtopic", f"envtopic/0/{i}".encode())  # the shape the check reads
        p.flush(10)
    out = (tmp_path / "out").as_uri()
    args = ["etl", "run", "--subscribe", "envtopic", "--app-id", "env", "--output", out,
            "--format", "parquet", "--sql", SQL, "--quiet"]
    monkeypatch.delenv("SPARKLOG_BOOTSTRAP_SERVERS", raising=False)
    assert main(args) == 1
    assert "--path ROOT" in capsys.readouterr().err  # none of the three: named
    monkeypatch.setenv("SPARKLOG_BOOTSTRAP_SERVERS", broker.address)
    assert main(args) == 0, capsys.readouterr().err
    assert "committed transaction version 0" in capsys.readouterr().out
    assert_exactly_once(out, "parquet", "env", {("envtopic", 0): 5})
