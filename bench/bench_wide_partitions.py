"""One broker leading many partitions on a real HDFS: what each led partition costs.

Issue #31's measurement, repeatable (docs/storage.md, build plan step 3: this is the
``log.write.mode=partition`` half; the step adds the ``wal`` column). Starts an Apache
Hadoop cluster on this machine's loopback (tests/support/hdfscluster.py: a NameNode and
``--datanodes`` DataNodes, default 3, replication 3, stock DataNode settings with
Hadoop's 3 s heartbeat), then for each P of ``--partitions`` a new broker process
(``sparklog broker start --storage hdfs://...``, tests/support/brokerproc.py) with a
topic of P partitions, and ``--rounds`` rounds of one 100-byte record to every partition
with acks=all (one producer, ``linger.ms`` 5, no retries: every failed record is
counted). Each P prints:

* the first round's time (the broker opens one HDFS output stream per partition:
  ``create`` + write + ``hsync``) and the later rounds' (median and slowest: appends to
  open streams);
* errors (records not acknowledged, all rounds);
* the broker process's threads and RSS, and each DataNode's threads, with the topic
  created but no partition open (the baseline, same broker) and after the last round
  (P streams open), and the difference per partition;
* how long the broker's graceful stop (SIGTERM: every open stream synced and closed)
  took.

The files are written with 4 MiB blocks (``--block-size``, the clients' ``dfs.blocksize``):
every DataNode of an open stream's pipeline reserves a whole block of disk until the
block is finalized, and 1,000 streams of 128 MiB blocks with replication 3 would reserve
375 GiB (docs/storage.md, "What today's write path costs").

    .venv/bin/python bench/bench_wide_partitions.py [--partitions 100,1000] [--rounds 3]
        [--datanodes 3] [--block-size 4194304] [--request-timeout 1800]
        [--stop-timeout 900]

Figures and how they were taken: docs/performance.md, "Wide topics on HDFS".
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparklog.clients.admin import Admin  # noqa: E402
from sparklog.clients.producer import Producer  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process)
from tests.support.hdfscluster import HdfsCluster  # noqa: E402  (the tests' HDFS cluster)
from tests.support.processes import rss_bytes, threads_of  # noqa: E402

RECORD = b"v" * 100


def sample(broker: BrokerProcess, cluster: HdfsCluster) -> dict:
    """Threads and RSS of the broker, threads of each DataNode, now."""
    return {"threads": threads_of(broker.pid), "rss": rss_bytes(broker.pid),
            "dn": [threads_of(dn.pid) for dn in cluster.datanodes]}


def one_round(producer: Producer, topic: str, partitions: int, timeout: float,
              label: str) -> tuple[float, int, str]:
    """One record to each partition, acks=all; (seconds until every record is answered,
    records not acknowledged, the first error's text)."""
    start = time.perf_counter()
    futures = [producer.send(topic, RECORD, partition=p) for p in range(partitions)]
    producer.flush(timeout)
    took = time.perf_counter() - start
    failed = [f.exception for f in futures if not f.succeeded()]
    first = f"{type(failed[0]).__name__}: {failed[0]}" if failed else ""
    print(f"  P={partitions} {label}: {took:.2f} s, {len(failed)} error(s)", file=sys.stderr,
          flush=True)
    return took, len(failed), first


def run(cluster: HdfsCluster, work: Path, partitions: int, rounds: int,
        request_timeout: float, stop_timeout: float) -> dict:
    """A new broker leading one topic of ``partitions`` partitions: its figures."""
    broker = BrokerProcess(f"{cluster.hdfs_uri}/bench-wide-{partitions}",
                           log_path=work / f"broker-{partitions}.log", log_level="WARNING",
                           start_timeout=180).start()
    stopped = False
    try:
        with Admin(broker.address) as admin:
            admin.create_topic("wide", partitions)
        before = sample(broker, cluster)
        times, errors, first_error = [], 0, ""
        timeout_ms = int(request_timeout * 1000)
        # the first round's one request waits for every partition's open: the timeouts
        # are long so that a slow open is measured as time, not as a retry
        producer = Producer(broker.address, acks="all", linger_ms=5, retries=0,
                            request_timeout_ms=timeout_ms,
                            delivery_timeout_ms=timeout_ms + 5000)
        try:
            for r in tqdm(range(rounds), desc=f"P={partitions}", unit="round",
                          file=sys.stderr, leave=False):
                took, failed, text = one_round(producer, "wide", partitions,
                                               request_timeout * 2,
                                               "first round" if r == 0 else f"round {r + 1}")
                times.append(took)
                errors += failed
                first_error = first_error or text
            after = sample(broker, cluster)
        finally:
            producer.close(5)  # an interrupted round's request is not waited for
        # a graceful stop (SIGTERM) syncs and closes every open stream
        start = time.perf_counter()
        try:
            broker.stop(timeout=stop_timeout)
            stop = f"{time.perf_counter() - start:.1f} s"
        except RuntimeError:  # BrokerProcess killed it after stop_timeout
            stop = f"> {stop_timeout:.0f} s (killed)"
        stopped = True
    finally:
        if not stopped:
            broker.kill()
    res = {"P": partitions, "times": times, "errors": errors, "sent": partitions * rounds,
           "first_error": first_error, "before": before, "after": after, "stop": stop}
    print(f"  P={partitions}: {res}", file=sys.stderr, flush=True)  # kept if a later P fails
    return res


def report(results: list[dict], args) -> None:
    mib = 1 << 20
    print(f"\none broker, acks=all, one 100-byte record to each of P partitions, "
          f"{args.rounds} rounds; {args.datanodes} DataNodes, replication "
          f"{min(3, args.datanodes)}, blocks of {args.block_size / mib:g} MiB")
    print(f"{'P':>6} {'first round':>12} {'later (median/max)':>19} {'errors':>12} "
          f"{'broker threads':>15} {'broker RSS MB':>14} {'DataNode threads (each)':>24} "
          f"{'graceful stop':>14}")
    for res in results:
        later = res["times"][1:]
        later_text = f"{statistics.median(later):.2f}/{max(later):.2f} s" if later else "-"
        b, a = res["before"], res["after"]
        print(f"{res['P']:>6} {res['times'][0]:>10.2f} s {later_text:>19} "
              f"{res['errors']:>5} of {res['sent']:<5} "
              f"{b['threads']:>5} -> {a['threads']:<6} "
              f"{b['rss'] / 1e6:>4.0f} -> {a['rss'] / 1e6:<5.0f} "
              f"{'/'.join(map(str, b['dn'])):>11} -> {'/'.join(map(str, a['dn'])):<11} "
              f"{res['stop']:>14}")
    print("baseline (left of each ->): the same broker with its topic created and no "
          "partition open; per open partition:")
    for res in results:
        b, a, p = res["before"], res["after"], res["P"]
        dn = statistics.mean((x - y) / p for x, y in zip(a["dn"], b["dn"]))
        print(f"{p:>6}: broker threads +{(a['threads'] - b['threads']) / p:.2f}, "
              f"RSS +{(a['rss'] - b['rss']) / p / 1024:.0f} KiB, "
              f"each DataNode's threads +{dn:.2f}")
        if res["first_error"]:
            print(f"        first error: {res['first_error']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", default="100,1000",
                    help="comma-separated partition counts, a new broker each "
                         "(default 100,1000)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of one record to every partition (default 3)")
    ap.add_argument("--datanodes", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=4 << 20,
                    help="dfs.blocksize of the files written (default 4 MiB)")
    ap.add_argument("--stop-timeout", type=float, default=900.0,
                    help="seconds a broker may take to stop gracefully (default 900)")
    ap.add_argument("--request-timeout", type=float, default=1800.0,
                    help="the producer's request timeout in seconds (default 1800: the "
                         "first round's request waits for every partition's open)")
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.partitions.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--partitions must be comma-separated integers, got {args.partitions!r}")
    if not counts or min(counts) < 1:
        ap.error(f"--partitions must name partition counts of at least 1, got {args.partitions!r}")
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    work = Path(tempfile.mkdtemp(prefix="bench-wide-"))
    results = []
    try:
        print(f"starting HDFS: a NameNode and {args.datanodes} DataNodes...", file=sys.stderr,
              flush=True)
        conf = {"dfs.heartbeat.interval": 3, "dfs.blocksize": args.block_size}
        with HdfsCluster(str(work / "hdfs"), datanodes=args.datanodes, conf=conf) as cluster:
            os.environ["HADOOP_CONF_DIR"] = cluster.conf_dir  # the brokers' HDFS client
            for p in counts:
                results.append(run(cluster, work, p, args.rounds, args.request_timeout,
                                   args.stop_timeout))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
