"""The cluster controller: one broker at a time assigns partition leaders (Kafka 0.8's).

Every broker of a ZooKeeper cluster runs a :class:`Controller`; the one that creates the
ephemeral ``/controller`` node is active, the others watch that node and try again when
it vanishes. On winning, the controller increments ``/controller_epoch`` (compare-and-
set on the node's version) and keeps the znode version it wrote: every state write it
makes afterwards is a ZooKeeper transaction that first checks that version, so a
controller that lost its session and does not know it yet (a zombie) cannot overwrite
its successor's decisions.

The active controller watches ``/brokers/ids`` (broker loss and arrival),
``/brokers/topics`` and each topic's assignment (new topics, more partitions),
``/admin/delete_topics`` and ``/admin/controlled_shutdown``. Every watch only schedules a
*reconcile* on the controller's event thread, which re-reads that state and then:

1. deletes requested topics (leaders set to -1 so their brokers close the logs, then the
   topic's storage directory and its nodes are removed);
2. gives a leader to every partition whose leader is gone, shutting down, or missing
   (least-loaded live broker, :func:`~sparklog.coordination.assignment.elect_leaders`),
   and on a broker's arrival (or a controller change) moves leaderships so that no two
   brokers differ by more than one (``auto.leader.rebalance.enable``);
3. writes each changed partition's ``state`` with ``leader_epoch`` one higher.

A new controller rebuilds its whole view from ZooKeeper (and adds topics that exist on
the storage but not yet in ZooKeeper), so nothing depends on the old one's memory.
"""

from __future__ import annotations

import logging

from ..errors import UnknownTopicOrPartitionError
from .assignment import elect_leaders, preferred_replicas
from .base import LOG_ENDS_DOCUMENT, NO_LEADER, LeaderAndEpoch, cas_attempts
from .zkclient import EventWorker
from .zkpaths import (
    ADMIN_CONTROLLED_SHUTDOWN,
    ADMIN_DELETE_TOPICS,
    BROKERS_IDS,
    BROKERS_TOPICS,
    CONSUMERS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    controlled_shutdown_path,
    decode_assignment,
    decode_state,
    delete_topic_path,
    document_path,
    dumps,
    encode_assignment,
    encode_state,
    loads,
    now_ms,
    partition_state_path,
    partitions_path,
    topic_config_path,
    topic_path,
)

log = logging.getLogger(__name__)

#: partition state writes per ZooKeeper transaction (each also checks the epoch)
WRITE_BATCH = 200


class NotControllerError(Exception):
    """Internal: a fenced write found that another controller took over."""


