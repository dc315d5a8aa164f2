#!/usr/bin/env python3
"""The deploy kit (deploy/hadoop-ha/) brought up for real on one Linux machine.

::

    sudo .venv/bin/python deploy/lab/lab.py up       # hosts, files, check, bring-up
    sudo .venv/bin/python deploy/lab/lab.py down     # every process, namespace, file
    deploy/lab/lab.py run HOST USER COMMAND...       # a command on one lab host
    deploy/lab/lab.py status

Each host of the kit's topology (nn1, nn2, dn1..dn4, zk1..zk3, plus ``edge``, the
client host) is a network namespace with an address of its own on a bridge
(``sparklab0``, ``10.213.7.0/24``), its own host name (``<host>.lab.test``, in every
namespace's ``/etc/netns/<namespace>/hosts``) and its own ``/var/lib``, ``/var/log`` and ``/data``
(bind mounts, private to the host's processes). The kit's files are rendered with the
lab's host names in place of the ``*.example.com`` placeholders (nothing else changes in
``etc/``); install locations (``/opt/...``, ``/etc/sparklog``) point into the lab
directory and the heaps are small. Then ``bin/check-config.py`` runs on the edge host
and ``bin/start-cluster.sh --init`` does the ordered bring-up, with this script's
``run`` as its transport instead of ssh. Every daemon is a unit of the kit's
``systemd/``, installed and enabled on its host by ``start-cluster.sh`` (in the host's
private ``/var/lib``) and run by the lab's ``systemctl`` (no systemd runs in the
namespaces); Hadoop's and ZooKeeper's daemons run from the Maven jars of ``sparklog
classpath yarn`` (Apache Hadoop 3.4.2) through the lab's ``hdfs``/``yarn``/
``zkServer.sh`` commands. nn1 and nn2 each run an OpenSSH sshd, through which the
other NameNode's ZKFC fences (``sshfence``).

``up`` removes whatever it made when a step fails. ``down`` stops every process in the
lab's namespaces (SIGTERM, then SIGKILL), deletes the namespaces, the bridge, the
``/etc/netns`` entries, the lab directory (``$SPARKLOG_LAB_DIR``, default
``~/.cache/sparklog/lab``) and, when it is the last lab up, the shared directories
(``/etc/netns``, the mount point ``/data``) that a lab created. Needs root (``ip netns``).

Several labs on one machine: ``SPARKLOG_LAB_PREFIX=l2`` names the namespaces ``l2nn1``,
``l2dn1``..., the bridge ``l2br0``, gives them a subnet of their own (derived from the
prefix; ``SPARKLOG_LAB_SUBNET=10.213.9`` chooses it) and the directory ``lab-l2``. ``up``
refuses to start when a namespace or bridge of its names exists already. The labs
share the mount points of the hosts' private directories and ``/etc/netns``: a registry
in ``/run/sparklog-lab`` (``$SPARKLOG_LAB_SHARED``) counts the labs up, so that one lab's
``down`` does not remove ``/data`` from under another lab's hosts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / "deploy" / "hadoop-ha"
#: lab host -> last byte of its address; edge is the client host (spark-submit, tools)
HOSTS = {"edge": 5, "nn1": 11, "nn2": 12, "dn1": 21, "dn2": 22, "dn3": 23, "dn4": 24,
         "zk1": 31, "zk2": 32, "zk3": 33}
DOMAIN = "lab.test"
#: one setting keeps labs apart on one machine: with ``SPARKLOG_LAB_PREFIX=l2`` the hosts
#: are the namespaces ``l2nn1``, ``l2dn1``..., on the bridge ``l2br0`` with a subnet of
#: their own, and the lab directory is ``lab-l2``; host names inside stay ``nn1.lab.test``
PREFIX = os.environ.get("SPARKLOG_LAB_PREFIX", "")
if not re.fullmatch(r"[a-z0-9]{0,4}", PREFIX):
    raise SystemExit(f"lab: SPARKLOG_LAB_PREFIX={PREFIX!r}: at most 4 lower-case letters "
                     f"or digits (it becomes part of interface names)")
BRIDGE = f"{PREFIX}br0" if PREFIX else "sparklab0"
#: 10.213.7 for the default lab; a prefixed lab's third byte comes from its prefix
SUBNET = os.environ.get("SPARKLOG_LAB_SUBNET") or (
    f"10.213.{8 + zlib.crc32(PREFIX.encode()) % 240}" if PREFIX else "10.213.7")
#: Java heap of every lab daemon (2 cores and a shared machine) and of client tools
DAEMON_HEAP = "256m"
TOOL_HEAP = "128m"
#: directories each host gets privately (bind mounts inside its namespace)
PRIVATE_DIRS = ("/var/lib", "/var/log", "/data")
#: where the kit's systemd units are installed on a lab host (cluster.env's
#: ``SYSTEMD_UNIT_DIR``, ``/etc/systemd/system`` on a real host): in the host's private
#: ``/var/lib``, so each host has the units ``start-cluster.sh`` installed and enabled on it
UNIT_DIR = "/var/lib/lab-systemd/system"
#: the NameNode hosts: each runs an ssh server, through which the other's ZKFC fences it
SSH_HOSTS = ("nn1", "nn2")
SSHD = "/usr/sbin/sshd"
#: the kit's ``dfs.ha.fencing.ssh.private-key-files`` (hdfs-site.xml), the lab's own key
#: in its place
FENCING_KEY = "/home/hdfs/.ssh/id_ecdsa"
#: ``hdfs``/``yarn``/``hadoop`` subcommand -> (main class, is a daemon, subcommand kept
#: as the first argument), as Hadoop's bin scripts map them
COMMANDS = {
    "namenode": ("org.apache.hadoop.hdfs.server.namenode.NameNode", True, False),
    "datanode": ("org.apache.hadoop.hdfs.server.datanode.DataNode", True, False),
    "journalnode": ("org.apache.hadoop.hdfs.qjournal.server.JournalNode", True, False),
    "zkfc": ("org.apache.hadoop.hdfs.tools.DFSZKFailoverController", True, False),
    "haadmin": ("org.apache.hadoop.hdfs.tools.DFSHAAdmin", False, False),
    "dfsadmin": ("org.apache.hadoop.hdfs.tools.DFSAdmin", False, False),
    "dfs": ("org.apache.hadoop.fs.FsShell", False, False),
    "fs": ("org.apache.hadoop.fs.FsShell", False, False),
    "debug": ("org.apache.hadoop.hdfs.tools.DebugAdmin", False, False),
    "fsck": ("org.apache.hadoop.hdfs.tools.DFSck", False, False),
    "getconf": ("org.apache.hadoop.hdfs.tools.GetConf", False, False),
    "resourcemanager": ("org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
                        True, False),
    "nodemanager": ("org.apache.hadoop.yarn.server.nodemanager.NodeManager", True, False),
    "rmadmin": ("org.apache.hadoop.yarn.client.cli.RMAdminCLI", False, False),
    "application": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", False, True),
    "node": ("org.apache.hadoop.yarn.client.cli.NodeCLI", False, True),
    "logs": ("org.apache.hadoop.yarn.client.cli.LogsCLI", False, False),
}
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: Java 17 closes JDK internals that Hadoop 3.4 still opens (as Hadoop's scripts do)
ADD_OPENS = [f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
             for pkg in ("java.lang", "java.lang.reflect", "java.io", "java.net", "java.nio",
                         "java.util", "java.util.concurrent", "sun.nio.ch")]
#: what a Hadoop distribution ships in etc/hadoop beside the site files, and the kit does
#: not (it is installed over a distribution's etc/hadoop): logging, and the
#: CapacityScheduler's one queue (without it a ResourceManager does not start)
LOG4J = """\
hadoop.root.logger=INFO,console
log4j.rootLogger=${hadoop.root.logger}
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
"""
CAPACITY_SCHEDULER = {
    "yarn.scheduler.capacity.root.queues": "default",
    "yarn.scheduler.capacity.root.default.capacity": "100",
    "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
    "yarn.scheduler.capacity.maximum-am-resource-percent": "0.5",
}


class LabError(Exception):
    """A lab step failed (the message says which and why)."""


def lab_dir() -> Path:
    """Where the lab keeps its files (``$SPARKLOG_LAB_DIR``)."""
    override = os.environ.get("SPARKLOG_LAB_DIR")
    name = f"lab-{PREFIX}" if PREFIX else "lab"
    return Path(override) if override else Path.home() / ".cache" / "sparklog" / name


def netns(host: str) -> str:
    """The network namespace of a lab host (``SPARKLOG_LAB_PREFIX`` + host)."""
    return PREFIX + host


def veth(host: str) -> str:
    """The bridge's end of a lab host's link (cut to lose the host)."""
    return f"{PREFIX}slab-{host}"


def fqdn(host: str) -> str:
    """A lab host's full name."""
    return f"{host}.{DOMAIN}"


