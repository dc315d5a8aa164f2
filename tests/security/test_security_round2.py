"""The security layer's second hardening round (issue 33, items 10-15; item 11, the
Kerberos principal rules, is in test_kerberos.py with the KDC).

One broker per module: a PLAINTEXT listener on loopback for local tools (User:ANONYMOUS
is a super user there) and a SASL_PLAINTEXT listener with PLAIN and SCRAM; the ACL
authorizer is on, ``storage.topic.dir.permission=755`` (permissive on purpose: the
credentials must stay private anyway). User alice may read the topic ``allowed`` in the
group ``alice-group``; the topic ``hidden`` she may not describe.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import stat
import threading
import time

import pytest

from sparklog.clients.admin import Admin
from sparklog.coordination.local import LocalCoordinationStore
from sparklog.errors import SaslAuthenticationFailedError
from sparklog.protocol import ApiKey, Connection
from sparklog.security.acl import AclBinding
from sparklog.security.client import ClientSecurity
from sparklog.security.sasl import SaslAuthenticator
from sparklog.security.scram import ScramClient, ScramCredential
from sparklog.security.store import SecurityStore
from sparklog.server.embedded import EmbeddedBroker

PROPS = {
    "listeners": "LOCAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "LOCAL:PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS",
    "connection.failed.authentication.delay.ms": "0",
    "storage.topic.dir.permission": "755",
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """(broker, listener addresses, storage root path) of the module's broker."""
    root = tmp_path_factory.mktemp("round2") / "log"
    root.mkdir()
    with EmbeddedBroker(root.as_uri(), PROPS) as broker:
        addresses = broker.broker.listener_addresses
        with Admin(addresses["LOCAL"]) as admin:
            admin.alter_user_scram_credentials([("alice", "SCRAM-SHA-256", "alice-secret"),
                                                ("alice", "SCRAM-SHA-512", "alice-secret")])
            for name in ("allowed", "hidden"):
                admin.create_topic(name, 2)
            admin.create_acls([
                AclBinding("User:alice", "*", "Read", "Allow", "Topic", "allowed"),
                AclBinding("User:alice", "*", "Read", "Allow", "Group", "alice-group")])
        yield broker, addresses, root


