"""The broker's socket protocol: requests received straight into their own buffers.

asyncio's StreamReader copies every received byte twice more (into its buffer, then
out of it); for a broker whose requests are megabytes of frames that is a large part of
its CPU. :class:`RequestReceiver` is an :class:`asyncio.BufferedProtocol`: small reads
(size prefixes, small requests) land in a staging buffer, and once a request's size is
known the socket writes the rest of it directly into a buffer of exactly that size,
which becomes the request payload without another copy.

The coroutine side mirrors the stream helpers of :mod:`sparklog.protocol.stream`:
``await read_size()``, ``await read_exact(n)``, ``await discard(n)``. Reading from the
socket stops (``pause_reading``) whenever the staging buffer is full and nobody is
waiting for data, so a slow consumer of requests back-pressures the client through TCP.

Limits: once a message has begun (the first byte of its size prefix is read), the whole
of it must arrive within ``read_timeout`` seconds (:class:`ReadTimeout`, a
ConnectionError, otherwise), and by :attr:`RequestReceiver.deadline` when one is set
(an unauthenticated connection's ``authentication.timeout.ms``): a client trickling
a byte now and then cannot hold its request's reserved bytes longer; time spent waiting
for room in the byte budget (the broker's doing, not the client's) is added to it.
``read_size(idle)`` bounds the wait for the first byte of the next message.
A large payload is reserved from a shared byte budget *as its bytes arrive*, a chunk
ahead of the socket (64 KiB first, doubling up to 4 MiB), never all at once from a bare
size prefix, and its buffer is only allocated once its first bytes came.
Writing: ``write``/``writelines`` and ``await drain()`` honour the transport's write
flow control.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..protocol.codec import SIZE

STAGE_BYTES = 64 * 1024
#: largest chunk of a payload reserved from the byte budget ahead of the socket
MAX_RESERVE_CHUNK = 4 << 20


class ReadTimeout(ConnectionError):
    """No byte of a begun message (or of the next one, when idle) arrived in time."""


class RequestReceiver(asyncio.BufferedProtocol):
    """Receiving side of one connection (see the module docstring)."""

    def __init__(self, on_connect, on_lost=None):
        self._on_connect = on_connect
        self._on_lost = on_lost
        self.peer_ip = ""
        self.transport: asyncio.Transport | None = None
        self._stage = bytearray(STAGE_BYTES)
        self._start = 0          # unread bytes are _stage[_start:_end]
        self._end = 0
        self._target: memoryview | None = None   # a payload being filled directly
        self._target_pos = 0
        self._target_end = 0     # the socket may fill the target up to here (reserved)
        self._into_target = False
        self._budget = None      # (ByteBudget, owner) of the payload being filled
        self._reserved = 0
        #: seconds a begun message has to arrive whole before ReadTimeout (None: no bound)
        self.read_timeout: float | None = None
        #: a loop time by which any begun message must have arrived (None: none), and
        #: the ReadTimeout message saying what set it
        self.deadline: float | None = None
        self.deadline_reason = ""
        self._message_due: float | None = None  # loop time the current message is due
        self._message_why = ""
        #: a future done once the connection is lost (set up in connection_made)
        self.lost: asyncio.Future | None = None
        self._waiter: asyncio.Future | None = None
        self._eof = False
        self._paused = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self.error: BaseException | None = None

    # --- protocol callbacks ------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self._loop = asyncio.get_running_loop()
        self.lost = self._loop.create_future()
        peer = transport.get_extra_info("peername")
        self.peer_ip = str(peer[0]) if isinstance(peer, tuple) else str(peer or "")
        self._on_connect(self)

    def get_buffer(self, sizehint: int):
        if self._target is not None and self._target_pos < self._target_end:
            self._into_target = True
            return self._target[self._target_pos:self._target_end]
        self._into_target = False
        if self._end == len(self._stage):
            self._compact()
            if self._end == len(self._stage):  # full yet still asked: grow (rare)
                self._stage.extend(bytes(len(self._stage)))
        return memoryview(self._stage)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_target:
            self._target_pos += nbytes
            if self._target_pos == self._target_end and not self._reserve_more():
                self._wake()  # complete, or the budget is full: the reader waits for it
            return
        self._end += nbytes
        if self._waiter is None and self._end - self._start >= len(self._stage) // 2:
            self._pause()  # nobody is reading requests now: let TCP push back
        self._wake()

    def eof_received(self):
        self._eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc) -> None:
        self._eof = True
        self.error = exc
        self._wake()
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(None)
            if self._on_lost is not None:
                self._on_lost(self)
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # --- internals -----------------------------------------------------------------------
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self._paused and self.transport is not None and not self.transport.is_closing():
            self._paused = False
            self.transport.resume_reading()

    def _compact(self) -> None:
        if self._start:
            n = self._end - self._start
            self._stage[:n] = self._stage[self._start:self._end]
            self._start, self._end = 0, n

    async def _wait(self, timeout: float | None = -1.0, what: str = "") -> None:
        """Wait for bytes (or the end); ReadTimeout when the current message is not
        whole by its due time (``timeout`` -1), or when nothing came within ``timeout``
        seconds (None: no bound)."""
        if self._eof:
            raise InvalidArgumentError("connection closed")
        loop = asyncio.get_running_loop()
        if timeout is not None and timeout < 0:
            due, what = self._message_due, self._message_why
        else:
            due = None if timeout is None else loop.time() + timeout
        self._resume()
        self._waiter = waiter = loop.create_future()
        timer = None
        if due is not None:
            timer = loop.call_at(due, _expire, waiter)
        try:
            await waiter
            if waiter.result() is _EXPIRED:
                raise ReadTimeout(what)
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None

    def _begin_message(self) -> None:
        """The first byte of a message is here: set the time it is due whole by."""
        if self._message_due is not None:
            return
        due, why = None, ""
        if self.read_timeout is not None:
            due = self._loop.time() + self.read_timeout
            why = (f"a begun request did not arrive whole within "
                   f"{self.read_timeout * 1000:.0f} ms (request.read.timeout.ms)")
        if self.deadline is not None and (due is None or self.deadline < due):
            due, why = self.deadline, self.deadline_reason or "deadline passed"
        self._message_due, self._message_why = due, why

    async def _acquire(self, budget, n: int, owner) -> None:
        """Reserve ``n`` bytes of ``budget``; the time spent waiting for room is added
        to the current message's due time (the client could not send meanwhile)."""
        if budget.try_acquire(n, owner):
            return
        started = self._loop.time()
        await budget.acquire(n, owner)
        if self._message_due is not None:
            self._message_due += self._loop.time() - started

    def _reserve_more(self) -> bool:
        """Extend the part of the target the socket may fill, if the budget has room
        now; False when the target is complete or the reader must wait for room."""
        if self._target is None or self._budget is None:
            return False
        n = len(self._target)
        if self._target_end >= n:
            return False
        budget, owner = self._budget
        k = min(n - self._target_end, max(STAGE_BYTES, min(self._target_end,
                                                              MAX_RESERVE_CHUNK)))
        if not budget.try_acquire(k, owner):
            return False
        self._reserved += k
        self._target_end += k
        return True

    def _take(self, n: int) -> bytes:
        data = bytes(self._stage[self._start:self._start + n])
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        return data

    @property
    def buffered(self) -> int:
        """Bytes received and not read yet."""
        return self._end - self._start

    # --- coroutine side --------------------------------------------------------------------
    async def read_size(self, idle: float | None = None) -> int | None:
        """The next size prefix; None on a clean end of stream before it. Waiting for
        its first byte is bounded by ``idle`` seconds (ReadTimeout), for the others
        with the rest of the message by :attr:`read_timeout` (and :attr:`deadline`)."""
        self._message_due = None  # the previous message is whole
        while self._end - self._start < 4:
            have = self._end - self._start
            if self._eof:
                if have == 0:
                    return None
                raise InvalidArgumentError(
                    f"connection closed inside a size prefix ({have} of 4 bytes)")
            if have:
                self._begin_message()
                await self._wait()
            else:
                await self._wait(idle, "" if idle is None else
                                 f"no request for {idle * 1000:.0f} ms "
                                 "(connections.max.idle.ms)")
        self._begin_message()
        return SIZE.unpack(self._take(4))[0]

    @property
    def small_bytes(self) -> int:
        """The largest message read into the staging buffer (then copied out): its
        bytes take no more memory while they arrive."""
        return len(self._stage) // 2

    async def read_exact(self, n: int, budget=None, owner=None):
        """Exactly ``n`` bytes: bytes for small reads, a writable memoryview of a buffer
        the socket filled directly for large ones. With a ``budget``
        (:class:`~sparklog.server.server.ByteBudget`) the ``n`` bytes are
        reserved for ``owner`` (a small read, whose bytes wait in the staging buffer:
        once they all arrived; a large one: as its bytes arrive); the caller releases
        them after use; on an error they are given back."""
        if n <= self.small_bytes:
            data = await self._read_small(n)
            if budget is not None:
                await budget.acquire(n, owner)
            return data
        return await self._read_large(n, budget, owner)

    async def _read_small(self, n: int) -> bytes:
        while self._end - self._start < n:
            if self._eof:
                raise InvalidArgumentError(
                    f"connection closed after {self._end - self._start} of {n} bytes "
                    "of a message")
            if len(self._stage) - self._start < n:
                self._compact()
            await self._wait()
        return self._take(n)

    async def _read_large(self, n: int, budget, owner):
        have = self._end - self._start
        if n <= have:
            if budget is not None:
                await self._acquire(budget, n, owner)
            return self._take(n)
        while self._end == self._start:  # no buffer for a bare size prefix
            if self._eof:
                raise InvalidArgumentError(f"connection closed after 0 of {n} bytes of a message")
            await self._wait()
        self._budget = (budget, owner) if budget is not None else None
        self._reserved = 0
        try:
            have = self._end - self._start
            if budget is not None:
                await self._acquire(budget, have, owner)
                self._reserved = have
            have = self._end - self._start  # more may have come meanwhile
            # from Arrow's memory pool: not zero-filled, and its freed blocks are reused,
            # so a large request costs neither a memset nor fresh pages (a bytearray
            # costs both); pages are touched only as the bytes arrive
            out = memoryview(pa.allocate_buffer(n)).cast("B")
            self._target, self._target_pos = out, 0
            self._target_end = n if budget is None else self._reserved
            while self._target_pos < n:
                if self._target_pos == self._target_end:
                    if not self._reserve_more():
                        k = min(n - self._target_end, MAX_RESERVE_CHUNK)
                        await self._acquire(budget, k, owner)
                        self._reserved += k
                        self._target_end += k
                    continue
                have = self._end - self._start
                if have:  # bytes that landed in the staging buffer meanwhile
                    k = min(have, self._target_end - self._target_pos)
                    out[self._target_pos:self._target_pos + k] = \
                        self._stage[self._start:self._start + k]
                    self._target_pos += k
                    self._start += k
                    if self._start == self._end:
                        self._start = self._end = 0
                    continue
                if self._eof:
                    raise InvalidArgumentError(
                        f"connection closed after {self._target_pos} of {n} bytes of a message")
                await self._wait()
        except BaseException:
            if budget is not None and self._reserved:
                budget.release(self._reserved, owner)
            raise
        finally:
            self._target = None
            self._budget = None
        return out

    async def discard(self, n: int) -> None:
        """Read and drop ``n`` bytes, holding at most the staging buffer."""
        while n > 0:
            have = self._end - self._start
            if have:
                k = min(have, n)
                self._start += k
                if self._start == self._end:
                    self._start = self._end = 0
                n -= k
                continue
            if self._eof:
                raise InvalidArgumentError(f"connection closed with {n} bytes left to discard")
            await self._wait()

    @property
    def peer_closed(self) -> bool:
        """True once the client closed its side of the connection: an end of stream
        received, or the connection reset or broken by the peer."""
        return self._eof and (self.error is None or isinstance(
            self.error, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)))

    def write(self, data) -> None:
        """Queue bytes for sending."""
        assert self.transport is not None, "written before connection_made"
        self.transport.write(data)

    def writelines(self, parts) -> None:
        """Queue several byte strings for sending."""
        assert self.transport is not None, "written before connection_made"
        self.transport.writelines(parts)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self.error is not None or self.transport is None or self.transport.is_closing():
            raise ConnectionError(f"connection lost: {self.error or 'closed'}")
        if self._write_paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
            if self.error is not None:
                raise ConnectionError(f"connection lost: {self.error}")

    def close(self) -> None:
        """Close the transport."""
        if self.transport is not None:
            self.transport.close()


_EXPIRED = object()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(_EXPIRED)
