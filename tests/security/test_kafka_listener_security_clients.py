"""SCRAM over TLS (SASL_SSL) on the Kafka listener for the clients
test_kafka_listener_security.py does not run: Apache Kafka's Java client (its console
producer and consumer, the JAAS ScramLoginModule, a PEM trust store, host name
verification on) and kcat. The broker, its users and ACLs are that module's fixture."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from tests.security.test_kafka_listener_security import (
    PROTOCOLS,
    USERS,
    pki,  # noqa: F401 (a fixture)
    secure,  # noqa: F401 (a fixture)
)
from tests.support.kafkaserver import kafka_tool, kafka_unavailable


def java_client_properties(pki, mechanism: str, user: str = "alice") -> dict[str, str]:  # noqa: F811
    """A Java client's settings for SCRAM over TLS (SASL_SSL) as ``user`` of
    :data:`USERS`: the JAAS ScramLoginModule, the run's CA as a PEM trust store (host
    name verification left on). Spark's Kafka source and sink take them as options
    prefixed ``kafka.``."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                            f'required username="{user}" password="{USERS[user]}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }


def _java_client_config(path, pki, mechanism: str, user: str = "alice") -> str:  # noqa: F811
    """A Java client's properties (``--command-config`` of Kafka's tools) for SASL_SSL
    (:func:`java_client_properties`)."""
    path.write_text("".join(f"{k}={v}\n"
                            for k, v in java_client_properties(pki, mechanism, user).items()))
    return str(path)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512"])  # SHA-256: the other clients
def test_java_client_scram_over_tls(secure, pki, mechanism, tmp_path):  # noqa: F811
    """kafka-console-producer (idempotent, acks=all) and kafka-console-consumer in a
    group authenticate with SCRAM over TLS (the broker's certificate checked against
    the CA, host name included) and round-trip their lines; a wrong password is an
    authentication error, not a hang."""
    why = kafka_unavailable()
    if why:
        pytest.skip(why)
    address = secure[PROTOCOLS["SASL_SSL"]]
    config = _java_client_config(tmp_path / "client.properties", pki, mechanism)
    tag = f"java-{mechanism}-{uuid.uuid4().hex[:6]}"
    lines = [f"{tag} {i}" for i in range(20)]
    kafka_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", address,
               "--topic", "allowed", "--command-config", config,
               "--command-property", "acks=all", "--command-property", "enable.idempotence=true",
               stdin="\n".join(lines) + "\n")
    out = kafka_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                     address, "--topic", "allowed", "--group", "alice-group",
                     "--from-beginning", "--command-config", config,
                     "--max-messages", str(len(lines)), "--timeout-ms", "60000",
                     timeout=180)
    assert out.splitlines() == lines  # the group resumes where the last run committed
    bad = tmp_path / "wrong.properties"
    bad.write_text((tmp_path / "client.properties").read_text()
                   .replace(USERS["alice"], "not-the-password"))
    with pytest.raises(AssertionError, match="SaslAuthenticationException"):
        kafka_tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", address,
                   "--topic", "allowed", "--command-config", str(bad), timeout=120)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kcat_scram_over_tls(secure, pki, mechanism):  # noqa: F811
    """kcat produces keyed lines and reads them back over SASL_SSL with SCRAM."""
    address = secure[PROTOCOLS["SASL_SSL"]]
    auth = ["-X", "security.protocol=SASL_SSL", "-X", f"sasl.mechanisms={mechanism}",
            "-X", "sasl.username=alice", "-X", f"sasl.password={USERS['alice']}",
            "-X", f"ssl.ca.location={pki.ca}"]
    tag = f"kcat-{mechanism}-{uuid.uuid4().hex[:6]}"
    lines = [f"k{i}:{tag} {i}" for i in range(20)]
    subprocess.run(["kcat", "-b", address, *auth, "-P", "-t", "shared-a", "-K", ":"],
                   input=("\n".join(lines) + "\n").encode(), check=True, timeout=60)
    out = subprocess.run(["kcat", "-b", address, *auth, "-C", "-t", "shared-a", "-o",
                          "beginning", "-e", "-f", "%k:%s\n"], capture_output=True,
                         check=True, timeout=60).stdout.decode()
    assert [line for line in out.splitlines() if tag in line] == lines
