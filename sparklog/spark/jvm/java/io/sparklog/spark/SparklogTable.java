package io.sparklog.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The table of {@link SparklogProvider}: the Python source's table (reads, writes, streams)
 * with its scan builder wrapped so batch scans can run on the JVM. Batch writes are offered
 * only to the provider's own append ({@code batchWrite}); any other batch write takes
 * Spark's V1 path to {@link SparklogProvider#createRelation}.
 */
public class SparklogTable implements Table, SupportsRead, SupportsWrite {
  private final Table delegate;
  private final PythonDataSourceV2 provider;
  private final boolean batchWrite;

  /** Wraps the Python data source's table, made by {@code provider}. */
  public SparklogTable(Table delegate, PythonDataSourceV2 provider, boolean batchWrite) {
    this.delegate = delegate;
    this.provider = provider;
    this.batchWrite = batchWrite;
  }

  @Override
  public String name() {
    return delegate.name();
  }

  /** The Python source's schema. Spark 4.1 deprecates {@code Table.schema()} for
   *  {@code columns()}, but the Python source's table defines its schema as a StructType
   *  (its columns derive from it) and the scan and {@code getTable} take one. */
  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return delegate.schema();
  }

  @Override
  public Column[] columns() {
    return delegate.columns();
  }

  @Override
  public Transform[] partitioning() {
    return delegate.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return delegate.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> capabilities = EnumSet.noneOf(TableCapability.class);
    capabilities.addAll(delegate.capabilities());
    if (!batchWrite) {
      capabilities.remove(TableCapability.BATCH_WRITE);
    }
    return capabilities;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    CaseInsensitiveStringMap python = SparklogProvider.toPython(options);
    return new SparklogScanBuilder(((SupportsRead) delegate).newScanBuilder(python), python,
        schema(), new PinnedReadInfo(provider, python, schema()));
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    Map<String, String> options = new HashMap<>(info.options().asCaseSensitiveMap());
    if (options.remove(SparklogProvider.V2_APPEND) == null) {
      return ((SupportsWrite) delegate).newWriteBuilder(info);
    }
    CaseInsensitiveStringMap rest = new CaseInsensitiveStringMap(options);
    return ((SupportsWrite) delegate).newWriteBuilder(new LogicalWriteInfo() {
      @Override
      public CaseInsensitiveStringMap options() {
        return rest;
      }

      @Override
      public String queryId() {
        return info.queryId();
      }

      @Override
      public StructType schema() {
        return info.schema();
      }

      @Override
      public java.util.Optional<StructType> rowIdSchema() {
        return info.rowIdSchema();
      }

      @Override
      public java.util.Optional<StructType> metadataSchema() {
        return info.metadataSchema();
      }
    });
  }
}
