#!/usr/bin/env python3
"""The seed's NameNode HA failover matrix, run in the lab with sparklog as HDFS's client.

::

    deploy/lab/failover.py                       # the whole matrix, 10 repetitions
    deploy/lab/failover.py --repetitions 1 --modes host --clients writing
    deploy/lab/failover.py --report RESULTS.jsonl # the table of a (cut) run's results

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
partition of the topic is led by broker 3) and ``resourcemanager`` (the active
ResourceManager killed while sparklog's ETL runs on YARN: ``yarn_etl.py``'s first two
runs, the kill during the second; the "failover" column is the other
ResourceManager's becoming active, and the run must complete, or its rerun commit, with
every record in the Delta table exactly once and only the new ones in the second
commit; ``--rm-repetitions``, default 1, as each takes minutes). Client models for the
others: ``writing`` (an idempotent producer with
acks=all is already writing through the brokers when the failure happens) and
``opening`` (a topic is created right after the failure, so its leaders open new
segments on HDFS during the failover; the producer, started before the failure, waits
for the topic and writes as soon as it exists). Each combination
runs ``--repetitions`` times; after each run the failed NameNode comes back (restarted,
or its link restored) as the standby.

Without ``--modes``/``--clients`` it runs the whole matrix unattended: the NameNode
faults (``process``, ``host``) with both clients, the kit's other faults with the
writing client and the ResourceManager's with its ETL, every combination once per
repetition (interleaved, so that a slow
hour of the machine spreads over all of them). ``broker-host`` has no ``opening`` form: a
topic created after dn3 is cut is assigned by a controller that still counts broker 3
live until its ZooKeeper session expires, so its "leadership moved" time would measure
that assignment (or nothing, when no partition lands on broker 3), not a leadership
move; it is skipped with that reason.

Progress (one line per run, with the time left) goes to stderr; each run's figures are
appended as one JSON line to ``--results`` (default
``~/.cache/sparklog/failover-<stamp>.jsonl``, outside the lab's directory, which ``lab.py
down`` removes) as soon as it ends, so a run cut short keeps what it measured:
``--report FILE`` prints the table of such a file. A run that fails (a restore that
does not complete, a producer that does not end) is recorded with its error and the
matrix goes on; three failures in a row stop it.

``--alternate-probe ROUNDS`` compares the brokers with and without their NameNode probe
(``storage.namenode.probe.interval.ms`` 1000 and 0, written into the lab's
broker.properties, every broker restarted between): ROUNDS rounds of the ``host``
combinations (or ``--modes``), each round once with the probe and once without, so that
the machine's slow and quiet minutes fall on both; one table per setting. It leaves the
probe on.

The producer (``deploy/hadoop-ha/bin/ack-check.py produce`` on the edge host,
bootstrapping from dn1 only) logs every acknowledgement. At the end every acknowledged
record is read back through Spark from ``hdfs://<nameservice>/sparklog`` (``ack-check.py
verify``): present exactly once, where it was acknowledged, with its checksum.

Per combination it prints: NameNode failover time (from the fault to the other NameNode
reporting ``active`` on its JMX servlet), produce outage (the longest gap between two
acknowledgements, counting from the fault for a client that opens a topic after it,
from the first acknowledgement for one already writing), failed sends (records the
producer gave up on: not acknowledged, at most once in the log), and broker crashes.
Exits 1 when an acknowledged record is lost or duplicated or a broker died.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
MODES = ("process", "host", "journalnode", "datanode-host", "broker-host", "resourcemanager")


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


def run_tool(host: str, user: str, *cmd: str) -> subprocess.CompletedProcess:
    """A command on a lab host; its output captured."""
    return lab.run_on(host, user, list(cmd), capture=True)


def verify_verdict(check: subprocess.CompletedProcess | None) -> str:
    """The ``ack-check`` lines of a verify run; when it failed without giving its verdict
    (Spark or HDFS broke before it counted), its exit status and the end of its output,
    so that a failed matrix says why."""
    if check is None:
        return "no run to verify"
    lines = [line for line in check.stdout.splitlines() if line.startswith("ack-check")]
    if check.returncode != 0 and not any(line.startswith("ack-check: FAILED")
                                         for line in lines):
        tail = (check.stdout + check.stderr).strip().splitlines()[-40:]
        lines.append(f"ack-check: verify exited {check.returncode} without a verdict; "
                     "the end of its output:")
        lines.extend("  " + line for line in tail)
    return "\n".join(lines)


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


#: the kit's systemd units of the daemons the faults kill or restart
NAMENODE, JOURNALNODE, DATANODE, ZKFC = (f"hadoop-hdfs@{d}.service" for d in (
    "namenode", "journalnode", "datanode", "zkfc"))


def live_datanodes() -> int:
    """Live DataNodes as the active NameNode counts them (0 when none answers)."""
    for host in NAMENODES.values():
        if nn_state(host) == "active":
            return _jmx(host, "FSNamesystemState", "NumLiveDataNodes") or 0
    return 0


#: how the new active NameNode's ZKFC fences the old one (hdfs-site.xml's
#: dfs.ha.fencing.methods, ``sshfence`` then ``shell(/bin/true)``), as docs/deploy.md's
#: failover matrix says: a killed NameNode's host still answers ssh, and ``sshfence``
#: finds the port closed; a lost host does not, and ``shell(/bin/true)`` follows
FENCED_BY = {"process": "sshfence", "host": "shell"}
#: the lines of a ZKFC's log that tell how it fenced (Hadoop's NodeFencer and
#: SshFenceByTcpPort)
FENCING_LINE = re.compile(r"Fencing|fencing|Trying method|Verified that the service is "
                          r"down|Successfully killed|Unable to connect|nc -z|fuser")


def fencing(host: str, offset: int) -> tuple[list[str], str | None]:
    """The fencing lines the ZKFC on ``host`` logged after ``offset`` of its log, and the
    method that fenced (``sshfence``, ``shell``, None when none did)."""
    with open(lab.unit_log(host, ZKFC), "rb") as log:
        log.seek(offset)
        lines = [line for line in log.read().decode(errors="replace").splitlines()
                 if FENCING_LINE.search(line)]
    done = next((line for line in lines if "Fencing successful by method" in line), "")
    method = ("sshfence" if "SshFenceByTcpPort" in done else
              "shell" if "ShellCommandFencer" in done else None)
    return lines, method


def inject(mode: str, host: str) -> None:
    """The failure: kill a process (NameNode, JournalNode), or cut the host's link."""
    if mode in ("process", "journalnode"):
        os.kill(lab.unit_pid(host, NAMENODE if mode == "process" else JOURNALNODE),
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
        proc = run_tool(host, "root", "systemctl", "start", JOURNALNODE)
        if proc.returncode != 0:
            raise RuntimeError(f"restarting the JournalNode on {host}: {proc.stdout}"
                               f"{proc.stderr}")
        return
    if mode in ("datanode-host", "broker-host"):
        if mode == "broker-host":
            pid = broker_pids().get(host)
            if pid is None or not lab.alive(pid):
                run_tool(host, "root", "systemctl", "start",
                         f"sparklog-broker@{LOST_BROKER}.service")
        pid = lab.unit_pid(host, DATANODE)
        if pid is None or not lab.alive(pid):
            run_tool(host, "root", "systemctl", "start", DATANODE)
        lab.wait(lambda: live_datanodes() == 4, 180, f"the DataNode on {host} live again")
        return
    def back() -> bool:
        # the cut-off NameNode may still be waiting for its journal writes to time out
        # (systemd restarts an exited one: Restart=on-failure; the lab's systemctl does not)
        pid = lab.unit_pid(host, NAMENODE)
        if pid is None or not lab.alive(pid):
            proc = run_tool(host, "root", "systemctl", "start", NAMENODE)
            if proc.returncode != 0:
                raise RuntimeError(f"restarting the NameNode on {host}: "
                                   f"{proc.stdout}{proc.stderr}")
        return ready()

    lab.wait(back, 180, f"the NameNode on {host} back as standby, out of safe mode")


def leaders_moved_watch(topic: str, broker: int):
    """A watcher on the edge host printing the wall-clock ms at which no partition of
    ``topic`` is led by ``broker`` any more, as a producer sees it: Metadata requests to
    dn1, nothing else (a DescribeConfigs, as ``Admin.describe_topics`` sends, reads the
    topic's config from HDFS on dn1, which the lost host's DataNode can stall)."""
    script = (
        "import sys, time\n"
        "from sparklog.clients.network import NetworkClient\n"
        "topic, broker = sys.argv[1], int(sys.argv[2])\n"
        "deadline = time.time() + 300\n"
        "while time.time() < deadline:\n"
        "    c = NetworkClient('dn1.lab.test:9092', request_timeout_ms=5000)\n"
        "    try:\n"
        "        while time.time() < deadline:\n"
        "            info = c.refresh_metadata([topic]).topic(topic)\n"
        "            ps = info.partitions if info is not None else ()\n"
        "            if ps and all(p.leader not in (broker, None, -1) for p in ps):\n"
        "                print(int(time.time() * 1000), flush=True)\n"
        "                sys.exit(0)\n"
        "            time.sleep(0.1)\n"
        "    except Exception:\n"
        "        time.sleep(0.5)\n"
        "    finally:\n"
        "        c.close()\n"
        "sys.exit(1)\n")
    return subprocess.Popen(
        [sys.executable, str(Path(lab.__file__).resolve()), "run", "edge", "root",
         sys.executable, "-c", script, topic, str(broker)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def outage(ack_log: Path, run_id: str, started_ms: int | None) -> tuple[float, int, int, int]:
    """(longest gap between acknowledgements in s, counting from ``started_ms`` (None:
    from the first acknowledgement); acknowledged; failed; when that gap began, epoch
    ms) of one run."""
    acks, failed = [], 0
    for line in ack_log.read_text().splitlines():
        parts = line.split()
        if not parts[0].startswith(run_id + "-"):
            continue
        if parts[3] == "FAILED":
            failed += 1
        else:
            acks.append(int(parts[4]))
    times = sorted(acks + ([] if started_ms is None else [started_ms]))
    gap, began = max(((b - a, a) for a, b in zip(times, times[1:])),
                     default=(0, times[0] if times else 0))
    return gap / 1000, len(acks), failed, began


def etl_run(rep: int, args) -> dict:
    """The ResourceManager fault: sparklog's ETL on YARN (``yarn_etl.py``'s runs 1 and
    2) with the active ResourceManager killed while run 2's application runs. Its
    figures: the ResourceManager failover time, whether run 2 completed (else its rerun
    counts), and the records in the Delta table, each checked to be there exactly once
    with run 2's commit holding only the new ones."""
    import yarn_etl

    topic = f"fo{args.stamp}rm{rep}"
    app = f"{topic}-daily"
    n = 300
    brokers = broker_pids()
    yarn_etl.ensure_archive()
    yarn_etl.produce(topic, 0, n)
    yarn_etl.run_ok(topic, app, "run 1")
    yarn_etl.produce(topic, n, n)
    _, failover, completed = yarn_etl.run_with_rm_failover(topic, app)
    if not completed:
        yarn_etl.run_ok(topic, app, "the rerun after the ResourceManager failover")
    state = yarn_etl.table_state(topic, app)
    yarn_etl.check_exactly_once(state, 2 * n, "after the ResourceManager failover")
    if [c["records"] for c in state["commits"]] != [n, n]:
        raise yarn_etl.CheckFailed(f"commits {state['commits']}, expected {n} then {n} "
                                   "records (only the new ones)")
    return {"mode": "resourcemanager", "client": "etl", "rep": rep, "topic": topic,
            "failover_s": round(failover, 2), "outage_s": None, "acked": 2 * n,
            "failed": 0, "job": "completed" if completed else "failed, its rerun committed",
            "broker_crashes": [h for h, pid in brokers.items() if not lab.alive(pid)],
            "target": "resourcemanager"}


def one_run(mode: str, client: str, rep: int, args, ack_log: Path) -> dict:
    """One repetition of one combination; its figures."""
    if mode == "resourcemanager":
        return etl_run(rep, args)
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
        # the outage counts from the first acknowledgement (the fault comes after it):
        # the producer's own start (a Python process on a loaded host: up to seconds)
        # is no outage of the cluster's
        started_ms = None
        producer = start_producer(topic, ack_log, records, args.rate, run_id)
        lab.wait(lambda: ack_log.exists() and run_id in ack_log.read_text(), 60,
             "the producer's first acknowledgements")
        if mode == "broker-host":
            watcher = leaders_moved_watch(topic, LOST_BROKER)
        time.sleep(1.0)
    zkfc_log = lab.unit_log(other, ZKFC)
    log_offset = zkfc_log.stat().st_size if zkfc_log.exists() else 0
    t0 = time.monotonic()
    t0_ms = int(time.time() * 1000)
    inject(mode, target)
    failover = None
    fence_lines, fenced_by = [], None
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
            fence_lines, fenced_by = fencing(other, log_offset)
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
    gap, acked, failed, began = outage(ack_log, run_id, started_ms)
    # the broker of a lost host is not a crash: it was cut off, and restarted if it exited
    crashed = [h for h, pid in brokers.items() if not lab.alive(pid)
               and not (mode == "broker-host" and h == target)]
    result = {"mode": mode, "client": client, "rep": rep, "topic": topic,
              "failover_s": None if failover is None else round(failover, 2),
              "outage_s": round(gap, 2), "acked": acked, "failed": failed,
              "broker_crashes": crashed, "target": target, "fault_ms": t0_ms,
              # where the outage fell: from this long after the fault (< 0: before it)
              "outage_from_s": round((began - t0_ms) / 1000, 2)}
    if mode in FENCED_BY:  # the new active NameNode's ZKFC: how it fenced the old one
        result.update(fenced_by=fenced_by, fencing=fence_lines)
    if producer.returncode != 0:
        result["producer_exit"] = producer.returncode
        print(out[-4000:], file=sys.stderr, flush=True)
    return result


def describe(result: dict) -> str:
    """One run's figures in one line (the progress on stderr)."""
    head = f"{result['mode']:13} {result['client']:7} #{result['rep']}"
    if "error" in result:
        return f"{head}: FAILED: {result['error']}"
    failover = result["failover_s"]
    shown = "   -  " if failover is None else f"{failover:5.1f}s"
    if result["outage_s"] is None:  # the ResourceManager's: a job, not a producer
        return (f"{head}: failover {shown}, the run {result['job']}, {result['acked']} "
                f"records in the table once, crashed brokers: "
                f"{result['broker_crashes'] or 'none'}")
    began = result.get("outage_from_s")
    when = "" if began is None else f" from {began:+.1f}s"
    fence = ""
    if result.get("mode") in FENCED_BY:
        fenced_by, expected = result.get("fenced_by"), FENCED_BY[result["mode"]]
        fence = (f", fenced by {fenced_by or 'nothing'}" +
                 ("" if fenced_by == expected else f" (NOT {expected} as documented)"))
    return (f"{head}: failover {shown}, outage {result['outage_s']:5.1f}s{when}, "
            f"{result['acked']} acked, {result['failed']} failed, crashed brokers: "
            f"{result['broker_crashes'] or 'none'}{fence}")


def table(results: list[dict]) -> str:
    """Per combination: failover and outage (median / max), failures, crashes. The
    failover column is the NameNode failover (NameNode faults), the leadership move
    (broker-host) or "-" (faults with nothing to fail over)."""
    lines = ["| failure | client | runs | failover s (median / max) | produce outage s "
             "(median / max) | outage - failover s (max) | over failover + 2 s "
             "| failed sends | acked | broker crashes | runs failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        for client in CLIENTS:
            every = [r for r in results if r.get("mode") == mode and r.get("client") == client]
            rows = [r for r in every if "error" not in r]
            if not every:
                continue
            f = [r["failover_s"] for r in rows if r["failover_s"] is not None]
            o = [r["outage_s"] for r in rows if r["outage_s"] is not None]
            over = [r["outage_s"] - r["failover_s"] for r in rows
                    if r["failover_s"] is not None and r["outage_s"] is not None]
            fo = f"{statistics.median(f):.1f} / {max(f):.1f}" if f else "-"
            oo = f"{statistics.median(o):.1f} / {max(o):.1f}" if o else "-"
            lines.append(
                f"| {mode} | {client} | {len(rows)} | {fo} | {oo} "
                f"| {f'{max(over):.1f}' if over else '-'} "
                f"| {sum(1 for d in over if d > 2.0) if over else '-'} "
                f"| {sum(r['failed'] for r in rows)} | {sum(r['acked'] for r in rows)} "
                f"| {sum(len(r['broker_crashes']) for r in rows)} | {len(every) - len(rows)} |")
    return "\n".join(lines)


#: the kit's faults other than the NameNode's, run with the writing client by default
OTHER_FAULTS = ("journalnode", "datanode-host", "broker-host")
#: the clients of each fault that has its own (the ResourceManager's: a Spark ETL on YARN)
OWN_CLIENTS = {"resourcemanager": ("etl",)}
CLIENTS = ("writing", "opening", "etl")
#: combinations that measure nothing meaningful, with the reason printed when skipped
SKIPPED = {("broker-host", "opening"):
           "a topic created after dn3 is cut is assigned by a controller that still "
           "counts broker 3 live until its session expires: that would time the "
           "assignment, not a leadership move"}


def combinations(modes: list[str], clients: list[str] | None) -> list[tuple[str, str]]:
    """The (mode, client) pairs of one repetition, in the table's order. Without
    ``clients``: both clients for the NameNode faults, the writing one for the others."""
    out = []
    for mode in modes:
        if mode in OWN_CLIENTS:
            out.extend((mode, c) for c in OWN_CLIENTS[mode])
            continue
        for client in (clients or (["writing", "opening"] if mode not in OTHER_FAULTS
                                   else ["writing"])):
            if (mode, client) in SKIPPED:
                print(f"failover: skipping {mode} x {client}: {SKIPPED[(mode, client)]}",
                      file=sys.stderr)
                continue
            out.append((mode, client))
    return out


def read_results(path: Path) -> list[dict]:
    """The runs of a results file (one JSON object per line; a line cut short by a
    kill is ignored)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


#: the broker setting ``--alternate-probe`` switches between rounds (on, then off)
PROBE_KEY = "storage.namenode.probe.interval.ms"
PROBE_VALUES = (1000, 0)


def set_probe_interval(ms: int) -> None:
    """Write ``PROBE_KEY=ms`` into the lab's broker.properties (the brokers read it at
    start)."""
    path = lab.lab_dir() / "kit" / "sparklog" / "broker.properties"
    lines = [line for line in path.read_text().splitlines()
             if not line.startswith(PROBE_KEY + "=")]
    path.write_text("\n".join(lines + [f"{PROBE_KEY}={ms}"]) + "\n")


def restart_brokers() -> None:
    """Stop and start every broker of the lab (broker i on dn<i>), then wait until dn1's
    metadata lists all of them."""
    from sparklog.clients.network import NetworkClient

    for i, host in enumerate(BROKER_HOSTS, 1):
        for action in ("stop", "start"):
            proc = run_tool(host, "root", "systemctl", action, f"sparklog-broker@{i}.service")
            if proc.returncode != 0:
                raise RuntimeError(f"systemctl {action} sparklog-broker@{i} on {host}: "
                                   f"{proc.stdout}{proc.stderr}")

    def registered() -> bool:
        client = NetworkClient(f"{lab.address('dn1')}:9092", request_timeout_ms=5000)
        try:
            return len(client.refresh_metadata([]).brokers) == len(BROKER_HOSTS)
        except Exception:  # noqa: BLE001 - not up yet
            return False
        finally:
            client.close()

    lab.wait(registered, 180, "every broker registered again after the restart", 1.0)


def alternate_probe(rounds: int, combos, args, ack_log: Path, record) -> None:
    """``rounds`` rounds of ``combos``, each round once with the brokers' NameNode probe
    on (``PROBE_KEY=1000``) and once off (0), the brokers restarted in between; every
    result carries ``probe_ms``. Leaves the probe on."""
    try:
        for rnd in range(1, rounds + 1):
            for ms in PROBE_VALUES:
                set_probe_interval(ms)
                restart_brokers()
                for mode, client in combos:
                    record(mode, client, rnd, {"probe_ms": ms})
    finally:
        set_probe_interval(PROBE_VALUES[0])
        restart_brokers()


def tables(results: list[dict]) -> str:
    """:func:`table`, one per ``probe_ms`` value when the results carry it (an
    ``--alternate-probe`` run), with each value's median outage minus failover."""
    values = sorted({r["probe_ms"] for r in results if "probe_ms" in r}, reverse=True)
    if not values:
        return table(results)
    out = []
    for v in values:
        rows = [r for r in results if r.get("probe_ms") == v]
        over = [r["outage_s"] - r["failover_s"] for r in rows
                if "error" not in r and r.get("failover_s") is not None]
        med = f"{statistics.median(over):.1f} s" if over else "-"
        out.append(f"{PROBE_KEY}={v} (median outage - failover: {med})\n\n{table(rows)}\n")
    return "\n".join(out)


def main(argv=None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="failover.py", description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--rate", type=float, default=200, help="records per second")
    parser.add_argument("--seconds", type=float, default=25,
                        help="how long each run's producer writes")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, of: {', '.join(MODES)} (default: all)")
    parser.add_argument("--clients", default=None,
                        help="comma-separated, of: writing, opening (default: both for "
                             "the NameNode faults, writing for the others)")
    parser.add_argument("--rm-repetitions", type=int, default=1,
                        help="repetitions of the ResourceManager fault (an ETL run on "
                             "YARN: minutes each), the first ones of the matrix")
    parser.add_argument("--results", type=Path, default=None,
                        help="append each run's figures here as JSON lines (default "
                             "~/.cache/sparklog/failover-<stamp>.jsonl)")
    parser.add_argument("--report", type=Path, default=None, metavar="RESULTS",
                        help="print the table of a results file and exit (no lab needed)")
    parser.add_argument("--alternate-probe", type=int, default=0, metavar="ROUNDS",
                        help=f"A/B of the brokers' NameNode probe: ROUNDS rounds of the "
                             f"--modes (default host) combinations, each once with "
                             f"{PROBE_KEY}=1000 and once with 0, brokers restarted between")
    args = parser.parse_args(argv)
    if args.report is not None:
        results = read_results(args.report)
        print(tables([r for r in results if "mode" in r]))
        for r in results:
            if "verify" in r:
                print(r["verify"])
        return 0
    if args.alternate_probe and args.modes == ",".join(MODES):
        args.modes = "host"  # the fault the probe is for
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown --modes {sorted(unknown)} (modes: {', '.join(MODES)})")
    clients = args.clients.split(",") if args.clients else None
    if clients and set(clients) - {"writing", "opening"}:
        parser.error(f"unknown --clients {clients} (writing, opening)")
    combos = combinations(modes, clients)
    if args.alternate_probe:  # the probe is the brokers': the YARN fault has no part in it
        combos = [c for c in combos if c[0] not in OWN_CLIENTS]
    args.stamp = int(time.time()) % 1000000  # topics of this invocation: fo<stamp>-...
    if not (lab.lab_dir() / "lab.json").exists():
        print("failover: no lab is up (deploy/lab/lab.py up)", file=sys.stderr)
        return 2
    results_path = args.results or (Path.home() / ".cache" / "sparklog"
                                    / f"failover-{args.stamp}.jsonl")
    results_path.parent.mkdir(parents=True, exist_ok=True)
    ack_log = lab.lab_dir() / "hosts" / "edge" / "acks.log"
    ack_log.unlink(missing_ok=True)
    rounds = args.alternate_probe or args.repetitions
    etl = [c for c in combos if c[0] in OWN_CLIENTS]
    total = rounds * (len(combos) - len(etl)) * (
        len(PROBE_VALUES) if args.alternate_probe else 1) + min(
        rounds, args.rm_repetitions) * len(etl)
    probe = " x probe on/off" if args.alternate_probe else ""
    rm_runs = (f", the ETL under a ResourceManager failover x "
               f"{min(rounds, args.rm_repetitions)}") if etl else ""
    print(f"failover: {total} runs ({len(combos) - len(etl)} combinations x {rounds}"
          f"{probe}{rm_runs}); results appended to {results_path}", file=sys.stderr, flush=True)
    results: list[dict] = []
    started = time.monotonic()

    class Stop(Exception):
        """Three runs in a row failed."""

    def record(mode: str, client: str, rep: int, extra: dict) -> None:
        try:
            result = {**one_run(mode, client, rep, args, ack_log), **extra}
        except Exception as e:  # noqa: BLE001 - recorded; the matrix goes on
            result = {"mode": mode, "client": client, "rep": rep, **extra,
                      "error": f"{type(e).__name__}: {e}"[:2000]}
        results.append(result)
        with open(results_path, "a") as f:
            f.write(json.dumps(result) + "\n")
        done = len(results)
        elapsed = time.monotonic() - started
        tag = f" probe {extra['probe_ms']} ms" if extra else ""
        print(f"[{done}/{total}, {elapsed / 60:.0f} min, about "
              f"{elapsed / done * (total - done) / 60:.0f} min left]{tag} {describe(result)}",
              file=sys.stderr, flush=True)
        if len(results) >= 3 and all("error" in r for r in results[-3:]):
            raise Stop()

    try:
        if args.alternate_probe:
            alternate_probe(args.alternate_probe, combos, args, ack_log, record)
        else:
            for rep in range(1, args.repetitions + 1):
                for mode, client in combos:
                    if mode in OWN_CLIENTS and rep > args.rm_repetitions:
                        continue
                    record(mode, client, rep, {})
    except Stop:
        print("failover: three runs in a row failed; stopping (the lab needs a look: "
              "lab.py status)", file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - a broker restart of --alternate-probe failed
        print(f"failover: stopped: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        results.append({"error": f"{type(e).__name__}: {e}"[:2000]})
    measured = [r for r in results if "error" not in r]
    print(tables(results))
    print(f"results: {results_path}")
    topics = ",".join(r["topic"] for r in measured if r["mode"] != "resourcemanager")
    check = run_tool("edge", "sparklog", sys.executable, str(ACK_CHECK), "verify", "--path",
                     "hdfs://ns1/sparklog", "--topic", topics, "--ack-log", str(ack_log),
                     "--master", "local[2]") if topics else None
    verdict = verify_verdict(check)
    print(verdict)
    with open(results_path, "a") as f:
        f.write(json.dumps({"verify": verdict,
                            "ok": bool(check) and check.returncode == 0}) + "\n")
    crashes = sum(len(r["broker_crashes"]) for r in measured)
    (lab.lab_dir() / "failover.json").write_text(json.dumps(results, indent=1))
    return 1 if (topics and (check is None or check.returncode != 0)) or crashes or \
        len(measured) < len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
