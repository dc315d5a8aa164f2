package io.sparklog.spark;

import java.nio.charset.StandardCharsets;

import org.apache.spark.api.python.PythonUtils$;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.DataSourceManager;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Registers sparklog's Python data source in a session that has none, so that
 * {@code format("sparklog")} works for every query with this jar on the class path and no
 * registration step in the job ({@code spark-submit --jars "$(sparklog spark-jar)" job.py}):
 * the provider delegates planning, filter pushdown, streams and writes to that source.
 *
 * <p>It does what {@code sparklog.spark.register(spark)} does with the jar present: the
 * pushdown source ({@code sparklog.spark.datasource.SparklogPushdownDataSource}) and
 * {@code spark.sql.python.filterPushdown.enabled=true} (safe behind this provider, which
 * pins each scan's plan: {@link PinnedReadInfo}); when the session sets that config to
 * {@code false} itself, the source without pushdown. The source class crosses to Python
 * as a pickled reference to its module and name (pickle's {@code GLOBAL} opcode); the
 * Python workers import it from the environment Spark runs them in
 * ({@code spark.pyspark.python}, {@code PYSPARK_PYTHON}), which must have sparklog
 * installed, as for any Python task. A source already registered (by {@code register},
 * or found by Spark as the {@code pyspark_sparklog} module) is left as it is.
 */
final class PythonSource {
  private static final Logger LOG = LoggerFactory.getLogger(PythonSource.class);

  /** The module of the Python data sources. */
  static final String MODULE = "sparklog.spark.datasource";
  /** The Python source with filter pushdown. */
  static final String PUSHDOWN_CLASS = "SparklogPushdownDataSource";
  /** The Python source without filter pushdown. */
  static final String PLAIN_CLASS = "SparklogDataSource";
  /** PySpark's switch for Python filter pushdown. */
  static final String PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled";

  private PythonSource() {}

  /** Registers the Python source in the active session unless it has one. */
  static void ensureRegistered() {
    SparkSession spark = SparkSession.active();
    DataSourceManager manager = spark.sessionState().dataSourceManager();
    synchronized (manager) {
      if (manager.dataSourceExists(SparklogProvider.SHORT_NAME)) {
        return;
      }
      org.apache.spark.sql.internal.SQLConf conf = spark.sessionState().conf();
      boolean pushdown = !(conf.contains(PUSHDOWN_CONF)
          && "false".equalsIgnoreCase(conf.getConfString(PUSHDOWN_CONF).trim()));
      String cls = pushdown ? PUSHDOWN_CLASS : PLAIN_CLASS;
      UserDefinedPythonDataSource source = new UserDefinedPythonDataSource(
          PythonUtils$.MODULE$.createPythonFunction(pickledClass(MODULE, cls)));
      manager.registerDataSource(SparklogProvider.SHORT_NAME, source);
      if (pushdown) {
        spark.conf().set(PUSHDOWN_CONF, "true");
      }
      LOG.info("sparklog: registered the Python data source {}.{} in this session", MODULE,
          cls);
    }
  }

  /** A pickle (protocol 0) of the class {@code module.name}: a reference by name, which
   *  unpickling imports. */
  static byte[] pickledClass(String module, String name) {
    return ("c" + module + "\n" + name + "\n.").getBytes(StandardCharsets.US_ASCII);
  }
}
