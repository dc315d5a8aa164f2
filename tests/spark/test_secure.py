"""The Spark sink and source (broker mode) over SASL_SSL with Kafka's Java client
options (``kafka.security.protocol``, ``kafka.ssl.truststore.location``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``), against a broker enforcing ACLs."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from pyspark.sql.types import BinaryType, StringType, StructField, StructType  # noqa: E402

from sparklog.clients.admin import Admin  # noqa: E402
from sparklog.security.acl import AclBinding  # noqa: E402
from sparklog.server.embedded import EmbeddedBroker  # noqa: E402
from tests.support.tlscerts import make_pki  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-secure")
    pki = make_pki(root / "pki")
    (root / "log").mkdir()
    props = {"listeners": "LOCAL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
             "listener.security.protocol.map": "LOCAL:PLAINTEXT",
             "ssl.keystore.location": str(pki.server),
             "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:ANONYMOUS"}
    with EmbeddedBroker((root / "log").as_uri(), props) as broker:
        addresses = broker.broker.listener_addresses
        with Admin(addresses["LOCAL"]) as admin:
            admin.alter_user_scram_credentials([("spark", "SCRAM-SHA-512", "spark-pw")])
            admin.create_topic("spark-in", 2)
            admin.create_topic("spark-hidden", 1)
            admin.create_acls([AclBinding("User:spark", "*", op, "Allow", "Topic", "spark-in")
                               for op in ("Read", "Write")])
        options = {
            "kafka.bootstrap.servers": addresses["SASL_SSL"],
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.truststore.location": str(pki.ca),
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram."
                                      'ScramLoginModule required username="spark" '
                                      'password="spark-pw";'}
        yield options


def test_spark_writes_and_reads_over_sasl_ssl(sl_spark, secured):
    schema = StructType([StructField("key", BinaryType()), StructField("value", StringType())])
    rows = [(f"k{i}".encode(), f"v{i}") for i in range(10)]
    writer = sl_spark.createDataFrame(rows, schema).write.format("sparklog") \
        .option("topic", "spark-in").mode("append")
    for k, v in secured.items():
        writer = writer.option(k, v)
    writer.save()
    reader = sl_spark.read.format("sparklog").option("subscribe", "spark-in")
    for k, v in secured.items():
        reader = reader.option(k, v)
    got = sorted(r.value.decode() if isinstance(r.value, (bytes, bytearray)) else r.value
                 for r in reader.load().collect())
    assert got == sorted(f"v{i}" for i in range(10))


def test_spark_read_of_a_topic_without_acl_is_refused(sl_spark, secured):
    reader = sl_spark.read.format("sparklog").option("subscribe", "spark-hidden")
    for k, v in secured.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as err:
        reader.load().collect()
    assert "Not authorized to access topics" in str(err.value)
