"""Polling helper shared by tests that wait for something another thread or process does."""

from __future__ import annotations

import time


def wait_until(cond, timeout: float = 10.0, what: str = "condition", ignore=()):
    """Poll ``cond()`` until it returns a truthy value (returned), raising AssertionError
    naming ``what`` after ``timeout`` seconds; exceptions in ``ignore`` count as falsy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = cond()
        except ignore:
            value = None
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
