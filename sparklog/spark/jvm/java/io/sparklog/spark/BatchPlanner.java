package io.sparklog.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Plans a {@code path}-mode batch scan on the JVM: the offset ranges Python's
 * {@code sparklog.spark.source.planning.plan_batch} makes for the same options and log,
 * read through Hadoop's {@link FileSystem} (topic configs, the live segments of each
 * partition directory, the log start checkpoint, the log end: {@link LogEnd}), so that a
 * batch read starts no Python process on the driver.
 *
 * <p>The rules are Python's: JSON offsets name every partition of the subscription, -2/-1
 * map to the log start / end, ranges are split by {@code maxRecordsPerPartition} then
 * {@code minPartitions} with cut points snapped to segment bases within a quarter piece.
 * Whatever would make Python warn or fail (a missing topic or partition, a range below
 * the log start, an end beyond the log, options {@link PlanOptions} leaves to Python)
 * throws {@link PlanOptions.Unsupported}, and the Python planner plans that scan: one
 * home for every message.
 */
public final class BatchPlanner {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** Most partitions whose logs are read at the same time (as the Python catalog). */
  static final int PLANNING_THREADS = 16;

  private BatchPlanner() {
  }

  /** What planning needs of one topic-partition's log. */
  static final class Snapshot {
    final String topic;
    final int partition;
    final long logStart;
    final long highWatermark;
    /** Base offsets of the live segments, ascending. */
    final long[] bases;
    /** When planning to count: the frames of an active last segment (else null). */
    final RecordCount.ActiveFrames active;
    /** When planning to count: the sound summary of each sealed segment, by the index of
     *  {@link #bases} (null entries: none; the array null when not counting). */
    final RecordCount.Sealed[] sealed;

    Snapshot(String topic, int partition, long logStart, long highWatermark, long[] bases,
        RecordCount.ActiveFrames active, RecordCount.Sealed[] sealed) {
      this.topic = topic;
      this.partition = partition;
      this.logStart = logStart;
      this.highWatermark = highWatermark;
      this.bases = bases;
      this.active = active;
      this.sealed = sealed;
    }
  }

  /** A planned batch scan: its ranges and the snapshots of the partitions they read. */
  static final class Planned {
    final List<RangePartition> ranges;
    final List<Snapshot> snapshots;

    Planned(List<RangePartition> ranges, List<Snapshot> snapshots) {
      this.ranges = ranges;
      this.snapshots = snapshots;
    }
  }

  /** The ranges of the batch scan {@code options}, or {@link PlanOptions.Unsupported}. */
  static List<RangePartition> plan(CaseInsensitiveStringMap options, Configuration conf)
      throws IOException, PlanOptions.Unsupported {
    return plan(options, conf, false).ranges;
  }

  /** As {@link #plan(CaseInsensitiveStringMap, Configuration)}, with snapshots that also
   *  hold what {@link RecordCount} counts from: the frames of each active segment (found
   *  by the same walk that finds the log end) and the summaries of the sealed ones. */
  static Planned planToCount(CaseInsensitiveStringMap options, Configuration conf)
      throws IOException, PlanOptions.Unsupported {
    return plan(options, conf, true);
  }

  private static Planned plan(CaseInsensitiveStringMap options, Configuration conf,
      boolean counting) throws IOException, PlanOptions.Unsupported {
    PlanOptions o = PlanOptions.parse(options);
    FileSystem fs = LogFiles.fileSystem(o.root, conf);
    Map<String, Integer> topics = subscribed(fs, o);
    List<String[]> keys = partitionKeys(o, topics);
    checkSpec(o.starting, keys);
    checkSpec(o.ending, keys);
    List<Snapshot> states = snapshots(fs, o.root, keys, counting);
    List<RangePartition> ranges = new ArrayList<>();
    Map<String, long[]> bases = new TreeMap<>();
    for (Snapshot s : states) {
      long start = resolve(o.starting, s);
      long end = resolve(o.ending, s);
      if (end > s.highWatermark || start > end || start < s.logStart) {
        throw new PlanOptions.Unsupported(s.topic + "-" + s.partition
            + ": the range needs the Python planner's checks");
      }
      if (end > start) {
        ranges.add(new RangePartition(s.topic, s.partition, start, end, o.root,
            o.failOnDataLoss));
      }
      bases.put(s.topic + "\u0000" + s.partition, s.bases);
    }
    return new Planned(split(ranges, bases, o.minPartitions, o.maxRecordsPerPartition),
        states);
  }

