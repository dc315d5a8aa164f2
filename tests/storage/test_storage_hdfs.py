"""hdfs:// beyond the shared contract: bad input (a NameNode that is down, a nameservice
missing from the configuration, a directory without permission) gives one clear error
naming the URL and the cause, in seconds; the cluster fixture's API (block locations)
and its daemons' temporary files (kept in the cluster's directory).

The storage contract itself runs on the cluster in tests/storage/test_storage_contract.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from sparklog.errors import StorageError
from sparklog.storage import open_fileio
from tests.support.hdfscluster import free_port, write_site
from tests.support.waiting import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args, env=None) -> subprocess.CompletedProcess:
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "sparklog.cli.main", *args],
                          capture_output=True, text=True, timeout=180, env=env)


def _assert_one_clear_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The command failed with exactly one line on stderr, sparklog's error naming
    ``words``: no Python traceback, no Java stack."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("sparklog"), proc.stderr  # the command's own prefix
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_namenode_down_is_one_clear_error_in_seconds():
    port = free_port()  # nobody listens here
    url = f"hdfs://127.0.0.1:{port}/sparklog/topics/events/0"
    proc = _cli("dump-log", url, env={k: v for k, v in os.environ.items()
                                      if k != "HADOOP_CONF_DIR"})
    _assert_one_clear_line(proc, f"hdfs://127.0.0.1:{port}/sparklog", "NameNode unreachable",
                           "Connection refused")

    fs = open_fileio(url)
    started = time.monotonic()
    with pytest.raises(StorageError) as ei:
        fs.list(url)
    took = time.monotonic() - started
    assert f"127.0.0.1:{port}" in str(ei.value) and "unreachable" in str(ei.value)
    # bounded IPC retries (3 connection attempts): seconds, not Hadoop's default minutes
    assert took < 20, f"a dead NameNode took {took:.1f}s to report"
    fs.close()


def test_nameservice_missing_from_the_configuration(hdfs_cluster, tmp_path):
    """A client configuration naming HA nameservice ``ns1`` (the run's NameNode as its
    only member) serves hdfs://ns1/; hdfs://ns2/ is named as unknown."""
    conf = tmp_path / "conf"
    conf.mkdir()
    write_site(str(conf / "hdfs-site.xml"), {
        "dfs.nameservices": "ns1",
        "dfs.ha.namenodes.ns1": "nn1",
        "dfs.namenode.rpc-address.ns1.nn1": hdfs_cluster.namenode_address,
        "dfs.client.failover.proxy.provider.ns1":
            "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider",
    })
    root = f"/tmp/ns-{uuid.uuid4().hex[:8]}"
    good = open_fileio(f"hdfs://ns1{root}", conf_dir=str(conf))
    good.write_atomic(f"hdfs://ns1{root}/f", b"via ns1")
    assert good.read_all(f"hdfs://ns1{root}/f") == b"via ns1"
    good.delete(f"hdfs://ns1{root}", recursive=True)
    good.close()

    bad = open_fileio(f"hdfs://ns2{root}", conf_dir=str(conf))
    with pytest.raises(StorageError) as ei:
        bad.exists(f"hdfs://ns2{root}/f")
    msg = str(ei.value)
    assert f"hdfs://ns2{root}" in msg and "nameservice" in msg and "ns2" in msg, msg

    proc = _cli("dump-log", f"hdfs://ns2{root}/t/0", env=dict(os.environ,
                                                            HADOOP_CONF_DIR=str(conf)))
    _assert_one_clear_line(proc, f"hdfs://ns2{root}", "unknown NameNode host or nameservice")


@pytest.fixture
def locked_dir(hdfs_cluster):
    """A directory of the superuser, mode 700, holding one file; its path."""
    path = f"/tmp/locked-{uuid.uuid4().hex[:8]}"
    admin = open_fileio(hdfs_cluster.hdfs_uri + path)
    admin.write_atomic(hdfs_cluster.hdfs_uri + path + "/secret", b"s")
    proc = hdfs_cluster.run_tool("dfs", "-chmod", "700", hdfs_cluster.hdfs_uri + path)
    assert proc.returncode == 0, proc.stderr
    yield path
    admin.delete(hdfs_cluster.hdfs_uri + path, recursive=True)
    admin.close()


