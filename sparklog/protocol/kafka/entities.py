"""Plain values to and from kio's message classes, for every version at once.

kio generates one frozen dataclass per API, version and nested entity, with typed
fields (``i32``, ``i32Timedelta``, ``ErrorCode``, ``TopicName``...). A handler that
serves many versions works on plain values instead: :func:`plain` turns a decoded
request into dicts, lists, ints (milliseconds for durations and times), strings and
bytes; :func:`build` makes the response class of the negotiated version from a dict
shaped like the newest version, keeping the fields that version has and giving the
ones the dict leaves out their zero (or their spec default). :func:`encode` writes the
bytes :func:`build` and kio's writer would write for such a dict without building the
classes: each class's fields, their order, types and encodings are read from kio's
schema once, and each field is written by kio's writer of its type (the byte strings
are collected, not copied: a Fetch's records go out as they are). One place knows
kio's field types; the handlers know Kafka's field names only.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import io
import struct
import typing
import uuid
from typing import Any, Callable

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)
from kio.serial._serialize import get_field_writer, get_writer
from kio.serial._shared import NullableEntityMarker

from sparklog.errors import InvalidArgumentError

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_NONE_TYPE = type(None)


@functools.lru_cache(maxsize=None)
def _fields(cls) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, has a default) of a kio dataclass's fields."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default is not dataclasses.MISSING
                  or f.default_factory is not dataclasses.MISSING)
                 for f in dataclasses.fields(cls))


def _unwrap_optional(tp) -> tuple[Any, bool]:
    """(the type, whether None is allowed) of ``X | None``."""
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not _NONE_TYPE]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _is_subclass(tp, base) -> bool:
    return isinstance(tp, type) and issubclass(tp, base)


def _convert(tp, value, where: str):
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        return _zero(tp)
    if typing.get_origin(tp) is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v, where) for v in value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise InvalidArgumentError(f"{where}: a {tp.__name__} needs a dict, not {value!r}")
        return build(tp, value)
    if tp is ErrorCode:
        return ErrorCode(int(value))
    if _is_subclass(tp, datetime.timedelta):
        if not isinstance(value, datetime.timedelta):
            value = datetime.timedelta(milliseconds=int(value))
        return tp.parse(value)
    if _is_subclass(tp, datetime.datetime):
        if not isinstance(value, datetime.datetime):
            value = _EPOCH + datetime.timedelta(milliseconds=int(value))
        return value
    if tp is uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(int=int(value))
    if _is_subclass(tp, bool):
        return bool(value)
    if _is_subclass(tp, int):
        return int(value)
    if _is_subclass(tp, bytes):
        return bytes(value)
    if _is_subclass(tp, str):
        return str(value)
    return value


def _zero(tp):
    tp, optional = _unwrap_optional(tp)
    if optional:
        return None
    if typing.get_origin(tp) is tuple:
        return ()
    if dataclasses.is_dataclass(tp):
        return build(tp, {})
    if tp is ErrorCode:
        return ErrorCode.none
    if _is_subclass(tp, datetime.timedelta):
        return tp.parse(datetime.timedelta(0))
    if _is_subclass(tp, datetime.datetime):
        return _EPOCH
    if tp is uuid.UUID:
        return uuid.UUID(int=0)
    if _is_subclass(tp, bool):
        return False
    if _is_subclass(tp, int):
        return 0
    if _is_subclass(tp, bytes):
        return b""
    if _is_subclass(tp, str):
        return ""
    raise InvalidArgumentError(f"no zero value for a field of type {tp!r}")


def build(cls, values: dict):
    """An instance of the kio class ``cls`` from ``values``: fields ``cls`` lacks are
    dropped, fields ``values`` lacks take their spec default or their zero value."""
    kwargs = {}
    for name, tp, has_default in _fields(cls):
        if name in values:
            kwargs[name] = _convert(tp, values[name], f"{cls.__name__}.{name}")
        elif not has_default:
            kwargs[name] = _zero(tp)
    return cls(**kwargs)


def plain(obj):
    """A decoded kio message as plain values: dataclasses become dicts, tuples lists,
    durations and times milliseconds, enums and numbers ints."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _plainer(type(obj))(obj)
    if isinstance(obj, tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, datetime.timedelta):
        return int(obj / datetime.timedelta(milliseconds=1))
    if isinstance(obj, datetime.datetime):
        return int((obj - _EPOCH) / datetime.timedelta(milliseconds=1))
    if isinstance(obj, enum.Enum):
        return int(obj.value)
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, bytes, uuid.UUID)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, memoryview):
        return bytes(obj)
    return obj


def _plain_value(obj):
    """:func:`plain` of a value that is not a kio message."""
    return obj if obj is None or type(obj) in (int, str, bytes, bool) else plain(obj)


