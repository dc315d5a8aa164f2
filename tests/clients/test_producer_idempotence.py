"""The idempotent producer's state machine (:mod:`sparklog.clients.producer.idempotence`)
against a real broker process behind a loopback proxy: each transition of the producer's
identity and of a failed batch, made to happen on purpose (a refused batch, a response
held or dropped, the broker killed and restarted), checked by what the broker stored (the
producer id and sequence in each frame's header) and what the futures say.

(A retry after a dropped response, acknowledged as a duplicate with its original offset,
is in test_producer.py.)"""

from __future__ import annotations

from contextlib import contextmanager

import pyarrow as pa
import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.producer import Producer
from sparklog.errors import (
    OutOfOrderSequenceError,
    RecordTooLargeError,
    SparklogError,
    TopicExistsError,
)
from tests.support.brokerproc import BrokerProcess, log_frames, topic_with
from tests.support.clients import consume_all
from tests.support.proxy import Proxy
from tests.support.waiting import wait_until

#: the topics' limit once shrunk under the producer's feet
SHRUNK = 20_000


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """A Proxy in front of a broker process (``proxy.broker``, with ``.root`` and an
    ``.admin`` talking to it directly)."""
    root = tmp_path_factory.mktemp("idempotence")
    px = Proxy()
    with BrokerProcess((root / "log").as_uri(), log_path=root / "broker.log") as broker:
        px.target = (broker.host, broker.port)
        broker.root = root / "log"
        with Admin(broker.address) as admin:
            broker.admin = admin
            px.broker = broker
            yield px
    px.close()


def _producer(proxy, **configs) -> Producer:
    # the producer reads a topic's limits once (then the tests shrink them)
    return Producer(proxy.address, enable_idempotence=True, acks="all", linger_ms=0,
                    retry_backoff_ms=20, metadata_max_age_ms=3_600_000, **configs)


def _identity(producer) -> tuple[int, int]:
    m = producer.metrics()
    return m["producer_id"], m["producer_epoch"]


@contextmanager
def _warmed(proxy, first: bytes = b"warm", **topic_configs):
    """A new topic and an idempotent producer through the reset proxy, once ``first``
    is acknowledged: yields ``(topic, producer, identity)``."""
    topic = topic_with(proxy.broker, **topic_configs)
    proxy.reset()
    with _producer(proxy) as producer:
        producer.send(topic, first).get(20)
        yield topic, producer, _identity(producer)


def _stored(proxy, topic) -> list[tuple[int, int]]:
    """(producer id, base sequence) of each frame the broker stored for ``topic``-0."""
    return [(h.producer_id, h.base_sequence) for h in log_frames(proxy.broker, topic)]


def _shrink(proxy, topic) -> None:
    proxy.broker.admin.alter_configs({topic: {"max.message.bytes": SHRUNK}})


def _held_answers(proxy, count: int, what: str) -> None:
    wait_until(lambda: proxy.produce_responses >= count, 60,
               f"the broker's answers to {what} (held by the proxy)")


def test_init_then_a_refused_batch_hands_its_sequence_out_again(proxy):
    # UNINITIALIZED -> READY; a batch refused (known outcome) with nothing else pending:
    # its sequence goes to the next batch, the identity stays
    topic = topic_with(proxy.broker, max_message_bytes=1 << 20)
    proxy.reset()
    with _producer(proxy) as producer:
        pid, epoch = _identity(producer)
        assert pid >= 0 and epoch == 0
        assert producer.send(topic, b"warm").get(20).offset == 0
        _shrink(proxy, topic)
        with pytest.raises(RecordTooLargeError):
            producer.send(topic, b"x" * (SHRUNK + 10_000)).get(20)
        assert producer.send(topic, b"after").get(20).offset == 1
        assert _identity(producer) == (pid, epoch)
    assert _stored(proxy, topic) == [(pid, 0), (pid, 1)]


def test_a_batch_lost_with_an_unknown_outcome_bumps_the_identity(proxy):
    # READY -> BUMP_NEEDED (the response is lost and no retry is allowed: the batch may
    # be in the log) -> READY under a new producer id, sequences from 0
    topic = topic_with(proxy.broker)
    proxy.reset(drop_produce=1)
    with _producer(proxy, retries=0) as producer:
        old = _identity(producer)
        with pytest.raises(SparklogError):
            producer.send(topic, b"appended, unacknowledged").get(20)
        assert proxy.dropped == 1
        assert producer.send(topic, b"after").get(20).offset == 1
        new = _identity(producer)
    assert new[0] != old[0]
    assert _stored(proxy, topic) == [(old[0], 0), (new[0], 0)]
    got = consume_all(proxy.broker.address, topic, 1, 2)[0]
    assert [r.value for r in got] == [b"appended, unacknowledged", b"after"]


