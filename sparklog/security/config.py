"""The broker's security properties (Kafka's names) and per-listener overrides.

Every key listed in :data:`SECURITY_KEYS` may also be given for one listener as
``listener.name.<listener name in lower case>.<key>`` (Kafka's override form), e.g.
``listener.name.external.ssl.client.auth=required``; :meth:`SecurityConfig.get`
returns the listener's value when set, else the broker-wide one, else the default.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field

from ..errors import InvalidConfigError
from .listeners import Listener, parse_listeners

#: Kafka's authorizer class names sparklog accepts for its ACL authorizer
AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "sparklog.security.acl.AclAuthorizer")
#: SASL mechanisms the broker implements
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")

#: security key -> default (strings, as in a properties file)
SECURITY_KEYS = {
    "listener.security.protocol.map": "",
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": "",
    "ssl.keystore.key": "",
    "ssl.keystore.certificate.chain": "",
    "ssl.key.password": "",
    "ssl.keystore.password": "",
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": "",
    "ssl.truststore.certificates": "",
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": "",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.server.max.receive.size": "524288",
    # GSSAPI (Kerberos): the broker's keytab login, Kafka's per-mechanism JAAS key
    # (listener.name.<l>.gssapi.sasl.jaas.config), the service name clients ask for
    # (default: the principal's first component) and the principal -> User:name rules
    # (sparklog.security.principals: DEFAULT maps the broker's default realm only)
    "gssapi.sasl.jaas.config": "",
    "sasl.kerberos.service.name": "",
    "sasl.kerberos.principal.to.local.rules": "DEFAULT",
    "connection.failed.authentication.delay.ms": "100",
    # sparklog's own: a client has this long to finish the TLS and SASL handshakes
    "authentication.timeout.ms": "10000",
    "authorizer.class.name": "",
    "super.users": "",
    "allow.everyone.if.no.acl.found": "false",
    "max.connections.per.ip.overrides": "",
}
_PREFIXES = ("ssl.", "sasl.", "gssapi.sasl.", "listener.", "authorizer.", "super.users",
             "allow.everyone.", "connection.failed.authentication.",
             "authentication.timeout.", "max.connections.per.ip.overrides")


def is_security_key(key: str) -> bool:
    """True for the keys :class:`SecurityConfig` parses (kept aside by BrokerConfig)."""
    return key.startswith(_PREFIXES)


def _int(key: str, value: str, minimum: int = 0) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(f"broker config {key}={value!r} is not an integer") from None
    if number < minimum:
        raise InvalidConfigError(f"broker config {key}={number} must be >= {minimum}")
    return number


@dataclass(frozen=True)
class SecurityConfig:
    """Parsed security properties and the broker's listeners."""

    listeners: tuple[Listener, ...]
    props: dict = field(default_factory=dict)

    @classmethod
    def from_props(cls, listeners: str, advertised: str = "", props: dict | None = None
                   ) -> "SecurityConfig":
        """Parse and check (InvalidConfigError names the key and the problem)."""
        props = {str(k).strip(): str(v).strip() for k, v in (props or {}).items()}
        for key in props:
            base = key
            if key.startswith("listener.name."):
                base = key.split(".", 3)[3] if key.count(".") >= 3 else ""
            if base not in SECURITY_KEYS:
                raise InvalidConfigError(f"unknown security config {key!r}; known: "
                                         f"{', '.join(sorted(SECURITY_KEYS))}")
        parsed = parse_listeners(listeners, advertised,
                                 props.get("listener.security.protocol.map", ""))
        config = cls(tuple(parsed), props)
        config._check()
        return config

    def get(self, key: str, listener: Listener | None = None) -> str:
        """The value of ``key`` for ``listener`` (its override, the broker's, the
        default)."""
        if listener is not None:
            value = self.props.get(f"listener.name.{listener.name.lower()}.{key}")
            if value is not None:
                return value
        return self.props.get(key, SECURITY_KEYS[key])

    def mechanisms(self, listener: Listener | None = None) -> list[str]:
        """``sasl.enabled.mechanisms`` of a listener."""
        return [m.strip().upper() for m in self.get("sasl.enabled.mechanisms", listener)
                .split(",") if m.strip()]

    def int(self, key: str, listener: Listener | None = None) -> int:
        """An integer setting."""
        return _int(key, self.get(key, listener))

    @property
    def authorizer_enabled(self) -> bool:
        """True when ``authorizer.class.name`` names an authorizer."""
        return bool(self.get("authorizer.class.name"))

    @property
    def super_users(self) -> frozenset[str]:
        """``super.users`` (``User:admin;User:ops``)."""
        return frozenset(u.strip() for u in self.get("super.users").split(";") if u.strip())

    @property
    def allow_if_no_acl(self) -> bool:
        """``allow.everyone.if.no.acl.found``."""
        return self.get("allow.everyone.if.no.acl.found").lower() == "true"

    def per_ip_overrides(self) -> dict[str, builtins.int]:  # (the method int shadows it)
        """``max.connections.per.ip.overrides`` (``host:count,...``) as a dict."""
        out = {}
        for item in filter(None, (s.strip() for s in
                                  self.get("max.connections.per.ip.overrides").split(","))):
            host, sep, count = item.rpartition(":")
            if not sep or not host:
                raise InvalidConfigError(f"max.connections.per.ip.overrides entry {item!r} "
                                         "is not host:count")
            out[host.strip("[]")] = _int("max.connections.per.ip.overrides", count)
        return out

    def _check(self) -> None:
        for listener in self.listeners + (None,):
            auth = self.get("ssl.client.auth", listener).lower()
            if auth not in ("none", "requested", "required"):
                raise InvalidConfigError(f"ssl.client.auth={auth!r} must be none, requested "
                                         "or required")
            for m in self.mechanisms(listener):
                if m not in MECHANISMS:
                    raise InvalidConfigError(
                        f"sasl.enabled.mechanisms: {m!r} is not supported; sparklog has "
                        f"{', '.join(MECHANISMS)}")
            if listener is not None and listener.sasl \
                    and "GSSAPI" in self.mechanisms(listener):
                from .gssapi import parse_jaas

                if not self.get("gssapi.sasl.jaas.config", listener):
                    raise InvalidConfigError(
                        f"GSSAPI is enabled on listener {listener.name} but gssapi.sasl.jaas.config (or "
                        "listener.name.<listener>.gssapi.sasl.jaas.config) does not give "
                        "the broker's keytab and principal")
                parse_jaas(self.get("gssapi.sasl.jaas.config", listener))
            from .principals import KerberosShortNamer

            KerberosShortNamer.from_rules(
                self.get("sasl.kerberos.principal.to.local.rules", listener))
            if listener is not None and listener.sasl and not self.mechanisms(listener):
                raise InvalidConfigError(f"listener {listener.name} is {listener.protocol} "
                                         "but sasl.enabled.mechanisms is empty")
            for key in ("sasl.server.max.receive.size", "authentication.timeout.ms",
                        "connection.failed.authentication.delay.ms"):
                _int(key, self.get(key, listener))
        name = self.get("authorizer.class.name")
        if name and name not in AUTHORIZER_CLASSES:
            raise InvalidConfigError(f"authorizer.class.name={name!r} is unknown; sparklog's "
                                     f"ACL authorizer answers to {', '.join(AUTHORIZER_CLASSES)}")
        if self.get("allow.everyone.if.no.acl.found").lower() not in ("true", "false"):
            raise InvalidConfigError("allow.everyone.if.no.acl.found must be true or false")
        self.per_ip_overrides()


__all__ = ["AUTHORIZER_CLASSES", "MECHANISMS", "SECURITY_KEYS", "SecurityConfig",
           "is_security_key"]
