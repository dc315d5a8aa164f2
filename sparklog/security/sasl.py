"""The broker's side of SASL: SaslHandshake then SaslAuthenticate (Kafka's APIs).

On a SASL_PLAINTEXT or SASL_SSL listener a client first sends SaslHandshake naming a
mechanism the listener enables (``sasl.enabled.mechanisms``), then SaslAuthenticate
requests carrying the mechanism's tokens until it is authenticated (ApiVersions is
allowed before). Mechanisms:

* ``SCRAM-SHA-256``/``SCRAM-SHA-512``: :mod:`~sparklog.security.scram` against the
  credentials of :class:`~sparklog.security.store.SecurityStore`;
* ``PLAIN``: ``authzid NUL user NUL password``, checked against the same stored SCRAM
  credentials (the password is hashed with the stored salt and compared): one set of
  users for both; an unknown user's password is hashed too (with a made-up salt), so a
  refusal takes the same time for both. PLAIN sends the password itself: enable it on
  SASL_SSL listeners only (the broker warns at start otherwise).
* ``GSSAPI``: Kerberos, the JDK's mechanism under the broker's keytab login
  (:mod:`~sparklog.security.gssapi`); ``name[/instance]@REALM`` is ``User:<short name>``
  through ``sasl.kerberos.principal.to.local.rules`` (:mod:`~sparklog.security.principals`:
  ``DEFAULT`` maps the default realm only; a principal no rule maps is refused).

Any failure raises an error the connection answers with and then closes (after
``connection.failed.authentication.delay.ms``); the audit log gets one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import (
    IllegalSaslStateError,
    InvalidArgumentError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from ..protocol.apis import ApiKey
from . import audit
from .scram import HASHES, ScramError, ScramServer, unknown_user_credential

if TYPE_CHECKING:
    from .gssapi import GssapiServerExchange


class SaslAuthenticator:
    """One connection's authentication state. ``lookup(user, mechanism)`` returns a
    stored :class:`~sparklog.security.scram.ScramCredential` or None (it may block: it
    is called through ``run_io``)."""

    def __init__(self, mechanisms: list[str], lookup, run_io, *, secret: bytes,
                 host: str, listener: str, gssapi=None):
        self.mechanisms = mechanisms
        self.lookup = lookup
        self.run_io = run_io
        self.secret = secret
        self.host = host
        self.listener = listener
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram: ScramServer | None = None
        #: the listener's GssapiAcceptor (GSSAPI enabled) and this connection's exchange
        self._gssapi = gssapi
        self._gss: GssapiServerExchange | None = None

    def _fail(self, reason: str, user: str | None = None, error=SaslAuthenticationFailedError):
        audit.authentication_failed(self.host, self.listener, self.mechanism, user, reason)
        return error(f"Authentication failed during authentication due to invalid "
                     f"credentials with SASL mechanism {self.mechanism}"
                     if error is SaslAuthenticationFailedError else reason)

    async def handle(self, api_key: int, body: dict) -> dict:
        """Answer SaslHandshake or SaslAuthenticate; raise (the connection closes after
        the answer) when authentication failed or the request is out of turn."""
        if api_key == ApiKey.SASL_HANDSHAKE:
            if self.mechanism is not None:
                raise self._fail("a second SaslHandshake", error=IllegalSaslStateError)
            asked = body["mechanism"].upper()
            if asked not in self.mechanisms:
                raise self._fail(f"mechanism {asked[:40]!r} is not enabled on listener "
                                 f"{self.listener} (enabled: {', '.join(self.mechanisms)})",
                                 error=UnsupportedSaslMechanismError)
            self.mechanism = asked
            return {"error_code": 0, "error_message": "", "mechanisms": self.mechanisms}
        if self.mechanism is None or self.principal is not None:
            raise self._fail("SaslAuthenticate without a SaslHandshake before it"
                             if self.mechanism is None else "already authenticated",
                             error=IllegalSaslStateError)
        token = bytes(body["auth_bytes"])
        if self.mechanism == "PLAIN":
            return await self._plain(token)
        if self.mechanism == "GSSAPI":
            return await self._gssapi_step(token)
        return await self._scram_step(self.mechanism, token)

    async def _plain(self, token: bytes) -> dict:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise self._fail("a PLAIN token is not authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise self._fail("a PLAIN token is not UTF-8") from None
        if authzid and authzid != user:
            raise self._fail("an authorization id different from the user", user)
        if not user or not password:
            raise self._fail("empty user or password", user)
        # the same work for an unknown user as for a known one (every mechanism looked
        # up, one password hashed), so that the time taken does not tell users apart
        found = [(m, await self.run_io(self.lookup, user, m)) for m in HASHES]
        mechanism, credential = next(((m, c) for m, c in found if c is not None),
                                     (next(iter(HASHES)), None))
        check = credential or unknown_user_credential(mechanism, user, self.secret)
        ok = await self.run_io(check.verify_password, mechanism, password)
        if not ok or credential is None:
            raise self._fail("unknown user or wrong password", user)
        return self._done(user)

    async def _scram_step(self, mechanism: str, token: bytes) -> dict:
        if self._scram is None:
            self._scram = ScramServer(mechanism, lambda u: self.lookup(u, mechanism),
                                      self.secret)
        try:  # the first step reads the credential store: off the event loop
            answer = await self.run_io(self._scram.step, token)
        except (ScramError, InvalidArgumentError) as exc:
            raise self._fail(str(exc), self._scram.user) from None
        if self._scram.complete:
            self._done(self._scram.authenticated_user)
        return {"error_code": 0, "error_message": "", "auth_bytes": answer,
                "session_lifetime_ms": 0}

    async def _gssapi_step(self, token: bytes) -> dict:
        try:  # Kerberos' calls block (the keytab's keys, the replay cache)
            if self._gss is None:
                self._gss = await self.run_io(self._gssapi.exchange)
            gss = self._gss
            answer = await self.run_io(gss.step, token)
            user = self._gssapi.short_name(gss.principal) if gss.complete else None
        except SaslAuthenticationFailedError as exc:
            raise self._fail(str(exc), self._gss.principal
                             if self._gss is not None and self._gss.complete else None) \
                from None
        if user is not None:
            return self._done(user) | {"auth_bytes": answer}
        return {"error_code": 0, "error_message": "", "auth_bytes": answer,
                "session_lifetime_ms": 0}

    def _done(self, user: str) -> dict:
        self.principal = f"User:{user}"
        audit.authenticated(self.host, self.listener, self.principal, self.mechanism or "")
        return {"error_code": 0, "error_message": "", "auth_bytes": b"",
                "session_lifetime_ms": 0}


__all__ = ["SaslAuthenticator"]
