"""The subprocess of a test server (ZooKeeper, an HDFS daemon), ended only by its pid."""

from __future__ import annotations

import os
import signal
import subprocess


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
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            proc.wait(self.stop_timeout if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL the process (a crash: no shutdown hook) and reap it."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        """SIGSTOP the process (its clients see no answer until it resumes)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused process."""
        os.kill(self.proc.pid, signal.SIGCONT)
