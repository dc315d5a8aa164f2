"""Value types that both sides of the wire protocol share.

Kept free of heavy imports: the client (:mod:`sparklog.clients.network`) and the coordination
stores (:mod:`sparklog.coordination`) both build on them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BrokerInfo:
    """A broker: its id and where it listens, as the Metadata response lists it
    (``brokers`` [{node_id, host, port}]) and as a live broker registers itself in the
    coordination store. ``endpoints`` are its listeners as ``(listener name, host,
    port)`` (the advertised address of each; empty for a broker registered with one
    address, ``host:port``)."""

    node_id: int
    host: str
    port: int
    endpoints: tuple = ()

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """(host, port) of the listener named ``listener`` (Kafka gives a client the
        address of the listener it connected to), else ``host``/``port``."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port
