"""Value types shared by the producer, the consumer and the admin client.

Names and fields follow Kafka's Python and Java clients (``TopicPartition``,
``RecordMetadata``, ``ConsumerRecord``, ``OffsetAndMetadata``) so that code written for
kafka-python reads the same here.
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed: its topic, partition, offset and timestamp
    (ms since the epoch; the broker's append time for LogAppendTime topics)."""

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The record's TopicPartition."""
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    """One record returned by :meth:`Consumer.poll`.

    ``timestamp_type`` is 0 for CreateTime and 1 for LogAppendTime (Kafka's values).
    ``headers`` is a list of ``(str, bytes)`` pairs. For typed topics ``value`` is a dict
    of the row's columns and ``key`` is None.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: object
    headers: list


class OffsetAndMetadata(NamedTuple):
    """A committed offset (the next offset to consume) and its free-text metadata."""

    offset: int
    metadata: str = ""


class OffsetAndTimestamp(NamedTuple):
    """Result of a lookup by timestamp: the first offset whose timestamp is >= the
    requested one, and that record's timestamp."""

    offset: int
    timestamp: int


class PartitionInfo(NamedTuple):
    """A partition as the metadata reports it: its leader broker id and leader epoch,
    and for a compacted partition its leader's dirty ratio (-1 when unknown)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int = 0
    dirty_ratio: float = -1.0
