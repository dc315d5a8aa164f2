"""Encoding and decoding of requests and responses (pure Python, no I/O).

Wire layout (all integers big-endian)::

    request  = size:int32 | api_key:int16 | api_version:int16 | correlation_id:int32
               | client_id_length:int16 | client_id:utf-8 | body:msgpack
    response = size:int32 | correlation_id:int32 | body:msgpack

``size`` counts the bytes after itself. Bodies are msgpack maps (``use_bin_type``: str
is str, bytes is bin); record data travels as ``bin`` holding frames exactly as stored.
A response may be produced in parts (:func:`encode_response_parts`) so that a server can
send stored bytes with ``sendfile`` between the msgpack pieces (:class:`FileRegion`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import msgpack

from ..errors import InvalidArgumentError, SparklogError, UnsupportedVersionError, error_for_code
from .apis import REQUESTS, RESPONSES, SUPPORTED_VERSIONS, api_name
from .schema import Opt, check
from .unpack import unpack_views

SIZE = struct.Struct(">i")
_REQ_HEADER = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")
#: bytes of a request header without the client id
REQUEST_HEADER_SIZE = _REQ_HEADER.size
#: request bodies from this size on are decoded with their large bins left in place
#: (:func:`~sparklog.protocol.unpack.unpack_views`) instead of copied out by msgpack
VIEW_DECODE_MIN_BYTES = 64 * 1024
#: Kafka's socket.request.max.bytes default (100 MiB)
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024
#: the longest client id in a request header, in bytes: a client id is at most 255
#: characters (:func:`sparklog.names.validate_client_id`, 4 UTF-8 bytes at most each);
#: Kafka's header allows 32767 bytes, the broker refuses more than this
MAX_CLIENT_ID_BYTES = 1024

_BIN8, _BIN16, _BIN32 = 0xC4, 0xC5, 0xC6
#: what a response with a top-level error must carry (its other fields may be absent)
ERROR_SPEC = {"error_code": int, "error_message": Opt(str, "")}


@dataclass(frozen=True)
class RequestHeader:
    """The fixed part of every request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str = ""


@dataclass
class Request:
    """A decoded request: its header and its validated body (a dict)."""

    header: RequestHeader
    body: dict


@dataclass(frozen=True)
class FileRegion:
    """``size`` bytes of the local file ``path`` from ``offset``: a response value that
    is sent as a msgpack bin straight from the file (``sendfile``)."""

    path: str
    offset: int
    size: int


