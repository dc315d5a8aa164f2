package io.sparklog.spark;

import java.util.Arrays;
import java.util.List;

import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.DataTypes;

/** Column names of the source's output and of frame bodies (see docs/format.md). */
final class Columns {
  static final String TOPIC = "topic";
  static final String PARTITION = "partition";
  static final String OFFSET = "offset";
  static final String TIMESTAMP = "timestamp";
  static final String TIMESTAMP_TYPE = "timestampType";
  static final String HEADERS = "headers";
  /** Frame body column of CreateTime timestamps (timestamp[ms, UTC]). */
  static final String BODY_TIMESTAMP = "__timestamp";
  /** Frame body column of explicit offset deltas (int32), attribute bit 6. */
  static final String BODY_OFFSET_DELTA = "__offset_delta";

  private static final List<String> METADATA =
      Arrays.asList(TOPIC, PARTITION, OFFSET, TIMESTAMP, TIMESTAMP_TYPE);

  /** Record shape of raw topics: key, value binary, headers list<struct<key string, value binary>>. */
  static final Schema RAW_SCHEMA = new Schema(Arrays.asList(
      Field.nullable("key", ArrowType.Binary.INSTANCE),
      Field.nullable("value", ArrowType.Binary.INSTANCE),
      new Field(HEADERS, FieldType.nullable(ArrowType.List.INSTANCE), Arrays.asList(
          new Field("item", FieldType.nullable(ArrowType.Struct.INSTANCE), Arrays.asList(
              Field.nullable("key", ArrowType.Utf8.INSTANCE),
              Field.nullable("value", ArrowType.Binary.INSTANCE)))))));


  private Columns() {
  }

  /** Spark's Kafka source schema, every column nullable ({@code headers} last when asked):
   *  the Python source's {@code kafka_schema} (sparklog/spark/source/schema.py). */
  static org.apache.spark.sql.types.StructType kafkaSchema(boolean includeHeaders) {
    org.apache.spark.sql.types.StructType s = new org.apache.spark.sql.types.StructType()
        .add("key", DataTypes.BinaryType).add("value", DataTypes.BinaryType)
        .add(TOPIC, DataTypes.StringType).add(PARTITION, DataTypes.IntegerType)
        .add(OFFSET, DataTypes.LongType).add(TIMESTAMP, DataTypes.TimestampType)
        .add(TIMESTAMP_TYPE, DataTypes.IntegerType);
    if (includeHeaders) {
      s = s.add(HEADERS, DataTypes.createArrayType(new org.apache.spark.sql.types.StructType()
          .add("key", DataTypes.StringType).add("value", DataTypes.BinaryType)));
    }
    return s;
  }

  /** True for the metadata columns the reader computes (not read from frame bodies). */
  static boolean isMetadata(String name) {
    return METADATA.contains(name);
  }

  /** The record column {@code name} of a topic ({@code record} null: a raw topic), or null. */
  static Field recordField(Schema record, String name) {
    Schema s = record == null ? RAW_SCHEMA : record;
    for (Field f : s.getFields()) {
      if (f.getName().equals(name)) {
        return f;
      }
    }
    return null;
  }
}
