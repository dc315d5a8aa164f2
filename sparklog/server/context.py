"""What a connection knows of its broker, and a handler of its connection.

* :class:`ConnectionContext`: what every connection (:mod:`.server`) needs of the
  broker that accepted it, and nothing more: the limits of ``BrokerConfig``, the
  security (sessions, authentication, quotas), the metrics, the byte budget, the
  request handler, and the broker's open connections. The broker makes one and
  hands it to its listeners; a connection reads no attribute of the broker.
* :class:`RequestContext`: the connection makes one per request; every handler
  receives it beside the request body, so handlers need neither the connection nor
  the broker.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..names import printable

if TYPE_CHECKING:
    from ..protocol.codec import RequestHeader
    from ..security.session import BrokerSecurity
    from .config import BrokerConfig
    from .server import ByteBudget, ClientConnection

#: fetch reads of one connection on the I/O threads at once: a client with thousands of
#: requests in flight waits its turn instead of queueing them all ahead of other clients
IO_SLOTS_PER_CONNECTION = 2


class RequestContext:
    """Who sent a request (client id and host), the connection's ordering lock
    (produce requests of one connection reach their partitions' queues in the order
    they arrived, though they are handled concurrently), ``closed``, a future done
    once the connection is gone (a long poll of a closed connection ends at once),
    ``io_slots``, the connection's share of the I/O threads for fetch reads, and
    ``session``, the connection's
    :class:`~sparklog.security.session.ConnectionSession` (its listener and principal;
    None in-process: User:ANONYMOUS). ``parked`` adds up the seconds the handler waited
    without working (a Fetch's long poll): they do not count against the
    ``request_percentage`` quota."""

    __slots__ = ("client_id", "client_host", "order", "closed", "io_slots", "session",
                 "parked")

    def __init__(self, client_id: str, client_host: str, order: asyncio.Lock | None = None,
                 closed: asyncio.Future | None = None,
                 io_slots: asyncio.Semaphore | None = None, session=None):
        self.session = session
        self.client_id = printable(client_id)  # logged and part of member ids
        self.client_host = client_host
        self.order = order or asyncio.Lock()
        self.closed = closed
        self.io_slots = io_slots or asyncio.Semaphore(IO_SLOTS_PER_CONNECTION)
        self.parked = 0.0


#: ``await handle(header, payload, position, ctx)``: a request's answer (None: none due)
RequestHandler = Callable[["RequestHeader", Any, int, RequestContext], Awaitable["dict | None"]]


class ConnectionContext:
    """What a broker's connections need of it (see the module docstring).

    ``handle`` answers one request (:meth:`~sparklog.server.broker.Broker.handle`);
    ``security`` is the broker's :class:`~sparklog.security.session.BrokerSecurity`
    (sessions, authentication deadlines, quotas); ``run_io`` runs a blocking call on
    the I/O threads; ``budget`` holds ``queued.max.request.bytes``; ``metrics`` is
    the broker's (or None). The limits are in the units connections use:
    ``max_queued_requests`` (``queued.max.requests``), ``max_request_bytes``
    (``socket.request.max.bytes``), ``read_timeout`` (``request.read.timeout.ms``,
    in seconds) and ``max_idle`` (``connections.max.idle.ms``, in seconds).
    :meth:`of_config` reads them from a ``BrokerConfig``.

    ``connections`` are the connections open now; :meth:`stop_reading` (graceful
    shutdown) makes every connection stop taking new requests."""

    __slots__ = ("handle", "security", "run_io", "budget", "metrics",
                 "max_queued_requests", "max_request_bytes", "read_timeout", "max_idle",
                 "connections", "_stopping")

    def __init__(self, *, handle: RequestHandler, security: BrokerSecurity, run_io,
                 budget: ByteBudget, metrics=None, max_queued_requests: int,
                 max_request_bytes: int, read_timeout: float, max_idle: float):
        self.handle = handle
        self.security = security
        self.run_io = run_io
        self.budget = budget
        self.metrics = metrics
        self.max_queued_requests = max_queued_requests
        self.max_request_bytes = max_request_bytes
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self.connections: set[ClientConnection] = set()
        self._stopping = False

    @classmethod
    def of_config(cls, config: BrokerConfig, *, handle: RequestHandler,
                  security: BrokerSecurity, run_io, metrics=None) -> ConnectionContext:
        """The context of a broker of ``config`` (its byte budget is made here)."""
        from .server import ByteBudget

        return cls(handle=handle, security=security, run_io=run_io,
                   budget=ByteBudget(config.queued_max_request_bytes), metrics=metrics,
                   max_queued_requests=config.queued_max_requests,
                   max_request_bytes=config.socket_request_max_bytes,
                   read_timeout=config.request_read_timeout_ms / 1000,
                   max_idle=config.connections_max_idle_ms / 1000)

    @property
    def stopping(self) -> bool:
        """True once the broker stops: connections take no new request."""
        return self._stopping

    def begin_stop(self) -> None:
        """The broker stops: each connection takes no request after the one it reads."""
        self._stopping = True

    def stop_reading(self) -> list[ClientConnection]:
        """Make every open connection stop taking new requests now (those already read
        are still answered); return them."""
        self._stopping = True
        conns = list(self.connections)
        for conn in conns:
            conn.stop_reading()
        return conns
