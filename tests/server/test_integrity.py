"""Data integrity under malformed input and damaged storage (issue #18, items 6, 7, 8, 12).

Real broker processes, real files damaged for real (bits flipped, files truncated and
deleted): every read either returns the right records under their offsets or raises an
error naming the unreadable range; never wrong data, never a silent skip, never a loop.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from sparklog.clients.consumer import Consumer
from sparklog.clients.types import TopicPartition
from sparklog.errors import (
    CorruptRecordError,
    DataLossError,
    InvalidProducerEpochError,
    OffsetOutOfRangeError,
    SparklogError,
    StorageError,
    error_for_code,
)
from sparklog.format.frame import encode_frame, raw_batch
from sparklog.format.frame import reseal as reseal_crc
from sparklog.format.header import (
    HEADER_SIZE,
    LAST_OFFSET_DELTA,
    LENGTH,
    LOG_OVERHEAD,
    RECORD_COUNT,
    unpack_header,
)
from sparklog.log.layout import segment_file_name
from sparklog.log.partition import PartitionLog
from sparklog.log.reader import OFFSET_COLUMN, LogReader
from sparklog.protocol import ApiKey, Connection
from sparklog.storage.local import LocalFileIO
from tests.support.brokerproc import BrokerProcess

RECORDS_PER_FRAME = 10


def frame(values, **kw) -> bytes:
    return encode_frame(raw_batch([v.encode() if isinstance(v, str) else v for v in values]),
                        **kw)


def numbered(first: int, count: int = RECORDS_PER_FRAME) -> bytes:
    """A frame whose values name their intended offsets: ``v<offset>``."""
    return frame([f"v{o}" for o in range(first, first + count)])


def reseal(buf: bytearray) -> bytes:
    """Fix the length and CRC of a frame whose bytes were changed (a well-formed lie)."""
    LENGTH.write(buf, 0, len(buf) - LOG_OVERHEAD)
    reseal_crc(buf)
    return bytes(buf)


def truncated_arrow(values) -> bytes:
    """A CRC-valid frame whose Arrow body lost its last 40 bytes."""
    return reseal(bytearray(frame(values))[:-40 - 8])  # - the end-of-stream marker


def miscounted(values) -> bytes:
    """A CRC-valid frame whose header claims one record more than its body holds."""
    buf = bytearray(frame(values))
    RECORD_COUNT.write(buf, 0, len(values) + 1)
    LAST_OFFSET_DELTA.write(buf, 0, len(values))
    return reseal(buf)


def create(conn, name, partitions=1, **configs):
    res = conn.request(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": partitions,
         "configs": {k: str(v) for k, v in configs.items()}}]})
    assert res["topics"][0]["error_code"] == 0, res


def produce(conn, topic, records, acks=-1, partition=0, token=None):
    res = conn.request(ApiKey.PRODUCE, {"acks": acks, "topics": [
        {"name": topic, "partitions": [{"partition": partition, "records": records,
                                        "producer_token": token}]}]})
    return res["topics"][0]["partitions"][0]


def fetch(conn, topic, offset, partition=0):
    res = conn.request(ApiKey.FETCH, {"max_wait_ms": 0, "min_bytes": 1, "topics": [
        {"name": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                        "partition_max_bytes": 1 << 20}]}]})
    return res["topics"][0]["partitions"][0]


def fill(conn, topic, frames: int) -> int:
    """Produce ``frames`` numbered frames with acks=all; return the record count."""
    for i in range(frames):
        item = produce(conn, topic, numbered(i * RECORDS_PER_FRAME))
        assert item["error_code"] == 0, item
    return frames * RECORDS_PER_FRAME


def consume(address, topic, total, *, limit_s=20.0, partition=0, what=""):
    """Read the partition from the start with a real Consumer until it has the
    ``total`` records acknowledged or raises: ``(records as (offset, value), error or
    None)``. Fails the test if neither happens within ``limit_s`` (a stall) or if more
    than ``total`` records come (a redelivery loop)."""
    got, error = [], None
    with Consumer(bootstrap_servers=address, auto_offset_reset="earliest",
                  enable_auto_commit=False, fetch_max_wait_ms=50) as c:
        c.assign([TopicPartition(topic, partition)])
        deadline = time.monotonic() + limit_s
        while len(got) < total:
            assert time.monotonic() < deadline, \
                f"consumer neither finished nor raised in {limit_s}s: {len(got)} records {what}"
            try:
                batch = c.poll(timeout_ms=100)
            except SparklogError as exc:
                error = exc
                break
            got += [(r.offset, r.value.decode()) for rs in batch.values() for r in rs]
        if error is None:  # nothing more may come
            try:
                extra = c.poll(timeout_ms=200)
                assert not extra, f"records past the {total} produced: {extra}"
            except SparklogError as exc:
                error = exc
    assert len(got) <= total, f"{len(got)} deliveries for {total} records: a loop"
    return got, error


def assert_exact_prefix(got, total, error, what):
    """Records ``v<offset>`` under their offsets from 0 with no gap; all of them unless
    an error naming an offset range stopped the read."""
    for i, (offset, value) in enumerate(got):
        assert offset == i and value == f"v{offset}", \
            f"{what}: record {i} delivered as offset {offset} value {value!r}"
    if error is None:
        assert len(got) == total, f"{what}: {len(got)} of {total} records, no error"
    else:
        assert "offset" in str(error), f"{what}: error names no offsets: {error}"


def read_log(reader: LogReader, end: int):
    got, error = [], None
    try:
        for batch in reader.read_batches(0, end):
            got += zip(batch.column(OFFSET_COLUMN).to_pylist(),
                       [v.decode() for v in batch.column("value").to_pylist()])
    except (CorruptRecordError, OffsetOutOfRangeError) as exc:
        error = exc
    return got, error


def partition_dir(root: Path, topic: str, partition: int = 0) -> Path:
    return root / "topics" / topic / str(partition)


def sealed_segments(pdir: Path) -> list[Path]:
    """The sealed segments' .log files (those with an .index), oldest first."""
    return sorted(p.with_suffix(".log") for p in pdir.glob("*.index"))


