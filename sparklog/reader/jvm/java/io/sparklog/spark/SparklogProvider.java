package io.sparklog.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("sparklog")} on the JVM: a {@link TableProvider} that delegates everything
 * (schema inference, option checks, planning, filter pushdown, stream offsets, writes) to
 * the Python data source of the same name through Spark's {@link PythonDataSourceV2}, and
 * only runs the read tasks of batch scans and micro-batches on the JVM
 * ({@link SparklogScan}, {@link JvmMicroBatchStream}).
 *
 * <p>Spark's lookup gives a JVM {@link DataSourceRegister} precedence over a Python data
 * source of the same name, so with this jar on the classpath {@code spark.read.format("sparklog")}
 * resolves here. The Python source must still be registered in the session (as without
 * the jar): {@code sparklog.spark.register(spark)} or the {@code pyspark_sparklog} module.
 */
public class SparklogProvider implements TableProvider, DataSourceRegister {
  /** The format name, shared with the Python data source. */
  public static final String SHORT_NAME = "sparklog";

  private final PythonDataSourceV2 delegate;

  /** A provider wrapping a fresh {@link PythonDataSourceV2} named {@value #SHORT_NAME}. */
  public SparklogProvider() {
    delegate = new PythonDataSourceV2();
    delegate.setShortName(SHORT_NAME);
  }

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return delegate.inferSchema(options);
  }

  @Override
  public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
    return delegate.inferPartitioning(options);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return delegate.supportsExternalMetadata();
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new SparklogTable(delegate.getTable(schema, partitioning, properties), delegate);
  }
}
