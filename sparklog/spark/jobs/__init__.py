"""Exactly-once incremental jobs: a topic's new records in, a Delta table or Parquet
directory out, the consumed offsets committed atomically with the output.

Typical use (a ``spark-submit`` ETL job or a notebook cell)::

    from sparklog.spark.jobs import run_incremental

    result = run_incremental(spark, app_id="events-daily", subscribe="events",
                             path="hdfs://nn/sparklog", output="hdfs://nn/tables/events",
                             format="delta", transform="SELECT CAST(value AS STRING) AS v,"
                                                       " timestamp FROM input")
    print(result.summary())

Modules: :mod:`.offsets` (application ids, offset ranges), :mod:`.records` (what a
commit holds), :mod:`.sink` (the sink contract and Spark staging),
:mod:`.delta_sink`, :mod:`.parquet_sink`, :mod:`.job` (planning, reading, committing),
:mod:`.streaming` (the foreachBatch pattern), :mod:`.apps` (committed offsets and lag
per application), :mod:`.faults` (fault injection for crash tests).
"""

from __future__ import annotations

from .apps import (
    ApplicationDescription,
    PartitionLag,
    describe_application,
    list_applications,
    open_sink,
)
from .delta_sink import DeltaSink
from .job import IncrementalJob, JobBatch, JobResult, apply_transform
from .offsets import OffsetRange, validate_app_id
from .parquet_sink import ParquetSink, committed_files, read_committed
from .records import CommitRecord
from .sink import Sink
from .streaming import exactly_once_batch_writer

__all__ = [
    "run_incremental", "IncrementalJob", "JobBatch", "JobResult", "apply_transform",
    "Sink", "DeltaSink", "ParquetSink", "open_sink", "committed_files", "read_committed",
    "CommitRecord", "OffsetRange", "validate_app_id", "exactly_once_batch_writer",
    "list_applications", "describe_application", "ApplicationDescription", "PartitionLag",
]


def run_incremental(spark, *, app_id: str, subscribe, output: str, format: str = "delta",
                    transform=None, path: str | None = None,
                    bootstrap_servers: str | None = None,
                    max_records_per_run: int | None = None, partition_by=None,
                    starting_offsets="earliest", fail_on_data_loss: bool = True,
                    source_options: dict | None = None, progress=None) -> JobResult:
    """Run one exactly-once incremental job and return its :class:`JobResult`.

    Reads what ``app_id`` has not yet committed to ``output`` from the topics
    ``subscribe`` (through the storage root ``path`` or the broker
    ``bootstrap_servers``), applies ``transform`` (None, a callable
    ``DataFrame -> DataFrame`` or a SQL string over the view ``input``), and commits the
    result to ``output`` (``format`` ``delta`` or ``parquet``, Hive-partitioned by
    ``partition_by``) with the offsets, atomically. See :class:`IncrementalJob` for the
    other parameters; ``progress`` receives a line of text per step.
    """
    options = {} if partition_by is None else {"partition_by": partition_by}
    sink = open_sink(output, format, **options)
    job = IncrementalJob(spark, app_id=app_id, sink=sink, subscribe=subscribe, path=path,
                         bootstrap_servers=bootstrap_servers,
                         max_records_per_run=max_records_per_run,
                         starting_offsets=starting_offsets,
                         fail_on_data_loss=fail_on_data_loss, source_options=source_options,
                         progress=progress)
    return job.run(transform)
