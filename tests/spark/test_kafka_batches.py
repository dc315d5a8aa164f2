"""Kafka record batches (magic 2) beside Arrow frames in one segment, read by Spark
(docs/storage.md, "Kafka record batches: the second frame kind"): the JVM reader
(``KafkaBatch.java``) and the Python reader give the records written, for every codec of
both kinds, whatever the offset range cuts, in batch scans, counts and streams, and skip
control batches; batches of real clients (Kafka's Java client, librdkafka) read from
storage; damaged batches fail both readers naming what is wrong; and a differential fuzz
holds KafkaBatch.java to the Python codec."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import crc32c
import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")

from sparklog.format.frame import encode_frame, iter_frames, raw_batch
from sparklog.format.kafka_batch import (
    COMPRESSION_IDS,
    KafkaRecord,
    compress_records,
    decode_batch,
    encode_batch,
)
from sparklog.metadata import TopicStore
from sparklog.spark.jvm import COUNT_PUSHDOWN_OPTION, JVM_READER_OPTION
from sparklog.storage import open_fileio
from tests.spark.test_count_pushdown import how_counted
from tests.support.logdata import BASE_TS, ts
from tests.support.sparkread import JVM, load, output, run_available_now, scan_of, stream

pytestmark = pytest.mark.spark

#: the frames of the mixed segment, in order: (kind, codec, offsets it spans); Kafka's
#: snappy in both framings (xerial: Kafka's Java client; raw: librdkafka)
FRAMES = [
    ("arrow", "none", 5), ("kafka", "none", 4), ("arrow", "lz4", 3), ("kafka", "gzip", 6),
    ("kafka", "snappy", 5), ("kafka", "snappy-raw", 3), ("kafka", "control", 1),
    ("arrow", "zstd", 4), ("kafka", "lz4", 7), ("kafka", "zstd", 5),
    ("kafka", "log-append-time", 3), ("kafka", "gaps", 6), ("kafka", "none", 1),
]
#: the offset deltas of the "gaps" batch's records (a cleaned batch: its records keep
#: their offsets, lastOffsetDelta stays 5)
GAPS = (0, 2, 5)
#: the LogAppendTime batch's time (every record of it reads this timestamp)
APPEND_TIME = BASE_TS + 999_999


def _record(offset: int) -> dict:
    """Record ``offset``: null keys, empty values, no headers, several headers and a
    header with a null value and a non-ASCII key, all mixed."""
    headers = (None, [("h", b"%d" % offset), ("n", None)], [("cl\u00e9", b"")])[offset % 3]
    return {"key": None if offset % 5 == 0 else b"k%d" % (offset % 4),
            "value": b"" if offset % 7 == 3 else b"v%d" % offset * (1 + offset % 11),
            "timestamp": BASE_TS + 1000 * offset - 7 * (offset % 2), "headers": headers}


def mixed_segment() -> tuple[bytes, list]:
    """The bytes of a segment of :data:`FRAMES` from offset 0 and its records as
    (offset, record, timestamp type) (control records are not rows)."""
    out, rows, offset = bytearray(), [], 0
    for kind, codec, n in FRAMES:
        offsets = [offset + d for d in GAPS] if codec == "gaps" else range(offset, offset + n)
        recs = [_record(o) for o in offsets]
        if kind == "arrow":
            frame = encode_frame(
                raw_batch([r["value"] for r in recs], [r["key"] for r in recs],
                          [r["headers"] for r in recs]),
                timestamps=[r["timestamp"] for r in recs], compression=codec,
                base_offset=offset)
        else:
            krecs = [KafkaRecord(o, r["timestamp"], r["key"], r["value"],
                                 tuple(r["headers"] or ())) for o, r in zip(offsets, recs)]
            frame = encode_batch(
                krecs, base_offset=offset, partition_leader_epoch=3,
                compression=codec.removesuffix("-raw") if codec in (
                    "gzip", "snappy", "snappy-raw", "lz4", "zstd") else "none",
                snappy_framing="raw" if codec == "snappy-raw" else "xerial",
                control=codec == "control",
                log_append_time=APPEND_TIME if codec == "log-append-time" else None,
                last_offset_delta=n - 1)
        out += frame
        if codec != "control":
            for o, r in zip(offsets, recs):
                lat = codec == "log-append-time"
                rows.append((o, dict(r, timestamp=APPEND_TIME) if lat else r, int(lat)))
        offset += n
    return bytes(out), rows


def write_topic(root: str, topic: str, segment: bytes, partitions: int = 1,
                schema=None) -> None:
    """A topic (raw unless ``schema``) whose partitions each hold ``segment`` (frames from
    offset 0) as their one (active) segment file, written as the bytes are, not through
    the log."""
    store = TopicStore(root, open_fileio(root))
    store.create_topic(topic, partitions, schema=schema)
    for p in range(partitions):
        directory = store.partition_dir(topic, p)
        store.fileio.mkdirs(directory)
        with store.fileio.create(f"{directory}/{0:020d}.log") as f:
            f.write(segment)


def make_mixed_topic(root: str, topic: str = "mixed", partitions: int = 2) -> list:
    """A raw topic whose partitions each hold the mixed segment; its rows."""
    data, rows = mixed_segment()
    write_topic(root, topic, data, partitions)
    return rows


def expected(topic: str, rows: list, partitions: int, start: int = 0, end: int | None = None,
             headers: bool = True) -> list:
    """Spark's rows of ``rows`` in every partition within ``[start, end)``."""
    out = []
    for p in range(partitions):
        for o, r, lat in rows:
            if o < start or (end is not None and o >= end):
                continue
            row = (r["key"], r["value"], topic, p, o, ts(r["timestamp"]), lat)
            if headers:
                row += ([(k, v) for k, v in r["headers"]] if r["headers"] else None,)
            out.append(row)
    return sorted(out, key=lambda row: (row[3], row[4]))


