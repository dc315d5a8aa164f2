"""Partitioners: Kafka's default (murmur2 of the key) and sticky partitioning of
records without a key.

:func:`murmur2` is byte-exact with Kafka's Java ``Utils.murmur2`` and
:meth:`DefaultPartitioner.partition_for_key` is ``toPositive(murmur2(key)) %
numPartitions``, so a keyed record lands in the same partition number as with Kafka's
producer. :func:`murmur2_array` computes the same hash for a whole Arrow binary column
with numpy (no per-row Python), for :meth:`Producer.send_batch`.

Records without a key stick to one partition until about ``batch.size`` bytes went to
it, then move to another one at random (Kafka's uniform sticky partitioner, KIP-794):
large batches, even load.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pyarrow as pa

from ...errors import InvalidArgumentError

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 hash of ``data`` as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for k in struct.unpack_from(f"<{n4}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest:
        tail = length & ~3
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit."""
    return number & 0x7FFFFFFF


def murmur2_array(keys) -> np.ndarray:
    """murmur2 of every value of an Arrow binary/string array, as int32 numpy values.

    Vectorized over the rows: one numpy pass per 4-byte block of the longest key. Null
    entries get 0 (callers route null keys by the sticky rule instead).
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, pa.binary())
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        keys = keys.cast(pa.large_binary() if pa.types.is_large_string(keys.type)
                         else pa.binary())
    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        raise InvalidArgumentError(f"keys must be a binary or string column, got {keys.type}")
    n = len(keys)
    if n == 0:
        return np.zeros(0, np.int32)
    offsets_dtype = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    bufs = keys.buffers()
    offsets = np.frombuffer(bufs[1], offsets_dtype, n + 1, keys.offset * offsets_dtype().itemsize)
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = np.concatenate([data, np.zeros(4, np.uint8)]).astype(np.uint32)  # safe tails
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    m = np.uint32(_M)
    with np.errstate(over="ignore"):
        h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
        for block in range(int(lengths.max()) >> 2):
            rows = np.nonzero(lengths >= 4 * (block + 1))[0]
            pos = starts[rows] + 4 * block
            k = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16) | (data[pos + 3] << 24)
            k = k * m
            k ^= k >> np.uint32(24)
            k = k * m
            h[rows] = (h[rows] * m) ^ k
        rest = lengths & 3
        tail = starts + (lengths & ~3)
        for shift, need in ((16, 3), (8, 2), (0, 1)):
            rows = np.nonzero(rest >= need)[0]
            h[rows] ^= data[tail[rows] + (need - 1)] << np.uint32(shift)
        rows = np.nonzero(rest)[0]
        h[rows] = h[rows] * m
        h ^= h >> np.uint32(13)
        h = h * m
        h ^= h >> np.uint32(15)
    if keys.null_count:
        h[np.asarray(keys.is_null())] = 0
    return h.view(np.int32)


class DefaultPartitioner:
    """Kafka's default partitioning: murmur2 of the key, sticky for null keys.

    ``batch_size`` is the number of bytes sent to a sticky partition before it moves.
    Keyed hashes are cached (bounded) because keys repeat in most workloads.
    """

    CACHE_LIMIT = 65536

    def __init__(self, batch_size: int = 16384, rng: random.Random | None = None):
        self.batch_size = batch_size
        self._rng = rng or random.Random()
        self._sticky: dict[str, list] = {}  # topic -> [partition, bytes sent]
        self._cache: dict[bytes, int] = {}

    def partition_for_key(self, key: bytes, num_partitions: int) -> int:
        """``toPositive(murmur2(key)) % num_partitions``."""
        h = self._cache.get(key)
        if h is None:
            h = murmur2(key) & 0x7FFFFFFF
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = h
        return h % num_partitions

    def sticky_partition(self, topic: str, num_partitions: int, size: int) -> int:
        """The partition for a record without a key of ``size`` bytes."""
        state = self._sticky.get(topic)
        if state is None or state[0] >= num_partitions or state[1] >= self.batch_size:
            previous = state[0] if state is not None else -1
            state = [self._next(previous, num_partitions), 0]
            self._sticky[topic] = state
        state[1] += size
        return state[0]

    def _next(self, previous: int, num_partitions: int) -> int:
        if num_partitions == 1:
            return 0
        choice = self._rng.randrange(num_partitions - (previous >= 0))
        return choice + 1 if 0 <= previous <= choice else choice

    def partition(self, topic: str, key, num_partitions: int, size: int = 1) -> int:
        """Partition of one record: by key hash if ``key`` is not None, else sticky."""
        if key is None:
            return self.sticky_partition(topic, num_partitions, size)
        return self.partition_for_key(key, num_partitions)

    def partitions_for_keys(self, keys, num_partitions: int) -> np.ndarray:
        """Partition numbers of a whole key column (nulls get -1)."""
        if not isinstance(keys, (pa.Array, pa.ChunkedArray)):
            keys = pa.array(keys, pa.binary())
        parts = (murmur2_array(keys).view(np.uint32) & np.uint32(0x7FFFFFFF)).astype(np.int64)
        parts %= num_partitions
        if keys.null_count:
            nulls = keys.is_null()
            parts[np.asarray(nulls.combine_chunks() if isinstance(nulls, pa.ChunkedArray)
                             else nulls)] = -1
        return parts
