"""Shared fixtures: one local Spark session per test run, loopback ports, tmp roots.

Spark workers must run the driver's interpreter (PYSPARK_PYTHON), or they would import
another environment's packages.
"""

from __future__ import annotations

import os
import socket
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def spark():
    """The run's local Spark session (local[2], UI off, 2 shuffle partitions)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    from sparklog.spark import local_session

    session = local_session("sparklog-tests", shuffle_partitions=2, register_source=False,
                            conf={"spark.sql.execution.arrow.pyspark.enabled": "true",
                                  "spark.python.worker.reuse": "true"})
    yield session
    session.stop()


@pytest.fixture
def storage_root(tmp_path):
    """A fresh file:// storage root."""
    root = tmp_path / "log"
    root.mkdir()
    return root.as_uri()