def _plain(row) -> tuple:
    """A collected row as :func:`expected` spells it (bytes, header pairs)."""
    values = []
    for v in row:
        if isinstance(v, bytearray):
            v = bytes(v)
        elif isinstance(v, list):
            v = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in v]
        values.append(v)
    return tuple(values)


def _sorted(rows: list) -> list:
    return sorted(rows, key=lambda row: (row[3], row[4]))


ROUTES = {"jvm": {}, "python": {JVM_READER_OPTION: "false"}}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_both_kinds_and_every_codec_read_as_written(jspark, storage_root, route):
    rows = make_mixed_topic(storage_root)
    last = sum(n for _, _, n in FRAMES)
    for start, end, headers in ((0, None, True), (0, None, False),
                                # inside the gzip batch to inside the lz4 batch
                                (14, 38, True),
                                # inside one snappy batch
                                (20, 22, True),
                                # from the control batch to the end
                                (26, last, True),
                                # inside the batch with gaps: its record at 48 only
                                (47, 51, True)):
        options = {**ROUTES[route], "subscribe": "mixed", "includeHeaders": str(headers)}
        options["startingOffsets"] = f'{{"mixed":{{"0":{start},"1":{start}}}}}'
        if end is not None:
            options["endingOffsets"] = f'{{"mixed":{{"0":{end},"1":{end}}}}}'
        df = load(jspark, storage_root, **options)
        assert (JVM in scan_of(df)) == (route == "jvm"), scan_of(df)
        got = _sorted([_plain(r) for r in df.collect()])
        want = expected("mixed", rows, 2, start, end, headers)
        assert got == want, (start, end, headers)
        # offsets and counts, from the frame headers where they answer (the batch with
        # gaps is read whole), counted in the tasks or pushed down to the planner
        assert df.count() == len(want)
        assert load(jspark, storage_root, **options, **{COUNT_PUSHDOWN_OPTION: "false"}
                    ).count() == len(want)
        if route == "jvm" and end is None:  # the whole batch with gaps: counted from
            assert how_counted(df) == "driver"  # headers (and its CRC) on the driver
        assert sorted(r.offset for r in df.select("offset").collect()) == sorted(
            row[4] for row in want)


