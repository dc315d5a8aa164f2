"""Error classes of sparklog.

Every public entry point raises a subclass of :class:`SparklogError` with a message
that names what was wrong (the topic, the partition, the offset, the path, the field).
Names follow Kafka's error names where Kafka has one, so operators recognise them.
Each class carries a stable numeric ``code`` used on the wire by the broker protocol.
"""

from __future__ import annotations


class SparklogError(Exception):
    """Base class of every error sparklog raises on purpose."""

    code = -1
    retriable = False


# --- input validation --------------------------------------------------------------


class InvalidArgumentError(SparklogError, ValueError):
    """An argument has the wrong type or an invalid value (message names it)."""

    code = 42


class InvalidTopicError(InvalidArgumentError):
    """A topic name is not a valid single path component (Kafka: InvalidTopicException)."""

    code = 17


class InvalidGroupIdError(InvalidArgumentError):
    """A consumer group id is empty, too long or has a character it may not have
    (Kafka: INVALID_GROUP_ID)."""

    code = 24


class InvalidConfigError(InvalidArgumentError):
    """A topic or broker config key is unknown or its value is invalid."""

    code = 40


class InvalidPartitionsError(InvalidArgumentError):
    """A partition count is not allowed: below 1, or above the broker's
    ``max.topic.partitions`` (Kafka: InvalidPartitionsException)."""

    code = 37


class PolicyViolationError(InvalidArgumentError):
    """A request would break a broker policy, such as ``max.broker.partitions``
    (Kafka: PolicyViolationException)."""

    code = 44


class SchemaMismatchError(InvalidArgumentError):
    """Records do not match the declared Arrow schema of a typed topic (sparklog's own
    code 1002: Kafka has no such error; before it had its own code it was sent as 87,
    which is Kafka's INVALID_RECORD, see :class:`InvalidRecordError`)."""

    code = 1002


# --- topics, partitions, offsets ---------------------------------------------------


class InvalidRecordError(InvalidArgumentError):
    """A record the topic cannot take, as Kafka's InvalidRecordException: a record
    without a key on a compacted topic (Kafka's INVALID_RECORD, code 87)."""

    code = 87


class UnknownTopicOrPartitionError(SparklogError, KeyError):
    """The topic or partition does not exist (Kafka: UnknownTopicOrPartition)."""

    code = 3
    retriable = True

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class TopicExistsError(SparklogError):
    """A topic with that name already exists (Kafka: TopicAlreadyExists)."""

    code = 36


class OffsetOutOfRangeError(SparklogError, IndexError):
    """A requested offset lies outside [log start offset, log end offset]."""

    code = 1

    def __init__(self, message: str, *, topic=None, partition=None, offset=None,
                 log_start_offset=None, log_end_offset=None):
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


# --- frames and files --------------------------------------------------------------


class CorruptRecordError(SparklogError):
    """A frame failed validation: bad CRC, bad length, bad magic, undecodable body.

    ``path`` and ``position`` locate the frame when it was read from a file.
    """

    code = 2

    def __init__(self, message: str, *, path=None, position=None):
        super().__init__(message)
        self.path = path
        self.position = position


class DataLossError(CorruptRecordError):
    """Acknowledged records cannot be read: a segment file is missing, shorter than the
    log recorded, or holds a damaged frame (wrong base offset or length, bad CRC).

    ``first_offset`` and ``end_offset`` name the unreadable range ``[first, end)``
    (``end_offset`` None when unknown), ``path`` and ``position`` the file and byte.
    On the wire it is CORRUPT_MESSAGE (2), with the range in the message.
    """

    def __init__(self, message: str, *, path=None, position=None, topic=None,
                 partition=None, first_offset=None, end_offset=None):
        super().__init__(message, path=path, position=position)
        self.topic = topic
        self.partition = partition
        self.first_offset = first_offset
        self.end_offset = end_offset


class RecordTooLargeError(SparklogError):
    """A frame or record exceeds a size limit (Kafka: MESSAGE_TOO_LARGE,
    RecordTooLargeException): the topic's max.message.bytes, or the producer's
    max.request.size."""

    code = 10
    #: the size found over the limit, where the raiser knows it
    size: int | None = None


class RecordBatchTooLargeError(RecordTooLargeError):
    """A frame is larger than the topic's segment.bytes (Kafka: RECORD_LIST_TOO_LARGE,
    RecordBatchTooLargeException)."""

    code = 18


