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


def test_hadoop_client_set_is_the_shaded_client_with_a_logging_binding():
    """The hdfs:// backend's jars: Hadoop's shaded client (the pair pyspark 4.1 ships)
    and reload4j, without the daemons."""
    base = {os.path.basename(j) for j in classpath("hadoop-client", quiet=True)}
    assert {"hadoop-client-api-3.4.2.jar", "hadoop-client-runtime-3.4.2.jar"} <= base
    assert any(b.startswith("reload4j-") for b in base)
    assert not any(b.startswith("hadoop-hdfs-") for b in base)


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

    assert not {_artifact(b) for b in base} & {_artifact(s) for s in shipped}


def _artifact(jar: str) -> str:
    """Artifact name of a jar file name (version dropped): 'scala-library-2.13.17.jar'
    -> 'scala-library'."""
    parts = os.path.basename(jar)[:-len(".jar")].split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def test_delta_set_is_delta_spark_for_spark_4_1_without_pysparks_own_jars():
    pyspark = pytest.importorskip("pyspark")
    jars = classpath("delta", quiet=True)
    base = {os.path.basename(j) for j in jars}
    assert {"delta-spark_2.13-4.1.0.jar", "delta-storage-4.1.0.jar"} <= base
    assert all(os.path.isfile(j) for j in jars)
    # nothing pyspark already ships (Scala, logging, Jackson, Hadoop, Spark): two copies
    # of a class on one class path clash
    shipped = {_artifact(j) for j in os.listdir(os.path.join(os.path.dirname(pyspark.__file__),
                                                             "jars"))}
    assert "scala-library" in shipped
    assert not {_artifact(j) for j in jars} & shipped


def test_with_jars_appends_each_jar_once():
    from sparklog.maven import with_jars

    assert with_jars({}, ["a.jar", "b.jar", "a.jar"]) == {"spark.jars": "a.jar,b.jar"}
    conf = {"spark.jars": "x.jar,a.jar", "k": "v"}
    assert with_jars(conf, ["a.jar", "c.jar"]) == {"spark.jars": "x.jar,a.jar,c.jar", "k": "v"}
    assert with_jars(conf, []) == conf and with_jars(conf, []) is not conf


def test_delta_conf_adds_jars_extension_and_catalog():
    pytest.importorskip("pyspark")
    from sparklog.spark import DELTA_CONF, delta_conf

    conf = delta_conf({"spark.jars": "x.jar", "spark.sql.extensions": "my.Ext"})
    assert conf["spark.jars"].split(",") == ["x.jar", *classpath("delta", quiet=True)]
    assert conf["spark.sql.extensions"] == f"my.Ext,{DELTA_CONF['spark.sql.extensions']}"
    assert conf["spark.sql.catalog.spark_catalog"] == \
        DELTA_CONF["spark.sql.catalog.spark_catalog"]
    assert delta_conf(conf) == conf  # idempotent
