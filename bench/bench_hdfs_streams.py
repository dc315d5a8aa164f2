"""What an HDFS output stream costs: the figures that chose the write path of docs/storage.md.

Runs on a real Apache Hadoop cluster (tests/support/hdfscluster.py: one NameNode, three
DataNodes, replication 3, stock DataNode settings, ``dfs.heartbeat.interval`` at Hadoop's
3 s) through sparklog's own ``HadoopFileIO``, the client the broker writes with, and
prints, each beside its alternative measured in the same run:

* ``open``: creating a stream (``create`` + a 100-byte write + ``hsync``), one after
  another and with ``--threads`` at once; the process's and each DataNode's threads with
  that many streams open (``/proc/<pid>/status``), so the per-stream cost is measured,
  not assumed;
* ``sync``: acks=all group commit at ``--rate`` records/s (100 bytes each) spread evenly
  over P partitions, each record answered after an ``hsync`` covering it: one stream per
  partition (``--io-threads`` workers, each taking a partition with records waiting,
  writing them and syncing its stream: the broker's per-partition writer) against one
  shared stream carrying every partition's records (one worker: write what waits, one
  ``hsync``, answer all); latency p50/p99/max from a record's arrival to its sync's
  return, and the syncs per second it took;
* ``read``: what a new leader reads back: a ``--read-mb`` file (a WAL file) read whole,
  and 1,000 positioned reads of 200 bytes (single frames) in it;
* ``takeover``: a child process opens N streams, writes and syncs each, and is killed
  with SIGKILL; the files are then taken over as a new leader does (``recover_lease``,
  ``append``, a write and ``hsync``), one after another and with ``--threads`` at once.
  Then a takeover of a broker's W WAL files (``--wal-files``, each W in turn): the
  leases of W files of a SIGKILLed writer recovered one after another
  (``recover_lease`` each) and W others at once (``recover_leases``, one wait).

    .venv/bin/python bench/bench_hdfs_streams.py [--part open,sync,takeover,read]
        [--rate 10000] [--seconds 10] [--partitions 1,100,1000] [--open-count 200]
        [--takeover-count 20] [--wal-files 1,4,16] [--read-mb 64] [--threads 16] [--io-threads 8] [--block-size 4194304]
        [--uri hdfs://nn:8020/user/bench/streams]

Without ``--uri`` it starts the cluster for the run (about 15 s) and stops it at the end.
With ``--uri`` the DataNode thread counts are not printed (their processes are not ours).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from tests.support.processes import threads_of  # noqa: E402

RECORD = b"r" * 100


def datanode_threads(cluster) -> str:
    """Each DataNode's thread count, or "-" without a cluster of ours."""
    if cluster is None:
        return "-"
    return "/".join(str(threads_of(dn.pid)) for dn in cluster.datanodes)


def pct(values: list[float], p: float) -> float:
    """The ``p`` quantile of ``values`` (nearest rank), in the values' unit."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def open_one(fs, path: str):
    """Create ``path``, write one record and hsync: a new partition's first append."""
    out = fs.create(path)
    out.write(RECORD)
    out.sync()
    return out


# open --------------------------------------------------------------------------------------
def part_open(fs, base: str, cluster, count: int, threads: int) -> None:
    """Stream creation, sequential and concurrent, and the threads open streams hold."""
    print(f"== open: {count} streams (create + 100-byte write + hsync each)", flush=True)
    me = os.getpid()
    before_me, before_dn = threads_of(me), datanode_threads(cluster)
    fs.mkdirs(fs.join(base, "open"))
    start = time.perf_counter()
    seq = [open_one(fs, fs.join(base, "open", f"s{i:05d}")) for i in range(count)]
    took_seq = time.perf_counter() - start
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        par = list(pool.map(lambda i: open_one(fs, fs.join(base, "open", f"p{i:05d}")),
                            range(count)))
        took_par = time.perf_counter() - start
    time.sleep(1.0)  # let the DataNodes' receiver threads settle
    open_me, open_dn = threads_of(me), datanode_threads(cluster)
    print(f"open, one after another: {took_seq / count * 1e3:.1f} ms per stream "
          f"({count} in {took_seq:.1f} s)")
    print(f"open, {threads} at once: {took_par / count * 1e3:.1f} ms per stream "
          f"({count} in {took_par:.1f} s, {took_seq / took_par:.1f}x)")
    print(f"threads with 0 streams open: this process {before_me}, DataNodes {before_dn}")
    print(f"threads with {2 * count} streams open: this process {open_me} "
          f"(+{(open_me - before_me) / (2 * count):.2f} per stream), DataNodes {open_dn}")
    for out in seq + par:
        out.close()
    time.sleep(1.0)
    print(f"threads after closing them: this process {threads_of(me)}, "
          f"DataNodes {datanode_threads(cluster)}", flush=True)