def _pack(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _unpack(data, what: str):
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except SparklogError:
        raise
    except Exception as exc:  # msgpack raises many types on garbage (ExtraData, ValueError...)
        raise InvalidArgumentError(
            f"{what} is not a valid msgpack document: {type(exc).__name__}: {exc}") from None


# --- requests ---------------------------------------------------------------------------


def encode_request(api_key: int, body: dict | None, correlation_id: int,
                   client_id: str = "", api_version: int = 0) -> bytes:
    """A complete request message (size prefix included)."""
    payload = _pack(body if body is not None else {})
    return _request_prefix(api_key, client_id, correlation_id, api_version,
                           len(payload)) + payload


def _request_prefix(api_key: int, client_id: str, correlation_id: int, api_version: int,
                    body_size: int) -> bytes:
    """Size prefix and header of a request whose body has ``body_size`` bytes."""
    cid = (client_id or "").encode("utf-8")
    if len(cid) > MAX_CLIENT_ID_BYTES:
        raise InvalidArgumentError(
            f"client_id is {len(cid)} bytes, the limit is {MAX_CLIENT_ID_BYTES}")
    head = _REQ_HEADER.pack(int(api_key), api_version, correlation_id, len(cid))
    return SIZE.pack(len(head) + len(cid) + body_size) + head + cid


def encode_request_parts(api_key: int, body: dict | None, correlation_id: int,
                         client_id: str = "", api_version: int = 0) -> list:
    """The request :func:`encode_request` makes, as a list of byte strings for a
    vectored send (``socket.sendmsg``): large bins of ``body`` (record data) are parts
    of their own, not copied."""
    parts, total = _body_parts(body if body is not None else {})
    if any(isinstance(p, FileRegion) for p in parts):
        raise InvalidArgumentError("a request body cannot hold a FileRegion")
    return [_request_prefix(api_key, client_id, correlation_id, api_version, total), *parts]


def decode_request_header(payload) -> tuple[RequestHeader, int]:
    """Decode the header at the start of a request ``payload`` (size prefix removed).

    Returns (header, position of the body). Raises InvalidArgumentError if truncated,
    if the client id is longer than :data:`MAX_CLIENT_ID_BYTES` or not UTF-8.
    """
    view = memoryview(payload)
    if len(view) < REQUEST_HEADER_SIZE:
        raise InvalidArgumentError(
            f"request header truncated: {len(view)} bytes, needs {REQUEST_HEADER_SIZE}")
    api_key, api_version, correlation_id, cid_len = _REQ_HEADER.unpack_from(view, 0)
    end = REQUEST_HEADER_SIZE + max(cid_len, 0)
    if cid_len > MAX_CLIENT_ID_BYTES:  # a client may not send it (validate_client_id)
        raise InvalidArgumentError(
            f"request header: client_id is {cid_len} bytes, the limit is "
            f"{MAX_CLIENT_ID_BYTES} (correlation id {correlation_id})")
    if cid_len < 0 or end > len(view):
        raise InvalidArgumentError(
            f"request header: client_id length {cid_len} does not fit in "
            f"{len(view)} bytes (correlation id {correlation_id})")
    try:
        client_id = bytes(view[REQUEST_HEADER_SIZE:end]).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"request header: client_id is not UTF-8 (correlation id {correlation_id})") \
            from None
    return RequestHeader(api_key, api_version, correlation_id, client_id), end


def check_version(api_key: int, api_version: int) -> None:
    """Raise UnsupportedVersionError unless this implementation speaks the version."""
    versions = SUPPORTED_VERSIONS.get(api_key)
    if versions is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}")
    lo, hi = versions
    if not lo <= api_version <= hi:
        raise UnsupportedVersionError(
            f"{api_name(api_key)} version {api_version} is not supported "
            f"(supported {lo}-{hi})")


def decode_request_body(header: RequestHeader, payload, position: int) -> dict:
    """Decode and validate the msgpack body of a request whose header is known.

    In a large body (``VIEW_DECODE_MIN_BYTES``) the large ``bin`` values (record data)
    are memoryviews of ``payload``, not copies: keep ``payload`` unchanged while the
    body is in use."""
    check_version(header.api_key, header.api_version)
    name = api_name(header.api_key)
    view = memoryview(payload)[position:]
    what = f"{name} request body"
    if len(view) >= VIEW_DECODE_MIN_BYTES:
        body = unpack_views(view, what)
    else:
        body = _unpack(view, what) if len(view) else {}
    return check(body, REQUESTS[header.api_key], name)


def decode_request(payload) -> Request:
    """Decode a whole request ``payload`` (size prefix removed): header, api/version
    check (UnsupportedVersionError), body validation (InvalidArgumentError naming the
    field)."""
    header, position = decode_request_header(payload)
    return Request(header, decode_request_body(header, payload, position))


# --- responses --------------------------------------------------------------------------


def encode_response(correlation_id: int, body: dict) -> bytes:
    """A complete response message (size prefix included)."""
    payload = _pack(body)
    return b"".join((SIZE.pack(4 + len(payload)), _CORRELATION.pack(correlation_id), payload))


def bin_header(n: int) -> bytes:
    """The msgpack header of a ``bin`` of ``n`` bytes (the bytes themselves follow)."""
    if n < 0x100:
        return bytes((_BIN8, n))
    if n < 0x10000:
        return bytes((_BIN16,)) + n.to_bytes(2, "big")
    return bytes((_BIN32,)) + n.to_bytes(4, "big")


