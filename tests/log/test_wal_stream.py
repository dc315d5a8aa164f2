"""The WAL stream writer (sparklog/log/wal_stream.py; docs/storage.md section 4, "A
commit turn" and "Rolling"), on real storage: writer threads' frames in blocks, every
waiter completed only after a sync covering its frames (file://, and on HDFS through
Hadoop's client), rolls by bytes and by age with non-recursive creates, the index block
and trailer at every close, and a failed stream (a renamed directory, a lost lease)
failing the turn's and every later waiter."""

from __future__ import annotations

import threading

import pytest

from sparklog.errors import InvalidArgumentError
from sparklog.format.frame import stamp
from sparklog.format.kafka_batch import KafkaRecord, encode_batch
from sparklog.format.wal import read_wal_index, scan_wal, wal_file_name
from sparklog.log.wal_stream import WalAppend, WalStream, WalStreamFailedError
from sparklog.storage import open_fileio
from sparklog.storage.local import LocalOutputStream
from tests.support.waiting import wait_until

EPOCH = 4


def batch(base: int, n: int = 1, epoch: int = EPOCH) -> bytes:
    """A stamped Kafka record batch of ``n`` records at ``base``."""
    frame = bytearray(encode_batch(
        [KafkaRecord(i, 1_000 + base + i, b"k", b"v%d" % (base + i)) for i in range(n)]))
    stamp(frame, 0, base, epoch)
    return bytes(frame)


@pytest.fixture
def wal_dir(tmp_path):
    """A broker incarnation's WAL directory on file://: (fileio, directory)."""
    fileio = open_fileio(str(tmp_path))
    directory = fileio.join(str(tmp_path), "wal", "1", f"{7:020d}")
    fileio.mkdirs(directory)
    return fileio, directory


def spy_syncs(monkeypatch, stream_class):
    """Record, per file, how many bytes completed syncs covered, and the figure each
    waiter saw when it was completed: (durable, completions)."""
    lock = threading.Lock()
    durable: dict = {}
    completions: list = []
    persist, complete = stream_class._persist, WalAppend.complete

    def spy_persist(self):
        covered = self._pushed  # everything pushed before this persist
        persist(self)
        with lock:
            durable[self.path] = max(durable.get(self.path, 0), covered)

    def spy_complete(self, result, error):
        with lock:
            completions.append((self, result, dict(durable)))
        complete(self, result, error)

    monkeypatch.setattr(stream_class, "_persist", spy_persist)
    monkeypatch.setattr(WalAppend, "complete", spy_complete)
    return durable, completions


def produce_concurrently(stream: WalStream, threads: int = 4, partitions: int = 3,
                         requests: int = 20) -> list:
    """Writer threads, each the writer of its own partitions (offsets in order), each
    queueing a request per partition and waiting for them before the next round (as a
    producer waits for its answers); every third request acks=all. Returns every
    (request, WalWritten)."""
    done: list = []
    lock = threading.Lock()

    def writer(k: int) -> None:
        results = []
        for i in range(requests):
            mine = [stream.append(f"t{k}", p, EPOCH, [batch(2 * i, 2)],
                                  acks_all=(i + p) % 3 == 0) for p in range(partitions)]
            results += [(r, r.wait(60)) for r in mine]
        with lock:
            done.extend(results)

    workers = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    return done


def check_files(fileio, paths: list[str], done: list) -> None:
    """Every file closed with its index, and each partition's frames, read back from
    the files in order, chain from offset 0 and are where the waiters were told."""
    frames: dict = {}
    for path in paths:
        data = fileio.read_all(path)
        scan = scan_wal(data, path)
        assert scan.error is None and scan.closed, path
        assert read_wal_index(fileio, path) == scan.index
        for block in scan.blocks:
            for entry in block.entries:
                frames.setdefault((entry.topic, entry.partition), []).append(
                    (entry.base_offset, entry.next_offset))
    for ranges in frames.values():
        assert ranges[0][0] == 0
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    for request, written in done:
        entry = written.entry
        assert (entry.topic, entry.partition) == (request.topic, request.partition)
        assert entry.base_offset <= request.base_offset < request.next_offset \
            <= entry.next_offset
        assert written.synced or not request.acks_all


def check_no_early_answer(completions: list) -> None:
    """No acks=all waiter was completed before a sync covering its entry returned."""
    late = []
    for request, written, durable in completions:
        if written is None or not request.acks_all:
            continue
        end = written.entry.position + written.entry.size
        if durable.get(written.path, 0) < end:
            late.append((request.topic, request.partition, request.base_offset, end,
                         durable.get(written.path)))
    assert not late, f"completed before an hsync covered them: {late[:5]}"


def test_concurrent_writers_get_their_frames_after_a_covering_sync(wal_dir, monkeypatch):
    fileio, directory = wal_dir
    durable, completions = spy_syncs(monkeypatch, LocalOutputStream)
    with WalStream(fileio, directory, broker_id=1, incarnation=7, first_seq=3) as stream:
        done = produce_concurrently(stream)
    assert len(done) == 4 * 3 * 20
    assert stream.closed_files == [fileio.join(directory, wal_file_name(3))]
    check_files(fileio, stream.closed_files, done)
    check_no_early_answer(completions)
    turns = {w.turn for _, w in done}
    assert len(turns) < len(done), "no turn carried more than one request"


