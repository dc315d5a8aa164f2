"""A real HDFS cluster for tests: Apache Hadoop's NameNode and DataNode daemons.

The daemons are Apache Hadoop 3.4.2 from Maven Central (``sparklog.maven.classpath
("hadoop")``, resolved with ``mvn`` on first use), started as an operator starts them:
a generated ``core-site.xml``/``hdfs-site.xml``/``log4j.properties`` in a configuration
directory (``HADOOP_CONF_DIR``) at the front of the class path, ``NameNode -format
-nonInteractive`` once, then ``java ... org.apache.hadoop.hdfs.server.namenode.NameNode``
and one ``java ... org.apache.hadoop.hdfs.server.datanode.DataNode`` per DataNode (each
with its own configuration directory: its ports and data directory), each its own
process with a small heap, on free 127.0.0.1 ports, WebHDFS on, HDFS permissions on
(the superuser is the user running the tests). :meth:`HdfsCluster.start` returns once
the NameNode is out of safe mode and every DataNode is live with capacity (polled over
the NameNode's JMX servlet), in about 10 s. Only processes this object started are ever
signalled, by pid.

API (``tests/conftest.py`` provides the ``hdfs_cluster`` fixture: one cluster per test
run, started on first use, ``DEFAULT_DATANODES`` DataNodes; set
``SPARKLOG_TEST_HDFS_URI`` to use an external cluster instead, see
tests/storage/test_storage_contract.py)::

    cluster = HdfsCluster(base_dir, datanodes=3).start()
    cluster.hdfs_uri          # "hdfs://127.0.0.1:<rpc>"      (fs.defaultFS)
    cluster.webhdfs_uri       # "webhdfs://127.0.0.1:<http>"
    cluster.namenode_address  # "127.0.0.1:<rpc>"; .namenode_http: "127.0.0.1:<http>"
    cluster.conf_dir          # HADOOP_CONF_DIR of clients (core-site.xml, hdfs-site.xml)
    cluster.classpath         # the Hadoop jars (list); cluster.env() -> environment
                              # with HADOOP_CONF_DIR set, for child processes
    cluster.superuser         # the HDFS superuser (the user who started the NameNode)
    cluster.block_locations("/path")   # [(offset, length, ["127.0.0.1:port", ...]), ...]
    cluster.datanodes[i]      # DaemonProcess: .pid, .log_path, .xfer_address, .stop()...
    cluster.stop_datanode(i); cluster.kill_datanode(i); cluster.start_datanode(i)
    cluster.wait_live_datanodes(n)     # NameNode's count of live DataNodes reaches n
    cluster.run_tool("dfs", "-ls", "/")  # hdfs dfs / dfsadmin / debug ... as superuser
    cluster.jmx("NameNode", "FSNamesystemState")  # one JMX bean of the NameNode
    cluster.log_paths()       # {"namenode": path, "datanode-0": path, ...}
    cluster.stop()

``python -m tests.support.hdfscluster [DATANODES]`` (from the repository's root) starts one by hand and prints its addresses
(Ctrl-C or SIGTERM stops it).
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from xml.sax.saxutils import escape

import pytest

from .processes import ManagedProcess, free_port, serve_until_interrupted

#: DataNodes of the per-run cluster (the storage contract needs one; tests that need
#: replication start their own with ``HdfsCluster(..., datanodes=3)``).
DEFAULT_DATANODES = 1
#: Java heap of each daemon (the test machine is shared with Spark and ZooKeeper).
DEFAULT_HEAP = "384m"
NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
#: Hadoop's command-line tools by the name ``hdfs <name>`` gives them.
TOOLS = {
    "dfs": "org.apache.hadoop.fs.FsShell",
    "dfsadmin": "org.apache.hadoop.hdfs.tools.DFSAdmin",
    "debug": "org.apache.hadoop.hdfs.tools.DebugAdmin",
    "fsck": "org.apache.hadoop.hdfs.tools.DFSck",
}

_LOG4J = """\
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace=WARN
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
"""


def write_site(path: str, props: dict) -> None:
    """Write a Hadoop ``*-site.xml`` with ``props`` (name -> value)."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<configuration>"]
    for name, value in props.items():
        lines.append(f"  <property><name>{escape(str(name))}</name>"
                     f"<value>{escape(str(value))}</value></property>")
    lines.append("</configuration>\n")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def hadoop_unavailable(artifacts: str = "hadoop") -> str | None:
    """Why Hadoop's daemons cannot run here (None when they can); ``artifacts`` names
    the artifact set of :mod:`sparklog.maven` they need (``"yarn"`` for YARN's)."""
    if shutil.which("java") is None:
        return "java is not installed (scripts/ci-deps.sh installs a JDK)"
    try:
        from sparklog.maven import classpath

        classpath(artifacts)
    except Exception as exc:  # MavenError, or no network on the first resolution
        return f"Apache Hadoop's {artifacts} jars could not be resolved: {exc}"
    return None