def _recrc(batch: bytearray) -> bytes:
    """``batch`` with its CRC-32C made right again (damage the CRC does not catch)."""
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _damaged(name: str) -> bytes:
    """A Kafka batch of offsets 5-8, damaged as ``name`` says."""
    recs = [KafkaRecord(o, BASE_TS + o, b"k", b"v%d" % o * 40) for o in range(5, 9)]
    if name == "crc":
        batch = bytearray(encode_batch(recs, base_offset=5, compression="snappy"))
        batch[80] ^= 0x10
        return bytes(batch)
    if name == "record count":  # the header says 5 records (offsets 5-9), 4 are there
        batch = bytearray(encode_batch(recs, base_offset=5))
        struct.pack_into(">i", batch, 23, 4)
        struct.pack_into(">i", batch, 57, 5)
        return _recrc(batch)
    if name == "gzip":  # a byte of the deflate stream
        batch = bytearray(encode_batch(recs, base_offset=5, compression="gzip"))
        batch[75] ^= 0x55
        return _recrc(batch)
    if name == "zstd":  # the zstd frame cut short
        batch = bytearray(encode_batch(recs, base_offset=5, compression="zstd"))[:-3]
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        return _recrc(batch)
    raise AssertionError(name)


#: damage -> what both readers' errors say of it
DAMAGE = {
    "crc": "CRC32C mismatch",
    "record count": "record 4: length: the records end inside it (recordCount 5)",
    "gzip": "gzip records cannot be decompressed",
    "zstd": "zstd records cannot be decompressed",
}
_CODEC = {"record count": "none", "gzip": "gzip", "zstd": "zstd"}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_damaged_kafka_batches_fail_naming_what(jspark, storage_root, tmp_path, route):
    good = encode_frame(raw_batch([b"a"] * 5), timestamps=[BASE_TS] * 5)
    for i, name in enumerate(DAMAGE):
        topic = f"bad{i}"
        write_topic(storage_root, topic, good + _damaged(name) + encode_batch(
            [KafkaRecord(9, BASE_TS, None, b"after")], base_offset=9))
        path = tmp_path / "log" / "topics" / topic / "0" / f"{0:020d}.log"
        df = load(jspark, storage_root, subscribe=topic, **ROUTES[route])
        # the frame before it reads
        assert [bytes(r.value) for r in load(
            jspark, storage_root, subscribe=topic, endingOffsets=f'{{"{topic}":{{"0":5}}}}',
            **ROUTES[route]).collect()] == [b"a"] * 5
        with pytest.raises(Exception) as info:
            df.collect()
        text = str(info.value)
        if route == "python" and name == "crc":  # as for an Arrow frame: the Python
            # reader's scan of an active segment ends the log before a frame whose CRC fails
            assert "outside the valid offsets [0, 5]" in text, text
            continue
        assert DAMAGE[name] in text, text
        if route == "jvm":
            assert f"corrupt frame in file:{path} at position {len(good)}" in text, text
        if name != "crc":
            assert (f"Kafka record batch ({_CODEC[name]})" if route == "jvm" else
                    "Kafka record batch at offset 5") in text, text


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_streams_read_both_kinds(jspark, storage_root, tmp_path, route):
    """Micro-batches (Trigger.AvailableNow, capped so that batches end inside Kafka
    batches) give the records written."""
    rows = make_mixed_topic(storage_root)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    query = run_available_now(stream(jspark, storage_root, subscribe="mixed",
                                     startingOffsets="earliest", maxOffsetsPerTrigger="14",
                                     **ROUTES[route]), out, ckpt)
    assert query.exception() is None
    got = _sorted([_plain(r) for r in output(jspark, out).collect()])
    assert got == expected("mixed", rows, 2, headers=False)