def test_rolls_by_bytes_into_non_recursively_created_files(wal_dir):
    fileio, directory = wal_dir
    with WalStream(fileio, directory, broker_id=1, incarnation=7, roll_bytes=1) as stream:
        done = [(r, r.wait(30)) for r in
                (stream.append("t", 0, EPOCH, [batch(i)], acks_all=True) for i in range(4))]
    names = [p.rsplit("/", 1)[1] for p in stream.closed_files]
    assert names == [wal_file_name(s) for s in range(4)]
    assert [w.path for _, w in done] == stream.closed_files
    check_files(fileio, stream.closed_files, done)


def test_rolls_by_age(wal_dir):
    fileio, directory = wal_dir
    now = [0.0]
    with WalStream(fileio, directory, broker_id=1, incarnation=7, roll_ms=1000,
                   clock=lambda: now[0]) as stream:
        first = stream.append("t", 0, EPOCH, [batch(0)]).wait(30)
        second = stream.append("t", 0, EPOCH, [batch(1)]).wait(30)
        now[0] = 1.0
        third = stream.append("t", 0, EPOCH, [batch(2)]).wait(30)
    assert first.path == second.path != third.path
    assert not first.synced  # acks=1 only: the turn was hflushed
    assert len(stream.closed_files) == 2


def test_a_renamed_directory_fails_the_roll_and_every_later_waiter(wal_dir):
    fileio, directory = wal_dir
    stream = WalStream(fileio, directory, broker_id=1, incarnation=7, roll_bytes=1).start()
    stream.append("t", 0, EPOCH, [batch(0)], acks_all=True).wait(30)
    fileio.rename(directory, directory + ".splitting")  # a takeover's first step
    with pytest.raises(WalStreamFailedError, match="failed at file"):
        stream.append("t", 0, EPOCH, [batch(1)], acks_all=True).wait(30)
    later = stream.append("t", 0, EPOCH, [batch(2)])
    assert later.done()
    with pytest.raises(WalStreamFailedError):
        later.wait(0)
    with pytest.raises(WalStreamFailedError):
        stream.close()
    assert not fileio.exists(directory)


def test_a_lost_lease_fails_the_stream(wal_dir):
    fileio, directory = wal_dir
    stream = WalStream(fileio, directory, broker_id=1, incarnation=7).start()
    stream.append("t", 0, EPOCH, [batch(0)], acks_all=True).wait(30)
    open_fileio(directory).recover_lease(stream.path)  # another broker fences it
    failed = stream.append("t", 0, EPOCH, [batch(1)], acks_all=True)
    with pytest.raises(WalStreamFailedError, match="lease"):
        failed.wait(30)
    wait_until(lambda: stream.error is not None, 10, "the stream to fail")
    with pytest.raises(WalStreamFailedError):
        stream.append("t", 0, EPOCH, [batch(2)]).wait(0)
    with pytest.raises(WalStreamFailedError):
        stream.close()
    # the valid prefix holds the block synced before the fence
    scan = scan_wal(fileio.read_all(stream.path))
    assert [e.base_offset for b in scan.blocks for e in b.entries][:1] == [0]


def test_bad_frames_are_refused_to_the_caller_and_the_stream_goes_on(wal_dir):
    fileio, directory = wal_dir
    with WalStream(fileio, directory, broker_id=1, incarnation=7) as stream:
        with pytest.raises(InvalidArgumentError, match="leader epoch 5, the entry's is 4"):
            stream.append("t", 0, EPOCH, [batch(0, epoch=5)])
        with pytest.raises(InvalidArgumentError, match="truncated frame"):
            stream.append("t", 0, EPOCH, [batch(0)[:-3]])
        assert stream.append("t", 0, EPOCH, [batch(0)]).wait(30).entry.next_offset == 1
    with pytest.raises(InvalidArgumentError, match="not running"):
        stream.append("t", 0, EPOCH, [batch(1)])


def test_on_hdfs_no_waiter_is_completed_before_an_hsync_covering_it(hdfs_env, monkeypatch,
                                                                    request):
    """The same group commit through Hadoop's client: a spy on
    ``HadoopOutputStream._persist`` records what each completed hsync covered."""
    from sparklog.storage.hdfs import HadoopOutputStream

    durable, completions = spy_syncs(monkeypatch, HadoopOutputStream)
    root = f"{hdfs_env.hdfs_uri}/wal-stream/{request.node.name}"
    fileio = open_fileio(root)
    directory = fileio.join(root, "wal", "1", f"{7:020d}")
    fileio.mkdirs(directory)
    with WalStream(fileio, directory, broker_id=1, incarnation=7,
                   roll_bytes=2 << 10) as stream:
        done = produce_concurrently(stream, threads=3, partitions=2, requests=15)
    assert len(done) == 3 * 2 * 15 and len(stream.closed_files) > 1
    check_files(fileio, stream.closed_files, done)
    check_no_early_answer(completions)
