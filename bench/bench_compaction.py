"""Log compaction: cleaning rate beside a raw read + write of the same bytes, and a
broker's produce rate while its cleaner runs beside the same broker idle (same run).

1. **Cleaning.** A compacted partition of N records (100-byte values, K distinct keys,
   frames of R records) is written, then cleaned (``sparklog.log.cleaner.clean``: key
   map over the dirty segments, then every sealed segment read and rewritten). The
   baseline reads the same segment files through the same FileIO in 8 MiB calls and
   writes those bytes to one file, synced (fsync) and closed before its clock stops,
   as each cleaned segment is, in several ways (``--raw``, all by default), each
   measured every round: a new file through the FileIO (as the cleanings write), a new
   file with write(2), a file preallocated (fallocate, synced) before the clock starts,
   and a new file written with O_DIRECT from aligned buffers (left out, the reason
   printed, where the filesystem refuses it). A copy's speed on a virtual disk swings by itself
   from run to run; each cleaner is judged against the fastest way (by median: the
   strictest baseline), its ratios against the others printed beside.
   With ``--spark`` the Spark job cleans too
   (:func:`sparklog.spark.jobs.compaction.compact_partition` on local[2], timed from the call
   to its return: planning, the job, the driver's commits). Every measured step runs
   on a fresh copy of the partition, after ``sync`` (the copy in the page cache,
   clean; no writeback nor discard of an earlier step pending), and deletes its copy
   and output after its clock stopped. ``--warmup`` rounds (default 1: JIT, Python
   workers, imports) are run first and not counted; before each job a trivial job on
   every core keeps the Python workers warm (PySpark ends one idle for a minute); the
   session's JVM runs with ``--java-options`` (default ``-XX:TieredStopAtLevel=1``: its
   optimizing compiler took more CPU per job than the JVM's own work in it). The
   order of the steps rotates from round to round; prints the median MB/s of each and
   the median of the per-round ratios (target >= 0.5). The default partition (5M
   records, 710 MB) is large enough that the job's fixed costs (three stages, their
   tasks' start-up) are a small part of its time.
2. **Produce while cleaning.** A real broker process (``log.cleaner.backoff.ms=50``)
   gets pipelined acks=1 produce requests (bench_broker_ingest's client) to a
   delete-policy topic while a second producer process keeps overwriting 20k keys:
   of a delete-policy topic (the cleaner idle), or of a compacted topic of 1 MiB
   segments (the cleaner cleaning without pause). Both rounds carry the same client
   load, so the ratio is the cost of the cleaner. Rounds alternate; the medians and the median of the per-round
   ratios are printed (target >= 0.8). The broker cleans in a helper process
   (``log.cleaner.process.enable``, the default); ``--cleaner-thread`` in its thread.

    .venv/bin/python bench/bench_compaction.py [--records 5000000] [--keys 500000]
        [--records-per-frame 1000] [--segment-bytes 16777216] [--mb 128] [--rounds 3]
        [--warmup 1] [--skip-produce] [--skip-cleaning] [--spark]
        [--java-options '-XX:TieredStopAtLevel=1'] [--cleaner-thread]
        [--raw fileio,new,prealloc,direct]
"""

from __future__ import annotations

import argparse
import mmap
import multiprocessing
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
sys.path.insert(0, str(ROOT / "bench"))

from bench_broker_ingest import broker_ingest, build_requests  # noqa: E402

from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.log import PartitionLog  # noqa: E402
from sparklog.log.cleaner import clean  # noqa: E402
from sparklog.protocol import ApiKey, Connection  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process)

CHUNK = 8 << 20


def keyed_frames(count: int, per_frame: int, keys: int):
    """``count`` frames of ``per_frame`` records whose keys cycle through ``keys``."""
    for f in range(count):
        first = f * per_frame
        ks = [b"key-%09d" % ((first + i) % keys) for i in range(per_frame)]
        values = [(b"%012d-" % (first + i)).ljust(100, b"v") for i in range(per_frame)]
        yield encode_frame(raw_batch(values, keys=ks), timestamps=[1_700_000_000_000] * per_frame)


def build_log(fileio, directory, config, args) -> int:
    """Write the partition; returns the bytes of its sealed segments."""
    count = args.records // args.records_per_frame
    with PartitionLog.open(fileio, directory, config) as plog:
        for frame in tqdm(keyed_frames(count, args.records_per_frame, args.keys), total=count,
                          desc="writing the log", unit="frame", leave=False):
            plog.append(frame)
        plog.roll()
        return sum(s.size for s in plog.segments[:-1])


