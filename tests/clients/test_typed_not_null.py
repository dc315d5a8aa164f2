"""``not null`` fields of typed topics over a real broker process: the producer refuses
a record with a null there (send, send_batch, the console producer), the broker refuses
a frame whose body has one (whatever its own Arrow schema declares), and a hypothesis
property test sends rows with random nulls. (Spark's schema: tests/spark.)"""

from __future__ import annotations

import itertools
import re

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.clients.producer import Producer
from sparklog.errors import SchemaMismatchError
from sparklog.format.frame import encode_frame
from sparklog.protocol import ApiKey, Connection
from tests.support.clients import consume_all
from tests.support.logfiles import NOT_NULL_SCHEMA
from tests.support.shell import sparklog

_names = itertools.count()


def typed_topic(admin, schema=NOT_NULL_SCHEMA) -> str:
    name = f"nn{next(_names)}"
    admin.create_topic(name, 1, schema=schema)
    return name


def violations(row: dict) -> set[str]:
    """The fields of NOT_NULL_SCHEMA ``row`` leaves null though they are declared not null
    (spelt out here, independently of the implementation)."""
    out = {f for f in ("sym", "qty") if row.get(f) is None}
    if row.get("tags") is not None and None in row["tags"]:
        out.add("tags[]")
    if row.get("p") is not None and row["p"].get("a") is None:
        out.add("p.a")
    return out


def test_send_refuses_a_null_in_a_not_null_column(broker, admin):
    # issue #17: {"sym": null, "px": 1} was accepted and stored
    topic = typed_topic(admin, "sym string not null, px double")
    with Producer(broker.address) as producer:
        with pytest.raises(SchemaMismatchError,
                           match=r"record \{'sym': None, 'px': 1\} for topic 'nn\d+': field "
                                 r"'sym' is declared not null but is null"):
            producer.send(topic, {"sym": None, "px": 1})
        with pytest.raises(SchemaMismatchError, match="'sym' is declared not null"):
            producer.send(topic, {"px": 2.0})  # a missing column is null
        producer.send(topic, {"sym": "X", "px": None}).get(10)
    got = consume_all(broker.address, topic, 1, 1)[0]
    assert [r.value for r in got] == [{"sym": "X", "px": None}]


def test_send_batch_refuses_nulls_in_not_null_fields(broker, admin):
    topic = typed_topic(admin)
    good = {"sym": "A", "px": None, "qty": 1, "tags": ["x"], "p": {"a": 1, "b": None}}
    cases = {"sym": {**good, "sym": None}, "qty": {**good, "qty": None},
             r"tags\[\]": {**good, "tags": ["x", None]}, r"p\.a": {**good, "p": {"a": None}}}
    with Producer(broker.address) as producer:
        for field, bad in cases.items():
            table = pa.Table.from_pylist([good, good, good, bad, good])  # inferred, nullable
            with pytest.raises(SchemaMismatchError,
                               match=rf"send_batch to topic 'nn\d+': field '{field}' is "
                                     rf"declared not null but record 3 has a null there"):
                producer.send_batch(topic, table)
            with pytest.raises(SchemaMismatchError, match=f"field '{field}'"):
                producer.send(topic, bad)
        # nullable in the data's own schema, no nulls: fine
        producer.send_batch(topic, pa.Table.from_pylist([good, good])).get(10)
    assert [r.value for r in consume_all(broker.address, topic, 1, 2)[0]] == [good, good]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_broker_refuses_frames_with_nulls_in_not_null_fields(broker, admin, codec):
    topic = typed_topic(admin, "sym string not null, px double")
    nullable = pa.schema([("sym", pa.string()), ("px", pa.float64())])  # as a frame may say

    def produce(rows):
        frame = encode_frame(pa.RecordBatch.from_pylist(rows, schema=nullable),
                             compression=codec)
        with Connection(broker.address, client_id="raw-client") as conn:
            conn.send(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 10000, "topics": [
                {"name": topic, "partitions": [{"partition": 0, "records": frame}]}]})
            return conn.receive()["topics"][0]["partitions"][0]

    refused = produce([{"sym": "A", "px": 1.0}, {"sym": None, "px": 2.0}])
    assert refused["error_code"] == SchemaMismatchError.code
    assert f"partition {topic}-0" in refused["error_message"]
    assert "field 'sym' is declared not null but record 1 has a null there" in \
        refused["error_message"]
    accepted = produce([{"sym": "B", "px": None}])
    assert accepted["error_code"] == 0 and accepted["base_offset"] == 0
    assert [r.value for r in consume_all(broker.address, topic, 1, 1)[0]] == \
        [{"sym": "B", "px": None}]


def test_console_producer_names_the_line(broker, admin):
    topic = typed_topic(admin, "sym string not null, px double")
    proc = sparklog("produce", topic, stdin=b'{"sym": "A", "px": 1}\n{"sym": null, "px": 1}\n',
                    bootstrap=broker.address)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "line 2:" in err and "'sym' is declared not null" in err
    assert "Traceback" not in err
    # the line before it was sent
    assert [r.value for r in consume_all(broker.address, topic, 1, 1)[0]] == \
        [{"sym": "A", "px": 1.0}]


# --- property: random nulls ----------------------------------------------------------------

_maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
_ROWS = st.lists(st.fixed_dictionaries({
    "sym": _maybe(st.text(max_size=5)),
    "px": _maybe(st.floats(allow_nan=False)),
    "qty": _maybe(st.integers(-2**63, 2**63 - 1)),
    "tags": _maybe(st.lists(_maybe(st.text(max_size=3)), max_size=3)),
    "p": _maybe(st.fixed_dictionaries({"a": _maybe(st.integers(-2**31, 2**31 - 1)),
                                       "b": _maybe(st.text(max_size=3))})),
}), min_size=1, max_size=30)


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=_ROWS, bulk=st.booleans())
def test_property_nulls_in_not_null_fields_are_refused_the_rest_stored(broker, admin, rows,
                                                                       bulk):
    topic = typed_topic(admin)
    bad = [violations(r) for r in rows]
    stored = [r for r, v in zip(rows, bad) if not v]
    with Producer(broker.address, linger_ms=1) as producer:
        if bulk:  # one send_batch: refused as a whole, naming a violating field and row
            nullable = pa.schema([f.with_nullable(True) for f in NOT_NULL_SCHEMA])
            table = pa.Table.from_pylist(rows, schema=nullable)
            if any(bad):
                with pytest.raises(SchemaMismatchError) as info:
                    producer.send_batch(topic, table)
                field, row = _named(str(info.value))
                assert field in bad[row]
                stored = []
            else:
                producer.send_batch(topic, table).get(20)
        else:
            futures = []
            for row, violated in zip(rows, bad):
                if violated:
                    with pytest.raises(SchemaMismatchError) as info:
                        producer.send(topic, row)
                    assert _named(str(info.value))[0] in violated
                else:
                    futures.append(producer.send(topic, row))
            assert [f.get(20).offset for f in futures] == list(range(len(stored)))
    got = consume_all(broker.address, topic, 1, len(stored))[0] if stored else []
    assert [r.value for r in got] == stored


def _named(message: str):
    """(field, record index or None) a not-null error message names."""
    m = re.search(r"field '([^']+)' is declared not null(?: but record (\d+))?", message)
    assert m, message
    return m.group(1), int(m.group(2)) if m.group(2) else None
