"""Connections: framing, in-order responses, bounded memory, sendfile.

Each connection has a reader (reads size-prefixed requests and starts one handler task
per request, so several requests are in flight) and a sender (awaits the handler tasks
in arrival order and writes their responses, so answers keep the request order).
Memory stays bounded:

* at most ``queued.max.requests`` requests per connection wait for their answers; a
  further request is not read from the socket until one is answered (back-pressure:
  TCP flow control then slows the client);
* request bytes held by all connections together stay under
  ``queued.max.request.bytes``: the reader waits for room *before* reading a payload;
* a request above ``socket.request.max.bytes`` is answered with RecordTooLargeError
  and its payload is discarded as it arrives, never buffered; the connection stays up.

Input that cannot be answered (a negative size, a header too short to hold a
correlation id, a connection closed mid-request) closes the connection with a logged
reason; the broker keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct

from ...errors import InvalidArgumentError, RecordTooLargeError, SparklogError
from ...protocol.codec import (
    FileRegion, decode_request_header, encode_response_parts, error_fields,
)
from .receiver import RequestReceiver

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">hhi")  # api key, version, correlation id


class ByteBudget:
    """Request bytes in flight across the broker; ``acquire`` waits for room (a single
    request larger than the whole budget is admitted alone). A request's bytes are
    given back as soon as its handler finishes, whatever the order of responses."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._waiters: collections.deque = collections.deque()

    async def acquire(self, n: int) -> None:
        """Wait until ``n`` more bytes fit, then take them."""
        while not (self.used == 0 or self.used + n <= self.limit):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        self.used += n

    def release(self, n: int) -> None:
        """Give back ``n`` bytes and let the waiting readers try again."""
        self.used -= n
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


class Connection:
    """One client connection (see the module docstring)."""

    def __init__(self, broker, receiver):
        self.broker = broker
        self.io = receiver
        peer = receiver.transport.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.client_host = str(peer[0])
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=broker.config.queued_max_requests)
        self.task: asyncio.Task | None = None
        self._read_task: asyncio.Task | None = None
        self.order = asyncio.Lock()

    def stop_reading(self) -> None:
        """Stop taking new requests (graceful shutdown); queued ones are still answered."""
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()

    async def run(self) -> None:
        """Serve the connection until the client closes it or the broker stops."""
        from .broker import RequestContext

        loop = asyncio.get_running_loop()
        sender = loop.create_task(self._send_loop())
        self._read_task = loop.create_task(self._read_loop(RequestContext))
        try:
            await self._read_task
        except asyncio.CancelledError:
            if not self.broker.stopping:
                raise
        finally:
            await self.queue.put(None)
            try:
                await sender
            finally:
                self.io.close()

    async def _read_loop(self, context_type) -> None:
        broker = self.broker
        io = self.io
        max_size = broker.config.socket_request_max_bytes
        try:
            while not broker.stopping:
                size = await io.read_size()
                if size is None:
                    return
                if size < 0:
                    raise InvalidArgumentError(f"invalid request size {size} (negative)")
                if size > max_size:
                    await self._refuse_oversized(size, max_size)
                    continue
                await broker.budget.acquire(size)
                try:
                    payload = await io.read_exact(size)
                    header, position = decode_request_header(payload)
                except BaseException:
                    broker.budget.release(size)
                    raise
                ctx = context_type(header.client_id, self.client_host, self.order)
                task = asyncio.get_running_loop().create_task(
                    broker.handle(header, payload, position, ctx))
                task.add_done_callback(lambda _t, n=size: broker.budget.release(n))
                del payload
                await self.queue.put((header.correlation_id, task))
        except (InvalidArgumentError, ConnectionError) as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)

    async def _refuse_oversized(self, size: int, max_size: int) -> None:
        head = await self.io.read_exact(min(size, _HEAD.size))
        if len(head) < _HEAD.size:
            raise InvalidArgumentError(
                f"oversized request of {size} bytes without a complete header")
        api_key, _version, correlation_id = _HEAD.unpack(head)
        exc = RecordTooLargeError(
            f"request of {size} bytes exceeds socket.request.max.bytes={max_size} "
            f"(api key {api_key}, correlation id {correlation_id})")
        log.warning("refusing a request from %s: %s", self.peer, exc)
        done = asyncio.get_running_loop().create_future()
        done.set_result(error_fields(exc))
        await self.queue.put((correlation_id, done))
        await self.io.discard(size - len(head))

    async def _send_loop(self) -> None:
        loop = asyncio.get_running_loop()
        broken = False
        while True:
            item = await self.queue.get()
            if item is None:
                return
            correlation_id, task = item
            try:
                response = await task
            except BaseException as exc:  # handler crashed: answer with the error
                log.exception("request %d from %s failed", correlation_id, self.peer)
                response = error_fields(exc)
            if response is None or broken:
                continue
            try:
                await self._write(loop, correlation_id, response)
            except (OSError, ConnectionError, SparklogError) as exc:
                log.warning("connection from %s: cannot send response %d: %s", self.peer,
                            correlation_id, exc)
                broken = True
                self.stop_reading()

    async def _write(self, loop, correlation_id: int, response: dict) -> None:
        parts, _total = encode_response_parts(correlation_id, response)
        io = self.io
        if not any(isinstance(p, FileRegion) for p in parts):
            io.writelines(parts)
            await io.drain()
            return
        for part in parts:
            if isinstance(part, FileRegion):
                await io.drain()
                with open(part.path, "rb") as f:
                    sent = await loop.sendfile(io.transport, f, part.offset, part.size)
                if sent != part.size:
                    raise ConnectionError(
                        f"sendfile of {part.path} sent {sent} of {part.size} bytes")
            else:
                io.write(part)
        await io.drain()


def accept(broker, receiver) -> None:
    """A new connection arrived (its :class:`RequestReceiver` is connected): serve it."""
    conn = Connection(broker, receiver)
    conn.task = asyncio.get_running_loop().create_task(_serve(broker, conn))


async def _serve(broker, conn: Connection) -> None:
    broker.connections.add(conn)
    if broker.metrics is not None:
        broker.metrics.connections.inc()
    try:
        await conn.run()
    except Exception:
        log.exception("connection from %s failed", conn.peer)
    finally:
        broker.connections.discard(conn)
        if broker.metrics is not None:
            broker.metrics.connections.dec()


def protocol_factory(broker):
    """The protocol factory for ``loop.create_server``."""
    return lambda: RequestReceiver(lambda receiver: accept(broker, receiver))


__all__ = ["ByteBudget", "Connection", "accept", "protocol_factory"]
