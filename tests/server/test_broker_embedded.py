"""EmbeddedBroker (in-process, real TCP on 127.0.0.1) and broker configuration."""

from __future__ import annotations

import pytest

from sparklog.errors import InvalidConfigError, LeaseHeldError
from sparklog.format.frame import encode_frame, raw_batch
from sparklog.protocol import ApiKey, Connection
from sparklog.server import BrokerConfig, EmbeddedBroker, parse_properties
from tests.support.waiting import wait_until
from tests.support.wire import create, produce, read_values


def test_embedded_round_trip_and_restart(storage_root):
    with EmbeddedBroker(storage_root) as broker:
        assert broker.address.startswith("127.0.0.1:")
        with Connection(broker.bootstrap_servers) as c:
            create(c, "emb", 1)
            assert produce(c, "emb", 0, encode_frame(raw_batch([b"a", b"b"])), acks=-1)[
                "base_offset"] == 0
    with EmbeddedBroker(storage_root) as broker, Connection(broker.address) as c:
        assert read_values(c, "emb", 0) == [b"a", b"b"]


def test_two_embedded_brokers_on_one_root_do_not_both_write(storage_root):
    with EmbeddedBroker(storage_root) as first, Connection(first.address) as c:
        create(c, "shared")
        produce(c, "shared", 0, encode_frame(raw_batch([b"x"])))
        # a second broker in another thread of the same process: same pid, so the
        # local lease treats it as alive and refuses the second writer
        with EmbeddedBroker(storage_root) as second, Connection(second.address) as c2:
            item = produce(c2, "shared", 0, encode_frame(raw_batch([b"y"])))
            assert item["error_code"] == LeaseHeldError.code and "lease held" in \
                item["error_message"], item
        assert produce(c, "shared", 0, encode_frame(raw_batch([b"z"])))["base_offset"] == 1


def test_auto_create_on_metadata(storage_root):
    with EmbeddedBroker(storage_root, {"num.partitions": "3"}) as broker, \
            Connection(broker.address) as c:
        res = c.request(ApiKey.METADATA, {"topics": ["auto"], "allow_auto_topic_creation": True})
        assert len(res["topics"][0]["partitions"]) == 3
        res = c.request(ApiKey.METADATA, {"topics": ["absent"]})
        assert res["topics"][0]["error_code"] == 3
    with EmbeddedBroker(storage_root, {"auto.create.topics.enable": "false"}) as broker, \
            Connection(broker.address) as c:
        res = c.request(ApiKey.METADATA, {"topics": ["other"], "allow_auto_topic_creation": True})
        assert res["topics"][0]["error_code"] == 3


def test_broker_defaults_apply_to_topics(storage_root):
    props = {"log.segment.bytes": "5000", "log.retention.ms": "1000"}
    with EmbeddedBroker(storage_root, props) as broker, Connection(broker.address) as c:
        create(c, "dflt", configs={"retention.ms": "2000"})
        res = c.request(ApiKey.DESCRIBE_CONFIGS, {"topics": ["dflt"]})["topics"][0]
        assert res["configs"]["segment.bytes"] == 5000
        assert res["configs"]["retention.ms"] == 2000 and res["explicit"] == ["retention.ms"]
        alt = c.request(ApiKey.ALTER_CONFIGS, {"topics": [
            {"name": "dflt", "set": {"segment.bytes": "abc"}}]})["topics"][0]
        assert alt["error_code"] == InvalidConfigError.code and "segment.bytes" in alt["error_message"]
        alt = c.request(ApiKey.ALTER_CONFIGS, {"topics": [
            {"name": "dflt", "delete": ["retention.ms"], "num_partitions": 2}]})["topics"][0]
        assert alt["error_code"] == 0
        res = c.request(ApiKey.DESCRIBE_CONFIGS, {"topics": ["dflt"]})["topics"][0]
        assert res["configs"]["retention.ms"] == 1000 and res["num_partitions"] == 2
        assert produce(c, "dflt", 1, encode_frame(raw_batch([b"p1"])))["error_code"] == 0
        deleted = c.request(ApiKey.DELETE_TOPICS, {"topics": ["dflt", "dflt"]})["topics"]
        assert deleted[0]["error_code"] == 0 and deleted[1]["error_code"] == 3
        assert produce(c, "dflt", 0, encode_frame(raw_batch([b"x"])))["error_code"] == 3


