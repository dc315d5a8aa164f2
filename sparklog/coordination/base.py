"""The metadata-store interface: cluster state that is not part of the log itself.

Topics and their configs live on the storage (:mod:`sparklog.metadata`); what lives here
is the state of the running cluster, the part Kafka 0.8 keeps in ZooKeeper:

* live brokers (ephemeral registrations) and the controller;
* per partition its leader and leader epoch (bumped on every change of leader, and
  stamped into every frame the leader appends);
* blocks of producer ids for idempotent producers;
* committed consumer-group offsets (persistent);
* per partition how far its log went (:class:`LogEnd`, the document ``log-ends/<topic>``):
  kept outside the partition directory, so that a log whose directory or tail was lost
  is not restarted below offsets it already handed out.

Two implementations: :class:`~sparklog.coordination.local.LocalCoordinationStore`
(embedded mode, one broker, state in versioned files on the storage root) and a
ZooKeeper store (``sparklog/coordination/zk*.py``, Kafka 0.8's layout). The broker only
uses the methods below; each implementation documents how it makes them atomic.

Group *membership* (JoinGroup/Heartbeat) is held in the memory of the broker that
coordinates the group, as Kafka's group coordinator does; only offsets are stored here.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass

from ..errors import CoordinationError, InvalidArgumentError
from ..metadata.topic import validate_topic_name
from ..names import MAX_GROUP_ID_LENGTH, validate_group_id  # noqa: F401 (re-exported)
from ..protocol.types import BrokerInfo
from ..storage.versioned import MAX_CAS_ATTEMPTS  # noqa: F401
from ..storage.versioned import cas_attempts as _cas_attempts

NO_LEADER = -1


@dataclass(frozen=True)
class LeaderAndEpoch:
    """A partition's leader (broker id, NO_LEADER if none) and leader epoch."""

    leader: int
    leader_epoch: int


