"""Broker crashes and restarts: kill -9 with acks=all, SIGTERM, idempotent producers,
segment rolling and recovery, a second broker on the same storage."""

from __future__ import annotations

import threading

import pytest

from sparklog.errors import (
    BrokerNotAvailableError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    error_for_code,
)
from sparklog.format.frame import encode_frame, iter_frames, raw_batch
from sparklog.protocol import ApiKey, Connection
from tests.support.brokerproc import BrokerProcess
from tests.support.waiting import wait_until
from tests.support.wire import create, fetch, produce, read_values


def frame(values, **kw):
    return encode_frame(raw_batch([v.encode() for v in values]), **kw)


@pytest.fixture
def proc(storage_root, tmp_path):
    p = BrokerProcess(storage_root, log_path=tmp_path / "broker.log")
    yield p
    if p.running:
        p.kill()


def test_kill_9_with_acks_all_loses_no_acknowledged_record(proc):
    proc.start()
    with Connection(proc.address) as c:
        create(c, "durable", 2)
    acked = {0: [], 1: []}
    stop = threading.Event()
    errors = []

    def producer():
        try:
            with Connection(proc.address, timeout=10) as c:
                i = 0
                while not stop.is_set():
                    batch = [f"v{i}-{j}" for j in range(5)]
                    for k in range(4):  # 4 requests in flight, then their acks
                        c.send(ApiKey.PRODUCE, {"acks": -1, "topics": [{"name": "durable",
                               "partitions": [{"partition": (i + k) % 2,
                                               "records": frame([f"{v}-{k}" for v in batch])}]}]})
                    for k in range(4):
                        item = c.receive()["topics"][0]["partitions"][0]
                        assert item["error_code"] == 0
                        acked[(i + k) % 2].append([f"{v}-{k}" for v in batch])
                    i += 4
        except (ConnectionError, OSError, BrokerNotAvailableError):
            pass  # the broker died under us
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=producer)
    t.start()
    while sum(len(v) for v in acked.values()) < 200:
        assert t.is_alive(), errors
    proc.kill()
    stop.set()
    t.join()
    assert not errors
    proc.start()
    with Connection(proc.address) as c:
        for p in (0, 1):
            got = [v.decode() for v in read_values(c, "durable", p)]
            want = [v for batch in acked[p] for v in batch]
            assert got[:len(want)] == want  # every acknowledged record, in order
    assert "recovered" in proc.log_text()


def test_sigterm_clean_shutdown_and_restart(proc, tmp_path):
    proc.start()
    with Connection(proc.address) as c:
        create(c, "clean", 1)
        for i in range(20):
            produce(c, "clean", 0, frame([f"r{i}"]), acks=1)
    assert proc.stop() == 0
    text = proc.log_text()
    assert "stopped: 1 partition(s) synced and closed" in text
    leases = [p for p in tmp_path.rglob(".*") if "lease" in p.name]
    assert leases == []  # every lease released
    proc.start()
    with Connection(proc.address) as c:
        assert [v.decode() for v in read_values(c, "clean", 0)] == [f"r{i}" for i in range(20)]
        assert produce(c, "clean", 0, frame(["after"]))["base_offset"] == 20


def _idempotent(c, pid, epoch, seq, values, token):
    return produce(c, "idem", 0, frame(values, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=seq), acks=-1, token=token)


