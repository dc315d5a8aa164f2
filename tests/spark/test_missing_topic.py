"""A batch read of a topic that does not exist fails naming it (issue 32); a stream
subscribed to it waits for it, as Kafka's source does."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from sparklog.errors import UnknownTopicOrPartitionError
from sparklog.spark.source.catalog import StorageCatalog
from sparklog.spark.source.options import parse_options
from sparklog.spark.source.planning import plan_batch, subscribed_partitions
from tests.support.logdata import make_topic
from tests.support.sparkread import load


def test_planning_a_batch_of_a_missing_topic_names_it(storage_root):
    make_topic(storage_root, "here", partitions=1, count=3)
    cat = StorageCatalog(storage_root)
    with pytest.raises(UnknownTopicOrPartitionError,
                       match=r"subscribed topic 'nope' does not exist"):
        plan_batch(cat, parse_options({"path": storage_root, "subscribe": "nope"}))
    with pytest.raises(UnknownTopicOrPartitionError,
                       match=r"subscribed topics 'nope', 'gone' do not exist"):
        plan_batch(cat, parse_options({"path": storage_root, "subscribe": "here,nope,gone"}))
    # a stream's planning (the default) skips it until it is created
    sub = parse_options({"path": storage_root, "subscribe": "here,nope"}).subscription
    assert subscribed_partitions(cat, sub) == {"here": [0]}


@pytest.mark.spark
def test_a_batch_read_of_a_missing_topic_fails_naming_it(sl_spark, storage_root):
    make_topic(storage_root, "here", partitions=1, count=3)
    assert load(sl_spark, storage_root, subscribe="here").count() == 3
    with pytest.raises(Exception, match=r"subscribed topic 'nope' does not exist"):
        load(sl_spark, storage_root, subscribe="nope").count()
