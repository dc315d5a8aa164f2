"""Processes a test session must not leave behind: multiprocessing children (spawn or
forkserver helpers, resource trackers, forks of the test process) still running when
the session's fixtures are all torn down.

Such a process outlives the run (its parent gone, it is left to init) when its owner
was never closed or was killed before its children knew it: a process pool nobody
shut down, a broker killed while its log cleaner's helper was starting. Each run
marks its environment with a token (:func:`mark_session`) that every process it starts
inherits, so the check finds them wherever they were reparented to, and only this
run's: other runs on the machine carry another token. The session fixture
:func:`no_leftover_processes` (autouse; this module is a plugin of tests/conftest.py)
marks the run and calls :func:`check_session` last.
"""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from .processes import ProcessInfo, all_processes
from .waiting import wait_until

#: the environment variable naming the test session a process was started by
SESSION_VAR = "SPARKLOG_TEST_SESSION"
#: seconds the check waits for leftovers that may still be on their way out (a helper
#: killed with its broker a moment before): a clean run pays nothing; the environment
#: variable ``SPARKLOG_TEST_LEFTOVER_WAIT`` overrides it
SETTLE_SECONDS = 15.0

_MULTIPROCESSING = ("multiprocessing.spawn import spawn_main", "multiprocessing.forkserver",
                    "multiprocessing.resource_tracker")


def mark_session() -> str:
    """Mark this process's environment (inherited by every process it starts from now
    on) with a new session token; returns it."""
    token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[SESSION_VAR] = token
    return token


def _is_resource_tracker(p: ProcessInfo) -> bool:
    return "multiprocessing.resource_tracker" in p.cmdline


def leftovers(token: str, root: int | None = None) -> list[tuple[ProcessInfo, str]]:
    """``(process, test that was running when it started)`` of every live process of
    session ``token`` that is a multiprocessing child (anywhere, parent alive or not)
    or a fork of the test process ``root`` (default: this one), except ``root``'s own
    resource tracker, which ends with ``root``."""
    root = os.getpid() if root is None else root
    procs = all_processes()
    me = next((p for p in procs if p.pid == root), None)
    found = []
    for p in procs:
        if p.pid == root or p.state == "Z":
            continue
        forked = me is not None and p.ppid == root and p.cmdline == me.cmdline
        if not forked and not any(m in p.cmdline for m in _MULTIPROCESSING):
            continue
        if p.ppid == root and _is_resource_tracker(p):
            continue
        env = p.environ()
        if env.get(SESSION_VAR) != token:
            continue
        found.append((p, env.get("PYTEST_CURRENT_TEST", "(no test running)")))
    return found


def check_session(token: str) -> None:
    """Wait (at most :data:`SETTLE_SECONDS`) until session ``token`` has no
    :func:`leftovers`; if some stay, SIGKILL each (by pid: this run started them) and
    raise AssertionError naming each, its parent and the test that started it."""
    settle = float(os.environ.get("SPARKLOG_TEST_LEFTOVER_WAIT", SETTLE_SECONDS))
    try:
        wait_until(lambda: not leftovers(token), timeout=settle, interval=0.25,
                   what="the test session's multiprocessing children to end")
    except AssertionError:
        stayed = leftovers(token)
        for p, _ in stayed:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if stayed:
            raise AssertionError(
                f"{len(stayed)} process(es) of this test session still running after "
                f"every fixture was torn down (now killed; an owner not closed, or killed "
                f"before its children could know):\n" + "\n".join(
                    f"  pid {p.pid} (parent {p.ppid}), started during {test}: "
                    f"{p.cmdline[:200]}" for p, test in stayed)) from None


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes():
    """Fails the run (an error at the teardown of its last test) when, once every other
    session fixture is torn down, a multiprocessing child this run started is still
    running: a process pool never shut down, a helper whose owner was killed before the
    helper could know (:func:`check_session` names each with the test that started it,
    and kills it). Set up before the fixtures tests request, so torn down after them."""
    token = mark_session()
    yield
    check_session(token)
