"""SASL GSSAPI (Kerberos) through the JDK's own implementation, in this process's JVM.

Python has no GSSAPI without system packages (PyPI's ``gssapi`` builds against MIT
Kerberos' headers); the JVM the ``hdfs://`` backend already starts
(:mod:`sparklog.storage.jvm`, JPype) carries the JDK's Kerberos and its SASL GSSAPI
mechanism, the one Kafka's Java brokers and clients use. Both sides log in from a keytab
(``Krb5LoginModule`` with ``useKeyTab``, as Kafka's ``sasl.jaas.config`` does) and run
the SASL exchange under that login's ``Subject``:

* :class:`GssapiAcceptor` (the broker): one login of the broker's principal
  (``kafka/broker.example.com@REALM``: service name ``kafka``, host
  ``broker.example.com``); :meth:`GssapiAcceptor.exchange` gives each connection a
  :class:`GssapiServerExchange` whose :meth:`~GssapiServerExchange.step` answers one
  SaslAuthenticate token;
* :class:`GssapiInitiator` (a client): the client's login and the SASL client of one
  connection, for ``<service name>/<broker host>``.

The authenticated principal maps to the ACL principal ``User:<short name>`` through
``sasl.kerberos.principal.to.local.rules`` (:mod:`~sparklog.security.principals`; the
``DEFAULT`` rule maps ``primary[/instance]@REALM`` to ``primary`` for the broker's
default realm only: :func:`default_realm`). The JVM finds the KDC through ``/etc/krb5.conf`` or
``-Djava.security.krb5.conf=...`` in ``HADOOP_CLIENT_OPTS``. Every call blocks (run the
broker's on its I/O threads).
"""

from __future__ import annotations

import os
import re
import tempfile
import threading

from ..errors import InvalidConfigError, SaslAuthenticationFailedError
from ..storage import jvm

_LOCK = threading.Lock()
_SUBJECTS: dict[tuple[str, str, bool], object] = {}


def parse_jaas(text: str) -> tuple[str, str]:
    """(principal, keytab) of a ``Krb5LoginModule`` ``sasl.jaas.config`` (Kafka's
    form: ``com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true
    storeKey=true keyTab="/path" principal="name@REALM";``); InvalidConfigError naming
    what is missing."""
    if "Krb5LoginModule" not in text:
        raise InvalidConfigError("GSSAPI's sasl.jaas.config must use "
                                 "com.sun.security.auth.module.Krb5LoginModule")
    found = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', text))
    if not found.get("principal") or not found.get("keyTab"):
        raise InvalidConfigError('GSSAPI\'s sasl.jaas.config needs keyTab="..." and '
                                 'principal="..." (a keytab login)')
    return found["principal"], found["keyTab"]


def default_realm(principal: str) -> str:
    """The broker's default realm, as the ``DEFAULT`` rule needs it: the JVM's
    (``default_realm`` of its krb5.conf, as Kafka takes it), else the realm of the
    broker's own ``principal``."""
    try:
        realm = str(jvm.jclass("javax.security.auth.kerberos.KerberosPrincipal")(
            "sparklog-realm-probe").getRealm() or "")
    except Exception:  # noqa: BLE001 - a krb5.conf without default_realm
        realm = ""
    return realm or principal.rpartition("@")[2]


def _action(fn, *args):
    import jpype

    @jpype.JImplements("java.security.PrivilegedExceptionAction")
    class _Action:
        @jpype.JOverride
        def run(self):
            return fn(*args)

    return _Action()


