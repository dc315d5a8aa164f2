"""Spark integration in one import: ``sparklog.spark.register(spark)``.

After ``register(spark)`` a session reads topics with ``spark.read.format("sparklog")``
and ``spark.readStream.format("sparklog")`` (options and schema of Spark's Kafka source)
and writes them with ``df.write.format("sparklog")``. See docs/spark.md.
:func:`local_session` builds the local session that scripts, benchmarks, notebooks and
tests use on one machine.

The package holds everything Spark runs: the read side of ``format("sparklog")``
(:mod:`.source`), its writer and streaming sink (:mod:`.sink`), the data source above both
(:mod:`.datasource`), the JVM reader (:mod:`.jvm`) and the exactly-once jobs
(:mod:`.jobs`). The data source's names below load on first use, so that importing a
subpackage (``sparklog.spark.jvm`` for ``sparklog spark-jar``) does not import PySpark.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .datasource import FORMAT as FORMAT
    from .datasource import SparklogDataSource as SparklogDataSource
    from .datasource import SparklogPushdownDataSource as SparklogPushdownDataSource
    from .datasource import register as register

_LAZY = ("FORMAT", "SparklogDataSource", "SparklogPushdownDataSource", "register")

__all__ = ["register", "local_session", "delta_conf", "DELTA_CONF", "SparklogDataSource",
           "SparklogPushdownDataSource", "FORMAT"]


#: Settings that turn delta-spark on in a session whose class path has its jars
#: (``sparklog classpath delta``): Delta's SQL extensions and catalog.
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def delta_conf(conf: dict | None = None) -> dict:
    """``conf`` (Spark settings for a new session) with delta-spark on: its jars (the
    ``delta`` Java artifact set, resolved from Maven on first use; MavenError when it
    cannot be) added to ``spark.jars`` and :data:`DELTA_CONF` (an extension already in
    ``spark.sql.extensions`` is kept beside Delta's; a catalog set in ``conf`` wins)."""
    from ..maven import classpath, with_jars

    settings = with_jars(dict(conf or {}), classpath("delta", quiet=True))
    extensions = [e for e in settings.get("spark.sql.extensions", "").split(",") if e]
    delta_ext = DELTA_CONF["spark.sql.extensions"]
    settings["spark.sql.extensions"] = ",".join(
        extensions if delta_ext in extensions else [*extensions, delta_ext])
    settings.setdefault("spark.sql.catalog.spark_catalog",
                        DELTA_CONF["spark.sql.catalog.spark_catalog"])
    return settings


def local_session(app_name: str = "sparklog", *, cores: int = 2, shuffle_partitions: int = 4,
                  conf: dict | None = None, register_source: bool = True,
                  jvm_reader: bool = True, jars=(), delta: bool = False):
    """A ``local[cores]`` SparkSession bound to 127.0.0.1 with the UI off, UTC session
    time, ``shuffle_partitions`` shuffle partitions and Python workers on this
    interpreter (``PYSPARK_PYTHON``), with the sparklog source registered and, with
    ``jvm_reader``, the JVM reader's jar on the classpath when it can be built (batch
    scans then run on it; see docs/spark.md). ``jars`` go on the classpath too; with
    ``delta``, delta-spark does (:func:`delta_conf`: ``format("delta")``, Delta SQL).
    ``conf`` adds or overrides Spark settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from ..maven import with_jars

    settings = with_jars({
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        **(conf or {}),
    }, jars)
    if delta:
        settings = delta_conf(settings)
    if jvm_reader:
        from .jvm import with_jvm_reader

        settings = with_jvm_reader(settings)
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register_source:
        from .datasource import register
        register(spark)
    return spark


def __getattr__(name):
    if name in _LAZY:
        from . import datasource
        value = getattr(datasource, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sparklog.spark' has no attribute {name!r}")
