"""A broker's watched view of the cluster in ZooKeeper: brokers, controller, leaders.

Every broker (and admin tool) keeps one :class:`ClusterView`: a cache of the live
brokers, the controller id, every topic's partition count and every partition's state
(leader, leader epoch), refreshed by ZooKeeper watches on the view's event thread. It is
what a broker answers Metadata requests from, and what tells it which partitions it
leads.

**Proving leadership.** :meth:`ClusterView.leader_epoch` returns this broker's epoch for
a partition only while the view is *trusted*: the session is connected and the cache
was fully re-read since the last connection loss. On SUSPENDED (connection lost, the
session may still be alive or may be expiring on the server) the view stops trusting
itself at once; after reconnecting it
re-reads everything (after a ``sync``) before trusting itself again; leaderships that
changed meanwhile reach the listeners then. A broker that asks
before acknowledging a write therefore never acknowledges for a partition whose new
leader may already exist: the controller can only move a leadership after this
broker's session expired (or by a state write this view has seen).
"""

from __future__ import annotations

import logging
import threading

from .base import NO_LEADER, BrokerInfo, LeaderAndEpoch
from .zkclient import EventWorker, is_connection_error
from .zkpaths import (
    BROKERS_IDS,
    BROKERS_TOPICS,
    CONFIG_TOPICS,
    CONTROLLER,
    decode_assignment,
    decode_broker,
    decode_state,
    loads,
    partition_state_path,
    topic_path,
)

log = logging.getLogger(__name__)


