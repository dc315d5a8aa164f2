"""The shell tools accept what Kafka's take: --topic for the console tools, topics
create --replication-factor, groups reset-offsets and delete, dump-log --files, the
console consumer's --formatter and print.value, --log-level after the sub-command;
user errors print one line (bad --log-level, bad SQL of etl run, a storage root a
broker serves), an unknown flag the sub-command's usage, help texts no reST markup."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import pytest

from sparklog.cli.main import build_parser
from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import TopicPartition
from tests.support.brokerproc import BrokerProcess
from tests.support.shell import ok, sparklog

_names = itertools.count()


def one_error_line(proc, code=1) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_console_tools_take_topic_as_kafkas_do(broker):
    b = broker.address
    topic = f"k{next(_names)}"
    ok(sparklog("topics", "create", "--topic", topic, bootstrap=b))
    ok(sparklog("produce", "--topic", topic, "--property", "parse.key=true",
                stdin=b"k1\tv1\nk2\tv2\n", bootstrap=b))
    out = ok(sparklog("consume", "--topic", topic, "--from-beginning", "--max-messages", "2",
                      bootstrap=b))
    assert out == "v1\nv2\n"
    out = ok(sparklog("consume", "--topic", topic, "--from-beginning", "--max-messages", "2",
                      "--formatter", "kafka.tools.DefaultMessageFormatter",
                      "--property", "print.key=true", "--property", "print.value=false",
                      bootstrap=b))
    assert out == "k1\nk2\n"
    line = one_error_line(sparklog("consume", "--topic", topic, "--formatter", "my.Formatter",
                                   bootstrap=b))
    assert "--formatter 'my.Formatter'" in line
    line = one_error_line(sparklog("consume", topic, "--topic", "other", bootstrap=b))
    assert "two different topics" in line
    ok(sparklog("topics", "create", "--topic", f"{topic}-x", bootstrap=b))
    ok(sparklog("produce", "--topic", f"{topic}-x", stdin=b"v3\n", bootstrap=b))
    out = ok(sparklog("consume", "--include", f"{topic}(-x)?", "--from-beginning",
                      "--max-messages", "3", bootstrap=b))
    assert sorted(out.split()) == ["v1", "v2", "v3"]  # Kafka's --include regex


def test_topics_create_replication_factor_is_the_topics_hdfs_replication(broker):
    topic = f"k{next(_names)}"
    ok(sparklog("topics", "create", "--topic", topic, "--replication-factor", "2",
                bootstrap=broker.address))
    described = ok(sparklog("topics", "describe", "--topic", topic, bootstrap=broker.address))
    assert "replication.factor=2" in described
    # file:// has no replication: the topic's files are written all the same
    ok(sparklog("produce", "--topic", topic, stdin=b"x\n", bootstrap=broker.address))
    help_text = ok(sparklog("topics", "create", "--help"))
    assert "dfs.replication" in help_text and "file://" in help_text
    line = one_error_line(sparklog("topics", "create", "--topic", f"k{next(_names)}",
                                   "--replication-factor", "0", bootstrap=broker.address))
    assert "replication" in line


def test_log_level_after_the_sub_command_and_bad_values(broker):
    out = sparklog("topics", "list", "--log-level", "info", bootstrap=broker.address)
    assert out.returncode == 0 and b" INFO " in out.stderr
    out = sparklog("--log-level", "debug", "topics", "list", "--log-level", "warning",
                   bootstrap=broker.address)  # the later one wins
    assert out.returncode == 0 and b" INFO " not in out.stderr
    for args in (["topics", "list", "--log-level", "LOUD"],
                 ["--log-level", "LOUD", "topics", "list"]):
        proc = sparklog(*args, bootstrap=broker.address)
        err = proc.stderr.decode()
        assert proc.returncode == 2 and "Traceback" not in err, err  # a usage error
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1 and "--log-level" in errors[0] and "'LOUD'" in errors[0], err


def test_unknown_flag_prints_the_sub_commands_usage():
    proc = sparklog("groups", "describe", "--bogus")
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err.startswith("usage: sparklog groups describe"), err
    assert "unrecognized arguments: --bogus" in err


def test_help_texts_have_no_rst_markup():
    parser = build_parser()
    texts = []

    def walk(p):
        texts.append(p.format_help())
        for action in p._actions:
            if isinstance(action.choices, dict):  # sub-commands
                for sub in action.choices.values():
                    walk(sub)

    walk(parser)
    for text in texts:
        assert "``" not in text and ":class:" not in text and ":func:" not in text, text


def test_dump_log_takes_kafkas_files_list(broker, tmp_path):
    topic = f"k{next(_names)}"
    ok(sparklog("topics", "create", "--topic", topic, bootstrap=broker.address))
    ok(sparklog("produce", "--topic", topic, stdin=b"a\nb\n", bootstrap=broker.address))
    part = Path(broker.storage_uri[len("file://"):]) / "topics" / topic / "0"
    log_file = part / "00000000000000000000.log"
    out = ok(sparklog("dump-log", "--files", f"{log_file},{log_file}", "--print-data-log"))
    assert out.count(f"Dumping {log_file}") == 2 and "payload: b" in out
    line = one_error_line(sparklog("dump-log"), code=1)
    assert "--files" in line


# --- groups reset-offsets / delete -------------------------------------------------------


def _group_at(address, topic, group, offsets: dict) -> None:
    with Admin(address) as admin:
        admin.alter_consumer_group_offsets(group, {TopicPartition(topic, p): o
                                                   for p, o in offsets.items()})


def _committed(address, group) -> dict:
    with Admin(address) as admin:
        return {tp.partition if isinstance(tp, TopicPartition) else tp[1]: om.offset
                for tp, om in admin.list_consumer_group_offsets(group).items()}


@pytest.fixture
def filled(broker):
    """(topic with 2 partitions of 10 records, timestamps 1000*(i+1)), group at 5/5."""
    topic, group = f"k{next(_names)}", f"g{next(_names)}"
    with Admin(broker.address) as admin:
        admin.create_topic(topic, 2)
    with Producer(broker.address) as p:
        for part in range(2):
            for i in range(10):
                p.send(topic, b"%d" % i, partition=part, timestamp=1000 * (i + 1))
        p.flush(10)
    _group_at(broker.address, topic, group, {0: 5, 1: 5})
    return topic, group


@pytest.mark.parametrize("spec, expected", [
    (["--to-earliest"], {0: 0, 1: 0}),
    (["--to-latest"], {0: 10, 1: 10}),
    (["--to-current"], {0: 5, 1: 5}),
    (["--to-offset", "7"], {0: 7, 1: 7}),
    (["--to-offset", "70"], {0: 10, 1: 10}),          # clamped to the log end
    (["--shift-by", "-2"], {0: 3, 1: 3}),
    (["--shift-by", "-20"], {0: 0, 1: 0}),            # clamped to the log start
    (["--to-datetime", "1970-01-01T00:00:03.000Z"], {0: 2, 1: 2}),
    (["--to-datetime", "1970-01-01T01:00:03+01:00"], {0: 2, 1: 2}),
    (["--by-duration", "PT1H"], {0: 10, 1: 10}),      # nothing that recent: the end
    (["--by-duration", "P36500D"], {0: 0, 1: 0}),
])
def test_reset_offsets_specs(broker, filled, spec, expected):
    topic, group = filled
    b = broker.address
    dry = ok(sparklog("groups", "reset-offsets", "--group", group, "--topic", topic, *spec,
                      bootstrap=b))
    rows = {int(r.split()[2]): int(r.split()[3]) for r in dry.splitlines()[1:]}
    assert rows == expected
    assert _committed(b, group) == {0: 5, 1: 5}  # a dry run changes nothing
    ok(sparklog("groups", "reset-offsets", "--group", group, "--topic", topic, *spec,
                "--execute", bootstrap=b))
    assert _committed(b, group) == expected


def test_reset_offsets_scope_and_refusals(broker, filled):
    topic, group = filled
    b = broker.address
    ok(sparklog("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:1",
                "--to-earliest", "--execute", bootstrap=b))
    assert _committed(b, group) == {0: 5, 1: 0}
    ok(sparklog("groups", "reset-offsets", "--group", group, "--all-topics", "--to-latest",
                "--execute", bootstrap=b))
    assert _committed(b, group) == {0: 10, 1: 10}
    line = one_error_line(sparklog("groups", "reset-offsets", "--group", group, "--topic",
                                   f"{topic}:7", "--to-earliest", bootstrap=b))
    assert "no partition 7" in line
    line = one_error_line(sparklog("groups", "reset-offsets", "--group", group, "--topic",
                                   topic, "--by-duration", "1 hour", bootstrap=b))
    assert "ISO 8601" in line
    with Consumer(topic, bootstrap_servers=b, group_id=group) as c:  # an active member
        c.poll(timeout_ms=100)
        line = one_error_line(sparklog("groups", "reset-offsets", "--group", group,
                                       "--all-topics", "--to-earliest", "--execute",
                                       bootstrap=b))
        assert "inactive" in line and "Stable" in line
        line = one_error_line(sparklog("groups", "delete", "--group", group, bootstrap=b))
        assert "active member" in line
    assert _committed(b, group) == {0: 10, 1: 10}


def test_groups_delete(broker, filled):
    _, group = filled
    b = broker.address
    out = ok(sparklog("groups", "delete", "--group", group, bootstrap=b))
    assert f"'{group}'" in out and "successful" in out
    assert group not in ok(sparklog("groups", "list", bootstrap=b)).split()
    assert _committed(b, group) == {}
    line = one_error_line(sparklog("groups", "delete", "--group", group, bootstrap=b))
    assert "does not exist" in line


# --- one clear line ---------------------------------------------------------------------------


def test_storage_root_served_by_a_broker_says_so_once(tmp_path):
    root = (tmp_path / "log").as_uri()
    with BrokerProcess(root, log_path=tmp_path / "broker.log") as proc:
        ok(sparklog("topics", "create", "--topic", "served", bootstrap=proc.address))
        ok(sparklog("produce", "--topic", "served", stdin=b"a\n", bootstrap=proc.address))
        proc = sparklog("produce", "--topic", "served", stdin=b"b\nc\nd\n", bootstrap=root)
        err = proc.stderr.decode()
        assert proc.returncode == 1 and "Traceback" not in err, err
        # the cause once, naming the lines it stopped, then the count
        assert err.count("written by another process") == 1 and "broker" in err, err
        assert "lines 1, 2, 3 not delivered" in err, err
        assert "3 of 3 line(s) not delivered" in err, err


def test_etl_run_bad_sql_is_one_line(tmp_path, storage_root):
    pytest.importorskip("pyspark")
    ok(sparklog("topics", "create", "--topic", "e", bootstrap=storage_root))
    ok(sparklog("produce", "--topic", "e", stdin=b"a\n", bootstrap=storage_root))
    start = time.monotonic()
    proc = sparklog("etl", "run", "--subscribe", "e", "--app-id", "a", "--output",
                    (tmp_path / "out").as_uri(), "--path", storage_root, "--quiet",
                    "--sql", "SELEC nope FROM input", timeout=300)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "replaced a statically registered" not in err, err
    ours = [line for line in err.splitlines() if line.startswith("sparklog")]
    assert len(ours) == 1 and re.match(r"sparklog: error: --sql: .*SELEC", ours[0]), err
    assert not [line for line in err.splitlines() if line.lstrip().startswith("at org.")], err
    assert time.monotonic() - start < 300