def address(host: str) -> str:
    """A lab host's address."""
    return f"{SUBNET}.{HOSTS[host]}"


def wait(cond, timeout: float, what: str, interval: float = 0.1):
    """Poll ``cond`` every ``interval`` s until it returns something true, which is
    returned; LabError naming ``what`` after ``timeout`` s. The one poller of the lab's
    scripts (failover.py, yarn_etl.py)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise LabError(f"gave up after {timeout:.0f}s waiting for: {what}")
        time.sleep(interval)


def sh(*cmd: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    """Run a command of the root namespace (LabError with its output when it fails)."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LabError(f"`{shlex.join(cmd)}` failed ({proc.returncode}): "
                       f"{(proc.stderr or proc.stdout).strip()}")
    if not quiet and proc.stdout.strip():
        print(proc.stdout.rstrip())
    return proc


# --- state: what up made, so that down removes exactly that ----------------------------
class State:
    """The lab's record of what it created (``lab.json`` in the lab directory)."""

    def __init__(self, root: Path):
        self.root = root
        self.path = root / "lab.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {
            "namespaces": [], "links": [], "netns_etc": [], "shared_dirs": []}

    def add(self, kind: str, item: str) -> None:
        """Record ``item`` before it is created (down tolerates it missing)."""
        self.data[kind].append(item)
        self.path.write_text(json.dumps(self.data, indent=1))


