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

from .ipc import IPC_EOS, fb_ref, fb_slot, fb_table

#: field slots of Arrow's Message and RecordBatch tables (format/Message.fbs)
_MSG_HEADER, _MSG_BODY_LENGTH = 2, 3
_RB_LENGTH, _RB_NODES, _RB_BUFFERS = 0, 1, 2
_NODES = 7     # key, value, headers (list), its struct, its key, its value, __timestamp
_BUFFERS = 17  # 3 + 3 + 2 (list) + 1 (struct) + 3 + 3 + 2 (timestamp)
_I64 = struct.Struct("<q")
_NODE_VECTOR = struct.Struct(f"<{2 * _NODES}q")
_BUFFER_VECTOR = struct.Struct(f"<{2 * _BUFFERS}q")
_ZEROS = bytes(8)


class _Template:
    """pyarrow's message for a one-row batch of ``schema`` and where its numbers are."""

    def __init__(self, schema: pa.Schema):
        columns = [pa.nulls(1, schema.field(i).type) if i != 1 else pa.array([b"v"])
                   for i in range(len(schema) - 1)]
        columns.append(pa.array([0], pa.int64()).view(schema.field(len(schema) - 1).type))
        message = pa.RecordBatch.from_arrays(columns, schema=schema).serialize().to_pybytes()
        meta_len = struct.unpack_from("<i", message, 4)[0]
        self.head = bytearray(message[:8 + meta_len])
        lo, hi = 8, 8 + meta_len
        msg = fb_table(self.head, lo, hi, fb_ref(self.head, lo))
        batch = fb_table(self.head, lo, hi, fb_ref(self.head, fb_slot(self.head, msg, _MSG_HEADER, 4, hi)))
        self.body_length_at = fb_slot(self.head, msg, _MSG_BODY_LENGTH, 8, hi)
        self.length_at = fb_slot(self.head, batch, _RB_LENGTH, 8, hi)
        self.nodes_at = self._vector(fb_slot(self.head, batch, _RB_NODES, 4, hi), _NODES)
        self.buffers_at = self._vector(fb_slot(self.head, batch, _RB_BUFFERS, 4, hi), _BUFFERS)
        if not (self.body_length_at and self.length_at):
            raise AssertionError("pyarrow's record batch message has no length fields")

    def _vector(self, at: int, count: int) -> int:
        vec = fb_ref(self.head, at)
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


