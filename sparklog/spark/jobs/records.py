"""What a job commits: data files staged by Spark and the commit record carrying offsets.

The same :class:`CommitRecord` document goes into a Delta commit's ``commitInfo`` (key
``sparklog``) and into a Parquet sink's manifest, so both sinks answer "which offsets
does this output hold?" the same way. ``offsets`` is cumulative (the next offset to read
of every partition the application ever consumed), so the latest commit alone says
where the next run starts; ``ranges`` are the offsets this commit added.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa

from ...errors import InvalidArgumentError
from ..source.stream import offsets_to_json
from .offsets import OffsetRange, parse_offsets

#: Version of the commit record document.
RECORD_FORMAT = 1


@dataclass(frozen=True)
class DataFile:
    """One Parquet file written by Spark: ``path`` relative to its staging location,
    ``size`` in bytes, modification time in ms, row count, Hive partition values."""

    path: str
    size: int
    modification_time: int
    records: int
    partition_values: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"path": self.path, "size": self.size,
                "modificationTime": self.modification_time, "records": self.records,
                "partitionValues": dict(self.partition_values)}

    @classmethod
    def from_dict(cls, doc: dict) -> "DataFile":
        """Inverse of :meth:`to_dict`."""
        return cls(doc["path"], doc["size"], doc["modificationTime"], doc["records"],
                   dict(doc.get("partitionValues") or {}))


@dataclass(frozen=True)
class StagedFiles:
    """The output of one attempt, written but not committed: readers of the output
    cannot see it until the sink commits it."""

    app_id: str
    version: int
    attempt: str
    location: str
    files: list
    schema: pa.Schema
    partition_by: list

    @property
    def records(self) -> int:
        """Rows in all files."""
        return sum(f.records for f in self.files)


@dataclass(frozen=True)
class CommitRecord:
    """One committed run of an application (see the module docstring).

    ``version`` is the application transaction version (0, 1, 2, ... for batch jobs;
    the micro-batch id in Structured Streaming); ``attempt`` identifies the run that
    won it; ``offsets`` maps ``(topic, partition)`` to the next offset to read.
    """

    app_id: str
    version: int
    attempt: str
    offsets: dict
    ranges: tuple = ()
    output_records: int = 0
    files: int = 0
    committed_at: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def input_records(self) -> int:
        """Offsets consumed by this commit (records, unless the topic is compacted)."""
        return sum(r.count for r in self.ranges)

    def to_doc(self) -> dict:
        """JSON-able document (offsets in Kafka's JSON form)."""
        return {"format": RECORD_FORMAT, "appId": self.app_id, "version": self.version,
                "attempt": self.attempt, "offsets": offsets_to_json(self.offsets),
                "ranges": [r.to_dict() for r in self.ranges],
                "outputRecords": self.output_records, "files": self.files,
                "committedAt": self.committed_at, "extra": dict(self.extra)}

    @classmethod
    def from_doc(cls, doc: dict) -> "CommitRecord":
        """Inverse of :meth:`to_doc`; InvalidArgumentError if a field is missing."""
        try:
            return cls(doc["appId"], int(doc["version"]), doc["attempt"],
                       parse_offsets(doc["offsets"], "committed offsets"),
                       tuple(OffsetRange.from_dict(r) for r in doc.get("ranges", [])),
                       int(doc.get("outputRecords", 0)), int(doc.get("files", 0)),
                       int(doc.get("committedAt", 0)), dict(doc.get("extra") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"malformed sparklog commit record {doc!r}: {exc}") \
                from None

    @classmethod
    def for_staged(cls, staged: StagedFiles, offsets: dict, ranges,
                   extra: dict | None = None) -> "CommitRecord":
        """The record committing ``staged`` with cumulative ``offsets``."""
        return cls(staged.app_id, staged.version, staged.attempt, dict(offsets),
                   tuple(sorted(ranges)), staged.records, len(staged.files),
                   int(time.time() * 1000), dict(extra or {}))
