"""The newest frames of a partition, kept in memory for the fetches that follow its tail.

A consumer that keeps up asks for the offset right after what it got last, so its next
Fetch waits in purgatory until the next append, and then wants exactly the frames that
append wrote. The partition writer hands each appended run of frames (a request's
frames, stamped with their offsets) to a :class:`TailCache` once the flush that makes
them visible is done; a fetch at the first offset of a run kept here is answered from
memory on the event loop: no read of the segment, no hand-off to an I/O thread, no
sendfile of a few hundred bytes.

Bounded: runs of at most ``max_run`` bytes (a copy each), at most ``max_bytes`` and
``max_runs`` runs in all, the oldest dropped first. The runs kept always follow each
other, end at the high watermark and lie in one segment, the active one: a run that
does not follow the last one, one of another segment, or one too large to keep,
empties the cache first, and a read names the active segment (after a roll the cache
answers nothing). So only frames of the active segment, which nothing but appends
touches, are served from memory; sealed segments (compacted, checked, damaged...) are
always read from storage. Only the event loop uses it.
"""

from __future__ import annotations

import collections

#: bytes of runs kept per partition
TAIL_BYTES = 1 << 20
#: largest run kept (larger ones are read from the segment, and sent with sendfile)
TAIL_RUN_BYTES = 64 << 10
#: most runs kept per partition
TAIL_RUNS = 1024


class TailCache:
    """See the module docstring."""

    def __init__(self, max_bytes: int = TAIL_BYTES, max_run: int = TAIL_RUN_BYTES,
                 max_runs: int = TAIL_RUNS):
        self.max_bytes = max_bytes
        self.max_run = max_run
        self.max_runs = max_runs
        self._runs: collections.deque = collections.deque()  # (base, next offset, bytes)
        self._bytes = 0
        self._segment = -1  # base offset of the segment the runs lie in

    def __len__(self) -> int:
        return len(self._runs)

    def clear(self) -> None:
        """Forget every run."""
        self._runs.clear()
        self._bytes = 0

    def add(self, base_offset: int, next_offset: int, data: bytes | None,
            segment: int) -> None:
        """Keep the run of frames ``data`` holding offsets ``[base_offset, next_offset)``,
        appended to the segment whose base offset is ``segment`` and flushed (visible
        below the high watermark); None: a run appended but not kept (too large), which
        empties the cache."""
        runs = self._runs
        if runs and (runs[-1][1] != base_offset or segment != self._segment):
            self.clear()
        self._segment = segment
        if data is None or len(data) > self.max_run:
            self.clear()
            return
        runs.append((base_offset, next_offset, data))
        self._bytes += len(data)
        while self._bytes > self.max_bytes or len(runs) > self.max_runs:
            self._bytes -= len(runs.popleft()[2])

    def read(self, offset: int, max_bytes: int, segment: int) -> bytes | None:
        """The runs from the one starting at ``offset`` on, as many as fit ``max_bytes``
        (None when no run starts there, or the first does not fit: the segment is read
        then, which returns whole frames as the log's own read does, or when the runs'
        segment is no longer the active one, whose base offset is ``segment``)."""
        runs = self._runs
        if segment != self._segment:
            return None
        i = len(runs) - 1
        while i >= 0 and runs[i][0] > offset:  # a consumer that keeps up asks for the
            i -= 1                             # newest runs: search from the end
        if i < 0 or runs[i][0] != offset or len(runs[i][2]) > max_bytes:
            return None
        parts, total = [], 0
        for k in range(i, len(runs)):
            data = runs[k][2]
            if total + len(data) > max_bytes:
                break
            parts.append(data)
            total += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)


__all__ = ["TailCache"]
