"""Cluster failover times and produce throughput with 3 brokers vs 1 (same run).

Starts a real ZooKeeper (Debian's, as the tests do: ``tests/support/zkserver.py``) and broker
processes (``sparklog broker start --zookeeper ... --broker-id N``) on a temporary local
storage root, then measures:

1. **Failover**: a probe producer (acks=all, idempotent) writes one record at a time to
   partition 0 while its leader is stopped with SIGTERM (controlled shutdown) or killed
   with SIGKILL, ``--cycles`` times each (the victim is restarted after its turn). The
   figure is the outage: the longest pause between two acknowledged writes around the
   failure (from the last acknowledgement before the signal).
   Targets: SIGTERM <= 2 s; SIGKILL <= zookeeper.session.timeout.ms + 2 s.
2. **Throughput**: ``send_batch`` of 100-byte values (acks=1) to 6 partitions through a
   cluster of 1 broker and of 3 brokers (leaders spread by the controller), printed as
   MB/s and the ratio 3 vs 1. On a small machine the client and the brokers share the
   same cores, which caps the ratio; the number of CPUs is printed beside it.

    .venv/bin/python bench/bench_failover.py [--cycles 3] [--session-ms 6000] [--mb 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparklog import Admin, Producer  # noqa: E402
from tests.support.clusterproc import BrokerCluster  # noqa: E402  (the tests' cluster helper)
from tests.support.zkserver import ZooKeeperServer, zookeeper_unavailable  # noqa: E402


class Probe:
    """Writes one record at a time to ``topic``-0 and keeps the ack times."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = self.make_producer(bootstrap)
        self.topic = topic
        self.acks: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def make_producer(self, bootstrap: str):
        """The probe's producer: acks=all, idempotent, no linger."""
        return Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=0,
                        retry_backoff_ms=20, request_timeout_ms=5000)

    def write(self, value: bytes) -> bool:
        """Write one record to partition 0 and wait for it; True when acknowledged."""
        self.producer.send(self.topic, value, partition=0).get(120)
        return True

    def _run(self):
        n = 0
        while not self._stop.is_set():
            if self.write(b"probe-%d" % n):
                self.acks.append(time.monotonic())
            n += 1

    def outage(self, t0: float, settled: float, timeout: float = 120) -> float:
        """The longest pause between acknowledgements from just before ``t0`` until 20
        writes were acknowledged after ``settled`` (the old leader is gone by then)."""
        deadline = time.monotonic() + timeout
        while sum(1 for t in self.acks[-100:] if t > settled) < 20:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no writes acknowledged within {timeout}s of the failure")
            time.sleep(0.005)
        window = [t for t in self.acks if t >= t0 - 1.0]
        before = [t for t in window if t <= t0]
        start = before[-1] if before else t0
        times = [start] + [t for t in window if t > start]
        return max(b - a for a, b in zip(times, times[1:]))

    def close(self):
        self._stop.set()
        self._thread.join(120)
        self.producer.close(30)


def failover(zk: ZooKeeperServer, root: Path, cycles: int, session_ms: int,
             kinds=("SIGTERM", "SIGKILL")) -> dict:
    """Outages (s) per signal of ``kinds``, ``cycles`` leader kills each."""
    storage = (root / "failover").as_uri()
    (root / "failover").mkdir()
    out = {how: [] for how in kinds}
    with BrokerCluster(storage, zk.hosts + "/failover", 3, log_dir=root,
                       session_ms=session_ms) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("probe", 1)
        probe = Probe(cluster.bootstrap, "probe")
        try:
            plan = [how for how in kinds for _ in range(cycles)]
            for how in tqdm(plan, desc="failovers", unit="kill"):
                cluster.wait(lambda: cluster.leader_of("probe", 0) > 0 and
                             len(probe.acks) > 5, 60, "a leader and acknowledged writes")
                victim = cluster.brokers[cluster.leader_of("probe", 0)]
                t0 = time.monotonic()
                if how == "SIGTERM":
                    victim.proc.send_signal(signal.SIGTERM)
                else:
                    victim.proc.send_signal(signal.SIGKILL)
                if how == "SIGTERM":
                    victim.stop(timeout=60)
                else:
                    victim.kill()
                out[how].append(probe.outage(t0, time.monotonic()))
                victim.start()
                time.sleep(0.5)
        finally:
            probe.close()
    return out


def throughput(zk: ZooKeeperServer, root: Path, brokers: int, mb: int) -> float:
    import pyarrow as pa

    name = f"tp{brokers}"
    (root / name).mkdir()
    value = b"x" * 100
    rows = 20000
    table = pa.table({"value": pa.array([value] * rows, pa.binary())})
    batches = max(1, mb * 1024 * 1024 // (rows * 100))
    with BrokerCluster((root / name).as_uri(), f"{zk.hosts}/{name}", brokers,
                       log_dir=root / name) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("t", 6)
        with Producer(cluster.bootstrap, acks=1, linger_ms=5, batch_size=1 << 20,
                      max_request_size=8 << 20) as producer:
            producer.send_batch("t", table.slice(0, 100), partition=0).get(60)  # warm up
            t0 = time.perf_counter()
            futures = [producer.send_batch("t", table, partition=i % 6)
                       for i in tqdm(range(batches), desc=f"{brokers} broker(s)", unit="batch")]
            for f in futures:
                f.get(300)
            elapsed = time.perf_counter() - t0
    return batches * rows * 100 / elapsed / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=3, help="kills per signal (default 3)")
    ap.add_argument("--session-ms", type=int, default=6000,
                    help="zookeeper.session.timeout.ms of the brokers (Kafka's default 6000)")
    ap.add_argument("--mb", type=int, default=256, help="MB produced per throughput run")
    args = ap.parse_args()
    reason = zookeeper_unavailable()
    if reason:
        print(f"bench_failover: cannot run: {reason}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="sparklog-bench-failover-"))
    zk = ZooKeeperServer(str(root / "zk")).start()
    try:
        times = failover(zk, root, args.cycles, args.session_ms)
        one = throughput(zk, root, 1, args.mb)
        three = throughput(zk, root, 3, args.mb)
    finally:
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nfailover outage (longest pause between acknowledged writes), "
          f"{args.cycles} cycles each, "
          f"zookeeper.session.timeout.ms={args.session_ms}:")
    targets = {"SIGTERM": 2.0, "SIGKILL": args.session_ms / 1000 + 2.0}
    for how, values in times.items():
        print(f"  {how:8s} median {statistics.median(values):6.2f} s   max {max(values):6.2f} s"
              f"   target <= {targets[how]:.1f} s   {'ok' if max(values) <= targets[how] else 'MISSED'}")
    print(f"produce throughput (send_batch, 100-byte values, acks=1, 6 partitions, "
          f"{os.cpu_count()} CPUs shared by client and brokers):")
    print(f"  1 broker : {one:8.1f} MB/s")
    print(f"  3 brokers: {three:8.1f} MB/s   ratio 3 vs 1: {three / one:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
