"""The failover scenarios of cluster mode, run on a local root (tests/server/test_cluster_failover.py)
and on HDFS (tests/server/test_hdfs_pipeline.py): checksummed records written without
pause by an idempotent acks=all producer while partition leaders are stopped and killed
(:func:`leaders_killed_repeatedly`), a frozen old leader whose pending write must never
reach the log (:func:`paused_old_leader`), and the storage read back to check that every
acknowledged record is there exactly once and in order."""

from __future__ import annotations

import os
import signal
import threading
import time
import zlib

from sparklog import Admin, Producer
from sparklog.log.reader import LogReader
from sparklog.metadata import TopicStore
from sparklog.protocol import Connection

from .clusterproc import BrokerCluster, produce_accepted, produce_one

#: Partitions of the scenarios' topic.
PARTITIONS = 3
#: ZooKeeper session timeout of the scenarios' brokers (ms).
SESSION_MS = 2000


def make_value(partition: int, seq: int) -> bytes:
    payload = f"{partition}:{seq}:".encode() + bytes((seq + i) % 251 for i in range(40))
    return payload + b"|" + b"%08x" % zlib.crc32(payload)


def parse_value(value: bytes) -> tuple[int, int]:
    payload, _, crc = value.rpartition(b"|")
    assert b"%08x" % zlib.crc32(payload) == crc, f"checksum mismatch in {value!r}"
    p, seq, _ = payload.split(b":", 2)
    return int(p), int(seq)


def read_partition(storage_root: str, topic: str, partition: int) -> list[bytes]:
    store = TopicStore(storage_root)
    reader = LogReader(store.fileio, store.partition_dir(topic, partition))
    out = []
    for batch in reader.read_batches(reader.log_start_offset()):
        out += batch.column("value").to_pylist()
    return out


def assert_exactly_once(values: list, p: int, acked: set, context: str = "") -> None:
    """``values`` (partition ``p`` of topic t, in offset order) hold every acknowledged
    seq of ``acked``, each record once, in the order sent, every checksum right."""
    seqs = []
    for v in values:
        vp, seq = parse_value(v)
        assert vp == p
        seqs.append(seq)
    assert len(seqs) == len(set(seqs)), f"t-{p}: a record is in the log twice"
    assert seqs == sorted(seqs), f"t-{p}: records out of order"
    missing = acked - set(seqs)
    assert not missing, f"t-{p}: acknowledged but lost: {sorted(missing)[:10]}{context}"


