"""Kafka Connect standalone with SCRAM over TLS (SASL_SSL) on the Kafka listener: its
worker, the FileStream source's producer and the FileStream sink's consumer each
authenticate with SCRAM-SHA-512 (the Java client settings of
test_kafka_listener_security_clients.py, given to the worker plain and ``producer.``
and ``consumer.`` prefixed). The broker, its users and ACLs are the fixture of
test_kafka_listener_security.py."""

from __future__ import annotations

from sparklog.clients.admin import Admin
from sparklog.security.acl import AclBinding
from tests.security.test_kafka_listener_security import (
    PROTOCOLS,
    pki,  # noqa: F401 (a fixture)
    secure,  # noqa: F401 (a fixture)
)
from tests.security.test_kafka_listener_security_clients import java_client_properties
from tests.server.test_kafka_listener_connect import (
    connect_classpath,  # noqa: F401 (a fixture)
    file_connectors,
    lines_of,
)
from tests.support.kafkaconn import topic_name
from tests.support.waiting import wait_until


def test_connect_file_source_and_sink_scram_over_tls(secure, pki, connect_classpath,  # noqa: F811
                                                     tmp_path):
    """Connect standalone as alice over SASL_SSL with SCRAM-SHA-512 (the broker's
    certificate checked against the CA, host name included): the FileStreamSource
    writes the input file's lines into a topic alice may write, the FileStreamSink's
    group (which alice may read) writes them out: the output file equals the input."""
    topic = topic_name("shared-")
    with Admin(secure["LOCAL"]) as admin:
        admin.create_topic(topic, 1)
        admin.create_acls([AclBinding("User:alice", "*", "Read", "Allow", "Group",
                                      "connect-file-sink")])
    scram = java_client_properties(pki, "SCRAM-SHA-512")
    worker_props = {**scram, **{f"producer.{k}": v for k, v in scram.items()},
                    **{f"consumer.{k}": v for k, v in scram.items()}}
    lines = [f"line {i}" for i in range(200)]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
    connect = file_connectors(connect_classpath, secure[PROTOCOLS["SASL_SSL"]], topic,
                              tmp_path, worker_props)
    with connect(1) as worker:
        wait_until(lambda: lines_of(tmp_path / "output.txt") == lines, timeout=120,
                   what=f"the sink file holding the source's lines: {worker.describe()}")
        assert worker.stop(), worker.describe()
