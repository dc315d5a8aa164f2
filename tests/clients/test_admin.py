"""The Admin client and sparklog.connect over real brokers: topics (raw and typed),
configs, partitions, offsets, groups, schema specs, and errors naming what was wrong."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

import sparklog
from sparklog.clients.admin import NewTopic, parse_schema, schema_to_spec
from sparklog.clients.types import TopicPartition
from sparklog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

_names = itertools.count()


def name():
    return f"a{next(_names)}"


def test_create_list_describe_delete(admin):
    t1, t2 = name(), name()
    admin.create_topics([NewTopic(t1, 3, {"retention.ms": 60000}), t2])
    assert {t1, t2} <= set(admin.list_topics())
    d1, d2 = admin.describe_topics([t1, t2])
    assert (d1.name, len(d1.partitions), d1.typed) == (t1, 3, False)
    assert [p.partition for p in d1.partitions] == [0, 1, 2]
    assert all(p.leader == 0 for p in d1.partitions)
    assert d1.configs["retention.ms"] == 60000 and d1.explicit == ["retention.ms"]
    assert len(d2.partitions) == 1  # the broker's num.partitions
    admin.delete_topics([t1])
    assert t1 not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError, match=t1):
        admin.describe_topics([t1])


def test_create_errors_name_the_problem(admin):
    t = name()
    admin.create_topic(t)
    with pytest.raises(TopicExistsError, match=t):
        admin.create_topic(t)
    with pytest.raises(InvalidTopicError, match="illegal characters"):
        admin.create_topic("has space")
    with pytest.raises(InvalidTopicError, match="not allowed"):
        admin.create_topic("..")
    with pytest.raises(InvalidConfigError, match="retention.mss"):
        admin.create_topic(name(), 1, {"retention.mss": 5})
    with pytest.raises(InvalidArgumentError, match="num_partitions"):
        admin.create_topic(name(), 0)
    with pytest.raises(UnknownTopicOrPartitionError, match="ghost"):
        admin.delete_topics(["ghost"])
    admin.create_topics([NewTopic(name(), 2)], validate_only=True)


def test_typed_topic_from_spec_round_trips_its_schema(admin):
    t = name()
    spec = "id int64 not null, name string, tags list<string>, at timestamp[ms, tz=UTC]"
    admin.create_topic(t, 1, schema=spec)
    (d,) = admin.describe_topics([t])
    assert d.typed and d.schema == parse_schema(spec)
    assert schema_to_spec(d.schema) == spec


def test_alter_configs_and_create_partitions(admin):
    t = name()
    admin.create_topic(t, 1)
    admin.alter_configs({t: {"retention.ms": 1234, "cleanup.policy": "compact"}})
    assert admin.describe_configs(t)[t]["retention.ms"] == 1234
    admin.alter_configs({}, delete={t: ["retention.ms"]})
    configs = admin.describe_configs([t])[t]
    assert configs["retention.ms"] == 7 * 24 * 3600 * 1000 and configs["cleanup.policy"] == "compact"
    admin.create_partitions(t, 4)
    assert len(admin.describe_topics(t)[0].partitions) == 4
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        admin.alter_configs({t: {"cleanup.policy": "shred"}})
    with pytest.raises(Exception, match="partition"):
        admin.create_partitions(t, 2)  # shrinking is refused


def test_list_offsets_and_group_offsets(broker, admin):
    t = name()
    admin.create_topic(t, 2)
    with sparklog.Producer(broker.address) as p:
        for i in range(5):
            p.send(t, b"v", partition=1, timestamp=100 * (i + 1))
        p.flush(10)
    tp0, tp1 = TopicPartition(t, 0), TopicPartition(t, 1)
    found = admin.list_offsets({tp0: "latest", (t, 1): "earliest"})
    assert (found[tp0].offset, found[tp1].offset) == (0, 0)
    assert admin.list_offsets({tp1: "latest"})[tp1].offset == 5
    assert admin.list_offsets({tp1: 250})[tp1].offset == 2
    assert admin.list_offsets({tp1: 10**12})[tp1].offset == -1
    with pytest.raises(InvalidArgumentError, match="earliest"):
        admin.list_offsets({tp1: "soonest"})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.list_offsets({TopicPartition(t, 9): "latest"})
    group = f"grp{next(_names)}"
    with sparklog.Consumer(bootstrap_servers=broker.address, group_id=group) as c:
        c.assign([tp1])
        c.commit({tp1: 3})
    assert admin.list_consumer_group_offsets(group)[tp1].offset == 3
    assert group in dict(admin.list_consumer_groups())
    (g,) = admin.describe_consumer_groups(group)
    assert g.group_id == group and g.members == []


def test_schema_spec_parser():
    s = parse_schema("a int32, b double not null, c decimal128(10, 2), "
                     "d struct<x: int64, y string>, e bool, f binary, g date")
    assert s.field("b").nullable is False
    assert s.field("c").type == pa.decimal128(10, 2)
    assert s.field("d").type == pa.struct([("x", pa.int64()), ("y", pa.string())])
    assert s.field("g").type == pa.date32()
    assert parse_schema('[{"name": "n", "type": "int16", "nullable": false}]') == \
        pa.schema([pa.field("n", pa.int16(), False)])
    assert parse_schema(schema_to_spec(s)) == s
    for bad, msg in [("a int32, a int64", "duplicate"), ("a", "name type"),
                     ("a whatever", "unknown column type"), ("[{\"name\": 1}]", "JSON"),
                     ("", "non-empty")]:
        with pytest.raises(InvalidArgumentError, match=msg):
            parse_schema(bad)


def test_connect_embedded_session(tmp_path):
    uri = (tmp_path / "log").as_uri()
    with sparklog.connect(uri) as session:
        assert session.embedded and session.bootstrap_servers.startswith("127.0.0.1:")
        session.admin().create_topic("events", 2)
        producer = session.producer(linger_ms=0)
        meta = producer.send("events", b"hello", key=b"k").get(10)
        with sparklog.connect(uri) as again:  # one embedded broker per storage
            assert again.bootstrap_servers == session.bootstrap_servers
        consumer = session.consumer("events", auto_offset_reset="earliest")
        records = []
        for _ in range(50):
            for rs in consumer.poll(timeout_ms=100).values():
                records += rs
            if records:
                break
        assert [(r.partition, r.offset, r.value) for r in records] == \
            [(meta.partition, 0, b"hello")]
    # the data outlives the session: a new embedded broker recovers it
    with sparklog.connect(uri) as session:
        assert session.admin().list_offsets(
            {("events", meta.partition): "latest"})[("events", meta.partition)].offset == 1
    with pytest.raises(InvalidArgumentError, match="scheme"):
        sparklog.connect("s3://bucket/log")
    with pytest.raises(InvalidArgumentError, match="storage URI"):
        sparklog.connect("")


def test_connect_to_a_remote_broker(broker):
    with sparklog.connect(broker.address) as session:
        assert not session.embedded and session.broker is None
        assert isinstance(session.admin().list_topics(), list)