class ContinuousProducer:
    """Sends make_value(p, seq) round-robin to every partition from a thread and
    records which (partition, seq) were acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=2,
                                 retry_backoff_ms=50, delivery_timeout_ms=120000,
                                 request_timeout_ms=10000)
        self.acked = {p: set() for p in range(PARTITIONS)}
        self.failed = []
        self.sent = [0] * PARTITIONS
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _ok(self, p, seq, meta):
        with self._lock:
            self.acked[p].add(seq)

    def _err(self, p, seq, exc):
        self.failed.append((p, seq, repr(exc)))

    def _run(self):
        while not self._stop.is_set():
            futures = []
            for _ in range(20):
                for p in range(PARTITIONS):
                    seq = self.sent[p]
                    self.sent[p] += 1
                    f = self.producer.send(self.topic, make_value(p, seq), partition=p)
                    f.add_callback(self._ok, p, seq)
                    f.add_errback(self._err, p, seq)
                    futures.append(f)
            for f in futures:  # bounded outstanding work
                try:
                    f.get(130)
                except Exception:  # noqa: BLE001 - recorded by the errback
                    pass

    def acked_count(self, p: int) -> int:
        with self._lock:
            return len(self.acked[p])

    def stop(self):
        self._stop.set()
        self._thread.join(180)
        self.producer.flush(120)
        self.producer.close(30)


def leaders_killed_repeatedly(storage_root: str, zk_connect: str, log_dir, cycles: int,
                              how=("SIGTERM", "SIGKILL"), session_ms: int = SESSION_MS) -> dict:
    """The body of the test above on any storage root: three brokers, ``cycles`` leader
    stops of each kind in ``how``; returns the acknowledged seqs per partition."""
    with BrokerCluster(storage_root, zk_connect, 3, log_dir=log_dir,
                       session_ms=session_ms) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("t", PARTITIONS)
        producer = ContinuousProducer(cluster.bootstrap, "t").start()
        try:
            cluster.wait(lambda: all(producer.acked_count(p) > 50 for p in range(PARTITIONS)),
                         30, "the producer got going")
            outages = {kind: [] for kind in how}
            for i, kind in enumerate([k for k in how for _ in range(cycles)]):
                p = i % PARTITIONS
                cluster.wait(lambda: cluster.leader_of("t", p) > 0, 30, f"a leader of t-{p}")
                leader = cluster.leader_of("t", p)
                acked = producer.acked_count(p)
                t0 = time.monotonic()
                victim = cluster.brokers[leader]
                if kind == "SIGTERM":
                    victim.stop(timeout=60)
                else:
                    victim.kill()
                cluster.wait(lambda: producer.acked_count(p) > acked + 20, 60,
                             f"writes to t-{p} accepted again after {kind} of broker {leader}\n"
                             + cluster.logs())
                outages[kind].append(time.monotonic() - t0)
                victim.start()
            time.sleep(0.5)
        finally:
            producer.stop()
        assert not producer.failed, producer.failed[:5]
        for p in range(PARTITIONS):
            assert_exactly_once(read_partition(storage_root, "t", p), p, producer.acked[p])
            assert len(producer.acked[p]) >= 20 * len(how) * cycles // PARTITIONS
        print(f"\nfailover outages over {cycles} cycles each: "
              + ", ".join(f"{k} max {max(v):.2f}s mean {sum(v) / len(v):.2f}s"
                          for k, v in outages.items()))
        return producer.acked


def paused_old_leader(storage_root: str, zk_connect: str, log_dir, roll: bool) -> None:
    """The body of the test above on any storage root."""
    # roll: segments hold one frame, so the old leader's pending write must roll first
    extra = ["--override", "log.segment.bytes=1500"] if roll else []
    with BrokerCluster(storage_root, zk_connect, 2, log_dir=log_dir,
                       session_ms=SESSION_MS, extra_args=extra) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("z", 1)
        cluster.wait(lambda: cluster.leader_of("z", 0) > 0, what="a leader")
        old = cluster.leader_of("z", 0)
        epoch = cluster.state("z", 0).leader_epoch
        new = next(i for i in cluster.brokers if i != old)
        zombie = cluster.brokers[old]
        conn = Connection(zombie.address, timeout=60)
        produce_accepted(conn, "z", 0, b"before")
        os.kill(zombie.pid, signal.SIGSTOP)
        try:
            answer = {}
            # a write waits in the frozen leader's socket
            pending = threading.Thread(
                target=lambda: answer.update(produce_one(conn, "z", 0, b"zombie",
                                                         timeout_ms=10000)), daemon=True)
            pending.start()
            cluster.wait(lambda: cluster.leader_of("z", 0) == new, SESSION_MS / 1000 + 15,
                         "the other broker takes over")
            assert cluster.state("z", 0).leader_epoch > epoch
            with Connection(cluster.brokers[new].address) as c2:
                produce_accepted(c2, "z", 0, b"after", timeout=15)
        finally:
            os.kill(zombie.pid, signal.SIGCONT)
        pending.join(60)
        assert answer, "the resumed old leader never answered"
        assert answer["error_code"] != 0, f"a fenced leader acknowledged a write: {answer}"
        conn.close()
        # the resumed broker is a follower now: new writes still go to the new leader
        with Connection(cluster.brokers[new].address) as c2:
            produce_accepted(c2, "z", 0, b"after-resume", timeout=15)
        values = read_partition(storage_root, "z", 0)
        assert b"zombie" not in values
        assert values[0] == b"before" and b"after" in values and b"after-resume" in values
        # nor is it in any file of the partition (a stray segment, a tail past the end)
        store = TopicStore(storage_root)
        pdir = store.partition_dir("z", 0)
        for info in store.fileio.list(pdir):
            if not info.is_dir:
                assert b"zombie" not in store.fileio.read_all(info.path), info.path
        # frames after the takeover carry the new epoch
        reader = LogReader(store.fileio, pdir)
        epochs = [f.header.leader_epoch for f in reader.iter_frames(0)]
        assert epochs[0] == epoch and max(epochs) > epoch and epochs == sorted(epochs)
