"""A real ZooKeeper server for tests, plus a TCP proxy that can cut clients off it.

:class:`ZooKeeperServer` runs Debian's ZooKeeper (``/usr/share/java/zookeeper.jar``; its
manifest's Class-Path names the other jars it needs, plus an SLF4J binding) as
``java -cp ... org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`` on a free
127.0.0.1 port with a temporary dataDir, waits until it serves (``srvr`` names its
mode), and stops it by pid. When java or the jars are missing,
:func:`zookeeper_unavailable` says why and the fixtures skip with that reason
(``scripts/ci-deps.sh`` installs them on CI).

Fixtures (registered for every test by ``tests/conftest.py``'s ``pytest_plugins``):

* ``zookeeper_server`` (module scope): one server per test module.
* ``zookeeper``: a :class:`ZkEndpoint` on that server with a fresh chroot per test
  (``endpoint.connect`` is ``127.0.0.1:PORT/sparklog-test-<hex>``), so tests never see
  each other's nodes.

:class:`TcpProxy` forwards a local port to the server; ``cut()`` drops every connection
and refuses new ones (a network partition between one client and ZooKeeper), so a test
can make one broker's session expire while the others stay connected.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

import pytest

from .processes import ManagedProcess, file_tail, free_port, serve_until_interrupted
from .proxy import close_sockets

JAVA_DIR = "/usr/share/java"
ZOOKEEPER_JAR = os.path.join(JAVA_DIR, "zookeeper.jar")
# zookeeper.jar's manifest lists its dependencies except the logging binding
SLF4J_BINDINGS = ("slf4j-simple.jar", "slf4j-nop.jar", "slf4j-log4j12.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


def zookeeper_classpath() -> str | None:
    """The class path of Debian's ZooKeeper server, or None when the jars are missing."""
    if not os.path.isfile(ZOOKEEPER_JAR):
        return None
    parts = [ZOOKEEPER_JAR]
    for name in SLF4J_BINDINGS:
        path = os.path.join(JAVA_DIR, name)
        if os.path.isfile(path):
            parts.append(path)
            break
    return ":".join(parts)


def zookeeper_unavailable() -> str | None:
    """Why a ZooKeeper server cannot be started here (None when it can)."""
    if shutil.which("java") is None:
        return "java is not installed (scripts/ci-deps.sh installs Debian's zookeeper and a JRE)"
    if zookeeper_classpath() is None:
        return (f"{ZOOKEEPER_JAR} is missing: Debian's zookeeper package is not installed "
                "(scripts/ci-deps.sh installs it)")
    return None


def four_letter(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``, ``cons``...) and return
    the answer ('' if the server closed without one)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer(ManagedProcess):
    """One standalone ZooKeeper server process on 127.0.0.1.

    ``tick_time_ms`` is ZooKeeper's tickTime (sessions may last 2..``max_session_ms``).
    The data directory survives :meth:`stop`, so :meth:`start` again restarts the same
    server (same port, same data).
    """

    def __init__(self, data_dir: str, *, port: int | None = None, tick_time_ms: int = 200,
                 max_session_ms: int = 60000):
        reason = zookeeper_unavailable()
        if reason:
            raise RuntimeError(reason)
        self.data_dir = data_dir
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self.max_session_ms = max_session_ms
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(data_dir, "zookeeper.log")

    @property
    def hosts(self) -> str:
        """``host:port`` of the server (a ZooKeeper connect string without chroot)."""
        return f"{self.host}:{self.port}"

    def _write_config(self) -> str:
        os.makedirs(os.path.join(self.data_dir, "data"), exist_ok=True)
        cfg = os.path.join(self.data_dir, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write(
                f"tickTime={self.tick_time_ms}\n"
                f"dataDir={os.path.join(self.data_dir, 'data')}\n"
                f"clientPort={self.port}\n"
                f"clientPortAddress={self.host}\n"
                f"minSessionTimeout={2 * self.tick_time_ms}\n"
                f"maxSessionTimeout={self.max_session_ms}\n"
                "maxClientCnxns=0\n"
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=ruok,srvr,stat,cons,mntr\n"
                "forceSync=no\n")
        return cfg

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        """Start the server and wait until it serves: ``srvr`` names its mode. (``ruok``
        answers ``imok`` as soon as the port listens, while a session request is still
        refused with "ZooKeeperServer not running" until the database is loaded.)"""
        if self.pid is not None:
            return self
        cfg = self._write_config()
        cmd = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-Dzookeeper.admin.enableServer=false",
               "-cp", zookeeper_classpath(), MAIN_CLASS, cfg]
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            try:
                if "Mode:" in four_letter(self.host, self.port, "srvr", 1.0):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not answer on {self.hosts} within {timeout}s: "
                           f"{self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        """The last ``n`` characters of the server's log."""
        return file_tail(self.log_path, n)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@dataclass
