"""Consumer groups in ZooKeeper: Kafka 0.8's high-level consumer registration and rebalance.

A :class:`ZkGroupMember` is one consumer of group ``G`` (layout in
:mod:`sparklog.coordination.zkpaths`):

* it registers the ephemeral ``/consumers/G/ids/<consumer id>`` (``host-uuid`` by
  default) holding its subscription ``{"version":1,"subscription":{topic:1},
  "pattern":"static","timestamp":...}``;
* it watches the group's member list and the subscribed topics' partition counts
  (``/brokers/topics/<t>``); any change starts a **rebalance**: release the partitions
  it owns (delete its ephemeral ``/consumers/G/owners/<t>/<p>`` nodes), read every
  member's subscription, compute the range assignment
  (:func:`~sparklog.coordination.assignment.range_assign`, the same on every member),
  then claim each of its partitions by creating the owner node. A claim that finds the
  node still held by a member that has not released yet backs off and retries the
  whole rebalance (``rebalance.backoff.ms``, ``rebalance.max.retries``), as Kafka 0.8
  did, so a partition never has two owners;
* its offsets are persistent ``/consumers/G/offsets/<t>/<p>`` nodes (written through
  :class:`~sparklog.coordination.zkstore.ZkCoordinationStore`'s commit, or a broker's
  OffsetCommit in cluster mode: the same nodes).

:func:`describe_group` reads members, owners and offsets for ``sparklog groups
describe``. The consumer side adapter (``Consumer(group_membership="zookeeper")``) wraps
this class.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid

from ..errors import CoordinationError, InvalidArgumentError
from ..names import validate_client_id, validate_group_id, validate_topic_name, znode_name
from .assignment import range_assign
from .base import cas_attempts
from .zkclient import DEFAULT_SESSION_TIMEOUT_MS, EventWorker, close_zk, connect_zk
from .zkpaths import (
    decode_assignment,
    dumps,
    group_ids_path,
    group_owners_path,
    group_path,
    loads,
    now_ms,
    topic_path,
)

log = logging.getLogger(__name__)


class ZkGroupMember:
    """One member of a ZooKeeper consumer group (see the module docstring).

    ``on_change(assignment)`` (optional) is called on the member's thread after every
    completed rebalance with the sorted list of owned (topic, partition).
    """

    def __init__(self, connect: str, group_id: str, topics, *, consumer_id: str | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 rebalance_backoff_ms: int = 200, rebalance_max_retries: int = 20,
                 on_change=None, client=None):
        self.group_id = validate_group_id(group_id)
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            raise InvalidArgumentError(f"group {group_id!r}: subscribe to at least one topic")
        self.topics = sorted({validate_topic_name(t) for t in topics})
        self.consumer_id = consumer_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
        validate_client_id(self.consumer_id)
        if not self.consumer_id or znode_name(self.consumer_id) != self.consumer_id:
            raise InvalidArgumentError(
                f"consumer id {self.consumer_id!r} must be non-empty, without '%' and '/', "
                "and not '.' or '..' (it is a ZooKeeper node name)")
        self.rebalance_backoff = rebalance_backoff_ms / 1000.0
        self.rebalance_max_retries = rebalance_max_retries
        self.on_change = on_change
        self._own_client = client is None
        self.client = client or connect_zk(connect, session_timeout_ms=session_timeout_ms)
        self.worker = EventWorker(f"zk-group-{group_id}-{self.consumer_id}")
        self._lock = threading.Condition()
        self._owned: list[tuple[str, int]] = []
        self._generation = 0  # completed rebalances
        self._pending = False
        self._closed = False

    # --- lifecycle --------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> "ZkGroupMember":
        """Register and wait for the first rebalance to complete."""
        self.worker.start()
        self.client.add_listener(self._on_session_state)
        self.worker.submit(self._register)
        self._schedule()
        if not self.wait_for_rebalance(0, timeout):
            raise CoordinationError(f"group {self.group_id!r}: member {self.consumer_id} got no "
                                    f"assignment within {timeout}s")
        return self

    def _register(self) -> None:
        from kazoo.exceptions import NodeExistsError

        path = f"{group_ids_path(self.group_id)}/{self.consumer_id}"
        value = dumps({"version": 1, "subscription": {t: 1 for t in self.topics},
                       "pattern": "static", "timestamp": str(now_ms())})
        self.client.ensure_path(group_ids_path(self.group_id))
        try:
            self.client.create(path, value, ephemeral=True)
        except NodeExistsError:
            _, stat = self.client.get(path)
            if stat.owner_session_id != self.client.client_id[0]:
                raise CoordinationError(f"group {self.group_id!r}: consumer id "
                                        f"{self.consumer_id} is registered by another member")

    def _on_session_state(self, state) -> None:  # kazoo thread
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:  # ephemeral nodes are gone: we own nothing
            with self._lock:
                self._owned = []
        elif state == KazooState.CONNECTED and not self._closed:
            self.worker.submit(self._register)
            self._schedule()

    def close(self) -> None:
        """Release the partitions and leave the group (others rebalance)."""
        if self._closed:
            return
        self._closed = True
        self.client.remove_listener(self._on_session_state)
        self.worker.submit(self._leave)
        self.worker.stop()
        if self._own_client:
            close_zk(self.client)

    def _leave(self) -> None:
        from kazoo.exceptions import NoNodeError

        self._release()
        try:
            self.client.delete(f"{group_ids_path(self.group_id)}/{self.consumer_id}")
        except NoNodeError:
            pass

    # --- state --------------------------------------------------------------------------------
    def assignment(self) -> list[tuple[str, int]]:
        """The partitions this member owns now (sorted)."""
        with self._lock:
            return list(self._owned)

    @property
    def generation(self) -> int:
        """Number of rebalances this member completed."""
        return self._generation

    def wait_for_rebalance(self, after_generation: int, timeout: float) -> bool:
        """Wait until a rebalance after ``after_generation`` completed."""
        with self._lock:
            return self._lock.wait_for(lambda: self._generation > after_generation, timeout)

    # --- rebalance (member thread) ------------------------------------------------------------------
    def _watch(self, event=None) -> None:  # kazoo thread
        if not self._closed:
            self._schedule()

    def _schedule(self) -> None:
        if not self._pending:
            self._pending = True
            self.worker.submit(self._rebalance)

    def _release(self) -> None:
        from kazoo.exceptions import NoNodeError

        with self._lock:
            owned, self._owned = self._owned, []
        for topic, p in owned:
            path = f"{group_owners_path(self.group_id, topic)}/{p}"
            try:
                data, _ = self.client.get(path)
                if data.decode() == self.consumer_id:
                    self.client.delete(path)
            except NoNodeError:
                pass

    def _rebalance(self) -> None:
        from kazoo.exceptions import KazooException

        self._pending = False
        if self._closed:
            return
        try:
            self._rebalance_attempts()
        except KazooException as exc:
            # a ZooKeeper error mid-rebalance must not leave the member without an
            # assignment: release, back off and rebalance again (a reconnect also does)
            log.warning("group %s: member %s rebalance failed (%r); retrying", self.group_id,
                        self.consumer_id, exc)
            try:
                self._release()
            except KazooException:  # owner nodes are ephemeral: they go with the session
                with self._lock:
                    self._owned = []
            time.sleep(self.rebalance_backoff)
            if self.client.connected and not self._closed:
                self._schedule()

    def _rebalance_attempts(self) -> None:
        for attempt in range(self.rebalance_max_retries + 1):
            self._release()
            members = self._members()
            counts = self._partition_counts()
            mine = range_assign(counts, members).get(self.consumer_id, [])
            claimed = []
            conflict = None
            for topic, p in mine:
                self.client.ensure_path(group_owners_path(self.group_id, topic))
                owner = self._claim(f"{group_owners_path(self.group_id, topic)}/{p}")
                if owner is not None:
                    conflict = (topic, p, owner)
                    break
                claimed.append((topic, p))
            with self._lock:
                self._owned = sorted(claimed)
            if conflict is None:
                with self._lock:
                    self._generation += 1
                    self._lock.notify_all()
                log.info("group %s: member %s owns %s after rebalance %d", self.group_id,
                         self.consumer_id, self._owned, self._generation)
                if self.on_change is not None:
                    self.on_change(list(self._owned))
                return
            log.info("group %s: %s-%d still owned by %s; rebalance retry %d", self.group_id,
                     conflict[0], conflict[1], conflict[2], attempt + 1)
            time.sleep(self.rebalance_backoff)
            if self._pending:  # membership changed meanwhile: that rebalance supersedes
                self._release()
                return
        self._release()
        log.error("group %s: member %s gave up after %d rebalance attempts", self.group_id,
                  self.consumer_id, self.rebalance_max_retries + 1)

    def _claim(self, path: str) -> str | None:
        """Create the ephemeral owner node; None when this member owns it now, else the
        other owner's id. An owner that releases between our create and our read (the
        node vanishes) is retried, not reported."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        for _ in cas_attempts(f"claim of {path}"):
            try:
                self.client.create(path, self.consumer_id.encode(), ephemeral=True)
                return None
            except NodeExistsError:
                try:
                    data, _ = self.client.get(path)
                except NoNodeError:
                    continue  # released meanwhile: claim again
                owner = data.decode()
                return None if owner == self.consumer_id else owner
        raise AssertionError("unreachable: cas_attempts raises once exhausted")

    def _members(self) -> dict[str, list[str]]:
        from kazoo.exceptions import NoNodeError

        ids = self.client.get_children(group_ids_path(self.group_id), watch=self._watch)
        out = {}
        for member in ids:
            try:
                data, _ = self.client.get(f"{group_ids_path(self.group_id)}/{member}")
            except NoNodeError:
                continue
            value = loads(data, f"{group_ids_path(self.group_id)}/{member}") or {}
            out[member] = sorted((value.get("subscription") or {}).keys())
        out.setdefault(self.consumer_id, self.topics)
        return out

    def _partition_counts(self) -> dict[str, int]:
        from kazoo.exceptions import NoNodeError

        counts = {}
        for topic in self.topics:
            try:
                data, _ = self.client.get(topic_path(topic), watch=self._watch)
            except NoNodeError:  # not created yet: watch its creation
                self.client.exists(topic_path(topic), watch=self._watch)
                continue
            counts[topic] = len(decode_assignment(data, topic_path(topic))) if data else 0
        return counts


