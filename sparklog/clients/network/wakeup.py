"""A wake-up for a thread that waits on sockets: another thread makes a file
descriptor readable, which ends the wait (as Kafka's ``Selector.wakeup()``). The
producer's sender waits for the answers of its requests and for new batches at once,
in one :meth:`~sparklog.clients.network.network.NetworkClient.poll`, with one of these among the
descriptors waited on.
"""

from __future__ import annotations

import os


class Wakeup:
    """A readable-when-set file descriptor (Linux ``eventfd``). :meth:`set` and
    :meth:`clear` must be called under one lock (the caller's); a second :meth:`set`
    before :meth:`clear` costs nothing."""

    def __init__(self):
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._set = False

    def fileno(self) -> int:
        """The descriptor to wait on (-1 once closed)."""
        return self._fd

    def set(self) -> None:
        """Make the descriptor readable (ends a wait on it)."""
        if not self._set and self._fd >= 0:
            self._set = True
            os.eventfd_write(self._fd, 1)

    def clear(self) -> None:
        """Make the descriptor unreadable again."""
        if self._set:
            self._set = False
            try:
                os.eventfd_read(self._fd)
            except BlockingIOError:
                pass

    def close(self) -> None:
        """Release the descriptor."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
