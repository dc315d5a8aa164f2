"""Spark integration in one import: ``sparklog.spark.register(spark)``.

After ``register(spark)`` a session reads topics with ``spark.read.format("sparklog")``
and ``spark.readStream.format("sparklog")`` (options and schema of Spark's Kafka source)
and writes them with ``df.write.format("sparklog")``. See docs/spark.md.
"""

from .reader.spark import FORMAT, SparklogDataSource, SparklogPushdownDataSource, register

__all__ = ["register", "SparklogDataSource", "SparklogPushdownDataSource", "FORMAT"]
