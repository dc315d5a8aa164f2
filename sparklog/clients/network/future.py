"""A small future with kafka-python's interface (``get``, ``add_callback``,
``add_errback``, ``succeeded``, ``failed``), completed by a client's I/O thread.

Callbacks run on the thread that completes the future (or at once, on the caller's
thread, when the future is already done); an exception raised by a callback is logged
and does not affect the future or the other callbacks.
"""

from __future__ import annotations

import logging
import threading

from ...errors import RequestTimedOutError

log = logging.getLogger(__name__)


class Future:
    """The result of an asynchronous operation: a value or an exception."""

    __slots__ = ("_event", "_value", "_exception", "_callbacks", "_errbacks", "_lock")

    def __init__(self):
        self._event = threading.Event()
        self._value = None
        self._exception = None
        self._callbacks = []
        self._errbacks = []
        self._lock = threading.Lock()

    # --- state ----------------------------------------------------------------------
    @property
    def is_done(self) -> bool:
        """True once the future has a value or an exception."""
        return self._event.is_set()

    def succeeded(self) -> bool:
        """True when done without an exception."""
        return self._event.is_set() and self._exception is None

    def failed(self) -> bool:
        """True when done with an exception."""
        return self._event.is_set() and self._exception is not None

    @property
    def value(self):
        """The value (None until done or if failed)."""
        return self._value

    @property
    def exception(self):
        """The exception (None unless failed)."""
        return self._exception

    # --- completion -----------------------------------------------------------------
    def success(self, value) -> "Future":
        """Complete with ``value`` and run the callbacks; a second completion is ignored."""
        with self._lock:
            if self._event.is_set():
                return self
            self._value = value
            self._event.set()
            callbacks, self._callbacks, self._errbacks = self._callbacks, [], []
        for fn in callbacks:
            _call(fn, value)
        return self

    def failure(self, exception: BaseException) -> "Future":
        """Complete with ``exception`` and run the errbacks; a second completion is ignored."""
        with self._lock:
            if self._event.is_set():
                return self
            self._exception = exception
            self._event.set()
            errbacks, self._callbacks, self._errbacks = self._errbacks, [], []
        for fn in errbacks:
            _call(fn, exception)
        return self

    # --- callbacks ------------------------------------------------------------------
    def add_callback(self, fn, *args, **kwargs) -> "Future":
        """Call ``fn(*args, value, **kwargs)`` on success."""
        call = (lambda v: fn(*args, v, **kwargs)) if args or kwargs else fn
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(call)
                return self
        if self._exception is None:
            _call(call, self._value)
        return self

    def add_errback(self, fn, *args, **kwargs) -> "Future":
        """Call ``fn(*args, exception, **kwargs)`` on failure."""
        call = (lambda e: fn(*args, e, **kwargs)) if args or kwargs else fn
        with self._lock:
            if not self._event.is_set():
                self._errbacks.append(call)
                return self
        if self._exception is not None:
            _call(call, self._exception)
        return self

    def add_both(self, fn, *args, **kwargs) -> "Future":
        """Call ``fn`` on success and on failure."""
        self.add_callback(fn, *args, **kwargs)
        self.add_errback(fn, *args, **kwargs)
        return self

    def chain(self, other: "Future") -> "Future":
        """Complete ``other`` the way this future completes."""
        self.add_callback(other.success)
        self.add_errback(other.failure)
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done or ``timeout`` seconds passed; True if done."""
        return self._event.wait(timeout)

    def get(self, timeout: float | None = None):
        """The value, waiting up to ``timeout`` seconds (None: forever).

        Raises the future's exception, or RequestTimedOutError when the wait times out.
        """
        if not self._event.wait(timeout):
            raise RequestTimedOutError(f"no result within {timeout} s")
        if self._exception is not None:
            raise self._exception
        return self._value


def _call(fn, arg) -> None:
    try:
        fn(arg)
    except Exception:  # a user callback must not break the I/O thread
        log.exception("callback %r raised", fn)