@pytest.mark.parametrize("scheme", ["hdfs", "webhdfs"])
def test_directory_without_permission(hdfs_cluster, locked_dir, scheme):
    base = hdfs_cluster.hdfs_uri if scheme == "hdfs" else hdfs_cluster.webhdfs_uri
    url = base + locked_dir
    fs = open_fileio(url, user="alice")  # not the superuser, not the owner
    for call in (lambda: fs.create(url + "/new.log"),
                 lambda: fs.list(url),
                 lambda: fs.read_all(url + "/secret")):
        with pytest.raises(StorageError) as ei:
            call()
        msg = str(ei.value)
        assert url in msg and "ermission denied" in msg and "alice" in msg, msg
    if scheme == "hdfs":
        fs.close()


def test_directory_without_permission_from_the_command_line(hdfs_cluster, locked_dir):
    """HADOOP_USER_NAME picks the user, as for Hadoop's own tools."""
    url = hdfs_cluster.hdfs_uri + locked_dir + "/secret"
    proc = _cli("dump-log", url, env=hdfs_cluster.env(user="alice"))
    _assert_one_clear_line(proc, url, "permission denied", "user=alice")


def test_fixture_reports_block_locations(hdfs_cluster):
    """Files written with a small block size have their blocks where the NameNode says:
    on the DataNodes of the cluster (the API data-locality tests use)."""
    path = f"/tmp/blocks-{uuid.uuid4().hex[:8]}"
    fs = open_fileio(hdfs_cluster.hdfs_uri + path, block_size=1 << 20)
    data = os.urandom((2 << 20) + 1000)
    with fs.create(hdfs_cluster.hdfs_uri + path + "/f") as out:
        out.write(data)
    assert fs.read_all(hdfs_cluster.hdfs_uri + path + "/f") == data
    blocks = hdfs_cluster.block_locations(path + "/f")
    assert [(off, length) for off, length, _ in blocks] == [
        (0, 1 << 20), (1 << 20, 1 << 20), (2 << 20, 1000)]
    datanodes = {dn.xfer_address for dn in hdfs_cluster.datanodes}
    for _, _, hosts in blocks:
        assert len(hosts) == hdfs_cluster.replication and set(hosts) <= datanodes
    fs.delete(hdfs_cluster.hdfs_uri + path, recursive=True)
    fs.close()


def test_daemons_keep_their_temporary_files_in_the_cluster_directory(hdfs_cluster):
    """The daemons' web servers put their ``jetty-*`` work directories (one per daemon
    start) under the cluster's own directory (java.io.tmpdir), removed with it, and
    none in the system's temporary directory (checked for the NameNode's web port, the
    one fixed port among them: a DataNode's Jetty listens on an ephemeral one)."""
    ours = [n for n in os.listdir(hdfs_cluster.java_tmp_dir) if n.startswith("jetty-")]
    assert len(ours) >= 1 + len(hdfs_cluster.datanodes), ours
    assert any(f"-{hdfs_cluster.http_port}-" in n for n in ours), ours
    leaked = [n for n in os.listdir(tempfile.gettempdir())
              if n.startswith("jetty-") and f"-{hdfs_cluster.http_port}-" in n]
    assert leaked == []


def _namenode_length(cluster, url: str) -> int:
    """The length the NameNode records for ``url`` (WebHDFS GETFILESTATUS)."""
    import json
    import urllib.request

    path = "/" + url.split("/", 3)[3]
    with urllib.request.urlopen(f"http://{cluster.namenode_http}/webhdfs/v1{path}"
                                f"?op=GETFILESTATUS&user.name={cluster.superuser}") as r:
        return json.load(r)["FileStatus"]["length"]


def test_sync_update_length_records_the_length_on_the_namenode(hdfs_cluster):
    """hsync alone leaves the NameNode's length of an open file at what its first sync
    of the block recorded (readers use the DataNodes' visible length); with
    sync_update_length every sync records it."""
    base = hdfs_cluster.hdfs_uri + f"/tmp/len-{uuid.uuid4().hex[:8]}"
    for update, expected in ((False, 5), (True, 10)):
        fs = open_fileio(base, sync_update_length=update)
        path = f"{base}/{update}.log"
        with fs.create(path) as out:
            out.write(b"12345")
            out.sync()  # the block's first sync records its length either way
            out.write(b"67890")
            out.sync()
            assert fs.size(path) == 10  # the visible length, either way
            assert _namenode_length(hdfs_cluster, path) == expected
        assert _namenode_length(hdfs_cluster, path) == 10  # closed: complete
        fs.delete(base, recursive=True)
        fs.close()


