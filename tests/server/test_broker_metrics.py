"""The broker's Prometheus metrics over a real broker process, scraped over HTTP:
Kafka's BrokerTopicMetrics counters equal what was produced, refused and fetched; the
log gauges (Size, LogStartOffset, LogEndOffset, NumLogSegments) equal the partition's
files; consumer-group lag follows a commit; a deleted topic's series go away; names of
topics that do not exist never become label values."""

from __future__ import annotations

import time
from pathlib import Path

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import TopicPartition
from sparklog.errors import RecordTooLargeError, UnknownTopicOrPartitionError
from sparklog.format.frame import encode_frame, raw_batch
from sparklog.protocol import ApiKey, Connection
from tests.support.brokerproc import BrokerProcess, topic_with
from tests.support.metrics import sample, scrape
from tests.support.processes import free_port


def files_size(broker, topic, partition) -> tuple[int, int]:
    """(bytes, count) of the partition's segment files."""
    logs = list(Path(broker.root, "topics", topic, str(partition)).glob("*.log"))
    return sum(p.stat().st_size for p in logs), len(logs)


T = "sparklog_server_brokertopicmetrics_"
L = "sparklog_log_log_"


def test_counters_and_log_gauges_equal_what_was_produced_and_fetched(metered_broker):
    # issue #17: sparklog_messages_in_total had no samples after 650k records (it was
    # declared but never incremented); the log had no size or start offset gauges
    topic = topic_with(metered_broker, 2, segment_bytes=8192)
    sent = {0: 1500, 1: 700}
    produce_total = "sparklog_network_requestmetrics_requests_total"
    before = sample(scrape(metered_broker), produce_total, request="Produce") or 0
    with Producer(metered_broker.address, linger_ms=5, batch_size=2048) as producer:
        for p, n in sent.items():
            for i in range(n):
                producer.send(topic, b"v%06d" % i, partition=p)
        producer.flush(30)
    got = scrape(metered_broker)
    assert sample(got, T + "messagesin_total", topic=topic) == sum(sent.values())
    size = {p: files_size(metered_broker, topic, p) for p in sent}
    assert sample(got, T + "bytesin_total", topic=topic) == sum(b for b, _ in size.values())
    requests = sample(got, T + "totalproducerequests_total", topic=topic)
    assert requests is not None and 2 <= requests <= sum(sent.values())
    assert sample(got, T + "failedproducerequests_total", topic=topic) == 0
    for p, n in sent.items():
        assert sample(got, L + "logendoffset", topic=topic, partition=p) == n
        assert sample(got, L + "highwatermark", topic=topic, partition=p) == n
        assert sample(got, L + "logstartoffset", topic=topic, partition=p) == 0
        assert sample(got, L + "size", topic=topic, partition=p) == size[p][0]
        assert sample(got, L + "numlogsegments", topic=topic, partition=p) == size[p][1]
    assert size[0][1] > 1  # 8 KiB segments: several
    # fetch everything once: bytes out count every byte read
    with Consumer(bootstrap_servers=metered_broker.address, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in sent])
        read = 0
        deadline = time.monotonic() + 30
        while read < sum(sent.values()) and time.monotonic() < deadline:
            read += sum(len(rs) for rs in c.poll(timeout_ms=200).values())
    assert read == sum(sent.values())
    got = scrape(metered_broker)
    assert sample(got, T + "bytesout_total", topic=topic) >= sum(b for b, _ in size.values())
    assert sample(got, T + "totalfetchrequests_total", topic=topic) >= 2
    # a request counts once; TotalProduceRequests once per topic-partition in it
    produce_requests = sample(got, produce_total, request="Produce") - before
    assert requests / len(sent) <= produce_requests <= requests
    assert sample(got, "sparklog_network_requestmetrics_totaltime_seconds_count",
                  request="Fetch") >= 1