@pytest.mark.parametrize("restart", ["kill", "sigterm"])
def test_idempotent_producer_dedup_survives_restart(proc, restart):
    proc.start()
    with Connection(proc.address) as c:
        create(c, "idem")
        init = c.request(ApiKey.INIT_PRODUCER_ID, {})
        pid, epoch, token = init["producer_id"], init["producer_epoch"], init["producer_token"]
        assert _idempotent(c, pid, epoch, 0, ["a", "b"], token)["base_offset"] == 0
        assert _idempotent(c, pid, epoch, 2, ["c"], token)["base_offset"] == 2
        dup = _idempotent(c, pid, epoch, 2, ["c"], token)  # a retry after a lost response
        assert dup["error_code"] == 0 and dup["base_offset"] == 2
        dup = _idempotent(c, pid, epoch, 0, ["a", "b"], token)  # an older in-flight batch
        assert dup["base_offset"] == 0
        gap = _idempotent(c, pid, epoch, 5, ["x"], token)
        assert error_for_code(gap["error_code"]) is OutOfOrderSequenceError
        assert "expected 3" in gap["error_message"]
        assert fetch(c, "idem", 0, 0)["high_watermark"] == 3
    proc.kill() if restart == "kill" else proc.stop()
    proc.start()
    with Connection(proc.address) as c:
        dup = _idempotent(c, pid, epoch, 2, ["c"], token)
        assert dup["error_code"] == 0 and dup["base_offset"] == 2
        assert _idempotent(c, pid, epoch, 3, ["d"], token)["base_offset"] == 3
        # restarting sequences gets a fresh id: the broker bumps no one's epoch (KIP-360)
        fresh = c.request(ApiKey.INIT_PRODUCER_ID, {"producer_id": pid, "producer_epoch": epoch})
        assert fresh["producer_id"] != pid and fresh["producer_epoch"] == 0
        assert _idempotent(c, pid, epoch + 1, 0, ["e"], token)["base_offset"] == 4  # its own bump
        zombie = _idempotent(c, pid, epoch, 4, ["z"], token)
        assert error_for_code(zombie["error_code"]) is InvalidProducerEpochError
        assert [v.decode() for v in read_values(c, "idem", 0)] == ["a", "b", "c", "d", "e"]
        other = c.request(ApiKey.INIT_PRODUCER_ID, {})["producer_id"]
        assert other != pid


def test_segments_roll_and_recover(proc):
    proc.extra_args = ["--override", "log.segment.bytes=3000"]
    proc.start()
    with Connection(proc.address) as c:
        create(c, "rolled")
        for i in range(30):
            produce(c, "rolled", 0, frame([f"value-{i:03d}" * 4]))
        desc = c.request(ApiKey.DESCRIBE_LOG, {"topics": [{"name": "rolled"}]})
        part = desc["topics"][0]["partitions"][0]
        assert part["high_watermark"] == part["log_end_offset"] == 30
        segs = part["segments"]
        assert len(segs) > 3 and not segs[-1]["sealed"]

        def rolled_sealed():  # the broker seals rolled segments in the background
            res = c.request(ApiKey.DESCRIBE_LOG, {"topics": [{"name": "rolled"}]})
            return all(s["sealed"] for s in res["topics"][0]["partitions"][0]["segments"][:-1])

        wait_until(rolled_sealed, what="the rolled segments sealed")
        assert [s["base_offset"] for s in segs] == sorted(s["base_offset"] for s in segs)
        assert segs[0]["path"].startswith(desc["storage_root"])
    proc.kill()
    proc.start()
    with Connection(proc.address) as c:
        values = read_values(c, "rolled", 0)
        assert [v.decode() for v in values] == [f"value-{i:03d}" * 4 for i in range(30)]
        data = fetch(c, "rolled", 0, 17)["records"]
        first = next(iter_frames(data)).header
        assert first.base_offset <= 17 <= first.last_offset


def test_second_broker_on_same_storage_cannot_write(proc, storage_root, tmp_path):
    proc.start()
    with Connection(proc.address) as c:
        create(c, "owned")
        produce(c, "owned", 0, frame(["x"]))
    second = BrokerProcess(storage_root, log_path=tmp_path / "second.log")
    second.start()
    try:
        with Connection(second.address) as c2:
            item = produce(c2, "owned", 0, frame(["y"]))
            assert item["error_code"] != 0 and "lease" in item["error_message"].lower()
        with Connection(proc.address) as c:
            assert produce(c, "owned", 0, frame(["z"]))["base_offset"] == 1
    finally:
        second.stop()
