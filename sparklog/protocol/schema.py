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
(``Produce.topics[0].partitions[1].records``).
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


def check(value, spec, path: str = "body"):
    """Validate ``value`` against ``spec`` and return it with defaults filled in.

    Raises InvalidArgumentError naming ``path`` and the offending field.
    """
    if isinstance(spec, type):
        if not _type_ok(value, spec):
            _fail(path, spec, value)
        return value
    if isinstance(spec, list):
        if not isinstance(value, list):
            _fail(path, spec, value)
        item = spec[0]
        return [check(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
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
                    out[name] = check(present, field_spec.spec, where)
            else:
                if name not in out:
                    raise InvalidArgumentError(f"{where}: required field is missing")
                out[name] = check(present, field_spec, where)
        return out
    if isinstance(spec, Opt):
        return spec.default if value is None else check(value, spec.spec, path)
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            _fail(path, spec, value)
        return {check(k, spec.key, f"{path}<key>"): check(v, spec.value, f"{path}[{k!r}]")
                for k, v in value.items()}
    if isinstance(spec, OneOf):
        for option in spec.specs:
            try:
                return check(value, option, path)
            except InvalidArgumentError:
                continue
        _fail(path, spec, value)
    raise TypeError(f"bad spec {spec!r} at {path}")  # a bug in a spec table, not input
