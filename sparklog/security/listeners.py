"""Listeners: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map`` as Kafka parses them.

``listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093`` opens two sockets; a
listener's name is its security protocol unless ``listener.security.protocol.map``
maps custom names (``INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL``). A bare ``host:port`` (the
form sparklog accepted before listeners had names) is a PLAINTEXT listener. A listener
bound to a wildcard (``0.0.0.0``, ``::``, no host) with no ``advertised.listeners`` entry
is advertised by this host's canonical name, as Kafka does (:func:`canonical_host_name`).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass

from ..errors import InvalidConfigError

log = logging.getLogger(__name__)

#: addresses that mean "every interface": a broker may listen on them, never advertise them
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "0:0:0:0:0:0:0:0", ""})

#: Kafka's security protocols
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Listener:
    """One listener: its ``name``, security ``protocol``, the address it binds and the
    address clients are told (``advertised.listeners``, else the bound one)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str = ""
    advertised_port: int = -1

    @property
    def tls(self) -> bool:
        """True when connections are encrypted (SSL, SASL_SSL)."""
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """True when clients must authenticate with SASL before any other request."""
        return self.protocol.startswith("SASL_")

    @property
    def loopback(self) -> bool:
        """True when bound to a loopback address (reachable from this machine only)."""
        try:
            return ipaddress.ip_address(self.host.split("%")[0]).is_loopback
        except ValueError:
            return self.host == "localhost"


def canonical_host_name(listeners: str, name: str | None = None) -> str:
    """The name a broker advertises for a listener bound to a wildcard address when
    ``advertised.listeners`` does not name one: this host's canonical (fully qualified)
    name, as Kafka's ``InetAddress.getLocalHost().getCanonicalHostName()`` (``name``: the
    name to check instead of ``socket.getfqdn()``'s). It must resolve to an address that
    is not itself a wildcard; else InvalidConfigError says so and names
    ``advertised.listeners``, the setting that avoids the look-up."""
    import socket

    name = socket.getfqdn() if name is None else name
    problem = ""
    if not name or name in WILDCARD_HOSTS:
        problem = "this host has no canonical name"
    else:
        try:
            found = {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
        except (OSError, UnicodeError) as exc:
            problem = f"this host's canonical name {name!r} does not resolve ({exc})"
        else:
            if not found - WILDCARD_HOSTS:
                problem = (f"this host's canonical name {name!r} resolves to no usable "
                           f"address ({', '.join(sorted(found)) or 'none'})")
    if problem:
        raise InvalidConfigError(
            f"listeners={listeners!r} binds every interface, so the broker would advertise "
            f"this host's canonical name, but {problem}: set advertised.listeners to an "
            "address clients can reach, e.g. PLAINTEXT://broker1.example.com:9092")
    return name


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` into a dict; the four protocols always map to themselves."""
    out = {p: p for p in PROTOCOLS}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _NAME.fullmatch(name) or protocol not in PROTOCOLS:
            raise InvalidConfigError(
                f"listener.security.protocol.map entry {item!r} is not NAME:PROTOCOL with "
                f"PROTOCOL one of {', '.join(PROTOCOLS)}")
        out[name] = protocol
    return out


def _parse_entries(key: str, text: str, protocols: dict[str, str]) -> list[tuple]:
    from ..protocol.connection import parse_address

    entries = []
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        name, sep, address = item.partition("://")
        if not sep:
            name, address = "PLAINTEXT", item
        name = name.strip().upper()
        if name not in protocols:
            raise InvalidConfigError(
                f"{key}: listener {name!r} has no security protocol: add it to "
                "listener.security.protocol.map (NAME:PROTOCOL) or use one of "
                f"{', '.join(PROTOCOLS)}")
        host = address.rpartition(":")[0].strip("[]")
        try:
            parsed_host, port = parse_address(address if host else "0.0.0.0" + address)
        except Exception as exc:
            raise InvalidConfigError(f"{key}={text!r}: {exc}") from None
        entries.append((name, parsed_host, port))
    names = [e[0] for e in entries]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"{key}={text!r}: each listener name may appear once")
    return entries


def parse_listeners(listeners: str, advertised: str = "", protocol_map: str = ""
                    ) -> list[Listener]:
    """The listeners of the broker properties (InvalidConfigError names the problem)."""
    protocols = parse_protocol_map(protocol_map)
    bound = _parse_entries("listeners", listeners, protocols)
    if not bound:
        raise InvalidConfigError("listeners is empty: name at least one (PLAINTEXT://host:port)")
    told = {name: (host, port) for name, host, port in
            _parse_entries("advertised.listeners", advertised, protocols)}
    unknown = set(told) - {name for name, _, _ in bound}
    if unknown:
        raise InvalidConfigError(f"advertised.listeners names {sorted(unknown)}, which "
                                 "listeners does not define")
    return [Listener(name, protocols[name], host, port, *told.get(name, ("", -1)))
            for name, host, port in bound]


__all__ = ["Listener", "PROTOCOLS", "WILDCARD_HOSTS", "canonical_host_name", "parse_listeners", "parse_protocol_map"]
