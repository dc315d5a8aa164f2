"""Certificates made by the tests with the openssl command line: a CA, a broker
certificate for 127.0.0.1/localhost, client certificates, and a second CA nobody
trusts.

::

    from tests.support.tlscerts import make_pki

    pki = make_pki(tmp_path)          # pki.ca, pki.server (key + chain in one PEM),
    pki.client("alice")               # (certfile, keyfile) of CN=alice,O=sparklog
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr}")


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/O=sparklog tests/CN={name}", "-keyout", str(key), "-out", str(cert),
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return cert, key


def _signed(directory: Path, name: str, subject: str, ca: tuple[Path, Path],
            san: str | None = None, days: int = 2) -> tuple[Path, Path]:
    key, csr, cert = (directory / f"{name}.key", directory / f"{name}.csr",
                      directory / f"{name}.pem")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key),
             "-out", str(csr), cwd=directory)
    ext = directory / f"{name}.ext"
    ext.write_text("basicConstraints=CA:FALSE\n" + (f"subjectAltName={san}\n" if san else ""))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
             "-CAcreateserial", "-days", str(days), "-out", str(cert), "-extfile", str(ext),
             cwd=directory)
    return cert, key


@dataclass
class Pki:
    """The files of :func:`make_pki`."""

    directory: Path
    ca: Path                 # the trusted CA's certificate
    server: Path             # the broker's private key + certificate (one PEM)
    rogue_ca: Path           # a CA nobody trusts
    rogue_server: Path       # a broker certificate signed by it
    _ca_pair: tuple
    _rogue_pair: tuple

    def client(self, cn: str, *, rogue: bool = False) -> tuple[str, str]:
        """(certfile, keyfile) of a client certificate ``CN=<cn>,O=sparklog``."""
        cert, key = _signed(self.directory, f"client-{cn}{'-rogue' if rogue else ''}",
                            f"/O=sparklog/CN={cn}",
                            self._rogue_pair if rogue else self._ca_pair)
        return str(cert), str(key)


def make_pki(directory: Path) -> Pki:
    """A CA, a broker certificate (SAN 127.0.0.1, localhost) and a rogue CA."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    rogue = _ca(directory, "rogue-ca")
    san = "IP:127.0.0.1,DNS:localhost"
    bundles = []
    for name, pair in (("broker", ca), ("rogue-broker", rogue)):
        cert, key = _signed(directory, name, f"/O=sparklog/CN={name}", pair, san)
        bundle = directory / f"{name}-bundle.pem"
        bundle.write_text(key.read_text() + cert.read_text())
        bundle.chmod(0o600)
        bundles.append(bundle)
    return Pki(directory, ca[0], bundles[0], rogue[0], bundles[1], ca, rogue)