def test_a_forked_child_is_told_its_jvm_did_not_survive(hdfs_cluster):
    import multiprocessing

    fs = open_fileio(hdfs_cluster.hdfs_uri + "/tmp")
    assert fs.exists(hdfs_cluster.hdfs_uri + "/tmp")  # this process's JVM is running
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_use_hdfs_in_child, args=(hdfs_cluster.hdfs_uri, queue))
    child.start()
    child.join(60)
    message = queue.get(timeout=10)
    assert "forked" in message and "spawn" in message, message
    fs.close()


def _use_hdfs_in_child(uri, queue):
    try:
        open_fileio(uri + "/tmp").exists(uri + "/tmp")
        queue.put("no error")
    except StorageError as e:
        queue.put(str(e))


def test_three_datanodes_replicate_and_a_writer_outlives_one_of_them(tmp_path):
    """HdfsCluster(datanodes=3): a closed file's block is on the three DataNodes; a
    writer keeps writing when one stops (its pipeline goes on with the other two); the
    DataNode restarts and registers again."""
    import time as _time

    from tests.support.hdfscluster import HdfsCluster

    with HdfsCluster(str(tmp_path / "hdfs3"), datanodes=3) as cluster:
        url = cluster.hdfs_uri + "/r"
        fs = open_fileio(url, conf_dir=cluster.conf_dir)
        fs.write_atomic(url + "/closed", b"x" * 1000)
        everyone = {dn.xfer_address for dn in cluster.datanodes}
        assert set(cluster.block_locations("/r/closed")[0][2]) == everyone
        first, second = os.urandom(4096), os.urandom(4096)
        with fs.create(url + "/open") as out:
            out.write(first)
            out.flush()
            cluster.stop_datanode(0)
            out.write(second)
            out.sync()
        assert fs.read_all(url + "/open") == first + second
        stopped = cluster.datanodes[0].xfer_address
        # the NameNode learns the recovered pipeline's replicas from the DataNodes' reports
        wait_until(lambda: len(cluster.block_locations("/r/open")[-1][2]) == 2, timeout=60,
                   what="the NameNode listing the open file's last block on two DataNodes")
        hosts = set(cluster.block_locations("/r/open")[-1][2])
        assert stopped not in hosts and len(hosts) == 2 and hosts < everyone
        started = _time.monotonic()
        cluster.start_datanode(0)
        assert cluster.datanodes[0].running and _time.monotonic() - started < 60
        fs.close()


_EXIT_WITH_OPEN_STREAM = """
import sys
from sparklog.storage import open_fileio
url, name = sys.argv[1], sys.argv[2]
fs = open_fileio(url)
out = fs.create(url + "/" + name)
out.write(b"written before exit")
out.flush()  # hflushed, not closed: the exit hook closes the file
"""


def test_a_process_exits_cleanly_and_its_open_files_are_closed(hdfs_cluster):
    """A Python process that used hdfs:// exits with status 0 (not a crash of the JVM's
    destruction at exit), five times in a row; a stream it left open is closed at exit
    (Hadoop's FileSystems closed by sparklog's exit hook): the file is complete on the
    NameNode (not under construction) and its lease released."""
    url = hdfs_cluster.hdfs_uri + "/exits"
    env = dict(hdfs_cluster.env(), PYTHONPATH=os.pathsep.join(
        filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    fs = open_fileio(url)
    for i in range(5):
        name = f"left-open-{i}-{uuid.uuid4().hex}"
        proc = subprocess.run([sys.executable, "-c", _EXIT_WITH_OPEN_STREAM, url, name],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
        assert fs.read_all(f"{url}/{name}") == b"written before exit"
        listing = hdfs_cluster.run_tool("fsck", f"/exits/{name}", "-openforwrite").stdout
        assert "OPENFORWRITE" not in listing, listing
        with fs.create(f"{url}/{name}", overwrite=True) as out:  # no lease left behind
            out.write(b"x")
    fs.close()
