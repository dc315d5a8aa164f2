"""Producer ids bound to whoever obtained them, and the TransactionalId ACL (issue 33,
item 3).

A producer's id, epoch and sequence are in every frame a reader fetches. An attacker
who reads them and forges the victim's next frame (or its next epoch) is refused with
INVALID_PRODUCER_ID_MAPPING and changes nothing: the victim's records are all kept, at
the offsets the victim was told, and the victim is not fenced. The attacker here is
another SASL/SCRAM principal, or, on the unauthenticated PLAINTEXT listener, another
connection of the same host claiming the victim's client id. InitProducerId with a
transactional id needs Write on that TransactionalId, granted with ``sparklog acls
--transactional-id``.

One in-process broker for the module: a loopback PLAINTEXT listener (``LOCAL``, whose
``User:ANONYMOUS`` is a super user) and a SASL_PLAINTEXT one, the ACL authorizer on.
"""

from __future__ import annotations

import pytest

from sparklog.clients.admin import Admin
from sparklog.clients.consumer import Consumer
from sparklog.clients.producer.producer import Producer
from sparklog.errors import (
    InvalidArgumentError,
    InvalidProducerIdMappingError,
    TransactionalIdAuthorizationFailedError,
    error_for_code,
)
from sparklog.format.frame import encode_frame, raw_batch
from sparklog.format.header import unpack_header
from sparklog.protocol import ApiKey, Connection
from sparklog.security.acl import AclBinding
from sparklog.security.client import ClientSecurity
from sparklog.server.embedded import EmbeddedBroker
from tests.support.brokerproc import BrokerProcess
from tests.support.shell import ok, sparklog
from tests.support.wire import create, fetch, forge_next, produce

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """The broker's listener addresses (module docstring); users alice and bob may
    read and write every topic starting with ``shared``."""
    root = tmp_path_factory.mktemp("binding") / "log"
    root.mkdir()
    props = {
        "listeners": "LOCAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "LOCAL:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with EmbeddedBroker(root.as_uri(), props) as embedded:
        addresses = embedded.broker.listener_addresses
        with Admin(addresses["LOCAL"]) as admin:
            admin.alter_user_scram_credentials([
                (user, "SCRAM-SHA-256", password) for user, password in USERS.items()])
            admin.create_acls([
                AclBinding(f"User:{user}", "*", op, "Allow", "Topic", "shared", "PREFIXED")
                for user in USERS for op in ("Read", "Write")])
        yield addresses


def sasl_configs(user: str) -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": user, "sasl_plain_password": USERS[user]}


def connect(broker, user: str | None = None, client_id: str = "sparklog") -> Connection:
    """A raw connection: as ``user`` on the SASL listener, else anonymous on LOCAL."""
    if user is None:
        return Connection(broker["LOCAL"], client_id=client_id, timeout=30)
    return Connection(broker["SASL_PLAINTEXT"], client_id=client_id, timeout=30,
                      security=ClientSecurity.from_configs(sasl_configs(user)))


def assert_refused(item) -> None:
    assert error_for_code(item["error_code"]) is InvalidProducerIdMappingError, item
    assert "producer id" in item["error_message"], item


def read_all(address: str, topic: str, count: int, **configs) -> list[tuple[int, bytes]]:
    with Consumer(bootstrap_servers=address, auto_offset_reset="earliest",
                  enable_auto_commit=False,
                  **configs) as consumer:
        consumer.subscribe([topic])
        out: list = []
        for _ in range(100):
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.offset, r.value) for r in records]
            if len(out) >= count:
                break
        return out


def victim_sends(producer: Producer, topic: str, values: list[bytes]) -> list[int]:
    """Send ``values`` one by one, each acknowledged before the next: their offsets."""
    return [producer.send(topic, v, partition=0).get(30).offset for v in values]


def check_kept(address: str, topic: str, acked: dict[bytes, int], **configs) -> None:
    """Every acknowledged value is read back at the offset it was acknowledged at, and
    nothing forged is in the log."""
    records = read_all(address, topic, len(acked), **configs)
    assert sorted(records) == sorted((o, v) for v, o in acked.items())
    assert not [v for _, v in records if v == b"forged"]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "LOCAL"])
def test_a_forged_frame_in_a_victims_name_is_refused(broker, listener):
    """SASL: bob forges alice's frames; LOCAL (PLAINTEXT, everyone User:ANONYMOUS):
    another connection from the same host, with the victim's client id, does."""
    topic = f"shared-forged-{listener.lower()}"
    victim_user, attacker_user = ("alice", "bob") if listener != "LOCAL" else (None, None)
    configs = sasl_configs(victim_user) if victim_user else {}
    with connect(broker) as admin_conn:
        assert create(admin_conn, topic)["error_code"] == 0
    with Producer(broker[listener], enable_idempotence=True, acks="all", linger_ms=0,
                  client_id="victim", **configs) as producer, \
            connect(broker, attacker_user, client_id="victim") as attacker:
        acked = dict(zip([b"v0", b"v1"], victim_sends(producer, topic, [b"v0", b"v1"])))
        # the victim's next sequence, its next epoch: refused, nothing appended
        assert_refused(forge_next(attacker, topic))
        assert_refused(forge_next(attacker, topic, bump_epoch=True))
        # an InitProducerId of the attacker's own gives it a token for another id only
        own = attacker.request(ApiKey.INIT_PRODUCER_ID, {})
        assert_refused(forge_next(attacker, topic, token=own["producer_token"]))
        assert fetch(attacker, topic, 0, 0)["high_watermark"] == 2
        # the victim goes on: neither a duplicate of a forged frame nor fenced
        acked.update(zip([b"v2", b"v3"], victim_sends(producer, topic, [b"v2", b"v3"])))
        assert sorted(acked.values()) == [0, 1, 2, 3]
    check_kept(broker[listener], topic, acked, **configs)


