"""Protocol codec: round trips, validation errors naming fields, fuzzed decoding."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.errors import (
    InvalidArgumentError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    SparklogError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from sparklog.protocol import (
    REQUESTS,
    RESPONSES,
    ApiKey,
    FileRegion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
    error_fields,
    error_from,
    raise_for_error,
)
from sparklog.protocol.connection import parse_address
from sparklog.protocol.stream import check_size


def _payload(message: bytes) -> bytes:
    (size,) = struct.unpack(">i", message[:4])
    assert size == len(message) - 4
    return message[4:]


def test_request_round_trip_keeps_records_bytes_and_fills_defaults():
    frames = bytes(range(256)) * 40
    body = {"acks": -1, "topics": [{"name": "t", "partitions": [
        {"partition": 3, "records": frames}]}]}
    req = decode_request(_payload(encode_request(ApiKey.PRODUCE, body, 77, "cli-1")))
    assert req.header.api_key == ApiKey.PRODUCE
    assert req.header.correlation_id == 77
    assert req.header.client_id == "cli-1"
    part = req.body["topics"][0]["partitions"][0]
    assert part["records"] == frames
    assert req.body["acks"] == -1 and req.body["timeout_ms"] == 30000


def test_fetch_defaults_and_metadata_none_topics():
    req = decode_request(_payload(encode_request(ApiKey.FETCH, {"topics": [
        {"name": "a", "partitions": [{"partition": 0, "fetch_offset": 5}]}]}, 1)))
    assert req.body["max_wait_ms"] == 500
    assert req.body["topics"][0]["partitions"][0]["partition_max_bytes"] == 1048576
    meta = decode_request(_payload(encode_request(ApiKey.METADATA, None, 2)))
    assert meta.body["topics"] is None


def test_missing_field_is_named():
    msg = encode_request(ApiKey.PRODUCE, {"topics": [{"name": "t", "partitions": [
        {"partition": 0}]}]}, 5)
    with pytest.raises(InvalidArgumentError, match=r"Produce\.topics\[0\]\.partitions\[0\]\.records"):
        decode_request(_payload(msg))


def test_wrong_type_is_named():
    msg = encode_request(ApiKey.LIST_OFFSETS, {"topics": [{"name": "t", "partitions": [
        {"partition": "zero", "timestamp": -1}]}]}, 5)
    with pytest.raises(InvalidArgumentError, match=r"partitions\[0\]\.partition: expected int, got str"):
        decode_request(_payload(msg))
    msg = encode_request(ApiKey.HEARTBEAT, {"group_id": "g", "generation_id": True,
                                            "member_id": "m"}, 5)
    with pytest.raises(InvalidArgumentError, match="generation_id"):
        decode_request(_payload(msg))


def test_unknown_api_and_version():
    with pytest.raises(UnsupportedVersionError, match="unknown api key 999"):
        decode_request(_payload(encode_request(999, {}, 1)))
    with pytest.raises(UnsupportedVersionError, match="Fetch version 7"):
        decode_request(_payload(encode_request(ApiKey.FETCH, {}, 1, api_version=7)))


def test_truncated_header_and_garbage_body():
    msg = _payload(encode_request(ApiKey.API_VERSIONS, {}, 9))
    with pytest.raises(InvalidArgumentError, match="header truncated"):
        decode_request(msg[:5])
    bad = msg[:10] + b"\xc1\xc1\xc1"
    with pytest.raises(InvalidArgumentError, match="not a valid msgpack"):
        decode_request(bad)
    not_map = msg[:10] + msgpack.packb([1, 2])
    with pytest.raises(InvalidArgumentError, match="expected"):
        decode_request(not_map)


def test_size_limit():
    check_size(10, 10)
    with pytest.raises(RecordTooLargeError, match="11 bytes exceeds the limit of 10"):
        check_size(11, 10)
    with pytest.raises(InvalidArgumentError, match="negative"):
        check_size(-1, 10)


def test_response_round_trip_and_errors():
    body = {"error_code": 0, "topics": [{"name": "t", "partitions": [
        {"partition": 0, **error_fields(UnknownTopicOrPartitionError("topic 't' is gone")),
         "base_offset": -1}]}]}
    cid, got = decode_response(_payload(encode_response(42, body)), ApiKey.PRODUCE)
    assert cid == 42
    item = got["topics"][0]["partitions"][0]
    assert item["error_code"] == UnknownTopicOrPartitionError.code
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 't' is gone"):
        raise_for_error(item)
    assert isinstance(error_from({"error_code": OffsetOutOfRangeError.code,
                                  "error_message": "x"}), OffsetOutOfRangeError)
    assert error_from({"error_code": 0}) is None
    assert error_fields(RuntimeError("boom"))["error_code"] == -1
    raise_for_error(got)  # top level: no error


def test_response_parts_match_plain_encoding(tmp_path):
    data = bytes(range(256)) * 100
    path = tmp_path / "seg"
    path.write_bytes(b"xx" + data + b"yy")
    region = FileRegion(str(path), 2, len(data))
    body = {"error_code": 0, "topics": [{"name": "t", "partitions": [
        {"partition": 0, "error_code": 0, "high_watermark": 9, "log_start_offset": 0,
         "records": region}]}]}
    parts, total = encode_response_parts(3, body)
    wire = bytearray()
    for part in parts:
        if isinstance(part, FileRegion):
            with open(part.path, "rb") as f:
                f.seek(part.offset)
                wire += f.read(part.size)
        else:
            wire += part
    assert len(wire) == total
    plain = dict(body)
    plain["topics"] = [{"name": "t", "partitions": [
        dict(body["topics"][0]["partitions"][0], records=data)]}]
    assert bytes(wire) == encode_response(3, plain)
    cid, got = decode_response(_payload(bytes(wire)), ApiKey.FETCH)
    assert got["topics"][0]["partitions"][0]["records"] == data


def test_every_api_has_specs_and_an_empty_body_error_or_passes():
    for key in ApiKey:
        assert key in REQUESTS and key in RESPONSES
        try:
            decode_request(_payload(encode_request(key, {}, 1)))
        except InvalidArgumentError as exc:
            assert "required field is missing" in str(exc)


def test_parse_address():
    assert parse_address("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_address("[::1]:80") == ("::1", 80)
    with pytest.raises(InvalidArgumentError, match="not a number"):
        parse_address("h:x")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_fuzz_request_decoder_random_bytes(data):
    try:
        decode_request(data)
    except SparklogError:
        pass  # only documented errors may escape


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(ApiKey)), st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["topics", "name", "partitions", "partition", "records", "acks",
                         "group_id", "fetch_offset", "timestamp", "member_id"]),
        inner, max_size=4),
    max_leaves=12))
def test_fuzz_request_decoder_structured_bodies(key, body):
    payload = _payload(encode_request(key, {}, 1))[:10] + msgpack.packb(body, use_bin_type=True)
    try:
        decode_request(payload)
    except SparklogError:
        pass


def test_top_level_error_response_needs_only_error_fields():
    body = error_fields(UnsupportedVersionError("Fetch version 9 is not supported"))
    _, got = decode_response(_payload(encode_response(5, body)), ApiKey.FETCH)
    with pytest.raises(UnsupportedVersionError, match="version 9"):
        raise_for_error(got)
    with pytest.raises(InvalidArgumentError, match="topics"):
        decode_response(_payload(encode_response(5, {"error_code": 0})), ApiKey.FETCH)


_BODIES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["topics", "name", "partitions", "partition", "records", "acks",
                         "error_code", "error_message", "high_watermark", "base_offset",
                         "fetch_offset", "timestamp", "member_id", "configs"]),
        inner, max_size=5),
    max_leaves=14)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(list(ApiKey)), st.booleans(), _BODIES)
def test_compiled_checks_accept_and_refuse_what_the_field_by_field_check_does(key, response,
                                                                                body):
    """check() runs each spec compiled; the interpreter that names the bad field must
    agree with it on every value: the same result, or the same error."""
    from sparklog.protocol.apis import REQUESTS, RESPONSES
    from sparklog.protocol.schema import _interpret, check

    spec = (RESPONSES if response else REQUESTS).get(key)
    if spec is None:
        return
    try:
        expected = _interpret(body, spec, "x")
    except SparklogError as exc:
        with pytest.raises(type(exc)) as got:
            check(body, spec, "x")
        assert str(got.value) == str(exc)
    else:
        assert check(body, spec, "x") == expected
