"""Checking client configs (Kafka's names with ``_``): one function for the producer and
the consumer."""

from __future__ import annotations

from ...errors import InvalidConfigError


def client_config(kind: str, defaults: dict, configs: dict, *, positive=(),
                  non_negative=()) -> dict:
    """``defaults`` updated with ``configs``. InvalidConfigError names an unknown key
    (listing the known ones), a ``positive`` setting that is not an int >= 1, or a
    ``non_negative`` one that is not a number >= 0 (bools are refused)."""
    unknown = set(configs) - set(defaults)
    if unknown:
        raise InvalidConfigError(f"unknown {kind} config(s) {sorted(unknown)}; known: "
                                 f"{', '.join(sorted(defaults))}")
    cfg = dict(defaults, **configs)
    for name in positive:
        if isinstance(cfg[name], bool) or not isinstance(cfg[name], int) or cfg[name] < 1:
            raise InvalidConfigError(f"{name} must be a positive int, got {cfg[name]!r}")
    for name in non_negative:
        if isinstance(cfg[name], bool) or not isinstance(cfg[name], (int, float)) \
                or cfg[name] < 0:
            raise InvalidConfigError(f"{name} must be >= 0, got {cfg[name]!r}")
    return cfg
