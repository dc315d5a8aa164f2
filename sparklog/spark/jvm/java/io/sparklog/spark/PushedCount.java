package io.sparklog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A {@code COUNT(*)} (or {@code COUNT(column)} of columns that are never null) pushed down
 * to a batch scan ({@link SparklogScanBuilder}, Spark's {@code SupportsPushDownAggregates}):
 * no filter pushed, the JVM reader on, no grouping, and every range the Python planner
 * planned readable by the JVM reader.
 *
 * <p>Counting is reading, not planning: the ranges are the Python planner's, and
 * {@link RecordCount} counts what it can of them from the files' own metadata (the
 * {@code .index} summaries of sealed segments, the frame headers of active ones). When
 * that is everything, the push-down is complete and the scan is a {@link LocalScan}: the
 * driver returns the single row, no task runs. Otherwise it is partial: each piece of
 * range it could not count is a task that counts it as the row scan reads it
 * ({@link SparklogPartitionReader} with no column: frame headers) and returns one row,
 * one more task returns what the driver counted, and Spark sums the rows.
 */
final class PushedCount {
  private static final Logger LOG = LoggerFactory.getLogger(PushedCount.class);
  /** Read option: {@code false} keeps COUNT(*) from being pushed down (the rows count). */
  static final String OPTION = "sparklog.countPushDown";

  private final StructType schema;
  /** Records the driver counted. */
  private final long known;
  /** Pieces of the planned ranges the tasks count, given their hosts (none: complete). */
  private final RangePartition[] ranges;
  private final Configuration conf;

  private PushedCount(StructType schema, long known, RangePartition[] ranges,
      Configuration conf) {
    this.schema = schema;
    this.known = known;
    this.ranges = ranges;
    this.conf = conf;
  }

  /** The ranges the Python planner planned for the scan, or an exception saying why the
   *  JVM reader cannot read them (see {@link PlannedRanges#convert}). */
  interface Planner {
    RangePartition[] plan(Configuration conf) throws Exception;
  }

  /**
   * The pushed count of {@code agg} over a read of {@code options} whose table schema is
   * {@code fullSchema}, or null when it is not pushed ({@code filtersPushed}, the JVM
   * reader off, {@code sparklog.countPushDown=false}, another aggregate, or ranges the JVM
   * reader cannot read). {@code planner} gives the Python planner's ranges.
   */
  static PushedCount of(Aggregation agg, StructType fullSchema,
      CaseInsensitiveStringMap options, boolean filtersPushed, Planner planner) {
    if (filtersPushed || !JvmReaderOption.enabled(options) || !enabled(options)
        || !countsRows(agg, fullSchema)) {
      return null;
    }
    try {
      Configuration conf = SparklogScan.hadoopConf();
      RangePartition[] planned = planner.plan(conf);
      RecordCount.Split split = RecordCount.split(java.util.List.of(planned), conf);
      RangePartition[] rest = PlannedRanges.finish(split.rest, new StructType(), conf,
          new HashMap<>());
      return new PushedCount(schema(agg), split.known, rest, conf);
    } catch (Exception e) {
      LOG.info("sparklog: count not pushed down: {}", e.toString());
    }
    return null;
  }

  /** The option {@value #OPTION}: true unless {@code false}; another value fails. */
  static boolean enabled(CaseInsensitiveStringMap options) {
    String raw = options.get(OPTION);
    if (raw == null) {
      return true;
    }
    String v = raw.trim().toLowerCase(java.util.Locale.ROOT);
    if (v.equals("true") || v.equals("false")) {
      return v.equals("true");
    }
    throw new IllegalArgumentException("option " + OPTION + "=" + raw + " must be true or false");
  }

  /** Whether the driver knows the count (complete push-down). */
  boolean complete() {
    return ranges.length == 0;
  }

  /** The scan answering the count. */
  Scan scan() {
    return complete() ? new LocalCount() : new TaskCount();
  }

  /** Whether every aggregate of {@code agg} counts the rows: COUNT(*), or COUNT of a
   *  top-level column that is never null, not DISTINCT; and nothing is grouped. */
  static boolean countsRows(Aggregation agg, StructType fullSchema) {
    if (agg.groupByExpressions().length > 0 || agg.aggregateExpressions().length == 0) {
      return false;
    }
    for (AggregateFunc f : agg.aggregateExpressions()) {
      if (f instanceof CountStar) {
        continue;
      }
      if (!(f instanceof Count) || ((Count) f).isDistinct()
          || !(((Count) f).column() instanceof NamedReference)) {
        return false;
      }
      String[] names = ((NamedReference) ((Count) f).column()).fieldNames();
      if (names.length != 1 || !nonNull(fullSchema, names[0])) {
        return false;
      }
    }
    return true;
  }