def _walk(value, out: list, packer: msgpack.Packer) -> None:
    if isinstance(value, dict):
        out.append(packer.pack_map_header(len(value)))
        for k, v in value.items():
            out.append(packer.pack(k))
            _walk(v, out, packer)
    elif isinstance(value, list):
        out.append(packer.pack_array_header(len(value)))
        for v in value:
            _walk(v, out, packer)
    elif isinstance(value, FileRegion):
        out.append(bin_header(value.size))
        out.append(value)
    elif isinstance(value, (bytes, bytearray, memoryview)) and len(value) >= 4096:
        out.append(bin_header(len(value)))
        out.append(value)  # large data: not copied into the msgpack buffer
    else:
        out.append(packer.pack(value))


class _Region(Exception):
    """A FileRegion met while packing a body in one piece."""


def _no_region(value):
    if isinstance(value, FileRegion):
        raise _Region()
    raise TypeError(f"can not serialize {type(value).__name__!r} object")


def _body_parts(body: dict) -> tuple[list, int]:
    """A msgpack ``body`` as parts (small pieces merged, large data and FileRegions
    as they are) and their total size."""
    try:  # most bodies are small: packed in one C call, the same bytes the walk gives
        whole = msgpack.packb(body, use_bin_type=True, default=_no_region)
        if len(whole) < 4096:  # so no bin in it is large enough to be a part of its own
            return [whole], len(whole)
    except _Region:
        pass
    packer = msgpack.Packer(use_bin_type=True, autoreset=True)
    pieces: list = []
    _walk(body, pieces, packer)
    parts: list = []
    buf = bytearray()
    total = 0
    for piece in pieces:
        if isinstance(piece, bytes) and len(piece) < 4096:
            buf += piece
            continue
        if buf:
            parts.append(bytes(buf))
            buf.clear()
        parts.append(piece)
    if buf:
        parts.append(bytes(buf))
    for part in parts:
        total += part.size if isinstance(part, FileRegion) else len(part)
    return parts, total


def encode_response_parts(correlation_id: int, body: dict) -> tuple[list, int]:
    """Encode a response as a list of parts: ``bytes`` (msgpack pieces, size prefix
    first), large ``bytes``-likes passed through uncopied, and :class:`FileRegion` s to be
    sent from their files. Returns (parts, total bytes on the wire)."""
    parts, total = _body_parts(body)
    prefix = SIZE.pack(4 + total) + _CORRELATION.pack(correlation_id)
    return [prefix, *parts], total + len(prefix)


def decode_response(payload, api_key: int | None = None, *, validate: bool = True
                    ) -> tuple[int, dict]:
    """Decode a response ``payload`` (size prefix removed) into (correlation id, body).

    With ``api_key`` the body is validated against the response spec (defaults filled);
    a response with a top-level ``error_code`` needs only the error fields.
    """
    view = memoryview(payload)
    if len(view) < 4:
        raise InvalidArgumentError(f"response truncated: {len(view)} bytes")
    (correlation_id,) = _CORRELATION.unpack_from(view, 0)
    body = _unpack(view[4:], "response body")
    if api_key is not None and validate:
        spec = RESPONSES.get(api_key, ERROR_SPEC)  # an unknown api: only errors expected
        if isinstance(body, dict) and body.get("error_code"):
            spec = ERROR_SPEC
        body = check(body, spec, f"{api_name(api_key)} response")
    return correlation_id, body


# --- errors -----------------------------------------------------------------------------


def error_fields(exc: BaseException | None) -> dict:
    """``{"error_code", "error_message"}`` for an error (0 and "" for None). An exception
    that is not a SparklogError maps to code -1 (unknown server error)."""
    if exc is None:
        return {"error_code": 0, "error_message": ""}
    code = exc.code if isinstance(exc, SparklogError) else -1
    return {"error_code": code, "error_message": str(exc) or type(exc).__name__}


def error_from(item: dict, context: str = "") -> SparklogError | None:
    """The exception an item's ``error_code``/``error_message`` describe, or None."""
    code = item.get("error_code", 0)
    if not code:
        return None
    message = item.get("error_message") or f"error code {code}"
    if context and context not in message:
        message = f"{context}: {message}"
    return error_for_code(code)(message)


def raise_for_error(item: dict, context: str = "") -> None:
    """Raise the error an item's ``error_code`` names (nothing if 0)."""
    exc = error_from(item, context)
    if exc is not None:
        raise exc