def frame_positions(path: Path) -> list[tuple[int, int]]:
    """(position, base offset) of every frame of a segment file."""
    data, pos, out = path.read_bytes(), 0, []
    while pos + HEADER_SIZE <= len(data):
        header = unpack_header(data, pos)
        out.append((pos, header.base_offset))
        pos += header.size
    return out


def flip(path: Path, byte: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(byte)
        value = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([value ^ (1 << bit)]))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess.in_temp(tmp_path_factory, "integrity") as proc:
        yield proc


@pytest.fixture
def conn(broker):
    with Connection(broker.address, client_id="integrity") as c:
        yield c


_names = iter(range(1 << 30))


def topic_name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{os.getpid()}"


# --- 6: malformed frames are refused, consumers deliver what precedes a bad frame ----------


@pytest.mark.parametrize("make", [truncated_arrow, miscounted], ids=["truncated", "miscounted"])
def test_broker_refuses_crc_valid_malformed_frames(broker, conn, make):
    topic = topic_name("malformed")
    create(conn, topic)
    assert produce(conn, topic, numbered(0))["error_code"] == 0
    bad = produce(conn, topic, make(["x"] * 5), acks=-1)
    assert error_for_code(bad["error_code"]) is CorruptRecordError, bad
    assert "Arrow body" in bad["error_message"] or "records" in bad["error_message"], bad
    assert produce(conn, topic, numbered(10))["error_code"] == 0
    got, error = consume(broker.address, topic, 20)
    assert error is None and got == [(o, f"v{o}") for o in range(20)]


def test_consumer_delivers_the_records_before_a_bad_frame_then_raises(tmp_path):
    """A bad frame already in a sealed segment (written before the broker checked
    bodies): the consumer hands out the 30 records before it, then raises naming the
    offset; a seek past the frame reads on."""
    topic = "bad-body"
    with BrokerProcess(tmp_path.as_uri(), log_path=tmp_path.parent / "bb.log") as proc:
        with Connection(proc.address) as c:
            create(c, topic)
            fill(c, topic, 3)
    plog = PartitionLog.open(LocalFileIO(), partition_dir(tmp_path, topic).as_uri(),
                             fence=True)
    bad = miscounted(["x"] * 5)  # claims 6 records at offsets 30-35
    plog.append(bad, validated=unpack_header(bad))
    plog.append(numbered(36))
    plog.roll()
    plog.close()
    with BrokerProcess(tmp_path.as_uri(), log_path=tmp_path.parent / "bb.log") as proc:
        got, error = consume(proc.address, topic, 46)
        assert got == [(o, f"v{o}") for o in range(30)]
        assert isinstance(error, CorruptRecordError) and "offset 30" in str(error), error
        with Consumer(bootstrap_servers=proc.address, enable_auto_commit=False) as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 36)
            records = []
            deadline = time.monotonic() + 60
            while len(records) < 10 and time.monotonic() < deadline:
                records += [r.offset for rs in c.poll(100).values() for r in rs]
            assert records == list(range(36, 46))


