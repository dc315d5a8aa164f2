"""The task side: read one :class:`~sparklog.spark.source.planning.PlannedRange` from storage.

A task opens the storage root itself (no broker on the read path), seeks through the
offset index to the frame holding the range's first offset, decodes frames zero-copy and
yields Arrow batches sliced exactly to ``[start, end)`` in the output schema.

If retention deletes the range (or part of it) while the task runs, the task either
fails with an error naming the topic, partition and missing range (``failOnDataLoss``
true) or logs a warning and continues from the new log start. Damaged or missing
segment files (the log reader's DataLossError) are handled the same way: with
``failOnDataLoss`` false the task skips the unreadable range when its end is known.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from ...errors import DataLossError, OffsetOutOfRangeError, StorageFileNotFoundError
from ...metadata import TopicStore
from .catalog import open_log_reader
from .planning import PlannedRange, report_data_loss
from .schema import OFFSET_COLUMN, BatchShaper


def read_range(r: PlannedRange, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as batches of the Arrow schema ``target``."""
    from ...storage import open_fileio

    if r.size == 0:
        return
    store = TopicStore(r.root, open_fileio(r.root, **r.storage_options))
    try:
        reader = open_log_reader(store, r.topic, r.partition)
        shaper = BatchShaper(r.topic, r.partition, target)
        position = r.start
        while position < r.end:
            try:
                for batch in reader.read_batches(position, r.end, timestamp_type=True):
                    if batch.num_rows == 0:
                        continue
                    out = shaper.shape(batch)
                    position = batch.column(OFFSET_COLUMN)[-1].as_py() + 1
                    yield out
                position = r.end
            except DataLossError as exc:  # damaged or missing segment files
                if exc.end_offset is None or exc.end_offset <= position:
                    raise
                lost_end = min(exc.end_offset, r.end)
                report_data_loss(r.fail_on_data_loss, r.topic, r.partition,
                                 max(exc.first_offset, position), lost_end, str(exc),
                                 error=DataLossError)
                position = lost_end
            except (OffsetOutOfRangeError, StorageFileNotFoundError):
                log_start = reader.log_start_offset()
                if log_start <= position:
                    raise
                lost_end = min(log_start, r.end)
                report_data_loss(r.fail_on_data_loss, r.topic, r.partition, position, lost_end,
                                 f"deleted while the scan ran; the log now starts at {log_start}",
                                 log_start)
                position = lost_end
    finally:
        store.fileio.close()
