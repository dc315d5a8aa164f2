"""Records the broker refuses: every refused partition write of a Produce request is
counted in ``sparklog_network_requestmetrics_errors_total{request="Produce",
error=<Kafka name>}`` and in its topic's
``sparklog_server_brokertopicmetrics_failedproducerequests_total`` and,
when it refuses data for good (not a retriable error like NOT_LEADER_OR_FOLLOWER),
logged as a WARNING naming the topic-partition, the error (with the sizes it involves)
and the client. Warnings are rate-limited per topic-partition and error: one, then at
most one per ``interval`` seconds saying how many were not logged in between. An
embedded broker logs them at DEBUG instead: its in-process client reports each refusal
to its caller already."""

from __future__ import annotations

import logging
import threading
import time

from ..errors import SparklogError, error_name

log = logging.getLogger(__name__)


class RefusalLog:
    """See the module docstring. ``metrics`` is the broker's BrokerMetrics (or None);
    ``level`` the logging level of the refusal lines."""

    def __init__(self, metrics=None, interval: float = 10.0, clock=time.monotonic,
                 level: int = logging.WARNING):
        self.metrics = metrics
        self.level = level
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple, list] = {}  # (topic, partition, name) -> [time, suppressed]

    def refused(self, api: str, topic: str, partition: int, error: BaseException,
                size: int, client: str) -> None:
        """Count (and maybe log) one refused partition write of ``size`` request bytes
        from ``client`` (``host (client id)``)."""
        code = error.code if isinstance(error, SparklogError) else -1
        name = error_name(code)
        if self.metrics is not None:
            self.metrics.refused(api, topic, name)
        if isinstance(error, SparklogError) and error.retriable:
            return
        key = (topic, partition, name)
        now = self.clock()
        with self._lock:
            entry = self._last.get(key)
            if entry is not None and now - entry[0] < self.interval:
                entry[1] += 1
                return
            suppressed = entry[1] if entry is not None else 0
            if len(self._last) >= 4096:
                self._last.clear()
            self._last[key] = [now, 0]
        more = f" ({suppressed} more since the last warning)" if suppressed else ""
        log.log(self.level, "%s to %s-%d from %s refused: %s: %d bytes of records: %s%s", api, topic,
                    partition, client, name, size, error, more)


__all__ = ["RefusalLog"]
