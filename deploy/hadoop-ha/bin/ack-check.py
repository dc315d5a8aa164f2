#!/usr/bin/env python3
"""Failover test helper: every acknowledged record must be read back exactly once.

    ack-check.py produce --bootstrap-server H:P --topic T --ack-log FILE
                         [--records N] [--size BYTES] [--rate PER_SECOND] [--run-id ID]
                         [--wait-for-topic SECONDS [--ready-file FILE]]
    ack-check.py verify  (--path ROOT | --bootstrap-server H:P) --topic T --ack-log FILE
                         [--master local[2]]

``produce`` sends numbered records (idempotent producer, acks=all) while a failure is
injected, and appends one line per acknowledged record to the ack log:
``key partition offset sha256(value) ack_time_ms``. Records whose send failed are logged
as ``key - - FAILED time_ms``: they may be in the log (the answer was lost) but at most
once.

``verify`` reads the whole topic with Spark (``format("sparklog")``) and checks each
acknowledged key: present exactly once, at the acknowledged partition and offset, with
the same SHA-256. It prints a summary, the longest pause between two acknowledgements
of one run (how long the failure stalled the producer) and every problem (at most 20 of a kind),
and exits 1 if there is any. See deploy/hadoop-ha/README.md (failover test matrix).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import threading
import time


def wait_for_topic(args) -> None:
    """Started before its topic exists (``--wait-for-topic``): say so through
    ``--ready-file``, then poll the brokers until the topic is listed; errors while
    they are unreachable count as not yet."""
    from sparklog import Admin

    if args.ready_file:
        open(args.ready_file, "w").close()
    deadline = time.monotonic() + args.wait_for_topic
    while time.monotonic() < deadline:
        try:
            with Admin(args.bootstrap_server) as admin:
                if args.topic in admin.list_topics():
                    return
        except Exception:  # noqa: BLE001 - a broker failing over: try again
            pass
        time.sleep(0.1)
    raise SystemExit(f"ack-check: topic {args.topic} did not appear within "
                     f"{args.wait_for_topic:.0f}s")


def produce(args) -> int:
    """Send ``--records`` records, logging each acknowledgement as it arrives."""
    from sparklog.clients.producer import Producer

    run_id = args.run_id or f"{os.getpid()}-{int(time.time())}"
    if args.wait_for_topic:
        wait_for_topic(args)
    lock = threading.Lock()
    counts = {"acked": 0, "failed": 0}
    producer = Producer(args.bootstrap_server, acks="all", enable_idempotence=True,
                        linger_ms=5)
    with open(args.ack_log, "a", encoding="ascii") as log:

        def acked(key, digest, meta):
            with lock:
                log.write(f"{key} {meta.partition} {meta.offset} {digest} "
                          f"{int(time.time() * 1000)}\n")
                counts["acked"] += 1

        def failed(key, exc):
            with lock:
                log.write(f"{key} - - FAILED {int(time.time() * 1000)}\n")
                counts["failed"] += 1
            print(f"ack-check: {key} not acknowledged: {exc}", file=sys.stderr)

        started = time.monotonic()
        for i in range(args.records):
            key = f"{run_id}-{i:010d}"
            value = hashlib.sha256(key.encode()).digest() * (args.size // 32 + 1)
            value = value[:args.size]
            digest = hashlib.sha256(value).hexdigest()
            future = producer.send(args.topic, value, key=key.encode())
            future.add_callback(acked, key, digest)
            future.add_errback(failed, key)
            if args.rate:
                delay = started + (i + 1) / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        producer.flush()
        producer.close()
    print(f"ack-check: run {run_id}: {counts['acked']} acknowledged, "
          f"{counts['failed']} failed, log {args.ack_log}")
    return 0


def read_ack_log(path: str) -> tuple[dict, set, dict]:
    """{key: (partition, offset, sha256)} of acknowledged records, failed keys, and the
    acknowledgement times (ms) of each run (``{run id: [ms, ...]}``, sorted; a key is
    ``<run id>-<number>``)."""
    acked, failed, times = {}, set(), {}
    with open(path, encoding="ascii") as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 5 or not parts[4].isdigit():
                raise SystemExit(f"ack-check: {path} line {number}: not 'key partition "
                                 f"offset sha256 time_ms': {line.strip()!r}")
            if parts[3] == "FAILED":
                failed.add(parts[0])
            else:
                acked[parts[0]] = (int(parts[1]), int(parts[2]), parts[3])
                times.setdefault(parts[0].rpartition("-")[0], []).append(int(parts[4]))
    return acked, failed, {run: sorted(ms) for run, ms in times.items()}


def longest_pause(times: dict) -> tuple[float, str] | None:
    """The longest pause between two acknowledgements of one run, in seconds, and that
    run's id (None without two acknowledgements in a run). Runs of one ack log follow
    each other: the time between them is nobody's stall."""
    pauses = [((b - a) / 1000, run) for run, ms in times.items() for a, b in zip(ms, ms[1:])]
    return max(pauses) if pauses else None


