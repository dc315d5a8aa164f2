"""The Spark data source ``format("sparklog")``: batch and streaming scans of topics.

Use :func:`register` once per session (``sparklog.spark.register(spark)`` is the same
function). Modules: :mod:`.options` (Kafka-named options), :mod:`.schema` (output
schema, batch shaping), :mod:`.catalog` (offsets from storage or a broker),
:mod:`.planning` (offset ranges, data loss, splits), :mod:`.filters` (pushdown),
:mod:`.scan` (task-side reads), :mod:`.batch` and :mod:`.stream` (the readers),
:mod:`.source` (the DataSource and registration), :mod:`.zipcache` (Spark's Python
workers stop re-reading zip archives per call; installed on import, in workers only).
"""

from . import zipcache
from .source import FORMAT, SparklogDataSource, SparklogPushdownDataSource, register

zipcache.install()

__all__ = ["register", "SparklogDataSource", "SparklogPushdownDataSource", "FORMAT"]
