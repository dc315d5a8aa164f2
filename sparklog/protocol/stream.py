"""Reading and writing size-prefixed messages on sockets (blocking) and asyncio streams.

Both sides share one rule: a message is ``size:int32`` followed by ``size`` bytes.
A size that is negative or above the reader's limit raises
:class:`~sparklog.errors.RecordTooLargeError` (negative: InvalidArgumentError) *before*
the payload is read, so a server can answer with an error and :func:`discard` the
payload instead of buffering it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from ..errors import InvalidArgumentError, RecordTooLargeError
from .codec import DEFAULT_MAX_REQUEST_BYTES, SIZE


def check_size(size: int, max_size: int) -> int:
    """Validate a size prefix against ``max_size``."""
    if size < 0:
        raise InvalidArgumentError(f"invalid message size {size} (negative)")
    if size > max_size:
        exc = RecordTooLargeError(
            f"message of {size} bytes exceeds the limit of {max_size} bytes "
            "(socket.request.max.bytes)")
        exc.size = size
        raise exc
    return size


# --- blocking sockets (clients) ------------------------------------------------------------


#: a message above this is received into a buffer that grows as its bytes arrive
GROW_FROM = 1 << 20


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    """Read exactly ``n`` bytes; ConnectionError if the peer closes first. The buffer
    grows with the bytes received (doubling from 1 MiB), so a size announced but not
    sent costs no memory."""
    buf = bytearray(min(n, GROW_FROM))
    got = 0
    while got < n:
        if got == len(buf):
            buf.extend(bytes(min(len(buf), n - len(buf))))
        with memoryview(buf) as view:
            k = sock.recv_into(view[got:], len(buf) - got)
        if k == 0:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        got += k
    return buf


def recv_message(sock: socket.socket, max_size: int = DEFAULT_MAX_REQUEST_BYTES) -> bytearray:
    """Read one message and return its payload (size prefix removed)."""
    (size,) = SIZE.unpack(recv_exact(sock, 4))
    check_size(size, max_size)
    return recv_exact(sock, size)


def send_parts(sock: socket.socket, parts: list) -> None:
    """Send byte strings back to back with vectored sends (no joining copy). A TLS
    socket has no vectored send (and encrypts into new buffers anyway): the parts are
    joined and written with one call, which releases the GIL once for the whole
    message (a write per part would wait for the GIL again after each one, behind
    the threads of the application)."""
    if isinstance(sock, ssl.SSLSocket) or not hasattr(sock, "sendmsg"):
        sock.sendall(b"".join(parts))
        return
    pending = [memoryview(p) for p in parts if len(p)]
    while pending:
        n = sock.sendmsg(pending[:512])
        while n:
            if n >= len(pending[0]):
                n -= len(pending.pop(0))
            else:
                pending[0] = pending[0][n:]
                n = 0


# --- asyncio streams (the broker) ------------------------------------------------------------


async def read_size(reader: asyncio.StreamReader) -> int | None:
    """Read a size prefix; None on a clean end of stream before it."""
    try:
        data = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise InvalidArgumentError(
            f"connection closed inside a size prefix ({len(exc.partial)} of 4 bytes)") from None
    return SIZE.unpack(data)[0]


async def read_exact(reader: asyncio.StreamReader, n: int) -> bytes:
    """Read exactly ``n`` bytes; InvalidArgumentError naming the shortfall on EOF."""
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as exc:
        raise InvalidArgumentError(
            f"connection closed after {len(exc.partial)} of {n} bytes of a message") from None


async def read_message(reader: asyncio.StreamReader,
                       max_size: int = DEFAULT_MAX_REQUEST_BYTES) -> bytes | None:
    """Read one message payload; None on a clean end of stream between messages."""
    size = await read_size(reader)
    if size is None:
        return None
    check_size(size, max_size)
    return await read_exact(reader, size)


async def discard(reader: asyncio.StreamReader, n: int, chunk: int = 1 << 16) -> None:
    """Read and drop ``n`` bytes without holding more than ``chunk`` of them."""
    while n > 0:
        data = await reader.read(min(n, chunk))
        if not data:
            raise InvalidArgumentError(f"connection closed with {n} bytes left to discard")
        n -= len(data)