# --- 7: damaged sealed segments through the broker and the log reader ----------------------


def damaged_topic(conn, root, frames=30, segment_bytes=8000):
    topic = topic_name("damage")
    create(conn, topic, **{"segment.bytes": segment_bytes})
    total = fill(conn, topic, frames)
    pdir = partition_dir(root, topic)
    sealed = sealed_segments(pdir)
    assert len(sealed) >= 3, sealed
    return topic, total, pdir, sealed


def test_flipped_base_offset_is_a_data_loss_error_not_wrong_offsets(broker, conn):
    topic, total, pdir, sealed = damaged_topic(conn, broker.root)
    seg = sealed[1]
    pos, base = frame_positions(seg)[2]
    flip(seg, pos + 7, 6)  # base offset + 64: CRC-valid, 64 offsets off
    got, error = consume(broker.address, topic, total)
    assert_exact_prefix(got, total, error, "consumer")
    assert error is not None and len(got) == base, (len(got), base, error)
    assert f"offset {base}" in str(error) or f"[{base}," in str(error), error
    got, error = read_log(LogReader(LocalFileIO(), pdir.as_uri()), total)
    assert_exact_prefix(got, total, error, "LogReader")
    assert isinstance(error, DataLossError) and error.first_offset == base, error


def test_flipped_length_raises_instead_of_stalling(broker, conn):
    topic, total, pdir, sealed = damaged_topic(conn, broker.root)
    seg = sealed[0]
    pos, base = frame_positions(seg)[1]
    flip(seg, pos + 10, 3)  # length + 2048: the frame runs into the next ones
    got, error = consume(broker.address, topic, total)
    assert_exact_prefix(got, total, error, "consumer")
    assert error is not None and len(got) == base, (len(got), error)
    got, error = read_log(LogReader(LocalFileIO(), pdir.as_uri()), total)
    assert_exact_prefix(got, total, error, "LogReader")
    assert error is not None and len(got) == base


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_lost_sealed_segment_is_reported_by_the_log_reader(broker, conn, damage):
    topic, total, pdir, sealed = damaged_topic(conn, broker.root)
    seg = sealed[1]
    first = int(seg.stem)
    if damage == "truncate":
        os.truncate(seg, frame_positions(seg)[1][0])  # at a frame boundary: no torn frame
    else:
        seg.unlink()
    got, error = read_log(LogReader(LocalFileIO(), pdir.as_uri()), total)
    assert_exact_prefix(got, total, error, "LogReader")
    assert isinstance(error, DataLossError), error
    lost_from = first + (RECORDS_PER_FRAME if damage == "truncate" else 0)
    assert len(got) == lost_from and error.first_offset == lost_from, error
    assert f"[{lost_from}, " in str(error)


# --- 8: files deleted under a running broker ----------------------------------------------


def test_deleted_sealed_segment_takes_the_partition_offline(broker, conn):
    topic, total, pdir, sealed = damaged_topic(conn, broker.root)
    other = topic_name("neighbour")
    create(conn, other)
    seg = sealed[1]
    first = int(seg.stem)
    seg.unlink()
    item = fetch(conn, topic, first + 5)
    assert error_for_code(item["error_code"]) is StorageError, item
    message = item["error_message"]
    assert "out of range" not in message and seg.name in message and "offline" in message
    assert f"[{first}, " in message
    got, error = consume(broker.address, topic, total, limit_s=10)  # earliest: no redelivery loop
    assert isinstance(error, StorageError) and len(got) <= first, (len(got), error)
    assert_exact_prefix(got, total, error, "consumer")
    refused = produce(conn, topic, numbered(total))
    assert error_for_code(refused["error_code"]) is StorageError, refused
    assert produce(conn, other, numbered(0))["error_code"] == 0  # the rest keeps serving
    assert "ERROR" in broker.log_text() and seg.name in broker.log_text()


