"""Broker metrics for Prometheus (prometheus-client), one registry per broker.

Exposed on ``--metrics-port`` (``metrics.port``) at ``/metrics`` of 127.0.0.1 unless the
listener host says otherwise. Names are Kafka's JMX names as Prometheus's JMX exporter
writes them (``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec`` becomes
``sparklog_server_brokertopicmetrics_messagesin_total``: a rate's ``PerSec`` becomes a
counter's ``_total``); consumer-group lag follows Kafka exporters
(``kafka_consumergroup_lag``). docs/operations.md ("Metrics") lists every metric.

Counters are updated once per request or per partition of a request, never per record.
Log and lag gauges are not updated by appends: :class:`LogCollector` computes them when
``/metrics`` is scraped, from the partitions this broker has open and the committed
offsets of the coordination store.

Two gauges report the broker's own limits (docs/operations.md, "Limits"):
``sparklog_server_delayedoperationpurgatory_purgatorysize{delayedoperation="Fetch"}``
(long polls waiting for data, Kafka's PurgatorySize) and ``sparklog_log_open_partitions``
(partitions with open files, bounded by ``max.open.partitions``; no Kafka equivalent).

``sparklog_storage_sync_seconds{kind="hflush"|"hsync"}`` times every hflush and hsync
the broker's writers issue to its storage (the FileIO's ``on_sync`` observer, set by
:meth:`BrokerMetrics.watch_storage`): the client-side view of what HDFS's DataNodes
report as FlushNanos and FsyncNanos, and of Kafka's LogFlushRateAndTimeMs for hsync.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from ..errors import error_name

log = logging.getLogger(__name__)

#: hflush/hsync latency: a local write(2) takes microseconds, an HDFS hsync through a
#: slow DataNode seconds
_SYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SYNC_KINDS = ("hflush", "hsync")
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)
#: errors that name no existing topic: counted by error only, never under a topic label
#: (a client asking for random names must not create a series per name)
_NO_TOPIC_ERRORS = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "INVALID_TOPIC_EXCEPTION"})

_TOPIC = "sparklog_server_brokertopicmetrics_"


class _TopicSeries(NamedTuple):
    """One topic's children of the BrokerTopicMetrics counters."""

    messages_in: Any
    bytes_in: Any
    bytes_out: Any
    total_produce: Any
    failed_produce: Any
    total_fetch: Any
    failed_fetch: Any


