"""Kafka request/response framing over kio's generated message codecs.

A Kafka frame is a 4-byte big-endian size followed by a header and the message body.
Request header v1 is api_key, api_version, correlation_id, client_id (nullable
string); v2 adds tagged fields and is used by flexible versions of the API. Response
header v0 is the correlation id; v1 adds tagged fields, except that ApiVersions'
response always uses v0 (Kafka does so clients can parse it before they know the
broker's versions).
"""

from __future__ import annotations

import functools
import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema as _load_request_schema
from kio.index import load_response_schema as _load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16

from sparklog.errors import SparklogError, UnsupportedVersionError
from sparklog.protocol.kafka.entities import encode

#: kio's message class of an (api key, version), looked up once (kio resolves a name)
load_request_schema = functools.lru_cache(maxsize=None)(_load_request_schema)
load_response_schema = functools.lru_cache(maxsize=None)(_load_response_schema)
_reader = functools.lru_cache(maxsize=None)(entity_reader)

API_VERSIONS = 18
PRODUCE = 0

#: API key -> (advertised min, advertised max, min version sparklog decodes).
#: Produce is advertised from v0 as Kafka 4 does (older librdkafka keeps compressing),
#: but only v3+ (magic-2 record batches) is accepted.
ADVERTISED: dict[int, tuple[int, int, int]] = {
    0: (0, 11, 3),  # Produce
    1: (4, 12, 4),  # Fetch (no topic ids yet: v13+ waits)
    2: (1, 7, 1),  # ListOffsets
    3: (0, 12, 0),  # Metadata
    8: (2, 9, 2),  # OffsetCommit
    9: (1, 9, 1),  # OffsetFetch
    10: (0, 4, 0),  # FindCoordinator
    11: (0, 9, 0),  # JoinGroup
    12: (0, 4, 0),  # Heartbeat
    13: (0, 5, 0),  # LeaveGroup
    14: (0, 5, 0),  # SyncGroup
    15: (0, 5, 0),  # DescribeGroups
    16: (0, 5, 0),  # ListGroups
    17: (0, 1, 0),  # SaslHandshake
    18: (0, 4, 0),  # ApiVersions
    19: (2, 7, 2),  # CreateTopics
    20: (1, 6, 1),  # DeleteTopics
    22: (0, 5, 0),  # InitProducerId
    23: (2, 4, 2),  # OffsetForLeaderEpoch
    32: (1, 4, 1),  # DescribeConfigs
    36: (0, 2, 0),  # SaslAuthenticate
}

_HEAD = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


class KafkaDecodeError(SparklogError, ValueError):
    """Kafka request bytes are truncated or malformed (Kafka: CorruptRecordException)."""

    code = 2


class KafkaUnsupportedVersionError(UnsupportedVersionError):
    """The request's api key or version is not one sparklog accepts.

    ``header`` is the parsed header, so the caller can still answer (KIP-511: an
    ApiVersions request above the maximum gets error 35 and the supported versions).
    """

    def __init__(self, message: str, header: RequestHeader) -> None:
        super().__init__(message)
        self.header = header


