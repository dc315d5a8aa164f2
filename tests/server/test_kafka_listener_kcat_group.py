"""kcat (Debian's package) against one broker's Kafka listener, beyond
test_kafka_listener_kcat.py: its metadata listing (``-L``) of a created topic, and three
``kcat -G`` members of one group on a 6-partition topic through rebalances (members
started one by one, one stopped): every record read once, one owner per partition.
:class:`KcatProcess` (a kcat running in the background) serves the cluster tests of
test_kafka_listener_cluster_kcat_connect.py too."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading

from tests.server.test_kafka_listener_kcat import (
    kafka_address,  # noqa: F401 (a fixture)
    kcat,
)
from tests.server.test_kafka_listener_kcat import pytestmark as kcat_marks
from tests.support.kafkaconn import create_with_librdkafka, topic_name
from tests.support.waiting import wait_until

pytestmark = kcat_marks

_REBALANCED = re.compile(r"rebalanced \(memberid \S+\): (assigned|revoked): (.*)$")


class KcatProcess:
    """``kcat -b <address> <args>`` in the background: its standard output and error
    lines collected by threads as they come (``out``, ``err``), its standard input a
    pipe when ``stdin`` is set (:meth:`write`, :meth:`close_input`). Only this process
    is ever signalled."""

    def __init__(self, address: str, *args: str, stdin: bool = False):
        self.args = args
        self.proc = subprocess.Popen(
            ["kcat", "-b", address, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True, bufsize=1)
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(s, to), daemon=True)
                         for s, to in ((self.proc.stdout, self.out),
                                       (self.proc.stderr, self.err))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def write(self, text: str) -> None:
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def close_input(self) -> None:
        self.proc.stdin.close()

    def wait(self, timeout: float = 120) -> int:
        """Its exit status once it has exited and its output is read."""
        code = self.proc.wait(timeout)
        for t in self._readers:
            t.join(30)
        return code

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (kcat closes its consumer: commits, leaves the group), then its exit
        status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    def describe(self) -> str:
        return (f"kcat {' '.join(self.args)} (exit {self.proc.poll()}); its standard "
                f"error ends: {self.err[-20:]}")

    def assigned(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` it owns after its last rebalance (kcat -G prints
        each assignment and revocation on standard error): none after a revocation,
        None before the first assignment."""
        for line in reversed(self.err):
            m = _REBALANCED.search(line)
            if m:
                return set() if m.group(1) == "revoked" else {
                    int(p) for p in re.findall(rf"{re.escape(topic)} \[(\d+)\]", m.group(2))}
        return None


def test_kcat_lists_a_created_topic(kafka_address):  # noqa: F811
    """kcat -L (-J) of a created topic: the broker at its Kafka address, the controller,
    each partition with its leader, replicas and in-sync replicas."""
    topic = create_with_librdkafka(kafka_address, topic_name("kc-"), partitions=3)
    md = json.loads(kcat(kafka_address, "-L", "-J", "-t", topic)[0])
    assert md["brokers"] == [{"id": 0, "name": kafka_address}]
    assert md["controllerid"] == 0
    assert md["topics"] == [{"topic": topic, "partitions": [
        {"partition": p, "leader": 0, "replicas": [{"id": 0}], "isrs": [{"id": 0}]}
        for p in range(3)]}]
    listing = "\n".join(kcat(kafka_address, "-L"))
    assert f'topic "{topic}" with 3 partitions:' in listing, listing


def test_kcat_three_member_group_through_a_rebalance(kafka_address):  # noqa: F811
    """Three kcat -G members of one group on a 6-partition topic, started one by one
    while lines are produced, then one stopped (SIGTERM): after each rebalance the
    members own disjoint partitions covering all six; every line is read, none twice
    (the members commit what they read when their partitions are revoked), and the
    survivors own the stopped member's partitions at the end."""
    topic = create_with_librdkafka(kafka_address, topic_name("kc-"), partitions=6)
    group = "g-" + topic
    sent: list[str] = []

    def produce(n: int) -> None:
        lines = [f"line {i}" for i in range(len(sent), len(sent) + n)]
        kcat(kafka_address, "-P", "-t", topic, stdin="\n".join(lines) + "\n")
        sent.extend(lines)

    def member() -> KcatProcess:
        return KcatProcess(kafka_address, "-G", group, "-u", "-f", "%p %o %s\n",
                           "-X", "auto.offset.reset=earliest", topic)

    def read() -> list[tuple[int, int, str]]:
        return [(int(p), int(o), s) for m in members for p, o, s in
                (line.split(" ", 2) for line in list(m.out))]

    def balanced(live: list[KcatProcess]) -> bool:
        owned = [m.assigned(topic) for m in live]
        return (all(owned) and sum(len(o) for o in owned) == 6
                and set().union(*owned) == set(range(6)))

    def all_read() -> bool:
        return len(read()) >= len(sent)

    members: list[KcatProcess] = []
    try:
        for n in (1, 2, 3):
            members.append(member())
            wait_until(lambda: balanced(members), timeout=90,
                       what=f"{n} members sharing the 6 partitions: "
                       + " | ".join(m.describe() for m in members))
            produce(60)
            wait_until(all_read, timeout=90, what=f"{len(sent)} lines read by {n} members")
        gone = members[1]
        assert gone.stop() == 0, gone.describe()
        live = [members[0], members[2]]
        wait_until(lambda: balanced(live), timeout=90,
                   what="the stopped member's partitions taken over: "
                   + " | ".join(m.describe() for m in live))
        produce(60)
        wait_until(all_read, timeout=90, what=f"{len(sent)} lines read after a member left")
    finally:
        for m in members:
            m.stop()
    records = read()
    positions = [(p, o) for p, o, _ in records]
    assert len(positions) == len(set(positions)), "a record was read twice"
    assert sorted(s for _, _, s in records) == sorted(sent)
