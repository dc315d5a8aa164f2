"""The CPU-heavy part of the broker's cleanings in helper processes.

In one CPython process a cleaner thread competes for the GIL with the broker's event
loop and partition writers, so a cleaning slows producing down. With
``log.cleaner.process.enable`` (sparklog's own setting, default true) the broker's
cleaner threads hand steps 2 and 3 of each cleaning (the key map, reading and rewriting
the segments: :func:`sparklog.log.cleaner.run_task`, a function of the partition's
files) to :class:`CleanerProcesses`, ``log.cleaner.threads`` helper processes started
(``spawn``) on the first cleaning and kept. A helper writes the cleaned segments
without their ``.index``; the broker's thread, which holds the partition's
maintenance lock throughout (one cleaner per partition at a time), commits them, swaps
them in and writes the cleaner checkpoint, as :func:`~sparklog.log.cleaner.clean`
does in one process.

A helper that dies (killed, out of memory) fails the cleaning it ran: it leaves only
uncommitted files, which the partition's next cleaning (or its recovery on open)
deletes, and a new helper is started for the next cleaning. A helper dies with the
broker (Linux's parent-death signal; a helper that finds its broker gone when it starts
exits), so a killed broker leaves no helper writing nor waiting.
Each helper opens its own FileIO on the broker's storage (same options) and throttles
its reads and writes to ``log.cleaner.io.max.bytes.per.second`` divided by the
threads.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..errors import SparklogError
from ..log.cleaner import CleaningTask, Throttle, run_task
from ..storage import open_fileio

log = logging.getLogger(__name__)

#: the helper's FileIO per (storage URI, options), opened on its first cleaning
_FILEIO: dict = {}
_PR_SET_PDEATHSIG = 1


def _init_helper(parent: int) -> None:
    """In a new helper: be killed when the broker thread that started it ends (the
    broker exits or is killed; Linux only, elsewhere a no-op). The signal is asked for
    only once the helper runs this, a second or more after it was started; a broker
    killed before that has already left it to another parent (init), which sends no
    signal, and the helper would wait for work forever, keeping the broker's resource
    tracker alive with it: so a helper whose parent is no longer ``parent`` (the
    broker's pid) exits at once."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _run(storage_uri: str, options: dict, rate: float | None, task: CleaningTask):
    """In a helper: run ``task`` on the storage's FileIO (see :func:`run_task`)."""
    key = (storage_uri, tuple(sorted(options.items())))
    fileio = _FILEIO.get(key)
    if fileio is None:
        fileio = _FILEIO[key] = open_fileio(storage_uri, **options)
    return run_task(fileio, task, Throttle(rate))


def _helper_pid() -> int:
    return os.getpid()


class CleanerProcesses:
    """Up to ``workers`` helper processes running cleanings on the storage at
    ``storage_uri`` (FileIO ``options``), each throttled to ``rate`` bytes a second
    (None: unlimited). Called with a :class:`~sparklog.log.cleaner.CleaningTask`, as
    :func:`~sparklog.log.cleaner.clean`'s ``worker``: blocks (without the GIL) until a
    helper ran it; SparklogError when the helper died meanwhile."""

    def __init__(self, storage_uri: str, options: dict | None = None, *, workers: int = 1,
                 rate: float | None = None):
        self.storage_uri = storage_uri
        self.options = dict(options or {})
        self.workers = workers
        self.rate = None if rate in (None, float("inf")) else rate
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise SparklogError("the log cleaner's helper processes are stopped")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_helper, initargs=(os.getpid(),))
            return self._pool

    def __call__(self, task: CleaningTask):
        pool = self._executor()
        try:
            return pool.submit(_run, self.storage_uri, self.options, self.rate, task).result()
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise SparklogError(
                f"partition {task.name}: the log cleaner's helper process died during the "
                f"cleaning ({exc}); its uncommitted files are deleted by the next "
                f"cleaning") from None

    def pid(self) -> int:
        """The process id of an idle helper (one is started if none runs)."""
        return self._executor().submit(_helper_pid).result()

    def close(self) -> None:
        """Stop the helpers (waiting for the cleanings they run)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
