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
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingInputPartition;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Turns the partitions the Python source planned (batch or micro-batch) into the ranges
 * the JVM reader reads, or explains why it cannot: every planned partition must carry a
 * planned-range descriptor ({@link RangePartition#fromPlanned}), every storage root must open through Hadoop, and every
 * queried record column must have an Arrow type that maps 1:1 to its Spark type. Each
 * range is given the hosts of its segment blocks ({@link BlockHosts}).
 */
final class PlannedRanges {
  private PlannedRanges() {
  }

  /** The JVM ranges of {@code planned}; IllegalArgumentException (or an I/O error) with the
   *  reason when the JVM reader cannot read them all. */
  static RangePartition[] convert(InputPartition[] planned, StructType readSchema,
      Configuration conf) throws Exception {
    return convert(planned, readSchema, conf, new HashMap<>());
  }

  /** As {@link #convert(InputPartition[], StructType, Configuration)}, with the topics
   *  already checked against {@code readSchema} in {@code checked} (root and topic to
   *  record schema; a stream keeps it across its micro-batches). */
  static RangePartition[] convert(InputPartition[] planned, StructType readSchema,
      Configuration conf, Map<String, Schema> checked) throws Exception {
    List<RangePartition> ranges = new ArrayList<>();
    Unpickler unpickler = new Unpickler();
    for (InputPartition p : planned) {
      byte[] pickled;
      if (p instanceof PythonInputPartition) {
        pickled = ((PythonInputPartition) p).pickedPartition();
      } else if (p instanceof PythonStreamingInputPartition
          && ((PythonStreamingInputPartition) p).blockId().isEmpty()) {
        pickled = ((PythonStreamingInputPartition) p).pickedPartition();
      } else {
        throw new IllegalArgumentException("planned partition is a " + p.getClass().getName());
      }
      Object obj = unpickler.loads(pickled);
      if (obj != null) {  // null: Python's placeholder partition of an empty plan
        ranges.add(RangePartition.fromPlanned(obj));
      }
    }
    return finish(ranges, readSchema, conf, checked);
  }

  /** {@code ranges} checked as readable by the JVM
   *  reader ({@code checked} as in {@link #convert(InputPartition[], StructType,
   *  Configuration, Map)}) and given the hosts of their segment blocks. */
  static RangePartition[] finish(List<RangePartition> ranges, StructType readSchema,
      Configuration conf, Map<String, Schema> checked) throws Exception {
    checkReadable(ranges, readSchema, conf, checked);
    Map<String, List<RangePartition>> byRoot = new HashMap<>();
    for (RangePartition r : ranges) {
      byRoot.computeIfAbsent(r.root, k -> new ArrayList<>()).add(r);
    }
    for (Map.Entry<String, List<RangePartition>> e : byRoot.entrySet()) {
      BlockHosts.assign(LogFiles.fileSystem(e.getKey(), conf), e.getValue());
    }
    return ranges.toArray(new RangePartition[0]);
  }

  private static void checkReadable(List<RangePartition> ranges, StructType readSchema,
      Configuration conf, Map<String, Schema> schemas) throws Exception {
    for (RangePartition r : ranges) {
      FileSystem fs = LogFiles.fileSystem(r.root, conf);  // throws for a scheme Hadoop lacks
      String key = r.root + "\u0000" + r.topic;
      if (!schemas.containsKey(key)) {
        Schema s = LogFiles.topicSchema(fs, r.root, r.topic);
        checkColumns(r.topic, s, readSchema);
        schemas.put(key, s);  // only once it passed: a refused topic is checked again
      }
    }
  }

  private static void checkColumns(String topic, Schema record, StructType readSchema) {
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
}
