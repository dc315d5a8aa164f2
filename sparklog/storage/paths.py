"""Argument checks and URL helpers shared by the storage backends (pure string work)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from sparklog.errors import InvalidArgumentError


def check_path(path, what: str = "path") -> str:
    """Return ``path`` as a str, or raise InvalidArgumentError naming the problem.

    Accepts str and os.PathLike; rejects None, other types, '' and NUL characters.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise InvalidArgumentError(
            f"{what} must be a str or os.PathLike, got {type(path).__name__}: {path!r}")
    if not path:
        raise InvalidArgumentError(f"{what} must not be empty")
    if "\x00" in path:
        raise InvalidArgumentError(f"{what} contains a NUL character: {path!r}")
    return path


def check_bytes(data, what: str = "data") -> memoryview:
    """Return a byte memoryview of bytes-like ``data``; InvalidArgumentError otherwise
    (a str is refused: encode it first)."""
    if isinstance(data, str):
        raise InvalidArgumentError(
            f"{what} must be bytes-like (bytes, bytearray, memoryview), got str; "
            "encode it first")
    try:
        view = memoryview(data)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be bytes-like (bytes, bytearray, memoryview), "
            f"got {type(data).__name__}") from None
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def check_int(value, what: str, minimum: int = 0) -> int:
    """Return ``value`` if it is an int >= ``minimum`` (bool refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, got {value}")
    return value


def url_scheme(url: str) -> str:
    """The lower-case scheme of ``url`` ('' for a plain path, also on Windows drives)."""
    if "://" not in url and not url.startswith("file:"):
        return ""
    return urlsplit(url).scheme.lower()


def strip_scheme(url: str, scheme: str) -> tuple[str, str]:
    """Split ``scheme://authority/path`` into (authority, '/path').

    A plain path (no scheme) returns ('', path). InvalidArgumentError on another scheme.
    """
    got = url_scheme(url)
    if not got:
        return "", url
    if got != scheme:
        raise InvalidArgumentError(f"expected a {scheme}:// URL or a plain path, got {url!r}")
    parts = urlsplit(url)
    return parts.netloc, parts.path or "/"


#: Suffix of a writer's lease sidecar file (local and WebHDFS backends).
LEASE_SUFFIX = ".sparklog-lease"


def lease_name(name: str) -> str:
    """Name of the lease sidecar of a file called ``name`` (in the same directory)."""
    return f".{name}{LEASE_SUFFIX}"


def is_lease_file(name: str) -> bool:
    """True if directory entry ``name`` is a lease sidecar (hidden from list())."""
    return name.startswith(".") and name.endswith(LEASE_SUFFIX)
