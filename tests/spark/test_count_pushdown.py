"""COUNT(*) pushed down to a scan the JVM reader reads (io.sparklog.spark.PushedCount):
the Python planner's ranges counted on the driver from the files' metadata (index
summaries, the active segment's frame headers: a LocalTableScan, no task) when that is
exact, by the tasks otherwise, and not pushed where it must not be; the count always
equals what the unpushed row scan returns on the same log."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("chispa", reason="chispa is not installed")

from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.format.marker import ABORT, COMMIT, encode_marker  # noqa: E402
from sparklog.log.index import FLAG_NO_CONTROL, INDEX_HEADER_SIZE  # noqa: E402
from sparklog.log.partition import PartitionLog  # noqa: E402
from sparklog.metadata import TopicStore  # noqa: E402
from sparklog.spark.jvm import COUNT_PUSHDOWN_OPTION, JVM_READER_OPTION  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402
from tests.support.logdata import BASE_TS, cleaned_topic, make_topic  # noqa: E402
from tests.support.sparkread import load, scan_of  # noqa: E402

pytestmark = pytest.mark.spark

ON_DRIVER = "LocalTableScan"
BY_TASKS = "ranges by the tasks"


def how_counted(df, expr: str = "count(*)") -> str:
    """'driver', 'tasks' or 'scan' (not pushed): how ``df.selectExpr(expr)`` counts."""
    plan = scan_of(df.selectExpr(expr))
    if ON_DRIVER in plan and "BatchScan" not in plan:
        return "driver"
    if BY_TASKS in plan:
        return "tasks"
    assert "count pushed down" not in plan, plan
    return "scan"


def row_count(df) -> int:
    """What the unpushed row scan returns: the rows themselves."""
    return len(df.select("offset").collect())


def check(df, how: str, expr: str = "count(*)") -> int:
    """The pushed count of ``df`` equals its rows, counted as ``how`` says."""
    assert how_counted(df, expr) == how
    got = df.selectExpr(expr).collect()[0][0]
    assert got == df.count() == row_count(df)
    return got


def partition_dir(root: str, topic: str, partition: int = 0) -> Path:
    return Path(root.removeprefix("file://")) / "topics" / topic / str(partition)


def test_count_on_the_driver_over_sealed_and_active_segments(jspark, storage_root):
    n = 94  # per partition: segments of 8 records, the active one holds 6 (2 frames)
    make_topic(storage_root, "ev", partitions=3, count=n, per_frame=4,
               config={"segment.bytes": "2500"})
    make_topic(storage_root, "empty", partitions=1, count=0)
    bases = sorted(int(p.name.split(".")[0])
                   for p in partition_dir(storage_root, "ev").glob("*.log"))
    assert len(bases) >= 3  # sealed segments, then the active one
    active = bases[-1]
    assert n - active >= 5
    for options in ({}, {"minPartitions": "7"}, {"maxRecordsPerPartition": "9"}):
        df = load(jspark, storage_root, subscribe="ev", **options)
        assert check(df, "driver") == 3 * n
    # cut points inside the active segments' frames: counted from their headers
    cut = load(jspark, storage_root, subscribe="ev",
               startingOffsets=f'{{"ev": {{"0": {bases[1]}, "1": -2, "2": {active + 1}}}}}',
               endingOffsets=f'{{"ev": {{"0": -1, "1": {active + 2}, "2": {n - 1}}}}}')
    assert check(cut, "driver") == (n - bases[1]) + (active + 2) + (n - 1 - active - 1)
    assert check(load(jspark, storage_root, subscribe="empty"), "driver") == 0
    # COUNT of a column that is never null is COUNT(*); of a nullable one it is not
    df = load(jspark, storage_root, subscribe="ev")
    assert check(df, "driver", "count(offset)") == 3 * n
    assert how_counted(df, "count(value)") == "scan"
    assert how_counted(df, "count(distinct partition)") == "scan"
    assert scan_of(df.groupBy("partition").count()).count("BatchScan") == 1
    # a range starting inside a sealed segment: the tasks count it
    part = load(jspark, storage_root, subscribe="ev",
                startingOffsets=f'{{"ev": {{"0": {bases[1] - 1}, "1": -2, "2": -2}}}}')
    assert check(part, "tasks") == 3 * n - bases[1] + 1


def test_not_pushed_where_it_must_not_be(jspark, storage_root):
    make_topic(storage_root, "ev", partitions=2, count=40, per_frame=4,
               config={"segment.bytes": "2500"})
    df = load(jspark, storage_root, subscribe="ev")
    filtered = df.where("offset >= 5")
    assert how_counted(filtered) == "scan"
    assert filtered.count() == len(filtered.select("offset").collect()) == 2 * 35
    # a filter the source does not take stays above the scan: no push-down either
    by_value = df.where("length(value) > 0")
    assert how_counted(by_value) == "scan" and by_value.count() == 80
    for options in ({JVM_READER_OPTION: "false"}, {COUNT_PUSHDOWN_OPTION: "false"}):
        other = load(jspark, storage_root, subscribe="ev", **options)
        assert how_counted(other) == "scan"
        assert other.count() == 80
    # whatever the Python planner plans is counted from its ranges: timestamps (offset
    # 10 is inside a sealed segment: the tasks count that one), options the source
    # accepts and ignores
    for options, how, n in (({"startingTimestamp": str(BASE_TS + 10_000)}, "tasks", 2 * 30),
                            ({"kafka.isolation.level": "read_committed"}, "driver", 80)):
        other = load(jspark, storage_root, subscribe="ev", **options)
        assert check(other, how) == n


def txn_topic(root: str, topic: str, segment_bytes: str) -> None:
    """A topic mixing plain frames, a committed and an aborted transaction (markers)."""
    store = TopicStore(root, open_fileio(root))
    config = {"segment.bytes": segment_bytes}
    store.create_topic(topic, 1, configs=config)
    plog = PartitionLog.open(store.fileio, store.partition_dir(topic, 0), config)
    try:
        offset = 0
        for round_ in range(3):
            for pid, kind in ((7, COMMIT), (8, ABORT)):
                values = [b"t%d" % (offset + i) for i in range(5)]
                plog.append(encode_frame(raw_batch(values), timestamps=[BASE_TS] * 5,
                                         producer_id=pid, producer_epoch=0,
                                         base_sequence=5 * round_, transactional=True))
                plog.append(encode_marker(kind, producer_id=pid, producer_epoch=0,
                                          timestamp=BASE_TS))
                offset += 6
            plog.append(encode_frame(raw_batch([b"p"] * 3), timestamps=[BASE_TS] * 3))
            offset += 3
        plog.flush()
    finally:
        plog.close()


def test_transactions_count_as_the_row_scan(jspark, storage_root):
    """Markers are no rows, aborted records are (as the row scan returns them today):
    in an active segment the walk of its frame headers counts them; a sealed segment
    holding markers has no usable summary count, so the tasks count."""
    txn_topic(storage_root, "active", str(1 << 20))
    txn_topic(storage_root, "sealed", "2500")
    assert check(load(jspark, storage_root, subscribe="active"), "driver") == 3 * 13
    assert check(load(jspark, storage_root, subscribe="sealed"), "tasks") == 3 * 13
    # kafka.isolation.level is accepted and ignored: the same count
    iso = load(jspark, storage_root, subscribe="active",
               **{"kafka.isolation.level": "read_committed"})
    assert check(iso, "driver") == 3 * 13


def test_compacted_topic_counts_its_summaries(jspark, storage_root):
    """Cleaned segments (offset gaps, explicit offsets) carry the no-control flag and
    their record count; a range cutting one is counted by the tasks."""
    cleaned_topic(storage_root)
    df = load(jspark, storage_root, subscribe="cp")
    n = check(df, "driver")
    assert n < 80
    unpushed = load(jspark, storage_root, subscribe="cp", **{COUNT_PUSHDOWN_OPTION: "false"})
    assert unpushed.count() == n
    cut = load(jspark, storage_root, subscribe="cp", startingOffsets='{"cp": {"0": 7}}')
    assert check(cut, "tasks") == len(df.where("offset >= 7").select("offset").collect())


def clear_flags(index: Path) -> None:
    """Rewrite ``index`` as a writer from before the flags did: flags 0, header CRC
    recomputed."""
    from sparklog.format.frame import crc32c

    data = bytearray(index.read_bytes())
    assert struct.unpack_from(">H", data, 6)[0] == FLAG_NO_CONTROL
    struct.pack_into(">H", data, 6, 0)
    struct.pack_into(">I", data, 64, crc32c(bytes(data[:64])))
    assert len(data) >= INDEX_HEADER_SIZE
    index.write_bytes(bytes(data))


def test_segments_without_the_flag_are_counted_from_headers(jspark, storage_root):
    make_topic(storage_root, "old", partitions=1, count=60, per_frame=4,
               config={"segment.bytes": "2500"})
    indexes = sorted(partition_dir(storage_root, "old").glob("*.index"))
    assert len(indexes) >= 2
    df = load(jspark, storage_root, subscribe="old")
    assert check(df, "driver") == 60
    clear_flags(indexes[0])
    old = load(jspark, storage_root, subscribe="old", minPartitions="3")
    assert check(old, "tasks") == 60
    # only that segment is read (one task), the rest counted on the driver
    assert " 1 ranges by the tasks" in scan_of(old.selectExpr("count(*)"))


def test_log_being_written_counts_to_the_planned_end(jspark, storage_root):
    """A frame cut off at the end of the active segment (being written) is beyond the
    planned end: counted neither by the driver nor by the row scan; records appended
    later are counted by the next action, as the row scan sees them."""
    make_topic(storage_root, "live", partitions=1, count=20, per_frame=4)
    log = next(partition_dir(storage_root, "live").glob("*.log"))
    frame = encode_frame(raw_batch([b"x"] * 4), timestamps=[BASE_TS] * 4, base_offset=20)
    with open(log, "ab") as f:
        f.write(frame[: len(frame) // 2])
    df = load(jspark, storage_root, subscribe="live")
    assert check(df, "driver") == 20
    with open(log, "ab") as f:
        f.write(frame[len(frame) // 2:])
    assert check(df, "driver") == 24


def flip(path: Path, position: int, mask: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def outcome(action):
    try:
        return action()
    except Exception as exc:  # Py4J/Spark errors: compared by the corrupt-frame text
        text = str(exc)
        return "corrupt" if "corrupt frame" in text or "Corrupt" in text else text[:300]


def test_damaged_frames_fail_as_the_row_scan_does(jspark, storage_root):
    """A damaged header of a data frame, or a damaged control frame, in the active
    segment: the pushed count fails where the row scan fails (same reader, same error)
    and never answers a count of its own."""
    txn_topic(storage_root, "bad", str(1 << 20))
    log = next(partition_dir(storage_root, "bad").glob("*.log"))
    good = log.read_bytes()
    # frame starts (length at byte 8, 12 bytes of log overhead before it counts)
    positions = []
    pos = 0
    while pos < len(good):
        length = struct.unpack_from(">i", good, pos + 8)[0]
        positions.append(pos)
        pos += length + 12
    marker, data = positions[1], positions[2]
    # the first marker's body (CRC mismatch); a data frame's record count 5 -> 1 (its
    # last offset delta stays 4: implicit offsets no longer match)
    for where, mask in ((marker + 61 + 8, 0x40), (data + 57 + 3, 0x04)):
        log.write_bytes(good)
        flip(log, where, mask)
        df = load(jspark, storage_root, subscribe="bad")
        pushed = outcome(lambda: df.selectExpr("count(*)").collect()[0][0])
        rows = outcome(lambda: row_count(df))
        assert pushed == rows == "corrupt", (where, pushed, rows)


def test_typed_topic_counts_rows_and_not_null_columns(jspark, storage_root):
    import pyarrow as pa

    import sparklog
    from tests.support.logfiles import NOT_NULL_SCHEMA

    rows = [{"sym": "A", "px": 1.5, "qty": 1, "tags": ["x"], "p": {"a": 1, "b": None}},
            {"sym": "B", "px": None, "qty": 2, "tags": None, "p": None}]
    with sparklog.connect(storage_root) as s:
        s.admin().create_topic("declared", 2, schema=NOT_NULL_SCHEMA)
        with s.producer() as producer:
            for i in range(5):
                producer.send_batch("declared", pa.Table.from_pylist(rows),
                                    partition=i % 2).get(30)
    df = load(jspark, storage_root, subscribe="declared")
    assert check(df, "driver") == 10
    assert check(df, "driver", "count(qty)") == 10      # declared not null
    assert how_counted(df, "count(px)") == "scan"       # nullable: the rows decide
    assert df.selectExpr("count(px)").collect()[0][0] == 5
