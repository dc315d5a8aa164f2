"""Loading a bench-only tracer into a broker *process* (never into the broker itself).

A tracer module of bench/ (``synctrace``, ``pathtrace``) has an ``install(out_path)``
that wraps a few of the broker's methods. :func:`preload_env` gives the environment
that makes a broker process call it at start-up: a ``sitecustomize`` module, written
to a directory of the bench's own, put on the process's ``PYTHONPATH``; the tracer
runs only when its environment variable names the file its results go to. A
:class:`~tests.support.brokerproc.BrokerProcess` started with ``env=`` this dict (and
any ``source``: the tracer wraps names every compared checkout has) is traced.
"""

from __future__ import annotations

import os
from pathlib import Path


def preload_env(work: Path, module: str, env_name: str, out_path: Path) -> dict:
    """The environment that makes a Python process ``import module`` (from bench/) and
    call its ``install(out_path)`` at start-up, through a ``sitecustomize`` in ``work``
    (a directory of its own per tracer); ``env_name`` is the tracer's switch."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "sitecustomize.py").write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        f"if os.environ.get({env_name!r}):\n"
        f"    import {module}\n"
        f"    {module}.install(os.environ[{env_name!r}])\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(work),
                                                          os.environ.get("PYTHONPATH")])),
            env_name: str(out_path)}
