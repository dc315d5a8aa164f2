"""The producer: Producer (public API), RecordAccumulator, Sender, partitioner."""

from .accumulator import FutureRecordMetadata
from .partitioner import DefaultPartitioner, murmur2
from .producer import BatchFuture, BatchMetadata, Producer

__all__ = ["Producer", "BatchFuture", "BatchMetadata", "FutureRecordMetadata",
           "DefaultPartitioner", "murmur2"]