  /**
   * The ranges the JVM plans for {@code options} as text, one
   * {@code topic-partition:[start,end)} per line, or {@code "unsupported: <why>"}: lets
   * tests and operators compare them with the Python planner's.
   */
  public static String describe(Map<String, String> options, Configuration conf)
      throws IOException {
    try {
      StringBuilder s = new StringBuilder();
      for (RangePartition r : plan(new CaseInsensitiveStringMap(options), conf)) {
        s.append(r.topic).append('-').append(r.partition).append(":[").append(r.start)
            .append(',').append(r.end).append(")\n");
      }
      return s.toString();
    } catch (PlanOptions.Unsupported e) {
      return "unsupported: " + e.getMessage();
    }
  }

  /**
   * The schema of a read of raw topics, found without Python: Spark's Kafka source
   * schema when {@link PlanOptions} takes {@code options} and every subscribed topic
   * exists and is raw; {@link PlanOptions.Unsupported} otherwise (typed topics, a missing
   * topic, options only Python checks: the Python source infers the schema then).
   */
  static org.apache.spark.sql.types.StructType rawSchema(CaseInsensitiveStringMap options,
      Configuration conf) throws IOException, PlanOptions.Unsupported {
    PlanOptions o = PlanOptions.parse(options);
    FileSystem fs = LogFiles.fileSystem(o.root, conf);
    Map<String, Integer> topics = subscribed(fs, o);
    if (topics.isEmpty()) {
      throw new PlanOptions.Unsupported("no topic matches the subscription");
    }
    for (String t : topics.keySet()) {
      if (LogFiles.topicSchema(fs, o.root, t) != null) {
        throw new PlanOptions.Unsupported("topic " + t + " is typed");
      }
    }
    return Columns.kafkaSchema(o.includeHeaders);
  }

  /**
   * The log end offset of every partition the subscription of {@code options} selects
   * now, as a stream offset ({topic: {partition: offset}}): what the Python stream's
   * uncapped {@code latestOffset()} answers, read without starting Python (the end of an
   * AvailableNow run). {@link PlanOptions.Unsupported} when Python must answer (a broker,
   * a missing topic, storage the JVM does not read as Python does).
   */
  static com.fasterxml.jackson.databind.node.ObjectNode logEnds(
      CaseInsensitiveStringMap options, Configuration conf)
      throws IOException, PlanOptions.Unsupported {
    PlanOptions o = PlanOptions.parseSubscription(options);
    FileSystem fs = LogFiles.fileSystem(o.root, conf);
    List<String[]> keys = partitionKeys(o, subscribed(fs, o));
    com.fasterxml.jackson.databind.node.ObjectNode out = JSON.createObjectNode();
    for (Snapshot s : snapshots(fs, o.root, keys, false)) {
      com.fasterxml.jackson.databind.node.ObjectNode parts =
          out.has(s.topic) ? (com.fasterxml.jackson.databind.node.ObjectNode) out.get(s.topic)
              : out.putObject(s.topic);
      parts.put(Integer.toString(s.partition), s.highWatermark);
    }
    return out;
  }

  /** (topic, partition) of every partition the subscription selects among
   *  {@code topics} ({topic: partition count}), sorted as the Python planner sorts. */
  private static List<String[]> partitionKeys(PlanOptions o, Map<String, Integer> topics) {
    List<String[]> keys = new ArrayList<>();
    for (Map.Entry<String, Integer> e : topics.entrySet()) {
      List<Integer> parts = new ArrayList<>();
      if (o.kind.equals("assign")) {
        parts.addAll(o.assignment.get(e.getKey()));
      } else {
        for (int p = 0; p < e.getValue(); p++) {
          parts.add(p);
        }
      }
      for (int p : parts) {
        keys.add(new String[] {e.getKey(), Integer.toString(p)});
      }
    }
    keys.sort((a, b) -> a[0].equals(b[0])
        ? Integer.compare(Integer.parseInt(a[1]), Integer.parseInt(b[1])) : a[0].compareTo(b[0]));
    return keys;
  }

  /** {@link #logEnds} of {@code options} as JSON, or {@code "unsupported: <why>"} (for
   *  tests and operators, beside the Python stream's uncapped latest offset). */
  public static String describeLogEnds(Map<String, String> options, Configuration conf)
      throws IOException {
    try {
      return logEnds(new CaseInsensitiveStringMap(options), conf).toString();
    } catch (PlanOptions.Unsupported e) {
      return "unsupported: " + e.getMessage();
    }
  }

