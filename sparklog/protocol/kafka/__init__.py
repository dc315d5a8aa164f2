"""Apache Kafka's wire protocol: framing and codecs (see :mod:`.codec`).

The message codecs are kio's, generated from Kafka's own JSON message specs; this
package adds only the framing, the request/response headers and the registry of the
API versions sparklog advertises. It imports nothing of sparklog but its errors.
"""

from sparklog.protocol.kafka.codec import (
    ADVERTISED,
    KafkaDecodeError,
    KafkaUnsupportedVersionError,
    RequestHeader,
    api_versions_entries,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_values,
    unsupported_version_response,
)

__all__ = [
    "ADVERTISED",
    "KafkaDecodeError",
    "KafkaUnsupportedVersionError",
    "RequestHeader",
    "api_versions_entries",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_values",
    "unsupported_version_response",
]
