"""Security end to end (issue 16): TLS listeners with certificates made here, SASL
PLAIN and SCRAM users, ACLs allowing one topic and denying another, and hostile clients.

One broker per module, with four listeners: PLAINTEXT on loopback (local tools: their
principal User:ANONYMOUS is a super user here), SSL requiring client certificates,
SASL_SSL and SASL_PLAINTEXT; the ACL authorizer is on with
allow.everyone.if.no.acl.found=false.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import struct
import time

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer.producer import Producer
from sparklog.clients.types import TopicPartition
from sparklog.errors import (
    BrokerNotAvailableError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidConfigError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)
from sparklog.protocol import ApiKey, Connection
from sparklog.protocol.codec import encode_request
from sparklog.security.acl import AclBinding, AclFilter
from sparklog.security.scram import ScramClient
from sparklog.server.embedded import EmbeddedBroker
from tests.support.tlscerts import make_pki
from tests.support.waiting import wait_until
from tests.support.wire import closed_within

AUTH_TIMEOUT_MS = 1500
MAX_RECEIVE = 4096


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory, pki):
    """The broker (see the module docstring), its listeners' addresses, users alice
    (SCRAM-SHA-256 and -512) and bob (SCRAM-SHA-512), and ACLs."""
    root = tmp_path_factory.mktemp("secure") / "log"
    root.mkdir()
    props = {
        "listeners": "LOCAL://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "LOCAL:PLAINTEXT",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
        "authentication.timeout.ms": str(AUTH_TIMEOUT_MS),
        "sasl.server.max.receive.size": str(MAX_RECEIVE),
        "connection.failed.authentication.delay.ms": "10",
    }
    with EmbeddedBroker(root.as_uri(), props) as broker:
        addresses = broker.broker.listener_addresses
        with Admin(addresses["LOCAL"]) as admin:
            admin.alter_user_scram_credentials([
                ("alice", "SCRAM-SHA-256", "alice-secret"),
                ("alice", "SCRAM-SHA-512", "alice-secret"),
                ("bob", "SCRAM-SHA-512", "bob-secret")])
            for name in ("allowed", "secret", "team-a", "team-private"):
                admin.create_topic(name, 1)
            admin.create_acls([
                AclBinding("User:alice", "*", op, "Allow", "Topic", "allowed")
                for op in ("Read", "Write")] + [
                AclBinding("User:alice", "*", "All", "Allow", "Topic", "team-", "PREFIXED"),
                AclBinding("User:alice", "*", "All", "Deny", "Topic", "team-private"),
                AclBinding("User:alice", "*", "Describe", "Allow", "Topic", "peek-",
                           "PREFIXED"),
                AclBinding("User:alice", "*", "Read", "Allow", "Group", "alice-group"),
                AclBinding("User:CN=carol,O=sparklog", "*", "All", "Allow", "Topic",
                           "allowed"),
                AclBinding("User:CN=carol,O=sparklog", "*", "Read", "Allow", "Group",
                           "carol-group"),
            ])
        yield broker, addresses


def sasl(addresses, user="alice", password="alice-secret", mechanism="SCRAM-SHA-256",
         tls=True, pki=None):
    """Client configs for a SASL listener."""
    cfg = {"security_protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
           "sasl_mechanism": mechanism, "sasl_plain_username": user,
           "sasl_plain_password": password}
    if tls:
        cfg["ssl_cafile"] = str(pki.ca)
    return addresses["SASL_SSL" if tls else "SASL_PLAINTEXT"], cfg


def still_serving(addresses) -> None:
    with Connection(addresses["LOCAL"], timeout=10) as conn:
        assert conn.request(ApiKey.API_VERSIONS)["error_code"] == 0


# --- TLS -----------------------------------------------------------------------------


def test_tls_with_client_certificate_end_to_end(secure, pki):
    _, addresses = secure
    certfile, keyfile = pki.client("carol")
    cfg = dict(security_protocol="SSL", ssl_cafile=str(pki.ca), ssl_certfile=certfile,
               ssl_keyfile=keyfile)
    producer = Producer(bootstrap_servers=addresses["SSL"], **cfg)
    try:
        for i in range(20):
            producer.send("allowed", f"tls-{i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    consumer = Consumer("allowed", bootstrap_servers=addresses["SSL"], group_id="carol-group",
                        auto_offset_reset="earliest", consumer_timeout_ms=5000, **cfg)
    try:
        values = [r.value for r in consumer if r.value.startswith(b"tls-")]
    finally:
        consumer.close()
    assert values == [f"tls-{i}".encode() for i in range(20)]
    # the principal is the certificate's DN: carol may not touch what alice may
    with Admin(addresses["SSL"], **cfg) as admin, pytest.raises(TopicAuthorizationFailedError):
        admin.describe_topics(["team-a"])


def test_metadata_advertises_the_listener_the_client_used(secure, pki):
    _, addresses = secure
    _, cfg = sasl(addresses, pki=pki)
    for name, extra in (("LOCAL", {}), ("SASL_SSL", cfg)):
        with Admin(addresses[name], **extra) as admin:
            meta = admin._client.refresh_metadata(["allowed"])
            (info,) = meta.brokers.values() if isinstance(meta.brokers, dict) else meta.brokers
            assert f"{info.host}:{info.port}" == addresses[name]


def test_ssl_listener_refuses_a_client_without_a_certificate(secure, pki, caplog):
    _, addresses = secure
    with pytest.raises(BrokerNotAvailableError) as err:
        with Admin(addresses["SSL"], security_protocol="SSL", ssl_cafile=str(pki.ca),
                   request_timeout_ms=5000) as admin:
            admin.list_topics()
    assert "certificate" in str(err.value).lower() or "closed" in str(err.value).lower()
    still_serving(addresses)


def test_client_certificate_from_an_untrusted_ca_is_refused(secure, pki):
    _, addresses = secure
    certfile, keyfile = pki.client("mallory", rogue=True)
    with pytest.raises(BrokerNotAvailableError):
        with Admin(addresses["SSL"], security_protocol="SSL", ssl_cafile=str(pki.ca),
                   ssl_certfile=certfile, ssl_keyfile=keyfile,
                   request_timeout_ms=5000) as admin:
            admin.list_topics()
    still_serving(addresses)


def test_client_refuses_a_broker_certificate_it_does_not_trust(secure, pki):
    _, addresses = secure
    address, cfg = sasl(addresses, pki=pki)
    cfg["ssl_cafile"] = str(pki.rogue_ca)
    with pytest.raises(BrokerNotAvailableError, match="certificate verify failed"):
        with Admin(address, request_timeout_ms=5000, **cfg) as admin:
            admin.list_topics()


def test_plaintext_sent_to_a_tls_port_is_closed(secure, caplog):
    _, addresses = secure
    host, port = addresses["SASL_SSL"].rsplit(":", 1)
    with caplog.at_level(logging.WARNING, logger="sparklog.server.acceptor"):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(encode_request(ApiKey.API_VERSIONS, {}, 1, "plain-client"))
            answer = closed_within(sock)
        assert b"api_versions" not in answer  # a TLS alert at most, never a response
        wait_until(lambda: "TLS handshake" in caplog.text, what="the refused handshake logged")
    still_serving(addresses)


def test_a_stalled_tls_handshake_is_closed(secure):
    _, addresses = secure
    host, port = addresses["SSL"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()
        closed_within(sock, AUTH_TIMEOUT_MS / 1000 + 60)
        assert time.monotonic() - started >= AUTH_TIMEOUT_MS / 1000 * 0.9


# --- SASL ----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism,tls", [("SCRAM-SHA-256", True), ("SCRAM-SHA-512", True),
                                           ("PLAIN", True), ("SCRAM-SHA-512", False)])
def test_sasl_users_produce_and_consume(secure, pki, mechanism, tls):
    _, addresses = secure
    address, cfg = sasl(addresses, mechanism=mechanism, tls=tls, pki=pki)
    producer = Producer(bootstrap_servers=address, **cfg)
    tag = f"{mechanism}-{tls}".encode()
    try:
        producer.send("allowed", tag).get(30)
    finally:
        producer.close()
    consumer = Consumer("allowed", bootstrap_servers=address, group_id="alice-group",
                        auto_offset_reset="earliest", consumer_timeout_ms=5000, **cfg)
    try:
        assert tag in [r.value for r in consumer]
    finally:
        consumer.close()


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "alice-secret"),
                                           ("bob", "alice-secret")])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_wrong_or_unknown_credentials_are_refused_alike(secure, pki, caplog, user, password,
                                                        mechanism):
    _, addresses = secure
    address, cfg = sasl(addresses, user=user, password=password, mechanism=mechanism, pki=pki)
    with caplog.at_level(logging.WARNING, logger="sparklog.audit"):
        with pytest.raises(SaslAuthenticationFailedError) as err:
            with Admin(address, **cfg) as admin:
                admin.list_topics()
    # the same words whether the user exists or not
    assert "invalid credentials with SASL mechanism" in str(err.value)
    assert secure[0].broker.metrics.registry.get_sample_value(
        "sparklog_server_authentications_total",
        {"listener": "SASL_SSL", "result": "failure"}) >= 1
    assert f"AUTHENTICATION FAILED host=127.0.0.1 listener=SASL_SSL mechanism={mechanism}" \
        in caplog.text
    still_serving(addresses)


def test_a_request_without_authentication_is_refused_and_closed(secure):
    _, addresses = secure
    with Connection(addresses["SASL_PLAINTEXT"], timeout=10) as conn:
        assert conn.request(ApiKey.API_VERSIONS)["error_code"] == 0  # allowed before
        conn.send(ApiKey.METADATA, {"topics": None})
        response = conn.receive()
        assert response["error_code"] == 34  # ILLEGAL_SASL_STATE
        assert "before SASL authentication" in response["error_message"]
        assert closed_within(conn.sock) == b""


def test_unsupported_mechanism_is_refused(secure):
    _, addresses = secure
    with Connection(addresses["SASL_PLAINTEXT"], timeout=10) as conn:
        conn.send(ApiKey.SASL_HANDSHAKE, {"mechanism": "GSSAPI"})
        response = conn.receive()
        assert response["error_code"] == 33  # UNSUPPORTED_SASL_MECHANISM
        assert "GSSAPI" in response["error_message"]


def _scram_exchange(address, client_first: bytes, final_of):
    """Handshake and both SCRAM steps on a fresh connection; ``final_of(server_first)``
    makes the client-final message; returns (client-final, last response)."""
    with Connection(address, timeout=10) as conn:
        assert conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"})[
            "error_code"] == 0
        first = conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": client_first})
        final = final_of(bytes(first["auth_bytes"]))
        conn.send(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": final})
        return final, conn.receive()


def test_a_replayed_scram_exchange_is_refused(secure):
    _, addresses = secure
    address = addresses["SASL_PLAINTEXT"]
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    recorded, response = _scram_exchange(address, client.first(), client.final)
    assert response["error_code"] == 0 and bytes(response["auth_bytes"]).startswith(b"v=")
    # an eavesdropper replays both of the client's messages on a new connection
    _, replayed = _scram_exchange(address, client.first(), lambda _server_first: recorded)
    assert replayed["error_code"] == 58  # SASL_AUTHENTICATION_FAILED


def test_a_stalled_sasl_handshake_is_closed(secure):
    _, addresses = secure
    host, port = addresses["SASL_PLAINTEXT"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"},
                                    1, "staller"))
        started = time.monotonic()
        closed_within(sock, AUTH_TIMEOUT_MS / 1000 + 60)  # the answer, then the close
        assert time.monotonic() - started >= AUTH_TIMEOUT_MS / 1000 * 0.8


def test_an_oversized_token_before_authentication_is_refused(secure):
    _, addresses = secure
    host, port = addresses["SASL_PLAINTEXT"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 64 * 1024 * 1024) + b"\0" * 1024)
        assert closed_within(sock) == b""
    still_serving(addresses)


def test_fuzzed_handshakes_are_refused_and_the_broker_keeps_serving(secure):
    _, addresses = secure
    host, port = addresses["SASL_PLAINTEXT"].rsplit(":", 1)
    rng = random.Random(16)
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    for i in range(150):
        kind = i % 3
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            if kind == 0:  # garbage framing
                sock.sendall(rng.randbytes(rng.randint(1, 64)))
            else:  # a valid handshake, then a mutated or random token
                sock.sendall(encode_request(ApiKey.SASL_HANDSHAKE, {
                    "mechanism": rng.choice(["SCRAM-SHA-256", "PLAIN"])}, 1, "fuzz"))
                token = bytearray(client.first() if kind == 1 else rng.randbytes(40))
                for _ in range(rng.randint(1, 6)):
                    token[rng.randrange(len(token))] = rng.randrange(256)
                sock.sendall(encode_request(ApiKey.SASL_AUTHENTICATE,
                                            {"auth_bytes": bytes(token)}, 2, "fuzz"))
                sock.sendall(encode_request(ApiKey.METADATA, {"topics": None}, 3, "fuzz"))
            data = closed_within(sock, AUTH_TIMEOUT_MS / 1000 + 60)
            assert b"allowed" not in data  # never a topic list before authentication
    still_serving(addresses)


# --- ACLs ------------------------------------------------------------------------------


def test_acls_allow_one_topic_and_deny_another(secure, pki):
    _, addresses = secure
    address, cfg = sasl(addresses, pki=pki)
    producer = Producer(bootstrap_servers=address, **cfg)
    try:
        producer.send("allowed", b"ok").get(30)
        producer.send("team-a", b"ok").get(30)  # the PREFIXED allow
        for topic in ("secret", "team-private"):  # no ACL / an explicit DENY
            with pytest.raises(TopicAuthorizationFailedError) as err:
                producer.send(topic, b"no").get(30)
            assert "TOPIC_AUTHORIZATION_FAILED" in repr(err.value) or \
                "Not authorized to access topics" in str(err.value)
    finally:
        producer.close()


def test_a_denied_topic_and_a_missing_one_look_the_same(secure, pki):
    _, addresses = secure
    from sparklog.security.client import ClientSecurity

    address, cfg = sasl(addresses, pki=pki)
    security = ClientSecurity.from_configs(cfg)
    with Connection(address, timeout=10, security=security) as conn:
        topics = conn.request(ApiKey.METADATA, {"topics": ["secret", "no-such-topic"]})["topics"]
        codes = {t["name"]: (t["error_code"], t["error_message"]) for t in topics}
        assert codes["secret"] == codes["no-such-topic"]
        assert codes["secret"][0] == 29
        listed = conn.request(ApiKey.METADATA, {"topics": None})["topics"]
        assert sorted(t["name"] for t in listed) == ["allowed", "team-a"]
        # auto-creation needs Create (alice has All on team-*, Describe on peek-*)
        auto = {"topics": ["team-new", "peek-new"], "allow_auto_topic_creation": True}
        made = {t["name"]: t["error_code"] for t in
                conn.request(ApiKey.METADATA, auto)["topics"]}
        assert made == {"team-new": 0, "peek-new": 3}  # UNKNOWN_TOPIC_OR_PARTITION
    with Admin(addresses["LOCAL"]) as admin:
        topics = set(admin.list_topics())
    assert "team-new" in topics and not {"no-such-topic", "peek-new"} & topics


def test_group_and_cluster_operations_are_checked(secure, pki):
    _, addresses = secure
    address, cfg = sasl(addresses, pki=pki)
    with Admin(address, **cfg) as admin:
        with pytest.raises(GroupAuthorizationFailedError):
            admin.alter_consumer_group_offsets("other-group",
                                               {TopicPartition("allowed", 0): 0})
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls()
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topic("alice-made", 1)
        with pytest.raises(TopicAuthorizationFailedError):
            admin.delete_topics(["secret"])
    with Admin(addresses["LOCAL"]) as admin:
        assert "secret" in admin.list_topics()


def test_denials_are_audited_with_principal_and_resource(secure, pki, caplog):
    _, addresses = secure
    address, cfg = sasl(addresses, pki=pki)
    with caplog.at_level(logging.WARNING, logger="sparklog.audit"):
        with Admin(address, **cfg) as admin, pytest.raises(TopicAuthorizationFailedError):
            admin.describe_configs(["secret"])
    assert "DENIED principal=User:alice host=127.0.0.1 operation=DescribeConfigs " \
           "resource=Topic:secret" in caplog.text


def test_acls_are_managed_through_the_api(secure):
    _, addresses = secure
    with Admin(addresses["LOCAL"]) as admin:
        binding = AclBinding("User:dave", "127.0.0.1", "Read", "Allow", "Topic", "allowed")
        admin.create_acls([binding])
        assert binding in admin.describe_acls(AclFilter(principal="User:dave"))
        assert admin.delete_acls([AclFilter(principal="User:dave")]) == [binding]
        assert admin.describe_acls(AclFilter(principal="User:dave")) == []
        with pytest.raises(Exception, match="unknown operation"):
            AclBinding("User:dave", "*", "Fly", "Allow", "Topic", "t")


def test_scram_credentials_are_stored_salted_and_hashed(secure):
    broker, addresses = secure
    doc = broker.broker.security.store.read("users")
    text = repr(doc)
    assert "alice-secret" not in text and "bob-secret" not in text
    assert doc["alice"]["SCRAM-SHA-256"].startswith("salt=")
    with Admin(addresses["LOCAL"]) as admin:
        assert admin.describe_user_scram_credentials(["alice"]) == {
            "alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}


# --- configuration ---------------------------------------------------------------------


def test_non_loopback_listener_without_authentication_is_warned(storage_root, caplog):
    from sparklog.coordination.local import LocalCoordinationStore
    from sparklog.security.config import SecurityConfig
    from sparklog.security.session import BrokerSecurity

    store = LocalCoordinationStore(storage_root)
    quiet = SecurityConfig.from_props("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://0.0.0.0:9093")
    loud = SecurityConfig.from_props("PLAINTEXT://127.0.0.1:9092,PLAINTEXT2://0.0.0.0:9093",
                                     props={"listener.security.protocol.map":
                                            "PLAINTEXT2:PLAINTEXT"})
    with caplog.at_level(logging.WARNING, logger="sparklog.security.session"):
        BrokerSecurity(quiet, store).warn_unauthenticated()
        assert not caplog.records
        BrokerSecurity(loud, store).warn_unauthenticated()
    assert "PLAINTEXT2" in caplog.text and "does not authenticate" in caplog.text


@pytest.mark.parametrize("props,words", [
    ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location"),
    ({"listeners": "EXTERNAL://127.0.0.1:0"}, "listener.security.protocol.map"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "GSSAPI"},
     "gssapi.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "OAUTHBEARER"}, "OAUTHBEARER"),
    ({"sasl.kerberos.principal.to.local.rules": "RULE:[one:$1]"}, "is not a rule"),
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
    ({"authorizer.class.name": "com.example.Nope"}, "authorizer.class.name"),
    ({"ssl.keystore.type": "JKS", "listeners": "SSL://127.0.0.1:0",
      "ssl.keystore.location": "x"}, "PEM"),
    ({"storage.topic.dir.permission": "rwx"}, "storage.topic.dir.permission"),
])
def test_bad_security_settings_name_the_problem(storage_root, props, words):
    from sparklog.server.broker import Broker
    from sparklog.server.config import BrokerConfig

    with pytest.raises(InvalidConfigError, match=words):
        Broker(storage_root, BrokerConfig.from_props(props))


# --- the command line ------------------------------------------------------------------


def test_cli_manages_users_and_acls_and_clients_use_command_config(secure, pki, tmp_path):
    from tests.support.shell import ok, sparklog

    _, addresses = secure
    local = addresses["LOCAL"]
    ok(sparklog("configs", "--alter", "--entity-type", "users", "--entity-name", "erin",
                "--add-config", "SCRAM-SHA-256=[iterations=8192,password=erin-pw],"
                "SCRAM-SHA-512=[password=erin-pw]", bootstrap=local))
    assert "user-principal 'erin' are SCRAM-SHA-256,SCRAM-SHA-512" in ok(sparklog(
        "configs", "--describe", "--entity-type", "users", "--entity-name", "erin",
        bootstrap=local))
    ok(sparklog("topics", "create", "--topic", "cli-topic", bootstrap=local))
    out = ok(sparklog("acls", "--add", "--allow-principal", "User:erin", "--operation",
                      "Write", "--operation", "Read", "--topic", "cli-topic", bootstrap=local))
    assert out.count("Adding ACL: ") == 2
    listed = ok(sparklog("acls", "--list", "--topic", "cli-topic", bootstrap=local))
    assert "principal=User:erin" in listed and "operation=Write" in listed
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={pki.ca}\n"
        "ssl.truststore.type=PEM\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="erin" password="erin-pw";\n')
    secure_args = ("--command-config", str(config))
    ok(sparklog("produce", "--topic", "cli-topic", *secure_args, stdin=b"one\ntwo\n",
                bootstrap=addresses["SASL_SSL"]))
    out = ok(sparklog("consume", "--topic", "cli-topic", "--from-beginning",
                      "--max-messages", "2", *secure_args, bootstrap=addresses["SASL_SSL"]))
    assert out.split() == ["one", "two"]
    removed = ok(sparklog("acls", "--remove", "--allow-principal", "User:erin", "--topic",
                          "cli-topic", bootstrap=local))
    assert removed.count("Removed ACL: ") == 2
    proc = sparklog("produce", "--topic", "cli-topic", *secure_args, stdin=b"three\n",
                    bootstrap=addresses["SASL_SSL"])
    assert proc.returncode != 0
    assert "Not authorized to access topics" in proc.stderr.decode()
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(config.read_text().replace("erin-pw", "guess"))
    proc = sparklog("topics", "list", "--command-config", str(wrong),
                    bootstrap=addresses["SASL_SSL"])
    assert proc.returncode != 0
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in proc.stderr.decode()


# --- ZooKeeper (cluster mode) ------------------------------------------------------------


def test_zookeeper_acls_refuse_an_unauthenticated_writer(zookeeper, storage_root):
    """With zookeeper.set.acl the brokers' identity owns every node: a client without
    its credentials may read the cluster state but not move leaders, epochs, offsets
    or credentials, nor read the credentials."""
    from kazoo.exceptions import NoAuthError

    from sparklog.coordination.zkclient import close_zk, connect_zk
    from sparklog.security.scram import ScramCredential
    from sparklog.server.broker import Broker
    from sparklog.server.config import BrokerConfig

    props = {"listeners": "127.0.0.1:0", "zookeeper.connect": zookeeper.connect,
             "zookeeper.set.acl": "true", "zookeeper.digest.credentials": "brokers:zk-secret"}
    broker = Broker(storage_root, BrokerConfig.from_props(props))
    try:
        security = broker.security.store
        security.set_credential("alice", "SCRAM-SHA-256",
                                ScramCredential.create("SCRAM-SHA-256", "pw"))
        assert security.credential("alice", "SCRAM-SHA-256").verify_password(
            "SCRAM-SHA-256", "pw")
        outsider = connect_zk(zookeeper.connect, create_layout=False)
        try:
            outsider.get("/brokers/topics")  # the cluster state stays readable
            for attempt in (
                    lambda: outsider.create("/brokers/topics/forged", b"{}"),
                    lambda: outsider.set("/brokers/topics", b"{}"),
                    lambda: outsider.create("/controller", b"{}", ephemeral=True),
                    lambda: outsider.set("/sparklog/security/users", b"{}"),
                    lambda: outsider.get("/sparklog/security/users")):
                with pytest.raises(NoAuthError):
                    attempt()
        finally:
            close_zk(outsider)
    finally:
        broker.store.close()




# --- a connection flood -------------------------------------------------------------------

#: what one open connection may cost the broker: its 64 KiB receive stage plus the
#: protocol, transport and task objects (docs/security.md, "Connection floods")
PER_CONNECTION_BOUND = 96 * 1024


def _rss(pid: int) -> int:
    from tests.support.processes import rss_bytes

    return rss_bytes(pid)


def _api_versions_from(source: str, host: str, port: int) -> float:
    """Seconds an ApiVersions takes from a socket bound to ``source``."""
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=10, source_address=(source, 0)) as s:
        s.sendall(encode_request(ApiKey.API_VERSIONS, {}, 1, "bystander"))
        (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        assert len(s.recv(size, socket.MSG_WAITALL)) == size
    return time.monotonic() - started


def test_a_connection_flood_is_bounded_and_others_are_served(tmp_path):
    """Thousands of idle and half-open connections from one address: at most
    max.connections.per.ip of them are kept, the broker's memory grows by at most that
    many times the per-connection bound, and a client from another address is served
    meanwhile; max.connections.per.ip.overrides gives one address its own limit."""
    from tests.support.brokerproc import BrokerProcess

    per_ip = 400
    with BrokerProcess((tmp_path / "log").as_uri(), [
            "--override", f"max.connections.per.ip={per_ip}",
            "--override", "max.connections.per.ip.overrides=127.0.0.3:5"],
            log_path=tmp_path / "b.log") as b:
        before = _rss(b.pid)
        flood = []
        try:
            for i in range(3000):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex((b.host, b.port))
                flood.append(s)
                if i % 2:  # half-open: half of a size prefix, then nothing
                    try:
                        s.send(b"\0\0")
                    except OSError:
                        pass
            assert _api_versions_from("127.0.0.2", b.host, b.port) < 5.0
            wait_until(lambda: "max.connections.per.ip=400" in b.log_text(), 30,
                       "the per-address refusals logged")
            grown = _rss(b.pid) - before
            assert grown < per_ip * PER_CONNECTION_BOUND, \
                f"RSS grew {grown >> 20} MiB with {per_ip} connections kept"
            # an override: 127.0.0.3 may hold 5 connections only
            extra = [socket.create_connection((b.host, b.port), source_address=("127.0.0.3", 0))
                     for _ in range(6)]
            assert closed_within(extra[-1]) == b""
            for s in extra:
                s.close()
        finally:
            for s in flood:
                s.close()
        assert _api_versions_from("127.0.0.1", b.host, b.port) < 5.0


# --- quotas ---------------------------------------------------------------------------------


def test_a_producer_quota_holds_within_ten_percent(secure):
    """An unthrottled producer against producer_byte_rate: the broker mutes its
    connection, so the rate it gets stays within 10% of the quota; the responses say
    how long it was throttled; another client id is not slowed."""
    _, addresses = secure
    quota = 1_000_000
    with Admin(addresses["LOCAL"]) as admin:
        admin.create_topic("quota-topic", 1)
        admin.alter_client_quotas("clients", "greedy", {"producer_byte_rate": quota})
        assert admin.describe_client_quotas("clients", "greedy") == {
            ("clients", "greedy"): {"producer_byte_rate": quota}}
    value = b"q" * 10_000
    seconds = 5.0
    with Producer(bootstrap_servers=addresses["LOCAL"], client_id="greedy", linger_ms=5,
                  batch_size=64 * 1024) as producer:
        producer.send("quota-topic", value).get(30)
        time.sleep(0.3)  # the bucket refills its burst
        sent = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            producer.send("quota-topic", value)
            sent += len(value)
        producer.flush(60)
        elapsed = time.monotonic() - started
    rate = sent / elapsed
    assert 0.9 * quota <= rate <= 1.1 * quota, f"{rate:,.0f} B/s against a quota of {quota:,}"
    registry = secure[0].broker.metrics.registry
    assert registry.get_sample_value("sparklog_quota_throttle_time_seconds_total",
                                     {"quota": "producer_byte_rate"}) > 1.0
    with Connection(addresses["LOCAL"], client_id="greedy", timeout=30) as conn:
        from sparklog.format.frame import encode_frame, raw_batch

        frame = encode_frame(raw_batch([value] * 50))
        body = {"acks": 1, "topics": [{"name": "quota-topic", "partitions": [
            {"partition": 0, "records": frame}]}]}
        throttles = [conn.request(ApiKey.PRODUCE, body).get("throttle_time_ms", 0)
                     for _ in range(3)]
        assert max(throttles) > 0
    with Producer(bootstrap_servers=addresses["LOCAL"], client_id="modest") as other:
        started = time.monotonic()
        for _ in range(300):
            other.send("quota-topic", value)
        other.flush(60)
        assert 3_000_000 / (time.monotonic() - started) > 1.5 * quota


def _produce_body(topic: str, values: list) -> dict:
    from sparklog.format.frame import encode_frame, raw_batch

    return {"acks": 1, "topics": [{"name": topic, "partitions": [
        {"partition": 0, "records": encode_frame(raw_batch(values))}]}]}


def test_request_percentage_throttles_and_the_client_backs_off(secure):
    """request_percentage: a client id whose requests take more than its share of a
    thread's time is throttled (the responses say for how long, the metric adds it
    up), and its connection sends nothing until the throttle time has passed."""
    from sparklog.clients.network.connection import BrokerConnection

    broker, addresses = secure
    with Admin(addresses["LOCAL"]) as admin:
        admin.create_topic("busy-topic", 1)
        admin.alter_client_quotas("clients", "busy", {"request_percentage": 0.5})
        assert admin.describe_client_quotas("clients", "busy") == {
            ("clients", "busy"): {"request_percentage": 0.5}}
    host, port = addresses["LOCAL"].rsplit(":", 1)
    conn = BrokerConnection(host, int(port), client_id="busy")
    try:
        body = _produce_body("busy-topic", [b"r" * 100] * 10)
        throttle_ms = 0
        for _ in range(200):  # each Produce takes some time: 0.5% of a second is 5 ms
            throttle_ms = conn.request(ApiKey.PRODUCE, body).get("throttle_time_ms", 0)
            if throttle_ms:
                break
        assert throttle_ms > 0, "200 Produce requests were never throttled"
        assert conn.throttled_for > 0
        started = time.monotonic()
        conn.send(ApiKey.PRODUCE, body).get(30)  # backs off before it is written
        assert time.monotonic() - started >= 0.9 * throttle_ms / 1000
    finally:
        conn.close()
    assert broker.broker.metrics.registry.get_sample_value(
        "sparklog_quota_throttle_time_seconds_total", {"quota": "request_percentage"}) > 0


def test_fetch_responses_carry_the_consumer_throttle(secure):
    """consumer_byte_rate: the Fetch response that takes a consumer over its quota says
    how long the consumer is throttled (Kafka's throttle_time_ms), computed from its
    own size before it is sent."""
    _, addresses = secure
    quota = 200_000
    with Admin(addresses["LOCAL"]) as admin:
        admin.create_topic("fetch-quota", 1)
        admin.alter_client_quotas("clients", "reader", {"consumer_byte_rate": quota})
    with Connection(addresses["LOCAL"], timeout=30) as conn:
        conn.request(ApiKey.PRODUCE, _produce_body("fetch-quota", [b"f" * 1000] * 300))
    with Connection(addresses["LOCAL"], client_id="reader", timeout=30) as conn:
        response = conn.request(ApiKey.FETCH, {
            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [{
                "name": "fetch-quota", "partitions": [{
                    "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    size = len(response["topics"][0]["partitions"][0]["records"])
    assert size > 300_000
    # the bucket held 0.2 s of the quota: the rest is debt repaid at the quota's rate
    want = (size - 0.2 * quota) / quota * 1000
    assert 0.9 * want <= response["throttle_time_ms"] <= 1.1 * want


def test_topic_directories_get_the_configured_owner_group_and_mode(storage_root):
    """storage.topic.dir.*: a topic created through the broker has its directory made
    with that owner, group and mode before its first file (what governs the Spark
    source's broker-less reads; on HDFS the contract test sets them through HDFS)."""
    import grp
    import pwd

    from sparklog.storage import open_fileio

    owner, group = pwd.getpwuid(os.getuid())[0], grp.getgrgid(os.getgid())[0]
    props = {"listeners": "127.0.0.1:0", "storage.topic.dir.permission": "750",
             "storage.topic.dir.owner": owner, "storage.topic.dir.group": group}
    with EmbeddedBroker(storage_root, props) as broker:
        with Admin(broker.address) as admin:
            admin.create_topic("guarded", 2)
        topic_dir = broker.broker.topics.topic_dir("guarded")
    assert open_fileio(storage_root).permission(topic_dir) == (0o750, owner, group)


def test_cluster_mode_registers_every_listener(zookeeper, storage_root):
    """In cluster mode a broker registers each listener's advertised address, and
    Metadata names every broker by its address on the listener the client used."""
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
             "listener.security.protocol.map": "INTERNAL:PLAINTEXT",
             "advertised.listeners": "PLAINTEXT://localhost:0",
             "zookeeper.connect": zookeeper.connect}
    with EmbeddedBroker(storage_root, props) as broker:
        addresses = broker.broker.listener_addresses
        want = {"PLAINTEXT": "localhost:" + addresses["PLAINTEXT"].rsplit(":", 1)[1],
                "INTERNAL": addresses["INTERNAL"]}
        for name, address in want.items():
            with Connection(addresses[name], timeout=10) as conn:
                told = wait_until(
                    lambda conn=conn: conn.request(ApiKey.METADATA, {"topics": []})["brokers"],
                    30, "the broker in the cluster's Metadata")
                assert [f"{b['host']}:{b['port']}" for b in told] == [address]
        registered = broker.broker.store.view.brokers()[broker.broker.broker_id]
        assert {n: f"{h}:{p}" for n, h, p in registered.endpoints} == want


def test_advertised_listeners_are_what_metadata_names(storage_root):
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL_INT://127.0.0.1:0",
             "listener.security.protocol.map": "SSL_INT:PLAINTEXT",
             "advertised.listeners": "PLAINTEXT://localhost:19092"}
    with EmbeddedBroker(storage_root, props) as broker:
        addresses = broker.broker.listener_addresses
        for name, want in (("PLAINTEXT", "localhost:19092"), ("SSL_INT", addresses["SSL_INT"])):
            with Connection(addresses[name], timeout=10) as conn:
                (told,) = conn.request(ApiKey.METADATA, {"topics": []})["brokers"]
                assert f"{told['host']}:{told['port']}" == want
        assert broker.broker.store.live_brokers()[0].port == 19092


