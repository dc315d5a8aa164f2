"""sparklog.maven: Java artifact sets resolved from Maven Central into the user cache."""

import os

import pytest

from sparklog.maven import MavenError, cached_classpath, classpath, names


def test_hadoop_set_resolves_to_existing_jars_of_hadoop_3_4_2():
    jars = classpath("hadoop", quiet=True)
    base = {os.path.basename(j) for j in jars}
    assert {"hadoop-hdfs-3.4.2.jar", "hadoop-common-3.4.2.jar",
            "hadoop-hdfs-client-3.4.2.jar"} <= base
    assert all(os.path.isfile(j) for j in jars)
    assert cached_classpath("hadoop") == jars  # remembered: no second mvn run


def test_unknown_set_names_the_known_ones():
    with pytest.raises(MavenError, match="unknown Java artifact set 'nope'.*hadoop"):
        classpath("nope")
    assert "hadoop" in names()


def test_kafka_set_holds_the_broker_its_storage_tool_and_perf_tools():
    jars = classpath("kafka", quiet=True)
    base = {os.path.basename(j) for j in jars}
    assert any(b.startswith("kafka_2.13-4.") for b in base)  # kafka.Kafka, StorageTool
    assert any(b.startswith("kafka-tools-4.") for b in base)  # ProducerPerformance
    assert not any(b.startswith("connect-runtime") for b in base)


def test_spark_kafka_set_adds_no_jar_that_pyspark_already_ships():
    pyspark = pytest.importorskip("pyspark")
    jars = classpath("spark-kafka", quiet=True)
    base = {os.path.basename(j) for j in jars}
    assert any(b.startswith("spark-sql-kafka-0-10_2.13-4.1.") for b in base)
    shipped = os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))

    def artifact(name):  # "kafka-clients-3.9.1.jar" -> "kafka-clients"
        return name.rsplit("-", 1)[0]

    assert not {artifact(b) for b in base} & {artifact(s) for s in shipped}
