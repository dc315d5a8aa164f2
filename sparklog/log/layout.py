"""Names of the files in a partition directory, and one parsed listing of it.

A partition directory (``<root>/topics/<topic>/<partition>/``) holds::

    00000000000000000000.log         segment data (frames), named by base offset
    00000000000000000000.index       offset index + summary (sealed segments only)
    00000000000000000000.timeindex   time index (sealed segments only)
    00000000000000000000.log.cleaned tail repair in progress (incomplete: discard)
    00000000000000000000.log.swap    tail repair committed (complete: swap it in)
    00000000000000000000.00000000000000000500.c1.log    a cleaned segment (compaction):
                                     base offset, end offset, generation; with its
                                     .index and .timeindex (the .index commits it)
    0000000003.log-start-offset-checkpoint   versioned log start offset
    0000000001.leader-epoch-checkpoint       versioned leader epoch history
    0000000002.producer-snapshot.json        versioned idempotent-producer state (broker)
    .<name>.<uuid>.tmp               an atomic small-file write in progress

A segment is *sealed* exactly when its ``.index`` exists: sealing writes the
``.timeindex`` first and the ``.index`` last, and only then creates the next segment.

Compaction writes *cleaned* segments under names of their own (base offset, end
offset, generation) and commits each by writing its ``.index`` last. Which segments
are live is decided by one rule, :func:`live_segments` (``PartitionListing.logs``),
which every reader of the directory applies; the JVM reader's
``LogFiles.listSegments`` is its Java twin. See docs/format.md, "Compaction".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidArgumentError, StorageFileNotFoundError
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


def cleaned_stem(base_offset: int, end_offset: int, generation: int) -> str:
    """The name stem of a cleaned segment holding offsets ``[base_offset, end_offset)``
    written by compaction generation ``generation`` (>= 1)."""
    return f"{base_offset:0{OFFSET_WIDTH}d}.{end_offset:0{OFFSET_WIDTH}d}.c{generation}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment-family file name, or None for other names
    (a cleaned segment's name parses with :func:`parse_segment_stem`)."""
    parsed = parse_segment_stem(name)
    if parsed is None or parsed[1] != 0:
        return None
    return parsed[0], parsed[3]


def parse_segment_stem(name: str) -> tuple[int, int, int | None, str] | None:
    """(base offset, generation, end offset or None, suffix) of a segment-family file
    name: generation 0 (end unknown from the name) for appended segments
    ``<base>.log``, >= 1 for cleaned ones ``<base>.<end>.c<generation>.log``; None
    for other names."""
    stem, dot, rest = name.partition(".")
    if len(stem) != OFFSET_WIDTH or not stem.isdigit() or not dot:
        return None
    generation, end = 0, None
    head, dot2, tail = rest.partition(".")
    if len(head) == OFFSET_WIDTH and head.isdigit() and dot2:
        gen, dot3, rest = tail.partition(".")
        if not (gen[:1] == "c" and gen[1:].isdigit() and int(gen[1:]) >= 1 and dot3
                and str(int(gen[1:])) == gen[1:]):
            return None
        generation, end = int(gen[1:]), int(head)
        if end < int(stem):
            return None
    suffix = "." + rest
    if suffix not in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX):
        return None
    if generation and suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        return None
    return int(stem), generation, end, suffix


@dataclass
class SegmentFiles:
    """The files of one segment found in a listing (None where absent)."""

    base_offset: int
    log: FileInfo | None = None
    index: FileInfo | None = None
    timeindex: FileInfo | None = None
    cleaned: FileInfo | None = None
    swap: FileInfo | None = None
    #: 0 for a segment written by appends, >= 1 for a cleaned segment
    generation: int = 0
    #: the end offset a cleaned segment's name states (None for generation 0)
    end_offset: int | None = None

    @property
    def sealed(self) -> bool:
        """True if the segment has its ``.index`` (the seal marker)."""
        return self.index is not None

    @property
    def log_file(self) -> FileInfo:
        """The listing of the segment's ``.log`` (of a live segment: :meth:`logs`);
        StorageFileNotFoundError when it has none."""
        if self.log is None:
            raise StorageFileNotFoundError(
                f"segment {self.stem} has no .log file in the listing")
        return self.log

    @property
    def stem(self) -> str:
        """The common name stem of the segment's files."""
        if self.generation == 0 or self.end_offset is None:  # (cleaned: end is known)
            return f"{self.base_offset:0{OFFSET_WIDTH}d}"
        return cleaned_stem(self.base_offset, self.end_offset, self.generation)

    @property
    def committed(self) -> bool:
        """A segment written by appends always counts (sealed or active); a cleaned one
        only once its ``.index`` (written last) exists."""
        return self.log is not None and (self.generation == 0 or self.index is not None)

    def files(self) -> list[FileInfo]:
        """The files present, the ``.log`` first (the order to delete them in)."""
        return [f for f in (self.log, self.timeindex, self.index, self.cleaned, self.swap)
                if f is not None]


