"""The client layer shared by the producer, the consumer and the admin client:
connections with pipelined requests (:mod:`.connection`), bootstrap and metadata
(:mod:`.network`, :mod:`.metadata`), the consumer's fetcher and group membership
(:mod:`.fetcher`, :mod:`.group`), offset requests (:mod:`.offsets`), futures and the
value types (:mod:`.types`)."""

from .future import Future
from .network import NetworkClient, parse_bootstrap_servers
from .types import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    RecordMetadata,
    TopicPartition,
)

__all__ = ["Future", "NetworkClient", "parse_bootstrap_servers", "ConsumerRecord",
           "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionInfo", "RecordMetadata",
           "TopicPartition"]
