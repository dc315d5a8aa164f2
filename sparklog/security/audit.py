"""The audit log: failed authentications and denied operations.

Records go to the ``sparklog.audit`` logger (route it to its own file with the logging
configuration: docs/security.md), one line each, naming the principal, the client's
host and what was refused. Successful authentications are logged at INFO, refusals at
WARNING.

Every field is written through :func:`field`: user names, principals, topic and group
names, hosts and reasons come from clients, so a control character (a newline that
would start a forged line) is written escaped (``\\n``), as client ids are
(:func:`sparklog.names.printable`), and a space inside a field is written ``\\x20`` so
that no field can add a ``key=value`` of its own (the reason of a failed authentication,
a sentence, is the last field and in double quotes).
"""

from __future__ import annotations

import logging

from ..names import printable

log = logging.getLogger("sparklog.audit")


def field(value) -> str:
    """One field of an audit line: ``value`` with control characters, backslashes and
    spaces escaped (``-`` for None or empty)."""
    if value is None or value == "":
        return "-"
    return printable(str(value)).replace(" ", "\\x20")


def denied(principal: str, host: str, operation: str, resource_type: str, name: str) -> None:
    """An operation refused by the authorizer."""
    log.warning("DENIED principal=%s host=%s operation=%s resource=%s:%s", field(principal),
                field(host), field(operation), field(resource_type), field(name))


def authentication_failed(host: str, listener: str, mechanism: str | None, user: str | None,
                          reason: str) -> None:
    """A client failed to authenticate. ``reason`` is the broker's sentence (it may
    quote what the client sent): the last field, in double quotes (a ``"`` inside
    escaped), its control characters escaped."""
    quoted = printable(str(reason)).replace('"', '\\"')
    log.warning('AUTHENTICATION FAILED host=%s listener=%s mechanism=%s user=%s reason="%s"',
                field(host), field(listener), field(mechanism), field(user), quoted)


def authenticated(host: str, listener: str, principal: str, mechanism: str) -> None:
    """A client authenticated."""
    log.info("AUTHENTICATED host=%s listener=%s principal=%s mechanism=%s", field(host),
             field(listener), field(principal), field(mechanism))


__all__ = ["authenticated", "authentication_failed", "denied", "field"]