@dataclass(frozen=True)
class CommittedOffset:
    """A committed group offset as the store keeps it: the next offset to consume, the
    client's metadata string and the commit time (ms since the epoch). Clients see it as
    :class:`sparklog.clients.types.OffsetAndMetadata` (kafka-python's shape)."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = 0

    def __post_init__(self):
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise InvalidArgumentError(
                f"committed offset must be a non-negative int, got {self.offset!r}")
        if not isinstance(self.metadata, str):
            raise InvalidArgumentError(
                f"offset metadata must be a str, got {type(self.metadata).__name__}")
        if not self.commit_timestamp:
            object.__setattr__(self, "commit_timestamp", int(time.time() * 1000))


@dataclass(frozen=True)
class LogEnd:
    """How far a partition's log went, as its leader of ``leader_epoch`` last recorded
    it: no offset below ``end_offset`` may be handed out again (Kafka keeps its
    recovery-point and high-watermark checkpoints beside the log dirs for the same
    purpose). Recorded when a leader opens the log, when a rolled segment is sealed,
    at a clean close and when the log fails; never on the produce path."""

    leader_epoch: int
    end_offset: int


#: the document of a topic's :class:`LogEnd` records: ``{"<partition>": [epoch, end]}``
LOG_ENDS_DOCUMENT = "log-ends"


def cas_attempts(what: str):
    """:func:`sparklog.storage.versioned.cas_attempts` raising CoordinationError: every
    retry loop of the coordination stores (versioned files, ZooKeeper node versions)
    uses it, so none retries without a bound."""
    return _cas_attempts(what, CoordinationError)


def validate_offsets(group: str, offsets: dict) -> dict:
    """Check a group id and an offsets mapping ``{(topic, partition): CommittedOffset}``
    before a commit; returns it as a plain dict. InvalidArgumentError (or the topic and
    partition errors) names the bad entry."""
    from ..metadata.topic import validate_partition, validate_topic_name

    validate_group_id(group)
    entries = {}
    for key, value in offsets.items():
        topic, partition = key
        validate_topic_name(topic)
        validate_partition(partition, topic=topic)
        if not isinstance(value, CommittedOffset):
            raise InvalidArgumentError(
                f"offset of {topic}-{partition} must be an CommittedOffset, "
                f"got {type(value).__name__}")
        entries[(topic, partition)] = value
    return entries

class CoordinationStore(abc.ABC):
    """Cluster state shared by brokers (see the module docstring).

    Errors: InvalidArgumentError for bad ids, NotLeaderError when another live broker
    leads a partition, StorageError/BrokerNotAvailableError when the backing store is
    unreachable.
    """

    #: True when a controller assigns each partition's leader (ZooKeeper): a broker then
    #: opens a partition only when told it leads it, follows the store's leadership
    #: changes, and creates, alters and deletes topics through the controller. False
    #: (the local store): the broker that opens a partition takes its leadership.
    assigns_leaders: bool = False

    # --- cluster and brokers -----------------------------------------------------------
    @abc.abstractmethod
    def cluster_id(self) -> str:
        """A stable id of the cluster (created on first use)."""

    @abc.abstractmethod
    def register_broker(self, broker: BrokerInfo) -> None:
        """Announce a live broker (ephemeral: gone when this store is closed or the
        broker's session dies). InvalidArgumentError if the id is live elsewhere."""

    @abc.abstractmethod
    def unregister_broker(self, broker_id: int) -> None:
        """Withdraw a broker's registration (no error if absent)."""

    @abc.abstractmethod
    def live_brokers(self) -> dict[int, BrokerInfo]:
        """Registered live brokers by id."""

    @abc.abstractmethod
    def controller_id(self) -> int:
        """Id of the current controller broker (NO_LEADER if none)."""

    # --- partition leadership --------------------------------------------------------------
    @abc.abstractmethod
    def partition_state(self, topic: str, partition: int) -> LeaderAndEpoch | None:
        """The partition's leader and leader epoch (None if never assigned)."""

    @abc.abstractmethod
    def acquire_leadership(self, topic: str, partition: int, broker_id: int) -> LeaderAndEpoch:
        """Make ``broker_id`` the partition's leader with a leader epoch greater than
        any before, and return the new state. Local store: always granted. ZooKeeper:
        granted when the controller assigned the partition to this broker, else
        NotLeaderError naming the leader."""

    @abc.abstractmethod
    def release_leadership(self, topic: str, partition: int, broker_id: int) -> None:
        """Give up leadership (controlled shutdown); no-op if ``broker_id`` does not
        lead the partition."""

    def release_leaderships(self, partitions, broker_id: int) -> dict:
        """:meth:`release_leadership` of every ``(topic, partition)`` of ``partitions``
        (a broker's stop: all it led); returns ``{(topic, partition): error}`` of those
        that failed (SparklogError), the others being released. The default releases
        one after another; stores override it to release them together."""
        from ..errors import SparklogError

        failed = {}
        for topic, partition in partitions:
            try:
                self.release_leadership(topic, partition, broker_id)
            except SparklogError as exc:
                failed[(topic, partition)] = exc
        return failed

    # --- idempotent producers ---------------------------------------------------------------
    @abc.abstractmethod
    def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` fresh producer ids, never handed out before by any broker
        of this cluster, and return the first (Kafka's producer id block)."""

    # --- consumer-group offsets ---------------------------------------------------------------
    @abc.abstractmethod
    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]
                       ) -> None:
        """Store committed offsets of ``group`` for the (topic, partition) keys given,
        atomically (all or none); other partitions' offsets are kept."""

    @abc.abstractmethod
    def fetch_offsets(self, group: str, partitions=None) -> dict[tuple[str, int],
                                                                   CommittedOffset]:
        """Committed offsets of ``group`` (only the (topic, partition) keys in
        ``partitions`` if given; partitions without a commit are left out)."""

    @abc.abstractmethod
    def list_groups(self) -> list[str]:
        """Ids of groups that have committed offsets, sorted."""

    @abc.abstractmethod
    def delete_offsets(self, group: str, topics=None) -> None:
        """Forget ``group``'s offsets (of ``topics`` only, if given)."""

    def forget_topic_offsets(self, topic: str) -> None:
        """Forget every group's committed offsets of ``topic`` (a deleted topic: as in
        Kafka, a topic re-created under its name starts each group from its reset
        policy, not from the old topic's offsets)."""
        for group in self.list_groups():
            self.delete_offsets(group, [topic])

    # --- how far each log went ----------------------------------------------------------------
    def _log_ends_name(self, topic: str) -> str:
        return f"{LOG_ENDS_DOCUMENT}/{validate_topic_name(topic)}"

    def log_end(self, topic: str, partition: int) -> LogEnd | None:
        """The partition's recorded :class:`LogEnd`, None if none was recorded (a
        partition never opened, or opened before sparklog recorded them)."""
        entry = self.read_document(self._log_ends_name(topic)).get(str(partition))
        if not isinstance(entry, list) or len(entry) != 2:
            return None
        return LogEnd(int(entry[0]), int(entry[1]))

    def record_log_end(self, topic: str, partition: int, leader_epoch: int, end_offset: int,
                       *, opening: bool = False) -> None:
        """Record that the partition's log reached ``end_offset`` under its leader of
        ``leader_epoch``. ``opening``: that leader has just opened (recovered) the log,
        which starts a record of its epoch; otherwise the record only moves forward, and
        only while it is the same epoch's (a fenced old leader's late record, or one for
        a topic deleted meanwhile, is dropped). Written only when it changes."""
        self.record_log_ends(topic, {partition: LogEnd(leader_epoch, end_offset)},
                             opening=opening)

    def record_log_ends(self, topic: str, ends: dict[int, LogEnd], *,
                        opening: bool = False) -> None:
        """:meth:`record_log_end` of several partitions of ``topic`` (``ends``:
        partition -> its leader's :class:`LogEnd`) in one write of the topic's
        document, the same rules applying to each: a broker's stop records all its
        closed logs' ends with one write per topic instead of one per partition."""
        name = self._log_ends_name(topic)

        def wanted(doc: dict, partition: int, new: LogEnd):
            entry = doc.get(str(partition))
            if isinstance(entry, list) and len(entry) == 2:
                epoch, end = int(entry[0]), int(entry[1])
                if epoch > new.leader_epoch or (not opening and epoch < new.leader_epoch):
                    return None
                if epoch == new.leader_epoch and end >= new.end_offset:
                    return None
            elif not opening:
                return None
            return [new.leader_epoch, new.end_offset]

        def changes(doc: dict) -> dict:
            return {str(p): entry for p, new in ends.items()
                    if (entry := wanted(doc, p, new)) is not None}

        if not ends or not changes(self.read_document(name)):
            return
        self.update_document(name, lambda doc: {**doc, **changes(doc)})

    def forget_log_ends(self, topic: str) -> None:
        """Drop the topic's :class:`LogEnd` records (the topic is deleted: a topic
        created later under its name starts at offset 0, as in Kafka)."""
        name = self._log_ends_name(topic)
        if self.read_document(name):
            self.update_document(name, lambda doc: {})

    # --- shared documents ----------------------------------------------------------------
    @abc.abstractmethod
    def read_document(self, name: str) -> dict:
        """The JSON object stored as the document ``name`` (a relative path such as
        ``security/acls``), ``{}`` when it was never written. CoordinationError names
        the place when what is stored there is not a JSON object."""

    @abc.abstractmethod
    def update_document(self, name: str, change) -> dict:
        """Read-modify-write the document ``name``: ``change(doc) -> new doc`` is written
        with compare-and-set and retried on a fresh read when another writer got there
        first, so two concurrent changes both land, one after the other. Returns the
        document written. Documents hold cluster-private state (credentials, ACLs):
        with ``zookeeper.set.acl`` only the brokers' identity can read them."""

    def close(self) -> None:
        """Release the store's resources (ephemeral registrations vanish)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
