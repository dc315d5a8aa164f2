"""The shell tools (``sparklog ...``) run as subprocesses, the way a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The repository's root: the tools run from it, with it on PYTHONPATH.
ROOT = Path(__file__).resolve().parents[2]


def sparklog(*args, stdin: bytes | None = None, bootstrap=None, timeout=60):
    """Run ``sparklog ARGS`` (with --bootstrap-server appended); returns the process."""
    cmd = [sys.executable, "-m", "sparklog.cli.main", *args]
    if bootstrap is not None:
        cmd += ["--bootstrap-server", bootstrap]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout, env=env,
                          cwd=str(ROOT))


def ok(proc) -> str:
    """The tool's standard output, once it exited 0 (else its standard error fails the
    test)."""
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()