def _inode(path: Path) -> int | None:
    """The inode ``path`` names now (None: no such file)."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


class SharedDirs:
    """The directories every lab on the machine shares (``/etc/netns`` and the mount
    points of :data:`PRIVATE_DIRS`): the first lab that needs one makes it, the last lab
    to go down removes what labs made, and a directory that was there before any lab is
    never removed. The registry (``made.json``, one ``up-<lab>`` file per lab up, a lock)
    lives in ``/run``, which is cleared at boot as the namespaces are; the last lab down
    removes it with its lock, so nothing of the labs is left."""

    def __init__(self, registry: Path, lab: str):
        self.registry, self.lab = registry, lab

    @contextlib.contextmanager
    def _locked(self):
        """Hold the registry's lock. The last lab down removes the lock file with the
        registry, so a lock taken on a file that is no longer the registry's (another
        process removed it while this one waited) is dropped and taken again."""
        while True:
            self.registry.mkdir(parents=True, exist_ok=True)
            with open(self.registry / "lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if _inode(self.registry / "lock") == os.fstat(lock.fileno()).st_ino:
                    yield self.registry / "made.json"
                    return

    def claim(self, paths) -> None:
        """Count this lab as up; make those of ``paths`` that are missing."""
        with self._locked() as record:
            made = json.loads(record.read_text()) if record.exists() else []
            for path in paths:
                if not os.path.exists(path):
                    os.makedirs(path)
                    made.append(path)
            record.write_text(json.dumps(made))
            (self.registry / f"up-{self.lab}").touch()

    def release(self) -> list[str]:
        """Count this lab as down; the last one removes the directories labs made.
        Returns what was left in place, with why."""
        with self._locked() as record:
            return self._release(record)

    def _release(self, record: Path) -> list[str]:
        """:meth:`release` under the registry's lock."""
        (self.registry / f"up-{self.lab}").unlink(missing_ok=True)
        if any(self.registry.glob("up-*")):
            return []
        left = []
        if record.exists():
            for path in reversed(json.loads(record.read_text())):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    left.append(f"{path} left in place: {exc}")
            record.unlink()
        # no lab is up: the registry goes too, its lock last (see _locked)
        (self.registry / "lock").unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # something else in it: left in place
            self.registry.rmdir()
        return left


def shared_dirs(registry: Path | None = None) -> SharedDirs:
    """This lab's view of the machine's shared directories (:class:`SharedDirs`), in
    ``registry`` (default ``$SPARKLOG_LAB_SHARED`` or ``/run/sparklog-lab``; ``down``
    uses the one its ``up`` recorded)."""
    return SharedDirs(registry or Path(os.environ.get("SPARKLOG_LAB_SHARED",
                                                      "/run/sparklog-lab")),
                      PREFIX or "default")