def _as_alice(addresses) -> Connection:
    """A connection authenticated as alice (SCRAM-SHA-256) on the SASL listener."""
    security = ClientSecurity.from_configs({
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"})
    return Connection(addresses["SASL_PLAINTEXT"], timeout=30, security=security)


def _sasl(address: str, mechanism: str, token: bytes) -> dict:
    """Handshake then one SaslAuthenticate with ``token`` on a fresh connection."""
    with Connection(address, timeout=10) as conn:
        assert conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism})[
            "error_code"] == 0
        conn.send(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
        return conn.receive()


# --- 10: credentials on the local storage are the broker's only ----------------------


def _tree(path) -> list[tuple[str, int, bool]]:
    """(relative path, permission bits, is a directory) of everything under ``path``."""
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            out.append((os.path.relpath(full, path), stat.S_IMODE(os.stat(full).st_mode),
                        name in dirnames))
    return out


def test_credentials_are_owner_only_and_a_deleted_users_keys_are_gone(secured):
    """Under a permissive storage.topic.dir.permission (755), the credential documents
    are 0600 files in 0700 directories, and once a user is deleted no file of the
    storage holds its keys (no older version is kept)."""
    broker, addresses, root = secured
    with Admin(addresses["LOCAL"]) as admin:
        admin.alter_user_scram_credentials([("mallory", "SCRAM-SHA-256", "m-secret")])
        stored = broker.broker.security.store.read("users")["mallory"]["SCRAM-SHA-256"]
        admin.alter_user_scram_credentials([("carol", "SCRAM-SHA-512", "c-secret")])
        admin.alter_user_scram_credentials(deletions=[("mallory", "SCRAM-SHA-256")])
    security = root / "coordination" / "security"
    assert stat.S_IMODE(security.stat().st_mode) == 0o700
    tree = _tree(security)
    assert any(path.startswith("users") for path, _, _ in tree), tree
    for path, mode, is_dir in tree:
        assert mode == (0o700 if is_dir else 0o600), (path, oct(mode))
    users = [name for name in os.listdir(security / "users") if not name.startswith(".")]
    assert len(users) == 1, users
    key = ScramCredential.from_text(stored).stored_key
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            data = (open(os.path.join(dirpath, name), "rb")).read()
            assert b"mallory" not in data and base64.b64encode(key) not in data, \
                os.path.join(dirpath, name)


def test_documents_an_older_release_left_readable_are_tightened_on_first_use(tmp_path):
    """Versions written 0644 under 0755 directories, with a stale version holding a
    deleted user's keys, are made owner-only and pruned when a store first reads any
    security document (a broker reads some at start)."""
    from sparklog.storage import open_fileio
    from sparklog.storage.versioned import VersionedFile

    root = (tmp_path / "log")
    root.mkdir()
    fileio = open_fileio(root.as_uri())
    directory = fileio.join(root.as_uri(), "coordination", "security", "users")
    old = VersionedFile(fileio, directory, keep=2)  # what the older release wrote
    old.write(1, b'{"gone": {"SCRAM-SHA-256": "salt=AAAA,stored_key=S,server_key=K,'
                 b'iterations=4096"}}')
    old.write(2, b'{}')
    users = root / "coordination" / "security" / "users"
    for p in (users.parent, users, *users.iterdir()):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    store = LocalCoordinationStore(root.as_uri())
    assert store.read_document("security/acls") == {}
    for path, mode, is_dir in _tree(users.parent):
        assert mode == (0o700 if is_dir else 0o600), (path, oct(mode))
    assert [n for n in os.listdir(users) if not n.startswith(".")] == ["0000000002.json"]
    assert store.read_document("security/users") == {}


# --- 12: the audit log cannot be forged ------------------------------------------------


FORGED = "\n2026-01-01 AUTHENTICATED host=10.0.0.1 listener=X principal=User:admin"


def test_untrusted_names_in_audit_lines_are_escaped(secured, caplog):
    """A newline in a PLAIN or SCRAM user name, a topic name or a group name never
    starts a line of its own in the audit log: every record is one line, and no field
    holds a space that would make a key=value of its own."""
    _, addresses, _ = secured
    address = addresses["SASL_PLAINTEXT"]
    with caplog.at_level(logging.INFO, logger="sparklog.audit"):
        plain = _sasl(address, "PLAIN", f"\0eve{FORGED}\0pw".encode())
        assert plain["error_code"] == 58
        scram = ScramClient("SCRAM-SHA-256", f"eve{FORGED}", "pw")
        with Connection(address, timeout=10) as conn:
            conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"})
            first = conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": scram.first()})
            conn.send(ApiKey.SASL_AUTHENTICATE,
                      {"auth_bytes": scram.final(bytes(first["auth_bytes"]))})
            assert conn.receive()["error_code"] == 58
        with _as_alice(addresses) as conn:
            answer = conn.request(ApiKey.METADATA, {"topics": [f"t{FORGED}"],
                                                    "allow_auto_topic_creation": False})
            assert answer["topics"][0]["error_code"] == 29
            conn.send(ApiKey.JOIN_GROUP, {"group_id": f"g{FORGED}", "topics": ["allowed"],
                                          "session_timeout_ms": 6000})
            assert conn.receive()["error_code"] == 30  # GROUP_AUTHORIZATION_FAILED
    lines = [r.getMessage() for r in caplog.records if r.name == "sparklog.audit"]
    assert sum("AUTHENTICATION FAILED" in m for m in lines) >= 2, lines
    assert any(m.startswith("DENIED") and "resource=Topic:t\\n" in m for m in lines), lines
    assert any(m.startswith("DENIED") and "resource=Group:g\\n" in m for m in lines), lines
    for message in lines:
        assert "\n" not in message, message
        fields = message.split(' reason="')[0]  # the reason is quoted, the last field
        assert " principal=User:admin" not in fields, message


# --- 13: JoinGroup names only topics the member may describe ---------------------------


def test_join_group_assigns_no_topic_the_member_may_not_describe(secured, caplog):
    """alice subscribes to ``allowed`` and ``hidden``: her assignment names the
    partitions of ``allowed`` only, as Metadata refuses ``hidden`` (29), and the
    refusal is audited."""
    _, addresses, _ = secured
    with _as_alice(addresses) as conn, \
            caplog.at_level(logging.WARNING, logger="sparklog.audit"):
        meta = conn.request(ApiKey.METADATA, {"topics": ["hidden"],
                                              "allow_auto_topic_creation": False})
        assert meta["topics"][0]["error_code"] == 29
        joined = conn.request(ApiKey.JOIN_GROUP, {
            "group_id": "alice-group", "topics": ["allowed", "hidden"],
            "session_timeout_ms": 6000, "rebalance_timeout_ms": 1000})
        conn.request(ApiKey.LEAVE_GROUP, {"group_id": "alice-group",
                                          "member_id": joined["member_id"]})
    assert joined["assignment"] == [{"name": "allowed", "partitions": [0, 1]}], joined
    assert "operation=Describe resource=Topic:hidden" in caplog.text


# --- 14: unknown users look like known ones --------------------------------------------


def _server_first(address: str, mechanism: str, user: str) -> dict[str, str]:
    """The attributes of the broker's server-first message for ``user``."""
    client = ScramClient(mechanism, user, "whatever")
    with Connection(address, timeout=10) as conn:
        conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism})
        first = conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": client.first()})
    return dict(item.split("=", 1) for item in bytes(first["auth_bytes"]).decode().split(","))


