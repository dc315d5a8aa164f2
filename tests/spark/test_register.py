"""``pyspark_sparklog``, the module through which Spark 4 registers ``format("sparklog")``
by itself, and ``register``; no Spark session is started here (the end-to-end check,
in a fresh JVM, is tests/deploy/test_deploy.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import sparklog

REPO = Path(__file__).resolve().parents[2]


def test_register_module_gives_spark_the_sparklog_source():
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    from pyspark.sql.datasource import DataSource

    import pyspark_sparklog
    from sparklog.spark import SparklogDataSource, register

    # what Spark's lookup of pyspark_* modules asks of one
    assert issubclass(pyspark_sparklog.DefaultSource, DataSource)
    assert pyspark_sparklog.DefaultSource is SparklogDataSource
    assert pyspark_sparklog.DefaultSource.name() == "sparklog"
    assert callable(register)


def test_register_module_is_installed_beside_the_package():
    import pyspark_sparklog

    assert Path(pyspark_sparklog.__file__).parent == Path(sparklog.__file__).parent.parent
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "pyspark_sparklog" in config["tool"]["setuptools"]["py-modules"]