# --- up ----------------------------------------------------------------------------------
def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made here (None when they can)."""
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "iproute2's ip or util-linux's unshare is not installed"
    probe = f"sparklab-probe-{os.getpid()}"
    proc = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"`ip netns add` is not permitted here: {proc.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def ssh_unavailable() -> str | None:
    """Why the NameNode hosts' ssh servers cannot run here (None when they can): sshfence
    runs ``fuser`` and ``nc`` on the fenced host."""
    missing = [name for name, found in (("OpenSSH's sshd", os.access(SSHD, os.X_OK)),
                                        ("ssh-keygen", shutil.which("ssh-keygen")),
                                        ("fuser (psmisc)", shutil.which("fuser")),
                                        ("nc (netcat)", shutil.which("nc"))) if not found]
    return (f"{', '.join(missing)} not installed (scripts/ci-deps.sh installs them): the "
            f"ZKFCs fence through ssh") if missing else None


def start_ssh(root: Path) -> None:
    """An ssh server on each NameNode host, through which the other host's ZKFC fences
    (``sshfence``): a host key each, and the fencing key authorized for root (the user the
    lab's ZKFCs run as, whom ``sshfence`` without a user logs in as). The fencing key is
    ECDSA P-256 in PEM form: the jsch 0.1.55 that Hadoop 3.4 uses loads only PEM keys (no
    ed25519), and its RSA signatures are ``ssh-rsa`` (SHA-1), which OpenSSH 8.8 and later
    refuse unless told otherwise. Each sshd sees a private ``/run`` (its privilege
    separation directory ``/run/sshd``) and logs to the host's ``/var/log/sshd.log``."""
    ssh = root / "ssh"
    ssh.mkdir(mode=0o700)
    sh("ssh-keygen", "-q", "-t", "ecdsa", "-b", "256", "-m", "PEM", "-N", "", "-C",
       "hdfs fencing (lab)", "-f", str(ssh / "id_ecdsa"))
    (ssh / "authorized_keys").write_text((ssh / "id_ecdsa.pub").read_text())
    for host in SSH_HOSTS:
        key = ssh / f"ssh_host_ecdsa_key.{host}"
        sh("ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(key))
        config = ssh / f"sshd_config.{host}"
        config.write_text(f"""\
ListenAddress {address(host)}:22
HostKey {key}
AuthorizedKeysFile {ssh / "authorized_keys"}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# the lab's files lie under a world-writable temp directory
StrictModes no
PidFile {root / "hosts" / host / "run" / "sshd.pid"}
LogLevel VERBOSE
""")
        proc = run_on(host, "root", [
            "sh", "-c", 'mount -t tmpfs -o mode=755 lab-sshd /run && mkdir -m 755 /run/sshd '
            '&& exec "$@"', "sh", SSHD, "-f", str(config), "-E", "/var/log/sshd.log"],
            capture=True)
        if proc.returncode != 0:
            raise LabError(f"sshd on {host} did not start: {proc.stdout}{proc.stderr}")


def make_network(state: State) -> None:
    """The bridge, one namespace per host with its veth, address and hosts file."""
    state.add("links", BRIDGE)
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    hosts = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
        f"{address(h)} {fqdn(h)} {h}\n" for h in HOSTS)
    shared = shared_dirs()
    state.add("shared_dirs", str(shared.registry))
    shared.claim(["/etc/netns", *PRIVATE_DIRS])
    for host in HOSTS:
        ns, link = netns(host), veth(host)
        state.add("namespaces", ns)
        sh("ip", "netns", "add", ns)
        state.add("links", link)
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", link, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{address(host)}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        etc = Path("/etc/netns") / ns
        state.add("netns_etc", str(etc))
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts)


def render_kit(root: Path, java_home: str) -> Path:
    """The kit with the lab's host names, install locations and heaps; returns its dir."""
    kit = root / "kit"
    shutil.copytree(KIT, kit, ignore=shutil.ignore_patterns("__pycache__"))
    venv_bin = Path(sys.executable).parent
    install = {  # install locations of the kit -> the lab's
        "/opt/sparklog/venv/bin/": f"{venv_bin}/",
        "/etc/sparklog/": f"{kit}/sparklog/",
        "/etc/hadoop/conf": f"{kit}/etc/hadoop",
        "/opt/hadoop": f"{root}/hadoop",
        "/opt/zookeeper": f"{root}/zookeeper",
        "/usr/lib/jvm/java-17-openjdk-amd64": java_home,
        "HADOOP_CLIENT_OPTS=-Xmx2g": f"HADOOP_CLIENT_OPTS=-Xmx{DAEMON_HEAP}",
    }
    for path in kit.rglob("*"):
        if not path.is_file() or path.suffix in (".py", ".sh", ".md"):
            continue
        text = path.read_text()
        new = re.sub(r"\b([a-z]+\d)\.example\.com\b", rf"\1.{DOMAIN}", text)
        if path.parent.name != "hadoop" and path.parent.name != "zookeeper":
            for old, lab in install.items():
                new = new.replace(old, lab)
        if new != text:
            path.write_text(new)
    hdfs_site = kit / "etc" / "hadoop" / "hdfs-site.xml"
    hdfs_site.write_text(hdfs_site.read_text().replace(FENCING_KEY, str(root / "ssh" /
                                                                        "id_ecdsa")))
    (kit / "etc" / "hadoop" / "log4j.properties").write_text(LOG4J)
    (kit / "etc" / "hadoop" / "capacity-scheduler.xml").write_text(
        "<?xml version=\"1.0\"?>\n<configuration>\n" + "".join(
            f"  <property><name>{k}</name><value>{v}</value></property>\n"
            for k, v in CAPACITY_SCHEDULER.items()) + "</configuration>\n")
    cluster = kit / "cluster.env"
    cluster.write_text(cluster.read_text() + f"""
# ----- the lab (deploy/lab/lab.py): hosts are network namespaces of this machine -----
REMOTE_COMMAND="{sys.executable} {Path(__file__).resolve()} run"
HADOOP_HOME={root}/hadoop
HADOOP_CONF_DIR={kit}/etc/hadoop
ZOOKEEPER_HOME={root}/zookeeper
SYSTEMD_UNIT_DIR={UNIT_DIR}
""")
    return kit


