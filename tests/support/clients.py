"""Reading topics back through the client API (:class:`sparklog.clients.consumer.Consumer`)."""

from __future__ import annotations

import time

from sparklog.clients.consumer import Consumer
from sparklog.clients.types import TopicPartition


def consume_all(address, topic, partitions, expected, timeout=20.0, **kw):
    """{partition: [ConsumerRecord]} read from the beginning until ``expected`` records."""
    out = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=address, auto_offset_reset="earliest", **kw) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        got = 0
        while got < expected and time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=200).items():
                out[tp.partition].extend(records)
                got += len(records)
        # nothing beyond what was expected shows up
        extra = c.poll(timeout_ms=300)
        assert not extra, f"unexpected extra records {extra}"
    return out
