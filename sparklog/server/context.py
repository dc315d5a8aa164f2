"""What a request handler knows about the request's connection: :class:`RequestContext`.

The connection (:mod:`.server`) makes one per request; every handler receives it beside
the request body, so handlers need neither the connection nor the broker.
"""

from __future__ import annotations

import asyncio

from ..names import printable

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
