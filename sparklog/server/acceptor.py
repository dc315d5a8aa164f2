"""Accepting connections under limits: ``max.connections``, ``max.connections.per.ip``
and the process's file descriptor limit.

The :class:`Acceptor` owns the listening socket and accepts on the event loop itself
(instead of ``loop.create_server``) so that:

* at ``max.connections`` open connections it stops accepting (new clients wait in the
  listen backlog, as Kafka's acceptor blocks) until one closes;
* a client address at ``max.connections.per.ip`` has its new connection closed at once
  (logged, rate-limited);
* when ``accept`` fails for want of resources (EMFILE/ENFILE: the fd limit; ENOBUFS,
  ENOMEM) it backs off (10 ms doubling up to 1 s, reset by a success) instead of
  retrying at once, and logs the failure at most once per ``LOG_INTERVAL`` seconds with
  the count of those not logged.

Each accepted socket becomes a transport of the given protocol factory through
``loop.connect_accepted_socket``. ``on_closed(ip)`` must be called when a connection
made by this acceptor is gone (the broker does it from the protocol's
``connection_lost``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time

log = logging.getLogger(__name__)

#: at most one log line per this many seconds for each kind of refused connection
LOG_INTERVAL = 10.0
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_MIN_BACKOFF, _MAX_BACKOFF = 0.01, 1.0


class RateLimitedLog:
    """Logs a kind of event at most once per ``interval`` seconds, saying how many of
    them were not logged since the last line."""

    def __init__(self, interval: float = LOG_INTERVAL):
        self.interval = interval
        self._last = -interval
        self._suppressed = 0

    def warning(self, message: str, *args) -> None:
        """Log (or count) one event."""
        now = time.monotonic()
        if now - self._last < self.interval:
            self._suppressed += 1
            return
        if self._suppressed:
            message += f" ({self._suppressed} more like it in the last %.0fs not logged)"
            args = (*args, now - self._last)
        self._last, self._suppressed = now, 0
        log.warning(message, *args)


class Acceptor:
    """The listening socket and its accept loop (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol_factory, host: str,
                 port: int, *, max_connections: int, max_connections_per_ip: int,
                 backlog: int = 128, ssl=None, ssl_handshake_timeout: float | None = None,
                 per_ip_overrides: dict | None = None):
        self.loop = loop
        #: TLS context of an SSL/SASL_SSL listener (None: plaintext); a client must
        #: finish the TLS handshake within ``ssl_handshake_timeout`` seconds
        self.ssl = ssl
        self.ssl_handshake_timeout = ssl_handshake_timeout
        #: ``max.connections.per.ip.overrides``: host -> its own limit
        self.per_ip_overrides = per_ip_overrides or {}
        self.protocol_factory = protocol_factory
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.open = 0
        self.per_ip: dict[str, int] = {}
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        self.sock = socket.socket(family, kind, proto)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(address)
            self.sock.listen(backlog)
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise
        self._reading = False
        self._closed = False
        self._backoff = _MIN_BACKOFF
        self._retry: asyncio.TimerHandle | None = None
        self._resource_log = RateLimitedLog()
        self._ip_log = RateLimitedLog()

    @property
    def address(self) -> tuple:
        """The bound (host, port)."""
        return self.sock.getsockname()[:2]

    def start(self) -> None:
        """Begin accepting."""
        self._resume()

    def close(self) -> None:
        """Stop accepting and close the listening socket (open connections stay)."""
        self._closed = True
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
        self.sock.close()

    def on_closed(self, ip: str) -> None:
        """A connection from ``ip`` made by this acceptor is gone."""
        self.open -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)
        if self.open < self.max_connections and self._retry is None:
            self._resume()

    # --- internals -------------------------------------------------------------------------
    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            self.loop.remove_reader(self.sock.fileno())

    def _resume(self) -> None:
        self._retry = None
        if not self._reading and not self._closed:
            self._reading = True
            self.loop.add_reader(self.sock.fileno(), self._accept_ready)

    def _accept_ready(self) -> None:
        for _ in range(64):  # a burst at a time; the loop serves the others in between
            if self.open >= self.max_connections:
                self._pause()  # resumed by on_closed
                return
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRNOS and not isinstance(exc, ConnectionError):
                    log.error("accepting a connection failed: %s", exc)
                if exc.errno in _RESOURCE_ERRNOS:
                    self._resource_log.warning(
                        "cannot accept connections: %s (%d open); pausing accepts for "
                        "%.0f ms: raise the file descriptor limit (ulimit -n) or lower "
                        "max.connections", exc.strerror or exc, self.open,
                        self._backoff * 1000)
                    self._pause()
                    self._retry = self.loop.call_later(self._backoff, self._resume)
                    self._backoff = min(self._backoff * 2, _MAX_BACKOFF)
                return
            self._backoff = _MIN_BACKOFF
            ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
            limit = self.per_ip_overrides.get(ip, self.max_connections_per_ip)
            if self.per_ip.get(ip, 0) >= limit:
                self._ip_log.warning(
                    "refusing a connection from %s: it has %d open "
                    "(max.connections.per.ip=%d)", ip, self.per_ip.get(ip, 0), limit)
                conn.close()
                continue
            self.open += 1
            self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
            self.loop.create_task(self._connect(conn, ip))

    async def _connect(self, conn: socket.socket, ip: str) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.ssl is None:
                await self.loop.connect_accepted_socket(self.protocol_factory, conn)
            else:  # the protocol starts once the TLS handshake succeeded
                await self.loop.connect_accepted_socket(
                    self.protocol_factory, conn, ssl=self.ssl,
                    ssl_handshake_timeout=self.ssl_handshake_timeout)
        except BaseException as exc:  # the connection never started: count it out
            conn.close()
            self.on_closed(ip)
            if not isinstance(exc, (OSError, asyncio.CancelledError)):
                raise
            log.warning("connection from %s failed to start%s: %s", ip,
                        " (TLS handshake)" if self.ssl is not None else "", exc)


__all__ = ["Acceptor", "RateLimitedLog"]