def _plain_list(item: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else [item(x) for x in v]


def _plain_or_none(sub: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else sub(v)


@functools.lru_cache(maxsize=None)
def _plainer(cls) -> Callable[[Any], dict]:
    """:func:`plain` of an instance of the kio class ``cls``, its fields' conversions
    chosen once from their types (the values :func:`plain` gives)."""
    steps: list[tuple[str, Callable[[Any], Any]]] = []
    for name, tp, _ in _fields(cls):
        base, _ = _unwrap_optional(tp)
        if typing.get_origin(base) is tuple:
            item, _ = _unwrap_optional(typing.get_args(base)[0])
            steps.append((name, _plain_list(
                _plainer(item) if isinstance(item, type) and dataclasses.is_dataclass(item)
                else _plain_value)))
        elif isinstance(base, type) and dataclasses.is_dataclass(base):
            steps.append((name, _plain_or_none(_plainer(base))))
        else:
            steps.append((name, _plain_value))
    return lambda obj: {name: conv(getattr(obj, name)) for name, conv in steps}


# --- encoding a dict without building kio's classes ----------------------------------

class _Parts(list):
    """Byte strings kio's writers write to (``write`` appends: nothing is copied)."""

    __slots__ = ()
    write = list.append


def encode(cls, values: dict) -> list:
    """The encoding of ``build(cls, values)`` by kio's writer, as a list of byte strings
    (bytes-like: a ``records`` field's value is one of them, as given): fields
    ``values`` lacks take their spec default or zero, None in a field that is not
    nullable its zero, as :func:`build` gives them. An entity given as a kio instance,
    or as a dict naming a tagged field, is written by kio's own writer."""
    parts = _Parts()
    _writer(cls)(parts, values)
    return parts


def _kio_bytes(write, value) -> bytes:
    """What kio's writer ``write`` writes for ``value``."""
    out = io.BytesIO()
    write(out, value)
    return out.getvalue()


_INT16, _INT32, _INT64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def _ms(value) -> int:
    """Milliseconds of a plain value of a duration or time (ms already, or a
    timedelta or datetime, as :func:`build` takes them)."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _primitive_writer(kafka_type: str, flexible: bool):
    """``write(buffer, value)`` of a plain value (not None) of ``kafka_type``: kio's
    writer of the type, given the value :func:`_convert` would make of it."""
    if kafka_type == "error_code":
        return lambda buf, v: buf.write(_INT16.pack(int(v)))
    if kafka_type == "timedelta_i32":
        return lambda buf, v: buf.write(_INT32.pack(_ms(v)))
    if kafka_type in ("timedelta_i64", "datetime_i64"):
        return lambda buf, v: buf.write(_INT64.pack(_ms(v)))
    write = get_writer(kafka_type, flexible, False)  # None never reaches it
    if kafka_type == "bool":
        return lambda buf, v: write(buf, bool(v))
    if kafka_type == "string":
        return lambda buf, v: write(buf, v if type(v) is str else str(v))
    if kafka_type in ("bytes", "records"):
        return lambda buf, v: write(buf, v if isinstance(v, (bytes, bytearray, memoryview))
                                    else bytes(v))
    if kafka_type == "uuid":
        return lambda buf, v: write(buf, v if isinstance(v, uuid.UUID) else uuid.UUID(int=int(v)))
    if kafka_type == "float64":
        return write
    return lambda buf, v: write(buf, v if type(v) is int else int(v))


def _array(flexible: bool, item: Callable, null: bytes):
    """``write(buffer, items)`` of an array (None: ``null``, the array's null or zero)."""
    if flexible:
        def write(buf, items):
            if items is None:
                buf.write(null)
                return
            n = len(items) + 1
            buf.write(bytes((n,)) if n < 0x80 else _uvarint(n))
            for x in items:
                item(buf, x)
    else:
        def write(buf, items):
            if items is None:
                buf.write(null)
                return
            buf.write(_INT32.pack(len(items)))
            for x in items:
                item(buf, x)
    return write


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field_writer(cls, field: dataclasses.Field, tp, flexible: bool):
    """``write(buffer, value)`` of a plain value of ``field`` of ``cls`` (None
    included)."""
    base, optional = _unwrap_optional(tp)
    kind = classify_field(field)
    # None: what build() makes of it (null, or the zero of a field that is not nullable)
    none = _kio_bytes(get_field_writer(field, flexible, False, False),
                      None if optional else _convert(tp, None, field.name))
    if isinstance(kind, EntityTupleField):
        item = _writer(kind.type_)
        return _array(flexible, item, none)
    if isinstance(kind, PrimitiveTupleField):
        item = _primitive_writer(field.metadata["kafka_type"], flexible)
        return _array(flexible, item, none)
    if isinstance(kind, EntityField):
        sub = _writer(kind.type_)
        marker = struct.pack(">b", NullableEntityMarker.not_null.value) if optional else b""

        def write_entity(buf, v):
            if v is None:
                buf.write(none)
                return
            if marker:
                buf.write(marker)
            sub(buf, v)
        return write_entity
    value = _primitive_writer(field.metadata["kafka_type"], flexible)

    def write_primitive(buf, v):
        if v is None:
            buf.write(none)
        else:
            value(buf, v)
    return write_primitive


@functools.lru_cache(maxsize=None)
def _writer(cls):
    """``write(buffer, values)`` of the kio class ``cls`` (:func:`encode`)."""
    hints = typing.get_type_hints(cls)
    flexible = bool(cls.__flexible__)
    steps, tagged = [], []
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            tagged.append(field.name)
            continue
        if field.default is not dataclasses.MISSING:
            missing = field.default
        elif field.default_factory is not dataclasses.MISSING:
            missing = field.default_factory()
        else:
            missing = _convert(hints[field.name], None, field.name)
        steps.append((field.name, _field_writer(cls, field, hints[field.name], flexible),
                      _kio_bytes(get_field_writer(field, flexible, False, False), missing)))
    kio_write = entity_writer(cls)
    absent = object()

    def write(buf, values):
        if not isinstance(values, dict):
            if not isinstance(values, cls):
                raise InvalidArgumentError(
                    f"{cls.__name__}: a {cls.__name__} needs a dict, not {values!r}")
            kio_write(buf, values)
            return
        if tagged and any(name in values for name in tagged):
            kio_write(buf, build(cls, values))
            return
        get = values.get
        for name, write_value, missing in steps:
            v = get(name, absent)
            if v is absent:
                buf.write(missing)
            else:
                write_value(buf, v)
        if flexible:
            buf.write(b"\x00")  # no tagged fields
    return write