# sync --------------------------------------------------------------------------------------
class GroupCommit:
    """acks=all over ``streams``: records wait in their stream's queue; ``workers``
    threads each take a stream with records waiting (never one another worker holds),
    write them all, hsync once and answer them (their latency recorded)."""

    def __init__(self, streams: list, workers: int):
        self.streams = streams
        self.pending: list[list[float]] = [[] for _ in streams]
        self.state = [0] * len(streams)  # 0 idle, 1 queued, 2 being synced
        self.ready: collections.deque = collections.deque()
        self.cond = threading.Condition()
        self.latencies: list[float] = []
        self.syncs = 0
        self.sync_times: list[float] = []
        self.stopped = False
        self.threads = [threading.Thread(target=self._work, daemon=True)
                        for _ in range(workers)]
        for t in self.threads:
            t.start()

    def offer(self, i: int, arrived: float) -> None:
        with self.cond:
            self.pending[i].append(arrived)
            if self.state[i] == 0:
                self.state[i] = 1
                self.ready.append(i)
                self.cond.notify()

    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.ready and not self.stopped:
                    self.cond.wait()
                if self.stopped:
                    return
                i = self.ready.popleft()
                self.state[i] = 2
                batch, self.pending[i] = self.pending[i], []
            out = self.streams[i]
            out.write(RECORD * len(batch))
            t0 = time.perf_counter()
            out.sync()
            done = time.perf_counter()
            with self.cond:
                self.latencies.extend(done - t for t in batch)
                self.syncs += 1
                self.sync_times.append(done - t0)
                if self.pending[i]:
                    self.state[i] = 1
                    self.ready.append(i)
                    self.cond.notify()
                else:
                    self.state[i] = 0

    def drain(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.cond:
                if not self.ready and all(s == 0 for s in self.state):
                    return True
            time.sleep(0.01)
        return False

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()


def run_load(commit: GroupCommit, partitions: int, per_stream, rate: int,
             seconds: float, warmup: float) -> dict:
    """Offer ``rate`` records/s, each to a random partition (its stream
    ``per_stream(p)``), for ``warmup + seconds``; figures of the last ``seconds``."""
    start = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        if now - start >= warmup + seconds:
            break
        due = int((now - start) * rate)
        for _ in range(due - sent):
            commit.offer(per_stream(random.randrange(partitions)), now)
        if now - start < warmup:
            with commit.cond:
                commit.latencies.clear()
                commit.sync_times.clear()
                commit.syncs = 0
        sent = due
        time.sleep(0.0005)
    drained = commit.drain(60.0)
    with commit.cond:
        lat = list(commit.latencies)
        return {"records": len(lat), "syncs": commit.syncs, "lat": lat,
                "sync": list(commit.sync_times), "drained": drained}


def part_sync(fs, base: str, cluster, rate: int, seconds: float, partition_counts,
              io_threads: int, threads: int) -> None:
    """acks=all latency: a stream per partition against one shared stream."""
    print(f"== sync: acks=all at {rate} records/s of 100 bytes, {seconds:.0f} s measured "
          f"after 3 s of warm-up", flush=True)
    fs.mkdirs(fs.join(base, "sync"))
    rows = []
    for n in partition_counts:
        for layout in ("one stream per partition", "one shared stream"):
            if n == 1 and layout == "one shared stream":
                continue  # the same thing
            streams_n = n if layout.startswith("one stream per") else 1
            workers = io_threads if streams_n > 1 else 1
            tag = f"{n}-{streams_n}"
            with ThreadPoolExecutor(threads) as pool:
                streams = list(pool.map(
                    lambda i, tag=tag: open_one(fs, fs.join(base, "sync", f"{tag}-{i:05d}")),
                    range(streams_n)))
            me, dn = threads_of(os.getpid()), datanode_threads(cluster)
            commit = GroupCommit(streams, workers)
            if streams_n > 1:
                def per_stream(p):
                    return p
            else:
                def per_stream(p):
                    return 0
            res = run_load(commit, n, per_stream, rate, seconds, 3.0)
            commit.stop()
            for out in streams:
                out.close()
            lat_ms = [x * 1e3 for x in res["lat"]]
            sync_ms = [x * 1e3 for x in res["sync"]]
            row = (f"{n:>6} | {layout:<24} | {streams_n:>5} | {res['records'] / seconds:>8.0f} | "
                   f"{res['syncs'] / seconds:>7.0f} | {pct(sync_ms, 0.5):6.2f} | "
                   f"{pct(lat_ms, 0.5):6.2f} | {pct(lat_ms, 0.99):7.2f} | "
                   f"{max(lat_ms) if lat_ms else float('nan'):7.1f} | {me:>6} | {dn}"
                   + ("" if res["drained"] else " | NOT DRAINED in 60 s"))
            rows.append(row)
            print(row, flush=True)
    print("partitions | layout | streams | records/s answered | hsyncs/s | hsync p50 ms | "
          "latency p50 ms | p99 ms | max ms | threads here | DataNode threads")
    for row in rows:
        print(row)


# takeover ----------------------------------------------------------------------------------
CHILD = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from sparklog.storage import open_fileio
fs = open_fileio(sys.argv[2], block_size=4 << 20)
outs = []
for i in range(int(sys.argv[4])):
    out = fs.create(fs.join(sys.argv[2], sys.argv[3], f"f{i:05d}"))
    out.write(b"r" * 100)
    out.sync()
    outs.append(out)
print("ready", flush=True)
time.sleep(3600)
"""


def leave_open(base_url: str, sub: str, count: int, env: dict) -> None:
    """``count`` files under ``sub`` written and synced by a child process, then the
    child killed with SIGKILL: files under construction whose writer is gone."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, ROOT, base_url, sub, str(count)],
                            stdout=subprocess.PIPE, env=env, start_new_session=True)
    try:
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"child writer failed (said {line!r})")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def take_over(fs, path: str):
    """What a new leader does to a dead leader's file: recover the lease, append, sync."""
    fs.recover_lease(path)
    out = fs.append(path)
    out.write(RECORD)
    out.sync()
    return out


