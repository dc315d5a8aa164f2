"""The broker on real HDFS (tests/support/hdfscluster.py): ``sparklog broker start --storage
hdfs://...`` processes SIGKILLed under acks=all load, a torn tail left by a dead writer
repaired after lease recovery, three brokers on ZooKeeper over one HDFS root with leader
kills (fencing = lease recovery + leader epochs), a paused leader (SIGSTOP) that cannot
append once another took over, and a partition whose HDFS directory the broker may not
access, while its other partitions keep serving.

Storage-side checks read HDFS through sparklog's own reader (``LogReader``) or Spark
(``format("sparklog")``), never through the broker under test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from sparklog.format.frame import encode_frame, raw_batch
from sparklog.metadata import TopicStore
from sparklog.protocol import Connection
from tests.support.brokerproc import BrokerProcess
from tests.support.clusterproc import produce_one
from tests.support.failover import (
    PARTITIONS,
    ContinuousProducer,
    assert_exactly_once,
    leaders_killed_repeatedly,
    paused_old_leader,
    read_partition,
)
from tests.support.waiting import wait_until
from tests.support.wire import create, produce, read_values

KILLS = int(os.environ.get("SPARKLOG_HDFS_KILLS", "10"))


@pytest.fixture
def hdfs_root(hdfs_env, request):
    """A fresh storage root in the run's HDFS cluster, named after the test."""
    name = request.node.name.replace("[", "-").replace("]", "")
    return f"{hdfs_env.hdfs_uri}/pipeline/{name}"


@pytest.fixture
def proc(hdfs_root, tmp_path):
    p = BrokerProcess(hdfs_root, log_path=tmp_path / "broker.log", start_timeout=120)
    yield p
    if p.running:
        p.kill()


def spark_values(spark, root: str, topic: str) -> dict:
    """{partition: [value, ...] in offset order} of ``topic``, read by Spark."""
    import sparklog.spark

    sparklog.spark.register(spark)
    rows = (spark.read.format("sparklog").option("path", root).option("subscribe", topic)
            .option("startingOffsets", "earliest").load()
            .select("partition", "offset", "value").collect())
    out: dict = {}
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        out.setdefault(r.partition, []).append(bytes(r.value))
    return out


@pytest.mark.spark
@pytest.mark.slow
def test_broker_on_hdfs_sigkilled_under_acks_all_loses_and_repeats_nothing(
        proc, hdfs_root, spark):
    """Must-show: an idempotent acks=all producer writes without pause while the broker
    is SIGKILLed and restarted KILLS times (each restart recovers the leases of the dead
    process's open segments); Spark then reads every acknowledged record exactly once,
    in order, and no record twice."""
    proc.start()
    with Connection(proc.address) as c:
        assert create(c, "t", PARTITIONS)["error_code"] == 0
    producer = ContinuousProducer(proc.address, "t").start()
    restarts = []
    try:
        for i in range(KILLS):
            p = i % PARTITIONS
            acked = producer.acked_count(p)
            wait_until(lambda: producer.acked_count(p) > acked + 20, 90,
                       f"acks=all writes to t-{p} before kill {i + 1}")
            proc.kill()
            t0 = time.monotonic()
            proc.start()
            restarts.append(time.monotonic() - t0)
        wait_until(lambda: all(producer.acked_count(p) > 0 for p in range(PARTITIONS)), 60,
                   "acks after the last restart")
    finally:
        producer.stop()
    assert not producer.failed, producer.failed[:5]
    log = proc.log_text()
    values = spark_values(spark, hdfs_root, "t")
    for p in range(PARTITIONS):
        assert_exactly_once(values.get(p, []), p, producer.acked[p], f"\n{log[-4000:]}")
    print(f"\n{KILLS} SIGKILLs on HDFS: {sum(len(a) for a in producer.acked.values())} "
          f"records acknowledged, restart {min(restarts):.1f}-{max(restarts):.1f} s")


_TORN_WRITER = """
import os, signal, sys
from sparklog.storage import open_fileio
fs = open_fileio(sys.argv[1])
fs.recover_lease(sys.argv[2])          # the dead broker's lease
out = fs.append(sys.argv[2])
out.write(bytes.fromhex(sys.argv[3]))  # half a frame
out.flush()                            # hflush: in the file for every new reader
os.kill(os.getpid(), signal.SIGKILL)   # dies holding the lease
"""


