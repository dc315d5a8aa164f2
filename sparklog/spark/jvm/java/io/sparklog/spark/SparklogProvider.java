package io.sparklog.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("sparklog")} on the JVM: a {@link TableProvider} that delegates everything
 * (schema inference, option checks, planning, filter pushdown, stream offsets, writes) to
 * the Python data source of the same name through Spark's {@link PythonDataSourceV2}, and
 * runs the read tasks of batch scans and micro-batches on the JVM
 * ({@link SparklogScan}, {@link JvmMicroBatchStream}). Planning is Python's alone: the
 * JVM reads the ranges the Python planner sends ({@link RangePartition}'s descriptor).
 *
 * <p>Spark's lookup gives a JVM {@link DataSourceRegister} precedence over a Python data
 * source of the same name, so with this jar on the classpath {@code spark.read.format("sparklog")}
 * resolves here. The Python source it delegates to is registered in the session by
 * {@code sparklog.spark.register(spark)}, found by Spark as the {@code pyspark_sparklog}
 * module, or, when neither did, registered here ({@link PythonSource}): with the jar on
 * the class path no job needs a registration step.
 *
 * <p>Batch writes take Spark's V1 path ({@link CreatableRelationProvider}), as Spark's Kafka
 * sink does, so that {@code df.write.format("sparklog").save()} works with the default save
 * mode (ErrorIfExists), which a V2 table cannot accept: {@link #createRelation} refuses
 * Overwrite and Ignore as the Kafka sink does and appends through the Python writer.
 */
public class SparklogProvider
    implements TableProvider, DataSourceRegister, CreatableRelationProvider {
  /** The format name, shared with the Python data source. */
  public static final String SHORT_NAME = "sparklog";

  /**
   * Internal option set by {@link #createRelation} on its own append: the table it gets
   * then offers Spark's V2 batch write (the Python writer). Never passed to Python.
   */
  static final String V2_APPEND = "__sparklog.v2.append";

  /**
   * Internal option given to the Python source with every read's options: a capped Python
   * stream then also reports its uncapped end in its latest-offset answers, under
   * {@link JvmMicroBatchStream#AVAILABLE} ({@code sparklog.spark.source.options}).
   */
  static final String REPORT_AVAILABLE = "__sparklog.reportAvailable";

  /** {@code options} with {@link #REPORT_AVAILABLE} set, as the Python source gets them. */
  static Map<String, String> toPython(Map<String, String> options) {
    Map<String, String> out = new HashMap<>(options);
    out.put(REPORT_AVAILABLE, "true");
    return out;
  }

  /** {@code options} with {@link #REPORT_AVAILABLE} set, as the Python source gets them. */
  static CaseInsensitiveStringMap toPython(CaseInsensitiveStringMap options) {
    return new CaseInsensitiveStringMap(toPython(options.asCaseSensitiveMap()));
  }

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

  /** The Python source's schema (it also checks the options). */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    PythonSource.ensureRegistered();
    return delegate.inferSchema(toPython(options));
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
    PythonSource.ensureRegistered();
    boolean batchWrite = properties.containsKey(V2_APPEND);
    Map<String, String> rest = toPython(properties);
    rest.remove(V2_APPEND);
    return new SparklogTable(delegate.getTable(schema, partitioning, rest), delegate, batchWrite);
  }

  /**
   * A batch write ({@code df.write.format("sparklog")...save()}): Append and ErrorIfExists
   * (the default) append the rows to the topic through the Python writer; Overwrite and
   * Ignore are refused (a topic is an append-only log), as Spark's Kafka sink refuses them.
   */
  @Override
  public BaseRelation createRelation(SQLContext sqlContext, SaveMode mode,
                                     scala.collection.immutable.Map<String, String> parameters,
                                     Dataset<Row> data) {
    if (mode == SaveMode.Overwrite || mode == SaveMode.Ignore) {
      throw new IllegalArgumentException(
          "save mode " + mode.name().toLowerCase(java.util.Locale.ROOT) + " is not supported: "
              + "a topic is an append-only log (use the default mode or mode('append'))");
    }
    Map<String, String> options = new HashMap<>(scala.jdk.javaapi.CollectionConverters.asJava(parameters));
    options.put(V2_APPEND, "true");
    data.write().format(SHORT_NAME).mode(SaveMode.Append).options(options).save();
    StructType schema = data.schema();
    return new BaseRelation() {
      @Override
      public SQLContext sqlContext() {
        return sqlContext;
      }

      @Override
      public StructType schema() {
        return schema;
      }
    };
  }
}
