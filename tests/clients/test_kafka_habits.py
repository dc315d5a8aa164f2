"""Python API habits of kafka-python users work: NewTopic's third positional argument is
the replication factor, send(timestamp_ms=...), auto_offset_reset's old names
smallest/largest, and the package root lists its lazily loaded exports (and shows type
checkers the same ones)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from sparklog.clients.admin import Admin, NewTopic
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer import Producer
from sparklog.clients.types import TopicPartition
from sparklog.errors import InvalidArgumentError, InvalidConfigError

_names = itertools.count()


def test_new_topic_takes_kafka_pythons_replication_factor(broker):
    t1, t2, t3 = (f"h{next(_names)}" for _ in range(3))
    with Admin(broker.address) as admin:
        admin.create_topics([NewTopic(t1, 2, 1),
                             NewTopic(t2, num_partitions=1, replication_factor=3,
                                      topic_configs={"retention.ms": "60000"}),
                             NewTopic(t3, 1, {"retention.ms": 70000})])  # sparklog's old form
        described = {d.name: d for d in admin.describe_topics([t1, t2, t3])}
    assert len(described[t1].partitions) == 2
    assert described[t1].configs["replication.factor"] == 1
    assert described[t2].configs["replication.factor"] == 3
    assert described[t2].configs["retention.ms"] == 60000
    assert described[t3].configs["retention.ms"] == 70000
    assert described[t3].configs["replication.factor"] == -1  # the storage's default
    with pytest.raises(InvalidArgumentError, match="replication_factor"):
        Admin(broker.address).create_topics([NewTopic("bad-rf", 1, 0)])
    with pytest.raises(InvalidArgumentError, match="replica_assignments"):
        NewTopic("x", 1, 1, replica_assignments={0: [1]})


def test_send_takes_timestamp_ms(broker):
    topic = f"h{next(_names)}"
    with Admin(broker.address) as admin:
        admin.create_topic(topic, 1)
    with Producer(broker.address) as p:
        md = p.send(topic, b"v", timestamp_ms=1234567).get(10)
        with pytest.raises(InvalidArgumentError, match="timestamp_ms"):
            p.send(topic, b"v", timestamp=1, timestamp_ms=2)
    with Consumer(bootstrap_servers=broker.address) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), md.offset)
        records = c.poll(timeout_ms=5000)[TopicPartition(topic, 0)]
    assert (records[0].timestamp, records[0].timestamp_type) == (1234567, 0)  # CreateTime


@pytest.mark.parametrize("alias, meaning", [("smallest", "earliest"), ("largest", "latest")])
def test_auto_offset_reset_takes_kafka_pythons_aliases(broker, alias, meaning):
    topic = f"h{next(_names)}"
    with Admin(broker.address) as admin:
        admin.create_topic(topic, 1)
    with Producer(broker.address) as p:
        for i in range(3):
            p.send(topic, b"%d" % i)
        p.flush(10)
    with Consumer(bootstrap_servers=broker.address, auto_offset_reset=alias) as c:
        assert c.config["auto_offset_reset"] == meaning
        c.assign([TopicPartition(topic, 0)])
        assert c.position(TopicPartition(topic, 0)) == (0 if meaning == "earliest" else 3)
    with pytest.raises(InvalidConfigError, match="'oldest'"):
        Consumer(bootstrap_servers=broker.address, auto_offset_reset="oldest")


def test_dir_of_the_package_lists_the_lazy_exports():
    code = ("import sparklog; names = dir(sparklog); "
            "assert 'Producer' not in vars(sparklog), 'loaded eagerly'; "
            "print(' '.join(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    for name in ("Producer", "Consumer", "Admin", "NewTopic", "connect", "TopicPartition"):
        assert name in out


def test_type_checkers_see_every_lazy_export_as_the_object_loaded():
    """What the root's TYPE_CHECKING block shows type checkers and IDEs is what
    ``sparklog.X`` loads at run time: the same names, from the same modules."""
    import ast
    import importlib

    import sparklog

    tree = ast.parse(open(sparklog.__file__).read())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", None) == "TYPE_CHECKING")
    seen = {alias.asname or alias.name: (node.module, alias.name)
            for node in block.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == sparklog._EXPORTS
    for name, (module, attr) in seen.items():
        assert hasattr(importlib.import_module(module), attr), f"{module}.{attr} ({name})"


# --- replication.factor: the HDFS replication of a topic's files ---------------------------


def test_replication_factor_is_applied_to_every_file_of_the_topic(tmp_path, caplog):
    from sparklog.log import PartitionLog
    from sparklog.storage.local import LocalFileIO
    from tests.support.logfiles import typed_frame

    class ReplicatedFileIO(LocalFileIO):
        """The local disk, answering set_replication as HDFS does (recording it)."""

        def __init__(self):
            super().__init__()
            self.replicated: list[tuple[str, int]] = []

        def set_replication(self, path, replication):
            self.replicated.append((path.rsplit("/", 1)[1], replication))
            return True

    fio = ReplicatedFileIO()
    pdir = fio.join(tmp_path.as_uri(), "topics", "rf", "0")
    config = {"replication.factor": 3, "segment.bytes": 4096}
    with PartitionLog.open(fio, pdir, config) as plog:
        while len(plog.segments) < 3:
            first = plog.log_end_offset
            plog.append(typed_frame(list(range(first, first + 20)), [1000] * 20))
        plog.flush()
        bases = [s.base_offset for s in plog.segments]
    names = {name for name, n in fio.replicated if n == 3}
    assert len(fio.replicated) == len(names)  # each file once
    for base in bases:
        assert f"{base:020d}.log" in names
    for base in bases[:-1]:  # sealed: their indexes too
        assert {f"{base:020d}.index", f"{base:020d}.timeindex"} <= names

    plain = LocalFileIO()  # file://: no replication, said once at INFO
    caplog.set_level("INFO", logger="sparklog.log.segment")
    import sparklog.log.segment as segment
    segment._NO_REPLICATION_NOTED.discard("file")
    with PartitionLog.open(plain, fio.join(tmp_path.as_uri(), "topics", "rf", "1"),
                           config) as plog:
        for i in range(60):
            plog.append(typed_frame(list(range(i * 20, i * 20 + 20)), [1000] * 20))
    notes = [r for r in caplog.records if "replication.factor=3 ignored" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelname == "INFO"