def write_tools(root: Path, classpath: str) -> None:
    """``hadoop``/``hdfs``/``yarn``, ``zkServer.sh`` and ``systemctl`` of the lab hosts:
    small scripts that hand over to ``lab.py tool``."""
    (root / "classpath").write_text(classpath)
    me = Path(__file__).resolve()
    for rel in ("hadoop/bin/hadoop", "hadoop/bin/hdfs", "hadoop/bin/yarn",
                "zookeeper/bin/zkServer.sh", "bin/systemctl"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        # the lab's settings baked in: YARN containers run these without the lab's env
        path.write_text(f"#!/bin/sh\nexport SPARKLOG_LAB_DIR={shlex.quote(str(root))} "
                        f"SPARKLOG_LAB_PREFIX={shlex.quote(PREFIX)}\n"
                        f"exec {shlex.quote(sys.executable)} {shlex.quote(str(me))} "
                        f"tool {path.name} \"$@\"\n")
        path.chmod(0o755)


def prepare_hosts(root: Path, kit: Path) -> None:
    """Each host's private directories; ZooKeeper's ``myid`` on the ensemble."""
    zoo = (kit / "etc" / "zookeeper" / "zoo.cfg").read_text()
    for host in HOSTS:
        base = root / "hosts" / host
        for path in PRIVATE_DIRS:
            (base / path.strip("/")).mkdir(parents=True, exist_ok=True)
        (base / "run").mkdir(exist_ok=True)
    for number, name in re.findall(r"^server\.(\d+)=([^:]+):", zoo, re.M):
        host = name.split(".")[0]
        data = root / "hosts" / host / "var" / "lib" / "zookeeper"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(number + "\n")


def up(args) -> int:
    """Create the hosts, render and check the kit, run its bring-up."""
    root = lab_dir()
    if (root / "lab.json").exists():
        raise LabError(f"a lab is already up ({root}): run `lab.py down` first")
    why = netns_unavailable()
    if why:
        raise LabError(why)
    taken = [netns(h) for h in HOSTS if Path(f"/run/netns/{netns(h)}").exists()] + (
        [BRIDGE] if Path(f"/sys/class/net/{BRIDGE}").exists() else [])
    if taken:
        raise LabError(f"{', '.join(taken)} already exist (another lab?): set "
                       f"SPARKLOG_LAB_PREFIX to bring up a lab of other names")
    java = shutil.which("java")
    if java is None:
        raise LabError("java is not installed (Hadoop's daemons need a JDK 17)")
    java_home = str(Path(os.path.realpath(java)).parent.parent)
    why = ssh_unavailable()
    if why:
        raise LabError(why)
    sys.path.insert(0, str(REPO))
    from sparklog.maven import classpath

    jars = classpath("yarn")  # before anything is made: a resolution failure leaves nothing
    root.mkdir(parents=True, exist_ok=True)
    state = State(root)
    state.path.write_text(json.dumps(state.data))
    try:
        t0 = time.monotonic()
        make_network(state)
        kit = render_kit(root, java_home)
        write_tools(root, os.pathsep.join(jars))
        prepare_hosts(root, kit)
        start_ssh(root)
        print(f"== lab hosts up ({len(HOSTS)} namespaces on {BRIDGE}, {SUBNET}.0/24); "
              f"kit rendered in {kit}")
        check = run_on("edge", "root", [sys.executable, str(kit / "bin" / "check-config.py"),
                                        str(kit)], capture=True)
        print(check.stdout.rstrip())
        if check.returncode != 0:
            raise LabError("check-config.py found problems in the rendered kit")
        start = subprocess.run(["bash", str(kit / "bin" / "start-cluster.sh"), "--init",
                                "--env", str(kit / "cluster.env")])
        if start.returncode != 0:
            raise LabError(f"start-cluster.sh failed ({start.returncode}); daemon logs are "
                           f"in {root}/hosts/<host>/var/log")
        print(f"== lab up in {time.monotonic() - t0:.0f}s; run commands on a host with "
              f"`lab.py run edge root hdfs haadmin -getAllServiceState`")
        return 0
    except BaseException:
        print("== lab: start failed, removing what was made", file=sys.stderr)
        keep = os.environ.get("SPARKLOG_LAB_KEEP_LOGS")
        if keep:
            shutil.copytree(root / "hosts", keep, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("data", "lib"))
        down(None)
        raise


# --- running on a host ---------------------------------------------------------------------
def host_env(host: str, user: str) -> dict:
    """The environment of commands on a lab host (as its service user)."""
    root = lab_dir()
    env = dict(os.environ)
    env.update({
        "PATH": f"{root}/bin:{root}/hadoop/bin:{root}/zookeeper/bin:{env.get('PATH', '')}",
        "SPARKLOG_LAB_DIR": str(root),
        "SPARKLOG_LAB_HOST": host,
        "HADOOP_USER_NAME": user if user != "root" else env.get("HADOOP_USER_NAME", "hdfs"),
        "HADOOP_CONF_DIR": str(root / "kit" / "etc" / "hadoop"),
        "HADOOP_HOME": str(root / "hadoop"),
        "HADOOP_LOG_DIR": "/var/log/hadoop",
        "HADOOP_PID_DIR": str(root / "hosts" / host / "run"),
        "ZOOCFGDIR": str(root / "kit" / "etc" / "zookeeper"),
        # sparklog's venv is installed on every lab host: Spark's Python workers use it
        "PYSPARK_PYTHON": sys.executable,
    })
    return env


def run_on(host: str, user: str, cmd: list[str], capture: bool = False):
    """Run ``cmd`` on lab host ``host`` as ``user`` (HDFS/YARN user name; the process
    itself runs as root): inside its namespace, with its host name and private dirs."""
    if host not in HOSTS:
        host = host.split(".")[0]
    if host not in HOSTS:
        raise LabError(f"unknown lab host {host!r} (hosts: {', '.join(HOSTS)})")
    base = lab_dir() / "hosts" / host
    mounts = "; ".join(f"mount --bind {shlex.quote(str(base / p.strip('/')))} {p}"
                       for p in PRIVATE_DIRS)
    script = f'hostname {fqdn(host)} && {mounts} && exec "$@"'
    full = ["ip", "netns", "exec", netns(host), "unshare", "--uts", "--", "sh", "-c", script,
            "sh", *cmd]
    return subprocess.run(full, env=host_env(host, user), text=True,
                          capture_output=capture)


# --- the lab's Hadoop, ZooKeeper and systemd commands ----------------------------------------
#: java.io.tmpdir of the lab's daemons and tools, in the host's private /var/lib: the
#: web servers' ``jetty-*`` work directories (one per daemon start) go with the lab on
#: ``down`` instead of piling up in the machine's shared temp directory
JAVA_TMP_DIR = "/var/lib/hadoop/tmp"


def _java(main: str, heap: str, log_name: str | None, args: list[str]) -> list[str]:
    conf = os.environ["HADOOP_CONF_DIR"]
    jars = (lab_dir() / "classpath").read_text()
    os.makedirs(JAVA_TMP_DIR, exist_ok=True)
    opts = [f"-Xmx{heap}", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true", *ADD_OPENS,
            f"-Djava.io.tmpdir={JAVA_TMP_DIR}",
            "-Dhadoop.log.dir=/var/log/hadoop", "-Dyarn.log.dir=/var/log/hadoop",
            f"-Dhadoop.id.str={os.environ.get('HADOOP_USER_NAME', '')}"]
    if log_name:
        opts.append(f"-Dhadoop.log.file={log_name}")
    else:  # a command-line tool: warnings and its own output only
        opts.append("-Dhadoop.root.logger=WARN,console")
    return ["java", *opts, "-cp", f"{conf}:{jars}", main, *args]


def _pid_file(name: str) -> Path:
    return Path(os.environ["HADOOP_PID_DIR"]) / f"{name}.pid"


def _daemon(name: str, cmd: list[str], action: str, env: dict | None = None) -> int:
    """``--daemon start|stop|status`` as Hadoop's scripts do it: a pid file, the output
    in ``/var/log/hadoop/<name>.out``, started detached."""
    pid_file = _pid_file(name)
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    running = pid is not None and alive(pid)
    if action == "status":
        print(f"{name} is {'running as process ' + str(pid) if running else 'not running'}")
        return 0 if running else 1
    if action == "stop":
        if running:
            os.kill(pid, signal.SIGTERM)
            _wait_gone(pid, 10)
        pid_file.unlink(missing_ok=True)
        return 0
    if running:
        print(f"{name} is already running as process {pid}")
        return 1
    os.makedirs("/var/log/hadoop", exist_ok=True)
    out = open(f"/var/log/hadoop/{name}.out", "ab")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                            start_new_session=True, env=env)
    pid_file.write_text(str(proc.pid))
    time.sleep(1.0)  # Hadoop's script also checks the daemon survived its first moment
    if proc.poll() is not None:
        print(f"{name} exited at once ({proc.returncode}); see /var/log/hadoop/{name}.out",
              file=sys.stderr)
        return 1
    print(f"started {name} (process {proc.pid})")
    return 0


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie not yet reaped is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours does not count
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.2)
    return False


