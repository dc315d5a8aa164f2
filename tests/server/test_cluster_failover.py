"""The fault tests of cluster mode (the HDFS HA failover matrix of the seed, for brokers).

* ``test_leaders_killed_repeatedly_lose_no_acknowledged_record``: three broker processes
  and a real ZooKeeper; an idempotent producer with acks=all writes checksummed records
  to three partitions without pause while partition leaders are stopped with SIGTERM
  (controlled shutdown) and killed with SIGKILL, ``SPARKLOG_FAILOVER_CYCLES`` times each
  (default 10; each broker is restarted after its turn). Then every partition is read
  back from the storage alone: every acknowledged record is there exactly once, every
  checksum matches, and each partition holds its records in the order they were sent.
* ``test_paused_old_leader_cannot_append_after_failover``: the leader is frozen with
  SIGSTOP while a produce request waits in its socket; its session expires, another
  broker takes over (fencing the storage lease, next leader epoch) and accepts writes;
  then the old leader is resumed with SIGCONT: its pending write is refused and never
  reaches the log (also when that write would first roll a new segment).
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed (pip install sparklog[cluster])")

from tests.support.failover import leaders_killed_repeatedly, paused_old_leader

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]

CYCLES = int(os.environ.get("SPARKLOG_FAILOVER_CYCLES", "10"))


def test_leaders_killed_repeatedly_lose_no_acknowledged_record(zookeeper, storage_root,
                                                                tmp_path):
    leaders_killed_repeatedly(storage_root, zookeeper.connect, tmp_path, CYCLES)


@pytest.mark.parametrize("roll", [False, True], ids=["append", "roll"])
def test_paused_old_leader_cannot_append_after_failover(zookeeper, storage_root, tmp_path,
                                                        roll):
    paused_old_leader(storage_root, zookeeper.connect, tmp_path, roll)


