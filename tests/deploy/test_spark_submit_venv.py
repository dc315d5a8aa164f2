"""``.venv/bin/spark-submit`` works without activating the venv: PySpark's launchers
look for ``python3`` on PATH (the system's, without pyspark or sparklog) unless
PYSPARK_PYTHON is set; scripts/env.sh makes them use the venv's Python."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


@pytest.mark.spark
def test_venv_spark_submit_without_activation(tmp_path):
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("runs in the project's own .venv (scripts/env.sh)")
    if not (VENV_BIN / "spark-submit").exists() or shutil.which("java") is None:
        pytest.skip("pyspark's spark-submit or java is missing")
    subprocess.run(["bash", "-c", "source scripts/env.sh test"], cwd=ROOT, check=True,
                   capture_output=True)
    job = tmp_path / "job.py"
    job.write_text("import sparklog\n"
                   "from pyspark.sql import SparkSession\n"
                   "spark = SparkSession.builder.master('local[1]').getOrCreate()\n"
                   "n = spark.range(5).rdd.map(lambda x: __import__('sparklog') and x).count()\n"
                   "print('COUNT', n)\n"
                   "spark.stop()\n")
    java_dir = str(Path(shutil.which("java")).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV",
                        "SPARK_HOME", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([java_dir, "/usr/bin", "/bin"])  # no venv on PATH
    proc = subprocess.run([str(VENV_BIN / "spark-submit"), str(job)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "COUNT 5" in proc.stdout  # driver and workers imported sparklog
