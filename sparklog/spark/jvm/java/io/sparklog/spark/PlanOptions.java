package io.sparklog.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The options of a {@code path}-mode batch read that the JVM plans itself
 * ({@link BatchPlanner}): a strict subset of what the Python source accepts
 * ({@code sparklog/spark/source/options.py}), parsed the same way.
 *
 * <p>{@link #parse} answers only for options it is sure the Python source takes with the
 * same meaning: the storage root {@code path} (no broker), one of {@code subscribe},
 * {@code subscribePattern} (a pattern of plain characters both regex dialects read alike)
 * or {@code assign}, {@code startingOffsets}/{@code endingOffsets} ({@code earliest},
 * {@code latest} or per-partition JSON), {@code failOnDataLoss}, {@code includeHeaders},
 * {@code minPartitions}, {@code maxRecordsPerPartition} and {@code sparklog.jvmReader}.
 * Anything else (a broker, timestamps, security or storage options, a value it does not
 * recognise, an invalid one) throws {@link Unsupported}: the Python source then plans the
 * read and gives its own errors, so an option's meaning and its error text have one home.
 */
final class PlanOptions {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** Read option: {@code false} leaves the planning (and schema) to the Python source
   *  (for comparisons; the Python source ignores it). */
  static final String PLANNING_KEY = "sparklog.jvmPlanning";
  /** Read option: {@code false} keeps {@code COUNT(*)} from being pushed down to the scan
   *  ({@link PushedCount}; for comparisons; the Python source ignores it). */
  static final String COUNT_KEY = "sparklog.countPushDown";
  /** Option names (lower case) this parser understands. */
  private static final Set<String> KNOWN = Set.of("path", "subscribe", "subscribepattern",
      "assign", "startingoffsets", "endingoffsets", "failondataloss", "includeheaders",
      "minpartitions", "maxrecordsperpartition", JvmReaderOption.KEY.toLowerCase(Locale.ROOT),
      PLANNING_KEY.toLowerCase(Locale.ROOT), COUNT_KEY.toLowerCase(Locale.ROOT));
  /** Patterns made of these characters mean the same to Java's and Python's regexes. */
  private static final Pattern PLAIN_PATTERN = Pattern.compile("[A-Za-z0-9._\\-*+?|()^$]+");
  /** Kafka's topic names (sparklog/names.py): also a safe single path component. */
  private static final Pattern TOPIC_NAME = Pattern.compile("[A-Za-z0-9._\\-]{1,249}");
  /** Offset specs in JSON: -2 earliest, -1 latest. */
  static final long EARLIEST = -2;
  static final long LATEST = -1;

  /** The options are outside what the JVM plans; the Python source plans the read. */
  static final class Unsupported extends Exception {
    private static final long serialVersionUID = 1L;

    Unsupported(String why) {
      super(why);
    }
  }

  /** An offset spec: {@code earliest}, {@code latest} or per-partition offsets. */
  static final class Spec {
    final String kind;
    /** topic to partition to offset ({@code offsets} only). */
    final Map<String, Map<Integer, Long>> values;

    Spec(String kind, Map<String, Map<Integer, Long>> values) {
      this.kind = kind;
      this.values = values;
    }
  }

  final String root;
  /** {@code subscribe}, {@code subscribePattern} or {@code assign}. */
  final String kind;
  final List<String> topics;
  final Pattern pattern;
  /** topic to sorted partitions ({@code assign}). */
  final Map<String, List<Integer>> assignment;
  final Spec starting;
  final Spec ending;
  final boolean failOnDataLoss;
  final boolean includeHeaders;
  final Integer minPartitions;
  final Integer maxRecordsPerPartition;

  /** Options that change where a read's offsets or bytes come from: a stream's log ends
   *  are the JVM's to find only without them. */
  private static final Set<String> ELSEWHERE = Set.of("bootstrap.servers",
      "kafka.bootstrap.servers");
  private static final String STORAGE_PREFIX = "storage.";

  private PlanOptions(Map<String, String> o, boolean subscriptionOnly) throws Unsupported {
    if (!bool(o.get(PLANNING_KEY.toLowerCase(Locale.ROOT)), true)) {
      throw new Unsupported(PLANNING_KEY + "=false");
    }
    root = o.get("path");
    if (root == null || root.isEmpty()) {
      throw new Unsupported("no option path");
    }
    List<String> given = new ArrayList<>();
    for (String k : new String[] {"subscribe", "subscribepattern", "assign"}) {
      if (o.containsKey(k)) {
        given.add(k);
      }
    }
    if (given.size() != 1) {
      throw new Unsupported("not exactly one of subscribe, subscribePattern, assign");
    }
    kind = given.get(0);
    String raw = o.get(kind);
    List<String> ts = new ArrayList<>();
    Pattern p = null;
    Map<String, List<Integer>> assign = new TreeMap<>();
    if (kind.equals("subscribe")) {
      for (String t : raw.split(",", -1)) {
        if (!t.strip().isEmpty()) {
          ts.add(t.strip());
        }
      }
      if (ts.isEmpty()) {
        throw new Unsupported("subscribe names no topic");
      }
      for (String t : ts) {
        topicName(t);
      }
    } else if (kind.equals("subscribepattern")) {
      if (!PLAIN_PATTERN.matcher(raw).matches()) {
        throw new Unsupported("subscribePattern has characters whose meaning may differ");
      }
      try {
        p = Pattern.compile(raw);
      } catch (RuntimeException e) {
        throw new Unsupported("subscribePattern does not compile: " + e.getMessage());
      }
    } else {
      JsonNode doc = object(raw);
      for (Map.Entry<String, JsonNode> e : doc.properties()) {
        topicName(e.getKey());
        JsonNode parts = e.getValue();
        if (!parts.isArray() || parts.size() == 0) {
          throw new Unsupported("assign: not a list of partitions");
        }
        TreeSet<Integer> nums = new TreeSet<>();
        for (JsonNode n : parts) {
          if (!n.isIntegralNumber() || !n.canConvertToInt() || n.asInt() < 0) {
            throw new Unsupported("assign: a partition is not a non-negative integer");
          }
          nums.add(n.asInt());
        }
        assign.put(e.getKey(), new ArrayList<>(nums));
      }
      if (assign.isEmpty()) {
        throw new Unsupported("assign names no topic");
      }
    }
    topics = Collections.unmodifiableList(ts);
    pattern = p;
    assignment = assign;
    if (subscriptionOnly) {
      starting = null;
      ending = null;
      failOnDataLoss = true;
      includeHeaders = false;
      minPartitions = null;
      maxRecordsPerPartition = null;
      return;
    }
    starting = spec(o.get("startingoffsets"), "earliest");
    ending = spec(o.get("endingoffsets"), "latest");
    if (starting.kind.equals("latest") || ending.kind.equals("earliest")
        || contains(starting, LATEST) || contains(ending, EARLIEST)) {
      throw new Unsupported("offsets not valid for a batch query");
    }
    failOnDataLoss = bool(o.get("failondataloss"), true);
    includeHeaders = bool(o.get("includeheaders"), false);
    minPartitions = positive(o.get("minpartitions"));
    maxRecordsPerPartition = positive(o.get("maxrecordsperpartition"));
  }

  /** The options of {@code options} the JVM plans, or {@link Unsupported} saying why not. */
  static PlanOptions parse(CaseInsensitiveStringMap options) throws Unsupported {
    Map<String, String> lower = new HashMap<>();
    for (Map.Entry<String, String> e : options.asCaseSensitiveMap().entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT);
      if (!KNOWN.contains(key)) {
        throw new Unsupported("option " + e.getKey() + " is planned by the Python source");
      }
      if (e.getValue() != null) {
        lower.put(key, e.getValue());
      }
    }
    return new PlanOptions(lower, false);
  }

  /** The storage root and subscription of a read of any kind (a stream's), other options
   *  ignored; {@link Unsupported} when its offsets come from a broker or its storage
   *  needs options (Kerberos) only the Python storage layer takes. */
  static PlanOptions parseSubscription(CaseInsensitiveStringMap options) throws Unsupported {
    Map<String, String> lower = new HashMap<>();
    for (Map.Entry<String, String> e : options.asCaseSensitiveMap().entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT);
      if (ELSEWHERE.contains(key) || key.startsWith(STORAGE_PREFIX)) {
        throw new Unsupported("option " + e.getKey() + " is the Python source's");
      }
      if (e.getValue() != null) {
        lower.put(key, e.getValue());
      }
    }
    return new PlanOptions(lower, true);
  }

  /** True if {@code topic} is selected by the subscription. */
  boolean matches(String topic) {
    if (pattern != null) {
      return pattern.matcher(topic).matches();
    }
    return kind.equals("assign") ? assignment.containsKey(topic) : topics.contains(topic);
  }

  private static boolean contains(Spec s, long value) {
    for (Map<Integer, Long> parts : s.values.values()) {
      if (parts.containsValue(value)) {
        return true;
      }
    }
    return false;
  }

  /** Refuses what sparklog/names.py would refuse as a topic name. */
  static void topicName(String name) throws Unsupported {
    if (!TOPIC_NAME.matcher(name).matches() || name.equals(".") || name.equals("..")) {
      throw new Unsupported("topic name " + name + " is checked by the Python source");
    }
  }

  private static JsonNode object(String raw) throws Unsupported {
    JsonNode doc;
    try {
      doc = JSON.readTree(raw);
    } catch (java.io.IOException e) {
      throw new Unsupported("not valid JSON");
    }
    if (doc == null || !doc.isObject()) {
      throw new Unsupported("not a JSON object");
    }
    return doc;
  }

  private static Spec spec(String raw, String dflt) throws Unsupported {
    String text = raw == null ? dflt : raw.strip();
    String lower = text.toLowerCase(Locale.ROOT);
    if (lower.equals("earliest") || lower.equals("latest")) {
      return new Spec(lower, Map.of());
    }
    if (!text.startsWith("{")) {
      throw new Unsupported("offsets are neither earliest, latest nor JSON");
    }
    Map<String, Map<Integer, Long>> values = new TreeMap<>();
    JsonNode doc = object(text);
    for (Map.Entry<String, JsonNode> e : doc.properties()) {
      topicName(e.getKey());
      if (!e.getValue().isObject()) {
        throw new Unsupported("offsets of a topic are not a JSON object");
      }
      Map<Integer, Long> parts = new TreeMap<>();
      for (Map.Entry<String, JsonNode> pe : e.getValue().properties()) {
        if (!pe.getKey().matches("[0-9]{1,9}")) {
          throw new Unsupported("a partition is not a plain number");
        }
        JsonNode v = pe.getValue();
        if (!v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < EARLIEST) {
          throw new Unsupported("an offset is not an integer >= -2");
        }
        if (parts.put(Integer.parseInt(pe.getKey()), v.asLong()) != null) {
          throw new Unsupported("a partition is given twice");
        }
      }
      values.put(e.getKey(), parts);
    }
    return new Spec("offsets", values);
  }

  /** Whether {@link #COUNT_KEY} lets a count be pushed down (default true). */
  static boolean countPushDown(CaseInsensitiveStringMap options) throws Unsupported {
    return bool(options.get(COUNT_KEY), true);
  }

  private static boolean bool(String raw, boolean dflt) throws Unsupported {
    if (raw == null) {
      return dflt;
    }
    String v = raw.strip().toLowerCase(Locale.ROOT);
    if (v.equals("true") || v.equals("1") || v.equals("yes")) {
      return true;
    }
    if (v.equals("false") || v.equals("0") || v.equals("no")) {
      return false;
    }
    throw new Unsupported("not a boolean: " + raw);
  }

  private static Integer positive(String raw) throws Unsupported {
    if (raw == null) {
      return null;
    }
    String v = raw.strip();
    if (!v.matches("[0-9]{1,9}") || Integer.parseInt(v) <= 0) {
      throw new Unsupported("not a positive integer: " + raw);
    }
    return Integer.parseInt(v);
  }
}
