"""The rules of every name a client chooses: topics, group ids, client ids, transactional
ids, storage users and job application ids (one module, used by every check).

Each rule is a full-string match (:func:`re.fullmatch`), so no trailing newline or other
character slips past an anchored pattern. Errors name the offending characters.

=====================  ============================================================
name                   rule
=====================  ============================================================
topic                  1-249 characters of ``[A-Za-z0-9._-]``, not ``.``/``..``
                       (Kafka's rule); it is a directory name on the storage
group id               1-249 characters, no control characters; any other character
                       is allowed (as in Kafka) and escaped where it is stored
                       (:func:`storage_name`, :func:`znode_name`); the file
                       name must fit 255 bytes
client id              0-255 characters, no control characters (it is logged)
transactional id       1-249 characters, no control characters
storage user           Hadoop's default user pattern ``[A-Za-z_][A-Za-z0-9._-]*$?``
application id         1-200 characters of ``[A-Za-z0-9._-]``, not starting with
                       ``.`` or ``_`` (a directory name of the job sinks)
=====================  ============================================================

Topics whose names differ only by ``.`` versus ``_`` collide in Kafka's metric names;
:func:`topic_collision_key` is the name both map to (Kafka's ``unifyCollisionChars``).
"""

from __future__ import annotations

import re

from .errors import InvalidArgumentError, InvalidGroupIdError, InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249  # Kafka's limit
MAX_GROUP_ID_LENGTH = 249
MAX_CLIENT_ID_LENGTH = 255
MAX_TRANSACTIONAL_ID_LENGTH = 249
MAX_APP_ID_LENGTH = 200
#: Bytes of one file or directory name (Linux NAME_MAX, HDFS's default
#: dfs.namenode.fs-limits.max-component-length); a stored name must fit.
MAX_COMPONENT_BYTES = 255

_TOPIC_CHARS = "A-Za-z0-9._-"
_TOPIC = re.compile(f"[{_TOPIC_CHARS}]+")
#: C0 controls, DEL and C1 controls: never part of a name (they forge log lines and
#: terminal output, and some stores cannot hold them)
_CONTROL = "\x00-\x1f\x7f-\x9f"
_NO_CONTROL = re.compile(f"[^{_CONTROL}]+")
_CONTROL_RE = re.compile(f"[{_CONTROL}]")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._-]*\$?")


_CONTROL_NAMES = {0: "NUL", 9: "tab", 10: "newline", 13: "carriage return", 127: "DEL"}


def describe_chars(chars) -> str:
    """Each distinct character of ``chars`` shown visibly, e.g. ``'\\n' (U+000A,
    newline), '#' (U+0023)``, for error messages."""
    out = []
    for c in sorted(set(chars)):
        code = ord(c)
        label = _CONTROL_NAMES.get(code) or (
            "control character" if code < 32 or 127 <= code < 160 else "")
        out.append(f"{c!r} (U+{code:04X}{', ' + label if label else ''})")
    return ", ".join(out)


def _check(kind: str, error, name, pattern: re.Pattern, legal: str, low: int,
           high: int) -> str:
    """The shared skeleton: a str of ``low``..``high`` characters fully matching
    ``pattern``; ``error`` (an exception class) names the problem."""
    if not isinstance(name, str):
        raise error(f"{kind} must be a string, got {type(name).__name__}")
    if len(name) < low:
        raise error(f"{kind} is empty")
    if len(name) > high:
        raise error(f"{kind} is {len(name)} characters long, the limit is {high}")
    if name and pattern.fullmatch(name) is None:
        bad = [c for c in name if pattern.fullmatch(c) is None]
        raise error(f"{kind} {name!r} contains illegal characters {describe_chars(bad)}; "
                    f"legal are {legal}")
    return name


def control_chars(text: str) -> list[str]:
    """The control characters (C0, DEL, C1) of ``text``, in order."""
    return _CONTROL_RE.findall(text)


def validate_topic_name(name) -> str:
    """Return ``name`` if it is a valid topic name, else raise InvalidTopicError.

    Kafka's rules, which also make the name a safe single path component: 1 to 249
    characters from ``[A-Za-z0-9._-]``, and neither ``.`` nor ``..``.
    """
    _check("topic name", InvalidTopicError, name, _TOPIC,
           "ASCII letters, digits, '.', '_' and '-'", 1, MAX_TOPIC_NAME_LENGTH)
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    return name


def topic_collision_key(name: str) -> str:
    """The name ``name`` collides with in metric names: '.' replaced by '_' (Kafka)."""
    return name.replace(".", "_")


def has_collision_chars(name: str) -> bool:
    """True if ``name`` has a '.' or '_' (Kafka warns: such names may collide)."""
    return "." in name or "_" in name


#: Kafka's warning on creating a topic whose name has '.' or '_' (kafka-topics.sh).
COLLISION_WARNING = ("due to limitations in metric names, topics with a period ('.') or "
                     "underscore ('_') could collide; to avoid issues it is best to use "
                     "either, but not both")