def _login(principal: str, keytab: str, initiator: bool):
    """The ``Subject`` of ``principal`` logged in from ``keytab`` (once per process)."""
    key = (principal, os.path.abspath(keytab), initiator)
    with _LOCK:
        subject = _SUBJECTS.get(key)
        if subject is not None:
            return subject
        if not os.path.isfile(keytab):
            raise InvalidConfigError(f"GSSAPI: keytab {keytab} of {principal} is not a file")
        fd, path = tempfile.mkstemp(prefix="sparklog-jaas-", suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write('sparklog {\n  com.sun.security.auth.module.Krb5LoginModule required\n'
                    f'  useKeyTab=true storeKey=true doNotPrompt=true refreshKrb5Config=true\n'
                    f'  isInitiator={"true" if initiator else "false"}\n'
                    f'  keyTab="{os.path.abspath(keytab)}" principal="{principal}";\n}};\n')
        try:
            uri = jvm.jclass("java.io.File")(path).toURI()
            config = jvm.jclass("com.sun.security.auth.login.ConfigFile")(uri)
            subject = jvm.jclass("javax.security.auth.Subject")()
            context = jvm.jclass("javax.security.auth.login.LoginContext")(
                "sparklog", subject, None, config)
            try:
                context.login()
            except Exception as e:
                raise SaslAuthenticationFailedError(
                    f"GSSAPI: Kerberos login of {principal} from keytab {keytab} failed: "
                    f"{e}") from None
        finally:
            os.unlink(path)
        _SUBJECTS[key] = subject
        return subject


def _do_as(subject, fn, *args):
    return jvm.jclass("javax.security.auth.Subject").doAs(subject, _action(fn, *args))


def _evaluate(subject, evaluate, token: bytes) -> bytes:
    """One SASL step of either side: ``evaluate`` (a SaslServer's evaluateResponse or a
    SaslClient's evaluateChallenge) run as ``subject`` on ``token``; the token to send
    back (b"" for none), or SaslAuthenticationFailedError naming Kerberos' reason."""
    import jpype

    try:
        answer = _do_as(subject, evaluate, jpype.JArray(jpype.JByte)(token))
    except jpype.JException as e:
        raise SaslAuthenticationFailedError(f"GSSAPI: {e.getMessage()}") from None
    return b"" if answer is None else bytes(answer)


class GssapiServerExchange:
    """The acceptor's side of one connection's GSSAPI exchange."""

    def __init__(self, acceptor: "GssapiAcceptor"):
        import jpype

        self._subject = acceptor.subject
        handler_cls = jpype.JClass("javax.security.sasl.AuthorizeCallback")

        @jpype.JImplements("javax.security.auth.callback.CallbackHandler")
        class _Handler:
            @jpype.JOverride
            def handle(self, callbacks):
                for cb in callbacks:
                    if isinstance(cb, handler_cls):
                        # the client acts as itself only (no impersonation)
                        cb.setAuthorized(str(cb.getAuthenticationID())
                                         == str(cb.getAuthorizationID()))

        sasl = jvm.jclass("javax.security.sasl.Sasl")
        self._server = _do_as(self._subject, sasl.createSaslServer, "GSSAPI",
                              acceptor.service, acceptor.host, None, _Handler())

    def step(self, token: bytes) -> bytes:
        """The answer to one client token; SaslAuthenticationFailedError naming the
        cause when Kerberos refuses it."""
        return _evaluate(self._subject, self._server.evaluateResponse, token)

    @property
    def complete(self) -> bool:
        """True once the client is authenticated."""
        return bool(self._server.isComplete())

    @property
    def principal(self) -> str:
        """The client's Kerberos principal (``name@REALM``)."""
        return str(self._server.getAuthorizationID())


class GssapiAcceptor:
    """The broker's Kerberos identity: ``principal`` (``service/host@REALM``) logged in
    from ``keytab``; ``service`` defaults to the principal's first component."""

    def __init__(self, principal: str, keytab: str, service: str | None = None,
                 rules: str = "DEFAULT"):
        from .principals import KerberosShortNamer

        self.principal = principal
        self.keytab = keytab
        primary, _, rest = principal.partition("@")[0].partition("/")
        self.service = service or primary
        self.host = rest or None
        self.subject = _login(principal, keytab, initiator=False)
        self.realm = default_realm(principal)
        #: ``sasl.kerberos.principal.to.local.rules`` with the default realm
        self.namer = KerberosShortNamer.from_rules(rules, self.realm)

    def short_name(self, principal: str) -> str:
        """The ACL user name of an authenticated client's principal;
        SaslAuthenticationFailedError ("No rules apply to ...") when no rule maps it."""
        from .principals import NoMatchingRule

        try:
            return self.namer.short_name(principal)
        except NoMatchingRule as exc:
            raise SaslAuthenticationFailedError(f"GSSAPI: {exc}") from None

    def exchange(self) -> GssapiServerExchange:
        """A new connection's exchange."""
        return GssapiServerExchange(self)


class GssapiInitiator:
    """A client's side of one connection: ``principal`` logged in from ``keytab``,
    authenticating to ``service/host``."""

    def __init__(self, principal: str, keytab: str, service: str, host: str):
        import jpype

        self.subject = _login(principal, keytab, initiator=True)
        props = jvm.jclass("java.util.HashMap")()
        props.put("javax.security.sasl.qop", "auth")
        sasl = jvm.jclass("javax.security.sasl.Sasl")
        mechanisms = jpype.JArray(jpype.JString)(["GSSAPI"])
        self._client = _do_as(self.subject, sasl.createSaslClient, mechanisms, None,
                              service, host, props, None)

    def step(self, challenge: bytes) -> bytes:
        """The token answering the broker's ``challenge`` (b"" for the first)."""
        return _evaluate(self.subject, self._client.evaluateChallenge, challenge)

    @property
    def complete(self) -> bool:
        """True once this side has sent its last token."""
        return bool(self._client.isComplete())


__all__ = ["GssapiAcceptor", "GssapiInitiator", "GssapiServerExchange", "default_realm",
           "parse_jaas"]
