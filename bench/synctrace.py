"""Bench-only tracer of a broker's acks=all path, stage by stage (never loaded by the
broker itself).

``bench_hdfs.py --part latency --trace`` starts each broker with :func:`preload_env`:
a ``sitecustomize`` module on the broker's ``PYTHONPATH`` that calls :func:`install`
before the broker starts. :func:`install` wraps a few methods that every checkout the
bench compares has (``PartitionWriter.submit``/``_append_batch``/``_answer``,
``PartitionLog.start_sync``, the segment streams' ``_push_parts_for_persist`` and
``_persist``) to time each stage, and writes a summary (JSON) when the process exits:

* ``residence``: a request's time in the broker, queued at its partition to answered;
* ``append``: one append batch (validation and the log append) and its requests;
* ``to_sync``: the first durable append since the last sync returning -> the next
  ``PartitionLog.start_sync`` (the hand-off from the append to the sync);
* ``push`` / ``hsync``: writing the buffered bytes into Hadoop's client, the hsync (on
  the local disk: the write and the fsync);
* ``to_answer``: hsync returned -> the answers of a durable batch on the event loop;
* ``bytes_per_sync``, ``syncs`` and their rate;
* ``gc``: the broker's own Python collections while it serves (each stops every Python
  thread of it), how many took over 5 ms by generation, and the full (generation 2)
  ones: their count and the longest.
"""

from __future__ import annotations

import atexit
import gc
import json
import sys
import threading
import time
from pathlib import Path

import preload

#: the environment variable naming the summary file (set only by the bench)
ENV = "SPARKLOG_BENCH_SYNCTRACE"


