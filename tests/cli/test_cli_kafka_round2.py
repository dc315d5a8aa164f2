"""The console tools behave as Kafka's (issue 32): SIGTERM stops ``consume --group`` as
SIGINT does, ``produce`` sends a line without a key separator with a null key under
``ignore.error=true`` and goes on past a record over the size limit, and
kafka-topics.sh's / kafka-consumer-groups.sh's flag forms are accepted."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import TopicPartition
from tests.support.shell import ROOT, ok, sparklog
from tests.support.waiting import wait_until

_names = itertools.count()


def _name(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-{next(_names)}"


def _records(address, topic, partitions=(0,)) -> list:
    """Every record of ``topic``'s ``partitions``, in offset order per partition."""
    with Consumer(bootstrap_servers=address, auto_offset_reset="earliest") as c:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        ends = c.end_offsets(tps)
        out = []
        wait_until(lambda: out.extend(r for rs in c.poll(timeout_ms=200).values()
                                      for r in rs) or
                   all(c.position(tp) >= ends[tp] for tp in tps),
                   what=f"the records of {topic}")
        return sorted(out, key=lambda r: (r.partition, r.offset))


# --- item 2: SIGTERM to consume --group ------------------------------------------------


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_commits_what_consume_printed_and_leaves_the_group(broker, how):
    b = broker.address
    topic, group = _name("sig"), _name("g")
    with Admin(b) as admin:
        admin.create_topic(topic, 2)
    with Producer(b) as p:
        for i in range(30):
            p.send(topic, b"v%d" % i, partition=i % 2)
        p.flush(10)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli.main", "consume", "--topic", topic,
         "--group", group, "--from-beginning", "--bootstrap-server", b,
         "--property", "print.partition=true", "--property", "print.offset=true",
         # no auto-commit while it runs: what is committed is the stop's commit
         "--consumer-property", "auto.commit.interval.ms=600000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(ROOT))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(
        line.decode().rstrip("\n") for line in proc.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: len(lines) >= 30 or proc.poll() is not None,
                   what="consume to print the 30 records")
        assert len(lines) == 30, proc.stderr.read().decode()
        proc.send_signal(how)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    err = proc.stderr.read().decode()
    assert code == 128 + how, err
    assert "Processed a total of 30 messages" in err and "Traceback" not in err, err
    printed: dict = {}
    for line in lines:
        part, offset, _ = line.split("\t")
        p, o = int(part.split(":")[1]), int(offset.split(":")[1])
        printed[p] = max(printed.get(p, -1), o + 1)
    with Admin(b) as admin:
        committed = {tp.partition: om.offset
                     for tp, om in admin.list_consumer_group_offsets(group).items()}
        assert committed == printed == {0: 15, 1: 15}
        described = admin.describe_consumer_groups([group])[0]
        assert described.members == [] and described.state == "Empty", described


# --- items 3 and 4: produce's ignore.error and records over the size limit -------------


def test_ignore_error_sends_a_line_without_separator_with_a_null_key(broker):
    b = broker.address
    topic = _name("ign")
    ok(sparklog("topics", "create", "--topic", topic, bootstrap=b))
    ok(sparklog("produce", "--topic", topic, "--property", "parse.key=true",
                "--property", "key.separator=:", "--property", "ignore.error=true",
                stdin=b"k1:v1\nno separator here\nk3:v3\n", bootstrap=b))
    assert [(r.key, r.value) for r in _records(b, topic)] == \
        [(b"k1", b"v1"), (None, b"no separator here"), (b"k3", b"v3")]
    failed = sparklog("produce", "--topic", topic, "--property", "parse.key=true",
                      stdin=b"k\tv\nnone\n", bootstrap=b)
    assert failed.returncode == 1
    assert "line 2 has no key separator" in failed.stderr.decode()
    assert "ignore.error=true" in failed.stderr.decode()


def test_a_record_over_the_size_limit_is_named_and_the_next_lines_are_sent(broker):
    b = broker.address
    topic = _name("big")
    ok(sparklog("topics", "create", "--topic", topic, bootstrap=b))
    lines = [b"a", b"x" * 5000, b"b", b"y" * 6000, b"c"]
    proc = sparklog("produce", "--topic", topic,
                    "--producer-property", "max.request.size=2000",
                    stdin=b"\n".join(lines) + b"\n", bootstrap=b)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "line 2 not sent" in err and "line 4 not sent" in err
    assert "2 of 5 line(s) not delivered: line(s) 2, 4" in err and "Traceback" not in err
    assert [r.value for r in _records(b, topic)] == [b"a", b"b", b"c"]