def live_segments(segments) -> tuple[list[SegmentFiles], list[SegmentFiles]]:
    """THE rule selecting a partition's live segments, applied by every reader: (live,
    superseded), each by base offset, from the listed ``segments`` (SegmentFiles).

    Committed cleaned segments (see :attr:`SegmentFiles.committed`) are taken from the
    highest generation down; one is live unless its base offset lies inside the range
    ``[base, end)`` of a live one of a higher generation. A segment of generation 0 is
    live unless its base offset lies inside the range of a live cleaned segment.
    Everything else that has a ``.log`` is superseded: replaced by compaction, kept
    until ``file.delete.delay.ms`` for the readers that planned it. A cleaned segment
    without its ``.index`` is neither (an uncommitted copy: see :func:`uncommitted`).
    """
    committed = [f for f in segments if f.committed]
    cleaned = sorted((f for f in committed if f.generation),
                     key=lambda f: (-f.generation, f.base_offset))
    ranges: list[tuple[int, int]] = []
    live, superseded = [], []

    def covered(offset: int) -> bool:
        return any(lo <= offset < hi for lo, hi in ranges)

    for f in cleaned:
        if covered(f.base_offset):
            superseded.append(f)
        else:
            live.append(f)
            ranges.append((f.base_offset, f.end_offset))
    for f in committed:
        if not f.generation:
            (superseded if covered(f.base_offset) else live).append(f)
    key = lambda f: (f.base_offset, f.generation)  # noqa: E731
    return sorted(live, key=key), sorted(superseded, key=key)


def uncommitted(segments) -> list[SegmentFiles]:
    """Cleaned segments whose ``.index`` was never written: a compaction cut short
    before its commit (only the partition's writer deletes them)."""
    return [f for f in segments if f.generation and f.index is None]


_SLOT = {LOG_SUFFIX: "log", INDEX_SUFFIX: "index", TIMEINDEX_SUFFIX: "timeindex",
         CLEANED_SUFFIX: "cleaned", SWAP_SUFFIX: "swap"}


@dataclass
class PartitionListing:
    """One ``list()`` of a partition directory, parsed.

    ``segments`` maps base offset -> files of the segment written by appends (and the
    tail repair files), sorted; ``cleaned`` maps (base offset, generation, end offset) -> files of
    cleaned segments; ``temporary`` holds leftover ``.*.tmp`` files of interrupted
    atomic writes.
    """

    directory: str
    segments: dict[int, SegmentFiles] = field(default_factory=dict)
    cleaned: dict[tuple[int, int, int], SegmentFiles] = field(default_factory=dict)
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
            parsed = parse_segment_stem(info.name)
            if parsed is None:
                continue
            base, generation, end, suffix = parsed
            if generation and end is not None:  # (a cleaned stem names its end)
                files = out.cleaned.get((base, generation, end))
                if files is None:
                    files = out.cleaned[(base, generation, end)] = SegmentFiles(
                        base, generation=generation, end_offset=end)
            else:
                files = out.segments.setdefault(base, SegmentFiles(base))
            setattr(files, _SLOT[suffix], info)
        out.segments = dict(sorted(out.segments.items()))
        out.cleaned = dict(sorted(out.cleaned.items()))
        return out

    def all_segments(self) -> list[SegmentFiles]:
        """Every segment family listed, appended and cleaned."""
        return list(self.segments.values()) + list(self.cleaned.values())

    def logs(self) -> list[SegmentFiles]:
        """The live segments, by base offset (:func:`live_segments`)."""
        return live_segments(self.all_segments())[0]

    def superseded(self) -> list[SegmentFiles]:
        """Segments replaced by compaction, still on storage (:func:`live_segments`)."""
        return live_segments(self.all_segments())[1]

    def uncommitted(self) -> list[SegmentFiles]:
        """Cleaned segments never committed (:func:`uncommitted`)."""
        return uncommitted(self.cleaned.values())


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
