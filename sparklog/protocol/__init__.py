"""Wire protocol between clients and brokers (see docs/protocol.md).

Size-prefixed messages; a fixed request header (api key, api version, correlation id,
client id); msgpack bodies validated against the specs of :mod:`.apis`; record frames
carried as raw bytes. Error codes are the ``code`` of :mod:`sparklog.errors` classes.
"""

from .apis import (
    ACKS_ALL,
    ACKS_LEADER,
    ACKS_NONE,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_OFFSET,
    REQUESTS,
    RESPONSES,
    SUPPORTED_VERSIONS,
    ApiKey,
    api_name,
)
from .codec import (
    DEFAULT_MAX_REQUEST_BYTES,
    FileRegion,
    Request,
    RequestHeader,
    bin_header,
    check_version,
    decode_request,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_parts,
    encode_response,
    encode_response_parts,
    error_fields,
    error_from,
    raise_for_error,
)
from .connection import Connection, parse_address
from .stream import (
    discard,
    read_exact,
    read_message,
    read_size,
    recv_exact,
    recv_message,
    send_parts,
)

__all__ = [
    "ACKS_ALL", "ACKS_LEADER", "ACKS_NONE", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP",
    "NO_OFFSET", "REQUESTS", "RESPONSES", "SUPPORTED_VERSIONS", "ApiKey", "api_name",
    "DEFAULT_MAX_REQUEST_BYTES", "FileRegion", "Request", "RequestHeader", "bin_header",
    "check_version", "decode_request", "decode_request_body", "decode_request_header",
    "decode_response", "encode_request", "encode_request_parts", "encode_response",
    "encode_response_parts",
    "error_fields", "error_from", "raise_for_error", "Connection", "parse_address",
    "discard", "read_exact", "read_message", "read_size", "recv_exact", "recv_message",
    "send_parts",
]
