"""The clients' side: TLS and SASL on a new connection, configured as kafka-python
names it.

=======================  ============  ==============================================
config                   default       meaning
=======================  ============  ==============================================
security_protocol        PLAINTEXT     PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
ssl_cafile               None          CA certificates the broker's must chain to
                                       (None: the system's)
ssl_certfile             None          the client's certificate (ssl.client.auth)
ssl_keyfile              None          its private key (None: in ssl_certfile)
ssl_password             None          the private key's password
ssl_check_hostname       True          the broker's certificate must name the host
ssl_context              None          a ready :class:`ssl.SSLContext` (the ssl_*
                                       settings are then ignored)
sasl_mechanism           PLAIN         PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or GSSAPI
sasl_plain_username      None          the user (PLAIN and SCRAM)
sasl_plain_password      None          its password
sasl_kerberos_service_name  kafka      GSSAPI: the broker's service name
sasl_kerberos_domain_name   None       GSSAPI: the broker's host in its principal
                                       (None: the host connected to)
sasl_kerberos_principal  None          GSSAPI: the client's principal and its keytab
sasl_kerberos_keytab     None          (sparklog's; Kafka's ``sasl.jaas.config`` with
                                       ``Krb5LoginModule`` gives the same)
=======================  ============  ==============================================

GSSAPI runs the JDK's Kerberos in this process's JVM (:mod:`.gssapi`: needs JPype and
a Java runtime, as ``hdfs://`` does; the KDC from ``/etc/krb5.conf`` or
``-Djava.security.krb5.conf`` in ``HADOOP_CLIENT_OPTS``).

:meth:`ClientSecurity.connect` opens a socket, wraps it in TLS and authenticates
(SaslHandshake, SaslAuthenticate) before any other request; a refused authentication
raises :class:`~sparklog.errors.SaslAuthenticationFailedError` (not retriable), a TLS
failure (an untrusted certificate, a plaintext port) BrokerNotAvailableError naming it.
"""

from __future__ import annotations

import itertools
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import BrokerNotAvailableError, InvalidConfigError, SaslAuthenticationFailedError
from .listeners import PROTOCOLS

#: the client configs (kafka-python's names) and their defaults
CLIENT_SECURITY_DEFAULTS = {
    "security_protocol": "PLAINTEXT", "ssl_cafile": None, "ssl_certfile": None,
    "ssl_keyfile": None, "ssl_password": None, "ssl_check_hostname": True,
    "ssl_context": None, "sasl_mechanism": "PLAIN", "sasl_plain_username": None,
    "sasl_plain_password": None, "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": None, "sasl_kerberos_principal": None,
    "sasl_kerberos_keytab": None,
}
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")


