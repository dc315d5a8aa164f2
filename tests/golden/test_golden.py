"""The golden fixtures of the on-disk format, decoded by both readers.

``data/`` and ``planned-range.pickle`` were written once by ``make_golden.py`` and are
committed: these tests decode those bytes (never bytes made by the code under test) and
check every field against the values stated here, in Python (format/, log/index.py,
metadata/) and on the JVM (the reader's own classes, through a small javac-compiled
check, and through ``format("sparklog")`` in Spark). A change of the format in either
language, or of the planned-range descriptor, fails them: change the format only
on purpose, with docs/format.md, both readers and these values.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.format.frame import iter_frames
from sparklog.format.header import CRC_START, HEADER_FIELDS, HEADER_SIZE, LOG_OVERHEAD, MAGIC
from sparklog.log.index import OffsetIndex, SegmentSummary, TimeIndex
from sparklog.metadata import TopicStore
from sparklog.storage import open_fileio

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
PICKLE = HERE / "planned-range.pickle"
TS = 1_700_000_000_000

#: docs/format.md, "Frame header": field -> byte position
POSITIONS = {"base_offset": 0, "length": 8, "leader_epoch": 12, "magic": 16, "crc": 17,
             "attributes": 21, "last_offset_delta": 23, "first_timestamp": 27,
             "max_timestamp": 35, "producer_id": 43, "producer_epoch": 51,
             "base_sequence": 53, "record_count": 57}

#: every frame: (topic, segment base offset, position in the .log, header fields in
#: the order of POSITIONS)
FRAMES = [
    ("raw", 0, 0, (0, 1105, 7, 1, 37578446, 0, 2, TS, TS + 2000, 4242, 3, 0, 3)),
    ("raw", 0, 1117, (3, 1121, 7, 1, 1497742042, 0, 2, TS + 3000, TS + 5000, 4242, 3, 3, 3)),
    ("raw", 6, 0, (6, 1105, 7, 1, 2854806618, 0, 2, TS + 6000, TS + 8000, 4242, 3, 6, 3)),
    ("raw", 6, 1117, (9, 1121, 7, 1, 1299034891, 0, 2, TS + 9000, TS + 11000, 4242, 3, 9, 3)),
    ("raw", 12, 0, (12, 1113, 7, 1, 1201785130, 0, 2, TS + 12000, TS + 14000, 4242, 3, 12, 3)),
    ("lz4", 0, 0, (0, 1321, 7, 1, 867501338, 1, 3, TS, TS, -1, -1, -1, 4)),     # lz4
    ("lz4", 0, 1333, (4, 1265, 7, 1, 214923379, 2, 3, TS, TS, -1, -1, -1, 4)),  # zstd
    ("typed", 0, 0, (0, 761, 7, 1, 3696015776, 0, 1, TS, TS + 1, -1, -1, -1, 2)),
    # explicit offsets: attributes bit 6, last offset delta 5 for 3 records
    ("compacted", 0, 0, (0, 1217, 7, 1, 139672546, 64, 5, TS, TS + 5, -1, -1, -1, 3)),
]

#: sealed segments of the raw topic: summary in the .index header, index entries
#: (offset, position), time index entries (timestamp, offset)
SEALED = {
    0: (SegmentSummary(0, 6, 2250, TS + 5000, 3, 6, 2, no_control=True), [(3, 1117)],
        [(TS + 2000, 3)]),
    6: (SegmentSummary(6, 12, 2250, TS + 11000, 9, 6, 2, no_control=True), [(9, 1117)],
        [(TS + 8000, 9)]),
}

RAW_CONFIG_JSON = {"configs": {"index.interval.bytes": 1, "message.timestamp.type": "CreateTime",
                               "retention.ms": 604800000, "segment.bytes": 2500},
                   "name": "raw", "partitions": 1, "schema": None, "version": 1}
TYPED_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                          pa.field("name", pa.string()), pa.field("score", pa.float64())])

#: the pickled planned range: PlannedRange's fields
PLANNED = {"topic": "raw", "partition": 0, "start": 2, "end": 11,
           "root": "file:///golden-root", "fail_on_data_loss": True, "storage_options": {}}
#: its version-1 descriptor (docs/format.md, "Planned ranges"), byte for byte
DESCRIPTOR = ('{"version":1,"topic":"raw","partition":0,"start":2,"end":11,'
              '"root":"file:///golden-root","failOnDataLoss":true,"storageOptions":{}}')


def raw_rows():
    """(offset, key, value, headers, timestamp) of the raw topic's 15 records."""
    return [(o, f"k{o}".encode(), f"value-{o}".encode(),
             [("h", str(o).encode())] if o % 2 else None, TS + 1000 * o) for o in range(15)]


