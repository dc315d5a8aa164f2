"""A partition's directory, its topic's directory or its active segment deleted outside
the broker (issue #33, item 4).

Real broker processes on real files deleted for real, while the broker runs and while it
is stopped: the partition goes offline (KAFKA_STORAGE_ERROR naming it and what is
missing) and stays offline across restarts, no acknowledged offset is ever handed out
again, the other partitions keep serving, and DeleteRecords (the operator accepting the
loss) restarts the log at its old end offset, never below.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.types import TopicPartition
from sparklog.errors import NotLeaderError, OffsetOutOfRangeError, StorageError, error_for_code
from sparklog.log.layout import segment_file_name
from sparklog.protocol import ApiKey, Connection
from tests.support.brokerproc import BrokerProcess
from tests.support.waiting import wait_until
from tests.support.wire import create, fetch, frame_of, produce

FRAMES = 3
PER_FRAME = 10
TOTAL = FRAMES * PER_FRAME
#: one frame per segment: segments 0, 10 and 20 (the active one)
SMALL_SEGMENTS = {"segment.bytes": "2000"}


def numbered(first: int) -> bytes:
    return frame_of([f"v{o}" for o in range(first, first + PER_FRAME)])


def partition_dir(root: Path, topic: str, partition: int = 0) -> Path:
    return root / "topics" / topic / str(partition)


def wait_sealed(root: Path, topic: str) -> None:
    last_sealed = (FRAMES - 2) * PER_FRAME
    index = partition_dir(root, topic) / segment_file_name(last_sealed, ".index")
    wait_until(index.exists, what=f"segment {last_sealed} of {topic} sealed")


def filled_topic(conn, topic: str, root: Path | None = None) -> None:
    """``topic`` created (one partition, SMALL_SEGMENTS) and TOTAL records acknowledged
    with acks=all at offsets [0, TOTAL); with ``root`` (the broker's storage), then wait
    until the rolled segments are sealed (the last one's end is recorded then)."""
    assert create(conn, topic, configs=SMALL_SEGMENTS)["error_code"] == 0
    for i in range(FRAMES):
        item = produce(conn, topic, 0, numbered(i * PER_FRAME), acks=-1)
        assert item["error_code"] == 0 and item["base_offset"] == i * PER_FRAME, item
    if root is not None:
        wait_sealed(root, topic)


def assert_offline(conn, topic: str, *expected: str) -> None:
    """Produce and fetch of the partition answer KAFKA_STORAGE_ERROR naming it, saying
    it is offline, with the ``expected`` strings; nothing is acknowledged."""
    for _ in range(2):  # the second attempt too (it once reopened the log at 0)
        item = produce(conn, topic, 0, numbered(TOTAL), acks=-1)
        assert error_for_code(item["error_code"]) is StorageError, item
        message = item["error_message"]
        assert f"{topic}-0" in message and "offline" in message, message
        assert "delete-records" in message, message
        for text in expected:
            assert text in message, (text, message)
    for offset in (0, TOTAL):
        item = fetch(conn, topic, 0, offset)
        assert error_for_code(item["error_code"]) is StorageError, item
        assert f"{topic}-0" in item["error_message"]


def accept_loss(address: str, topic: str) -> None:
    """The operator's action: DeleteRecords, refused below the old end, restarts the log
    at it; the next record gets offset TOTAL, never one handed out before."""
    tp = TopicPartition(topic, 0)
    with Admin(bootstrap_servers=address) as admin:
        with pytest.raises(OffsetOutOfRangeError, match=f"restarts at {TOTAL}, never below"):
            admin.delete_records({tp: PER_FRAME})
        assert admin.delete_records({tp: -1}) == {tp: TOTAL}
    with Connection(address) as conn:
        item = produce(conn, topic, 0, frame_of(["after"]), acks=-1)
        assert item["error_code"] == 0 and item["base_offset"] == TOTAL, item
        assert error_for_code(fetch(conn, topic, 0, 0)["error_code"]) is OffsetOutOfRangeError
        item = fetch(conn, topic, 0, TOTAL)
        assert item["error_code"] == 0 and item["records"], item


def neighbour_serves(conn, neighbour: str) -> None:
    item = produce(conn, neighbour, 0, frame_of(["n"]), acks=-1)
    assert item["error_code"] == 0, item


@pytest.fixture
def broker(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    proc = BrokerProcess(root.as_uri(), log_path=tmp_path / "broker.log")
    proc.root = root
    with proc:
        yield proc


@pytest.mark.parametrize("what", ["partition", "topic"])
def test_directory_deleted_under_a_running_broker(broker, what):
    topic, neighbour = f"gone-{what}", f"stays-{what}"
    with Connection(broker.address) as conn:
        filled_topic(conn, topic, broker.root)
        assert create(conn, neighbour)["error_code"] == 0
        pdir = partition_dir(broker.root, topic)
        shutil.rmtree(pdir if what == "partition" else pdir.parent)
        item = produce(conn, topic, 0, numbered(TOTAL), acks=-1)
        assert error_for_code(item["error_code"]) is StorageError, item
        assert_offline(conn, topic)
        neighbour_serves(conn, neighbour)
    broker.restart()
    with Connection(broker.address) as conn:
        if what == "topic":  # its config went with the directory: created again
            assert create(conn, topic, configs=SMALL_SEGMENTS)["error_code"] == 0
        missing = "the partition directory does not exist"
        assert_offline(conn, topic, f"reached offset {TOTAL}", missing)
        neighbour_serves(conn, neighbour)
    assert missing in broker.log_text()
    accept_loss(broker.address, topic)
    broker.restart()  # and it stays so
    with Connection(broker.address) as conn:
        item = produce(conn, topic, 0, frame_of(["later"]), acks=-1)
        assert item["error_code"] == 0 and item["base_offset"] == TOTAL + 1, item


@pytest.mark.parametrize("when", ["running", "stopped"])
def test_active_segment_deleted(broker, when):
    topic, neighbour = f"tail-{when}", f"next-{when}"
    with Connection(broker.address) as conn:
        filled_topic(conn, topic, broker.root)
        assert create(conn, neighbour)["error_code"] == 0
        active = partition_dir(broker.root, topic) / segment_file_name(TOTAL - PER_FRAME)
        if when == "running":
            active.unlink()
            item = produce(conn, topic, 0, numbered(TOTAL), acks=-1)
            assert error_for_code(item["error_code"]) is StorageError, item
    broker.stop()
    if when == "stopped":
        active.unlink()
    broker.start()
    lost = f"[{TOTAL - PER_FRAME}, {TOTAL})"
    with Connection(broker.address) as conn:
        assert_offline(conn, topic, f"reached offset {TOTAL}", lost)
        neighbour_serves(conn, neighbour)
    accept_loss(broker.address, topic)


def test_restart_after_a_crash_keeps_the_recorded_end(broker):
    """A crash (no clean close) after a roll: the sealed segment's end was recorded;
    the directory deleted while the broker is down keeps the partition offline."""
    topic = "crashed"
    with Connection(broker.address) as conn:
        filled_topic(conn, topic, broker.root)
    broker.kill()
    shutil.rmtree(partition_dir(broker.root, topic))
    broker.start()
    recorded = (FRAMES - 1) * PER_FRAME  # the end of the last sealed segment
    with Connection(broker.address) as conn:
        item = produce(conn, topic, 0, numbered(TOTAL), acks=-1)
        assert error_for_code(item["error_code"]) is StorageError, item
        assert f"reached offset {recorded}" in item["error_message"], item


def test_deleted_topic_starts_again_at_zero(broker):
    """A topic deleted through the broker forgets its recorded ends (as in Kafka, a
    topic created again under its name starts at offset 0)."""
    topic = "recreated"
    with Connection(broker.address) as conn:
        filled_topic(conn, topic)
        res = conn.request(ApiKey.DELETE_TOPICS, {"topics": [topic]})
        assert res["topics"][0]["error_code"] == 0, res
        assert create(conn, topic)["error_code"] == 0
        item = produce(conn, topic, 0, frame_of(["new"]), acks=-1)
        assert item["error_code"] == 0 and item["base_offset"] == 0, item


@pytest.mark.zookeeper
def test_new_leader_keeps_a_lost_tail_offline(zookeeper, storage_root, tmp_path):
    """Cluster mode: the leader's active segment is deleted, the leader dies; the broker
    that takes the partition over does not restart it at the lower offset storage ends
    at, and DeleteRecords through it restarts it at the old end."""
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")
    from tests.support.clusterproc import BrokerCluster

    topic = "lost-in-cluster"
    root = Path(storage_root.removeprefix("file://"))
    with BrokerCluster(storage_root, zookeeper.connect, 2, log_dir=tmp_path) as cluster:
        with Admin(bootstrap_servers=cluster.bootstrap) as admin:
            admin.create_topic(topic, 1, configs=SMALL_SEGMENTS)
        leader = cluster.wait(lambda: max(cluster.leader_of(topic, 0), 0), what="a leader")
        old = cluster.brokers[leader]
        with Connection(old.address) as conn:
            wait_until(lambda: produce(conn, topic, 0, numbered(0), acks=-1)["error_code"] == 0,
                       what=f"broker {leader} leading {topic}-0")
            for i in range(1, FRAMES):
                item = produce(conn, topic, 0, numbered(i * PER_FRAME), acks=-1)
                assert item["error_code"] == 0 and item["base_offset"] == i * PER_FRAME, item
            wait_sealed(root, topic)
            (partition_dir(root, topic) / segment_file_name(TOTAL - PER_FRAME)).unlink()
            item = produce(conn, topic, 0, numbered(TOTAL), acks=-1)
            assert item["error_code"] != 0, item
        old.kill()
        other = next(i for i in cluster.brokers if i != leader)
        cluster.wait(lambda: cluster.leader_of(topic, 0) == other, what=f"broker {other} leads")
        new = cluster.brokers[other]
        with Connection(new.address) as conn:
            item = wait_until(lambda: produce(conn, topic, 0, numbered(TOTAL), acks=-1),
                              accept=lambda r: r["error_code"] != NotLeaderError.code,
                              what=f"broker {other} answering for {topic}-0")
            assert error_for_code(item["error_code"]) is StorageError, item
            assert f"reached offset {TOTAL}" in item["error_message"], item
            assert f"[{TOTAL - PER_FRAME}, {TOTAL})" in item["error_message"], item
        tp = TopicPartition(topic, 0)
        with Admin(bootstrap_servers=new.address) as admin:
            assert admin.delete_records({tp: -1}) == {tp: TOTAL}
        with Connection(new.address) as conn:
            item = produce(conn, topic, 0, frame_of(["after"]), acks=-1)
            assert item["error_code"] == 0 and item["base_offset"] == TOTAL, item


def test_delete_records_moves_the_log_start(broker):
    """On a healthy partition DeleteRecords is Kafka's: the log start offset moves up to
    the offset given (-1: the high watermark), never past the high watermark."""
    from tests.support.shell import ok, sparklog

    topic = "trimmed"
    tp = TopicPartition(topic, 0)
    with Connection(broker.address) as conn:
        filled_topic(conn, topic)
        with Admin(bootstrap_servers=broker.address) as admin:
            assert admin.delete_records({tp: 15}) == {tp: 15}
            assert admin.delete_records({tp: 5}) == {tp: 15}  # never moves back
            with pytest.raises(OffsetOutOfRangeError, match="high watermark is 30"):
                admin.delete_records({tp: TOTAL + 1})
        assert error_for_code(fetch(conn, topic, 0, 14)["error_code"]) is OffsetOutOfRangeError
        item = fetch(conn, topic, 0, 15)
        assert item["error_code"] == 0 and item["log_start_offset"] == 15, item
        out = ok(sparklog("topics", "delete-records", "--topic", topic, "--partition", "0",
                          bootstrap=broker.address))
        assert out == f"Partition {topic}-0 now starts at offset {TOTAL}.\n"
        item = produce(conn, topic, 0, frame_of(["next"]), acks=-1)
        assert item["error_code"] == 0 and item["base_offset"] == TOTAL, item
