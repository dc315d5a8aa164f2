package io.sparklog.spark;

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The read option {@value #KEY}: {@code false} keeps a batch scan on the Python reader. */
public final class JvmReaderOption {
  /** Option name (case-insensitive); default {@code true}. */
  public static final String KEY = "sparklog.jvmReader";

  private JvmReaderOption() {
  }

  /** True unless the option is set to {@code false}; a value other than true/false fails. */
  public static boolean enabled(CaseInsensitiveStringMap options) {
    String raw = options.get(KEY);
    if (raw == null) {
      return true;
    }
    String v = raw.trim().toLowerCase(java.util.Locale.ROOT);
    if (v.equals("true")) {
      return true;
    }
    if (v.equals("false")) {
      return false;
    }
    throw new IllegalArgumentException("option " + KEY + "=" + raw + " must be true or false");
  }
}
