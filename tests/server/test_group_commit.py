"""The partition writer's group commit on the local disk (fsync): acks=all answers wait
for a sync covering their bytes, one sync covers every batch appended before it
started, a failed sync fails exactly the requests it carried, and closing the broker
answers everything handed to a sync. The same logic runs on HDFS
(tests/server/test_hdfs_pipeline.py checks it against the real client's hsync)."""

from __future__ import annotations

import threading
import time

import pytest

from sparklog.errors import LeaseExpiredError
from sparklog.format.frame import encode_frame, iter_frames, raw_batch
from sparklog.metadata.store import TopicStore
from sparklog.protocol import Connection
from sparklog.server import EmbeddedBroker
from sparklog.server.partition import PIPELINED_SYNC_BYTES, PartitionWriter
from sparklog.storage.local import LocalOutputStream
from sparklog.storage.stream import LeaseLost
from tests.support.waiting import wait_until
from tests.support.wire import create, produce, read_values

#: a request's size that starts a second sync beside a running one
BIG = PIPELINED_SYNC_BYTES


def _segment_ends(root: str, topic: str) -> dict:
    """base offset -> end position of each frame in partition 0's first segment."""
    store = TopicStore(root)
    seg = store.fileio.join(store.partition_dir(topic, 0), "00000000000000000000.log")
    ends, pos = {}, 0
    for f in iter_frames(store.fileio.read_range(seg, 0, store.fileio.size(seg))):
        pos += f.header.size
        ends[f.header.base_offset] = pos
    return ends


def _clients(address: str, topic: str, count: int, requests: int, size: int = 0) -> list:
    """``count`` connections each sending ``requests`` acks=all produce requests one
    after the other (one record each, padded to ``size`` bytes), all at once; their
    answers."""
    answers: list = []
    lock = threading.Lock()

    def client(k: int) -> None:
        with Connection(address) as conn:
            for i in range(requests):
                value = b"%d-%d" % (k, i) * 10
                item = produce(conn, topic, 0, encode_frame(raw_batch(
                    [value.ljust(size, b".")])), acks=-1)
                with lock:
                    answers.append(item)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a client got no answer in 120 s"
    return answers


@pytest.mark.parametrize("pipelined, in_flight, size, most_at_once", [
    (False, None, BIG, 1), (True, None, BIG, 2), (True, None, 0, 1), (True, 1, BIG, 1)],
    ids=["serial storage", "pipelined storage, 64 KiB requests",
         "pipelined storage, small requests", "pipelined storage, 1 allowed"])
def test_acks_all_answers_follow_a_covering_fsync_and_syncs_group(
        storage_root, monkeypatch, pipelined, in_flight, size, most_at_once):
    """Four connections per sync allowed in flight, 30 acks=all requests each, every
    fsync slowed by 20 ms: each answer leaves only after an fsync that covered the
    request's bytes had returned (checked against the frames' end positions read
    back), and the requests appended while a sync waited were synced together (fewer
    syncs than requests). On storage that pipelines syncs (as HDFS's hsync does: here
    the local stream is declared so), up to ``storage.syncs.in.flight`` syncs (default
    2) of a partition run at once, a second one starting while the first waits when
    64 KiB or more wait for it; smaller requests wait for the running sync. Elsewhere
    syncs run one at a time."""
    lock = threading.Lock()
    durable = [0]            # bytes of the segment covered by completed fsyncs
    syncs = [0]
    running = [0, 0]         # fsyncs of the segment running now, most at once
    answered: list = []      # (base offset, durable bytes when answered)
    persist, answer = LocalOutputStream._persist, PartitionWriter._answer

    def slow_persist(self):
        covered = self._pushed  # start_sync pushed everything before this persist
        segment = self.path.endswith(".log")
        if segment:
            with lock:
                running[0] += 1
                running[1] = max(running)
        try:
            time.sleep(0.02)
            persist(self)
        finally:
            if segment:
                with lock:
                    running[0] -= 1
        if segment:
            with lock:
                durable[0] = max(durable[0], covered)
                syncs[0] += 1

    def spy_answer(self, batch, results):
        with lock:
            seen = durable[0]
        for it, res in zip(batch, results):
            if res.error is None and it.acks == -1 and not it.future.done():
                answered.append((res.base_offset, seen))
        answer(self, batch, results)

    monkeypatch.setattr(LocalOutputStream, "_persist", slow_persist)
    monkeypatch.setattr(LocalOutputStream, "pipelined_persist", pipelined)
    monkeypatch.setattr(PartitionWriter, "_answer", spy_answer)
    # eight connections: enough for two syncs at once to each have several to group
    clients = 8
    requests = clients * 30
    props = {} if in_flight is None else {"storage.syncs.in.flight": in_flight}
    with EmbeddedBroker(storage_root, props) as broker:
        with Connection(broker.address) as c:
            assert create(c, "grouped", 1)["error_code"] == 0
        answers = _clients(broker.address, "grouped", clients, 30, size)
        assert all(a["error_code"] == 0 for a in answers), answers[:3]
        synced = syncs[0]
    assert len(answered) == requests
    ends = _segment_ends(storage_root, "grouped")
    late = [(base, ends[base], seen) for base, seen in answered if seen < ends[base]]
    assert not late, f"answered before an fsync covered their bytes: {late[:5]}"
    assert synced < requests * 3 // 4, \
        f"{synced} fsyncs for {requests} requests: no group commit"
    assert running[1] == most_at_once, \
        f"at most {running[1]} fsyncs at once, {most_at_once} expected"


