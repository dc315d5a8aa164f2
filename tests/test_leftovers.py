"""The test run's check for leftover processes (tests/support/leftovers.py): a session
whose test leaves a process pool running fails, naming the pool's process and the
test that started it, and the process is gone afterwards; a session that shuts its
pool down passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.processes import process_info

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SESSION = """
import concurrent.futures
import multiprocessing
import os

POOLS = []  # kept: a pool garbage-collected is shut down


def test_pool():
    pool = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"))
    POOLS.append(pool)
    assert pool.submit(os.getpid).result() != os.getpid()
    if os.environ.get("CLOSE_POOL"):
        pool.shutdown()
"""


def run_session(tmp_path, close: bool) -> subprocess.CompletedProcess:
    """A pytest session of :data:`SESSION` alone, with the check as its only plugin."""
    (tmp_path / "test_session.py").write_text(SESSION)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = dict(os.environ, PYTHONPATH=REPO, SPARKLOG_TEST_LEFTOVER_WAIT="1")
    env.pop("CLOSE_POOL", None)
    if close:
        env["CLOSE_POOL"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "tests.support.leftovers", "test_session.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_session_leaving_a_pool_running_fails_naming_it(tmp_path):
    run = run_session(tmp_path, close=False)
    assert run.returncode != 0, run.stdout
    assert "1 passed, 1 error" in run.stdout, run.stdout
    # one process named (under CI=true pytest repeats the whole message in its summary)
    found = sorted(set(re.findall(r"pid (\d+) \(parent \d+\), started during "
                                  r"test_session.py::test_pool \(call\): .*spawn_main",
                                  run.stdout)))
    assert len(found) == 1, run.stdout
    info = process_info(int(found[0]))
    assert info is None or info.state == "Z", info  # killed by the check


def test_a_session_that_shuts_its_pool_down_passes(tmp_path):
    run = run_session(tmp_path, close=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout and "error" not in run.stdout, run.stdout
