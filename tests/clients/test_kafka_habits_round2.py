"""More kafka-python habits (issue 32): commit_async's callback gets the offsets it
committed and the response (or the exception), Consumer.metrics() under Kafka's metric
names, bootstrap_connected() on the Producer and the Consumer."""

from __future__ import annotations

import itertools
import math
import os

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import OffsetAndMetadata, TopicPartition
from sparklog.errors import InvalidArgumentError, SparklogError
from sparklog.server import EmbeddedBroker
from tests.support.waiting import wait_until

_names = itertools.count()


def _topic(address, partitions=2, records=10) -> str:
    topic = f"hab{os.getpid()}-{next(_names)}"
    with Admin(address) as admin:
        admin.create_topic(topic, partitions)
    with Producer(address) as p:
        for i in range(records):
            p.send(topic, b"%d" % i, partition=i % partitions)
        p.flush(10)
    return topic


def _poll_all(consumer, count: int) -> list:
    records: list = []
    wait_until(lambda: records.extend(r for rs in consumer.poll(timeout_ms=200).values()
                                      for r in rs) or len(records) >= count,
               what=f"{count} records")
    return records


def test_commit_async_callback_gets_the_offsets_committed_and_the_response(broker):
    topic = _topic(broker.address)
    group = f"g{os.getpid()}-{next(_names)}"
    calls: list = []
    with Consumer(topic, bootstrap_servers=broker.address, group_id=group,
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        assert len(_poll_all(c, 10)) == 10
        c.commit_async(callback=lambda offsets, response: calls.append((offsets, response)))
        wait_until(lambda: calls or c.poll(timeout_ms=50) and False, what="the callback")
        offsets, response = calls[0]
        assert offsets == {TopicPartition(topic, 0): OffsetAndMetadata(5),
                           TopicPartition(topic, 1): OffsetAndMetadata(5)}
        assert not isinstance(response, Exception) and response["error_code"] == 0
        assert c.committed(TopicPartition(topic, 0)) == 5
        # offsets given are passed back as given; a failure comes as the exception
        bad = {TopicPartition(topic, 7): OffsetAndMetadata(1)}
        c.commit_async(bad, callback=lambda offsets, response: calls.append((offsets,
                                                                             response)))
        wait_until(lambda: len(calls) == 2, what="the second callback")
        assert calls[1][0] is bad and isinstance(calls[1][1], SparklogError)


def test_consumer_metrics_under_kafkas_names(broker):
    topic = _topic(broker.address, records=12)
    group = f"g{os.getpid()}-{next(_names)}"
    with Consumer(topic, bootstrap_servers=broker.address, group_id=group,
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        first = c.metrics()
        assert first["consumer-fetch-manager-metrics"]["records-consumed-total"] == 0
        assert first["consumer-coordinator-metrics"]["commit-total"] == 0
        assert math.isnan(first["consumer-coordinator-metrics"]["commit-latency-avg"])
        assert first["consumer-metrics"]["connection-count"] >= 1
        _poll_all(c, 12)
        c.commit()
        m = c.metrics()
        assert m["consumer-fetch-manager-metrics"]["records-consumed-total"] == 12
        assert m["consumer-fetch-manager-metrics"]["records-lag-max"] == 0.0
        coordinator = m["consumer-coordinator-metrics"]
        assert coordinator["assigned-partitions"] == 2 and coordinator["commit-total"] == 1
        assert 0 < coordinator["commit-latency-avg"] <= coordinator["commit-latency-max"]
        with pytest.raises(InvalidArgumentError, match="raw=True"):
            c.metrics(raw=True)


def test_bootstrap_connected(storage_root):
    broker = EmbeddedBroker(storage_root).start()
    try:
        producer = Producer(broker.bootstrap_servers)
        consumer = Consumer(bootstrap_servers=broker.bootstrap_servers)
        assert producer.bootstrap_connected() and consumer.bootstrap_connected()
    finally:
        broker.stop()
    wait_until(lambda: not producer.bootstrap_connected()
               and not consumer.bootstrap_connected(),
               what="the clients to see their broker gone")
    producer.close(0)
    consumer.close()
    assert not producer.bootstrap_connected()
