"""sparklog on real HDFS beside Hadoop's own client and Spark's Parquet reader (same run,
same cluster): ingest, produce latency, scan.

Starts an Apache Hadoop cluster (tests/support/hdfscluster.py: a NameNode and ``--datanodes``
DataNodes, default 3, replication 3, on this machine's loopback) and measures:

* **ingest**: a broker process (``sparklog broker start --storage hdfs://...``) takes
  ``--mb`` MiB of pre-built 1 MiB produce requests (one partition, ``--in-flight``
  requests outstanding), with acks=1 (hflush) and with acks=all (hsync). The baseline
  writes the same requests to a file of the same cluster with Hadoop's own client
  (``FSDataOutputStream.write`` then ``hflush()``, or ``hsync()``, after every request:
  the broker's cadence when each request is its own flush), in this process through
  JPype. Target: broker / Hadoop client >= 0.8.
* **latency**: a Producer (acks=all, idempotent) sends 100-byte records at ``--rate``
  records/s for ``--seconds``; each record's latency is send() to its acknowledgement.
  The producer runs in a process of its own (bench/produce_acked.py), as an application's
  would: not in this one, whose heap (a JVM through JPype among it) its garbage
  collections would otherwise walk; each round prints its full collections. Each broker
  is a new process: ``--warmup`` seconds (default 2) of the same load come first and are
  not counted (its JVM's compiler and its HDFS pipeline warm, as a running broker's are),
  and before the first round ``--cluster-warmup`` seconds (default 15) of the load warm
  the new cluster's DataNodes the same way (the first rounds of a cold cluster had p99s
  of 40-230 ms where the later ones had 13-16).
  The baseline is what one acks=all write costs the cluster at least: a 100-byte
  ``write`` + ``hsync()`` with Hadoop's client, one at a time. Target: p99 <= 10 ms.
  ``--trace`` times each broker's stages (append, hand-off to the sync, hsync, answer:
  bench/synctrace.py, loaded into the broker processes by the bench only).
* **scan**: ``--records`` records in ``--partitions`` partitions written through the log
  into HDFS, and the same records as Parquet files put into the same HDFS; one local
  Spark session counts and aggregates both (best of ``--repeat`` after a warm-up, the
  readers taking turns in each round):
  format("sparklog") on its JVM reader vs ``spark.read.parquet``, and beside it the
  same read with ``sparklog.countPushDown=false`` (count() from the rows, as before COUNT(*) was
  pushed down). Target: ratio >= 1.0.

    .venv/bin/python bench/bench_hdfs.py [--part ingest,latency,scan] [--datanodes 3]
        [--mb 256] [--in-flight 8] [--rate 10000] [--seconds 5] [--warmup 2]
        [--cluster-warmup 15] [--records 1000000]
        [--partitions 4] [--repeat 3] [--rounds 1] [--baseline-src DIR] [--trace]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import synctrace  # noqa: E402  (bench-only: loaded into the brokers with --trace)
from bench_broker_ingest import broker_ingest, build_requests  # noqa: E402
from bench_latency import percentiles  # noqa: E402
from bench_spark_scan import TOPIC, best_times_in_turn, generate  # noqa: E402

from sparklog.clients.admin import Admin  # noqa: E402
from sparklog.protocol import Connection  # noqa: E402
from sparklog.storage import jvm  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process helper)
from tests.support.hdfscluster import HdfsCluster  # noqa: E402  (the tests' HDFS cluster)


class HadoopWriter:
    """A file of the cluster written with Hadoop's own client (in this process, JPype)."""

    def __init__(self, url: str):
        import jpype

        self.jpype = jpype
        conf = jvm.configuration(os.environ.get("HADOOP_CONF_DIR"))
        fs_class = jvm.jclass("org.apache.hadoop.fs.FileSystem")
        self.fs = fs_class.newInstance(jvm.jclass("java.net.URI")(url), conf)
        self.out = self.fs.create(jvm.jclass("org.apache.hadoop.fs.Path")(url), False)

    def array(self, data: bytes):
        """``data`` as a Java byte[] (made once, before timing)."""
        return self.jpype.JArray(self.jpype.JByte)(data)

    def write(self, array, durable: bool) -> None:
        """One write of ``array``, then hflush (or hsync when ``durable``)."""
        self.out.write(array, 0, len(array))
        if durable:
            self.out.hsync()
        else:
            self.out.hflush()

    def close(self) -> None:
        self.out.close()
        self.fs.close()


