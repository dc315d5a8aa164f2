"""Server processes started by test helpers (zkserver, kafkaserver): free loopback ports,
and stopping or killing exactly the process a helper started (by its Popen, never by
name)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
