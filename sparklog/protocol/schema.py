"""A tiny schema language for the msgpack bodies of requests and responses.

A spec is one of:

* a Python type (``int``, ``str``, ``bytes``, ``bool``, ``float``) — the value must be of
  that type (``bool`` is not accepted as ``int``; ``bytes`` also accepts ``bytearray``
  and ``memoryview``);
* a list with one element ``[spec]`` — a list whose items all match ``spec``;
* a dict ``{"field": spec, ...}`` — a map with those string keys (unknown keys are kept
  and ignored, so a newer peer may add fields);
* :class:`Opt` ``(spec, default)`` — inside a map: the field may be missing or None and
  then takes ``default``;
* :class:`MapOf` ``(key_spec, value_spec)`` — a free map (topic configs);
* :class:`OneOf` ``(spec, ...)`` — the first spec that matches.

:func:`check` validates a decoded value against a spec and fills in defaults; it raises
:class:`~sparklog.errors.InvalidArgumentError` naming the path of the bad field
(``Produce.topics[0].partitions[1].records``). Every request and response goes through
it, so each spec is compiled once into nested closures that check without building the
paths of the fields; only a value they refuse is checked again by the interpreter that
names the bad field.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError


class Opt:
    """An optional map field: missing or None gives ``default``."""

    __slots__ = ("spec", "default")

    def __init__(self, spec, default=None):
        self.spec = spec
        self.default = default

    def __repr__(self) -> str:
        return f"Opt({describe(self.spec)}, default={self.default!r})"


class MapOf:
    """A map with free keys: every key matches ``key`` and every value ``value``."""

    __slots__ = ("key", "value")

    def __init__(self, key, value):
        self.key = key
        self.value = value


class OneOf:
    """A value matching any of ``specs`` (tried in order)."""

    __slots__ = ("specs",)

    def __init__(self, *specs):
        self.specs = specs


_BYTES_TYPES = (bytes, bytearray, memoryview)


def _type_ok(value, kind) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is bytes:
        return isinstance(value, _BYTES_TYPES)
    return isinstance(value, kind)


def describe(spec) -> str:
    """A short human-readable name of ``spec`` (used in messages and docs)."""
    if isinstance(spec, type):
        return {int: "int", str: "str", bytes: "bin", bool: "bool", float: "float"}.get(
            spec, spec.__name__)
    if isinstance(spec, list):
        return f"[{describe(spec[0])}]"
    if isinstance(spec, dict):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, Opt):
        return f"{describe(spec.spec)}?"
    if isinstance(spec, MapOf):
        return f"map<{describe(spec.key)}, {describe(spec.value)}>"
    if isinstance(spec, OneOf):
        return " | ".join(describe(s) for s in spec.specs)
    return repr(spec)


def _fail(path: str, spec, value):
    shown = type(value).__name__
    raise InvalidArgumentError(f"{path}: expected {describe(spec)}, got {shown}")


class _Refused(Exception):
    """A compiled check refused a value (the interpreter then says why).

    Raised as a fresh instance each time: an instance raised again keeps growing the
    traceback it carries, and with it every refused value and the frames around it."""


def _refuse(_value=None):
    raise _Refused


def _default_of(default):
    """What a missing :class:`Opt` field gets: a copy of a list or dict default."""
    if isinstance(default, list):
        return lambda: list(default)
    if isinstance(default, dict):
        return lambda: dict(default)
    return lambda: default


def _compile(spec):
    """A function ``value -> value`` doing what :func:`check` does, raising _Refused
    instead of naming the field."""
    if isinstance(spec, type):
        if spec is int:
            def check_int(v):
                if v.__class__ is int or (isinstance(v, int) and not isinstance(v, bool)):
                    return v
                raise _Refused
            return check_int

        def check_type(v, kind=spec):
            if _type_ok(v, kind):
                return v
            raise _Refused
        return check_type
    if isinstance(spec, list):
        item = _compile(spec[0])

        def check_list(v):
            if not isinstance(v, list):
                raise _Refused
            return [item(x) for x in v]
        return check_list
    if isinstance(spec, dict):
        fields = []
        for name, field_spec in spec.items():
            if isinstance(field_spec, Opt):
                fields.append((name, _compile(field_spec.spec), _default_of(field_spec.default)))
            else:
                fields.append((name, _compile(field_spec), None))

        def check_map(v):
            if not isinstance(v, dict):
                raise _Refused
            out = dict(v)
            for name, fn, default in fields:
                present = out.get(name)
                if default is not None:
                    out[name] = default() if present is None else fn(present)
                elif present is None and name not in out:
                    raise _Refused
                else:
                    out[name] = fn(present)
            return out
        return check_map
    if isinstance(spec, Opt):
        inner, default = _compile(spec.spec), spec.default
        return lambda v: default if v is None else inner(v)
    if isinstance(spec, MapOf):
        key, value = _compile(spec.key), _compile(spec.value)

        def check_free_map(v):
            if not isinstance(v, dict):
                raise _Refused
            return {key(k): value(x) for k, x in v.items()}
        return check_free_map
    if isinstance(spec, OneOf):
        options = [_compile(o) for o in spec.specs]

        def check_one_of(v):
            for option in options:
                try:
                    return option(v)
                except _Refused:
                    continue
            raise _Refused
        return check_one_of
    return _refuse  # a bad spec: the interpreter raises TypeError naming it


_COMPILED: dict[int, tuple] = {}  # id(spec) -> (spec, compiled check)


def check(value, spec, path: str = "body"):
    """Validate ``value`` against ``spec`` and return it with defaults filled in.

    Raises InvalidArgumentError naming ``path`` and the offending field.
    """
    entry = _COMPILED.get(id(spec))
    if entry is None or entry[0] is not spec:
        entry = _COMPILED[id(spec)] = (spec, _compile(spec))
        if len(_COMPILED) > 4096:  # specs built on the fly: keep the table bounded
            _COMPILED.clear()
            _COMPILED[id(spec)] = entry
    try:
        return entry[1](value)
    except _Refused:
        pass  # named outside the handler: its error does not chain the refusal
    return _interpret(value, spec, path)


def _interpret(value, spec, path: str):
    """:func:`check` field by field, building each field's path (for the message)."""
    if isinstance(spec, type):
        if not _type_ok(value, spec):
            _fail(path, spec, value)
        return value
    if isinstance(spec, list):
        if not isinstance(value, list):
            _fail(path, spec, value)
        item = spec[0]
        return [_interpret(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            _fail(path, spec, value)
        out = dict(value)
        for name, field_spec in spec.items():
            where = f"{path}.{name}"
            present = out.get(name)
            if isinstance(field_spec, Opt):
                if present is None:
                    default = field_spec.default
                    out[name] = list(default) if isinstance(default, list) else (
                        dict(default) if isinstance(default, dict) else default)
                else:
                    out[name] = _interpret(present, field_spec.spec, where)
            else:
                if name not in out:
                    raise InvalidArgumentError(f"{where}: required field is missing")
                out[name] = _interpret(present, field_spec, where)
        return out
    if isinstance(spec, Opt):
        return spec.default if value is None else _interpret(value, spec.spec, path)
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            _fail(path, spec, value)
        return {_interpret(k, spec.key, f"{path}<key>"):
                _interpret(v, spec.value, f"{path}[{k!r}]")
                for k, v in value.items()}
    if isinstance(spec, OneOf):
        for option in spec.specs:
            try:
                return _interpret(value, option, path)
            except InvalidArgumentError:
                continue
        _fail(path, spec, value)
    raise TypeError(f"bad spec {spec!r} at {path}")  # a bug in a spec table, not input
