"""Fault injection points of an incremental job (for crash tests and drills).

Setting ``SPARKLOG_JOB_FAULT=<step>:<action>`` in a job's environment makes the job fail
at ``step`` -- one of :data:`STEPS` -- with ``action`` ``raise`` (an
:class:`InjectedFault` exception), ``kill`` (SIGKILL of the driver's JVM and Python
processes: no ``finally`` block, no shutdown hook runs, as when a YARN container is
lost) or ``pause`` (the step waits :data:`PAUSE_SECONDS`, then raises: a drill's window
for killing the job from outside, e.g. ``yarn application -kill`` mid-write). With the
variable
unset, a fault point costs one dictionary lookup.

The ``mid-write`` step fires inside a Spark task after it handed its first rows to the
Parquet writer, so part files are being written when the driver dies or the task fails.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "SPARKLOG_JOB_FAULT"

#: The steps of a run, in order.
STEPS = ("after-read", "mid-write", "after-files", "before-commit", "after-commit")
ACTIONS = ("raise", "kill", "pause")
#: How long a ``pause`` fault waits for the operator's kill before it raises.
PAUSE_SECONDS = 600


class InjectedFault(RuntimeError):
    """The failure a ``raise`` fault point throws (never raised unless requested)."""


def configured() -> tuple[str, str] | None:
    """The (step, action) requested by the environment, or None.

    An unknown step or action raises ValueError naming it, so a typo in a drill does
    not silently run a job without its fault.
    """
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return None
    step, _, action = spec.partition(":")
    action = action or "raise"
    if step not in STEPS or action not in ACTIONS:
        raise ValueError(f"{ENV_VAR}={spec!r}: expected <step>:<action> with step in "
                         f"{STEPS} and action in {ACTIONS}")
    return step, action


def driver_pids() -> list[int]:
    """The processes of this Spark driver: its JVM (when a SparkContext is active) and
    this Python process. Killing both is what losing the driver's container does; killing
    only the Python side would let the JVM shut down gracefully and tidy up."""
    pids = []
    try:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is not None:
            pids.append(int(sc._jvm.java.lang.ProcessHandle.current().pid()))
    except Exception:  # no pyspark, no JVM: only this process
        pass
    return pids + [os.getpid()]


def trigger(step: str, action: str, pids=None) -> None:
    """Fail now: raise InjectedFault, or SIGKILL ``pids`` (default: this driver's JVM
    and Python processes), in that order, or wait :data:`PAUSE_SECONDS` and raise."""
    if action == "pause":
        import time

        time.sleep(PAUSE_SECONDS)
    if action == "kill":
        for pid in pids or driver_pids():
            os.kill(pid, signal.SIGKILL)
    raise InjectedFault(f"injected fault at step {step!r}")


def fault_point(step: str) -> None:
    """Fail here if the environment asks for a fault at ``step`` (driver side)."""
    spec = configured()
    if spec is not None and spec[0] == step:
        trigger(*spec)


def with_mid_write_fault(df):
    """Return ``df`` unchanged unless a ``mid-write`` fault is configured; then a
    pass-through of it whose first task fails (or kills the driver) after yielding its
    first batch to the writer."""
    spec = configured()
    if spec is None or spec[0] != "mid-write":
        return df
    step, action = spec
    pids = driver_pids() if action == "kill" else None

    def passthrough(batches):
        from pyspark import TaskContext

        first = TaskContext.get().partitionId() == 0
        for batch in batches:
            yield batch
            if first:
                trigger(step, action, pids)
        if first:  # an empty first partition still fails
            trigger(step, action, pids)

    return df.mapInArrow(passthrough, df.schema)
