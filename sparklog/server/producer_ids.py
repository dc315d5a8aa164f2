"""Producer ids of idempotent producers: :class:`ProducerIdManager` answers
InitProducerId from blocks of ids reserved in the coordination store (Kafka's
ProducerIdManager and its ``/latest_producer_id_block``), with the producer token
binding the id to the caller's principal (:mod:`sparklog.security.binding`), and the
check that the frames of a Produce request name only producer ids their token binds to
the sender (:meth:`ProducerIdManager.binder`)."""

from __future__ import annotations

from ..errors import InvalidArgumentError, InvalidProducerEpochError, InvalidProducerIdMappingError
from ..format.header import NO_PRODUCER_ID
from ..names import validate_transactional_id
from ..protocol.apis import ApiKey
from ..security.binding import ProducerIdBinding
from ..security.session import principal_of

_NO_ERROR = {"error_code": 0, "error_message": ""}


class ProducerIdManager:
    """Hands out producer ids and epochs. ``store``: the coordination store (reserves
    blocks of ``block_size`` ids, ``producer.id.block.size``); ``partitions``: the
    broker's :class:`~sparklog.server.partitions.PartitionManager` (the producer
    epochs its open partitions know); ``run_io`` runs a blocking call on the I/O
    threads; ``binding`` issues and checks producer tokens (the broker's
    :attr:`~sparklog.security.session.BrokerSecurity.producer_ids`). Transactional ids
    and their holders are kept in memory."""

    def __init__(self, store, partitions, *, block_size: int, run_io,
                 binding: ProducerIdBinding):
        self.store = store
        self.binding = binding
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

        The answer carries the ``producer_token`` binding the id to the caller's
        principal (:meth:`binder`); the authorizer has checked Write on the
        transactional id (:mod:`sparklog.security.enforce`).
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
            return self._answer(pid, epoch, ctx)
        if pid >= 0:
            for w in list(self.partitions.writers.values()):
                known = w.state.producers.get(pid)
                if known is not None and known.epoch > epoch:
                    raise InvalidProducerEpochError(
                        f"InitProducerId: producer id {pid} epoch {epoch} is older than "
                        f"epoch {known.epoch} already used on partition {w.name} (fenced)")
        return self._answer(await self._new_producer_id(), 0, ctx)

    def _answer(self, pid: int, epoch: int, ctx) -> dict:
        token = self.binding.token(pid, principal_of(getattr(ctx, "session", None)))
        return {**_NO_ERROR, "producer_id": pid, "producer_epoch": epoch,
                "producer_token": token}

    def binder(self, token, ctx, partition: str):
        """The check a partition's writer runs on the validated frames of one Produce
        request (``bound(frames)``, frames as ``(position, header)``): it raises
        InvalidProducerIdMappingError unless every producer id they name is bound by
        ``token`` (the request's ``producer_token`` for ``partition``) to the principal
        of the request's connection (``ctx``). It runs before the producer state is
        consulted, so a refused request changes no producer state."""
        principal = principal_of(getattr(ctx, "session", None))

        def bound(frames) -> None:
            for pid in {h.producer_id for _, h in frames} - {NO_PRODUCER_ID}:
                if not self.binding.bound(pid, principal, token):
                    what = "without a producer token" if not token else \
                        "with a producer token that does not bind it to this principal"
                    raise InvalidProducerIdMappingError(
                        f"partition {partition}: frames of producer id {pid} sent by "
                        f"{principal} {what}: a producer id may only be used by the "
                        "client that obtained it with InitProducerId (and its principal)")
        return bound

    async def _new_producer_id(self) -> int:
        """The next producer id of the block this broker reserved (a new block when it
        is used up)."""
        if self._pid_next >= self._pid_end:
            size = self.block_size
            self._pid_next = await self.run_io(self.store.allocate_producer_ids, size)
            self._pid_end = self._pid_next + size
        pid, self._pid_next = self._pid_next, self._pid_next + 1
        return pid
