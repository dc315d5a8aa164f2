"""Log layer: Kafka's storage layer on the FileIO contract.

* :class:`LogConfig` (:mod:`.config`): topic-level settings under Kafka's names.
* :class:`OffsetIndex`, :class:`TimeIndex`, :class:`SegmentSummary` (:mod:`.index`).
* :class:`LogSegment` (:mod:`.segment`) and :func:`segment_file_name` (:mod:`.layout`).
* :class:`PartitionLog` (:mod:`.partition`): the leader's writer with recovery.
* :class:`LogReader` (:mod:`.reader`): read-only view from storage alone.

File formats, segment layout and the recovery procedure: ``docs/format.md``.
"""

from .config import LOG_CONFIGS, LogConfig
from .index import OffsetIndex, SegmentSummary, TimeIndex
from .layout import segment_file_name
from .partition import AppendResult, FetchResult, PartitionLog
from .reader import OFFSET_COLUMN, TIMESTAMP_TYPE_COLUMN, LogReader, frame_batch
from .segment import LogSegment

__all__ = [
    "LOG_CONFIGS", "LogConfig", "OffsetIndex", "TimeIndex", "SegmentSummary", "LogSegment",
    "segment_file_name", "PartitionLog", "AppendResult", "FetchResult", "LogReader",
    "OFFSET_COLUMN", "TIMESTAMP_TYPE_COLUMN", "frame_batch",
]
