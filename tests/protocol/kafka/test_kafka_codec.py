"""Kafka wire codecs: round trips of every advertised (api, version), golden bytes from
kafka-python's independently hand-written protocol classes, KIP-511 and a fuzz test."""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
import time
import uuid

import pytest
from kio._kio_native import tz_aware_from_i64
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
)
from kio.static.primitive import i64

from sparklog.protocol.kafka import (
    ADVERTISED,
    KafkaDecodeError,
    KafkaUnsupportedVersionError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    unsupported_version_response,
)

_SAMPLES = {
    "bool": True,
    "int8": 3,
    "int16": 7,
    "int32": 123456,
    "int64": 2**40 + 5,
    "uint16": 65000,
    "string": "topic-a",
    "bytes": b"\x00\x01payload",
    "records": b"\x00" * 12,
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "float64": 1.5,
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(milliseconds=1500),
    "timedelta_i64": datetime.timedelta(milliseconds=2**33),
}


def _primitive(field: dataclasses.Field, type_: type) -> object:
    if field.metadata["kafka_type"] == "datetime_i64":
        return tz_aware_from_i64(i64(1_715_000_000_123))
    value = _SAMPLES[field.metadata["kafka_type"]]
    if isinstance(value, (uuid.UUID, ErrorCode, datetime.timedelta)) and not hasattr(
        type_, "parse"
    ):
        return value
    parse = getattr(type_, "parse", None)
    return parse(value) if parse is not None else type_(value)  # type: ignore[operator]