class Controller:
    """Controller election and, while active, leader assignment (see module docstring).

    ``client``: a started kazoo client of this broker's session; ``topic_store``: the
    storage's :class:`~sparklog.metadata.TopicStore` (topic deletion and the rebuild of
    missing topic nodes need it; None skips both); ``auto_leader_rebalance``: Kafka's
    ``auto.leader.rebalance.enable``.
    """

    def __init__(self, client, broker_id: int, *, topic_store=None,
                 auto_leader_rebalance: bool = True):
        self.client = client
        self.broker_id = broker_id
        self.topic_store = topic_store
        self.auto_leader_rebalance = auto_leader_rebalance
        self.worker = EventWorker(f"controller-{broker_id}")
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._pending = False
        self._known_live: set[int] = set()
        self._stopped = False

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> "Controller":
        """Join the election (asynchronously)."""
        self.worker.start()
        self.client.add_listener(self._on_session_state)
        self.worker.submit(self._elect)
        return self

    def stop(self) -> None:
        """Leave: stop the event thread and, if active, delete ``/controller`` so that
        another broker takes over at once."""
        if self._stopped:
            return
        self._stopped = True
        self.client.remove_listener(self._on_session_state)
        self.worker.submit(self._resign, True)
        self.worker.stop()

    def _on_session_state(self, state) -> None:  # kazoo thread: only enqueue
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self.worker.submit(self._resign, False)
        elif state == KazooState.CONNECTED:
            self.worker.submit(self._elect)

    def _watch(self, event=None) -> None:  # kazoo thread: only enqueue
        self.schedule()

    def schedule(self) -> None:
        """Ask for a reconcile (coalesced: one queued at a time)."""
        if not self._pending:
            self._pending = True
            self.worker.submit(self._reconcile)

    # --- election ------------------------------------------------------------------------
    def _controller_changed(self, event=None) -> None:  # kazoo thread
        self.worker.submit(self._elect)

    def _elect(self) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        if self._stopped:
            return
        value = dumps({"version": 1, "brokerid": self.broker_id, "timestamp": str(now_ms())})
        try:
            self.client.create(CONTROLLER, value, ephemeral=True)
        except NodeExistsError:
            try:
                _, stat = self.client.get(CONTROLLER, watch=self._controller_changed)
            except NoNodeError:
                self.worker.submit(self._elect)  # vanished meanwhile: try again
                return
            if stat.owner_session_id != self.client.client_id[0]:
                if self.active:
                    log.warning("controller %d: another broker holds /controller; resigning",
                                self.broker_id)
                self.active = False
                return
            if self.active:
                return  # still ours (reconnected within the session)
        else:
            self.client.exists(CONTROLLER, watch=self._controller_changed)
        self._become_active()

    def _become_active(self) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for _ in cas_attempts("increment of /controller_epoch"):
            try:
                data, stat = self.client.get(CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.client.create(CONTROLLER_EPOCH, b"1")
                except NodeExistsError:
                    continue
                self.epoch, self._epoch_version = 1, 0
                break
            try:
                epoch = int(loads(data, CONTROLLER_EPOCH)) + 1
                stat = self.client.set(CONTROLLER_EPOCH, str(epoch).encode(),
                                       version=stat.version)
            except BadVersionError:
                continue
            self.epoch, self._epoch_version = epoch, stat.version
            break
        self.active = True
        self._known_live = set()
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, self.epoch)
        self._add_storage_topics()
        self.schedule()

    def _resign(self, delete_node: bool) -> None:
        was = self.active
        self.active = False
        if was and delete_node and self.client.connected:
            try:
                _, stat = self.client.get_async(CONTROLLER).get(timeout=2.0)
                if stat.owner_session_id == self.client.client_id[0]:
                    self.client.delete_async(CONTROLLER, version=stat.version).get(timeout=2.0)
            except Exception:  # noqa: BLE001 - the session ends anyway
                pass
        if was:
            log.info("broker %d resigned as controller (epoch %d)", self.broker_id, self.epoch)

    # --- reconcile -------------------------------------------------------------------------
    def _children(self, path: str, watch: bool = True) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return self.client.get_children(path, watch=self._watch if watch else None)
        except NoNodeError:
            self.client.ensure_path(path)
            return self.client.get_children(path, watch=self._watch if watch else None)

    def _reconcile(self) -> None:
        self._pending = False
        if not self.active or self._stopped:
            return
        try:
            self._reconcile_once()
        except NotControllerError:
            log.warning("controller %d (epoch %d) was fenced by a newer controller",
                        self.broker_id, self.epoch)
            self.active = False
            self.worker.submit(self._elect)

    def _reconcile_once(self) -> None:
        from kazoo.exceptions import NoNodeError

        live = {int(c) for c in self._children(BROKERS_IDS) if c.isdigit()}
        shutting = {int(c) for c in self._children(ADMIN_CONTROLLED_SHUTDOWN) if c.isdigit()}
        for stale in shutting - live:  # the broker is gone: its request is done
            self._delete_quietly(controlled_shutdown_path(stale))
        shutting &= live
        deletions = set(self._children(ADMIN_DELETE_TOPICS))
        topics = self._children(BROKERS_TOPICS)
        assignment: dict[str, dict[int, list[int]]] = {}
        for topic in topics:
            try:
                data, _ = self.client.get(topic_path(topic), watch=self._watch)
            except NoNodeError:
                continue
            except Exception:  # noqa: BLE001 - an invalid name or value: skip, say why
                log.exception("controller: ignoring topic node %r", topic)
                continue
            if data:
                assignment[topic] = decode_assignment(data, topic_path(topic))
        for topic in sorted(deletions):
            self._delete_topic(topic, assignment.pop(topic, None))
        states = self._read_states(assignment)
        partitions = [(t, p) for t, parts in assignment.items() for p in parts]
        current = {tp: s[0].leader for tp, s in states.items() if s is not None}
        preferred = {(t, p): ids for t, parts in assignment.items() for p, ids in parts.items()}
        arrived = live - self._known_live
        rebalance = self.auto_leader_rebalance and bool(arrived)
        changes = elect_leaders(partitions, current, live, preferred=preferred,
                                excluded=shutting, rebalance=rebalance)
        for tp in partitions:  # partitions never assigned get a state node even leaderless
            if states.get(tp) is None and tp not in changes:
                changes[tp] = NO_LEADER
        if changes:
            self._write_states(changes, states)
        self._known_live = live

    def _read_states(self, assignment: dict) -> dict:
        """{(topic, p): (LeaderAndEpoch, zk version) or None}, read in parallel."""
        from kazoo.exceptions import NoNodeError

        pending = {}
        for topic, parts in assignment.items():
            for p in parts:
                pending[(topic, p)] = self.client.get_async(partition_state_path(topic, p))
        out: dict = {}
        for tp, result in pending.items():
            try:
                data, stat = result.get()
            except NoNodeError:
                out[tp] = None
                continue
            state, _ = decode_state(data, partition_state_path(*tp))
            out[tp] = (state, stat.version)
        return out

    def _write_states(self, changes: dict, states: dict) -> None:
        """Write the new leaders, each with leader_epoch + 1, in epoch-fenced batches."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        items = sorted(changes.items())
        for tp, _ in items:
            if states.get(tp) is None:
                self.client.ensure_path(f"{partitions_path(tp[0])}/{tp[1]}")
        for i in range(0, len(items), WRITE_BATCH):
            txn = self.client.transaction()
            txn.check(CONTROLLER_EPOCH, self._epoch_version)
            for (topic, p), leader in items[i:i + WRITE_BATCH]:
                path = partition_state_path(topic, p)
                old = states.get((topic, p))
                if old is None:
                    txn.create(path, encode_state(LeaderAndEpoch(leader, 0), self.epoch))
                else:
                    new = LeaderAndEpoch(leader, old[0].leader_epoch + 1)
                    txn.set_data(path, encode_state(new, self.epoch), version=old[1])
            results = txn.commit()
            errors = [r for r in results if isinstance(r, Exception)]
            if not errors:
                continue
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise NotControllerError()
            conflicts = [r for r in errors if isinstance(r, (BadVersionError, NodeExistsError,
                                                            NoNodeError))]
            log.warning("controller %d: %d state writes conflicted (%s); reconciling again",
                        self.broker_id, len(conflicts), conflicts[:1])
            self.schedule()
            return
        for (topic, p), leader in items:
            log.info("controller %d: %s-%d leader -> %d", self.broker_id, topic, p, leader)

    # --- topics ------------------------------------------------------------------------------
    def _delete_topic(self, topic: str, parts: dict | None) -> None:
        """Leaders to -1 (fenced), the storage directory renamed away
        (:meth:`TopicStore.retire_topic`: its data is removed later by the brokers,
        :mod:`sparklog.server.retired`), then the topic's nodes (with the record of how
        far its logs went: a topic created later under its name starts at offset 0)."""
        if parts:
            states = self._read_states({topic: parts})
            changes = {tp: NO_LEADER for tp, s in states.items()
                       if s is not None and s[0].leader != NO_LEADER}
            if changes:
                self._write_states(changes, states)
        if self.topic_store is not None:
            try:
                self.topic_store.retire_topic(topic)
            except UnknownTopicOrPartitionError:
                pass
        self._delete_quietly(topic_path(topic), recursive=True)
        self._delete_quietly(topic_config_path(topic))
        self._delete_quietly(document_path(f"{LOG_ENDS_DOCUMENT}/{topic}"))
        self._forget_offsets(topic)
        self._delete_quietly(delete_topic_path(topic))
        log.info("controller %d: deleted topic %s", self.broker_id, topic)

    def _add_storage_topics(self) -> None:
        """Create ``/brokers/topics/<t>`` for topics the storage has and ZooKeeper lacks
        (a broker died between the two writes of a topic creation)."""
        from kazoo.exceptions import NodeExistsError

        if self.topic_store is None:
            return
        known = set(self._children(BROKERS_TOPICS, watch=False))
        deleting = set(self._children(ADMIN_DELETE_TOPICS, watch=False))
        live = [int(c) for c in self._children(BROKERS_IDS, watch=False) if c.isdigit()]
        for topic in self.topic_store.list_topics():
            if topic in known or topic in deleting:
                continue
            try:
                count = self.topic_store.describe_topic(topic).partitions
            except UnknownTopicOrPartitionError:
                continue
            try:
                self.client.create(topic_path(topic),
                                   encode_assignment(preferred_replicas(count, live)),
                                   makepath=True)
                log.info("controller %d: registered storage topic %s", self.broker_id, topic)
            except NodeExistsError:
                pass

    def _forget_offsets(self, topic: str) -> None:
        """Every group's committed offsets of a deleted topic go with it (Kafka's
        behaviour: a topic re-created under the name starts from the reset policy)."""
        from kazoo.exceptions import NoNodeError

        try:
            groups = self.client.get_children(CONSUMERS)
        except NoNodeError:
            return
        for node in groups:
            self._delete_quietly(f"{CONSUMERS}/{node}/offsets/{topic}", recursive=True)

    def _delete_quietly(self, path: str, recursive: bool = False) -> None:
        from kazoo.exceptions import NoNodeError, NotEmptyError

        try:
            self.client.delete(path, recursive=recursive)
        except (NoNodeError, NotEmptyError):
            pass
