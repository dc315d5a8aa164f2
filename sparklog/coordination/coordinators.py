"""Which broker coordinates each consumer group: one coordinator per group for the
whole cluster, as Kafka's.

Kafka's coordinator of group ``G`` is the leader of partition
``abs(G.hashCode()) % offsets.topic.num.partitions`` (50) of ``__consumer_offsets``.
sparklog keeps the same arithmetic (Java's ``String.hashCode``, so a group maps to the
slot number Kafka would give it) over :data:`COORDINATOR_SLOTS` *coordinator slots*,
without a log behind them: committed offsets stay in the coordination store, which every
broker reads alike, and group membership lives in the memory of the slot's holder.

* Standalone (:class:`LocalCoordinators`): the one broker holds every slot.
* Cluster mode (:class:`ZkCoordinators`): a broker holds slot ``s`` while its ZooKeeper
  session owns the ephemeral node ``/coordinators/slots/<s>`` (value
  ``{"version":1,"brokerid":N,"timestamp":...}``), so at most one broker holds a slot.
  Each broker able to coordinate announces itself with the ephemeral
  ``/coordinators/brokers/<id>``; the *candidates* are the brokers announced there and
  registered in ``/brokers/ids`` (a broker of an older version, which coordinates
  nothing, is never preferred). A slot nobody holds is claimed at once by its preferred
  broker (the ``s % n``-th of the ``n`` candidates' ids, sorted), and by any candidate
  once it stayed free for :data:`CLAIM_GRACE_S` (the preferred one may be gone too).
  When a broker dies its session expires (``zookeeper.session.timeout.ms``), its slot
  nodes vanish and the others take them over; a broker stopping gracefully deletes its
  slot nodes first.
  With ``auto.leader.rebalance.enable`` a broker hands a slot back to its preferred
  broker once that one is live (Kafka moves ``__consumer_offsets`` leaders the same
  way), so coordinators spread over the cluster. A broker whose session is not
  connected holds nothing (it cannot prove it still owns a node).

Every broker answers FindCoordinator from its view of the nodes; the holder alone serves
the group's requests, others answer NOT_COORDINATOR. Listeners
(:meth:`ZkCoordinators.add_listener`) hear of the slots this broker lost, so its group
coordinator forgets their groups' membership (a member then rejoins the new holder).
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import CoordinatorNotAvailableError, NotCoordinatorError
from ..names import validate_group_id

log = logging.getLogger(__name__)

#: Kafka's offsets.topic.num.partitions default: the number of coordinator slots. The
#: same on every broker (a group's slot must not depend on who is asked)
COORDINATOR_SLOTS = 50
#: a free slot whose preferred broker did not claim it within this many seconds is
#: claimed by any live broker
CLAIM_GRACE_S = 0.5
#: ZooKeeper parents of the slot nodes and of the brokers' announcements
COORDINATOR_SLOTS_PATH = "/coordinators/slots"
COORDINATOR_BROKERS_PATH = "/coordinators/brokers"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text`` (over its UTF-16 code units, as a signed
    32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_slot(group_id: str, slots: int = COORDINATOR_SLOTS) -> int:
    """The coordinator slot of a group: Kafka's ``Utils.abs(groupId.hashCode) % n``
    (``Utils.abs`` clears the sign bit)."""
    return (java_string_hash(validate_group_id(group_id)) & 0x7FFFFFFF) % slots


def slot_path(slot: int) -> str:
    """``/coordinators/slots/<slot>``."""
    return f"{COORDINATOR_SLOTS_PATH}/{int(slot)}"


class LocalCoordinators:
    """Standalone: this broker coordinates every group."""

    def __init__(self, broker_id: int):
        self.broker_id = broker_id

    def coordinator(self, group_id: str) -> int:
        """The coordinating broker's id (-1: none now)."""
        validate_group_id(group_id)
        return self.broker_id

    def check(self, group_id: str) -> None:
        """Raise NotCoordinatorError unless this broker coordinates the group."""
        validate_group_id(group_id)

    def slot(self, group_id: str) -> int:
        """The group's coordinator slot."""
        return coordinator_slot(group_id)

    def add_listener(self, fn) -> None:
        """Slots are never lost here: ``fn`` is never called."""

    def start(self) -> "LocalCoordinators":
        return self

    def stop(self) -> None:
        """Nothing to release."""