def _headers_and_timestamps(n: int, timestamps) -> tuple:
    """The buffers after the key and value columns: headers (every row null; its
    children without rows keep offsets of the parent's size, as pyarrow writes them),
    then the timestamps (``None``: only their sizes matter)."""
    bitmap, offsets = bytes((n + 7) // 8), bytes(4 * (n + 1))
    stamps = struct.pack(f"<{n}q", *timestamps) if timestamps is not None else bytes(8 * n)
    return (bitmap, offsets,                     # the list
            b"",                                 # its struct child
            b"", offsets, b"", b"", offsets, b"",  # the struct's key and value
            b"", stamps)


def _layout(sizes: list) -> tuple[tuple, int]:
    """(offset, length) of each buffer of these sizes in a message body, each padded to
    8 bytes as pyarrow's writer pads them, flattened; and the body's length."""
    spans: list = []
    at = 0
    for size in sizes:
        spans += (at, size)
        at += size + (-size % 8)
    return tuple(spans), at


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
    template = _template(schema)
    key_nulls, key_buffers = _binary(keys, n)
    value_nulls, value_buffers = _binary(values, n)
    if len(key_buffers[2]) + len(value_buffers[2]) >= 2 ** 31:
        return None
    buffers = (*key_buffers, *value_buffers, *_headers_and_timestamps(n, timestamps))
    spans, at = _layout([len(buf) for buf in buffers])
    body = []
    for buf in buffers:
        if buf:
            body.append(buf)
            if len(buf) % 8:
                body.append(_ZEROS[:-len(buf) % 8])
    head = bytearray(template.head)
    _I64.pack_into(head, template.body_length_at, at)
    _I64.pack_into(head, template.length_at, n)
    _NODE_VECTOR.pack_into(head, template.nodes_at, n, key_nulls, n, value_nulls, n, n,
                           0, 0, 0, 0, 0, 0, n, 0)
    _BUFFER_VECTOR.pack_into(head, template.buffers_at, *spans)
    body.insert(0, head)
    return b"".join(body)


def _template(schema: pa.Schema) -> _Template:
    # by identity (the callers pass one module constant): hashing a schema costs more
    # than the rest of a small batch's encoding
    known = _TEMPLATES.get(id(schema))
    if known is None or known[0] is not schema:
        known = _TEMPLATES[id(schema)] = (schema, _Template(schema))
    return known[1]


def _read_binary(body: bytes, spans: tuple, n: int, nulls: int) -> list | None:
    """The rows of a binary column from its (validity, offsets, data) buffer spans, or
    None where they do not hold what Arrow's full validation accepts."""
    _, validity_len, offsets_at, offsets_len, data_at, data_len = spans
    if offsets_len < 4 * (n + 1):
        return None
    offsets = struct.unpack_from(f"<{n + 1}i", body, offsets_at)
    if offsets[0] < 0 or offsets[-1] > data_len \
            or any(b < a for a, b in zip(offsets, offsets[1:])):
        return None
    start = data_at
    rows = [body[start + a:start + b] for a, b in zip(offsets, offsets[1:])]
    if not nulls:  # the writer leaves out the bitmap of a column without nulls
        return rows if not validity_len else None
    if validity_len < (n + 7) // 8:
        return None
    bits = spans[0]
    valid = [body[bits + (i >> 3)] >> (i & 7) & 1 for i in range(n)]
    if valid.count(0) != nulls:
        return None
    return [row if ok else None for row, ok in zip(rows, valid)]


def record_batch_columns(schema: pa.Schema, buf: bytes, start: int, n: int) -> tuple | None:
    """(keys, values, timestamps) as Python lists from the record-batch message at
    ``buf[start:]`` (then only the stream's end-of-stream marker) of a raw topic's batch
    of ``n`` rows and body schema ``schema``: what :func:`record_batch_message` writes,
    headers all null. None for any other message (another layout, headers, an
    inconsistency Arrow's full validation would refuse): the caller decodes it with
    pyarrow, which says what is wrong."""
    template = _template(schema)
    head_len = len(template.head)
    if len(buf) < start + head_len:
        return None
    body_length = _I64.unpack_from(buf, start + template.body_length_at)[0]
    nodes = _NODE_VECTOR.unpack_from(buf, start + template.nodes_at)
    spans = _BUFFER_VECTOR.unpack_from(buf, start + template.buffers_at)
    expected = bytearray(template.head)  # the same layout with these numbers?
    _I64.pack_into(expected, template.body_length_at, body_length)
    _I64.pack_into(expected, template.length_at, n)
    _NODE_VECTOR.pack_into(expected, template.nodes_at, *nodes)
    _BUFFER_VECTOR.pack_into(expected, template.buffers_at, *spans)
    body_at = start + head_len
    if buf[start:body_at] != expected or len(buf) != body_at + body_length + len(IPC_EOS) \
            or buf[body_at + body_length:] != IPC_EOS:
        return None
    if nodes != (n, nodes[1], n, nodes[3], n, n, 0, 0, 0, 0, 0, 0, n, 0) \
            or not 0 <= nodes[1] <= n or not 0 <= nodes[3] <= n:
        return None
    # the buffers where the writer puts them: the key's and value's of any size, the
    # rest of the sizes a batch of n rows has
    sizes = list(spans[1:12:2]) + [len(b) for b in _headers_and_timestamps(n, None)]
    if min(sizes) < 0 or (spans, body_length) != _layout(sizes):
        return None
    body = buf[body_at:body_at + body_length]
    keys = _read_binary(body, spans[0:6], n, nodes[1])
    values = _read_binary(body, spans[6:12], n, nodes[3])
    if keys is None or values is None:
        return None
    for i in (12, 14, 20, 26):  # headers: no row valid, every offset 0 (the children's too)
        if any(body[spans[i]:spans[i] + spans[i + 1]]):
            return None
    return keys, values, list(struct.unpack_from(f"<{n}q", body, spans[32]))
