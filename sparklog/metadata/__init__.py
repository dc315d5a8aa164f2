"""Metadata layer: topic names and configs, persisted on the storage.

Cluster state (brokers, controller, leaders, groups) lives in the coordination layer
(local metadata store or ZooKeeper); topic configs live on the storage so that the
storage alone describes the log.
"""

from .store import TopicStore
from .topic import TopicConfig, validate_partition, validate_topic_name

__all__ = ["TopicStore", "TopicConfig", "validate_topic_name", "validate_partition"]
