"""The audit log: failed authentications and denied operations.

Records go to the ``sparklog.audit`` logger (route it to its own file with the logging
configuration: docs/security.md), one line each, naming the principal, the client's
host and what was refused. Successful authentications are logged at INFO, refusals at
WARNING.
"""

from __future__ import annotations

import logging

log = logging.getLogger("sparklog.audit")


def denied(principal: str, host: str, operation: str, resource_type: str, name: str) -> None:
    """An operation refused by the authorizer."""
    log.warning("DENIED principal=%s host=%s operation=%s resource=%s:%s", principal, host,
                operation, resource_type, name)


def authentication_failed(host: str, listener: str, mechanism: str, user: str | None,
                          reason: str) -> None:
    """A client failed to authenticate."""
    log.warning("AUTHENTICATION FAILED host=%s listener=%s mechanism=%s user=%s reason=%s",
                host, listener, mechanism or "-", user if user is not None else "-", reason)


def authenticated(host: str, listener: str, principal: str, mechanism: str) -> None:
    """A client authenticated."""
    log.info("AUTHENTICATED host=%s listener=%s principal=%s mechanism=%s", host, listener,
             principal, mechanism)


__all__ = ["authenticated", "authentication_failed", "denied"]
