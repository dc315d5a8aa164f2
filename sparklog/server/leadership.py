"""Who leads a broker's partitions: :class:`StandaloneLeadership` or, in cluster mode,
:class:`BrokerLeadership` (ZooKeeper states -> open/close logs).

:func:`leadership_for` makes the one a coordination store calls for; the broker is
given it at construction and hands it to its
:class:`~sparklog.server.partitions.PartitionManager` and request handlers, which
ask it (:meth:`~BrokerLeadership.check`, :meth:`~BrokerLeadership.checked_result`,
:meth:`~BrokerLeadership.metadata`...) without knowing the mode.

**Standalone** (a store whose ``assigns_leaders`` is false): the broker that opens a
partition leads it; :class:`StandaloneLeadership` claims the broker's
:class:`~sparklog.server.instance.InstanceRecord` at start (a predecessor that died
has its partitions fenced as they open) and releases it at stop. Its checks pass.

**Cluster mode.** The controller writes each partition's leader and leader epoch; every broker's
:class:`~sparklog.coordination.zkview.ClusterView` sees the write. :class:`BrokerLeadership`
turns what the view reports into actions on the broker's event loop, one partition at a
time and in order:

* **this broker became the leader** (or its epoch changed): close any writer of an older
  epoch, then open the partition log *fencing* the previous writer — the storage lease
  is revoked (HDFS lease recovery; locally the lease file is taken over), so an old
  leader that is still running (paused, partitioned from ZooKeeper) can no longer add a
  byte; the tail is recovered and appends resume at the last valid offset, stamped with
  the new epoch; the producer state is rebuilt from the log, so an idempotent producer's
  retry of a batch the old leader appended is recognised as a duplicate;
* **another broker became the leader**, or the topic was deleted: close the writer
  (queued requests are answered; their acknowledgement is checked below).

:meth:`BrokerLeadership.check` is what the broker calls before acknowledging a write or
serving a read: it passes only while the view *proves* this broker leads the partition
at the writer's epoch (session connected and re-read since any connection loss), so a
broker cut off from ZooKeeper stops acknowledging at once and resumes when the session
returns. Kafka's name for the refusal is NotLeaderOrFollower (retriable: clients
refresh their metadata and retry on the new leader).

It acts on the broker's partitions through their owner, the
:class:`~sparklog.server.partitions.PartitionManager`, and reads leadership from
the coordination store (a store whose ``assigns_leaders`` is true: ZooKeeper's).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..errors import (
    InvalidArgumentError,
    LeaseExpiredError,
    NotLeaderError,
    SparklogError,
    StorageError,
)
from ..storage import FileIO
from .instance import InstanceRecord

if TYPE_CHECKING:
    from ..coordination.base import LeaderAndEpoch
    from .partitions import PartitionManager

log = logging.getLogger(__name__)


def leadership_for(store, fileio: FileIO, storage_uri: str, broker_id: int):
    """The leadership of broker ``broker_id`` on ``store``: a
    :class:`BrokerLeadership` when the store assigns leaders (ZooKeeper), else a
    :class:`StandaloneLeadership` keeping its instance record under ``storage_uri``."""
    if store.assigns_leaders:
        return BrokerLeadership(store, broker_id)
    return StandaloneLeadership(InstanceRecord(fileio, storage_uri, broker_id))


def check_leadership(leadership, store, broker_id: int) -> None:
    """InvalidArgumentError unless ``leadership`` (given to a broker) fits its ``store``
    and ``broker_id``."""
    if not isinstance(leadership, (StandaloneLeadership, BrokerLeadership)):
        raise InvalidArgumentError(
            f"leadership must be a StandaloneLeadership or a BrokerLeadership, got "
            f"{type(leadership).__name__}")
    if leadership.cluster != bool(store.assigns_leaders):
        raise InvalidArgumentError(
            f"a {type(leadership).__name__} does not fit the coordination store "
            f"{type(store).__name__} (assigns_leaders={store.assigns_leaders}): use "
            "leadership_for(store, ...)")
    if isinstance(leadership, BrokerLeadership) and leadership.broker_id != broker_id:
        raise InvalidArgumentError(
            f"the leadership is broker {leadership.broker_id}'s, not broker {broker_id}'s")


class StandaloneLeadership:
    """Standalone mode (module docstring): the broker that opens a partition leads it;
    ``instance`` is the broker's :class:`~sparklog.server.instance.InstanceRecord`."""

    #: False: the broker itself creates and deletes topics and leads what it opens
    cluster = False

    def __init__(self, instance: InstanceRecord):
        self.instance = instance

    def claim(self) -> bool:
        """Claim the instance record (blocking); True when the previous broker process
        died without stopping: every partition is then fenced as it opens."""
        return self.instance.claim()

    def start(self, partitions: PartitionManager) -> None:
        """Nothing to follow: the broker leads what it opens."""

    async def stop(self, timeout: float) -> None:
        """No handover can be under way."""

    def controlled_shutdown(self, timeout: float) -> None:
        """Nothing to hand over: no other broker serves the storage root."""

    def release(self) -> None:
        """Delete the instance record (blocking; graceful stop)."""
        self.instance.release()

    def check(self, topic: str, partition: int, writer=None) -> None:
        """Passes: the broker leads every partition it opens."""

    def checked_result(self, topic: str, partition: int, result):
        """``result`` unchanged: the broker may acknowledge what it wrote."""
        return result

    def check_failed_writer(self, writer) -> None:
        """Passes: the failed log is reopened (its lease recovered)."""

    def metadata(self, listener: str | None = None) -> None:
        """None: Metadata names this broker alone."""
        return None

    def broker_count(self) -> int:
        """1: the brokers a topic's partitions are spread over."""
        return 1