def test_deleted_active_segment_refuses_acks(tmp_path):
    topic = "active-gone"
    with BrokerProcess(tmp_path.as_uri(), log_path=tmp_path.parent / "ag.log") as proc:
        with Connection(proc.address) as c:
            create(c, topic)
            fill(c, topic, 3)
            active = partition_dir(tmp_path, topic) / segment_file_name(0)
            active.unlink()
            late = produce(c, topic, numbered(30), acks=-1)
            assert error_for_code(late["error_code"]) is StorageError, late
            assert active.name in late["error_message"]
            again = produce(c, topic, numbered(30), acks=-1)
            assert error_for_code(again["error_code"]) is StorageError, again
        assert active.name in proc.log_text() and "offline" in proc.log_text()


# --- 12: producer epochs ------------------------------------------------------------------


def test_init_producer_id_cannot_fence_another_clients_producer(broker, conn):
    topic = topic_name("fence")
    create(conn, topic)
    victim = conn.request(ApiKey.INIT_PRODUCER_ID, {})
    pid, epoch = victim["producer_id"], victim["producer_epoch"]

    tokens = {pid: victim["producer_token"]}

    def send(p, e, seq, value):
        return produce(conn, topic, frame([value], producer_id=p, producer_epoch=e,
                                          base_sequence=seq), token=tokens[p])

    assert send(pid, epoch, 0, "a")["error_code"] == 0
    # another client names the victim's id and epoch (seen in the log) and uses the answer
    other = conn.request(ApiKey.INIT_PRODUCER_ID, {"producer_id": pid, "producer_epoch": epoch})
    assert other["error_code"] == 0 and other["producer_id"] != pid, other
    tokens[other["producer_id"]] = other["producer_token"]
    assert send(other["producer_id"], other["producer_epoch"], 0, "b")["error_code"] == 0
    assert send(pid, epoch, 1, "c")["error_code"] == 0  # the victim is not fenced
    assert send(pid, epoch + 1, 0, "d")["error_code"] == 0  # its own next epoch
    with pytest.raises(InvalidProducerEpochError, match="fenced"):  # a zombie of it
        conn.request(ApiKey.INIT_PRODUCER_ID, {"producer_id": pid, "producer_epoch": epoch})


def test_transactional_id_holder_bumps_its_epoch(broker, conn):
    first = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "app-1"})
    second = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "app-1"})
    assert second["producer_id"] == first["producer_id"]
    assert second["producer_epoch"] == first["producer_epoch"] + 1
    with pytest.raises(InvalidProducerEpochError):  # no longer the current pair
        conn.request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": "app-1", "producer_id": first["producer_id"],
            "producer_epoch": first["producer_epoch"]})
    mine = conn.request(ApiKey.INIT_PRODUCER_ID, {
        "transactional_id": "app-1", "producer_id": second["producer_id"],
        "producer_epoch": second["producer_epoch"]})
    assert mine["producer_epoch"] == second["producer_epoch"] + 1


# --- fuzz: random damage to sealed segments -----------------------------------------------


def _damage(rng: random.Random, pdir: Path, sealed: list[Path]) -> str:
    seg = rng.choice(sealed)
    kind = rng.choice(["flip", "flip", "flip", "truncate", "delete"])
    if kind == "delete":
        seg.unlink()
        return f"deleted {seg.name}"
    frames = frame_positions(seg)
    pos, _ = rng.choice(frames)
    if kind == "truncate":
        cut = rng.randrange(0, seg.stat().st_size)
        os.truncate(seg, cut)
        return f"truncated {seg.name} to {cut} bytes"
    byte = pos + rng.randrange(0, HEADER_SIZE)
    bit = rng.randrange(8)
    flip(seg, byte, bit)
    return f"flipped bit {bit} of byte {byte} ({byte - pos} into a frame) of {seg.name}"


