#!/usr/bin/env python3
"""The seed's NameNode HA failover matrix, run in the lab with sparklog as HDFS's client.

::

    deploy/lab/failover.py [--repetitions 10] [--rate 200] [--seconds 25]

Needs a lab that is up (``deploy/lab/lab.py up``). Failure modes: ``process`` (the
active NameNode's process is killed with SIGKILL; its ZKFC sees it fail its health
check and gives up the lock) and ``host`` (the active NameNode's host loses its
network: its link to the bridge is cut, the ZKFC's ZooKeeper session must expire before
the other ZKFC takes over). The other faults of the kit (``--modes``): ``journalnode``
(the JournalNode on dn1 killed: two of three remain, writes go on), ``datanode-host``
(dn4, a DataNode without a broker, loses its network: the pipelines through it are
rebuilt per the kit's ``replace-datanode-on-failure`` settings) and ``broker-host``
(dn3, broker 3 and a DataNode, loses its network: its partitions' leadership moves
once its ZooKeeper session expires; the "failover" column is then the time until no
partition of the topic is led by broker 3). Client models: ``writing`` (an idempotent producer with
acks=all is already writing through the brokers when the failure happens) and
``opening`` (a topic is created right after the failure, so its leaders open new
segments on HDFS during the failover; the producer, started before the failure, waits
for the topic and writes as soon as it exists). Each combination
runs ``--repetitions`` times; after each run the failed NameNode comes back (restarted,
or its link restored) as the standby.

The producer (``deploy/hadoop-ha/bin/ack-check.py produce`` on the edge host,
bootstrapping from dn1 only) logs every acknowledgement. At the end every acknowledged
record is read back through Spark from ``hdfs://<nameservice>/sparklog`` (``ack-check.py
verify``): present exactly once, where it was acknowledged, with its checksum.

Per combination it prints: NameNode failover time (from the fault to the other NameNode
reporting ``active`` on its JMX servlet), produce outage (the longest gap between two
acknowledgements, counting from the producer's start), failed sends (records the
producer gave up on: not acknowledged, at most once in the log), and broker crashes.
Exits 1 when an acknowledged record is lost or duplicated or a broker died.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lab  # noqa: E402  (the lab's hosts, run_on, directories)

ACK_CHECK = lab.KIT / "bin" / "ack-check.py"
NAMENODES = {"nn1": "nn1", "nn2": "nn2"}  # NameNode id -> lab host (hdfs-site.xml)
BROKER_HOSTS = ("dn1", "dn2", "dn3")
#: every failure mode, in the table's order
MODES = ("process", "host", "journalnode", "datanode-host", "broker-host")


def _jmx(host: str, bean: str, attribute: str):
    """One attribute of a NameNode's JMX bean (None when it does not answer)."""
    url = f"http://{lab.address(host)}:9870/jmx?qry=Hadoop:service=NameNode,name={bean}"
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            beans = json.load(resp)["beans"]
        return beans[0][attribute] if beans else None
    except (OSError, ValueError, KeyError, IndexError):
        return None


def nn_state(host: str) -> str:
    """``active``/``standby`` from the NameNode's JMX servlet, or ``down``."""
    return _jmx(host, "NameNodeStatus", "State") or "down"


def ready() -> bool:
    """One active and one standby NameNode, neither in safe mode: a standby restarted
    a moment ago is still in safe mode (until its DataNodes' block reports and the
    safe-mode extension), and a failover to it would refuse writes until then."""
    return sorted(nn_state(h) for h in NAMENODES.values()) == ["active", "standby"] and \
        all(_jmx(h, "NameNodeInfo", "Safemode") == "" for h in NAMENODES.values())


def broker_pids() -> dict[str, int]:
    """The broker process of each broker host (pid files of the lab's systemctl)."""
    out = {}
    for host in BROKER_HOSTS:
        for pid_file in (lab.lab_dir() / "hosts" / host / "run").glob("sparklog-broker@*.pid"):
            out[host] = int(pid_file.read_text())
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (non-zombie) process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def run_tool(host: str, user: str, *cmd: str) -> subprocess.CompletedProcess:
    """A command on a lab host; its output captured."""
    return lab.run_on(host, user, list(cmd), capture=True)


