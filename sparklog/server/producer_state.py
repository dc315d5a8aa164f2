"""Idempotent-producer state of one partition (Kafka's ProducerStateManager).

For every producer id the partition keeps the producer epoch and the metadata of its
last :data:`BATCHES_KEPT` frames (first and last sequence, first and last offset).
Before an append, :meth:`ProducerState.check` classifies a frame:

* producer id -1: not idempotent, always appended;
* an epoch older than the known one: InvalidProducerEpochError (a fenced zombie);
* a frame whose sequences equal a kept frame's: a duplicate (a retry after a lost
  response): *not* appended, acknowledged with the original offsets;
* the next sequence (last + 1, or 0 for a new producer or a new epoch): appended;
* anything else: OutOfOrderSequenceError naming expected and received sequences.

The state is persisted per partition as versioned snapshot files beside the segments
(``<v:010d>.producer-snapshot.json``, each with the log offset it covers) and rebuilt on
recovery by replaying the frame headers after the snapshot's offset.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass

from ..errors import InvalidProducerEpochError, OutOfOrderSequenceError
from ..format.header import NO_PRODUCER_ID, SEQUENCE_LIMIT, FrameHeader
from ..log.layout import PRODUCER_SNAPSHOT_SUFFIX
from ..storage.versioned import VersionedFile

BATCHES_KEPT = 5


@dataclass(frozen=True)
class AppendedBatch:
    """Sequences and offsets of one appended frame of an idempotent producer."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class ProducerEntry:
    """What a partition remembers of one producer id."""

    __slots__ = ("epoch", "batches", "last_timestamp")

    def __init__(self, epoch: int, batches=(), last_timestamp: int = -1):
        self.epoch = epoch
        self.batches: collections.deque = collections.deque(batches, maxlen=BATCHES_KEPT)
        self.last_timestamp = last_timestamp

    @property
    def last_seq(self) -> int:
        """Last sequence appended (-1 if none in this epoch)."""
        return self.batches[-1].last_seq if self.batches else -1


def _last_seq_of(header: FrameHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_LIMIT


class ProducerState:
    """Producer entries of one partition; ``where`` names it in error messages."""

    def __init__(self, where: str = ""):
        self.where = where
        self.producers: dict[int, ProducerEntry] = {}
        self.changed = False

    def check(self, header: FrameHeader) -> AppendedBatch | None:
        """Classify a frame before appending: None to append it, the original
        AppendedBatch for a duplicate; raises InvalidProducerEpochError or
        OutOfOrderSequenceError."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        first, last = header.base_sequence, _last_seq_of(header)
        if first < 0:
            raise OutOfOrderSequenceError(
                f"{self.where}: producer {pid} sent base sequence {first}; an idempotent "
                "frame needs a sequence >= 0")
        if entry is None or header.producer_epoch > entry.epoch:
            if first != 0:
                raise OutOfOrderSequenceError(
                    f"{self.where}: producer {pid} epoch {header.producer_epoch} is new here "
                    f"and must start at sequence 0, got {first}")
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{self.where}: producer {pid} epoch {header.producer_epoch} is older than "
                f"the current epoch {entry.epoch} (fenced)")
        for batch in entry.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        expected = (entry.last_seq + 1) % SEQUENCE_LIMIT
        if first != expected:
            raise OutOfOrderSequenceError(
                f"{self.where}: producer {pid} epoch {entry.epoch} sent sequence {first}, "
                f"expected {expected}")
        return None

    def update(self, header: FrameHeader, base_offset: int) -> None:
        """Record an appended frame (its base offset as stamped)."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[pid] = ProducerEntry(header.producer_epoch)
        entry.batches.append(AppendedBatch(
            header.base_sequence, _last_seq_of(header), base_offset,
            base_offset + header.last_offset_delta))
        entry.last_timestamp = header.max_timestamp
        self.changed = True

    # --- persistence -----------------------------------------------------------------------
    def to_json(self, offset: int) -> bytes:
        """Snapshot covering the log up to ``offset`` (exclusive)."""
        doc = {"offset": offset, "producers": {
            str(pid): {"epoch": e.epoch, "last_timestamp": e.last_timestamp,
                       "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset]
                                   for b in e.batches]}
            for pid, e in self.producers.items()}}
        return json.dumps(doc, sort_keys=True).encode()

    def load_json(self, data: bytes) -> int:
        """Replace the state by a snapshot; return the offset it covers."""
        doc = json.loads(data)
        self.producers = {
            int(pid): ProducerEntry(v["epoch"], [AppendedBatch(*b) for b in v["batches"]],
                                    v.get("last_timestamp", -1))
            for pid, v in doc["producers"].items()}
        self.changed = False
        return int(doc["offset"])


class ProducerSnapshots:
    """Versioned snapshot files of a partition's producer state."""

    def __init__(self, fileio, partition_dir: str):
        self.file = VersionedFile(fileio, partition_dir, suffix=PRODUCER_SNAPSHOT_SUFFIX, keep=2,
                                  parents=fileio.in_existing_dir())
        self.version = 0
        #: the log offset the newest snapshot covers (None: none written or loaded);
        #: the log cleaner leaves the frames from there on alone
        self.covered: int | None = None

    def load(self, state: ProducerState) -> int | None:
        """Load the newest snapshot into ``state``; its covered offset, or None."""
        latest = self.file.latest()
        if latest is None:
            return None
        self.version = latest[0]
        try:
            self.covered = state.load_json(latest[1])
            return self.covered
        except (ValueError, KeyError, TypeError):
            state.producers = {}
            return None  # unreadable: rebuild from the log

    def write(self, state: ProducerState, offset: int) -> None:
        """Write a new snapshot covering the log up to ``offset``."""
        self.file.write(self.version + 1, state.to_json(offset))
        self.version += 1
        self.covered = offset
        state.changed = False
