"""Spark integration in one import: ``sparklog.spark.register(spark)``.

After ``register(spark)`` a session reads topics with ``spark.read.format("sparklog")``
and ``spark.readStream.format("sparklog")`` (options and schema of Spark's Kafka source)
and writes them with ``df.write.format("sparklog")``. See docs/spark.md.
:func:`local_session` builds the local session that scripts, benchmarks, notebooks and
tests use on one machine.
"""

from __future__ import annotations

import os
import sys

from .reader.spark import FORMAT, SparklogDataSource, SparklogPushdownDataSource, register

__all__ = ["register", "local_session", "SparklogDataSource", "SparklogPushdownDataSource",
           "FORMAT"]


def local_session(app_name: str = "sparklog", *, cores: int = 2, shuffle_partitions: int = 4,
                  conf: dict | None = None, register_source: bool = True,
                  jvm_reader: bool = True):
    """A ``local[cores]`` SparkSession bound to 127.0.0.1 with the UI off, UTC session
    time, ``shuffle_partitions`` shuffle partitions and Python workers on this
    interpreter (``PYSPARK_PYTHON``), with the sparklog source registered and, with
    ``jvm_reader``, the JVM reader's jar on the classpath when it can be built (batch
    scans then run on it; see docs/spark.md). ``conf`` adds or overrides Spark
    settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        **(conf or {}),
    }
    if jvm_reader:
        from .reader.jvm import with_jvm_reader

        settings = with_jvm_reader(settings)
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register_source:
        register(spark)
    return spark