def start_producer(topic: str, ack_log: Path, records: int, rate: float, run_id: str,
                   ready: Path | None = None):
    """ack-check.py produce on the edge host, in the background. With ``ready`` it is
    started before its topic exists: it waits for the topic (creating ``ready`` once
    it runs), so that the outage measured is the cluster's, not a process start."""
    wait = ["--wait-for-topic", "300", "--ready-file", str(ready)] if ready else []
    return subprocess.Popen(
        [sys.executable, str(Path(lab.__file__).resolve()), "run", "edge", "root",
         sys.executable, str(ACK_CHECK), "produce", "--bootstrap-server",
         f"{lab.fqdn('dn1')}:9092", "--topic", topic, "--ack-log", str(ack_log),
         "--records", str(records), "--rate", str(rate), "--size", "1024",
         "--run-id", run_id, *wait],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def create_topic(topic: str) -> None:
    """A 3-partition topic with small segments (they roll during the run)."""
    proc = run_tool("edge", "root", sys.executable, "-m", "sparklog.cli.main", "topics",
                    "create", topic, "--partitions", "3", "--config", "segment.bytes=1048576",
                    "--bootstrap-server", f"{lab.fqdn('dn1')}:9092")
    # a create whose answer was lost in the failover is retried by the client and then
    # finds the topic it made: that is success
    if proc.returncode != 0 and "already exists" not in proc.stderr:
        raise RuntimeError(f"creating {topic} failed: {proc.stdout}{proc.stderr}")


#: the host each fault hits when it is not the active NameNode's
FAULT_HOSTS = {"journalnode": "dn1", "datanode-host": "dn4", "broker-host": "dn3"}
#: the broker living on the broker-host fault's host
LOST_BROKER = 3


def pid_of(host: str, name: str) -> int | None:
    """The pid in a lab host's pid file (``hdfs-namenode``, ``hdfs-journalnode``...)."""
    path = lab.lab_dir() / "hosts" / host / "run" / f"{name}.pid"
    return int(path.read_text()) if path.exists() else None


def live_datanodes() -> int:
    """Live DataNodes as the active NameNode counts them (0 when none answers)."""
    for host in NAMENODES.values():
        if nn_state(host) == "active":
            return _jmx(host, "FSNamesystemState", "NumLiveDataNodes") or 0
    return 0


def inject(mode: str, host: str) -> None:
    """The failure: kill a process (NameNode, JournalNode), or cut the host's link."""
    if mode in ("process", "journalnode"):
        os.kill(pid_of(host, "hdfs-namenode" if mode == "process" else "hdfs-journalnode"),
                signal.SIGKILL)
    else:
        lab.sh("ip", "link", "set", lab.veth(host), "down")


def restore(mode: str, host: str) -> None:
    """Bring the lost part back. After a NameNode fault the NameNode comes back as the
    standby: a NameNode cut off from the JournalNodes' majority exits by itself ("flush
    failed for required journal": QJM's fencing), so after a host loss it is restarted
    too, as an operator would. A lost host's daemons that exited are started again."""
    if mode != "process" and mode != "journalnode":
        lab.sh("ip", "link", "set", lab.veth(host), "up")
    if mode == "journalnode":
        proc = run_tool(host, "hdfs", "hdfs", "--daemon", "start", "journalnode")
        if proc.returncode != 0:
            raise RuntimeError(f"restarting the JournalNode on {host}: {proc.stdout}"
                               f"{proc.stderr}")
        return
    if mode in ("datanode-host", "broker-host"):
        if mode == "broker-host":
            pid = broker_pids().get(host)
            if pid is None or not alive(pid):
                run_tool(host, "root", "systemctl", "start",
                         f"sparklog-broker@{LOST_BROKER}.service")
        pid = pid_of(host, "hdfs-datanode")
        if pid is None or not alive(pid):
            run_tool(host, "hdfs", "hdfs", "--daemon", "start", "datanode")
        lab.wait(lambda: live_datanodes() == 4, 180, f"the DataNode on {host} live again")
        return
    pid_file = lab.lab_dir() / "hosts" / host / "run" / "hdfs-namenode.pid"

    def back() -> bool:
        # the cut-off NameNode may still be waiting for its journal writes to time out
        if not (pid_file.exists() and alive(int(pid_file.read_text()))):
            proc = run_tool(host, "hdfs", "hdfs", "--daemon", "start", "namenode")
            if proc.returncode != 0:
                raise RuntimeError(f"restarting the NameNode on {host}: "
                                   f"{proc.stdout}{proc.stderr}")
        return ready()

    lab.wait(back, 180, f"the NameNode on {host} back as standby, out of safe mode")


def leaders_moved_watch(topic: str, broker: int):
    """A watcher on the edge host printing the wall-clock ms at which no partition of
    ``topic`` is led by ``broker`` any more (polling the brokers' metadata)."""
    script = (
        "import sys, time\n"
        "from sparklog import Admin\n"
        "topic, broker = sys.argv[1], int(sys.argv[2])\n"
        "deadline = time.time() + 300\n"
        "while time.time() < deadline:\n"
        "    try:\n"
        "        with Admin('dn1.lab.test:9092') as a:\n"
        "            while time.time() < deadline:\n"
        "                ps = a.describe_topics([topic])[0].partitions\n"
        "                if ps and all(p.leader not in (broker, None, -1) for p in ps):\n"
        "                    print(int(time.time() * 1000), flush=True)\n"
        "                    sys.exit(0)\n"
        "                time.sleep(0.2)\n"
        "    except Exception:\n"
        "        time.sleep(0.5)\n"
        "sys.exit(1)\n")
    return subprocess.Popen(
        [sys.executable, str(Path(lab.__file__).resolve()), "run", "edge", "root",
         sys.executable, "-c", script, topic, str(broker)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def outage(ack_log: Path, run_id: str, started_ms: int) -> tuple[float, int, int]:
    """(longest gap between acknowledgements in s, counting from the producer's start;
    acknowledged; failed) of one run."""
    times, failed = [started_ms], 0
    for line in ack_log.read_text().splitlines():
        parts = line.split()
        if not parts[0].startswith(run_id + "-"):
            continue
        if parts[3] == "FAILED":
            failed += 1
        else:
            times.append(int(parts[4]))
    times.sort()
    gap = max((b - a for a, b in zip(times, times[1:])), default=0) / 1000
    return gap, len(times) - 1, failed


def one_run(mode: str, client: str, rep: int, args, ack_log: Path) -> dict:
    """One repetition of one combination; its figures."""
    lab.wait(ready, 180,
             "one active and one standby NameNode, out of safe mode, before the run")
    active = next(h for h in NAMENODES.values() if nn_state(h) == "active")
    other = next(h for h in NAMENODES.values() if h != active)
    target = active if mode in ("process", "host") else FAULT_HOSTS[mode]
    topic = f"fo{args.stamp}-{mode}-{client}-{rep}"
    run_id = topic
    records = int(args.rate * args.seconds)
    brokers = broker_pids()
    producer = watcher = None
    if client == "opening":  # running, waiting for its topic, before the fault
        ready_file = ack_log.with_name(f"{run_id}.ready")
        producer = start_producer(topic, ack_log, records, args.rate, run_id, ready_file)
        lab.wait(ready_file.exists, 120, "the producer started, waiting for its topic")
        ready_file.unlink()
    if client == "writing":
        create_topic(topic)
        started_ms = int(time.time() * 1000)
        producer = start_producer(topic, ack_log, records, args.rate, run_id)
        lab.wait(lambda: ack_log.exists() and run_id in ack_log.read_text(), 60,
             "the producer's first acknowledgements")
        if mode == "broker-host":
            watcher = leaders_moved_watch(topic, LOST_BROKER)
        time.sleep(1.0)
    t0 = time.monotonic()
    t0_ms = int(time.time() * 1000)
    inject(mode, target)
    failover = None
    try:
        if client == "opening":
            started_ms = t0_ms
            create_topic(topic)
            if mode == "broker-host":
                watcher = leaders_moved_watch(topic, LOST_BROKER)
        if mode in ("process", "host"):
            lab.wait(lambda: nn_state(other) == "active", 120,
                     f"the NameNode on {other} active")
            failover = time.monotonic() - t0
        elif watcher is not None:
            moved, _ = watcher.communicate(timeout=320)
            if watcher.returncode == 0 and moved.strip():
                failover = (int(moved.strip().splitlines()[-1]) - t0_ms) / 1000
        out, _ = producer.communicate(timeout=args.seconds * 10 + 120)
    finally:
        for proc in (producer, watcher):
            if proc is not None and proc.poll() is None:
                proc.kill()  # the transport process we started; its child ends with it
        restore(mode, target)
    gap, acked, failed = outage(ack_log, run_id, started_ms)
    # the broker of a lost host is not a crash: it was cut off, and restarted if it exited
    crashed = [h for h, pid in brokers.items() if not alive(pid)
               and not (mode == "broker-host" and h == target)]
    result = {"mode": mode, "client": client, "rep": rep, "topic": topic,
              "failover_s": None if failover is None else round(failover, 2),
              "outage_s": round(gap, 2), "acked": acked, "failed": failed,
              "broker_crashes": crashed, "target": target}
    shown = "   -  " if failover is None else f"{failover:5.1f}s"
    print(f"  {mode:13} {client:7} #{rep}: failover {shown}, outage {gap:5.1f}s, "
          f"{acked} acked, {failed} failed, crashed brokers: {crashed or 'none'}", flush=True)
    if producer.returncode != 0:
        print(out)
    return result


def table(results: list[dict]) -> str:
    """Per combination: failover and outage (median / max), failures, crashes. The
    failover column is the NameNode failover (NameNode faults), the leadership move
    (broker-host) or "-" (faults with nothing to fail over)."""
    lines = ["| failure | client | runs | failover s (median / max) | produce outage s "
             "(median / max) | failed sends | acked | broker crashes |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        for client in ("writing", "opening"):
            rows = [r for r in results if r["mode"] == mode and r["client"] == client]
            if not rows:
                continue
            f = [r["failover_s"] for r in rows if r["failover_s"] is not None]
            o = [r["outage_s"] for r in rows]
            fo = f"{statistics.median(f):.1f} / {max(f):.1f}" if f else "-"
            lines.append(
                f"| {mode} | {client} | {len(rows)} | {fo} "
                f"| {statistics.median(o):.1f} / {max(o):.1f} | {sum(r['failed'] for r in rows)} "
                f"| {sum(r['acked'] for r in rows)} | "
                f"{sum(len(r['broker_crashes']) for r in rows)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="failover.py", description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--rate", type=float, default=200, help="records per second")
    parser.add_argument("--seconds", type=float, default=25,
                        help="how long each run's producer writes")
    parser.add_argument("--modes", default="process,host",
                        help=f"comma-separated, of: {', '.join(MODES)}")
    parser.add_argument("--clients", default="writing,opening")
    args = parser.parse_args(argv)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        parser.error(f"unknown --modes {sorted(unknown)} (modes: {', '.join(MODES)})")
    args.stamp = int(time.time()) % 1000000  # topics of this invocation: fo<stamp>-...
    if not (lab.lab_dir() / "lab.json").exists():
        print("failover: no lab is up (deploy/lab/lab.py up)", file=sys.stderr)
        return 2
    ack_log = lab.lab_dir() / "hosts" / "edge" / "acks.log"
    ack_log.unlink(missing_ok=True)
    results = []
    for rep in range(1, args.repetitions + 1):
        for mode in args.modes.split(","):
            for client in args.clients.split(","):
                results.append(one_run(mode, client, rep, args, ack_log))
    print(table(results))
    topics = ",".join(r["topic"] for r in results)
    check = run_tool("edge", "sparklog", sys.executable, str(ACK_CHECK), "verify", "--path",
                     "hdfs://ns1/sparklog", "--topic", topics, "--ack-log", str(ack_log),
                     "--master", "local[2]")
    print("\n".join(line for line in check.stdout.splitlines() if line.startswith("ack-check")))
    crashes = sum(len(r["broker_crashes"]) for r in results)
    (lab.lab_dir() / "failover.json").write_text(json.dumps(results, indent=1))
    return 1 if check.returncode != 0 or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
