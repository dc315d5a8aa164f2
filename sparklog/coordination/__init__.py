"""Coordination layer: cluster state shared by brokers (see :mod:`.base`).

``LocalCoordinationStore`` serves embedded mode (one broker, state on the storage root);
the ZooKeeper store (``zk*.py``) serves cluster mode. Both implement
:class:`CoordinationStore`.
"""

from .base import (
    NO_LEADER,
    BrokerInfo,
    CommittedOffset,
    CoordinationStore,
    LeaderAndEpoch,
    validate_group_id,
)
from .local import LocalCoordinationStore

__all__ = ["NO_LEADER", "BrokerInfo", "CommittedOffset", "CoordinationStore",
           "LeaderAndEpoch", "validate_group_id", "LocalCoordinationStore"]