#: the raw read + write's ways of writing (``--raw``): what each does, in the report
RAW_WAYS = {
    "fileio": "new file through the FileIO",
    "new": "new file, write(2)",
    "prealloc": "preallocated file (fallocate)",
    "direct": "new file, O_DIRECT from aligned buffers",
}
#: O_DIRECT's alignment of offsets, lengths and buffers (a multiple of any block size
#: a Linux filesystem asks for; the buffer is an anonymous mmap: page-aligned)
DIRECT_ALIGN = 4096


def _chunks(fileio, paths):
    """The bytes of ``paths``, read through ``fileio`` in 8 MiB calls (every raw way
    reads so, as the cleanings read: from the page cache, the copy being clean there)."""
    for path in tqdm(paths, desc="raw read+write", unit="file", leave=False):
        size, pos = fileio.size(path), 0
        while pos < size:
            data = fileio.read_range(path, pos, CHUNK)
            yield data
            pos += len(data)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_direct(fd: int, chunks) -> None:
    """Write ``chunks`` to ``fd`` (opened O_DIRECT) through one page-aligned 8 MiB
    buffer; the last block is padded to :data:`DIRECT_ALIGN` and the file cut back to
    the bytes written."""
    buf = mmap.mmap(-1, CHUNK)
    view, fill, total = memoryview(buf), 0, 0
    try:
        for data in chunks:
            src = memoryview(data)
            while src:
                n = min(len(src), CHUNK - fill)
                view[fill:fill + n] = src[:n]
                fill, src = fill + n, src[n:]
                if fill == CHUNK:
                    _write_all(fd, view)
                    total, fill = total + CHUNK, 0
        if fill:
            aligned = -(-fill // DIRECT_ALIGN) * DIRECT_ALIGN
            view[fill:aligned] = bytes(aligned - fill)
            _write_all(fd, view[:aligned])
            os.ftruncate(fd, total + fill)
    finally:
        view.release()
        buf.close()


def direct_refused(directory: str) -> str | None:
    """Why O_DIRECT writes cannot run in ``directory`` (None when they can): the
    filesystem (tmpfs, some overlays) or the OS may refuse the flag or the write."""
    if not hasattr(os, "O_DIRECT"):
        return "this OS has no O_DIRECT"
    probe = os.path.join(directory, "o_direct.probe")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o644)
        try:
            _write_direct(fd, [b"x" * DIRECT_ALIGN])
        finally:
            os.close(fd)
    except OSError as exc:
        return f"the filesystem of {directory} refuses it ({exc.strerror or exc})"
    finally:
        Path(probe).unlink(missing_ok=True)
    return None