RECORDS = {
    "lz4": [(o, None, b"x" * 64, None, TS) for o in range(8)],
    "compacted": [(d, f"k{d}".encode(), f"c{d}".encode(), None, TS + d) for d in (0, 2, 5)],
}
TYPED_ROWS = [(0, 1, "one", 1.5, TS), (1, 2, None, -2.0, TS + 1)]


def mixed_rows():
    """(offset, key, value, headers, timestamp) of the mixed topic's 21 records."""
    return [(o, None if o % 4 == 0 else f"m{o}".encode(), f"mixed-{o}".encode() * 3,
             [("h", str(o).encode()), ("n", None)] if o % 3 == 1 else None, TS + 500 * o)
            for o in range(21)]


#: the mixed topic's frames: (segment base, position, base offset, magic, codec id,
#: record count); magic 1 an Arrow frame (codec 0 none, 1 lz4, 2 zstd), 2 a Kafka batch
#: (0 none, 1 gzip, 2 snappy: at 6 xerial-framed, at 10 raw; 3 lz4, 4 zstd)
MIXED = [(0, 0, 0, 1, 0, 3), (0, 1189, 3, 2, 1, 3), (0, 1320, 6, 2, 2, 2),
         (8, 0, 8, 1, 1, 2), (8, 1341, 10, 2, 2, 2), (8, 1458, 12, 2, 3, 3),
         (15, 0, 15, 1, 2, 2), (15, 1381, 17, 2, 4, 2), (15, 1492, 19, 2, 0, 2)]
#: the mixed topic's sealed segments: base -> (next offset, record count)
MIXED_SEALED = {0: (8, 8), 8: (15, 7)}


def segment_frames(topic):
    """(segment base, position, frame) of every frame of the topic's partition 0."""
    for log in sorted((DATA / "topics" / topic / "0").glob("*.log")):
        data = log.read_bytes()
        pos = 0
        for frame in iter_frames(data):  # validates length, magic, CRC, body
            yield int(log.stem), pos, frame
            pos += frame.header.size


# --- Python --------------------------------------------------------------------------
def test_header_fields_are_where_the_format_says():
    assert {f.name: f.position for f in HEADER_FIELDS} == POSITIONS
    assert (HEADER_SIZE, LOG_OVERHEAD, CRC_START, MAGIC) == (61, 12, 21, 1)


def test_every_frame_header_field_decodes_to_its_stated_value():
    got = [(t, base, pos, tuple(frame.header))
           for t in ("raw", "lz4", "typed", "compacted")
           for base, pos, frame in segment_frames(t)]
    assert got == FRAMES
    for topic, base, pos, values in FRAMES:  # and each at its stated byte position
        data = (DATA / "topics" / topic / "0" / f"{base:020d}.log").read_bytes()
        for field, value in zip(HEADER_FIELDS, values):
            assert field.read(data, pos) == value, (topic, base, pos, field.name)
            assert field.position == POSITIONS[field.name]


def _records(topic):
    out = []
    for _, _, frame in segment_frames(topic):
        batch = frame.batch().to_pydict()
        for i, offset in enumerate(frame.offsets().to_pylist()):
            headers = batch["headers"][i]
            out.append((offset, batch["key"][i], batch["value"][i],
                        None if headers is None else [(h["key"], h["value"]) for h in headers],
                        int(batch["__timestamp"][i].timestamp() * 1000)))
    return out


def test_records_of_raw_compressed_and_explicit_offset_frames():
    assert _records("raw") == raw_rows()
    assert _records("lz4") == RECORDS["lz4"]
    assert _records("compacted") == RECORDS["compacted"]
    codecs = [frame.header.codec for _, _, frame in segment_frames("lz4")]
    assert codecs == ["lz4", "zstd"]
    (_, _, frame), = segment_frames("compacted")
    assert frame.header.explicit_offsets and frame.offsets().to_pylist() == [0, 2, 5]


def test_mixed_segments_hold_both_kinds_and_every_codec():
    frames = list(segment_frames("mixed"))
    assert [(seg, pos, f.header.base_offset, f.header.magic, f.header.attributes & 7,
             f.header.record_count) for seg, pos, f in frames] == MIXED
    assert [f.header.codec for _, _, f in frames] == [
        "none", "gzip", "snappy", "lz4", "snappy", "lz4", "zstd", "zstd", "none"]
    assert {f.header.leader_epoch for _, _, f in frames} == {7}
    assert _records("mixed") == mixed_rows()
    part = DATA / "topics" / "mixed" / "0"
    for base, (next_offset, records) in MIXED_SEALED.items():
        summary, _ = OffsetIndex.from_bytes((part / f"{base:020d}.index").read_bytes())
        assert (summary.next_offset, summary.record_count) == (next_offset, records)