# --- storage contract (DESIGN.md section 3) -----------------------------------------


class StorageError(SparklogError, OSError):
    """An I/O operation on the storage failed; the message names the path."""

    code = 56


class FileAlreadyExistsError(StorageError):
    """create(overwrite=False) or rename() found its destination already present.

    HDFS: org.apache.hadoop.fs.FileAlreadyExistsException.
    """


class StorageFileNotFoundError(StorageError):
    """The path does not exist (HDFS: java.io.FileNotFoundException)."""


class LeaseHeldError(StorageError):
    """Another writer holds the lease on the file.

    HDFS: AlreadyBeingCreatedException / RecoveryInProgressException.
    """


class LeaseExpiredError(StorageError):
    """This writer lost its lease (another writer recovered the file); it may not write.

    HDFS: LeaseExpiredException.
    """


# --- broker / cluster (used by the write path) ----------------------------------------


class NotLeaderError(SparklogError):
    """This broker does not lead the partition (Kafka: NotLeaderOrFollower)."""

    code = 6
    retriable = True


class FencedLeaderEpochError(SparklogError):
    """A frame or request carries an older leader epoch than the current one."""

    code = 74
    retriable = True


class OutOfOrderSequenceError(SparklogError):
    """An idempotent producer's sequence number is not the next expected one."""

    code = 45


class InvalidProducerEpochError(SparklogError):
    """The producer epoch is older than the broker's (a zombie producer)."""

    code = 47


class IllegalGenerationError(SparklogError):
    """A group member used a generation id that is not the group's current one."""

    code = 22


class UnknownMemberIdError(SparklogError):
    """The group does not know the member id (it left or its session expired)."""

    code = 25


class RebalanceInProgressError(SparklogError):
    """The group is rebalancing: the member must rejoin to get its new assignment."""

    code = 27
    retriable = True


class InconsistentGroupProtocolError(SparklogError):
    """A JoinGroup's protocol type or assignment protocols do not fit the group's other
    members' (Kafka's INCONSISTENT_GROUP_PROTOCOL): the group's members must share a
    protocol type and at least one protocol."""

    code = 23


class FencedInstanceIdError(SparklogError):
    """Another member joined the group with this static member's ``group.instance.id``
    (KIP-345; Kafka's FENCED_INSTANCE_ID): this one is fenced and must stop."""

    code = 82


class CoordinatorNotAvailableError(SparklogError):
    """No broker coordinates the group now (its coordinator died and no other broker has
    taken its slot yet): find the coordinator again (Kafka: COORDINATOR_NOT_AVAILABLE)."""

    code = 15
    retriable = True


class NotCoordinatorError(SparklogError):
    """The broker asked is not the group's coordinator (Kafka: NOT_COORDINATOR): find
    the coordinator again (FindCoordinator) and send the request there."""

    code = 16
    retriable = True


class UnsupportedVersionError(SparklogError):
    """The peer does not support the request's api key or version."""

    code = 35


class RequestTimedOutError(SparklogError):
    """The request did not complete within its timeout."""

    code = 7
    retriable = True


class BrokerNotAvailableError(SparklogError):
    """No broker could be reached at the given address(es)."""

    code = 8
    retriable = True


# --- cluster coordination (ZooKeeper) ------------------------------------------------


class CoordinationError(SparklogError):
    """ZooKeeper cannot be reached, the session expired, or a node does not hold what
    sparklog wrote there; the message names the connect string or the node's path.
    (sparklog's own code: codes from 1000 up are not Kafka's.)"""

    code = 1001
    retriable = True


# --- exactly-once jobs (used by the read path's incremental jobs) ---------------------


class ConcurrentTransactionsError(SparklogError):
    """Another run of the same application committed the same transaction version first
    (Kafka: CONCURRENT_TRANSACTIONS; Delta: ConcurrentTransactionException). The losing
    run wrote nothing visible; rerunning it continues from the winner's offsets."""

    code = 51


class NonEmptyGroupError(SparklogError):
    """The consumer group still has members: it cannot be deleted (Kafka:
    NON_EMPTY_GROUP)."""

    code = 68


