"""Compaction of a partition of both frame kinds on a broker (docs/storage.md section 11):
Kafka clients' batches of every codec (snappy in both framings) and sparklog's Arrow
frames in one compacted partition, cleaned by the broker's cleaner; the cleaned Kafka
batches are Kafka batches a Kafka consumer (librdkafka, its CRC check on) fetches as
byte ranges, and every reader gives the records it gave before minus the compacted
ones, at their offsets."""

from __future__ import annotations

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.producer import Producer
from sparklog.format.kafka_batch import KafkaRecord, decode_batch, encode_batch, iter_batches
from sparklog.log import LogReader
from sparklog.log.cleaner import CleanerCheckpoint
from sparklog.log.layout import PartitionListing
from sparklog.storage import open_fileio
from tests.server.test_kafka_batches_stored import _fetch
from tests.support.kafkaconn import (
    KafkaConn,
    librdkafka_read,
    start_with_kafka_listener,
    topic_name,
)
from tests.support.logdata import compaction_round_keys
from tests.support.waiting import wait_until

pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

T0 = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "snappy-raw", "lz4", "zstd"]


def _round(r: int) -> list[tuple[bytes, bytes, tuple]]:
    """(key, value, headers) of round ``r``'s 3 records, keys by
    :func:`tests.support.logdata.compaction_round_keys`."""
    return [(k, b"v%d-%d" % (r, i) * (1 + i), (("h", b"%d" % r),) if i == 0 else ())
            for i, k in enumerate(compaction_round_keys(r))]


def test_cleaned_kafka_batches_are_fetched_by_kafka_consumers(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    broker = start_with_kafka_listener(root, log_cleaner_backoff_ms=100,
                                       log_cleaner_process_enable="false")
    try:
        topic = topic_name("c-")
        with Admin(bootstrap_servers=broker.address) as admin:
            admin.create_topic(topic, 1, configs={
                "cleanup.policy": "compact", "segment.bytes": "1500",
                "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                "file.delete.delay.ms": "0", "index.interval.bytes": "1"})
        kafka_address = broker.broker.listener_addresses["KAFKA"]
        written: list = []  # (key, value, headers) by offset
        producer = Producer(bootstrap_servers=broker.address)
        with KafkaConn(kafka_address) as conn:
            for r in range(24):
                recs = _round(r)
                if r % 4 == 3:  # sparklog's producer: an Arrow frame
                    for k, v, h in recs:
                        producer.send(topic, value=v, key=k, headers=list(h) or None,
                                      partition=0, timestamp_ms=T0 + r)
                    producer.flush()
                else:
                    codec = CODECS[r % len(CODECS)]
                    batch = encode_batch(
                        [KafkaRecord(i, T0 + r, k, v, h) for i, (k, v, h) in enumerate(recs)],
                        compression=codec.replace("-raw", ""),
                        snappy_framing="raw" if codec == "snappy-raw" else "xerial")
                    answer = conn.produce(topic, batch)
                    assert int(answer.error_code) == 0, answer
                    assert int(answer.base_offset) == len(written)
                written.extend(recs)
        producer.close()
        fio = open_fileio(root.as_uri())
        directory = (root / "topics" / topic / "0").as_uri()

        def cleaned_to_the_active_segment() -> bool:
            logs = PartitionListing.scan(fio, directory).logs()
            return len(logs) > 2 and all(f.generation for f in logs[:-1]) and \
                CleanerCheckpoint(fio, directory).read()[0] == logs[-1].base_offset

        wait_until(cleaned_to_the_active_segment, timeout=60,
                   what="every sealed segment cleaned by the broker's cleaner")
        end = CleanerCheckpoint(fio, directory).read()[0]
        last = {k: o for o, (k, _, _) in enumerate(written) if o < end}
        expected = [(o, k, v, h) for o, (k, v, h) in enumerate(written)
                    if o >= end or last[k] == o]
        assert len(expected) < len(written)
        reader = LogReader(fio, directory)
        got = [(o, k, v, tuple((x["key"], x["value"]) for x in hs or ()))
               for b in reader.read_batches(0, reader.log_end_offset())
               for o, k, v, hs in zip(b.column("__offset").to_pylist(),
                                      b.column("key").to_pylist(),
                                      b.column("value").to_pylist(),
                                      b.column("headers").to_pylist())]
        assert got == expected
        # the cleaned segments hold Kafka batches that lost records, as Kafka batches
        frames = [f.header for f in reader.iter_frames(0, end)]
        assert {h.magic for h in frames} == {1, 2}
        assert any(h.is_kafka and h.record_count < h.last_offset_delta + 1 for h in frames)
        # a Kafka consumer's fetch: the stored Kafka batches, each one's CRC right
        fetched = _fetch(kafka_address, topic, 0)
        fetched_records = [(r.offset, r.key, r.value, r.headers)
                           for pos, _ in iter_batches(fetched)
                           for r in decode_batch(fetched, pos).records]
        assert fetched_records == expected[:len(fetched_records)] and fetched_records
        # librdkafka, checking every batch's CRC, reads the same records
        polled = [(m.offset(), m.key(), m.value(), tuple(m.headers() or ()))
                  for m in librdkafka_read(kafka_address, topic, len(expected),
                                           {"check.crcs": True})]
        assert polled == expected
    finally:
        broker.stop()
