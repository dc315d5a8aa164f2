"""Time and size retention: the policy on real partition logs, and the broker's
periodic task deleting segments of a real broker process."""

from __future__ import annotations

import pytest

from sparklog.errors import OffsetOutOfRangeError
from sparklog.log import LogReader, PartitionLog
from sparklog.protocol import ApiKey, Connection
from sparklog.retention import apply_retention, retention_cutoff
from sparklog.storage import open_fileio
from tests.support.brokerproc import BrokerProcess
from tests.support.logfiles import typed_frame
from tests.support.waiting import wait_until
from tests.support.wire import create, fetch, frame_of, produce, read_values

FRAME = len(typed_frame([0]))
DAY = 86_400_000


@pytest.fixture
def fio(tmp_path):
    return open_fileio(tmp_path.as_uri())


def fill(fio, directory, stamps, **config):
    """One one-record frame per timestamp, two frames per segment."""
    plog = PartitionLog.open(fio, directory, {"segment.bytes": 2 * FRAME, **config})
    for i, ts in enumerate(stamps):
        plog.append(typed_frame([i], [ts]))
    plog.sync()
    return plog


def test_time_retention_deletes_old_sealed_segments_oldest_first(fio, tmp_path):
    now = 10 * DAY
    # segments [0,2) [2,4) [4,6) sealed, [6,7) active; the middle one is recent
    stamps = [now - 9 * DAY, now - 8 * DAY, now - DAY // 2, now - 3 * DAY, 1, 2, now]
    with fill(fio, str(tmp_path / "p"), stamps, **{"retention.ms": DAY}) as plog:
        cut = retention_cutoff(plog.segments, plog.config, now)
        # [4,6) is old, but it comes after a kept segment: Kafka stops at the first kept one
        assert (cut.offset, cut.by_time, cut.by_size) == (2, 1, 0)
        assert apply_retention(plog, now) == cut
        assert plog.log_start_offset == 2
        assert [s.base_offset for s in plog.segments] == [2, 4, 6]
        assert apply_retention(plog, now) is None  # nothing more is due
    reader = LogReader(fio, str(tmp_path / "p"))
    assert reader.log_start_offset() == 2
    assert [v for b in reader.read_batches(2, 7) for v in b.column("n").to_pylist()] == \
        [2, 3, 4, 5, 6]
    with pytest.raises(OffsetOutOfRangeError):
        list(reader.read_batches(0, 7))


def test_size_retention_keeps_at_least_retention_bytes(fio, tmp_path):
    stamps = list(range(1, 10))  # segments of 2 frames: [0,2) [2,4) [4,6) [6,8), [8,9) active
    with fill(fio, str(tmp_path / "p"), stamps, **{"retention.bytes": 4 * FRAME}) as plog:
        total = sum(s.size for s in plog.segments)
        assert total == 9 * FRAME
        cut = apply_retention(plog, now_ms=100)  # time retention (7 days) deletes nothing here
        assert (cut.offset, cut.by_time, cut.by_size) == (4, 0, 2)
        left = sum(s.size for s in plog.segments)
        assert left == 5 * FRAME >= 4 * FRAME and left - 2 * FRAME < 4 * FRAME


def test_the_active_segment_and_disabled_rules_are_never_deleted(fio, tmp_path):
    far = 1_000 * DAY
    with fill(fio, str(tmp_path / "a"), [1], **{"retention.ms": 0, "retention.bytes": 0}) as p:
        assert retention_cutoff(p.segments, p.config, far) is None  # only the active one
    with fill(fio, str(tmp_path / "b"), [1, 2, 3],
              **{"retention.ms": -1, "retention.bytes": -1}) as p:
        assert retention_cutoff(p.segments, p.config, far) is None
    with fill(fio, str(tmp_path / "c"), [1, 2, 3], **{"cleanup.policy": "compact",
                                                       "retention.ms": 0}) as p:
        assert retention_cutoff(p.segments, p.config, far) is None


def test_broker_deletes_segments_by_retention_bytes(tmp_path):
    root = tmp_path / "log"
    with BrokerProcess(root.as_uri(), ["--override", "log.retention.check.interval.ms=200"],
                       log_path=tmp_path / "broker.log", log_level="INFO") as proc, \
            Connection(proc.address) as conn:
        create(conn, "bounded", configs={"segment.bytes": "3000",
                                         "retention.bytes": "6000"})
        values = [f"value-{i:03d}" * 20 for i in range(40)]
        for v in values:
            produce(conn, "bounded", 0, frame_of([v]))

        def earliest():
            res = conn.request(ApiKey.LIST_OFFSETS, {"topics": [{"name": "bounded",
                               "partitions": [{"partition": 0, "timestamp": -2}]}]})
            return res["topics"][0]["partitions"][0]["offset"]

        def segment_sizes():
            segs = conn.request(ApiKey.DESCRIBE_LOG, {"topics": [{"name": "bounded"}]})
            return [s["size"] for s in segs["topics"][0]["partitions"][0]["segments"]]

        # retention runs every 200 ms while the records arrive: wait until it has caught
        # up with all of them (deleting one more segment would go below the bound)
        wait_until(lambda: sum(segment_sizes()) - segment_sizes()[0] < 6000,
                   what="retention to bring the log within retention.bytes=6000")
        start = earliest()
        assert 0 < start < 40
        item = fetch(conn, "bounded", 0, 0)
        assert item["error_code"] != 0  # offset 0 is gone: out of range
        assert read_values(conn, "bounded", 0, start) == [v.encode() for v in values[start:]]
        assert sum(segment_sizes()) >= 6000 - 3000  # no more than needed was deleted
    assert "retention deleted" in proc.log_text()