def tool_hadoop(name: str, argv: list[str]) -> int:
    """``hadoop``/``hdfs``/``yarn [--config DIR] [--daemon ACTION] SUBCOMMAND ARGS``."""
    action = None
    while argv and argv[0] in ("--config", "--daemon"):
        if argv[0] == "--config":
            os.environ["HADOOP_CONF_DIR"] = argv[1]
        else:
            action = argv[1]
        argv = argv[2:]
    if not argv:
        print(f"usage: {name} [--config DIR] [--daemon start|stop|status] SUBCOMMAND",
              file=sys.stderr)
        return 2
    sub, args = argv[0], argv[1:]
    conf = os.environ.setdefault("HADOOP_CONF_DIR", str(lab_dir() / "kit" / "etc" / "hadoop"))
    if sub == "classpath":
        print(f"{conf}:{(lab_dir() / 'classpath').read_text()}")
        return 0
    if sub not in COMMANDS:
        print(f"{name}: the lab has no subcommand {sub!r} (has: {', '.join(COMMANDS)})",
              file=sys.stderr)
        return 2
    main, daemon, keep = COMMANDS[sub]
    args = [sub, *args] if keep else args
    host = os.environ.get("SPARKLOG_LAB_HOST", "")
    log_name = f"{name}-{sub}-{host}.log"
    if action:
        return _daemon(f"{name}-{sub}", _java(main, DAEMON_HEAP, log_name, args), action)
    # a daemon in the foreground (a systemd unit's ExecStart) logs as a started one does
    cmd = _java(main, DAEMON_HEAP if daemon else TOOL_HEAP, log_name if daemon else None, args)
    os.execvp(cmd[0], cmd)


