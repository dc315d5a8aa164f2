"""Log layer: Kafka's storage layer on the FileIO contract.

* :class:`LogConfig` (:mod:`.config`): topic-level settings under Kafka's names.
* :class:`OffsetIndex`, :class:`TimeIndex`, :class:`SegmentSummary` (:mod:`.index`).
* :class:`LogSegment` (:mod:`.segment`) and :func:`segment_file_name` (:mod:`.layout`).
* :class:`PartitionLog` (:mod:`.partition`): the leader's writer with recovery.
* :class:`LogReader` (:mod:`.reader`): read-only view from storage alone.

File formats, segment layout and the recovery procedure: ``docs/format.md``.
"""

import importlib

#: public name -> submodule defining it. Loaded on first use (PEP 562), so a process
#: that needs only the configs (a Spark planner worker) does not import the writer.
_EXPORTS = {
    "LOG_CONFIGS": "config", "LogConfig": "config",
    "OffsetIndex": "index", "SegmentSummary": "index", "TimeIndex": "index",
    "segment_file_name": "layout",
    "AppendResult": "partition", "FetchResult": "partition", "PartitionLog": "partition",
    "OFFSET_COLUMN": "reader", "TIMESTAMP_TYPE_COLUMN": "reader", "LogReader": "reader",
    "frame_batch": "reader",
    "LogSegment": "segment",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