def test_config_parsing():
    text = "# comment\nbroker.id=3\nlisteners = PLAINTEXT://127.0.0.1:9999\n" \
           "log.segment.bytes: 1048576\nsome.kafka.only.key=1\nnum.partitions=\\\n  4\n"
    cfg = BrokerConfig.from_props(parse_properties(text))
    assert cfg.broker_id == 3 and cfg.listen_host_port == ("127.0.0.1", 9999)
    assert cfg.log_defaults == {"segment.bytes": 1048576} and cfg.num_partitions == 4
    for bad, key in [({"num.partitions": "0"}, "num.partitions"),
                     ({"auto.create.topics.enable": "maybe"}, "auto.create.topics.enable"),
                     ({"log.segment.bytes": "x"}, "log.segment.bytes"),
                     ({"segment.bytes": "1"}, "log.segment.bytes")]:
        with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
            BrokerConfig.from_props(bad)
    with pytest.raises(InvalidConfigError, match="line 1"):
        parse_properties("no separator here")


def test_wildcard_listener_advertises_the_configured_name(storage_root):
    props = {"listeners": "PLAINTEXT://0.0.0.0:0",
             "advertised.listeners": "PLAINTEXT://localhost:0"}  # port 0: the bound port
    with EmbeddedBroker(storage_root, props) as broker:
        port = int(broker.address.rpartition(":")[2])
        with Connection(f"127.0.0.1:{port}") as c:
            brokers = c.request(ApiKey.METADATA, {"topics": []})["brokers"]
        assert brokers == [{"node_id": 0, "host": "localhost", "port": port}]
        with Connection(f"localhost:{port}") as c:  # the advertised address answers
            create(c, "adv")
            assert produce(c, "adv", 0, encode_frame(raw_batch([b"a"])))["error_code"] == 0


