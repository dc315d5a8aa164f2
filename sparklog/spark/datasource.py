"""The ``sparklog`` Python data source and its registration.

``register(spark)`` makes ``spark.read.format("sparklog")``,
``spark.readStream.format("sparklog")``, ``df.write.format("sparklog")`` and
``df.writeStream.format("sparklog")`` available in that session. The schema is Spark's
Kafka source's for raw topics, or a typed topic's columns plus the metadata columns (see
:mod:`sparklog.spark.source.schema`).

The data source reads through the read path (:mod:`sparklog.spark.source`) and writes
through the write path (:mod:`sparklog.spark.sink`), so it sits above both, which
stay independent of each other. Users reach it through :mod:`sparklog.spark`.
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSource

from ..errors import SchemaMismatchError
from .source.batch import SparklogBatchReader, SparklogPushdownReader
from .source.catalogs import planning_catalog
from .source.options import parse_options
from .source.planning import subscribed_partitions
from .source.schema import spark_schema
from .source.stream import SparklogStreamReader

log = logging.getLogger(__name__)

FORMAT = "sparklog"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def record_schema_of(catalog, opts):
    """The record schema shared by the subscribed topics: None for raw topics, the
    Arrow schema for typed ones. SchemaMismatchError when they disagree."""
    topics = sorted(subscribed_partitions(catalog, opts.subscription))
    schemas = {t: catalog.topic_config(t).schema for t in topics}
    distinct = []
    for t, s in schemas.items():
        if not any((s is None and d is None) or (s is not None and d is not None and s.equals(d))
                   for d in distinct):
            distinct.append(s)
    if len(distinct) > 1:
        kinds = ", ".join(f"{t} ({'raw' if s is None else 'typed: ' + ', '.join(s.names)})"
                          for t, s in schemas.items())
        raise SchemaMismatchError(
            f"the subscribed topics have different record schemas and cannot be read as one "
            f"DataFrame: {kinds}")
    return distinct[0] if distinct else None


class SparklogDataSource(DataSource):
    """``format("sparklog")`` without filter pushdown (safe under any session config)."""

    reader_class = SparklogBatchReader

    @classmethod
    def name(cls) -> str:
        """The format name: ``sparklog``."""
        return FORMAT

    def schema(self):
        """Kafka's record schema (raw topics) or the typed topics' columns plus the
        metadata columns; ``headers`` is added with ``includeHeaders=true``."""
        opts = parse_options(self.options, streaming=None)
        with planning_catalog(opts) as catalog:
            record = record_schema_of(catalog, opts)
        return spark_schema(record, opts.include_headers)

    def reader(self, schema):
        """The batch reader."""
        return self.reader_class(parse_options(self.options, streaming=False), schema)

    def streamReader(self, schema):
        """The micro-batch stream reader."""
        return SparklogStreamReader(parse_options(self.options, streaming=True), schema)

    def writer(self, schema, overwrite: bool):
        """The writer producing rows to a topic through the broker."""
        from .sink import SparklogWriter  # writes only: reads and plans do not import it

        return SparklogWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        """The streaming sink (``writeStream``): each micro-batch produced to a topic
        through the broker, at least once, as Spark's Kafka sink."""
        from .sink import SparklogStreamWriter

        return SparklogStreamWriter(dict(self.options), schema, overwrite)


class SparklogPushdownDataSource(SparklogDataSource):
    """``format("sparklog")`` with filter pushdown on topic, partition, offset and
    timestamp (needs ``spark.sql.python.filterPushdown.enabled=true``)."""

    reader_class = SparklogPushdownReader


def register(spark, *, filter_pushdown: bool | None = None) -> None:
    """Register ``format("sparklog")`` in the session ``spark``.

    With filter pushdown the session config ``spark.sql.python.filterPushdown.enabled``
    is set to true and filters on topic, partition, offset and timestamp skip data. The
    default (None) pushes filters when the JVM reader's jar is on the session's
    classpath, and not otherwise: Spark 4.1 keeps one read plan per loaded DataFrame, so
    without the JVM provider (which pins each scan's own plan) a filtered scan's plan
    would be reused by an unfiltered scan of the same DataFrame and return too few rows.
    True or False forces the choice.
    """
    if filter_pushdown is None:
        from .jvm import provider_loaded

        filter_pushdown = provider_loaded(spark)
        if not filter_pushdown:
            log.info("sparklog: no filter pushdown in this session (the JVM reader's jar is "
                     "not on its classpath; see docs/spark.md, Registering)")
    source = SparklogPushdownDataSource if filter_pushdown else SparklogDataSource
    if filter_pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    with _quiet_replacement(spark):
        try:
            spark.dataSource.register(source)
        except Exception as exc:  # the JVM reader's jar holds the name: register behind it
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
                raise
            from .jvm import register_python_source

            register_python_source(spark, source)


#: the JVM logger that warns when a data source replaces a statically registered one
_DATA_SOURCE_MANAGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"


class _quiet_replacement:
    """Silence Spark's "The data source sparklog replaced a statically registered data
    source" while :func:`register` replaces the source that ``pyspark_sparklog``
    registered statically (it is sparklog's own: nothing to warn about)."""

    def __init__(self, spark):
        self.configurator = self.level = None
        try:
            jvm = spark.sparkContext._jvm
            self.configurator = jvm.org.apache.logging.log4j.core.config.Configurator
            self.logger = jvm.org.apache.logging.log4j.LogManager.getLogger(
                _DATA_SOURCE_MANAGER)
            self.error = jvm.org.apache.logging.log4j.Level.ERROR
        except Exception:  # Spark Connect (no JVM here) or another logging backend
            self.configurator = None

    def __enter__(self):
        if self.configurator is not None:
            try:
                self.level = self.logger.getLevel()
                self.configurator.setLevel(_DATA_SOURCE_MANAGER, self.error)
            except Exception:
                self.configurator = None
        return self

    def __exit__(self, *exc):
        if self.configurator is not None:
            try:
                self.configurator.setLevel(_DATA_SOURCE_MANAGER, self.level)
            except Exception as err:  # only a log level: never fails the registration
                log.debug("log level of %s not restored: %s", _DATA_SOURCE_MANAGER, err)
