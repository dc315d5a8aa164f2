"""Names of the files in a partition directory, and one parsed listing of it.

A partition directory (``<root>/topics/<topic>/<partition>/``) holds::

    00000000000000000000.log         segment data (frames), named by base offset
    00000000000000000000.index       offset index + summary (sealed segments only)
    00000000000000000000.timeindex   time index (sealed segments only)
    00000000000000000000.log.cleaned tail repair in progress (incomplete: discard)
    00000000000000000000.log.swap    tail repair committed (complete: swap it in)
    0000000003.log-start-offset-checkpoint   versioned log start offset
    0000000001.leader-epoch-checkpoint       versioned leader epoch history
    0000000002.producer-snapshot.json        versioned idempotent-producer state (broker)
    .<name>.<uuid>.tmp               an atomic small-file write in progress

A segment is *sealed* exactly when its ``.index`` exists: sealing writes the
``.timeindex`` first and the ``.index`` last, and only then creates the next segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidArgumentError
from ..storage.base import FileInfo, FileIO

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".log.cleaned"
SWAP_SUFFIX = ".log.swap"
LOG_START_SUFFIX = ".log-start-offset-checkpoint"
LEADER_EPOCH_SUFFIX = ".leader-epoch-checkpoint"
PRODUCER_SNAPSHOT_SUFFIX = ".producer-snapshot.json"
OFFSET_WIDTH = 20


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    """Kafka's segment file name: the base offset on 20 digits, then ``suffix``."""
    return f"{base_offset:0{OFFSET_WIDTH}d}{suffix}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment-family file name, or None for other names."""
    stem, dot, rest = name.partition(".")
    if len(stem) != OFFSET_WIDTH or not stem.isdigit() or not dot:
        return None
    suffix = "." + rest
    if suffix not in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX):
        return None
    return int(stem), suffix


@dataclass
class SegmentFiles:
    """The files of one segment found in a listing (None where absent)."""

    base_offset: int
    log: FileInfo | None = None
    index: FileInfo | None = None
    timeindex: FileInfo | None = None
    cleaned: FileInfo | None = None
    swap: FileInfo | None = None

    @property
    def sealed(self) -> bool:
        """True if the segment has its ``.index`` (the seal marker)."""
        return self.index is not None


_SLOT = {LOG_SUFFIX: "log", INDEX_SUFFIX: "index", TIMEINDEX_SUFFIX: "timeindex",
         CLEANED_SUFFIX: "cleaned", SWAP_SUFFIX: "swap"}


@dataclass
class PartitionListing:
    """One ``list()`` of a partition directory, parsed.

    ``segments`` maps base offset -> files, sorted; ``temporary`` holds leftover
    ``.*.tmp`` files of interrupted atomic writes.
    """

    directory: str
    segments: dict[int, SegmentFiles] = field(default_factory=dict)
    temporary: list[FileInfo] = field(default_factory=list)

    @classmethod
    def scan(cls, fileio: FileIO, directory: str) -> "PartitionListing":
        """List ``directory`` once and parse the names."""
        out = cls(directory)
        for info in fileio.list(directory):
            if info.is_dir:
                continue
            if info.name.startswith(".") and info.name.endswith(".tmp"):
                out.temporary.append(info)
                continue
            parsed = parse_segment_name(info.name)
            if parsed is None:
                continue
            base, suffix = parsed
            files = out.segments.setdefault(base, SegmentFiles(base))
            setattr(files, _SLOT[suffix], info)
        out.segments = dict(sorted(out.segments.items()))
        return out

    def logs(self) -> list[SegmentFiles]:
        """Segments that have a ``.log``, by base offset."""
        return [f for f in self.segments.values() if f.log is not None]


def describe_partition(directory: str) -> tuple[str | None, int | None]:
    """(topic, partition) guessed from a ``.../<topic>/<partition>`` directory path,
    for error messages and error attributes; (None, None) if it does not look so."""
    head, _, last = directory.rstrip("/").rpartition("/")
    topic = head.rpartition("/")[2]
    if last.isdigit() and topic:
        return topic, int(last)
    return None, None


def check_offset(value, what: str) -> int:
    """``value`` if it is a non-negative int (bool refused), else InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgumentError(f"{what} must be >= 0, got {value}")
    return value
