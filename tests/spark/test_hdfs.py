"""format("sparklog") on a storage root in real HDFS (tests/support/hdfscluster.py): batch scans on
the JVM reader (Hadoop's FileSystem) and on the Python reader, a stream whose checkpoint
and output are in HDFS, and data locality: the planned ranges report the hosts of their
segment blocks, checked against the NameNode's block locations."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
chispa = pytest.importorskip("chispa", reason="chispa is not installed")

from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.format.header import LENGTH, LOG_OVERHEAD, RECORD_COUNT  # noqa: E402
from sparklog.log.partition import PartitionLog  # noqa: E402
from sparklog.log.reader import LogReader  # noqa: E402
from sparklog.metadata import TopicStore  # noqa: E402
from sparklog.spark.jvm import COUNT_PUSHDOWN_OPTION, JVM_READER_OPTION  # noqa: E402
from sparklog.storage import open_fileio  # noqa: E402
from tests.support.hdfscluster import HdfsCluster, hadoop_unavailable  # noqa: E402
from tests.support.logdata import append_more, expected_rows, make_topic  # noqa: E402
from tests.support.sparkread import (  # noqa: E402
    JVM,
    jvm_and_python,
    load,
    output,
    run_available_now,
    scan_of,
    stream,
)

pytestmark = pytest.mark.spark


def assert_rows(df, want):
    got = sorted(tuple(r) for r in df.collect())
    assert got == sorted(want)


def test_jvm_and_python_readers_scan_an_hdfs_root(jspark, hdfs_env):
    root = f"{hdfs_env.hdfs_uri}/spark-read"
    make_topic(root, "events", partitions=2, count=45, per_frame=10)
    jvm, python = jvm_and_python(jspark, root, subscribe="events",
                                 startingOffsets="earliest", minPartitions="3")
    want = expected_rows("events", {0: range(45), 1: range(45)})
    assert_rows(jvm, want)
    assert_rows(python, want)
    # a mid-log range, split on both readers
    opts = {"subscribe": "events", "startingOffsets": '{"events": {"0": 7, "1": 30}}',
            "endingOffsets": '{"events": {"0": 33, "1": 44}}'}
    jvm, python = jvm_and_python(jspark, root, **opts)
    want = expected_rows("events", {0: range(7, 33), 1: range(30, 44)})
    assert_rows(jvm, want)
    assert_rows(python, want)


def test_jvm_reads_the_python_planners_ranges_on_hdfs(jspark, hdfs_env):
    """The Python planner lists the segments and reads the active tail through HDFS; the
    JVM reader reads exactly its ranges."""
    from tests.spark.test_jvm_planning import assert_reads_python_plan

    root = f"{hdfs_env.hdfs_uri}/spark-plan"
    make_topic(root, "pl", partitions=2, count=60, per_frame=4,
               config={"segment.bytes": "2000"})
    for options in ({"subscribe": "pl"}, {"subscribe": "pl", "minPartitions": "5"},
                    {"subscribe": "pl", "maxRecordsPerPartition": "11",
                     "startingOffsets": '{"pl": {"0": 3, "1": -2}}'}):
        assert len(assert_reads_python_plan(jspark, root, options)) >= 2
    df = load(jspark, root, subscribe="pl", minPartitions="3")
    assert_rows(df, expected_rows("pl", {0: range(60), 1: range(60)}))


def test_count_pushed_down_on_hdfs(jspark, hdfs_env):
    """COUNT(*) on HDFS: answered on the driver from the summaries read through HDFS and
    the walk of the active segments' frame headers (sealed and active segments); a range
    starting inside a sealed segment is counted by the tasks. Each equals the rows."""
    from tests.spark.test_count_pushdown import check

    root = f"{hdfs_env.hdfs_uri}/spark-count"
    make_topic(root, "ct", partitions=2, count=30, per_frame=4,
               config={"segment.bytes": "2000"})
    assert check(load(jspark, root, subscribe="ct"), "driver") == 60
    cut = load(jspark, root, subscribe="ct", startingOffsets='{"ct": {"0": 3, "1": -2}}')
    assert check(cut, "tasks") == 57


def test_stream_with_checkpoint_and_output_on_hdfs(sl_spark, hdfs_env):
    base = f"{hdfs_env.hdfs_uri}/spark-stream"
    root, out, ckpt = f"{base}/log", f"{base}/out", f"{base}/ckpt"
    store = make_topic(root, "s", partitions=2, count=20)
    df = stream(sl_spark, root, subscribe="s", startingOffsets="earliest")
    q = run_available_now(df, out, ckpt)
    assert q.exception() is None and q.lastProgress["numInputRows"] == 40
    append_more(store, "s", 1, range(20, 32))
    q = run_available_now(stream(sl_spark, root, subscribe="s"), out, ckpt)  # restart
    assert q.exception() is None and q.lastProgress["numInputRows"] == 12
    got = Counter((r.partition, r.offset) for r in output(sl_spark, out).collect())
    assert set(got.values()) == {1}, "a record was written twice"
    assert sorted(got) == [(0, o) for o in range(20)] + [(1, o) for o in range(32)]
    # the checkpoint is in HDFS (Spark's offset and commit logs), none of it local
    listing = hdfs_env.run_tool("dfs", "-ls", "-R", "/spark-stream/ckpt").stdout
    assert "/spark-stream/ckpt/offsets/1" in listing and "/spark-stream/ckpt/commits/1" \
        in listing, listing


def _far_frames():
    """Frames of about 200 KB (50 records of 4000 bytes): a count() skips each body, far
    beyond what an HDFS block reader skips without a new request. The fourth frame is a
    compacted one (explicit offsets 150, 152, ..., 248: a gap after each record)."""
    frames = []
    for i, deltas in enumerate([None, None, None, list(range(0, 100, 2)), None, None, None]):
        values = [bytes([(i * 50 + r) % 251]) * 4000 for r in range(50)]
        kw = {"offset_deltas": deltas} if deltas else {}
        frames.append(encode_frame(raw_batch(values), compression="none", **kw))
    return frames


def test_count_over_large_frames_on_hdfs(jspark, hdfs_env):
    """count() on the JVM reader (its push-down off, so that the tasks count) reads the
    header after each skipped body at its position (HDFS positioned reads): the same
    counts as the Python reader and the pushed-down count over sealed and active
    segments, a compacted frame and mid-log ranges, and a header damaged far into a
    sealed segment is still reported with its file and position."""
    root = f"{hdfs_env.hdfs_uri}/spark-far"
    store = TopicStore(root, open_fileio(root))
    config = {"segment.bytes": "700000"}
    store.create_topic("far", 1, configs=config)
    plog = PartitionLog.open(store.fileio, store.partition_dir("far", 0), config)
    try:
        for frame in _far_frames():
            plog.append(frame)
        plog.flush()
    finally:
        plog.close()
    logs = sorted(f.path for f in store.fileio.list(store.partition_dir("far", 0))
                  if f.path.endswith(".log"))
    assert len(logs) >= 2, logs  # a sealed segment and the active one
    for start, end in ((0, 399), (60, 300), (151, 249)):
        # count() from the frames (push-down off): the header reads are the subject here
        opts = {"subscribe": "far", "startingOffsets": f'{{"far": {{"0": {start}}}}}',
                "endingOffsets": f'{{"far": {{"0": {end}}}}}'}
        jvm, python = jvm_and_python(jspark, root, **opts, **{COUNT_PUSHDOWN_OPTION: "false"})
        want = len([o for o in [*range(150), *range(150, 249, 2), *range(249, 399)]
                    if start <= o < end])
        assert jvm.count() == python.count() == want, (start, end)
        assert load(jspark, root, **opts).count() == want  # pushed down
    # damage the record count of the third frame of the sealed first segment
    victim = logs[0]
    data = bytearray(store.fileio.read_all(victim))
    third = 0
    for _ in range(2):
        third += LENGTH.read(data, third) + LOG_OVERHEAD
    assert third > 256 << 10 and third < len(data)
    RECORD_COUNT.write(data, third, 7)
    store.fileio.delete(victim)
    store.fileio.write_atomic(victim, bytes(data))
    with pytest.raises(Exception) as info:
        load(jspark, root, subscribe="far", **{COUNT_PUSHDOWN_OPTION: "false"}).count()
    text = str(info.value)
    assert f"corrupt frame in {victim} at position {third}" in text, text
    assert "record count 7, last offset delta 49 (implicit offsets)" in text, text


# --- data locality ----------------------------------------------------------------------

#: The DataNodes of the locality cluster report these host names (each a loopback
#: address, so that Spark could run an executor "there"); their sockets are on 127.0.0.1.
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
BLOCK = 16 << 10


class NamedDataNodes(HdfsCluster):
    """An HdfsCluster whose DataNode ``i`` registers under the host name ``HOSTS[i]``
    (``dfs.datanode.hostname``): block locations then tell the DataNodes apart by host,
    as on a real cluster, while clients still connect to 127.0.0.1:<port>."""

    def _datanode(self, i):
        dn = super()._datanode(i)
        site = os.path.join(dn.conf_dir, "hdfs-site.xml")
        with open(site) as f:
            text = f.read()
        text, n = re.subn(r"(<name>dfs\.datanode\.hostname</name><value>)[^<]*(</value>)",
                          rf"\g<1>{HOSTS[i]}\g<2>", text)
        assert n == 1, "hdfs-site.xml of a DataNode has no dfs.datanode.hostname"
        with open(site, "w") as f:
            f.write(text)
        return dn


@pytest.fixture(scope="module")
def located(tmp_path_factory):
    """A 3-DataNode cluster (replication 1, 16 KiB blocks) holding a topic whose segments
    were put there by Hadoop's own shell: each segment's blocks spread over the
    DataNodes. Yields (cluster, root URL, the local copy of the root)."""
    reason = hadoop_unavailable()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("located")
    local = base / "log"
    local.mkdir()
    make_topic(local.as_uri(), "loc", partitions=2, count=2500, per_frame=50,
               config={"segment.bytes": str(48 << 10)})
    cluster = NamedDataNodes(str(base / "hdfs"), datanodes=3, replication=1)
    cluster.start()
    try:
        put = cluster.run_tool("dfs", "-D", "dfs.replication=1", "-D", f"dfs.blocksize={BLOCK}",
                               "-put", str(local), "/log")
        assert put.returncode == 0, put.stderr[-3000:]
        yield cluster, f"{cluster.hdfs_uri}/log", str(local)
    finally:
        cluster.stop()


def _host_of(cluster) -> dict:
    """DataNode transfer address -> the host name it registered."""
    return {dn.xfer_address: HOSTS[i] for i, dn in enumerate(cluster.datanodes)}


def _span_hosts(cluster, path: str, lo: int, hi: int) -> Counter:
    """Bytes of ``[lo, hi)`` of ``path`` per host, from the NameNode's block locations."""
    host_of = _host_of(cluster)
    out = Counter()
    for off, length, names in cluster.block_locations(path):
        overlap = min(hi, off + length) - max(lo, off)
        if overlap > 0:
            for name in names:
                out[host_of[name]] += overlap
    return out


