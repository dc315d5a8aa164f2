"""A Kerberized HDFS: the broker logs in from its keytab, renews its ticket, a Spark job
reads what it wrote with its own keytab login, and a process without a ticket is refused
with the cause named. And SASL GSSAPI on a broker listener: a client logged in from its
keytab is ``User:<primary>`` to the ACLs; a forged token is refused.

One KDC (tests/support/kdc.py: Hadoop's MiniKdc) and one secure HDFS cluster
(``HdfsCluster(kdc=...)``: NameNode and DataNode logging in from their keytab, block
tokens, SASL data transfer) per module. Tickets live ``TICKET_LIFETIME`` seconds, so a
broker that did not renew its ticket would lose HDFS within the test. The broker and the
refused client are processes of their own: Hadoop's security settings are JVM-wide, and
the test process's JVM talks to the insecure cluster of the other tests.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from sparklog.protocol import Connection
from tests.support.brokerproc import ROOT, BrokerProcess
from tests.support.hdfscluster import HdfsCluster, hadoop_unavailable
from tests.support.kdc import Kdc, kdc_unavailable
from tests.support.waiting import wait_until
from tests.support.wire import create, produce, read_values

#: Seconds a ticket of this module's KDC lives (the HDFS daemons' too).
TICKET_LIFETIME = 15

#: A Spark job (its own process, local[1], the Python reader: the tasks open the storage
#: through sparklog's hdfs:// client, HADOOP_CLIENT_OPTS naming the KDC's krb5.conf) reading a topic of a Kerberized storage root with
#: the source's storage.kerberos.* options; prints the values.
SPARK_READ = """
import os, sys
from sparklog.spark import local_session
root, topic, principal, keytab = sys.argv[1:5]
# Spark's JVM reads HADOOP_CONF_DIR too (Kerberos on): it needs the KDC's krb5.conf
spark = local_session("kerberos-read", cores=1, shuffle_partitions=1, jvm_reader=False,
                      conf={"spark.driver.extraJavaOptions": os.environ["HADOOP_CLIENT_OPTS"]})
rows = (spark.read.format("sparklog").option("path", root).option("subscribe", topic)
        .option("storage.kerberos.principal", principal)
        .option("storage.kerberos.keytab", keytab).load().orderBy("offset").collect())
print("VALUES " + ",".join(bytes(r.value).decode() for r in rows))
spark.stop()
"""


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    """The module's KDC (tickets live TICKET_LIFETIME seconds)."""
    reason = kdc_unavailable()
    if reason:
        pytest.skip(reason)
    kdc = Kdc(str(tmp_path_factory.mktemp("kdc")), ticket_lifetime=TICKET_LIFETIME).start()
    yield kdc
    kdc.stop()


@pytest.fixture(scope="module")
def secure(kdc, tmp_path_factory):
    """The KDC, the secure HDFS cluster, the broker's keytab (principal ``sparklog``,
    an HDFS superuser through the cluster's static group mapping) and the environment
    of a client process (HADOOP_CONF_DIR, the KDC's krb5.conf)."""
    reason = hadoop_unavailable()
    if reason:
        pytest.skip(reason)
    keytab = kdc.keytab("sparklog.keytab", "sparklog")
    cluster = HdfsCluster(str(tmp_path_factory.mktemp("hdfs")), kdc=kdc,
                          supergroup=("sparklog",))
    cluster.start()
    try:
        yield SimpleNamespace(kdc=kdc, cluster=cluster, keytab=keytab,
                              env=_kerberos_env(kdc, cluster.conf_dir),
                              principal=kdc.principal("sparklog"))
    finally:
        cluster.stop()


def _kerberos_env(kdc, conf_dir: str) -> dict:
    """Environment changes of a client process: the cluster's HADOOP_CONF_DIR (empty:
    none), the KDC's krb5.conf for its JVM, no HADOOP_USER_NAME."""
    return {"HADOOP_CONF_DIR": conf_dir, "HADOOP_CLIENT_OPTS": " ".join(kdc.jvm_options()),
            "HADOOP_USER_NAME": None}


