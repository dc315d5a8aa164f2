"""Topic names, topic configs and the topic store on a file:// root."""

from __future__ import annotations

import multiprocessing as mp

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata import TopicConfig, TopicStore, validate_partition, validate_topic_name


@pytest.mark.parametrize("name", ["a", "orders", "web.clicks-v2_eu", "x" * 249])
def test_valid_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name, fragment", [
    ("", "empty"),
    (".", "not allowed"),
    ("..", "not allowed"),
    ("a/b", "illegal characters"),
    ("../etc", "illegal characters"),
    ("tab\there", "illegal characters"),
    ("nul\x00", "illegal characters"),
    ("é", "illegal characters"),
    ("x" * 250, "limit is 249"),
])
def test_invalid_names_are_named_in_the_error(name, fragment):
    with pytest.raises(InvalidTopicError, match=fragment):
        validate_topic_name(name)


def test_name_of_wrong_type():
    with pytest.raises(InvalidTopicError, match="must be a string"):
        validate_topic_name(7)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=60))
def test_every_accepted_name_is_one_safe_path_component(name):
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return
    assert "/" not in name and "\\" not in name and name not in (".", "..")
    assert all(32 < ord(c) < 127 for c in name)


def test_partition_checks():
    assert validate_partition(2, 3, "t") == 2
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 3 does not exist in topic 't'"):
        validate_partition(3, 3, "t")
    with pytest.raises(InvalidArgumentError, match="must be an int"):
        validate_partition("0", 3, "t")
    with pytest.raises(InvalidArgumentError, match="must be an int"):
        validate_partition(True, 3, "t")


def test_config_validation_names_the_key():
    with pytest.raises(InvalidConfigError, match="unknown log config .segment.byte."):
        TopicConfig("t", 1, configs={"segment.byte": 10})
    with pytest.raises(InvalidConfigError, match="segment.bytes=.big. is not an integer"):
        TopicConfig("t", 1, configs={"segment.bytes": "big"})
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        TopicConfig("t", 1, configs={"cleanup.policy": "forever"})
    with pytest.raises(InvalidArgumentError, match="partitions must be a positive int"):
        TopicConfig("t", 0)
    with pytest.raises(InvalidArgumentError, match="reserved"):
        TopicConfig("t", 1, schema=pa.schema([("__timestamp", pa.int64())]))


def test_config_json_round_trip_keeps_schema_and_configs():
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()),
                        ("ts", pa.timestamp("us", tz="UTC"))])
    config = TopicConfig("typed", 3, schema, {"segment.bytes": "1024", "retention.ms": 5})
    back = TopicConfig.from_json(config.to_json())
    assert back == config
    assert back.schema.equals(schema)
    assert back.get("segment.bytes") == 1024
    assert back.get("cleanup.policy") == "delete"


def test_store_create_describe_alter_delete(storage_root):
    store = TopicStore(storage_root)
    created = store.create_topic("events", 3, configs={"segment.bytes": 4096})
    assert store.describe_topic("events") == created
    assert store.list_topics() == ["events"]
    with pytest.raises(TopicExistsError, match="'events' already exists"):
        store.create_topic("events", 1)
    altered = store.alter_topic("events", configs={"retention.ms": 1000}, partitions=5)
    assert altered.version == 2 and altered.partitions == 5
    assert store.describe_topic("events").get("retention.ms") == 1000
    # partition directories are made when a partition is first opened, not here
    assert not store.fileio.exists(store.partition_dir("events", 4))
    with pytest.raises(InvalidArgumentError, match="can only grow"):
        store.alter_topic("events", partitions=2)
    removed = store.alter_topic("events", delete_configs=["retention.ms"])
    assert "retention.ms" not in removed.configs
    store.delete_topic("events")
    assert store.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError, match="'events' does not exist"):
        store.describe_topic("events")
    with pytest.raises(InvalidTopicError):
        store.create_topic("../escape", 1)


def _create(root, partitions, queue):
    try:
        TopicStore(root).create_topic("race", partitions)
        queue.put(("won", partitions))
    except TopicExistsError:
        queue.put(("lost", partitions))


def test_concurrent_creators_exactly_one_wins(storage_root):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_create, args=(storage_root, n + 1, queue)) for n in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = [queue.get(timeout=5) for _ in procs]
    winners = [n for outcome, n in results if outcome == "won"]
    assert len(winners) == 1
    assert TopicStore(storage_root).describe_topic("race").partitions == winners[0]
