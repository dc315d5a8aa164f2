package io.sparklog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.fs.BlockLocation;
import org.apache.hadoop.fs.FileSystem;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Data locality of planned ranges: the hosts that store the bytes of a range's segments,
 * from the file system's block locations (the NameNode's, on HDFS), so that Spark runs
 * the task where its bytes are (DataSource V2 {@code InputPartition.preferredLocations}).
 *
 * <p>A range's bytes are estimated per segment: a sealed segment's offsets
 * {@code [base, next base)} are spread evenly over its length, the active (last) segment's
 * over {@code [base, largest planned end)}. The hosts holding the most of those bytes come
 * first; at most {@link #MAX_HOSTS} are reported, as Spark's file scans do. Local file
 * systems report nothing (no hosts to choose from); a failed lookup reports nothing and is
 * logged: locality is a hint, never a reason to fail a scan.
 */
final class BlockHosts {
  private static final Logger LOG = LoggerFactory.getLogger(BlockHosts.class);
  /** Hosts reported per range at most (Spark's FilePartition reports 3). */
  static final int MAX_HOSTS = 3;

  private BlockHosts() {
  }

  /** Sets the preferred hosts of every range of {@code ranges} read through {@code fs}. */
  static void assign(FileSystem fs, List<RangePartition> ranges) {
    if ("file".equals(fs.getUri().getScheme())) {
      return;
    }
    Map<String, List<LogFiles.Segment>> segments = new HashMap<>();
    Map<String, Long> upper = new HashMap<>();
    for (RangePartition r : ranges) {
      upper.merge(key(r), r.end, Math::max);
    }
    for (RangePartition r : ranges) {
      try {
        List<LogFiles.Segment> segs = segments.get(key(r));
        if (segs == null) {
          segs = LogFiles.listSegments(fs, LogFiles.partitionDir(r.root, r.topic, r.partition));
          segments.put(key(r), segs);
        }
        r.setHosts(of(fs, segs, r.start, r.end, upper.get(key(r))));
      } catch (IOException | RuntimeException e) {
        LOG.info("sparklog: no block locations for {}: {}", r, e.toString());
      }
    }
  }

  private static String key(RangePartition r) {
    return r.root + "\u0000" + r.topic + "\u0000" + r.partition;
  }

  /**
   * The hosts holding the most bytes of offsets {@code [start, end)} in {@code segments}
   * (in offset order), the last segment's offsets ending at {@code upper}.
   */
  static String[] of(FileSystem fs, List<LogFiles.Segment> segments, long start, long end,
      long upper) throws IOException {
    Map<String, Long> bytes = new HashMap<>();
    for (int i = 0; i < segments.size(); i++) {
      LogFiles.Segment seg = segments.get(i);
      long next = i + 1 < segments.size() ? segments.get(i + 1).baseOffset
          : Math.max(upper, seg.baseOffset + 1);
      if (next <= start || seg.baseOffset >= end || seg.listedSize <= 0) {
        continue;
      }
      long from = position(seg, next, Math.max(start, seg.baseOffset));
      long to = end >= next ? seg.listedSize : position(seg, next, end);
      if (to <= from) {
        to = Math.min(from + 1, seg.listedSize);  // a tiny range still has a frame
        from = Math.min(from, to - 1);
      }
      for (BlockLocation b : fs.getFileBlockLocations(seg.log, from, to - from)) {
        long overlap = Math.min(to, b.getOffset() + b.getLength()) - Math.max(from, b.getOffset());
        for (String host : b.getHosts()) {
          bytes.merge(host, Math.max(overlap, 1), Long::sum);
        }
      }
    }
    List<Map.Entry<String, Long>> byBytes = new ArrayList<>(bytes.entrySet());
    byBytes.sort((a, b) -> a.getValue().equals(b.getValue()) ? a.getKey().compareTo(b.getKey())
        : Long.compare(b.getValue(), a.getValue()));
    return byBytes.stream().limit(MAX_HOSTS).map(Map.Entry::getKey).toArray(String[]::new);
  }

  /** Estimated file position of {@code offset} in {@code seg}, whose offsets end at
   *  {@code next} (offsets spread evenly over the segment's length). */
  private static long position(LogFiles.Segment seg, long next, long offset) {
    double share = (double) (offset - seg.baseOffset) / (next - seg.baseOffset);
    return Math.max(0, Math.min(seg.listedSize, (long) (share * seg.listedSize)));
  }
}
