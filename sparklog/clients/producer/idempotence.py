"""The idempotent producer's identity and sequence numbers as one state machine (the part
of Kafka's TransactionManager an idempotent producer uses). The
:class:`~.sender.Sender` owns the requests; it asks the :class:`IdempotenceManager` how
to stamp a frame and what a failed batch means for the producer's identity, and the
manager alone changes that identity and the sequences.

**The identity** (producer id and epoch) goes through three states:

* ``UNINITIALIZED`` → ``READY``: :meth:`IdempotenceManager.init_if_needed` gets a
  producer id (InitProducerId) and its producer token, which every Produce request
  sends beside the id's frames (the broker refuses them without it); every partition's
  sequence starts at 0.
* ``READY`` → ``BUMP_NEEDED``: a batch failed for good and may be in the log (its outcome
  is unknown, or later batches of its partition were sent after it), so its sequences
  cannot be reused nor skipped; or the broker refused it out of order with no earlier
  batch of ours pending: the partition lost or never had what it knew of this producer
  (the topic was deleted and created again, ...), and only a new identity, starting at
  sequence 0, is accepted there again (as Kafka's producer bumps its epoch, KIP-360).
* ``BUMP_NEEDED`` → ``READY``: before the next frames are stamped, a new identity
  (InitProducerId again; a producer without a transactional id gets a fresh producer
  id, the broker bumps no epoch for it) and sequences restart at 0. Until then, and if
  the request fails, the state stays ``BUMP_NEEDED``.

**A batch** is stamped once (:meth:`~IdempotenceManager.stamp`: the identity and the next
sequence of its partition) and keeps those bytes across retries. When it fails,
:meth:`~IdempotenceManager.recovery` classifies the error:

* a *duplicate* is no error: the broker acknowledges a resent frame it already appended
  with its original offsets (nothing to do here);
* ``OutOfOrderSequence`` on a batch stamped under an identity that is being replaced (or
  already was): :attr:`Recovery.RESEQUENCE`: the broker refused it unappended, so it is
  sent again at once, stamped anew under the new identity (Kafka re-sequences such
  batches, KIP-360);
* ``OutOfOrderSequence`` while an earlier batch of the partition is still in flight or
  waiting for a retry: :attr:`Recovery.RETRY`: the gap is that batch, so the same bytes
  are retried once it is through;
* anything else: :attr:`Recovery.NONE`: the Sender's ordinary rules decide (retry a
  retriable error, split a batch refused as too large: :meth:`~IdempotenceManager.\
stamp_pieces` gives the pieces the batch's sequence range).

A batch that fails for good goes to :meth:`~IdempotenceManager.batch_failed`: when the
broker refused it (a known outcome, not a sequence error) and nothing else of its
partition is pending, its sequence range is handed out again (the partition's next
sequence goes back to its base); otherwise the identity goes to ``BUMP_NEEDED``. Batches
stamped under an older identity change nothing.
"""

from __future__ import annotations

import enum
import threading

from ...errors import OutOfOrderSequenceError
from ...format.frame import restamp_producer
from ...format.header import SEQUENCE_LIMIT
from ...protocol.apis import ApiKey
from ...protocol.codec import raise_for_error


