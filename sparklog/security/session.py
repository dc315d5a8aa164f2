"""What one connection has proven, and the broker's security collaborator.

A :class:`ConnectionSession` belongs to one connection: its listener, the client's host
and its principal: ``User:ANONYMOUS`` on PLAINTEXT and on SSL without a client certificate,
``User:<certificate DN>`` on SSL with a verified client certificate, ``User:<name>``
once SASL succeeded (None before: only ApiVersions, SaslHandshake and
SaslAuthenticate are served until then).

:class:`BrokerSecurity` is what the broker is given: the parsed
:class:`~sparklog.security.config.SecurityConfig`, the listeners' TLS contexts, the
credential and ACL store, the authorizer (None when ``authorizer.class.name`` is
unset: every principal may do everything, as in Kafka) and the client quotas.
"""

from __future__ import annotations

import logging
import ssl

from ..errors import IllegalSaslStateError
from ..protocol.apis import ApiKey
from .acl import AclAuthorizer
from .binding import ProducerIdBinding
from .config import SecurityConfig
from .listeners import Listener
from .quotas import QuotaManager
from .sasl import SaslAuthenticator
from .store import SecurityStore
from .tls import certificate_principal, server_context

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"
#: the APIs a connection may use before it authenticated
BEFORE_AUTHENTICATION = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
_SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


def principal_of(session) -> str:
    """The principal a request acts as: its connection's, ``User:ANONYMOUS`` for a
    request without a session (in-process) or before one is known."""
    return session.principal if session is not None and session.principal else ANONYMOUS


class ConnectionSession:
    """One connection's identity (see the module docstring)."""

    __slots__ = ("listener", "host", "principal", "authenticator", "max_receive")

    def __init__(self, listener: Listener | None, host: str, principal: str | None,
                 authenticator: SaslAuthenticator | None = None, max_receive: int = 0):
        self.listener = listener
        self.host = host
        self.principal = principal
        self.authenticator = authenticator
        self.max_receive = max_receive

    @property
    def authenticated(self) -> bool:
        """True once the connection has a principal."""
        return self.principal is not None

    def handles(self, api_key: int) -> bool:
        """True when the request is the session's to answer (SASL requests, and every
        request before authentication) rather than the broker's."""
        return api_key in _SASL_APIS or (not self.authenticated
                                         and api_key != ApiKey.API_VERSIONS)

    async def answer(self, api_key: int, body: dict) -> dict:
        """Answer a request :meth:`handles`; raise (the caller answers with the error
        and closes the connection) on any failure or a request out of turn."""
        if api_key not in _SASL_APIS:
            raise IllegalSaslStateError(
                f"request with api key {api_key} before SASL authentication completed "
                f"(listener {getattr(self.listener, 'name', '?')} is "
                f"{getattr(self.listener, 'protocol', '?')})")
        if self.authenticator is None:
            name = self.listener.name if self.listener else "?"
            raise IllegalSaslStateError(f"listener {name} does not use SASL")
        response = await self.authenticator.handle(api_key, body)
        if self.authenticator.principal is not None:
            self.principal = self.authenticator.principal
        return response


