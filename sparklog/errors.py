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
    """Records do not match the declared Arrow schema of a typed topic."""

    code = 87


# --- topics, partitions, offsets ---------------------------------------------------


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


class RecordTooLargeError(SparklogError):
    """A frame or request exceeds the configured size limit (message.max.bytes)."""

    code = 10


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


class DuplicateSequenceError(SparklogError):
    """An idempotent producer resent a batch that is already in the log."""

    code = 46


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


def error_for_code(code: int) -> type[SparklogError]:
    """Return the error class that has the given wire ``code`` (SparklogError if none)."""
    return _BY_CODE.get(code, SparklogError)


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


_BY_CODE = {}
for _cls in _all_subclasses(SparklogError):
    _BY_CODE.setdefault(_cls.code, _cls)