def raw_read_write(fileio, paths, out_path: str, way: str = "fileio",
                   nbytes: int = 0) -> float:
    """Seconds to read ``paths`` (:func:`_chunks`) and write the bytes to the new file
    ``out_path``, synced (fsync, as each cleaned segment is) and closed before the clock
    stops; ``way`` (:data:`RAW_WAYS`) says how it is written: ``fileio`` through the
    FileIO (its lease and checks, as the cleanings write), ``new`` with write(2),
    ``prealloc`` with write(2) into ``nbytes`` allocated (fallocate) and synced before
    the clock starts, ``direct`` with O_DIRECT (no page cache: the fsync waits for no
    writeback).
    """
    if way == "fileio":
        start = time.perf_counter()
        out = fileio.create(out_path)
        for data in _chunks(fileio, paths):
            out.write(data)
        out.sync()
        out.close()
        return time.perf_counter() - start
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | (os.O_DIRECT if way == "direct" else 0)
    fd = os.open(out_path, flags, 0o644)
    try:
        if way == "prealloc":  # allocated and durable before the clock starts
            os.posix_fallocate(fd, 0, nbytes)
            os.fsync(fd)
        start = time.perf_counter()
        if way == "direct":
            _write_direct(fd, _chunks(fileio, paths))
        else:
            for data in _chunks(fileio, paths):
                _write_all(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        return time.perf_counter() - start
    finally:
        if fd >= 0:
            os.close(fd)


def settle() -> None:
    """Write back every dirty page and finish pending discards (``sync(2)``), so that
    the step measured next pays neither for the copy it reads (written just before)
    nor for what the previous step wrote or deleted; the copy stays in the page cache,
    clean."""
    os.sync()


def _warm_worker(_) -> int:
    """Run in a Spark Python worker: import what the job's tasks import."""
    import sparklog.spark.jobs.compaction  # noqa: F401

    return os.getpid()


class Steps:
    """The measured steps of :func:`bench_cleaning`, each on a fresh copy of the
    partition (``source``), opened, then settled (:func:`settle`) as its clock
    starts; each deletes its copy and output after its clock stopped."""

    def __init__(self, fileio, root: str, source: Path, config: dict, spark=None):
        self.fileio, self.root, self.source, self.config = fileio, root, source, config
        self.spark = spark
        self.segments = 0

    def _copy(self, name: str) -> Path:
        copy = Path(self.root, name)
        shutil.copytree(self.source, copy)
        return copy

    def raw(self, way: str) -> float:
        """The raw read + write of the copy's sealed segments, written ``way``
        (:func:`raw_read_write`)."""
        copy, out = self._copy("raw"), os.path.join(self.root, "raw.bin")
        try:
            with PartitionLog.open(self.fileio, str(copy), self.config) as plog:
                paths = [s.path for s in plog.segments[:-1]]
            self.segments = len(paths)
            nbytes = sum(self.fileio.size(p) for p in paths)
            settle()
            return raw_read_write(self.fileio, paths, out, way, nbytes)
        finally:
            Path(out).unlink(missing_ok=True)
            shutil.rmtree(copy, ignore_errors=True)

    def broker(self):
        """``(seconds, CleanResult)`` of the broker path's cleaning of a copy."""
        copy = self._copy("broker")
        try:
            with PartitionLog.open(self.fileio, str(copy), self.config) as plog:
                settle()
                start = time.perf_counter()
                result = clean(plog, force=True)
                return time.perf_counter() - start, result
        finally:
            shutil.rmtree(copy, ignore_errors=True)

    def job(self):
        """``(seconds, CleanResult)`` of the Spark job's cleaning of a copy (planning,
        the job and the driver's commits), its Python workers warm: a job runs first
        on every core that imports what the tasks import, as the previous partition's
        job of ``sparklog compact --spark`` leaves them (PySpark ends a worker idle for
        a minute, and a new one pays the imports, seconds on a loaded machine)."""
        from sparklog.spark.jobs.compaction import compact_partition

        copy = self._copy("job")
        sc = self.spark.sparkContext
        sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism) \
            .map(_warm_worker).collect()
        try:
            with PartitionLog.open(self.fileio, str(copy), self.config) as plog:
                settle()
                start = time.perf_counter()
                result = compact_partition(self.spark, plog, force=True)
                return time.perf_counter() - start, result
        finally:
            shutil.rmtree(copy, ignore_errors=True)


def raw_ways(root: str, wanted: str) -> list[str]:
    """The raw ways of ``--raw`` (comma-separated) that run in ``root``; an unknown
    name is an error, a way the filesystem refuses is left out with the reason printed."""
    ways = [w.strip() for w in wanted.split(",") if w.strip()]
    unknown = [w for w in ways if w not in RAW_WAYS]
    if unknown or not ways:
        raise SystemExit(f"--raw {wanted!r}: unknown way(s) {', '.join(unknown) or '(none)'}; "
                         f"choose among {', '.join(RAW_WAYS)}")
    if "direct" in ways:
        reason = direct_refused(root)
        if reason:
            print(f"raw read + write with O_DIRECT left out: {reason}", file=sys.stderr)
            ways.remove("direct")
            if not ways:
                raise SystemExit("--raw: no raw way left to measure")
    return ways


def _ratios(base: list[float], times: list[float]) -> list[float]:
    return [a / b for a, b in zip(base, times)]