def test_an_unknown_users_salt_is_stable_across_restarts_and_like_a_real_one(tmp_path):
    """An unknown user's salt is the same after a restart (the key is the cluster's,
    in the coordination store), differs between mechanisms as real users' salts do,
    has a real salt's length and the default iteration count."""
    root = tmp_path / "log"
    root.mkdir()
    props = {k: v for k, v in PROPS.items() if k != "storage.topic.dir.permission"}
    seen = []
    for _ in range(2):
        with EmbeddedBroker(root.as_uri(), props) as broker:
            address = broker.broker.listener_addresses["SASL_PLAINTEXT"]
            with Admin(broker.broker.listener_addresses["LOCAL"]) as admin:
                admin.alter_user_scram_credentials([("real", "SCRAM-SHA-256", "pw")])
            seen.append({m: _server_first(address, m, "nobody")
                         for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
            real = _server_first(address, "SCRAM-SHA-256", "real")
    first, again = seen
    assert first["SCRAM-SHA-256"]["s"] == again["SCRAM-SHA-256"]["s"]
    assert first["SCRAM-SHA-512"]["s"] == again["SCRAM-SHA-512"]["s"]
    assert first["SCRAM-SHA-256"]["s"] != first["SCRAM-SHA-512"]["s"]
    assert len(base64.b64decode(first["SCRAM-SHA-256"]["s"])) == \
        len(base64.b64decode(real["s"]))
    assert first["SCRAM-SHA-256"]["i"] == real["i"] == "4096"


@pytest.mark.parametrize("kind", ["local", pytest.param("zookeeper",
                                                         marks=pytest.mark.zookeeper)])
def test_brokers_of_one_cluster_make_up_the_same_salt(kind, storage_root, request):
    """Four brokers' stores of one cluster (a storage root, a ZooKeeper ensemble),
    asking for the key at once, agree on it: one writes it, the others read it."""
    if kind == "local":
        made = [LocalCoordinationStore(storage_root) for _ in range(4)]
    else:
        pytest.importorskip("kazoo", reason="kazoo is not installed")
        from sparklog.coordination.zkstore import ZkCoordinationStore

        zookeeper = request.getfixturevalue("zookeeper")
        made = [ZkCoordinationStore(zookeeper.connect, connection_timeout_ms=20000)
                for _ in range(4)]
    request.addfinalizer(lambda: [m.close() for m in made])
    stores = [SecurityStore(m) for m in made]
    keys: list[bytes] = []
    threads = [threading.Thread(target=lambda s=s: keys.append(s.unknown_user_key()))
               for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 4 and len(set(keys)) == 1 and len(keys[0]) == 32


def test_plain_takes_as_long_for_an_unknown_user_as_for_a_wrong_password(tmp_path):
    """PLAIN hashes the password of an unknown user too: the quickest of 15 refusals
    of an unknown user takes at least 60% of the quickest of a known user's (without
    it, a third)."""
    root = tmp_path / "log"
    root.mkdir()
    store = SecurityStore(LocalCoordinationStore(root.as_uri()))
    store.set_credential("known", "SCRAM-SHA-256",
                         ScramCredential.create("SCRAM-SHA-256", "right"))

    async def run_io(fn, *args):
        return fn(*args)

    def refusal_seconds(user: str) -> float:
        auth = SaslAuthenticator(["PLAIN"], store.credential, run_io,
                                 secret=os.urandom(32), host="127.0.0.1",
                                 listener="SASL_PLAINTEXT")
        asyncio.run(auth.handle(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}))
        started = time.perf_counter()
        with pytest.raises(SaslAuthenticationFailedError):
            asyncio.run(auth.handle(ApiKey.SASL_AUTHENTICATE,
                                    {"auth_bytes": f"\0{user}\0wrong".encode()}))
        return time.perf_counter() - started

    known, unknown = [], []
    for _ in range(15):
        known.append(refusal_seconds("known"))
        unknown.append(refusal_seconds("nobody"))
    assert min(unknown) >= 0.6 * min(known), (min(unknown), min(known))


# --- 15: warnings at start ---------------------------------------------------------------


def test_plain_in_clear_and_world_readable_topics_are_warned(tmp_path, caplog):
    """PLAIN on SASL_PLAINTEXT is warned; with an authorizer, topic
    directories others may read are warned naming them, and not once they are 750."""
    root = tmp_path / "log"
    root.mkdir()
    os.chmod(root, 0o755)
    props = {k: v for k, v in PROPS.items() if k != "storage.topic.dir.permission"}
    logger = "sparklog.security.session"
    with caplog.at_level(logging.WARNING, logger=logger):
        with EmbeddedBroker(root.as_uri(), props) as broker:
            with Admin(broker.broker.listener_addresses["LOCAL"]) as admin:
                admin.create_topic("open-topic", 1)
    warned = caplog.text
    assert "enables SASL PLAIN without TLS" in warned and "SASL_PLAINTEXT" in warned
    assert "storage.topic.dir.permission is unset" in warned
    caplog.clear()
    os.chmod(root / "topics", 0o755)
    os.chmod(root / "topics" / "open-topic", 0o755)  # what umask 022 makes
    with caplog.at_level(logging.WARNING, logger=logger):
        with EmbeddedBroker(root.as_uri(), props):
            pass
    assert "open-topic (755)" in caplog.text and "bypassing ACLs" in caplog.text
    caplog.clear()
    os.chmod(root / "topics" / "open-topic", 0o750)
    quiet = dict(props, **{"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                           "storage.topic.dir.permission": "750"})
    with caplog.at_level(logging.WARNING, logger=logger):
        with EmbeddedBroker(root.as_uri(), quiet):
            pass
    assert "PLAIN" not in caplog.text and "bypassing ACLs" not in caplog.text, caplog.text


def test_plain_over_tls_is_not_warned(tmp_path, caplog):
    """PLAIN on a SASL_SSL listener (its passwords encrypted) gets no warning."""
    from sparklog.security.config import SecurityConfig
    from sparklog.security.session import BrokerSecurity
    from tests.support.tlscerts import make_pki

    pki = make_pki(tmp_path / "pki")
    root = tmp_path / "log"
    root.mkdir()
    config = SecurityConfig.from_props("SASL_SSL://127.0.0.1:0", props={
        "ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca),
        "sasl.enabled.mechanisms": "PLAIN"})
    with caplog.at_level(logging.WARNING, logger="sparklog.security.session"):
        BrokerSecurity(config, LocalCoordinationStore(root.as_uri())).warn_plain_in_clear()
    assert not caplog.records, caplog.text