def test_kafka_batch_in_a_typed_topic_is_a_schema_mismatch(jspark, storage_root):
    """A typed topic takes Arrow frames only (the broker refuses Kafka batches); one found
    in its files fails the JVM reader's task naming the frame's kind."""
    write_topic(storage_root, "typed", encode_batch([KafkaRecord(0, BASE_TS, None, b"x")]),
                schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(Exception, match="is a Kafka record batch .*no column 'id'"):
        load(jspark, storage_root, subscribe="typed").collect()
    assert load(jspark, storage_root, subscribe="typed").count() == 1  # headers only


CLIENT_CODECS = ("gzip", "snappy", "lz4", "zstd")


def test_real_clients_batches_of_every_codec_read_from_storage(jspark, tmp_path):
    """Kafka's Java client (ConsoleProducer: xerial-framed snappy, Kafka's LZ4 frames)
    and librdkafka (kcat) produce through the Kafka listener with each codec; the broker
    stores their batches as sent and stops; both Spark readers read the records from the
    storage root."""
    from tests.support.kafkaconn import start_with_kafka_listener
    from tests.support.kafkaserver import kafka_tool, kafka_unavailable

    why = kafka_unavailable() or (None if shutil.which("kcat") else "kcat is not installed")
    if why:
        pytest.skip(why)
    root = tmp_path / "log"
    root.mkdir()
    broker = start_with_kafka_listener(root)
    want = []
    try:
        address = broker.broker.listener_addresses["KAFKA"]
        kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", address,
                   "--create", "--topic", "clients", "--partitions", "1",
                   "--replication-factor", "1")
        for codec in CLIENT_CODECS:
            lines = [f"j{codec}{i}:java {codec} {i} " + "x" * (i % 50) for i in range(40)]
            kafka_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", address,
                       "--topic", "clients", "--command-property", "acks=all",
                       "--command-property", f"compression.type={codec}",
                       "--command-property", "linger.ms=50",
                       "--reader-property", "parse.key=true",
                       "--reader-property", "key.separator=:", stdin="\n".join(lines) + "\n")
            want += [tuple(line.split(":", 1)) + (None,) for line in lines]
            lines = [f"k{codec}{i}:kcat {codec} {i} " + "y" * (i % 50) for i in range(40)]
            subprocess.run(["kcat", "-b", address, "-P", "-t", "clients", "-K", ":", "-p", "0",
                            "-H", f"codec={codec}", "-z", codec],
                           input=("\n".join(lines) + "\n").encode(), check=True, timeout=60)
            want += [tuple(line.split(":", 1)) + ([("codec", codec.encode())],)
                     for line in lines]
    finally:
        broker.stop()
    segment = b"".join(p.read_bytes() for p in sorted((root / "topics" / "clients" / "0")
                                                      .glob("*.log")))
    stored = {(f.header.magic, f.header.codec) for f in iter_frames(segment)}
    # (a client sends a batch uncompressed where compressing it does not pay)
    assert {(2, codec) for codec in CLIENT_CODECS} <= stored <= {
        (2, codec) for codec in CLIENT_CODECS + ("none",)}, stored
    for route in ROUTES:
        df = load(jspark, root.as_uri(), subscribe="clients", includeHeaders="true",
                  **ROUTES[route])
        assert (JVM in scan_of(df)) == (route == "jvm")
        got = sorted((_plain(r) for r in df.collect()), key=lambda row: row[4])
        assert [row[4] for row in got] == list(range(len(want))), route
        assert sorted((k.decode(), v.decode(), h) for k, v, *_, h in got) == sorted(
            (k, v, h) for k, v, h in want), route