def hadoop_ingest(url: str, payloads, count: int, durable: bool) -> float:
    """Seconds to write ``count`` payloads with Hadoop's client, each flushed."""
    w = HadoopWriter(url)
    arrays = [w.array(p) for p in payloads]
    for i in range(min(8, count)):  # warm-up, as the broker gets one
        w.write(arrays[i % len(arrays)], durable)
    bar = tqdm(total=count, desc=f"hadoop {'hsync' if durable else 'hflush'}", unit="req",
               file=sys.stderr, leave=False)
    start = time.perf_counter()
    for i in range(count):
        w.write(arrays[i % len(arrays)], durable)
        bar.update()
    elapsed = time.perf_counter() - start
    bar.close()
    w.close()
    return elapsed


def part_ingest(cluster: HdfsCluster, work: Path, args) -> None:
    payloads = build_requests(8000, 1)
    size = len(payloads[0])
    count = max(1, (args.mb << 20) // size)
    total = count * size / 2**20
    rows = []
    for acks, durable, name in ((1, False, "acks=1 / hflush"), (-1, True, "acks=all / hsync")):
        url = f"{cluster.hdfs_uri}/bench-ingest/{'all' if durable else 'one'}"
        base = hadoop_ingest(f"{url}-hadoop.bin", payloads, count, durable)
        with BrokerProcess(f"{url}-log", log_path=work / "broker-ingest.log",
                           log_level="WARNING", start_timeout=120) as broker:
            with Admin(broker.address) as admin:
                admin.create_topic("ingest", 1)
            with Connection(broker.address, timeout=120) as conn:
                broker_ingest(conn, payloads, min(8, count), args.in_flight, "warm-up",
                              acks=acks)
                took = broker_ingest(conn, payloads, count, args.in_flight, f"broker {name}",
                                     acks=acks)
        rows.append((name, total / base, total / took))
    print(f"\ningest: {count} requests of {size / 2**20:.2f} MiB ({total:.0f} MiB), one "
          f"partition, {args.in_flight} in flight, {args.datanodes} DataNodes (replication "
          f"{cluster.replication})")
    print(f"  {'':<18} {'Hadoop client':>14} {'broker':>10} {'broker / client':>16}")
    for name, base_rate, rate in rows:
        print(f"  {name:<18} {base_rate:>9.1f} MiB/s {rate:>5.1f} MiB/s {rate / base_rate:>15.2f}x")
    print("  target: broker / Hadoop client >= 0.8")


def hsync_round_trips(url: str, count: int) -> list[float]:
    """Seconds of ``count`` 100-byte write + hsync calls with Hadoop's client."""
    w = HadoopWriter(url)
    data = w.array(b"r" * 100)
    out = []
    for _ in range(count):
        start = time.perf_counter()
        w.write(data, True)
        out.append(time.perf_counter() - start)
    w.close()
    return out


def produce_latencies(address: str, rate: int, seconds: float,
                      warmup: float) -> tuple[list, list]:
    """(send() -> acknowledgement latencies, full-collection pauses) in seconds of
    records sent at ``rate`` records/s by a producer in a process of its own
    (bench/produce_acked.py: this process's heap, a JVM among it, stays out of the
    producer's garbage collections)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "produce_acked.py"), address, "latency",
         "--rate", str(rate), "--seconds", str(seconds), "--warmup", str(warmup)],
        stdout=subprocess.PIPE, text=True, check=True, timeout=warmup + seconds + 300)
    out = json.loads(done.stdout)
    return out["latencies"], out["gc_pauses"]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _latency_run(cluster: HdfsCluster, work: Path, args, name: str, source, r,
                 seconds: float) -> tuple[dict, list]:
    """One broker of ``source`` (None: this tree) on a log of its own, loaded by
    :func:`produce_latencies`: (latency percentiles, the producer's full collections);
    with ``--trace`` its stages are printed."""
    tag = "".join(c for c in name if c.isalnum())
    trace = work / f"trace-{tag}-{r}.json"
    env = synctrace.preload_env(work / "trace", trace) if args.trace else None
    with BrokerProcess(f"{cluster.hdfs_uri}/bench-latency-{tag}-{r}",
                       log_path=work / f"broker-lat-{tag}.log", log_level="WARNING",
                       start_timeout=120, source=source, env=env) as broker:
        with Admin(broker.address) as admin:
            admin.create_topic("latency", 1)
        latencies, pauses = produce_latencies(broker.address, args.rate, seconds,
                                              args.warmup)
    if args.trace:
        print(f"    broker stages, p50/p99 ms: {synctrace.summary_line(trace)}",
              file=sys.stderr)
    return percentiles(latencies), pauses


def part_latency(cluster: HdfsCluster, work: Path, args) -> None:
    """The hsync floor and the produce latency, ``--rounds`` times; with
    ``--baseline-src``, each round also runs a broker of each such checkout, the order
    reversed every other round, so all see the same machine."""
    variants: dict = {os.path.basename(os.path.normpath(d)): d for d in args.baseline_src}
    variants["this tree"] = None
    if args.cluster_warmup > 0:
        res, _ = _latency_run(cluster, work, args, "this tree", None, "warmup",
                              args.cluster_warmup)
        print(f"  cluster warm-up ({args.cluster_warmup:g} s, not counted): p50 "
              f"{res['p50']:.2f} ms  p99 {res['p99']:.2f} ms", file=sys.stderr)
    floor: list[dict] = []
    runs: dict = {name: [] for name in variants}
    for r in range(args.rounds):
        floor.append(percentiles(hsync_round_trips(
            f"{cluster.hdfs_uri}/bench-latency-hsync-{r}.bin", 2000)))
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        for name in order:
            res, pauses = _latency_run(cluster, work, args, name, variants[name], r,
                                       args.seconds)
            runs[name].append(res)
            print(f"  round {r + 1} {name:<14}: p50 {res['p50']:6.2f} ms  p99 "
                  f"{res['p99']:7.2f} ms  (hsync floor p50 {floor[-1]['p50']:.2f} ms, p99 "
                  f"{floor[-1]['p99']:.2f} ms; load {os.getloadavg()[0]:.1f}; the producer's "
                  f"full collections: {len(pauses)}, longest "
                  f"{max(pauses, default=0) * 1e3:.1f} ms)", file=sys.stderr)
    print(f"\nproduce latency, acks=all, 100-byte records at {args.rate} records/s for "
          f"{args.seconds:g} s, one partition, {args.datanodes} DataNodes; medians of "
          f"{args.rounds} round(s); load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    f50, f99 = (_median([f[k] for f in floor]) for k in ("p50", "p99"))
    print(f"  Hadoop client write+hsync : p50 {f50:6.2f} ms  p99 {f99:6.2f} ms"
          f"  (2000 calls a round, one at a time)")
    for name, results in runs.items():
        p50, p99 = (_median([x[k] for x in results]) for k in ("p50", "p99"))
        print(f"  produce -> ack, {name:<14}: p50 {p50:6.2f} ms  p99 {p99:7.2f} ms  "
              f"(p99 {p99 / f99:.1f}x the hsync p99; target p99 <= 10 ms)")


def part_scan(cluster: HdfsCluster, work: Path, args) -> None:
    from pyspark.sql import functions as F

    from sparklog.spark import local_session
    from sparklog.spark.jvm import COUNT_PUSHDOWN_OPTION

    root = f"{cluster.hdfs_uri}/bench-scan/log"
    parquet_local = work / "parquet"
    parquet_local.mkdir()
    generate(root, parquet_local, args.records, args.partitions, 100, 8192)
    put = cluster.run_tool("dfs", "-put", str(parquet_local), "/bench-scan/parquet",
                           timeout=600)
    assert put.returncode == 0, put.stderr[-2000:]
    parquet = f"{cluster.hdfs_uri}/bench-scan/parquet"
    spark = local_session("bench-hdfs-scan", conf={"spark.driver.memory": "2g"})
    sources = {
        "sparklog": lambda: spark.read.format("sparklog").option("path", root)
        .option("subscribe", TOPIC).load(),
        # the same read without COUNT(*) push-down: count() from the rows
        "unpushed": lambda: spark.read.format("sparklog").option("path", root)
        .option("subscribe", TOPIC).option(COUNT_PUSHDOWN_OPTION, "false").load(),
        "parquet": lambda: spark.read.parquet(parquet),
    }
    plan = sources["sparklog"]()._jdf.queryExecution().executedPlan().toString()
    reader = "JVM reader" if "JVM columnar reader" in plan else "Python reader"
    n = sources["parquet"]().count()
    assert sources["sparklog"]().count() == n == (args.records // args.partitions) \
        * args.partitions
    queries = {"count()": lambda df: df.count(),
               "agg(value)": lambda df: df.agg(F.sum(F.length("value")),
                                               F.max("value")).collect()}
    print(f"\nscan: {n:,} records of 100-byte values in {args.partitions} partitions in "
          f"HDFS; format('sparklog') on its {reader} vs Parquet; best of {args.repeat}, "
          f"in turn; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    counted = sources["sparklog"]().selectExpr("count(*)")._jdf.queryExecution() \
        .executedPlan().toString()
    print(f"  count(): {'answered on the driver' if 'LocalTableScan' in counted else 'not'} "
          f"(push-down); unpushed: {COUNT_PUSHDOWN_OPTION}=false")
    print(f"  {'query':<12} {'sparklog rows/s':>16} {'unpushed rows/s':>16} "
          f"{'parquet rows/s':>15} {'ratio':>6} {'unpushed ratio':>15}")
    for qname, query in queries.items():
        best = best_times_in_turn({s: (lambda make=make: query(make()))
                                   for s, make in sources.items()}, args.repeat)
        rates = {s: n / t for s, t in best.items()}
        print(f"  {qname:<12} {rates['sparklog']:>16,.0f} {rates['unpushed']:>16,.0f} "
              f"{rates['parquet']:>15,.0f} "
              f"{rates['sparklog'] / rates['parquet']:>6.2f} "
              f"{rates['unpushed'] / rates['parquet']:>15.2f}")
    print(f"  target: ratio >= 1.0 (load average at the end {os.getloadavg()[0]:.1f})")
    spark.stop()


PARTS = {"ingest": part_ingest, "latency": part_latency, "scan": part_scan}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="ingest,latency,scan",
                    help="comma-separated parts to run (ingest, latency, scan)")
    ap.add_argument("--datanodes", type=int, default=3)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cluster-warmup", type=float, default=15.0,
                    help="latency: seconds of the load on a broker of this tree before "
                         "the rounds, not counted (the DataNodes' JIT warm)")
    ap.add_argument("--warmup", type=float, default=2.0,
                    help="latency: seconds of the same load before the measured ones, "
                         "each broker")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="latency: rounds (medians are reported)")
    ap.add_argument("--trace", action="store_true",
                    help="latency: time each broker's stages (bench/synctrace.py) and "
                         "print them after each run")
    ap.add_argument("--baseline-src", action="append", default=[],
                    help="latency: a sparklog checkout whose broker runs beside this "
                         "tree's in every round (e.g. an export of the previous commit); "
                         "repeatable")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.part.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="bench-hdfs-"))
    try:
        print(f"starting HDFS ({args.datanodes} DataNodes)...", file=sys.stderr)
        with HdfsCluster(str(work / "hdfs"), datanodes=args.datanodes) as cluster:
            os.environ["HADOOP_CONF_DIR"] = cluster.conf_dir  # brokers and this process
            for part in parts:
                PARTS[part](cluster, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
