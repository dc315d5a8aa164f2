package io.sparklog.spark;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The scan of {@link SparklogProvider}. Planning, offsets and metrics are the Python scan's
 * (the Python planner is the only planner, in every mode): {@link #toBatch()} runs the
 * Python planning, then, when {@link PlannedRanges}
 * can turn every planned partition into a JVM range, returns a JVM columnar batch over
 * the same ranges ({@link SparklogPartitionReader}); otherwise the Python batch. Streams
 * make the same choice per micro-batch ({@link JvmMicroBatchStream}).
 */
public class SparklogScan implements Scan {
  private static final Logger LOG = LoggerFactory.getLogger(SparklogScan.class);

  private final Scan delegate;
  private final StructType fullSchema;
  private final StructType readSchema;
  private final PinnedReadInfo plan;
  private final boolean jvm;
  private final org.apache.spark.sql.util.CaseInsensitiveStringMap options;
  private Batch batch;
  private String reader = "reader chosen when the scan is planned";

  /** Wraps the Python scan; {@code readSchema} is the pruned schema the query needs,
   *  {@code plan} its Python read plan; {@code jvm} false keeps the tasks on Python. */
  SparklogScan(Scan delegate, StructType fullSchema, StructType readSchema,
      PinnedReadInfo plan, boolean jvm,
      org.apache.spark.sql.util.CaseInsensitiveStringMap options) {
    this.options = options;
    this.delegate = delegate;
    this.fullSchema = fullSchema;
    this.readSchema = readSchema;
    this.plan = plan;
    this.jvm = jvm;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    return "sparklog [" + reader + "]";
  }

  @Override
  public ColumnarSupportMode columnarSupportMode() {
    return ColumnarSupportMode.PARTITION_DEFINED;
  }

  @Override
  public synchronized Batch toBatch() {
    if (batch != null) {
      return batch;
    }
    Batch python = delegate.toBatch();
    InputPartition[] planned = plan.planBatch(python);
    if (!jvm) {
      reader = "Python reader: " + JvmReaderOption.KEY + "=false";
      batch = python;
      return batch;
    }
    try {
      Configuration conf = hadoopConf();
      RangePartition[] ranges = PlannedRanges.convert(planned, readSchema, conf);
      reader = "JVM columnar reader " + SparklogPartitionReader.class.getName()
          + ", " + ranges.length + " ranges";
      batch = new JvmBatch(ranges, readSchema, broadcast(conf));
    } catch (Exception e) {
      String why = e.getMessage() == null ? e.toString() : e.getMessage();
      LOG.info("sparklog: batch scan runs on the Python reader: {}", why);
      reader = "Python reader: " + why;
      batch = readSchema.equals(fullSchema) ? python
          : new ProjectingBatch(python, planned, fullSchema, readSchema);
    }
    return batch;
  }

  /** The session's Hadoop configuration (the storage roots open with it). */
  static Configuration hadoopConf() {
    return org.apache.spark.sql.classic.SparkSession.active().sessionState().newHadoopConf();
  }

  /** {@code conf} broadcast to the tasks. */
  static Broadcast<SerializableConfiguration> broadcast(Configuration conf) {
    return SerializableConfiguration.broadcast(
        org.apache.spark.sql.classic.SparkSession.active().sparkContext(), conf);
  }

  /** The Python stream (offsets, planning, commits), whose micro-batches the JVM reads
   *  when it can ({@link JvmMicroBatchStream}; streaming scans are not column-pruned), and
   *  which runs {@code Trigger.AvailableNow} with caps in several batches either way. */
  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    MicroBatchStream python = delegate.toMicroBatchStream(checkpointLocation);
    return new JvmMicroBatchStream(python, readSchema, jvm && readSchema.equals(fullSchema));
  }

  @Override
  public ContinuousStream toContinuousStream(String checkpointLocation) {
    return delegate.toContinuousStream(checkpointLocation);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    // declared whichever reader runs (Spark may ask before toBatch()); zero on Python
    CustomMetric[] python = delegate.supportedCustomMetrics();
    if (!this.jvm) {
      return python;
    }
    CustomMetric[] jvm = ReaderMetrics.supported();
    CustomMetric[] all = java.util.Arrays.copyOf(python, python.length + jvm.length);
    System.arraycopy(jvm, 0, all, python.length, jvm.length);
    return all;
  }

  @Override
  public CustomTaskMetric[] reportDriverMetrics() {
    return delegate.reportDriverMetrics();
  }
}
