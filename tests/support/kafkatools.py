"""Kafka's long-running Java tools as background processes for tests: Kafka's
VerifiableProducer and VerifiableConsumer (JSON events on standard output, one a line)
and Kafka Connect standalone.

::

    tool = JavaTool("org.apache.kafka.tools.VerifiableConsumer", "--topic", "t", ...,
                    log_path=tmp_path / "consumer.log")
    wait_until(lambda: tool.events("partitions_assigned"), what="an assignment")
    tool.stop()                     # SIGTERM: the tool's shutdown hook runs (leaves the group)
    tool.events("records_consumed")  # every event of that name, in order

Standard output is read by a thread: lines that are JSON objects are events (``name``
their kind), the rest is kept as text. Standard error goes to ``log_path`` (its tail is
in every error). Only the process this object started is ever signalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading

from .kafkaserver import kafka_classpath
from .processes import file_tail, kill_process, stop_process


class JavaTool:
    """``java -cp <classpath> <main> <args>`` (Kafka's jars unless ``classpath`` is
    given) started at once; see the module docstring."""

    def __init__(self, main: str, *args: str, classpath: list[str] | None = None,
                 log_path=None, jvm_args=(), heap: str = "256m"):
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="kafka-tool-", suffix=".log")
            os.close(fd)
        self.log_path = str(log_path)
        self.main = main
        cp = os.pathsep.join(classpath if classpath is not None else kafka_classpath())
        with open(self.log_path, "ab") as log:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                ["java", f"-Xmx{heap}", *jvm_args, "-cp", cp, main, *args],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
        self._events: list[dict] = []
        self._text: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            event = None
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    pass
            with self._lock:
                if isinstance(event, dict):
                    self._events.append(event)
                else:
                    self._text.append(line)

    def events(self, name: str | None = None) -> list[dict]:
        """The JSON events read so far (those named ``name`` when given), in order."""
        with self._lock:
            return [e for e in self._events if name is None or e.get("name") == name]

    def text(self) -> str:
        """The non-JSON lines of standard output so far."""
        with self._lock:
            return "\n".join(self._text)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited(self) -> int | None:
        """The exit status once the process has ended (None while it runs)."""
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, n: int = 3000) -> str:
        """The last ``n`` characters of the tool's standard error."""
        return file_tail(self.log_path, n)

    def describe(self) -> str:
        """The tool, its status and the tails of both outputs (for failure messages)."""
        status = "running" if self.running else f"exited {self.exited()}"
        events = "\n".join(map(str, self.events()[-8:]))
        return (f"{self.main} ({status})\n--- last events\n{events}\n"
                f"--- stdout\n{self.text()[-2000:]}\n"
                f"--- stderr\n{self.log_tail()}")

    def stop(self, timeout: float = 60.0) -> bool:
        """SIGTERM (the tool's shutdown hook runs), SIGKILL after ``timeout``; then
        every line of its output is read. True when it ended by the SIGTERM or had
        exited 0 (a JVM ends with 143 after its shutdown hooks ran)."""
        stop_process(self.proc, timeout)
        self._reader.join(timeout=10)
        return self.exited() in (0, 143)

    def kill(self) -> None:
        """SIGKILL (no shutdown hook)."""
        kill_process(self.proc)
        self._reader.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
