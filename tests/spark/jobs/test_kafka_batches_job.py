"""Exactly-once incremental jobs over a topic of both frame kinds (docs/storage.md
section 11): records produced by a Kafka client (confluent-kafka's idempotent producer,
through the broker's Kafka listener: Kafka record batches stored unchanged) and by
sparklog's producer (Arrow frames) in the same partitions; every run, through the
broker and from storage alone, and a run that fails before its commit followed by a
rerun, output every record exactly once."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")
pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from sparklog.clients.admin import Admin
from sparklog.clients.producer import Producer
from sparklog.log import LogReader
from sparklog.spark.jobs import run_incremental
from sparklog.spark.jobs.faults import ENV_VAR, InjectedFault
from sparklog.storage import open_fileio
from tests.support.jobs import SQL, assert_exactly_once
from tests.support.kafkaconn import start_with_kafka_listener

pytestmark = pytest.mark.spark

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def produce_mixed(broker, topic: str, written: dict, rounds: int) -> None:
    """``rounds`` rounds per partition of records ``<topic>/<p>/<offset>``: a batch of a
    Kafka client (one codec a round), then Arrow frames of sparklog's producer; each
    flushed before the next, so offsets follow the order they were sent in."""
    from confluent_kafka import Producer as CKProducer

    kafka = broker.broker.listener_addresses["KAFKA"]
    ours = Producer(bootstrap_servers=broker.address)
    try:
        for r in range(rounds):
            codec = CODECS[(written[0] + r) % len(CODECS)]
            ck = CKProducer({"bootstrap.servers": kafka, "enable.idempotence": True,
                             "compression.type": codec, "linger.ms": 5})
            errors: list = []
            for p in sorted(written):
                for _ in range(5 + r % 3):
                    ck.produce(topic, key=b"k", value=f"{topic}/{p}/{written[p]}".encode(),
                               partition=p,
                               on_delivery=lambda err, _: errors.append(err) if err else None)
                    written[p] += 1
            assert ck.flush(30) == 0 and not errors, errors
            for p in sorted(written):
                for _ in range(3):
                    ours.send(topic, value=f"{topic}/{p}/{written[p]}".encode(), key=b"k",
                              partition=p)
                    written[p] += 1
            ours.flush()
    finally:
        ours.close()


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_job_over_a_topic_of_both_kinds_outputs_every_record_once(spark, tmp_path,
                                                                  monkeypatch, fmt):
    root = tmp_path / "root"
    root.mkdir()
    out = (tmp_path / "out").as_uri()
    broker = start_with_kafka_listener(root)
    try:
        with Admin(bootstrap_servers=broker.address) as admin:
            admin.create_topic("events", 2)
        written = {0: 0, 1: 0}
        produce_mixed(broker, "events", written, 3)
        # both kinds are in the partitions' segments
        reader = LogReader(open_fileio(root.as_uri()),
                           (root / "topics" / "events" / "0").as_uri())
        assert {f.header.magic for f in reader.iter_frames(0, reader.log_end_offset())} \
            == {1, 2}
        r0 = run_incremental(spark, app_id="mixed", subscribe="events",
                             bootstrap_servers=broker.address, output=out, format=fmt,
                             transform=SQL)
        assert r0.input_records == sum(written.values())
        assert_exactly_once(out, fmt, "mixed", {("events", p): n for p, n in written.items()})
        # more of both; a run that fails before its commit, then a rerun
        produce_mixed(broker, "events", written, 2)
        monkeypatch.setenv(ENV_VAR, "before-commit:raise")
        with pytest.raises(InjectedFault):
            run_incremental(spark, app_id="mixed", subscribe="events",
                            bootstrap_servers=broker.address, output=out, format=fmt,
                            transform=SQL)
        monkeypatch.delenv(ENV_VAR)
        r1 = run_incremental(spark, app_id="mixed", subscribe="events",
                             bootstrap_servers=broker.address, output=out, format=fmt,
                             transform=SQL)
        assert r1.committed
        assert_exactly_once(out, fmt, "mixed", {("events", p): n for p, n in written.items()})
        # from storage alone (no broker on the read path), the next records
        produce_mixed(broker, "events", written, 1)
        r2 = run_incremental(spark, app_id="mixed", subscribe="events", path=root.as_uri(),
                             output=out, format=fmt, transform=SQL)
        assert r2.committed and r2.input_records == 2 * (5 + 3)
        assert_exactly_once(out, fmt, "mixed", {("events", p): n for p, n in written.items()})
    finally:
        broker.stop()
