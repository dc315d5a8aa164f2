"""Automatic registration of ``format("sparklog")`` in every Spark session.

Spark (4.0 and later) imports each top-level module whose name starts with
``pyspark_`` and registers its ``DefaultSource`` under ``DefaultSource.name()``.
sparklog installs this module beside its package (pyproject.toml ``py-modules``), so in
any environment where sparklog is pip-installed (the venv that
``deploy/hadoop-ha/bin/pack-venv.sh`` ships to YARN included) a job reads
``spark.read.format("sparklog")`` without calling ``sparklog.spark.register(spark)``.
The source registered here does no filter pushdown (it works under any session
configuration); ``register(spark)`` switches a session to the pushdown source.
"""

from sparklog.spark import SparklogDataSource as DefaultSource

__all__ = ["DefaultSource"]