class BrokerSecurity:
    """The broker's security collaborator (see the module docstring)."""

    def __init__(self, config: SecurityConfig, store, *, authorizer=None):
        self.config = config
        self.store = SecurityStore(store)
        if authorizer is None and config.authorizer_enabled:
            authorizer = AclAuthorizer(self.store, super_users=config.super_users,
                                       allow_if_no_acl=config.allow_if_no_acl)
        self.authorizer = authorizer
        #: the cluster's key of unknown users' made-up salts (the same at every broker)
        self._secret = self.store.unknown_user_key()
        #: producer tokens: which producer ids a principal may write with
        self.producer_ids = ProducerIdBinding(self.store)
        #: producer_byte_rate / consumer_byte_rate throttling
        self.quotas = QuotaManager(self.store)
        # read now, not on the event loop's first request (then refreshed in the
        # background: SecurityStore.cached)
        self.quotas.settings()
        if self.authorizer is not None and hasattr(self.authorizer, "acls"):
            self.authorizer.acls()
        self._contexts = {lst.name: server_context(config, lst)
                          for lst in config.listeners if lst.tls}
        #: the broker's Kerberos login per SASL listener with GSSAPI (logged in now:
        #: a keytab the KDC refuses fails the start)
        self._gssapi = {lst.name: self._acceptor(lst) for lst in config.listeners
                        if lst.sasl and "GSSAPI" in config.mechanisms(lst)}

    def _acceptor(self, listener: Listener):
        from .gssapi import GssapiAcceptor, parse_jaas

        principal, keytab = parse_jaas(self.config.get("gssapi.sasl.jaas.config", listener))
        acceptor = GssapiAcceptor(principal, keytab,
                                  self.config.get("sasl.kerberos.service.name", listener)
                                  or None,
                                  self.config.get("sasl.kerberos.principal.to.local.rules",
                                                  listener))
        log.info("listener %s: GSSAPI as %s (service name %s) from keytab %s; default "
                 "realm %s", listener.name, principal, acceptor.service, keytab,
                 acceptor.realm)
        return acceptor

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """The broker's listeners, in ``listeners`` order."""
        return self.config.listeners

    def ssl_context(self, listener: Listener) -> ssl.SSLContext | None:
        """The listener's TLS context (None for PLAINTEXT and SASL_PLAINTEXT)."""
        return self._contexts.get(listener.name)

    def authentication_timeout(self, listener: Listener | None) -> float:
        """Seconds a client has for the TLS and SASL handshakes."""
        return self.config.int("authentication.timeout.ms", listener) / 1000

    def failure_delay(self, listener: Listener | None) -> float:
        """Seconds before a connection that failed to authenticate is closed."""
        return self.config.int("connection.failed.authentication.delay.ms", listener) / 1000

    def session(self, listener: Listener | None, transport, host: str,
                run_io) -> ConnectionSession:
        """The session of a new connection on ``listener``."""
        if listener is None or not listener.sasl:
            principal = None
            if listener is not None and listener.tls:
                sslobj = transport.get_extra_info("ssl_object")
                principal = certificate_principal(sslobj.getpeercert() if sslobj else None)
            return ConnectionSession(listener, host, principal or ANONYMOUS)
        authenticator = SaslAuthenticator(
            self.config.mechanisms(listener), self.store.credential, run_io,
            secret=self._secret, host=host, listener=listener.name,
            gssapi=self._gssapi.get(listener.name))
        return ConnectionSession(listener, host, None, authenticator,
                                 self.config.int("sasl.server.max.receive.size", listener))

    def warn_unauthenticated(self) -> None:
        """A WARNING for every listener reachable from other machines without
        authentication (not loopback, neither SASL nor SSL with required client
        certificates): anyone reaching it may use every API the authorizer allows
        ANONYMOUS (everything when no authorizer is configured)."""
        for lst in self.listeners:
            certified = lst.tls and self.config.get("ssl.client.auth", lst).lower() == "required"
            if not lst.loopback and not lst.sasl and not certified:
                log.warning(
                    "listener %s (%s://%s:%d) is not a loopback address and does not "
                    "authenticate clients: every client that can reach it is User:ANONYMOUS%s;"
                    " use SASL_SSL (docs/security.md), bind 127.0.0.1 or firewall the port",
                    lst.name, lst.protocol, lst.host, lst.port,
                    "" if self.authorizer is not None else
                    " and, with no authorizer.class.name, may create, read and delete "
                    "any topic and group")

    def warn_plain_in_clear(self) -> None:
        """A WARNING for every SASL_PLAINTEXT listener enabling PLAIN: its clients send
        their passwords unencrypted (enable PLAIN on SASL_SSL listeners only)."""
        for lst in self.listeners:
            if lst.sasl and not lst.tls and "PLAIN" in self.config.mechanisms(lst):
                log.warning(
                    "listener %s (%s://%s:%d) enables SASL PLAIN without TLS: clients send "
                    "their passwords in clear text; enable PLAIN on SASL_SSL listeners "
                    "only (listener.name.%s.sasl.enabled.mechanisms=SCRAM-SHA-256,...)",
                    lst.name, lst.protocol, lst.host, lst.port, lst.name.lower())

    def warn_readable_storage(self, topics) -> None:
        """With an authorizer, a WARNING when users of the storage other than the
        broker's may read topics without it (the Spark source's ``path`` mode and any
        file tool bypass ACLs): existing topic directories granting "others" read or
        search (``o+r``/``o+x``), or new ones getting such a mode
        (``storage.topic.dir.permission`` unset or granting it), while the storage root
        and its ``topics`` directory let others through. ``topics`` is the broker's
        :class:`~sparklog.metadata.store.TopicStore`. Blocks (it reads the storage)."""
        from ..errors import StorageError
        from ..metadata.store import TOPICS_DIR

        if self.authorizer is None:
            return
        fileio = topics.fileio
        try:
            for path in (topics.root, fileio.join(topics.root, TOPICS_DIR)):
                if fileio.exists(path):
                    perm = fileio.permission(path)
                    if perm is None or not perm[0] & 0o001:
                        return  # no permissions, or others cannot pass: nothing exposed
            exposed = []
            for name in topics.list_topics():
                mode = fileio.permission(topics.topic_dir(name))[0]
                if mode & 0o005:
                    exposed.append(f"{name} ({mode:o})")
        except StorageError as exc:
            log.debug("permissions of the topic directories not checked: %s", exc)
            return
        new_mode = topics.dir_permission[0]
        if not exposed and new_mode is not None and not new_mode & 0o005:
            return
        log.warning(
            "authorizer.class.name is set, but every user of the storage may read topics "
            "without the broker (the Spark source's path mode reads the files, bypassing "
            "ACLs): %s; new topics get %s. Set storage.topic.dir.permission=750 (with "
            "storage.topic.dir.group) and tighten existing topic directories "
            "(docs/security.md)",
            f"{len(exposed)} topic directories are readable by others: "
            f"{', '.join(exposed[:10])}{' ...' if len(exposed) > 10 else ''}"
            if exposed else "no topic directory is readable by others yet",
            "the storage's default mode (storage.topic.dir.permission is unset)"
            if new_mode is None else f"mode {new_mode:o}")


__all__ = ["ANONYMOUS", "BEFORE_AUTHENTICATION", "BrokerSecurity", "ConnectionSession",
           "principal_of"]
