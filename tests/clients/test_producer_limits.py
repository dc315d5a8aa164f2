"""The producer's frame sizes over a real broker process: frames respect batch.size,
max.request.size and the topic's max.message.bytes and segment.bytes; a batch the
broker refuses as too large is split and retried (idempotent or not); a record too
large for any frame fails alone with a clear error; the broker logs and counts each
refusal. A hypothesis property test runs random record sizes and settings."""

from __future__ import annotations

import os
import random
import re
import time
import urllib.request

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparklog.clients.producer import Producer
from sparklog.errors import RecordTooLargeError
from sparklog.format.frame import encode_frame, raw_batch
from tests.support.brokerproc import log_frames, topic_with
from tests.support.clients import consume_all


def metric(broker, name: str, **labels) -> float:
    """The value of one sample of the broker's /metrics (0 when absent)."""
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line
                                               for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_default_producer_fills_a_topic_with_1mib_segments(metered_broker):
    # issue #17: with default settings, 48,246 of 50,000 keyed lines failed with
    # "frame of 1193069 bytes exceeds segment.bytes=1048576"
    topic = topic_with(metered_broker, segment_bytes=1048576)
    rnd = random.Random(17)
    lines = [(b"key-%d" % i, b"line %d " % i + b"x" * rnd.randint(0, 60)) for i in range(50_000)]
    with Producer(metered_broker.address) as producer:
        futures = [producer.send(topic, v, key=k) for k, v in lines]
        producer.flush(120)
        failed = [f.exception for f in futures if f.failed()]
        assert failed == []
        offsets = [f.get(0).offset for f in futures]
    assert offsets == list(range(len(lines)))
    got = consume_all(metered_broker.address, topic, 1, len(lines), timeout=60)[0]
    assert [(r.offset, r.key, r.value) for r in got] == \
        [(i, k, v) for i, (k, v) in enumerate(lines)]
    frames = log_frames(metered_broker, topic)
    assert sum(h.record_count for h in frames) == len(lines)
    # every frame holds at most batch.size (16 KiB) of records
    assert max(h.size for h in frames) <= 16384


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_send_batch_frames_fit_segment_and_message_limits(metered_broker, codec):
    topic = topic_with(metered_broker, segment_bytes=64 * 1024, max_message_bytes=48 * 1024)
    n = 30_000
    rnd = random.Random(3)
    values = [os.urandom(rnd.randint(0, 200)) for _ in range(n)]
    table = pa.table({"value": pa.array(values, pa.binary()),
                      "key": pa.array([b"%d" % i for i in range(n)], pa.binary())})
    with Producer(metered_broker.address, compression_type=codec) as producer:
        metas = producer.send_batch(topic, table, partition=0).get(60)
    assert sum(m.record_count for m in metas) == n
    assert [m.base_offset for m in metas] == \
        [sum(m.record_count for m in metas[:i]) for i in range(len(metas))]
    frames = log_frames(metered_broker, topic)
    assert max(h.size for h in frames) <= 48 * 1024
    got = consume_all(metered_broker.address, topic, 1, n, timeout=60)[0]
    assert [r.value for r in got] == values


@pytest.mark.parametrize("idempotent", [False, True])
def test_broker_refusal_splits_the_batch_and_retries(metered_broker, idempotent):
    # the producer learned max.message.bytes=1 MiB; the topic's limit then shrinks, so
    # the broker refuses its frames (MESSAGE_TOO_LARGE): the producer splits them
    topic = topic_with(metered_broker, max_message_bytes=1 << 20)
    before = metric(metered_broker, "sparklog_network_requestmetrics_errors_total",
                    request="Produce", error="MESSAGE_TOO_LARGE")
    n = 3000
    with Producer(metered_broker.address, batch_size=512 * 1024, linger_ms=50,
                  enable_idempotence=idempotent, client_id=f"splitter-{idempotent}",
                  metadata_max_age_ms=3_600_000) as producer:
        producer.send(topic, b"warm").get(10)
        metered_broker.admin.alter_configs({topic: {"max.message.bytes": 20_000}})
        futures = [producer.send(topic, b"%05d" % i + b"." * 95) for i in range(n)]
        producer.flush(60)
        assert [f.exception for f in futures if f.failed()] == []
        assert [f.get(0).offset for f in futures] == list(range(1, n + 1))
    got = consume_all(metered_broker.address, topic, 1, n + 1, timeout=60)[0]
    assert [r.value[:5] for r in got[1:]] == [b"%05d" % i for i in range(n)]
    assert max(h.size for h in log_frames(metered_broker, topic)) <= 20_000
    after = metric(metered_broker, "sparklog_network_requestmetrics_errors_total",
                   request="Produce", error="MESSAGE_TOO_LARGE")
    assert after > before
    warning = re.compile(rf"WARNING.*Produce to {topic}-0 from 127\.0\.0\.1 "
                         rf"\(splitter-{idempotent}\) refused: MESSAGE_TOO_LARGE: \d+ bytes.*"
                         rf"over the limit of 20000 bytes")
    assert any(warning.search(line) for line in metered_broker.log_text().splitlines())