@dataclass(frozen=True)
class RequestHeader:
    """A parsed Kafka request header (v1 or v2)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _flexible_request(api_key: int, version: int) -> bool:
    if api_key == API_VERSIONS:
        return version >= 3  # also for versions above the max (KIP-511)
    return bool(load_request_schema(api_key, version).__flexible__)


def api_versions_entries() -> list[tuple[int, int, int]]:
    """The (api_key, min_version, max_version) triples sparklog advertises."""
    return [(key, lo, hi) for key, (lo, hi, _) in sorted(ADVERTISED.items())]


def _skip_tagged_fields(data: memoryview, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise KafkaDecodeError("truncated Kafka request header: tagged field overruns")
    return pos


def _uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise KafkaDecodeError("truncated Kafka request header: unsigned varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise KafkaDecodeError("malformed Kafka request header: varint longer than 5 bytes")


def _write_uvarint(out: io.BytesIO, value: int) -> None:
    while value > 0x7F:
        out.write(bytes([(value & 0x7F) | 0x80]))
        value >>= 7
    out.write(bytes([value]))


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode one request (the bytes after the 4-byte size) into (header, kio request).

    Raises :class:`KafkaUnsupportedVersionError` (with the parsed header) for an api key
    or version sparklog does not accept, and :class:`KafkaDecodeError` for truncated or
    malformed bytes; nothing else. Bytes after the request's last field are ignored, as
    Kafka's broker ignores them.
    """
    data = memoryview(frame)
    if len(data) < _HEAD.size + 2:
        raise KafkaDecodeError(f"truncated Kafka request: {len(data)} bytes, header needs 10")
    api_key, version, correlation_id = _HEAD.unpack_from(data, 0)
    (id_len,) = struct.unpack_from(">h", data, _HEAD.size)
    pos = _HEAD.size + 2
    client_id: str | None = None
    if id_len >= 0:
        if pos + id_len > len(data):
            raise KafkaDecodeError("truncated Kafka request header: client_id overruns")
        try:
            client_id = bytes(data[pos : pos + id_len]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KafkaDecodeError(f"malformed Kafka request header: client_id: {exc}") from None
        pos += id_len
    elif id_len != -1:
        raise KafkaDecodeError(f"malformed Kafka request header: client_id length {id_len}")
    header = RequestHeader(api_key, version, correlation_id, client_id)
    entry = ADVERTISED.get(api_key)
    if entry is None:
        raise KafkaUnsupportedVersionError(f"unsupported Kafka api key {api_key}", header)
    lo, hi, accept = entry
    if api_key == API_VERSIONS and version > hi:
        raise KafkaUnsupportedVersionError(
            f"ApiVersions v{version} is above the supported v{lo}-v{hi}", header
        )
    if not max(lo, accept) <= version <= hi:
        raise KafkaUnsupportedVersionError(
            f"api key {api_key} v{version} is not supported (v{max(lo, accept)}-v{hi})", header
        )
    if _flexible_request(api_key, version):
        pos = _skip_tagged_fields(data, pos)
    schema = load_request_schema(api_key, version)
    try:
        body, _ = _reader(schema)(data, pos)
    except Exception as exc:  # kio's reader raises several kinds on garbage bytes
        raise KafkaDecodeError(
            f"malformed Kafka request (api key {api_key} v{version}): {type(exc).__name__}: {exc}"
        ) from None
    # bytes after the request's fields are ignored, as Kafka's broker ignores them
    # (AbstractRequest.parseRequest reads the fields and stops): librdkafka's Metadata
    # v9+ of every topic sends its null topic array in 4 bytes where 1 is due, and its
    # last 3 fields after them (librdkafka issue 5049); a Kafka broker answers it
    return header, body


def encode_request(header: RequestHeader, request: Any) -> bytes:
    """Encode a size-prefixed request frame (the client side, also used by tests)."""
    out = io.BytesIO()
    out.write(_HEAD.pack(header.api_key, header.api_version, header.correlation_id))
    if header.client_id is None:
        out.write(struct.pack(">h", -1))
    else:
        raw = header.client_id.encode("utf-8")
        out.write(struct.pack(">h", len(raw)) + raw)
    if _flexible_request(header.api_key, header.api_version):
        out.write(b"\x00")
    entity_writer(type(request))(out, request)
    body = out.getvalue()
    return _SIZE.pack(len(body)) + body


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """Encode a size-prefixed response frame answering the request ``header``."""
    out = io.BytesIO()
    out.write(_SIZE.pack(header.correlation_id))
    if header.api_key != API_VERSIONS and type(response).__flexible__:
        out.write(b"\x00")
    entity_writer(type(response))(out, response)
    body = out.getvalue()
    return _SIZE.pack(len(body)) + body


def encode_response_values(header: RequestHeader, values: dict) -> list:
    """:func:`encode_response` of the response class of ``header``'s api key and version
    built from ``values`` (:func:`~sparklog.protocol.kafka.entities.build`), without
    building it (:func:`~sparklog.protocol.kafka.entities.encode`): the frame as a
    list of byte strings, its size first."""
    cls = load_response_schema(header.api_key, header.api_version)
    parts = encode(cls, values)
    head = _SIZE.pack(header.correlation_id)
    if header.api_key != API_VERSIONS and cls.__flexible__:
        head += b"\x00"
    size = len(head) + sum(map(len, parts))
    parts[0:0] = (_SIZE.pack(size), head)
    return parts


def decode_response(header: RequestHeader, frame: bytes) -> Any:
    """Decode a response body (after the size) to the request ``header`` (tests, clients)."""
    data = memoryview(frame)
    (correlation_id,) = _SIZE.unpack_from(data, 0)
    if correlation_id != header.correlation_id:
        raise KafkaDecodeError(
            f"response correlation id {correlation_id} != request {header.correlation_id}"
        )
    schema = load_response_schema(header.api_key, header.api_version)
    pos = 4
    if header.api_key != API_VERSIONS and schema.__flexible__:
        pos = _skip_tagged_fields(data, pos)
    body, _ = entity_reader(schema)(data, pos)
    return body


def unsupported_version_response(header: RequestHeader) -> bytes:
    """KIP-511's answer to an ApiVersions request above the max: v0, error 35, the versions."""
    response = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=i16(key), min_version=i16(lo), max_version=i16(hi))
            for key, lo, hi in api_versions_entries()
        ),
    )
    downgraded = RequestHeader(API_VERSIONS, 0, header.correlation_id, header.client_id)
    return encode_response(downgraded, response)
