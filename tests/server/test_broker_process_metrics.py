"""Prometheus's standard process metrics and the build-info metric on a real broker
process's endpoint, scraped over HTTP: they are present, describe the broker process
(not the test's) and move after acks=all produces (issue #32 item 14)."""

from __future__ import annotations

from importlib.metadata import version

from sparklog.clients.producer import Producer
from tests.support.brokerproc import topic_with
from tests.support.metrics import sample, scrape

PROCESS = ("process_cpu_seconds_total", "process_resident_memory_bytes",
           "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
           "process_start_time_seconds")


def test_process_and_build_info_metrics_move_after_acks_all_produces(metered_broker):
    before = scrape(metered_broker)
    for name in PROCESS:
        assert (sample(before, name) or 0) > 0, name
    assert sample(before, "sparklog_build_info", version=version("sparklog")) == 1
    topic = topic_with(metered_broker, 1)
    with Producer(metered_broker.address, acks="all", linger_ms=5) as producer:
        for i in range(3000):
            producer.send(topic, b"v%06d" % i, partition=0)
        producer.flush(30)
    after = scrape(metered_broker)
    assert sample(after, "process_cpu_seconds_total") > sample(before,
                                                               "process_cpu_seconds_total")
    assert sample(after, "process_start_time_seconds") == sample(
        before, "process_start_time_seconds")
    assert sample(after, "process_open_fds") <= sample(after, "process_max_fds")
