"""Forged frames from clients (issue #33, items 1 and 2, and its fuzz).

A client may write a topic, but only the broker and the log cleaner write explicit
offsets, control or transactional frames, and a client frame's records take consecutive
offsets (Kafka's LogValidator: ``last_offset_delta`` against the record count). Every
case is sent, CRC-valid, over the wire to a real broker process between the
acknowledged sends of a real idempotent Producer; the broker refuses it with
INVALID_RECORD naming the partition, the frame and the field, and the Producer's records
are read back at their offsets by the Consumer and the LogReader. A frame such as these
found in storage anyway (written by an older broker) is read as a DataLossError of its
own offsets, never as wrong or out-of-order offsets, and every later record stays
readable. The fuzz sends a seeded random sequence of forged frames
(``SPARKLOG_FORGED_FRAMES`` of them, default 200; ``SPARKLOG_FORGED_SEED`` picks the
sequence) and checks every acknowledged record after each one, and with Spark at the end.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from sparklog import Consumer, Producer
from sparklog.clients.types import TopicPartition
from sparklog.errors import DataLossError
from sparklog.format.frame import BROKER_ONLY_BITS, encode_frame, raw_batch, reseal
from sparklog.format.header import (
    ATTRIBUTES,
    CONTROL_BIT,
    EXPLICIT_OFFSETS_BIT,
    LAST_OFFSET_DELTA,
    PRODUCER_FIELDS,
    PRODUCER_ID,
    RECORD_COUNT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    unpack_header,
)
from sparklog.format.marker import COMMIT, encode_marker
from sparklog.log.config import LogConfig
from sparklog.log.partition import PartitionLog
from sparklog.log.reader import OFFSET_COLUMN, LogReader
from sparklog.protocol import Connection
from sparklog.storage.local import LocalFileIO
from tests.support.brokerproc import BrokerProcess, log_frames
from tests.support.wire import create, produce

INVALID_RECORD = 87
#: the attribute bits a client frame may not set
BROKER_ONLY = sum(bit for bit, _ in BROKER_ONLY_BITS)
FUZZ_FRAMES = int(os.environ.get("SPARKLOG_FORGED_FRAMES", "200"))
FUZZ_SEED = int(os.environ.get("SPARKLOG_FORGED_SEED", "33"))


def forged(values, *, offset_deltas=None, attributes=0, last_offset_delta=None,
           record_count=None, producer=None, **kw) -> bytes:
    """A CRC-valid frame of ``values`` whose header was then changed as a hostile client
    would: attribute bits added, ``last_offset_delta``/``record_count`` replaced,
    ``producer`` = (id, epoch, base sequence)."""
    buf = bytearray(encode_frame(raw_batch([v.encode() for v in values]),
                                 offset_deltas=offset_deltas, **kw))
    header = unpack_header(buf)
    ATTRIBUTES.write(buf, 0, header.attributes | attributes)
    if last_offset_delta is not None:
        LAST_OFFSET_DELTA.write(buf, 0, last_offset_delta)
    if record_count is not None:
        RECORD_COUNT.write(buf, 0, record_count)
    if producer is not None:
        PRODUCER_FIELDS.pack_into(buf, PRODUCER_ID.position, *producer)
    reseal(buf)
    return bytes(buf)


#: items 1 and 2: (frame, the field the refusal names)
CASES = {
    "explicit deltas [0, 1, 1000] under last_offset_delta 2": (
        lambda: forged(["a", "b", "c"], offset_deltas=[0, 1, 1000], last_offset_delta=2),
        "explicit-offsets bit"),
    "negative explicit delta": (
        lambda: forged(["a", "b", "c"], offset_deltas=[-2, 0, 2]), "explicit-offsets bit"),
    "decreasing explicit deltas": (
        lambda: forged(["a", "b", "c"], offset_deltas=[0, 2, 1], last_offset_delta=2),
        "explicit-offsets bit"),
    "explicit-offsets bit without an offset column": (
        lambda: forged(["a", "b"], attributes=EXPLICIT_OFFSETS_BIT), "explicit-offsets bit"),
    "offset column without the explicit-offsets bit": (
        lambda: _without_bit(forged(["a", "b"], offset_deltas=[0, 1])), "__offset_delta"),
    "last_offset_delta beyond count - 1": (
        lambda: forged(["a", "b", "c"], last_offset_delta=(1 << 31) - 1), "last_offset_delta"),
    "last_offset_delta one past count - 1": (
        lambda: forged(["a", "b", "c"], last_offset_delta=3), "last_offset_delta"),
    "control bit": (lambda: forged(["a"], control=True), "control bit"),
    "transaction marker": (
        lambda: encode_marker(COMMIT, producer_id=77, producer_epoch=0, timestamp=1),
        "control bit"),
    "LogAppendTime bit": (lambda: forged(["a", "b"], attributes=TIMESTAMP_TYPE_BIT),
                          "timestamp-type bit"),
    "transactional bit": (
        lambda: forged(["a", "b"], transactional=True, producer_id=78, producer_epoch=0,
                       base_sequence=0), "transactional bit"),
}


def _without_bit(frame: bytes) -> bytes:
    buf = bytearray(frame)
    ATTRIBUTES.write(buf, 0, unpack_header(buf).attributes & ~EXPLICIT_OFFSETS_BIT)
    reseal(buf)
    return bytes(buf)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess.in_temp(tmp_path_factory, "forged") as proc:
        yield proc


@pytest.fixture
def conn(broker):
    with Connection(broker.address, client_id="forger") as c:
        yield c


_names = iter(range(1 << 30))


def new_topic(conn) -> str:
    name = f"forged-{next(_names)}"
    assert create(conn, name)["error_code"] == 0
    return name


class Reader:
    """One Consumer on partition 0 of a topic, re-reading it from offset 0 on demand."""

    def __init__(self, address: str, topic: str):
        self.tp = TopicPartition(topic, 0)
        self.consumer = Consumer(bootstrap_servers=address, auto_offset_reset="earliest",
                                 enable_auto_commit=False, fetch_max_wait_ms=20)
        self.consumer.assign([self.tp])

    def read_all(self, expected: dict, limit_s: float = 30.0) -> dict:
        """Every record from offset 0 until the last expected offset was passed: offset ->
        value. Fails on an offset delivered twice or out of order, or a stall."""
        self.consumer.seek(self.tp, 0)
        want = max(expected) if expected else -1
        got: dict = {}
        last = -1
        deadline = time.monotonic() + limit_s
        while last < want:
            assert time.monotonic() < deadline, \
                f"consumer stalled at offset {last} of {want}: {len(got)} records"
            for records in self.consumer.poll(timeout_ms=100).values():
                for r in records:
                    assert r.offset > last, f"offset {r.offset} delivered after {last}"
                    last = r.offset
                    got[r.offset] = r.value.decode()
        return got

    def close(self) -> None:
        self.consumer.close()


def assert_read_back(expected: dict, got: dict, what: str) -> None:
    for offset, value in expected.items():
        assert got.get(offset) == value, \
            f"{what}: acknowledged record {value!r} at offset {offset} read as " \
            f"{got.get(offset)!r}"


def log_reader_records(root, topic: str) -> dict:
    reader = LogReader(LocalFileIO(), (root / "topics" / topic / "0").as_uri())
    got, last = {}, -1
    for batch in reader.read_batches(0):
        for offset, value in zip(batch.column(OFFSET_COLUMN).to_pylist(),
                                 batch.column("value").to_pylist()):
            assert offset > last, f"LogReader: offset {offset} after {last}"
            last = offset
            got[offset] = value.decode()
    return got


def send(producer: Producer, topic: str, values, acked: dict) -> None:
    futures = [(v, producer.send(topic, v.encode(), partition=0)) for v in values]
    for v, f in futures:
        acked[f.get(30).offset] = v


@pytest.mark.parametrize("case", list(CASES))
def test_forged_frame_is_refused_and_others_records_stay(broker, conn, case):
    build, field = CASES[case]
    topic = new_topic(conn)
    acked: dict = {}
    with Producer(broker.address, acks="all", enable_idempotence=True, linger_ms=0) as p:
        send(p, topic, ["p0", "p1", "p2"], acked)
        item = produce(conn, topic, 0, build(), acks=-1)
        assert item["error_code"] == INVALID_RECORD, (case, item)
        message = item.get("error_message") or ""
        assert f"partition {topic}-0" in message and "frame at byte 0" in message \
            and field in message, message
        send(p, topic, [f"p{i}" for i in range(3, 9)], acked)
    assert sorted(acked) == list(range(9)), acked
    reader = Reader(broker.address, topic)
    try:
        assert_read_back(acked, reader.read_all(acked), "consumer")
    finally:
        reader.close()
    assert log_reader_records(broker.root, topic) == acked
    assert not any(h.attributes & BROKER_ONLY for h in log_frames(broker, topic))


def test_forged_frames_in_storage_never_shift_later_offsets(tmp_path):
    """Item 2, the reader's side: frames the broker now refuses, written to a log by an
    older broker, are DataLossErrors of their own offsets; every record after them is
    read at its offset, in order."""
    fio = LocalFileIO()
    pdir = (tmp_path / "topics" / "t" / "0")
    pdir.mkdir(parents=True)
    bad = [forged(["x0", "x1"], attributes=EXPLICIT_OFFSETS_BIT),  # no offset column
           forged(["y0", "y1", "y2"], offset_deltas=[0, 1, 1000], last_offset_delta=2),
           forged(["z0", "z1", "z2"], offset_deltas=[-2, 0, 2]),
           forged(["w0", "w1", "w2"], offset_deltas=[0, 2, 1], last_offset_delta=2)]
    good: dict = {}
    spans = []
    with PartitionLog.open(fio, pdir.as_uri(), LogConfig()) as plog:
        for frame in bad:
            first = plog.log_end_offset
            plog.append(encode_frame(raw_batch([f"g{first}".encode()])))
            good[first] = f"g{first}"
            res = plog.append(frame)
            spans.append((res.base_offset, res.last_offset + 1))
        end = plog.log_end_offset
        plog.append(encode_frame(raw_batch([f"g{end}".encode()])))
        good[end] = f"g{end}"
        plog.flush()
    reader = LogReader(fio, pdir.as_uri())
    start = 0
    for lost in spans:
        got = {}
        with pytest.raises(DataLossError) as info:
            for batch in reader.read_batches(start):
                got.update(zip(batch.column(OFFSET_COLUMN).to_pylist(),
                               [v.decode() for v in batch.column("value").to_pylist()]))
        assert (info.value.first_offset, info.value.end_offset) == lost, info.value
        assert f"[{lost[0]}, {lost[1]})" in str(info.value)
        assert "partition t-0" in str(info.value) and "explicit-offsets bit" in str(info.value)
        assert got == {o: v for o, v in good.items() if start <= o < lost[0]}
        start = lost[1]  # as a consumer seeks past the range, or Spark skips it
    tail = {}
    for batch in reader.read_batches(start):
        tail.update(zip(batch.column(OFFSET_COLUMN).to_pylist(),
                        [v.decode() for v in batch.column("value").to_pylist()]))
    assert tail == {end: f"g{end}"}


def test_consumer_reads_past_a_forged_frame_in_storage(tmp_path):
    """The Consumer's side of item 2: a forged frame an older broker stored is an error
    naming its offsets, never records under offsets outside its span; after seeking
    past it every later record, another producer's included, comes at its offset."""
    root = tmp_path / "root"
    bad = [forged(["y0", "y1", "y2"], offset_deltas=[0, 1, 1000], last_offset_delta=2),
           forged(["z0", "z1", "z2"], offset_deltas=[-2, 0, 2]),
           forged(["x0", "x1"], attributes=EXPLICIT_OFFSETS_BIT)]
    good: dict = {}
    spans = []
    with BrokerProcess(root.as_uri(), log_path=tmp_path / "broker.log") as proc:
        with Connection(proc.address) as c:
            assert create(c, "t")["error_code"] == 0
            assert produce(c, "t", 0, encode_frame(raw_batch([b"g0"])), acks=-1)[
                "error_code"] == 0
            good[0] = "g0"
        proc.stop()
        with PartitionLog.open(LocalFileIO(), (root / "topics" / "t" / "0").as_uri(),
                               LogConfig()) as plog:  # what an older broker accepted
            for frame in bad:
                res = plog.append(frame)
                spans.append((res.base_offset, res.last_offset + 1))
            plog.flush()
        proc.start()
        with Producer(proc.address, acks="all", enable_idempotence=True, linger_ms=0) as p:
            send(p, "t", ["after0", "after1"], good)
        consumer = Consumer(bootstrap_servers=proc.address, auto_offset_reset="earliest",
                            enable_auto_commit=False, fetch_max_wait_ms=20)
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        got: dict = {}
        try:
            for first, end in spans:
                deadline = time.monotonic() + 30
                with pytest.raises(DataLossError) as info:
                    while True:
                        assert time.monotonic() < deadline, "no error at a forged frame"
                        for records in consumer.poll(timeout_ms=100).values():
                            for r in records:
                                assert r.offset not in got and first > r.offset, r
                                got[r.offset] = r.value.decode()
                assert f"[{first}, {end})" in str(info.value), info.value
                consumer.seek(tp, end)  # past the frame, as the error says
            deadline = time.monotonic() + 30
            while len(got) < len(good):
                assert time.monotonic() < deadline, f"stalled after the forged frames: {got}"
                for records in consumer.poll(timeout_ms=100).values():
                    for r in records:
                        assert r.offset not in got, r
                        got[r.offset] = r.value.decode()
        finally:
            consumer.close()
    assert got == good


