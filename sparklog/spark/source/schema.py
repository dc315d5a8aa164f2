"""Output schema of the ``sparklog`` Spark source and the shaping of log batches into it.

Raw topics give exactly the columns of Spark's Kafka source::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int [, headers array<struct<key string, value binary>>]

Typed topics give their own columns followed by the metadata columns ``topic, partition,
offset, timestamp, timestampType``, with the nullability the topic's schema declares
(``nullable=False`` for a ``not null`` column, struct field, list element or map value:
the producer and the broker refuse nulls there, see ``sparklog/format/nullability.py``). Batches handed to Spark carry exactly the Arrow types
Spark declares for that schema (``timestamp[us, tz=UTC]``, ``int32`` partitions...).
"""

from __future__ import annotations

import pyarrow as pa

from ...errors import SchemaMismatchError
from ...format.frame import TIMESTAMP_COLUMN
from ...log.reader import OFFSET_COLUMN, TIMESTAMP_TYPE_COLUMN

METADATA_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType")


def _metadata_fields() -> list:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, TimestampType

    return [StructField("topic", StringType()), StructField("partition", IntegerType()),
            StructField("offset", LongType()), StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType())]


def kafka_schema(include_headers: bool = False):
    """Spark's Kafka source schema (``headers`` last when ``include_headers``)."""
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              *_metadata_fields()]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")


def _spark_type(t: pa.DataType) -> pa.DataType:
    """An Arrow type Spark can take that holds every value of ``t`` (unsigned ints widen,
    large/dictionary/view variants narrow to their plain form)."""
    if pa.types.is_dictionary(t):
        return _spark_type(t.value_type)
    if pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_uint64(t):
        return pa.decimal128(20, 0)
    if pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return pa.string()
    if pa.types.is_large_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return SPARK_TIMESTAMP
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(_spark_field(t.value_field))
    if pa.types.is_struct(t):
        return pa.struct([_spark_field(f) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_spark_type(t.key_type), _spark_field(t.item_field))
    return t


def _spark_field(f: pa.Field) -> pa.Field:
    """``f`` with its type as :func:`_spark_type` makes it, nullability kept."""
    return pa.field(f.name, _spark_type(f.type), f.nullable)


def spark_schema(record_schema: pa.Schema | None, include_headers: bool = False):
    """The Spark StructType the source outputs: Kafka's for raw topics (``record_schema``
    None), else the typed columns plus the metadata columns. SchemaMismatchError when a
    typed topic has a column Spark cannot hold or a name clashing with a metadata column."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructType

    if record_schema is None:
        return kafka_schema(include_headers)

    clash = sorted(set(record_schema.names) & set(METADATA_COLUMNS))
    if clash:
        raise SchemaMismatchError(
            f"typed topic columns {clash} clash with the metadata columns of the source "
            f"({', '.join(METADATA_COLUMNS)})")
    out = StructType()
    for f in record_schema:
        try:
            out.add(f.name, from_arrow_type(_spark_type(f.type)), nullable=f.nullable)
        except Exception as exc:  # pyspark raises PySparkTypeError for unsupported types
            raise SchemaMismatchError(
                f"column {f.name!r} of type {f.type} cannot be read by Spark: {exc}") from None
    for meta in _metadata_fields():
        out.add(meta)
    return out


def arrow_schema(schema) -> pa.Schema:
    """The Arrow schema Spark expects for batches of the StructType ``schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


def _constant(value, n: int, type_: pa.DataType) -> pa.Array:
    """An array of ``n`` copies of ``value`` (built in C++, not a Python list)."""
    return pa.nulls(n, type_).fill_null(pa.scalar(value, type_))


class BatchShaper:
    """Turns the log reader's batches of one topic-partition (record columns,
    ``__timestamp``, ``__offset``, ``__timestamp_type``) into batches of the output
    schema: adds topic/partition, renames the metadata columns, casts to Spark's types
    and orders the columns."""

    def __init__(self, topic: str, partition: int, target: pa.Schema):
        self.topic = topic
        self.partition = partition
        self.target = target

    def shape(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The output batch for one log batch (same rows, same order)."""
        n = batch.num_rows
        names = batch.schema.names
        columns = []
        for f in self.target:
            name = f.name
            if name == "topic":
                col = _constant(self.topic, n, f.type)
            elif name == "partition":
                col = _constant(self.partition, n, f.type)
            elif name == "offset":
                col = batch.column(names.index(OFFSET_COLUMN))
            elif name == "timestamp":
                col = batch.column(names.index(TIMESTAMP_COLUMN))
            elif name == "timestampType":
                col = batch.column(names.index(TIMESTAMP_TYPE_COLUMN))
            elif name in names:
                col = batch.column(names.index(name))
            elif name == "headers":
                col = pa.nulls(n, f.type)
            else:
                raise SchemaMismatchError(
                    f"topic {self.topic!r} partition {self.partition}: the log has no column "
                    f"{name!r} (log columns: {names})")
            if not col.type.equals(f.type):
                col = _cast(col, f.type, self.topic, self.partition, name)
            columns.append(col)
        return pa.RecordBatch.from_arrays(columns, schema=self.target)


def _cast(col, type_, topic, partition, name):
    import pyarrow.compute as pc  # here: planner processes need no compute kernels

    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    try:
        return pc.cast(col, type_, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(
            f"topic {topic!r} partition {partition}: column {name!r} of type {col.type} "
            f"cannot be converted to {type_}: {exc}") from None