def validate_group_id(group) -> str:
    """Return ``group`` if it is a valid consumer group id, else InvalidGroupIdError:
    1-249 characters, no control characters, and a stored form (:func:`storage_name`)
    of at most 255 bytes. Other characters ('#', '?', '/', spaces, non-ASCII...) are
    allowed, as in Kafka."""
    _check("group id", InvalidGroupIdError, group, _NO_CONTROL,
           "any character but control characters", 1, MAX_GROUP_ID_LENGTH)
    stored = storage_name(group)
    if len(stored.encode("utf-8")) > MAX_COMPONENT_BYTES:
        raise InvalidGroupIdError(
            f"group id {group[:40]!r}... is stored as {len(stored.encode())} bytes "
            f"(characters outside [{_TOPIC_CHARS}] take 3 bytes per UTF-8 byte), the limit "
            f"is {MAX_COMPONENT_BYTES}: use a shorter id")
    return group


def validate_client_id(client_id) -> str:
    """Return ``client_id`` if valid (0-255 characters, no control characters), else
    InvalidArgumentError."""
    return _check("client id", InvalidArgumentError, client_id, _NO_CONTROL,
                  "any character but control characters", 0, MAX_CLIENT_ID_LENGTH)


def printable(name: str) -> str:
    """``name`` with its control characters escaped (``\\n``, ``\\x7f``...), for a
    name the broker logs but did not choose (a request's client id)."""
    if _NO_CONTROL.fullmatch(name) or not name:
        return name
    return re.sub(f"[{_CONTROL}\\\\]", lambda m: m.group().encode("unicode_escape").decode(),
                  name)


def validate_transactional_id(transactional_id) -> str:
    """Return ``transactional_id`` if valid (1-249 characters, no control characters),
    else InvalidArgumentError."""
    return _check("transactional id", InvalidArgumentError, transactional_id, _NO_CONTROL,
                  "any character but control characters", 1, MAX_TRANSACTIONAL_ID_LENGTH)


def validate_user(user) -> str:
    """Return ``user`` if it is a valid storage user name (Hadoop's default pattern
    ``[A-Za-z_][A-Za-z0-9._-]*$?``, at most 255 characters), else InvalidArgumentError."""
    return _check("user name", InvalidArgumentError, user, _USER,
                  "ASCII letters, digits, '.', '_', '-' (not first) and a final '$'",
                  1, MAX_COMPONENT_BYTES)


def validate_app_id(app_id) -> str:
    """Return ``app_id`` if it is a valid application id, else InvalidArgumentError.

    An application id names the job's transaction in its output and is a path component
    of the job sinks: 1 to 200 characters from ``[A-Za-z0-9._-]``, not starting with
    ``_`` or ``.`` (hidden names are the sink's own; this also excludes ``.``/``..``).
    """
    _check("application id", InvalidArgumentError, app_id, _TOPIC,
           "ASCII letters, digits, '.', '_' and '-'", 1, MAX_APP_ID_LENGTH)
    if app_id[0] in "._":
        raise InvalidArgumentError(
            f"application id {app_id!r} may not start with '.' or '_'")
    return app_id


# --- stored form of free-form names ---------------------------------------------------------

#: Characters escaped in a file name: '%' (the escape), the path and URL delimiters,
#: ':' (HDFS refuses it in a path component), a leading '.' (hidden names, '.', '..'),
#: and what ZooKeeper cannot hold (surrogates, private use, U+FFF0-U+FFFF).
_FILE_ESCAPED = re.compile(r"[%/\\#?:\ud800-\uf8ff\ufff0-\uffff]|^\.")
#: Characters escaped in a ZooKeeper node name: '%', '/', what ZooKeeper cannot hold,
#: and the first '.' of the names '.' and '..' (Kafka 0.8's layout kept otherwise).
_ZNODE_ESCAPED = re.compile(r"[%/\ud800-\uf8ff\ufff0-\uffff]|^\.(?=\.?$)")


def _escape(pattern: re.Pattern, name: str) -> str:
    return pattern.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogatepass")),
        name)


def storage_name(name: str) -> str:
    """The form of a free-form name (a group id) as one file or directory name:
    ``%``, ``/``, ``\\``, ``#``, ``?``, ``:``, a leading ``.`` and the characters
    ZooKeeper refuses become ``%XX`` (their UTF-8 bytes); every other character stays,
    so a group id of ``[A-Za-z0-9._-]`` (not starting with '.') is stored unchanged.
    Distinct names have distinct stored forms (:func:`name_from_storage` inverts it)."""
    return _escape(_FILE_ESCAPED, name)


def znode_name(name: str) -> str:
    """The form of a free-form name as one ZooKeeper node name: like
    :func:`storage_name` but only ``%``, ``/``, the characters ZooKeeper refuses and the
    names ``.``/``..`` are escaped (ZooKeeper holds ``#``, ``?``, ``:``... and Kafka 0.8
    stored them as they are). :func:`name_from_storage` inverts it."""
    return _escape(_ZNODE_ESCAPED, name)


def name_from_storage(stored: str) -> str:
    """Inverse of :func:`storage_name` and of :func:`znode_name`."""
    from urllib.parse import unquote

    return unquote(stored, errors="surrogatepass")
