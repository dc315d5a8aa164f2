"""``sparklog etl run`` / ``etl describe`` in-process (the run's Spark session is the
active one, as under spark-submit or in a notebook)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")

from sparklog.cli.main import main
from tests.support.jobs import SQL, add_records, assert_exactly_once, make_topic

pytestmark = pytest.mark.spark

TRANSFORM_MODULE = '''
def keep(df):
    return df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
'''


def test_etl_run_twice_and_describe(spark, storage_root, tmp_path, capsys, monkeypatch):
    store = make_topic(storage_root, "events", partitions=2, count=12)
    out = str(tmp_path / "out")  # a plain path works too
    (tmp_path / "etl_transforms.py").write_text(TRANSFORM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["etl", "run", "--subscribe", "events", "--app-id", "nightly", "--path",
            storage_root, "--output", out, "--format", "parquet",
            "--transform", "etl_transforms:keep", "--max-records-per-run", "20"]
    assert main(args + ["--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert (doc["committed"], doc["version"], doc["inputRecords"]) == (True, 0, 20)
    assert "[etl nightly] planned transaction version 0" in captured.err
    add_records(store, "events", 1, 12, 3)
    assert main(args + ["--quiet"]) == 0
    captured = capsys.readouterr()
    assert "committed transaction version 1: 7 records" in captured.out and captured.err == ""
    assert main(["etl", "describe", "--output", out, "--path", storage_root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                    "LOG-END-OFFSET", "LAG"]
    assert [line.split()[:7] for line in lines[1:]] == [
        ["nightly", "events", "0", "12", "12", "0", "1"],
        ["nightly", "events", "1", "15", "15", "0", "1"]]
    assert_exactly_once(out, "parquet", "nightly", {("events", 0): 12, ("events", 1): 15})


def test_etl_run_sql_into_delta_and_errors(spark, storage_root, tmp_path, capsys,
                                           monkeypatch):
    make_topic(storage_root, "events", partitions=1, count=5)
    out = (tmp_path / "table").as_uri()
    base = ["etl", "run", "--subscribe", "events", "--app-id", "a", "--path", storage_root,
            "--output", out]
    assert main(base + ["--sql", SQL, "--partition-by", "partition", "--quiet"]) == 0
    # the transaction version (the run) and the Delta table version, each named
    assert "committed transaction version 0 (Delta table version 1):" in \
        capsys.readouterr().out
    assert_exactly_once(out, "delta", "a", {("events", 0): 5})
    assert main(base + ["--transform", "nope"]) == 1
    assert "must be MODULE:FUNCTION" in capsys.readouterr().err
    assert main(base + ["--transform", "json:no_such_function"]) == 1
    assert "json has no function no_such_function" in capsys.readouterr().err
    assert main(base + ["--source-option", "startingOffsets=latest"]) == 1
    assert "set by the job" in capsys.readouterr().err
    # neither --path nor --bootstrap-server nor $SPARKLOG_BOOTSTRAP_SERVERS: one line
    monkeypatch.delenv("SPARKLOG_BOOTSTRAP_SERVERS", raising=False)
    assert main(["etl", "run", "--subscribe", "events", "--app-id", "a", "--output", out]) == 1
    assert "--path ROOT" in capsys.readouterr().err
