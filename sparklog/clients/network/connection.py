"""One TCP connection to one broker, with several requests in flight.

Requests are written in the caller's thread (under a lock, so writes never interleave)
and get a correlation id; the broker answers in order, and each response is matched to
the oldest in-flight request (checking the correlation id) and completes its
:class:`~sparklog.clients.network.future.Future` with the decoded body. Who reads the responses
depends on the connection's kind: a *threaded* connection has a reader thread of its
own (any thread may send and wait); a *polled* one (``polled=True``) has none: its
owner reads the responses that are ready by calling :meth:`~BrokerConnection.poll`,
and the futures complete (their callbacks run) in that thread, as Kafka's clients read
their connections in the thread that polls them. A polled connection serves one thread
(the consumer's polling thread): a response reaches it without a thread hand-off. At most
``max_in_flight`` requests wait for answers: a further :meth:`send` blocks until one
completes (back-pressure instead of growth). A response saying a quota throttled the
client (``throttle_time_ms`` > 0) holds back the connection's next blocking
:meth:`send` until that time has passed (Kafka's clients back off the same way instead
of queueing requests on a muted channel).

When the connection breaks (the broker died, a response is malformed, a request timed
out) every waiting request fails with a retriable
:class:`~sparklog.errors.BrokerNotAvailableError` or
:class:`~sparklog.errors.RequestTimedOutError` and the connection is closed; the owner
(the :class:`~sparklog.clients.network.network.NetworkClient`) opens a new one on the next use.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Iterator

from ...errors import BrokerNotAvailableError, RequestTimedOutError, SparklogError
from ...protocol.apis import ApiKey, api_name
from ...protocol.codec import SIZE, decode_response, encode_request_parts
from ...protocol.stream import recv_exact, send_parts
from .future import Future

log = logging.getLogger(__name__)

#: Largest response to a request other than Fetch (metadata, offsets, groups...).
MAX_RESPONSE_BYTES = 64 << 20
#: What a Fetch response may carry beyond its ``max_bytes``: the first frame is returned
#: whole even when larger (as Kafka returns the first record batch), and no frame is
#: larger than the request that produced it (the broker's default
#: ``socket.request.max.bytes``)
FETCH_FRAME_ALLOWANCE = 100 << 20
#: framing of a Fetch response: per response, and per partition asked
FETCH_OVERHEAD, FETCH_OVERHEAD_PER_PARTITION = 64 << 10, 256


def response_limit(api_key: int, body: dict | None) -> tuple[int, str]:
    """The largest response a request can get, and how that bound was reached (for
    the error when a peer announces more)."""
    if api_key == ApiKey.FETCH and body:
        partitions = sum(len(t.get("partitions", ())) for t in body.get("topics", ()))
        asked = max(int(body.get("max_bytes", 0)), 0)
        limit = asked + FETCH_FRAME_ALLOWANCE + FETCH_OVERHEAD \
            + partitions * FETCH_OVERHEAD_PER_PARTITION
        return limit, (f"its max_bytes ({asked}) + {FETCH_FRAME_ALLOWANCE} for one frame "
                       "larger than that + framing")
    return MAX_RESPONSE_BYTES, "the bound of responses other than Fetch"


class BrokerConnection:
    """A connection to ``host:port``; see the module docstring.

    ``request_timeout_ms`` bounds how long a request may wait for its response (a fetch
    adds its own ``max_wait_ms``); ``node_id`` is the broker id (-1 for a bootstrap
    address not yet identified); ``security`` (a
    :class:`~sparklog.security.client.ClientSecurity`) adds TLS and SASL; ``polled``:
    no reader thread, the owner calls :meth:`poll` (see the module docstring).
    """

    def __init__(self, host: str, port: int, *, node_id: int = -1, client_id: str = "",
                 max_in_flight: int = 5, request_timeout_ms: int = 30000,
                 connect_timeout_ms: int = 10000, security=None, polled: bool = False):
        self.host = host
        self.port = int(port)
        self.node_id = node_id
        self.client_id = client_id
        self.max_in_flight = max(1, int(max_in_flight))
        self.request_timeout = request_timeout_ms / 1000.0
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._state = threading.Condition()
        # (correlation id, api key, future, deadline, largest response)
        self._in_flight: collections.deque = collections.deque()
        self._closed = False
        self._announced = 0  # size of a response being received
        self._throttled_until = 0.0  # a quota's throttle_time_ms: no blocking send before
        self._error: SparklogError | None = None
        #: api key -> (lowest, highest) version the broker speaks (from ApiVersions)
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.polled = polled
        self._reading = False  # a polled connection: a response is being read
        self._reading_since = 0.0  # ... since then
        if security is not None:  # TLS and SASL before the reader starts
            self._sock = security.connect(host, self.port, connect_timeout_ms / 1000.0,
                                          client_id)
        else:
            try:
                self._sock = socket.create_connection((host, self.port),
                                                      timeout=connect_timeout_ms / 1000.0)
            except OSError as exc:
                raise BrokerNotAvailableError(
                    f"cannot connect to broker {host}:{port}: {exc.strerror or exc}") from None
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(None)  # deadlines are enforced by the watchdog thread
        self._reader: threading.Thread | None = None
        if not polled:
            self._reader = threading.Thread(
                target=self._read_loop, name=f"sparklog-conn-{host}:{port}", daemon=True)
            self._reader.start()
        _WATCHDOG.watch(self)

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node {self.node_id})"

    @property
    def address(self) -> str:
        """``host:port`` of the broker."""
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        """False once the connection broke or was closed."""
        return not self._closed

    def check_alive(self) -> bool:
        """False once the connection broke or was closed. An idle connection (no
        request waiting, no response being read) whose socket is at its end (the
        broker closed it) is failed now, not on its next request. The socket's raw
        bytes are peeked at, never taken (under TLS they may be a session ticket)."""
        with self._state:
            if self._closed:
                return False
            if self._in_flight or self._reading:
                return True
            try:
                gone = socket.socket.recv(self._sock, 1,
                                          socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except (BlockingIOError, InterruptedError):
                gone = False
            except (OSError, ValueError):
                gone = True
        if gone:
            self._fail(BrokerNotAvailableError(f"broker {self.address} closed the connection"))
        return not gone

    @property
    def in_flight(self) -> int:
        """Number of requests waiting for their response."""
        return len(self._in_flight)

    # --- requests ------------------------------------------------------------------
    def send(self, api_key: int, body: dict | None, *, expect_response: bool = True,
             extra_timeout_ms: int = 0, block: bool = True) -> Future:
        """Send one request; return a future of its decoded response body.

        With ``expect_response=False`` (produce with acks=0) the future completes with
        None once the bytes are written. ``block=False`` fails at once with
        RequestTimedOutError instead of waiting when ``max_in_flight`` are waiting.
        """
        future = Future()
        if self.polled and block:  # nobody else reads this connection's answers
            while not self._closed and len(self._in_flight) >= self.max_in_flight:
                self.poll(0.5)
        with self._state:
            while not self._closed and len(self._in_flight) >= self.max_in_flight:
                if not block:
                    return future.failure(RequestTimedOutError(
                        f"{self.max_in_flight} requests already in flight to {self.address}"))
                self._state.wait(0.5)
            while block and not self._closed \
                    and (wait := self._throttled_until - time.monotonic()) > 0:
                self._state.wait(wait)  # backing off while a quota throttles us
            if self._closed:
                return future.failure(self._broken(f"{api_name(api_key)} request"))
            correlation_id = next(self._ids)
            parts = encode_request_parts(api_key, body, correlation_id, self.client_id)
            if expect_response:
                deadline = time.monotonic() + self.request_timeout + extra_timeout_ms / 1000.0
                self._in_flight.append((correlation_id, api_key, future, deadline,
                                        response_limit(api_key, body)))
                self._state.notify_all()
            # the write lock is taken inside the state lock so that the in-flight order
            # is the write order
            self._write_lock.acquire()
        try:
            send_parts(self._sock, parts)  # record data goes out without a joining copy
        except OSError as exc:
            self._write_lock.release()
            error = BrokerNotAvailableError(
                f"connection to broker {self.address} broke while sending "
                f"{api_name(api_key)}: {exc.strerror or exc}")
            self._fail(error)
            if not expect_response:
                future.failure(self._error or error)
            return future
        self._write_lock.release()
        if not expect_response:
            future.success(None)
        return future

    def request(self, api_key: int, body: dict | None, timeout: float | None = None):
        """Send and wait: the decoded response body (raises the request's error)."""
        wait = timeout if timeout is not None else self.request_timeout + 1.0
        future = self.send(api_key, body)
        if self.polled:
            deadline = time.monotonic() + wait
            while not future.is_done and (left := deadline - time.monotonic()) > 0:
                self.poll(left)
        return future.get(wait)

    def _broken(self, what: str) -> SparklogError:
        if self._error is not None:
            return type(self._error)(f"{what} not sent: {self._error}")
        return BrokerNotAvailableError(f"{what} not sent: connection to {self.address} "
                                       "is closed")

    # --- reading --------------------------------------------------------------------
    def check_deadline(self, now: float) -> None:
        """Close the connection if its oldest request is past its deadline (called by
        the watchdog thread; closing unblocks the reader). A polled connection is
        checked here only while a response is being read (a peer that stops in the
        middle of one); otherwise :meth:`poll` checks its deadlines, after reading what
        arrived, so an answer that came in time is not failed because its owner polled
        late (as Kafka's client handles completed receives before timeouts), and a
        response whose reading begins after its deadline has ``request_timeout_ms``
        from then to arrive in full."""
        if not self.polled:
            self._check_deadline(now)
        elif self._reading:  # a response whose reading began late gets its own timeout
            self._check_deadline(now, self._reading_since + self.request_timeout)

    def _check_deadline(self, now: float, floor: float = 0.0) -> None:
        with self._state:
            head = self._in_flight[0] if self._in_flight else None
        if head is not None and now > max(head[3], floor):
            partial = self._announced
            self._fail(RequestTimedOutError(
                f"{api_name(head[1])} request to broker {self.address} got no response "
                "within its timeout" + (f" (a response of {partial} bytes was announced and "
                                        "did not arrive in full)" if partial else "")))

    def _read_loop(self) -> None:
        """The reader thread of a threaded connection."""
        with self._failing():
            while True:
                with self._state:
                    while not self._in_flight and not self._closed:
                        self._state.wait()
                    if self._closed:
                        return
                if not self._read_one():
                    return

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """Fail the connection when reading breaks the protocol or the socket breaks
        (the one rule of the reader thread and of a polled connection's reading)."""
        try:
            yield
        except _Protocol as exc:
            self._fail(BrokerNotAvailableError(str(exc)))
        except (OSError, ValueError, SparklogError) as exc:
            if not self._closed:
                self._fail(BrokerNotAvailableError(
                    f"connection to broker {self.address} broke: {exc}"))

    def fileno(self) -> int:
        """The socket's file descriptor (-1 once closed), for waiting on readiness."""
        return self._sock.fileno()

    def ready(self) -> bool:
        """True when bytes of a response can be read without waiting (TLS: decrypted
        bytes buffered in the SSL object count too)."""
        if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
            return True
        fd = self._sock.fileno()
        if fd < 0:
            return True  # closed meanwhile: reading reports it
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        try:
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def poll(self, timeout: float) -> bool:
        """A polled connection's reading (see the module docstring): wait up to
        ``timeout`` seconds for a response, then read every response that is ready
        and complete their futures in this thread. Fails the connection when the
        oldest request is past its deadline with no answer. Returns True when it read
        a response."""
        if self._closed or not self._in_flight:
            return False
        if not self.ready():
            wait = min(timeout, self.next_deadline - time.monotonic())
            if wait > 0:
                wait_readable([self], wait)
        return self.read_ready()

    @property
    def next_deadline(self) -> float:
        """When the oldest waiting request times out (``time.monotonic()``; infinity
        when none waits)."""
        with self._state:
            return self._in_flight[0][3] if self._in_flight else float("inf")

    def read_ready(self) -> bool:
        """Read the responses that are ready (a polled connection; after a wait on
        :meth:`fileno`); then check the oldest request's deadline. True when it read
        a response."""
        got = False
        with self._failing():
            while self._in_flight and not self._closed and self.ready():
                self._reading_since = time.monotonic()
                self._reading = True
                try:
                    if not self._read_one():
                        break
                finally:
                    self._reading = False
                got = True
        if not self._closed:
            self._check_deadline(time.monotonic())
        return got

    def _read_one(self) -> bool:
        """Read one response and complete the oldest request's future with it. False
        when the connection failed meanwhile (a timeout, a close); raises _Protocol for
        a response that breaks the protocol, OSError when the stream breaks."""
        (size,) = SIZE.unpack(recv_exact(self._sock, 4))
        with self._state:
            if not self._in_flight:  # failed meanwhile (timeout, close)
                return False
            head = self._in_flight[0]
        limit, why = head[4]
        if not 0 <= size <= limit:
            raise _Protocol(
                f"{api_name(head[1])} response from {self.address} announces {size} "
                f"bytes, more than the {limit} the request can get ({why}): the peer "
                "is not a sparklog broker or the stream is corrupt" if size >= 0 else
                f"{api_name(head[1])} response from {self.address} announces a "
                f"negative size {size}: the peer is not a sparklog broker or the "
                "stream is corrupt")
        self._announced = size
        payload = recv_exact(self._sock, size)
        self._announced = 0
        with self._state:
            if not self._in_flight:  # failed meanwhile (timeout, close)
                return False
            correlation_id, api_key, future, _, _ = self._in_flight.popleft()
            self._state.notify_all()
        try:
            got_id, body = decode_response(payload, api_key)
        except SparklogError as exc:
            future.failure(exc)
            raise _Protocol(f"malformed {api_name(api_key)} response from broker "
                            f"{self.address}: {exc}") from None
        if got_id != correlation_id:
            future.failure(BrokerNotAvailableError("correlation id mismatch"))
            raise _Protocol(
                f"broker {self.address} answered correlation id {got_id}, "
                f"expected {correlation_id}")
        self._note_throttle(body)
        future.success(body)
        return True

    @property
    def throttled_for(self) -> float:
        """Seconds until the throttling the broker last reported ends (0: none)."""
        return max(0.0, self._throttled_until - time.monotonic())

    def _note_throttle(self, body) -> None:
        ms = body.get("throttle_time_ms", 0) if isinstance(body, dict) else 0
        if ms and ms > 0:
            until = time.monotonic() + ms / 1000.0
            with self._state:
                self._throttled_until = max(self._throttled_until, until)
            log.debug("broker %s throttled this client for %d ms", self.address, ms)

    def _fail(self, error: SparklogError) -> None:
        with self._state:
            if self._error is None:
                self._error = error
            was_closed = self._closed
            self._closed = True
            pending = list(self._in_flight)
            self._in_flight.clear()
            self._state.notify_all()
        if not was_closed:
            log.info("%s", error)
            self._shutdown_socket()
        for _, api_key, future, _, _ in pending:
            future.failure(type(error)(f"{api_name(api_key)}: {error}"))

    def _shutdown_socket(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def close(self) -> None:
        """Close the connection; waiting requests fail with BrokerNotAvailableError."""
        self._fail(BrokerNotAvailableError(f"connection to broker {self.address} closed"))
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(2.0)


class _Protocol(Exception):
    pass


def wait_readable(conns, timeout: float) -> None:
    """Wait up to ``timeout`` seconds until one of ``conns`` (polled connections, or
    anything with a ``fileno()``) has bytes to read, or was closed. The wait has
    microseconds' precision (``select``; a producer's linger deadline is a fraction of
    a millisecond away), except for descriptors beyond ``select``'s limit, which wait
    with ``poll`` (whole milliseconds)."""
    fds = []
    for conn in conns:
        fd = conn.fileno()
        if fd < 0:
            return  # closed: its reading reports it at once
        fds.append(fd)
    timeout = max(0.0, timeout)
    try:
        if max(fds) < _SELECT_LIMIT:
            select.select(fds, (), (), timeout)
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN | select.POLLPRI)
        poller.poll(timeout * 1000.0)
    except (OSError, ValueError):
        pass  # a socket closed meanwhile: its reading reports it


#: descriptors ``select`` can wait on (FD_SETSIZE)
_SELECT_LIMIT = 1024


class _Watchdog:
    """One daemon thread that enforces the request deadlines of every open connection."""

    def __init__(self):
        self._conns: "weakref.WeakSet[BrokerConnection]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread = None

    def watch(self, conn: BrokerConnection) -> None:
        with self._lock:
            self._conns.add(conn)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="sparklog-request-deadlines")
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(0.1)
            with self._lock:
                conns = [c for c in self._conns if c.connected]
                if not conns:
                    self._thread = None
                    return
            now = time.monotonic()
            for conn in conns:
                conn.check_deadline(now)


_WATCHDOG = _Watchdog()