# --- the must-show fuzz -------------------------------------------------------------------

_BITS = (0, EXPLICIT_OFFSETS_BIT, CONTROL_BIT, TRANSACTIONAL_BIT, TIMESTAMP_TYPE_BIT)


def random_forgery(rng: random.Random, victim_pid: int) -> tuple[bytes, bool, list]:
    """A random forged frame, whether the broker must refuse it (it claims what only the
    broker or the cleaner may write, or miscounts) and its values: offset deltas, counts,
    flags and producer fields drawn at random. The legitimate producer's own id is left out: a
    frame spoofing it is issue #33's item 3."""
    n = rng.randint(1, 4)
    values = [f"f{rng.randrange(1 << 30)}" for _ in range(n)]
    attributes = 0
    for bit in _BITS:
        if rng.random() < 0.2:
            attributes |= bit
    deltas = None
    if rng.random() < 0.3:
        kind = rng.choice(("ok", "jump", "negative", "decreasing", "repeat"))
        deltas = {"ok": list(range(n)), "jump": [*range(n - 1), rng.randint(n, 1 << 30)],
                  "negative": [rng.randint(-1000, -1), *range(1, n)],
                  "decreasing": list(range(n))[::-1],
                  "repeat": [0] * n}[kind]
    last_delta = rng.choice((None, None, n - 1, n, 0, -1, (1 << 31) - 1, rng.randrange(1 << 20)))
    count = rng.choice((None, None, None, n, n + 1, n - 1, 0, -5))
    pid = rng.choice((-1, -1, rng.randrange(1 << 40)))
    if pid == victim_pid:
        pid = -1
    producer = (pid, rng.choice((-1, 0, 1, rng.randrange(1 << 15))),
                rng.choice((-1, 0, rng.randrange(1 << 31))))
    frame = forged(values, offset_deltas=deltas, attributes=attributes,
                   last_offset_delta=last_delta, record_count=count, producer=producer)
    header = unpack_header(frame)
    must_refuse = bool(header.attributes & BROKER_ONLY) \
        or header.last_offset_delta != n - 1 or header.record_count != n \
        or deltas is not None  # an offset column, with the bit or without
    return frame, must_refuse, values


