"""Where a record's produce->consume latency goes, stage by stage.

``bench_latency.py``'s run (one broker process, one partition, acks=1, 100-byte records
paced at ``--rate``, the producer and the consumer in this process) with a tracer
around four steps of the clients; for the first record of each batch it notes the time
since its ``send()`` stamp when the sender drains the batch, when the batch's Produce
request is written, when its acknowledgement is handled, and when the Fetch response
holding it is handled; the last column is the bench's own figure (``poll()`` returned
the record, every record). Printed as p50/p99 in ms. The tracer wraps private methods
of the clients (``Sender._send``, ``Sender._send_request``, ``Sender._on_response``,
``Fetcher._on_response``): a measuring aid, not an interface.

The broker process is traced too (bench/pathtrace.py, loaded into it by this bench
only): the same records' times at each of the broker's stages (request received,
decoded, handled, handed to the partition's writer, appended, answered, response
written; the waiting Fetch woken by the append, resumed, its response written), all
on ``time.monotonic_ns``, the clock the client's stamps use, with the number of
event-loop turns and the thread (the loop or an I/O thread) of each step: the hops a
record crosses. Last, the two joined per batch (by its first record's send() stamp):
the median and p99 time of each step from the sender draining the batch, through the
broker, to the acknowledgement handled by the sender, and from the append to the
consumer's connection: which steps are the broker's time and which are the hand-offs
between the processes (a write to the socket until the other side's callback runs).
``--broker-source DIR`` runs the broker of another checkout (the commit before a
change, for an A/B: bench/ab_latency.py).

    .venv/bin/python bench/bench_latency_stages.py [--rate 10000] [--seconds 5] [--linger-ms 1]
        [--broker-source DIR] [--no-broker-trace]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pathtrace  # noqa: E402  (bench-only: loaded into the broker process)
from bench_latency import percentiles, produce_consume  # noqa: E402
from pathtrace import STAMP  # noqa: E402

from sparklog.clients.admin import Admin  # noqa: E402
from sparklog.clients.consumer.fetcher import Fetcher  # noqa: E402
from sparklog.clients.producer.sender import Sender  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402
from tests.support.processes import context_switches, cpu_seconds  # noqa: E402

STAGES = ("drained", "written", "acked", "fetched")


def install_tracer() -> dict:
    """Wrap the four steps; returns ``{send() stamp: {stage: monotonic ns}}`` for the
    first record of each batch."""
    records: dict = {}
    stamps: dict = {}  # id(in-flight batch) -> its first record's send() stamp
    now = time.monotonic_ns
    send, send_request = Sender._send, Sender._send_request
    on_ack, on_fetch = Sender._on_response, Fetcher._on_response

    def traced_send(self, items):
        t = now()
        for item in items:
            values = item.batches[0].values
            if values:
                stamps[id(item)] = s = STAMP.unpack_from(values[0])[0]
                records.setdefault(s, {})["drained"] = t
        return send(self, items)

    def traced_send_request(self, node_id, group):
        result = send_request(self, node_id, group)
        t = now()
        for item in group:
            if id(item) in stamps:
                records[stamps[id(item)]]["written"] = t
        return result

    def traced_ack(self, group, body):
        t = now()
        for item in group:
            s = stamps.pop(id(item), None)
            if s is not None:
                records[s]["acked"] = t
        return on_ack(self, group, body)

    def traced_fetch(self, node, parts, body):
        t = now()
        for topic in body.get("topics", ()):
            for p in topic["partitions"]:
                s = pathtrace.first_stamp(p["records"] or b"")
                if s is not None:
                    records.setdefault(s, {}).setdefault("fetched", t)
        return on_fetch(self, node, parts, body)

    Sender._send, Sender._send_request = traced_send, traced_send_request
    Sender._on_response, Fetcher._on_response = traced_ack, traced_fetch
    return records


#: the steps a record's batch crosses, in order, as (process side, stage): the produce
#: request's way and its answer's, then the way to the consumer from the append
PRODUCE_CHAIN = (("client", "drained"), ("client", "written"), ("produce", "rx"),
                 ("produce", "read"), ("produce", "handler"), ("produce", "queued"),
                 ("produce", "append"), ("produce", "appended"), ("produce", "acked"),
                 ("produce", "answer"), ("produce", "written"), ("client", "acked"))
FETCH_CHAIN = (("produce", "appended"), ("fetch", "woken"), ("fetch", "resumed"),
               ("fetch", "answer"), ("fetch", "written"), ("client", "fetched"))


def chain_lines(records: dict, trace: Path) -> list[str]:
    """Each step of :data:`PRODUCE_CHAIN` and :data:`FETCH_CHAIN`: the time from the
    previous one, p50 / p99 in ms over the batches that have both stamps (the client's
    and the broker's stamps joined by the batch's first send() stamp)."""
    try:
        broker = pathtrace.load(trace)
    except (OSError, ValueError):
        return []

    def at(s: int, side: str, stage: str):
        if side == "client":
            return records.get(s, {}).get(stage)
        got = broker.get(s, {}).get(side, {}).get("t", {}).get(stage)
        return got[0] if got else None

    lines = []
    for title, steps in (("the produce request and its answer", PRODUCE_CHAIN),
                         ("from the append to the consumer", FETCH_CHAIN)):
        lines.append(f"  {title}:")
        for (s0, a), (s1, b) in zip(steps, steps[1:]):
            gaps = sorted((t1 - t0) / 1e6 for s in records
                          if (t0 := at(s, s0, a)) is not None
                          and (t1 := at(s, s1, b)) is not None)
            if gaps:
                lines.append(f"    {s0} {a} -> {s1} {b}:".ljust(46)
                             + f"{gaps[len(gaps) // 2]:7.3f} / "
                             f"{gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))]:7.3f}"
                             f"  ({len(gaps)})")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="records per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--linger-ms", type=float, default=1.0)
    parser.add_argument("--broker-source", type=Path,
                        help="run the broker of this checkout (default: this one)")
    parser.add_argument("--no-broker-trace", action="store_true",
                        help="do not load bench/pathtrace.py into the broker")
    args = parser.parse_args(argv)
    records = install_tracer()
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        trace = Path(tmp, "pathtrace.json")
        env = None if args.no_broker_trace else pathtrace.preload_env(Path(tmp, "preload"),
                                                                       trace)
        with BrokerProcess(Path(tmp, "log").as_uri(), log_path=Path(tmp, "broker.log"),
                           log_level="WARNING", env=env, source=args.broker_source) as broker, \
                Admin(broker.address) as admin:
            admin.create_topic("latency", 1)
            cpu, wakes = cpu_seconds(broker.pid), context_switches(broker.pid)
            returned = percentiles(produce_consume(broker.address, args.rate, args.seconds,
                                                   args.linger_ms))
            cpu = (cpu_seconds(broker.pid) - cpu) / returned["n"] * 1e6
            wakes = (context_switches(broker.pid) - wakes) / returned["n"]
        broker_lines = [] if args.no_broker_trace else pathtrace.summary(trace)
        chain = [] if args.no_broker_trace else chain_lines(records, trace)
    print(f"{args.rate} records/s, linger.ms={args.linger_ms:g}, load average "
          f"{os.getloadavg()[0]:.1f}; ms since send(), p50/p99 (first record of each batch):")
    for name in STAGES:
        since = [(r[name] - s) / 1e9 for s, r in records.items() if name in r]
        got = percentiles(since) if since else None
        print(f"  {name:<9}" + (f"{got['p50']:7.2f} / {got['p99']:7.2f}  ({got['n']} batches)"
                                if got else "  (none)"))
    print(f"  returned {returned['p50']:7.2f} / {returned['p99']:7.2f}  ({returned['n']} "
          "records, every record)")
    print(f"broker process: {cpu:.1f} us of CPU per record, its event loop's thread woken "
          f"{wakes:.2f} times per record (voluntary context switches)")
    if broker_lines:
        print("in the broker process, ms since send(), p50/p99 [thread], then each step's "
              "median turns of the event loop and time:")
        print("\n".join(broker_lines))
    if chain:
        print("step by step, client and broker joined per batch, ms from the previous "
              "step, p50 / p99 (batches):")
        print("\n".join(chain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
