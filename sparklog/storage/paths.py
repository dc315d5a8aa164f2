"""Argument checks and URL helpers shared by the storage backends (pure string work)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from sparklog.errors import InvalidArgumentError
from sparklog.names import MAX_COMPONENT_BYTES, control_chars, describe_chars


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




def _bad_chars(name: str) -> list[str]:
    """Characters of ``name`` a path component may not hold: NUL and every control
    character (C0, DEL, C1), '\\' (a separator elsewhere), and the URL delimiters
    '#' and '?' (a ``file://``/``webhdfs://`` URL would end there)."""
    return [c for c in name if c in "\\#?"] + control_chars(name)


def check_component(name, what: str = "path component") -> str:
    """Return ``name`` if it is one path component that no normalisation changes, or
    raise InvalidArgumentError naming the problem: not empty, not ``.`` or ``..``, no
    '/', none of :func:`_bad_chars`, and at most 255 bytes of UTF-8."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(name).__name__}")
    if name in ("", ".", ".."):
        raise InvalidArgumentError(f"{what} {name!r} is not a file name")
    if "/" in name:
        raise InvalidArgumentError(f"{what} {name!r} contains '/'")
    bad = _bad_chars(name)
    if bad:
        shown = describe_chars(bad)
        raise InvalidArgumentError(f"{what} {name!r} contains {shown}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{what} {name!r} is not valid Unicode") from None
    if size > MAX_COMPONENT_BYTES:
        raise InvalidArgumentError(
            f"{what} {name[:40]!r}... is {size} bytes long; file names are limited to "
            f"{MAX_COMPONENT_BYTES} bytes")
    return name


def check_relative(path: str, what: str = "relative path") -> str:
    """Return ``path`` (components joined by '/', outer '/' ignored) if every component
    passes :func:`check_component`; InvalidArgumentError otherwise."""
    for part in path.strip("/").split("/"):
        check_component(part, what if part == path else f"component of {what} {path!r}")
    return path


def check_normal(path: str, display: str) -> str:
    """Return ``path`` (the path part of a storage path) if normalisation leaves its
    components as they are: no '..' component, no '.' component but a leading one
    (``./data``), no control character, and each component at most 255 bytes (what
    the file systems hold). InvalidArgumentError names the problem."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part == ".." or (part == "." and i > 0):
            raise InvalidArgumentError(
                f"{display}: path component {part!r} is not allowed (a path names its "
                "file directly)")
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > MAX_COMPONENT_BYTES:
            raise InvalidArgumentError(
                f"{display}: name {part[:40]!r}... is {size} bytes long; file names are "
                f"limited to {MAX_COMPONENT_BYTES} bytes")
    bad = control_chars(path)
    if bad:
        shown = describe_chars(bad)
        raise InvalidArgumentError(f"{display}: path contains control character(s) {shown}")
    return path


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
    parts = _split_url(url)
    return parts.netloc, parts.path or "/"


def _split_url(url: str):
    """urlsplit of a storage URL, refusing a query or fragment and control characters
    (InvalidArgumentError): urlsplit would silently cut the path short or drop them."""
    bad = control_chars(url)
    if bad:
        raise InvalidArgumentError(
            f"storage URL {url!r} contains control character(s) {describe_chars(bad)}")
    for c in "?#":
        if c in url:
            raise InvalidArgumentError(
                f"storage URL {url!r} contains {c!r}: sparklog URLs have no query or "
                "fragment (give a plain path to use the character in a local file name)")
    return urlsplit(url)


def storage_root(url) -> str:
    """``url`` checked and normalised as the root of a log: InvalidArgumentError naming
    the problem for a query or fragment, an ``hdfs://``/``webhdfs://`` URL without a
    namenode host or a ``file:`` URL with a relative path; trailing '/' removed (but
    not the file system's own root)."""
    url = check_path(url, "storage root")
    scheme = url_scheme(url)
    if scheme:
        parts = _split_url(url)
        if scheme != "file" and not parts.hostname:
            raise InvalidArgumentError(
                f"storage URL {url!r} names no namenode host: use "
                f"{scheme}://namenode[:port]/path")
        if not parts.path.startswith("/") and parts.path:
            raise InvalidArgumentError(
                f"storage URL {url!r} has a relative path: use {scheme}:///absolute/path "
                "or a plain path")
        if parts.path.strip("/") == "":
            return url
    return url.rstrip("/") or url


#: Suffix of a writer's lease sidecar file (local and WebHDFS backends).
LEASE_SUFFIX = ".sparklog-lease"


def lease_name(name: str) -> str:
    """Name of the lease sidecar of a file called ``name`` (in the same directory)."""
    return f".{name}{LEASE_SUFFIX}"


def is_lease_file(name: str) -> bool:
    """True if directory entry ``name`` is a lease sidecar (hidden from list())."""
    return name.startswith(".") and name.endswith(LEASE_SUFFIX)