def test_a_compressed_record_over_the_limit_fails_after_sending_and_is_named(broker):
    b = broker.address
    topic = _name("bigz")
    ok(sparklog("topics", "create", "--topic", topic, bootstrap=b))
    noise = os.urandom(3000).hex().encode()  # does not compress below the limit
    proc = sparklog("produce", "--topic", topic, "--compression-type", "zstd",
                    "--producer-property", "max.request.size=2000",
                    "--producer-property", "linger.ms=0",
                    stdin=b"a\n" + noise + b"\nb\n", bootstrap=b)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "line 2 not delivered" in err and "1 of 3 line(s) not delivered: line(s) 2" in err
    assert [r.value for r in _records(b, topic)] == [b"a", b"b"]


def _reading_its_input(proc) -> bool:
    """True once ``proc``'s main thread waits on its input pipe with nothing unread
    (Linux: the pipe's unread bytes and the thread's kernel wait channel)."""
    import fcntl
    import struct
    import termios

    unread = fcntl.ioctl(proc.stdin.fileno(), termios.FIONREAD, b"\0\0\0\0")
    with open(f"/proc/{proc.pid}/task/{proc.pid}/wchan") as f:
        return struct.unpack("i", unread)[0] == 0 and "pipe" in f.read()


def test_sigterm_to_produce_flushes_what_it_read(broker):
    b = broker.address
    topic = _name("pterm")
    ok(sparklog("topics", "create", "--topic", topic, bootstrap=b))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli.main", "produce", "--topic", topic,
         "--bootstrap-server", b, "--producer-property", "linger.ms=600000"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(ROOT))
    try:
        proc.stdin.write(b"one\ntwo\nthree\n")
        proc.stdin.flush()
        # read and handed to the producer, which holds them for linger.ms
        wait_until(lambda: _reading_its_input(proc), what="produce to wait for more input")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode()
    assert code == 143 and "Traceback" not in err, err
    assert [r.value for r in _records(b, topic)] == [b"one", b"two", b"three"]


# --- item 9: kafka-topics.sh's and kafka-consumer-groups.sh's action flags ---------------


def test_kafka_action_flags_name_the_sub_command():
    from sparklog.cli.main import _command_modules, kafka_action_flags

    commands = _command_modules()
    assert kafka_action_flags(["topics", "--describe", "--topic", "t"], commands) == \
        ["topics", "describe", "--topic", "t"]
    assert kafka_action_flags(["--log-level", "info", "topics", "--bootstrap-server", "h:1",
                               "--list"], commands) == \
        ["--log-level", "info", "topics", "list", "--bootstrap-server", "h:1"]
    assert kafka_action_flags(["groups", "--group", "g", "--reset-offsets"], commands) == \
        ["groups", "reset-offsets", "--group", "g"]
    # a sub-command given, or a command without action flags: unchanged
    for argv in (["topics", "alter", "--topic", "t", "--delete-config", "x"],
                 ["consume", "--topic", "t", "--list"]):
        assert kafka_action_flags(argv, commands) == argv
    proc = sparklog("topics", "--list", "--delete", "--topic", "t")
    assert proc.returncode == 2 and "give one action, not --list and --delete" in \
        proc.stderr.decode()


def test_kafka_tools_flag_forms_work_end_to_end(broker):
    b = broker.address
    topic, group = _name("flags"), _name("g")
    assert ok(sparklog("topics", "--create", "--topic", topic, "--partitions", "2",
                       bootstrap=b)) == f"Created topic {topic}.\n"
    assert topic in ok(sparklog("topics", "--list", bootstrap=b)).split()
    ok(sparklog("topics", "--alter", "--topic", topic, "--partitions", "3", bootstrap=b))
    assert "PartitionCount: 3" in ok(sparklog("topics", "--describe", "--topic", topic,
                                              bootstrap=b))
    with Producer(b) as p:
        for part in range(3):
            p.send(topic, b"x", partition=part)
        p.flush(10)
    with Admin(b) as admin:
        admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 1})
    assert group in ok(sparklog("groups", "--list", bootstrap=b)).split()
    assert topic in ok(sparklog("groups", "--describe", "--group", group, bootstrap=b))
    ok(sparklog("groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:0",
                "--to-earliest", "--execute", bootstrap=b))
    with Admin(b) as admin:
        assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)].offset == 0
    ok(sparklog("groups", "--delete", "--group", group, bootstrap=b))
    assert group not in ok(sparklog("groups", "--list", bootstrap=b)).split()
    ok(sparklog("topics", "--delete", "--topic", topic, bootstrap=b))
    assert topic not in ok(sparklog("topics", "--list", bootstrap=b)).split()
