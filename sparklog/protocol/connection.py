"""A minimal blocking connection speaking the protocol: pipelined send and receive.

This is the lowest client layer (tests, benchmarks, tools, readiness probes); the
Producer/Consumer/Admin clients build their own batching and retries on top of the
codec. Responses arrive in request order; acks=0 produce requests get none.
"""

from __future__ import annotations

import collections
import itertools
import re
import socket

from ..errors import BrokerNotAvailableError, InvalidArgumentError
from ..names import validate_client_id
from .apis import ACKS_NONE, ApiKey
from .codec import DEFAULT_MAX_REQUEST_BYTES, decode_response, encode_request_parts, raise_for_error
from .stream import recv_message, send_parts

_HOST = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(%\w+)?")


def _check_host(host: str, address: str) -> str:
    """``host`` if it is a host name or an IP address, else InvalidArgumentError (a
    path given where an address belongs would otherwise fail deep in the resolver)."""
    if _HOST.fullmatch(host) is None:
        raise InvalidArgumentError(
            f"broker address {address!r}: {host!r} is not a host name or IP address "
            "(a storage path needs a URL: file:///absolute/path)")
    return host


def parse_address(address: str, default_port: int = 9092) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too) into (host, port)."""
    if not isinstance(address, str) or not address:
        raise InvalidArgumentError(f"broker address must be 'host:port', got {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep:
        return _check_host(address, address), default_port
    host = _check_host(host.strip("[]") or "127.0.0.1", address)
    try:
        number = int(port)
    except ValueError:
        raise InvalidArgumentError(f"broker address {address!r}: port {port!r} is not a number") \
            from None
    if not 0 <= number < 65536:
        raise InvalidArgumentError(f"broker address {address!r}: port {number} out of range")
    return host, number


class Connection:
    """One TCP connection to a broker (TLS and SASL when given ``security``, a
    :class:`~sparklog.security.client.ClientSecurity`).

    ``send`` writes a request and returns its correlation id without waiting; ``receive``
    returns the next response body (in request order); ``request`` does both and raises
    the top-level error of the response, if any.
    """

    def __init__(self, address: str, *, client_id: str = "sparklog", timeout: float = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_REQUEST_BYTES + (1 << 20),
                 security=None):
        self.address = address
        self.client_id = validate_client_id(client_id)
        self.max_response_bytes = max_response_bytes
        host, port = parse_address(address)
        if security is not None:  # a sparklog.security.client.ClientSecurity: TLS, SASL
            self.sock = security.connect(host, port, timeout, self.client_id)
            self._ids = itertools.count(1)
            self._pending: collections.deque = collections.deque()
            return
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise BrokerNotAvailableError(f"cannot connect to broker {address}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)
        self._pending = collections.deque()

    def send(self, api_key: int, body: dict | None = None, api_version: int = 0) -> int:
        """Send a request; return its correlation id."""
        correlation_id = next(self._ids) & 0x7FFFFFFF
        send_parts(self.sock, encode_request_parts(api_key, body, correlation_id,
                                                   self.client_id, api_version))
        expects_response = not (api_key == ApiKey.PRODUCE and body
                                and body.get("acks") == ACKS_NONE)
        if expects_response:
            self._pending.append((correlation_id, api_key))
        return correlation_id

    def receive(self, validate: bool = True) -> dict:
        """The body of the next response (validated against its api's spec)."""
        if not self._pending:
            raise InvalidArgumentError("no request is waiting for a response")
        expected, api_key = self._pending.popleft()
        correlation_id, body = decode_response(
            recv_message(self.sock, self.max_response_bytes), api_key, validate=validate)
        if correlation_id != expected:
            raise InvalidArgumentError(
                f"response correlation id {correlation_id} does not match request {expected}")
        return body

    def request(self, api_key: int, body: dict | None = None, api_version: int = 0) -> dict:
        """Send a request, wait for its response, raise its top-level error if any."""
        self.send(api_key, body, api_version)
        response = self.receive()
        raise_for_error(response, f"{self.address}")
        return response

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses were not received yet."""
        return len(self._pending)

    def close(self) -> None:
        """Close the socket."""
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
