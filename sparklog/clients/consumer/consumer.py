"""The Consumer: Kafka's consumer API over sparklog's brokers.

``assign()`` takes partitions explicitly; ``subscribe()`` takes topics and lets a
:class:`~sparklog.clients.consumer.group.GroupMembership` assign their partitions: the
group's coordinator (one broker for the whole cluster) splits them among the members of
``group_id`` (rebalancing as members come and go), and
a consumer without a group gets all of them. Positions start at the group's committed offset, else at
``auto_offset_reset`` (``latest``, ``earliest`` or ``none``). ``poll()`` returns
``{TopicPartition: [ConsumerRecord]}`` from fetches that the
:class:`~sparklog.clients.consumer.fetcher.Fetcher` pipelines ahead of it (their responses are
read in the polling thread, in ``poll()``, as Kafka's consumer does); ``poll_batches()``
returns Arrow record batches instead (bulk readers). Offsets are committed to the group's
coordinator (manually with ``commit()``, or every ``auto_commit_interval_ms``); when it
moves, the consumer finds it again and rejoins there.

A pattern subscription is matched again every ``metadata_max_age_ms`` (topics created
later join it). A restarting broker is waited for, as kafka-python's consumer does:
``poll()`` retries inside itself (``retry_backoff_ms``, ``reconnect_backoff_ms``) and
``commit()`` for up to ``request_timeout_ms``, rejoining a group that forgot the member;
positions are kept, so nothing is lost or read twice.

Configuration uses Kafka's names with ``_`` for ``.``; unknown names raise
InvalidConfigError. Not thread-safe (as Kafka's consumer): one thread polls.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time

from ...errors import (
    IllegalGenerationError,
    InvalidArgumentError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    RebalanceInProgressError,
    SparklogError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from ...metadata.topic import validate_partition
from ...names import validate_group_id, validate_topic_name
from ...protocol.apis import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKey
from ...protocol.codec import error_from
from ...security.client import CLIENT_SECURITY_DEFAULTS, ClientSecurity
from ..network.coordinator import COORDINATOR_ERRORS, GroupCoordinator
from ..network.future import Future
from ..network.network import NetworkClient
from ..network.offsets import commit_request, fetch_committed, list_offsets
from ..network.settings import client_config
from ..types import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .fetcher import Fetcher, TopicPartitionState
from .group import BrokerMembership, GroupMembership, StaticMembership, ZooKeeperMembership

log = logging.getLogger(__name__)
_CLIENT_IDS = itertools.count(1)
#: kafka-python's (and Kafka 0.8's) older names of auto_offset_reset's values
OFFSET_RESET_ALIASES = {"smallest": "earliest", "largest": "latest"}
#: the group forgot this member (a restarted broker, an expired session): rejoin
_MEMBERSHIP_ERRORS = (UnknownMemberIdError, IllegalGenerationError, RebalanceInProgressError)

DEFAULT_CONFIG = {
    "client_id": None,
    "group_id": None,
    "auto_offset_reset": "latest",
    "enable_auto_commit": True,
    "auto_commit_interval_ms": 5000,
    "max_poll_records": 500,
    "fetch_max_wait_ms": 500,
    "fetch_min_bytes": 1,
    "fetch_max_bytes": 52428800,
    "max_partition_fetch_bytes": 1048576,
    "request_timeout_ms": 30000,
    "retry_backoff_ms": 100,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1000,
    "check_crcs": True,
    "key_deserializer": None,
    "value_deserializer": None,
    "consumer_timeout_ms": float("inf"),
    "metadata_max_age_ms": 300000,
    "session_timeout_ms": 10000,
    "heartbeat_interval_ms": 3000,
    "max_poll_interval_ms": 300000,
    "group_membership": None,
    "zookeeper_connect": None,  # group_membership="zookeeper": Kafka 0.8's ZooKeeper groups
    **CLIENT_SECURITY_DEFAULTS,  # security_protocol, ssl_*, sasl_*
}


class Consumer:
    """See the module docstring. ``Consumer("t1", "t2", bootstrap_servers=...)``
    subscribes to the topics given."""

    def __init__(self, *topics, bootstrap_servers=None, **configs):
        cfg = self.config = client_config(
            "consumer", DEFAULT_CONFIG, configs,
            positive=("max_poll_records", "fetch_max_bytes", "max_partition_fetch_bytes",
                      "request_timeout_ms"))
        reset = cfg["auto_offset_reset"]
        cfg["auto_offset_reset"] = OFFSET_RESET_ALIASES.get(reset, reset)
        if cfg["auto_offset_reset"] not in ("latest", "earliest", "none"):
            raise InvalidConfigError(
                "auto_offset_reset must be 'latest', 'earliest' or 'none' (or kafka-python's "
                f"'largest', 'smallest'), got {reset!r}")
        if cfg["fetch_max_wait_ms"] < 0 or cfg["fetch_max_wait_ms"] >= cfg["request_timeout_ms"]:
            raise InvalidConfigError("fetch_max_wait_ms must be >= 0 and below request_timeout_ms")
        if cfg["group_id"] is not None:
            validate_group_id(cfg["group_id"])
        self.client_id = cfg["client_id"] or f"consumer-{next(_CLIENT_IDS)}"
        self.group_id = cfg["group_id"]
        self._client = NetworkClient(
            bootstrap_servers, client_id=self.client_id,
            request_timeout_ms=cfg["request_timeout_ms"],
            retry_backoff_ms=cfg["retry_backoff_ms"],
            metadata_max_age_ms=cfg["metadata_max_age_ms"],
            reconnect_backoff_ms=cfg["reconnect_backoff_ms"],
            reconnect_backoff_max_ms=cfg["reconnect_backoff_max_ms"],
            security=ClientSecurity.from_configs(cfg))
        self._cond = threading.Condition()
        self._states: dict[TopicPartition, TopicPartitionState] = {}
        self._fetcher = Fetcher(
            self._client, self._states, self._cond, max_wait_ms=cfg["fetch_max_wait_ms"],
            min_bytes=cfg["fetch_min_bytes"], max_bytes=cfg["fetch_max_bytes"],
            max_partition_bytes=cfg["max_partition_fetch_bytes"],
            check_crcs=cfg["check_crcs"], retry_backoff_ms=cfg["retry_backoff_ms"],
            key_deserializer=cfg["key_deserializer"],
            value_deserializer=cfg["value_deserializer"])
        self._group_coordinator: GroupCoordinator | None = None  # without a membership's
        self._membership = self._make_membership(cfg)
        self._subscription: list[str] | None = None
        self._pattern = None
        self._next_match = 0.0
        self._manual = False
        self._next_auto_commit = time.monotonic() + cfg["auto_commit_interval_ms"] / 1000
        self._closed = False
        self._iter_records = iter(())
        self._records_consumed = 0
        self._commits = 0  # OffsetCommit requests answered, and their latency (s)
        self._commit_latency_sum = 0.0
        self._commit_latency_max = 0.0
        try:
            self._client.refresh_metadata([])  # fail fast if no broker is reachable
            if topics:
                self.subscribe(list(topics))
        except BaseException:
            self._client.close()
            raise

    def _make_membership(self, cfg) -> GroupMembership:
        kind = cfg["group_membership"]
        if isinstance(kind, GroupMembership):
            return kind
        if kind is None:
            kind = "broker" if self.group_id else "static"
        if kind == "static":
            return StaticMembership(self._client,
                                    refresh_ms=min(cfg["metadata_max_age_ms"], 30000))
        if kind == "broker":
            return BrokerMembership(
                self._client, session_timeout_ms=cfg["session_timeout_ms"],
                rebalance_timeout_ms=cfg["max_poll_interval_ms"],
                heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
                before_rejoin=self._commit_before_rebalance)
        if kind == "zookeeper":
            if not cfg["zookeeper_connect"]:
                raise InvalidConfigError("group_membership='zookeeper' needs zookeeper_connect")
            return ZooKeeperMembership(cfg["zookeeper_connect"],
                                       session_timeout_ms=cfg["session_timeout_ms"])
        raise InvalidConfigError(
            f"group_membership must be 'broker', 'static', 'zookeeper' or a GroupMembership, "
            f"got {kind!r}")

    def _commit_before_rebalance(self) -> None:
        if self.group_id and self.config["enable_auto_commit"] and self._current_offsets():
            try:
                self._commit_sync(None, rejoin=False)
            except _MEMBERSHIP_ERRORS as exc:  # committed after the rejoin instead
                log.info("commit before rejoining group %r refused: %s", self.group_id, exc)

    # --- assignment -------------------------------------------------------------------
    def assign(self, partitions) -> None:
        """Consume exactly these partitions (no group membership)."""
        if self._subscription is not None:
            raise InvalidArgumentError("assign() after subscribe(): call unsubscribe() first")
        tps = [self._check_tp(tp) for tp in partitions]
        self._manual = True
        self._set_assignment(tps)

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned."""
        return set(self._states)

    def subscribe(self, topics=(), pattern: str | None = None) -> None:
        """Subscribe to ``topics`` (or every topic matching the regex ``pattern``)."""
        if self._manual:
            raise InvalidArgumentError("subscribe() after assign(): call unsubscribe() first")
        if isinstance(topics, str):
            topics = [topics]
        if pattern is not None:
            self._pattern = re.compile(pattern)
            self._match_pattern(force=True)
            return
        topics = [validate_topic_name(t) for t in topics]
        if not topics:
            raise InvalidArgumentError("subscribe() needs topics or a pattern")
        self._subscription = list(topics)
        self._set_assignment(self._membership.join(self.group_id, self._subscription))

    def _match_pattern(self, force: bool = False) -> None:
        """Match the subscribed pattern against every topic (as Kafka's consumer does on
        each metadata refresh, every ``metadata_max_age_ms``); join with the topics
        matched when they changed, so topics created later are picked up."""
        pattern = self._pattern
        if pattern is None or not force and time.monotonic() < self._next_match:
            return
        meta = self._client.refresh_metadata()
        self._next_match = time.monotonic() + self.config["metadata_max_age_ms"] / 1000
        topics = sorted(t for t in meta.topics if pattern.fullmatch(t))
        if not force and topics == self._subscription:
            return
        if self._subscription is not None:
            log.info("pattern %r now matches %s", pattern.pattern, topics)
            self._commit_before_rebalance()
        self._subscription = topics
        self._set_assignment(self._membership.join(self.group_id, topics))

    def subscription(self) -> set[str] | None:
        """The subscribed topics (None when not subscribed)."""
        return set(self._subscription) if self._subscription is not None else None

    def unsubscribe(self) -> None:
        """Drop the subscription or manual assignment."""
        if self._subscription is not None:
            self._membership.leave()
        self._subscription = None
        self._pattern = None
        self._manual = False
        self._set_assignment([])

    def _set_assignment(self, tps) -> None:
        tps = [TopicPartition(*tp) for tp in tps]
        unknown = sorted({tp.topic for tp in tps if self._client.metadata.topic(tp.topic) is None})
        if unknown:  # leaders, and whether a topic is typed, come from the metadata
            try:
                self._client.refresh_metadata(unknown)
            except SparklogError as exc:
                log.info("metadata of %s not loaded yet: %s", unknown, exc)
        with self._cond:
            old = dict(self._states)
            self._states.clear()
            for tp in tps:
                self._states[tp] = old.get(tp) or TopicPartitionState()
                info = self._client.metadata.topic(tp.topic)
                self._states[tp].typed = bool(info and info.typed)
        self._fetcher.drop()
        for st in self._states.values():
            if st.position is not None:
                st.seek(st.position)  # buffered data was dropped: fetch again from here

    def _check_tp(self, tp) -> TopicPartition:
        try:
            topic, partition = tp
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"expected a TopicPartition(topic, partition), got {tp!r}") from None
        validate_topic_name(topic)
        info = self._client.topic_info(topic)
        validate_partition(partition, info.num_partitions, topic)
        return TopicPartition(topic, partition)

    def _state(self, tp) -> TopicPartitionState:
        st = self._states.get(TopicPartition(*tp)) if isinstance(tp, tuple) else None
        if st is None:
            raise InvalidArgumentError(f"partition {tp!r} is not assigned to this consumer")
        return st

    # --- positions --------------------------------------------------------------------
    def _update_positions(self) -> None:
        missing = [tp for tp, st in self._states.items() if st.position is None]
        if not missing:
            return
        committed = self._fetch_committed(missing) if self.group_id else {}
        reset = []
        for tp in missing:
            c = committed.get(tp)
            if c is not None and c.offset >= 0:
                self._states[tp].seek(c.offset)
            else:
                reset.append(tp)
        if reset:
            self._reset_offsets(reset)

    def _reset_offsets(self, tps) -> None:
        policy = self.config["auto_offset_reset"]
        if policy == "none":
            raise OffsetOutOfRangeError(
                f"no valid offset for partitions {sorted(tps)} (group {self.group_id!r}) "
                "and auto_offset_reset='none'")
        ts = EARLIEST_TIMESTAMP if policy == "earliest" else LATEST_TIMESTAMP
        found = self._list_offsets({tp: ts for tp in tps})
        with self._cond:
            for tp in tps:
                if tp in self._states:
                    self._states[tp].seek(found[tp][0])

    def position(self, tp) -> int:
        """The offset of the next record ``poll()`` returns for ``tp``."""
        st = self._state(tp)
        if st.position is None:
            self._update_positions()
        assert st.position is not None, "_update_positions() sets every position or raises"
        return st.position

    def seek(self, tp, offset: int) -> None:
        """Make ``offset`` the next record read from ``tp``."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgumentError(f"seek offset must be an int >= 0, got {offset!r}")
        st = self._state(tp)
        with self._cond:
            st.seek(offset)
        self._fetcher.drop(TopicPartition(*tp))

    def seek_to_beginning(self, *partitions) -> None:
        """Seek to the log start offset of the partitions (all assigned if none given)."""
        self._seek_to(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, *partitions) -> None:
        """Seek to the high watermark of the partitions (all assigned if none given)."""
        self._seek_to(partitions, LATEST_TIMESTAMP)

    def _seek_to(self, partitions, ts) -> None:
        tps = [TopicPartition(*tp) for tp in partitions] or list(self._states)
        for tp in tps:
            self._state(tp)
        for tp, (offset, _) in self._list_offsets({tp: ts for tp in tps}).items():
            self.seek(tp, offset)

    def highwater(self, tp) -> int | None:
        """The partition's high watermark as of the last fetch (None before one)."""
        hw = self._state(tp).high_watermark
        return hw if hw >= 0 else None

    # --- pause / resume ---------------------------------------------------------------
    def pause(self, *partitions) -> None:
        """Stop fetching from these partitions (buffered data is kept)."""
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions) -> None:
        """Resume fetching from paused partitions."""
        for tp in partitions:
            self._state(tp).paused = False
        self._fetcher.send_fetches()

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, st in self._states.items() if st.paused}

    # --- polling ----------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict:
        """Records fetched since the last poll, waiting up to ``timeout_ms`` for some:
        ``{TopicPartition: [ConsumerRecord]}`` (at most ``max_records`` in all)."""
        return self._poll(timeout_ms, max_records, batches=False)

    def poll_batches(self, timeout_ms: int = 0, max_records: int | None = None) -> dict:
        """Like :meth:`poll` but returns ``{TopicPartition: [pyarrow.RecordBatch]}``:
        the record columns (key, value, headers for raw topics; the schema's columns for
        typed ones) plus ``__timestamp`` and ``__offset``, sliced to the position."""
        return self._poll(timeout_ms, max_records, batches=True)

    def _poll(self, timeout_ms, max_records, *, batches: bool) -> dict:
        if self._closed:
            raise InvalidArgumentError("poll() on a closed consumer")
        if self._subscription is None and not self._manual:
            raise InvalidArgumentError("poll() needs subscribe() or assign() first")
        limit = max_records or self.config["max_poll_records"]
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        self._maybe_auto_commit()
        while True:
            try:
                self._maintain()
            except SparklogError as exc:
                if not _ride_through(exc):
                    raise
                # the broker is restarting or moving: kafka-python retries inside poll()
                log.debug("consumer %s: %s; retrying", self.client_id, exc)
                left = deadline - time.monotonic()
                if left <= 0:
                    return {}
                time.sleep(min(left, self.config["retry_backoff_ms"] / 1000.0))
                continue
            self._fetcher.read_responses()
            self._raise_fetch_errors()
            out = self._fetcher.collect(limit, batches=batches)
            if out:
                self._records_consumed += sum(
                    sum(b.num_rows for b in items) if batches else len(items)
                    for items in out.values())
            # the next fetches go out once the records are taken, before they are
            # returned: still in flight while the application works on them, but the
            # send (a syscall) no longer delays their hand-over
            self._fetcher.send_fetches()
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return {}
            self._fetcher.wait(min(left, 0.1))

    def _maintain(self) -> None:
        if self._pattern is not None:
            self._match_pattern()
        if self._subscription is not None:
            changed = self._membership.poll()
            if changed is not None:
                self._set_assignment(changed)
        if self._fetcher.stale_metadata:
            self._fetcher.stale_metadata = False
            try:
                self._client.refresh_metadata(sorted({tp.topic for tp in self._states}))
            except SparklogError:
                self._fetcher.stale_metadata = True
        self._update_positions()

    def _raise_fetch_errors(self) -> None:
        while True:
            cf = self._fetcher.next_error()
            if cf is None:
                return
            err = cf.error
            if isinstance(err, OffsetOutOfRangeError):
                if self.config["auto_offset_reset"] == "none":
                    raise err
                self._reset_offsets([cf.tp])
            elif not (isinstance(err, SparklogError) and err.retriable):
                raise err

    def __iter__(self):
        return self

    def __next__(self):
        """Next record; stops after ``consumer_timeout_ms`` without one."""
        while True:
            record = next(self._iter_records, None)
            if record is not None:
                return record
            timeout = self.config["consumer_timeout_ms"]
            deadline = time.monotonic() + timeout / 1000.0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StopIteration
                batch = self.poll(timeout_ms=int(min(left * 1000, 1000)))
                if batch:
                    self._iter_records = itertools.chain.from_iterable(batch.values())
                    break

    # --- offsets ----------------------------------------------------------------------
    def _require_group(self, what: str) -> None:
        if not self.group_id:
            raise InvalidArgumentError(f"{what} needs a group_id")

    def _current_offsets(self) -> dict:
        return {tp: OffsetAndMetadata(st.position) for tp, st in self._states.items()
                if st.position is not None}

    def commit(self, offsets: dict | None = None) -> None:
        """Commit offsets (default: the current positions) for the group; each value is
        the next offset to consume (an int or an OffsetAndMetadata)."""
        self._require_group("commit()")
        self._commit_sync(offsets, rejoin=True)

    def _commit_sync(self, offsets, *, rejoin: bool) -> None:
        """Commit and wait, retrying retriable errors (a restarting broker) for up to
        ``request_timeout_ms``. When the group forgot this member (its broker
        restarted), a subscribed consumer rejoins (with ``rejoin``) and commits again
        the offsets of the partitions it still owns; offsets of partitions it lost
        raise the group's error, as Kafka's CommitFailedException."""
        deadline = time.monotonic() + self.config["request_timeout_ms"] / 1000.0
        forgotten = None  # the membership error to answer with a rejoin
        while True:
            try:
                if forgotten is not None:
                    assert self._subscription is not None  # only a subscribed member rejoins
                    self._set_assignment(
                        self._membership.join(self.group_id, self._subscription))
                    if offsets is not None and not \
                            set(map(TopicPartition._make, offsets)) <= self.assignment():
                        raise forgotten
                    forgotten = None
                self._commit_future(offsets).get(max(0.0, deadline - time.monotonic()) + 1)
                return
            except _MEMBERSHIP_ERRORS as exc:
                if exc is forgotten or not rejoin or self._subscription is None \
                        or time.monotonic() >= deadline:
                    raise
                forgotten = exc
            except SparklogError as exc:
                if not _ride_through(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(self.config["retry_backoff_ms"] / 1000.0)

    def commit_async(self, offsets: dict | None = None, callback=None):
        """Commit without waiting (default: the current positions). ``callback(offsets,
        response)`` runs when done, as kafka-python's: ``offsets`` is what was
        committed (``{TopicPartition: OffsetAndMetadata}``, the current positions when
        none were given), ``response`` the OffsetCommit response (a dict) or the
        exception it failed with. Returns the request's future (of the response)."""
        self._require_group("commit_async()")
        offsets = self._current_offsets() if offsets is None else offsets
        future = self._commit_future(offsets)
        if callback is not None:
            future.add_callback(lambda resp: callback(offsets, resp))
            future.add_errback(lambda exc: callback(offsets, exc))
        return future

    def _commit_future(self, offsets):
        offsets = self._current_offsets() if offsets is None else offsets
        body = commit_request(self.group_id, offsets, self._membership.generation_id,
                              self._membership.member_id)
        result = Future()
        if not body["topics"]:
            return result.success({"topics": []})
        started = time.monotonic()

        def done(resp):
            latency = time.monotonic() - started
            self._commits += 1
            self._commit_latency_sum += latency
            self._commit_latency_max = max(self._commit_latency_max, latency)
            exc = error_from(resp, f"OffsetCommit of group {self.group_id!r}")
            for t in resp.get("topics", ()):
                for p in t["partitions"]:
                    exc = exc or error_from(p, f"commit of {t['name']}-{p['partition']}")
            if exc is not None:
                failed(exc)
            else:
                result.success(resp)

        coordinator = self._coordinator()

        def failed(exc):
            if isinstance(exc, COORDINATOR_ERRORS):  # moved or gone: find it again
                coordinator.reset(exc)
            result.failure(exc)

        try:
            sent = coordinator.send(ApiKey.OFFSET_COMMIT, body)
        except SparklogError as exc:  # no coordinator reachable: the future fails
            failed(exc)
            return result
        sent.add_callback(done).add_errback(failed)
        return result

    def _coordinator(self) -> GroupCoordinator:
        """The group's coordinator (the membership's when it has one: one lookup)."""
        if isinstance(self._membership, BrokerMembership):
            return self._membership.coordinator_of(self.group_id)
        if self._group_coordinator is None:
            self._group_coordinator = GroupCoordinator(self._client, self.group_id)
        return self._group_coordinator

    def committed(self, tp) -> int | None:
        """The group's committed offset of ``tp`` (None if none)."""
        self._require_group("committed()")
        tp = TopicPartition(*tp)
        found = self._fetch_committed([tp]).get(tp)
        return found.offset if found is not None else None

    def _fetch_committed(self, tps) -> dict:
        return fetch_committed(self._client, self.group_id, tps,
                               coordinator=self._coordinator())

    def _maybe_auto_commit(self) -> None:
        if not (self.group_id and self.config["enable_auto_commit"]):
            return
        now = time.monotonic()
        if now >= self._next_auto_commit:
            self._next_auto_commit = now + self.config["auto_commit_interval_ms"] / 1000
            if self._current_offsets():
                self.commit_async().add_errback(
                    lambda exc: log.warning("auto-commit of group %r failed: %s",
                                            self.group_id, exc))

    # --- offset lookups -------------------------------------------------------------------
    def _list_offsets(self, wanted: dict) -> dict:
        return list_offsets(self._client, wanted)

    def beginning_offsets(self, partitions) -> dict:
        """``{tp: log start offset}``."""
        return {tp: o for tp, (o, _) in self._list_offsets(
            {self._check_tp(tp): EARLIEST_TIMESTAMP for tp in partitions}).items()}

    def end_offsets(self, partitions) -> dict:
        """``{tp: high watermark}`` (the offset the next record will get)."""
        return {tp: o for tp, (o, _) in self._list_offsets(
            {self._check_tp(tp): LATEST_TIMESTAMP for tp in partitions}).items()}

    def offsets_for_times(self, timestamps: dict) -> dict:
        """``{tp: OffsetAndTimestamp or None}``: the first offset whose timestamp is >=
        the given ms timestamp (None if there is none)."""
        wanted = {}
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise InvalidArgumentError(f"timestamp for {tp} must be an int >= 0, got {ts!r}")
            wanted[self._check_tp(tp)] = ts
        return {tp: (OffsetAndTimestamp(o, t) if o >= 0 else None)
                for tp, (o, t) in self._list_offsets(wanted).items()}

    # --- metadata ---------------------------------------------------------------------------
    def topics(self) -> set[str]:
        """Every topic of the cluster."""
        return set(self._client.refresh_metadata().topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """Partition numbers of ``topic`` (None if it does not exist)."""
        try:
            return set(range(self._client.topic_info(topic, refresh=True).num_partitions))
        except UnknownTopicOrPartitionError:
            return None

    # --- metrics ----------------------------------------------------------------------------
    def bootstrap_connected(self) -> bool:
        """True while a connection to a broker of the cluster is open (kafka-python's
        ``bootstrap_connected()``)."""
        return self._client.bootstrap_connected()

    def metrics(self, raw: bool = False) -> dict:
        """kafka-python's ``metrics()``: ``{group: {name: value}}`` under Kafka's metric
        names: ``consumer-metrics`` (``connection-count``),
        ``consumer-fetch-manager-metrics`` (``records-consumed-total``,
        ``records-lag-max``: the largest high watermark minus position of the assigned
        partitions, NaN when none is known yet) and ``consumer-coordinator-metrics``
        (``assigned-partitions``, ``commit-total``, ``commit-latency-avg`` and
        ``commit-latency-max`` in ms, NaN before the first commit). ``raw=True``
        (kafka-python's KafkaMetric objects) is not available."""
        if raw:
            raise InvalidArgumentError(
                "metrics(raw=True): there are no KafkaMetric objects here; metrics() "
                "returns the values")
        lags = [st.high_watermark - st.position for st in self._states.values()
                if st.position is not None and st.high_watermark >= 0]
        nan = float("nan")
        commits = self._commits
        return {
            "consumer-metrics": {"connection-count": self._client.connection_count()},
            "consumer-fetch-manager-metrics": {
                "records-consumed-total": self._records_consumed,
                "records-lag-max": float(max(lags)) if lags else nan},
            "consumer-coordinator-metrics": {
                "assigned-partitions": len(self._states),
                "commit-total": commits,
                "commit-latency-avg":
                    self._commit_latency_sum * 1000 / commits if commits else nan,
                "commit-latency-max": self._commit_latency_max * 1000 if commits else nan},
        }

    # --- close ------------------------------------------------------------------------------
    def close(self, autocommit: bool = True) -> None:
        """Commit positions (with a group and auto-commit on), leave, close connections."""
        if self._closed:
            return
        try:
            if autocommit and self.group_id and self.config["enable_auto_commit"] \
                    and self._current_offsets():
                try:
                    self.commit()
                except SparklogError as exc:
                    log.warning("final commit of group %r failed: %s", self.group_id, exc)
            if self._subscription is not None:
                self._membership.leave()
            self._membership.close()
        finally:
            self._closed = True
            self._fetcher.closed = True
            self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _ride_through(exc: SparklogError) -> bool:
    """True for the errors a client waits out (retries) instead of raising: a broker
    that is unreachable, restarting or moving leadership. An unknown topic is raised."""
    return exc.retriable and not isinstance(exc, UnknownTopicOrPartitionError)