#: Java 17 closes the JDK's internals that Hadoop 3.4's daemons still reach into (JAXB of
#: WebHDFS's JSON, Netty): open them as Hadoop's own scripts do on Java 17.
ADD_OPENS = [f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
             for pkg in ("java.lang", "java.lang.reflect", "java.io", "java.net", "java.nio",
                         "java.util", "java.util.concurrent", "sun.nio.ch")]


def _java_command(heap: str, conf_dir: str, classpath: list[str], log_dir: str,
                  main: str, *args: str, tmp_dir: str, jvm_options: tuple = ()) -> list[str]:
    """The ``java`` command of a daemon or tool; its ``java.io.tmpdir`` is ``tmp_dir``
    (the cluster's own): the web servers' ``jetty-*`` work directories, one per daemon
    start, go with the cluster instead of piling up in the system's temp directory."""
    return ["java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
            *ADD_OPENS, *jvm_options, f"-Djava.io.tmpdir={tmp_dir}",
            f"-Dhadoop.log.dir={log_dir}", "-Dhadoop.security.logger=WARN,console",
            "-cp", os.pathsep.join([conf_dir, *classpath]), main, *args]


class DaemonProcess(ManagedProcess):
    """One Hadoop daemon (``java`` process) with its configuration directory and log;
    ``stop``/``kill``/``pause``/``resume`` by its pid (:class:`procutil.ManagedProcess`)."""

    stop_timeout = 15.0

    def __init__(self, name: str, command: list[str], conf_dir: str, log_path: str,
                 env: dict):
        self.name = name
        self.command = command
        self.conf_dir = conf_dir
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.addresses: dict[str, str] = {}

    @property
    def running(self) -> bool:
        """True while the process runs."""
        return self.pid is not None

    @property
    def xfer_address(self) -> str:
        """A DataNode's data transfer address (``host:port``, as block locations name it)."""
        return self.addresses["dfs.datanode.address"]

    def start(self) -> None:
        """Start the process (its output appended to ``log_path``)."""
        if self.running:
            return
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=True)

    def log_tail(self, n: int = 3000) -> str:
        """The last ``n`` characters of the daemon's log."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


class HdfsCluster:
    """A NameNode and ``datanodes`` DataNodes under ``base_dir`` (see the module docstring).

    ``replication`` defaults to min(3, datanodes); ``conf`` adds or overrides
    hdfs-site.xml settings of every daemon and client. ``kdc`` (a started
    :class:`tests.support.kdc.Kdc`) makes it a secure cluster as a Kerberized production
    one runs: ``hadoop.security.authentication=kerberos`` and service-level
    authorization, the daemons logging in from a keytab (``hdfs/localhost`` and
    ``HTTP/localhost``: :attr:`service_keytab`), block access tokens, SASL on the data
    transfer protocol (``dfs.data.transfer.protection=authentication``; unprivileged
    DataNode ports through ``ignore.secure.ports.for.testing``), WebHDFS off;
    ``supergroup`` names the short user names the NameNode counts as superusers (its
    static group mapping: there is no ``kinit`` here to run Hadoop's tools as
    ``hdfs``). The directories survive
    :meth:`stop`, so :meth:`start` again restarts the same cluster (same ports, same data).
    """

    def __init__(self, base_dir: str, *, datanodes: int = DEFAULT_DATANODES,
                 replication: int | None = None, heap: str = DEFAULT_HEAP,
                 conf: dict | None = None, host: str = "127.0.0.1", kdc=None,
                 supergroup: tuple = ()):
        from sparklog.maven import classpath

        if datanodes < 1:
            raise ValueError(f"datanodes must be >= 1, got {datanodes}")
        self.base_dir = os.path.abspath(base_dir)
        self.host = host
        self.heap = heap
        self.classpath = classpath("hadoop", quiet=True)
        self.superuser = getpass.getuser()
        self.replication = replication or min(3, datanodes)
        self.rpc_port = free_port(host)
        self.http_port = free_port(host)
        self.conf_dir = os.path.join(self.base_dir, "conf")
        self.log_dir = os.path.join(self.base_dir, "logs")
        self.name_dir = os.path.join(self.base_dir, "name")
        #: java.io.tmpdir of the daemons and tools (Jetty's work directories)
        self.java_tmp_dir = os.path.join(self.base_dir, "java-tmp")
        for d in (self.conf_dir, self.log_dir, self.java_tmp_dir):
            os.makedirs(d, exist_ok=True)
        self.kdc = kdc
        self.service_keytab: str | None = None
        self.jvm_options: tuple = ()
        self._core: dict = {}
        secure: dict = {}
        if kdc is not None:
            self.jvm_options = tuple(kdc.jvm_options())
            self.service_keytab = kdc.keytab("hdfs-service.keytab", "hdfs/localhost",
                                             "HTTP/localhost")
            self._core, secure = self._secure_conf(kdc, supergroup)
        self._site = self._site_conf({**secure, **(conf or {})})
        self._write_conf(self.conf_dir, self._site)
        self.namenode = DaemonProcess(
            "namenode", _java_command(heap, self.conf_dir, self.classpath, self.log_dir,
                                      NAMENODE_CLASS, tmp_dir=self.java_tmp_dir,
                                      jvm_options=self.jvm_options),
            self.conf_dir, os.path.join(self.log_dir, "namenode.log"), self._daemon_env())
        self.datanodes = [self._datanode(i) for i in range(datanodes)]

    # configuration --------------------------------------------------------------------
    @property
    def namenode_address(self) -> str:
        """``host:port`` of the NameNode's RPC server."""
        return f"{self.host}:{self.rpc_port}"

    @property
    def namenode_http(self) -> str:
        """``host:port`` of the NameNode's HTTP server (web UI, JMX, WebHDFS)."""
        return f"{self.host}:{self.http_port}"

    @property
    def hdfs_uri(self) -> str:
        """``hdfs://host:port`` of the cluster (its fs.defaultFS)."""
        return f"hdfs://{self.namenode_address}"

    @property
    def webhdfs_uri(self) -> str:
        """``webhdfs://host:port`` of the NameNode's WebHDFS endpoint."""
        return f"webhdfs://{self.namenode_http}"

    def _site_conf(self, extra: dict) -> dict:
        site = {
            "dfs.namenode.rpc-address": self.namenode_address,
            "dfs.namenode.http-address": self.namenode_http,
            "dfs.namenode.https-address": f"{self.host}:0",
            "dfs.namenode.secondary.http-address": f"{self.host}:0",
            "dfs.namenode.name.dir": f"file://{self.name_dir}",
            "dfs.replication": self.replication,
            "dfs.webhdfs.enabled": "true",
            "dfs.permissions.enabled": "true",
            "dfs.namenode.safemode.extension": 0,
            "dfs.namenode.safemode.min.datanodes": 0,
            # a small cluster on one machine: quick heartbeats, dead DataNodes noticed in
            # ~20 s, no load-based refusal of busy DataNodes, no host name checks
            "dfs.heartbeat.interval": 1,
            "dfs.namenode.heartbeat.recheck-interval": 5000,
            "dfs.namenode.redundancy.considerLoad": "false",
            "dfs.namenode.datanode.registration.ip-hostname-check": "false",
            "dfs.namenode.fs-limits.min-block-size": 4096,
            "dfs.namenode.resource.du.reserved": 16 << 20,
            # clients: keep writing when a DataNode of the pipeline dies and none is spare;
            # a close waiting for the DataNodes' block report retries after 20 ms, not
            # 400 ms (also the DataNodes' own client, which writes for WebHDFS)
            "dfs.client.block.write.replace-datanode-on-failure.best-effort": "true",
            "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": 20,
            "dfs.client.block.write.locateFollowingBlock.retries": 12,
            "dfs.datanode.du.reserved": 0,
        }
        site.update(extra)
        return site

    def _secure_conf(self, kdc, supergroup: tuple) -> tuple[dict, dict]:
        """(core-site, hdfs-site) settings of a Kerberized cluster."""
        service, http = kdc.principal("hdfs/localhost"), kdc.principal("HTTP/localhost")
        core = {
            "hadoop.security.authentication": "kerberos",
            "hadoop.security.authorization": "true",
            "hadoop.rpc.protection": "authentication",
            # the tests' tickets live seconds: logging in again is allowed every second
            "hadoop.kerberos.min.seconds.before.relogin": "1",
            # the NameNode's groups of the test's principals (no OS accounts for them)
            "hadoop.user.group.static.mapping.overrides":
                ";".join([f"{u}=supergroup" for u in ("hdfs", *supergroup)]),
        }
        keytab = self.service_keytab
        site = {
            "dfs.namenode.kerberos.principal": service,
            "dfs.namenode.keytab.file": keytab,
            "dfs.datanode.kerberos.principal": service,
            "dfs.datanode.keytab.file": keytab,
            "dfs.web.authentication.kerberos.principal": http,
            "dfs.web.authentication.kerberos.keytab": keytab,
            "dfs.block.access.token.enable": "true",
            "dfs.data.transfer.protection": "authentication",
            "ignore.secure.ports.for.testing": "true",
            "dfs.webhdfs.enabled": "false",
        }
        return core, site

    def _write_conf(self, conf_dir: str, site: dict) -> None:
        os.makedirs(conf_dir, exist_ok=True)
        write_site(os.path.join(conf_dir, "core-site.xml"),
                   {"fs.defaultFS": self.hdfs_uri,
                    "hadoop.tmp.dir": os.path.join(self.base_dir, "tmp"), **self._core})
        write_site(os.path.join(conf_dir, "hdfs-site.xml"), site)
        with open(os.path.join(conf_dir, "log4j.properties"), "w") as f:
            f.write(_LOG4J)

    def _daemon_env(self) -> dict:
        env = dict(os.environ, HADOOP_CONF_DIR=self.conf_dir)
        env.pop("HADOOP_USER_NAME", None)  # daemons run as the OS user (the superuser)
        env.pop("CLASSPATH", None)
        return env

    def _datanode(self, i: int) -> DaemonProcess:
        root = os.path.join(self.base_dir, f"datanode-{i}")
        addresses = {key: f"{self.host}:{free_port(self.host)}"
                     for key in ("dfs.datanode.address", "dfs.datanode.ipc.address",
                                 "dfs.datanode.http.address")}
        conf_dir = os.path.join(root, "conf")
        self._write_conf(conf_dir, {**self._site, **addresses,
                                    "dfs.datanode.hostname": self.host,
                                    "dfs.datanode.https.address": f"{self.host}:0",
                                    "dfs.datanode.data.dir": f"file://{root}/data"})
        dn = DaemonProcess(f"datanode-{i}",
                           _java_command(self.heap, conf_dir, self.classpath, self.log_dir,
                                         DATANODE_CLASS, tmp_dir=self.java_tmp_dir,
                                         jvm_options=self.jvm_options),
                           conf_dir, os.path.join(self.log_dir, f"datanode-{i}.log"),
                           self._daemon_env())
        dn.addresses = addresses
        return dn

    def env(self, user: str | None = None) -> dict:
        """``os.environ`` plus HADOOP_CONF_DIR of this cluster (and HADOOP_USER_NAME when
        ``user`` is given): the environment of a client process."""
        env = dict(os.environ, HADOOP_CONF_DIR=self.conf_dir)
        if user is not None:
            env["HADOOP_USER_NAME"] = user
        return env

    # lifecycle ------------------------------------------------------------------------
    def format(self) -> None:
        """``NameNode -format -nonInteractive`` (only when the name directory is new)."""
        if os.path.isdir(os.path.join(self.name_dir, "current")):
            return
        cmd = _java_command(self.heap, self.conf_dir, self.classpath, self.log_dir,
                            NAMENODE_CLASS, "-format", "-nonInteractive", "-force",
                            tmp_dir=self.java_tmp_dir, jvm_options=self.jvm_options)
        with open(os.path.join(self.log_dir, "format.log"), "ab") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self._daemon_env(),
                                timeout=120).returncode
        if rc != 0:
            raise RuntimeError(f"NameNode -format failed (exit {rc}); see "
                               f"{os.path.join(self.log_dir, 'format.log')}")

    def start(self, timeout: float = 90.0) -> "HdfsCluster":
        """Format (first time), start the NameNode and the DataNodes, and wait until the
        NameNode is out of safe mode with every DataNode live."""
        self.format()
        self.namenode.start()
        for dn in self.datanodes:
            dn.start()
        try:
            self.wait_live_datanodes(len(self.datanodes), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the DataNodes, then the NameNode (SIGTERM, SIGKILL if they hang)."""
        for dn in self.datanodes:
            dn.stop()
        self.namenode.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def stop_datanode(self, i: int) -> None:
        """Stop DataNode ``i`` gracefully (SIGTERM)."""
        self.datanodes[i].stop()

    def kill_datanode(self, i: int) -> None:
        """SIGKILL DataNode ``i``."""
        self.datanodes[i].kill()

    def start_datanode(self, i: int, timeout: float = 60.0) -> None:
        """(Re)start DataNode ``i`` on its old ports and data, and wait until it has
        registered with the NameNode (its block pool service RUNNING and a heartbeat
        answered by the active NameNode: its own JMX) and the NameNode lists it."""
        dn = self.datanodes[i]
        dn.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if dn.proc is not None and dn.proc.poll() is not None:
                raise RuntimeError(f"{dn.name} exited with {dn.proc.returncode}:\n"
                                   f"{dn.log_tail()}")
            try:
                actors = json.loads(self.jmx("DataNode", "DataNodeInfo",
                                             dn.addresses["dfs.datanode.http.address"])
                                    .get("BPServiceActorInfo", "[]"))
                live = json.loads(self.jmx("NameNode", "NameNodeInfo").get("LiveNodes", "{}"))
            except (OSError, ValueError):  # HTTP server not up yet
                actors, live = [], {}
            # NamenodeHaState is set from the first heartbeat response (LastHeartbeat* are
            # seconds *since* the last one: "0" right after it, not "never")
            if any(a.get("ActorState") == "RUNNING" and a.get("NamenodeHaState") == "active"
                   for a in actors) and dn.xfer_address in live:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{dn.name} did not register with the NameNode within "
                           f"{timeout}s; log: {dn.log_path}")

    # state ----------------------------------------------------------------------------
    def jmx(self, service: str, name: str, address: str | None = None) -> dict:
        """The JMX bean ``Hadoop:service=<service>,name=<name>`` of the daemon whose HTTP
        server is ``address`` (the NameNode's by default); {} when it is not there."""
        url = (f"http://{address or self.namenode_http}/jmx?qry="
               f"Hadoop:service={service},name={name}")
        with urllib.request.urlopen(url, timeout=5) as r:
            beans = json.load(r).get("beans", [])
        return beans[0] if beans else {}

    def _state(self) -> tuple[int, int, str]:
        fs = self.jmx("NameNode", "FSNamesystemState")
        info = self.jmx("NameNode", "NameNodeInfo")
        return (fs.get("NumLiveDataNodes", 0), fs.get("CapacityRemaining", 0),
                info.get("Safemode", "?"))

    def wait_live_datanodes(self, n: int, timeout: float = 60.0) -> None:
        """Wait until the NameNode is out of safe mode and counts ``n`` live DataNodes
        with free capacity (RuntimeError naming the state and the logs otherwise)."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            for d in [self.namenode, *self.datanodes]:
                if d.proc is not None and d.proc.poll() is not None:
                    raise RuntimeError(f"{d.name} exited with {d.proc.returncode}:\n"
                                       f"{d.log_tail()}")
            try:
                state = self._state()
            except (OSError, ValueError):  # HTTP server not up yet
                state = None
            if state is not None and state[0] == n and state[1] > 0 and state[2] == "":
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"HDFS at {self.namenode_address} not ready within {timeout}s waiting for "
            f"{n} live DataNodes out of safe mode (live, capacity, safemode = {state}); "
            f"logs: {self.log_paths()}")

    def block_locations(self, path: str) -> list[tuple[int, int, list[str]]]:
        """The blocks of file ``path`` as the NameNode reports them: (offset, length,
        [DataNode transfer addresses ``host:port``]) each, through WebHDFS
        ``GETFILEBLOCKLOCATIONS``."""
        url = (f"http://{self.namenode_http}/webhdfs/v1{path}?op=GETFILEBLOCKLOCATIONS"
               f"&user.name={self.superuser}")
        with urllib.request.urlopen(url, timeout=10) as r:
            locs = json.load(r)["BlockLocations"]["BlockLocation"]
        return [(b["offset"], b["length"], list(b["names"])) for b in locs]

    def run_tool(self, tool: str, *args: str, user: str | None = None,
                 timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run ``hdfs <tool> args...`` (``dfs``, ``dfsadmin``, ``debug``, ``fsck``) against
        the cluster as the superuser (or ``user``); returns the finished process (text
        output, no check)."""
        cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dhadoop.root.logger=WARN,console",
               "-cp", os.pathsep.join([self.conf_dir, *self.classpath]), TOOLS[tool], *args]
        env = self.env(user)
        env.pop("CLASSPATH", None)
        return subprocess.run(cmd, capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)

    def log_paths(self) -> dict[str, str]:
        """Log file of every daemon, by daemon name."""
        return {d.name: d.log_path for d in [self.namenode, *self.datanodes]}


#: Clusters started by the fixture in this run (their logs are listed when a test fails).
STARTED: list[HdfsCluster] = []


@pytest.fixture(scope="session")
def hdfs_cluster(request):
    """The run's HDFS cluster (``DEFAULT_DATANODES`` DataNodes), started on first use and
    stopped at the end of the run. Its directory (``sparklog-hdfs-*`` in the system's
    temporary directory, outside pytest's pruned ones) is removed after a run without
    failures and kept otherwise, its daemons' log paths printed (``tests/conftest.py``).
    Skips with the reason when java or Hadoop's jars are missing; fails when the
    cluster does not start."""
    reason = hadoop_unavailable()
    if reason:
        pytest.skip(reason)
    cluster = HdfsCluster(tempfile.mkdtemp(prefix="sparklog-hdfs-"))
    STARTED.append(cluster)
    cluster.start()
    yield cluster
    cluster.stop()
    if request.session.testsfailed == 0:
        shutil.rmtree(cluster.base_dir, ignore_errors=True)


if __name__ == "__main__":  # manual use: python -m tests.support.hdfscluster [DATANODES]
    import signal

    n = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DATANODES
    # SIGTERM stops the daemons too (they run in their own sessions)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    t0 = time.monotonic()
    with HdfsCluster(tempfile.mkdtemp(prefix="sparklog-hdfs-"), datanodes=n) as c:
        serve_until_interrupted(f"HDFS up in {time.monotonic() - t0:.1f}s: {c.hdfs_uri} "
                                f"{c.webhdfs_uri}\nHADOOP_CONF_DIR={c.conf_dir}\n"
                                f"logs: {c.log_paths()}")
