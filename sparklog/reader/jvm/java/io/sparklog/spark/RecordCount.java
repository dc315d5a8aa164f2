package io.sparklog.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.fs.FileSystem;

/**
 * The number of records a batch scan of planned ranges returns, found from what planning
 * already read or reads cheaply, without the tasks: the frames of each active segment
 * (walked by {@link LogEnd} to find the log end, {@link ActiveFrames}) and the
 * {@code .index} summary of each sealed segment ({@link Sealed}: its record count, usable
 * when the summary says the segment holds no control frame). Anything these cannot
 * answer exactly (a sealed segment only partly in the ranges or without that flag, a
 * range cutting through a frame with explicit offsets, a frame whose header the row scan
 * would reject) makes {@link #exact} answer -1: the tasks then count.
 *
 * <p>The count is the row scan's: records of frames that are not control frames
 * (transaction markers), aborted transactions included, with offsets in the ranges.
 */
final class RecordCount {
  /** {@link ActiveFrames} kinds: records with offsets {@code base, base + 1, ...}. */
  static final byte IMPLICIT = 0;
  /** A control frame (transaction marker), read whole and CRC-checked: no rows. */
  static final byte CONTROL = 1;
  /** Records with explicit offsets (compaction), read whole and CRC-checked. */
  static final byte EXPLICIT = 2;
  /** A frame the row scan might refuse (inconsistent header, CRC mismatch). */
  static final byte UNSURE = 3;

  private RecordCount() {
  }

  /** The frames of an active segment as the planning walk found them, in order. */
  static final class ActiveFrames {
    private long[] base = new long[64];
    private long[] last = new long[64];
    private int[] records = new int[64];
    private byte[] kind = new byte[64];
    private int n;

    void add(long frameBase, long lastOffset, int recordCount, byte frameKind) {
      if (n == base.length) {
        base = Arrays.copyOf(base, n * 2);
        last = Arrays.copyOf(last, n * 2);
        records = Arrays.copyOf(records, n * 2);
        kind = Arrays.copyOf(kind, n * 2);
      }
      base[n] = frameBase;
      last[n] = lastOffset;
      records[n] = recordCount;
      kind[n] = frameKind;
      n++;
    }

    /** Records of {@code [lo, hi)} in these frames, or -1 when the headers cannot say. */
    long count(long lo, long hi) {
      long total = 0;
      for (int i = 0; i < n; i++) {
        if (last[i] < lo || base[i] >= hi) {
          continue;
        }
        if (kind[i] == UNSURE) {
          return -1;
        }
        if (kind[i] == CONTROL) {
          continue;
        }
        if (lo <= base[i] && last[i] < hi) {
          total += records[i];
        } else if (kind[i] == IMPLICIT) {
          total += Math.min(hi, last[i] + 1) - Math.max(lo, base[i]);
        } else {
          return -1;  // which of its explicit offsets fall inside: only the body says
        }
      }
      return total;
    }
  }

  /** What the {@code .index} summary of a sealed segment says, when it is sound. */
  static final class Sealed {
    final long nextOffset;
    /** Records of the segment's non-control frames; -1 when the summary does not know
     *  (written without the no-control flag, or with control frames). */
    final long dataRecords;

    Sealed(long nextOffset, long dataRecords) {
      this.nextOffset = nextOffset;
      this.dataRecords = dataRecords;
    }

    /** The summary of {@code seg}'s {@code .index} when it is sound, or null (its first
     *  72 bytes only: {@link LogFiles#validSummary}). */
    static Sealed of(FileSystem fs, LogFiles.Segment seg) {
      ByteBuffer index = LogFiles.validSummary(fs, seg);
      if (index == null) {
        return null;
      }
      boolean noControl = (index.getShort(OffsetIndexHeader.FLAGS_OFFSET)
          & OffsetIndexHeader.FLAG_NO_CONTROL) != 0;
      return new Sealed(index.getLong(OffsetIndexHeader.NEXT_OFFSET_OFFSET),
          noControl ? index.getLong(OffsetIndexHeader.RECORD_COUNT_OFFSET) : -1);
    }
  }

  /**
   * The exact number of records the row scan of {@code ranges} returns, read from the
   * {@code snapshots} planning took of their partitions (with their frames and summaries:
   * {@link BatchPlanner#planToCount}), or -1 when the tasks must count.
   */
  static long exact(List<RangePartition> ranges, List<BatchPlanner.Snapshot> snapshots) {
    Map<String, List<RangePartition>> byPartition = new TreeMap<>();
    for (RangePartition r : ranges) {
      byPartition.computeIfAbsent(r.topic + "\u0000" + r.partition, k -> new ArrayList<>())
          .add(r);
    }
    long total = 0;
    for (BatchPlanner.Snapshot s : snapshots) {
      List<RangePartition> mine = byPartition.get(s.topic + "\u0000" + s.partition);
      if (mine == null) {
        continue;
      }
      long lo = Long.MAX_VALUE;
      long hi = Long.MIN_VALUE;
      long covered = 0;
      for (RangePartition r : mine) {
        lo = Math.min(lo, r.start);
        hi = Math.max(hi, r.end);
        covered += r.end - r.start;
      }
      if (covered != hi - lo) {
        return -1;  // not one contiguous span (the planner's splits always are)
      }
      long n = count(s, lo, hi);
      if (n < 0) {
        return -1;
      }
      total += n;
    }
    return total;
  }

  /** Records of {@code [lo, hi)} in the partition of {@code s}, or -1. */
  private static long count(BatchPlanner.Snapshot s, long lo, long hi) {
    long total = 0;
    int last = s.bases.length - 1;
    for (int i = 0; i <= last; i++) {
      long base = s.bases[i];
      long bound = i < last ? s.bases[i + 1] : Long.MAX_VALUE;  // no offset of it reaches
      if (base >= hi || bound <= lo) {
        continue;
      }
      if (i == last && s.active != null) {
        long n = s.active.count(lo, hi);
        if (n < 0) {
          return -1;
        }
        total += n;
        continue;
      }
      Sealed sum = s.sealed == null ? null : s.sealed[i];
      if (sum == null) {
        return -1;
      }
      if (sum.nextOffset <= lo) {
        continue;
      }
      if (base < lo || sum.nextOffset > hi || sum.dataRecords < 0) {
        return -1;  // partly in the span, or a count the summary does not have
      }
      total += sum.dataRecords;
    }
    return total;
  }
}