class BrokerMetrics:
    """The broker's metric families in their own CollectorRegistry (several brokers in
    one process do not collide). The attributes are the prometheus-client metrics; the
    methods are the broker's hooks (one call per request or per partition of one)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        req = ["request"]
        self.requests = Counter("sparklog_network_requestmetrics_requests",
                                "Requests handled (Kafka RequestsPerSec)", req, registry=r)
        self.errors = Counter("sparklog_network_requestmetrics_errors",
                              "Error responses and refused partitions of a request, by "
                              "Kafka's error name (Kafka ErrorsPerSec)",
                              ["request", "error"], registry=r)
        self.latency = Histogram("sparklog_network_requestmetrics_totaltime_seconds",
                                 "Time from request read to response ready (Kafka "
                                 "TotalTimeMs, in seconds)", req, buckets=_LATENCY_BUCKETS,
                                 registry=r)
        topic = ["topic"]
        self.messages_in = Counter(_TOPIC + "messagesin", "Records appended (Kafka "
                                   "MessagesInPerSec)", topic, registry=r)
        self.bytes_in = Counter(_TOPIC + "bytesin", "Record bytes appended (Kafka "
                                "BytesInPerSec)", topic, registry=r)
        self.bytes_out = Counter(_TOPIC + "bytesout", "Record bytes fetched (Kafka "
                                 "BytesOutPerSec)", topic, registry=r)
        self.total_produce = Counter(_TOPIC + "totalproducerequests", "Produce requests, "
                                     "one per topic-partition (Kafka "
                                     "TotalProduceRequestsPerSec)", topic, registry=r)
        self.failed_produce = Counter(_TOPIC + "failedproducerequests", "Refused Produce "
                                      "topic-partitions (Kafka FailedProduceRequestsPerSec)",
                                      topic, registry=r)
        self.total_fetch = Counter(_TOPIC + "totalfetchrequests", "Fetch requests, one per "
                                   "topic-partition (Kafka TotalFetchRequestsPerSec)", topic,
                                   registry=r)
        self.failed_fetch = Counter(_TOPIC + "failedfetchrequests", "Fetched topic-partitions"
                                    " answered with an error (Kafka "
                                    "FailedFetchRequestsPerSec)", topic, registry=r)
        self.connections = Gauge("sparklog_server_socket_server_metrics_connection_count",
                                 "Open client connections (Kafka connection-count)",
                                 registry=r)
        self._per_topic = (self.messages_in, self.bytes_in, self.bytes_out,
                           self.total_produce, self.failed_produce, self.total_fetch,
                           self.failed_fetch)
        self._topics: dict[str, _TopicSeries] = {}
        self._apis: dict[str, tuple] = {}  # request -> (requests, latency) children
        self.purgatory = Gauge("sparklog_server_delayedoperationpurgatory_purgatorysize",
                               "Fetches waiting for data, long polls (Kafka PurgatorySize)",
                               ["delayedoperation"], registry=r).labels("Fetch")
        self.open_partitions = Gauge("sparklog_log_open_partitions",
                                     "Partitions with open files (max.open.partitions)",
                                     registry=r)
        # security (docs/security.md): Kafka's failed-authentication-total and
        # throttle-time, per listener / per quota
        self.authentications = Counter(
            "sparklog_server_authentications", "SASL authentications by result",
            ["listener", "result"], registry=r)
        self.throttle = Counter("sparklog_quota_throttle_time_seconds",
                                "Seconds connections were muted by a quota", ["quota"],
                                registry=r)
        # storage latency: every hflush and hsync of the broker's writers
        self.storage_sync = Histogram(
            "sparklog_storage_sync_seconds", "Time of each hflush (bytes handed to the "
            "storage, visible to readers) and hsync (made durable: HDFS hsync, local "
            "fsync) the broker's writers issue", ["kind"], buckets=_SYNC_BUCKETS,
            registry=r)
        self._sync_kinds = {kind: self.storage_sync.labels(kind) for kind in _SYNC_KINDS}
        # Prometheus's standard process_* metrics (CPU, memory, fds, start time) and the
        # *_build_info convention: sparklog_build_info{version="..."} 1
        from importlib.metadata import PackageNotFoundError, version

        from prometheus_client import Info, ProcessCollector
        try:
            __version__ = version("sparklog")
        except PackageNotFoundError:  # a source tree that was never installed
            __version__ = "unknown"
        ProcessCollector(registry=r)
        Info("sparklog_build", "The broker's sparklog version", registry=r).info(
            {"version": __version__})
        self._server = None

    def _children(self, topic: str) -> _TopicSeries:
        found = self._topics.get(topic)
        if found is None:
            found = self._topics[topic] = _TopicSeries(*(m.labels(topic)
                                                         for m in self._per_topic))
        return found

    # --- hooks -------------------------------------------------------------------------------
    def request_done(self, request: str, seconds: float, error_code: int = 0) -> None:
        """One request answered after ``seconds``, with a top-level ``error_code``."""
        found = self._apis.get(request)
        if found is None:
            found = self._apis[request] = (self.requests.labels(request),
                                           self.latency.labels(request))
        found[0].inc()
        found[1].observe(seconds)
        if error_code:
            self.errors.labels(request, error_name(error_code)).inc()

    def storage_synced(self, kind: str, seconds: float) -> None:
        """One hflush or hsync (``kind``) of a writer completed after ``seconds`` (the
        storage's ``on_sync`` observer; called from the writers' threads)."""
        self._sync_kinds[kind].observe(seconds)

    def watch_storage(self, fileio) -> None:
        """Time the hflushes and hsyncs of the writers ``fileio`` opens from now on
        (its ``on_sync`` observer), unless it already has an observer (a FileIO
        shared with another broker of this process keeps reporting to the first)."""
        if fileio.on_sync is None:
            fileio.on_sync = self.storage_synced

    def authenticated(self, listener: str, ok: bool) -> None:
        """One SASL authentication ended on ``listener`` (succeeded or not)."""
        self.authentications.labels(listener, "success" if ok else "failure").inc()

    def throttled(self, quota: str, seconds: float) -> None:
        """A connection muted ``seconds`` by ``quota`` (producer_byte_rate ...)."""
        self.throttle.labels(quota).inc(seconds)

    def produced(self, topic: str, size: int, records: int) -> None:
        """One topic-partition of a Produce request appended ``records`` records of
        ``size`` bytes (0 and 0 for a resent duplicate)."""
        series = self._children(topic)
        series.total_produce.inc()
        if records:
            series.messages_in.inc(records)
            series.bytes_in.inc(size)

    def refused(self, request: str, topic: str, error: str) -> None:
        """One topic-partition of a ``request`` refused with Kafka's ``error`` name."""
        self.errors.labels(request, error).inc()
        if error in _NO_TOPIC_ERRORS:
            return
        series = self._children(topic)
        if request == "Produce":
            series.total_produce.inc()
            series.failed_produce.inc()
        elif request == "Fetch":
            series.total_fetch.inc()
            series.failed_fetch.inc()

    def sent(self, topic: str, size: int) -> None:
        """A Fetch response carries ``size`` bytes of ``topic``'s frames (BytesOut)."""
        self._children(topic).bytes_out.inc(size)

    def fetched(self, results) -> None:
        """A Fetch response's ``(topic, partition item)`` pairs: each counts once in
        TotalFetchRequests of its topic, and once more in FailedFetchRequests and in the
        errors by name when it carries an error."""
        for topic, item in results:
            code = item["error_code"]
            if code:
                self.refused("Fetch", topic, error_name(code))
            else:
                self._children(topic).total_fetch.inc()

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's series (its log gauges go with its partitions)."""
        if self._topics.pop(topic, None) is not None:
            for metric in self._per_topic:
                try:
                    metric.remove(topic)
                except KeyError:
                    pass

    def watch_logs(self, writers, store) -> None:
        """Compute the log and consumer-group gauges at each scrape: ``writers()`` gives
        the open PartitionWriters, ``store`` the committed offsets."""
        self.registry.register(LogCollector(writers, store))

    # --- exposition --------------------------------------------------------------------------
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


