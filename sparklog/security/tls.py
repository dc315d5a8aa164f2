"""TLS contexts of listeners and clients, and the principal of a peer certificate.

Keys and certificates are PEM (``ssl.keystore.type=PEM``): ``ssl.keystore.location`` is a
PEM file holding the private key and the certificate chain (or
``ssl.keystore.key``/``ssl.keystore.certificate.chain`` hold them inline), encrypted
keys take ``ssl.key.password``; ``ssl.truststore.location`` (or
``ssl.truststore.certificates``) holds the CA certificates that client certificates
must chain to. JKS and PKCS12 stores are refused with a clear error (convert them with
``openssl pkcs12``/``keytool``). TLS 1.2 is the oldest protocol offered.
"""

from __future__ import annotations

import os
import ssl
import tempfile

from ..errors import InvalidConfigError
from .config import SecurityConfig
from .listeners import Listener

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _pem_type(config: SecurityConfig, key: str, listener) -> None:
    kind = config.get(key, listener).upper()
    if kind != "PEM":
        raise InvalidConfigError(
            f"{key}={kind}: only PEM stores are supported (convert a JKS or PKCS12 store "
            "to PEM files with keytool -importkeystore and openssl pkcs12)")


def _load_chain(ctx: ssl.SSLContext, certfile: str, keyfile: str | None, password: str,
                what: str) -> None:
    try:
        ctx.load_cert_chain(certfile, keyfile, password=password or None)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"{what}: cannot load the key and certificate chain from "
                                 f"{certfile}: {exc}") from None


def _inline_chain(ctx: ssl.SSLContext, chain: str, key: str, password: str, what: str) -> None:
    # the ssl module loads key material from files only: a private temporary file,
    # removed at once
    fd, path = tempfile.mkstemp(prefix="sparklog-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.replace("\\n", "\n") + "\n" + chain.replace("\\n", "\n") + "\n")
        _load_chain(ctx, path, None, password, what)
    finally:
        os.unlink(path)


def server_context(config: SecurityConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener (InvalidConfigError names the
    missing or unreadable setting)."""
    what = f"listener {listener.name}"
    _pem_type(config, "ssl.keystore.type", listener)
    _pem_type(config, "ssl.truststore.type", listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # no TLS 1.3 session tickets: no message arrives after the handshake, so a client
    # may read its socket in one thread while writing it in another (the clients'
    # BrokerConnection does) without the two touching the TLS state together
    ctx.num_tickets = 0
    ctx.options |= ssl.OP_NO_TICKET
    versions = [v.strip() for v in config.get("ssl.enabled.protocols", listener).split(",")
                if v.strip()]
    bad = [v for v in versions if v not in _VERSIONS]
    if bad or not versions:
        raise InvalidConfigError(f"ssl.enabled.protocols={versions}: sparklog offers "
                                 f"{', '.join(_VERSIONS)} only")
    ctx.minimum_version = min(_VERSIONS[v] for v in versions)
    ctx.maximum_version = max(_VERSIONS[v] for v in versions)
    ciphers = config.get("ssl.cipher.suites", listener)
    if ciphers:
        try:
            ctx.set_ciphers(ciphers.replace(",", ":"))
        except ssl.SSLError as exc:
            raise InvalidConfigError(f"ssl.cipher.suites={ciphers!r}: {exc}") from None
    password = config.get("ssl.key.password", listener) \
        or config.get("ssl.keystore.password", listener)
    location = config.get("ssl.keystore.location", listener)
    inline = config.get("ssl.keystore.certificate.chain", listener)
    if location:
        _load_chain(ctx, location, None, password, what)
    elif inline:
        _inline_chain(ctx, inline, config.get("ssl.keystore.key", listener), password, what)
    else:
        raise InvalidConfigError(f"{what} is {listener.protocol}: set ssl.keystore.location "
                                 "(a PEM file with the private key and certificate chain)")
    auth = config.get("ssl.client.auth", listener).lower()
    trust = config.get("ssl.truststore.location", listener)
    trusted = config.get("ssl.truststore.certificates", listener)
    try:
        if trust:
            ctx.load_verify_locations(cafile=trust)
        elif trusted:
            ctx.load_verify_locations(cadata=trusted.replace("\\n", "\n"))
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"{what}: cannot load the truststore: {exc}") from None
    if auth != "none" and not (trust or trusted):
        raise InvalidConfigError(f"{what}: ssl.client.auth={auth} needs a truststore "
                                 "(ssl.truststore.location) to verify client certificates")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[auth]
    return ctx


def client_context(cafile: str | None = None, certfile: str | None = None,
                   keyfile: str | None = None, password: str | None = None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """A client's TLS context: the broker's certificate must chain to ``cafile`` (only
    to it; the system's CAs when None) and, with ``check_hostname``, name the host connected to;
    ``certfile``/``keyfile`` are the client's own certificate (ssl.client.auth)."""
    from ..errors import InvalidArgumentError

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the peer, checks its name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if cafile:  # only that CA (kafka-python's ssl_cafile): the system's are not read
            ctx.load_verify_locations(cafile=cafile)
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if certfile:
            ctx.load_cert_chain(certfile, keyfile or None, password=password or None)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgumentError(f"ssl_cafile/ssl_certfile/ssl_keyfile: {exc}") from None
    ctx.check_hostname = bool(check_hostname)
    return ctx


def certificate_principal(cert: dict | None) -> str | None:
    """``User:<distinguished name>`` of a verified peer certificate in RFC 2253 order
    (``CN=alice,O=example``), Kafka's default SSL principal; None without one."""
    if not cert or not cert.get("subject"):
        return None
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "domainComponent": "DC", "emailAddress": "EMAILADDRESS"}
    parts = []
    for rdn in reversed(cert["subject"]):
        parts.append("+".join(f"{short.get(k, k)}={v.replace(',', chr(92) + ',')}"
                              for k, v in rdn))
    return "User:" + ",".join(parts)


__all__ = ["certificate_principal", "client_context", "server_context"]