class BrokerLeadership:
    """Drives a broker's partition writers from ZooKeeper leadership (module docstring).

    ``store``: the :class:`~sparklog.coordination.zkstore.ZkCoordinationStore`;
    ``broker_id``: this broker's. :meth:`start` binds it to the broker's
    :class:`~sparklog.server.partitions.PartitionManager` (bound to its event loop)."""

    #: True: the controller assigns leaders; topics are created through it
    cluster = True
    #: the partitions it opens and closes (bound by :meth:`start`)
    partitions: PartitionManager

    def __init__(self, store, broker_id: int):
        self.broker_id = broker_id
        self.store = store
        self._desired: dict[tuple[str, int], LeaderAndEpoch | None] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False

    def claim(self) -> bool:
        """False: every takeover fences already (the controller's leader epochs)."""
        return False

    def start(self, partitions: PartitionManager) -> None:
        """Open and close ``partitions`` as leadership changes (call on the broker's
        loop, before registering; partitions the broker already leads are reported by
        the first refresh)."""
        self.partitions = partitions
        self.store.add_leadership_listener(self._on_changes)
        self.store.view.add_config_listener(self._on_config)
        loop = self.partitions.loop
        for tp in self.store.view.led_partitions():
            loop.call_soon_threadsafe(self._apply, {tp: self.store.view.state(*tp)})

    async def stop(self, timeout: float) -> None:
        """Stop reacting, and let the handovers under way end (up to ``timeout`` seconds;
        then they are cancelled), so that no task is left on the event loop when it
        closes. Call on the broker's loop before it closes its writers: a handover that
        was opening a log finishes first, and the broker then closes that log too."""
        self._stopping = True
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            log.warning("broker %d: a leadership handover still running at shutdown was "
                        "cancelled", self.broker_id)
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def controlled_shutdown(self, timeout: float) -> None:
        """Kafka's controlled shutdown (blocking): ask the controller to move every
        leadership of this broker to another live broker, and wait up to ``timeout``
        seconds for it."""
        self.store.controlled_shutdown(self.broker_id, timeout)

    def release(self) -> None:
        """Nothing to release: the registration is the broker's to withdraw."""

    # --- reacting (view thread -> event loop) ----------------------------------------------
    def _on_changes(self, changes: dict) -> None:
        loop = self.partitions.loop
        if not loop.is_closed():
            loop.call_soon_threadsafe(self._apply, changes)

    def _apply(self, changes: dict) -> None:
        if self._stopping:
            return
        for tp, state in changes.items():
            self._desired[tp] = state
            self._spawn(self._converge(tp))

    def _spawn(self, coro) -> None:
        task = self.partitions.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _converge(self, tp) -> None:
        lock = self._locks.setdefault(tp, asyncio.Lock())
        async with lock:
            state = self._desired.get(tp)
            me = self.broker_id
            self.partitions.forget_lost(tp)  # a lost log is checked again, as it reopens
            writer = self.partitions.writers.get(tp)
            if state is not None and state.leader == me:
                if writer is not None and writer.log.leader_epoch == state.leader_epoch \
                        and not writer.failed:
                    return
                if writer is not None:
                    await self._close(tp, writer, f"leader epoch {state.leader_epoch}")
                if self._stopping or self.partitions.closing:
                    return
                try:
                    await self.partitions.writer(*tp)
                    log.info("partition %s-%d: broker %d took over as leader (epoch %d)",
                             tp[0], tp[1], me, state.leader_epoch)
                except SparklogError as exc:  # superseded meanwhile, or a storage error
                    log.warning("partition %s-%d: taking leadership (epoch %d) failed: %s",
                                tp[0], tp[1], state.leader_epoch, exc)
            elif writer is not None:
                why = "topic deleted" if state is None else \
                    f"broker {state.leader} leads it (epoch {state.leader_epoch})"
                await self._close(tp, writer, why)

    async def _close(self, tp, writer, why: str) -> None:
        self.partitions.detach(tp, writer)
        log.info("partition %s-%d: broker %d resigns leadership: %s", tp[0], tp[1],
                 self.broker_id, why)
        try:
            await writer.close()
        except Exception as exc:  # noqa: BLE001 - the new leader fenced us: nothing to save
            log.info("partition %s-%d: closing after losing leadership: %s", tp[0], tp[1], exc)

    def _on_config(self, topic: str) -> None:  # view thread
        loop = self.partitions.loop
        if not loop.is_closed() and not self._stopping:
            loop.call_soon_threadsafe(lambda: self._spawn(self._reload_config(topic)))

    async def _reload_config(self, topic: str) -> None:
        """Another broker altered ``topic``: re-read its config from the storage and
        apply it to the open writers (as the altering broker did to its own)."""
        try:
            tc = await self.partitions.reload_topic(topic)
        except SparklogError as exc:
            log.info("topic %s: config change not applied: %s", topic, exc)
            return
        log.info("topic %s: config version %d applied", topic, tc.version)

    # --- the broker's checks ------------------------------------------------------------------
    def check(self, topic: str, partition: int, writer=None) -> int:
        """Return this broker's leader epoch of the partition, or raise NotLeaderError
        when it cannot prove it leads it now (at ``writer``'s epoch, if given)."""
        epoch = self.store.leader_epoch(topic, partition)
        if epoch is None:
            state = self.store.view.state(topic, partition)
            if not self.store.view.trusted:
                raise NotLeaderError(
                    f"broker {self.broker_id} cannot prove it leads {topic}-{partition}:"
                    " its ZooKeeper session is disconnected or not re-read yet")
            leader = state.leader if state is not None else -1
            raise NotLeaderError(f"broker {self.broker_id} does not lead "
                                 f"{topic}-{partition} (leader: broker {leader})")
        if writer is not None and writer.log.leader_epoch != epoch:
            raise NotLeaderError(
                f"broker {self.broker_id}: {topic}-{partition} moved to leader epoch "
                f"{epoch} (this writer has epoch {writer.log.leader_epoch})")
        return epoch

    def checked_result(self, topic: str, partition: int, result):
        """A produce result as the broker may acknowledge it: unchanged while this broker
        provably leads the partition; else (or when the write hit a storage error, such
        as the lease a new leader took over) the same result with a retriable
        NotLeaderError, so the producer refreshes its metadata and retries on the new
        leader (an idempotent producer's retry is de-duplicated there)."""
        error = result.error
        if error is not None and not isinstance(error, StorageError):
            return result
        try:
            self.check(topic, partition)
            if error is None:
                return result
            raise NotLeaderError(f"partition {topic}-{partition}: write failed on broker "
                                 f"{self.broker_id} ({error}); retry")
        except NotLeaderError as exc:
            return type(result)(error=exc)

    def check_failed_writer(self, writer) -> None:
        """For a writer whose log failed: NotLeaderError when it failed because another
        writer took over its storage lease (a new leader fenced this broker: the
        broker must not fence it back by reopening; ZooKeeper tells who leads)."""
        failure = writer.log.failed
        if isinstance(failure, LeaseExpiredError):
            raise NotLeaderError(
                f"partition {writer.name}: broker {self.broker_id} was fenced (another "
                "broker took over the storage lease); waiting for ZooKeeper's leader")

    def broker_count(self) -> int:
        """The live brokers the controller spreads partitions over (at least 1)."""
        return max(len(self.store.view.brokers()), 1)

    def metadata(self, listener: str | None = None) -> dict:
        """What a Metadata response needs: ``brokers`` [{node_id, host, port}] (each
        broker's address on the listener named ``listener``, the one the client
        connected to), ``controller_id`` and ``leaders`` {(topic, p): (leader,
        leader_epoch)}."""
        view = self.store.view
        brokers = sorted(view.brokers().values(), key=lambda b: b.node_id)
        return {
            "brokers": [dict(zip(("node_id", "host", "port"),
                                 (b.node_id, *b.endpoint(listener)))) for b in brokers],
            "controller_id": view.controller_id(),
            "leaders": {tp: (s.leader, s.leader_epoch) for tp, s in view.states().items()},
        }