@dataclass(frozen=True)
class ClientSecurity:
    """How a client secures its connections (see the module docstring)."""

    protocol: str = "PLAINTEXT"
    context: ssl.SSLContext | None = None
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None
    #: GSSAPI: (service name, broker host override, principal, keytab)
    kerberos: tuple | None = None

    @classmethod
    def from_configs(cls, configs: dict | None = None) -> "ClientSecurity":
        """From kafka-python's names (``_``; Kafka's dotted names are accepted too);
        InvalidConfigError names a bad value. Keys not listed in
        :data:`CLIENT_SECURITY_DEFAULTS` are ignored."""
        cfg: dict[str, Any] = dict(CLIENT_SECURITY_DEFAULTS)  # option -> value of its type
        for key, value in (configs or {}).items():
            key = key.replace(".", "_")
            if key in cfg and value is not None:
                cfg[key] = value
        protocol = str(cfg["security_protocol"]).upper()
        if protocol not in PROTOCOLS:
            raise InvalidConfigError(f"security_protocol={protocol!r} must be one of "
                                     f"{', '.join(PROTOCOLS)}")
        mechanism = str(cfg["sasl_mechanism"]).upper()
        if protocol.startswith("SASL_"):
            if mechanism not in _MECHANISMS:
                raise InvalidConfigError(f"sasl_mechanism={mechanism!r} must be one of "
                                         f"{', '.join(_MECHANISMS)}")
            if mechanism == "GSSAPI":
                if not cfg["sasl_kerberos_principal"] or not cfg["sasl_kerberos_keytab"]:
                    raise InvalidConfigError(
                        "sasl_mechanism=GSSAPI needs sasl_kerberos_principal and "
                        "sasl_kerberos_keytab (a keytab login; or sasl.jaas.config with "
                        "Krb5LoginModule keyTab and principal)")
            elif not cfg["sasl_plain_username"] or not cfg["sasl_plain_password"]:
                raise InvalidConfigError(f"security_protocol={protocol} needs "
                                         "sasl_plain_username and sasl_plain_password")
        check = cfg["ssl_check_hostname"]
        if isinstance(check, str):
            check = check.strip().lower() not in ("false", "0", "no")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            from .tls import client_context

            context = cfg["ssl_context"] or client_context(
                cfg["ssl_cafile"], cfg["ssl_certfile"], cfg["ssl_keyfile"],
                cfg["ssl_password"], bool(check))
        kerberos = None
        if mechanism == "GSSAPI":
            kerberos = (str(cfg["sasl_kerberos_service_name"] or "kafka"),
                        cfg["sasl_kerberos_domain_name"], str(cfg["sasl_kerberos_principal"]),
                        str(cfg["sasl_kerberos_keytab"]))
        return cls(protocol, context, mechanism, cfg["sasl_plain_username"],
                   cfg["sasl_plain_password"], kerberos)

    def connect(self, host: str, port: int, timeout: float, client_id: str = ""
                ) -> socket.socket | SerializedTLSSocket:
        """A connected, encrypted and authenticated socket to ``host:port``."""
        address = f"{host}:{port}"
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise BrokerNotAvailableError(
                f"cannot connect to broker {address}: {exc.strerror or exc}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                try:
                    sock = self.context.wrap_socket(sock, server_hostname=host)
                except (ssl.SSLError, OSError) as exc:
                    raise BrokerNotAvailableError(
                        f"TLS handshake with broker {address} failed: {exc} (is it an SSL "
                        "listener, and does ssl_cafile hold the CA that signed its "
                        "certificate?)") from None
            if self.protocol.startswith("SASL_"):
                self._authenticate(sock, address, client_id)
        except BaseException:
            sock.close()
            raise
        return SerializedTLSSocket(sock) if isinstance(sock, ssl.SSLSocket) else sock

    def _authenticate(self, sock, address: str, client_id: str) -> None:
        from ..protocol.apis import ApiKey

        ids = itertools.count(1)

        def call(api_key, body):
            from ..protocol.codec import decode_response, encode_request_parts
            from ..protocol.stream import recv_message, send_parts

            try:
                send_parts(sock, encode_request_parts(api_key, body, next(ids), client_id, 0))
                _cid, response = decode_response(recv_message(sock, 1 << 20), api_key)
            except (OSError, ConnectionError) as exc:
                raise BrokerNotAvailableError(
                    f"broker {address} closed the connection during SASL authentication "
                    f"({exc})") from None
            if response.get("error_code"):
                from ..protocol.codec import raise_for_error

                raise_for_error(response, f"SASL {self.mechanism} with {address}")
            return response

        call(ApiKey.SASL_HANDSHAKE, {"mechanism": self.mechanism})
        if self.mechanism == "GSSAPI" and self.kerberos is not None:
            from .gssapi import GssapiInitiator

            service, domain, principal, keytab = self.kerberos
            gss = GssapiInitiator(principal, keytab, service,
                                  domain or address.rpartition(":")[0])
            token = gss.step(b"")
            while True:
                answer = bytes(call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
                               ["auth_bytes"])
                if gss.complete:
                    return
                token = gss.step(answer)
        username, password = self.username, self.password
        if username is None or password is None:
            raise InvalidConfigError(f"sasl_mechanism={self.mechanism} needs "
                                     "sasl_plain_username and sasl_plain_password")
        if self.mechanism == "PLAIN":
            token = b"\0" + username.encode() + b"\0" + password.encode()
            call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
            return
        from .scram import ScramClient, ScramError

        scram = ScramClient(self.mechanism, username, password)
        first = call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": scram.first()})
        try:
            final = scram.final(bytes(first["auth_bytes"]))
            last = call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": final})
            scram.verify(bytes(last["auth_bytes"]))
        except ScramError as exc:
            raise SaslAuthenticationFailedError(f"SCRAM with {address}: {exc}") from None


#: Kafka's Java client property -> kafka-python's config name
_JAVA_NAMES = {"security.protocol": "security_protocol",
               "ssl.truststore.location": "ssl_cafile",
               "ssl.keystore.location": "ssl_certfile",
               "ssl.key.password": "ssl_password",
               "sasl.mechanism": "sasl_mechanism"}


def security_properties(props: dict, *, what: str = "client properties",
                        strict: bool = True) -> dict:
    """Client security configs (kafka-python's names) from properties with Kafka's Java
    names (``security.protocol``, ``ssl.truststore.location`` of a PEM file,
    ``ssl.keystore.location`` of a PEM file with key and certificate,
    ``sasl.mechanism``, ``sasl.jaas.config`` with ``username="..." password="..."``,
    ``ssl.endpoint.identification.algorithm``) or kafka-python's dotted ones
    (``ssl.cafile``). With ``strict`` InvalidConfigError names an unknown key; else it
    is skipped."""
    import re

    out: dict[str, Any] = {}
    for key, value in props.items():
        value = str(value)
        if key == "sasl.jaas.config" and "Krb5LoginModule" in value:
            from .gssapi import parse_jaas

            out["sasl_kerberos_principal"], out["sasl_kerberos_keytab"] = parse_jaas(value)
        elif key == "sasl.jaas.config":
            found = dict(re.findall(r'(username|password)\s*=\s*"([^"]*)"', value))
            if "username" not in found or "password" not in found:
                raise InvalidConfigError(f'{what}: sasl.jaas.config needs username="..." '
                                         'and password="..."')
            out["sasl_plain_username"] = found["username"]
            out["sasl_plain_password"] = found["password"]
        elif key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = value.strip().lower() == "https"
        elif key in ("ssl.truststore.type", "ssl.keystore.type"):
            if value.strip().upper() != "PEM":
                raise InvalidConfigError(f"{what}: {key}={value}: only PEM files are "
                                         "supported")
        elif key in _JAVA_NAMES:
            out[_JAVA_NAMES[key]] = value
        elif key.replace(".", "_") in CLIENT_SECURITY_DEFAULTS:
            out[key.replace(".", "_")] = value
        elif strict:
            raise InvalidConfigError(f"{what}: unknown client property {key!r}")
    return out


__all__ = ["CLIENT_SECURITY_DEFAULTS", "ClientSecurity", "security_properties"]


class SerializedTLSSocket:
    """A TLS socket shared by a connection's reader thread and the threads sending its
    requests. OpenSSL's connection objects are not safe for a read and a write at the
    same time (a client whose reader took in the broker's TLS alert while a request was
    being written crashed with SIGSEGV), so every TLS operation here holds one lock.
    The reader waits for the socket to become readable outside the lock and then reads
    without blocking, so a record that carries no application data (a TLS 1.3 session
    ticket) never holds the lock while it waits for more."""

    def __init__(self, sock: ssl.SSLSocket):
        self._sock = sock
        self._lock = threading.Lock()
        self._timeout = sock.gettimeout()

    def recv_into(self, buffer, nbytes: int = 0) -> int:
        """Read up to ``nbytes`` decrypted bytes, waiting until some arrive (at most
        the socket's timeout, then TimeoutError as a socket's read raises)."""
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            with self._lock:
                self._sock.settimeout(0.0)
                try:
                    return self._sock.recv_into(buffer, nbytes)
                except (ssl.SSLWantReadError, BlockingIOError):
                    pass
                finally:
                    self._sock.settimeout(self._timeout)
            wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("timed out")
            select.select([self._sock], [], [], wait)

    def sendall(self, data) -> None:
        """Write all of ``data``."""
        with self._lock:
            self._sock.sendall(data)

    def settimeout(self, timeout) -> None:
        """The timeout of writes (reads wait for data as long as it takes)."""
        with self._lock:
            self._timeout = timeout
            self._sock.settimeout(timeout)

    def setsockopt(self, *args) -> None:
        """``socket.setsockopt`` of the underlying socket."""
        self._sock.setsockopt(*args)

    def fileno(self) -> int:
        """The socket's file descriptor (-1 once closed)."""
        return self._sock.fileno()

    def shutdown(self, how) -> None:
        """Shut the connection down without the lock: wakes a blocked write."""
        self._sock.shutdown(how)

    def close(self) -> None:
        """Close the socket once no TLS operation is running."""
        with self._lock:
            self._sock.close()
