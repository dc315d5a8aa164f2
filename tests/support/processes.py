"""Server processes started by test helpers (ZooKeeper, Kafka, the HDFS daemons): free
loopback ports, stopping or killing exactly the process a helper started (by its
Popen, never by name), and what /proc says of a process (:func:`process_info`,
:func:`child_processes`)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

#: ports for servers are chosen below the kernel's ephemeral range, from where the
#: ports of outgoing connections come: a port the OS handed out (``bind(0)``) and then
#: released could be taken by any test's next connection before the server binds it
#: (a NameNode once failed with "Address already in use" that way)
_SERVER_PORTS = (15000, 32000)
_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now, outside the ephemeral range (so no
    outgoing connection takes it before the server binds it) and not given before in
    this process."""
    low, high = _SERVER_PORTS[0], min(_SERVER_PORTS[1], _ephemeral_low())
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(low, high)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    with socket.socket() as s:  # a crowded range: let the OS choose
        s.bind((host, 0))
        return s.getsockname()[1]


def file_tail(path, n: int) -> str:
    """The last ``n`` characters of a server's log file ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace")
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGCONT (in case a test paused it) and SIGTERM ``proc``, SIGKILL after ``timeout``
    seconds, and reap it; nothing when it is None or already gone."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def kill_process(proc: subprocess.Popen | None) -> None:
    """SIGKILL ``proc`` (a crash) and reap it; nothing when it is None or already gone."""
    if proc is None or proc.poll() is not None:
        return
    proc.kill()
    proc.wait()


class ManagedProcess:
    """Owner of one server subprocess (``self.proc``, None while stopped)."""

    proc: subprocess.Popen | None = None
    #: seconds :meth:`stop` waits after SIGTERM before it SIGKILLs
    stop_timeout = 10.0

    @property
    def pid(self) -> int | None:
        """Process id while running."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the process (resumed first, in case a test paused it), SIGKILL it
        after ``timeout`` seconds (default ``stop_timeout``), and reap it."""
        proc, self.proc = self.proc, None
        stop_process(proc, self.stop_timeout if timeout is None else timeout)

    def kill(self) -> None:
        """SIGKILL the process (a crash: no shutdown hook) and reap it."""
        proc, self.proc = self.proc, None
        kill_process(proc)

    def pause(self) -> None:
        """SIGSTOP the process (its clients see no answer until it resumes)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused process."""
        os.kill(self.proc.pid, signal.SIGCONT)


def serve_until_interrupted(what: str) -> None:
    """Manual use of a fixture module (``python -m tests.support.zkserver``): say what runs, then
    wait until Ctrl-C."""
    print(f"{what}; Ctrl-C stops it", file=sys.stderr)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def context_switches(pid: int) -> int:
    """Voluntary context switches of process ``pid``'s main thread so far (Linux /proc;
    0 when it does not say): how often it waited (a blocking call) and was woken."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def _status_field(pid, name: str) -> int | None:
    """The first number of the ``name:`` line of /proc/<pid>/status (None if absent)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return None


def rss_bytes(pid) -> int:
    """Resident memory of process ``pid`` in bytes (0 when /proc does not say)."""
    kib = _status_field(pid, "VmRSS")
    return 0 if kib is None else kib * 1024


def threads_of(pid) -> int:
    """The thread count of process ``pid`` (``Threads:`` of /proc/<pid>/status)."""
    count = _status_field(pid, "Threads")
    if count is None:
        raise RuntimeError(f"no Threads line for pid {pid}")
    return count


@dataclass(frozen=True)
class ProcessInfo:
    """One process as /proc shows it: its id, its parent's, its state letter (``Z``: a
    zombie) and its command line (arguments joined by spaces)."""

    pid: int
    ppid: int
    state: str
    cmdline: str

    def environ(self) -> dict[str, str]:
        """The environment the process started with ({} when /proc does not show it)."""
        try:
            with open(f"/proc/{self.pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            return {}
        pairs = (item.decode("utf-8", "replace").partition("=")
                 for item in raw.split(b"\0") if item)
        return {k: v for k, _, v in pairs}


def process_info(pid: int) -> ProcessInfo | None:
    """Process ``pid`` from /proc (None when it is gone or /proc does not show it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    args = cmdline.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    return ProcessInfo(pid, int(fields[1]), fields[0], args)


def all_processes() -> list[ProcessInfo]:
    """Every process /proc shows (Linux)."""
    found = (process_info(int(e)) for e in os.listdir("/proc") if e.isdigit())
    return [p for p in found if p is not None]


def child_processes(pid: int) -> list[ProcessInfo]:
    """The processes whose parent is ``pid``, zombies left out."""
    return [p for p in all_processes() if p.ppid == pid and p.state != "Z"]
