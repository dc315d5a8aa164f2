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
#: the end-of-stream marker of an Arrow IPC stream
IPC_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_U8, _U16, _I32, _U32, _I64 = (struct.Struct(f"<{c}") for c in "BHiIq")
_BUFFER = struct.Struct("<qq")  # struct Buffer { offset: long; length: long }
# MessageHeader union tags
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
# field slots: Message {version, header_type, header, bodyLength, custom_metadata};
# RecordBatch {length, nodes, buffers, compression, ...}; DictionaryBatch {id, data, ...}
_MSG_HEADER_TYPE, _MSG_HEADER, _MSG_BODY_LENGTH = 1, 2, 3
_RB_LENGTH, _RB_BUFFERS = 0, 2
_DB_DATA = 1


class _Bad(Exception):
    """Internal: the body is malformed (the message says how)."""


_U32x2 = struct.Struct("<II")
_VTABLE_RB = struct.Struct("<HHHHH")  # vtable size, table size, length, nodes, buffers
_VECTORS: dict[int, struct.Struct] = {}  # buffer count -> its Struct
#: schema messages (prefix and metadata bytes) already found well-formed, by value
_KNOWN_SCHEMAS: set[bytes] = set()
_KNOWN_MAX = 256


def fb_table(buf, lo: int, hi: int, pos: int) -> tuple[int, int, int]:
    """(table position, vtable position, vtable size) of the flatbuffer table at
    ``pos``, every byte of both inside ``buf[lo:hi]``. With :func:`fb_slot` and
    :func:`fb_ref`, also what :mod:`~sparklog.format.rawipc` reads pyarrow's own
    metadata with; malformed metadata raises this module's internal error."""
    if pos < lo or pos + 4 > hi:
        raise _Bad("flatbuffer table out of the metadata")
    vtable = pos - _I32.unpack_from(buf, pos)[0]
    if vtable < lo or vtable + 4 > hi:
        raise _Bad("flatbuffer vtable out of the metadata")
    vsize = _U16.unpack_from(buf, vtable)[0]
    if vsize < 4 or vsize % 2 or vtable + vsize > hi:
        raise _Bad(f"flatbuffer vtable of {vsize} bytes")
    return pos, vtable, vsize


def fb_slot(buf, table: tuple[int, int, int], slot: int, size: int, hi: int) -> int:
    """Position of field ``slot`` of ``table`` (``size`` bytes inside ``hi``), 0 if
    absent."""
    pos, vtable, vsize = table
    at = 4 + 2 * slot
    if at + 2 > vsize:
        return 0
    rel = _U16.unpack_from(buf, vtable + at)[0]
    if not rel:
        return 0
    if pos + rel + size > hi:
        raise _Bad("flatbuffer field out of the metadata")
    return pos + rel


def fb_ref(buf, at: int) -> int:
    """The position an offset field at ``at`` refers to."""
    return at + _U32.unpack_from(buf, at)[0]


def _batch_rows(buf, lo: int, hi: int, at: int, body_length: int) -> int:
    """Rows of the RecordBatch table referred to at ``at``, after checking that its
    buffers lie in its body (inlined flatbuffer reads: this runs for every frame)."""
    pos, vtable, vsize = fb_table(buf, lo, hi, fb_ref(buf, at))
    if vsize >= 10:
        _, _, f_length, _, f_buffers = _VTABLE_RB.unpack_from(buf, vtable)
    else:
        f_length = _U16.unpack_from(buf, vtable + 4)[0] if vsize >= 6 else 0
        f_buffers = 0
    rows = 0
    if f_length:
        if pos + f_length + 8 > hi:
            raise _Bad("record batch length out of the metadata")
        rows = _I64.unpack_from(buf, pos + f_length)[0]
        if rows < 0:
            raise _Bad(f"negative record batch length {rows}")
    if not f_buffers:
        return rows
    f = pos + f_buffers
    if f + 4 > hi:
        raise _Bad("buffer list out of the metadata")
    vec = f + _U32.unpack_from(buf, f)[0]
    if vec < lo or vec + 4 > hi:
        raise _Bad("buffer list out of the metadata")
    n = _U32.unpack_from(buf, vec)[0]
    if vec + 4 + n * _BUFFER.size > hi:
        raise _Bad(f"buffer list of {n} entries runs out of the metadata")
    fmt = _VECTORS.get(n)
    if fmt is None:
        fmt = _VECTORS[n] = struct.Struct(f"<{2 * n}q")
    values = fmt.unpack_from(buf, vec + 4)
    for i in range(0, 2 * n, 2):
        offset, length = values[i], values[i + 1]
        if offset < 0 or length < 0 or offset + length > body_length:
            raise _Bad(f"buffer {i // 2} [{offset}, {offset + length}) lies outside the "
                       f"{body_length}-byte message body")
    return rows


