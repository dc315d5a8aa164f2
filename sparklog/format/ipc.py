"""A cheap structural check of a frame body (an Arrow IPC stream) without decoding it.

:func:`check_ipc_body` walks the stream's messages by reading only their flatbuffer
metadata (the Arrow ``Message`` and ``RecordBatch`` tables, see Arrow's
``format/Message.fbs``): it checks that every message's metadata and body lie inside
the frame body, that every buffer of the record batch lies inside the batch's body,
that the stream holds a schema, then exactly one record batch (dictionary batches may
precede it), and that the batch's length equals the record count of the frame header.
No buffer is read or decompressed, so it costs a few microseconds per frame whatever
its size; a body that passes can still hold values that do not decode (a consumer's
decode then raises CorruptRecordError).
"""

from __future__ import annotations

import struct

from ..errors import CorruptRecordError

_CONTINUATION = 0xFFFFFFFF
_U8, _U16, _I32, _U32, _I64 = (struct.Struct(f"<{c}") for c in "BHiIq")
_FIELD_NODE = 16  # struct FieldNode { length: long; null_count: long }
_BUFFER = struct.Struct("<qq")  # struct Buffer { offset: long; length: long }
# MessageHeader union tags
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
# field slots: Message {version, header_type, header, bodyLength, custom_metadata};
# RecordBatch {length, nodes, buffers, compression, ...}; DictionaryBatch {id, data, ...}
_MSG_HEADER_TYPE, _MSG_HEADER, _MSG_BODY_LENGTH = 1, 2, 3
_RB_LENGTH, _RB_NODES, _RB_BUFFERS = 0, 1, 2
_DB_DATA = 1


class _Bad(Exception):
    """Internal: the body is malformed (the message says how)."""


class _Table:
    """A flatbuffer table inside ``buf[start:end]`` (bounds checked on every read)."""

    __slots__ = ("buf", "start", "end", "pos", "vtable", "vsize")

    def __init__(self, buf, start: int, end: int, pos: int):
        self.buf, self.start, self.end, self.pos = buf, start, end, pos
        self._need(pos, 4)
        self.vtable = pos - _I32.unpack_from(buf, pos)[0]
        self._need(self.vtable, 4)
        self.vsize = _U16.unpack_from(buf, self.vtable)[0]
        if self.vsize < 4 or self.vsize % 2:
            raise _Bad(f"flatbuffer vtable size {self.vsize}")
        self._need(self.vtable, self.vsize)

    def _need(self, pos: int, size: int) -> None:
        if pos < self.start or pos + size > self.end:
            raise _Bad("flatbuffer reference out of the metadata")

    def _field(self, slot: int) -> int | None:
        at = 4 + 2 * slot
        if at + 2 > self.vsize:
            return None
        rel = _U16.unpack_from(self.buf, self.vtable + at)[0]
        return self.pos + rel if rel else None

    def scalar(self, slot: int, fmt: struct.Struct, default: int = 0) -> int:
        at = self._field(slot)
        if at is None:
            return default
        self._need(at, fmt.size)
        return fmt.unpack_from(self.buf, at)[0]

    def _target(self, slot: int) -> int | None:
        at = self._field(slot)
        if at is None:
            return None
        self._need(at, 4)
        return at + _U32.unpack_from(self.buf, at)[0]

    def table(self, slot: int) -> "_Table | None":
        at = self._target(slot)
        return None if at is None else _Table(self.buf, self.start, self.end, at)

    def vector(self, slot: int, item_size: int) -> tuple[int, int]:
        """(position of the first item, item count) of a vector of structs."""
        at = self._target(slot)
        if at is None:
            return 0, 0
        self._need(at, 4)
        n = _U32.unpack_from(self.buf, at)[0]
        self._need(at + 4, n * item_size)
        return at + 4, n


