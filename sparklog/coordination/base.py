"""The metadata-store interface: cluster state that is not part of the log itself.

Topics and their configs live on the storage (:mod:`sparklog.metadata`); what lives here
is the state of the running cluster, the part Kafka 0.8 keeps in ZooKeeper:

* live brokers (ephemeral registrations) and the controller;
* per partition its leader and leader epoch (bumped on every change of leader, and
  stamped into every frame the leader appends);
* blocks of producer ids for idempotent producers;
* committed consumer-group offsets (persistent).

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
    :class:`sparklog.client.types.OffsetAndMetadata` (kafka-python's shape)."""

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
