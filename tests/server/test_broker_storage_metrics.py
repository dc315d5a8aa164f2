"""The storage latency histogram ``sparklog_storage_sync_seconds{kind}`` on a real broker
process's endpoint, scraped over HTTP, on the local disk and on a real HDFS cluster
(tests/support/hdfscluster.py): acks=all produces are answered after an hsync, each
timed; acks=1 produces after an hflush, each timed (issue #32 item 14)."""

from __future__ import annotations

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.producer import Producer
from tests.support.brokerproc import BrokerProcess, topic_with
from tests.support.metrics import sample, scrape
from tests.support.processes import free_port

H = "sparklog_storage_sync_seconds"


@pytest.fixture(params=["file", "hdfs"])
def storage_broker(request, tmp_path):
    """A broker process serving its metrics, on a file:// root or on the run's HDFS."""
    if request.param == "hdfs":
        cluster = request.getfixturevalue("hdfs_env")
        uri = f"{cluster.hdfs_uri}/metrics/{request.node.name.replace('[', '-')[:-1]}"
    else:
        uri = (tmp_path / "log").as_uri()
    port = free_port()
    with BrokerProcess(uri, ["--metrics-port", str(port)], log_path=tmp_path / "broker.log",
                       start_timeout=120) as proc:
        proc.metrics_port = port
        with Admin(proc.address) as admin:
            proc.admin = admin
            yield proc


def timed(samples: dict, kind: str) -> tuple[float, float, float]:
    """(count, sum, count of the 10 s bucket) of one kind's histogram."""
    return (sample(samples, H + "_count", kind=kind), sample(samples, H + "_sum", kind=kind),
            sample(samples, H + "_bucket", kind=kind, le="10.0"))


def produce(broker, topic: str, acks, n: int) -> None:
    with Producer(broker.address, acks=acks, linger_ms=5) as producer:
        for i in range(n):
            producer.send(topic, b"v%06d" % i, partition=0)
        producer.flush(60)


def test_hsync_and_hflush_of_produces_are_timed(storage_broker):
    topic = topic_with(storage_broker, 1)
    before = scrape(storage_broker)
    for kind in ("hflush", "hsync"):  # both series exist before any write of theirs
        assert timed(before, kind)[0] is not None, kind
    produce(storage_broker, topic, "all", 500)
    synced = scrape(storage_broker)
    count, total, under_10s = timed(synced, "hsync")
    assert count > timed(before, "hsync")[0], "no hsync timed for acks=all produces"
    assert total > timed(before, "hsync")[1]
    assert under_10s <= count
    produce(storage_broker, topic, 1, 500)
    flushed = scrape(storage_broker)
    count, total, _ = timed(flushed, "hflush")
    assert count > timed(synced, "hflush")[0], "no hflush timed for acks=1 produces"
    assert total > timed(synced, "hflush")[1]