def _planned(df) -> list:
    """(topic, partition, start, end, preferred hosts) of each planned input partition of
    the scan, and the same hosts as Spark's RDD of the scan reports them."""
    from py4j.java_gateway import get_field

    leaf = df._jdf.queryExecution().executedPlan().collectLeaves().head()
    rdd = leaf.inputRDD()
    rdd_hosts = [[h for h in rdd.preferredLocations(p).mkString("\u0000").split("\u0000")
                  if h] for p in rdd.partitions()]
    out = []
    it = leaf.inputPartitions().iterator()
    while it.hasNext():
        r = it.next()
        out.append((get_field(r, "topic"), get_field(r, "partition"), get_field(r, "start"),
                    get_field(r, "end"), list(r.preferredLocations())))
    assert [hosts for *_, hosts in out] == rdd_hosts
    return out


def _range_bytes(cluster, local: str, topic: str, partition: int, start: int,
                 end: int) -> Counter:
    """Bytes of the offsets ``[start, end)`` per host: their exact file positions from
    the log's own reader (on the local copy), their blocks from the NameNode."""
    store = TopicStore(local)
    reader = LogReader(store.fileio, store.partition_dir(topic, partition))
    weights = Counter()
    reader.log_end_offset()  # reads the active segment's tail
    for seg in reader.segments():
        if seg.next_offset <= start or seg.base_offset >= end:
            continue
        lo = reader.locate(start)[1] if seg.base_offset <= start else 0
        hi = reader.locate(end)[1] if end < seg.next_offset else seg.size
        name = os.path.basename(seg.path)
        weights.update(_span_hosts(cluster, f"/log/topics/{topic}/{partition}/{name}", lo, hi))
    return weights