def test_a_stolen_token_does_not_serve_another_principal(broker):
    """Even alice's token (were it leaked) does not let bob write with her id."""
    topic = "shared-stolen"
    with connect(broker) as local:
        assert create(local, topic)["error_code"] == 0
    with connect(broker, "alice") as alice, connect(broker, "bob") as bob:
        init = alice.request(ApiKey.INIT_PRODUCER_ID, {})
        mine = encode_frame(raw_batch([b"a0"]), producer_id=init["producer_id"],
                            producer_epoch=init["producer_epoch"], base_sequence=0)
        assert produce(alice, topic, 0, mine, acks=-1,
                       token=init["producer_token"])["base_offset"] == 0
        assert_refused(forge_next(bob, topic, token=init["producer_token"]))
        assert_refused(forge_next(bob, topic, bump_epoch=True, token=init["producer_token"]))
        nxt = encode_frame(raw_batch([b"a1"]), producer_id=init["producer_id"],
                           producer_epoch=init["producer_epoch"], base_sequence=1)
        assert produce(alice, topic, 0, nxt, acks=-1,
                       token=init["producer_token"])["base_offset"] == 1


def test_the_producer_keeps_its_binding_across_a_broker_restart(tmp_path):
    """The key of the tokens is in the coordination store: after a restart the same
    producer (reconnecting, retrying) still writes with its id, and a forger is still
    refused."""
    with BrokerProcess(tmp_path.as_uri(), log_path=tmp_path / "broker.log") as proc:
        with Connection(proc.address) as c:
            assert create(c, "restarts")["error_code"] == 0
        with Producer(proc.address, enable_idempotence=True, acks="all", linger_ms=0,
                      retries=100, retry_backoff_ms=100) as producer:
            acked = dict(zip([b"v0", b"v1"], victim_sends(producer, "restarts",
                                                          [b"v0", b"v1"])))
            pid = producer.metrics()["producer_id"]
            proc.kill()
            proc.start()
            acked.update(zip([b"v2", b"v3"], victim_sends(producer, "restarts",
                                                          [b"v2", b"v3"])))
            assert producer.metrics()["producer_id"] == pid  # the same identity
            with Connection(proc.address) as attacker:
                assert_refused(forge_next(attacker, "restarts"))
            acked[b"v4"] = victim_sends(producer, "restarts", [b"v4"])[0]
        assert sorted(acked.values()) == [0, 1, 2, 3, 4]
        check_kept(proc.address, "restarts", acked)


def test_a_refused_frame_changes_no_producer_state(broker):
    """A refused forged frame leaves the partition's producer state alone: the
    victim's retry of its last frame is still a duplicate at its original offset."""
    topic = "shared-state"
    with connect(broker) as conn, connect(broker, client_id="other") as attacker:
        assert create(conn, topic)["error_code"] == 0
        init = conn.request(ApiKey.INIT_PRODUCER_ID, {})
        ident = {"producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]}
        first = encode_frame(raw_batch([b"a0"]), base_sequence=0, **ident)
        assert produce(conn, topic, 0, first, acks=-1,
                       token=init["producer_token"])["base_offset"] == 0
        assert_refused(forge_next(attacker, topic, bump_epoch=True))
        dup = produce(conn, topic, 0, first, acks=-1, token=init["producer_token"])
        assert dup["error_code"] == 0 and dup["base_offset"] == 0, dup
        h = unpack_header(fetch(conn, topic, 0, 0)["records"])
        assert (h.producer_id, h.producer_epoch) == (ident["producer_id"],
                                                     ident["producer_epoch"])


# --- the TransactionalId resource --------------------------------------------------------


def test_init_producer_id_with_a_transactional_id_needs_write_on_it(broker):
    """bob may write topics (before: enough to take any transactional id, fencing its
    holder); InitProducerId with alice's transactional id needs Write on that
    TransactionalId, which the operator grants with ``sparklog acls
    --transactional-id``."""
    out = ok(sparklog("acls", "--add", "--allow-principal", "User:alice", "--operation",
                      "Write", "--transactional-id", "alice-app", bootstrap=broker["LOCAL"]))
    assert "TransactionalId:LITERAL:alice-app" in out
    listed = ok(sparklog("acls", "--list", "--transactional-id", "alice-app",
                         bootstrap=broker["LOCAL"]))
    assert "principal=User:alice" in listed and "operation=Write" in listed
    with connect(broker, "alice") as alice, connect(broker, "bob") as bob:
        first = alice.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "alice-app"})
        with pytest.raises(TransactionalIdAuthorizationFailedError, match="alice-app"):
            bob.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "alice-app"})
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            alice.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "bob-app"})
        # bob fenced nobody: alice's next instance bumps her own epoch by one
        again = alice.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "alice-app"})
        assert again["producer_id"] == first["producer_id"]
        assert again["producer_epoch"] == first["producer_epoch"] + 1
        # without a transactional id the rule is unchanged (Write on some topic)
        assert bob.request(ApiKey.INIT_PRODUCER_ID, {})["error_code"] == 0


def test_a_transactional_id_acl_takes_only_kafkas_operations():
    with pytest.raises(InvalidArgumentError, match="TransactionalId takes the operations"):
        AclBinding("User:alice", "*", "Read", "Allow", "TransactionalId", "app")
    assert AclBinding("User:alice", "*", "Describe", "Allow", "TransactionalId", "app")
