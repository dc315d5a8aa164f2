"""Application ids, offset ranges, commit records and fault specs (no Spark job runs)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.errors import InvalidArgumentError, InvalidTopicError
from sparklog.spark.jobs import JobResult, OffsetRange, validate_app_id
from sparklog.spark.jobs.faults import ENV_VAR, InjectedFault, configured, fault_point
from sparklog.spark.jobs.offsets import advance, parse_offsets
from sparklog.spark.jobs.sink import normalize_uri, nullable_schema, parse_attempt_dir_name


@pytest.mark.parametrize("bad", ["", ".", "..", "_x", ".x", "a/b", "a b", "é", "x" * 201, 7])
def test_invalid_app_ids(bad):
    with pytest.raises(InvalidArgumentError, match="application id"):
        validate_app_id(bad)


def test_valid_app_id():
    assert validate_app_id("events-hourly.v2_1") == "events-hourly.v2_1"


def test_offset_range_checks():
    r = OffsetRange("t", 1, 5, 9)
    assert (r.count, r.topic_partition) == (4, ("t", 1))
    assert OffsetRange.from_dict(r.to_dict()) == r
    with pytest.raises(InvalidArgumentError, match="until_offset 4 < from_offset 5"):
        OffsetRange("t", 0, 5, 4)
    with pytest.raises(InvalidArgumentError, match="partition must be an int >= 0"):
        OffsetRange("t", -1, 0, 1)
    with pytest.raises(InvalidTopicError):
        OffsetRange("a/b", 0, 0, 1)
    with pytest.raises(InvalidArgumentError, match="missing field"):
        OffsetRange.from_dict({"topic": "t"})


def test_parse_offsets():
    assert parse_offsets('{"t": {"0": 3, "2": 7}}') == {("t", 0): 3, ("t", 2): 7}
    assert parse_offsets({"t": {"1": 0}}) == {("t", 1): 0}
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        parse_offsets("{")
    with pytest.raises(InvalidArgumentError, match="must be >= 0"):
        parse_offsets({"t": {"0": -2}}, "committed offsets")
    with pytest.raises(InvalidArgumentError, match="non-numeric partition"):
        parse_offsets({"t": {"x": 1}})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), max_size=20))
def test_advance_moves_partitions_forward_only(steps):
    offsets, pos = {}, {}
    for p, n in steps:
        start = pos.get(p, 0)
        offsets = advance(offsets, [OffsetRange("t", p, start, start + n)])
        pos[p] = start + n
    assert offsets == {("t", p): o for p, o in pos.items()}
    assert advance(offsets, [OffsetRange("t", 0, 0, 0)])[("t", 0)] == pos.get(0, 0)


def test_fault_spec(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert configured() is None
    fault_point("after-read")  # nothing configured: no effect
    monkeypatch.setenv(ENV_VAR, "after-files")
    assert configured() == ("after-files", "raise")
    fault_point("after-read")  # another step: no effect
    with pytest.raises(InjectedFault, match="after-files"):
        fault_point("after-files")
    monkeypatch.setenv(ENV_VAR, "after-file:kill")
    with pytest.raises(ValueError, match="after-file:kill"):
        configured()
    # pause: the step waits (a drill's window to kill the job from outside), then raises
    monkeypatch.setenv(ENV_VAR, "after-files:pause")
    monkeypatch.setattr("sparklog.spark.jobs.faults.PAUSE_SECONDS", 0.05)
    with pytest.raises(InjectedFault, match="after-files"):
        fault_point("after-files")


def test_paths_and_names(tmp_path):
    assert normalize_uri(str(tmp_path / "out")) == (tmp_path / "out").as_uri()
    assert normalize_uri("hdfs://nn:8020/a/b/") == "hdfs://nn:8020/a/b"
    assert normalize_uri("file:///") == "file:///"
    with pytest.raises(InvalidArgumentError, match="must not be empty"):
        normalize_uri("")
    assert parse_attempt_dir_name("0000000012-ab12") == (12, "ab12")
    assert parse_attempt_dir_name("_temporary") is None
    import pyarrow as pa

    s = pa.schema([pa.field("a", pa.struct([pa.field("b", pa.int32(), False)]), False),
                   pa.field("m", pa.map_(pa.string(), pa.int64())),
                   pa.field("l", pa.list_(pa.field("x", pa.string(), False)))])
    fixed = nullable_schema(s)
    assert all(f.nullable for f in fixed)
    assert fixed.field("a").type.field(0).nullable
    assert fixed.field("l").type.value_field.nullable


def test_result_summary_and_dict():
    r = JobResult("app", "file:///o", "delta", True, 3, [OffsetRange("t", 0, 10, 15)],
                  {("t", 0): 15, ("t", 1): 4}, 5, 5, 1, 1.25)
    text = r.summary()
    assert "committed transaction version 3: 5 records from 1 partition range(s) -> 5 rows" in text
    assert "t-0: offsets [10, 15)" in text and "t-0=15, t-1=4" in text
    doc = r.to_dict()
    assert doc["offsets"] == {"t": {"0": 15, "1": 4}} and doc["ranges"][0]["untilOffset"] == 15
    idle = JobResult("app", "file:///o", "parquet", False, None, [], {})
    assert "nothing new to read" in idle.summary()
