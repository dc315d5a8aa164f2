"""unpack_views decodes what msgpack decodes, leaving large bins in place."""

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.errors import InvalidArgumentError
from sparklog.protocol import ApiKey, decode_request, encode_request
from sparklog.protocol.unpack import unpack_views

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                     st.floats(allow_nan=False), st.text(max_size=40),
                     st.binary(max_size=300))
_docs = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=20)


def _plain(value):
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@settings(max_examples=150, deadline=None)
@given(_docs)
def test_same_values_as_msgpack(doc):
    data = msgpack.packb(doc, use_bin_type=True)
    assert _plain(unpack_views(data, "doc", min_view=100)) == msgpack.unpackb(data, raw=False)


def test_large_bins_are_views_of_the_input():
    data = bytearray(msgpack.packb({"a": b"x" * 5000, "b": b"y" * 10}, use_bin_type=True))
    doc = unpack_views(data, "doc")
    assert isinstance(doc["a"], memoryview) and doc["a"].obj is data
    assert isinstance(doc["b"], bytes)


@pytest.mark.parametrize("cut", [1, 10, -1])
def test_truncated_document_is_refused(cut):
    data = msgpack.packb({"records": b"x" * 5000}, use_bin_type=True)
    with pytest.raises(InvalidArgumentError, match="doc is not a valid msgpack.*truncated"):
        unpack_views(data[:cut], "doc")


def test_trailing_bytes_and_ext_are_refused():
    data = msgpack.packb([1, 2], use_bin_type=True)
    with pytest.raises(InvalidArgumentError, match="1 extra bytes"):
        unpack_views(data + b"\x00", "doc")
    with pytest.raises(InvalidArgumentError, match="type byte 0xd4"):
        unpack_views(msgpack.packb(msgpack.ExtType(1, b"z")), "doc")


def test_large_produce_request_keeps_records_in_the_payload():
    records = bytes(range(256)) * 1024
    body = {"acks": 1, "topics": [{"name": "t", "partitions": [
        {"partition": 0, "records": records}]}]}
    payload = bytearray(encode_request(ApiKey.PRODUCE, body, 7)[4:])
    req = decode_request(payload)
    got = req.body["topics"][0]["partitions"][0]["records"]
    assert isinstance(got, memoryview) and got.obj is payload and bytes(got) == records
    assert req.body["acks"] == 1 and req.header.correlation_id == 7


def test_request_parts_are_the_encoded_request():
    import socket

    from sparklog.protocol import encode_request_parts, recv_message, send_parts

    body = {"acks": -1, "topics": [{"name": "t", "partitions": [
        {"partition": 0, "records": b"r" * 200_000}, {"partition": 1, "records": b"s"}]}]}
    parts = encode_request_parts(ApiKey.PRODUCE, body, 9, "me")
    assert any(len(p) == 200_000 for p in parts)  # the records travel uncopied
    assert b"".join(parts) == encode_request(ApiKey.PRODUCE, body, 9, "me")
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(10)
        b.settimeout(10)
        import threading
        t = threading.Thread(target=send_parts, args=(a, parts))
        t.start()
        payload = recv_message(b)
        t.join()
    got = decode_request(payload).body["topics"][0]["partitions"]
    assert [(p["partition"], bytes(p["records"])) for p in got] == [
        (0, b"r" * 200_000), (1, b"s")]
