"""A real broker *process* for tests: ``sparklog broker start`` on a loopback port.

::

    from .brokerproc import BrokerProcess

    with BrokerProcess(storage_root, log_path=tmp_path / "broker.log") as broker:
        conn = Connection(broker.address)          # "127.0.0.1:<port>"
        ...
        broker.kill()                               # SIGKILL, by pid
        broker.start()                              # restart on the same port
        assert broker.stop() == 0                   # SIGTERM, graceful; exit status

The first start listens on a free port chosen by the OS (no race: the port is read
from the broker's "listening on" line); restarts reuse it. ``extra_args`` are added to
the command line (``["--override", "log.segment.bytes=4096"]``), after
:data:`TEST_OVERRIDES` (``group.initial.rebalance.delay.ms=0``), which they may
override; ``env`` adds to (or, a
None value, removes from) the process's environment (``HADOOP_CONF_DIR``...); ``source``
runs the sparklog of another checkout (a benchmark's baseline). The broker's log
(stderr) goes to ``log_path`` (a temporary file if not given): :meth:`log_text` reads it.
Only the process this object started is ever signalled.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: given to every test broker process before its ``extra_args`` (which may override
#: them): no initial rebalance delay, as Kafka's own integration tests set it (a group's
#: first members would each wait Kafka's default 3 s for more)
TEST_OVERRIDES = ("--override", "group.initial.rebalance.delay.ms=0")


class BrokerProcess:
    """One broker subprocess (see the module docstring)."""

    def __init__(self, storage_uri: str, extra_args=(), *, log_path=None, port: int = 0,
                 start_timeout: float = 60.0, log_level: str = "INFO",
                 env: dict | None = None, source: str | Path | None = None):
        self.storage_uri = storage_uri
        self.source = Path(source) if source is not None else ROOT
        self.extra_args = list(extra_args)
        self.host = "127.0.0.1"
        self.port = port
        self.start_timeout = start_timeout
        self.log_level = log_level
        self.env = dict(env or {})
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="sparklog-broker-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        #: the storage root's local path, where a test set it (:meth:`in_temp` does)
        self.root: Path | None = None
        self._lines: list[str] = []

    @classmethod
    def in_temp(cls, tmp_path_factory, name: str, extra_args=()) -> "BrokerProcess":
        """A broker (not started) of a new temporary storage root named after ``name``
        (its path as ``.root``), logging beside it: a test module's broker."""
        root = tmp_path_factory.mktemp(name)
        proc = cls(root.as_uri(), extra_args, log_path=root.parent / f"{root.name}-broker.log")
        proc.root = root
        return proc

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>`` of the broker."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id while running."""
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        """The command line that starts the broker."""
        return [sys.executable, "-m", "sparklog.cli.main", "--log-level", self.log_level,
                "broker", "start", "--storage", self.storage_uri,
                "--listen", f"{self.host}:{self.port}", *TEST_OVERRIDES, *self.extra_args]

    def start(self) -> "BrokerProcess":
        """Start the process and wait until it answers ApiVersions."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"broker pid {self.proc.pid} is already running")
        log_file = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for key, value in self.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(self.source), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log_file,
                                     cwd=str(self.source), env=env, text=True)
        log_file.close()
        ready = threading.Event()
        found: dict = {}

        def read_stdout(proc=self.proc):
            for line in proc.stdout:
                self._lines.append(line)
                if " listening on " in line and "address" not in found:
                    found["address"] = line.rsplit(" ", 1)[1].strip()
                    ready.set()
            ready.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        if not ready.wait(self.start_timeout) or "address" not in found:
            self._abort()
            raise RuntimeError(f"broker did not start within {self.start_timeout}s "
                               f"(exit status {self.proc.poll()}); its log:\n{self.log_text()}")
        host, _, port = found["address"].rpartition(":")
        self.host, self.port = host, int(port)
        self._wait_serving()
        return self

    def _wait_serving(self) -> None:
        from sparklog.protocol import ApiKey, Connection

        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                with Connection(self.address, timeout=5) as conn:
                    conn.request(ApiKey.API_VERSIONS)
                return
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self._abort()
                    raise
                time.sleep(0.05)

    def _abort(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (graceful shutdown) and wait; return the exit status (None if it was
        not running). Kills it if it does not exit within ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"broker pid {self.proc.pid} ignored SIGTERM for {timeout}s;"
                                   f" killed. Its log:\n{self.log_text()}") from None
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> int | None:
        """SIGKILL (a crash: no flush, no sync, no lease release) and wait."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self.proc = None
        return code

    def restart(self) -> "BrokerProcess":
        """Graceful stop, then start again on the same port."""
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        """Everything the broker logged so far (all of its runs)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.running:
            self.stop()


_topic_names = itertools.count()


def topic_with(broker, partitions=1, **configs) -> str:
    """A new topic (``lim<n>``) on ``broker`` (a BrokerProcess with an ``admin``, as the
    ``sized`` fixture gives), with ``configs`` given as keyword arguments (``max_message_bytes``
    for ``max.message.bytes``); its name."""
    name = f"lim{next(_topic_names)}"
    broker.admin.create_topic(name, partitions, configs={k.replace("_", "."): v
                                                         for k, v in configs.items()})
    return name


def log_frames(broker, topic: str, partition: int = 0) -> list:
    """Headers of every frame in a partition's segment files on ``broker``'s storage (a
    BrokerProcess with a ``root`` path, as the ``metered_broker`` fixture gives), in
    offset order."""
    from sparklog.format.frame import iter_frames

    out = []
    for path in sorted(Path(broker.root, "topics", topic, str(partition)).glob("*.log")):
        out += [f.header for f in iter_frames(path.read_bytes(), verify_crc=False)]
    return out