  /** Whether column {@code name} is never null: a metadata column (the reader sets them
   *  from the frame header for every row, whatever the schema says) or a record column
   *  declared not null (a typed topic's). */
  private static boolean nonNull(StructType schema, String name) {
    for (StructField field : schema.fields()) {
      if (field.name().equals(name)) {
        return !field.nullable() || Columns.isMetadata(name);
      }
    }
    return false;
  }

  /** One non-null long column per aggregate, in order (the names are Spark's). */
  private static StructType schema(Aggregation agg) {
    StructField[] fields = new StructField[agg.aggregateExpressions().length];
    for (int i = 0; i < fields.length; i++) {
      fields[i] = new StructField(agg.aggregateExpressions()[i].toString(), DataTypes.LongType,
          false, org.apache.spark.sql.types.Metadata.empty());
    }
    return new StructType(fields);
  }

  /** The row of {@code count} for every aggregate of {@code width}. */
  static InternalRow row(int width, long count) {
    Object[] values = new Object[width];
    Arrays.fill(values, count);
    return new GenericInternalRow(values);
  }

  /** Complete push-down: the count as one row on the driver. */
  private final class LocalCount implements LocalScan {
    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public InternalRow[] rows() {
      return new InternalRow[] {row(schema.size(), known)};
    }

    @Override
    public String description() {
      return "sparklog [count pushed down: " + known + " records, answered on the driver]";
    }
  }

  /** Partial push-down: one row per piece of range, the count of its task, and one row of
   *  what the driver counted. */
  private final class TaskCount implements Scan, Batch {
    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      return "sparklog [count pushed down: " + known + " records counted on the driver, "
          + ranges.length + " ranges by the tasks]";
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public org.apache.spark.sql.connector.metric.CustomMetric[] supportedCustomMetrics() {
      return ReaderMetrics.supported();
    }

    @Override
    public InputPartition[] planInputPartitions() {
      InputPartition[] all = Arrays.copyOf(ranges, ranges.length + 1, InputPartition[].class);
      all[ranges.length] = new Counted(known);
      return all;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new Factory(schema.size(), SparklogScan.broadcast(conf));
    }
  }

  /** Creates the counting readers of the tasks (serialized to executors). */
  static final class Factory implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;
    private final int width;
    private final Broadcast<SerializableConfiguration> conf;

    Factory(int width, Broadcast<SerializableConfiguration> conf) {
      this.width = width;
      this.conf = conf;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      if (partition instanceof Counted) {
        return new Reader(null, width, ((Counted) partition).records, null);
      }
      return new Reader((RangePartition) partition, width, 0, conf.value().value());
    }
  }

  /** The task of the records the driver counted: returns their number. */
  static final class Counted implements InputPartition {
    private static final long serialVersionUID = 1L;
    final long records;

    Counted(long records) {
      this.records = records;
    }
  }

  /** Counts one range as the row scan reads it (no column: frame headers) and returns the
   *  count, plus {@code counted}, as its single row; no range: {@code counted} alone. */
  static final class Reader implements PartitionReader<InternalRow> {
    private final SparklogPartitionReader rows;
    private final int width;
    private final long counted;
    private InternalRow row;
    private boolean done;

    Reader(RangePartition range, int width, long counted, Configuration conf) {
      this.rows = range == null ? null : new SparklogPartitionReader(range, new StructType(),
          conf);
      this.width = width;
      this.counted = counted;
    }

    @Override
    public boolean next() throws IOException {
      if (done) {
        return false;
      }
      long n = counted;
      while (rows != null && rows.next()) {
        ColumnarBatch b = rows.get();
        n += b.numRows();
      }
      row = row(width, n);
      done = true;
      return true;
    }

    @Override
    public InternalRow get() {
      return row;
    }

    @Override
    public org.apache.spark.sql.connector.metric.CustomTaskMetric[] currentMetricsValues() {
      return rows == null ? ReaderMetrics.values(0, 0, 0) : rows.currentMetricsValues();
    }

    @Override
    public void close() throws IOException {
      if (rows != null) {
        rows.close();
      }
    }
  }
}