def report_cleaning(nbytes: int, times: dict[str, list[float]], ways: list[str],
                    cleaners: list[str]) -> None:
    """Print each raw way's median, then each cleaner's, its ratio against the fastest
    raw way (by median: the strictest baseline, the one the target is judged against)
    round by round, and its ratios against the other raw ways beside it."""
    def rate(ts):
        return nbytes / statistics.median(ts) / 1e6

    fastest = max(ways, key=lambda w: rate(times[f"raw-{w}"]))
    width = max(len(RAW_WAYS[w]) for w in ways) + 2
    for w in ways:
        ts = times[f"raw-{w}"]
        mark = "   <- the fastest: the baseline" if w == fastest and len(ways) > 1 else ""
        print(f"raw read + write, {RAW_WAYS[w] + ':':{width}} {rate(ts):8.1f} MB/s "
              f"({statistics.median(ts):6.2f} s; per round: "
              f"{', '.join(f'{nbytes / t / 1e6:.0f}' for t in ts)}){mark}")
    labels = {"broker": "cleaning (broker path)", "job": "cleaning (Spark job)"}
    for name in cleaners:
        ts = times[name]
        per_round = _ratios(times[f"raw-{fastest}"], ts)
        ratio = statistics.median(per_round)
        print(f"{labels[name] + ':':{width + 18}} {rate(ts):8.1f} MB/s "
              f"({statistics.median(ts):6.2f} s)")
        print(f"  ratio vs the fastest raw way ({fastest}): {ratio:5.2f} (per round: "
              f"{', '.join(f'{x:.2f}' for x in per_round)}); target >= 0.5: "
              f"{'met' if ratio >= 0.5 else 'NOT met'}")
        others = [w for w in ways if w != fastest]
        if others:
            print("  beside it, vs " + ", vs ".join(
                f"{w} {statistics.median(_ratios(times[f'raw-{w}'], ts)):.2f}"
                for w in others))


