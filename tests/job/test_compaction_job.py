"""``sparklog compact --spark``: log compaction as a Spark job (sparklog.job.compaction)
on the session's local[2], against the broker cleaner's result on the same records, and
refused on a partition whose lease a live writer holds."""

from __future__ import annotations

from sparklog.cli.main import main
from sparklog.log import PartitionLog
from sparklog.log.cleaner import clean
from sparklog.log.layout import PartitionListing
from sparklog.metadata import TopicStore
from sparklog.storage import open_fileio
from tests.log.test_log_compaction import FRAME, keyed_frame, records


def test_spark_job_cleans_as_the_broker_cleaner_does(spark, tmp_path, capsys):
    root = tmp_path.as_uri()
    fio = open_fileio(root)
    store = TopicStore(root, fio)
    cfg = {"cleanup.policy": "compact", "segment.bytes": 3 * FRAME,
           "index.interval.bytes": 1, "min.cleanable.dirty.ratio": 0.01,
           "file.delete.delay.ms": 0}
    store.create_topic("ct", 3, configs=cfg)
    pairs = [(f"k{i % 4}", f"v{i:03d}") for i in range(14)] + [("k1", None), ("z", "end")]
    for p in range(3):
        with PartitionLog.open(fio, store.partition_dir("ct", p), cfg) as plog:
            for pair in pairs:
                plog.append(keyed_frame([pair], 1_700_000_000_000))
    with PartitionLog.open(fio, store.partition_dir("ct", 0), cfg) as plog:
        assert clean(plog) is not None  # the broker cleaner's result: the reference
    held = PartitionLog.open(fio, store.partition_dir("ct", 2), cfg)  # a live "leader"
    try:
        assert main(["compact", "ct", "--storage", root, "--partitions", "1,2",
                     "--spark"]) == 1
    finally:
        held.close()
    captured = capsys.readouterr()
    assert "[compact] partition ct-1: key map over 5 dirty segment(s)" in captured.err
    assert "[compact] partition ct-1: committed" in captured.err
    assert "ct-1: cleaned offsets below 15" in captured.out
    assert "ct-2: led by a live broker" in captured.out
    expected = records(fio, store.partition_dir("ct", 0))
    assert [r[1:] for r in expected] == [("k2", "v010"), ("k3", "v011"), ("k0", "v012"),
                                         ("k1", None), ("z", "end")]
    assert records(fio, store.partition_dir("ct", 1)) == expected
    assert any(f.generation for f in
               PartitionListing.scan(fio, store.partition_dir("ct", 1)).logs())
    assert len(records(fio, store.partition_dir("ct", 2))) == len(pairs)  # untouched
