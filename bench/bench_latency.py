"""Produce-to-consume latency at a fixed rate: p50/p99 beside a request round trip.

A real broker process on a temporary local storage root, one partition, acks=1. A
Producer sends 100-byte records at ``--rate`` records/s (paced); a Consumer in another
thread polls them; each record's latency is the time from ``send()`` to the consumer
handing it out (both on ``time.monotonic_ns``, the clock every process of the host
shares: bench/pathtrace.py stamps the broker's stages on it too). The baseline,
measured in the same run at the same pace, is the round trip of a Produce request
carrying one pre-built record on a plain connection: what the machine (its load, its
scheduler) and the broker give a bare request; a record cannot reach a consumer faster.
Target (issue 13): p99 <= 3 ms at 10k records/s; on a loaded machine compare with the
baseline's p99 of the same run, and with Kafka's in ``python -m bench.peers --only
latency``.

    .venv/bin/python bench/bench_latency.py [--rate 10000] [--seconds 5] [--linger-ms 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pathtrace import PAD, STAMP  # noqa: E402  (a record's value: its send() time, padding)

from sparklog.clients.admin import Admin  # noqa: E402
from sparklog.clients.consumer import Consumer  # noqa: E402
from sparklog.clients.producer import Producer  # noqa: E402
from sparklog.clients.types import TopicPartition  # noqa: E402
from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.protocol import ApiKey, Connection  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process helper)


def percentiles(samples: list[float]) -> dict:
    """p50, p99 and max of ``samples`` (seconds) in milliseconds."""
    s = sorted(samples)
    return {"p50": s[len(s) // 2] * 1e3, "p99": s[int(len(s) * 0.99)] * 1e3,
            "max": s[-1] * 1e3, "n": len(s)}


def round_trips(address: str, rate: int, count: int) -> list[float]:
    """Round-trip times of ``count`` one-record Produce requests sent one at a time at
    ``rate`` requests/s."""
    frame = encode_frame(raw_batch([b"b" * 100]))
    body = {"acks": 1, "topics": [{"name": "baseline", "partitions": [
        {"partition": 0, "records": frame}]}]}
    out = []
    with Connection(address, client_id="bench-rtt") as conn:
        conn.request(ApiKey.PRODUCE, body)  # the partition is open before timing
        begin = time.perf_counter()
        for i in range(count):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            start = time.perf_counter()
            conn.request(ApiKey.PRODUCE, body)
            out.append(time.perf_counter() - start)
    return out


def consume_latencies(address: str, topic: str, total: int, latencies: list,
                      ready: threading.Event, done: threading.Event) -> None:
    """Consumer side of a latency run: from the end of partition 0 of ``topic`` (``ready``
    set once positioned), append each record's produce-to-consume latency in seconds
    (its value starts with its send time, :data:`pathtrace.STAMP`) until ``total`` arrived or
    ``done`` is set."""
    with Consumer(bootstrap_servers=address, fetch_max_wait_ms=500) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        consumer.position(tp)
        ready.set()
        while len(latencies) < total and not done.is_set():
            for records in consumer.poll(timeout_ms=100).values():
                now = time.monotonic_ns()
                latencies.extend((now - STAMP.unpack_from(r.value)[0]) / 1e9
                                 for r in records)


def produce_consume(address: str, rate: int, seconds: float, linger_ms: float,
                     in_flight: int = 5) -> list[float]:
    """Latencies of ``rate * seconds`` records sent at ``rate`` records/s."""
    total = int(rate * seconds)
    latencies: list[float] = []
    ready = threading.Event()
    done = threading.Event()

    thread = threading.Thread(target=consume_latencies,
                              args=(address, "latency", total, latencies, ready, done))
    thread.start()
    ready.wait(30)
    with Producer(address, acks=1, linger_ms=linger_ms,
                  max_in_flight_requests_per_connection=in_flight) as producer:
        producer.send("latency", STAMP.pack(time.monotonic_ns()) + PAD).get(10)
        deadline = time.monotonic() + 30  # the warm-up record reached the consumer
        while not latencies and time.monotonic() < deadline:
            time.sleep(0.01)
        latencies.clear()
        bar = tqdm(total=total, desc=f"linger.ms={linger_ms:g}", unit="rec", file=sys.stderr,
                   leave=False, unit_scale=True)
        start = time.perf_counter()
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send("latency", STAMP.pack(time.monotonic_ns()) + PAD)
            if i % 1000 == 999:
                bar.update(1000)
        producer.flush()
        bar.close()
    deadline = time.monotonic() + 30
    while len(latencies) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    thread.join()
    return latencies


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="records per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--linger-ms", type=float, action="append",
                        help="producer linger.ms (repeatable; default 0 and 5)")
    parser.add_argument("--in-flight", type=int, default=5,
                        help="producer max.in.flight.requests.per.connection (default 5)")
    args = parser.parse_args(argv)
    lingers = args.linger_ms or [0.0, 5.0]
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        with BrokerProcess(Path(tmp, "log").as_uri(), log_path=Path(tmp, "broker.log"),
                           log_level="WARNING") as broker, Admin(broker.address) as admin:
            admin.create_topic("latency", 1)
            admin.create_topic("baseline", 1)
            base = percentiles(round_trips(broker.address, args.rate,
                                           min(20_000, int(args.rate * args.seconds))))
            results = {
                linger: percentiles(produce_consume(broker.address, args.rate, args.seconds,
                                                    linger, args.in_flight))
                for linger in lingers}
    print(f"one partition, acks=1, 100-byte records at {args.rate} records/s for "
          f"{args.seconds:g} s, local storage, {args.in_flight} request(s) in flight; "
          f"machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"baseline produce round trip   : p50 {base['p50']:6.2f} ms  p99 {base['p99']:6.2f} ms"
          f"  max {base['max']:6.2f} ms  ({base['n']} requests)")
    for linger, r in results.items():
        print(f"produce->consume linger.ms={linger:<3g}: p50 {r['p50']:6.2f} ms  p99 "
              f"{r['p99']:6.2f} ms  max {r['max']:6.2f} ms  ({r['n']} records; p99 "
              f"{r['p99'] / base['p99']:.1f}x baseline; target p99 <= 3 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
