package io.sparklog.spark;

import java.io.Serializable;

import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/** A batch scan of offset ranges planned by Python, read by {@link SparklogPartitionReader}. */
public class JvmBatch implements Batch {
  private final RangePartition[] ranges;
  private final StructType schema;
  private final Broadcast<SerializableConfiguration> conf;

  /** The batch of {@code ranges} with output {@code schema}. */
  public JvmBatch(RangePartition[] ranges, StructType schema,
      Broadcast<SerializableConfiguration> conf) {
    this.ranges = ranges;
    this.schema = schema;
    this.conf = conf;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return ranges.clone();
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory(schema, conf);
  }

  /** Creates the columnar readers of the tasks (serialized to executors). */
  static final class Factory implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;
    private final StructType schema;
    private final Broadcast<SerializableConfiguration> conf;

    Factory(StructType schema, Broadcast<SerializableConfiguration> conf) {
      this.schema = schema;
      this.conf = conf;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("the sparklog JVM reader is columnar only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new SparklogPartitionReader((RangePartition) partition, schema, conf.value().value());
    }
  }
}
