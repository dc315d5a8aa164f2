"""The deploy kit run for real (deploy/lab/): hosts as network namespaces, the kit's
files rendered for them, its bring-up script, HDFS HA, YARN HA and sparklog brokers;
operator tools from another host; sparklog's ETL on YARN once; one repetition of each
combination of the NameNode failover matrix; nothing left behind.

Needs root (``ip netns``), a JDK and Apache Hadoop's jars from Maven Central (``sparklog
classpath yarn``); skips saying which is missing. Measured with a load average near 15
(other suites beside it): 15 minutes, of which the bring-up 3, the ETL 4.5 (the venv
archive from pack-venv.sh's cache and its upload 1, one YARN run 3.3) and the matrix
6.7 (the bring-up alone took 1.7 minutes on a quiet machine). Over the ~6 minutes CI
should spend on it on this shared machine: see docs/deploy.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.hdfscluster import hadoop_unavailable
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "deploy" / "lab"
sys.path.insert(0, str(LAB))

import lab  # noqa: E402

pytestmark = pytest.mark.slow


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (ip netns, bind mounts)"
    why = lab.netns_unavailable()
    if why:
        return why
    why = hadoop_unavailable("yarn") or lab.ssh_unavailable()
    if why:
        return why
    if any(Path(f"/run/netns/{lab.netns(h)}").exists() for h in lab.HOSTS):
        return "a lab (or namespaces of its names) already exists on this machine"
    return None


@pytest.fixture(scope="module")
def lab_up(tmp_path_factory):
    why = _unavailable()
    if why:
        print(f"SKIP lab: {why}")
        pytest.skip(why)
    root = tmp_path_factory.mktemp("lab") / "lab"
    env = dict(os.environ, SPARKLOG_LAB_DIR=str(root))
    os.environ["SPARKLOG_LAB_DIR"] = str(root)
    try:
        up = subprocess.run([sys.executable, str(LAB / "lab.py"), "up"], env=env,
                            capture_output=True, text=True, timeout=900)
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        yield up.stdout
    finally:
        down = subprocess.run([sys.executable, str(LAB / "lab.py"), "down"], env=env,
                              capture_output=True, text=True, timeout=300)
        os.environ.pop("SPARKLOG_LAB_DIR", None)
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        left = [h for h in lab.HOSTS if re.search(rf"^{lab.netns(h)}\b", netns, re.M)]
        assert down.returncode == 0 and not left, down.stdout + down.stderr
        assert not root.exists() and not Path(f"/sys/class/net/{lab.BRIDGE}").exists()
        assert not any(Path(f"/etc/netns/{lab.netns(h)}").exists() for h in lab.HOSTS)


def on(host: str, user: str, *cmd: str) -> str:
    """Run a command on a lab host; its output (fails the test when it fails)."""
    proc = lab.run_on(host, user, list(cmd), capture=True)
    assert proc.returncode == 0, f"{cmd} on {host}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def test_the_kit_comes_up_as_written(lab_up):
    steps = re.findall(r"^== step \d+: (.*)$", lab_up, re.M)
    assert [s.split()[0].rstrip(":") for s in steps] == [
        "services", "ZooKeeper", "JournalNodes", "format", "NameNode", "copy", "NameNode", "ZKFCs",
        "DataNodes", "ResourceManagers", "NodeManagers", "sparklog", "sparklog"], steps
    assert "check-config: OK" in lab_up
    # every daemon runs from the kit's units, installed and enabled on its host
    expected = {"zk1": ["zookeeper.service"],
                "nn1": ["hadoop-hdfs@journalnode.service", "hadoop-hdfs@namenode.service",
                        "hadoop-hdfs@zkfc.service", "hadoop-yarn@resourcemanager.service"],
                "dn1": ["hadoop-hdfs@journalnode.service", "hadoop-hdfs@datanode.service",
                        "hadoop-yarn@nodemanager.service", "sparklog-broker@1.service"],
                "dn4": ["hadoop-hdfs@datanode.service", "hadoop-yarn@nodemanager.service"]}
    for host, units in expected.items():
        installed = lab.lab_dir() / "hosts" / host / lab.UNIT_DIR.lstrip("/")
        assert sorted(p.name for p in installed.glob("*.service")) == sorted(
            p.name for p in (lab.KIT / "systemd").glob("*.service")), host
        wants = sorted(p.name for p in (installed / "multi-user.target.wants").iterdir())
        assert wants == sorted(units), (host, wants)
        for unit in units:
            pid = lab.unit_pid(host, unit)
            assert pid is not None and lab.alive(pid), (host, unit)


def test_operator_tools_from_the_edge_host(lab_up):
    states = on("edge", "hdfs", "hdfs", "haadmin", "-getAllServiceState")
    assert sorted(re.findall(r"(active|standby)", states)) == ["active", "standby"], states
    assert "nn1.lab.test:8020" in states and "nn2.lab.test:8020" in states
    rms = on("edge", "yarn", "yarn", "rmadmin", "-getAllServiceState")
    assert sorted(re.findall(r"(active|standby)", rms)) == ["active", "standby"], rms
    assert "Total Nodes:4" in on("edge", "yarn", "yarn", "node", "-list")
    assert "Total number of applications" in on("edge", "yarn", "yarn", "application",
                                                 "-list")
    listing = on("edge", "hdfs", "hdfs", "dfs", "-ls", "/")
    assert re.search(r"^drwxr-x---\s+- sparklog sparklog .* /sparklog$", listing, re.M), listing


def test_a_client_on_another_host_reaches_every_leader_by_its_name(lab_up):
    """Brokers listen on 0.0.0.0 and advertise their host's name: a client on the edge
    host bootstraps from dn1 alone and writes to leaders on all three brokers."""
    script = (
        "from sparklog import Admin, Producer\n"
        "from sparklog.protocol import ApiKey, Connection\n"
        "with Admin('dn1.lab.test:9092') as a:\n"
        "    a.create_topic('reach', 6)\n"
        "    leaders = {p.leader for p in a.describe_topics(['reach'])[0].partitions}\n"
        "with Connection('dn1.lab.test:9092') as c:\n"
        "    brokers = c.request(ApiKey.METADATA, {'topics': []})['brokers']\n"
        "with Producer('dn1.lab.test:9092', acks='all', enable_idempotence=True) as p:\n"
        "    got = sorted(p.send('reach', b'v', partition=i).get(60).partition "
        "for i in range(6))\n"
        "print(sorted(leaders), sorted((b['node_id'], b['host'], b['port']) "
        "for b in brokers), got)\n")
    out = on("edge", "root", sys.executable, "-c", script)
    assert out.strip() == ("[1, 2, 3] [(1, 'dn1.lab.test', 9092), (2, 'dn2.lab.test', 9092), "
                           "(3, 'dn3.lab.test', 9092)] [0, 1, 2, 3, 4, 5]"), out


@pytest.mark.timeout(600)  # the venv packed (once per source: a cache), one YARN run
def test_etl_on_yarn_once_commits_every_record_once(lab_up):
    """sparklog's ETL through the kit's submit path on the lab's YARN (cluster mode,
    executors in NodeManager containers on the packed venv): every record once."""
    proc = subprocess.run([sys.executable, str(LAB / "yarn_etl.py"), "--once",
                           "--records", "100"], capture_output=True, text=True, timeout=580)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "yarn-etl: run 1 on YARN committed 100 records" in proc.stdout, proc.stdout


@pytest.mark.timeout(900)  # four failovers, each NameNode restored, then Spark's read-back
def test_failover_matrix_once_loses_no_acknowledged_record(lab_up, tmp_path):
    results = tmp_path / "failover.jsonl"
    proc = subprocess.run([sys.executable, str(LAB / "failover.py"), "--repetitions", "1",
                           "--seconds", "10", "--modes", "process,host",
                           "--results", str(results)],
                          capture_output=True, text=True, timeout=850)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "ack-check: OK: every acknowledged record read back once" in proc.stdout
    rows = re.findall(r"^\| (process|host) \| (writing|opening) \| 1 \|", proc.stdout, re.M)
    assert len(rows) == 4, proc.stdout
    # fencing as docs/deploy.md's matrix says, from the new active NameNode's ZKFC log:
    # a killed NameNode's host answers ssh and sshfence fences it (the port is closed);
    # a cut-off host does not, and shell(/bin/true) follows sshfence's failure
    runs = [json.loads(line) for line in results.read_text().splitlines()[:4]]
    ssh_ok = ("====== Fencing successful by method "
              "org.apache.hadoop.ha.SshFenceByTcpPort(null) ======")
    for run in runs:
        log = "\n".join(run["fencing"])
        if run["mode"] == "process":
            assert run["fenced_by"] == "sshfence", run
            assert ssh_ok in log and "Verified that the service is down." in log, log
        else:
            assert run["fenced_by"] == "shell", run
            assert ("Fencing method org.apache.hadoop.ha.SshFenceByTcpPort(null) was "
                    "unsuccessful." in log), log
            assert ("====== Fencing successful by method "
                    "org.apache.hadoop.ha.ShellCommandFencer(/bin/true) ======" in log), log
    # every run was appended as it ended, and the file alone gives the table back
    assert len(results.read_text().splitlines()) == 4 + 1  # the runs, then the verdict
    report = subprocess.run([sys.executable, str(LAB / "failover.py"), "--report",
                             str(results)], capture_output=True, text=True, timeout=60)
    assert report.returncode == 0 and len(re.findall(
        r"^\| (process|host) \| (writing|opening) \| 1 \|", report.stdout, re.M)) == 4, \
        report.stdout + report.stderr


def test_stop_cluster_stops_every_daemon_in_reverse_order(lab_up):
    """The kit's stop script (run last: the lab's other tests need the cluster): brokers
    first, ZooKeeper last, every unit's process gone, the units still enabled (a host
    that reboots starts them again)."""
    kit = lab.lab_dir() / "kit"
    running = {(h, p.name[:-len(".pid")]) for h in lab.HOSTS
               for p in (lab.lab_dir() / "hosts" / h / "run").glob("*.service.pid")}
    pids = {unit: lab.unit_pid(*unit) for unit in running}
    assert len(pids) == 23, sorted(running)  # ZooKeeper 3, JN 3, NN+ZKFC 4, DN 4, RM 2, NM 4, brokers 3
    proc = subprocess.run(["bash", str(kit / "bin" / "stop-cluster.sh"), "--env",
                           str(kit / "cluster.env")], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = [s.split()[0] for s in re.findall(r"^== step \d+: (.*)$", proc.stdout, re.M)]
    assert steps == ["sparklog", "NodeManagers", "ResourceManagers", "DataNodes", "ZKFCs",
                     "NameNodes", "JournalNodes", "ZooKeeper"], proc.stdout
    # (a stopped daemon may stay a zombie until the machine's init reaps it)
    left = {unit: pid for unit, pid in pids.items() if lab.alive(pid)}
    assert not left, left
    assert not list((lab.lab_dir() / "hosts" / "nn1" / "run").glob("*.service.pid"))
    wants = lab.lab_dir() / "hosts" / "nn1" / lab.UNIT_DIR.lstrip("/") / "multi-user.target.wants"
    assert (wants / "hadoop-hdfs@namenode.service").is_symlink()


def test_a_lab_going_down_leaves_the_shared_directories_to_the_labs_still_up(tmp_path):
    """Two labs up at once share the hosts' mount points: the first to go down must not
    remove them (a second lab's next command on a host failed to bind-mount ``/data``);
    the last one removes what labs made, and never a directory that was there before."""
    registry, before = tmp_path / "registry", tmp_path / "there-before"
    before.mkdir()
    made = [str(tmp_path / "data"), str(tmp_path / "netns")]
    first, second = (lab.SharedDirs(registry, name) for name in ("default", "l2"))
    first.claim([*made, str(before)])
    second.claim([*made, str(before)])
    assert all(Path(p).is_dir() for p in made)
    assert first.release() == []
    assert all(Path(p).is_dir() for p in made)  # the second lab still mounts on them
    Path(made[1], "entry").mkdir()  # something not the labs' in a shared directory
    left = second.release()
    assert not Path(made[0]).exists() and before.is_dir()
    assert len(left) == 1 and made[1] in left[0]  # left in place, and said why
    assert not registry.exists(), "the last lab down left the registry (its lock) behind"
    assert second.release() == []  # a second down is harmless
    assert not registry.exists()
    first.claim(made)  # a lab brought up afterwards makes the registry again
    assert (registry / "up-default").exists() and all(Path(p).is_dir() for p in made)
    assert first.release() == [] and not registry.exists()


def _open_count(path: Path) -> int:
    """How many of this process's descriptors are open on ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
    return count


def test_a_lab_waiting_for_the_registry_lock_while_the_last_lab_goes_down(tmp_path):
    """The last lab down removes the registry and its lock while another lab's ``up``
    may be waiting for that lock: the waiter then holds a lock on a removed file, and
    must take the lock again on the registry's new file rather than go on unguarded."""
    registry = tmp_path / "registry"
    going, coming = lab.SharedDirs(registry, "default"), lab.SharedDirs(registry, "l2")
    going.claim([str(tmp_path / "data")])
    claimed = threading.Event()
    with going._locked() as record:
        waiter = threading.Thread(target=lambda: (coming.claim([str(tmp_path / "data")]),
                                                  claimed.set()))
        waiter.start()
        wait_until(lambda: _open_count(registry / "lock") >= 2, 30,  # ours, the waiter's
                   "the second lab opening the registry's lock")
        assert not claimed.is_set()
        # the last lab down, under the lock the waiter is blocked on
        going._release(record)
        assert not registry.exists()
    waiter.join(30)
    assert claimed.is_set()
    assert (registry / "up-l2").exists() and (registry / "lock").exists()
    assert coming.release() == [] and not registry.exists()
