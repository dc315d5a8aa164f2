"""The Arrow IPC record-batch message of raw records, written in Python.

A producer at low latency sends frames of a few records: at 10k records/s with
``linger.ms=1``, one frame of about ten 100-byte records every millisecond. Built through
pyarrow (:func:`~sparklog.format.frame.raw_batch`, then the IPC writer), such a frame
costs some twenty calls into pyarrow's Python layer, several of which release the
interpreter lock and must take it back from the application's and the consumer's
threads: in the produce-to-consume bench the encoding took 0.2-0.5 ms of the sender's
time per frame, more than the records themselves. :func:`record_batch_message` writes
the same bytes without pyarrow:

- the flatbuffer metadata is pyarrow's own, taken once from the message of a one-row
  batch of the same schema; only its numbers change from batch to batch (the row
  count, each field node's length and null count, each buffer's offset and length,
  the body's length), and they are written where that template holds them (found by
  reading its ``Message`` and ``RecordBatch`` tables, not at assumed positions);
- the body is the buffers in the writer's order, each padded to 8 bytes: validity
  bitmaps (empty when a column has no null), 32-bit offsets, the bytes, the
  timestamps as 64-bit integers.

It covers the record batches a producer builds for a raw topic (``key``, ``value``,
``headers``, then ``__timestamp``) when no record has headers; :func:`record_batch_message`
returns None for anything else (the caller uses pyarrow). tests/format/test_rawipc.py
checks the bytes against pyarrow's writer, row counts and nulls included.
"""

from __future__ import annotations

import struct
from itertools import accumulate

import pyarrow as pa

from .ipc import _ref, _slot, _table

#: field slots of Arrow's Message and RecordBatch tables (format/Message.fbs)
_MSG_HEADER, _MSG_BODY_LENGTH = 2, 3
_RB_LENGTH, _RB_NODES, _RB_BUFFERS = 0, 1, 2
_NODES = 7     # key, value, headers (list), its struct, its key, its value, __timestamp
_BUFFERS = 17  # 3 + 3 + 2 (list) + 1 (struct) + 3 + 3 + 2 (timestamp)
_I64 = struct.Struct("<q")
_NODE_VECTOR = struct.Struct(f"<{2 * _NODES}q")
_BUFFER_VECTOR = struct.Struct(f"<{2 * _BUFFERS}q")
_ZEROS = bytes(4096)


class _Template:
    """pyarrow's message for a one-row batch of ``schema`` and where its numbers are."""

    def __init__(self, schema: pa.Schema):
        n = 1
        columns = [pa.nulls(n, schema.field(i).type) if i != 1 else pa.array([b"v"])
                   for i in range(len(schema) - 1)]
        columns.append(pa.array([0], pa.int64()).view(schema.field(len(schema) - 1).type))
        message = pa.RecordBatch.from_arrays(columns, schema=schema).serialize().to_pybytes()
        meta_len = struct.unpack_from("<i", message, 4)[0]
        self.head = bytearray(message[:8 + meta_len])
        lo, hi = 8, 8 + meta_len
        msg = _table(self.head, lo, hi, _ref(self.head, lo))
        batch = _table(self.head, lo, hi, _ref(self.head, _slot(self.head, msg, _MSG_HEADER, 4, hi)))
        self.body_length_at = _slot(self.head, msg, _MSG_BODY_LENGTH, 8, hi)
        self.length_at = _slot(self.head, batch, _RB_LENGTH, 8, hi)
        self.nodes_at = self._vector(_slot(self.head, batch, _RB_NODES, 4, hi), _NODES)
        self.buffers_at = self._vector(_slot(self.head, batch, _RB_BUFFERS, 4, hi), _BUFFERS)
        if not (self.body_length_at and self.length_at):
            raise AssertionError("pyarrow's record batch message has no length fields")

    def _vector(self, at: int, count: int) -> int:
        vec = _ref(self.head, at)
        if not at or struct.unpack_from("<I", self.head, vec)[0] != count:
            raise AssertionError(f"pyarrow's record batch message does not have {count} "
                                 "entries where this encoder expects them")
        return vec + 4


_TEMPLATES: dict = {}


def _bitmap(items: list) -> bytes:
    """Arrow validity bitmap of ``items`` (bit i set when item i is not None)."""
    out = bytearray((len(items) + 7) // 8)
    for i, item in enumerate(items):
        if item is not None:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _binary(items: list | None, n: int) -> tuple[int, tuple]:
    """(null count, (validity, offsets, data)) of a binary column of ``n`` rows
    (``items`` None: every row null)."""
    if items is None:
        return n, (bytes((n + 7) // 8), bytes(4 * (n + 1)), b"")
    nulls = items.count(None)
    if nulls:
        present = [b"" if v is None else v for v in items]
        validity = _bitmap(items)
    else:
        present, validity = items, b""
    offsets = struct.pack(f"<{n + 1}i", *accumulate(map(len, present), initial=0))
    return nulls, (validity, offsets, b"".join(present))


def record_batch_message(schema: pa.Schema, values: list, keys: list | None,
                         timestamps: list) -> bytes | None:
    """The IPC message (metadata and body) of the batch ``raw_batch(values, keys)`` plus
    its ``__timestamp`` column ``timestamps`` (ints, milliseconds), for the body schema
    ``schema``; None when a value or key is not ``bytes`` (or None) or the rows exceed
    what 32-bit offsets hold, so that the caller encodes with pyarrow."""
    n = len(values)
    for column in (values, keys or ()):
        for v in column:
            if v is not None and v.__class__ is not bytes:
                return None
    template = _TEMPLATES.get(schema)
    if template is None:
        template = _TEMPLATES[schema] = _Template(schema)
    key_nulls, key_buffers = _binary(keys, n)
    value_nulls, value_buffers = _binary(values, n)
    if len(key_buffers[2]) + len(value_buffers[2]) >= 2 ** 31:
        return None
    none_bitmap, none_offsets = bytes((n + 7) // 8), bytes(4 * (n + 1))
    buffers = (*key_buffers, *value_buffers,
               none_bitmap, none_offsets,            # headers: every row null
               b"",                                  # its struct child (no rows)
               b"", none_offsets, b"", b"", none_offsets, b"",  # its key and value
               b"", struct.pack(f"<{n}q", *timestamps))
    spans, body, at = [], [], 0
    for buf in buffers:
        size = len(buf)
        spans += (at, size)
        if size:
            body.append(buf)
            pad = -size % 8
            if pad:
                body.append(_ZEROS[:pad])
            at += size + pad
    head = bytearray(template.head)
    _I64.pack_into(head, template.body_length_at, at)
    _I64.pack_into(head, template.length_at, n)
    _NODE_VECTOR.pack_into(head, template.nodes_at, n, key_nulls, n, value_nulls, n, n,
                           0, 0, 0, 0, 0, 0, n, 0)
    _BUFFER_VECTOR.pack_into(head, template.buffers_at, *spans)
    body.insert(0, head)
    return b"".join(body)
