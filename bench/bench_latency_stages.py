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

    .venv/bin/python bench/bench_latency_stages.py [--rate 10000] [--seconds 5] [--linger-ms 1]
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

from bench_latency import STAMP, percentiles, produce_consume  # noqa: E402

from sparklog.admin import Admin  # noqa: E402
from sparklog.client.fetcher import Fetcher  # noqa: E402
from sparklog.writer.producer.sender import Sender  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402

PAD = b"p" * (100 - STAMP.size)  # what follows the stamp in bench_latency's values
STAGES = ("drained", "written", "acked", "fetched")


def install_tracer() -> dict:
    """Wrap the four steps; returns ``{stage: [nanoseconds since send()]}``."""
    stages: dict = {k: [] for k in STAGES}
    stamps: dict = {}  # id(in-flight batch) -> its first record's send() stamp
    now = time.perf_counter_ns
    send, send_request = Sender._send, Sender._send_request
    on_ack, on_fetch = Sender._on_response, Fetcher._on_response

    def traced_send(self, items):
        t = now()
        for item in items:
            values = item.batches[0].values
            if values:
                stamps[id(item)] = s = STAMP.unpack_from(values[0])[0]
                stages["drained"].append(t - s)
        return send(self, items)

    def traced_send_request(self, node_id, group):
        result = send_request(self, node_id, group)
        t = now()
        stages["written"].extend(t - stamps[id(i)] for i in group if id(i) in stamps)
        return result

    def traced_ack(self, group, body):
        t = now()
        for item in group:
            s = stamps.pop(id(item), None)
            if s is not None:
                stages["acked"].append(t - s)
        return on_ack(self, group, body)

    def traced_fetch(self, node, parts, body):
        t = now()
        for topic in body.get("topics", ()):
            for p in topic["partitions"]:
                data = bytes(p["records"] or b"")
                at = data.find(PAD)  # the first record's value in the frame's body
                if at >= STAMP.size:
                    stages["fetched"].append(t - STAMP.unpack_from(data, at - STAMP.size)[0])
        return on_fetch(self, node, parts, body)

    Sender._send, Sender._send_request = traced_send, traced_send_request
    Sender._on_response, Fetcher._on_response = traced_ack, traced_fetch
    return stages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="records per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--linger-ms", type=float, default=1.0)
    args = parser.parse_args(argv)
    stages = install_tracer()
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        with BrokerProcess(Path(tmp, "log").as_uri(), log_path=Path(tmp, "broker.log"),
                           log_level="WARNING") as broker, Admin(broker.address) as admin:
            admin.create_topic("latency", 1)
            returned = percentiles(produce_consume(broker.address, args.rate, args.seconds,
                                                   args.linger_ms))
    print(f"{args.rate} records/s, linger.ms={args.linger_ms:g}, load average "
          f"{os.getloadavg()[0]:.1f}; ms since send(), p50/p99 (first record of each batch):")
    for name in STAGES:
        got = percentiles([ns / 1e9 for ns in stages[name]]) if stages[name] else None
        print(f"  {name:<9}" + (f"{got['p50']:7.2f} / {got['p99']:7.2f}  ({got['n']} batches)"
                                if got else "  (none)"))
    print(f"  returned {returned['p50']:7.2f} / {returned['p99']:7.2f}  ({returned['n']} "
          "records, every record)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
