"""Cost of exactly-once: an incremental job committing to Delta / Parquet beside a plain
``df.write.parquet`` of the same records, in the same Spark session (target: the
exactly-once run takes at most 10% longer).

Writes a topic of P partitions holding N records of V-byte values through the partition
log. Each repeat then times, in alternating order:

* **plain**: ``spark.read.format("sparklog")`` of the whole topic, the job's SQL, and
  ``df.write.parquet`` into a new directory (no offsets, no atomicity);
* **delta** / **parquet**: :func:`sparklog.spark.jobs.run_incremental` of a fresh
  application into a new output: cleanup, planning from the output, the same read, SQL
  and Spark write, the Parquet footers, and the atomic commit with the offsets;

and prints the median seconds, records/s and the ratio exactly-once / plain.

    .venv/bin/python bench/bench_exactly_once.py [--records 1000000] [--partitions 4]
        [--value-bytes 100] [--repeat 3] [--formats delta,parquet] [--root DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_spark_scan import fixed_binary  # noqa: E402

from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.log.partition import PartitionLog  # noqa: E402
from sparklog.metadata import TopicStore  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402

TOPIC = "bench"
BASE_TS = 1_700_000_000_000
SQL = "SELECT topic, partition, offset, timestamp, key, value FROM input"
TARGET = 1.10


def generate(root_uri: str, records: int, partitions: int, width: int,
             per_frame: int = 8192) -> None:
    """The topic, written through the partition log (frames of ``per_frame`` records)."""
    configs = {"segment.bytes": str(64 << 20)}
    store = TopicStore(root_uri, open_fileio(root_uri))
    store.create_topic(TOPIC, partitions, configs=configs)
    rng = np.random.default_rng(7)
    per_partition = records // partitions
    bar = tqdm(total=per_partition * partitions, desc="generate", unit="rec", file=sys.stderr)
    for p in range(partitions):
        plog = PartitionLog.open(store.fileio, store.partition_dir(TOPIC, p), configs)
        for offset in range(0, per_partition, per_frame):
            n = min(per_frame, per_partition - offset)
            values = fixed_binary(rng.bytes(n * width), width, n)
            keys = fixed_binary(rng.bytes(n * 8), 8, n)
            stamps = BASE_TS + np.arange(offset, offset + n, dtype=np.int64)
            plog.append(encode_frame(raw_batch(values, keys), timestamps=pa.array(stamps)))
            bar.update(n)
        plog.flush()
        plog.close()
    bar.close()


def session():
    from sparklog.spark import local_session

    return local_session("bench-exactly-once", shuffle_partitions=2, conf={
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"})


def plain_write(spark, root_uri: str, out: str) -> None:
    """The baseline: the same read and SQL, a plain Parquet write."""
    import sparklog.spark

    sparklog.spark.register(spark)
    df = (spark.read.format("sparklog").option("path", root_uri).option("subscribe", TOPIC)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    df.createOrReplaceTempView("input")
    spark.sql(SQL).write.mode("errorifexists").parquet(out)


def exactly_once(spark, root_uri: str, out: str, fmt: str, app: str) -> int:
    from sparklog.spark.jobs import run_incremental

    result = run_incremental(spark, app_id=app, subscribe=TOPIC, path=root_uri, output=out,
                             format=fmt, transform=SQL)
    return result.output_records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--formats", default="delta,parquet")
    parser.add_argument("--root", default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    work = Path(args.root or tempfile.mkdtemp(prefix="sparklog-bench-eo-"))
    log_dir = work / "log"
    shutil.rmtree(work / "out", ignore_errors=True)
    if not log_dir.exists():
        log_dir.mkdir(parents=True)
        generate(log_dir.as_uri(), args.records, args.partitions, args.value_bytes)
    root_uri = log_dir.as_uri()
    records = (args.records // args.partitions) * args.partitions
    spark = session()
    try:
        plain_write(spark, root_uri, (work / "out" / "warmup").as_uri())  # JIT, workers
        times: dict = {k: [] for k in ["plain", *formats]}
        steps = args.repeat * (1 + len(formats))
        bar = tqdm(total=steps, desc="runs", file=sys.stderr)
        for i in range(args.repeat):
            order = ["plain", *formats]
            if i % 2:
                order.reverse()
            for kind in order:
                out = (work / "out" / f"{kind}-{i}").as_uri()
                t0 = time.perf_counter()
                if kind == "plain":
                    plain_write(spark, root_uri, out)
                else:
                    written = exactly_once(spark, root_uri, out, kind, f"bench-{i}")
                    assert written == records, (written, records)
                times[kind].append(time.perf_counter() - t0)
                bar.update(1)
        bar.close()
    finally:
        spark.stop()
        if args.root is None:
            shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(times["plain"])
    print(f"{records:,} records, {args.partitions} partitions, {args.value_bytes}-byte values; "
          f"median of {args.repeat} runs")
    print(f"{'run':<22}{'seconds':>9}{'records/s':>14}{'ratio':>8}")
    print(f"{'plain df.write.parquet':<22}{base:>9.2f}{records / base:>14,.0f}{1.0:>8.3f}")
    worst = 0.0
    for fmt in formats:
        t = statistics.median(times[fmt])
        worst = max(worst, t / base)
        print(f"{'exactly-once ' + fmt:<22}{t:>9.2f}{records / t:>14,.0f}{t / base:>8.3f}")
    verdict = "meets" if worst <= TARGET else "misses"
    print(f"worst overhead {100 * (worst - 1):+.1f}% ({verdict} the target <= "
          f"+{100 * (TARGET - 1):.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
