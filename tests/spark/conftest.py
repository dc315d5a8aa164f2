"""Fixtures of the Spark source tests: the shared session with ``sparklog`` registered."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def sl_spark(spark):
    """The run's Spark session with format("sparklog") registered (pushdown on)."""
    import sparklog.spark

    sparklog.spark.register(spark)
    return spark