def test_torn_tail_on_hdfs_is_repaired_after_lease_recovery(proc, hdfs_root, hdfs_cluster):
    """A writer dies (SIGKILL) holding the lease of the active segment, half a frame
    hflushed: the restarted broker recovers the lease, cuts the torn tail (copy and swap,
    docs/format.md) and goes on; every acknowledged record stays, none is garbled."""
    proc.start()
    with Connection(proc.address) as c:
        create(c, "torn", 1)
        for i in range(5):
            assert produce(c, "torn", 0, encode_frame(raw_batch([b"r%d" % i])),
                           acks=-1)["error_code"] == 0
    proc.kill()
    store = TopicStore(hdfs_root)
    seg = store.fileio.join(store.partition_dir("torn", 0), "00000000000000000000.log")
    whole = store.fileio.size(seg)
    half = encode_frame(raw_batch([b"torn" * 50]))[:70]
    torn = subprocess.run([sys.executable, "-c", _TORN_WRITER, hdfs_root, seg, half.hex()],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert torn.returncode == -signal.SIGKILL, torn.stderr[-3000:]
    assert store.fileio.size(seg) == whole + len(half)  # the torn bytes are in the file
    proc.start()
    with Connection(proc.address) as c:
        item = produce(c, "torn", 0, encode_frame(raw_batch([b"after"])), acks=-1)
        assert item["error_code"] == 0, f"{item}\n{proc.log_text()[-5000:]}"
        assert read_values(c, "torn", 0) == [b"r0", b"r1", b"r2", b"r3", b"r4", b"after"]
    assert read_partition(hdfs_root, "torn", 0) == [b"r0", b"r1", b"r2", b"r3", b"r4",
                                                    b"after"]
    assert store.fileio.size(seg) > whole  # appended after the cut, not after the tail
    assert "recover" in proc.log_text().lower()


@pytest.mark.zookeeper
@pytest.mark.slow
def test_leaders_on_hdfs_killed_lose_no_acknowledged_record(zookeeper, hdfs_root, tmp_path):
    """Three brokers on ZooKeeper over one HDFS root: partition leaders SIGKILLed in
    turn; the new leader recovers the dead one's lease and writes at the next epoch;
    every acknowledged record is read back from HDFS exactly once, in order."""
    pytest.importorskip("kazoo", reason="kazoo is not installed")
    # ZooKeeper sessions of 6 s: a broker starting its Hadoop client (a JVM) on this
    # shared 2-core machine can starve its heartbeats for longer than 2 s
    leaders_killed_repeatedly(hdfs_root, zookeeper.connect, tmp_path,
                              int(os.environ.get("SPARKLOG_HDFS_FAILOVER_CYCLES", "3")),
                              how=("SIGKILL",), session_ms=6000)


@pytest.mark.zookeeper
@pytest.mark.parametrize("roll", [False, True], ids=["append", "roll"])
def test_paused_leader_on_hdfs_writes_nothing_visible_after_takeover(zookeeper, hdfs_root,
                                                                     tmp_path, roll):
    """Must-show, the zombie: the leader is frozen (SIGSTOP) with a write waiting in its
    socket; the other broker takes over (recoverLease on the segment, next epoch) and
    accepts writes; resumed, the old leader's write is refused and nothing of it is in
    any file of the partition (also when it would first roll a new segment)."""
    pytest.importorskip("kazoo", reason="kazoo is not installed")
    paused_old_leader(hdfs_root, zookeeper.connect, tmp_path, roll)


def test_partition_without_permission_fails_alone(hdfs_cluster, hdfs_root, tmp_path,
                                                  monkeypatch):
    """The broker runs as an ordinary HDFS user; one partition's directory is taken from
    it (chown + chmod 700 by the superuser). After a restart that partition answers
    produce and fetch with an error naming the path and the permission problem; the
    broker keeps serving the other partition."""
    path = hdfs_root.split("//", 1)[1].split("/", 1)[1]
    path = "/" + path
    for args in (("-mkdir", "-p", path), ("-chown", "alice", path)):
        done = hdfs_cluster.run_tool("dfs", *args)
        assert done.returncode == 0, done.stderr
    monkeypatch.setenv("HADOOP_USER_NAME", "alice")
    proc = BrokerProcess(hdfs_root, log_path=tmp_path / "broker.log", start_timeout=120)
    try:
        proc.start()
        with Connection(proc.address) as c:
            create(c, "perm", 2)
            for p in (0, 1):
                assert produce_one(c, "perm", p, b"v%d" % p)["error_code"] == 0
        proc.stop()
        locked = f"{path}/topics/perm/1"
        for args in (("-chown", "-R", "bob", locked), ("-chmod", "-R", "700", locked)):
            done = hdfs_cluster.run_tool("dfs", *args, user=hdfs_cluster.superuser)
            assert done.returncode == 0, done.stderr
        proc.start()
        with Connection(proc.address) as c:
            ok = produce_one(c, "perm", 0, b"more")
            assert ok["error_code"] == 0, ok
            bad = produce_one(c, "perm", 1, b"refused")
            assert bad["error_code"] != 0, bad
            assert read_values(c, "perm", 0) == [b"v0", b"more"]
        log = proc.log_text()
        assert "perm-1" in log or "topics/perm/1" in log, log[-3000:]
        assert "ermission" in log, log[-3000:]
        assert proc.running
    finally:
        if proc.running:
            proc.kill()


def test_acks_all_answers_wait_for_a_sync_covering_their_bytes(hdfs_env, hdfs_root,
                                                                monkeypatch):
    """Group commit beside the appends (docs/storage.md): with acks=all requests of four
    connections arriving together, the partition writer appends batches while an hsync
    waits for the DataNodes (overlap observed), yet no answer leaves before an hsync
    that started after the request's bytes were written has returned. Checked on the
    real client: a spy around ``HadoopOutputStream._persist`` records how many bytes of
    the segment each completed hsync covers, one around the writer's answers records
    that figure at each answer; the answered frames' end positions are read back from
    the segment file."""
    from sparklog.format.frame import iter_frames
    from sparklog.log.partition import PartitionLog
    from sparklog.server import EmbeddedBroker
    from sparklog.server.partition import PartitionWriter
    from sparklog.storage.hdfs import HadoopOutputStream

    lock = threading.Lock()
    durable: dict = {}       # segment path -> bytes covered by completed hsyncs
    in_flight = [0, 0]       # hsyncs running now, appends made while one ran
    answered: list = []      # (base offset, durable bytes of the segment when answered)
    persist, answer = HadoopOutputStream._persist, PartitionWriter._answer
    append = PartitionLog.append_frames

    def spy_append(self, *a, **kw):
        with lock:
            in_flight[1] += in_flight[0] > 0
        return append(self, *a, **kw)

    def spy_persist(self):
        covered = self._pushed  # start_sync pushed everything before this persist
        with lock:
            in_flight[0] += 1
        try:
            persist(self)
        finally:
            with lock:
                in_flight[0] -= 1
        with lock:
            durable[self.path] = max(durable.get(self.path, 0), covered)

    def spy_answer(self, batch, results):
        with lock:
            seen = dict(durable)
        for it, res in zip(batch, results):
            if res.error is None and it.acks == -1:
                answered.append((res.base_offset, seen))
        answer(self, batch, results)

    monkeypatch.setattr(HadoopOutputStream, "_persist", spy_persist)
    monkeypatch.setattr(PartitionWriter, "_answer", spy_answer)
    monkeypatch.setattr(PartitionLog, "append_frames", spy_append)
    with EmbeddedBroker(hdfs_root) as broker:
        with Connection(broker.address) as c:
            assert create(c, "piped", 1)["error_code"] == 0

        def client(k: int) -> None:
            with Connection(broker.address) as conn:
                for i in range(60):
                    item = produce(conn, "piped", 0, encode_frame(raw_batch(
                        [b"%d-%d" % (k, i) * 20])), acks=-1)
                    assert item["error_code"] == 0, item

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert len(answered) == 240
    store = TopicStore(hdfs_root)
    seg = store.fileio.join(store.partition_dir("piped", 0), "00000000000000000000.log")
    ends, pos = {}, 0
    for f in iter_frames(store.fileio.read_range(seg, 0, store.fileio.size(seg))):
        pos += f.header.size
        ends[f.header.base_offset] = pos
    name = seg.rsplit("/", 1)[1]
    late = [(base, ends[base], seen) for base, seen in answered
            if max((v for k, v in seen.items() if k.endswith("/" + name)), default=0)
            < ends[base]]
    assert not late, f"answered before an hsync covered their bytes: {late[:5]}"
    assert in_flight[1] > 0, "no append while an hsync was in flight: nothing overlapped"
