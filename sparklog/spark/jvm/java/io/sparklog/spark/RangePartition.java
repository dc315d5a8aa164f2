package io.sparklog.spark;

import java.io.Serializable;
import java.util.Map;

import net.razorvine.pickle.objects.ClassDict;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One JVM task: the offsets {@code [start, end)} of {@code topic}/{@code partition} under the
 * storage root {@code root}; the JVM twin of Python's {@code PlannedRange}, which is
 * pickled under the class name {@link #PYTHON_CLASS}.
 */
public final class RangePartition implements InputPartition, Serializable {
  private static final long serialVersionUID = 1L;
  /** Pickled class name of the planned partitions (PlannedRange) this reader understands. */
  public static final String PYTHON_CLASS = "sparklog.spark.source.planning.OffsetRange";

  public final String topic;
  public final int partition;
  public final long start;
  public final long end;
  public final String root;
  public final boolean failOnDataLoss;
  /** Hosts storing the range's bytes, most first (set at planning; none: no preference). */
  private String[] hosts = new String[0];

  /** A range of one topic-partition. */
  public RangePartition(String topic, int partition, long start, long end, String root,
      boolean failOnDataLoss) {
    this.topic = topic;
    this.partition = partition;
    this.start = start;
    this.end = end;
    this.root = root;
    this.failOnDataLoss = failOnDataLoss;
  }

  /**
   * The range held by an unpickled Python {@code PlannedRange} (pyrolite turns it into a
   * {@link ClassDict} of its dataclass fields); throws {@link IllegalArgumentException}
   * explaining why when the object is not one this reader can take (another class, a
   * missing field, storage options Hadoop would not understand).
   */
  public static RangePartition fromPickled(Object obj) {
    if (!(obj instanceof ClassDict)) {
      throw new IllegalArgumentException("planned partition is a "
          + (obj == null ? "null" : obj.getClass().getName()) + ", not a PlannedRange");
    }
    ClassDict d = (ClassDict) obj;
    if (!PYTHON_CLASS.equals(d.getClassName())) {
      throw new IllegalArgumentException("planned partition is a Python " + d.getClassName()
          + ", not " + PYTHON_CLASS);
    }
    Object options = d.get("storage_options");
    if (options != null && !(options instanceof Map && ((Map<?, ?>) options).isEmpty())) {
      throw new IllegalArgumentException("the range carries storage options " + options
          + " that only the Python storage layer understands");
    }
    return new RangePartition(string(d, "topic"), (int) number(d, "partition"),
        number(d, "start"), number(d, "end"), string(d, "root"), bool(d, "fail_on_data_loss"));
  }

  private static String string(ClassDict d, String key) {
    Object v = d.get(key);
    if (!(v instanceof String)) {
      throw new IllegalArgumentException("PlannedRange field " + key + " is " + v + ", not a str");
    }
    return (String) v;
  }

  private static long number(ClassDict d, String key) {
    Object v = d.get(key);
    if (v instanceof Integer || v instanceof Long) {
      return ((Number) v).longValue();
    }
    if (v instanceof java.math.BigInteger && ((java.math.BigInteger) v).bitLength() < 64) {
      return ((java.math.BigInteger) v).longValue();
    }
    throw new IllegalArgumentException("PlannedRange field " + key + " is " + v + ", not an int");
  }

  private static boolean bool(ClassDict d, String key) {
    Object v = d.get(key);
    if (!(v instanceof Boolean)) {
      throw new IllegalArgumentException("PlannedRange field " + key + " is " + v + ", not a bool");
    }
    return (Boolean) v;
  }

  /** Sets the hosts that store the range's bytes (planning, {@link BlockHosts}). */
  void setHosts(String[] hosts) {
    this.hosts = hosts.clone();
  }

  /** The hosts storing the range's segment blocks, most bytes first: Spark runs the task
   *  on one of them when it has an executor there. */
  @Override
  public String[] preferredLocations() {
    return hosts.clone();
  }

  @Override
  public String toString() {
    return "RangePartition(" + topic + "-" + partition + " [" + start + ", " + end + ") " + root
        + ")";
  }
}
