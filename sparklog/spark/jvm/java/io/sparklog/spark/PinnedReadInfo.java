package io.sparklog.spark;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Python read plan of one scan, kept apart from the other scans of the same DataFrame.
 *
 * <p>Spark 4.1's {@link PythonDataSourceV2} holds a single read plan (the pickled Python
 * reader and its planned partitions) per loaded DataFrame and hands it to every later
 * scan of it: a second action on the DataFrame re-reads the offsets the first one
 * planned, and the plan left by a scan whose filters were pushed (offset, partition,
 * timestamp) is reused by an unfiltered scan, which then silently returns too few rows.
 * Each of our scans therefore pins its own plan: the one its filter pushdown made, or
 * none, so that its batch plans afresh when the query runs ({@link #planBatch}).
 */
final class PinnedReadInfo {
  private final PythonDataSourceV2 ds;
  private final CaseInsensitiveStringMap options;
  private final StructType schema;
  private PythonDataSourceReadInfo pinned;

  /** The plan holder of one scan builder over the provider {@code ds}. */
  PinnedReadInfo(PythonDataSourceV2 ds, CaseInsensitiveStringMap options, StructType schema) {
    this.ds = ds;
    this.options = options;
    this.schema = schema;
  }

  /** Pushes {@code filters} to the Python builder {@code delegate} from a clean state and
   *  pins the plan that pushdown leaves (with its filters); returns the filters Spark must
   *  still evaluate. */
  Filter[] pushFilters(ScanBuilder delegate, Filter[] filters) {
    if (!(delegate instanceof SupportsPushDownFilters)) {
      return filters;
    }
    synchronized (ds) {
      ds.setReadInfo(null);
      Filter[] rest = ((SupportsPushDownFilters) delegate).pushFilters(filters);
      pinned = ds.getOrCreateReadInfo(SparklogProvider.SHORT_NAME, options, schema, false);
      return rest;
    }
  }

  /** True once filters were pushed to the Python builder (its plan then decides what the
   *  scan reads). */
  boolean filtersPushed() {
    return pinned != null;
  }

  /** The partitions the Python batch {@code python} plans with this scan's plan (a fresh
   *  one when no filter was pushed); its reader factory keeps using the same plan. */
  InputPartition[] planBatch(Batch python) {
    synchronized (ds) {
      ds.setReadInfo(pinned);
      return python.planInputPartitions();
    }
  }
}