def _line(batch) -> str:
    """What KafkaBatchCheck.java prints of a batch the Python codec decodes (or refuses)."""
    from sparklog.errors import CorruptRecordError

    def text(b):
        return "null" if b is None else bytes(b).hex()

    try:
        decoded = decode_batch(batch)
    except CorruptRecordError as exc:
        return f"error {exc}"
    h, previous = decoded.header, -1
    for r in decoded.records:  # the readers' rule for offset deltas (Frame.offsets)
        delta = r.offset - h.base_offset
        if not previous < delta <= h.last_offset_delta:
            return f"error offsetDelta {delta}"
        previous = delta
    return "ok " + ";".join(
        f"{r.offset - h.base_offset} {r.timestamp} {text(r.key)} {text(r.value)} "
        + ",".join(f"{k}={text(v)}" for k, v in r.headers) for r in decoded.records)


def test_fuzzed_records_decode_as_the_python_codec_decodes_them(tmp_path):
    """Differential fuzz of KafkaBatch.java against sparklog/format/kafka_batch.py: the
    records section of a batch damaged at random (bits, bytes, cut, grown, record count)
    and then compressed by each codec with a right CRC, so that the damage reaches the
    record parser: both decode the same records, or both refuse the batch; the JVM never
    fails any other way (KafkaBatchCheck.java prints CRASH then)."""
    import random

    pyspark = pytest.importorskip("pyspark")
    from sparklog.spark.jvm import jar_path

    java, javac, jar = shutil.which("java"), shutil.which("javac"), jar_path(quiet=True)
    if not (java and javac and jar):
        pytest.skip("no JDK here: the JVM reader cannot be built")
    recs = [KafkaRecord(o, BASE_TS + 37 * o, None if o == 2 else b"key%d" % o,
                        b"v" * (5 + 60 * o), (("h", b"x"), ("n", None), ("\u00e9", b""))[:o % 4])
            for o in range(6)]
    pristine = encode_batch(recs)
    section = pristine[61:]
    rng = random.Random(20261129)
    batches = tmp_path / "batches"
    batches.mkdir()
    want = {}
    for case in range(400):
        codec = ("none", "gzip", "snappy", "snappy-raw", "lz4", "zstd")[case % 6]
        records, count = bytearray(section), len(recs)
        for _ in range(0 if case < 6 else rng.randrange(1, 4)):
            how, at = rng.randrange(6), rng.randrange(len(records))
            if how == 0:
                records[at] ^= 1 << rng.randrange(8)
            elif how == 1:
                records[at] = rng.randrange(256)
            elif how == 2:
                del records[at:at + rng.randrange(1, 4)]
            elif how == 3:
                records[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
            elif how == 4:
                records = records[:at]
            else:
                count += rng.choice((-1, 1))
        packed = compress_records(bytes(records), codec.removesuffix("-raw"),
                                  snappy_framing="raw" if codec == "snappy-raw" else "xerial")
        batch = bytearray(pristine[:61]) + packed
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        struct.pack_into(">h", batch, 21, COMPRESSION_IDS[codec.removesuffix("-raw")])
        struct.pack_into(">i", batch, 57, count)
        batch = _recrc(batch)
        name = f"{case:04d}.bin"
        (batches / name).write_bytes(batch)
        want[name] = _line(batch)
    cp = f"{jar}:{Path(pyspark.__file__).resolve().parent / 'jars'}/*"
    classes = tmp_path / "classes"
    subprocess.run([javac, "--release", "17", "-nowarn", "-cp", cp, "-d", str(classes),
                    str(Path(__file__).with_name("KafkaBatchCheck.java"))], check=True,
                   capture_output=True, timeout=120)
    done = subprocess.run([java, "-cp", f"{classes}:{cp}", "io.sparklog.spark.KafkaBatchCheck",
                           str(batches)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert got.keys() == want.keys()
    outcomes = {"ok": 0, "error": 0}
    for name in sorted(want):
        assert "CRASH" not in got[name], (name, got[name])
        jvm_status, python_status = got[name].split(" ")[0], want[name].split(" ")[0]
        assert jvm_status == python_status, (name, got[name], want[name])
        if jvm_status == "ok":
            assert got[name] == want[name], name
        outcomes[jvm_status] += 1
    print(outcomes)
    assert outcomes["ok"] >= 6 and outcomes["error"] > 100, outcomes
