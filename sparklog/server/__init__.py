"""The broker: a TCP server that appends producers' frames to partition logs and serves
fetches, offsets, metadata and groups (see docs/protocol.md and docs/operations.md).

``Broker`` (asyncio, one event loop), ``EmbeddedBroker`` (the same on a background
thread, for notebooks and tests), ``BrokerConfig`` (Kafka-named properties).
"""

from .broker import Broker
from .config import BrokerConfig, load_properties, parse_properties
from .embedded import EmbeddedBroker

__all__ = ["Broker", "BrokerConfig", "EmbeddedBroker", "load_properties", "parse_properties"]
