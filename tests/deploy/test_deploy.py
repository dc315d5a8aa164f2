"""deploy/hadoop-ha: the config checker on the shipped and on broken files, the scripts
(syntax, bring-up order over a fake ssh, spark-submit command, a real venv pack), the
systemd unit, Spark's automatic registration through the shipped module, and the
failover checker (ack-check.py) against a real broker and Spark."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "hadoop-ha"
BIN = DEPLOY / "bin"
SCRIPTS = sorted(BIN.glob("*.sh"))


def _load_script(name: str, filename: str):
    spec = importlib.util.spec_from_file_location(name, BIN / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_config(root: Path, resolve: bool = False) -> subprocess.CompletedProcess:
    """check-config.py run in-process (the same main() as the command line); the
    shipped names are placeholders, so host names are not resolved unless asked."""
    out, err = io.StringIO(), io.StringIO()
    args = [str(root)] if resolve else ["--no-resolve", str(root)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _load_script("check_config", "check-config.py").main(args)
    return subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())


def test_shipped_files_pass_check_config():
    result = subprocess.run([sys.executable, str(BIN / "check-config.py"), "--no-resolve",
                             str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("check-config: OK")
    assert check_config(DEPLOY).returncode == 0


def _render(root: Path, names: dict) -> None:
    """Replace the placeholder host names of every file under ``root``."""
    for path in root.rglob("*"):
        if path.is_file() and path.suffix not in (".py", ".sh", ".md"):
            text = path.read_text()
            for old, new in names.items():
                text = text.replace(old, new)
            path.write_text(text)


def test_check_config_names_a_host_that_does_not_resolve(tmp_path):
    """Every placeholder becomes a loopback address except nn2, whose name is in the
    reserved .invalid domain: one line names the file, key and value it appears in."""
    root = tmp_path / "hadoop-ha"
    shutil.copytree(DEPLOY, root)
    hosts = ["nn1", "nn2", "dn1", "dn2", "dn3", "dn4", "zk1", "zk2", "zk3"]
    names = {f"{h}.example.com": f"127.0.1.{i}" for i, h in enumerate(hosts, 1)}
    names["nn2.example.com"] = "nn2.invalid"
    _render(root, names)
    result = check_config(root, resolve=True)
    lines = result.stdout.splitlines()
    assert result.returncode == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"check-config: {HDFS}: dfs.namenode.rpc-address.ns1.nn2="
                               "nn2.invalid:8020: host 'nn2.invalid' does not resolve"), lines
    assert check_config(root).returncode == 0  # --no-resolve: the files agree


def test_check_config_refuses_a_wildcard_listener_without_advertised_name(tmp_path):
    root = tmp_path / "hadoop-ha"
    shutil.copytree(DEPLOY, root)
    unit = root / UNIT
    text = unit.read_text()
    assert " \\\n    --override advertised.listeners=%H:9092" in text
    unit.write_text(text.replace(" \\\n    --override advertised.listeners=%H:9092", ""))
    lines = check_config(root).stdout.splitlines()
    assert lines == [f"check-config: {BROKER}: broker config listeners="
                     "'PLAINTEXT://0.0.0.0:9092' binds every interface and no "
                     "advertised.listeners names this host: set it to the host's name (the "
                     "unit's --override advertised.listeners=%H:9092)"], lines


def _replace(old: str, new: str):
    def edit(text: str) -> str:
        assert old in text, f"the shipped file no longer contains {old!r}"
        return text.replace(old, new)
    return edit


def _drop_property(name: str):
    def edit(text: str) -> str:
        pattern = re.compile(r"\s*<property>\s*<name>" + re.escape(name) +
                             r"</name>.*?</property>", re.S)
        assert pattern.search(text), f"no property {name}"
        return pattern.sub("", text, count=1)
    return edit


HDFS, CORE, YARN = "etc/hadoop/hdfs-site.xml", "etc/hadoop/core-site.xml", "etc/hadoop/yarn-site.xml"
ZOO, BROKER, UNIT = "etc/zookeeper/zoo.cfg", "sparklog/broker.properties", \
    "systemd/sparklog-broker@.service"
ENV, SPARK, CLUSTER = "sparklog/sparklog.env", "sparklog/spark-defaults.conf", "cluster.env"
QJ = "qjournal://nn1.example.com:8485;nn2.example.com:8485;dn1.example.com:8485/ns1"
ZKQ = "zk1.example.com:2181,zk2.example.com:2181,zk3.example.com:2181"

BROKEN = {  # name: (file, edit, expected message, number of problems)
    "nameservice mismatch": (CORE, _replace("hdfs://ns1", "hdfs://other"),
                             "fs.defaultFS is 'hdfs://other', expected hdfs://ns1", 1),
    "NN without http address": (HDFS, _drop_property("dfs.namenode.http-address.ns1.nn2"),
                                "NameNode nn2 has no dfs.namenode.http-address.ns1.nn2", 1),
    "NN without rpc address": (HDFS, _drop_property("dfs.namenode.rpc-address.ns1.nn1"),
                               "NameNode nn1 has no dfs.namenode.rpc-address.ns1.nn1", 2),
    "one NameNode": (HDFS, _replace("<value>nn1,nn2</value>", "<value>nn1</value>"),
                     "must list at least two NameNode ids", 2),
    "even JournalNodes": (HDFS, _replace(QJ, QJ.replace("/ns1", ";dn2.example.com:8485/ns1")),
                          "lists 4 JournalNode(s): use an odd number of at least 3", 2),
    "two JournalNodes": (HDFS, _replace(QJ, "qjournal://nn1.example.com:8485;"
                                            "nn2.example.com:8485/ns1"),
                         "lists 2 JournalNode(s): use an odd number of at least 3", 2),
    "broker advertising a wildcard": (UNIT, _replace("advertised.listeners=%H:9092",
                                                     "advertised.listeners=0.0.0.0:9092"),
                                      "broker config advertised.listeners='0.0.0.0:9092': "
                                      "0.0.0.0 is a wildcard address and is never advertised", 1),
    "client failover too short": (HDFS, _drop_property("dfs.client.failover.max.attempts"),
                                  "dfs.client.failover.max.attempts=3 with sleeps of "
                                  "200..1000 ms fails over for 1.4 s, shorter than a NameNode "
                                  "failover after a host loss", 1),
    "RPC timeout left at Hadoop's 120 s": (
        CORE, _drop_property("ipc.client.rpc-timeout.ms"),
        "ipc.client.rpc-timeout.ms=120000 (not set: Hadoop's default applies): a call to a "
        "lost NameNode host would wait longer than ha.zookeeper.session-timeout.ms=10000", 1),
    "single JournalNode": (HDFS, _replace(QJ, "qjournal://nn1.example.com:8485/ns1"),
                           "lists 1 JournalNode(s)", 2),
    "not qjournal": (HDFS, _replace(QJ, "file:///mnt/nfs/edits"),
                     "is not qjournal://host:port;.../journalId", 1),
    "automatic failover off": (HDFS, _drop_property("dfs.ha.automatic-failover.enabled.ns1"),
                               "automatic failover is off", 1),
    "no ZK quorum for ZKFC": (CORE, _drop_property("ha.zookeeper.quorum"),
                              "automatic failover is on but ha.zookeeper.quorum is not set", 1),
    "no fencing": (HDFS, _drop_property("dfs.ha.fencing.methods"),
                   "dfs.ha.fencing.methods is not set", 1),
    "sshfence without key": (HDFS, _drop_property("dfs.ha.fencing.ssh.private-key-files"),
                             "sshfence needs dfs.ha.fencing.ssh.private-key-files", 1),
    "ed25519 fencing key": (HDFS, _replace("/home/hdfs/.ssh/id_ecdsa",
                                           "/home/hdfs/.ssh/id_ed25519"),
                            "dfs.ha.fencing.ssh.private-key-files=/home/hdfs/.ssh/id_ed25519: "
                            "sshfence's jsch loads only PEM keys", 1),
    "no failover proxy": (HDFS, _drop_property("dfs.client.failover.proxy.provider.ns1"),
                          "dfs.client.failover.proxy.provider.ns1 is not set", 1),
    "no synconclose": (HDFS, _drop_property("dfs.datanode.synconclose"),
                       "dfs.datanode.synconclose must be true", 1),
    "append off": (HDFS, _replace("<name>dfs.support.append</name>\n    <value>true",
                                  "<name>dfs.support.append</name>\n    <value>false"),
                   "dfs.support.append is false", 1),
    "no datanode replacement": (HDFS, _replace("<value>DEFAULT</value>", "<value>NEVER</value>"),
                                "replace-datanode-on-failure is disabled", 1),
    "duplicate property": (HDFS, _replace("</configuration>", "<property><name>dfs.replication"
                                          "</name><value>2</value></property></configuration>"),
                           "dfs.replication is set twice", 1),
    "bad XML": (YARN, _replace("</configuration>", "</configuratio>"),
                "is not well-formed XML", None),
    "RM without hostname": (YARN, _drop_property("yarn.resourcemanager.hostname.rm2"),
                            "ResourceManager rm2 has no yarn.resourcemanager.hostname.rm2", 2),
    "RM HA off": (YARN, _drop_property("yarn.resourcemanager.ha.enabled"),
                  "yarn.resourcemanager.ha.enabled is not true", 1),
    "RM state not in ZK": (YARN, _replace("recovery.ZKRMStateStore",
                                          "recovery.FileSystemRMStateStore"),
                           "expected ...recovery.ZKRMStateStore", 1),
    "even ZK ensemble": (ZOO, _replace("server.3=zk3.example.com:2888:3888\n",
                                       "server.3=zk3.example.com:2888:3888\n"
                                       "server.4=zk4.example.com:2888:3888\n"),
                         "the ensemble has 4 server(s)", None),
    "unknown broker key": (BROKER, _replace("log.segment.bytes=", "log.segment.byte="),
                           "unknown key 'log.segment.byte': not a sparklog/Kafka broker config "
                           "(did you mean 'log.segment.bytes'?)", 1),
    "invalid broker value": (BROKER, _replace("num.partitions=6", "num.partitions=six"),
                             "num.partitions='six' is not an integer", 1),
    "no chroot": (BROKER, _replace(f"{ZKQ}/sparklog", ZKQ), "has no chroot", 1),
    "chroot of the ZKFC": (BROKER, _replace(f"{ZKQ}/sparklog", f"{ZKQ}/hadoop-ha/sparklog"),
                           "zookeeper.connect chroot /hadoop-ha/sparklog overlaps "
                           "ha.zookeeper.parent-znode=/hadoop-ha", 1),
    "no zookeeper.connect": (BROKER, _replace("zookeeper.connect=", "#zookeeper.connect="),
                             "zookeeper.connect is not set", 1),
    "broker on another ensemble": (BROKER, _replace(f"{ZKQ}/sparklog",
                                                    "zk9.example.com:2181/sparklog"),
                                   "zookeeper.connect names ['zk9.example.com:2181'] but "
                                   "zoo.cfg's ensemble is", 1),
    "session timeout out of range": (BROKER, _replace("zookeeper.session.timeout.ms=18000",
                                                      "zookeeper.session.timeout.ms=60000"),
                                     "zookeeper.session.timeout.ms=60000 is outside "
                                     "ZooKeeper's session range 4000..40000 ms", 1),
    "NameNode probe off": (BROKER, _replace("storage.namenode.probe.interval.ms=1000",
                                            "storage.namenode.probe.interval.ms=0"),
                           "storage.namenode.probe.interval.ms=0: brokers would find a lost "
                           "NameNode host only on their first NameNode call after the "
                           "failover", 1),
    "NameNode probe slower than the IPC timeout": (
        BROKER, _replace("storage.namenode.probe.interval.ms=1000",
                         "storage.namenode.probe.interval.ms=10000"),
        "storage.namenode.probe.interval.ms=10000 is not shorter than core-site's "
        "ipc.client.rpc-timeout.ms=10000", 1),
    "stop timeout too short": (UNIT, _replace("TimeoutStopSec=60", "TimeoutStopSec=20s"),
                               "TimeoutStopSec=20s is not longer than broker "
                               "controlled.shutdown.timeout.ms=30000", 1),
    "SIGKILL stop": (UNIT, _replace("KillSignal=SIGTERM", "KillSignal=SIGKILL"),
                     "KillSignal=SIGKILL", 1),
    "storage on one NameNode": (ENV, _replace("hdfs://ns1/sparklog",
                                              "hdfs://nn1.example.com:8020/sparklog"),
                                "should be on hdfs://ns1/ (the HA nameservice)", 1),
    "storage on WebHDFS": (ENV, _replace("hdfs://ns1/sparklog",
                                         "webhdfs://nn1.example.com:9870/sparklog"),
                           "WebHDFS has no failover", 1),
    "executors on the node's python": (SPARK, _replace("spark.executorEnv.PYSPARK_PYTHON",
                                                       "#spark.executorEnv.PYSPARK_PYTHON"),
                                       "spark.executorEnv.PYSPARK_PYTHON is not set", 1),
    "python outside the archive": (SPARK, _replace("spark.yarn.appMasterEnv.PYSPARK_PYTHON"
                                                   "       ./venv/bin/python",
                                                   "spark.yarn.appMasterEnv.PYSPARK_PYTHON"
                                                   " ./env/bin/python"),
                                   "is not inside the shipped archive (venv)", 1),
    "bring-up hosts differ": (CLUSTER, _replace('JN_HOSTS="nn1.example.com nn2.example.com '
                                                'dn1.example.com"',
                                                'JN_HOSTS="nn1.example.com nn2.example.com '
                                                'dn2.example.com"'),
                              "JN_HOSTS is ['dn2.example.com', 'nn1.example.com', "
                              "'nn2.example.com'] but qjournal's JournalNodes are", 1),
    "duplicate broker id": (CLUSTER, _replace("3:dn3.example.com", "2:dn3.example.com"),
                            "BROKERS must list unique id:host pairs", 1),
}


def _check_edited_kit(tmp_path: Path, name: str, edit) -> subprocess.CompletedProcess:
    """check-config on a copy of the kit (``tmp_path/hadoop-ha``) whose file ``name``
    was rewritten by ``edit``."""
    root = tmp_path / "hadoop-ha"
    shutil.copytree(DEPLOY, root)
    target = root / name
    target.write_text(edit(target.read_text()))
    return check_config(root)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_check_config_detects(case, tmp_path):
    name, edit, message, count = BROKEN[case]
    result = _check_edited_kit(tmp_path, name, edit)
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout
    assert all(line.startswith("check-config: ") for line in lines), lines
    assert any(line.startswith(f"check-config: {name}: ") and message in line
               for line in lines), lines
    if count is not None:
        assert len(lines) == count, lines
    assert f"{len(lines)} problem(s)" in result.stderr


def _set_property(name: str, value: str):
    def edit(text: str) -> str:
        pattern = re.compile(r"(<name>" + re.escape(name) + r"</name>\s*<value>)[^<]*(</value>)")
        assert pattern.search(text), f"no property {name}"
        return pattern.sub(lambda m: m.group(1) + value + m.group(2), text, count=1)
    return edit


XCEIVERS = "dfs.datanode.max.transfer.threads"
SIZING = {  # name: (file, edit, the one line expected after "check-config: ", exit status)
    "transfer threads below two per stream": (  # one per stream would fit 4096
        HDFS, _set_property(XCEIVERS, "5000"),
        f"{HDFS}: {XCEIVERS}=5000 is below the 5012 needed: 2 x 3 broker(s) x 1000 open "
        "partitions each (max.open.partitions=1000) x dfs.replication=3 / 4 DataNode(s) = "
        "4500 transfer threads per DataNode for the brokers' streams (a DataXceiver and its "
        "PacketResponder each), + 512 for reads (at least 4096)", 1),
    "transfer threads below Hadoop's floor": (
        HDFS, _set_property(XCEIVERS, "4000"),
        f"{HDFS}: {XCEIVERS}=4000 is below the 5012 needed: 2 x 3 broker(s) x 1000 open "
        "partitions each (max.open.partitions=1000) x dfs.replication=3 / 4 DataNode(s) = "
        "4500 transfer threads per DataNode for the brokers' streams (a DataXceiver and its "
        "PacketResponder each), + 512 for reads (at least 4096)", 1),
    "partition budget above the transfer threads": (
        BROKER, _replace("max.open.partitions=1000", "max.open.partitions=2000"),
        f"{HDFS}: {XCEIVERS}=8192 is below the 9512 needed: 2 x 3 broker(s) x 2000 open "
        "partitions each (max.open.partitions=2000) x dfs.replication=3 / 4 DataNode(s) = "
        "9000 transfer threads per DataNode for the brokers' streams (a DataXceiver and its "
        "PacketResponder each), + 512 for reads (at least 4096)", 1),
    "partition budget from the descriptor limit": (
        BROKER, _replace("max.open.partitions=1000", "#max.open.partitions=1000"),
        f"{HDFS}: {XCEIVERS}=8192 is below the 147896 needed: 2 x 3 broker(s) x 32752 open "
        "partitions each (max.open.partitions=0: 32752 from the unit's "
        "LimitNOFILE=131072) x dfs.replication=3 / 4 DataNode(s) = 147384 transfer threads "
        "per DataNode for the brokers' streams (a DataXceiver and its PacketResponder "
        "each), + 512 for reads (at least 4096)", 1),
    "no partition budget at all": (
        UNIT, _replace("LimitNOFILE=131072", ""),
        None, 0),  # the kit sets max.open.partitions: the unit's limit is not needed
    "three DataNodes": (
        CLUSTER, _replace('DN_HOSTS="dn1.example.com dn2.example.com dn3.example.com '
                          'dn4.example.com"', 'DN_HOSTS="dn1.example.com dn2.example.com '
                          'dn3.example.com"'),
        None, 0),  # 2 x 3 x 1000 x 3 / 3 + 512 = 6512: still within 8192
    "more brokers than the DataNodes carry": (
        CLUSTER, _replace('"1:dn1.example.com 2:dn2.example.com 3:dn3.example.com"',
                          '"' + " ".join(f"{i}:dn{i}.example.com" for i in range(1, 7)) + '"'),
        f"{HDFS}: {XCEIVERS}=8192 is below the 9512 needed: 2 x 6 broker(s) x 1000 open "
        "partitions each (max.open.partitions=1000) x dfs.replication=3 / 4 DataNode(s) = "
        "9000 transfer threads per DataNode for the brokers' streams (a DataXceiver and its "
        "PacketResponder each), + 512 for reads (at least 4096)", 1),
    "transfer threads not a number": (
        HDFS, _set_property(XCEIVERS, "8k"),
        f"{HDFS}: {XCEIVERS}='8k' is not an integer", 1),
    "transfer threads at Hadoop's default": (
        HDFS, _drop_property(XCEIVERS),
        f"{HDFS}: {XCEIVERS}=4096 (not set: Hadoop's default) is below the 5012 needed: 2 x "
        "3 broker(s) x 1000 open partitions each (max.open.partitions=1000) x "
        "dfs.replication=3 / 4 DataNode(s) = 4500 transfer threads per DataNode for the "
        "brokers' streams (a DataXceiver and its PacketResponder each), + 512 for reads (at "
        "least 4096)", 1),
    "transfer threads short of Spark's reads": (
        HDFS, _set_property(XCEIVERS, "6000"),
        f"warning: {HDFS}: {XCEIVERS}=6000 is below 8192 on a "
        "cluster running Spark (NM_HOSTS): every Spark task reading a block holds a "
        "transfer thread beside the brokers' streams", 0),
    "few NameNode handlers": (
        HDFS, _set_property("dfs.namenode.handler.count", "20"),
        f"warning: {HDFS}: dfs.namenode.handler.count=20 is below 28 (20 x ln(4 "
        "DataNode(s)), at least 20: brokers' rolls and checkpoints, Spark planners' "
        "listings and DataNode reports share them)", 0),
    "few DataNode handlers": (
        HDFS, _set_property("dfs.datanode.handler.count", "3"),
        f"warning: {HDFS}: dfs.datanode.handler.count=3 is below 10 (Hadoop's default: "
        "block recovery of a new leader's lease recoveries and readers' visible-length "
        "calls)", 0),
    "slow heartbeats": (
        HDFS, _set_property("dfs.heartbeat.interval", "10s"),
        f"warning: {HDFS}: dfs.heartbeat.interval=10s is above 3 s: a new partition "
        "leader's lease recovery waits for the next heartbeat of the block's primary "
        "DataNode, once per partition taken over", 0),
    "heartbeat not a time": (
        HDFS, _set_property("dfs.heartbeat.interval", "often"),
        f"{HDFS}: dfs.heartbeat.interval='often' is not a time (seconds, or a number with "
        "ms, s, m, h or d)", 1),
}


@pytest.mark.parametrize("case", sorted(SIZING))
def test_check_config_sizes_the_cluster_for_partitions(case, tmp_path):
    """dfs.datanode.max.transfer.threads against the brokers' open streams (refused by
    key, value and the value needed), the other settings of docs/operations.md's
    capacity planning (warnings: exit status 0)."""
    name, edit, expected, code = SIZING[case]
    root = tmp_path / "hadoop-ha"
    result = _check_edited_kit(tmp_path, name, edit)
    lines = result.stdout.splitlines()
    assert result.returncode == code, lines
    if code:
        assert lines == [f"check-config: {expected}"]
    elif expected is None:
        assert lines[0].startswith(f"check-config: OK (9 files in {root})"), lines
    else:
        assert lines[0] == f"check-config: {expected}", lines
        assert lines[1] == f"check-config: OK (9 files in {root}, 1 warning(s))", lines
        assert lines[2].startswith("check-config: sizing: "), lines


def test_check_config_prints_the_sizing_of_the_shipped_kit():
    lines = check_config(DEPLOY).stdout.splitlines()
    assert lines[1] == (
        "check-config: sizing: per broker 1000 open partitions (max.open.partitions=1000), "
        "2000 HDFS client threads; per DataNode 4500 transfer threads of "
        "dfs.datanode.max.transfer.threads=8192, 281 GiB of disk reserved for blocks being "
        "written (dfs.blocksize 128 MiB)"), lines


def test_check_config_reports_a_missing_file(tmp_path):
    root = tmp_path / "hadoop-ha"
    shutil.copytree(DEPLOY, root)
    (root / UNIT).unlink()
    result = subprocess.run([sys.executable, str(BIN / "check-config.py"), str(root)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"check-config: {UNIT}: cannot be read" in result.stdout


# --- shell scripts ------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_script_syntax(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert os.access(script, os.X_OK), f"{script.name} is not executable"


def test_start_cluster_dry_run_prints_the_seed_order():
    result = subprocess.run(["bash", str(BIN / "start-cluster.sh"), "--dry-run", "--init"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    order = ["[dn4.example.com as root] install hadoop-hdfs@.service hadoop-yarn@.service "
             "sparklog-broker@.service zookeeper.service into /etc/systemd/system; "
             "systemctl daemon-reload; systemctl enable hadoop-hdfs@datanode.service "
             "hadoop-yarn@nodemanager.service\n",
             "[zk3.example.com as root] systemctl start zookeeper.service",
             "[dn1.example.com as root] systemctl start hadoop-hdfs@journalnode.service",
             "[nn1.example.com as hdfs] /opt/hadoop/bin/hdfs --config /etc/hadoop/conf "
             "namenode -format", "zkfc -formatZK",
             "[nn1.example.com as root] systemctl start hadoop-hdfs@namenode.service",
             "namenode -bootstrapStandby",
             "[nn2.example.com as root] systemctl start hadoop-hdfs@namenode.service",
             "start hadoop-hdfs@zkfc.service", "start hadoop-hdfs@datanode.service",
             "dfsadmin -safemode wait", "start hadoop-yarn@resourcemanager.service",
             "start hadoop-yarn@nodemanager.service",
             "dfs -mkdir -p /sparklog", "systemctl start sparklog-broker@1.service"]
    position = 0
    for item in order:  # each step after the one before
        assert item in out[position:], f"{item!r} missing or out of order:\n{out}"
        position = out.index(item, position)
    plain = subprocess.run(["bash", str(BIN / "start-cluster.sh"), "--dry-run"],
                           capture_output=True, text=True, timeout=30).stdout
    assert "-format" not in plain and "bootstrapStandby" not in plain
    assert "start hadoop-hdfs@namenode.service" in plain


def _fake_tools(tmp_path: Path) -> tuple[Path, Path]:
    """ssh, sudo, systemctl, hdfs, yarn and zkServer.sh that log what they are asked; the
    units are installed under ``units/<host>``."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "fakebin"
    home = tmp_path / "hadoop"
    zk = tmp_path / "zookeeper"
    for d in (fake, home / "bin", zk / "bin"):
        d.mkdir(parents=True)
    tools = {
        fake / "ssh": 'while [ "$1" = -o ]; do shift 2; done\n'
                      'export FAKE_HOST="${1#*@}"; shift\nexec bash -c "$*"\n',
        fake / "sudo": '[ "$1" = -n ] && shift\nexport FAKE_USER="$2"; shift 2\n'
                       f'export SYSTEMD_UNITS="{tmp_path}/units/$FAKE_HOST"\nexec "$@"\n',
        fake / "systemctl": f'echo "$FAKE_HOST $FAKE_USER systemctl $*" >> {log}\n',
        zk / "bin" / "zkServer.sh": f'echo "$FAKE_HOST $FAKE_USER zkServer.sh $*" >> {log}\n',
        home / "bin" / "hdfs": f'echo "$FAKE_HOST $FAKE_USER hdfs $*" >> {log}\n'
                               'case "$*" in *haadmin*)\n'
                               f'  if grep -q "start hadoop-hdfs@zkfc" {log}; then echo "nn1:8020 active"\n'
                               '  else echo "nn1:8020 standby"; fi ;; esac\n',
        home / "bin" / "yarn": f'echo "$FAKE_HOST $FAKE_USER yarn $*" >> {log}\n'
                               'case "$*" in *rmadmin*) echo "rm1 active" ;;\n'
                               '  *"node -list"*) echo "Total Nodes:4" ;; esac\n',
    }
    for path, body in tools.items():
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    env_text = (DEPLOY / "cluster.env").read_text()
    env_text = env_text.replace("HADOOP_HOME=/opt/hadoop", f"HADOOP_HOME={home}")
    env_text = env_text.replace("ZOOKEEPER_HOME=/opt/zookeeper", f"ZOOKEEPER_HOME={zk}")
    # each fake host's unit directory (sudo's environment; ssh hands the remote shell
    # the variable's name unexpanded)
    env_text = env_text.replace("SYSTEMD_UNIT_DIR=/etc/systemd/system",
                                "SYSTEMD_UNIT_DIR='$SYSTEMD_UNITS'")
    (tmp_path / "cluster.env").write_text(env_text)
    return fake, log


