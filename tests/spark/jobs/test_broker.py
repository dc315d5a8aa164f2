"""Incremental jobs through a real broker process (``bootstrap_servers``): records
produced over TCP, offsets planned from the broker, data read from storage; the
application's committed offsets and lag shown by ``sparklog groups describe``."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")
pytest.importorskip("deltalake", reason="deltalake is not installed")

from sparklog.cli.main import main
from sparklog.clients.admin import Admin
from sparklog.clients.producer import Producer
from sparklog.spark.jobs import describe_application, run_incremental
from tests.support.brokerproc import BrokerProcess
from tests.support.jobs import SQL, assert_exactly_once

pytestmark = pytest.mark.spark


def produce(address: str, counts: dict, start: dict) -> None:
    """Send records ``events/<p>/<offset>`` to each partition, in order."""
    with Producer(address) as producer:
        for p, n in counts.items():
            for o in range(start.get(p, 0), start.get(p, 0) + n):
                producer.send("events", value=f"events/{p}/{o}".encode(), key=b"k",
                              partition=p)
        producer.flush()


def test_job_through_a_broker_and_groups_describe(spark, storage_root, tmp_path, capsys):
    out = (tmp_path / "out").as_uri()
    with BrokerProcess(storage_root, log_path=tmp_path / "broker.log") as broker:
        with Admin(broker.address) as admin:
            admin.create_topic("events", 2)
        produce(broker.address, {0: 12, 1: 7}, {})
        r0 = run_incremental(spark, app_id="via-broker", subscribe="events",
                             bootstrap_servers=broker.address, output=out, format="delta",
                             transform=SQL)
        assert (r0.version, r0.input_records) == (0, 19)
        produce(broker.address, {1: 5}, {1: 7})
        r1 = run_incremental(spark, app_id="via-broker", subscribe="events",
                             bootstrap_servers=broker.address, output=out, format="delta",
                             transform=SQL)
        assert [(r.partition, r.from_offset, r.until_offset) for r in r1.ranges] == [(1, 7, 12)]
        assert_exactly_once(out, "delta", "via-broker", {("events", 0): 12, ("events", 1): 12})
        produce(broker.address, {0: 3}, {0: 12})
        d = describe_application(out, "via-broker", bootstrap_servers=broker.address)
        assert [(p.partition, p.current_offset, p.log_end_offset, p.lag)
                for p in d.partitions] == [(0, 12, 15, 3), (1, 12, 12, 0)]
        capsys.readouterr()
        assert main(["groups", "describe", "--output", out,
                     "--bootstrap-server", broker.address]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split()[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                        "LOG-END-OFFSET", "LAG"]
        assert [line.split() for line in lines[1:]] == [
            ["via-broker", "events", "0", "12", "15", "3", "-", "-", "etl-delta-txn1"],
            ["via-broker", "events", "1", "12", "12", "0", "-", "-", "etl-delta-txn1"]]
