"""A compacted partition of both frame kinds read by Spark (docs/storage.md section 11):
after the cleaner rebuilt Kafka batches that lost records as Kafka batches and left
others after gaps in cleaned segments, the JVM reader and the Python reader give the
records LogReader gives, at their offsets, for whole and cut ranges."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from sparklog.log import LogReader, PartitionLog
from sparklog.log.cleaner import clean
from sparklog.metadata import TopicStore
from sparklog.spark.jvm import JVM_READER_OPTION
from sparklog.storage import open_fileio
from tests.log.test_log_kafka_batches import COMPACTED, compaction_round
from tests.support.sparkread import JVM, load, scan_of

pytestmark = pytest.mark.spark

ROUTES = {"jvm": {}, "python": {JVM_READER_OPTION: "false"}}
CODECS = ["none", "gzip", "snappy", "snappy-raw", "lz4", "zstd"]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_cleaned_partition_of_both_kinds_reads_as_the_log_reader(request, storage_root,
                                                                   route):
    # the JVM route needs the reader's jar (skips without it); the Python one does not
    spark = request.getfixturevalue("jspark" if route == "jvm" else "sl_spark")
    fio = open_fileio(storage_root)
    store = TopicStore(storage_root, fio)
    store.create_topic("cmixed", 1, configs=COMPACTED)
    directory = store.partition_dir("cmixed", 0)
    with PartitionLog.open(fio, directory, COMPACTED) as plog:
        for r in range(24):
            plog.append(compaction_round(r, CODECS[r % len(CODECS)]))
        assert clean(plog, force=True) is not None
    reader = LogReader(fio, directory)
    end = reader.log_end_offset()
    want = [(o, k, v) for b in reader.read_batches(0, end)
            for o, k, v in zip(b.column("__offset").to_pylist(), b.column("key").to_pylist(),
                               b.column("value").to_pylist())]
    assert len(want) < end  # records were removed
    kinds = {f.header.magic for f in reader.iter_frames(0, end)}
    assert kinds == {1, 2}
    for start, stop in ((0, end), (1, 40), (25, end - 3)):
        options = {**ROUTES[route], "subscribe": "cmixed",
                   "startingOffsets": f'{{"cmixed":{{"0":{start}}}}}',
                   "endingOffsets": f'{{"cmixed":{{"0":{stop}}}}}'}
        df = load(spark, storage_root, **options)
        assert (JVM in scan_of(df)) == (route == "jvm"), scan_of(df)
        got = sorted((r.offset, bytes(r.key), bytes(r.value)) for r in df.collect())
        assert got == [w for w in want if start <= w[0] < stop], (start, stop)
        assert df.count() == len(got)
