"""Names clients choose (topics, group ids, client ids, app ids) against the storage and
the coordination store: issue #18's name defects, each with its regression test, on real
files, a real broker process and the real shell tools."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sparklog.clients.admin import Admin, NewTopic
from sparklog.clients.consumer import Consumer
from sparklog.coordination import CommittedOffset, LocalCoordinationStore
from sparklog.errors import (
    CoordinationError,
    InvalidArgumentError,
    InvalidGroupIdError,
    InvalidTopicError,
    StorageError,
)
from sparklog.metadata import TopicStore
from sparklog.names import (
    name_from_storage,
    storage_name,
    validate_app_id,
    validate_client_id,
    validate_group_id,
    validate_topic_name,
)
from sparklog.storage import open_fileio

ROOT = Path(__file__).resolve().parent.parent


def sparklog(*args, bootstrap=None, timeout=60, cwd=ROOT):
    """Run ``sparklog ARGS`` as a process (with --bootstrap-server appended)."""
    cmd = [sys.executable, "-m", "sparklog.cli.main", *args]
    if bootstrap is not None:
        cmd += ["--bootstrap-server", bootstrap]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(cmd, capture_output=True, timeout=timeout, env=env, cwd=str(cwd))


def local_dir(uri: str) -> Path:
    return Path(uri[len("file://"):])


# --- 1: full-string name rules ------------------------------------------------------------


@pytest.mark.parametrize("name", [".\n", "..\n", "orders\n", "a\nb", "x\r", "t\x00"])
def test_topic_names_with_a_trailing_newline_are_refused(name):
    with pytest.raises(InvalidTopicError) as ei:
        validate_topic_name(name)
    assert "U+00" in str(ei.value)  # the bad character is named


@pytest.mark.parametrize("check", [validate_app_id, validate_group_id, validate_client_id])
def test_other_names_refuse_a_trailing_newline(check):
    with pytest.raises(InvalidArgumentError, match="newline"):
        check("app\n")


def test_dot_newline_topic_cannot_delete_every_topic(broker):
    b = broker.address
    root = local_dir(broker.storage_uri)
    assert sparklog("topics", "create", "--topic", "keep", bootstrap=b).returncode == 0
    for bad in (".\n", "..\n", "keep\n"):
        created = sparklog("topics", "create", "--topic", bad, bootstrap=b)
        deleted = sparklog("topics", "delete", "--topic", bad, bootstrap=b)
        for proc in (created, deleted):
            err = proc.stderr.decode()
            assert proc.returncode == 1, err
            assert err.startswith("sparklog: error: ") and "newline" in err, err
            assert "Traceback" not in err
    assert (root / "topics" / "keep" / "config").is_dir()
    for entry in (root / "topics").iterdir():
        validate_topic_name(entry.name)
    assert not (root / "config").exists()  # "..\n" did not write into the root
    with Admin(b) as admin:
        assert "keep" in admin.list_topics()


def test_metadata_auto_create_refuses_bad_names(broker):
    from sparklog.protocol.apis import ApiKey
    from sparklog.protocol.connection import Connection

    with Connection(broker.address) as conn:
        resp = conn.request(ApiKey.METADATA, {"topics": [".\n", "ok-auto"],
                                           "allow_auto_topic_creation": True})
    by_name = {t["name"]: t for t in resp["topics"]}
    assert by_name[".\n"]["error_code"] == InvalidTopicError.code
    assert "newline" in by_name[".\n"]["error_message"]
    assert by_name["ok-auto"]["error_code"] == 0


@pytest.mark.parametrize("part", [".", "..", "", "a\n", "a/b/..", "x#y", "x?y", "a\\b",
                                  "é" * 128])
def test_storage_join_refuses_components_normalisation_changes(storage_root, part):
    fio = open_fileio(storage_root)
    with pytest.raises(InvalidArgumentError):
        fio.join(storage_root, "topics", part)


def test_local_backend_refuses_dot_dot_paths(storage_root):
    fio = open_fileio(storage_root)
    with pytest.raises(InvalidArgumentError, match="'..'"):
        fio.mkdirs(storage_root + "/a/../b")
    with pytest.raises(InvalidArgumentError, match="newline"):
        fio.mkdirs(storage_root + "/a\n")
    assert not (local_dir(storage_root) / "b").exists()


# --- 2: group ids with '#' / '?' (and others) ------------------------------------------


def _commit(address, group, topic, offset, timeout_ms=5000):
    with Consumer(bootstrap_servers=address, group_id=group, request_timeout_ms=timeout_ms,
                  enable_auto_commit=False) as c:
        c.commit({(topic, 0): offset})
        return c.committed((topic, 0))


def test_group_ids_with_url_delimiters_commit_and_stay_apart(broker):
    b = broker.address
    with Admin(b) as admin:
        admin.create_topics([NewTopic("gt", 1)])
    groups = {"victim": 1, "victim#x": 2, "team#1": 3, "q?a": 4, "a/b": 5, ".hidden": 6,
              "a%23b": 7, "a#b": 8, "ünï cødé": 9}
    for group, offset in groups.items():
        assert _commit(b, group, "gt", offset) == offset, group
    for group, offset in groups.items():  # nobody overwrote anybody
        with Consumer(bootstrap_servers=b, group_id=group, request_timeout_ms=5000) as c:
            assert c.committed(("gt", 0)) == offset, group
    with Admin(b) as admin:
        listed = {g for g, _ in admin.list_consumer_groups()}
        assert set(groups) <= listed
        admin.list_topics()  # the broker still answers everybody
    stored = {p.name for p in (local_dir(broker.storage_uri) / "coordination" / "groups")
              .iterdir()}
    assert {storage_name(g) for g in groups} <= stored
    assert all("/" not in s and "#" not in s and "?" not in s and not s.startswith(".")
               for s in stored)


def test_group_id_rules_and_stored_form():
    for group in ("g", "team#1", "a/b", "..", ".", "100%", "x\\y", "\ue000", "日本"):
        stored = storage_name(validate_group_id(group))
        assert name_from_storage(stored) == group
        assert stored not in (".", "..") and "/" not in stored and "#" not in stored
    assert storage_name("plain-Group_1.x") == "plain-Group_1.x"
    with pytest.raises(InvalidGroupIdError, match="bytes"):
        validate_group_id("#" * 100)  # 300 bytes once escaped
    with pytest.raises(InvalidGroupIdError, match="tab"):
        validate_group_id("a\tb")


def test_a_corrupt_group_file_is_named_not_expecting_value(storage_root):
    store = LocalCoordinationStore(storage_root)
    store.commit_offsets("victim", {("t", 0): CommittedOffset(1)})
    path = store._file("groups", "victim").path_of(2)
    Path(local_dir(path)).write_bytes(b"")  # as the '#' bug left it
    with pytest.raises(CoordinationError, match="does not hold JSON") as ei:
        LocalCoordinationStore(storage_root).fetch_offsets("victim")
    assert "0000000002.json" in str(ei.value)


def test_coordination_retries_are_bounded(storage_root):
    """A writer that loses every compare-and-set gives up with a clear error."""
    store = LocalCoordinationStore(storage_root)
    rival = LocalCoordinationStore(storage_root)
    vf = store._file("groups", "g")
    outcome = {}

    def always_beaten(doc):  # another writer commits the version we are about to write
        version, _ = rival._latest_json(vf)
        vf.write(version + 1, b'{"offsets": {}}')
        return {"offsets": {}}

    def run():
        try:
            store._update(vf, always_beaten)
            outcome["result"] = "written"
        except CoordinationError as exc:
            outcome["result"] = str(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert "gave up after" in outcome.get("result", "still retrying after 30 s")


def test_a_stale_writer_cannot_fill_a_pruned_version_slot(storage_root):
    """Writer A read version 1; meanwhile versions 2, 3 and 4 were written and 2 was
    pruned. A's write of "version 2" must lose, not silently succeed with stale data
    (duplicate producer ids, lost offset commits)."""
    from sparklog.errors import FileAlreadyExistsError
    from sparklog.storage.versioned import VersionedFile

    fio = open_fileio(storage_root)
    vf = VersionedFile(fio, storage_root + "/v", keep=2)
    vf.write(1, b"1")
    stale_version, _ = vf.latest()
    for v in (2, 3, 4):
        vf.write(v, str(v).encode())
    assert not fio.exists(vf.path_of(2))  # pruned
    with pytest.raises(FileAlreadyExistsError):
        vf.write(stale_version + 1, b"stale")
    assert vf.latest() == (4, b"4")


# --- 9: long topic names ---------------------------------------------------------------


def test_topics_of_every_legal_length_are_created_and_deleted(broker):
    names = ["a" * 249, "b" * 240, "c" * 223, "short-one"]
    from sparklog.protocol.apis import ApiKey
    from sparklog.protocol.connection import Connection

    with Admin(broker.address) as admin, Connection(broker.address) as conn:
        admin.create_topics([NewTopic(n, 1) for n in names])
        assert set(names) <= set(admin.list_topics())
        resp = conn.request(ApiKey.DELETE_TOPICS, {"topics": [*names, "never-was"]})
        by_name = {t["name"]: t for t in resp["topics"]}
        assert resp["error_code"] == 0
        assert all(by_name[n]["error_code"] == 0 for n in names), by_name
        assert by_name["never-was"]["error_code"] == 3  # its own result
        assert not set(names) & set(admin.list_topics())
    # their data waits apart, under deleted-topics/, for file.delete.delay.ms
    retired = {p.name for p in (local_dir(broker.storage_uri) / "deleted-topics").glob("*/*")}
    assert retired <= set(names)


def test_a_name_too_long_for_the_file_system_is_a_clear_error(storage_root):
    fio = open_fileio(storage_root)
    with pytest.raises(InvalidArgumentError, match="255 bytes"):
        fio.create(storage_root + "/" + "x" * 300)
    with pytest.raises(InvalidArgumentError, match="255 bytes"):
        fio.mkdirs(local_dir(storage_root).as_posix() + "/" + "y" * 256)


def test_rename_into_itself_does_not_blame_renameat2(storage_root):
    fio = open_fileio(storage_root)
    fio.mkdirs(storage_root + "/d")
    with pytest.raises(StorageError) as ei:
        fio.rename(storage_root + "/d", storage_root + "/d/e")
    assert "renameat2" not in str(ei.value) and "inside the source" in str(ei.value)


# --- odd --storage values ------------------------------------------------------------


_ODD = ["{here}/x#f", "{here}/x?y", "hdfs://", "webhdfs://", "hdfs:///no/host",
        "file:relative"]


@pytest.mark.parametrize("storage", _ODD)
def test_odd_storage_values_give_one_error_line(storage, tmp_path):
    storage = storage.format(here=tmp_path.as_uri())
    proc = sparklog("broker", "start", "--storage", storage, "--listen", "127.0.0.1:0",
                    timeout=30, cwd=tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err.startswith("sparklog: error: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # no local directory made of a URL


@pytest.mark.parametrize("target", ["./relative", "rel/path", *_ODD[:4]])
def test_odd_bootstrap_or_storage_targets_give_one_error_line(target, tmp_path):
    target = target.format(here=tmp_path.as_uri())
    proc = sparklog("topics", "list", "--bootstrap-server", target, timeout=30, cwd=tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err.startswith("sparklog: error: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


# --- collisions ----------------------------------------------------------------------


def test_dot_underscore_collisions_are_refused_as_kafka_does(storage_root, caplog):
    topics = TopicStore(storage_root)
    topics.create_topic("my.topic")
    with pytest.raises(InvalidTopicError, match="collides with existing topic 'my.topic'"):
        topics.create_topic("my_topic")
    topics.create_topic("events")
    with caplog.at_level(logging.WARNING, logger="sparklog.metadata.store"):
        topics.create_topic("Events")
    assert "case-insensitive" in caplog.text


def test_cli_warns_on_dot_or_underscore_like_kafka_topics(broker):
    proc = sparklog("topics", "create", "--topic", "with_underscore", bootstrap=broker.address)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "WARNING: due to limitations in metric names" in proc.stderr.decode()


def test_offsets_stored_under_a_raw_group_id_by_older_versions_are_kept(storage_root):
    """Before escaping, group 'app:prod' lived in groups/app:prod: its offsets are read
    from there, and the first commit moves them to the escaped name (nothing lost)."""
    store = LocalCoordinationStore(storage_root)
    store._file("groups", "app:prod").write(3, b'{"offsets": {"t": {"0": [41, "", 1]}}}')
    assert store.fetch_offsets("app:prod")[("t", 0)].offset == 41
    assert store.list_groups() == ["app:prod"]
    store.commit_offsets("app:prod", {("t", 1): CommittedOffset(7)})
    again = LocalCoordinationStore(storage_root)
    assert {k: v.offset for k, v in again.fetch_offsets("app:prod").items()} == {
        ("t", 0): 41, ("t", 1): 7}
    assert again.list_groups() == ["app:prod"]
    assert again._group_file("app:prod").directory.endswith("/groups/app%3Aprod")