def _valid_until(log: str) -> list[float]:
    """End times (epoch seconds) of the tickets the broker's log reports, in order."""
    return [datetime.datetime.fromisoformat(t).timestamp()
            for t in re.findall(r"valid until (\S+)", log)]


def test_broker_logs_in_from_its_keytab_and_renews_its_ticket_and_spark_reads(secure,
                                                                               tmp_path):
    """The broker writes as ``sparklog`` from its keytab, renews its ticket before the
    first one ends and writes on after it ended; then a Spark job reads the topic."""
    overrides = [f"storage.kerberos.principal={secure.principal}",
                 f"storage.kerberos.keytab={secure.keytab}",
                 "storage.kerberos.ticket.renew.period.ms=500"]
    broker = BrokerProcess(f"{secure.cluster.hdfs_uri}/kerberized",
                           [a for o in overrides for a in ("--override", o)],
                           log_path=tmp_path / "broker.log", env=secure.env,
                           start_timeout=120)
    with broker:
        with Connection(broker.address, timeout=30) as conn:
            assert create(conn, "secured")["error_code"] == 0
            assert produce(conn, "secured", 0, ["a", "b"], acks=-1)["error_code"] == 0
            assert read_values(conn, "secured", 0) == [b"a", b"b"]
        log = broker.log_text()
        assert f"logged in as {secure.principal} from keytab {secure.keytab}" in log, log
        first_end = _valid_until(log)[0]
        # renewed before the first ticket ends, then still writing after it ended
        wait_until(lambda: f"ticket of {secure.principal} renewed" in broker.log_text(),
                   timeout=TICKET_LIFETIME * 3, what="the broker's ticket renewed")
        renewed = broker.log_text()
        assert _valid_until(renewed)[1] > first_end, renewed
        wait_until(lambda: time.time() > first_end + 1, timeout=TICKET_LIFETIME * 2,
                   what="the broker's first ticket expired")
        with Connection(broker.address, timeout=30) as conn:
            assert produce(conn, "secured", 0, ["c"], acks=-1)["error_code"] == 0
            assert read_values(conn, "secured", 0) == [b"a", b"b", b"c"]
        assert broker.stop() == 0
    _spark_job_reads_with_its_keytab(secure)


#: A broker with a SASL_PLAINTEXT listener enabling GSSAPI (its keytab login from
#: Kafka's per-listener JAAS key) and ACLs, and sparklog's clients logging in from their
#: keytabs: one process (the JVM carries both logins), run by the test below.
GSSAPI_SCRIPT = """
import sys, tempfile
from sparklog.clients.admin import Admin
from sparklog.errors import TopicAuthorizationFailedError
from sparklog.clients.consumer import Consumer
from sparklog.security.acl import AclBinding
from sparklog.server.embedded import EmbeddedBroker
from sparklog.clients.producer.producer import Producer
from sparklog.protocol import ApiKey, Connection
broker_principal, broker_keytab, client_principal, client_keytab = sys.argv[1:5]
jaas = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
        f'storeKey=true keyTab="{broker_keytab}" principal="{broker_principal}";')
props = {"listeners": "LOCAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
         "listener.security.protocol.map": "LOCAL:PLAINTEXT",
         "sasl.enabled.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
         "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": jaas,
         "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
         "super.users": "User:ANONYMOUS"}
with EmbeddedBroker("file://" + tempfile.mkdtemp(), props) as broker:
    addresses = broker.broker.listener_addresses
    with Admin(addresses["LOCAL"]) as admin:
        admin.create_topic("kerb", 1)
        admin.create_topic("other", 1)
        admin.create_acls([AclBinding("User:analyst", "*", op, "Allow", "Topic", "kerb")
                           for op in ("Read", "Write")] +
                          [AclBinding("User:analyst", "*", "Read", "Allow", "Group", "analyst")])
    cfg = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI",
               sasl_kerberos_service_name="kafka", sasl_kerberos_principal=client_principal,
               sasl_kerberos_keytab=client_keytab)
    address = addresses["SASL_PLAINTEXT"]
    with Producer(bootstrap_servers=address, **cfg) as producer:
        producer.send("kerb", b"over-gssapi").get(30)
        try:
            producer.send("other", b"no").get(30)
            print("OTHER ALLOWED")
        except TopicAuthorizationFailedError as e:
            print("OTHER DENIED", e)
    consumer = Consumer("kerb", bootstrap_servers=address, group_id="analyst",
                        auto_offset_reset="earliest", consumer_timeout_ms=5000, **cfg)
    try:
        print("CONSUMED", [r.value.decode() for r in consumer])
    finally:
        consumer.close()
    # a made-up Kerberos token: refused with SASL_AUTHENTICATION_FAILED, then closed
    with Connection(address, timeout=10) as conn:
        conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "GSSAPI"})
        conn.send(ApiKey.SASL_AUTHENTICATE,
                  {"auth_bytes": bytes([0x60, 0x82]) + b"not kerberos" * 20})
        answer = conn.receive()
        print("FORGED", answer["error_code"], answer.get("error_message"))
    with Admin(addresses["LOCAL"]) as admin:
        print("STILL SERVING", "kerb" in admin.list_topics())
"""


