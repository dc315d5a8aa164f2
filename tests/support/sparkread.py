"""Reading storage roots through Spark in the tests: ``format("sparklog")`` batch loads and
streams, the Kafka source's schema spelt out independently of the implementation,
DataFrame comparison (chispa), and the check that a scan ran on the JVM reader.

Needs pyspark and chispa: test modules import it after ``pytest.importorskip``."""

from __future__ import annotations

import chispa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparklog.spark.jvm import JVM_READER_OPTION

#: Spark's Kafka source schema, spelt out independently of the implementation.
KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])


KAFKA_SCHEMA_HEADERS = StructType(KAFKA_SCHEMA.fields + [StructField("headers", ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])))])


def assert_same(got, want):
    """The two DataFrames hold the same rows, in any order (nullability aside)."""
    chispa.assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def load(spark, root, **options):
    """spark.read.format("sparklog") over the storage root ``root``."""
    reader = spark.read.format("sparklog").option("path", root)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def stream(spark, root, **options):
    """spark.readStream.format("sparklog") over the storage root ``root``."""
    reader = spark.readStream.format("sparklog").option("path", root)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df, out, checkpoint):
    """Run the stream ``df`` into parquet at ``out`` with Trigger.AvailableNow; the query
    (the test inspects ``query.exception()``)."""
    query = (df.writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    except Exception:  # StreamingQueryException: the test inspects query.exception()
        pass
    return query


def output(spark, out):
    """What a stream wrote into ``out``, in the Kafka source's schema."""
    return spark.read.schema(KAFKA_SCHEMA).parquet(out)


#: What the plan of a scan on the JVM reader names.
JVM = "JVM columnar reader"


def scan_of(df) -> str:
    """The physical plan (planning the scan) of ``df``, as text."""
    return df._jdf.queryExecution().executedPlan().toString()


def jvm_and_python(spark, root, **options):
    """The same read on the JVM reader (checked in the plan) and on the Python reader."""
    jvm = load(spark, root, **options)
    python = load(spark, root, **{JVM_READER_OPTION: "false", **options})
    assert JVM in scan_of(jvm), scan_of(jvm)
    assert JVM not in scan_of(python)
    return jvm, python


def no_jar_source():
    """The Python data source as ``register(spark)`` registers it in a session without
    the JVM reader's jar, under a name of its own so that the JVM provider, which holds
    ``sparklog``, does not take its reads. The class is made here (cloudpickle ships it
    to the workers by value)."""
    from sparklog.spark import SparklogDataSource

    class NoJarSource(SparklogDataSource):
        @classmethod
        def name(cls) -> str:
            return "sparklog_nojar"

    return NoJarSource


#: Every route a batch read of ``format("sparklog")`` can take (docs/spark.md, "The JVM
#: reader"): name -> (format, options). "jvm" is the default: planned by the Python
#: planner (the only one), read by the JVM reader; "python-reader" reads on Python
#: behind the JVM provider; "no-jar" is the Python data source alone, as
#: ``register(spark)`` makes it in a session without the jar (no filter pushdown: with
#: it, Spark 4.1 reuses one DataFrame's plan across its scans; docs/spark.md,
#: Registering).
ROUTES = {
    "jvm": ("sparklog", {}),
    "python-reader": ("sparklog", {JVM_READER_OPTION: "false"}),
    "no-jar": ("sparklog_nojar", {}),
}


def register_routes(spark) -> None:
    """Register the no-jar route's source of :data:`ROUTES` in ``spark`` (once is
    enough; registering again replaces it)."""
    spark.dataSource.register(no_jar_source())


def load_route(spark, route: str, root, **options):
    """``load`` over the storage root ``root`` on the route named ``route``."""
    fmt, extra = ROUTES[route]
    reader = spark.read.format(fmt).option("path", root)
    for k, v in {**extra, **options}.items():
        reader = reader.option(k, v)
    return reader.load()
