"""Spark's schema of a typed topic carries the declared nullability: ``nullable=False``
for not-null columns, struct fields and list elements (the producer and the broker
refuse nulls there), and the rows read back."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed")

from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

import sparklog
from tests.support.logfiles import NOT_NULL_SCHEMA
from tests.support.sparkread import load

pytestmark = pytest.mark.spark


def test_spark_schema_nullability_is_the_declared_one(sl_spark, storage_root):
    rows = [{"sym": "A", "px": 1.5, "qty": 1, "tags": ["x", "y"], "p": {"a": 1, "b": None}},
            {"sym": "B", "px": None, "qty": 2, "tags": None, "p": None}]
    with sparklog.connect(storage_root) as s:
        s.admin().create_topic("declared", 1, schema=NOT_NULL_SCHEMA)
        with s.producer() as producer:
            producer.send_batch("declared", pa.Table.from_pylist(rows)).get(30)
    df = load(sl_spark, storage_root, subscribe="declared")
    declared = StructType([
        StructField("sym", StringType(), False), StructField("px", DoubleType(), True),
        StructField("qty", LongType(), False),
        StructField("tags", ArrayType(StringType(), containsNull=False), True),
        StructField("p", StructType([StructField("a", IntegerType(), False),
                                     StructField("b", StringType(), True)]), True)])
    assert StructType(df.schema.fields[:5]) == declared
    got = [r.asDict(recursive=True) for r in df.select("sym", "px", "qty", "tags", "p")
           .orderBy("qty").collect()]
    assert got == rows
