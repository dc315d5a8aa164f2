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
Writing: ``write``/``writelines`` and ``await drain()`` honour the transport's write
flow control.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa

from ...errors import InvalidArgumentError
from ...protocol.codec import SIZE

STAGE_BYTES = 64 * 1024


class RequestReceiver(asyncio.BufferedProtocol):
    """Receiving side of one connection (see the module docstring)."""

    def __init__(self, on_connect):
        self._on_connect = on_connect
        self.transport: asyncio.Transport | None = None
        self._stage = bytearray(STAGE_BYTES)
        self._start = 0          # unread bytes are _stage[_start:_end]
        self._end = 0
        self._target: memoryview | None = None   # a payload being filled directly
        self._target_pos = 0
        self._waiter: asyncio.Future | None = None
        self._eof = False
        self._paused = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self.error: BaseException | None = None

    # --- protocol callbacks ------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self._on_connect(self)

    def get_buffer(self, sizehint: int):
        if self._target is not None:
            return self._target[self._target_pos:]
        if self._end == len(self._stage):
            self._compact()
            if self._end == len(self._stage):  # full yet still asked: grow (rare)
                self._stage.extend(bytes(len(self._stage)))
        return memoryview(self._stage)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._target is not None:
            self._target_pos += nbytes
            if self._target_pos == len(self._target):
                self._wake()
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

    async def _wait(self) -> None:
        if self._eof:
            raise InvalidArgumentError("connection closed")
        self._resume()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _take(self, n: int) -> bytes:
        data = bytes(self._stage[self._start:self._start + n])
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        return data

    # --- coroutine side --------------------------------------------------------------------
    async def read_size(self) -> int | None:
        """The next size prefix; None on a clean end of stream before it."""
        while self._end - self._start < 4:
            if self._eof:
                have = self._end - self._start
                if have == 0:
                    return None
                raise InvalidArgumentError(
                    f"connection closed inside a size prefix ({have} of 4 bytes)")
            await self._wait()
        return SIZE.unpack(self._take(4))[0]

    async def read_exact(self, n: int):
        """Exactly ``n`` bytes: bytes for small reads, a writable memoryview of a buffer
        the socket filled directly for large ones."""
        have = self._end - self._start
        if n <= have:
            return self._take(n)
        if n <= len(self._stage) // 2:
            while self._end - self._start < n:
                if self._eof:
                    raise InvalidArgumentError(
                        f"connection closed after {self._end - self._start} of {n} bytes "
                        "of a message")
                if len(self._stage) - self._start < n:
                    self._compact()
                await self._wait()
            return self._take(n)
        # from Arrow's memory pool: not zero-filled, and its freed blocks are reused, so
        # a large request costs neither a memset nor fresh pages (a bytearray costs both)
        out = memoryview(pa.allocate_buffer(n)).cast("B")
        out[:have] = self._stage[self._start:self._end]
        self._start = self._end = 0
        self._target, self._target_pos = out, have
        try:
            while self._target_pos < n:
                if self._eof:
                    raise InvalidArgumentError(
                        f"connection closed after {self._target_pos} of {n} bytes of a message")
                await self._wait()
        finally:
            self._target = None
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

    def write(self, data) -> None:
        """Queue bytes for sending."""
        self.transport.write(data)

    def writelines(self, parts) -> None:
        """Queue several byte strings for sending."""
        self.transport.writelines(parts)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self.error is not None or self.transport.is_closing():
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
