"""Fuzzing names (topics, group ids, client ids) through the wire of a real broker
process and through the shell tools: whatever a client sends, no name maps to a path
outside its own directory or onto another name's, and the broker keeps answering.

Bounded: a few hundred examples in all, well under a minute on loopback only."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sparklog.errors import InvalidArgumentError, SparklogError  # noqa: E402
from sparklog.names import storage_name, validate_group_id, validate_topic_name  # noqa: E402
from sparklog.protocol.apis import ApiKey  # noqa: E402
from sparklog.protocol.codec import encode_request  # noqa: E402
from sparklog.protocol.connection import Connection  # noqa: E402

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

#: names that once escaped their directory, plus the storage layout's own names
_TRICKY = [".", "..", ".\n", "..\n", "topics", "coordination", "deleted-topics", "config",
           "groups", "0", "a/b", "../x", "x#y", "x?y", "%2E", "%", ".hidden", "A", "a",
           "my.topic", "my_topic", "x" * 249, "y" * 250, "z" * 223, "\u00e9" * 130]
names = st.one_of(
    st.sampled_from(_TRICKY),
    st.text(alphabet="aA0._-/\\#?%\n\r\t \x00\x7f\u00e9\ud7ff\ue000", max_size=12),
    st.text(max_size=8),
    st.integers(200, 260).map(lambda n: "n" * n),
)
_counter = itertools.count(1)


def tree(root: Path) -> set[str]:
    """Every directory and file under ``root``, relative, '/'-separated."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def check_layout(root: Path, topics: set[str], groups: dict) -> None:
    """Everything under the root belongs to a known topic, a known group or the store's
    own files; topics and groups are exactly the expected ones."""
    assert {p.name for p in (root / "topics").iterdir()} == topics
    group_dir = root / "coordination" / "groups"
    stored = {p.name for p in group_dir.iterdir()} if group_dir.exists() else set()
    assert stored == {storage_name(g) for g in groups}
    for rel in tree(root):
        parts = rel.split("/")
        if parts[0] == "topics" and len(parts) > 1:
            assert parts[1] in topics, rel
        elif parts[0] == "coordination" and len(parts) > 2 and parts[1] == "partitions":
            assert parts[2] in topics, rel
        elif parts[0] == "deleted-topics":
            # deleted-topics/<ms>-<hex>/<topic>/...: a deleted topic's data, removed
            # file.delete.delay.ms after its deletion
            assert len(parts) <= 2 or re.fullmatch(r"\d+-[0-9a-f]{32}", parts[1]), rel
        elif parts[0] == "brokers":  # the instance records of standalone brokers
            assert len(parts) == 1 or re.fullmatch(r"\d+\.instance\.json", parts[1]), rel
        else:
            assert parts[0] in ("topics", "coordination"), rel


@pytest.fixture(scope="module")
def wire(broker):
    root = Path(broker.storage_uri[len("file://"):])
    with Connection(broker.address) as conn:
        conn.request(ApiKey.CREATE_TOPICS, {"topics": [
            {"name": "fz", "num_partitions": 1, "configs": {}, "schema": None}],
            "validate_only": False})
        yield conn, root, {"topics": {"fz"}, "groups": {}}


def _valid(check, name) -> bool:
    try:
        check(name)
        return True
    except (InvalidArgumentError, TypeError):
        return False


@FUZZ
@given(name=names)
def test_topic_names_through_the_wire(wire, name):
    conn, root, state = wire
    resp = conn.request(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": 1, "configs": {}, "schema": None},
        {"name": "fz", "num_partitions": 1, "configs": {}, "schema": None}],
        "validate_only": False})
    mine, other = resp["topics"]
    assert other["error_code"] == 36  # fz exists: its own result, never a failed request
    created = mine["error_code"] == 0
    if created:
        validate_topic_name(name)
        assert (root / "topics" / name / "config").is_dir()
        state["topics"].add(name)
    else:
        assert mine["error_message"]
    check_layout(root, state["topics"], state["groups"])
    resp = conn.request(ApiKey.DELETE_TOPICS, {"topics": [name]})
    assert (resp["topics"][0]["error_code"] == 0) == (name in state["topics"])
    state["topics"].discard(name)
    state["topics"].add("fz")
    check_layout(root, state["topics"], state["groups"])


