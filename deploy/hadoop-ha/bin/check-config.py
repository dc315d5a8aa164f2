#!/usr/bin/env python3
"""Check that the files of a sparklog HA deployment agree with each other.

    check-config.py [--no-resolve] [DEPLOY_DIR]   (default: the directory above this script)

Reads ``etc/hadoop/{core,hdfs,yarn}-site.xml``, ``etc/zookeeper/zoo.cfg``,
``sparklog/{broker.properties,sparklog.env,spark-defaults.conf}``,
``systemd/sparklog-broker@.service`` and ``cluster.env`` under DEPLOY_DIR, prints one
line per problem (``check-config: <file>: <problem>``) and exits 1 if there is any,
else prints ``check-config: OK`` and exits 0; warnings (``check-config: warning: <file>:
<warning>``) do not change the exit status. Run it with the sparklog venv's Python:
broker properties are checked with sparklog's own parser and key list.

Sizing for partitions (docs/operations.md, "Capacity planning"): each partition a broker
keeps open is one HDFS output stream, which holds two transfer threads on each of the
``dfs.replication`` DataNodes of its pipeline. With B brokers (``BROKERS``), P open
partitions per broker (``max.open.partitions``, or with 0 what the broker derives from
the unit's ``LimitNOFILE``), R the replication and N DataNodes (``DN_HOSTS``),
``dfs.datanode.max.transfer.threads`` below ceil(2 x B x P x R / N) + 512, or 4096,
whichever is larger, is a problem (a stream's DataXceiver and its PacketResponder both
count against the limit); below 8192 on a cluster running Spark (``NM_HOSTS``) a warning.
``dfs.namenode.handler.count`` below 20 x ln(N) (at least 20),
``dfs.datanode.handler.count`` below 10 and ``dfs.heartbeat.interval`` above 3 s are
warnings. With OK it prints the resulting threads and reserved disk per broker.

Every host name the files give (NameNodes, JournalNodes, ResourceManagers, the
ZooKeeper ensemble and its clients, the host lists of ``cluster.env``) must resolve on
the host running the check (run it on a cluster host); ``--no-resolve`` skips that, to
check a template whose names are placeholders.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import socket
import sys
import xml.etree.ElementTree as ET
from urllib.parse import urlsplit

try:
    from sparklog.coordination.zkpaths import parse_zk_connect
    from sparklog.errors import InvalidConfigError
    from sparklog.security.listeners import WILDCARD_HOSTS
    from sparklog.server.config import (
        BROKER_SETTINGS,
        LOG_DEFAULT_KEYS,
        MAX_INT,
        BrokerConfig,
        parse_properties,
    )
    from sparklog.server.resources import plan as fd_plan
except ImportError as exc:  # pragma: no cover - depends on the interpreter used
    sys.exit(f"check-config: needs the sparklog package ({exc}); "
             "run it with the sparklog venv's python")

#: broker keys of cluster mode (ZooKeeper), besides BROKER_SETTINGS and LOG_DEFAULT_KEYS
CLUSTER_KEYS = {"zookeeper.connect", "zookeeper.session.timeout.ms",
                "zookeeper.connection.timeout.ms", "auto.leader.rebalance.enable"}
KNOWN_BROKER_KEYS = set(BROKER_SETTINGS) | set(LOG_DEFAULT_KEYS) | CLUSTER_KEYS

FILES = {
    "core": "etc/hadoop/core-site.xml",
    "hdfs": "etc/hadoop/hdfs-site.xml",
    "yarn": "etc/hadoop/yarn-site.xml",
    "zoo": "etc/zookeeper/zoo.cfg",
    "broker": "sparklog/broker.properties",
    "env": "sparklog/sparklog.env",
    "spark": "sparklog/spark-defaults.conf",
    "unit": "systemd/sparklog-broker@.service",
    "cluster": "cluster.env",
}
#: DataNode transfer threads kept for reads (Spark tasks, fetches, block recovery) above
#: the brokers' open streams, and the least dfs.datanode.max.transfer.threads accepted
#: (Hadoop's default): docs/storage.md, section 10
READ_XCEIVERS, MIN_XCEIVERS = 512, 4096
#: the transfer threads below which a cluster that also runs Spark is warned
SPARK_XCEIVERS = 8192
HEARTBEAT_MAX_S = 3
ZK_DEFAULT_PATHS = {  # key -> (file, Hadoop's default)
    "ha.zookeeper.parent-znode": ("core", "/hadoop-ha"),
    "yarn.resourcemanager.ha.automatic-failover.zk-base-path": ("yarn", "/yarn-leader-election"),
    "yarn.resourcemanager.zk-state-store.parent-path": ("yarn", "/rmstore"),
}


class Checker:
    """Loads the deployment files of ``root`` and collects problems as text lines."""

    def __init__(self, root: str, resolve: bool = True):
        self.root = root
        self.resolve = resolve
        self.problems: list[str] = []
        #: what is allowed but outside the sizing of docs/operations.md (exit status 0)
        self.warnings: list[str] = []
        #: the partition sizing line printed with OK (set by check_sizing)
        self.sizing: str | None = None
        self.conf: dict[str, dict | None] = {}
        self.journal_hosts: set | None = None  # set by check_qjournal
        self.zk_hosts: set | None = None  # set by check_zookeeper

    # --- reporting and loading ---------------------------------------------------------
    def check_fencing_key(self, path: str) -> None:
        """sshfence's key in a form Hadoop's jsch (0.1.55 in Hadoop 3.4) loads: a PEM key,
        not ed25519 nor OpenSSH's own key format (checked when the file is readable
        here, as on a NameNode host)."""
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                first = f.readline().strip()
        except OSError:
            first = ""
        if "ed25519" in os.path.basename(path) or first == "-----BEGIN OPENSSH PRIVATE KEY-----":
            self.problem("hdfs", f"dfs.ha.fencing.ssh.private-key-files={path}: sshfence's "
                                 f"jsch loads only PEM keys (no ed25519, not OpenSSH's own "
                                 f"format): make one with ssh-keygen -t ecdsa -b 256 -m PEM")

    def problem(self, kind: str, message: str) -> None:
        """Record one problem of the file of ``kind`` (returns None)."""
        self.problems.append(f"{FILES[kind]}: {message}")

    def warn(self, kind: str, message: str) -> None:
        """Record one warning about the file of ``kind`` (returns None)."""
        self.warnings.append(f"{FILES[kind]}: {message}")

    def _read(self, kind: str) -> str | None:
        path = os.path.join(self.root, FILES[kind])
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            return self.problem(kind, f"cannot be read ({exc.strerror})")

    def load_xml(self, kind: str) -> dict | None:
        """A Hadoop ``*-site.xml`` as {name: value}; duplicates and bad XML are problems."""
        text = self._read(kind)
        if text is None:
            return None
        try:
            tree = ET.fromstring(text)
        except ET.ParseError as exc:
            return self.problem(kind, f"is not well-formed XML: {exc}")
        props: dict = {}
        for prop in tree.iter("property"):
            name = (prop.findtext("name") or "").strip()
            if not name:
                self.problem(kind, "a <property> has no <name>")
                continue
            if name in props:
                self.problem(kind, f"{name} is set twice (Hadoop keeps only the last value)")
            props[name] = (prop.findtext("value") or "").strip()
        return props

    def load_kv(self, kind: str, spaces: bool = False) -> dict | None:
        """``key=value`` files (zoo.cfg, *.env, broker.properties); with ``spaces``
        also ``key value`` (spark-defaults.conf)."""
        text = self._read(kind)
        if text is None:
            return None
        if kind == "broker":
            try:
                return parse_properties(text, FILES[kind])
            except InvalidConfigError as exc:
                return self.problem(kind, str(exc))
        out = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            match = re.match(r"([^\s=]+)\s*=\s*(.*)$", line) or \
                (re.match(r"(\S+)\s+(.*)$", line) if spaces else None)
            if not match:
                self.problem(kind, f"line {number}: {line!r} is not key=value")
                continue
            value = match.group(2).strip()
            if kind in ("env", "cluster"):
                try:
                    value = " ".join(shlex.split(value))
                except ValueError:
                    self.problem(kind, f"line {number}: unbalanced quotes")
            out[match.group(1)] = value
        return out

    def load_unit(self) -> dict | None:
        """The systemd unit as {key: value} of its [Service] section (continuations joined)."""
        text = self._read("unit")
        if text is None:
            return None
        out, section = {}, None
        for line in text.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
            elif section == "Service" and "=" in line:
                key, value = line.split("=", 1)
                out[key.strip()] = " ".join(value.split())
        return out

    def load(self) -> None:
        """Read every file (missing and malformed files are problems)."""
        for kind in FILES:
            self.conf[kind] = self.load_xml(kind) if FILES[kind].endswith(".xml") else \
                self.load_unit() if kind == "unit" else self.load_kv(kind, kind == "spark")

    # --- helpers ----------------------------------------------------------------------
    def _host_port(self, kind: str, key: str, value: str) -> tuple[str, int] | None:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            self.problem(kind, f"{key}={value!r} is not host:port")
            return None
        return host, int(port)

    def _int(self, kind: str, conf: dict, key: str, default: int) -> int:
        value = str(conf.get(key, default)).strip()
        if not value.lstrip("-").isdigit():
            self.problem(kind, f"{key}={value!r} is not an integer")
            return default
        return int(value)

    def _size(self, kind: str, conf: dict, key: str, default: int) -> int:
        """A byte size as Hadoop reads one: a number with an optional k, m, g, t or p."""
        value = str(conf.get(key, default)).strip()
        match = re.fullmatch(r"(\d+)\s*([kmgtp]?)", value.lower())
        if not match:
            self.problem(kind, f"{key}={value!r} is not a size (bytes, or a number with "
                               "k, m, g, t or p)")
            return default
        return int(match.group(1)) << (10 * " kmgtp".index(match.group(2) or " "))

    @staticmethod
    def _ids(value: str) -> list[str]:
        return [s.strip() for s in value.split(",") if s.strip()]

    @staticmethod
    def _true(value) -> bool:
        return str(value).strip().lower() == "true"

    def nameservice(self) -> str | None:
        """The single nameservice of hdfs-site.xml, or None."""
        ids = self._ids((self.conf.get("hdfs") or {}).get("dfs.nameservices", ""))
        return ids[0] if len(ids) == 1 else None

    # --- HDFS -------------------------------------------------------------------------
    def check_hdfs(self) -> None:
        """Nameservice, NameNodes, QJM, failover, fencing and sparklog's needs."""
        hdfs, core = self.conf["hdfs"], self.conf["core"]
        if hdfs is None:
            return
        ids = self._ids(hdfs.get("dfs.nameservices", ""))
        if len(ids) != 1:
            return self.problem("hdfs", f"dfs.nameservices must name exactly one nameservice, "
                                        f"got {hdfs.get('dfs.nameservices', '')!r}")
        ns = ids[0]
        nns = self._ids(hdfs.get(f"dfs.ha.namenodes.{ns}", ""))
        if len(nns) < 2:
            self.problem("hdfs", f"dfs.ha.namenodes.{ns} must list at least two NameNode ids, "
                                 f"got {nns}")
        for kind in ("rpc-address", "http-address"):
            seen = {}
            for nn in nns:
                key = f"dfs.namenode.{kind}.{ns}.{nn}"
                if not hdfs.get(key):
                    self.problem("hdfs", f"NameNode {nn} has no {key}")
                    continue
                address = self._host_port("hdfs", key, hdfs[key])
                if address is None:
                    continue
                if address in seen:
                    self.problem("hdfs", f"NameNodes {seen[address]} and {nn} share the "
                                         f"{kind} {hdfs[key]}")
                seen[address] = nn
        self.check_qjournal(hdfs, ns)
        auto = hdfs.get(f"dfs.ha.automatic-failover.enabled.{ns}",
                        hdfs.get("dfs.ha.automatic-failover.enabled", "false"))
        if not self._true(auto):
            self.problem("hdfs", f"automatic failover is off: set "
                                 f"dfs.ha.automatic-failover.enabled.{ns}=true")
        elif core is not None and not core.get("ha.zookeeper.quorum"):
            self.problem("core", "automatic failover is on but ha.zookeeper.quorum is not set")
        methods = hdfs.get("dfs.ha.fencing.methods", "")
        if not methods.strip():
            self.problem("hdfs", "dfs.ha.fencing.methods is not set (failover needs a fencing "
                                 "method, e.g. sshfence)")
        elif "sshfence" in methods and not hdfs.get("dfs.ha.fencing.ssh.private-key-files"):
            self.problem("hdfs", "sshfence needs dfs.ha.fencing.ssh.private-key-files")
        elif "sshfence" in methods:
            for key in hdfs["dfs.ha.fencing.ssh.private-key-files"].split(","):
                self.check_fencing_key(key.strip())
        self.check_client_failover(hdfs, core or {})
        if core is not None:
            self.check_rpc_timeout(core)
            self.check_namenode_probe(core)
        if not hdfs.get(f"dfs.client.failover.proxy.provider.{ns}"):
            self.problem("hdfs", f"dfs.client.failover.proxy.provider.{ns} is not set: clients "
                                 f"cannot find the active NameNode of {ns}")
        if core is not None:
            fs = core.get("fs.defaultFS", "")
            if fs.rstrip("/") != f"hdfs://{ns}":
                self.problem("core", f"fs.defaultFS is {fs!r}, expected hdfs://{ns} "
                                     f"(the nameservice of hdfs-site.xml)")
        # sparklog's storage contract
        if hdfs.get("dfs.support.append", "true").lower() == "false":
            self.problem("hdfs", "dfs.support.append is false: brokers reopen segments for "
                                 "append")
        if not self._true(hdfs.get("dfs.datanode.synconclose", "false")):
            self.problem("hdfs", "dfs.datanode.synconclose must be true (blocks of a segment "
                                 "closed before an hsync are otherwise not fsynced)")
        prefix = "dfs.client.block.write.replace-datanode-on-failure"
        if hdfs.get(f"{prefix}.enable", "true").lower() == "false" or \
                hdfs.get(f"{prefix}.policy", "DEFAULT").upper() == "NEVER":
            self.problem("hdfs", f"{prefix} is disabled: long-lived segment writers would run "
                                 "under-replicated after a DataNode loss")
        if hdfs.get("dfs.permissions.enabled", "true").lower() == "false":
            self.problem("hdfs", "dfs.permissions.enabled is false: the sparklog root's "
                                 "permissions would not be enforced")

    def check_client_failover(self, hdfs: dict, core: dict) -> None:
        """HDFS clients keep failing over for longer than a NameNode failover after a
        host loss (the ZKFC's ZooKeeper session timeout): sparklog's client defaults
        (3 attempts, 0.2 s doubling to 2 s) give up after about 1.4 s."""
        settings = {}
        for key, default in (("dfs.client.failover.max.attempts", 3),
                             ("dfs.client.failover.sleep.base.millis", 200),
                             ("dfs.client.failover.sleep.max.millis", 2000)):
            settings[key] = self._int("hdfs", hdfs, key, default)
        attempts, base, cap = settings.values()
        covered = sum(min(base * 2 ** i, cap) for i in range(max(attempts, 0)))
        session = self._int("core", core, "ha.zookeeper.session-timeout.ms", 10000)
        if covered < session + 5000:
            unset = [k for k in settings if k not in hdfs]
            how = f" ({', '.join(unset)} not set: sparklog's client defaults apply)" \
                if unset else ""
            self.problem("hdfs", f"dfs.client.failover.max.attempts={attempts} with sleeps "
                                 f"of {base}..{cap} ms fails over for {covered / 1000:.1f} s, "
                                 f"shorter than a NameNode failover after a host loss "
                                 f"(ha.zookeeper.session-timeout.ms={session} + 5 s){how}")

    def check_rpc_timeout(self, core: dict) -> None:
        """A client call to a lost NameNode host is abandoned within the ZKFC's session
        timeout (Hadoop's default, 120 s, holds a broker's writes that long)."""
        session = self._int("core", core, "ha.zookeeper.session-timeout.ms", 10000)
        timeout = self._int("core", core, "ipc.client.rpc-timeout.ms", 120000)
        if not 0 < timeout <= session:
            unset = "" if "ipc.client.rpc-timeout.ms" in core else \
                " (not set: Hadoop's default applies)"
            self.problem("core", f"ipc.client.rpc-timeout.ms={timeout}{unset}: a call to a "
                                 f"lost NameNode host would wait longer than "
                                 f"ha.zookeeper.session-timeout.ms={session} before the "
                                 f"client fails over; set it to at most that")

    def check_namenode_probe(self, core: dict) -> None:
        """The brokers probe the NameNodes (storage.namenode.probe.interval.ms, 1000 by
        default) more often than the IPC timeout: a broker that does not finds a lost
        NameNode host only on its first write after the failover, up to
        ipc.client.rpc-timeout.ms late (docs/deploy.md)."""
        broker = self.conf["broker"]
        if broker is None:
            return
        key = "storage.namenode.probe.interval.ms"
        try:
            interval = int(broker.get(key, "1000"))
        except ValueError:
            return  # check_broker names the value
        timeout = self._int("core", core, "ipc.client.rpc-timeout.ms", 120000)
        if interval == 0:
            self.problem("broker", f"{key}=0: brokers would find a lost NameNode host only "
                                   "on their first NameNode call after the failover, up to "
                                   f"ipc.client.rpc-timeout.ms={timeout} late")
        elif 0 < timeout <= interval:
            self.problem("broker", f"{key}={interval} is not shorter than core-site's "
                                   f"ipc.client.rpc-timeout.ms={timeout}: a lost NameNode "
                                   "host's connection would be found later than a call "
                                   "on it times out")

    def check_qjournal(self, hdfs: dict, ns: str) -> None:
        """qjournal://h:p;h:p;h:p/journalId with an odd number >= 3 of JournalNodes."""
        key = "dfs.namenode.shared.edits.dir"
        value = hdfs.get(key, "")
        match = re.fullmatch(r"qjournal://([^/]+)/([^/]+)/?", value)
        if not match:
            return self.problem("hdfs", f"{key}={value!r} is not qjournal://host:port;.../"
                                        "journalId")
        nodes = [n.strip() for n in match.group(1).split(";") if n.strip()]
        if len(nodes) < 3 or len(nodes) % 2 == 0:
            self.problem("hdfs", f"{key} lists {len(nodes)} JournalNode(s): use an odd number "
                                 "of at least 3 (a majority must stay up)")
        addresses = [self._host_port("hdfs", key, n) for n in nodes]
        if len(set(addresses)) != len(addresses):
            self.problem("hdfs", f"{key} lists a JournalNode twice")
        if not hdfs.get("dfs.journalnode.edits.dir"):
            self.problem("hdfs", "dfs.journalnode.edits.dir is not set")
        self.journal_hosts = {a[0] for a in addresses if a}

    # --- sizing for partitions (docs/operations.md, "Capacity planning") -------------------
    def partition_budget(self) -> tuple[int, str] | None:
        """(partitions each broker keeps open, where that number comes from): the
        broker's ``max.open.partitions``, or with 0 (auto) what the broker derives from
        the unit's ``LimitNOFILE`` (sparklog.server.resources.plan); None when neither
        gives one (a problem, except for a bad value check_broker already names)."""
        broker, unit = self.conf["broker"] or {}, self.conf["unit"] or {}
        value = broker.get("max.open.partitions", "0").strip()
        if not value.isdigit():
            return None  # check_broker names the value
        if int(value) > 0:
            return int(value), f"max.open.partitions={value}"
        limit = unit.get("LimitNOFILE", "").strip()
        hard = limit.rpartition(":")[2]  # soft:hard; the broker raises soft to hard
        if hard == "infinity":
            hard = str(1 << 20)  # what the broker assumes for an unlimited one
        if not hard.isdigit():
            self.problem("broker", "max.open.partitions is not set and the unit sets no "
                                   f"numeric LimitNOFILE ({limit or 'none'}): set "
                                   "max.open.partitions, the partitions each broker keeps "
                                   "open, to size the DataNodes' transfer threads")
            return None
        opened = fd_plan(0, MAX_INT, 0, fd_limit=int(hard)).max_open_partitions
        return opened, (f"max.open.partitions=0: {opened} from the unit's "
                        f"LimitNOFILE={limit}")

    def check_sizing(self) -> None:
        """The DataNode and NameNode settings against the partitions the brokers keep
        open: each open partition is one HDFS output stream, holding two transfer
        threads (a DataXceiver and its PacketResponder) on each of the dfs.replication
        DataNodes of its pipeline."""
        hdfs, env = self.conf["hdfs"], self.conf["cluster"]
        if hdfs is None or env is None:
            return
        brokers = len(env.get("BROKERS", "").split())
        datanodes = len(env.get("DN_HOSTS", "").split())
        if not datanodes:
            return self.problem("cluster", "DN_HOSTS lists no DataNode")
        replication = self._int("hdfs", hdfs, "dfs.replication", 3)
        budget = self.partition_budget()
        key = "dfs.datanode.max.transfer.threads"
        found = len(self.problems)
        xceivers = self._int("hdfs", hdfs, key, MIN_XCEIVERS)
        unset = "" if key in hdfs else " (not set: Hadoop's default)"
        if budget is not None and len(self.problems) == found:  # a number to compare
            opened, source = budget
            # a stream being written holds a DataXceiver and its PacketResponder on each
            # DataNode of its pipeline, and the DataNode counts both against the limit
            # (DataNode.getXceiverCount: the threads of its transfer thread group)
            streams = -(-2 * brokers * opened * replication // datanodes)  # ceil
            needed = max(streams + READ_XCEIVERS, MIN_XCEIVERS)
            if xceivers < needed:
                self.problem("hdfs", f"{key}={xceivers}{unset} is below the {needed} needed: "
                                     f"2 x {brokers} broker(s) x {opened} open partitions "
                                     f"each ({source}) x dfs.replication={replication} / "
                                     f"{datanodes} DataNode(s) = {streams} transfer threads "
                                     f"per DataNode for the brokers' streams (a DataXceiver "
                                     f"and its PacketResponder each), + {READ_XCEIVERS} for "
                                     f"reads (at least {MIN_XCEIVERS})")
            elif xceivers < SPARK_XCEIVERS and env.get("NM_HOSTS", "").split():
                self.warn("hdfs", f"{key}={xceivers}{unset} is below {SPARK_XCEIVERS} on a "
                                  "cluster running Spark (NM_HOSTS): every Spark task "
                                  "reading a block holds a transfer thread beside the "
                                  "brokers' streams")
            block = self._size("hdfs", hdfs, "dfs.blocksize", 128 << 20)
            reserved = -(-brokers * opened * replication * block // datanodes)
            self.sizing = (f"per broker {opened} open partitions ({source}), "
                           f"{2 * opened} HDFS client threads; per DataNode {streams} "
                           f"transfer threads of {key}={xceivers}, "
                           f"{reserved / 2**30:.0f} GiB of disk reserved for blocks being "
                           f"written (dfs.blocksize {block >> 20} MiB)")
        for key, floor, why in [
                ("dfs.namenode.handler.count",
                 max(20, math.ceil(20 * math.log(datanodes))),
                 f"20 x ln({datanodes} DataNode(s)), at least 20: brokers' rolls and "
                 "checkpoints, Spark planners' listings and DataNode reports share them"),
                ("dfs.datanode.handler.count", 10,
                 "Hadoop's default: block recovery of a new leader's lease recoveries and "
                 "readers' visible-length calls")]:
            value = self._int("hdfs", hdfs, key, 10)
            if value < floor:
                unset = "" if key in hdfs else " (not set: Hadoop's default)"
                self.warn("hdfs", f"{key}={value}{unset} is below {floor} ({why})")
        value = str(hdfs.get("dfs.heartbeat.interval", "3")).strip()
        match = re.fullmatch(r"(\d+)\s*(ms|s|m|h|d)?", value)
        if not match:
            return self.problem("hdfs", f"dfs.heartbeat.interval={value!r} is not a time "
                                        "(seconds, or a number with ms, s, m, h or d)")
        scale = {"ms": 0.001, "m": 60, "h": 3600, "d": 86400}.get(match.group(2) or "s", 1)
        if int(match.group(1)) * scale > HEARTBEAT_MAX_S:
            self.warn("hdfs", f"dfs.heartbeat.interval={value} is above {HEARTBEAT_MAX_S} s: "
                              "a new partition leader's lease recovery waits for the next "
                              "heartbeat of the block's primary DataNode, once per "
                              "partition taken over")

    # --- YARN ---------------------------------------------------------------------------
    def check_yarn(self) -> None:
        """RM HA ids with hostnames, cluster id, ZooKeeper state store and address."""
        yarn, core = self.conf["yarn"], self.conf["core"] or {}
        if yarn is None:
            return
        if not self._true(yarn.get("yarn.resourcemanager.ha.enabled", "false")):
            self.problem("yarn", "yarn.resourcemanager.ha.enabled is not true")
        rms = self._ids(yarn.get("yarn.resourcemanager.ha.rm-ids", ""))
        if len(rms) < 2:
            self.problem("yarn", f"yarn.resourcemanager.ha.rm-ids must list at least two "
                                 f"ResourceManagers, got {rms}")
        for rm in rms:
            if not yarn.get(f"yarn.resourcemanager.hostname.{rm}"):
                self.problem("yarn", f"ResourceManager {rm} has no "
                                     f"yarn.resourcemanager.hostname.{rm}")
        if not yarn.get("yarn.resourcemanager.cluster-id"):
            self.problem("yarn", "yarn.resourcemanager.cluster-id is not set")
        if not self._true(yarn.get("yarn.resourcemanager.recovery.enabled", "false")):
            self.problem("yarn", "yarn.resourcemanager.recovery.enabled is not true: running "
                                 "applications would be lost on an RM failover")
        store = yarn.get("yarn.resourcemanager.store.class", "")
        if not store.endswith("ZKRMStateStore"):
            self.problem("yarn", f"yarn.resourcemanager.store.class is {store!r}, expected "
                                 "...recovery.ZKRMStateStore")
        if not (yarn.get("hadoop.zk.address") or core.get("hadoop.zk.address")
                or yarn.get("yarn.resourcemanager.zk-address")):
            self.problem("yarn", "no ZooKeeper address for the ResourceManagers "
                                 "(hadoop.zk.address)")

    # --- ZooKeeper ----------------------------------------------------------------------
    def check_zookeeper(self) -> None:
        """Ensemble size, every client's quorum and session timeout, separate paths."""
        zoo = self.conf["zoo"]
        if zoo is None:
            return
        servers = {k: v for k, v in zoo.items() if re.fullmatch(r"server\.\d+", k)}
        if len(servers) < 3 or len(servers) % 2 == 0:
            self.problem("zoo", f"the ensemble has {len(servers)} server(s): use an odd number "
                                "of at least 3")
        tick = self._int("zoo", zoo, "tickTime", 2000)
        low = self._int("zoo", zoo, "minSessionTimeout", 2 * tick)
        high = self._int("zoo", zoo, "maxSessionTimeout", 20 * tick)
        port = self._int("zoo", zoo, "clientPort", 2181)
        ensemble = set()
        for value in servers.values():  # host:quorumPort:electionPort[;[clientHost:]clientPort]
            address, _, client = value.partition(";")
            client_port = client.rpartition(":")[2]
            ensemble.add((address.split(":")[0],
                          int(client_port) if client_port.isdigit() else port))
        self.zk_hosts = {h for h, _ in ensemble}
        core, yarn = self.conf["core"] or {}, self.conf["yarn"] or {}
        broker = self.conf["broker"] or {}
        quorums = [("core", "ha.zookeeper.quorum", core.get("ha.zookeeper.quorum")),
                   ("core", "hadoop.zk.address",
                    core.get("hadoop.zk.address") or yarn.get("hadoop.zk.address"))]
        if broker.get("zookeeper.connect"):
            try:
                hosts, _ = parse_zk_connect(broker["zookeeper.connect"])
                quorums.append(("broker", "zookeeper.connect", hosts))
            except InvalidConfigError:
                pass  # reported by check_broker
        for kind, key, value in quorums:
            if not value:
                continue
            pairs = [self._host_port(kind, key, item.strip()) for item in value.split(",")]
            quorum = None if None in pairs else set(pairs)
            if quorum is not None and quorum != ensemble:
                self.problem(kind, f"{key} names {sorted(f'{h}:{p}' for h, p in quorum)} but "
                                   f"zoo.cfg's ensemble is "
                                   f"{sorted(f'{h}:{p}' for h, p in ensemble)}")
        for kind, key, value in [
                ("core", "ha.zookeeper.session-timeout.ms",
                 core.get("ha.zookeeper.session-timeout.ms", "10000")),
                ("broker", "zookeeper.session.timeout.ms",
                 broker.get("zookeeper.session.timeout.ms", "6000"))]:
            if value.isdigit() and not low <= int(value) <= high:
                self.problem(kind, f"{key}={value} is outside ZooKeeper's session range "
                                   f"{low}..{high} ms (zoo.cfg); the server would change it")

    # --- sparklog -----------------------------------------------------------------------
    def check_broker(self) -> None:
        """Known keys, valid values, zookeeper.connect with a chroot of its own."""
        broker = self.conf["broker"]
        if broker is None:
            return
        for key in broker:
            if key not in KNOWN_BROKER_KEYS:
                close = difflib.get_close_matches(key, KNOWN_BROKER_KEYS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.problem("broker", f"unknown key {key!r}: not a sparklog/Kafka broker "
                                       f"config{hint}")
        try:
            BrokerConfig.from_props({k: v for k, v in broker.items()
                                     if k in set(BROKER_SETTINGS) | set(LOG_DEFAULT_KEYS)})
        except InvalidConfigError as exc:
            self.problem("broker", str(exc))
        connect = broker.get("zookeeper.connect")
        if not connect:
            self.problem("broker", "zookeeper.connect is not set (cluster mode needs the "
                                   "ZooKeeper ensemble)")
            return
        try:
            _, chroot = parse_zk_connect(connect)
        except InvalidConfigError as exc:
            return self.problem("broker", str(exc))
        if not chroot:
            self.problem("broker", f"zookeeper.connect {connect!r} has no chroot: sparklog's "
                                   "nodes would mix with the ZKFC's and RM's (add /sparklog)")
            return
        for key, (kind, default) in ZK_DEFAULT_PATHS.items():
            other = ((self.conf[kind] or {}).get(key) or default).rstrip("/")
            if (chroot + "/").startswith(other + "/") or (other + "/").startswith(chroot + "/"):
                self.problem("broker", f"zookeeper.connect chroot {chroot} overlaps {key}="
                                       f"{other}")

    def check_advertised(self) -> None:
        """The address each broker advertises is never a wildcard: the unit's
        ``--override advertised.listeners=...`` when it sets one, else the properties'."""
        broker, unit = self.conf["broker"] or {}, self.conf["unit"] or {}
        props = {k: broker[k] for k in ("listeners", "advertised.listeners") if k in broker}
        kind = "broker"
        match = re.search(r"--override\s+advertised\.listeners=(\S+)", unit.get("ExecStart", ""))
        if match:  # %H: the host's name, filled in by systemd
            props["advertised.listeners"] = match.group(1).replace("%H", "host.invalid")
            kind = "unit"
        try:
            config = BrokerConfig.from_props(props)
            # without advertised.listeners a wildcard listener is advertised by the
            # broker host's canonical name (Kafka's rule), which this check cannot see
            # from here: the kit names each host itself
            if any(lst.host in WILDCARD_HOSTS and not lst.advertised_host
                   for lst in config.security.listeners):
                self.problem(kind, f"broker config listeners={config.listeners!r} binds "
                                   "every interface and no advertised.listeners names this "
                                   "host: set it to the host's name (the unit's --override "
                                   "advertised.listeners=%H:9092)")
                return
            config.advertised_host_port
        except InvalidConfigError as exc:
            self.problem(kind, str(exc))

    def check_hosts_resolve(self) -> None:
        """Every host name of the files resolves here (one line per name, at its first
        mention: file, key and value)."""
        core, hdfs = self.conf["core"] or {}, self.conf["hdfs"] or {}
        yarn, zoo = self.conf["yarn"] or {}, self.conf["zoo"] or {}
        broker, env = self.conf["broker"] or {}, self.conf["cluster"] or {}
        mentions = []  # (kind, key, value, host)

        def addresses(kind, key, value):
            for item in value.split(","):
                host = item.strip().rpartition(":")[0] if ":" in item else item.strip()
                if host:
                    mentions.append((kind, key, value, host))

        for key, value in hdfs.items():
            if key.startswith(("dfs.namenode.rpc-address.", "dfs.namenode.http-address.")):
                addresses("hdfs", key, value)
        journals = re.fullmatch(r"qjournal://([^/]+)/.*",
                                hdfs.get("dfs.namenode.shared.edits.dir", ""))
        if journals:
            for item in journals.group(1).split(";"):
                mentions.append(("hdfs", "dfs.namenode.shared.edits.dir",
                                 hdfs["dfs.namenode.shared.edits.dir"],
                                 item.strip().rpartition(":")[0]))
        for key, value in yarn.items():
            if key.startswith("yarn.resourcemanager.hostname."):
                mentions.append(("yarn", key, value, value.strip()))
        for key in ("ha.zookeeper.quorum", "hadoop.zk.address"):
            if core.get(key):
                addresses("core", key, core[key])
        for key, value in zoo.items():
            if re.fullmatch(r"server\.\d+", key):
                mentions.append(("zoo", key, value, value.split(":")[0].strip()))
        if broker.get("zookeeper.connect"):
            addresses("broker", "zookeeper.connect", broker["zookeeper.connect"].split("/")[0])
        for var in ("ZK_HOSTS", "JN_HOSTS", "NN1", "NN2", "DN_HOSTS", "RM_HOSTS", "NM_HOSTS"):
            for host in env.get(var, "").split():
                mentions.append(("cluster", var, env[var], host))
        for pair in env.get("BROKERS", "").split():
            mentions.append(("cluster", "BROKERS", env["BROKERS"], pair.partition(":")[2]))
        seen = set()
        for kind, key, value, host in mentions:
            if host in seen:
                continue
            seen.add(host)
            try:
                socket.getaddrinfo(host, None)
            except (socket.gaierror, UnicodeError) as exc:
                self.problem(kind, f"{key}={value}: host {host!r} does not resolve on this "
                                   f"host ({exc.args[-1] if exc.args else exc})")

    def check_unit(self) -> None:
        """SIGTERM stop with a timeout longer than the broker's own shutdown timeout."""
        unit, broker = self.conf["unit"], self.conf["broker"] or {}
        if unit is None:
            return
        signal = unit.get("KillSignal", "SIGTERM")
        if signal not in ("SIGTERM", "SIGINT"):
            self.problem("unit", f"KillSignal={signal}: the broker stops gracefully on SIGTERM")
        if "broker start" not in unit.get("ExecStart", "") or \
                "--broker-id %i" not in unit.get("ExecStart", ""):
            self.problem("unit", "ExecStart must run 'sparklog broker start ... --broker-id %i'")
        text = unit.get("TimeoutStopSec", "90s")
        match = re.fullmatch(r"(\d+)\s*(ms|s|sec|min|m)?", text)
        if not match:
            return self.problem("unit", f"TimeoutStopSec={text!r} is not a time span")
        scale = {"ms": 0.001, "min": 60, "m": 60}.get(match.group(2), 1)
        stop_s = int(match.group(1)) * scale
        shutdown_ms = broker.get("controlled.shutdown.timeout.ms", "30000")
        if shutdown_ms.isdigit() and stop_s * 1000 <= int(shutdown_ms):
            self.problem("unit", f"TimeoutStopSec={text} is not longer than broker "
                                 f"controlled.shutdown.timeout.ms={shutdown_ms}: systemd would "
                                 "SIGKILL brokers in the middle of a graceful stop")

    def check_storage_urls(self) -> None:
        """The log root and Spark's HDFS paths use the nameservice, not one NameNode."""
        ns = self.nameservice()
        env, spark = self.conf["env"], self.conf["spark"]
        urls = []
        if env is not None:
            if not env.get("SPARKLOG_STORAGE"):
                self.problem("env", "SPARKLOG_STORAGE is not set")
            else:
                urls.append(("env", "SPARKLOG_STORAGE", env["SPARKLOG_STORAGE"]))
        for key, value in (spark or {}).items():
            urls += [("spark", key, v.split("#")[0]) for v in value.split(",")
                     if v.startswith(("hdfs://", "webhdfs://"))]
        for kind, key, url in urls:
            parts = urlsplit(url)
            if parts.scheme == "webhdfs":
                self.problem(kind, f"{key}={url} names one NameNode (WebHDFS has no failover); "
                                   f"use hdfs://{ns or '<nameservice>'}/...")
            elif parts.scheme != "hdfs" or (ns and parts.netloc != ns):
                self.problem(kind, f"{key}={url} should be on hdfs://{ns or '<nameservice>'}/ "
                                   "(the HA nameservice)")

    def check_spark(self) -> None:
        """The same venv interpreter for the application master and the executors."""
        spark = self.conf["spark"]
        if spark is None:
            return
        alias = {a.split("#", 1)[1] for a in spark.get("spark.archives", "").split(",")
                 if "#" in a}
        if not alias:
            self.problem("spark", "spark.archives ships no packed venv (ARCHIVE#alias)")
        for key in ("spark.yarn.appMasterEnv.PYSPARK_PYTHON", "spark.executorEnv.PYSPARK_PYTHON"):
            python = spark.get(key)
            if not python:
                self.problem("spark", f"{key} is not set (containers would run the node's "
                                      "own python)")
            elif alias and python.lstrip("./").split("/")[0] not in alias:
                self.problem("spark", f"{key}={python} is not inside the shipped archive "
                                      f"({', '.join(sorted(alias))})")

    def check_cluster_env(self) -> None:
        """Host lists of the bring-up script against the XML and zoo.cfg."""
        env, hdfs, yarn = self.conf["cluster"], self.conf["hdfs"] or {}, self.conf["yarn"] or {}
        if env is None:
            return
        ns = self.nameservice()
        if ns:
            nns = self._ids(hdfs.get(f"dfs.ha.namenodes.{ns}", ""))
            hosts = [hdfs.get(f"dfs.namenode.rpc-address.{ns}.{nn}", "").rpartition(":")[0]
                     for nn in nns]
            if [env.get("NN1"), env.get("NN2")] != hosts[:2]:
                self.problem("cluster", f"NN1/NN2 are {env.get('NN1')}/{env.get('NN2')} but the "
                                        f"NameNodes of {ns} are on {hosts}")
        for var, expected, what in [
                ("JN_HOSTS", self.journal_hosts, "qjournal's JournalNodes"),
                ("ZK_HOSTS", self.zk_hosts, "zoo.cfg's servers"),
                ("RM_HOSTS", {yarn[f"yarn.resourcemanager.hostname.{rm.strip()}"]
                              for rm in yarn.get("yarn.resourcemanager.ha.rm-ids", "").split(",")
                              if yarn.get(f"yarn.resourcemanager.hostname.{rm.strip()}")}
                 if yarn else None, "yarn-site's ResourceManagers")]:
            if expected is not None and set(env.get(var, "").split()) != expected:
                self.problem("cluster", f"{var} is {sorted(env.get(var, '').split())} but "
                                        f"{what} are {sorted(expected)}")
        ids = [b.split(":")[0] for b in env.get("BROKERS", "").split()]
        if not ids or not all(i.isdigit() for i in ids) or len(set(ids)) != len(ids):
            self.problem("cluster", f"BROKERS must list unique id:host pairs, got "
                                    f"{env.get('BROKERS', '')!r}")

    def run(self) -> list[str]:
        """Load and check everything; the problems found."""
        self.load()
        for check in (self.check_hdfs, self.check_yarn, self.check_zookeeper,
                      self.check_broker, self.check_unit, self.check_storage_urls,
                      self.check_spark, self.check_cluster_env,  # journal/zk hosts first
                      self.check_advertised, self.check_sizing):
            check()
        if self.resolve:
            self.check_hosts_resolve()
        return self.problems


def main(argv=None) -> int:
    """Entry point: print one line per problem; 1 if any, else 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    resolve = "--no-resolve" not in argv
    argv = [a for a in argv if a != "--no-resolve"]
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__)
        return 2
    root = argv[0] if argv else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checker = Checker(root, resolve=resolve)
    problems = checker.run()
    for line in problems:
        print(f"check-config: {line}")
    for line in checker.warnings:
        print(f"check-config: warning: {line}")
    if problems:
        print(f"check-config: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check-config: OK ({len(FILES)} files in {root}"
          f"{f', {len(checker.warnings)} warning(s)' if checker.warnings else ''})")
    if checker.sizing:
        print(f"check-config: sizing: {checker.sizing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