def test_a_record_too_large_for_any_frame_fails_alone(metered_broker):
    topic = topic_with(metered_broker, max_message_bytes=50_000)
    with Producer(metered_broker.address, compression_type="zstd", linger_ms=100) as producer:
        small = [producer.send(topic, b"small-%d" % i) for i in range(10)]
        big = producer.send(topic, os.urandom(60_000))  # zstd cannot shrink it
        squeezable = producer.send(topic, b"\0" * 200_000)  # compressed, it fits
        more = [producer.send(topic, b"after-%d" % i) for i in range(10)]
        producer.flush(30)
        with pytest.raises(RecordTooLargeError,
                           match=r"frame of 6\d{4} bytes .*over the largest frame the "
                                 r"producer may send: 50000 bytes .*max.message.bytes=50000"):
            big.get(0)
        offsets = [f.get(0).offset for f in small + [squeezable] + more]
    assert offsets == list(range(21))
    with Producer(metered_broker.address) as producer:  # uncompressed: refused at once
        with pytest.raises(RecordTooLargeError, match=r"record of 60000 bytes .* 50000 bytes"):
            producer.send(topic, b"x" * 60_000)


# --- property: any sizes and settings ------------------------------------------------------

_SETTINGS = st.fixed_dictionaries({
    "compression_type": st.sampled_from(["none", "lz4", "zstd"]),
    "batch_size": st.one_of(st.integers(1, 64 * 1024), st.just(256 * 1024)),
    "linger_ms": st.sampled_from([0, 1, 5]),
    "max_request_size": st.integers(8 * 1024, 128 * 1024),
    "max_message_bytes": st.integers(8 * 1024, 128 * 1024),
    "segment_bytes": st.integers(8 * 1024, 128 * 1024),
    "enable_idempotence": st.booleans(),
    "stale": st.booleans(),  # the broker's limit shrinks after the producer learned it
})
_RECORDS = st.lists(st.tuples(
    st.one_of(st.integers(0, 200), st.integers(0, 140 * 1024)),  # value size, mostly small
    st.booleans(),  # keyed
    st.booleans(),  # with a header
    st.booleans(),  # compressible content
), min_size=1, max_size=60)


def _single_frame(key, value, headers, codec) -> int:
    """Size of the frame of this record alone: what decides whether it fits."""
    return len(encode_frame(raw_batch([value], None if key is None else [key],
                                      None if headers is None else [headers]),
                            timestamps=[0], compression=codec))


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(config=_SETTINGS, specs=_RECORDS, bulk=st.integers(0, 400))
# found in CI: an idempotent producer whose record fails for good (too large for the
# shrunk limit) while later batches are in flight must resend those under its new
# identity, not fail them with OutOfOrderSequence
@example(config={"compression_type": "none", "batch_size": 262144, "linger_ms": 0,
                 "max_request_size": 8192, "max_message_bytes": 8192, "segment_bytes": 8192,
                 "enable_idempotence": True, "stale": True},
         specs=[(0, False, False, False)] * 30 + [(3057, False, False, False)], bulk=19)
def test_property_every_acknowledged_record_reads_back(metered_broker, config, specs, bulk):
    started = time.monotonic()
    config = dict(config)
    stale = config.pop("stale")
    mmb, seg = config.pop("max_message_bytes"), config.pop("segment_bytes")
    known = mmb
    if stale:  # the producer learns no binding max.message.bytes, then it shrinks
        known = min(config["max_request_size"], seg)
        mmb = max(4096, min(mmb, known // 2))
    topic = topic_with(metered_broker, max_message_bytes=known, segment_bytes=seg)
    rnd = random.Random(len(specs) + bulk)
    for _ in range(bulk):  # small records among the generated ones, to fill batches
        specs.insert(rnd.randrange(len(specs) + 1), (rnd.randrange(200), True, False, False))
    records = []
    for i, (size, keyed, header, squeezable) in enumerate(specs):
        value = b"\1" * size if squeezable else rnd.randbytes(size)
        records.append((b"k%d" % i if keyed else None, value,
                        [("h", b"%d" % i)] if header else None))
    limit = min(config["max_request_size"], mmb, seg)
    fits = [_single_frame(k, v, h, config["compression_type"]) <= limit
            for k, v, h in records]
    with Producer(metered_broker.address, **config) as producer:
        producer.send(topic, b"").get(10)  # the producer learns the topic's limits
        if stale:
            metered_broker.admin.alter_configs({topic: {"max.message.bytes": mmb}})
        futures = []
        for key, value, headers in records:
            try:
                futures.append(producer.send(topic, value, key=key, headers=headers))
            except RecordTooLargeError as exc:  # refused at once (uncompressed, too large)
                futures.append(exc)
        producer.flush(60)
    outcomes = []
    for f in futures:
        if isinstance(f, Exception):
            outcomes.append(f)
        else:
            assert f.is_done
            outcomes.append(f.exception if f.failed() else f.get(0).offset)
    for ok, outcome, (key, value, _) in zip(fits, outcomes, records):
        if ok:  # no record refused that a frame could carry
            assert isinstance(outcome, int), (len(value), limit, outcome)
        else:
            assert isinstance(outcome, RecordTooLargeError), (len(value), limit, outcome)
            assert re.search(r"\d+ bytes", str(outcome))
    acked = {o: r for o, r in zip(outcomes, records) if isinstance(o, int)}
    got = consume_all(metered_broker.address, topic, 1, len(acked) + 1, timeout=60,
                      max_partition_fetch_bytes=1 << 20)[0]
    assert {r.offset: (r.key, r.value, r.headers or None) for r in got[1:]} == acked
    for h in log_frames(metered_broker, topic):  # no frame over a limit, batches within batch.size
        assert h.size <= limit
        if h.record_count > 1:
            assert h.size <= config["batch_size"]
    assert time.monotonic() - started < 60