def tool_zookeeper(argv: list[str]) -> int:
    """``zkServer.sh start|stop|status`` of the host's ensemble member (zoo.cfg in
    ``$ZOOCFGDIR``)."""
    action = argv[0] if argv else ""
    cfg = Path(os.environ["ZOOCFGDIR"]) / "zoo.cfg"
    if action == "start-foreground":  # zookeeper.service's ExecStart
        cmd = _java(ZOOKEEPER_MAIN, DAEMON_HEAP, None, [str(cfg)])
        os.execvp(cmd[0], cmd)
    if action in ("start", "stop"):
        cmd = _java(ZOOKEEPER_MAIN, DAEMON_HEAP, None, [str(cfg)])
        return _daemon("zookeeper", cmd, action)
    if action == "status":
        port = int(re.search(r"^clientPort=(\d+)", cfg.read_text(), re.M).group(1))
        import socket

        try:
            with socket.create_connection((fqdn(os.environ["SPARKLOG_LAB_HOST"]), port), 2) as s:
                s.sendall(b"srvr")
                reply = s.makefile().read()
        except OSError as exc:
            print(f"zookeeper not serving: {exc}")
            return 1
        mode = re.search(r"^Mode: (\w+)", reply, re.M)
        print(f"Mode: {mode.group(1)}" if mode else reply.strip())
        return 0 if mode and mode.group(1) in ("leader", "follower", "standalone") else 1
    print("usage: zkServer.sh start|start-foreground|stop|status", file=sys.stderr)
    return 2


def _template(name: str) -> str:
    """The unit file of a unit name (``x@1.service`` -> ``x@.service``)."""
    return re.sub(r"@[^.]*\.service$", "@.service", name)


def _unit(name: str) -> dict:
    """The [Service] section of a unit installed on this host (in :data:`UNIT_DIR`;
    continuations joined, every ``Environment=`` in a list)."""
    path = Path(UNIT_DIR) / _template(name)
    if not path.exists():
        raise LabError(f"unit {name} is not installed on {os.environ.get('SPARKLOG_LAB_HOST')}"
                       f" (no {path}: start-cluster.sh installs the kit's units)")
    out, section = {"Environment": []}, None
    for line in path.read_text().replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and line[0] not in "#;":
            key, value = line.split("=", 1)
            if key == "Environment":
                out[key].append(value.strip())
            else:
                out[key] = " ".join(value.split())
    return out


def _wants(name: str) -> Path:
    """The link ``systemctl enable`` makes for a unit (its [Install] WantedBy)."""
    return Path(UNIT_DIR) / "multi-user.target.wants" / name


def unit_pid(host: str, name: str) -> int | None:
    """The main process of a unit the lab's ``systemctl`` started on ``host`` (its pid
    file; None when there is none)."""
    path = lab_dir() / "hosts" / host / "run" / f"{name}.pid"
    return int(path.read_text()) if path.exists() else None


def unit_log(host: str, name: str) -> Path:
    """What a unit started by the lab's ``systemctl`` on ``host`` wrote (the journal of a
    real host: ``journalctl -u NAME``)."""
    return lab_dir() / "hosts" / host / "var" / "log" / "hadoop" / f"{name}.out"


def tool_systemctl(argv: list[str]) -> int:
    """``systemctl start|stop|status|enable|is-enabled UNIT...`` and ``daemon-reload`` for
    the units installed on the host (:data:`UNIT_DIR`): their Environment and
    EnvironmentFile, ExecStart (``%i``, ``%H``, ``${VAR}``), User as the HDFS user,
    KillSignal and TimeoutStopSec on stop; ``enable`` links a unit into
    ``multi-user.target.wants`` as systemd does. No manager runs in the lab's namespaces:
    a unit that exits is not restarted (Restart=), and nothing starts the enabled units
    at a boot."""
    actions = ("start", "stop", "status", "enable", "is-enabled")
    if argv == ["daemon-reload"]:
        for path in Path(UNIT_DIR).glob("*.service"):
            if "ExecStart" not in _unit(path.name):
                raise LabError(f"{path}: no ExecStart in its [Service] section")
        return 0
    if len(argv) < 2 or argv[0] not in actions:
        print(f"usage: systemctl {'|'.join(actions)} UNIT... | daemon-reload", file=sys.stderr)
        return 2
    code = 0
    for name in argv[1:]:
        name = name if name.endswith(".service") else name + ".service"
        code = max(code, _systemctl(argv[0], name))
    return code


