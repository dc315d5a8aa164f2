"""Kafka's unit variants of the broker's time settings (``log.retention.hours``,
``.minutes``, ``log.roll.hours``, ``log.roll.jitter.*``) with Kafka's precedence, and
the topic's ``segment.jitter.ms``."""

from __future__ import annotations

import logging

import pytest

from sparklog.errors import InvalidConfigError
from sparklog.log import PartitionLog
from sparklog.log.config import LogConfig
from sparklog.protocol import ApiKey, Connection
from sparklog.retention import apply_retention
from sparklog.server import BrokerConfig, EmbeddedBroker, parse_properties
from sparklog.storage import open_fileio
from tests.support.logfiles import typed_frame
from tests.support.wire import create

HOUR = 3_600_000
DAY = 24 * HOUR

#: the log section of Kafka's shipped config/server.properties, retention set to 30 days
KAFKA_SERVER_PROPERTIES = """\
############################# Log Retention Policy #############################
# The minimum age of a log file to be eligible for deletion due to age
log.retention.hours=720
# A size-based retention policy for logs.
#log.retention.bytes=1073741824
# The maximum size of a log segment file.
log.segment.bytes=1073741824
# The interval at which log segments are checked to see if they can be deleted
log.retention.check.interval.ms=300000
"""


def test_a_copied_kafka_server_properties_keeps_30_days(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sparklog.server.config"):
        config = BrokerConfig.from_props(parse_properties(KAFKA_SERVER_PROPERTIES))
    assert not caplog.records  # nothing "supplied but not a known broker config"
    assert config.log_defaults["retention.ms"] == 30 * DAY
    assert config.retention_check_interval_ms == 300000
    # a partition log under these defaults: segments of 20 and 40 days ago, and today's
    now = 100 * DAY
    log_config = LogConfig.from_props({**config.log_defaults, "segment.bytes": 1 << 20})
    with PartitionLog.open(open_fileio(tmp_path.as_uri()), str(tmp_path / "p"),
                           log_config) as plog:
        for i, age in enumerate([40 * DAY, 20 * DAY, 0]):
            plog.append(typed_frame([i], [now - age]))
            plog.roll()
        assert [s.base_offset for s in plog.segments] == [0, 1, 2, 3]
        apply_retention(plog, now)
        # 7 days (Kafka's default, what an ignored log.retention.hours left) would keep 2
        assert plog.log_start_offset == 1


@pytest.mark.parametrize("props, key, value", [
    ({"log.retention.hours": "1"}, "retention.ms", HOUR),
    ({"log.retention.minutes": "5"}, "retention.ms", 5 * 60_000),
    ({"log.retention.ms": "1234"}, "retention.ms", 1234),
    ({"log.retention.hours": "1", "log.retention.minutes": "5"}, "retention.ms", 5 * 60_000),
    ({"log.retention.minutes": "5", "log.retention.ms": "1234"}, "retention.ms", 1234),
    ({"log.retention.hours": "1", "log.retention.minutes": "5", "log.retention.ms": "99"},
     "retention.ms", 99),
    ({"log.retention.hours": "-1"}, "retention.ms", -1),      # Kafka: no limit
    ({"log.retention.ms": "-5"}, "retention.ms", -1),
    ({"log.retention.ms": "-1", "log.retention.hours": "2"}, "retention.ms", -1),
    ({"log.roll.hours": "2"}, "segment.ms", 2 * HOUR),
    ({"log.roll.hours": "2", "log.roll.ms": "500"}, "segment.ms", 500),
    ({"log.roll.jitter.hours": "1"}, "segment.jitter.ms", HOUR),
    ({"log.roll.jitter.hours": "1", "log.roll.jitter.ms": "10"}, "segment.jitter.ms", 10),
    ({"log.cleaner.delete.retention.ms": "10"}, "delete.retention.ms", 10),
    ({"log.segment.delete.delay.ms": "0"}, "file.delete.delay.ms", 0),
    ({"log.cleaner.min.cleanable.ratio": "0.1"}, "min.cleanable.dirty.ratio", 0.1),
])
def test_unit_variants_with_kafkas_precedence(props, key, value):
    assert BrokerConfig.from_props(props).log_defaults == {key: value}


@pytest.mark.parametrize("props, message", [
    ({"log.retention.hours": "1.5"}, "log.retention.hours='1.5' is not an integer"),
    ({"log.roll.hours": "0"}, "log.roll.hours=0: log config segment.ms=0 must be >= 1"),
    ({"log.roll.jitter.ms": "-1"}, "log.roll.jitter.ms=-1: .*must be >= 0"),
    ({"segment.jitter.ms": "5"}, "topic config.*log.roll.jitter.ms"),
])
def test_bad_unit_variants_name_the_key(props, message):
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_props(props)


def test_the_broker_shows_the_effective_retention(storage_root):
    props = {"log.retention.hours": "720", "log.roll.hours": "24"}
    with EmbeddedBroker(storage_root, props) as broker, Connection(broker.address) as c:
        create(c, "units")
        res = c.request(ApiKey.DESCRIBE_CONFIGS, {"topics": ["units"]})["topics"][0]
        assert res["configs"]["retention.ms"] == 30 * DAY
        assert res["configs"]["segment.ms"] == DAY
        assert res["configs"]["segment.jitter.ms"] == 0 and res["explicit"] == []


def test_segment_jitter_rolls_each_segment_up_to_that_much_early(tmp_path):
    fio = open_fileio(tmp_path.as_uri())
    config = {"segment.ms": 1000, "segment.jitter.ms": 1000}
    with PartitionLog.open(fio, str(tmp_path / "p"), config, clock=lambda: 0) as plog:
        plog.append(typed_frame([0], [10_000]))
        jitter = plog._roll_jitter(plog.active_segment)
        assert 0 <= jitter < 1000 and plog._roll_jitter(plog.active_segment) == jitter
        # rolled once segment.ms minus this segment's jitter has passed in record time
        plog.append(typed_frame([1], [10_000 + 1000 - jitter + 1]))
        assert [s.base_offset for s in plog.segments] == [0, 1]
    with PartitionLog.open(fio, str(tmp_path / "q"), {"segment.ms": 1000},
                           clock=lambda: 0) as plog:
        plog.append(typed_frame([0], [10_000]))
        plog.append(typed_frame([1], [10_999]))  # no jitter: Kafka's plain segment.ms
        assert [s.base_offset for s in plog.segments] == [0]


def test_compression_type_other_than_producer_is_refused_at_both_levels():
    """Nothing recompresses batches: a broker or topic compression.type other than
    Kafka's default ``producer`` is refused, naming the key, instead of being ignored."""
    assert BrokerConfig.from_props({"compression.type": "producer"}).log_defaults.get(
        "compression.type", "producer") == "producer"
    with pytest.raises(InvalidConfigError, match=r"compression.type='lz4'.*only 'producer'"):
        BrokerConfig.from_props({"compression.type": "lz4"})
