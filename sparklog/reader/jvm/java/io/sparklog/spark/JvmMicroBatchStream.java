package io.sparklog.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.AcceptsLatestSeenOffset;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The micro-batch stream of {@code format("sparklog")}: offsets, admission control,
 * planning and commits stay the Python stream's; each micro-batch whose planned ranges
 * the JVM reader can read ({@link PlannedRanges}) runs on {@link SparklogPartitionReader},
 * any other on the Python reader (the decision is per micro-batch, all or nothing).
 * The session's Hadoop configuration (built once, broadcast once) and the topics' record
 * schemas, once checked, are kept for the stream's life instead of being made, read and
 * sent again for each micro-batch.
 */
public class JvmMicroBatchStream implements MicroBatchStream, AcceptsLatestSeenOffset {
  private static final Logger LOG = LoggerFactory.getLogger(JvmMicroBatchStream.class);

  private final MicroBatchStream delegate;
  private final StructType schema;
  private final Map<String, Schema> checkedTopics = new HashMap<>();
  private Configuration hadoopConf;
  private Broadcast<SerializableConfiguration> broadcastConf;
  private String lastFallback;

  /** Wraps the Python stream {@code delegate}, whose rows have {@code schema}. */
  public JvmMicroBatchStream(MicroBatchStream delegate, StructType schema) {
    this.delegate = delegate;
    this.schema = schema;
  }

  @Override
  public Offset initialOffset() {
    return delegate.initialOffset();
  }

  @Override
  public Offset latestOffset() {
    return delegate.latestOffset();
  }

  @Override
  public void setLatestSeenOffset(Offset offset) {
    if (delegate instanceof AcceptsLatestSeenOffset) {
      ((AcceptsLatestSeenOffset) delegate).setLatestSeenOffset(offset);
    }
  }

  @Override
  public Offset deserializeOffset(String json) {
    return delegate.deserializeOffset(json);
  }

  @Override
  public void commit(Offset end) {
    delegate.commit(end);
  }

  @Override
  public void stop() {
    delegate.stop();
  }

  /** The micro-batch's ranges as JVM partitions, or the Python partitions unchanged. */
  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    InputPartition[] planned = delegate.planInputPartitions(start, end);
    try {
      return PlannedRanges.convert(planned, schema, conf(), checkedTopics);
    } catch (Exception e) {
      String why = e.getMessage() == null ? e.toString() : e.getMessage();
      if (!why.equals(lastFallback)) {
        LOG.info("sparklog: micro-batches run on the Python reader: {}", why);
        lastFallback = why;
      }
      return planned;
    }
  }

  /** Reads JVM ranges on the JVM and Python partitions through the Python factory. */
  @Override
  public PartitionReaderFactory createReaderFactory() {
    PartitionReaderFactory python = delegate.createReaderFactory();
    if (broadcastConf == null) {
      try {
        broadcastConf = SparklogScan.broadcast(conf());
      } catch (RuntimeException e) {  // no session here: planning fell back to Python too
        return python;
      }
    }
    return new Factory(new JvmBatch.Factory(schema, broadcastConf), python);
  }

  /** The active session's Hadoop configuration, made on first use. */
  private Configuration conf() {
    if (hadoopConf == null) {
      hadoopConf = SparklogScan.hadoopConf();
    }
    return hadoopConf;
  }

  @Override
  public String toString() {
    return "sparklog stream [JVM columnar reader where it can, else Python] over " + delegate;
  }

  /** Dispatches on the kind of partition (one kind per micro-batch). */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final PartitionReaderFactory jvm;
    private final PartitionReaderFactory python;

    Factory(PartitionReaderFactory jvm, PartitionReaderFactory python) {
      this.jvm = jvm;
      this.python = python;
    }

    private PartitionReaderFactory of(InputPartition partition) {
      return partition instanceof RangePartition ? jvm : python;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return of(partition).supportColumnarReads(partition);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return of(partition).createReader(partition);
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return of(partition).createColumnarReader(partition);
    }
  }
}