def _stats(values: list[float], scale: float = 1000.0) -> dict:
    if not values:
        return {"n": 0}
    s = sorted(values)
    n = len(s)
    return {"n": n, "p50": s[n // 2] * scale, "p99": s[min(n - 1, int(n * 0.99))] * scale,
            "mean": sum(s) / n * scale, "max": s[-1] * scale}


def time_collections(on_end) -> None:
    """Call ``on_end(generation, seconds)`` after each of this process's garbage
    collections from now on (``gc.callbacks``). ``on_end`` runs inside the collection:
    it must take no lock that the collected thread may hold."""
    started = [0.0]

    def watch(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        elif started[0]:
            on_end(info.get("generation"), time.perf_counter() - started[0])

    gc.callbacks.append(watch)


def install(out_path: str) -> None:
    """Wrap the broker's stages (see the module docstring); the summary goes to
    ``out_path`` at exit."""
    from sparklog.log.partition import PartitionLog
    from sparklog.server.partition import PartitionWriter
    from sparklog.storage.hdfs import HadoopOutputStream
    from sparklog.storage.local import LocalOutputStream

    now = time.perf_counter
    lock = threading.Lock()
    submitted: dict[int, float] = {}
    rec: dict[str, list] = {k: [] for k in (
        "residence", "append", "append_requests", "to_sync", "push", "hsync", "to_answer",
        "bytes_per_sync", "gc", "gc_full")}
    state = {"first_unsynced": None, "hsync_end": None, "start": None, "end": None,
             "pushed": {}}

    submit, append, answer = (PartitionWriter.submit, PartitionWriter._append_batch,
                              PartitionWriter._answer)
    start_sync = PartitionLog.start_sync
    handed = getattr(PartitionWriter, "_hand_to_sync", None)

    def t_submit(self, records, acks):
        fut = submit(self, records, acks)
        t = now()
        submitted[id(fut)] = t
        if state["start"] is None:
            state["start"] = t
        return fut

    def t_append(self, batch):
        t0 = now()
        durable = any(it.acks == -1 for it in batch)
        out = append(self, batch)
        t1 = now()
        with lock:
            rec["append"].append(t1 - t0)
            rec["append_requests"].append(len(batch))
            if durable and handed is None and state["first_unsynced"] is None:
                state["first_unsynced"] = t1
        return out

    def t_hand(self, *args):  # a checkout whose append hands batches to the sync itself
        with lock:
            if state["first_unsynced"] is None:
                state["first_unsynced"] = now()
        return handed(self, *args)

    def t_answer(self, batch, results):
        t = now()
        with lock:
            end = state["hsync_end"]
            if end is not None and any(it.acks == -1 for it in batch):
                rec["to_answer"].append(t - end)
            for it in batch:
                t0 = submitted.pop(id(it.future), None)
                if t0 is not None and not it.future.done():
                    rec["residence"].append(t - t0)
            state["end"] = t
        return answer(self, batch, results)

    def t_start_sync(self):
        t = now()
        with lock:
            first, state["first_unsynced"] = state["first_unsynced"], None
            if first is not None:
                rec["to_sync"].append(t - first)
        return start_sync(self)

    def traced(cls) -> None:
        """Time the segment syncs of stream class ``cls`` (push, then persist)."""
        push, persist = cls._push_parts_for_persist, cls._persist

        def t_push(self, parts):
            t0 = now()
            push(self, parts)
            if self.path.endswith(".log"):
                with lock:
                    rec["push"].append(now() - t0)

        def t_persist(self):
            if not self.path.endswith(".log"):
                return persist(self)
            before = state["pushed"].get(id(self), 0)
            covered = self._pushed
            t0 = now()
            persist(self)
            t1 = now()
            with lock:
                rec["hsync"].append(t1 - t0)
                rec["bytes_per_sync"].append(covered - before)
                state["pushed"][id(self)] = covered
                state["hsync_end"] = t1

        cls._push_parts_for_persist = t_push
        cls._persist = t_persist

    slow: dict = {}  # generation -> collections over 5 ms

    def t_gc(generation, took):
        if state["start"] is None:
            return  # start-up's collections are not serving's
        rec["gc"].append(took)  # no lock: the collected thread may hold it
        if took > 0.005:
            slow[generation] = slow.get(generation, 0) + 1
        if generation == 2:
            rec["gc_full"].append(took)

    time_collections(t_gc)
    PartitionWriter.submit = t_submit
    PartitionWriter._append_batch = t_append
    PartitionWriter._answer = t_answer
    if handed is not None:
        PartitionWriter._hand_to_sync = t_hand
    PartitionLog.start_sync = t_start_sync
    traced(HadoopOutputStream)
    traced(LocalOutputStream)  # a sanity run on the local disk (fsync)

    def dump() -> None:
        with lock:
            span = (state["end"] or 0) - (state["start"] or 0)
            summary = {k: _stats(v) for k, v in rec.items()
                       if k not in ("append_requests", "bytes_per_sync")}
            summary["append_requests"] = _stats(rec["append_requests"], 1.0)
            summary["bytes_per_sync"] = _stats(rec["bytes_per_sync"], 1.0)
            summary["syncs_per_s"] = len(rec["hsync"]) / span if span > 0 else 0.0
            summary["gc_over_5ms"] = {str(g): n for g, n in sorted(slow.items())}
        Path(out_path).write_text(json.dumps(summary))

    atexit.register(dump)


def preload_env(work: Path, out_path: Path) -> dict:
    """The environment that makes a broker process call :func:`install` at start-up
    (a ``sitecustomize`` module in ``work``: :func:`preload.preload_env`), its summary
    going to ``out_path``."""
    return preload.preload_env(work, "synctrace", ENV, out_path)


def summary_line(path: Path) -> str:
    """One line of the summary written to ``path`` (ms unless named otherwise)."""
    try:
        s = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"no trace ({exc})"

    def f(k, unit="ms"):
        v = s.get(k, {})
        if not v.get("n"):
            return f"{k} -"
        return f"{k} {v['p50']:.2f}/{v['p99']:.2f}{unit}"

    return (f"{f('residence')} | {f('append')} x{s['append_requests'].get('p50', 0):.0f} req | "
            f"{f('to_sync')} | {f('push')} | {f('hsync')} | {f('to_answer')} | "
            f"{s['bytes_per_sync'].get('p50', 0):.0f} B/sync, {s['syncs_per_s']:.0f} syncs/s "
            f"| {f('gc')} of {s.get('gc', {}).get('n', 0)}, over 5 ms by generation "
            f"{s.get('gc_over_5ms', {})}, full {s.get('gc_full', {}).get('n', 0)} "
            f"(longest {s.get('gc_full', {}).get('max', 0):.2f} ms) (p50/p99)")


if __name__ == "__main__":
    print(summary_line(Path(sys.argv[1])))