def test_typed_topic_schema_and_rows():
    store = TopicStore(DATA.as_uri(), open_fileio(DATA.as_uri()))
    assert store.describe_topic("typed").schema == TYPED_SCHEMA
    (_, _, frame), = segment_frames("typed")
    batch = frame.batch()
    assert batch.schema.names == ["id", "name", "score", "__timestamp"]
    assert batch.schema.field("id").nullable is False
    rows = batch.to_pydict()
    assert [(o, rows["id"][i], rows["name"][i], rows["score"][i],
             int(rows["__timestamp"][i].timestamp() * 1000))
            for i, o in enumerate(frame.offsets().to_pylist())] == TYPED_ROWS


def test_sealed_segment_indexes():
    part = DATA / "topics" / "raw" / "0"
    assert sorted(p.name for p in part.glob("*.index")) == [
        f"{b:020d}.index" for b in SEALED]
    for base, (summary, entries, times) in SEALED.items():
        got_summary, index = OffsetIndex.from_bytes((part / f"{base:020d}.index").read_bytes())
        assert got_summary == summary
        assert index.entries() == entries
        assert TimeIndex.from_bytes((part / f"{base:020d}.timeindex").read_bytes()).entries() \
            == times


def test_topic_config_file():
    raw = (DATA / "topics" / "raw" / "config" / "0000000001.json").read_bytes()
    assert json.loads(raw) == RAW_CONFIG_JSON
    store = TopicStore(DATA.as_uri(), open_fileio(DATA.as_uri()))
    config = store.describe_topic("raw")
    assert (config.name, config.partitions, config.schema) == ("raw", 1, None)
    assert config.get("segment.bytes") == 2500 and config.get("retention.ms") == 604800000


def test_planned_range_descriptor_contract():
    """docs/format.md, "Planned ranges": a planned partition (a PlannedRange) pickles its
    version-1 descriptor as its whole state (key ``descriptor``), which the JVM reader
    (RangePartition.fromPlanned) parses whatever class carried it. Python still pickles
    it to the committed bytes, and reads them back as a PlannedRange."""
    from dataclasses import asdict

    from sparklog.errors import InvalidArgumentError
    from sparklog.spark.source.planning import PlannedRange

    golden = PICKLE.read_bytes()
    loaded = pickle.loads(golden)
    assert type(loaded) is PlannedRange and asdict(loaded) == PLANNED
    assert loaded.descriptor() == DESCRIPTOR
    assert pickle.dumps(PlannedRange(**PLANNED), protocol=pickle.HIGHEST_PROTOCOL) == golden
    assert DESCRIPTOR.encode() in golden and b"OffsetRange" not in golden
    assert PlannedRange.from_descriptor(DESCRIPTOR) == loaded
    with pytest.raises(InvalidArgumentError, match="version 2 is not known"):
        PlannedRange.from_descriptor(DESCRIPTOR.replace('"version":1', '"version":2'))
    with pytest.raises(InvalidArgumentError, match="field start"):
        PlannedRange.from_descriptor(DESCRIPTOR.replace('"start":2', '"start":"2"'))


