"""A msgpack decoder that returns large ``bin`` values as views of the input (no copy).

``msgpack.unpackb`` copies every ``bin`` into a new ``bytes``; for a Produce request that
is a copy of all its record data. :func:`unpack_views` decodes the same documents (the
subset the protocol uses: nil, bool, int, float, str, bin, array, map with str/bytes
keys) but returns each ``bin`` of at least ``min_view`` bytes as a ``memoryview`` slice
of the input, so the frames a client sent reach the log straight from the buffer the
socket filled. Being pure Python, it pays off only for documents holding large data;
:func:`sparklog.protocol.codec.decode_request_body` uses it for large requests only.
"""

from __future__ import annotations

import struct

from ..errors import InvalidArgumentError

#: bins at least this large are returned as memoryviews of the input
MIN_VIEW_BYTES = 4096

# type byte -> (struct of the fixed-size value or length that follows, kind)
_U8, _U16, _U32 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I")
_FIXED = {
    0xCA: struct.Struct(">f"), 0xCB: struct.Struct(">d"),
    0xCC: _U8, 0xCD: _U16, 0xCE: _U32, 0xCF: struct.Struct(">Q"),
    0xD0: struct.Struct(">b"), 0xD1: struct.Struct(">h"), 0xD2: struct.Struct(">i"),
    0xD3: struct.Struct(">q"),
}
_SIZED = {  # type byte -> (length struct, kind)
    0xC4: (_U8, "bin"), 0xC5: (_U16, "bin"), 0xC6: (_U32, "bin"),
    0xD9: (_U8, "str"), 0xDA: (_U16, "str"), 0xDB: (_U32, "str"),
    0xDC: (_U16, "array"), 0xDD: (_U32, "array"), 0xDE: (_U16, "map"), 0xDF: (_U32, "map"),
}
_CONST = {0xC0: None, 0xC2: False, 0xC3: True}


class _Truncated(Exception):
    pass


def _decode(view: memoryview, pos: int, min_view: int):
    """Decode the value at ``pos``; return (value, position after it)."""
    t = view[pos]
    pos += 1
    if t <= 0x7F:
        return t, pos
    if t >= 0xE0:
        return t - 0x100, pos
    if 0xA0 <= t <= 0xBF:
        kind, n = "str", t & 0x1F
    elif 0x90 <= t <= 0x9F:
        kind, n = "array", t & 0x0F
    elif 0x80 <= t <= 0x8F:
        kind, n = "map", t & 0x0F
    elif t in _CONST:
        return _CONST[t], pos
    elif t in _FIXED:
        s = _FIXED[t]
        if pos + s.size > len(view):
            raise _Truncated()
        return s.unpack_from(view, pos)[0], pos + s.size
    elif t in _SIZED:
        s, kind = _SIZED[t]
        if pos + s.size > len(view):
            raise _Truncated()
        n = s.unpack_from(view, pos)[0]
        pos += s.size
    else:
        raise ValueError(f"unsupported msgpack type byte 0x{t:02x} at byte {pos - 1}")
    if kind == "array":
        items = []
        for _ in range(n):
            value, pos = _decode(view, pos, min_view)
            items.append(value)
        return items, pos
    if kind == "map":
        entries: dict = {}
        for _ in range(n):
            key, pos = _decode(view, pos, min_view)
            if not isinstance(key, (str, bytes)):
                raise ValueError(f"map key of type {type(key).__name__} (str or bytes needed)")
            entries[key], pos = _decode(view, pos, min_view)
        return entries, pos
    end = pos + n
    if end > len(view):
        raise _Truncated()
    if kind == "str":
        return str(view[pos:end], "utf-8"), end
    return (view[pos:end] if n >= min_view else bytes(view[pos:end])), end


def unpack_views(data, what: str, min_view: int = MIN_VIEW_BYTES):
    """Decode the msgpack document ``data`` (bytes-like); bins of ``min_view`` bytes or
    more come back as memoryview slices of ``data`` (which must stay unchanged while
    they are used). InvalidArgumentError naming ``what`` for a truncated or malformed
    document, trailing bytes, or a type the protocol does not use (ext)."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    try:
        value, pos = _decode(view, 0, min_view)
    except (_Truncated, IndexError):
        raise InvalidArgumentError(
            f"{what} is not a valid msgpack document: truncated ({len(view)} bytes)") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidArgumentError(
            f"{what} is not a valid msgpack document: {type(exc).__name__}: {exc}") from None
    if pos != len(view):
        raise InvalidArgumentError(
            f"{what} is not a valid msgpack document: {len(view) - pos} extra bytes after "
            f"the value")
    return value


__all__ = ["MIN_VIEW_BYTES", "unpack_views"]