class ZkCoordinators:
    """Coordinator slots held through ZooKeeper (see the module docstring).

    ``client``: the broker's started kazoo client (its session owns the slot nodes);
    ``rebalance``: hand slots back to their preferred broker
    (``auto.leader.rebalance.enable``).
    """

    def __init__(self, client, broker_id: int, *, slots: int = COORDINATOR_SLOTS,
                 rebalance: bool = True, claim_grace_s: float = CLAIM_GRACE_S):
        from .zkclient import EventWorker

        self.client = client
        self.broker_id = broker_id
        self.slots = slots
        self.rebalance = rebalance
        self.claim_grace_s = claim_grace_s
        self.worker = EventWorker(f"coordinators-{broker_id}")
        self._lock = threading.Lock()
        self._owners: dict[int, int] = {}      # slot -> broker id, as last read
        self._held: frozenset[int] = frozenset()  # slots this session owns
        self._free_since: dict[int, float] = {}
        self._listeners: list = []
        self._stopped = threading.Event()
        self._announced = False
        self._ticker: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> "ZkCoordinators":
        """Watch the slots and the live brokers; claim on the worker thread."""
        self.worker.start()
        self.client.add_listener(self._on_session_state)
        self.worker.submit(self._refresh)
        self._ticker = threading.Thread(target=self._tick, daemon=True,
                                        name=f"coordinators-tick-{self.broker_id}")
        self._ticker.start()
        return self

    def stop(self) -> None:
        """Release every slot held (their groups move to other brokers at once)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.client.remove_listener(self._on_session_state)
        self.worker.submit(self._release_all)
        self.worker.stop()

    def add_listener(self, fn) -> None:
        """Call ``fn(lost_slots: frozenset)`` (on the worker thread) when this broker
        stops holding slots."""
        self._listeners.append(fn)

    # --- queries (any thread) ---------------------------------------------------------------
    def slot(self, group_id: str) -> int:
        """The group's coordinator slot."""
        return coordinator_slot(group_id, self.slots)

    def coordinator(self, group_id: str) -> int:
        """The id of the broker holding the group's slot, as this broker last saw it
        (-1: none now)."""
        slot = self.slot(group_id)
        if slot in self._held and self.client.connected:
            return self.broker_id
        with self._lock:
            owner = self._owners.get(slot, -1)
        return -1 if owner == self.broker_id else owner

    def check(self, group_id: str) -> None:
        """Raise NotCoordinatorError (or CoordinatorNotAvailableError while no broker
        holds the slot) unless this broker coordinates the group now."""
        slot = self.slot(group_id)
        if slot in self._held and self.client.connected:
            return
        owner = self.coordinator(group_id)
        if owner < 0:
            raise CoordinatorNotAvailableError(
                f"group {group_id!r}: no broker coordinates it now (coordinator slot "
                f"{slot} is free); find the coordinator again")
        raise NotCoordinatorError(
            f"broker {self.broker_id} is not the coordinator of group {group_id!r} "
            f"(slot {slot}: broker {owner}); find the coordinator again")

    # --- reacting (worker thread) -------------------------------------------------------------
    def _on_session_state(self, state) -> None:  # kazoo thread: no blocking here
        from kazoo.protocol.states import KazooState

        if state in (KazooState.SUSPENDED, KazooState.LOST):
            if state == KazooState.LOST:  # its ephemeral announcement is gone
                self._announced = False
            self.worker.submit(self._drop_all, str(state))
        elif state == KazooState.CONNECTED and not self._stopped.is_set():
            self.worker.submit(self._refresh)

    def _watch(self, event=None) -> None:  # kazoo thread
        if not self._stopped.is_set():
            self.worker.submit(self._refresh)

    def _tick(self) -> None:
        while not self._stopped.wait(self.claim_grace_s):
            if self._free_since or not self._announced:
                self.worker.submit(self._refresh)

    def _drop_all(self, why: str) -> None:
        if self._held:
            log.warning("broker %d: ZooKeeper session %s: it coordinates no group until "
                        "the session is back", self.broker_id, why.lower())
        self._set_held(frozenset())

    def _set_held(self, held: frozenset) -> None:
        lost = self._held - held
        self._held = held
        if lost:
            for fn in self._listeners:
                try:
                    fn(lost)
                except Exception:  # noqa: BLE001 - one listener must not stop the others
                    log.exception("coordinator slot listener failed")

    def _read(self) -> tuple[dict, set]:
        """(slot -> owner id, slots this session owns), watching the parent."""
        from kazoo.exceptions import NoNodeError

        from .zkpaths import loads

        session = self.client.client_id[0] if self.client.client_id else None
        owners, mine = {}, set()
        for name in self.client.get_children(COORDINATOR_SLOTS_PATH, watch=self._watch):
            if not name.isdigit() or int(name) >= self.slots:
                continue
            try:
                data, stat = self.client.get(slot_path(int(name)))
            except NoNodeError:
                continue
            value = loads(data, slot_path(int(name))) or {}
            owners[int(name)] = int(value.get("brokerid", -1))
            if stat.owner_session_id == session:
                mine.add(int(name))
        return owners, mine

    def _announce(self) -> None:
        """Create ``/coordinators/brokers/<id>`` (this session's) if missing."""
        from kazoo.exceptions import NodeExistsError

        path = f"{COORDINATOR_BROKERS_PATH}/{self.broker_id}"
        try:
            self.client.create(path, b"", ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = self.client.get(path)
            if stat.owner_session_id != self.client.client_id[0]:
                # a previous session of this broker, not expired yet: retried by _tick
                self._announced = False
                return
        self._announced = True

    def _candidates(self) -> list[int]:
        """Sorted ids of the brokers both announced and registered (watched)."""
        def ids(path: str) -> set[int]:
            return {int(b) for b in self.client.get_children(path, watch=self._watch)
                    if b.isdigit()}

        return sorted(ids(COORDINATOR_BROKERS_PATH) & ids("/brokers/ids"))

    def _refresh(self) -> None:
        if self._stopped.is_set() or not self.client.connected:
            return
        self.client.ensure_path(COORDINATOR_SLOTS_PATH)
        self.client.ensure_path(COORDINATOR_BROKERS_PATH)
        if not self._announced:
            self._announce()
        live = self._candidates()
        owners, mine = self._read()
        now = time.monotonic()
        registered = self.broker_id in live
        claimed, handed = [], []
        for slot in range(self.slots):
            preferred = live[slot % len(live)] if live else -1
            if slot not in owners:
                since = self._free_since.setdefault(slot, now)
                if registered and (preferred == self.broker_id
                                   or now - since >= self.claim_grace_s):
                    if self._claim(slot):
                        owners[slot] = self.broker_id
                        mine.add(slot)
                        claimed.append(slot)
                continue
            self._free_since.pop(slot, None)
            if slot in mine and self.rebalance and preferred not in (-1, self.broker_id):
                if self._release(slot):
                    handed.append(slot)
                owners.pop(slot, None)
                mine.discard(slot)
        if claimed:
            log.info("broker %d: coordinates the groups of slots %s (%d slots held)",
                     self.broker_id, _ranges(claimed), len(mine))
        if handed:
            log.info("broker %d: hands coordinator slots %s over to their preferred brokers "
                     "(live: %s)", self.broker_id, _ranges(handed), live)
        with self._lock:
            self._owners = owners
        self._set_held(frozenset(mine))

    def _claim(self, slot: int) -> bool:
        from kazoo.exceptions import NodeExistsError

        from .zkpaths import dumps, now_ms

        value = dumps({"version": 1, "brokerid": self.broker_id, "timestamp": str(now_ms())})
        try:
            self.client.create(slot_path(slot), value, ephemeral=True)
        except NodeExistsError:
            return False
        self._free_since.pop(slot, None)
        return True

    def _release(self, slot: int) -> bool:
        """Delete the slot's node if this session owns it; whether it did."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        session = self.client.client_id[0] if self.client.client_id else None
        try:
            _, stat = self.client.get(slot_path(slot))
            if stat.owner_session_id == session:
                self.client.delete(slot_path(slot), version=stat.version)
                return True
        except (NoNodeError, BadVersionError):
            pass
        return False

    def _release_all(self) -> None:
        held = self._held
        self._set_held(frozenset())
        if not self.client.connected:
            return
        try:  # first: the others stop preferring this broker
            self.client.delete(f"{COORDINATOR_BROKERS_PATH}/{self.broker_id}")
        except Exception as exc:  # noqa: BLE001 - the session's end removes it too
            log.info("broker %d: withdrawing from coordination: %s", self.broker_id, exc)
        released = []
        for slot in sorted(held):
            try:
                if self._release(slot):
                    released.append(slot)
            except Exception as exc:  # noqa: BLE001 - the session's end releases it too
                log.info("broker %d: releasing slot %d: %s", self.broker_id, slot, exc)
        if released:
            log.info("broker %d: stopping: released coordinator slots %s", self.broker_id,
                     _ranges(released))


def _ranges(slots) -> str:
    """``0-3,7,9-10`` for sorted slot numbers (one log line for many slots)."""
    out: list[str] = []
    for slot in slots:
        if out and "-" not in out[-1] and int(out[-1]) == slot - 1:
            out[-1] = f"{out[-1]}-{slot}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == slot - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{slot}"
        else:
            out.append(str(slot))
    return ",".join(out)


def coordinators_for(store, broker_id: int, *, rebalance: bool = True):
    """The coordinator slots of a broker using ``store``: held through ZooKeeper for the
    ZooKeeper store (cluster mode), else every group here (standalone). Not started."""
    client = getattr(store, "client", None)
    if store.assigns_leaders and client is not None:
        return ZkCoordinators(client, broker_id, rebalance=rebalance)
    return LocalCoordinators(broker_id)
