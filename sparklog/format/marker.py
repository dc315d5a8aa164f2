"""Transaction markers: the control frames that end a producer's transaction.

A transaction marker is a control frame (attribute bit 5) of the producer's id and
epoch with the transactional bit set, holding one raw record laid out as Kafka's
control record: its ``key`` is ``version`` (int16, 0) then ``type`` (int16: 0 ABORT,
1 COMMIT), big-endian; its ``value`` is ``version`` (int16, 0) then the
``coordinator_epoch`` (int32). The transactional data frames of that producer since its
previous marker belong to the transaction the marker ends: an ABORT marker's are
aborted (readers in read_committed mode skip them, the log cleaner removes them), a
COMMIT marker's are committed. A control frame whose key is not such a record is of an
unknown type (it ends the transaction, as neither).
"""

from __future__ import annotations

import struct

from .frame import Frame, encode_frame, raw_batch

ABORT = 0
COMMIT = 1
MARKER_NAMES = {ABORT: "ABORT", COMMIT: "COMMIT"}

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def encode_marker(kind: int, *, producer_id: int, producer_epoch: int, timestamp: int,
                  base_offset: int = 0, leader_epoch: int = -1,
                  coordinator_epoch: int = 0) -> bytes:
    """The bytes of a transaction marker frame of type ``kind`` (:data:`ABORT` or
    :data:`COMMIT`) for producer ``producer_id``/``producer_epoch`` at ``timestamp`` (ms)."""
    if kind not in MARKER_NAMES:
        raise ValueError(f"transaction marker type {kind!r}: expected 0 (ABORT) or 1 (COMMIT)")
    batch = raw_batch([_VALUE.pack(0, coordinator_epoch)], keys=[_KEY.pack(0, kind)])
    return encode_frame(batch, timestamps=[timestamp], base_offset=base_offset,
                        leader_epoch=leader_epoch, producer_id=producer_id,
                        producer_epoch=producer_epoch, control=True, transactional=True)


def marker_type(frame: Frame) -> int | None:
    """:data:`ABORT` or :data:`COMMIT` for a transaction marker frame, None for any other
    frame (a data frame, or a control frame of an unknown type)."""
    if not frame.header.is_control:
        return None
    batch = frame.batch()
    if "key" not in batch.schema.names or batch.num_rows != 1:
        return None
    key = batch.column("key")[0].as_py()
    if not isinstance(key, bytes) or len(key) != _KEY.size:
        return None
    version, kind = _KEY.unpack(key)
    return kind if version == 0 and kind in MARKER_NAMES else None
