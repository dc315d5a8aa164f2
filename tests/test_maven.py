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
