"""hdfs:// write rate of sparklog's HadoopFileIO beside Hadoop's own client (same run).

Both write the same bytes to the same cluster at the same cadence: ``--chunk`` bytes
(default 1 MiB) per ``write``, then ``hflush`` (acks=1) or ``hsync`` (acks=all,
``--sync``). The baseline is Hadoop's Java client driven with no Python bytes crossing
into Java (one preallocated ``byte[]`` written again and again); sparklog's writes
Python ``bytes`` through its staging buffers (``sparklog/storage/hdfs.py``). The
difference is what the Python-to-Java path costs. Rounds alternate; the best of each
is compared. Prints both rates and their ratio (target >= 0.8).

    .venv/bin/python bench/bench_hdfs_client.py [--uri hdfs://nn:8020/tmp/bench]
        [--mb 64] [--chunk 1048576] [--rounds 3] [--sync]

Without ``--uri`` it starts a one-DataNode cluster of Apache Hadoop's daemons
(tests/support/hdfscluster.py) for the run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def java_baseline(fs, path: str, total: int, chunk: int, sync: bool) -> float:
    """Seconds for Hadoop's client alone to write ``total`` bytes in ``chunk`` writes."""
    import jpype

    from sparklog.storage import jvm

    client = fs._new_client()
    arr = jpype.JArray(jpype.JByte)(os.urandom(chunk))
    out = client.create(jvm.jclass("org.apache.hadoop.fs.Path")(path), True)
    flags = fs._sync_flags()
    start = time.perf_counter()
    for _ in range(total // chunk):
        out.write(arr, 0, chunk)
        out.hsync(flags) if sync else out.hflush()
    took = time.perf_counter() - start
    out.close()
    client.close()
    return took


def sparklog_writer(fs, path: str, total: int, chunk: int, sync: bool) -> float:
    """Seconds for HadoopFileIO to write ``total`` bytes of Python memory."""
    data = os.urandom(chunk)
    out = fs.create(path, overwrite=True)
    start = time.perf_counter()
    for _ in range(total // chunk):
        out.write(data)
        out.sync() if sync else out.flush()
    took = time.perf_counter() - start
    out.close()
    return took


def main(argv=None) -> int:
    """Run the benchmark and print the rates."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uri", help="a scratch directory on a running cluster")
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sync", action="store_true", help="hsync (acks=all) instead of hflush")
    args = ap.parse_args(argv)
    cluster = None
    if args.uri is None:
        from tests.support.hdfscluster import HdfsCluster

        print("starting a one-DataNode HDFS cluster...", file=sys.stderr, flush=True)
        cluster = HdfsCluster(tempfile.mkdtemp(prefix="sparklog-bench-hdfs-")).start()
        args.uri = cluster.hdfs_uri + "/tmp/bench"
    from sparklog.storage import open_fileio

    try:
        fs = open_fileio(args.uri)
        fs.mkdirs(args.uri)
        total = args.mb << 20
        best = {"hadoop": float("inf"), "sparklog": float("inf")}
        for r in range(args.rounds):
            for name, fn in (("hadoop", java_baseline), ("sparklog", sparklog_writer)):
                took = fn(fs, fs.join(args.uri, f"{name}-{r}"), total, args.chunk, args.sync)
                best[name] = min(best[name], took)
                print(f"round {r + 1}/{args.rounds} {name}: {total / took / 1e6:.1f} MB/s",
                      file=sys.stderr, flush=True)
        mode = "hsync" if args.sync else "hflush"
        rates = {k: total / v / 1e6 for k, v in best.items()}
        print(f"{args.mb} MiB in {args.chunk}-byte writes, {mode} after each (best of "
              f"{args.rounds}): Hadoop's client {rates['hadoop']:.1f} MB/s, sparklog "
              f"HadoopFileIO {rates['sparklog']:.1f} MB/s, ratio "
              f"{rates['sparklog'] / rates['hadoop']:.2f}")
        fs.delete(args.uri, recursive=True)
        fs.close()
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
