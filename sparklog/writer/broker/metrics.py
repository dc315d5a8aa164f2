"""Broker metrics for Prometheus (prometheus-client), one registry per broker.

Exposed on ``--metrics-port`` (``metrics.port``) at ``/metrics`` of 127.0.0.1 unless the
listener host says otherwise. Names follow Prometheus conventions with Kafka's concepts:

=====================================  =========  ======================================
metric                                 type       labels
=====================================  =========  ======================================
sparklog_requests_total                counter    api
sparklog_request_errors_total          counter    api, error (Kafka's error name)
sparklog_bytes_in_total                counter    topic
sparklog_bytes_out_total               counter    topic
sparklog_messages_in_total             counter    topic (records appended)
sparklog_request_latency_seconds       histogram  api (Produce, Fetch and the others)
sparklog_log_end_offset                gauge      topic, partition
sparklog_high_watermark                gauge      topic, partition
sparklog_connections                   gauge      -
sparklog_fetch_purgatory_size          gauge      - (fetches waiting for data, long polls)
sparklog_open_partitions               gauge      - (partitions with open files)
=====================================  =========  ======================================

``sparklog_request_errors_total`` counts error responses and, for Produce, every
refused partition write (``error`` is Kafka's name: ``MESSAGE_TOO_LARGE``,
``RECORD_LIST_TOO_LARGE``, ``INVALID_RECORD``, ``CORRUPT_MESSAGE``...).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    """The broker's metric families in their own CollectorRegistry (several brokers in
    one process do not collide)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("sparklog_requests", "Requests handled", ["api"], registry=r)
        self.errors = Counter("sparklog_request_errors",
                              "Error responses and refused Produce partitions (by error)",
                              ["api", "error"], registry=r)
        self.bytes_in = Counter("sparklog_bytes_in", "Frame bytes appended", ["topic"], registry=r)
        self.bytes_out = Counter("sparklog_bytes_out", "Frame bytes fetched", ["topic"],
                                 registry=r)
        self.messages_in = Counter("sparklog_messages_in", "Records appended", ["topic"],
                                   registry=r)
        self.latency = Histogram("sparklog_request_latency_seconds",
                                 "Time from request read to response ready", ["api"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.log_end_offset = Gauge("sparklog_log_end_offset", "Log end offset",
                                    ["topic", "partition"], registry=r)
        self.high_watermark = Gauge("sparklog_high_watermark", "High watermark",
                                    ["topic", "partition"], registry=r)
        self.connections = Gauge("sparklog_connections", "Open client connections", registry=r)
        self.purgatory = Gauge("sparklog_fetch_purgatory_size",
                               "Fetches waiting for data (long polls)", registry=r)
        self.open_partitions = Gauge("sparklog_open_partitions",
                                     "Partitions with open files (max.open.partitions)",
                                     registry=r)
        self._server = None

    def partition_offsets(self, topic: str, partition: int, leo: int, hw: int) -> None:
        """Record a partition's log end offset and high watermark."""
        self.log_end_offset.labels(topic, str(partition)).set(leo)
        self.high_watermark.labels(topic, str(partition)).set(hw)

    def forget_topic(self, topic: str, partitions: int) -> None:
        """Drop a deleted topic's partition gauges."""
        for p in range(partitions):
            for gauge in (self.log_end_offset, self.high_watermark):
                try:
                    gauge.remove(topic, str(p))
                except KeyError:
                    pass

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Start the HTTP exposition server; return its port (useful with port 0)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return server.server_address[1]

    def close(self) -> None:
        """Stop the HTTP server."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def render(self) -> bytes:
        """The text exposition of every metric (what /metrics returns)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