class ZkEndpoint:
    """A server plus a chroot private to one test: ``connect`` is the full connect
    string (``host:port/chroot``), ``hosts`` the part before the chroot."""

    server: ZooKeeperServer
    chroot: str

    @property
    def hosts(self) -> str:
        """``host:port`` of the server."""
        return self.server.hosts

    @property
    def connect(self) -> str:
        """The connect string with this test's chroot."""
        return self.server.hosts + self.chroot

    def client(self, session_timeout_ms: int = 10000):
        """A started kazoo client inside the chroot (caller stops it)."""
        from sparklog.coordination.zkclient import connect_zk

        return connect_zk(self.connect, session_timeout_ms=session_timeout_ms,
                          create_layout=False)


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target`` (host, port) on threads.

    ``cut()`` closes every open connection and refuses new ones until ``restore()``:
    a network partition between the proxied clients and the target. ``silence()`` is a
    lost host instead: open connections stay open but nothing passes either way, and
    new ones are accepted and never answered (no reset, no data), until ``restore()``.
    """

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._silent = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"tcp-proxy-{self.port}")
        self._thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:port`` of the proxy."""
        return f"127.0.0.1:{self.port}"

    def _accept(self):
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            if self._silent.is_set():  # accepted by the "kernel", never answered
                with self._lock:
                    self._conns.append(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket):
        try:
            while True:
                data = src.recv(65536)
                if not data or self._cut.is_set():
                    break
                if not self._silent.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self._cut.set()
        with self._lock:
            conns, self._conns = self._conns, []
        close_sockets(conns)

    def silence(self) -> None:
        """Forward nothing and answer nothing, closing nothing: a lost host."""
        self._silent.set()

    def restore(self) -> None:
        """Accept and forward connections again."""
        self._cut.clear()
        self._silent.clear()

    def close(self) -> None:
        """Stop the proxy and close everything."""
        self._closed.set()
        self.cut()
        self._listener.close()


@pytest.fixture(scope="module")
def zookeeper_server(tmp_path_factory):
    """One real ZooKeeper server per test module that uses it (skips with the reason
    when it cannot start here); it stops when the module's tests are done, so no JVM
    waits idle for the end of the run."""
    reason = zookeeper_unavailable()
    if reason:
        pytest.skip(reason)
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")))
    try:
        server.start()
    except RuntimeError as exc:
        pytest.skip(f"ZooKeeper server did not start: {exc}")
    yield server
    server.stop()


@pytest.fixture
def zookeeper(zookeeper_server):
    """A :class:`ZkEndpoint` with a fresh chroot on the run's ZooKeeper server."""
    return ZkEndpoint(zookeeper_server, f"/sparklog-test-{uuid.uuid4().hex[:12]}")


if __name__ == "__main__":  # manual use: python -m tests.support.zkserver -> runs until Ctrl-C
    with ZooKeeperServer(tempfile.mkdtemp(prefix="sparklog-zk-")) as zk:
        serve_until_interrupted(f"ZooKeeper on {zk.hosts} (pid {zk.pid})")
