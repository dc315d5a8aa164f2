"""A real Kerberos KDC for tests: Apache Hadoop's MiniKdc (an Apache Kerby KDC).

MiniKdc is a Java library from Maven Central (``sparklog.maven.classpath("minikdc")``,
resolved with ``mvn`` on first use: no system package, no root). :class:`Kdc` runs it in
a child process of its own (``python -m tests.support.kdc serve DIR LIFETIME``: a JVM
started through JPype, so the KDC's JVM-wide Kerberos settings never touch the test
process), listening on a free 127.0.0.1 TCP port with the realm ``EXAMPLE.COM``. The
child prints its realm, port and ``krb5.conf`` path once it serves, then takes one
command per line on stdin, ``keytab FILE PRINCIPAL...`` (create the principals with
random keys and write their keys to FILE), answering ``ok`` or ``error ...``. Closing
its stdin or SIGTERM stops it. Only the process this object started is ever signalled,
by pid.

API::

    kdc = Kdc(base_dir, ticket_lifetime=600).start()
    kdc.realm            # "EXAMPLE.COM"
    kdc.krb5_conf        # path of the krb5.conf naming this KDC (java.security.krb5.conf)
    kdc.keytab("broker.keytab", "sparklog", "HTTP/localhost")  # path of the new keytab
    kdc.principal("hdfs/localhost")   # "hdfs/localhost@EXAMPLE.COM"
    kdc.jvm_options()    # ["-Djava.security.krb5.conf=..."] for a JVM that uses it
    kdc.stop()

``python -m tests.support.kdc DIR`` (from the repository's root) starts one by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from .processes import ManagedProcess, file_tail

#: Seconds a ticket lives unless a test asks otherwise.
DEFAULT_TICKET_LIFETIME = 3600


def kdc_unavailable() -> str | None:
    """Why MiniKdc cannot run here (None when it can)."""
    import shutil

    if shutil.which("java") is None:
        return "java is not installed (scripts/ci-deps.sh installs a JDK)"
    try:
        import jpype  # noqa: F401
    except ImportError:
        return "JPype is not installed (the hdfs extra of sparklog)"
    try:
        from sparklog.maven import classpath

        classpath("minikdc", quiet=True)
    except Exception as exc:  # MavenError, or no network on the first resolution
        return f"Hadoop's MiniKdc could not be resolved from Maven: {exc}"
    return None


class Kdc(ManagedProcess):
    """A MiniKdc under ``base_dir`` (see the module docstring)."""

    stop_timeout = 10.0

    def __init__(self, base_dir: str, *, ticket_lifetime: int = DEFAULT_TICKET_LIFETIME):
        self.base_dir = os.path.abspath(base_dir)
        self.ticket_lifetime = int(ticket_lifetime)
        self.log_path = os.path.join(self.base_dir, "kdc.log")
        self.realm = ""
        self.port = 0
        self.krb5_conf = ""
        self._lock = threading.Lock()

    def start(self, timeout: float = 60.0) -> "Kdc":
        """Start the KDC process and wait until it serves (RuntimeError with its log
        otherwise)."""
        os.makedirs(self.base_dir, exist_ok=True)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.kdc", "serve", self.base_dir,
                 str(self.ticket_lifetime)],
                cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                text=True, start_new_session=True)
        timer = threading.Timer(timeout, self.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline() if self.proc else ""
        finally:
            timer.cancel()
        if not line.startswith("serving "):
            self.kill()
            raise RuntimeError(f"MiniKdc did not start within {timeout}s (said {line!r}); "
                               f"log:\n{file_tail(self.log_path, 3000)}")
        _, self.realm, port, self.krb5_conf = line.split()
        self.port = int(port)
        return self

    def principal(self, name: str) -> str:
        """``name@REALM``."""
        return f"{name}@{self.realm}"

    def keytab(self, file_name: str, *names: str) -> str:
        """Write the keys of principals ``names`` (without realm) to ``base_dir/file_name``,
        creating with random keys those that do not exist; returns the keytab's path."""
        path = os.path.join(self.base_dir, file_name)
        with self._lock:
            if self.proc is None or self.proc.stdin is None or self.proc.stdout is None:
                raise RuntimeError("the KDC is not running")
            self.proc.stdin.write(" ".join(["keytab", path, *names]) + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"MiniKdc could not create {names} in {path}: {answer!r}")
        return path

    def jvm_options(self) -> list[str]:
        """Java options of a JVM that authenticates with this KDC."""
        return [f"-Djava.security.krb5.conf={self.krb5_conf}"]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _export_keytab(kdc, path: str, names: list[str]) -> None:
    """Write the keys of principals ``names`` to the keytab at ``path``, creating those
    that do not exist yet: a principal another test of the same KDC made keeps its keys
    (MiniKdc's createPrincipal refuses an existing one)."""
    import jpype

    field = kdc.getClass().getDeclaredField("simpleKdc")  # MiniKdc's Kerby server
    field.setAccessible(True)
    server = field.get(kdc)
    kadmin = server.getKadmin()
    existing = {str(p) for p in kadmin.getPrincipals()}
    new = [n for n in names if f"{n}@{kdc.getRealm()}" not in existing]
    if new:
        server.createPrincipals(jpype.JArray(jpype.JString)(new))
    keytab = jpype.JClass("java.io.File")(path)
    if keytab.exists() and not keytab.delete():
        raise RuntimeError(f"cannot replace {path}")
    for name in names:
        kadmin.exportKeytab(keytab, name)


def _serve(base_dir: str, lifetime_s: int) -> None:
    """The KDC process: MiniKdc in this process's JVM, commands on stdin."""
    import jpype

    from sparklog.maven import classpath

    jpype.startJVM("-Xmx128m", "-Djava.net.preferIPv4Stack=true",
                   classpath=classpath("minikdc", quiet=True), convertStrings=True)
    mini = jpype.JClass("org.apache.hadoop.minikdc.MiniKdc")
    conf = mini.createConf()
    conf.setProperty("kdc.bind.address", "127.0.0.1")
    conf.setProperty("kdc.port", "0")
    conf.setProperty("max.ticket.lifetime", str(lifetime_s))  # seconds (Kerby's unit)
    conf.setProperty("max.renewable.lifetime", str(lifetime_s))
    work = jpype.JClass("java.io.File")(base_dir, "kdc")
    work.mkdirs()
    kdc = mini(conf, work)
    kdc.start()
    krb5 = os.path.join(base_dir, "krb5.conf")
    with open(str(kdc.getKrb5conf().getAbsolutePath())) as src, open(krb5, "w") as dst:
        dst.write(src.read())
    print(f"serving {kdc.getRealm()} {kdc.getPort()} {krb5}", flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if len(words) >= 3 and words[0] == "keytab":
                try:
                    _export_keytab(kdc, words[1], words[2:])
                    print("ok", flush=True)
                except (jpype.JException, RuntimeError) as e:
                    print(f"error {e}", flush=True)
            elif words:
                print(f"error unknown command {words[0]!r}", flush=True)
    finally:
        kdc.stop()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        _serve(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 2:
        from .processes import serve_until_interrupted

        k = Kdc(sys.argv[1]).start()
        print(f"KDC of realm {k.realm} on 127.0.0.1:{k.port}; krb5.conf: {k.krb5_conf}")
        try:
            serve_until_interrupted("KDC")
        finally:
            k.stop()
    else:
        sys.exit("usage: python -m tests.support.kdc DIR")
