"""Helpers of the exactly-once job tests: topics written through the real log layer,
readers of a job's output that do not use the writer's code (delta-rs reading the table,
the Delta log's JSON read as plain files, manifests parsed with json + pyarrow,
delta-spark's own snapshot), and ``sparklog etl run`` started as a process that kills
itself at an injected step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from sparklog.spark.jobs.faults import ENV_VAR
from sparklog.storage import open_fileio

from .logdata import append_records, make_topic, record

#: The repository's root (the working directory of the jobs started as processes).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The transform every test job applies: keeps the coordinates and the value.
SQL = "SELECT topic, partition, offset, CAST(value AS STRING) AS value FROM input"


def local(uri: str) -> str:
    """OS path of a file:// URL (or a path)."""
    return urlsplit(uri).path if uri.startswith("file:") else uri


def add_records(store, topic: str, partition: int, start: int, count: int) -> None:
    """Append records ``start .. start+count-1`` (make_topic's deterministic shape)."""
    append_records(store, topic, partition,
                   [record(topic, partition, o) for o in range(start, start + count)])


# --- reading outputs without the writer's code ------------------------------------------


def delta_rows(uri: str) -> list:
    """(topic, partition, offset, value) rows of the Delta table, read by delta-rs."""
    from deltalake import DeltaTable

    table = DeltaTable(uri).to_pyarrow_table(columns=["topic", "partition", "offset", "value"])
    return list(zip(*(table.column(c).to_pylist() for c in table.column_names)))


def _json_files(uri: str, *parts: str) -> list:
    """(path, text) of the ``*.json`` files in directory ``parts`` under ``uri``, by name,
    read through the storage layer (so file:// and hdfs:// alike)."""
    fs = open_fileio(uri)
    directory = fs.join(uri, *parts)
    return [(f.path, fs.read_all(f.path).decode()) for f in fs.list(directory)
            if f.name.endswith(".json") and not f.is_dir]


def delta_commits(uri: str) -> list:
    """The ``sparklog`` commitInfo documents of the Delta log, read as JSON files."""
    out = []
    for _, text in _json_files(uri, "_delta_log"):
        for line in text.splitlines():
            info = json.loads(line).get("commitInfo") or {}
            if "sparklog" in info:
                out.append(info["sparklog"])
    return out


def delta_txn_version(uri: str, app_id: str):
    """The application's txn version: the last ``txn`` action of the Delta log JSON."""
    version = None
    for _, text in _json_files(uri, "_delta_log"):
        for line in text.splitlines():
            txn = json.loads(line).get("txn")
            if txn and txn["appId"] == app_id:
                version = txn["version"]
    return version


def manifest_docs(uri: str, app_id: str) -> list:
    """The Parquet sink's manifests of ``app_id`` parsed with json, oldest first."""
    return [json.loads(text) for _, text in _json_files(uri, "_sparklog", "manifests", app_id)]


def parquet_rows(uri: str, app_id: str) -> list:
    """Rows of the files the manifests list, read by pyarrow (each file published, or
    still in its staging directory after a crash during publication)."""
    fs = open_fileio(uri)
    rows = []
    for doc in manifest_docs(uri, app_id):
        for f in doc["files"]:
            path = fs.join(uri, f["path"])
            if not fs.exists(path):
                path = fs.join(uri, doc["staging"], f["path"])
            t = pq.read_table(pa.BufferReader(fs.read_all(path)),
                              columns=["topic", "partition", "offset", "value"])
            rows.extend(zip(*(t.column(c).to_pylist() for c in t.column_names)))
    return rows


def output_rows(uri: str, fmt: str, app_id: str) -> list:
    """The output's rows, independently of the writer."""
    return delta_rows(uri) if fmt == "delta" else parquet_rows(uri, app_id)


def commit_docs(uri: str, fmt: str, app_id: str) -> list:
    """The committed records of ``app_id``, oldest first, independently of the writer."""
    if fmt == "delta":
        return [d for d in delta_commits(uri) if d["appId"] == app_id]
    return [d["commit"] for d in manifest_docs(uri, app_id)]