def describe_group(store, group_id: str) -> dict:
    """Members, owners and committed offsets of a ZooKeeper consumer group.

    Returns ``{"members": {consumer id: [topics]}, "owners": {(topic, p): consumer id},
    "offsets": {(topic, p): CommittedOffset}}`` (``store``: a ZkCoordinationStore).
    """
    from kazoo.exceptions import NoNodeError

    client = store.client
    validate_group_id(group_id)
    members = {}
    try:
        ids = client.get_children(group_ids_path(group_id))
    except NoNodeError:
        ids = []
    for member in ids:
        try:
            data, _ = client.get(f"{group_ids_path(group_id)}/{member}")
        except NoNodeError:
            continue
        members[member] = sorted(((loads(data, member) or {}).get("subscription") or {}))
    owners = {}
    try:
        topics = client.get_children(f"{group_path(group_id)}/owners")
    except NoNodeError:
        topics = []
    for topic in topics:
        try:
            parts = client.get_children(group_owners_path(group_id, topic))
        except NoNodeError:
            continue
        for p in parts:
            try:
                data, _ = client.get(f"{group_owners_path(group_id, topic)}/{p}")
                owners[(topic, int(p))] = data.decode()
            except (NoNodeError, ValueError):
                continue
    return {"members": members, "owners": owners, "offsets": store.fetch_offsets(group_id)}


def group_description(store, group_id: str) -> dict:
    """A DescribeGroups response item for a ZooKeeper group: state ``Stable`` with its
    members (consumer ids, hosts from the ``host-uuid`` ids) and the partitions each
    owns, or ``Empty``/``Dead`` when it has no live member."""
    info = describe_group(store, group_id)
    owned: dict[str, dict[str, list[int]]] = {m: {} for m in info["members"]}
    for (topic, p), owner in sorted(info["owners"].items()):
        owned.setdefault(owner, {}).setdefault(topic, []).append(p)
    members = [{"member_id": m, "client_id": m, "client_host": m.rsplit("-", 1)[0],
                "assignment": [{"name": t, "partitions": ps} for t, ps in sorted(by.items())]}
               for m, by in sorted(owned.items()) if m in info["members"]]
    state = "Stable" if members else ("Empty" if info["offsets"] else "Dead")
    return {"group_id": group_id, "state": state, "generation_id": -1, "members": members,
            "error_code": 0, "error_message": ""}
