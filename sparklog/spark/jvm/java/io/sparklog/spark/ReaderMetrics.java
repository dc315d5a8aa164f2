package io.sparklog.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/**
 * The task metrics of the JVM reader, summed over a scan's tasks and shown with the scan
 * in Spark's SQL UI: frames read (CRC-checked), their bytes, and the records returned.
 */
public final class ReaderMetrics {
  /** Name of the frames-read metric. */
  public static final String FRAMES = "sparklogFramesRead";
  /** Name of the frame-bytes-read metric. */
  public static final String BYTES = "sparklogBytesRead";
  /** Name of the records-returned metric. */
  public static final String RECORDS = "sparklogRecordsRead";

  private ReaderMetrics() {
  }

  /** The metrics a scan declares (Spark instantiates each class by its name). */
  static CustomMetric[] supported() {
    return new CustomMetric[] {new Frames(), new Bytes(), new Records()};
  }

  /** The current values of one task's counters. */
  static CustomTaskMetric[] values(long frames, long bytes, long records) {
    return new CustomTaskMetric[] {
        value(FRAMES, frames), value(BYTES, bytes), value(RECORDS, records)};
  }

  private static CustomTaskMetric value(String name, long value) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return value;
      }
    };
  }

  /** A summed metric of a fixed name (Spark instantiates the subclasses by name). */
  abstract static class Sum extends CustomSumMetric {
    private final String name;
    private final String description;

    Sum(String name, String description) {
      this.name = name;
      this.description = description;
    }

    @Override
    public String name() {
      return name;
    }

    @Override
    public String description() {
      return description;
    }
  }

  /** Frames read and checked by the scan's tasks. */
  public static final class Frames extends Sum {
    /** The metric. */
    public Frames() {
      super(FRAMES, "sparklog frames read");
    }
  }

  /** Bytes of the frames read by the scan's tasks. */
  public static final class Bytes extends Sum {
    /** The metric. */
    public Bytes() {
      super(BYTES, "sparklog frame bytes read");
    }
  }

  /** Records the scan's tasks returned (sliced to their ranges). */
  public static final class Records extends Sum {
    /** The metric. */
    public Records() {
      super(RECORDS, "sparklog records read");
    }
  }
}