def part_takeover(fs, base: str, cluster, count: int, threads: int) -> None:
    """Taking over files of a SIGKILLed writer: one after another, and concurrently."""
    print(f"== takeover: {count} files of a SIGKILLed writer, then {count * 4} more",
          flush=True)
    env = dict(os.environ)
    if cluster is not None:
        env.update(cluster.env())
    for sub in ("seq", "par"):
        fs.mkdirs(fs.join(base, "takeover", sub))
    n_par = count * 4
    leave_open(fs.join(base, "takeover"), "seq", count, env)
    leave_open(fs.join(base, "takeover"), "par", n_par, env)
    times = []
    outs = []
    for i in range(count):
        t0 = time.perf_counter()
        outs.append(take_over(fs, fs.join(base, "takeover", "seq", f"f{i:05d}")))
        times.append(time.perf_counter() - t0)
    total_seq = sum(times)
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        outs += list(pool.map(
            lambda i: take_over(fs, fs.join(base, "takeover", "par", f"f{i:05d}")),
            range(n_par)))
        took_par = time.perf_counter() - start
    for out in outs:
        out.close()
    ms = [t * 1e3 for t in times]
    print(f"takeover one after another: {total_seq / count * 1e3:.0f} ms per file "
          f"(min {min(ms):.0f}, median {pct(ms, 0.5):.0f}, max {max(ms):.0f}); "
          f"{count} files in {total_seq:.1f} s")
    print(f"takeover {threads} at once: {took_par / n_par * 1e3:.0f} ms per file; "
          f"{n_par} files in {took_par:.1f} s", flush=True)


def part_wal_takeover(fs, base: str, cluster, wal_files: list[int]) -> None:
    """Fencing a dead broker's W WAL files: lease recovery one after another against
    ``recover_leases`` of all W at once (docs/storage.md, section 8, step 2)."""
    print(f"== takeover of W WAL files (W = {', '.join(map(str, wal_files))}): leases of a "
          "SIGKILLed writer's files recovered one after another vs all at once",
          flush=True)
    env = dict(os.environ)
    if cluster is not None:
        env.update(cluster.env())
    rows = []
    for w in wal_files:
        sub = f"wal-{w}"
        fs.mkdirs(fs.join(base, "takeover", sub))
        leave_open(fs.join(base, "takeover"), sub, 2 * w, env)
        paths = [fs.join(base, "takeover", sub, f"f{i:05d}") for i in range(2 * w)]
        start = time.perf_counter()
        for path in paths[:w]:
            fs.recover_lease(path)
        took_seq = time.perf_counter() - start
        start = time.perf_counter()
        fs.recover_leases(paths[w:])
        took_once = time.perf_counter() - start
        row = (f"{w:>3} | {took_seq:8.2f} s | {took_once:8.2f} s | "
               f"{took_seq / took_once:5.1f}x")
        rows.append(row)
        print(row, flush=True)
    print("  W | one after another (recover_lease each) | all at once (recover_leases) "
          "| ratio")
    for row in rows:
        print(row)


