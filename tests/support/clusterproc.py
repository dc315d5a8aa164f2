"""A cluster of real broker processes coordinated by a real ZooKeeper, for tests and the
failover benchmark.

::

    with BrokerCluster(storage_root, zookeeper.connect, n=3, log_dir=tmp_path) as cluster:
        cluster.bootstrap                      # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        cluster.leader_of("t", 0)              # broker id, from ZooKeeper
        cluster.brokers[1].kill()              # a BrokerProcess (tests/support/brokerproc.py)

Each broker is ``sparklog broker start --zookeeper ... --broker-id N`` on its own free
port with ``zookeeper.session.timeout.ms`` = ``session_ms``. ``view`` is a
:class:`ZkCoordinationStore` that registers no broker: the test's own window on the
cluster state. Only processes this object started are ever signalled.
"""

from __future__ import annotations

import time

from sparklog.coordination.zkstore import ZkCoordinationStore
from sparklog.errors import NotLeaderError
from sparklog.format.frame import encode_frame, raw_batch
from sparklog.protocol import ApiKey

from .brokerproc import BrokerProcess
from .waiting import DEFAULT_WAIT, wait_until


class BrokerCluster:
    """``n`` broker processes (ids 1..n) sharing one storage root and one chroot."""

    def __init__(self, storage_uri: str, zk_connect: str, n: int = 3, *, log_dir=None,
                 session_ms: int = 2000, extra_args=()):
        self.storage_uri = storage_uri
        self.zk_connect = zk_connect
        self.session_ms = session_ms
        self.brokers: dict[int, BrokerProcess] = {}
        for i in range(1, n + 1):
            args = ["--zookeeper", zk_connect, "--broker-id", str(i),
                    "--override", f"zookeeper.session.timeout.ms={session_ms}", *extra_args]
            log_path = None if log_dir is None else f"{log_dir}/broker-{i}.log"
            self.brokers[i] = BrokerProcess(storage_uri, args, log_path=log_path)
        self.view: ZkCoordinationStore | None = None

    def start(self) -> "BrokerCluster":
        """Start every broker and the test's view; wait until all are registered."""
        self.view = ZkCoordinationStore(self.zk_connect, session_timeout_ms=self.session_ms)
        for b in self.brokers.values():
            b.start()
        self.wait(lambda: len(self.view.live_brokers()) == len(self.brokers), 30,
                  "every broker registered")
        return self

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated (a bootstrap list)."""
        return ",".join(b.address for b in self.brokers.values())

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader id as the controller last wrote it (-1: none)."""
        state = self.view.view.state(topic, partition)
        return -1 if state is None else state.leader

    def state(self, topic: str, partition: int):
        """The partition's LeaderAndEpoch (leader, leader_epoch) or None."""
        return self.view.view.state(topic, partition)

    @staticmethod
    def wait(cond, timeout: float = DEFAULT_WAIT, what: str = "condition"):
        """Poll ``cond`` until truthy (returned) or fail naming ``what``
        (:func:`~tests.support.waiting.wait_until`)."""
        return wait_until(cond, timeout, what)

    def logs(self) -> str:
        """Every broker's log, headed by its id (for failure messages)."""
        return "\n".join(f"===== broker {i} =====\n{b.log_text()[-6000:]}"
                         for i, b in self.brokers.items())

    def stop(self) -> None:
        """Stop the brokers (SIGKILL if a graceful stop hangs) and the view."""
        for b in self.brokers.values():
            try:
                if b.running:
                    b.stop(timeout=30)
            except RuntimeError:
                pass
        if self.view is not None:
            self.view.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def produce_one(conn, topic: str, partition: int, value: bytes, acks=-1,
                timeout_ms: int = 5000) -> dict:
    """One PRODUCE request of one record over ``conn``; the partition's response item."""
    frame = encode_frame(raw_batch([value]))
    resp = conn.request(ApiKey.PRODUCE, {"acks": acks, "timeout_ms": timeout_ms, "topics": [
        {"name": topic, "partitions": [{"partition": partition, "records": frame}]}]})
    return resp["topics"][0]["partitions"][0]


def produce_accepted(conn, topic: str, partition: int, value: bytes,
                     timeout: float = 10) -> dict:
    """Produce one record to the broker the controller just named leader, retrying while
    it answers NotLeader: it takes the partition over asynchronously (it watches the
    controller's decision, then opens the log), and clients retry, as with Kafka's
    LeaderAndIsr. Fails on any other error or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (item := produce_one(conn, topic, partition, value))["error_code"] != 0:
        assert item["error_code"] == NotLeaderError.code, item
        assert time.monotonic() < deadline, item
        time.sleep(0.02)
    return item
