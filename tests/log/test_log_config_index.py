"""LogConfig (Kafka names), the sparse offset/time indexes and segment file names."""

from __future__ import annotations

import pytest

from sparklog.errors import CorruptRecordError, InvalidConfigError
from sparklog.log import LOG_CONFIGS, LogConfig, OffsetIndex, SegmentSummary, TimeIndex
from sparklog.log.layout import parse_segment_name, segment_file_name


def test_defaults_and_kafka_names():
    config = LogConfig()
    assert config.segment_bytes == 256 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert config.message_timestamp_type == "CreateTime"
    assert set(config.to_props()) == set(LOG_CONFIGS)
    assert LogConfig.from_props(config.to_props()) == config


def test_from_props_parses_strings():
    config = LogConfig.from_props({"segment.bytes": " 1048576", "segment.ms": "60000",
                                   "message.timestamp.type": "LogAppendTime",
                                   "cleanup.policy": "compact,delete", "retention.bytes": "-1"})
    assert config.segment_bytes == 1 << 20 and config.segment_ms == 60000
    assert config.log_append_time and config.compact and config.delete
    assert config.retention_bytes == -1


@pytest.mark.parametrize("props, fragment", [
    ({"segment.byte": 10}, "unknown log config 'segment.byte'"),
    ({"segment.bytes": "ten"}, "segment.bytes='ten' is not an integer"),
    ({"segment.bytes": 10}, "segment.bytes=10 must be >= 61"),
    ({"segment.bytes": 1 << 40}, "segment.bytes=1099511627776 must be <="),
    ({"segment.ms": 0}, "segment.ms=0 must be >= 1"),
    ({"retention.ms": -2}, "retention.ms=-2 must be >= -1"),
    ({"index.interval.bytes": True}, "index.interval.bytes=True is not an integer"),
    ({"message.timestamp.type": "BrokerTime"}, "message.timestamp.type='BrokerTime' is not one of"),
    ({"cleanup.policy": 3}, "cleanup.policy=3 must be a string"),
    ({"compression.type": "gzip"}, "compression.type='gzip': sparklog keeps each batch"),
    # applied by nothing: refused rather than silently ignored
    ({"compression.type": "zstd"}, "only 'producer' is supported"),
])
def test_invalid_values_name_the_key(props, fragment):
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_props(props)
    assert fragment in str(info.value)


def test_keyword_construction_is_validated_and_unknown_keys_can_be_ignored():
    with pytest.raises(InvalidConfigError, match="max.message.bytes"):
        LogConfig(max_message_bytes=3)
    with pytest.raises(InvalidConfigError, match="mapping"):
        LogConfig.from_props([("segment.bytes", 100)])
    assert LogConfig.from_props({"x.y": 1}, ignore_unknown=True) == LogConfig()


def test_offset_index_lookup_and_round_trip():
    index = OffsetIndex(1000)
    for rel, pos in [(10, 4100), (25, 8300), (40, 12500)]:
        index.append(1000 + rel, pos)
    assert index.lookup(1000) == (1000, 0)
    assert index.lookup(1009) == (1000, 0)
    assert index.lookup(1010) == (1010, 4100)
    assert index.lookup(1039) == (1025, 8300)
    assert index.lookup(5000) == (1040, 12500)
    with pytest.raises(ValueError):
        index.append(1040, 20000)  # offsets must grow
    summary = SegmentSummary(1000, 1055, 16000, 77, 1040, 55, 4)
    data = index.to_bytes(summary)
    got_summary, got = OffsetIndex.from_bytes(data, "x.index")
    assert got_summary == summary
    assert got.entries() == index.entries()
    # the no-control flag (bit 0 of the u16 at byte 6) round-trips; 0 reads as unknown
    flagged = index.to_bytes(SegmentSummary(1000, 1055, 16000, 77, 1040, 55, 4,
                                            no_control=True))
    assert flagged[6:8] == b"\x00\x01" and data[6:8] == b"\x00\x00"
    assert OffsetIndex.from_bytes(flagged, "x.index")[0].no_control


def test_segment_summaries_say_whether_the_segment_has_control_frames(tmp_path):
    """Appends set the flag until a control frame (transaction marker) comes; a
    segment rebuilt by scanning finds the same."""
    from sparklog.format.frame import encode_frame, raw_batch
    from sparklog.format.marker import COMMIT, encode_marker
    from sparklog.log.partition import PartitionLog
    from sparklog.storage import open_fileio

    d = str(tmp_path / "p")
    with PartitionLog.open(open_fileio(tmp_path.as_uri()), d, {"segment.bytes": "1000000"}) as plog:
        plog.append(encode_frame(raw_batch([b"a", b"b"]), timestamps=[1, 2]))
        plog.roll()
        plog.append(encode_frame(raw_batch([b"c"]), timestamps=[3], producer_id=9,
                                 producer_epoch=0, base_sequence=0, transactional=True))
        plog.append(encode_marker(COMMIT, producer_id=9, producer_epoch=0, timestamp=4))
        plog.roll()
        first, second = [s.summary for s in plog.segments[:2]]
    assert (first.no_control, first.record_count) == (True, 2)
    assert (second.no_control, second.record_count) == (False, 2)


def test_time_index_lookup_and_round_trip():
    index = TimeIndex(0)
    index.maybe_append(100, 10)
    index.maybe_append(100, 20)   # same timestamp: entry moves forward
    index.maybe_append(90, 30)    # not growing: ignored
    index.maybe_append(300, 40)
    assert index.entries() == [(100, 20), (300, 40)]
    assert index.lookup(100) == 0      # records before 20 may have timestamp 100
    assert index.lookup(101) == 20
    assert index.lookup(301) == 40
    assert TimeIndex.from_bytes(index.to_bytes(), "x.timeindex").entries() == index.entries()


@pytest.mark.parametrize("damage", ["magic", "entry", "short"])
def test_corrupt_index_files_raise_with_the_path(damage):
    index = OffsetIndex(0)
    index.append(5, 100)
    data = bytearray(index.to_bytes(SegmentSummary(0, 9, 300)))
    tdata = bytearray(TimeIndex(0).to_bytes())
    if damage == "magic":
        data[0] ^= 1
        tdata[0] ^= 1
    elif damage == "entry":
        data[-1] ^= 1
        tdata[20] ^= 1
    else:
        data, tdata = data[:40], tdata[:10]
    with pytest.raises(CorruptRecordError, match="seg.index") as info:
        OffsetIndex.from_bytes(bytes(data), "seg.index")
    assert info.value.path == "seg.index"
    with pytest.raises(CorruptRecordError, match="seg.timeindex"):
        TimeIndex.from_bytes(bytes(tdata), "seg.timeindex")


def test_segment_names():
    assert segment_file_name(42) == "00000000000000000042.log"
    assert segment_file_name(7, ".index") == "00000000000000000007.index"
    assert parse_segment_name("00000000000000000042.log") == (42, ".log")
    assert parse_segment_name("00000000000000000042.log.swap") == (42, ".log.swap")
    assert parse_segment_name("42.log") is None
    assert parse_segment_name("00000000000000000042.txt") is None
    assert parse_segment_name("0000000001.leader-epoch-checkpoint") is None
