"""LeaderEpochCache: which leader epoch started at which offset (Kafka's
leader-epoch-checkpoint), persisted as a :class:`~sparklog.log.checkpoint.JsonCheckpoint`.

A new leader assigns its epoch at the log end offset when it opens the partition; the
history answers Kafka's OffsetsForLeaderEpoch question (where did epoch ``e`` end?),
which a fenced leader or a consumer uses to detect a truncated log.
"""

from __future__ import annotations

from ..errors import FencedLeaderEpochError
from .checkpoint import JsonCheckpoint


class LeaderEpochCache:
    """Ordered ``(epoch, start_offset)`` entries, epochs and offsets non-decreasing."""

    def __init__(self, checkpoint: JsonCheckpoint | None = None, name: str = ""):
        self.checkpoint = checkpoint
        self.name = name
        self.entries: list[tuple[int, int]] = []
        if checkpoint is not None:
            doc = checkpoint.read() or {}
            self.entries = [(int(e), int(o)) for e, o in doc.get("epochs", [])]

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, -1 when none was assigned."""
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if it is already the
        latest); FencedLeaderEpochError if ``epoch`` is older than the latest."""
        if epoch < self.latest_epoch:
            raise FencedLeaderEpochError(
                f"{self.name}: leader epoch {epoch} is older than the current epoch "
                f"{self.latest_epoch}")
        if epoch == self.latest_epoch:
            return
        self.entries.append((epoch, start_offset))
        self._persist()

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that started after ``end_offset`` (the log was cut there)."""
        kept = [(e, o) for e, o in self.entries if o <= end_offset]
        if kept != self.entries:
            self.entries = kept
            self._persist()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: ``(largest epoch <= epoch, its end offset)``,
        the end being the next epoch's start or the log end; ``(-1, -1)`` if unknown."""
        for i in range(len(self.entries) - 1, -1, -1):
            e, _ = self.entries[i]
            if e <= epoch:
                end = self.entries[i + 1][1] if i + 1 < len(self.entries) else log_end_offset
                return e, end
        return -1, -1

    def _persist(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.write({"epochs": [list(x) for x in self.entries]})