@pytest.mark.spark
def test_fuzz_forged_frames_never_move_acknowledged_records(broker, conn, spark):
    rng = random.Random(FUZZ_SEED)
    topic = new_topic(conn)
    acked: dict = {}  # offset -> value, every acknowledged record of every producer
    refused = 0
    reader = Reader(broker.address, topic)
    try:
        with Producer(broker.address, acks="all", enable_idempotence=True,
                      linger_ms=0) as p:
            send(p, topic, ["p-start"], acked)
            victim = log_frames(broker, topic)[0].producer_id
            assert victim >= 0
            for i in range(FUZZ_FRAMES):
                send(p, topic, [f"p{i}.{j}" for j in range(rng.randint(1, 3))], acked)
                frame, must_refuse, values = random_forgery(rng, victim)
                item = produce(conn, topic, 0, frame, acks=rng.choice((1, -1)))
                if item["error_code"]:
                    refused += 1
                else:
                    assert not must_refuse, \
                        f"frame {i} acknowledged: {unpack_header(frame)}"
                    for k, v in enumerate(values):
                        acked[item["base_offset"] + k] = v
                got = reader.read_all(acked)
                assert_read_back(acked, got, f"consumer after forged frame {i} "
                                             f"(seed {FUZZ_SEED})")
            send(p, topic, ["p-end"], acked)
        assert refused, "no forged frame was refused: the fuzz tested nothing"
        print(f"{FUZZ_FRAMES} forged frames (seed {FUZZ_SEED}): {refused} refused, "
              f"{FUZZ_FRAMES - refused} acknowledged; {len(acked)} records checked")
        assert_read_back(acked, reader.read_all(acked), "consumer at the end")
    finally:
        reader.close()
    assert_read_back(acked, log_reader_records(broker.root, topic), "LogReader")
    import sparklog.spark

    sparklog.spark.register(spark)
    rows = (spark.read.format("sparklog").option("path", broker.root.as_uri())
            .option("subscribe", topic).load().select("offset", "value").collect())
    assert_read_back(acked, {r["offset"]: bytes(r["value"]).decode() for r in rows}, "Spark")