def test_fuzz_damaged_sealed_segments_never_give_wrong_or_skipped_records(broker, conn):
    """Bounded (60 cases or 40 s): each case damages one sealed segment of a fresh topic under
    the running broker, then reads it through the broker (a real Consumer) and through
    LogReader; every read returns the exact records from offset 0 or raises an error
    naming the offsets it could not read."""
    rng = random.Random(int(os.environ.get("SPARKLOG_FUZZ_SEED", "18")))
    deadline = time.monotonic() + 40
    cases = 0
    while time.monotonic() < deadline and cases < 60:
        topic, total, pdir, sealed = damaged_topic(conn, broker.root, frames=20,
                                                   segment_bytes=rng.choice([3000, 6000]))
        what = _damage(rng, pdir, sealed)
        got, error = consume(broker.address, topic, total, limit_s=15, what=f"after {what}")
        assert_exact_prefix(got, total, error, f"consumer after {what}")
        got, error = read_log(LogReader(LocalFileIO(), pdir.as_uri()), total)
        assert_exact_prefix(got, total, error, f"LogReader after {what}")
        cases += 1
    assert cases >= 5


@pytest.mark.parametrize("fail", [True, False])
def test_spark_path_reader_honours_fail_on_data_loss(broker, conn, fail):
    """The Spark task's reader (path mode, LogReader underneath) on a deleted sealed
    segment: failOnDataLoss=true raises naming the offsets; false skips exactly them."""
    pytest.importorskip("pyspark")
    from sparklog.spark.source.planning import OffsetRange
    from sparklog.spark.source.scan import read_range
    from sparklog.spark.source.schema import arrow_schema, kafka_schema

    topic, total, pdir, sealed = damaged_topic(conn, broker.root)
    seg = sealed[1]
    first, end = int(seg.stem), int(sealed[2].stem)
    seg.unlink()
    r = OffsetRange(topic, 0, 0, total, broker.root.as_uri(), fail_on_data_loss=fail)
    target = arrow_schema(kafka_schema())
    offsets = []
    try:
        for batch in read_range(r, target):
            offsets += batch.column("offset").to_pylist()
    except DataLossError as exc:
        assert fail and f"[{first}, {end})" in str(exc) and "failOnDataLoss" in str(exc)
        assert offsets == list(range(first))
        return
    assert not fail, "no error with failOnDataLoss=true"
    assert offsets == [o for o in range(total) if not first <= o < end]


def test_damaged_sealed_segment_after_a_crash_still_opens(tmp_path):
    """A broker killed (no producer snapshot) restarts over a sealed segment with a
    flipped base offset: the partition opens (producer state is rebuilt around the
    damage), the records before the damage are read, the damage is reported."""
    topic = "crashed"
    with BrokerProcess(tmp_path.as_uri(), log_path=tmp_path.parent / "cr.log") as proc:
        with Connection(proc.address) as c:
            create(c, topic, **{"segment.bytes": 8000})
            total = fill(c, topic, 30)
        proc.kill()
        seg = sealed_segments(partition_dir(tmp_path, topic))[1]
        pos, base = frame_positions(seg)[2]
        flip(seg, pos + 7, 6)
        proc.start()
        got, error = consume(proc.address, topic, total)
        assert_exact_prefix(got, total, error, "consumer after a restart")
        assert len(got) == base and isinstance(error, CorruptRecordError), (len(got), error)
        with Connection(proc.address) as c:
            assert produce(c, topic, numbered(total))["error_code"] == 0
        assert "producer state not rebuilt" in proc.log_text()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_local_writer_notices_its_file_vanishing(tmp_path, how):
    """The local backend fails the writer of a file deleted or replaced under it at its
    next write, flush or sync (as HDFS fails the writer of a deleted file), instead of
    writing on into an unlinked inode."""
    from sparklog.errors import StorageFileNotFoundError

    fs = LocalFileIO()
    path = (tmp_path / "seg.log").as_uri()
    out = fs.create(path)
    out.write(b"acknowledged")
    out.sync()
    (tmp_path / "seg.log").unlink()
    if how == "replaced":
        (tmp_path / "seg.log").write_bytes(b"someone else's")
    with pytest.raises(StorageFileNotFoundError, match="deleted or replaced"):
        out.write(b"later")  # a write into an empty buffer checks, as the next sync would
        out.sync()
    out.close()
