"""Producer ids of idempotent producers: :class:`ProducerIdManager` answers
InitProducerId from blocks of ids reserved in the coordination store (Kafka's
ProducerIdManager and its ``/latest_producer_id_block``)."""

from __future__ import annotations

from ...errors import InvalidArgumentError, InvalidProducerEpochError
from ...names import validate_transactional_id
from ...protocol.apis import ApiKey

_NO_ERROR = {"error_code": 0, "error_message": ""}


class ProducerIdManager:
    """Hands out producer ids and epochs. ``store``: the coordination store (reserves
    blocks of ``block_size`` ids, ``producer.id.block.size``); ``partitions``: the
    broker's :class:`~sparklog.writer.broker.partitions.PartitionManager` (the producer
    epochs its open partitions know); ``run_io`` runs a blocking call on the I/O
    threads. Transactional ids and their holders are kept in memory."""

    def __init__(self, store, partitions, *, block_size: int, run_io):
        self.store = store
        self.partitions = partitions
        self.block_size = block_size
        self.run_io = run_io
        self._pid_next = self._pid_end = 0
        #: transactional id -> (producer id, epoch) of its current holder (in memory)
        self._transactional: dict[str, tuple[int, int]] = {}

    def handlers(self) -> dict:
        """api key -> ``handler(body, ctx)``."""
        return {ApiKey.INIT_PRODUCER_ID: self.init_producer_id}

    async def init_producer_id(self, body, ctx) -> dict:
        """Kafka's InitProducerId (KIP-98, with KIP-360's rules for a given id/epoch):

        * with a ``transactional_id``: its holder's producer id with the epoch bumped
          (fencing older instances of it), a fresh id the first time; a ``producer_id``
          and ``producer_epoch`` given with it must be its current pair
          (InvalidProducerEpochError otherwise);
        * without one: always a fresh producer id at epoch 0. A given ``producer_id``
          and ``producer_epoch`` (a producer restarting its sequences) is accepted when
          no partition of this broker knows that producer under a newer epoch, and
          refused otherwise (a fenced producer: InvalidProducerEpochError); either way
          the id is never bumped for the caller, so nobody can fence another client's
          producer id.
        """
        if body["transactional_id"] is not None:
            validate_transactional_id(body["transactional_id"])
        pid, epoch = body["producer_id"], body["producer_epoch"]
        tid = body["transactional_id"]
        if pid >= 0 and epoch < 0:
            raise InvalidArgumentError(
                f"InitProducerId: producer_id {pid} given without its producer_epoch")
        if pid < 0 and epoch >= 0:
            raise InvalidArgumentError(
                f"InitProducerId: producer_epoch {epoch} given without its producer_id")
        if tid:
            current = self._transactional.get(tid)
            if pid >= 0 and current is not None and (pid, epoch) != current:
                raise InvalidProducerEpochError(
                    f"InitProducerId: producer id {pid} epoch {epoch} is not the current "
                    f"producer of transactional id {tid!r} (fenced)")
            if current is not None and current[1] < 32766:
                pid, epoch = current[0], current[1] + 1
            else:  # a new transactional id, or its epochs are used up
                pid, epoch = await self._new_producer_id(), 0
            self._transactional[tid] = (pid, epoch)
            return {**_NO_ERROR, "producer_id": pid, "producer_epoch": epoch}
        if pid >= 0:
            for w in list(self.partitions.writers.values()):
                known = w.state.producers.get(pid)
                if known is not None and known.epoch > epoch:
                    raise InvalidProducerEpochError(
                        f"InitProducerId: producer id {pid} epoch {epoch} is older than "
                        f"epoch {known.epoch} already used on partition {w.name} (fenced)")
        return {**_NO_ERROR, "producer_id": await self._new_producer_id(), "producer_epoch": 0}

    async def _new_producer_id(self) -> int:
        """The next producer id of the block this broker reserved (a new block when it
        is used up)."""
        if self._pid_next >= self._pid_end:
            size = self.block_size
            self._pid_next = await self.run_io(self.store.allocate_producer_ids, size)
            self._pid_end = self._pid_next + size
        pid, self._pid_next = self._pid_next, self._pid_next + 1
        return pid