  /** {topic: partition count} selected by the subscription (sorted by name). */
  private static Map<String, Integer> subscribed(FileSystem fs, PlanOptions o)
      throws IOException, PlanOptions.Unsupported {
    List<String> names = new ArrayList<>();
    if (o.pattern != null) {
      FileStatus[] listed;
      try {
        listed = fs.listStatus(LogFiles.path(o.root, "topics"));
      } catch (FileNotFoundException e) {
        throw new PlanOptions.Unsupported("no topics directory under " + o.root);
      }
      for (FileStatus st : listed) {
        String name = st.getPath().getName();
        if (st.isDirectory() && o.matches(name)) {
          PlanOptions.topicName(name);
          names.add(name);
        }
      }
    } else if (o.kind.equals("assign")) {
      names.addAll(o.assignment.keySet());
    } else {
      names.addAll(o.topics);
    }
    Map<String, Integer> out = new TreeMap<>();
    for (String t : names) {
      Integer partitions = partitionCount(fs, o.root, t);
      if (partitions == null) {
        if (o.pattern != null) {
          continue;  // a directory without a config is no topic (yet), as in Python
        }
        throw new PlanOptions.Unsupported("topic " + t + " does not exist");
      }
      if (o.kind.equals("assign")) {
        List<Integer> assigned = o.assignment.get(t);
        if (assigned.get(assigned.size() - 1) >= partitions) {
          throw new PlanOptions.Unsupported("assigned partitions of " + t + " do not exist");
        }
      }
      out.put(t, partitions);
    }
    return out;
  }

  /** The partition count of the topic's latest config, null when it has none. */
  private static Integer partitionCount(FileSystem fs, String root, String topic)
      throws IOException, PlanOptions.Unsupported {
    Path latest;
    try {
      latest = LogFiles.latestVersion(fs, LogFiles.path(root, "topics", topic, "config"),
          ".json");
    } catch (FileNotFoundException e) {
      return null;
    }
    if (latest == null) {
      return null;
    }
    JsonNode doc = JSON.readTree(LogFiles.readAll(fs, latest));
    JsonNode n = doc.get("partitions");
    if (n == null || !n.canConvertToInt() || n.asInt() < 1) {
      throw new PlanOptions.Unsupported("config of " + topic + " has no partition count");
    }
    return n.asInt();
  }

  /** JSON offsets must give exactly the subscription's partitions (Python names the rest). */
  private static void checkSpec(PlanOptions.Spec spec, List<String[]> keys)
      throws PlanOptions.Unsupported {
    if (!spec.kind.equals("offsets")) {
      return;
    }
    int named = 0;
    for (Map<Integer, Long> parts : spec.values.values()) {
      named += parts.size();
    }
    for (String[] k : keys) {
      Map<Integer, Long> parts = spec.values.get(k[0]);
      if (parts == null || !parts.containsKey(Integer.parseInt(k[1]))) {
        throw new PlanOptions.Unsupported("offsets miss " + k[0] + "-" + k[1]);
      }
    }
    if (named != keys.size()) {
      throw new PlanOptions.Unsupported("offsets name partitions outside the subscription");
    }
  }

  private static long resolve(PlanOptions.Spec spec, Snapshot s) {
    if (spec.kind.equals("earliest")) {
      return s.logStart;
    }
    if (spec.kind.equals("latest")) {
      return s.highWatermark;
    }
    long off = spec.values.get(s.topic).get(s.partition);
    return off == PlanOptions.EARLIEST ? s.logStart
        : off == PlanOptions.LATEST ? s.highWatermark : off;
  }

  /** The snapshots of {@code keys} (topic, partition), read in parallel. */
  private static List<Snapshot> snapshots(FileSystem fs, String root, List<String[]> keys,
      boolean counting) throws IOException, PlanOptions.Unsupported {
    if (keys.size() <= 1) {
      List<Snapshot> out = new ArrayList<>();
      for (String[] k : keys) {
        out.add(snapshot(fs, root, k[0], Integer.parseInt(k[1]), counting));
      }
      return out;
    }
    ExecutorService pool = Executors.newFixedThreadPool(Math.min(keys.size(), PLANNING_THREADS));
    try {
      List<Future<Snapshot>> futures = new ArrayList<>();
      for (String[] k : keys) {
        futures.add(pool.submit(() -> snapshot(fs, root, k[0], Integer.parseInt(k[1]),
            counting)));
      }
      List<Snapshot> out = new ArrayList<>();
      for (Future<Snapshot> f : futures) {
        try {
          out.add(f.get());
        } catch (ExecutionException e) {
          Throwable cause = e.getCause();
          if (cause instanceof PlanOptions.Unsupported) {
            throw (PlanOptions.Unsupported) cause;
          }
          if (cause instanceof IOException) {
            throw (IOException) cause;
          }
          throw new IOException(cause);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IOException("interrupted while planning", e);
        }
      }
      return out;
    } finally {
      pool.shutdownNow();
    }
  }

