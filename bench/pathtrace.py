"""Bench-only tracer of a broker's produce->fetch path, stage by stage (never loaded by
the broker itself).

``bench_latency_stages.py`` starts its broker with :func:`preload_env` (a
``sitecustomize`` on the broker's ``PYTHONPATH``, :mod:`preload`), which calls
:func:`install` before the broker starts. :func:`install` wraps names every checkout
the bench compares has (the receiver's ``buffer_updated``, the connection module's
``decode_request_header`` and ``encode_response_parts``, ``Broker.handle``,
``PartitionWriter.submit`` / ``_append_batch`` / ``_answer`` / ``data_waiter`` /
``wake_fetchers``, ``RecordApis._fetch_once``) and the event loop's ``_run_once``, and
writes every traced request (JSON) when the process exits. Nothing of it exists in a
broker started without the bench's environment: the broker pays nothing for it. A
traced broker does pay (a few microseconds per stamp, a call more per turn of its
loop): read its steps and turns, and take latencies without it from
``bench_latency.py``.

Each stamp is ``[time.monotonic_ns(), loop turn, thread]``: the clock every process
of a host shares (the bench's records carry their ``send()`` time on the same clock),
the number of the event loop's turn (``_run_once`` calls: a difference of turns is
the event-loop hops between two stages), and ``"loop"`` or ``"io"`` (an I/O thread).
A request is identified by the send() stamp of the first record it carries (the
bench's values start with it: :data:`STAMP`, then :data:`PAD`).

Produce stages: ``rx`` (its last bytes received, in the socket's callback), ``read``
(its header decoded by the connection's read loop), ``handler`` (its handler task
starts), ``queued`` (handed to the partition's writer: ``submit()`` called),
``append`` / ``appended`` (the append's start and end, on the loop or an I/O thread),
``acked`` (its answer set: the writer answers the request), ``answer`` (the handler
returned the response), ``written`` (the response encoded, in the step that writes it
to the socket).
Fetch stages (the Fetch whose response carries the record): ``woken`` (the append's
``wake_fetchers`` completed its waiter), ``resumed`` (its handler's pass after the
wake-up), ``answer``, ``written``; ``from_storage`` is set when its records were read
from a segment (sendfile) rather than the tail cache.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import struct
import threading
import time
from pathlib import Path

import preload

#: the environment variable naming the trace file (set only by the bench)
ENV = "SPARKLOG_BENCH_PATHTRACE"
#: a latency record's value: its send() time (monotonic ns), then padding
STAMP = struct.Struct(">q")
PAD = b"p" * (100 - STAMP.size)


def first_stamp(data) -> int | None:
    """The send() stamp of the first latency record in frame bytes ``data``, or None."""
    data = bytes(data)
    at = data.find(PAD)
    if at < 0:
        return None
    # the stamp's low bytes may be "p" too: the padding is the run's last len(PAD)
    # bytes (the next stamp starts with a zero byte: monotonic ns are far below 2**56)
    end = at + len(PAD)
    while end < len(data) and data[end] == PAD[0]:
        end += 1
    at = end - len(PAD)
    return STAMP.unpack_from(data, at - STAMP.size)[0] if at >= STAMP.size else None


def install(out_path: str) -> None:
    """Wrap the broker's stages (module docstring); the trace goes to ``out_path`` at
    exit."""
    import asyncio.base_events

    from sparklog.protocol.apis import ApiKey
    from sparklog.protocol.codec import FileRegion
    from sparklog.server import server
    from sparklog.server.broker import Broker
    from sparklog.server.partition import PartitionWriter
    from sparklog.server.receiver import RequestReceiver
    from sparklog.server.records_api import RecordApis

    now = time.monotonic_ns
    lock = threading.Lock()
    turn = [0]
    loop_thread = [None]
    requests: list[dict] = []          # every traced request, in order of arrival
    current: contextvars.ContextVar = contextvars.ContextVar("pathtrace_request", default=None)
    pending: dict[int, list] = {}      # id(payload or header) -> stamps before handle()
    by_response: dict[int, dict] = {}  # id(response dict) -> its request
    by_future: dict = {}               # produce future or fetch waiter -> its request

    def stamp() -> list:
        ident = threading.get_ident()
        return [now(), turn[0], "loop" if ident == loop_thread[0] else "io"]

    run_once = asyncio.base_events.BaseEventLoop._run_once

    def t_run_once(self):
        if loop_thread[0] is None:
            loop_thread[0] = threading.get_ident()
        turn[0] += 1
        return run_once(self)

    buffer_updated = RequestReceiver.buffer_updated
    read_exact = RequestReceiver.read_exact

    def t_buffer_updated(self, nbytes):
        self._pathtrace_rx = stamp()
        return buffer_updated(self, nbytes)

    async def t_read_exact(self, n, *args, **kwargs):
        payload = await read_exact(self, n, *args, **kwargs)
        rx = getattr(self, "_pathtrace_rx", None)
        if rx is not None:
            pending[id(payload)] = [rx]
        return payload

    decode_header = server.decode_request_header

    def t_decode_header(payload, *args, **kwargs):
        out = decode_header(payload, *args, **kwargs)
        got = pending.pop(id(payload), None)
        if got is not None:
            pending[id(out[0])] = got + [stamp()]
        return out

    handle = Broker.handle

    async def t_handle(self, header, payload, position, ctx):
        got = pending.pop(id(header), None)
        if header.api_key not in (ApiKey.PRODUCE, ApiKey.FETCH):
            return await handle(self, header, payload, position, ctx)
        req = {"api": "produce" if header.api_key == ApiKey.PRODUCE else "fetch",
               "stamp": None, "t": {}, "futures": []}
        if got is not None:
            req["t"]["rx"], req["t"]["read"] = got
        req["t"]["handler"] = stamp()
        current.set(req)
        response = await handle(self, header, payload, position, ctx)
        req["t"]["answer"] = stamp()
        for fut in req.pop("futures"):
            by_future.pop(fut, None)
        if response is not None:
            by_response[id(response)] = req
        with lock:
            requests.append(req)
        return response

    encode = server.encode_response_parts

    def t_encode(correlation_id, body, *args, **kwargs):
        out = encode(correlation_id, body, *args, **kwargs)
        req = by_response.pop(id(body), None)
        if req is not None:
            req["t"]["written"] = stamp()
            if req["api"] == "fetch":
                for topic in body.get("topics", ()):
                    for p in topic.get("partitions", ()):
                        records = p.get("records")
                        if isinstance(records, FileRegion):
                            req["from_storage"] = True
                            with open(records.path, "rb") as f:
                                f.seek(records.offset)
                                records = f.read(min(records.size, 1 << 16))
                        if records and req["stamp"] is None:
                            req["stamp"] = first_stamp(records)
        return out

    submit = PartitionWriter.submit

    submitting = [None]  # the request whose submit() runs (it may append on the spot)

    def t_submit(self, records, acks):
        req = current.get()
        if req is not None:
            req["t"]["queued"] = stamp()
            if req["stamp"] is None:
                req["stamp"] = first_stamp(records)
        submitting[0] = req
        try:
            fut = submit(self, records, acks)
        finally:
            submitting[0] = None
        if req is not None:
            by_future[fut] = req
            req["futures"].append(fut)
        return fut

    def request_of(item) -> dict | None:
        req = by_future.get(item.future)
        if req is None and threading.get_ident() == loop_thread[0]:
            req = submitting[0]
        return req

    append_batch = PartitionWriter._append_batch

    def t_append(self, batch):
        began = stamp()
        out = append_batch(self, batch)
        ended = stamp()
        for item in batch:
            req = request_of(item)
            if req is not None:
                req["t"]["append"], req["t"]["appended"] = began, ended
        return out

    answer = PartitionWriter._answer

    def t_answer(self, batch, results):
        t = stamp()
        for item in batch:
            req = request_of(item)
            if req is not None and "acked" not in req["t"]:
                req["t"]["acked"] = t
        return answer(self, batch, results)

    data_waiter = PartitionWriter.data_waiter

    def t_data_waiter(self, *args, **kwargs):
        fut = data_waiter(self, *args, **kwargs)
        req = current.get()
        if req is not None:
            by_future[fut] = req
            req["futures"].append(fut)
        return fut

    wake = PartitionWriter.wake_fetchers

    def t_wake(self):
        t = stamp()
        for fut in self._waiters:
            req = by_future.get(fut)
            if req is not None and not fut.done():
                req["t"]["woken"] = t
        return wake(self)

    fetch_once = RecordApis._fetch_once

    async def t_fetch_once(self, body, ctx):
        req = current.get()
        if req is not None and "woken" in req["t"]:
            req["t"]["resumed"] = stamp()
        return await fetch_once(self, body, ctx)

    asyncio.base_events.BaseEventLoop._run_once = t_run_once
    RequestReceiver.buffer_updated = t_buffer_updated
    RequestReceiver.read_exact = t_read_exact
    server.decode_request_header = t_decode_header
    server.encode_response_parts = t_encode
    Broker.handle = t_handle
    PartitionWriter.submit = t_submit
    PartitionWriter._append_batch = t_append
    PartitionWriter._answer = t_answer
    PartitionWriter.data_waiter = t_data_waiter
    PartitionWriter.wake_fetchers = t_wake
    RecordApis._fetch_once = t_fetch_once

    def dump() -> None:
        with lock:
            done = [r for r in requests if r["stamp"] is not None]
        Path(out_path).write_text(json.dumps(done))

    atexit.register(dump)


def preload_env(work: Path, out_path: Path) -> dict:
    """The environment that makes a broker process call :func:`install` at start-up
    (a ``sitecustomize`` module in ``work``), its trace going to ``out_path``."""
    return preload.preload_env(work, "pathtrace", ENV, out_path)


#: the stages of each side, in the order a record crosses them
PRODUCE_STAGES = ("rx", "read", "handler", "queued", "append", "appended", "acked",
                  "answer", "written")
FETCH_STAGES = ("woken", "resumed", "answer", "written")


def load(path: Path) -> dict:
    """``{send() stamp: {"produce": request, "fetch": request}}`` of a trace file (the
    first Fetch that carried each stamp)."""
    out: dict = {}
    for req in json.loads(Path(path).read_text()):
        slot = out.setdefault(req["stamp"], {})
        slot.setdefault(req["api"], req)
    return out


def summary(path: Path) -> list[str]:
    """Lines describing the trace at ``path``: for each stage, ms since send() (p50 /
    p99), then the median number of event-loop turns and the thread of each step."""
    def pct(values: list, q: float):
        s = sorted(values)
        return s[min(len(s) - 1, int(len(s) * q))] if s else None

    try:
        traced = load(path)
    except (OSError, ValueError) as exc:
        return [f"no broker trace ({exc})"]
    lines = []
    for api, names in (("produce", PRODUCE_STAGES), ("fetch", FETCH_STAGES)):
        reqs = [(s, v[api]) for s, v in traced.items() if api in v]
        if api == "fetch":
            storage = sum(1 for _, r in reqs if r.get("from_storage"))
            reqs = [(s, r) for s, r in reqs if "woken" in r["t"]]
            lines.append(f"  broker {api} ({len(reqs)} woken by an append; "
                         f"{storage} answered from storage):")
        else:
            lines.append(f"  broker {api} ({len(reqs)} requests):")
        prev = None
        for name in names:
            have = [(s, r["t"][name]) for s, r in reqs if name in r["t"]]
            if not have:
                continue
            ms = [(t[0] - s) / 1e6 for s, t in have]
            threads = {t[2] for _, t in have}
            step = ""
            if prev is not None:
                turns = [r["t"][name][1] - r["t"][prev][1] for _, r in reqs
                         if name in r["t"] and prev in r["t"]]
                gap = [(r["t"][name][0] - r["t"][prev][0]) / 1e6 for _, r in reqs
                       if name in r["t"] and prev in r["t"]]
                step = (f"  +{pct(turns, 0.5)} turn(s) of the loop, {pct(gap, 0.5):.3f} ms "
                        f"after {prev}")
            lines.append(f"    {name:<9}{pct(ms, 0.5):7.2f} / {pct(ms, 0.99):7.2f}  "
                         f"[{'/'.join(sorted(threads))}]{step}")
            prev = name
    through = [(v["fetch"]["t"]["written"][1] - v["produce"]["t"]["rx"][1],
                (v["fetch"]["t"]["written"][0] - v["produce"]["t"]["rx"][0]) / 1e6)
               for v in traced.values() if "produce" in v and "fetch" in v
               and "rx" in v["produce"]["t"] and "woken" in v["fetch"]["t"]
               and "written" in v["fetch"]["t"]]
    if through:
        lines.append(f"  through the broker (produce rx -> written answer of the fetch it "
                     f"woke, {len(through)}): "
                     f"{pct([t for t, _ in through], 0.5)} turn(s) of the loop, "
                     f"{pct([ms for _, ms in through], 0.5):.3f} / "
                     f"{pct([ms for _, ms in through], 0.99):.3f} ms (p50 / p99)")
    return lines