# read --------------------------------------------------------------------------------------
def part_read(fs, base: str, mb: int, pieces: int) -> None:
    """Reading back what a takeover reads: a whole file sequentially, and small pieces."""
    print(f"== read: a {mb} MiB file written in 1 MiB writes, read back whole and in "
          f"{pieces} 200-byte pieces", flush=True)
    path = fs.join(base, "read", "wal")
    chunk = os.urandom(1 << 20)
    start = time.perf_counter()
    out = fs.create(path)
    for _ in range(mb):
        out.write(chunk)
    out.sync()
    took_write = time.perf_counter() - start
    # read while still open, as a new leader reads a recovered WAL file (visible length)
    start = time.perf_counter()
    got = 0
    with fs.open_input(path) as f:
        while True:
            data = f.read(1 << 20)
            if not data:
                break
            got += len(data)
    took_read = time.perf_counter() - start
    out.close()
    size = mb << 20
    rng = random.Random(7)
    starts = [rng.randrange(0, size - 200) for _ in range(pieces)]
    start = time.perf_counter()
    with fs.open_input(path) as f:
        for at in starts:
            f.seek(at)
            f.read(200)
    took_pieces = time.perf_counter() - start
    print(f"write + hsync: {mb / took_write:.0f} MiB/s; sequential read: "
          f"{got / took_read / (1 << 20):.0f} MiB/s ({took_read:.2f} s for {mb} MiB); "
          f"200-byte positioned reads: {took_pieces / pieces * 1e3:.2f} ms each", flush=True)


def main(argv=None) -> int:
    """Run the chosen parts and print their figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uri", help="a scratch directory on a running cluster")
    ap.add_argument("--part", default="open,sync,takeover,read")
    ap.add_argument("--read-mb", type=int, default=64)
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--partitions", default="1,100,1000")
    ap.add_argument("--open-count", type=int, default=200)
    ap.add_argument("--takeover-count", type=int, default=20)
    ap.add_argument("--wal-files", default="1,4,16",
                    help="W values of the WAL takeover (takeover part): files whose "
                         "leases are recovered one after another vs at once")
    ap.add_argument("--threads", type=int, default=16,
                    help="concurrent opens and takeovers")
    ap.add_argument("--io-threads", type=int, default=8,
                    help="workers syncing per-partition streams (num.io.threads)")
    ap.add_argument("--datanodes", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=4 << 20,
                    help="HDFS block size of the files written (default 4 MiB: every "
                         "open stream reserves a block's length of disk on each DataNode "
                         "of its pipeline, which a machine's disk runs out of long before "
                         "1,000 streams of 128 MiB blocks)")
    args = ap.parse_args(argv)
    parts = set(args.part.split(","))
    unknown = parts - {"open", "sync", "takeover", "read"}
    if unknown:
        ap.error(f"unknown --part {sorted(unknown)}: choose from open, sync, takeover, read")
    cluster = None
    if args.uri is None:
        from tests.support.hdfscluster import HdfsCluster

        print(f"starting HDFS: a NameNode and {args.datanodes} DataNodes...", flush=True)
        cluster = HdfsCluster(tempfile.mkdtemp(prefix="sparklog-bench-streams-"),
                              datanodes=args.datanodes,
                              conf={"dfs.heartbeat.interval": 3}).start()
        args.uri = cluster.hdfs_uri + "/bench-streams"
        os.environ["HADOOP_CONF_DIR"] = cluster.conf_dir
    from sparklog.storage import open_fileio

    try:
        fs = open_fileio(args.uri, block_size=args.block_size)
        fs.mkdirs(args.uri)
        if "open" in parts:
            part_open(fs, args.uri, cluster, args.open_count, args.threads)
        if "sync" in parts:
            part_sync(fs, args.uri, cluster, args.rate, args.seconds,
                      [int(x) for x in args.partitions.split(",")], args.io_threads,
                      args.threads)
        if "takeover" in parts:
            part_takeover(fs, args.uri, cluster, args.takeover_count, args.threads)
            part_wal_takeover(fs, args.uri, cluster,
                              [int(x) for x in args.wal_files.split(",")])
        if "read" in parts:
            part_read(fs, args.uri, args.read_mb, 1000)
        fs.delete(args.uri, recursive=True)
        fs.close()
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.base_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