def test_out_of_order_behind_a_failed_batch_is_resequenced(proxy):
    # a batch refused for good while a later one is in flight: BUMP_NEEDED; the later
    # one comes back OutOfOrderSequence (the gap is the refused batch) and is sent again
    # under the new identity (RESEQUENCE)
    with _warmed(proxy, max_message_bytes=1 << 20) as (topic, producer, old):
        _shrink(proxy, topic)
        proxy.hold.set()  # both requests reach the broker before any answer returns
        big = producer.send(topic, b"x" * (SHRUNK + 10_000))
        small = producer.send(topic, b"small")
        _held_answers(proxy, 3, "the warm-up, the big and the small batch")
        proxy.hold.clear()
        with pytest.raises(RecordTooLargeError):
            big.get(20)
        assert small.get(20).offset == 1
        new = _identity(producer)
    assert new[0] != old[0]
    assert proxy.produce_requests == 4  # warm, big, small, small re-sequenced
    assert _stored(proxy, topic) == [(old[0], 0), (new[0], 0)]


def test_out_of_order_behind_a_split_batch_is_retried_unchanged(proxy):
    # a frame of 300 records refused as too large is split in halves (keeping its
    # sequence range) while a later batch is in flight: that one comes back
    # OutOfOrderSequence with an earlier batch pending (RETRY): the same bytes are sent
    # again after the halves, under the same identity
    values = [b"%03d" % i + b"." * 97 for i in range(300)]
    with _warmed(proxy, max_message_bytes=1 << 20) as (topic, producer, identity):
        _shrink(proxy, topic)
        proxy.hold.set()
        frame = producer.send_batch(topic, pa.table({"value": values}))
        small = producer.send(topic, b"small")
        _held_answers(proxy, 3, "the warm-up, the 300 records and the small batch")
        proxy.hold.clear()
        assert [m.base_offset for m in frame.get(20)] == [1, 151]  # its halves
        assert small.get(20).offset == 301
        assert _identity(producer) == identity
    pid = identity[0]
    assert _stored(proxy, topic) == [(pid, 0), (pid, 1), (pid, 151), (pid, 301)]
    got = consume_all(proxy.broker.address, topic, 1, 302)[0]
    assert [r.value for r in got] == [b"warm", *values, b"small"]


def test_a_partition_that_forgot_the_producer_gets_a_new_identity(proxy):
    # the topic is deleted and created again: the new partition knows nothing of the
    # producer, whose next sequence is not 0: OutOfOrderSequence with nothing of ours
    # pending fails that batch and bumps the identity (READY -> BUMP_NEEDED), so the
    # next batch starts a new producer at sequence 0 instead of being refused forever
    with _warmed(proxy, b"before") as (topic, producer, old):
        proxy.broker.admin.delete_topics([topic])
        wait_until(lambda: proxy.broker.admin.create_topic(topic, 1) or True,
                   what=f"{topic} created again", ignore=(TopicExistsError,))
        with pytest.raises(OutOfOrderSequenceError, match="must start at sequence 0"):
            producer.send(topic, b"refused").get(20)
        assert producer.send(topic, b"after").get(20).offset == 0
        new = _identity(producer)
    assert new[0] != old[0]
    assert _stored(proxy, topic) == [(new[0], 0)]


def test_a_retry_after_the_broker_crashed_is_a_duplicate(proxy):
    # the broker appends a batch and is killed (SIGKILL) before its answer reaches the
    # producer; the retry goes to the restarted broker, whose producer state was
    # recovered from the log: acknowledged with the original offset, stored once,
    # identity unchanged
    with _warmed(proxy) as (topic, producer, identity):
        proxy.hold.set()
        future = producer.send(topic, b"appended before the crash")
        _held_answers(proxy, 2, "the warm-up and the batch")
        proxy.broker.kill()
        proxy.broker.start()
        proxy.drop_produce = proxy.dropped + 1  # the held answer never arrives
        proxy.hold.clear()
        assert future.get(60).offset == 1
        assert _identity(producer) == identity
    assert _stored(proxy, topic) == [(identity[0], 0), (identity[0], 1)]
