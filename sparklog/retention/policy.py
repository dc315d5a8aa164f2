"""Which sealed segments time and size retention delete (Kafka's ``cleanup.policy=delete``).

Kafka's rules, applied to the sealed segments oldest first, stopping at the first one
that is kept (the active segment is never deleted):

* ``retention.ms``: a segment goes when its largest record timestamp is more than
  ``retention.ms`` before now (a segment without records is judged by nothing and kept);
* ``retention.bytes``: the oldest segments go while the partition would still hold at
  least ``retention.bytes`` without them.

``-1`` disables either rule. :func:`retention_cutoff` returns the new log start offset
(the end of the last segment to delete), which
:meth:`~sparklog.log.partition.PartitionLog.delete_segments_before` persists before it
deletes any file, so readers never see a hole.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..log.config import LogConfig


@dataclass(frozen=True)
class RetentionCutoff:
    """The new log start offset and why: segments deleted by each rule."""

    offset: int
    by_time: int
    by_size: int

    @property
    def segments(self) -> int:
        """Number of segments below the cutoff."""
        return self.by_time + self.by_size


def retention_cutoff(segments, config: LogConfig, now_ms: int) -> RetentionCutoff | None:
    """The cutoff for ``segments`` (LogSegments, oldest first, the last one active) under
    ``config``; None when nothing is due (or the policy has no ``delete``)."""
    if not config.delete or len(segments) < 2:
        return None
    sealed = segments[:-1]
    total = sum(s.size for s in segments)
    by_time = by_size = 0
    cutoff = None
    for seg in sealed:
        if (config.retention_ms >= 0 and seg.max_timestamp >= 0
                and now_ms - seg.max_timestamp > config.retention_ms):
            by_time += 1
        elif config.retention_bytes >= 0 and total - seg.size >= config.retention_bytes:
            by_size += 1
        else:
            break
        total -= seg.size
        cutoff = seg.next_offset
    return None if cutoff is None else RetentionCutoff(cutoff, by_time, by_size)


def apply_retention(plog, now_ms: int) -> RetentionCutoff | None:
    """Delete what retention says is due in the partition log ``plog`` (its own config);
    returns what was done, or None. Runs storage calls: call it off the event loop."""
    cut = retention_cutoff(plog.segments, plog.config, now_ms)
    if cut is not None:
        plog.delete_segments_before(cut.offset)
    return cut