def test_refused_produce_counted_by_topic_and_error_name(metered_broker):
    topic = topic_with(metered_broker, max_message_bytes=4096)
    big = encode_frame(raw_batch([b"x" * 8000]))
    small = encode_frame(raw_batch([b"y"]))
    before = scrape(metered_broker)
    errors = "sparklog_network_requestmetrics_errors_total"
    too_large = sample(before, errors, request="Produce", error="MESSAGE_TOO_LARGE") or 0
    with Connection(metered_broker.address) as conn:
        def produce(name, records):
            res = conn.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topics": [
                {"name": name, "partitions": [{"partition": 0, "records": records}]}]})
            return res["topics"][0]["partitions"][0]["error_code"]

        assert produce(topic, big) == RecordTooLargeError.code
        assert produce(topic, small) == 0
        assert produce("met-nowhere", small) == UnknownTopicOrPartitionError.code
    got = scrape(metered_broker)
    assert sample(got, T + "failedproducerequests_total", topic=topic) == 1
    assert sample(got, T + "totalproducerequests_total", topic=topic) == 2
    assert sample(got, T + "messagesin_total", topic=topic) == 1
    assert sample(got, errors, request="Produce", error="MESSAGE_TOO_LARGE") == too_large + 1
    assert sample(got, errors, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") >= 1
    # a name that is no topic is never a label value (no series per random name)
    assert not [k for k in got if ("topic", "met-nowhere") in k[1]]
    assert sample(got, L + "logendoffset", topic=topic, partition=0) == 1


def test_consumer_group_lag_after_commit_and_topic_deletion(metered_broker):
    topic = topic_with(metered_broker, 2)
    with Producer(metered_broker.address) as producer:
        for i in range(40):
            producer.send(topic, b"%d" % i, partition=i % 2)
        producer.flush(30)
    group = f"lagging-{topic}"
    with Consumer(bootstrap_servers=metered_broker.address, group_id=group,
                  enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        c.commit({TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 20})
    got = scrape(metered_broker)
    lag = "sparklog_consumergroup_lag"
    current = "sparklog_consumergroup_current_offset"
    assert sample(got, current, consumergroup=group, topic=topic, partition=0) == 5
    assert sample(got, lag, consumergroup=group, topic=topic, partition=0) == 15
    assert sample(got, lag, consumergroup=group, topic=topic, partition=1) == 0
    with Producer(metered_broker.address) as producer:
        producer.send(topic, b"more", partition=1).get(10)
    got = scrape(metered_broker)
    assert sample(got, lag, consumergroup=group, topic=topic, partition=1) == 1
    # deleting the topic drops its series (Kafka removes a deleted topic's metrics)
    metered_broker.admin.delete_topics([topic])
    got = scrape(metered_broker)
    assert [k for k in got if ("topic", topic) in k[1]] == []


def test_log_gauges_follow_retention(tmp_path):
    # retention deletes old segments: LogStartOffset, Size and NumLogSegments follow
    port = free_port()
    with BrokerProcess((tmp_path / "log").as_uri(), [
            "--metrics-port", str(port),
            "--override", "log.retention.check.interval.ms=100"],
            log_path=tmp_path / "broker.log") as proc:
        proc.metrics_port, proc.root = port, tmp_path / "log"
        with Admin(proc.address) as admin:
            admin.create_topic("kept", 1, configs={"segment.bytes": 4096,
                                                  "retention.bytes": 8192})
        with Producer(proc.address, linger_ms=5, batch_size=2048) as producer:
            for i in range(400):
                producer.send("kept", b"r%06d" % i + b"." * 40, partition=0)
            producer.flush(30)
        deadline = time.monotonic() + 90
        while True:  # until retention deleted segments and the files stopped changing
            got = scrape(proc)
            start = sample(got, L + "logstartoffset", topic="kept", partition=0)
            size, count = files_size(proc, "kept", 0)
            if start and size <= 8192 + 4096 and \
                    (size, count) == (sample(got, L + "size", topic="kept", partition=0),
                                      sample(got, L + "numlogsegments", topic="kept",
                                             partition=0)):
                break
            assert time.monotonic() < deadline, \
                f"retention did not delete segments within 90 s: {start=} {size=} {count=}"
            time.sleep(0.1)
        first = min(int(p.stem) for p in Path(proc.root, "topics", "kept", "0").glob("*.log"))
        assert start == first > 0
        assert sample(got, L + "logendoffset", topic="kept", partition=0) == 400
