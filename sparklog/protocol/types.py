"""Value types that both sides of the wire protocol share.

Kept free of heavy imports: the client (:mod:`sparklog.client`) and the coordination
stores (:mod:`sparklog.coordination`) both build on them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BrokerInfo:
    """A broker: its id and where it listens, as the Metadata response lists it
    (``brokers`` [{node_id, host, port}]) and as a live broker registers itself in the
    coordination store."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"