def read_topic(args) -> list[tuple]:
    """(key, partition, offset, sha256 hex) of every record of the topic, via Spark."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import sparklog.spark

    builder = SparkSession.builder.appName("sparklog-ack-check")
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()
    sparklog.spark.register(spark)
    reader = spark.read.format("sparklog").option("subscribe", args.topic) \
        .option("startingOffsets", "earliest").option("endingOffsets", "latest")
    reader = reader.option("path", args.path) if args.path else \
        reader.option("bootstrap.servers", args.bootstrap_server)
    df = reader.load().select(F.col("key").cast("string").alias("key"), "partition",
                              "offset", F.sha2("value", 256).alias("digest"))
    return [tuple(row) for row in df.toLocalIterator()]


def verify(args) -> int:
    """Compare the topic's records with the ack log; 1 if anything is wrong."""
    acked, failed, times = read_ack_log(args.ack_log)
    seen: dict = {}
    for key, partition, offset, digest in read_topic(args):
        seen.setdefault(key, []).append((partition, offset, digest))
    problems: dict[str, list[str]] = {"missing": [], "duplicated": [], "moved": [],
                                      "corrupt": []}
    for key, (partition, offset, digest) in acked.items():
        copies = seen.get(key, [])
        if not copies:
            problems["missing"].append(f"{key} (acknowledged at {partition}/{offset})")
            continue
        if len(copies) > 1:
            problems["duplicated"].append(f"{key} at {[c[:2] for c in copies]}")
        if (partition, offset) not in [c[:2] for c in copies]:
            problems["moved"].append(f"{key} acknowledged at {partition}/{offset}, read at "
                                     f"{[c[:2] for c in copies]}")
        if any(c[2] != digest for c in copies):
            problems["corrupt"].append(f"{key}: value checksum differs")
    for key in failed:
        if len(seen.get(key, [])) > 1:
            problems["duplicated"].append(f"{key} (unacknowledged) read "
                                          f"{len(seen[key])} times")
    unacked_present = sum(1 for key in failed if key in seen)
    print(f"ack-check: {len(acked)} acknowledged, {len(failed)} failed sends "
          f"({unacked_present} of them in the log), {sum(map(len, seen.values()))} records "
          f"read")
    pause = longest_pause(times)
    if pause is not None:
        print(f"ack-check: longest pause between acknowledgements: {pause[0]:.2f} s "
              f"(run {pause[1]})")
    bad = 0
    for kind, items in problems.items():
        bad += len(items)
        for item in items[:20]:
            print(f"ack-check: {kind}: {item}")
        if len(items) > 20:
            print(f"ack-check: {kind}: ... {len(items) - 20} more")
    print("ack-check: FAILED" if bad else "ack-check: OK: every acknowledged record read "
          "back once, checksums equal")
    return 1 if bad else 0


def main(argv=None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="ack-check.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce", help="send numbered records, log acknowledgements")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--ack-log", required=True)
    p.add_argument("--records", type=int, default=100000)
    p.add_argument("--size", type=int, default=512, help="value size in bytes")
    p.add_argument("--rate", type=float, default=0, help="records per second (0: no limit)")
    p.add_argument("--run-id", default=None, help="key prefix (default pid-time)")
    p.add_argument("--wait-for-topic", type=float, default=0, metavar="SECONDS",
                   help="start before the topic exists and wait up to SECONDS for it")
    p.add_argument("--ready-file", default=None,
                   help="with --wait-for-topic: created once the producer is started")
    p.set_defaults(func=produce)
    v = sub.add_parser("verify", help="read the topic with Spark, compare with the log")
    where = v.add_mutually_exclusive_group(required=True)
    where.add_argument("--path", help="storage root of the log (no broker needed)")
    where.add_argument("--bootstrap-server")
    v.add_argument("--topic", required=True)
    v.add_argument("--ack-log", required=True)
    v.add_argument("--master", default=None, help="Spark master (default: spark-submit's)")
    v.set_defaults(func=verify)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
