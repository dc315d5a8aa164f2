"""Make the golden fixtures of the on-disk format (run once; the output is committed).

    python tests/golden/make_golden.py            # rewrites tests/golden/data/
    python tests/golden/make_golden.py --range    # rewrites planned-range.pickle only
    python tests/golden/make_golden.py --mixed    # rewrites data/topics/mixed only
    python tests/golden/make_golden.py --wide     # rewrites wide/ only

Everything is written by the project's own code (TopicStore, PartitionLog, encode_frame)
with fixed timestamps, producer ids and leader epochs, so the files hold no clock or
random value. The tests (tests/golden/test_golden.py, and the JVM reader through them)
decode these bytes and check every field against values stated in the tests: a change
of the format in either language fails them. Regenerate only for a deliberate format
change, and update the expected values (and docs/format.md) with it.

Contents of ``data/`` (a storage root, docs/format.md):

* ``raw``: a raw topic, partition 0, ``segment.bytes`` small enough that its first
  segment is sealed (``.index`` and ``.timeindex``) and a second is active; idempotent
  frames (producer id :data:`PRODUCER_ID`), keys, headers, leader epoch :data:`EPOCH`.
* ``lz4``: one frame with lz4-compressed Arrow buffers, one with zstd.
* ``typed``: a typed topic (declared schema) with a not-null column.
* ``compacted``: one frame with explicit offsets (the ``__offset_delta`` column).
* ``mixed``: Arrow frames and Kafka record batches (magic 2) in the same segments, every
  codec of each kind (Kafka's snappy in xerial and raw framing), ``segment.bytes``
  small enough that the first segment is sealed; written with ``--mixed`` alone too.
* every topic's ``config`` file (``raw`` with topic configs).
* ``wide/``: a closed WAL file and an L0 shared segment (docs/storage.md, sections 4
  and 5), both frame kinds, written by :mod:`sparklog.format.wal` and
  :mod:`sparklog.log.shared_segment` from :func:`wide_wal_bytes` and
  :func:`wide_segment_bytes` (not a storage root: the WAL and shared tiers are not read
  by the log yet).
* ``planned-range.pickle``: a :class:`PlannedRange` pickled as Spark pickles
  planned partitions: its state is the version-1 planned-range descriptor the JVM
  reader parses (docs/format.md, "Planned ranges").
"""

from __future__ import annotations

import io
import pickle
import shutil
import sys
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):
    sys.path.insert(0, str(HERE.parent.parent))

from sparklog.format.frame import encode_frame, raw_batch, stamp  # noqa: E402
from sparklog.format.kafka_batch import KafkaRecord, encode_batch  # noqa: E402
from sparklog.format.wal import EntryFrames, WalFileEncoder, WalFileHeader, wal_file_name  # noqa: E402
from sparklog.log.partition import PartitionLog  # noqa: E402
from sparklog.log.shared_segment import SOURCE_WAL, SharedSegmentWriter, shared_segment_name  # noqa: E402
from sparklog.metadata import TopicStore  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402

DATA = HERE / "data"
WIDE = HERE / "wide"
PICKLE = HERE / "planned-range.pickle"
BASE_TS = 1_700_000_000_000  # ms
PRODUCER_ID, PRODUCER_EPOCH = 4242, 3
EPOCH = 7  # leader epoch stamped into every frame
RAW_CONFIG = {"segment.bytes": "2500", "retention.ms": "604800000",
              "index.interval.bytes": "1", "message.timestamp.type": "CreateTime"}
RAW_FRAMES = 5  # of RAW_PER_FRAME records each
RAW_PER_FRAME = 3
TYPED_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                          pa.field("name", pa.string()), pa.field("score", pa.float64())])
#: offsets of the compacted frame's records, relative to its base offset 0
COMPACTED_DELTAS = [0, 2, 5]
MIXED_CONFIG = {"segment.bytes": "2500", "index.interval.bytes": "1"}
#: the mixed topic's frames in order: (kind, codec, records)
MIXED_FRAMES = [("arrow", "none", 3), ("kafka", "gzip", 3), ("kafka", "snappy", 2),
                ("arrow", "lz4", 2), ("kafka", "snappy-raw", 2), ("kafka", "lz4", 3),
                ("arrow", "zstd", 2), ("kafka", "zstd", 2), ("kafka", "none", 2)]