def test_start_cluster_runs_each_step_on_its_host_as_its_user(tmp_path):
    fake, log = _fake_tools(tmp_path)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run(["bash", str(BIN / "start-cluster.sh"), "--init", "--env",
                             str(tmp_path / "cluster.env")],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = log.read_text().splitlines()

    def first(pattern: str) -> int:
        return next(i for i, c in enumerate(calls) if re.search(pattern, c))

    def last(pattern: str) -> int:
        return max(i for i, c in enumerate(calls) if re.search(pattern, c))

    steps = [(r"^\S+ root systemctl daemon-reload$", 9),  # every host once
             (r"^zk\d\S* root systemctl start zookeeper.service$", 3),
             (r"^(nn1|nn2|dn1)\S* root systemctl start hadoop-hdfs@journalnode.service$", 3),
             (r"^nn1\S* hdfs hdfs .*namenode -format -nonInteractive", 1),
             (r"^nn1\S* hdfs hdfs .*zkfc -formatZK", 1),
             (r"^nn1\S* root systemctl start hadoop-hdfs@namenode.service$", 1),
             (r"^nn1\S* hdfs hdfs .*haadmin -getAllServiceState", None),  # waits (sh -c)
             (r"^nn2\S* hdfs hdfs .*namenode -bootstrapStandby", 1),
             (r"^nn2\S* root systemctl start hadoop-hdfs@namenode.service$", 1),
             (r"^nn\d\S* root systemctl start hadoop-hdfs@zkfc.service$", 2),
             (r"^dn\d\S* root systemctl start hadoop-hdfs@datanode.service$", 4),
             (r"hdfs dfsadmin -safemode wait|hdfs .*dfsadmin -safemode wait", 1),
             (r"^nn\d\S* root systemctl start hadoop-yarn@resourcemanager.service$", 2),
             (r"^dn\d\S* root systemctl start hadoop-yarn@nodemanager.service$", 4),
             (r"^nn1\S* yarn yarn .*node -list", None),  # waits for the NodeManagers
             (r"^nn1\S* hdfs hdfs .*dfs -chmod 750 /sparklog", 1),
             (r"^dn\d\S* root systemctl start sparklog-broker@\d.service", 3)]
    previous_end = -1
    for pattern, count in steps:
        matches = [i for i, c in enumerate(calls) if re.search(pattern, c)]
        assert matches, f"no call matches {pattern}: {calls}"
        if count is not None:
            assert len(matches) == count, (pattern, matches)
        assert first(pattern) > previous_end, f"{pattern} ran too early: {calls}"
        previous_end = last(pattern) if count is not None else first(pattern)
    assert "dn1.example.com root systemctl start sparklog-broker@1.service" in calls
    # every host got the kit's units and enabled those of its roles
    kit_units = sorted(p.name for p in (DEPLOY / "systemd").iterdir())
    assert sorted(p.name for p in (tmp_path / "units").iterdir()) == sorted(
        ["zk1.example.com", "zk2.example.com", "zk3.example.com", "nn1.example.com",
         "nn2.example.com", "dn1.example.com", "dn2.example.com", "dn3.example.com",
         "dn4.example.com"])
    for host in (tmp_path / "units").iterdir():
        assert sorted(p.name for p in host.iterdir()) == kit_units, host
    assert calls.count("zk2.example.com root systemctl enable zookeeper.service") == 1
    assert ("nn2.example.com root systemctl enable hadoop-hdfs@journalnode.service "
            "hadoop-hdfs@namenode.service hadoop-hdfs@zkfc.service "
            "hadoop-yarn@resourcemanager.service") in calls
    assert ("dn3.example.com root systemctl enable hadoop-hdfs@datanode.service "
            "hadoop-yarn@nodemanager.service sparklog-broker@3.service") in calls


def test_stop_cluster_stops_every_service_in_the_reverse_order(tmp_path):
    fake, log = _fake_tools(tmp_path)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run(["bash", str(BIN / "stop-cluster.sh"), "--env",
                             str(tmp_path / "cluster.env")],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = log.read_text().splitlines()
    assert all(" root systemctl stop " in c for c in calls), calls
    assert [c.split()[0].split(".")[0] + " " + c.split()[-1] for c in calls] == [
        "dn3 sparklog-broker@3.service", "dn2 sparklog-broker@2.service",
        "dn1 sparklog-broker@1.service",
        *(f"dn{i} hadoop-yarn@nodemanager.service" for i in (4, 3, 2, 1)),
        *(f"nn{i} hadoop-yarn@resourcemanager.service" for i in (2, 1)),
        *(f"dn{i} hadoop-hdfs@datanode.service" for i in (4, 3, 2, 1)),
        *(f"nn{i} hadoop-hdfs@zkfc.service" for i in (2, 1)),
        *(f"nn{i} hadoop-hdfs@namenode.service" for i in (2, 1)),
        *(f"{h} hadoop-hdfs@journalnode.service" for h in ("dn1", "nn2", "nn1")),
        *(f"zk{i} zookeeper.service" for i in (3, 2, 1))], calls
    assert "== cluster stopped (8 steps)" in result.stdout
    init = subprocess.run(["bash", str(BIN / "stop-cluster.sh"), "--init"],
                          capture_output=True, text=True, timeout=30)
    assert init.returncode == 2 and "unknown argument: --init" in init.stderr


def test_submit_etl_builds_a_cluster_mode_spark_submit():
    args = ["--app-id", "clicks", "--subscribe", "clicks", "--path", "hdfs://ns1/sparklog",
            "--output", "hdfs://ns1/warehouse/clicks", "--sql", "SELECT key FROM input"]
    result = subprocess.run(["bash", str(BIN / "submit-etl.sh"), "--dry-run", "--queue", "etl",
                             "--", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert argv[0].endswith("spark-submit")
    assert argv[argv.index("--master") + 1] == "yarn"
    assert argv[argv.index("--deploy-mode") + 1] == "cluster"
    assert argv[argv.index("--name") + 1] == "sparklog-etl-clicks"
    assert argv[argv.index("--properties-file") + 1] == str(DEPLOY / "sparklog" /
                                                             "spark-defaults.conf")
    assert argv[argv.index("--queue") + 1] == "etl"
    driver = argv.index(str(DEPLOY / "sparklog" / "etl_driver.py"))
    assert argv[driver + 1:] == args  # the ETL arguments, unchanged and last
    confs = [argv[i + 1] for i, a in enumerate(argv) if a == "--conf"]
    assert any(c.startswith("spark.executorEnv.CLASSPATH=") for c in confs)
    # delta-rs's HDFS client in the driver acts as the submitting user (simple auth)
    assert any(c.startswith("spark.yarn.appMasterEnv.HADOOP_USER_NAME=") for c in confs)
    assert argv[argv.index("--jars") + 1] == "$(sparklog spark-jar)"  # the JVM reader

    missing = subprocess.run(["bash", str(BIN / "submit-etl.sh"), "--dry-run", "--",
                              "--subscribe", "x"], capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and "need --app-id" in missing.stderr

    # the same script with a local master (the path tests/spark/jobs/test_kill.py runs for real):
    # client mode, none of the cluster's settings
    local = subprocess.run(["bash", str(BIN / "submit-etl.sh"), "--dry-run", "--master",
                            "local[2]", "--", *args], capture_output=True, text=True,
                           timeout=30)
    assert local.returncode == 0, local.stderr
    argv = shlex.split(local.stdout)
    assert argv[argv.index("--master") + 1] == "local[2]"
    assert argv[argv.index("--deploy-mode") + 1] == "client"
    assert "--properties-file" not in argv and not any("CLASSPATH=" in a for a in argv)
    assert argv[argv.index(str(DEPLOY / "sparklog" / "etl_driver.py")) + 1:] == args


def test_etl_driver_hands_its_arguments_to_sparklog_etl_run(tmp_path):
    result = subprocess.run([sys.executable, str(DEPLOY / "sparklog" / "etl_driver.py"),
                             "--help"], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--app-id" in result.stdout and "--subscribe" in result.stdout
    bad = subprocess.run([sys.executable, str(DEPLOY / "sparklog" / "etl_driver.py"),
                          "--subscribe", "t"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "--app-id" in bad.stderr


def test_pack_venv_makes_a_relocatable_archive(tmp_path):
    out = tmp_path / "venv.tar.gz"
    result = subprocess.run(
        ["bash", str(BIN / "pack-venv.sh"), "--python", sys.executable, "--output", str(out),
         "--pip-args", "--no-deps"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    if result.returncode != 0 and "Could not find a version" in result.stderr:
        pytest.skip("pip could not fetch the build backend (no package index reachable)")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NodeManagers need Python" in result.stdout
    unpacked = tmp_path / "container" / "venv"  # as YARN unpacks spark.archives ...#venv
    unpacked.mkdir(parents=True)
    with tarfile.open(out) as tar:
        names = tar.getnames()
        tar.extractall(unpacked)
    assert "./bin/python" in names
    assert any(n.endswith("site-packages/pyspark_sparklog.py") for n in names)
    probe = subprocess.run(
        ["./venv/bin/python", "-I", "-c",
         "import sparklog, importlib.util as u; print(sparklog.__file__); "
         "print(u.find_spec('pyspark_sparklog').origin)"],
        capture_output=True, text=True, timeout=60, cwd=unpacked.parent)
    assert probe.returncode == 0, probe.stderr
    assert all(line.startswith(str(unpacked)) for line in probe.stdout.splitlines())


#: each unit file of the kit, as an instance start-cluster.sh enables
UNIT_INSTANCES = {"sparklog-broker@.service": "sparklog-broker@1.service",
                  "hadoop-hdfs@.service": "hadoop-hdfs@namenode.service",
                  "hadoop-yarn@.service": "hadoop-yarn@resourcemanager.service",
                  "zookeeper.service": "zookeeper.service"}


def test_every_unit_of_the_kit_is_checked():
    assert sorted(p.name for p in (DEPLOY / "systemd").iterdir()) == sorted(UNIT_INSTANCES)


@pytest.fixture(params=sorted(UNIT_INSTANCES))
def unit_instance(request, tmp_path):
    path = tmp_path / UNIT_INSTANCES[request.param]
    shutil.copy(DEPLOY / "systemd" / request.param, path)
    return path


def test_systemd_unit_has_no_unknown_keys(unit_instance):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    result = subprocess.run([analyze, "verify", str(unit_instance)], capture_output=True,
                            text=True, timeout=60)
    # the only complaint allowed: the daemon's command is not installed on this machine
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if line.strip() and "is not executable" not in line]
    assert lines == [], lines


# --- Spark registration and the failover checker --------------------------------------


@pytest.mark.spark
def test_spark_registers_the_source_through_pyspark_sparklog(tmp_path, storage_root):
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    import sparklog

    log = sparklog.connect(storage_root)
    try:
        log.admin().create_topics([sparklog.NewTopic("auto", num_partitions=2)])
        producer = log.producer(acks="all")
        for i in range(7):
            producer.send("auto", b"v%d" % i, key=b"k%d" % i)
        producer.flush()
    finally:
        log.close()
    # a fresh JVM: Spark looks installed pyspark_* modules up once per process
    code = ("from pyspark.sql import SparkSession\n"
            "s = SparkSession.builder.master('local[1]')"
            ".config('spark.ui.enabled', 'false').getOrCreate()\n"
            f"df = s.read.format('sparklog').option('path', {storage_root!r})"
            ".option('subscribe', 'auto').load()\n"
            "print('COUNT', df.count())\n")
    # the source tree on the path: an editable install's modules are not files that
    # Spark's scan of sys.path finds
    env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=240, env=env, cwd=tmp_path)
    assert "COUNT 7" in result.stdout, result.stderr[-3000:]


def test_ack_check_pauses_are_measured_within_a_run():
    """Runs appended to one ack log one after another: the time between two runs is
    not a stall of either (a matrix's log read 59 s, the gap between its runs)."""
    ack_check = _load_script("ack_check", "ack-check.py")
    times = {"a": [1000, 1100, 1400], "b": [60000, 62500, 62600], "c": [70000]}
    assert ack_check.longest_pause(times) == (2.5, "b")
    assert ack_check.longest_pause({"c": [70000]}) is None


@pytest.mark.spark
def test_ack_check_finds_every_acknowledged_record_once(tmp_path, storage_root, spark):
    from sparklog.clients.admin import Admin, NewTopic
    from sparklog.server import EmbeddedBroker

    ack_check = _load_script("ack_check", "ack-check.py")
    ack_log = tmp_path / "acks.log"
    with EmbeddedBroker(storage_root) as broker:
        admin = Admin(broker.bootstrap_servers)
        admin.create_topics([NewTopic("acks", num_partitions=3)])
        admin.close()
        assert ack_check.main(["produce", "--bootstrap-server", broker.bootstrap_servers,
                               "--topic", "acks", "--ack-log", str(ack_log), "--records",
                               "300", "--size", "100", "--run-id", "r1"]) == 0
    lines = ack_log.read_text().splitlines()
    assert len(lines) == 300 and not any("FAILED" in line for line in lines)
    verify = ["verify", "--path", storage_root, "--topic", "acks", "--ack-log", str(ack_log)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ack_check.main(verify) == 0
    assert "300 acknowledged, 0 failed sends" in out.getvalue()
    assert "longest pause between acknowledgements" in out.getvalue()
    assert "(run r1)" in out.getvalue()

    # the same log with a record the topic lacks, one acknowledged elsewhere, one whose
    # checksum differs: each is reported
    key, partition, offset, digest, _ = lines[0].split()
    doctored = lines + [f"r1-9999999999 0 0 {digest} 1"]
    fields = doctored[1].split()
    doctored[1] = " ".join(fields[:2] + ["999999"] + fields[3:])
    fields = doctored[2].split()
    doctored[2] = " ".join(fields[:3] + ["0" * 64] + fields[4:])
    ack_log.write_text("\n".join(doctored) + "\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ack_check.main(verify) == 1
    text = out.getvalue()
    assert "missing: r1-9999999999" in text
    assert f"moved: {doctored[1].split()[0]} acknowledged at" in text
    assert f"corrupt: {doctored[2].split()[0]}: value checksum differs" in text
    assert "ack-check: FAILED" in text


def test_failover_matrix_results_file_gives_the_table_back_without_a_lab(tmp_path):
    """deploy/lab/failover.py --report: the table of a results file that a cut run left
    (its last line cut short by the kill is skipped; a failed run is counted, not
    measured), and the whole matrix's combinations with broker-host x opening skipped and
    the ResourceManager fault with its ETL."""
    import json

    rows = [
        {"mode": "host", "client": "writing", "rep": 1, "topic": "a", "failover_s": 13.1,
         "outage_s": 14.0, "acked": 3000, "failed": 0, "broker_crashes": []},
        {"mode": "host", "client": "writing", "rep": 2, "topic": "b", "failover_s": 12.0,
         "outage_s": 15.5, "acked": 3000, "failed": 1, "broker_crashes": []},
        {"mode": "host", "client": "opening", "rep": 1, "error": "RuntimeError: restore"},
        {"mode": "resourcemanager", "client": "etl", "rep": 1, "topic": "c",
         "failover_s": 10.7, "outage_s": None, "acked": 600, "failed": 0,
         "job": "completed", "broker_crashes": []},
    ]
    results = tmp_path / "failover.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"mode": "proc')
    lab = REPO / "deploy" / "lab"
    proc = subprocess.run([sys.executable, str(lab / "failover.py"), "--report",
                           str(results)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "| host | writing | 2 | 12.6 / 13.1 | 14.8 / 15.5 | 3.5 | 1 | 1 | 6000 | 0 | 0 |" \
        in proc.stdout, proc.stdout
    assert "| host | opening | 0 | - | - | - | - | 0 | 0 | 0 | 1 |" in proc.stdout
    # the ResourceManager fault's run is a job, not a producer: no outage
    assert "| resourcemanager | etl | 1 | 10.7 / 10.7 | - | - | - | 0 | 600 | 0 | 0 |" \
        in proc.stdout, proc.stdout
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import failover; "
              "print(failover.combinations(list(failover.MODES), None))")
    combos = subprocess.run([sys.executable, "-c", script, str(lab)], capture_output=True,
                            text=True, timeout=60)
    assert combos.stdout.strip() == str([
        ("process", "writing"), ("process", "opening"), ("host", "writing"),
        ("host", "opening"), ("journalnode", "writing"), ("datanode-host", "writing"),
        ("broker-host", "writing"), ("resourcemanager", "etl")]), \
        combos.stdout + combos.stderr
    skipped = subprocess.run(
        [sys.executable, "-c", script.replace("None", "['writing', 'opening']")
         .replace("list(failover.MODES)", "['broker-host']"), str(lab)],
        capture_output=True, text=True, timeout=60)
    assert "[('broker-host', 'writing')]" in skipped.stdout
    assert "skipping broker-host x opening" in skipped.stderr
    # an --alternate-probe run's results: one table per probe setting
    ab = tmp_path / "ab.jsonl"
    ab.write_text("".join(json.dumps({**rows[0], "probe_ms": ms, "outage_s": outage}) + "\n"
                          for ms, outage in ((1000, 14.0), (0, 24.0))))
    proc = subprocess.run([sys.executable, str(lab / "failover.py"), "--report", str(ab)],
                          capture_output=True, text=True, timeout=60)
    assert "storage.namenode.probe.interval.ms=1000 (median outage - failover: 0.9 s)" \
        in proc.stdout and "storage.namenode.probe.interval.ms=0 (median outage - " \
        "failover: 10.9 s)" in proc.stdout, proc.stdout + proc.stderr


def test_failover_matrix_says_why_a_verify_gave_no_verdict(tmp_path):
    """A verify that dies before it counts (here its ack log is missing) leaves the
    matrix's verdict with its exit status and the end of its output, not an empty line;
    a verify that counted and found problems keeps its own lines only."""
    import json

    dead = subprocess.run([sys.executable, str(BIN / "ack-check.py"), "verify", "--path",
                           tmp_path.as_uri(), "--topic", "t", "--ack-log",
                           str(tmp_path / "no-such-acks.log")],
                          capture_output=True, text=True, timeout=120)
    assert dead.returncode != 0
    failed = {"rc": 1, "out": "ack-check: 3 acknowledged\nack-check: FAILED\n", "err": "x"}
    script = ("import json, subprocess, sys; sys.path.insert(0, sys.argv[1]); "
              "import failover; print(failover.verify_verdict(subprocess.CompletedProcess("
              "[], *json.loads(sys.argv[2]))))")
    verdicts = [subprocess.run([sys.executable, "-c", script, str(REPO / "deploy" / "lab"),
                                json.dumps(list(run))], capture_output=True, text=True,
                               timeout=60)
                for run in ((dead.returncode, dead.stdout, dead.stderr),
                            tuple(failed.values()))]
    crashed, counted = (v.stdout for v in verdicts)
    assert f"ack-check: verify exited {dead.returncode} without a verdict" in crashed, \
        crashed + verdicts[0].stderr
    assert "no-such-acks.log" in crashed  # the verify's own error, from its output
    assert counted.splitlines() == ["ack-check: 3 acknowledged", "ack-check: FAILED"]
