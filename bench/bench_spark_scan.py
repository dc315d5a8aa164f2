"""Spark scan rate of format("sparklog") beside Spark's native Parquet reader (same run,
same records), on the JVM reader and on the Python reader.

Writes a topic of P partitions holding N records of V-byte values (8-byte keys) through
the partition log (frames of R records, uncompressed, as a producer with
compression_type=none sends them), and the same records, in the Kafka source's columns,
as one Parquet file per partition (pyarrow, snappy). Then, in one local Spark session,
times two queries on each: ``count()`` and an aggregate over ``value``
(``sum(length(value))``, ``max(value)``), best of K runs after a warm-up, and prints
rows/s and the ratio sparklog / Parquet (target >= 0.7) for both readers of
format("sparklog"): the JVM reader (sparklog/spark/jvm, its jar built and put on the
session's classpath) and the Python reader (option ``sparklog.jvmReader=false``).

Parquet answers ``count()`` from its footers without reading data. The Python reader
always reads every column (PySpark 4.1 offers Python sources no column pruning); the
JVM reader prunes columns, so its ``count()`` reads frames without decoding bodies.

A third column, "py-ds floor", times a Python data source that yields the same number
of pre-built Arrow batches of the same shape without any I/O: the cost of Spark's
Python data source plumbing alone (worker, Arrow transfer, row conversion in the JVM),
an upper bound for any Python source on this machine.

Then the fixed cost of a query (count() of one record per partition) on each source:
Spark's Python data-source path pays most of a small scan before the first row. Last,
the rate of a stream (``readStream``, ``Trigger.AvailableNow``, noop sink) draining the
topic in one micro-batch, on each reader.

    .venv/bin/python bench/bench_spark_scan.py [--records 2000000] [--partitions 4]
        [--value-bytes 100] [--records-per-frame 8192] [--repeat 3] [--root DIR] [--no-jvm]
        [--jvm-option KEY=VALUE ...]

``--jvm-option`` passes a read option to the JVM reader's scans only (e.g. to compare a
setting of the JVM provider with its default in two runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.log.partition import PartitionLog  # noqa: E402
from sparklog.metadata import TopicStore  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402

TOPIC = "bench"
BASE_TS = 1_700_000_000_000


def fixed_binary(data: bytes, width: int, n: int) -> pa.Array:
    """A binary array of ``n`` values of ``width`` bytes cut from ``data`` (no copies)."""
    offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes())
    return pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(data)])


def generate(root_uri: str, parquet_dir: Path, records: int, partitions: int, width: int,
             per_frame: int) -> None:
    """Write the topic through the log and the same records as Parquet."""
    store = TopicStore(root_uri, open_fileio(root_uri))
    store.create_topic(TOPIC, partitions, configs={"segment.bytes": str(64 << 20)})
    rng = np.random.default_rng(7)
    per_partition = records // partitions
    bar = tqdm(total=per_partition * partitions, desc="generate", unit="rec", file=sys.stderr)
    for p in range(partitions):
        plog = PartitionLog.open(store.fileio, store.partition_dir(TOPIC, p),
                                 {"segment.bytes": str(64 << 20)})
        writer = None
        offset = 0
        while offset < per_partition:
            n = min(per_frame, per_partition - offset)
            values = fixed_binary(rng.bytes(n * width), width, n)
            keys = fixed_binary(rng.bytes(n * 8), 8, n)
            stamps = BASE_TS + np.arange(offset, offset + n, dtype=np.int64)
            plog.append(encode_frame(raw_batch(values, keys), timestamps=pa.array(stamps)))
            table = pa.table({
                "key": keys, "value": values,
                "topic": pa.array([TOPIC] * n, pa.string()),
                "partition": pa.array(np.full(n, p, np.int32)),
                "offset": pa.array(np.arange(offset, offset + n, dtype=np.int64)),
                "timestamp": pa.array(stamps).cast(pa.timestamp("ms", tz="UTC"))
                .cast(pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array(np.zeros(n, np.int32)),
            })
            if writer is None:
                writer = pq.ParquetWriter(parquet_dir / f"part-{p}.parquet", table.schema)
            writer.write_table(table)
            offset += n
            bar.update(n)
        plog.flush()
        plog.close()
        writer.close()
    bar.close()


def floor_source(per_partition: int, per_frame: int, width: int, name: str = "pyds_floor"):
    """A Python data source class yielding pre-built Kafka-shaped batches (no I/O)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from sparklog.spark.source.schema import arrow_schema, kafka_schema

    class FloorReader(DataSourceReader):
        def __init__(self, schema, partitions):
            self.schema, self.partitions_n = schema, partitions

        def partitions(self):
            return [InputPartition(i) for i in range(self.partitions_n)]

        def read(self, part):
            n = per_frame
            rng = np.random.default_rng(part.value)
            batch = pa.RecordBatch.from_arrays([
                fixed_binary(rng.bytes(n * 8), 8, n), fixed_binary(rng.bytes(n * width), width, n),
                pa.array([TOPIC] * n), pa.array(np.full(n, part.value, np.int32)),
                pa.array(np.arange(n, dtype=np.int64)),
                pa.array(np.arange(n, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC")),
                pa.array(np.zeros(n, np.int32))], schema=arrow_schema(self.schema))
            for start in range(0, per_partition, n):
                yield batch.slice(0, min(n, per_partition - start))

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return name

        def schema(self):
            return kafka_schema()

        def reader(self, schema):
            return FloorReader(schema, int(self.options.get("partitions", 4)))

    return FloorSource


def best_time(action, repeat: int) -> float:
    """Best wall time of ``repeat`` runs of ``action`` after one warm-up run."""
    action()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def best_times_in_turn(actions: dict, repeat: int) -> dict:
    """Best wall time of ``repeat`` runs of each of ``actions`` (name -> callable), after
    one warm-up run of each, the actions taking turns in every round: none is measured
    only while the JVM is colder (JIT, caches) or the machine busier than for the others."""
    for action in actions.values():
        action()
    times: dict = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            start = time.perf_counter()
            action()
            times[name].append(time.perf_counter() - start)
    return {name: min(t) for name, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--records-per-frame", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--root", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--no-jvm", action="store_true",
                    help="leave the JVM reader's jar off the classpath (Python reader only)")
    ap.add_argument("--jvm-option", action="append", default=[], metavar="KEY=VALUE",
                    help="a read option for the JVM reader's scans (repeatable)")
    args = ap.parse_args(argv)
    jvm_options = {}
    for item in args.jvm_option:
        key, eq, value = item.partition("=")
        if not eq or not key:
            ap.error(f"--jvm-option {item!r} is not KEY=VALUE")
        jvm_options[key] = value

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-spark-"))
    log_root, parquet_dir = work / "log", work / "parquet"
    log_root.mkdir(parents=True, exist_ok=True)
    parquet_dir.mkdir(parents=True, exist_ok=True)
    try:
        generate(log_root.as_uri(), parquet_dir, args.records, args.partitions,
                 args.value_bytes, args.records_per_frame)
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        import sparklog.spark
        from sparklog.spark.jvm import jar_path

        jar = None if args.no_jvm else jar_path()
        if jar is None:
            print("JVM reader jar unavailable: timing the Python reader only", file=sys.stderr)
        builder = SparkSession.builder if jar is None \
            else SparkSession.builder.config("spark.jars", jar)
        spark = (builder.master("local[2]").appName("bench-spark-scan")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.driver.memory", "2g")
                 .config("spark.ui.showConsoleProgress", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        sparklog.spark.register(spark)
        per_partition = args.records // args.partitions
        spark.dataSource.register(floor_source(per_partition, args.records_per_frame,
                                               args.value_bytes))
        def sparklog_df(jvm: bool, **options):
            reader = spark.read.format("sparklog").option("path", log_root.as_uri()) \
                .option("subscribe", TOPIC).option("sparklog.jvmReader", str(jvm).lower())
            for k, v in {**(jvm_options if jvm else {}), **options}.items():
                reader = reader.option(k, v)
            return reader.load()

        sources = {
            "jvm": lambda: sparklog_df(True),
            "python": lambda: sparklog_df(False),
            "parquet": lambda: spark.read.parquet(str(parquet_dir)),
            "floor": lambda: spark.read.format("pyds_floor")
            .option("partitions", args.partitions).load(),
        }
        if jar is None:
            del sources["jvm"]
        else:
            plan = sources["jvm"]()._jdf.queryExecution().executedPlan().toString()
            assert "JVM columnar reader" in plan, plan
        n = sources["python"]().count()
        assert all(make().count() == n for make in sources.values())
        assert n == per_partition * args.partitions
        queries = {
            "count()": lambda df: df.count(),
            "agg(value)": lambda df: df.agg(F.sum(F.length("value")), F.max("value")).collect(),
        }
        print(f"\n{n:,} records of {args.value_bytes}-byte values in {args.partitions} "
              f"partitions; best of {args.repeat} runs after a warm-up (local[2])")
        print(f"{'query':<12} {'JVM rows/s':>12} {'ratio':>6} {'Python rows/s':>14} {'ratio':>6} "
              f"{'parquet rows/s':>15} {'py-ds floor rows/s':>19}")
        for qname, query in tqdm(queries.items(), desc="queries", file=sys.stderr, leave=False):
            rates = {s: n / best_time(lambda: query(make()), args.repeat)
                     for s, make in sources.items()}
            jvm_rate = rates.get("jvm", float("nan"))
            print(f"{qname:<12} {jvm_rate:>12,.0f} {jvm_rate / rates['parquet']:>6.2f} "
                  f"{rates['python']:>14,.0f} {rates['python'] / rates['parquet']:>6.2f} "
                  f"{rates['parquet']:>15,.0f} {rates['floor']:>19,.0f}")
        print("target: ratio >= 0.7 (sparklog rows/s / Parquet rows/s)")
        # what every query pays before the first row: one record per partition
        spark.dataSource.register(floor_source(1, 1, args.value_bytes, "pyds_floor_one"))
        one = json.dumps({TOPIC: {str(p): 1 for p in range(args.partitions)}})
        fixed = {
            "JVM": lambda: sparklog_df(True, endingOffsets=one).count(),
            "Python": lambda: sparklog_df(False, endingOffsets=one).count(),
            "parquet": lambda: spark.read.parquet(str(parquet_dir)).where("offset < 1").count(),
            "floor": lambda: spark.read.format("pyds_floor_one")
            .option("partitions", args.partitions).load().count(),
        }
        if jar is None:
            del fixed["JVM"]
        cost = {s: best_time(q, args.repeat) for s, q in fixed.items()}
        print("fixed cost of a query (count() of one record per partition): "
              + ", ".join(f"{s} {c:.2f} s" for s, c in cost.items()))
        # a stream draining the topic in one Trigger.AvailableNow micro-batch (noop sink)
        runs = iter(range(10 ** 6))

        def drain(jvm: bool) -> None:
            query = (spark.readStream.format("sparklog").option("path", log_root.as_uri())
                     .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                     .option("sparklog.jvmReader", str(jvm).lower()).load()
                     .writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", str(work / f"ckpt-{next(runs)}")).start())
            query.awaitTermination()
            assert query.lastProgress["numInputRows"] == n, query.lastProgress

        streams = {"JVM": lambda: drain(True), "Python": lambda: drain(False)}
        if jar is None:
            del streams["JVM"]
        rates = {s: n / best_time(q, args.repeat) for s, q in streams.items()}
        print("stream, one AvailableNow micro-batch of every record into the noop sink: "
              + ", ".join(f"{s} {r:,.0f} rows/s" for s, r in rates.items()))
        spark.stop()
    finally:
        if not args.root:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