def test_planned_ranges_prefer_the_hosts_of_their_blocks(jspark, located):
    cluster, root, local = located
    df = load(jspark, root, subscribe="loc", startingOffsets="earliest", minPartitions="6")
    assert JVM in scan_of(df)
    assert df.count() == 5000  # the JVM reader reads them (on any host)
    planned = _planned(df)
    assert len(planned) >= 6
    seen = set()
    for topic, partition, start, end, hosts in planned:
        weights = _range_bytes(cluster, local, topic, partition, start, end)
        what = f"{topic}-{partition} [{start}, {end}): reported {hosts}, NameNode {weights}"
        assert hosts, what
        assert set(hosts) <= set(weights), what  # each reported host stores some of it
        # the host storing most of the range's bytes comes first (the planner estimates
        # byte positions from offsets, so a near tie may go either way)
        assert weights[hosts[0]] >= max(weights.values()) - BLOCK // 4, what
        seen.update(hosts)
    assert seen == set(HOSTS)  # the blocks are spread, and so are the preferences


def test_local_roots_report_no_hosts(jspark, storage_root):
    make_topic(storage_root, "nl", partitions=1, count=10)
    df = load(jspark, storage_root, subscribe="nl", startingOffsets="earliest")
    assert df.count() == 10
    assert [hosts for *_, hosts in _planned(df)] == [[]]


def test_python_reader_scans_report_no_hosts(jspark, located):
    """Spark 4.1's Python data source has no way to report locations (its
    PythonInputPartition keeps InputPartition's empty default): documented, and pinned
    here so that a Spark upgrade that adds one is noticed."""
    _, root, _ = located
    df = load(jspark, root, subscribe="loc", startingOffsets="earliest",
              **{JVM_READER_OPTION: "false"})
    assert JVM not in scan_of(df)
    leaf = df._jdf.queryExecution().executedPlan().collectLeaves().head()
    it = leaf.inputPartitions().iterator()
    while it.hasNext():
        assert list(it.next().preferredLocations()) == []

