package io.sparklog.spark;

import java.io.Serializable;
import java.util.Map;

import net.razorvine.pickle.objects.ClassDict;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One JVM task: the offsets {@code [start, end)} of {@code topic}/{@code partition} under the
 * storage root {@code root}. The Python planner sends each range as a versioned descriptor
 * (docs/format.md, "Planned ranges"): {@link #fromPlanned} reads it from the state of the
 * unpickled Python partition, whatever its class, and {@link #fromDescriptor} parses it.
 */
public final class RangePartition implements InputPartition, Serializable {
  private static final long serialVersionUID = 1L;
  /** The descriptor version this reader reads. */
  public static final int DESCRIPTOR_VERSION = 1;
  /** The fields of a version-1 descriptor. */
  static final java.util.List<String> DESCRIPTOR_FIELDS = java.util.List.of("version", "topic",
      "partition", "start", "end", "root", "failOnDataLoss", "storageOptions");
  /** The key of the descriptor in a planned partition's pickled state. */
  static final String STATE_KEY = "descriptor";
  private static final com.fasterxml.jackson.databind.ObjectMapper JSON =
      new com.fasterxml.jackson.databind.ObjectMapper();

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
   * The range of an unpickled Python planned partition: pyrolite makes a {@link ClassDict}
   * of its pickled state, whose {@value #STATE_KEY} is the descriptor (the class is not
   * looked at). Throws {@link IllegalArgumentException} explaining why when it is not one
   * this reader can take.
   */
  public static RangePartition fromPlanned(Object obj) {
    if (!(obj instanceof Map)) {
      throw new IllegalArgumentException("planned partition is a "
          + (obj == null ? "null" : obj.getClass().getName())
          + ", not a planned range (no descriptor)");
    }
    Object descriptor = ((Map<?, ?>) obj).get(STATE_KEY);
    if (!(descriptor instanceof String)) {
      String name = obj instanceof ClassDict ? ((ClassDict) obj).getClassName() : "object";
      throw new IllegalArgumentException("planned partition " + name
          + " carries no planned-range descriptor");
    }
    return fromDescriptor((String) descriptor);
  }

  /**
   * The range a descriptor holds: a JSON object of {@link #DESCRIPTOR_FIELDS} with
   * {@code "version": 1}. Another version, a missing, extra or mistyped field, or storage
   * options (which only the Python storage layer understands) throw
   * {@link IllegalArgumentException} naming the problem.
   */
  public static RangePartition fromDescriptor(String text) {
    com.fasterxml.jackson.databind.JsonNode d;
    try {
      d = JSON.readTree(text);
    } catch (java.io.IOException e) {
      throw new IllegalArgumentException("planned-range descriptor is not JSON: "
          + e.getMessage());
    }
    if (d == null || !d.isObject()) {
      throw new IllegalArgumentException("planned-range descriptor is not a JSON object: "
          + text);
    }
    com.fasterxml.jackson.databind.JsonNode version = d.get("version");
    if (version == null || !version.isInt() || version.intValue() != DESCRIPTOR_VERSION) {
      throw new IllegalArgumentException("planned-range descriptor version " + version
          + " is not known to this JVM reader (it reads version " + DESCRIPTOR_VERSION
          + "; use the jar of the installed sparklog: sparklog spark-jar)");
    }
    java.util.Set<String> names = new java.util.TreeSet<>();
    d.fieldNames().forEachRemaining(names::add);
    if (!names.equals(new java.util.TreeSet<>(DESCRIPTOR_FIELDS))) {
      throw new IllegalArgumentException("planned-range descriptor version "
          + DESCRIPTOR_VERSION + " has fields " + names + ", not "
          + new java.util.TreeSet<>(DESCRIPTOR_FIELDS));
    }
    com.fasterxml.jackson.databind.JsonNode options = d.get("storageOptions");
    if (!options.isObject()) {
      throw new IllegalArgumentException("planned-range descriptor field storageOptions is "
          + options + ", not an object");
    }
    if (options.size() > 0) {
      throw new IllegalArgumentException("the range carries storage options " + options
          + " that only the Python storage layer understands");
    }
    long partition = number(d, "partition");
    if (partition < 0 || partition > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("planned-range descriptor field partition is "
          + partition + ", not a partition number");
    }
    com.fasterxml.jackson.databind.JsonNode fail = d.get("failOnDataLoss");
    if (!fail.isBoolean()) {
      throw new IllegalArgumentException("planned-range descriptor field failOnDataLoss is "
          + fail + ", not a boolean");
    }
    return new RangePartition(string(d, "topic"), (int) partition, number(d, "start"),
        number(d, "end"), string(d, "root"), fail.booleanValue());
  }

  private static String string(com.fasterxml.jackson.databind.JsonNode d, String key) {
    com.fasterxml.jackson.databind.JsonNode v = d.get(key);
    if (!v.isTextual()) {
      throw new IllegalArgumentException("planned-range descriptor field " + key + " is " + v
          + ", not a string");
    }
    return v.textValue();
  }

  private static long number(com.fasterxml.jackson.databind.JsonNode d, String key) {
    com.fasterxml.jackson.databind.JsonNode v = d.get(key);
    if (!v.isIntegralNumber() || !v.canConvertToLong()) {
      throw new IllegalArgumentException("planned-range descriptor field " + key + " is " + v
          + ", not a 64-bit integer");
    }
    return v.longValue();
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
