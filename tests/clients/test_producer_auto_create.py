"""The producer asks for a missing topic to be created, as Kafka's does (Metadata with
allow_auto_topic_creation), and the broker's auto.create.topics.enable decides (issue
#32 item 6)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer.producer import Producer
from sparklog.errors import UnknownTopicOrPartitionError
from tests.support.brokerproc import ROOT, BrokerProcess


@pytest.fixture(scope="module")
def auto_broker(tmp_path_factory):
    """A broker process with the default auto.create.topics.enable (true) and 3 as
    num.partitions, the partition count of the topics it creates."""
    with BrokerProcess.in_temp(tmp_path_factory, "auto",
                               ["--override", "num.partitions=3"]) as proc:
        yield proc


def read_all(address: str, topic: str, count: int) -> list:
    with Consumer(topic, bootstrap_servers=address, auto_offset_reset="earliest",
                  consumer_timeout_ms=10_000) as consumer:
        got = []
        for record in consumer:
            got.append((record.key, record.value))
            if len(got) == count:
                break
    return got


def test_send_to_a_missing_topic_creates_it_with_the_broker_defaults(auto_broker):
    with Admin(auto_broker.address) as admin:
        assert "fresh" not in admin.list_topics()
        with Producer(auto_broker.address) as producer:
            meta = producer.send("fresh", b"v", key=b"k").get(30)
        assert meta.topic == "fresh"
        assert "fresh" in admin.list_topics()
        assert len(admin.describe_topics(["fresh"])[0].partitions) == 3
    assert "topic fresh created: 3 partition(s)" in auto_broker.log_text()
    assert read_all(auto_broker.address, "fresh", 1) == [(b"k", b"v")]


def test_the_consumer_does_not_create_a_topic(auto_broker):
    """Only the producer asks: a consumer's metadata of a missing topic creates nothing."""
    with Consumer(bootstrap_servers=auto_broker.address) as consumer:
        assert consumer.partitions_for_topic("read-only-name") is None
    with Admin(auto_broker.address) as admin:
        assert "read-only-name" not in admin.list_topics()


def test_console_producer_to_a_new_topic(auto_broker):
    """``sparklog produce --topic new``, as kafka-console-producer.sh to a broker that
    auto-creates topics."""
    out = subprocess.run(
        [sys.executable, "-m", "sparklog.cli.main", "produce", "--topic", "new",
         "--bootstrap-server", auto_broker.address],
        input="first\nsecond\n", cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert sorted(v for _, v in read_all(auto_broker.address, "new", 2)) == \
        [b"first", b"second"]


def test_send_fails_naming_the_topic_when_auto_creation_is_off(tmp_path):
    with BrokerProcess(tmp_path.joinpath("log").as_uri(),
                       ["--override", "auto.create.topics.enable=false"],
                       log_path=tmp_path / "broker.log") as proc:
        with Producer(proc.address, max_block_ms=1500) as producer:
            started = time.monotonic()
            with pytest.raises(UnknownTopicOrPartitionError) as err:
                producer.send("absent", b"v")
            assert time.monotonic() - started >= 1.5
        assert "Topic absent not present in metadata after 1500 ms" in str(err.value)
        assert "auto.create.topics.enable" in str(err.value)
        with Admin(proc.address) as admin:
            assert "absent" not in admin.list_topics()
        out = subprocess.run(
            [sys.executable, "-m", "sparklog.cli.main", "produce", "--topic", "absent",
             "--bootstrap-server", proc.address, "--producer-property", "max.block.ms=1000"],
            input="x\n", cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode != 0
        assert out.stderr.startswith("sparklog: error: ") and out.stderr.count("\n") == 1, \
            out.stderr
        assert "Topic absent not present in metadata after 1000 ms" in out.stderr


def test_auto_creation_needs_create_permission(storage_root):
    """ACLs as Kafka's: a principal that may Write a topic but not Create it gets no
    topic (the send fails after max_block_ms); Create on the topic creates it."""
    from sparklog.security.acl import AclBinding
    from sparklog.server.embedded import EmbeddedBroker

    props = {"listeners": "LOCAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
             "listener.security.protocol.map": "LOCAL:PLAINTEXT",
             "sasl.enabled.mechanisms": "SCRAM-SHA-256",
             "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:ANONYMOUS"}
    with EmbeddedBroker(storage_root, props) as broker:
        addresses = broker.broker.listener_addresses
        with Admin(addresses["LOCAL"]) as admin:
            admin.alter_user_scram_credentials([("alice", "SCRAM-SHA-256", "secret")])
            admin.create_acls(
                [AclBinding("User:alice", "*", op, "Allow", "Topic", "w-", "PREFIXED")
                 for op in ("Describe", "Write")]
                + [AclBinding("User:alice", "*", "Create", "Allow", "Topic", "w-made")])
        cfg = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
               "sasl_plain_username": "alice", "sasl_plain_password": "secret"}
        with Producer(addresses["SASL_PLAINTEXT"], max_block_ms=1000, **cfg) as producer:
            producer.send("w-made", b"v").get(30)
            with pytest.raises(UnknownTopicOrPartitionError, match="Topic w-other not present"):
                producer.send("w-other", b"v")
        with Admin(addresses["LOCAL"]) as admin:
            topics = set(admin.list_topics())
        assert "w-made" in topics and "w-other" not in topics
