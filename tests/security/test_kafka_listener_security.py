"""The Kafka listener with security, as Kafka's own clients use it (docs/kafka-protocol.md,
"Security"): SASL_PLAINTEXT and SASL_SSL with SCRAM-SHA-256/512 and PLAIN for
confluent-kafka (librdkafka) and kafka-python; a wrong password is
SASL_AUTHENTICATION_FAILED and the connection closes; a client that never authenticates
is cut at authentication.timeout.ms; a request before authentication is closed
unanswered, as Kafka's broker does. ACLs hold through the Kafka listener as for
sparklog's protocol (Produce, groups, Metadata listings, InitProducerId), and a producer
id obtained by one principal is refused to another (INVALID_PRODUCER_ID_MAPPING).

One broker for the module: a loopback PLAINTEXT listener for sparklog's tools (``LOCAL``,
whose User:ANONYMOUS is a super user), and two Kafka listeners, ``KAFKA_SASL``
(SASL_PLAINTEXT) and ``KAFKA_TLS`` (SASL_SSL, a certificate made for the run); the ACL
authorizer on, allow.everyone.if.no.acl.found=false.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from sparklog.clients.admin import Admin
from sparklog.format.kafka_batch import KafkaRecord, encode_batch
from sparklog.security.acl import AclBinding, AclFilter
from sparklog.security.scram import ScramClient
from sparklog.server.embedded import EmbeddedBroker
from tests.support.kafkaconn import KafkaConn as _KafkaConn
from tests.support.tlscerts import make_pki
from tests.support.waiting import wait_until
from tests.support.wire import closed_within

kafka = pytest.importorskip("kafka", reason="kafka-python is not installed (the peers extra)")
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

AUTH_TIMEOUT_MS = 1500
USERS = {"alice": "alice-secret", "bob": "bob-secret", "carl": "carl-secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PROTOCOLS = {"SASL_PLAINTEXT": "KAFKA_SASL", "SASL_SSL": "KAFKA_TLS"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory, pki):
    """The broker's listener addresses (module docstring). alice may read and write
    ``allowed`` and read the group ``alice-group``; alice and bob may read and write
    every ``shared-`` topic; carl may only read ``allowed``; ``secret`` is nobody's."""
    root = tmp_path_factory.mktemp("kafka-secure") / "log"
    root.mkdir()
    props = {
        "listeners": "LOCAL://127.0.0.1:0,KAFKA_SASL://127.0.0.1:0,KAFKA_TLS://127.0.0.1:0",
        "listener.security.protocol.map":
            "LOCAL:PLAINTEXT,KAFKA_SASL:SASL_PLAINTEXT,KAFKA_TLS:SASL_SSL",
        "kafka.listener.names": "KAFKA_SASL,KAFKA_TLS",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
        "authentication.timeout.ms": str(AUTH_TIMEOUT_MS),
        "connection.failed.authentication.delay.ms": "10",
    }
    with EmbeddedBroker(root.as_uri(), props) as broker:
        addresses = broker.broker.listener_addresses
        with Admin(addresses["LOCAL"]) as admin:
            admin.alter_user_scram_credentials([
                (user, mechanism, password) for user, password in USERS.items()
                for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")])
            for name in ("allowed", "secret", "shared-a"):
                admin.create_topic(name, 1)
            admin.create_acls([
                AclBinding("User:alice", "*", op, "Allow", "Topic", "allowed")
                for op in ("Read", "Write")] + [
                AclBinding("User:alice", "*", "Read", "Allow", "Group", "alice-group"),
                AclBinding("User:carl", "*", "Read", "Allow", "Topic", "allowed")] + [
                AclBinding(f"User:{user}", "*", op, "Allow", "Topic", "shared-", "PREFIXED")
                for user in ("alice", "bob") for op in ("Read", "Write")])
        yield addresses


def still_serving(addresses) -> None:
    """A Kafka client authenticates and is answered on the SASL listener."""
    with KafkaConn(addresses["KAFKA_SASL"], "alice") as conn:
        assert conn.metadata(["allowed"]).topics[0].error_code == 0


# --- the clients' configurations -------------------------------------------------------

def librdkafka_config(addresses, pki, protocol, mechanism, user="alice", password=None):
    cfg = {"bootstrap.servers": addresses[PROTOCOLS[protocol]], "security.protocol": protocol,
           "sasl.mechanism": mechanism, "sasl.username": user,
           "sasl.password": USERS[user] if password is None else password}
    if protocol == "SASL_SSL":
        cfg["ssl.ca.location"] = str(pki.ca)
    return cfg


def kafka_python_config(addresses, pki, protocol, mechanism, user="alice", password=None):
    cfg = {"bootstrap_servers": addresses[PROTOCOLS[protocol]], "security_protocol": protocol,
           "sasl_mechanism": mechanism, "sasl_plain_username": user,
           "sasl_plain_password": USERS[user] if password is None else password}
    if protocol == "SASL_SSL":
        cfg["ssl_cafile"] = str(pki.ca)
    return cfg


class KafkaConn(_KafkaConn):
    """:class:`tests.support.kafkaconn.KafkaConn` authenticated as one of :data:`USERS`."""

    def __init__(self, address: str, user: str | None = None, password: str | None = None):
        super().__init__(address, user, USERS.get(user or "", "") if password is None
                         else password)


# --- SASL: Kafka's clients authenticate --------------------------------------------------

@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_librdkafka_authenticates_produces_and_consumes(secure, pki, protocol, mechanism):
    """confluent-kafka's idempotent producer and group consumer authenticate with each
    mechanism over SASL_PLAINTEXT and SASL_SSL and round-trip their records."""
    from confluent_kafka import Consumer, Producer

    cfg = librdkafka_config(secure, pki, protocol, mechanism)
    tag = f"rd-{protocol}-{mechanism}-{uuid.uuid4().hex[:6]}".encode()
    producer = Producer({**cfg, "enable.idempotence": True, "linger.ms": 0})
    errors: list = []
    for i in range(5):
        producer.produce("allowed", value=tag + b"-%d" % i,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer({**cfg, "group.id": "alice-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["allowed"])
    got: list = []
    try:
        def mine():
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                if msg.value().startswith(tag):
                    got.append(msg.value())
            return len(got) >= 5
        wait_until(mine, timeout=60, what=f"librdkafka reading back over {protocol}/{mechanism}")
    finally:
        consumer.close()
    assert sorted(got) == [tag + b"-%d" % i for i in range(5)]


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_authenticates_produces_and_consumes(secure, pki, protocol, mechanism):
    """kafka-python's producer (acks=all) and group consumer, each mechanism and protocol."""
    from kafka import KafkaConsumer, KafkaProducer

    cfg = kafka_python_config(secure, pki, protocol, mechanism)
    tag = f"kp-{protocol}-{mechanism}-{uuid.uuid4().hex[:6]}".encode()
    producer = KafkaProducer(acks="all", **cfg)
    try:
        for i in range(5):
            producer.send("allowed", tag + b"-%d" % i).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer("allowed", group_id="alice-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, **cfg)
    got: list = []
    try:
        def mine():
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records if r.value.startswith(tag))
            return len(got) >= 5
        wait_until(mine, timeout=60, what=f"kafka-python reading back over {protocol}/{mechanism}")
    finally:
        consumer.close()
    assert sorted(got) == [tag + b"-%d" % i for i in range(5)]


# --- SASL: refusals --------------------------------------------------------------------

def _plain_token(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "alice-secret")])
def test_a_wrong_password_is_sasl_authentication_failed_and_closed(secure, mechanism, user,
                                                                    password):
    """SaslAuthenticate with a wrong password (or an unknown user) is answered
    SASL_AUTHENTICATION_FAILED (58) with Kafka's words, then the connection closes;
    the broker serves on."""
    with KafkaConn(secure["KAFKA_SASL"]) as conn:
        if mechanism == "PLAIN":
            tokens: list = [_plain_token(user, password)]
        else:
            client = ScramClient(mechanism, user, password)
            tokens = [client.first(), client.final]
        answers = conn.authenticate(mechanism, tokens)
        assert answers[-1].error_code == 58, answers
        assert "Authentication failed" in answers[-1].error_message
        assert closed_within(conn.sock, 30) == b""
    still_serving(secure)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_clients_with_a_wrong_password_get_an_authentication_error(secure, pki, protocol,
                                                                    caplog):
    """librdkafka reports the broker's SASL_AUTHENTICATION_FAILED as an authentication
    error; kafka-python's connection is lost with SaslAuthenticationFailedError (58)."""
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaConsumer

    errors: list = []
    producer = Producer({**librdkafka_config(secure, pki, protocol, "SCRAM-SHA-512",
                                             password="wrong"),
                         "error_cb": errors.append})
    try:
        wait_until(lambda: producer.poll(0.2) is not None and any(
            e.code() == KafkaError._AUTHENTICATION for e in errors),
            timeout=30, what="librdkafka's authentication error")
    finally:
        producer.flush(0)
    assert any("Authentication failed" in e.str() for e in errors), errors
    consumer = KafkaConsumer("allowed", api_version=(2, 5), **kafka_python_config(
        secure, pki, protocol, "PLAIN", password="wrong"))
    try:
        with caplog.at_level(logging.ERROR, logger="kafka.net"):
            wait_until(lambda: consumer.poll(timeout_ms=200) == {} and
                       "[Error 58] SaslAuthenticationFailedError" in caplog.text,
                       timeout=30, what="kafka-python's connection refused with error 58")
    finally:
        consumer.close()


@pytest.mark.parametrize("stage", ["silent", "api-versions", "handshake"])
def test_a_client_that_never_authenticates_is_cut_at_the_timeout(secure, stage):
    """A connection that says nothing, or stops after ApiVersions or SaslHandshake, is
    closed once authentication.timeout.ms has passed, not before."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    with KafkaConn(secure["KAFKA_SASL"]) as conn:
        started = time.monotonic()
        if stage == "api-versions":
            answer = conn.request(18, 3, ApiVersionsRequest(
                client_software_name="probe", client_software_version="1"))
            assert answer.error_code == 0
        elif stage == "handshake":
            assert conn.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        closed_within(conn.sock, AUTH_TIMEOUT_MS / 1000 + 60)
        assert time.monotonic() - started >= AUTH_TIMEOUT_MS / 1000 * 0.8
    still_serving(secure)


def test_a_request_before_authentication_is_closed_unanswered(secure):
    """Metadata (or any API but ApiVersions and the SASL ones) before authentication
    closes the connection with no answer, as Kafka's broker does ("Unexpected Kafka
    request ... during SASL handshake"): never a topic list, not even an empty one."""
    with KafkaConn(secure["KAFKA_SASL"]) as conn:
        from kio.schema.metadata.v1.request import MetadataRequest

        conn.send(3, 1, MetadataRequest(topics=None))
        assert closed_within(conn.sock, 30) == b""
    still_serving(secure)


# --- ACLs through the Kafka listener -----------------------------------------------------

def test_produce_without_write_is_topic_authorization_failed(secure, pki):
    """librdkafka and kafka-python producing to a topic alice may not write get
    TOPIC_AUTHORIZATION_FAILED; nothing is stored there."""
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    results: list = []
    producer = Producer({**librdkafka_config(secure, pki, "SASL_SSL", "SCRAM-SHA-256"),
                         "message.timeout.ms": 20000})
    producer.produce("secret", b"no", on_delivery=lambda err, _m: results.append(err))
    producer.flush(30)
    assert results and results[0] is not None \
        and results[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, results
    kp = KafkaProducer(**kafka_python_config(secure, pki, "SASL_PLAINTEXT", "SCRAM-SHA-512"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send("secret", b"no").get(timeout=30)
    finally:
        kp.close()
    with KafkaConn(secure["KAFKA_SASL"], "alice") as conn:
        answer = conn.produce("secret", encode_batch([KafkaRecord(0, int(time.time() * 1000),
                                                                  None, b"no")]))
        assert answer.error_code == 29
    with Admin(secure["LOCAL"]) as admin:
        (end,) = admin.list_offsets({("secret", 0): "latest"}).values()
    assert end.offset == 0


def test_a_group_without_read_is_group_authorization_failed(secure, pki):
    """Consumers of a group alice may not read get GROUP_AUTHORIZATION_FAILED:
    kafka-python raises it, librdkafka reports it."""
    from confluent_kafka import Consumer, KafkaError
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    consumer = KafkaConsumer("allowed", group_id="not-alices", **kafka_python_config(
        secure, pki, "SASL_SSL", "PLAIN"))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()
    rd = Consumer({**librdkafka_config(secure, pki, "SASL_PLAINTEXT", "SCRAM-SHA-256"),
                   "group.id": "not-alices", "auto.offset.reset": "earliest"})
    rd.subscribe(["allowed"])
    seen: list = []
    try:
        def refused():
            msg = rd.poll(0.5)
            if msg is not None and msg.error() is not None:
                seen.append(msg.error().code())
            return KafkaError.GROUP_AUTHORIZATION_FAILED in seen
        wait_until(refused, timeout=60, what="librdkafka's GROUP_AUTHORIZATION_FAILED")
    finally:
        rd.close()


def test_metadata_lists_only_what_the_principal_may_describe(secure, pki):
    """Metadata of every topic lists only alice's (kafka-python's admin too); a topic she
    may not describe and a missing one are both TOPIC_AUTHORIZATION_FAILED."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(**kafka_python_config(secure, pki, "SASL_SSL", "SCRAM-SHA-512"))
    try:
        listed = set(admin.list_topics())
    finally:
        admin.close()
    assert "allowed" in listed and "shared-a" in listed and "secret" not in listed
    with KafkaConn(secure["KAFKA_SASL"], "alice") as conn:
        names = {t.name for t in conn.metadata(None).topics}
        assert names == listed
        codes = {t.name: int(t.error_code) for t in conn.metadata(["secret", "no-such"]).topics}
        assert codes == {"secret": 29, "no-such": 29}
    with KafkaConn(secure["KAFKA_SASL"], "carl") as conn:
        assert {t.name for t in conn.metadata(None).topics} == {"allowed"}


def test_init_producer_id_needs_idempotent_write_or_write_on_a_topic(secure, pki):
    """carl may only read: InitProducerId is CLUSTER_AUTHORIZATION_FAILED for him (and
    librdkafka's idempotent producer fails); alice may write a topic: she gets an id;
    once carl is allowed IdempotentWrite on the cluster, he gets one too."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    with KafkaConn(secure["KAFKA_SASL"], "carl") as conn:
        assert conn.init_producer_id().error_code == 31
    errors: list = []
    producer = Producer({**librdkafka_config(secure, pki, "SASL_PLAINTEXT", "PLAIN",
                                             user="carl"),
                         "enable.idempotence": True, "error_cb": errors.append})
    fatal: list = []

    def refused():
        try:
            producer.poll(0.2)
        except KafkaException as exc:  # the fatal error, raised by poll
            fatal.append(exc.args[0])
        return any(e.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
                   for e in fatal + errors)
    wait_until(refused, timeout=30, what="librdkafka's idempotent producer refused")
    with KafkaConn(secure["KAFKA_SASL"], "alice") as conn:
        answer = conn.init_producer_id()
        assert answer.error_code == 0 and answer.producer_id >= 0
    binding = AclBinding("User:carl", "*", "IdempotentWrite", "Allow", "Cluster",
                         "kafka-cluster")
    with Admin(secure["LOCAL"]) as admin:
        admin.create_acls([binding])
    try:
        def allowed():
            with KafkaConn(secure["KAFKA_SASL"], "carl") as conn:
                return conn.init_producer_id().error_code == 0
        wait_until(allowed, timeout=30, what="carl's IdempotentWrite to apply")
    finally:
        with Admin(secure["LOCAL"]) as admin:
            admin.delete_acls([AclFilter(principal="User:carl",
                                         operation="IdempotentWrite")])


def test_a_producer_id_cannot_be_used_by_another_principal(secure):
    """alice's producer id (InitProducerId through the Kafka listener) in bob's batch is
    INVALID_PRODUCER_ID_MAPPING and stores nothing; alice's own next batch is appended
    at the next offset, her sequence unaffected; bob's id is refused to alice too."""
    topic = "shared-a"
    now = int(time.time() * 1000)
    with KafkaConn(secure["KAFKA_SASL"], "alice") as alice, \
            KafkaConn(secure["KAFKA_SASL"], "bob") as bob:
        mine = alice.init_producer_id()
        assert mine.error_code == 0
        pid, epoch = int(mine.producer_id), int(mine.producer_epoch)

        def batch(seq, value, producer_id=pid):
            return encode_batch([KafkaRecord(0, now, None, value)], producer_id=producer_id,
                                producer_epoch=epoch, base_sequence=seq)

        first = alice.produce(topic, batch(0, b"alice-0"))
        assert first.error_code == 0
        forged = bob.produce(topic, batch(1, b"bob-forged"))
        assert forged.error_code == 49, forged
        assert "producer id" in (forged.error_message or "")
        second = alice.produce(topic, batch(1, b"alice-1"))
        assert second.error_code == 0 and second.base_offset == first.base_offset + 1
        theirs = bob.init_producer_id()
        assert theirs.error_code == 0
        stolen = alice.produce(topic, batch(0, b"alice-as-bob", int(theirs.producer_id)))
        assert stolen.error_code == 49
    # alice on another connection (a reconnecting producer) keeps her id
    with KafkaConn(secure["KAFKA_SASL"], "alice") as again:
        assert again.produce(topic, batch(2, b"alice-2")).error_code == 0