@pytest.mark.parametrize("props, line", [
    ({"listeners": "0.0.0.0:0", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "advertised.listeners='PLAINTEXT://0.0.0.0:9092'"),
    ({"listeners": "[::]:0", "advertised.listeners": "[::]:9092"},
     "advertised.listeners='[::]:9092'"),
])
def test_a_wildcard_is_never_advertised(tmp_path, props, line):
    """A wildcard in advertised.listeners: the broker process refuses to start, naming
    the key and value, before it writes anything to its storage (a wildcard in
    listeners alone is advertised by the host's name: test_wildcard_listener)."""
    import subprocess
    import sys

    from tests.support.brokerproc import ROOT

    root = tmp_path / "log"
    root.mkdir()
    cmd = [sys.executable, "-m", "sparklog.cli.main", "broker", "start",
           "--storage", root.as_uri()]
    for key, value in props.items():
        cmd += ["--override", f"{key}={value}"]
    proc = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert f"sparklog: error: broker config {line}" in proc.stderr
    assert "wildcard address and is never advertised" in proc.stderr
    assert list(root.iterdir()) == []


def test_partition_reopened_after_its_lease_was_revoked(storage_root):
    from sparklog.storage import open_fileio

    with EmbeddedBroker(storage_root) as broker, Connection(broker.address) as c:
        create(c, "fenced")
        assert produce(c, "fenced", 0, encode_frame(raw_batch([b"a"])), acks=-1)["error_code"] == 0
        desc = c.request(ApiKey.DESCRIBE_LOG, {"topics": [{"name": "fenced"}]})
        segment = desc["topics"][0]["partitions"][0]["segments"][-1]["path"]
        open_fileio(storage_root).recover_lease(segment)  # someone fences the broker
        item = produce(c, "fenced", 0, encode_frame(raw_batch([b"lost"])), acks=-1)
        assert item["error_code"] == LeaseHeldError.code and "lease" in item["error_message"]
        item = produce(c, "fenced", 0, encode_frame(raw_batch([b"b"])), acks=-1)
        assert item["error_code"] == 0 and item["base_offset"] == 1
        assert read_values(c, "fenced", 0) == [b"a", b"b"]


def test_stop_answers_pending_long_poll_quickly(storage_root):
    import threading
    import time

    broker = EmbeddedBroker(storage_root).start()
    got = {}
    with Connection(broker.address) as c:
        create(c, "lp")

        def poll():
            got["res"] = c.request(ApiKey.FETCH, {"max_wait_ms": 20000, "topics": [
                {"name": "lp", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})

        t = threading.Thread(target=poll)
        t.start()

        def parked():
            writer = broker.broker.partitions.writers.get(("lp", 0))
            return writer is not None and len(writer._waiters) == 1

        wait_until(parked, what="the long poll parked on lp-0")
        start = time.monotonic()
        broker.stop()
        t.join(30)
        assert time.monotonic() - start < 15  # not the poll's 20 s
        assert got["res"]["topics"][0]["partitions"][0]["records"] == b""


def test_back_pressure_stops_reading_a_flooding_client(storage_root):
    """With queued.max.requests=2 and the head request a long poll, the broker stops
    reading the connection: a flood of 1 MB requests stalls in the socket buffers instead
    of piling up in the broker; after the poll answers, every request is answered."""
    import socket
    import time

    from sparklog.protocol import encode_request

    props = {"queued.max.requests": "2"}
    with EmbeddedBroker(storage_root, props) as broker, Connection(broker.address) as c:
        create(c, "flood")
        record = encode_frame(raw_batch([b"v" * (1 << 20)]))
        c.send(ApiKey.FETCH, {"max_wait_ms": 2000, "min_bytes": 1 << 30, "topics": [
            {"name": "flood", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})
        c.sock.settimeout(0.5)
        sent = 0
        try:
            for i in range(64):
                c.sock.sendall(encode_request(ApiKey.PRODUCE, {"acks": 1, "topics": [
                    {"name": "flood", "partitions": [{"partition": 0, "records": record}]}]},
                    100 + i))
                c._pending.append((100 + i, ApiKey.PRODUCE))
                sent += 1
        except socket.timeout:
            pass
        assert sent < 40, f"{sent} MB accepted while the broker should have stopped reading"
        c.sock.settimeout(30)
        time.sleep(0.1)
        assert c.receive()["error_code"] == 0  # the long poll
        for _ in range(sent):
            assert c.receive()["topics"][0]["partitions"][0]["error_code"] == 0


def test_produce_not_appended_within_timeout_ms_is_answered_timed_out(storage_root):
    from sparklog.errors import RequestTimedOutError

    with EmbeddedBroker(storage_root) as broker, Connection(broker.address) as c:
        create(c, "slow")
        assert produce(c, "slow", 0, encode_frame(raw_batch([b"a"])))["base_offset"] == 0
        plog = broker.broker.partitions.writers[("slow", 0)].log
        with plog._lock:  # the storage hangs: the writer's append waits for the lock
            c.send(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 300, "topics": [
                {"name": "slow", "partitions": [
                    {"partition": 0, "records": encode_frame(raw_batch([b"late"]))}]}]})
            item = c.receive()["topics"][0]["partitions"][0]
        assert item["error_code"] == RequestTimedOutError.code
        assert "timeout_ms=300" in item["error_message"]
        # the append itself went on once the storage answered, as in Kafka
        assert produce(c, "slow", 0, encode_frame(raw_batch([b"b"])))["base_offset"] == 2
        assert read_values(c, "slow", 0) == [b"a", b"late", b"b"]


def test_sync_behind_writes_property_reaches_local_storage(storage_root):
    assert EmbeddedBroker(storage_root).broker.fileio.sync_behind_writes == 8 << 20
    props = {"storage.sync.behind.writes.bytes": "0"}
    with EmbeddedBroker(storage_root, props) as broker, Connection(broker.address) as c:
        assert broker.broker.fileio.sync_behind_writes == 0
        create(c, "plain")
        assert produce(c, "plain", 0, encode_frame(raw_batch([b"a"])))["base_offset"] == 0
    with pytest.raises(InvalidConfigError, match="storage.sync.behind.writes.bytes"):
        BrokerConfig.from_props({"storage.sync.behind.writes.bytes": "-1"})
