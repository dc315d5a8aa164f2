package io.sparklog.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import net.razorvine.pickle.Unpickler;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The scan of {@link SparklogProvider}. Streaming, metrics and planning are the Python
 * scan's; {@link #toBatch()} runs the Python planning, then, when every planned partition
 * is an {@code OffsetRange} this reader understands, the storage root opens through
 * Hadoop and every queried column has a 1:1 Arrow type, returns a JVM columnar batch
 * over the same ranges ({@link SparklogPartitionReader}); otherwise the Python batch.
 */
public class SparklogScan implements Scan {
  private static final Logger LOG = LoggerFactory.getLogger(SparklogScan.class);

  private final Scan delegate;
  private final StructType fullSchema;
  private final StructType readSchema;
  private Batch batch;
  private String reader = "reader chosen when the scan is planned";

  /** Wraps the Python scan; {@code readSchema} is the pruned schema the query needs. */
  public SparklogScan(Scan delegate, StructType fullSchema, StructType readSchema) {
    this.delegate = delegate;
    this.fullSchema = fullSchema;
    this.readSchema = readSchema;
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
    InputPartition[] planned = python.planInputPartitions();
    try {
      List<RangePartition> ranges = new ArrayList<>();
      Unpickler unpickler = new Unpickler();
      for (InputPartition p : planned) {
        if (!(p instanceof PythonInputPartition)) {
          throw new IllegalArgumentException("planned partition is a " + p.getClass().getName());
        }
        Object obj = unpickler.loads(((PythonInputPartition) p).pickedPartition());
        if (obj == null) {
          continue;  // Python's placeholder partition of an empty plan
        }
        ranges.add(RangePartition.fromPickled(obj));
      }
      Configuration conf =
          org.apache.spark.sql.classic.SparkSession.active().sessionState().newHadoopConf();
      checkReadable(ranges, conf);
      Broadcast<SerializableConfiguration> bc = SerializableConfiguration.broadcast(
          org.apache.spark.sql.classic.SparkSession.active().sparkContext(), conf);
      reader = "JVM columnar reader " + SparklogPartitionReader.class.getName()
          + ", " + ranges.size() + " ranges";
      batch = new JvmBatch(ranges.toArray(new RangePartition[0]), readSchema, bc);
    } catch (Exception e) {
      String why = e.getMessage() == null ? e.toString() : e.getMessage();
      LOG.info("sparklog: batch scan runs on the Python reader: {}", why);
      reader = "Python reader: " + why;
      batch = readSchema.equals(fullSchema) ? python
          : new ProjectingBatch(python, planned, fullSchema, readSchema);
    }
    return batch;
  }

  /** Throws with the reason when a range cannot be read by the JVM reader. */
  private void checkReadable(List<RangePartition> ranges, Configuration conf) throws Exception {
    Map<String, Schema> schemas = new HashMap<>();
    for (RangePartition r : ranges) {
      FileSystem fs = LogFiles.fileSystem(r.root, conf);  // throws for a scheme Hadoop lacks
      String key = r.root + "\u0000" + r.topic;
      if (!schemas.containsKey(key)) {
        Schema s = LogFiles.topicSchema(fs, r.root, r.topic);
        schemas.put(key, s);
        checkColumns(r.topic, s);
      }
    }
  }

  private void checkColumns(String topic, Schema record) {
    for (StructField f : readSchema.fields()) {
      if (Columns.isMetadata(f.name())) {
        continue;
      }
      Field arrow = Columns.recordField(record, f.name());
      if (arrow == null) {
        if (record == null && f.name().equals("headers")) {
          continue;
        }
        throw new IllegalArgumentException("topic " + topic + " has no column " + f.name());
      }
      if (!ArrowTypes.direct(arrow, f.dataType())) {
        throw new IllegalArgumentException("column " + f.name() + " of topic " + topic
            + " has Arrow type " + arrow + ", which the JVM reader does not map 1:1 to "
            + f.dataType().simpleString());
      }
    }
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return delegate.toMicroBatchStream(checkpointLocation);
  }

  @Override
  public ContinuousStream toContinuousStream(String checkpointLocation) {
    return delegate.toContinuousStream(checkpointLocation);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    // declared whichever reader runs (Spark may ask before toBatch()); zero on Python
    CustomMetric[] python = delegate.supportedCustomMetrics();
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
