"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and both sides of
the exchange.

A password is never stored: a :class:`ScramCredential` keeps the salt, the iteration
count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``, in Kafka's text form
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``. The server proves it
knows the credential (its signature), the client proves it knows the password (its
proof); every exchange has a fresh server nonce, so a recorded exchange cannot be
replayed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

from ..errors import InvalidArgumentError

#: mechanism -> hash name
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's bounds of the iteration count
MIN_ITERATIONS, MAX_ITERATIONS, DEFAULT_ITERATIONS = 4096, 16384, 4096


class ScramError(Exception):
    """An exchange failed; the message says why (for the server's log)."""


def _hash(mechanism: str) -> str:
    try:
        return HASHES[mechanism]
    except KeyError:
        raise InvalidArgumentError(f"unknown SCRAM mechanism {mechanism!r}; known: "
                                   f"{', '.join(HASHES)}") from None


def _hmac(name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, name).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, iterations)`` (PBKDF2 with the mechanism's HMAC)."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


@dataclass(frozen=True)
class ScramCredential:
    """What the broker keeps of a password (see the module docstring)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def create(cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
               salt: bytes | None = None) -> "ScramCredential":
        """A credential for ``password`` with a fresh random salt."""
        if not isinstance(password, str) or not password:
            raise InvalidArgumentError("a SCRAM password must be a non-empty string")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise InvalidArgumentError(f"SCRAM iterations={iterations} must be within "
                                       f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
        name = _hash(mechanism)
        salt = salt or os.urandom(32)
        salted = salted_password(mechanism, password, salt, iterations)
        client_key = _hmac(name, salted, b"Client Key")
        return cls(salt, hashlib.new(name, client_key).digest(),
                   _hmac(name, salted, b"Server Key"), iterations)

    def to_text(self) -> str:
        """Kafka's form: ``salt=...,stored_key=...,server_key=...,iterations=...``."""
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        """Parse :meth:`to_text`'s form (InvalidArgumentError when damaged)."""
        try:
            fields = dict(item.split("=", 1) for item in text.split(","))
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise InvalidArgumentError(f"damaged SCRAM credential ({exc})") from None

    def verify_password(self, mechanism: str, password: str) -> bool:
        """True when ``password`` is the one this credential was made from (PLAIN)."""
        name = _hash(mechanism)
        salted = salted_password(mechanism, password, self.salt, self.iterations)
        stored = hashlib.new(name, _hmac(name, salted, b"Client Key")).digest()
        return hmac.compare_digest(stored, self.stored_key)


def _attributes(message: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed {what}: attribute {item[:40]!r}")
        out.setdefault(key, value)
    return out


def _unescape(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name (a '=' not escaped as =2C or =3D)")
    return name.replace("=2C", ",").replace("=3D", "=")


def unknown_user_credential(mechanism: str, user: str, secret: bytes) -> ScramCredential:
    """The made-up credential of a user without one, so that an exchange does not tell
    which users exist: its salt is ``HMAC-SHA-256(secret, mechanism NUL user)`` (32
    bytes like a real salt, the same for a user at every broker of the cluster and
    after restarts when ``secret`` is the cluster's key, different per mechanism as
    real salts are), its iteration count :data:`DEFAULT_ITERATIONS`, its keys random
    (no password matches)."""
    salt = _hmac("sha256", secret, f"{mechanism}\0{user}".encode())
    size = hashlib.new(_hash(mechanism)).digest_size
    return ScramCredential(salt, os.urandom(size), os.urandom(size), DEFAULT_ITERATIONS)


class ScramServer:
    """The broker's side of one exchange. ``lookup(user)`` returns the user's
    :class:`ScramCredential` or None; an unknown user gets
    :func:`unknown_user_credential` (made up from ``secret``, the cluster's key) and
    fails at the end, after the same work as a wrong password."""

    def __init__(self, mechanism: str, lookup, secret: bytes):
        self.mechanism = mechanism
        self.name = _hash(mechanism)
        self.lookup = lookup
        self.secret = secret
        self.user: str | None = None
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._first_bare = self._server_first = self._nonce = ""

    def step(self, message: bytes) -> bytes:
        """Answer the client's next message; ScramError when the exchange fails."""
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("a SCRAM message is not UTF-8") from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise ScramError("the SCRAM exchange is already complete")

    def _first(self, text: str) -> bytes:
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y"):
            raise ScramError("malformed client-first message (channel binding is not "
                             "supported: the GS2 header must be 'n,,')")
        attrs = _attributes(bare, "client-first message")
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("client-first message without user name or nonce")
        self.user = _unescape(attrs["n"])
        if authzid and _unescape(authzid.removeprefix("a=")) != self.user:
            raise ScramError("an authorization id different from the user is not allowed")
        credential = self.lookup(self.user)
        self.user_known = credential is not None
        if credential is None:  # a made-up credential: the proof cannot match
            credential = unknown_user_credential(self.mechanism, self.user, self.secret)
        self._credential = credential
        self._nonce = attrs["r"] + base64.b64encode(os.urandom(24)).decode()
        self._first_bare = bare
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()}"
                              f",i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        self._state = "done"
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message without a proof")
        attrs = _attributes(without_proof, "client-final message")
        # Kafka's check (ScramSaslServer): the nonce ends with this exchange's. Older
        # librdkafka (2.0, Debian's kcat) puts its own nonce in front of it once more;
        # the proof covers the message as sent, so it still binds this exchange
        if not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("the client-final nonce is not this exchange's (a replayed "
                             "or forged exchange)")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            raise ScramError("the client proof is not base64") from None
        c = self._credential
        if c is None:
            raise ScramError("client-final message before the client-first message")
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.name, c.stored_key, auth)
        client_key = _xor(proof, signature)
        matches = hmac.compare_digest(hashlib.new(self.name, client_key).digest(),
                                      c.stored_key)  # computed for unknown users too
        if len(proof) != len(signature) or not self.user_known or not matches:
            raise ScramError("invalid credentials: wrong password or unknown user")
        server_signature = _hmac(self.name, c.server_key, auth)
        return b"v=" + base64.b64encode(server_signature)

    @property
    def complete(self) -> bool:
        """True once the client's proof was checked."""
        return self._state == "done"

    @property
    def authenticated_user(self) -> str:
        """The user whose proof was checked (ScramError before)."""
        if not self.complete or self.user is None:
            raise ScramError("the SCRAM exchange has not authenticated anyone yet")
        return self.user


class ScramClient:
    """The client's side: :meth:`first`, then :meth:`final` with the server's first
    message, then :meth:`verify` with the server's final message."""

    def __init__(self, mechanism: str, user: str, password: str):
        self.mechanism = mechanism
        self.name = _hash(mechanism)
        self.password = password
        escaped = user.replace("=", "=3D").replace(",", "=2C")
        self._nonce = base64.b64encode(os.urandom(24)).decode()
        self._first_bare = f"n={escaped},r={self._nonce}"
        self._auth = b""
        self._salted = b""

    def first(self) -> bytes:
        """The client-first message."""
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        """The client-final message (with the proof) answering ``server_first``."""
        text = server_first.decode()
        attrs = _attributes(text, "server-first message")
        if not attrs.get("r", "").startswith(self._nonce):
            raise ScramError("the server's nonce does not extend the client's")
        iterations = int(attrs["i"])
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"the server asked for {iterations} iterations (< {MIN_ITERATIONS})")
        self._salted = salted_password(self.mechanism, self.password,
                                       base64.b64decode(attrs["s"]), iterations)
        without_proof = f"c=biws,r={attrs['r']}"
        self._auth = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.name, self._salted, b"Client Key")
        stored = hashlib.new(self.name, client_key).digest()
        proof = _xor(client_key, _hmac(self.name, stored, self._auth))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature (ScramError when it does not know the
        credential: a broker impersonated)."""
        attrs = _attributes(server_final.decode(), "server-final message")
        if "e" in attrs:
            raise ScramError(f"the server refused: {attrs['e']}")
        expected = _hmac(self.name, _hmac(self.name, self._salted, b"Server Key"), self._auth)
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), expected):
            raise ScramError("the server's signature is wrong: it does not hold this "
                             "user's credential")


__all__ = ["HASHES", "ScramClient", "ScramCredential", "ScramError", "ScramServer",
           "salted_password", "unknown_user_credential"]
