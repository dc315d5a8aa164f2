package io.sparklog.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Wraps the Python source's scan builder: filters are pushed to it unchanged (Python keeps
 * deciding which it takes) and the plan they leave is pinned to this scan
 * ({@link PinnedReadInfo}); column pruning is handled here, by whole top-level columns
 * (the JVM reader decodes only what the query needs; the Python fallback projects).
 * A {@code COUNT(*)} with no filter pushed, over ranges the JVM reader can read, is pushed
 * down ({@link PushedCount}): answered on the driver when the files' metadata gives the
 * exact count of the Python planner's ranges, else counted by the tasks.
 */
public class SparklogScanBuilder implements ScanBuilder, SupportsPushDownFilters,
    SupportsPushDownRequiredColumns, SupportsPushDownAggregates {
  private final ScanBuilder delegate;
  private final CaseInsensitiveStringMap options;
  private final StructType fullSchema;
  private final PinnedReadInfo plan;
  private StructType required;
  /** The count considered for push-down of {@link #countOf}, once asked (empty: not
   *  pushable). */
  private java.util.Optional<PushedCount> count;
  private Aggregation countOf;
  private boolean countPushed;

  /** A builder over the Python source's {@code delegate} for a table of {@code fullSchema},
   *  whose Python read plan {@code plan} holds. */
  SparklogScanBuilder(ScanBuilder delegate, CaseInsensitiveStringMap options,
      StructType fullSchema, PinnedReadInfo plan) {
    this.delegate = delegate;
    this.options = options;
    this.fullSchema = fullSchema;
    this.required = fullSchema;
    this.plan = plan;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    if (filters.length == 0) {
      return filters;  // nothing to push: no Python planning needed for it
    }
    return plan.pushFilters(delegate, filters);
  }

  @Override
  public Filter[] pushedFilters() {
    if (delegate instanceof SupportsPushDownFilters) {
      return ((SupportsPushDownFilters) delegate).pushedFilters();
    }
    return new Filter[0];
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    Set<String> names = new HashSet<>();
    for (StructField f : requiredSchema.fields()) {
      names.add(f.name());
    }
    List<StructField> kept = new ArrayList<>();
    for (StructField f : fullSchema.fields()) {
      if (names.contains(f.name())) {
        kept.add(f);  // whole column: nested pruning is left to Spark's projection
      }
    }
    required = new StructType(kept.toArray(new StructField[0]));
  }

  /** The pushed count of {@code agg}, planned once per aggregation (Spark asks twice). */
  private PushedCount count(Aggregation agg) {
    if (count == null || !agg.equals(countOf)) {
      count = java.util.Optional.ofNullable(PushedCount.of(agg, fullSchema, options,
          plan.filtersPushed(), conf -> PlannedRanges.convert(
              plan.planBatch(delegate.build().toBatch()), new StructType(), conf)));
      countOf = agg;
    }
    return count.orElse(null);
  }

  /** True when the driver knows the exact count of the scan (see {@link PushedCount}). */
  @Override
  public boolean supportCompletePushDown(Aggregation agg) {
    PushedCount c = count(agg);
    return c != null && c.complete();
  }

  /** Takes COUNT(*) and COUNT of never-null columns, ungrouped, when no filter was pushed
   *  and the JVM reader can read the planned ranges. */
  @Override
  public boolean pushAggregation(Aggregation agg) {
    countPushed = count(agg) != null;
    return countPushed;
  }

  @Override
  public Scan build() {
    if (countPushed) {
      return count.get().scan();
    }
    Scan scan = delegate.build();
    boolean jvm = JvmReaderOption.enabled(options);
    // only the JVM reader prunes; with the opt-out the Python scan reads every column
    return new SparklogScan(scan, fullSchema, jvm ? required : fullSchema, plan, jvm, options);
  }
}
