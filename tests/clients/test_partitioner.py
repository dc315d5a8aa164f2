"""Kafka's default partitioner: murmur2 byte-exact with Java's Utils.murmur2, the
vectorized column version, and sticky partitioning of records without a key."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.clients.producer.partitioner import (
    DefaultPartitioner,
    murmur2,
    murmur2_array,
    to_positive,
)
from sparklog.errors import InvalidArgumentError

# Kafka's own UtilsTest.testMurmur2 vectors (clients/src/test/.../utils/UtilsTest.java)
KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
# kafkajs' vectors generated with Kafka's Java client (defaultJava/Test.java)
KAFKAJS_JAVA = {
    b"0": 971027396, b"1": -1993445489, b"128": -326012175, b"2187": -1508407203,
    b"16384": -325739742, b"78125": -1654490814, b"279936": 1462227128,
    b"823543": -2014198330, b"2097152": 607668903, b"4782969": -1182699775,
    b"10000000": -1830336757, b"19487171": -1603849305, b"35831808": -857013643,
    b"62748517": -1167431028, b"105413504": -381294639, b"170859375": -1658323481,
    b"100:48069": 1009543857,
}
# kafka-python's test against Kafka's Java partitioner with 1000 partitions
JAVA_PARTITIONS_OF_1000 = {
    b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742,
}


@pytest.mark.parametrize("key,expected", sorted({**KAFKA_UTILS_TEST, **KAFKAJS_JAVA}.items()))
def test_murmur2_matches_kafka_java(key, expected):
    assert murmur2(key) == expected


@pytest.mark.parametrize("key,expected", sorted(JAVA_PARTITIONS_OF_1000.items()))
def test_partition_numbers_match_kafka_default_partitioner(key, expected):
    assert DefaultPartitioner().partition("t", key, 1000) == expected
    assert to_positive(murmur2(key)) % 1000 == expected


def test_murmur2_of_empty_and_high_bytes():
    assert to_positive(murmur2(b"")) == 275646681  # published by several ports
    # high bytes must be treated as unsigned (Java's & 0xff)
    assert murmur2(b"\xff\xfe\xfd") != murmur2(b"\x7f\x7e\x7d")


def test_murmur2_array_matches_scalar_on_vectors():
    keys = list(KAFKA_UTILS_TEST) + list(KAFKAJS_JAVA)
    got = murmur2_array(pa.array(keys, pa.binary())).tolist()
    assert got == [murmur2(k) for k in keys]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=50),
       st.integers(0, 3))
def test_murmur2_array_equals_scalar(keys, slice_start):
    arr = pa.array(keys, pa.binary())
    arr = arr.slice(min(slice_start, len(keys) - 1))  # non-zero array offsets too
    want = [0 if k is None else murmur2(k) for k in arr.to_pylist()]
    assert murmur2_array(arr).tolist() == want
    assert murmur2_array(arr.cast(pa.large_binary())).tolist() == want


def test_murmur2_array_of_strings_and_chunked():
    strings = pa.chunked_array([["foo", "bar"], ["foobar"]])
    assert murmur2_array(strings).tolist() == [murmur2(b"foo"), murmur2(b"bar"),
                                               murmur2(b"foobar")]
    with pytest.raises(InvalidArgumentError, match="binary or string"):
        murmur2_array(pa.array([1, 2]))


def test_partitions_for_keys_vectorized_equals_per_key():
    p = DefaultPartitioner()
    keys = [b"k%d" % i for i in range(500)] + [None]
    parts = p.partitions_for_keys(pa.array(keys, pa.binary()), 7).tolist()
    assert parts[:-1] == [p.partition_for_key(k, 7) for k in keys[:-1]]
    assert parts[-1] == -1


def test_sticky_partition_moves_after_batch_size_bytes():
    p = DefaultPartitioner(batch_size=1000, rng=random.Random(1))
    first = [p.partition("t", None, 8, size=100) for _ in range(10)]
    assert len(set(first)) == 1  # 10 x 100 bytes stay on one partition
    nxt = p.partition("t", None, 8, size=100)
    assert nxt != first[0]  # the 1001st byte moves to another partition
    seen = {p.partition("t", None, 8, size=1000) for _ in range(400)}
    assert seen == set(range(8))  # all partitions get load
    # topics stick independently; keyed records are not affected
    assert p.partition("u", b"foo", 8) == to_positive(murmur2(b"foo")) % 8


def test_sticky_single_partition_and_shrunk_topic():
    p = DefaultPartitioner(batch_size=10)
    assert {p.partition("t", None, 1, size=50) for _ in range(5)} == {0}
    p._sticky["t"] = [5, 0]
    assert p.partition("t", None, 3) < 3  # a partition that no longer exists is dropped
