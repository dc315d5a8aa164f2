"""The broker's log cleaner threads (:class:`sparklog.retention.cleaner.LogCleanerManager`)
over real partition logs: which partition they pick and when they leave one alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sparklog.format.marker import ABORT
from sparklog.log import PartitionLog
from sparklog.log.cleaner import run_task
from sparklog.retention.cleaner import LogCleanerManager
from sparklog.storage import open_fileio
from tests.log.test_log_compaction import Clock, config, records, txn_end, txn_write, write


@pytest.fixture
def fio(tmp_path):
    return open_fileio(tmp_path.as_uri())


def test_cleaner_does_not_retry_a_partition_stalled_on_an_open_transaction(fio, tmp_path):
    """A due partition whose first dirty segment holds an open transaction can clean
    nothing: the broker's cleaner remembers that and does not read it again at every
    backoff, only once its cleanable range changes (a segment sealed, the marker
    written)."""
    clock = Clock()
    d = str(tmp_path / "t" / "0")
    tasks: list = []

    def worker(task):  # the cleaning's steps 2-3, in this process, counted
        tasks.append(task.first_uncleanable)
        return run_task(fio, task)

    with PartitionLog.open(fio, d, config(segment_bytes=1 << 20), clock=clock) as plog:
        txn_write(plog, clock, 7, [("a", "open")])                   # 0
        write(plog, clock, [("a", "1"), ("b", "1")])                 # 1-2
        plog.roll()
        write(plog, clock, [("b", "2")])                             # 3
        plog.roll()
        writer = SimpleNamespace(name="t-0", topic_name="t", partition=0, log=plog)
        manager = LogCleanerManager(lambda: [writer], clock=clock, worker=worker)
        assert manager.clean_once() == 0  # due, tried: the transaction is open
        assert manager.stats[("t", 0)].stalled == (0, 4)
        assert manager.clean_once() == 0 and len(tasks) == 1  # not read again
        write(plog, clock, [("c", "1")])                             # 4
        plog.roll()
        assert manager.clean_once() == 0 and len(tasks) == 2  # a new range: tried again
        txn_end(plog, clock, 7, ABORT)                               # 5
        plog.roll()
        assert manager.clean_once() > 0 and len(tasks) == 3
        assert manager.stats[("t", 0)].stalled is None
        assert records(fio, d) == [(1, "a", "1"), (3, "b", "2"), (4, "c", "1")]