class GroupIdNotFoundError(SparklogError):
    """No consumer group with that id (no members, no committed offsets) (Kafka:
    GROUP_ID_NOT_FOUND)."""

    code = 69


class TopicAuthorizationFailedError(SparklogError):
    """The principal may not perform the operation on the topic; also what a principal
    who may not describe a topic is told whether or not it exists (Kafka:
    TOPIC_AUTHORIZATION_FAILED)."""

    code = 29


class GroupAuthorizationFailedError(SparklogError):
    """The principal may not use the consumer group (Kafka: GROUP_AUTHORIZATION_FAILED)."""

    code = 30


class ClusterAuthorizationFailedError(SparklogError):
    """The principal may not perform the cluster operation (Kafka:
    CLUSTER_AUTHORIZATION_FAILED)."""

    code = 31


class TransactionalIdAuthorizationFailedError(SparklogError):
    """The principal may not use the transactional id: InitProducerId with a
    ``transactional_id`` needs Write on that TransactionalId (Kafka:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""

    code = 53


class InvalidProducerIdMappingError(SparklogError):
    """A frame names a producer id that is not bound to the sender: the Produce
    request's producer token for the partition does not bind that id to the
    connection's principal (docs/security.md; Kafka: INVALID_PRODUCER_ID_MAPPING).
    Nothing of the request's records for that partition was written."""

    code = 49


class UnsupportedSaslMechanismError(SparklogError):
    """The listener does not offer the SASL mechanism asked for (Kafka:
    UNSUPPORTED_SASL_MECHANISM)."""

    code = 33


class IllegalSaslStateError(SparklogError):
    """A SASL request out of turn (Kafka: ILLEGAL_SASL_STATE)."""

    code = 34


class SecurityDisabledError(SparklogError):
    """A security API while no authorizer is configured (Kafka: SECURITY_DISABLED)."""

    code = 54


class SaslAuthenticationFailedError(SparklogError):
    """Wrong or unknown credentials (Kafka: SASL_AUTHENTICATION_FAILED); the broker
    closes the connection after answering."""

    code = 58


#: Kafka's names of the error codes sparklog uses (metrics labels, log lines)
KAFKA_ERROR_NAMES = {
    -1: "UNKNOWN_SERVER_ERROR", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT",
    8: "BROKER_NOT_AVAILABLE", 10: "MESSAGE_TOO_LARGE", 15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR", 17: "INVALID_TOPIC_EXCEPTION",
    18: "RECORD_LIST_TOO_LARGE", 22: "ILLEGAL_GENERATION", 25: "UNKNOWN_MEMBER_ID",
    23: "INCONSISTENT_GROUP_PROTOCOL",
    27: "REBALANCE_IN_PROGRESS", 35: "UNSUPPORTED_VERSION", 36: "TOPIC_ALREADY_EXISTS",
    40: "INVALID_CONFIG", 42: "INVALID_REQUEST", 45: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    47: "INVALID_PRODUCER_EPOCH", 49: "INVALID_PRODUCER_ID_MAPPING",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    24: "INVALID_GROUP_ID", 37: "INVALID_PARTITIONS", 44: "POLICY_VIOLATION", 51: "CONCURRENT_TRANSACTIONS", 56: "KAFKA_STORAGE_ERROR",
    68: "NON_EMPTY_GROUP", 69: "GROUP_ID_NOT_FOUND", 74: "FENCED_LEADER_EPOCH",
    82: "FENCED_INSTANCE_ID",
    87: "INVALID_RECORD", 29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED", 33: "UNSUPPORTED_SASL_MECHANISM",
    34: "ILLEGAL_SASL_STATE", 54: "SECURITY_DISABLED", 58: "SASL_AUTHENTICATION_FAILED",
}


def error_name(code: int) -> str:
    """Kafka's name of an error code (``MESSAGE_TOO_LARGE``); sparklog's own codes (from
    1000 up) get their class name."""
    name = KAFKA_ERROR_NAMES.get(code)
    return name if name is not None else error_for_code(code).__name__


def error_for_code(code: int) -> type[SparklogError]:
    """Return the error class that has the given wire ``code`` (SparklogError if none)."""
    return _BY_CODE.get(code, SparklogError)


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


_BY_CODE: dict[int, type[SparklogError]] = {}
for _cls in _all_subclasses(SparklogError):
    _BY_CODE.setdefault(_cls.code, _cls)
