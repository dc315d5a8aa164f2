"""ZkCoordinationStore: the cluster-mode :class:`CoordinationStore` on ZooKeeper (kazoo).

One store per broker process (or admin tool), one ZooKeeper session each. It keeps a
:class:`~sparklog.coordination.zkview.ClusterView` (watched cache of brokers,
controller and partition states) and, once a broker registers, runs that broker's
:class:`~sparklog.coordination.controller.Controller` candidate.

How each method is made atomic (layout in :mod:`sparklog.coordination.zkpaths`):

* ``register_broker``: an ephemeral ``/brokers/ids/<id>`` create; when the node exists
  under another session the store waits up to one session timeout (a restarted broker's
  previous session may still be expiring) and then refuses the duplicate id. After a
  session expiry the registration is re-created automatically.
* ``acquire_leadership``: granted only when the view proves that the controller made this
  broker the leader (see :mod:`~sparklog.coordination.zkview`); the epoch is the one the
  controller wrote. Leaders are chosen by the controller alone.
* ``release_leadership``: a controlled shutdown request ``/admin/controlled_shutdown/<id>``;
  the controller moves every leadership of the broker elsewhere; the call waits for it.
* ``allocate_producer_ids``: compare-and-set of ``/latest_producer_id_block``.
* ``commit_offsets``: one ZooKeeper transaction over ``/consumers/<g>/offsets/<t>/<p>``
  (the node holds the offset as a decimal string, as Kafka 0.8 wrote it; with a metadata
  string it holds ``{"offset": n, "metadata": s}``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from ..errors import CoordinationError, InvalidArgumentError, InvalidConfigError, NotLeaderError
from ..metadata.topic import validate_partition, validate_topic_name
from ..names import name_from_storage, znode_name
from .base import (
    BrokerInfo,
    CommittedOffset,
    CoordinationStore,
    LeaderAndEpoch,
    cas_attempts,
    validate_group_id,
    validate_offsets,
)
from .controller import Controller
from .zkclient import DEFAULT_SESSION_TIMEOUT_MS, close_zk, connect_zk
from .zkpaths import (
    CLUSTER_ID,
    CONSUMERS,
    PRODUCER_ID_BLOCK,
    broker_path,
    check_broker_id,
    controlled_shutdown_path,
    decode_document,
    document_path,
    dumps,
    encode_broker,
    group_offsets_path,
    group_path,
    loads,
)
from .zkview import ClusterView

log = logging.getLogger(__name__)


def encode_offset(om: CommittedOffset) -> bytes:
    """Value of an offsets node: Kafka 0.8's decimal string, or JSON with metadata."""
    if om.metadata:
        return dumps({"offset": om.offset, "metadata": om.metadata})
    return str(om.offset).encode()


def decode_offset(data: bytes, mtime_ms: int, path: str) -> CommittedOffset:
    """Decode an offsets node (CoordinationError when it holds something else)."""
    value = loads(data, path)
    try:
        if isinstance(value, dict):
            return CommittedOffset(int(value["offset"]), str(value.get("metadata", "")),
                                     mtime_ms)
        return CommittedOffset(int(value), "", mtime_ms)
    except (TypeError, KeyError, ValueError, InvalidArgumentError):
        raise CoordinationError(f"ZooKeeper node {path} is not a committed offset: "
                                f"{value!r}") from None