def test_a_failed_sync_fails_its_requests_and_the_partition_recovers(storage_root,
                                                                     monkeypatch):
    """The segment's fsync reports a lost lease once: the requests that sync carried
    are answered with LeaseExpiredError (none acknowledged), the partition is reopened
    for the next request, and what was acknowledged before and after is read back."""
    persist = LocalOutputStream._persist
    armed = threading.Event()

    def failing_persist(self):
        if armed.is_set() and self.path.endswith(".log"):
            armed.clear()
            raise LeaseLost()
        persist(self)

    monkeypatch.setattr(LocalOutputStream, "_persist", failing_persist)
    with EmbeddedBroker(storage_root) as broker, Connection(broker.address) as c:
        assert create(c, "failing", 1)["error_code"] == 0
        assert produce(c, "failing", 0, encode_frame(raw_batch([b"before"])),
                       acks=-1)["error_code"] == 0
        armed.set()
        refused = produce(c, "failing", 0, encode_frame(raw_batch([b"lost"])), acks=-1)
        assert refused["error_code"] == LeaseExpiredError.code, refused
        assert "lease lost" in refused["error_message"], refused
        after = produce(c, "failing", 0, encode_frame(raw_batch([b"after"])), acks=-1)
        assert after["error_code"] == 0, after
        assert b"after" in read_values(c, "failing", 0)
        assert read_values(c, "failing", 0)[0] == b"before"


def test_close_answers_every_request_handed_to_a_sync(storage_root, monkeypatch):
    """The broker is closed while acks=all requests wait for slow fsyncs: every request
    is answered (acknowledged) before the close returns, and each acknowledged record
    is read back after a restart."""
    persist, submit = LocalOutputStream._persist, PartitionWriter.submit
    submitted = []

    def slow_persist(self):
        if self.path.endswith(".log"):
            time.sleep(0.05)
        persist(self)

    def spy_submit(self, records, acks, bound=None):
        submitted.append(acks)
        return submit(self, records, acks, bound)

    answers: list = []
    with EmbeddedBroker(storage_root) as broker:
        with Connection(broker.address) as c:
            assert create(c, "closing", 1)["error_code"] == 0
        monkeypatch.setattr(LocalOutputStream, "_persist", slow_persist)
        monkeypatch.setattr(PartitionWriter, "submit", spy_submit)

        def client(k: int) -> None:
            with Connection(broker.address) as conn:
                answers.append(produce(conn, "closing", 0, encode_frame(raw_batch(
                    [b"r%d" % k])), acks=-1))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        wait_until(lambda: len(submitted) == 6, 30, "the 6 requests queued at the partition")
    # the broker's close has returned: every request was answered before it
    for t in threads:
        t.join(30)
    assert len(answers) == 6 and all(a["error_code"] == 0 for a in answers), answers
    monkeypatch.setattr(LocalOutputStream, "_persist", persist)
    with EmbeddedBroker(storage_root) as broker, Connection(broker.address) as c:
        assert sorted(read_values(c, "closing", 0)) == sorted(b"r%d" % k for k in range(6))
