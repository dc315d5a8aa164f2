"""The connection layer shared by the producer, the consumer and the admin client:
connections with pipelined requests (:mod:`.connection`), bootstrap and metadata
(:mod:`.network`, :mod:`.metadata`), offset requests (:mod:`.offsets`), client settings
(:mod:`.settings`), futures (:mod:`.future`) and wake-ups (:mod:`.wakeup`); the value
types are re-exported from :mod:`sparklog.clients.types`."""

from ..types import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    RecordMetadata,
    TopicPartition,
)
from .future import Future
from .network import NetworkClient, parse_bootstrap_servers

__all__ = ["Future", "NetworkClient", "parse_bootstrap_servers", "ConsumerRecord",
           "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionInfo", "RecordMetadata",
           "TopicPartition"]
