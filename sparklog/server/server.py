"""Connections: framing, in-order responses, bounded memory, sendfile.

A connection knows of its broker only the :class:`ConnectionContext` the broker made
for its listeners (limits, security, quotas, metrics, the byte budget and the request
handler), never the broker itself.

Each connection has a reader (reads size-prefixed requests and starts one handler task
per request, so several requests are in flight) and a sender (awaits the handler tasks
in arrival order and writes their responses, so answers keep the request order). A
handler that finishes while the sender already waits for it (a long poll woken by an
append, a produce that waited for its append) writes its answer itself, in the same
turn of the event loop, instead of waking the sender to write it one turn later.
Memory stays bounded:

* at most ``queued.max.requests`` requests per connection wait for their answers; a
  further request is not read from the socket until one is answered (back-pressure:
  TCP flow control then slows the client);
* request bytes held by all connections together stay under
  ``queued.max.request.bytes``: a large request's bytes are reserved as they arrive,
  a small one's (read into the connection's staging buffer) once it is whole; when the
  budget is full, each connection may still take one small request beside it, so
  large requests that arrive slowly and fill the budget between them (a trickling
  client) do not keep other clients' ApiVersions or Metadata waiting;
* a begun request must arrive whole within ``request.read.timeout.ms`` (not only
  without a silence that long), else the connection is closed and its reserved bytes
  given back;
* a request above ``socket.request.max.bytes`` is answered with RecordTooLargeError
  and its payload is discarded as it arrives, never buffered; the connection stays up.

On a SASL listener a connection is served only ApiVersions, SaslHandshake and
SaslAuthenticate until it authenticated (its
:class:`~sparklog.security.session.ConnectionSession` answers those), within
``authentication.timeout.ms`` (checked while a request's bytes trickle in, not only
between requests) and with requests of at most
``sasl.server.max.receive.size`` bytes; anything else, or a failed authentication, is
answered and the connection closed (on a Kafka listener anything else is closed
unanswered and undecoded, as Kafka's broker does).

Client quotas (:mod:`sparklog.security.quotas`) are enforced here: a Produce request's
bytes, a Fetch response's bytes and every request's handling time are taken from the
user's or client id's buckets; a debt mutes the connection (no request is read) for as
long as it takes to repay, and Produce and Fetch responses say so in
``throttle_time_ms``.

Input that cannot be answered (a negative size, a header too short to hold a
correlation id, a connection closed mid-request) closes the connection with a logged
reason; the broker keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..errors import InvalidArgumentError, RecordTooLargeError, SparklogError
from ..protocol.apis import ApiKey
from ..protocol.codec import (
    FileRegion,
    RequestHeader,
    decode_request_header,
    encode_response_parts,
    error_fields,
)
from .context import IO_SLOTS_PER_CONNECTION, RequestContext
from .receiver import ReadTimeout, RequestReceiver

if TYPE_CHECKING:
    from ..security.session import BrokerSecurity
    from .config import BrokerConfig
    from .kafka.apis import KafkaApis

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">hhi")  # api key, version, correlation id
#: the responses that carry ``throttle_time_ms`` (the others' throttling is the mute)
_THROTTLE_REPORTED = (ApiKey.PRODUCE, ApiKey.FETCH)


def _records_size(response: dict | bytes) -> int:
    """Bytes of record data in a Fetch response (what ``consumer_byte_rate`` counts; a
    Kafka listener's encoded response counts whole)."""
    if isinstance(response, bytes):
        return len(response)
    total = 0
    for topic in response.get("topics", ()):
        for p in topic.get("partitions", ()):
            records = p.get("records", b"")
            total += records.size if isinstance(records, FileRegion) else len(records)
    return total


class ByteBudget:
    """Request bytes held across the broker (``queued.max.request.bytes``).

    Readers reserve a request's bytes as they arrive (see
    :mod:`~sparklog.server.receiver`) and give them back once its handler
    finished, whatever the order of responses. A reservation that does not fit waits,
    except that one request at a time (its ``owner``) may go past the limit: so a
    request larger than the whole budget is still served, and partly received requests
    that filled the budget between them cannot wait for each other forever. The bytes
    held thus stay below the limit plus one request (``socket.request.max.bytes``),
    plus the small request each connection may take beside a full budget
    (:meth:`ClientConnection._reserve_small`)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._over = None          # the owner allowed past the limit, if any
        self._waiters: collections.deque = collections.deque()

    def try_acquire(self, n: int, owner=None) -> bool:
        """Take ``n`` bytes for ``owner`` if they fit now (see the class docstring)."""
        if self.used + n > self.limit:
            if self._over is None and owner is not None:
                self._over = owner
            elif self._over is not owner or owner is None:
                return False
        self.used += n
        return True

    async def acquire(self, n: int, owner=None) -> None:
        """Wait until ``n`` more bytes fit for ``owner``, then take them."""
        while not self.try_acquire(n, owner):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    def release(self, n: int, owner=None) -> None:
        """Give back ``n`` bytes (all of ``owner``'s) and let the waiting readers try
        again."""
        self.used -= n
        if owner is not None and owner is self._over:
            self._over = None
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


#: ``await handle(header, payload, position, ctx)``: a request's answer (None: none due)
RequestHandler = Callable[[RequestHeader, Any, int, RequestContext], Awaitable["dict | None"]]


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

    ``kafka`` answers the requests of the listeners named in ``kafka_listeners``, which
    speak Apache Kafka's wire protocol (:class:`~sparklog.server.kafka.apis.KafkaApis`;
    None: no such listener).

    ``connections`` are the connections open now; :meth:`stop_reading` (graceful
    shutdown) makes every connection stop taking new requests."""

    __slots__ = ("handle", "security", "run_io", "budget", "metrics",
                 "max_queued_requests", "max_request_bytes", "read_timeout", "max_idle",
                 "connections", "kafka", "kafka_listeners", "_stopping")

    def __init__(self, *, handle: RequestHandler, security: BrokerSecurity, run_io,
                 budget: ByteBudget, metrics=None, max_queued_requests: int,
                 max_request_bytes: int, read_timeout: float, max_idle: float,
                 kafka: KafkaApis | None = None, kafka_listeners: frozenset = frozenset()):
        self.handle = handle
        self.kafka = kafka
        self.kafka_listeners = kafka_listeners
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
                  security: BrokerSecurity, run_io, metrics=None,
                  kafka: KafkaApis | None = None) -> ConnectionContext:
        """The context of a broker of ``config`` (its byte budget is made here)."""
        names = frozenset(n.strip().upper() for n in config.kafka_listener_names.split(",")
                          if n.strip())
        return cls(handle=handle, security=security, run_io=run_io, kafka=kafka,
                   kafka_listeners=names,
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


class ClientConnection:
    """One client connection (see the module docstring), accepted on ``listener``
    (None: the default one) of the broker whose
    :class:`~sparklog.server.context.ConnectionContext` is ``context``."""

    def __init__(self, context: ConnectionContext, receiver, listener=None):
        self.context = context
        self.io = receiver
        peer = receiver.transport.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.client_host = str(peer[0])
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=context.max_queued_requests)
        self.task: asyncio.Task | None = None
        self._read_task: asyncio.Task | None = None
        self.order = asyncio.Lock()
        self.io_slots = asyncio.Semaphore(IO_SLOTS_PER_CONNECTION)
        self.pending = 0   # requests read and not yet answered
        #: a quota's throttling: no request is read before this loop time; the
        #: responses of throttled requests carry the delay (correlation id -> ms)
        self.muted_until = 0.0
        self.throttled: dict[int, int] = {}
        #: requests handled: correlation id -> (api key, client id, seconds of handling)
        self.work: dict[int, tuple] = {}
        #: the handler task the sender waits for (the oldest unanswered request)
        self._head: asyncio.Task | None = None
        #: True once writing an answer failed: nothing more is written
        self._broken = False
        #: the owner of the small request taken beside the full byte budget, if any
        self._spare = None
        receiver.read_timeout = context.read_timeout
        receiver.deadline_reason = "did not authenticate within authentication.timeout.ms"
        self.session = context.security.session(listener, receiver.transport,
                                                self.client_host, context.run_io)
        self.auth_deadline = asyncio.get_running_loop().time() \
            + context.security.authentication_timeout(listener)
        #: the Kafka APIs when the listener speaks Kafka's protocol (None: sparklog's)
        self.kafka = context.kafka if listener is not None \
            and listener.name.upper() in context.kafka_listeners else None

    def stop_reading(self) -> None:
        """Stop taking new requests (graceful shutdown); queued ones are still answered."""
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()

    async def run(self) -> None:
        """Serve the connection until the client closes it or the broker stops."""
        loop = asyncio.get_running_loop()
        sender = loop.create_task(self._send_loop())
        self._read_task = loop.create_task(self._read_loop())
        try:
            await self._read_task
        except asyncio.CancelledError:
            if not self.context.stopping:
                raise
        finally:
            await self.queue.put(None)
            try:
                await sender
            finally:
                self.io.close()

    async def _read_loop(self) -> None:
        context = self.context
        io = self.io
        max_size = context.max_request_bytes
        idle = context.max_idle
        try:
            while not context.stopping:
                wait_mute = self.muted_until - asyncio.get_running_loop().time()
                if wait_mute > 0:  # a quota's throttle: the channel is muted
                    await asyncio.sleep(wait_mute)
                session = self.session
                wait = idle if session.authenticated else max(
                    0.0, self.auth_deadline - asyncio.get_running_loop().time())
                # the whole of a request is bounded by the same deadline until then
                io.deadline = None if session.authenticated else self.auth_deadline
                try:
                    size = await io.read_size(min(idle, wait))
                except ReadTimeout:
                    if not session.authenticated:
                        raise ConnectionError(
                            "did not authenticate within authentication.timeout.ms") from None
                    if self.pending and not io.buffered:  # a long poll or a slow
                        continue                           # answer: not idleness
                    raise
                if size is None:
                    return
                if size < 0:
                    raise InvalidArgumentError(f"invalid request size {size} (negative)")
                if not session.authenticated and size > session.max_receive:
                    raise ConnectionError(
                        f"a request of {size} bytes before authentication exceeds "
                        f"sasl.server.max.receive.size={session.max_receive}")
                if size > max_size:
                    await self._refuse_oversized(size, max_size)
                    continue
                owner = object()  # this request's share of the byte budget
                if size <= io.small_bytes:
                    payload = await io.read_exact(size)
                    await self._reserve_small(size, owner)
                else:
                    payload = await io.read_exact(size, context.budget, owner)
                try:
                    if self.kafka is not None and not session.authenticated:
                        _refuse_before_authentication(payload, session)
                    # a Kafka listener's "position" is the decoded request
                    header, position = decode_request_header(payload) if self.kafka is None \
                        else self.kafka.decode(payload)
                except BaseException:
                    self._release(size, owner)
                    raise
                if session.handles(header.api_key):
                    self._release(size, owner)
                    if not await self._authenticate(header, payload, position):
                        return
                    continue
                client_id = header.client_id or ""  # Kafka's header may name none
                ctx = RequestContext(client_id, self.client_host, self.order, io.lost,
                                     self.io_slots, session)
                task = asyncio.get_running_loop().create_task(
                    self._handle(header, payload, position, ctx))
                task.add_done_callback(self._releaser(size, owner))
                del payload
                if header.api_key == ApiKey.PRODUCE:
                    delay = self._throttle("producer_byte_rate", client_id, size)
                    if delay:
                        self.throttled[header.correlation_id] = delay
                self.pending += 1
                await self.queue.put((header.correlation_id, task))
                if io.buffered:  # more requests already here: let other connections
                    await asyncio.sleep(0)  # have their turn first (round robin)
        except (InvalidArgumentError, ConnectionError) as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)

    async def _reserve_small(self, size: int, owner) -> None:
        """Reserve a small request's bytes (all arrived): from the byte budget, else,
        when it is full and the connection holds none beside it, beside it."""
        budget = self.context.budget
        if budget.try_acquire(size, owner):
            return
        if self._spare is None:
            self._spare = owner
            return
        await budget.acquire(size, owner)

    def _releaser(self, size: int, owner) -> Callable[[asyncio.Task], None]:
        """A done callback of a request's handler task: :meth:`_release` its bytes."""
        return lambda _task: self._release(size, owner)

    def _release(self, size: int, owner) -> None:
        """Give back a request's reserved bytes."""
        if owner is self._spare:
            self._spare = None
        else:
            self.context.budget.release(size, owner)

    async def _handle(self, header, payload, position: int, ctx: RequestContext):
        """The broker's answer to one request; the time it took (less a long poll's
        wait) is kept for the ``request_percentage`` quota. When the sender already
        waits for this very request (every earlier one is answered: a long poll woken
        by an append, a produce that waited for its append), the answer is written
        here, in this turn of the event loop, rather than one turn later by the sender
        (:data:`_ANSWERED` is returned then)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        response: dict | bytes | None
        try:
            if self.kafka is None:
                response = await self.context.handle(header, payload, position, ctx)
            else:
                response = await self.kafka.handle(header, position, ctx)
        finally:
            self.work[header.correlation_id] = (
                header.api_key, header.client_id,
                max(0.0, loop.time() - started - ctx.parked))
        if self._head is not None and self._head is asyncio.current_task():
            await self._respond(loop, header.correlation_id, response)
            return _ANSWERED
        return response

    def _throttle(self, kind: str, client_id: str, amount: float) -> int:
        """Count ``amount`` against the connection's quota ``kind``; mute the
        connection for the time the quota's debt takes to repay (Kafka's throttling)
        and return that time in milliseconds (0: no throttling)."""
        delay = self.context.security.quotas.record(kind, self.session.principal,
                                                    client_id, amount)
        if delay <= 0:
            return 0
        now = asyncio.get_running_loop().time()
        self.muted_until = max(self.muted_until, now + delay)
        if self.context.metrics is not None:
            self.context.metrics.throttled(kind, delay)
        return max(1, int(delay * 1000))

    async def _authenticate(self, header, payload, position: int) -> bool:
        """Let the session answer a SASL request (or one sent before authentication);
        False when the connection must close (after the answer and
        ``connection.failed.authentication.delay.ms``)."""
        from ..protocol.codec import decode_request_body

        done = asyncio.get_running_loop().create_future()
        ok = True
        metrics = self.context.metrics
        listener = getattr(self.session.listener, "name", "?")
        kafka = self.kafka
        try:
            body = decode_request_body(header, payload, position) if kafka is None \
                else kafka.sasl_body(header, position)
            was = self.session.authenticated
            answer = await self.session.answer(header.api_key, body)
            done.set_result(answer if kafka is None else kafka.encode(header, answer))
            if metrics is not None and self.session.authenticated and not was:
                metrics.authenticated(listener, True)
        except SparklogError as exc:
            if metrics is not None and header.api_key == ApiKey.SASL_AUTHENTICATE:
                metrics.authenticated(listener, False)
            log.warning("closing connection from %s (listener %s): %s", self.peer,
                        getattr(self.session.listener, "name", "?"), exc)
            done.set_result(error_fields(exc) if kafka is None
                            else kafka.encode(header, error_fields(exc)))
            ok = False
        self.pending += 1
        await self.queue.put((header.correlation_id, done))
        if not ok:
            await asyncio.sleep(self.context.security.failure_delay(self.session.listener))
        return ok

    async def _refuse_oversized(self, size: int, max_size: int) -> None:
        if self.kafka is not None:  # Kafka's broker closes such a connection
            raise InvalidArgumentError(
                f"request of {size} bytes exceeds socket.request.max.bytes={max_size}")
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
        self.pending += 1
        await self.queue.put((correlation_id, done))
        await self.io.discard(size - len(head))

    async def _send_loop(self) -> None:
        """Answer the requests in their arrival order: wait for each one's handler (the
        :attr:`_head`), then write its answer, unless the handler wrote it itself."""
        loop = asyncio.get_running_loop()
        while True:
            item = await self.queue.get()
            if item is None:
                return
            correlation_id, task = item
            self._head = task
            try:
                response = await task
            except BaseException as exc:  # handler crashed: answer with the error
                log.exception("request %d from %s failed", correlation_id, self.peer)
                response = error_fields(exc)
            finally:
                self._head = None
                self.pending -= 1
            if response is not _ANSWERED:
                await self._respond(loop, correlation_id, response)

    async def _respond(self, loop, correlation_id: int, response: dict | bytes | None) -> None:
        """Count a handled request against the quotas and write its answer (None: no
        answer is due); once a write failed, nothing more is written."""
        throttle_ms = self.throttled.pop(correlation_id, 0)
        work = self.work.pop(correlation_id, None)
        if work is not None and not self._broken:
            api_key, client_id, seconds = work
            throttle_ms = max(throttle_ms, self._throttle("request_percentage",
                                                          client_id, seconds))
            if api_key == ApiKey.FETCH and response is not None:
                # a consumer's quota counts the response it is about to get
                throttle_ms = max(throttle_ms, self._throttle(
                    "consumer_byte_rate", client_id, _records_size(response)))
        if response is None or self._broken:
            return
        if throttle_ms and work is not None and work[0] in _THROTTLE_REPORTED \
                and isinstance(response, dict):
            response["throttle_time_ms"] = throttle_ms
        try:
            await self._write(loop, correlation_id, response)
        except (OSError, ConnectionError, SparklogError) as exc:
            # a client that closed its side (end of stream, reset: a consumer closing
            # with a fetch in flight) is a normal close, logged at DEBUG as Kafka does
            closed = self.io.peer_closed
            log.log(logging.DEBUG if closed else logging.WARNING,
                    "connection from %s: cannot send response %d: %s%s", self.peer,
                    correlation_id, exc, " (the client closed the connection)" if closed else "")
            self._broken = True
            self.stop_reading()

    async def _write(self, loop, correlation_id: int, response: dict | bytes) -> int:
        """Send one response (a Kafka listener's comes encoded); return its size."""
        if isinstance(response, bytes):
            self.io.write(response)
            await self.io.drain()
            return len(response)
        parts, total = encode_response_parts(correlation_id, response)
        io = self.io
        if not any(isinstance(p, FileRegion) for p in parts):
            io.writelines(parts)
            await io.drain()
            return total
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
        return total


#: what a handler returns when it wrote its answer itself (ClientConnection._handle)
_ANSWERED = object()


def _refuse_before_authentication(payload, session) -> None:
    """On a Kafka listener, before its SASL authentication completed, only ApiVersions,
    SaslHandshake and SaslAuthenticate are read: any other request closes the
    connection unanswered and undecoded (Kafka's SaslServerAuthenticator: "Unexpected
    Kafka request of type ... during SASL handshake"), so no request schema but those
    is parsed for a client that has not authenticated."""
    from ..security.session import BEFORE_AUTHENTICATION

    if len(payload) < 2:
        return  # the decoder names what is wrong with it
    api_key = int.from_bytes(bytes(payload[:2]), "big", signed=True)
    if api_key not in BEFORE_AUTHENTICATION:
        raise ConnectionError(
            f"unexpected Kafka request of api key {api_key} during SASL handshake "
            f"(listener {getattr(session.listener, 'name', '?')} is "
            f"{getattr(session.listener, 'protocol', '?')}): closed unanswered")


def accept(context: ConnectionContext, receiver, listener=None) -> None:
    """A new connection arrived on ``listener`` (its :class:`RequestReceiver` is
    connected): serve it."""
    conn = ClientConnection(context, receiver, listener)
    conn.task = asyncio.get_running_loop().create_task(_serve(context, conn))


async def _serve(context: ConnectionContext, conn: ClientConnection) -> None:
    context.connections.add(conn)
    if context.metrics is not None:
        context.metrics.connections.inc()
    try:
        await conn.run()
    except Exception:
        log.exception("connection from %s failed", conn.peer)
    finally:
        context.connections.discard(conn)
        if context.metrics is not None:
            context.metrics.connections.dec()


def protocol_factory(context: ConnectionContext, on_lost=None, listener=None):
    """The protocol factory for sockets accepted on ``listener`` of the broker whose
    connections share ``context``; ``on_lost(receiver)`` is called when a connection
    is gone."""
    return lambda: RequestReceiver(lambda receiver: accept(context, receiver, listener),
                                   on_lost)


__all__ = ["ByteBudget", "ClientConnection", "ConnectionContext", "accept", "protocol_factory"]