def assert_exactly_once(uri: str, fmt: str, app_id: str, expected: dict) -> None:
    """The output holds every offset of ``expected`` ({(topic, partition): count}, all
    offsets 0..count-1) exactly once with its right value, and the committed offsets
    equal the ranges actually written."""
    rows = output_rows(uri, fmt, app_id)
    keys = Counter((t, p, o) for t, p, o, _ in rows)
    dupes = {k: n for k, n in keys.items() if n > 1}
    assert not dupes, f"offsets written more than once: {sorted(dupes)[:10]}"
    want = {(t, p, o) for (t, p), n in expected.items() for o in range(n)}
    assert set(keys) == want, (f"missing {sorted(want - set(keys))[:10]}, "
                               f"unexpected {sorted(set(keys) - want)[:10]}")
    for t, p, o, v in rows:
        assert v == f"{t}/{p}/{o}", (t, p, o, v)
    docs = commit_docs(uri, fmt, app_id)
    assert [d["version"] for d in docs] == list(range(len(docs))), "versions not 0, 1, 2..."
    ranged = Counter()
    for d in docs:
        for r in d["ranges"]:
            for o in range(r["fromOffset"], r["untilOffset"]):
                ranged[(r["topic"], r["partition"], o)] += 1
    assert max(ranged.values(), default=1) == 1, "a range was committed twice"
    assert set(ranged) == want, "committed ranges differ from the offsets written"
    final = docs[-1]["offsets"] if docs else {}
    assert {(t, int(p)): o for t, ps in final.items() for p, o in ps.items()} == \
        {tp: n for tp, n in expected.items()}, "next offsets differ from what was written"


def table_rows(table: pa.Table) -> list:
    """Rows of a pyarrow table as tuples."""
    return list(zip(*(table.column(c).to_pylist() for c in table.column_names)))


__all__ = ["SQL", "local", "add_records", "make_topic", "record", "delta_rows",
           "delta_commits", "delta_txn_version", "manifest_docs", "parquet_rows",
           "output_rows", "commit_docs", "assert_exactly_once", "table_rows"]


def run_killed(cmd: list, fault: str) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session with the fault injected; make sure every process
    it started (the Spark JVM too) is gone afterwards."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", **{ENV_VAR: fault})
    env["PYSPARK_SUBMIT_ARGS"] = "--conf spark.ui.enabled=false pyspark-shell"
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        deadline = time.monotonic() + 60
        while not group_gone(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        leftover = not group_gone(proc.pid)
        if leftover:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's process group
    assert not leftover, "the killed job left processes behind"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def cli(root, out, fmt):
    """The ``sparklog etl run`` command of the tests' job (topic ``events``, app ``app``)."""
    return [sys.executable, "-m", "sparklog.cli.main", "etl", "run", "--subscribe", "events",
            "--app-id", "app", "--path", root, "--output", out, "--format", fmt,
            "--sql", SQL, "--master", "local[1]", "--quiet"]


def delta_spark_available(spark) -> bool:
    jvm = spark._jvm
    try:  # spark.jars are on the context class loader, not on py4j's own
        jvm.java.lang.Class.forName("io.delta.sql.DeltaSparkSessionExtension", False,
                                    jvm.java.lang.Thread.currentThread()
                                    .getContextClassLoader())
    except Exception:
        return False
    return True


def delta_spark_transactions(spark, uri: str) -> dict:
    """{appId: version} of the table's application transactions as delta-spark's own
    snapshot of the table holds them (``Snapshot.transactions``)."""
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
    it = log.unsafeVolatileSnapshot().transactions().iterator()
    out = {}
    while it.hasNext():
        pair = it.next()
        out[pair._1()] = pair._2()
    return out


def group_gone(pgid: int) -> bool:
    """True when no process of the process group ``pgid`` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False
