"""send() -> acknowledgement latencies of a paced Producer, in a process of its own.

The latency benchmarks run their producer here, not in the process that drives them:
that one holds a JVM (Hadoop's client through JPype), the HDFS cluster's helpers and the
results, and the interpreter's full collections walk all of it while they hold the
interpreter lock. A producer application is a plain process importing sparklog; this
module is one, so the bench measures the producer an application has, not the bench's
heap. It prints one JSON document on stdout, ``{"latencies": [seconds, ...],
"gc_pauses": [seconds, ...]}`` (the latter: every collection of the interpreter's
generation 2 during the paced sends, so a tail can be told from a collection).

    python bench/produce_acked.py ADDRESS TOPIC [--rate 10000] [--seconds 5] [--acks all]
        [--warmup 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synctrace import time_collections  # noqa: E402  (this directory's)

from sparklog.clients.producer import Producer  # noqa: E402


def _full_collections() -> list[float]:
    """A list that fills with the duration of every generation-2 collection from now."""
    pauses: list[float] = []

    def full(generation, took):
        if generation == 2:
            pauses.append(took)

    time_collections(full)
    return pauses


def produce_latencies(address: str, topic: str, rate: int, seconds: float,
                      acks: str = "all", warmup: float = 0.0) -> tuple[list[float], list[float]]:
    """(latencies, full-collection pauses) in seconds of ``rate * seconds`` 100-byte
    records sent at ``rate`` records/s by an idempotent producer with ``linger.ms=0``,
    after ``warmup`` seconds of the same load whose latencies are not kept (a broker
    just started, its JVM's compiler and the connections still cold, is not the steady
    state the figures describe)."""
    warm = int(rate * warmup)
    total = int(rate * seconds)
    latencies: list[float] = []
    lock = threading.Lock()

    def acked(start, _meta):
        with lock:
            latencies.append(time.perf_counter() - start)

    with Producer(address, acks=acks, enable_idempotence=True, linger_ms=0) as producer:
        producer.send(topic, b"w" * 100).get(30)
        bar = tqdm(total=warm + total, desc=f"produce acks={acks}", unit="rec",
                   file=sys.stderr, leave=False, unit_scale=True)
        pauses: list[float] = []
        begin = time.perf_counter()
        for i in range(warm + total):
            if i == warm:
                pauses = _full_collections()
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            future = producer.send(topic, b"v" * 100)
            if i >= warm:
                future.add_callback(acked, time.perf_counter())
            if i % 1000 == 999:
                bar.update(1000)
        producer.flush(60)
        bar.close()
    return latencies, pauses


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("address")
    ap.add_argument("topic")
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="seconds of the same load before the measured ones")
    args = ap.parse_args(argv)
    latencies, pauses = produce_latencies(args.address, args.topic, args.rate, args.seconds,
                                          args.acks, args.warmup)
    json.dump({"latencies": latencies, "gc_pauses": pauses}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