class LogCollector:
    """Scrape-time gauges of the open partitions (Kafka's ``kafka.log:type=Log`` Size,
    LogStartOffset, LogEndOffset, NumLogSegments, plus the high watermark) and the lag
    of every group with committed offsets on them (``kafka_consumergroup_lag``)."""

    def __init__(self, writers, store):
        self.writers = writers
        self.store = store

    def describe(self):
        """No families up front (collecting reads the store: not at registration)."""
        return []

    def collect(self):
        """Yield the gauge families (read without stopping the writers)."""
        from prometheus_client.core import GaugeMetricFamily

        tp = ["topic", "partition"]
        families = {
            "size": GaugeMetricFamily("sparklog_log_log_size", "Bytes in the partition's "
                                      "segments (Kafka kafka.log:type=Log,name=Size)", labels=tp),
            "start": GaugeMetricFamily("sparklog_log_log_logstartoffset", "Log start offset "
                                       "(Kafka LogStartOffset)", labels=tp),
            "end": GaugeMetricFamily("sparklog_log_log_logendoffset", "Log end offset (Kafka "
                                     "LogEndOffset)", labels=tp),
            "segments": GaugeMetricFamily("sparklog_log_log_numlogsegments", "Segments (Kafka "
                                          "NumLogSegments)", labels=tp),
            "hw": GaugeMetricFamily("sparklog_log_log_highwatermark", "High watermark: end "
                                    "of what consumers can read", labels=tp),
        }
        watermarks = {}
        for w in self.writers():
            plog = w.log
            if plog.closed:
                continue
            labels = [w.topic_name, str(w.partition)]
            segments = plog.segments
            hw = plog.high_watermark
            watermarks[(w.topic_name, w.partition)] = hw
            families["size"].add_metric(labels, sum(s.size for s in segments))
            families["start"].add_metric(labels, plog.log_start_offset)
            families["end"].add_metric(labels, plog.log_end_offset)
            families["segments"].add_metric(labels, len(segments))
            families["hw"].add_metric(labels, hw)
        yield from families.values()
        yield from self._lag(watermarks)

    def _lag(self, watermarks: dict):
        from prometheus_client.core import GaugeMetricFamily

        gtp = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("sparklog_consumergroup_current_offset",
                                    "Committed offset of a group on a partition led here",
                                    labels=gtp)
        lag = GaugeMetricFamily("sparklog_consumergroup_lag", "High watermark minus the "
                                "group's committed offset", labels=gtp)
        if watermarks:
            try:
                for group in self.store.list_groups():
                    for (topic, partition), om in self.store.fetch_offsets(group).items():
                        hw = watermarks.get((topic, partition))
                        if hw is None or om.offset < 0:
                            continue
                        labels = [group, topic, str(partition)]
                        current.add_metric(labels, om.offset)
                        lag.add_metric(labels, max(hw - om.offset, 0))
            except Exception as exc:  # noqa: BLE001 - a scrape must not fail on the store
                log.warning("metrics: consumer group offsets not read: %s", exc)
        yield current
        yield lag


__all__ = ["BrokerMetrics", "LogCollector"]
