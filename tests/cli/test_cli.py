"""The Kafka-like shell tools as subprocesses against a real broker process:
topics create/list/describe/alter/delete, console produce and consume round trips,
groups list/describe with lag, and bad arguments -> one clear line, non-zero exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.shell import ok, sparklog

ROOT = Path(__file__).resolve().parents[2]


def test_topics_lifecycle(broker):
    b = broker.address
    assert ok(sparklog("topics", "create", "--topic", "orders", "--partitions", "3",
                       "--config", "retention.ms=3600000", bootstrap=b)) == \
        "Created topic orders.\n"
    ok(sparklog("topics", "create", "trades", "--schema",
                "sym string not null, px double, qty int64", bootstrap=b))
    assert ok(sparklog("topics", "list", bootstrap=b)).split() == ["orders", "trades"]
    out = ok(sparklog("topics", "describe", "--topic", "orders", bootstrap=b))
    assert "Topic: orders\tPartitionCount: 3\tTyped: no\tConfigs: retention.ms=3600000" in out
    assert out.count("\tPartition: ") == 3
    out = ok(sparklog("topics", "describe", "trades", bootstrap=b))
    assert "Schema: sym string not null, px double, qty int64" in out
    ok(sparklog("topics", "alter", "orders", "--partitions", "4", "--config",
                "retention.ms=60000", bootstrap=b))
    out = ok(sparklog("topics", "describe", "orders", bootstrap=b))
    assert "PartitionCount: 4" in out and "retention.ms=60000" in out
    assert ok(sparklog("topics", "delete", "--topic", "trades", bootstrap=b)) == \
        "Deleted topic trades.\n"
    ok(sparklog("topics", "delete", "trades", "--if-exists", bootstrap=b))
    ok(sparklog("topics", "create", "orders", "--if-not-exists", bootstrap=b))


def test_console_produce_consume_round_trip_with_keys_and_group(broker):
    b = broker.address
    ok(sparklog("topics", "create", "lines", "--partitions", "2", bootstrap=b))
    lines = b"".join(b"k%d:value %d\n" % (i % 4, i) for i in range(40))
    ok(sparklog("produce", "lines", "--property", "parse.key=true", "--property",
                "key.separator=:", "--acks", "all", "--compression-type", "zstd",
                stdin=lines, bootstrap=b))
    proc = sparklog("consume", "lines", "--from-beginning", "--group", "readers",
                    "--max-messages", "40", "--property", "print.key=true",
                    "--property", "print.partition=true", bootstrap=b)
    out = ok(proc)
    assert "Processed a total of 40 messages" in proc.stderr.decode()
    rows = [line.split("\t") for line in out.splitlines()]
    assert sorted(int(v.split()[1]) for _, _, v in rows) == list(range(40))
    by_key = {}
    for part, key, value in rows:  # one key, one partition, in order
        by_key.setdefault(key, []).append((part, int(value.split()[1])))
    for key, items in by_key.items():
        assert len({p for p, _ in items}) == 1
        assert [v for _, v in items] == sorted(v for _, v in items)
    # the group committed everything: a rerun sees nothing new
    proc = sparklog("consume", "lines", "--group", "readers", "--timeout-ms", "1500",
                    bootstrap=b)
    assert ok(proc) == "" and "Processed a total of 0 messages" in proc.stderr.decode()
    assert ok(sparklog("groups", "list", bootstrap=b)).split() == ["readers"]
    out = ok(sparklog("groups", "describe", "--group", "readers", bootstrap=b))
    header, *rows = out.splitlines()
    assert header.split()[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                  "LOG-END-OFFSET", "LAG"]
    assert sum(int(r.split()[3]) for r in rows) == 40
    assert all(r.split()[5] == "0" for r in rows)
    # lag shows up once more records arrive
    ok(sparklog("produce", "lines", "--partition", "0", stdin=b"x\ny\n", bootstrap=b))
    out = ok(sparklog("groups", "describe", "readers", bootstrap=b))
    assert sum(int(r.split()[5]) for r in out.splitlines()[1:]) == 2


def test_consume_partition_offset_and_typed_json(broker):
    b = broker.address
    ok(sparklog("topics", "create", "rows", "--schema", "id int64, name string",
                bootstrap=b))
    ok(sparklog("produce", "rows", stdin=b'{"id": 1, "name": "a"}\n{"id": 2, "name": null}\n',
                bootstrap=b))
    out = ok(sparklog("consume", "rows", "--partition", "0", "--offset", "1",
                      "--max-messages", "1", "--property", "print.offset=true", bootstrap=b))
    assert out == 'Offset:1\t{"id": 2, "name": null}\n'


@pytest.mark.parametrize("args,stdin,message", [
    (["topics", "create", "--topic", "bad/name"], None, "illegal characters"),
    (["topics", "create", "--topic", "x1", "--config", "retention.ms"], None, "key=value"),
    (["topics", "create", "--topic", "x2", "--config", "nonsense.key=1"], None,
     "config 'nonsense.key'"),
    (["topics", "create", "--topic", "x3", "--schema", "a wat"], None, "unknown column type"),
    (["topics", "describe", "--topic", "missing"], None, "missing"),
    (["topics", "delete"], None, "a topic is required"),
    (["topics", "alter", "--topic", "missing2", "--partitions", "3"], None, "missing2"),
    (["produce", "lines", "--property", "parse.key=true"], b"no separator here\n",
     "line 1 has no key separator"),
    (["produce", "lines", "--property", "frobnicate=1"], b"", "unknown --property"),
    (["consume", "missing4"], None, "topic 'missing4' does not exist"),
    (["consume", "lines", "--offset", "3"], None, "--offset needs --partition"),
    (["groups", "describe", "--group", "nobody"], None, "'nobody' does not exist"),
])
def test_bad_arguments_print_one_clear_line(broker, args, stdin, message):
    proc = sparklog(*args, stdin=stdin, bootstrap=broker.address)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err.count("\n") == 1 and err.startswith("sparklog: error: "), err
    assert message in err


def test_unreachable_broker_and_usage_errors(tmp_path):
    proc = sparklog("topics", "list", bootstrap="127.0.0.1:1")
    assert proc.returncode == 1
    assert proc.stderr.decode().startswith("sparklog: error: no broker reachable")
    proc = sparklog("topics", "create", "--partitions", "many", bootstrap="127.0.0.1:1")
    assert proc.returncode == 2 and b"invalid int value" in proc.stderr


def test_embedded_storage_uri_as_bootstrap(tmp_path):
    uri = (tmp_path / "log").as_uri()
    ok(sparklog("topics", "create", "local", bootstrap=uri))
    ok(sparklog("produce", "local", stdin=b"one\ntwo\n", bootstrap=uri))
    assert ok(sparklog("consume", "local", "--from-beginning", "--max-messages", "2",
                       bootstrap=uri)) == "one\ntwo\n"
