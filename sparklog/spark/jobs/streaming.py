"""Exactly-once Structured Streaming: the sparklog source, a checkpoint, an idempotent sink.

The pattern (Delta's own streaming sink works the same way)::

    query = (spark.readStream.format("sparklog").option("path", root)
             .option("subscribe", "events").load()
             .writeStream.option("checkpointLocation", ckpt)
             .foreachBatch(exactly_once_batch_writer(DeltaSink(out), "events-stream"))
             .start())

* The **checkpoint** is the truth about the input: Spark writes a micro-batch's offset
  range to its offset log *before* running it, and after a crash replays the last batch
  with the same id and the same offsets.
* The **sink** commits each micro-batch with the application transaction
  ``(app id, batch id)``: a batch whose id the output already holds is skipped, so a
  replayed batch is written once. The commit record also carries the batch's offsets
  (per partition ``[min offset, max offset + 1)`` of its rows) so
  ``sparklog groups describe`` shows the stream's progress and lag.
"""

from __future__ import annotations

import logging
import uuid

from ...errors import ConcurrentTransactionsError
from .faults import fault_point
from .job import apply_transform
from .offsets import OffsetRange, advance, validate_app_id
from .records import CommitRecord
from .sink import Sink

log = logging.getLogger(__name__)


def batch_ranges(df) -> list[OffsetRange]:
    """Per topic partition, ``[min offset, max offset + 1)`` of the rows of ``df`` (a
    DataFrame with the source's ``topic``, ``partition`` and ``offset`` columns)."""
    from pyspark.sql import functions as F

    rows = (df.groupBy("topic", "partition")
            .agg(F.min("offset").alias("lo"), F.max("offset").alias("hi")).collect())
    return sorted(OffsetRange(r["topic"], int(r["partition"]), int(r["lo"]), int(r["hi"]) + 1)
                  for r in rows)


def exactly_once_batch_writer(sink: Sink, app_id: str, transform=None, *,
                              record_offsets: bool = True):
    """A ``foreachBatch`` function committing every micro-batch to ``sink`` exactly once
    with the batch id as the transaction version of application ``app_id``.

    ``transform``: None, a callable ``DataFrame -> DataFrame`` or SQL over view
    ``input``, applied to each batch. ``record_offsets`` computes the batch's offset
    ranges for the commit record (one small aggregation per batch; needs the source's
    ``topic``/``partition``/``offset`` columns).
    """
    validate_app_id(app_id)

    def write_batch(df, batch_id: int) -> None:
        current = sink.committed_version(app_id)
        if current is not None and current >= batch_id:
            (log.info if current == batch_id else log.warning)(
                "%s: batch %d skipped: the output already holds version %d (a replayed "
                "batch; if the stream got a new checkpoint, give it a new application id)",
                app_id, batch_id, current)
            return
        previous = sink.last_commit(app_id)
        ranges = batch_ranges(df) if record_offsets else []
        offsets = advance(dict(previous.offsets) if previous else {}, ranges)
        result = apply_transform(df, transform)
        sink.validate(result)
        staged = sink.stage(result, app_id, batch_id, uuid.uuid4().hex[:16])
        record = CommitRecord.for_staged(staged, offsets, ranges, {"batchId": batch_id})
        try:
            fault_point("before-commit")
            sink.commit(staged, record)
        except ConcurrentTransactionsError:
            sink.abort(staged)
            raise
        fault_point("after-commit")
        sink.cleanup(app_id)

    return write_batch
