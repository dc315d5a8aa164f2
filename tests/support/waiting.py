"""Polling helper shared by tests that wait for something another thread or process does.

Tests wait for a state, never for a time: ``wait_until`` returns as soon as the state
holds, so its bound only decides how long a failing test takes to say what it waited
for. The default bound is generous (a minute) because the suite must pass on a loaded
machine (two cores, other processes burning CPU), where a broker, a ZooKeeper session or
a Spark job may take many times longer than on an idle one; a test that asserts
something happens *quickly* says so with its own, explicit bound."""

from __future__ import annotations

import time

#: seconds ``wait_until`` waits by default (see the module docstring)
DEFAULT_WAIT = 60.0


def wait_until(cond, timeout: float = DEFAULT_WAIT, what: str = "condition", ignore=(),
               interval: float = 0.02, accept=bool):
    """Poll ``cond()`` every ``interval`` seconds until ``accept`` holds for its value
    (by default: until it is truthy), and return that value; raise AssertionError naming
    ``what`` after ``timeout`` seconds. Exceptions in ``ignore`` count as not accepted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = cond()
            accepted = accept(value)
        except ignore:
            accepted = False
        if accepted:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