def _batch_rows(buf, batch: _Table, body_length: int) -> int:
    """Rows of a RecordBatch table, after checking its buffers lie in its body."""
    rows = batch.scalar(_RB_LENGTH, _I64)
    if rows < 0:
        raise _Bad(f"negative record batch length {rows}")
    batch.vector(_RB_NODES, _FIELD_NODE)
    first, n = batch.vector(_RB_BUFFERS, _BUFFER.size)
    values = struct.unpack_from(f"<{2 * n}q", buf, first)
    for i in range(n):
        offset, length = values[2 * i], values[2 * i + 1]
        if offset < 0 or length < 0 or offset + length > body_length:
            raise _Bad(f"buffer {i} [{offset}, {offset + length}) lies outside the "
                       f"{body_length}-byte message body")
    return rows


def _walk(buf, pos: int, end: int) -> int:
    """Rows of the one record batch of the IPC stream ``buf[pos:end]``."""
    kinds = []
    rows = None
    while pos < end:
        if end - pos < 4:
            raise _Bad(f"{end - pos} stray bytes at the end of the stream")
        meta_len = _U32.unpack_from(buf, pos)[0]
        head = 4
        if meta_len == _CONTINUATION:
            if end - pos < 8:
                raise _Bad("stream ends inside a message prefix")
            meta_len = _U32.unpack_from(buf, pos + 4)[0]
            head = 8
        if meta_len == 0:  # end-of-stream marker
            if pos + head != end:
                raise _Bad(f"{end - pos - head} bytes follow the end-of-stream marker")
            break
        meta = pos + head
        if meta_len > end - meta:
            raise _Bad(f"message metadata of {meta_len} bytes at byte {pos} runs past the "
                       f"end of the body ({end - meta} bytes left)")
        root = meta + _U32.unpack_from(buf, meta)[0] if meta_len >= 4 else -1
        message = _Table(buf, meta, meta + meta_len, root)
        kind = message.scalar(_MSG_HEADER_TYPE, _U8)
        body_length = message.scalar(_MSG_BODY_LENGTH, _I64)
        body = meta + meta_len
        if body_length < 0 or body_length > end - body:
            raise _Bad(f"message body of {body_length} bytes at byte {body} runs past the "
                       f"end of the frame body ({end - body} bytes left): truncated batch")
        header = message.table(_MSG_HEADER)
        if kind == _SCHEMA:
            if kinds:
                raise _Bad("a schema message after the first message")
        elif kind == _DICTIONARY_BATCH:
            data = header.table(_DB_DATA) if header is not None else None
            if data is None or rows is not None:
                raise _Bad("misplaced or empty dictionary batch")
            _batch_rows(buf, data, body_length)
        elif kind == _RECORD_BATCH:
            if rows is not None:
                raise _Bad("more than one record batch")
            if header is None:
                raise _Bad("record batch message without its header")
            rows = _batch_rows(buf, header, body_length)
        else:
            raise _Bad(f"unexpected message type {kind}")
        if not kinds and kind != _SCHEMA:
            raise _Bad("the stream does not start with a schema")
        kinds.append(kind)
        pos = body + body_length
    if rows is None:
        raise _Bad("no record batch")
    return rows


def check_ipc_body(buf, start: int, end: int, record_count: int, where: str = "") -> None:
    """Check the Arrow IPC stream ``buf[start:end]`` (a frame body, see the module
    docstring) holds exactly one record batch of ``record_count`` rows whose buffers lie
    inside it; CorruptRecordError naming ``where`` otherwise."""
    try:
        rows = _walk(buf, start, end)
    except _Bad as exc:
        raise CorruptRecordError(f"malformed Arrow body{where}: {exc}") from None
    except struct.error as exc:  # a read past the buffer the bounds did not foresee
        raise CorruptRecordError(f"malformed Arrow body{where}: {exc}") from None
    if rows != record_count:
        raise CorruptRecordError(
            f"frame{where}: header says {record_count} records, the Arrow body holds "
            f"{rows}")