class IdentityState(enum.Enum):
    """Where the producer's identity stands (see the module docstring)."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    BUMP_NEEDED = "bump-needed"


class Recovery(enum.Enum):
    """What an idempotence error asks the Sender to do with a failed batch."""

    #: not an idempotence matter: the Sender's ordinary retry rules apply
    NONE = "none"
    #: resend the same bytes (same sequence) like any retriable error
    RETRY = "retry"
    #: send again at once with a new frame stamped under the current identity
    RESEQUENCE = "resequence"


class IdempotenceManager:
    """Producer id, epoch and each partition's next sequence, and the transitions
    between them (see the module docstring). ``client`` is the producer's
    :class:`~sparklog.clients.network.network.NetworkClient` (for InitProducerId). Thread-safe:
    frames are stamped on the sender thread, failures arrive on connection threads."""

    def __init__(self, client):
        self.client = client
        self.state = IdentityState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        #: InitProducerId's token: sent with every frame of the identity (the broker
        #: refuses a producer id's frames without it: docs/security.md)
        self.producer_token: bytes | None = None
        self._sequences: dict[tuple, int] = {}
        self._lock = threading.Lock()

    # --- identity ---------------------------------------------------------------------
    def init_if_needed(self) -> None:
        """Get an identity unless ``READY`` (UNINITIALIZED or BUMP_NEEDED → READY);
        raises the broker's error and leaves the state as it was when that fails. The
        current id and epoch are sent along, so the broker refuses a fenced producer."""
        if self.state is IdentityState.READY:
            return
        body = {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}
        resp = self.client.request(ApiKey.INIT_PRODUCER_ID, body)
        raise_for_error(resp, "InitProducerId")
        with self._lock:
            self.producer_id = resp["producer_id"]
            self.producer_epoch = resp["producer_epoch"]
            self.producer_token = resp.get("producer_token") or None
            self._sequences.clear()
            self.state = IdentityState.READY

    def is_current(self, item) -> bool:
        """True when ``item`` was stamped under the current identity."""
        return (item.producer_id, item.epoch) == (self.producer_id, self.producer_epoch)

    # --- stamping ---------------------------------------------------------------------
    def stamp(self, item, frames: list[tuple[bytes, int]]) -> list[bytearray]:
        """Give an in-flight batch's frames (``(frame, record count)`` each) the
        current identity and its partition's next sequences; the item records the
        identity and its first frame's sequence (``base_sequence``)."""
        with self._lock:
            item.producer_id, item.epoch = self.producer_id, self.producer_epoch
            item.token = self.producer_token
            out = []
            for frame, count in frames:
                seq = self._sequences.get(item.tp, 0)
                self._sequences[item.tp] = (seq + count) % SEQUENCE_LIMIT
                if item.base_sequence < 0:
                    item.base_sequence = seq
                out.append(restamp_producer(frame, self.producer_id, self.producer_epoch,
                                            seq))
            return out

    @staticmethod
    def stamp_pieces(item, pieces: list) -> None:
        """Give the pieces of a split ``item`` (one ProducerBatch each, in record order)
        the item's identity and consecutive parts of its sequence range, so that the
        broker sees the same sequences as if the item had fitted."""
        seq = item.base_sequence
        for piece in pieces:
            piece.producer_id, piece.epoch = item.producer_id, item.epoch
            piece.token = item.token
            batch = piece.batches[0]
            piece.base_sequence = seq
            piece.frame = restamp_producer(batch.frame, item.producer_id, item.epoch, seq)
            seq = (seq + batch.count) % SEQUENCE_LIMIT

    # --- failures ---------------------------------------------------------------------
    def recovery(self, item, exc: BaseException, earlier_pending) -> Recovery:
        """Classify ``exc`` for a failed batch (see :class:`Recovery`);
        ``earlier_pending()`` tells whether a batch of the partition drained before
        ``item`` is still in flight or to be retried."""
        if not isinstance(exc, OutOfOrderSequenceError):
            return Recovery.NONE
        with self._lock:
            replaced = self.state is IdentityState.BUMP_NEEDED or not self.is_current(item)
        if replaced:
            return Recovery.RESEQUENCE
        return Recovery.RETRY if earlier_pending() else Recovery.NONE

    def batch_failed(self, item, exc: BaseException, *, outcome_known: bool,
                     others_pending: bool) -> None:
        """A batch failed for good with ``exc``: hand its sequences out again when the
        broker refused it (not as out of order) and nothing else of its partition is
        pending, else READY → BUMP_NEEDED. A batch never stamped, or stamped under an
        older identity, changes nothing."""
        with self._lock:
            if item.base_sequence < 0 or not self.is_current(item):
                return
            if outcome_known and not others_pending \
                    and not isinstance(exc, OutOfOrderSequenceError):
                self._sequences[item.tp] = item.base_sequence
            else:
                self.state = IdentityState.BUMP_NEEDED
