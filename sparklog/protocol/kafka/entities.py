"""Plain values to and from kio's message classes, for every version at once.

kio generates one frozen dataclass per API, version and nested entity, with typed
fields (``i32``, ``i32Timedelta``, ``ErrorCode``, ``TopicName``...). A handler that
serves many versions works on plain values instead: :func:`plain` turns a decoded
request into dicts, lists, ints (milliseconds for durations and times), strings and
bytes; :func:`build` makes the response class of the negotiated version from a dict
shaped like the newest version, keeping the fields that version has and giving the
ones the dict leaves out their zero (or their spec default). One place knows kio's
field types; the handlers know Kafka's field names only.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

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
        return {name: plain(getattr(obj, name)) for name, _, _ in _fields(type(obj))}
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
