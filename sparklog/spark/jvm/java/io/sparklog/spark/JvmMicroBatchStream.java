package io.sparklog.spark;

import java.util.HashMap;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

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
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
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
 *
 * <p>{@code Trigger.AvailableNow} ({@link SupportsTriggerAvailableNow}): the offsets
 * available when the run's first micro-batch is planned are taken as the target (when
 * {@code maxOffsetsPerTrigger} / {@code maxBytesPerTrigger} cap the Python stream: the
 * uncapped end its latest-offset answer carries under {@link #AVAILABLE}, asked for by
 * the option {@link SparklogProvider#REPORT_AVAILABLE}; no second Python stream);
 * each micro-batch then ends where the Python stream's capped answer does, clamped to the
 * target, so a capped AvailableNow run drains the backlog in as many batches as the caps
 * need and stops at the target (Spark's Kafka source does the same). Partitions that
 * appear after the start wait for the next run. Spark only sees the capped offsets: the
 * {@link #AVAILABLE} entry is removed from every answer.
 */
public class JvmMicroBatchStream
    implements MicroBatchStream, AcceptsLatestSeenOffset, SupportsTriggerAvailableNow {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static final Logger LOG = LoggerFactory.getLogger(JvmMicroBatchStream.class);

  private final MicroBatchStream delegate;
  private final StructType schema;
  /** The key of the uncapped offsets in a capped Python stream's latest-offset answer. */
  static final String AVAILABLE = "@available";

  private final boolean jvmRead;
  private boolean availableNow;
  private JsonNode availableNowTarget;
  private final Map<String, Schema> checkedTopics = new HashMap<>();
  private Configuration hadoopConf;
  private Broadcast<SerializableConfiguration> broadcastConf;
  private String lastFallback;

  /** Wraps the Python stream {@code delegate}, whose rows have {@code schema}; its
   *  micro-batches are read on the JVM when {@code jvmRead} (and they can be), else on
   *  Python. */
  public JvmMicroBatchStream(MicroBatchStream delegate, StructType schema, boolean jvmRead) {
    this.delegate = delegate;
    this.schema = schema;
    this.jvmRead = jvmRead;
  }

  @Override
  public Offset initialOffset() {
    return delegate.initialOffset();
  }

  @Override
  public Offset latestOffset() {
    ObjectNode latest = tree(delegate.latestOffset());
    latest.remove(AVAILABLE);
    return offset(latest);
  }

  /** The Python stream applies the caps itself; Spark's limit is always "all available". */
  @Override
  public ReadLimit getDefaultReadLimit() {
    return ReadLimit.allAvailable();
  }

  /** The Python stream's next (capped) end, clamped to the AvailableNow target if any
   *  (taken from the first answer of the run: its {@link #AVAILABLE} entry when the
   *  stream is capped, else the answer itself). */
  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    ObjectNode latest = tree(delegate.latestOffset());
    JsonNode available = latest.remove(AVAILABLE);
    if (!availableNow) {
      return offset(latest);
    }
    if (availableNowTarget == null) {
      availableNowTarget = available != null ? available : latest.deepCopy();
    }
    return offset(clamp(latest, start == null ? null : tree(start), availableNowTarget));
  }

  /** The end of the AvailableNow run (the query's progress shows it as latestOffset);
   *  null otherwise. */
  @Override
  public Offset reportLatestOffset() {
    return availableNowTarget == null ? null : offset(availableNowTarget);
  }

  /** This run is an AvailableNow run: its target is taken at its first latest offset. */
  @Override
  public void prepareForTriggerAvailableNow() {
    availableNow = true;
  }

  private Offset offset(JsonNode json) {
    return delegate.deserializeOffset(json.toString());
  }

  private static ObjectNode tree(Offset offset) {
    try {
      return (ObjectNode) JSON.readTree(offset.json());
    } catch (java.io.IOException e) {
      throw new IllegalStateException("sparklog: unreadable stream offset " + offset.json(), e);
    }
  }

  /** {@code latest} ({topic: {partition: offset}}) with each partition at most at its
   *  {@code target} offset; a partition missing from the target stays at its
   *  {@code start} offset, or is left out when the run did not start with it. */
  static ObjectNode clamp(JsonNode latest, JsonNode start, JsonNode target) {
    ObjectNode out = JSON.createObjectNode();
    for (Map.Entry<String, JsonNode> topic : latest.properties()) {
      ObjectNode parts = JSON.createObjectNode();
      for (Map.Entry<String, JsonNode> p : topic.getValue().properties()) {
        JsonNode cap = target.path(topic.getKey()).path(p.getKey());
        JsonNode from = start == null ? null : start.path(topic.getKey()).path(p.getKey());
        if (cap.isNumber()) {
          parts.put(p.getKey(), Math.min(p.getValue().asLong(), cap.asLong()));
        } else if (from != null && from.isNumber()) {
          parts.put(p.getKey(), from.asLong());
        }
      }
      if (parts.size() > 0) {
        out.set(topic.getKey(), parts);
      }
    }
    return out;
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
    if (!jvmRead) {
      return planned;
    }
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
    if (!jvmRead) {
      return python;
    }
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
    return "sparklog stream [" + (jvmRead ? "JVM columnar reader where it can, else Python"
        : "Python reader") + "] over " + delegate;
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
