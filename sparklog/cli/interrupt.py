"""Stopping a console tool as Kafka's do on SIGINT (Ctrl-C) and SIGTERM (what systemd,
docker and ``timeout`` send): the tool finishes the record it is on, commits or flushes
what it handled, leaves its group, and exits with 128 + the signal's number (130, 143),
as a JVM tool does after its shutdown hooks.

``with stop_signals() as stop:`` makes the first SIGINT or SIGTERM set ``stop.signal``
(the loop checks it); a second one raises KeyboardInterrupt, for a tool stuck waiting.
With ``interrupt=True`` the first one raises :class:`Stopped` (a KeyboardInterrupt
carrying the exit status), for a tool that waits on its input. Outside the main thread
(a tool called from a test's thread) signals are left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """Raised by a stop signal; ``exit_status`` is 128 + its number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.exit_status = 128 + signum


class StopRequest:
    """The first stop signal received (``signal``, None until then)."""

    def __init__(self, interrupt: bool = False):
        self.signal: int | None = None
        self.interrupt = interrupt

    def __bool__(self) -> bool:
        return self.signal is not None

    @property
    def exit_status(self) -> int:
        """128 + the signal's number (0 when none came)."""
        return 128 + self.signal if self.signal is not None else 0

    def handle(self, signum, frame) -> None:
        """The signal handler: record the first signal; a second one stops at once."""
        if self.signal is not None:
            raise KeyboardInterrupt  # the second one: stop now
        self.signal = signum
        if self.interrupt:
            raise Stopped(signum)


@contextlib.contextmanager
def stop_signals(interrupt: bool = False) -> Iterator[StopRequest]:
    """SIGINT and SIGTERM set the yielded :class:`StopRequest` (and with ``interrupt``
    raise :class:`Stopped`) while the block runs; the previous handlers come back
    after it."""
    stop = StopRequest(interrupt)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, stop.handle) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