@FUZZ
@given(group=names)
def test_group_ids_through_the_wire(wire, group):
    conn, root, state = wire
    offset = next(_counter)
    resp = conn.request(ApiKey.OFFSET_COMMIT, {
        "group_id": group, "generation_id": -1, "member_id": "",
        "topics": [{"name": "fz", "partitions": [{"partition": 0, "offset": offset}]}]})
    code = resp["error_code"] or resp["topics"][0]["partitions"][0]["error_code"]
    assert (code == 0) == _valid(validate_group_id, group), resp
    if code == 0:
        state["groups"][group] = offset
    check_layout(root, state["topics"], state["groups"])
    for g in {group, *list(state["groups"])[-3:]}:  # its own offset, and others' intact
        if g not in state["groups"]:
            continue
        got = conn.request(ApiKey.OFFSET_FETCH, {"group_id": g, "topics": None})
        offsets = [p["offset"] for t in got["topics"] for p in t["partitions"]]
        assert offsets == [state["groups"][g]], (g, got)


@FUZZ
@given(client_id=names)
def test_client_ids_through_the_wire(wire, client_id):
    conn, root, state = wire
    cid = client_id.encode("utf-8", "surrogatepass")
    if len(cid) > 1024:
        return
    for api, body in ((ApiKey.METADATA, {"topics": ["fz"], "allow_auto_topic_creation": False}),
                      (ApiKey.CREATE_TOPICS, {"topics": [
                          {"name": "fz", "num_partitions": 1, "configs": {},
                           "schema": None}], "validate_only": False})):
        try:
            conn.sock.sendall(encode_request(api, body, 7, client_id))
        except (UnicodeEncodeError, InvalidArgumentError):
            return  # cannot even be encoded
        conn._pending.append((7, api))  # sent raw: receive() expects its answer
        resp = conn.receive()
        assert resp["error_code"] == 0, resp
    check_layout(root, state["topics"], state["groups"])


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=names.filter(lambda n: "\x00" not in n and not n.startswith("-")))
def test_names_through_the_shell_tools(wire, broker, capsys, name):
    """The CLI's own code path (argparse to wire), run in this process: argv cannot
    hold NUL, so names with one are left to the wire tests."""
    from sparklog.cli.main import main

    conn, root, state = wire
    b = broker.address
    code = main(["topics", "create", "--topic", name, "--bootstrap-server", b])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "Traceback" not in err
    if code == 0:
        validate_topic_name(name)
        state["topics"].add(name)
    else:
        assert "sparklog: error: " in err
    check_layout(root, state["topics"], state["groups"])
    code = main(["groups", "describe", "--group", name, "--bootstrap-server", b])
    err = capsys.readouterr().err
    assert code in (0, 1) and "Traceback" not in err, err
    code = main(["topics", "delete", "--topic", name, "--bootstrap-server", b])
    err = capsys.readouterr().err
    assert (code == 0) == (name in state["topics"]), err
    state["topics"].discard(name)
    state["topics"].add("fz")
    check_layout(root, state["topics"], state["groups"])


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(group=names.filter(lambda n: "\x00" not in n and not n.startswith("-")))
def test_group_ids_through_the_shell_tools(wire, broker, capsys, group):
    """``consume --group`` joins the group and commits what it printed."""
    from sparklog.cli.main import main

    conn, root, state = wire
    _one_record(broker, state)
    code = main(["consume", "fz", "--group", group, "--from-beginning", "--max-messages",
                 "1", "--timeout-ms", "5000", "--bootstrap-server", broker.address])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert (code == 0) == _valid(validate_group_id, group), out.err
    if code == 0:
        state["groups"][group] = 1
    else:
        assert out.err.startswith("sparklog: error: "), out.err
    check_layout(root, state["topics"], state["groups"])


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(client_id=names.filter(lambda n: "\x00" not in n))
def test_client_ids_through_the_shell_tools(wire, broker, capsys, client_id):
    """``consume --consumer-property client.id=...``: a clear error or a normal run."""
    from sparklog.cli.main import main
    from sparklog.names import validate_client_id

    conn, root, state = wire
    _one_record(broker, state)
    code = main(["consume", "fz", "--consumer-property", f"client.id={client_id}",
                 "--from-beginning", "--max-messages", "1", "--timeout-ms", "5000",
                 "--bootstrap-server", broker.address])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    if client_id and not _valid(validate_client_id, client_id):
        assert code == 1 and out.err.startswith("sparklog: error: "), out.err
    check_layout(root, state["topics"], state["groups"])


def _one_record(broker, state) -> None:
    """Produce one record to ``fz`` once, for the consuming tools to print."""
    if "fz-record" not in state:
        from sparklog.clients.producer.producer import Producer

        with Producer(bootstrap_servers=broker.address) as producer:
            producer.send("fz", b"one record").get(timeout=30)
        state["fz-record"] = True


def test_broker_still_serves_after_the_fuzz(wire):
    conn, _, _ = wire
    resp = conn.request(ApiKey.METADATA, {"topics": ["fz"], "allow_auto_topic_creation": False})
    assert resp["topics"][0]["error_code"] == 0
    assert isinstance(resp["cluster_id"], str)
    assert issubclass(InvalidArgumentError, SparklogError)
