"""Fixtures of the Spark source tests: the shared session with ``sparklog`` registered,
and that session when the JVM reader's jar is on its classpath."""

from __future__ import annotations

import sys

import pytest

from sparklog.spark.jvm import jar_path


@pytest.fixture(scope="session")
def sl_spark(spark):
    """The run's Spark session with format("sparklog") registered (pushdown on)."""
    import sparklog.spark

    sparklog.spark.register(spark)
    return spark


@pytest.fixture(scope="session")
def jspark(sl_spark):
    """The shared session, when the JVM reader's jar (the JVM provider of
    ``format("sparklog")``) is on its classpath; skips, saying why, otherwise."""
    jar = jar_path(build=False)
    if jar is None:
        reason = "the JVM reader jar cannot be built here (no javac): nothing to test"
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    if jar not in (sl_spark.sparkContext.getConf().get("spark.jars") or ""):
        pytest.skip("the test Spark session was started without the JVM reader jar")
    return sl_spark