class ClusterView:
    """Watched cache of the cluster (see the module docstring).

    ``client``: a started kazoo client; ``broker_id``: the broker this view serves
    (None for a client-side view). Listeners registered with :meth:`add_listener` are
    called on the view's thread with ``{(topic, partition): LeaderAndEpoch or None}``
    whenever states change (None: the partition was deleted). Losing trust is not a
    state change: :meth:`leader_epoch` simply returns None until trust returns.
    """

    def __init__(self, client, broker_id: int | None = None):
        self.client = client
        self.worker = EventWorker("cluster-view")
        self.broker_id = broker_id
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = NO_LEADER
        self._topics: dict[str, int] = {}
        self._states: dict[tuple[str, int], LeaderAndEpoch] = {}
        self._trusted = False
        self._listeners: list = []
        self._config_listeners: list = []
        self._config_versions: dict[str, int] | None = None  # None until first read
        self._refreshed = threading.Condition(self._lock)
        self._generation = 0  # full refreshes done
        self._stopped = False

    @property
    def broker_id(self) -> int | None:
        """The broker this view serves (None: an admin's or a client's view); set when
        the broker registers. Names the view's worker in log lines."""
        return self._broker_id

    @broker_id.setter
    def broker_id(self, value: int | None) -> None:
        self._broker_id = value
        self.worker.name = "cluster-view" if value is None else f"cluster-view-{value}"

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> "ClusterView":
        """Read everything once (asynchronously) and keep watching."""
        self.worker.start()
        self.client.add_listener(self._on_session_state)
        self.worker.submit(self._full_refresh)
        return self

    def stop(self) -> None:
        """Stop watching (the cache keeps its last contents, untrusted)."""
        self._stopped = True
        self._trusted = False
        self.client.remove_listener(self._on_session_state)
        self.worker.stop()

    def add_listener(self, fn) -> None:
        """Call ``fn(changes)`` on every change of partition states (see class doc)."""
        self._listeners.append(fn)

    def add_config_listener(self, fn) -> None:
        """Call ``fn(topic)`` on the view's thread when ``/config/topics/<topic>`` changes
        (a topic's configs were altered on some broker; Kafka's config notification)."""
        self._config_listeners.append(fn)

    def wait_refreshed(self, timeout: float = 10.0) -> bool:
        """Block until the view is trusted (a full read completed since the last
        connection loss); False on timeout."""
        with self._refreshed:
            return self._refreshed.wait_for(lambda: self._trusted, timeout)

    def _on_session_state(self, state) -> None:  # kazoo thread: no blocking here
        from kazoo.protocol.states import KazooState

        if state in (KazooState.SUSPENDED, KazooState.LOST):
            if self._trusted:
                log.warning("broker %s: ZooKeeper session %s; no longer acknowledging "
                            "writes until the cluster state is re-read",
                            self.broker_id, "expired" if state == KazooState.LOST
                            else "suspended (connection lost)")
            self._trusted = False
        elif state == KazooState.CONNECTED:
            self.worker.submit(self._full_refresh)

    # --- queries ---------------------------------------------------------------------------
    @property
    def trusted(self) -> bool:
        """True while connected and fully refreshed since the last connection loss."""
        return self._trusted and self.client.connected

    def brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers by id."""
        with self._lock:
            return dict(self._brokers)

    def controller_id(self) -> int:
        """The controller's broker id (-1 if none)."""
        return self._controller

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count, as registered in ZooKeeper."""
        with self._lock:
            return dict(self._topics)

    def state(self, topic: str, partition: int) -> LeaderAndEpoch | None:
        """The cached state of one partition (None if unknown)."""
        return self._states.get((topic, partition))

    def states(self) -> dict[tuple[str, int], LeaderAndEpoch]:
        """Every cached partition state."""
        with self._lock:
            return dict(self._states)

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        """This broker's leader epoch of the partition when the view can prove that this
        broker leads it right now, else None."""
        state = self._states.get((topic, partition))
        if state is None or state.leader != self.broker_id or not self.trusted:
            return None
        return state.leader_epoch

    def led_partitions(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): leader epoch} of the partitions this broker leads."""
        with self._lock:
            return {tp: s.leader_epoch for tp, s in self._states.items()
                    if s.leader == self.broker_id}

    # --- refreshing (view thread) -----------------------------------------------------------------
    def _watch_brokers(self, event=None):
        self.worker.submit(self._refresh_brokers)

    def _watch_controller(self, event=None):
        self.worker.submit(self._refresh_controller)

    def _watch_topics(self, event=None):
        self.worker.submit(self._refresh_topics)

    def _watch_topic(self, event):
        if not event.path:  # a session event (expiry): the reconnect refreshes all
            return
        topic = event.path.rsplit("/", 1)[1]
        self.worker.submit(self._refresh_topic, topic)

    def _watch_state(self, event):
        if not event.path:
            return
        parts = event.path.split("/")  # /brokers/topics/<t>/partitions/<p>/state
        self.worker.submit(self._refresh_states, [(parts[3], int(parts[5]))])

    def _refresh_brokers(self):
        from kazoo.exceptions import NoNodeError

        ids = self.client.get_children(BROKERS_IDS, watch=self._watch_brokers)
        pending = {int(i): self.client.get_async(f"{BROKERS_IDS}/{i}")
                   for i in ids if i.isdigit()}
        brokers = {}
        for broker_id, result in pending.items():
            try:
                data, _ = result.get()
            except NoNodeError:
                continue
            brokers[broker_id] = decode_broker(broker_id, data)
        with self._lock:
            self._brokers = brokers

    def _refresh_controller(self):
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.client.get(CONTROLLER, watch=self._watch_controller)
            self._controller = int(loads(data, CONTROLLER)["brokerid"])
        except NoNodeError:
            self._controller = NO_LEADER
            if self.client.exists(CONTROLLER, watch=self._watch_controller) is not None:
                self.worker.submit(self._refresh_controller)  # created meanwhile
        except (TypeError, KeyError, ValueError):
            self._controller = NO_LEADER

    def _refresh_topics(self):
        topics = set(self.client.get_children(BROKERS_TOPICS, watch=self._watch_topics))
        with self._lock:
            gone = set(self._topics) - topics
            new = topics - set(self._topics)
        for topic in gone:
            self._drop_topic(topic)
        for topic in sorted(new):
            self._refresh_topic(topic)

    def _drop_topic(self, topic: str):
        with self._lock:
            self._topics.pop(topic, None)
            dropped = [tp for tp in self._states if tp[0] == topic]
            for tp in dropped:
                del self._states[tp]
        if dropped:
            self._notify({tp: None for tp in dropped})

    def _refresh_topic(self, topic: str):
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.client.get(topic_path(topic), watch=self._watch_topic)
        except NoNodeError:
            self._drop_topic(topic)
            return
        except Exception:  # noqa: BLE001 - a node sparklog did not write: skip it, say so
            log.exception("cluster view: ignoring topic node %r", topic)
            return
        count = len(decode_assignment(data, topic_path(topic))) if data else 0
        with self._lock:
            self._topics[topic] = count
        self._refresh_states([(topic, p) for p in range(count)])

    def _refresh_states(self, partitions):
        from kazoo.exceptions import NoNodeError

        pending = {}
        for tp in partitions:
            path = partition_state_path(*tp)
            # exists() watches creation, data changes and deletion alike
            self.client.exists_async(path, watch=self._watch_state)
            pending[tp] = self.client.get_async(path)
        changes = {}
        for tp, result in pending.items():
            try:
                data, _ = result.get()
                state, _ = decode_state(data, partition_state_path(*tp))
            except NoNodeError:
                state = None
            with self._lock:
                old = self._states.get(tp)
                if state is None:
                    self._states.pop(tp, None)
                else:
                    self._states[tp] = state
            if old != state:
                changes[tp] = state
        if changes:
            self._notify(changes)

    def _full_refresh(self):
        if self._stopped or not self.client.connected:
            return
        try:
            self.client.sync("/")
            self._refresh_brokers()
            self._refresh_controller()
            self._refresh_configs()
            topics = set(self.client.get_children(BROKERS_TOPICS, watch=self._watch_topics))
            for topic in set(self._topics) - topics:
                self._drop_topic(topic)
            for topic in sorted(topics):
                self._refresh_topic(topic)
        except Exception as exc:  # noqa: BLE001 - retried shortly (and on the next CONNECTED)
            log.warning("broker %s: cluster view refresh failed (%s); retrying",
                        self.broker_id, type(exc).__name__,
                        exc_info=not is_connection_error(exc))
            timer = threading.Timer(0.2, self.worker.submit, (self._full_refresh,))
            timer.daemon = True
            timer.start()
            return
        with self._refreshed:
            self._generation += 1
            was = self._trusted
            self._trusted = self.client.connected
            self._refreshed.notify_all()
        if self._trusted and not was:
            log.info("broker %s: cluster state read (%d brokers, %d partitions, controller %d)",
                     self.broker_id, len(self._brokers), len(self._states), self._controller)

    def _watch_configs(self, event=None):
        self.worker.submit(self._refresh_configs)

    def _refresh_configs(self):
        """Watch ``/config/topics`` and its nodes; report topics whose node changed."""
        from kazoo.exceptions import NoNodeError

        try:
            names = self.client.get_children(CONFIG_TOPICS, watch=self._watch_configs)
        except NoNodeError:
            return
        first = self._config_versions is None
        versions = self._config_versions = self._config_versions or {}
        changed = []
        for name in names:
            try:
                stat = self.client.exists(f"{CONFIG_TOPICS}/{name}", watch=self._watch_configs)
            except NoNodeError:
                continue
            if stat is None:
                continue
            old = versions.get(name)
            versions[name] = stat.mzxid
            if not first and old != stat.mzxid:
                changed.append(name)
        for name in changed:
            for fn in list(self._config_listeners):
                try:
                    fn(name)
                except Exception:  # noqa: BLE001 - a listener bug must not stop the view
                    log.exception("cluster view config listener %r failed", fn)

    def _notify(self, changes: dict):
        for fn in list(self._listeners):
            try:
                fn(changes)
            except Exception:  # noqa: BLE001 - a listener bug must not stop the view
                log.exception("cluster view listener %r failed", fn)
