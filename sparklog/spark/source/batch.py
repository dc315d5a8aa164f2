"""``spark.read.format("sparklog")``: a batch scan of offset ranges.

Planning (``partitions()``) runs once per query on the driver: it resolves the offset
specs through the catalog, checks for data loss, narrows by pushed filters and splits
ranges; each task's ``read()`` streams its range from storage as Arrow batches.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader

from .catalogs import planning_catalog
from .filters import PushedFilters
from .planning import plan_batch
from .scan import read_range
from .schema import arrow_schema


class SparklogBatchReader(DataSourceReader):
    """Batch reader without filter pushdown (works whatever
    ``spark.sql.python.filterPushdown.enabled`` says)."""

    def __init__(self, opts, schema):
        self.opts = opts
        self.schema = schema
        self.pushed: PushedFilters | None = None

    def partitions(self) -> list:
        """One :class:`~sparklog.spark.source.planning.PlannedRange` per task."""
        with planning_catalog(self.opts) as catalog:
            return plan_batch(catalog, self.opts, self.pushed)

    def read(self, partition):
        """The records of one offset range as Arrow batches (nothing for the
        placeholder partition Spark passes when the plan is empty)."""
        if partition is None:
            return iter(())
        return read_range(partition, arrow_schema(self.schema))


class SparklogPushdownReader(SparklogBatchReader):
    """Batch reader that also takes filters on topic, partition, offset and timestamp
    (needs ``spark.sql.python.filterPushdown.enabled=true``; :func:`register` sets it)."""

    def pushFilters(self, filters):
        """Narrow the scan; return the filters Spark must still evaluate."""
        self.pushed = PushedFilters()
        return self.pushed.push(filters)
