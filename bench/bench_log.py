"""Partition log append and read rates beside raw sequential file I/O (same run, same bytes).

Appends N records of 100-byte values in frames of R records (pre-encoded: the producer's
cost is not the log's) to a PartitionLog, with a flush every F frames and a sync at
close, then reads them back three ways: PartitionLog.read (the broker's fetch path,
whole frames as bytes), LogReader.read_batches (the Spark path: decoded, sliced Arrow
batches with an __offset column) and LogReader.iter_frames (validated frames). The
baselines write the same frames to one file through the same FileIO (same flush
cadence, sync at close) and read that file back in 8 MiB read_range calls.

    .venv/bin/python bench/bench_log.py [--records 1000000] [--records-per-frame 1000]
        [--flush-every 10] [--segment-bytes 33554432] [--root URL] [--profile]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.format.header import unpack_header  # noqa: E402
from sparklog.log import LogReader, PartitionLog  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402

CHUNK = 8 << 20


def build_frames(records_per_frame: int, distinct: int = 8) -> list[bytes]:
    """A few distinct frames of 100-byte values (reused cyclically)."""
    frames = []
    for d in range(distinct):
        values = [(b"%09d-%03d-" % (i, d)).ljust(100, b"v") for i in range(records_per_frame)]
        frames.append(encode_frame(raw_batch(values), timestamps=[1_700_000_000_000 + i
                                                                  for i in range(records_per_frame)]))
    return frames


def raw_write(fileio, path, frames, count, flush_every) -> float:
    start = time.perf_counter()
    out = fileio.create(path)
    for i in tqdm(range(count), desc="raw write", unit="frame", leave=False):
        out.write(frames[i % len(frames)])
        if (i + 1) % flush_every == 0:
            out.flush()
    out.close()
    return time.perf_counter() - start


def raw_read(fileio, path) -> tuple[float, int]:
    start = time.perf_counter()
    size, pos = fileio.size(path), 0
    with tqdm(total=size, desc="raw read", unit="B", unit_scale=True, leave=False) as bar:
        while pos < size:
            data = fileio.read_range(path, pos, CHUNK)
            pos += len(data)
            bar.update(len(data))
    return time.perf_counter() - start, pos


def log_append(fileio, directory, config, frames, count, flush_every) -> float:
    start = time.perf_counter()
    with PartitionLog.open(fileio, directory, config) as plog:
        for i in tqdm(range(count), desc="log append", unit="frame", leave=False):
            plog.append(frames[i % len(frames)])
            if (i + 1) % flush_every == 0:
                plog.flush()
    return time.perf_counter() - start


def log_fetch(fileio, directory, config, end) -> tuple[float, int]:
    start = time.perf_counter()
    total = 0
    with PartitionLog.open(fileio, directory, config) as plog, \
            tqdm(total=end, desc="log fetch", unit="rec", unit_scale=True, leave=False) as bar:
        offset = 0
        while offset < end:
            result = plog.read(offset, 1 << 20)
            total += result.size
            pos = 0
            while pos < result.size:  # walk the headers to the next offset, as a fetcher does
                header = unpack_header(result.data, pos)
                nxt, pos = header.next_offset, pos + header.size
            bar.update(nxt - offset)
            offset = nxt
    return time.perf_counter() - start, total


def log_read_batches(fileio, directory, end) -> tuple[float, int]:
    start = time.perf_counter()
    rows = 0
    reader = LogReader(fileio, directory)
    with tqdm(total=end, desc="read_batches", unit="rec", unit_scale=True, leave=False) as bar:
        for batch in reader.read_batches(0, end):
            rows += batch.num_rows
            bar.update(batch.num_rows)
    return time.perf_counter() - start, rows


def log_iter_frames(fileio, directory, end) -> tuple[float, int]:
    start = time.perf_counter()
    size = 0
    for frame in LogReader(fileio, directory).iter_frames(0, end):
        size += frame.header.size
    return time.perf_counter() - start, size


def line(name, records, nbytes, seconds, base_seconds=None, base_name=""):
    text = (f"{name:<22} {records / seconds / 1e6:8.2f} M records/s "
            f"{nbytes / seconds / 1e6:9.1f} MB/s  ({seconds:6.3f} s)")
    if base_seconds is not None:
        text += f"   ratio vs {base_name}: {base_seconds / seconds:5.2f}"
    print(text)


def main(argv=None) -> int:
    """Run the benchmark and print rates and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--records-per-frame", type=int, default=1000)
    parser.add_argument("--flush-every", type=int, default=10, help="frames per flush")
    parser.add_argument("--segment-bytes", type=int, default=32 << 20)
    parser.add_argument("--root", help="storage URL to run on (default: a temporary directory)")
    parser.add_argument("--profile", action="store_true", help="profile with pyinstrument")
    args = parser.parse_args(argv)

    tmp = None if args.root else tempfile.mkdtemp(prefix="sparklog-bench-log-")
    root = args.root or tmp
    fileio = open_fileio(root)
    frames = build_frames(args.records_per_frame)
    count = args.records // args.records_per_frame
    records = count * args.records_per_frame
    nbytes = sum(len(frames[i % len(frames)]) for i in range(count))
    config = {"segment.bytes": args.segment_bytes}
    directory = fileio.join(root, "topics", "bench", "0")
    raw_path = fileio.join(root, "raw.bin")
    profiler = None
    if args.profile:
        from pyinstrument import Profiler
        profiler = Profiler()
    try:
        print(f"{records:,} records of 100 bytes in {count:,} frames of "
              f"{args.records_per_frame:,} ({nbytes / 1e6:.1f} MB), flush every "
              f"{args.flush_every} frames, segment.bytes={args.segment_bytes:,}")
        t_raw_w = raw_write(fileio, raw_path, frames, count, args.flush_every)
        if profiler:
            profiler.start()
        t_append = log_append(fileio, directory, config, frames, count, args.flush_every)
        t_raw_r, raw_bytes = raw_read(fileio, raw_path)
        t_fetch, fetched = log_fetch(fileio, directory, config, records)
        t_batches, rows = log_read_batches(fileio, directory, records)
        t_frames, frame_bytes = log_iter_frames(fileio, directory, records)
        if profiler:
            profiler.stop()
        assert raw_bytes == fetched == frame_bytes == nbytes and rows == records
        line("raw write (FileIO)", records, nbytes, t_raw_w)
        line("log append", records, nbytes, t_append, t_raw_w, "raw write")
        line("raw read (FileIO)", records, nbytes, t_raw_r)
        line("log fetch (bytes)", records, nbytes, t_fetch, t_raw_r, "raw read")
        line("log iter_frames (CRC)", records, nbytes, t_frames, t_raw_r, "raw read")
        line("log read_batches", records, nbytes, t_batches, t_raw_r, "raw read")
        if profiler:
            print(profiler.output_text(unicode=True, color=False))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