def test_gssapi_listener_authenticates_keytab_clients_as_acl_principals(kdc):
    """GSSAPI on a listener: the client ``analyst@REALM`` is ``User:analyst`` (allowed one topic,
    denied another); a forged Kerberos token is refused and the broker serves on."""
    broker_keytab = kdc.keytab("kafka.keytab", "kafka/127.0.0.1")
    client_keytab = kdc.keytab("analyst.keytab", "analyst")
    proc = subprocess.run(
        [sys.executable, "-c", GSSAPI_SCRIPT, kdc.principal("kafka/127.0.0.1"),
         broker_keytab, kdc.principal("analyst"), client_keytab],
        env=_client_env(_kerberos_env(kdc, "")), cwd=str(ROOT),
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CONSUMED ['over-gssapi']" in out, (out, proc.stderr[-3000:])
    assert "OTHER DENIED" in out, out
    assert "FORGED 58 " in out, (out, proc.stderr[-3000:])  # SASL_AUTHENTICATION_FAILED
    assert "STILL SERVING True" in out, out


#: A broker whose JVM's krb5.conf names another default realm (PARTNER.EXAMPLE) than the
#: KDC's (EXAMPLE.COM, which it still reaches), with two GSSAPI listeners: DEFAULT rules
#: on one, Kafka RULE: rules on the other (``sys.argv[5]``). Prints what each client
#: principal became, and the audit log's lines.
RULES_SCRIPT = """
import logging, sys, tempfile
from sparklog.clients.admin import Admin
from sparklog.protocol import ApiKey, Connection
from sparklog.security.acl import AclBinding
from sparklog.security.client import ClientSecurity
from sparklog.server.embedded import EmbeddedBroker
broker_principal, broker_keytab, keytab, rules = sys.argv[1:5]
clients = sys.argv[5:]
audit = []
class Keep(logging.Handler):
    def emit(self, record):
        audit.append(record.getMessage())
logging.getLogger("sparklog.audit").addHandler(Keep())
logging.getLogger("sparklog.audit").setLevel(logging.INFO)
jaas = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
        f'storeKey=true keyTab="{broker_keytab}" principal="{broker_principal}";')
props = {"listeners": "LOCAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,RULES://127.0.0.1:0",
         "listener.security.protocol.map": "LOCAL:PLAINTEXT,RULES:SASL_PLAINTEXT",
         "sasl.enabled.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
         "gssapi.sasl.jaas.config": jaas,
         "listener.name.rules.sasl.kerberos.principal.to.local.rules": rules,
         "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
         "super.users": "User:ANONYMOUS;User:admin"}
with EmbeddedBroker("file://" + tempfile.mkdtemp(), props) as broker:
    addresses = broker.broker.listener_addresses
    with Admin(addresses["LOCAL"]) as admin:
        admin.create_topic("kerb", 1)
        admin.create_acls([AclBinding("User:analyst", "*", "Describe", "Allow", "Topic",
                                      "kerb")])
    for listener in ("SASL_PLAINTEXT", "RULES"):
        for principal in clients:
            security = ClientSecurity.from_configs({
                "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI",
                "sasl_kerberos_service_name": "kafka",
                "sasl_kerberos_principal": principal, "sasl_kerberos_keytab": keytab})
            try:
                with Connection(addresses[listener], timeout=30, security=security) as conn:
                    answer = conn.request(ApiKey.METADATA, {
                        "topics": ["kerb"], "allow_auto_topic_creation": False})
                    print("RESULT", listener, principal, "topic error",
                          answer["topics"][0]["error_code"])
            except Exception as e:
                print("RESULT", listener, principal, "refused", type(e).__name__)
for line in audit:
    print("AUDIT", line)
"""


def _other_default_realm(kdc, directory) -> str:
    """A copy of the KDC's krb5.conf whose default realm is PARTNER.EXAMPLE (a realm
    without a KDC), the KDC's realm still reachable for 127.0.0.1's services."""
    text = open(kdc.krb5_conf).read()
    text = re.sub(r"default_realm\s*=\s*\S+", "default_realm = PARTNER.EXAMPLE", text)
    text += f"\n[domain_realm]\n  127.0.0.1 = {kdc.realm}\n"
    path = os.path.join(str(directory), "krb5-partner.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_principals_of_another_realm_are_refused_unless_a_rule_maps_them(kdc, tmp_path):
    """The broker's default realm is its krb5.conf's (PARTNER.EXAMPLE here), so with
    DEFAULT rules ``analyst@EXAMPLE.COM`` and ``admin/laptop@EXAMPLE.COM`` are refused
    ("No rules apply", audited) instead of becoming User:analyst and the super user
    User:admin; on the listener with RULE: rules they are User:analyst (allowed to
    describe ``kerb``) and User:admin-laptop (not a super user: denied)."""
    broker_keytab = kdc.keytab("kafka-rules.keytab", "kafka/127.0.0.1")
    keytab = kdc.keytab("clients.keytab", "analyst", "admin/laptop")
    rules = (r"RULE:[2:$1-$2@$0](admin-laptop@EXAMPLE\.COM)s/@.*//,"
             r"RULE:[1:$1@$0](.*@EXAMPLE\.COM)s/@.*//L,DEFAULT")
    env = _kerberos_env(kdc, "")
    env["HADOOP_CLIENT_OPTS"] = f"-Djava.security.krb5.conf={_other_default_realm(kdc, tmp_path)}"
    analyst, admin = kdc.principal("analyst"), kdc.principal("admin/laptop")
    proc = subprocess.run(
        [sys.executable, "-c", RULES_SCRIPT, kdc.principal("kafka/127.0.0.1"), broker_keytab,
         keytab, rules, analyst, admin],
        env=_client_env(env), cwd=str(ROOT), capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"RESULT SASL_PLAINTEXT {analyst} refused" in out, (out, proc.stderr[-3000:])
    assert f"RESULT SASL_PLAINTEXT {admin} refused" in out, out
    assert f"No rules apply to {analyst}, rules [DEFAULT]" in out, out
    assert f"RESULT RULES {analyst} topic error 0" in out, out
    assert f"RESULT RULES {admin} topic error 29" in out, out
    assert "principal=User:admin-laptop" in out and "principal=User:admin " not in out, out


def test_principal_to_local_rules_follow_kafkas_short_namer():
    """Kafka's KerberosShortNamer without a KDC: DEFAULT maps the default realm only,
    RULE:[n:format](regex)s/from/to/g with /L and /U, the first rule that applies wins,
    a result with '/' or '@' is refused, and a malformed rule names itself."""
    from sparklog.errors import InvalidConfigError
    from sparklog.security.principals import KerberosShortNamer, NoMatchingRule

    default = KerberosShortNamer.from_rules("DEFAULT", "EXAMPLE.COM")
    assert default.short_name("admin/laptop@EXAMPLE.COM") == "admin"
    assert default.short_name("alice@EXAMPLE.COM") == "alice"
    assert default.short_name("alice") == "alice"  # no realm: Kafka keeps the primary
    with pytest.raises(NoMatchingRule, match=r"No rules apply to admin/laptop@PARTNER"
                                             r"\.EXAMPLE, rules \[DEFAULT\]"):
        default.short_name("admin/laptop@PARTNER.EXAMPLE")
    with pytest.raises(NoMatchingRule, match="Malformed Kerberos name"):
        default.short_name("a@b@C")
    rules = KerberosShortNamer.from_rules(
        r"RULE:[2:$1@$0](.*@PARTNER\.EXAMPLE)s/@.*/-partner/L, "
        r"RULE:[1:$1@$0](.*@PARTNER\.EXAMPLE)s/(.*)@(.*)/$2_$1/U,"
        r"RULE:[1:$1](x.*)s/x/y/g,RULE:[1:$1@$0](bad@.*),DEFAULT", "EXAMPLE.COM")
    assert rules.short_name("Admin/Laptop@PARTNER.EXAMPLE") == "admin-partner"
    assert rules.short_name("bob@PARTNER.EXAMPLE") == "PARTNER.EXAMPLE_BOB"
    assert rules.short_name("xaxbx@OTHER.ORG") == "yayby"
    assert rules.short_name("carol/host@EXAMPLE.COM") == "carol"
    with pytest.raises(NoMatchingRule, match="Non-simple name bad@OTHER"):
        rules.short_name("bad@OTHER")
    with pytest.raises(NoMatchingRule, match="No rules apply to carol/host@OTHER"):
        rules.short_name("carol/host@OTHER")
    for bad in ("RULE:[one:$1]", "DEFAULTS", "RULE:[1:$1](a(b)", ""):
        with pytest.raises(InvalidConfigError, match="sasl.kerberos.principal.to.local.rules"):
            KerberosShortNamer.from_rules(bad, "EXAMPLE.COM")


def _client_env(changes: dict) -> dict:
    """os.environ with ``changes`` (None: removed) and this repository on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _spark_job_reads_with_its_keytab(secure):
    """A Spark job of another principal (an ordinary HDFS user, not a superuser) reads
    the topic the broker wrote, its tasks logging in from the job's keytab."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("pyspark is not installed: the Spark job's read on Kerberized HDFS skipped")
        return
    keytab = secure.kdc.keytab("job.keytab", "etl")
    root = f"{secure.cluster.hdfs_uri}/kerberized"
    proc = subprocess.run([sys.executable, "-c", SPARK_READ, root, "secured",
                           secure.kdc.principal("etl"), keytab],
                          env=_client_env(secure.env), cwd=str(ROOT), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "VALUES a,b,c" in proc.stdout, (proc.stdout, proc.stderr[-3000:])


def test_a_broker_without_a_ticket_is_refused_naming_kerberos(secure):
    env = _client_env(secure.env)
    proc = subprocess.run(
        [sys.executable, "-m", "sparklog.cli.main", "broker", "start",
         "--storage", f"{secure.cluster.hdfs_uri}/no-ticket", "--listen", "127.0.0.1:0"],
        env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL)
    assert proc.returncode != 0, proc.stdout
    assert "Kerberos authentication refused" in proc.stderr, proc.stderr[-3000:]
    assert "storage.kerberos.principal" in proc.stderr


def test_gssapi_client_settings_from_kafka_names_and_kafka_python_names():
    """Kafka's ``sasl.jaas.config`` with Krb5LoginModule gives the keytab login; a
    GSSAPI client without one is refused naming what is missing (no JVM involved)."""
    from sparklog.errors import InvalidConfigError
    from sparklog.security.client import ClientSecurity, security_properties

    cfg = security_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "sparklog",
        "sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required '
                            'useKeyTab=true storeKey=true keyTab="/keytabs/etl.keytab" '
                            'principal="etl@EXAMPLE.COM";'})
    assert ClientSecurity.from_configs(cfg).kerberos == (
        "sparklog", None, "etl@EXAMPLE.COM", "/keytabs/etl.keytab")
    with pytest.raises(InvalidConfigError, match="sasl_kerberos_keytab"):
        ClientSecurity.from_configs({"security_protocol": "SASL_PLAINTEXT",
                                     "sasl_mechanism": "GSSAPI",
                                     "sasl_kerberos_principal": "etl@EXAMPLE.COM"})
    with pytest.raises(InvalidConfigError, match="keyTab"):
        security_properties({"sasl.jaas.config":
                             "com.sun.security.auth.module.Krb5LoginModule required "
                             "useTicketCache=true;"})