# --- JVM -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jvm_check(tmp_path_factory):
    """Output lines of GoldenCheck.java, compiled against the JVM reader's classes and
    run on the golden files."""
    pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed")
    from sparklog.spark.jvm import jar_path

    java, javac = shutil.which("java"), shutil.which("javac")
    jar = jar_path(quiet=True)
    if not (java and javac and jar):
        pytest.skip("no JDK here: the JVM reader cannot be built")
    cp = f"{jar}:{Path(pyspark.__file__).resolve().parent / 'jars'}/*"
    classes = tmp_path_factory.mktemp("golden-classes")
    subprocess.run([javac, "--release", "17", "-nowarn", "-cp", cp, "-d", str(classes),
                    str(HERE / "GoldenCheck.java")], check=True, capture_output=True,
                   timeout=120)
    done = subprocess.run([java, "-cp", f"{classes}:{cp}", "io.sparklog.spark.GoldenCheck",
                           str(DATA), str(PICKLE)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_jvm_header_constants_match(jvm_check):
    fields = [line.split()[1:] for line in jvm_check if line.startswith("field ")]
    assert {name: int(pos) for name, pos in fields} == POSITIONS
    assert "const size 61 log_overhead 12 crc_start 21 magic 1 index_size 72" in jvm_check


def test_jvm_decodes_every_frame_header(jvm_check):
    want = [f"frame {t} {base} {pos} " + " ".join(map(str, values)) + " crc-ok=true"
            for t, base, pos, values in FRAMES]
    assert [line for line in jvm_check if line.startswith("frame ")] == want


def test_jvm_finds_positions_in_the_offset_index(jvm_check):
    want = []
    for base, (_, entries, _) in SEALED.items():
        for offset in range(base, base + 6):
            pos = max([p for o, p in entries if o <= offset], default=0)
            want.append(f"indexed raw {offset} {pos}")
    assert [line for line in jvm_check if line.startswith("indexed ")] == want


def test_jvm_reads_the_record_counts_of_the_summaries(jvm_check):
    """The no-control flag and record count of each sealed segment's summary, as the
    pushed-down count reads them (io.sparklog.spark.RecordCount)."""
    want = [f"summary raw {base} {s.next_offset} {s.record_count}"
            for base, (s, _, _) in SEALED.items()]
    assert [line for line in jvm_check if line.startswith("summary ")] == want


def test_jvm_decodes_the_kafka_batches_of_the_mixed_topic(jvm_check):
    """KafkaBatch.java: every Kafka batch's records (each codec, snappy in both
    framings), its CRC, and the summaries of segments holding both kinds."""
    assert [line for line in jvm_check if line.startswith("kind ")] == [
        "kind mixed " + " ".join(map(str, frame)) + " crc-ok=true" for frame in MIXED]
    kafka = {o for _, _, base, magic, _, n in MIXED if magic == 2 for o in range(base, base + n)}

    def text(b):
        return "null" if b is None else b.hex()

    assert [line for line in jvm_check if line.startswith("record ")] == [
        f"record mixed {o} {t} {text(k)} {text(v)} " + (
            "null" if h is None else ",".join(f"{hk}={text(hv)}" for hk, hv in h))
        for o, k, v, h, t in mixed_rows() if o in kafka]
    assert [line for line in jvm_check if line.startswith("mixed-summary ")] == [
        f"mixed-summary {base} {n} {c}" for base, (n, c) in MIXED_SEALED.items()]


def test_jvm_reads_the_typed_schema_and_the_planned_range(jvm_check):
    assert ("schema typed [id: Int(64, true) not null, name: Utf8, "
            "score: FloatingPoint(DOUBLE)]") in jvm_check
    assert "range raw 0 2 11 file:///golden-root true" in jvm_check


@pytest.mark.spark
@pytest.mark.parametrize("jvm", [True, False])
def test_spark_reads_the_golden_topics(spark, tmp_path, jvm):
    """format("sparklog") over a copy of the golden root, on the JVM reader (checked in
    the plan) and on the Python reader: the records stated above."""
    import sparklog.spark
    from sparklog.spark.jvm import JVM_READER_OPTION, jar_path

    if jvm and (jar_path(build=False) is None or jar_path(build=False) not in (
            spark.sparkContext.getConf().get("spark.jars") or "")):
        pytest.skip("the test Spark session has no JVM reader jar")
    sparklog.spark.register(spark)
    root = tmp_path / "golden"
    shutil.copytree(DATA, root)

    def load(topic, **options):
        df = (spark.read.format("sparklog").option("path", root.as_uri())
              .option("subscribe", topic).option(JVM_READER_OPTION, str(jvm).lower()))
        for k, v in options.items():
            df = df.option(k, v)
        df = df.load()
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert ("JVM columnar reader" in plan) == jvm, plan
        return df

    def ts(ms):
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).replace(tzinfo=None)

    def kafka_rows(topic, **options):
        cols = ["offset", "key", "value", "timestamp", "partition", "timestampType"]
        return sorted(tuple(r) for r in load(topic, **options).select(*cols).collect())

    for topic, records in (("raw", raw_rows()), ("mixed", mixed_rows()), *RECORDS.items()):
        assert kafka_rows(topic) == [(o, k, v, ts(t), 0, 0) for o, k, v, _, t in records]
    for topic, records in (("raw", raw_rows()), ("mixed", mixed_rows())):
        headers = sorted((r.offset, r.headers) for r in load(
            topic, includeHeaders="true").select("offset", "headers").collect())
        assert headers == [(o, None if h is None else [tuple(x) for x in h])
                           for o, _, _, h, _ in records]
    # offsets cut inside the gzip batch and inside the Kafka lz4 batch
    assert kafka_rows("mixed", startingOffsets='{"mixed":{"0":4}}',
                      endingOffsets='{"mixed":{"0":13}}') == [
        (o, k, v, ts(t), 0, 0) for o, k, v, _, t in mixed_rows()[4:13]]
    typed = load("typed").select("offset", "id", "name", "score", "timestamp").collect()
    assert sorted(tuple(r) for r in typed) == [(o, i, n, s, ts(t)) for o, i, n, s, t in TYPED_ROWS]
    assert load("raw").count() == 15
    assert load("mixed").count() == 21
