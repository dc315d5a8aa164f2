"""Transactions in a partition log: which data frames were aborted.

A producer's transactional data frames since its previous transaction marker
(:mod:`sparklog.format.marker`) belong to the transaction its next marker ends. Reading
a partition's frames in offset order, :class:`TransactionTracker` follows the open
transactions (producer id -> first offset) and records each aborted one as an
:class:`AbortedTxn` (Kafka's transaction index entry: producer id, first offset, the
marker's offset); :class:`AbortedTransactions` answers, for a data frame, whether it
belongs to one of them. The log cleaner removes aborted transactions' records and never
cleans from the first offset of a transaction still open (Kafka's last stable offset).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ..format.marker import ABORT


@dataclass(frozen=True)
class AbortedTxn:
    """An aborted transaction: its producer, its first offset and its marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int


class AbortedTransactions:
    """A lookup of aborted transactions by producer id and offset."""

    def __init__(self, txns=()):
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for t in txns:
            self.add(t)

    def add(self, txn: AbortedTxn) -> None:
        """Record ``txn``."""
        bisect.insort(self._by_producer.setdefault(txn.producer_id, []),
                      (txn.first_offset, txn.last_offset))

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_producer.values())

    def holds(self, header) -> bool:
        """Whether the data frame of ``header`` belongs to an aborted transaction
        (transactional, of a producer with an aborted transaction spanning its offset)."""
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._by_producer.get(header.producer_id)
        if not ranges:
            return False
        i = bisect.bisect_right(ranges, (header.base_offset, float("inf"))) - 1
        return i >= 0 and ranges[i][0] <= header.base_offset <= ranges[i][1]


    def holds_offsets(self, producer_id: int, offsets: np.ndarray) -> np.ndarray:
        """Per offset of ``offsets`` (records of transactional data frames of producer
        ``producer_id``, numpy int64): whether it lies in one of its aborted
        transactions (numpy bools)."""
        ranges = self._by_producer.get(producer_id)
        if not ranges:
            return np.zeros(len(offsets), np.bool_)
        firsts = np.fromiter((r[0] for r in ranges), np.int64, len(ranges))
        lasts = np.fromiter((r[1] for r in ranges), np.int64, len(ranges))
        at = np.searchsorted(firsts, offsets, side="right") - 1
        return (at >= 0) & (offsets <= lasts[np.maximum(at, 0)])


class TransactionTracker:
    """Follows transactions through frames read in offset order: :meth:`data` for each
    data frame (with a ``tag`` to get back if its transaction aborts), :meth:`marker`
    for each control frame. :attr:`aborted` holds the aborted transactions seen,
    :attr:`aborted_tags` the tags of their data frames, :attr:`open` the producers whose
    transaction has no marker yet (-> its first offset)."""

    def __init__(self):
        self.open: dict[int, int] = {}
        self.aborted = AbortedTransactions()
        self.aborted_tags: list = []
        self._tags: dict[int, list] = {}

    def data(self, header, tag=None) -> None:
        """A data frame; only transactional ones matter."""
        if header.is_transactional:
            self.data_at(header.producer_id, header.base_offset, tag)

    def data_at(self, producer_id: int, offset: int, tag=None) -> None:
        """A transactional data frame of ``producer_id`` at ``offset``."""
        self.open.setdefault(producer_id, offset)
        if tag is not None:
            self._tags.setdefault(producer_id, []).append(tag)

    def marker(self, header, kind: int | None) -> None:
        """A control frame of type ``kind`` (:func:`~sparklog.format.marker.marker_type`):
        it ends its producer's open transaction, aborted when ``kind`` is ABORT."""
        self.marker_at(header.producer_id, header.last_offset, kind)

    def marker_at(self, producer_id: int, offset: int, kind: int | None) -> None:
        """A control frame of ``producer_id`` whose last offset is ``offset``."""
        first = self.open.pop(producer_id, None)
        tags = self._tags.pop(producer_id, [])
        if kind == ABORT and first is not None:
            self.aborted.add(AbortedTxn(producer_id, first, offset))
            self.aborted_tags.extend(tags)

    def first_open_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none open)."""
        return min(self.open.values()) if self.open else None