def _sample(cls: type) -> object:
    """An instance of a kio entity with a representative non-default value in every field."""
    values = {}
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            values[field.name] = (_sample(kind.type_), _sample(kind.type_))
        elif isinstance(kind, EntityField):
            values[field.name] = _sample(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = (_primitive(field, kind.type_), _primitive(field, kind.type_))
        else:
            values[field.name] = _primitive(field, kind.type_)
    return cls(**values)


def _accepted() -> list[tuple[int, int]]:
    return [
        (key, version)
        for key, (lo, hi, accept) in sorted(ADVERTISED.items())
        for version in range(max(lo, accept), hi + 1)
    ]


@pytest.mark.parametrize(("api_key", "version"), _accepted())
def test_round_trip_every_advertised_api_and_version(api_key: int, version: int) -> None:
    header = RequestHeader(api_key, version, 42, "client-1")
    request = _sample(load_request_schema(api_key, version))
    frame = encode_request(header, request)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert decode_request(frame[4:]) == (header, request)
    response = _sample(load_response_schema(api_key, version))
    assert decode_response(header, encode_response(header, response)[4:]) == response


def _kafka_python(request: object) -> bytes:
    """kafka-python's hand-written (Struct-based) encoding of a request, size-prefixed."""
    request.with_header(correlation_id=42, client_id="client-1")  # type: ignore[attr-defined]
    return request.encode(header=True, framed=True)  # type: ignore[attr-defined,no-any-return]


def test_golden_bytes_match_kafka_python() -> None:
    from kafka.protocol.old import api_versions as old_api_versions
    from kafka.protocol.old import metadata as old_metadata
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic

    ours = encode_request(
        RequestHeader(18, 3, 42, "client-1"),
        ApiVersionsRequest(client_software_name="kafka-python", client_software_version="3.0"),
    )
    theirs = _kafka_python(
        old_api_versions.ApiVersionsRequest[3](
            client_software_name="kafka-python", client_software_version="3.0", tags={}
        )
    )
    assert ours == theirs
    ours = encode_request(
        RequestHeader(3, 1, 42, "client-1"),
        MetadataRequest(topics=(MetadataRequestTopic(name="orders"),)),
    )
    theirs = _kafka_python(old_metadata.MetadataRequest[1](topics=["orders"]))
    assert ours == theirs


def test_metadata_v12_golden_bytes_from_the_spec() -> None:
    """Hand-assembled from Kafka's MetadataRequest.json and RequestHeader.json (v2)."""
    from kio.schema.metadata.v12.request import MetadataRequest

    frame = encode_request(
        RequestHeader(3, 12, 7, "me"),
        MetadataRequest(
            topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
        ),
    )
    expected = (
        b"\x00\x00\x00\x11"  # size 17
        b"\x00\x03\x00\x0c\x00\x00\x00\x07"  # api key 3, v12, correlation 7
        b"\x00\x02me\x00"  # client_id (legacy string), header tagged fields
        b"\x00\x01\x00\x00"  # topics null (compact), auto-create, authorized ops, tags
    )
    assert frame == expected


def test_api_versions_above_max_gets_error_35_in_v0_header() -> None:
    """KIP-511: the header of an unknown ApiVersions version still parses."""
    body = struct.pack(">hhih", 18, 9, 77, 3) + b"cli" + b"\x00" + b"\x02x\x02y\x00"
    with pytest.raises(KafkaUnsupportedVersionError) as info:
        decode_request(body)
    assert info.value.header == RequestHeader(18, 9, 77, "cli")
    answer = unsupported_version_response(info.value.header)
    # response header v0 (no tagged fields), error 35, then the advertised array
    assert answer[4:10] == struct.pack(">ih", 77, 35)
    response = decode_response(RequestHeader(18, 0, 77, "cli"), answer[4:])
    assert {(a.api_key, a.min_version, a.max_version) for a in response.api_keys} == {
        (k, lo, hi) for k, (lo, hi, _) in ADVERTISED.items()
    }


@pytest.mark.parametrize(("api_key", "version"), [(0, 2), (1, 3), (1, 13), (3, 13), (999, 0)])
def test_unaccepted_version_is_unsupported_version(api_key: int, version: int) -> None:
    body = struct.pack(">hhih", api_key, version, 5, -1) + b"\x00" * 16
    with pytest.raises(KafkaUnsupportedVersionError, match="not supported|unsupported") as info:
        decode_request(body)
    assert info.value.code == 35
    assert info.value.header.correlation_id == 5


@pytest.mark.parametrize("cut", [0, 3, 9, 12, 20])
def test_truncated_request_is_a_named_decode_error(cut: int) -> None:
    from kio.schema.metadata.v9.request import MetadataRequest

    request = _sample(MetadataRequest)
    frame = encode_request(RequestHeader(3, 9, 1, "abc"), request)[4:]
    with pytest.raises(KafkaDecodeError, match="truncated|malformed"):
        decode_request(frame[:cut])


def test_fuzz_decode_request_raises_only_the_named_error() -> None:
    rng = random.Random(29)
    seeds = [
        encode_request(RequestHeader(k, v, 1, "fuzz"), _sample(load_request_schema(k, v)))[4:]
        for k, v in _accepted()
    ]
    deadline = time.monotonic() + 60
    for i in range(20000):
        if i % 2:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.3:
                data = data[: rng.randrange(len(data))]
        else:
            data = bytearray(rng.randbytes(rng.randint(0, 64)))
            data[:4] = rng.choice(seeds)[:4]  # a valid api key and version
        try:
            decode_request(bytes(data))
        except (KafkaDecodeError, KafkaUnsupportedVersionError):
            pass
        assert time.monotonic() < deadline


def test_golden_group_and_sasl_requests_match_kafka_python() -> None:
    from kafka.protocol.old import find_coordinator, group, sasl_handshake
    from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
    from kio.schema.heartbeat.v0.request import HeartbeatRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    cases = [
        (
            RequestHeader(12, 0, 42, "client-1"),
            HeartbeatRequest(group_id="g1", generation_id=5, member_id="m-1"),  # type: ignore[arg-type]
            group.HeartbeatRequest[0](group_id="g1", generation_id=5, member_id="m-1"),
        ),
        (
            RequestHeader(17, 1, 42, "client-1"),
            SaslHandshakeRequest(mechanism="SCRAM-SHA-512"),
            sasl_handshake.SaslHandshakeRequest[1](mechanism="SCRAM-SHA-512"),
        ),
        (
            RequestHeader(10, 1, 42, "client-1"),
            FindCoordinatorRequest(key="g1", key_type=0),  # type: ignore[arg-type]
            find_coordinator.FindCoordinatorRequest[1](key="g1", key_type=0),
        ),
    ]
    for header, ours, theirs in cases:
        assert encode_request(header, ours) == _kafka_python(theirs)


def test_kip511_answer_parses_with_kafka_python() -> None:
    """kafka-python's own ApiVersions v0 response parser reads the error-35 answer."""
    from kafka.protocol.old import api_versions

    answer = unsupported_version_response(RequestHeader(18, 7, 9, None))
    assert struct.unpack(">ii", answer[:8]) == (len(answer) - 4, 9)
    parsed = api_versions.ApiVersionsResponse[0].decode(answer[8:])
    assert parsed.error_code == 35
    assert {tuple(entry) for entry in parsed.api_keys} == {
        (k, lo, hi) for k, (lo, hi, _) in ADVERTISED.items()
    }


def test_response_header_v1_for_flexible_but_v0_for_api_versions() -> None:
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from kio.schema.heartbeat.v4.response import HeartbeatResponse

    heartbeat = HeartbeatResponse(
        throttle_time=datetime.timedelta(0),  # type: ignore[arg-type]
        error_code=ErrorCode.none,
    )
    # size, correlation id, header tagged fields (0), throttle, error, body tagged fields
    assert encode_response(RequestHeader(12, 4, 3, "c"), heartbeat) == (
        struct.pack(">ii", 12, 3) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00"
    )
    versions = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(),
        throttle_time=datetime.timedelta(0),  # type: ignore[arg-type]
    )
    # no header tagged fields for ApiVersions, even at a flexible version
    assert encode_response(RequestHeader(18, 3, 3, "c"), versions)[8:10] == b"\x00\x00"
    assert encode_response(RequestHeader(18, 3, 3, "c"), versions)[4:] == (
        struct.pack(">ih", 3, 0) + b"\x01" + struct.pack(">i", 0) + b"\x00"
    )


