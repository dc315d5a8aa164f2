"""Compaction in a real broker process: a record without a key is refused on a
compacted topic with Kafka's error, the broker's cleaner threads (log.cleaner.*) clean
the partitions it leads, a consumer reads the removed offsets as gaps, the cleaner's
metrics are on the Prometheus endpoint and ``sparklog topics describe`` shows the dirty
ratio."""

from __future__ import annotations

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import TopicPartition
from sparklog.errors import InvalidRecordError
from sparklog.log.layout import PartitionListing
from sparklog.storage import open_fileio
from tests.support.brokerproc import BrokerProcess
from tests.support.metrics import sample, scrape
from tests.support.processes import child_processes, free_port
from tests.support.shell import ok, sparklog
from tests.support.waiting import wait_until


def cleaner_helpers(pid: int) -> list[int]:
    """The multiprocessing (spawn) children of process ``pid``: the log cleaner's
    helper processes."""
    return [p.pid for p in child_processes(pid) if "spawn_main" in p.cmdline]


@pytest.fixture
def cleaning_broker(tmp_path):
    port = free_port()
    root = tmp_path / "log"
    args = ["--metrics-port", str(port), "--override", "log.cleaner.backoff.ms=100",
            "--override", "log.cleaner.threads=2"]
    with BrokerProcess(root.as_uri(), args, log_path=tmp_path / "broker.log") as proc:
        proc.metrics_port, proc.root = port, root
        with Admin(proc.address) as admin:
            proc.admin = admin
            yield proc


def test_broker_cleaner_compacts_and_consumers_see_gaps(cleaning_broker):
    broker = cleaning_broker
    broker.admin.create_topic("cmp", 1, configs={
        "cleanup.policy": "compact", "segment.bytes": "2000",
        "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})
    with Producer(broker.address, linger_ms=0, enable_idempotence=False) as producer:
        with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept "
                           "message without key"):
            producer.send("cmp", b"no key", partition=0).get(10)
        for i in range(200):
            producer.send("cmp", b"v%d" % i, key=b"k%d" % (i % 10), partition=0)
        producer.flush(30)
    d = str(broker.root / "topics" / "cmp" / "0")
    fio = open_fileio(broker.root.as_uri())
    wait_until(lambda: any(f.generation for f in PartitionListing.scan(fio, d).logs()),
               timeout=30, what="a cleaned segment in the partition's live set")
    # the cleaning ran in a helper process of the broker (log.cleaner.process.enable)
    assert cleaner_helpers(broker.pid), "no log cleaner helper process under the broker"
    tp = TopicPartition("cmp", 0)
    with Consumer(bootstrap_servers=broker.address, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        while len(got) == 0 or got[-1][0] < 199:
            for r in consumer.poll(timeout_ms=2000).get(tp, []):
                got.append((r.offset, r.key, r.value))
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)) and len(offsets) < 200  # gaps, in order
    latest = {b"k%d" % (i % 10): (i, b"v%d" % i) for i in range(200)}
    for key, (offset, value) in latest.items():  # every key's latest record is there
        assert (offset, key, value) in got
    wait_until(lambda: (sample(scrape(broker), "sparklog_log_logcleaner_cleaned_bytes_total",
                               topic="cmp", partition=0) or 0) > 0,
               what="bytes cleaned on the metrics endpoint")
    samples = scrape(broker)
    assert sample(samples, "sparklog_log_logcleaner_last_clean_time_ms",
                  topic="cmp", partition=0) > 0
    assert sample(samples, "sparklog_log_logcleanermanager_dirty_ratio",
                  topic="cmp", partition=0) is not None
    # sparklog topics describe shows the leader's dirty ratio of the compacted partition
    out = ok(sparklog("topics", "describe", "cmp", bootstrap=broker.address))
    ratio = float(out.split("DirtyRatio: ")[1].split()[0])
    assert 0.0 <= ratio <= 1.0, out


def test_idempotent_producer_state_survives_cleaning_and_a_kill(tmp_path):
    """An idempotent producer's frames are cleaned (some lose every record), the broker
    is killed and restarted: its producer state, rebuilt from the snapshot and the
    frames after it, still knows the producer's sequence (a resent batch is a
    duplicate, the next one is appended), because the cleaner never cleans from the
    offset the snapshot covers."""
    from sparklog.format.frame import encode_frame, raw_batch
    from sparklog.protocol import ApiKey, Connection
    from tests.support.wire import produce

    root = tmp_path / "log"
    args = ["--override", "log.cleaner.backoff.ms=100",
            "--override", "producer.state.snapshot.interval.ms=0"]
    proc = BrokerProcess(root.as_uri(), args, log_path=tmp_path / "broker.log")
    try:
        proc.start()
        with Admin(proc.address) as admin:
            admin.create_topic("idc", 1, configs={
                "cleanup.policy": "compact", "segment.bytes": "1500",
                "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})

        def batch(c, pid, epoch, seq):
            data = encode_frame(raw_batch([b"v%d" % seq, b"w%d" % seq], [b"a", b"b"]),
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            return produce(c, "idc", 0, data, acks=-1, token=init["producer_token"])

        with Connection(proc.address) as c:
            init = c.request(ApiKey.INIT_PRODUCER_ID, {})
            pid, epoch = init["producer_id"], init["producer_epoch"]
            for seq in range(0, 40, 2):  # each batch supersedes every earlier one
                assert batch(c, pid, epoch, seq)["error_code"] == 0
        d = str(root / "topics" / "idc" / "0")
        fio = open_fileio(root.as_uri())
        wait_until(lambda: any(f.generation for f in PartitionListing.scan(fio, d).logs()),
                   timeout=30, what="a cleaned segment of the idempotent producer's frames")
        proc.kill()
        proc.start()
        with Connection(proc.address) as c:
            dup = batch(c, pid, epoch, 38)  # the last batch again: a retry
            assert dup["error_code"] == 0 and dup["base_offset"] == 38
            nxt = batch(c, pid, epoch, 40)
            assert nxt["error_code"] == 0 and nxt["base_offset"] == 40
    finally:
        if proc.running:
            proc.kill()