def bench_cleaning(root: str, args) -> None:
    """Warm-up, then rounds of each raw way's copy (``--raw``), the broker path's
    cleaning and (``--spark``) the Spark job, each on a fresh settled copy of the same
    partition, their order rotating from round to round; medians and the medians of
    the per-round ratios (:func:`report_cleaning`)."""
    fileio = open_fileio(root)
    ways = raw_ways(root, args.raw)
    source = Path(root, "source")
    config = {"cleanup.policy": "compact", "segment.bytes": args.segment_bytes,
              "file.delete.delay.ms": 0}
    nbytes = build_log(fileio, str(source), config, args)
    spark = None
    if args.spark:
        from sparklog.spark import local_session

        conf = {"spark.driver.extraJavaOptions": args.java_options} if args.java_options \
            else None
        spark = local_session("bench-compaction", cores=2, shuffle_partitions=4,
                              register_source=False, jvm_reader=False, conf=conf)
        print(f"Spark job's JVM options: {args.java_options or '(the JVM defaults)'}",
              file=sys.stderr)
    steps = Steps(fileio, root, source, config, spark)
    cleaners = ["broker"] + (["job"] if spark is not None else [])
    names = [f"raw-{w}" for w in ways] + cleaners
    run = {f"raw-{w}": (lambda w=w: (steps.raw(w), None)) for w in ways}
    run.update({"broker": steps.broker, "job": steps.job})
    for w in range(args.warmup):  # JIT, Python workers, imports, allocators: warm
        firsts = {name: run[name]()[0] for name in names}
        print(f"  warm-up {w + 1} (not counted): " + ", ".join(
            f"{name} {nbytes / t / 1e6:.1f} MB/s" for name, t in firsts.items()),
            file=sys.stderr)
    times: dict[str, list[float]] = {name: [] for name in names}
    result = None
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t, out = run[name]()
            times[name].append(t)
            result = out if out is not None and name == "broker" else result
        load = os.getloadavg()[0]
        print(f"  round {r + 1} ({', '.join(order)}; load {load:.1f}): " + ", ".join(
            f"{name} {nbytes / times[name][-1] / 1e6:.1f} MB/s" for name in names),
            file=sys.stderr)
    print(f"{args.records:,} records, {args.keys:,} keys, {nbytes / 1e6:.1f} MB in "
          f"{steps.segments} segments; cleaned into {result.segments_written} segment(s), "
          f"{result.bytes_written / 1e6:.1f} MB kept; medians of {args.rounds} round(s) "
          f"after {args.warmup} warm-up round(s); load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    report_cleaning(nbytes, times, ways, cleaners)
    if spark is not None:
        spark.stop()


def _overwrite_keys(address: str, stop, keys: int, topic: str) -> None:
    """A producer process that keeps overwriting ``keys`` keys of ``topic``."""
    frames = list(keyed_frames(8, 1000, keys))
    with Connection(address, client_id="bench-dirty") as conn:
        i = 0
        while not stop.is_set():
            conn.request(ApiKey.PRODUCE, {"acks": 1, "topics": [{"name": topic, "partitions": [
                {"partition": 0, "records": frames[i % len(frames)]}]}]})
            i += 1


def bench_produce(tmp: str, args) -> None:
    payloads = build_requests(8000, 1)
    count = max(1, args.mb * 1024 * 1024 // len(payloads[0]))
    storage = Path(tmp, "broker")
    storage.mkdir()
    overrides = ["--override", "log.cleaner.backoff.ms=50"]
    if args.cleaner_thread:
        overrides += ["--override", "log.cleaner.process.enable=false"]
    broker = BrokerProcess(storage.as_uri(), overrides,
                           log_path=Path(tmp, "broker.log"), log_level="INFO")
    idle, busy = [], []
    ctx = multiprocessing.get_context("spawn")
    with broker, Connection(broker.address, client_id="bench") as conn:
        conn.request(ApiKey.CREATE_TOPICS, {"topics": [
            {"name": "ingest", "num_partitions": 1},
            {"name": "churn", "num_partitions": 1, "configs": {
                "segment.bytes": str(1 << 20), "retention.bytes": str(8 << 20)}},
            {"name": "dirty", "num_partitions": 1, "configs": {
                "cleanup.policy": "compact", "segment.bytes": str(1 << 20),
                "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}}]})

        def measure(topic: str, desc: str) -> float:
            stop = ctx.Event()
            other = ctx.Process(target=_overwrite_keys,
                                args=(broker.address, stop, 20_000, topic))
            other.start()
            time.sleep(2)  # on "dirty": the cleaner has segments to clean
            try:
                return broker_ingest(conn, payloads, count, 8, desc)
            finally:
                stop.set()
                other.join()

        for r in range(args.rounds):
            idle.append(measure("churn", f"cleaner idle, round {r + 1}"))
            busy.append(measure("dirty", f"cleaner busy, round {r + 1}"))
    cleanings = Path(tmp, "broker.log").read_text().count("partition dirty-0: cleaned")
    total = sum(len(payloads[i % len(payloads)]) for i in range(count))
    print(f"(the broker's cleaner cleaned the compacted topic {cleanings} time(s) during "
          f"the busy rounds)")
    ratios = [i / b for i, b in zip(idle, busy)]
    print(f"produce, cleaner idle  {total / statistics.median(idle) / 1e6:8.1f} MB/s "
          f"(median of {len(idle)})")
    print(f"produce, cleaner busy  {total / statistics.median(busy) / 1e6:8.1f} MB/s"
          f"   ratio vs idle: {statistics.median(ratios):5.2f} (per round: "
          f"{', '.join(f'{x:.2f}' for x in ratios)}; target >= 0.8)")


def main(argv=None) -> int:
    """Run both measurements and print rates and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--records-per-frame", type=int, default=1000)
    parser.add_argument("--segment-bytes", type=int, default=16 << 20)
    parser.add_argument("--mb", type=int, default=128, help="MiB produced per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1,
                        help="cleaning: rounds run first and not counted")
    parser.add_argument("--skip-produce", action="store_true")
    parser.add_argument("--skip-cleaning", action="store_true")
    parser.add_argument("--cleaner-thread", action="store_true",
                        help="produce rounds: the broker cleans in its cleaner thread "
                             "(log.cleaner.process.enable=false), not in a helper process")
    parser.add_argument("--spark", action="store_true",
                        help="also clean with the Spark job (sparklog compact --spark) on "
                             "local[2], beside the same raw copy")
    parser.add_argument("--raw", default=",".join(RAW_WAYS),
                        help="cleaning: the raw read + write's ways of writing, each "
                             "measured every round (default: all of "
                             f"{', '.join(RAW_WAYS)}); the fastest is the baseline")
    parser.add_argument("--java-options", default="-XX:TieredStopAtLevel=1",
                        help="--spark: spark.driver.extraJavaOptions of the local session "
                             "(default: the client compiler only, see docs/operations.md "
                             "Compaction; '' for the JVM's defaults)")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="sparklog-bench-compaction-")
    try:
        if not args.skip_cleaning:
            bench_cleaning(tmp, args)
        if not args.skip_produce:
            bench_produce(tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