def test_huge_declared_lengths_fail_fast_without_allocating() -> None:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    bodies = [
        struct.pack(">hhihi", 3, 1, 1, -1, 0x7FFFFFFF),  # legacy array of 2^31-1 topics
        struct.pack(">hhih", 3, 12, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x07",  # compact
        struct.pack(">hhih", 17, 1, 1, -1) + struct.pack(">h", 32767),  # string overruns
    ]
    for body in bodies:
        with pytest.raises(KafkaDecodeError, match="malformed|truncated"):
            decode_request(body)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB


def _plain_value(field: dataclasses.Field, kafka_type: str, rnd: random.Random) -> object:
    """A plain value (what handlers give build()) of a primitive of ``kafka_type``."""
    if kafka_type in ("int8", "int16", "int32", "int64"):
        bits = int(kafka_type[3:])
        return rnd.choice([0, -1, 1, 2 ** (bits - 1) - 1, -(2 ** (bits - 1)), rnd.randrange(100)])
    if kafka_type in ("uint16", "uint32", "uint64"):
        return rnd.choice([0, 1, 2 ** int(kafka_type[4:]) - 1])
    if kafka_type in ("timedelta_i32", "timedelta_i64", "datetime_i64"):
        return rnd.choice([0, 1500, 2**30, datetime.timedelta(milliseconds=7)]
                          if kafka_type != "datetime_i64" else [0, 1_715_000_000_123])
    return {
        "bool": lambda: rnd.choice([True, False]),
        "string": lambda: rnd.choice(["", "topic-é", "x" * 200]),
        "bytes": lambda: rnd.choice([b"", b"\x00\x01", b"b" * 300]),
        "records": lambda: rnd.choice([b"", b"\x00" * 12, memoryview(b"r" * 130)]),
        "uuid": lambda: rnd.choice([uuid.UUID(int=7), 2**100 + 3]),
        "float64": lambda: 1.5,
        "error_code": lambda: rnd.choice([0, 3, 87, ErrorCode.not_leader_or_follower]),
    }[kafka_type]()


def _plain_values(cls: type, rnd: random.Random, depth: int = 0) -> dict:
    """A dict of plain values for the kio class ``cls`` as a handler writes one: some
    fields left out (their default or zero), None in some (null, or the zero of a field
    that is not nullable), tagged fields now and then."""
    values: dict = {}
    for field in dataclasses.fields(cls):
        if rnd.random() < 0.2 or ("tag" in field.metadata and rnd.random() < 0.7):
            continue
        if rnd.random() < 0.1:
            values[field.name] = None
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            values[field.name] = [_plain_values(kind.type_, rnd, depth + 1)
                                  for _ in range(rnd.choice([0, 1, 2]) if depth < 3 else 0)]
        elif isinstance(kind, EntityField):
            values[field.name] = _plain_values(kind.type_, rnd, depth + 1)
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = [_plain_value(field, field.metadata["kafka_type"], rnd)
                                  for _ in range(rnd.choice([0, 1, 3]))]
        else:
            values[field.name] = _plain_value(field, field.metadata["kafka_type"], rnd)
    return values


@pytest.mark.parametrize(("api_key", "version"), _accepted())
def test_response_values_encode_as_the_built_response(api_key: int, version: int) -> None:
    """encode_response_values (a dict written field by field) writes the bytes
    encode_response writes for build() of the same dict, for every advertised response:
    left-out fields, None, nested and empty arrays, records given as a memoryview,
    tagged fields (then kio's own writer writes the entity)."""
    from sparklog.protocol.kafka import encode_response_values
    from sparklog.protocol.kafka.entities import build

    rnd = random.Random(api_key * 100 + version)
    header = RequestHeader(api_key, version, 42, "client-1")
    cls = load_response_schema(api_key, version)
    for _ in range(30):
        values = _plain_values(cls, rnd)
        expected = encode_response(header, build(cls, values))
        assert b"".join(encode_response_values(header, values)) == expected, values


@pytest.mark.parametrize(("api_key", "version"), _accepted())
def test_plain_is_what_build_takes_back(api_key: int, version: int) -> None:
    """plain() of every advertised request (every field set) builds the same request."""
    from sparklog.protocol.kafka.entities import build, plain

    request = _sample(load_request_schema(api_key, version))
    assert build(type(request), plain(request)) == request