def _walk(buf, pos: int, end: int) -> int:
    """Rows of the one record batch of the IPC stream ``buf[pos:end]``."""
    first = True
    rows = None
    while pos < end:
        if end - pos < 8:
            if end - pos == 4 and _U32.unpack_from(buf, pos)[0] == 0:
                break  # the pre-1.0 end-of-stream marker
            raise _Bad(f"{end - pos} stray bytes at the end of the stream")
        marker, meta_len = _U32x2.unpack_from(buf, pos)
        head = 8
        if marker != _CONTINUATION:  # the pre-1.0 format: no continuation marker
            meta_len, head = marker, 4
        if meta_len == 0:  # end-of-stream marker
            if pos + head != end:
                raise _Bad(f"{end - pos - head} bytes follow the end-of-stream marker")
            break
        meta = pos + head
        hi = meta + meta_len
        if meta_len < 4 or hi > end:
            raise _Bad(f"message metadata of {meta_len} bytes at byte {pos} runs past the "
                       f"end of the body ({end - meta} bytes left)")
        if first:
            key = bytes(buf[pos:hi])
            if key in _KNOWN_SCHEMAS:  # the same schema message as an earlier frame's
                first, pos = False, hi
                continue
        message = fb_table(buf, meta, hi, fb_ref(buf, meta))
        f = fb_slot(buf, message, _MSG_HEADER_TYPE, 1, hi)
        kind = _U8.unpack_from(buf, f)[0] if f else 0
        f = fb_slot(buf, message, _MSG_BODY_LENGTH, 8, hi)
        body_length = _I64.unpack_from(buf, f)[0] if f else 0
        if body_length < 0 or body_length > end - hi:
            raise _Bad(f"message body of {body_length} bytes at byte {hi} runs past the "
                       f"end of the frame body ({end - hi} bytes left): truncated batch")
        header = fb_slot(buf, message, _MSG_HEADER, 4, hi)
        if first != (kind == _SCHEMA):
            raise _Bad("the stream does not start with a schema" if first else
                       "a schema message after the first message")
        if kind == _SCHEMA:
            if len(_KNOWN_SCHEMAS) < _KNOWN_MAX and body_length == 0:
                _KNOWN_SCHEMAS.add(key)
        elif kind == _DICTIONARY_BATCH:
            data = fb_slot(buf, fb_table(buf, meta, hi, fb_ref(buf, header)), _DB_DATA, 4, hi) \
                if header else 0
            if not data or rows is not None:
                raise _Bad("misplaced or empty dictionary batch")
            _batch_rows(buf, meta, hi, data, body_length)
        elif kind == _RECORD_BATCH:
            if rows is not None:
                raise _Bad("more than one record batch")
            if not header:
                raise _Bad("record batch message without its header")
            rows = _batch_rows(buf, meta, hi, header, body_length)
        else:
            raise _Bad(f"unexpected message type {kind}")
        first = False
        pos = hi + body_length
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