def _systemctl(action: str, name: str) -> int:
    """One action of :func:`tool_systemctl` on one unit."""
    unit = _unit(name)
    if action == "enable":
        _wants(name).parent.mkdir(parents=True, exist_ok=True)
        _wants(name).unlink(missing_ok=True)
        _wants(name).symlink_to(Path("..") / _template(name))
        return 0
    if action == "is-enabled":
        enabled = _wants(name).is_symlink()
        print("enabled" if enabled else "disabled")
        return 0 if enabled else 1
    instance = name.split("@", 1)[1].rsplit(".", 1)[0] if "@" in name else ""
    env = dict(os.environ)
    env_file = unit.get("EnvironmentFile", "").lstrip("-")
    lines = Path(env_file).read_text().splitlines() if env_file else []
    for line in [*lines, *unit["Environment"]]:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip().strip('"')
    env["HADOOP_USER_NAME"] = unit.get("User", "root")
    exec_start = unit["ExecStart"].replace("%i", instance).replace(
        "%H", fqdn(os.environ["SPARKLOG_LAB_HOST"]))
    exec_start = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), exec_start)
    if action == "stop":  # KillSignal to the main process, then wait TimeoutStopSec
        pid_file = _pid_file(name)
        if pid_file.exists():
            pid = int(pid_file.read_text())
            if alive(pid):
                os.kill(pid, getattr(signal, unit.get("KillSignal", "SIGTERM")))
                if not _wait_gone(pid, float(unit.get("TimeoutStopSec", "90"))):
                    os.kill(pid, signal.SIGKILL)
            pid_file.unlink()
        return 0
    if action == "start" and _pid_file(name).exists() and alive(int(_pid_file(name).read_text())):
        return 0  # as systemd: starting a running unit does nothing
    return _daemon(name, shlex.split(exec_start), action, env)


def tool(argv: list[str]) -> int:
    """Entry of the lab's commands on a host (see write_tools)."""
    name, args = argv[0], argv[1:]
    if name in ("hadoop", "hdfs", "yarn"):
        return tool_hadoop(name, args)
    if name == "zkServer.sh":
        return tool_zookeeper(args)
    if name == "systemctl":
        return tool_systemctl(args)
    raise LabError(f"unknown lab tool {name!r}")


# --- down and status -------------------------------------------------------------------------
def namespace_pids(ns: str) -> list[int]:
    """Processes living in a lab namespace (all of them started by the lab)."""
    proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def down(args) -> int:
    """Stop every lab process and remove everything the lab made."""
    root = lab_dir()
    state = State(root)
    hosts = [ns for ns in state.data["namespaces"] if ns in {netns(h) for h in HOSTS}]
    pids = {p for h in hosts for p in namespace_pids(h)}
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.2)
        pids = {p for p in pids if alive(p)}
        if not pids:
            break
    if pids:
        print(f"lab down: processes {sorted(pids)} did not exit", file=sys.stderr)
    for host in hosts:
        sh("ip", "netns", "del", host, check=False, quiet=True)
    for link in reversed(state.data["links"]):
        sh("ip", "link", "del", link, check=False, quiet=True)
    for etc in state.data["netns_etc"]:
        if Path(etc).parent == Path("/etc/netns"):
            shutil.rmtree(etc, ignore_errors=True)
    for registry in state.data.get("shared_dirs", []):
        for why in shared_dirs(Path(registry)).release():
            print(f"lab down: {why}", file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)
    left = [ns for ns in hosts if Path(f"/run/netns/{ns}").exists()]
    print("== lab down" + (f" (namespaces still present: {left})" if left else ""))
    return 1 if pids or left else 0


def status(args) -> int:
    """Which lab hosts exist and the processes in each."""
    root = lab_dir()
    if not (root / "lab.json").exists():
        print("no lab is up")
        return 1
    for host in HOSTS:
        names = []
        for pid in namespace_pids(netns(host)):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            main = [a.decode() for a in cmdline if a.startswith(b"org.apache.")]
            names.append(main[0].rsplit(".", 1)[1] if main else
                         " ".join(a.decode() for a in cmdline[:4]))
        print(f"{fqdn(host):16} {address(host):12} {', '.join(names) or '-'}")
    return 0


def main(argv=None) -> int:
    """Command line (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["up"]:
            return up(argv[1:])
        if argv[:1] == ["down"]:
            return down(argv[1:])
        if argv[:1] == ["status"]:
            return status(argv[1:])
        if argv[:1] == ["run"] and len(argv) >= 4:
            return run_on(argv[1], argv[2], argv[3:]).returncode
        if argv[:1] == ["tool"] and len(argv) >= 2:
            return tool(argv[1:])
    except LabError as exc:
        print(f"lab: error: {exc}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