def test_scram_matches_the_rfc_7677_example():
    """Both sides of SCRAM-SHA-256 reproduce RFC 7677's example exchange (user 'user',
    password 'pencil'); the client's nonce and the server's are the RFC's."""
    import base64

    from sparklog.security.scram import ScramCredential, ScramServer

    server_first = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    client_final = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    client._nonce = "rOprNGfwEbeRWgbNEkqO"
    client._first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(server_first) == client_final
    client.verify(server_final)
    credential = ScramCredential.create("SCRAM-SHA-256", "pencil",
                                        salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramServer("SCRAM-SHA-256", lambda user: credential, b"secret")
    server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    server._nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    server._server_first = server_first.decode()
    assert server.step(client_final) == server_final


def test_scram_client_final_nonce_is_checked_as_kafka_checks_it():
    """The client-final nonce must end with the exchange's nonce (Kafka's
    ScramSaslServer): older librdkafka (2.0, as in Debian's kcat) sends its own nonce
    once more in front of it, with a proof over that message, and is accepted; a nonce
    that does not end with the exchange's is refused."""
    import base64
    import hashlib
    import hmac

    from sparklog.security.scram import ScramCredential, ScramError, ScramServer

    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = ScramCredential.create("SCRAM-SHA-256", "pencil", salt=salt)

    def final(client_nonce_prefix: str, tamper: str = "") -> tuple[ScramServer, bytes]:
        server = ScramServer("SCRAM-SHA-256", lambda user: credential, b"secret")
        server_first = server.step(b"n,,n=user,r=abc").decode()
        nonce = server_first.split(",")[0][2:]
        without_proof = f"c=biws,r={client_nonce_prefix}{nonce}{tamper}"
        salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        signature = hmac.new(hashlib.sha256(client_key).digest(),
                             f"n=user,r=abc,{server_first},{without_proof}".encode(),
                             "sha256").digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return server, f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    for prefix in ("", "abc"):  # RFC 5802's form, librdkafka 2.0's
        server, message = final(prefix)
        assert server.step(message).startswith(b"v=")
    server, message = final("", tamper="x")
    with pytest.raises(ScramError, match="nonce is not this exchange's"):
        server.step(message)
