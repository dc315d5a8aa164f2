"""The README's spark-submit example, run for real: ``spark-submit --jars "$(sparklog
spark-jar)" job.py`` with a job that never registers anything, then every kind of query
on ``format("sparklog")`` (a count pushed down to the JVM, a GROUP BY, NOT filters, a
read by timestamp, SQL). Before the JVM provider registered the Python source itself,
the count worked and the GROUP BY failed with ``DATA_SOURCE_NOT_EXIST: sparklog``.
Without the jar, ``sparklog.spark.register(spark)`` is the documented way, in the same
kind of job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from tests.support.logdata import BASE_TS, make_topic

pytestmark = pytest.mark.spark

JOB = """
import json, sys
from pyspark.sql import SparkSession, functions as F

spark = SparkSession.builder.getOrCreate()
if sys.argv[2] == "register":
    import sparklog.spark
    sparklog.spark.register(spark)
def read(**options):
    reader = spark.read.format("sparklog").option("path", sys.argv[1]).option("subscribe", "ev")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()
df = read()
df.createOrReplaceTempView("ev")
out = {
    "count": df.count(),
    "by_partition": sorted([r[0], r[1]] for r in df.groupBy("partition").count().collect()),
    "not_partition": df.where(F.col("partition") != 1).count(),
    "not_in": df.where(~F.col("offset").isin(0, 1, 2)).count(),
    "except_all": df.exceptAll(df.where(F.col("partition") != 0)).count(),
    "from_timestamp": read(startingTimestamp=str(%(from_ts)d)).count(),
    "sql": [list(r) for r in spark.sql(
        "SELECT partition, max(offset), count(DISTINCT key) FROM ev "
        "WHERE NOT (offset < 5 OR topic <> 'ev') GROUP BY partition ORDER BY partition"
    ).collect()],
    "plan": df.where("partition = 2")._jdf.queryExecution().executedPlan().toString(),
}
print("RESULT " + json.dumps(out))
spark.stop()
"""


def spark_submit(tmp_path, root, *, jar: str | None, mode: str) -> dict:
    """Run the job through pyspark's spark-submit (local[2], loopback only), in a
    directory of its own, with no PYTHONPATH: sparklog is imported from the installed
    package, and nothing registers the source unless ``mode`` is ``register``."""
    import pyspark

    job = tmp_path / "job.py"
    job.write_text(JOB % {"from_ts": BASE_TS + 10_000})
    submit = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    argv = [str(submit), "--master", "local[2]",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.session.timeZone=UTC"]
    if jar is not None:
        argv += ["--jars", jar]
    done = subprocess.run([*argv, str(job), root, mode], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def expected(out: dict) -> None:
    """The answers for the topic ``ev`` (3 partitions of 20 records)."""
    assert out["count"] == 60
    assert out["by_partition"] == [[0, 20], [1, 20], [2, 20]]
    assert out["not_partition"] == 40
    assert out["not_in"] == 51
    assert out["except_all"] == 20
    # timestamps of make_topic's records are BASE_TS + offset * 1000 + partition
    assert out["from_timestamp"] == 30
    assert out["sql"] == [[0, 19, 7], [1, 19, 7], [2, 19, 7]]


@pytest.mark.timeout(600)
def test_spark_submit_with_the_jar_needs_no_registration(tmp_path):
    jar = subprocess.run([str(Path(sys.executable).parent / "sparklog"), "spark-jar"],
                         capture_output=True, text=True, timeout=300)
    if jar.returncode != 0 or not jar.stdout.strip():
        pytest.skip(f"sparklog spark-jar gives no jar here (no JDK?): {jar.stderr[-500:]}")
    root = (tmp_path / "log").as_uri()
    make_topic(root, "ev", partitions=3, count=20)
    out = spark_submit(tmp_path, root, jar=jar.stdout.strip(), mode="plain")
    expected(out)
    assert "JVM columnar reader" in out["plan"], out["plan"]


@pytest.mark.timeout(600)
def test_spark_submit_without_the_jar_registers_in_the_job(tmp_path):
    root = (tmp_path / "log").as_uri()
    make_topic(root, "ev", partitions=3, count=20)
    out = spark_submit(tmp_path, root, jar=None, mode="register")
    expected(out)
    assert "JVM columnar reader" not in out["plan"]