  static Snapshot snapshot(FileSystem fs, String root, String topic, int partition,
      boolean counting) throws IOException, PlanOptions.Unsupported {
    Path dir = LogFiles.partitionDir(root, topic, partition);
    List<LogFiles.Segment> segments;
    try {
      segments = LogFiles.listSegments(fs, dir);
    } catch (FileNotFoundException e) {
      throw new PlanOptions.Unsupported("no directory " + dir);
    }
    long start = LogFiles.logStartOffset(fs, dir, segments);
    boolean active = !segments.isEmpty() && !segments.get(segments.size() - 1).hasIndex;
    RecordCount.ActiveFrames frames = counting && active ? new RecordCount.ActiveFrames() : null;
    long end = LogEnd.of(fs, segments, start, frames);
    long[] bases = new long[segments.size()];
    RecordCount.Sealed[] sealed = counting ? new RecordCount.Sealed[bases.length] : null;
    for (int i = 0; i < bases.length; i++) {
      LogFiles.Segment seg = segments.get(i);
      bases[i] = seg.baseOffset;
      if (sealed != null && seg.hasIndex && seg.baseOffset < end) {
        sealed[i] = RecordCount.Sealed.of(fs, seg);
      }
    }
    return new Snapshot(topic, partition, start, end, bases, frames, sealed);
  }

  // --- splitting: planning.py's split_ranges, _split and _snap, rule for rule ---------------

  static List<RangePartition> split(List<RangePartition> ranges, Map<String, long[]> bases,
      Integer minPartitions, Integer maxRecords) {
    List<RangePartition> out = new ArrayList<>();
    for (RangePartition r : ranges) {
      if (r.end - r.start > 0) {
        out.add(r);
      }
    }
    if (maxRecords != null) {
      List<RangePartition> pieces = new ArrayList<>();
      for (RangePartition r : out) {
        long parts = (long) Math.ceil((double) (r.end - r.start) / maxRecords);
        pieces.addAll(splitOne(r, parts, basesOf(bases, r), maxRecords));
      }
      out = pieces;
    }
    if (minPartitions != null && out.size() < minPartitions) {
      long total = 0;
      for (RangePartition r : out) {
        total += r.end - r.start;
      }
      if (total > 0) {
        List<RangePartition> pieces = new ArrayList<>();
        for (RangePartition r : out) {
          long parts = Math.max(1,
              (long) Math.rint((double) (r.end - r.start) / total * minPartitions));
          pieces.addAll(splitOne(r, parts, basesOf(bases, r), maxRecords));
        }
        out = pieces;
      }
    }
    return out;
  }

  private static long[] basesOf(Map<String, long[]> bases, RangePartition r) {
    long[] b = bases.get(r.topic + "\u0000" + r.partition);
    return b == null ? new long[0] : b;
  }

  private static List<RangePartition> splitOne(RangePartition r, long parts, long[] bases,
      Integer limit) {
    long size = r.end - r.start;
    if (parts <= 1 || size <= 1) {
      return List.of(r);
    }
    List<Long> points = new ArrayList<>();
    points.add(r.start);
    for (long left = Math.min(parts, size) - 1; left > 0; left--) {
      long prev = points.get(points.size() - 1);
      double step = (double) (r.end - prev) / (left + 1);
      long point = snap(prev + (long) Math.rint(step), prev, r.end, bases, step / 4);
      if (limit != null) {
        point = Math.max(Math.min(point, prev + limit), r.end - limit * left);
      }
      if (prev < point && point < r.end) {
        points.add(point);
      }
    }
    points.add(r.end);
    List<RangePartition> out = new ArrayList<>();
    for (int i = 0; i + 1 < points.size(); i++) {
      out.add(new RangePartition(r.topic, r.partition, points.get(i), points.get(i + 1), r.root,
          r.failOnDataLoss));
    }
    return out;
  }

  /** {@code point} moved to the nearest segment base strictly inside (lo, hi) and within
   *  {@code tolerance} offsets of it (the lower one on a tie), else unchanged. */
  private static long snap(long point, long lo, long hi, long[] bases, double tolerance) {
    int i = lowerBound(bases, point);
    Long best = null;
    for (int j = i - 1; j <= i; j++) {
      if (j >= 0 && j < bases.length && lo < bases[j] && bases[j] < hi
          && Math.abs(bases[j] - point) <= tolerance
          && (best == null || Math.abs(bases[j] - point) < Math.abs(best - point))) {
        best = bases[j];
      }
    }
    return best == null ? point : best;
  }

  /** The first index whose base is >= {@code point} (Python's bisect_left). */
  private static int lowerBound(long[] bases, long point) {
    int lo = 0;
    int hi = bases.length;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (bases[mid] < point) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
}