class ZkCoordinationStore(CoordinationStore):
    """Cluster state in ZooKeeper under the connect string's chroot.

    ``topic_store``: the storage's :class:`~sparklog.metadata.TopicStore` (the
    controller deletes topics from it and registers storage topics missing in ZooKeeper);
    ``session_timeout_ms``: ``zookeeper.session.timeout.ms``;
    ``auto_leader_rebalance``: the controller's ``auto.leader.rebalance.enable``;
    ``security``: ZooKeeper authentication and node ACLs (``zookeeper.set.acl``:
    :mod:`sparklog.security.zkacl`).
    """

    assigns_leaders = True  # the controller's (see CoordinationStore)

    def __init__(self, connect: str, *, topic_store=None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 connection_timeout_ms: int | None = None,
                 auto_leader_rebalance: bool = True, security: dict | None = None):
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.topic_store = topic_store
        self.auto_leader_rebalance = auto_leader_rebalance
        self.client = connect_zk(connect, session_timeout_ms=session_timeout_ms,
                                 connection_timeout_ms=connection_timeout_ms,
                                 security=security)
        self.view = ClusterView(self.client)
        self.controller: Controller | None = None
        self._broker: BrokerInfo | None = None
        self._lock = threading.RLock()
        self._closed = False
        self._cluster_id: str | None = None
        self.client.add_listener(self._on_session_state)
        self.view.start()
        if not self.view.wait_refreshed(max(5.0, session_timeout_ms / 1000.0)):
            self.close()
            raise CoordinationError(f"ZooKeeper at {connect!r}: could not read the cluster "
                                    "state")

    # --- sessions ------------------------------------------------------------------------
    def _on_session_state(self, state) -> None:  # kazoo thread
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and getattr(self, "_session_lost", False):
            self._session_lost = False
            self.view.worker.submit(self._reregister)

    def _reregister(self) -> None:
        broker = self._broker
        if broker is None or self._closed:
            return
        try:
            self._create_registration(broker, wait_s=self.session_timeout_ms / 1000.0)
            log.info("broker %d re-registered in ZooKeeper after its session expired",
                     broker.node_id)
        except Exception:  # noqa: BLE001 - keep running; the operator sees why
            log.exception("broker %d could not re-register in ZooKeeper", broker.node_id)

    # --- cluster and brokers -----------------------------------------------------------------
    def cluster_id(self) -> str:
        """The cluster id in ``/cluster/id`` (created on first use, Kafka's node). Read
        once: the node never changes, and every Metadata and ApiVersions answer names
        it, so that an answer needs no ZooKeeper round trip and no storage I/O thread
        (the watched view already holds its leaders and brokers)."""
        from kazoo.exceptions import NodeExistsError

        if self._cluster_id is not None:
            return self._cluster_id
        try:
            self.client.create(CLUSTER_ID, dumps({"version": "1", "id": uuid.uuid4().hex}),
                               makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.client.get(CLUSTER_ID)
        self._cluster_id = str(loads(data, CLUSTER_ID)["id"])
        return self._cluster_id

    def register_broker(self, broker: BrokerInfo) -> None:
        """Register ``broker`` (ephemeral) and enter the controller election.

        InvalidConfigError when another live session keeps that id registered for longer
        than one session timeout."""
        check_broker_id(broker.node_id)
        with self._lock:
            if self._broker is not None and self._broker.node_id != broker.node_id:
                raise InvalidArgumentError(
                    f"this store already registered broker {self._broker.node_id}; "
                    f"cannot also register broker {broker.node_id}")
            self._create_registration(broker, wait_s=self.session_timeout_ms / 1000.0 + 1.0)
            self._broker = broker
            self.view.broker_id = broker.node_id
            self._delete_quietly(controlled_shutdown_path(broker.node_id))  # a previous life's
            if self.controller is None:
                self.controller = Controller(
                    self.client, broker.node_id, topic_store=self.topic_store,
                    auto_leader_rebalance=self.auto_leader_rebalance).start()
        log.info("broker %d registered at %s in ZooKeeper %s", broker.node_id, broker.address,
                 self.connect)

    def _create_registration(self, broker: BrokerInfo, wait_s: float) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        path = broker_path(broker.node_id)
        deadline = time.monotonic() + wait_s
        holder = "its registration vanished and came back meanwhile"
        while time.monotonic() < deadline:
            try:
                self.client.create(path, encode_broker(broker), ephemeral=True)
                return
            except NodeExistsError:
                pass
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                continue
            if stat.owner_session_id == self.client.client_id[0]:
                self.client.set(path, encode_broker(broker))
                return
            holder = data.decode(errors="replace")
            time.sleep(0.1)
        raise InvalidConfigError(
            f"broker.id {broker.node_id} is already registered in ZooKeeper "
            f"{self.connect!r} by another live broker ({holder}); "
            "each broker needs its own broker.id")

    def unregister_broker(self, broker_id: int) -> None:
        """Delete this store's registration of ``broker_id`` (no error if absent)."""
        with self._lock:
            if self._broker is None or self._broker.node_id != broker_id:
                return
            self._broker = None
            if not self.client.connected:
                return  # the session ends with close(): the ephemeral node goes with it
            try:
                path = broker_path(broker_id)
                _, stat = self.client.get_async(path).get(timeout=2.0)
                if stat.owner_session_id == self.client.client_id[0]:
                    self.client.delete_async(path).get(timeout=2.0)
            except Exception:  # noqa: BLE001 - absent or the session is gone: either way unregistered
                pass

    def live_brokers(self) -> dict[int, BrokerInfo]:
        """Registered live brokers by id (watched cache)."""
        return self.view.brokers()

    def controller_id(self) -> int:
        """The controller's broker id (-1 while none is elected)."""
        return self.view.controller_id()

    # --- partition leadership --------------------------------------------------------------
    def partition_state(self, topic: str, partition: int) -> LeaderAndEpoch | None:
        """The partition's leader and leader epoch as the controller last wrote them."""
        validate_topic_name(topic)
        validate_partition(partition, topic=topic)
        return self.view.state(topic, partition)

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        """This broker's epoch for the partition if it can prove it leads it now, else
        None (cheap: call it before acknowledging a write)."""
        return self.view.leader_epoch(topic, partition)

    def add_leadership_listener(self, fn) -> None:
        """Call ``fn({(topic, partition): LeaderAndEpoch or None})`` on the view's
        thread whenever partition states change (see ClusterView)."""
        self.view.add_listener(fn)

    def acquire_leadership(self, topic: str, partition: int, broker_id: int) -> LeaderAndEpoch:
        """The partition's state if the controller made ``broker_id`` its leader and
        this store can prove it now; NotLeaderError naming the leader otherwise."""
        validate_topic_name(topic)
        validate_partition(partition, topic=topic)
        if self._broker is None or self._broker.node_id != broker_id:
            raise InvalidArgumentError(
                f"broker {broker_id} is not registered through this ZooKeeper store")
        epoch = self.view.leader_epoch(topic, partition)
        state = self.view.state(topic, partition)
        if epoch is not None and state is not None and state.leader_epoch == epoch:
            return state
        if not self.view.trusted:
            raise NotLeaderError(
                f"broker {broker_id} cannot prove it leads {topic}-{partition}: its ZooKeeper "
                "session is disconnected or not re-read yet")
        if state is None:
            raise NotLeaderError(f"{topic}-{partition} has no leader yet (the controller has "
                                 "not assigned it)")
        raise NotLeaderError(f"broker {broker_id} does not lead {topic}-{partition}: the "
                             f"leader is broker {state.leader} (leader epoch "
                             f"{state.leader_epoch})")

    def release_leadership(self, topic: str, partition: int, broker_id: int) -> None:
        """Controlled shutdown of ``broker_id`` (all its partitions move at once): see
        :meth:`controlled_shutdown`. No-op if it does not lead the partition."""
        state = self.view.state(topic, partition)
        if state is None or state.leader != broker_id:
            return
        self.controlled_shutdown(broker_id)

    def release_leaderships(self, partitions, broker_id: int) -> dict:
        """One :meth:`controlled_shutdown` when ``broker_id`` leads any of
        ``partitions`` (the controller moves them all at once), not one look per
        partition."""
        from ..errors import SparklogError

        led = [(t, p) for t, p in partitions
               if (s := self.view.state(t, p)) is not None and s.leader == broker_id]
        if not led:
            return {}
        try:
            self.controlled_shutdown(broker_id)
        except SparklogError as exc:
            return {tp: exc for tp in led}
        return {}

    def controlled_shutdown(self, broker_id: int, timeout_s: float = 10.0) -> bool:
        """Ask the controller to move every leadership of ``broker_id`` to other live
        brokers, and wait until the view shows it leads nothing (Kafka's controlled
        shutdown). Returns True when done, False on timeout or when no other broker is
        live to take over (the broker then just stops; leaders move after its session)."""
        from kazoo.exceptions import NodeExistsError

        check_broker_id(broker_id)
        others = set(self.view.brokers()) - {broker_id}
        if not others:
            return False
        try:
            self.client.create(controlled_shutdown_path(broker_id), b"")
        except NodeExistsError:
            pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(s.leader == broker_id for s in self.view.states().values()):
                return True
            time.sleep(0.02)
        log.warning("controlled shutdown of broker %d timed out after %.1fs", broker_id,
                    timeout_s)
        return False

    # --- producer ids ---------------------------------------------------------------------------
    def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` ids by compare-and-set on ``/latest_producer_id_block``.

        The first block of a fresh ZooKeeper starts at the current time in microseconds,
        above any id an embedded-mode store handed out on the same storage."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidArgumentError(f"producer id count must be a positive int, got {count!r}")
        me = self._broker.node_id if self._broker else -1
        for _ in cas_attempts(f"allocation from {PRODUCER_ID_BLOCK}"):
            try:
                data, stat = self.client.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                start = time.time_ns() // 1000
                try:
                    self.client.create(PRODUCER_ID_BLOCK, dumps({
                        "version": 1, "broker": me, "block_start": str(start),
                        "block_end": str(start + count - 1)}))
                    return start
                except NodeExistsError:
                    continue
            start = int(loads(data, PRODUCER_ID_BLOCK)["block_end"]) + 1
            try:
                self.client.set(PRODUCER_ID_BLOCK, dumps({
                    "version": 1, "broker": me, "block_start": str(start),
                    "block_end": str(start + count - 1)}), version=stat.version)
                return start
            except BadVersionError:
                continue
        raise AssertionError("unreachable: cas_attempts raises once exhausted")

    # --- consumer-group offsets ------------------------------------------------------------------
    def commit_offsets(self, group: str, offsets: dict) -> None:
        """Write the offsets in one ZooKeeper transaction (all or none)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        entries = {f"{group_offsets_path(group, topic)}/{partition}": value
                   for (topic, partition), value in validate_offsets(group, offsets).items()}
        if not entries:
            return
        for path in {p.rsplit("/", 1)[0] for p in entries}:
            self.client.ensure_path(path)
        for _ in range(10):
            present = {p: self.client.exists_async(p) for p in entries}
            txn = self.client.transaction()
            for path, om in sorted(entries.items()):
                if present[path].get() is None:
                    txn.create(path, encode_offset(om))
                else:
                    txn.set_data(path, encode_offset(om))
            results = txn.commit()
            if not any(isinstance(r, Exception) for r in results):
                return
            if not any(isinstance(r, (NodeExistsError, NoNodeError)) for r in results):
                raise CoordinationError(f"committing offsets of group {group!r} failed: "
                                        f"{[r for r in results if isinstance(r, Exception)]}")
        raise CoordinationError(f"committing offsets of group {group!r}: too many concurrent "
                                "creations and deletions of its offset nodes")

    def fetch_offsets(self, group: str, partitions=None) -> dict:
        """Committed offsets of ``group`` (only ``partitions`` if given)."""
        from kazoo.exceptions import NoNodeError

        validate_group_id(group)
        if partitions is None:
            wanted = []
            try:
                topics = self.client.get_children(f"{group_path(group)}/offsets")
            except NoNodeError:
                topics = []
            for topic in topics:
                try:
                    parts = self.client.get_children(group_offsets_path(group, topic))
                except NoNodeError:
                    continue
                wanted += [(topic, int(p)) for p in parts if p.isdigit()]
        else:
            wanted = [(validate_topic_name(t), validate_partition(p, topic=t))
                      for t, p in partitions]
        pending = {tp: self.client.get_async(f"{group_offsets_path(group, tp[0])}/{tp[1]}")
                   for tp in wanted}
        out = {}
        for tp, result in pending.items():
            try:
                data, stat = result.get()
            except NoNodeError:
                continue
            out[tp] = decode_offset(data, stat.mtime, f"{group_offsets_path(group, tp[0])}/{tp[1]}")
        return out

    def list_groups(self) -> list[str]:
        """Groups under ``/consumers`` that have committed offsets or live members."""
        from kazoo.exceptions import NoNodeError

        out = []
        for node in self.client.get_children(CONSUMERS):
            group = name_from_storage(node)
            if znode_name(group) != node:
                continue  # not a group id's escaped form
            for child in ("offsets", "ids"):
                try:
                    if self.client.get_children(f"{CONSUMERS}/{node}/{child}"):
                        out.append(group)
                        break
                except NoNodeError:
                    continue
        return sorted(out)

    def delete_offsets(self, group: str, topics=None) -> None:
        """Delete the group's offset nodes (of ``topics`` only, if given)."""
        validate_group_id(group)
        if topics is None:
            self._delete_quietly(f"{group_path(group)}/offsets", recursive=True)
        else:
            for topic in topics:
                self._delete_quietly(group_offsets_path(group, topic), recursive=True)

    # --- shared documents -------------------------------------------------------------------------
    def read_document(self, name: str) -> dict:
        """See :meth:`CoordinationStore.read_document`: the node ``/sparklog/<name>``."""
        from kazoo.exceptions import NoNodeError

        path = document_path(name)
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return {}
        return decode_document(data, path)

    def update_document(self, name: str, change) -> dict:
        """See :meth:`CoordinationStore.update_document`: a versioned ``set`` of the node
        ``/sparklog/<name>``, or its ``create`` (with the brokers-only ACL of
        ``zookeeper.set.acl``, else the client's default) the first time."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = document_path(name)
        for _ in cas_attempts(f"update of {path}"):
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                new = change({})
                try:
                    self.client.create(path, dumps(new), makepath=True,
                                       acl=self._private_acl())
                    return new
                except NodeExistsError:
                    continue
            new = change(decode_document(data, path))
            try:
                self.client.set(path, dumps(new), version=stat.version)
                return new
            except (BadVersionError, NoNodeError):
                continue
        raise AssertionError("unreachable: cas_attempts raises once exhausted")

    def _private_acl(self):
        """The digest entries of the client's default ACL (``zookeeper.set.acl``: the
        brokers' identity, :mod:`sparklog.security.zkacl`), leaving out world-readable
        ones; None (the default ACL) without it."""
        acl = [a for a in (self.client.default_acl or ()) if a.id.scheme == "digest"]
        return acl or None

    # --- lifecycle ----------------------------------------------------------------------------------
    def _delete_quietly(self, path: str, recursive: bool = False) -> None:
        from kazoo.exceptions import NoNodeError

        try:
            self.client.delete(path, recursive=recursive)
        except NoNodeError:
            pass

    def close(self) -> None:
        """Resign as controller, withdraw the registration, close the session."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.controller is not None:
            self.controller.stop()
        if self._broker is not None:
            self.unregister_broker(self._broker.node_id)
        self.view.stop()
        close_zk(self.client)

    def __repr__(self) -> str:
        broker = self._broker and self._broker.node_id
        return f"ZkCoordinationStore({self.connect!r}, broker={broker})"