#: the pickled planned range: topic, partition, [start, end), root, fail_on_data_loss
PLANNED = ("raw", 0, 2, 11, "file:///golden-root", True)


def raw_record(offset: int) -> tuple[bytes, bytes, list, int]:
    """Key, value, headers and timestamp of the raw topic's record at ``offset``."""
    return (f"k{offset}".encode(), f"value-{offset}".encode(),
            [("h", str(offset).encode())] if offset % 2 else None, BASE_TS + 1000 * offset)


def mixed_record(offset: int) -> tuple[bytes | None, bytes, list | None, int]:
    """Key, value, headers and timestamp of the mixed topic's record at ``offset``."""
    return (None if offset % 4 == 0 else f"m{offset}".encode(), f"mixed-{offset}".encode() * 3,
            [("h", str(offset).encode()), ("n", None)] if offset % 3 == 1 else None,
            BASE_TS + 500 * offset)


def _append(store, topic, frames, config=None):
    with PartitionLog.open(store.fileio, store.partition_dir(topic, 0), config or {}) as plog:
        for frame in frames:
            plog.append(frame, leader_epoch=EPOCH)
        plog.flush()


def make(root: Path = DATA) -> None:
    """Write the fixtures under ``root`` (replaced)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    store = TopicStore(root.as_uri(), open_fileio(root.as_uri()))

    store.create_topic("raw", 1, configs=RAW_CONFIG)
    frames = []
    for i in range(RAW_FRAMES):
        recs = [raw_record(o) for o in range(i * RAW_PER_FRAME, (i + 1) * RAW_PER_FRAME)]
        frames.append(encode_frame(
            raw_batch([r[1] for r in recs], [r[0] for r in recs], [r[2] for r in recs]),
            timestamps=[r[3] for r in recs], producer_id=PRODUCER_ID,
            producer_epoch=PRODUCER_EPOCH, base_sequence=i * RAW_PER_FRAME))
    _append(store, "raw", frames, RAW_CONFIG)

    store.create_topic("lz4", 1)
    _append(store, "lz4", [
        encode_frame(raw_batch([b"x" * 64] * 4), timestamps=[BASE_TS] * 4,
                     compression=codec) for codec in ("lz4", "zstd")])

    store.create_topic("typed", 1, schema=TYPED_SCHEMA)
    typed = pa.RecordBatch.from_pylist(
        [{"id": 1, "name": "one", "score": 1.5}, {"id": 2, "name": None, "score": -2.0}],
        schema=TYPED_SCHEMA)
    _append(store, "typed", [encode_frame(typed, timestamps=[BASE_TS, BASE_TS + 1])])

    store.create_topic("compacted", 1)
    _append(store, "compacted", [encode_frame(
        raw_batch([f"c{d}".encode() for d in COMPACTED_DELTAS],
                  [f"k{d}".encode() for d in COMPACTED_DELTAS]),
        timestamps=[BASE_TS + d for d in COMPACTED_DELTAS], offset_deltas=COMPACTED_DELTAS)])

    make_mixed(root)
    make_planned_range()
    make_wide()


def make_mixed(root: Path = DATA) -> None:
    """Write the ``mixed`` topic under ``root`` (replaced)."""
    store = TopicStore(root.as_uri(), open_fileio(root.as_uri()))
    if (root / "topics" / "mixed").exists():
        shutil.rmtree(root / "topics" / "mixed")
    store.create_topic("mixed", 1, configs=MIXED_CONFIG)
    frames, offset = [], 0
    for kind, codec, n in MIXED_FRAMES:
        recs = [mixed_record(o) for o in range(offset, offset + n)]
        if kind == "arrow":
            frames.append(encode_frame(
                raw_batch([r[1] for r in recs], [r[0] for r in recs], [r[2] for r in recs]),
                timestamps=[r[3] for r in recs], compression=codec))
        else:
            frames.append(encode_batch(
                [KafkaRecord(o, r[3], r[0], r[1], tuple(r[2] or ()))
                 for o, r in zip(range(n), recs)],
                compression=codec.removesuffix("-raw"),
                snappy_framing="raw" if codec == "snappy-raw" else "xerial",
                producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH, base_sequence=offset))
        offset += n
    _append(store, "mixed", frames, MIXED_CONFIG)


#: the WAL file's writer: broker id, incarnation, seq
WIDE_WAL = (3, 12, 41)
#: the WAL file's blocks: (turn, append time, [(topic, partition, [(kind, base, n)])])
WIDE_BLOCKS = [
    (1, BASE_TS, [("raw", 0, [("arrow", 0, 3), ("kafka", 3, 2)]),
                  ("wide", 1, [("kafka", 20, 2)])]),
    (2, BASE_TS + 5, [("raw", 0, [("kafka", 5, 1)])]),
]
#: the shared segment's run placed in an own segment: topic, partition, [base, next)
WIDE_PLACED = ("hot", 0, 0, 1000)


def wide_frame(kind: str, base: int, n: int) -> bytes:
    """A frame of ``kind`` ("arrow" or "kafka") of ``n`` records, stamped at ``base``
    with leader epoch :data:`EPOCH`; the records' values and timestamps follow from
    their offsets."""
    values = [f"wide-{base + i}".encode() for i in range(n)]
    timestamps = [BASE_TS + 10 * (base + i) for i in range(n)]
    if kind == "arrow":
        frame = bytearray(encode_frame(raw_batch(values, [b"k"] * n), timestamps=timestamps))
    else:
        frame = bytearray(encode_batch(
            [KafkaRecord(i, t, b"k", v) for i, (t, v) in enumerate(zip(timestamps, values))],
            producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH, base_sequence=base))
    stamp(frame, 0, base, EPOCH)
    return bytes(frame)


def wide_wal_bytes() -> bytes:
    """The golden WAL file: :data:`WIDE_BLOCKS`, closed (index block and trailer)."""
    enc = WalFileEncoder(WalFileHeader(*WIDE_WAL))
    out = bytearray(enc.header())
    for turn, append_time, entries in WIDE_BLOCKS:
        parts, _ = enc.block(turn, append_time, [
            EntryFrames(topic, partition, EPOCH, [wide_frame(*f) for f in frames])
            for topic, partition, frames in entries])
        out += b"".join(parts)
    return bytes(out + enc.close())


def wide_segment_bytes() -> bytes:
    """The golden L0 shared segment of the WAL file: one run per partition (sorted),
    index entries at every frame (``index.interval.bytes`` 1), the WAL file as its
    source and :data:`WIDE_PLACED` placed in own segments."""
    runs: dict[tuple[str, int], list[bytes]] = {}
    for _, _, entries in WIDE_BLOCKS:
        for topic, partition, frames in entries:
            runs.setdefault((topic, partition), []).extend(wide_frame(*f) for f in frames)
    out = io.BytesIO()
    writer = SharedSegmentWriter(out, level=0, index_interval_bytes=1)
    for (topic, partition), frames in sorted(runs.items()):
        writer.add_run(topic, partition, frames)
    writer.add_source(SOURCE_WAL, wal_file_name(WIDE_WAL[2]))
    writer.add_placed(*WIDE_PLACED)
    writer.finish()
    return out.getvalue()


def make_wide() -> None:
    """Write ``wide/`` (replaced): the WAL file and the shared segment."""
    if WIDE.exists():
        shutil.rmtree(WIDE)
    WIDE.mkdir()
    (WIDE / wal_file_name(WIDE_WAL[2])).write_bytes(wide_wal_bytes())
    (WIDE / shared_segment_name(0, *WIDE_WAL)).write_bytes(wide_segment_bytes())


def make_planned_range() -> None:
    """Write ``planned-range.pickle``: :data:`PLANNED` as Spark pickles a planned range."""
    from sparklog.spark.source.planning import PlannedRange

    PICKLE.write_bytes(pickle.dumps(PlannedRange(*PLANNED), protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    if sys.argv[1:] == ["--range"]:
        make_planned_range()
    elif sys.argv[1:] == ["--mixed"]:
        make_mixed()
    elif sys.argv[1:] == ["--wide"]:
        make_wide()
    else:
        make()
    for p in sorted(DATA.rglob("*")) + sorted(WIDE.rglob("*")) + [PICKLE]:
        if p.is_file():
            print(f"{p.stat().st_size:6d}  {p.relative_to(HERE)}")
