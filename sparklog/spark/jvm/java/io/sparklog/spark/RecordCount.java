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
 * would reject) is left to the tasks as pieces of the ranges ({@link #split}).
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

    /** Records of {@code [lo, hi)} in these frames that their headers count; the spans of
     *  the frames they cannot are added to {@code unknown}, in offset order. */
    long count(long lo, long hi, List<long[]> unknown) {
      long total = 0;
      for (int i = 0; i < n; i++) {
        if (last[i] < lo || base[i] >= hi || kind[i] == CONTROL) {
          continue;
        }
        if (kind[i] != UNSURE && lo <= base[i] && last[i] < hi) {
          total += records[i];
        } else if (kind[i] == IMPLICIT) {
          total += Math.min(hi, last[i] + 1) - Math.max(lo, base[i]);
        } else {
          // a frame the row scan may refuse, or explicit offsets cut by the range: a read
          unknown.add(new long[] {Math.max(lo, base[i]), Math.min(hi, last[i] + 1)});
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

  /** What the driver counted of a scan, and the pieces of its ranges left to the tasks. */
  static final class Split {
    /** Records counted from the planning's snapshots. */
    final long known;
    /** Pieces of the planned ranges only a read can count (in the ranges' order). */
    final List<RangePartition> rest;

    Split(long known, List<RangePartition> rest) {
      this.known = known;
      this.rest = rest;
    }
  }

  /**
   * The records the row scan of {@code ranges} returns, counted from the {@code snapshots}
   * planning took of their partitions (with their frames and summaries:
   * {@link BatchPlanner#planToCount}) where they say it exactly, and the pieces of the
   * ranges where they do not (a sealed segment without a usable count or only partly in a
   * range, a frame the row scan might refuse or cut by a range with explicit offsets).
   */
  static Split split(List<RangePartition> ranges, List<BatchPlanner.Snapshot> snapshots) {
    Map<String, BatchPlanner.Snapshot> snapshotOf = new TreeMap<>();
    for (BatchPlanner.Snapshot s : snapshots) {
      snapshotOf.put(s.topic + "\u0000" + s.partition, s);
    }
    Map<String, List<RangePartition>> byPartition = new TreeMap<>();
    for (RangePartition r : ranges) {
      byPartition.computeIfAbsent(r.topic + "\u0000" + r.partition, k -> new ArrayList<>())
          .add(r);
    }
    long known = 0;
    List<RangePartition> rest = new ArrayList<>();
    for (Map.Entry<String, List<RangePartition>> e : byPartition.entrySet()) {
      List<RangePartition> mine = e.getValue();
      mine.sort((a, b) -> Long.compare(a.start, b.start));
      BatchPlanner.Snapshot s = snapshotOf.get(e.getKey());
      // the ranges of a partition joined where they meet (a split counts as the whole)
      List<long[]> unknown = new ArrayList<>();
      long[] span = null;
      for (RangePartition r : mine) {
        if (span != null && span[1] == r.start) {
          span[1] = r.end;
          continue;
        }
        if (span != null) {
          known += count(s, span[0], span[1], unknown);
        }
        span = new long[] {r.start, r.end};
      }
      if (span != null) {
        known += count(s, span[0], span[1], unknown);
      }
      for (RangePartition r : mine) {  // what is unknown, cut as the planner split it
        long[] open = null;
        for (long[] u : unknown) {
          long lo = Math.max(r.start, u[0]);
          long hi = Math.min(r.end, u[1]);
          if (lo >= hi) {
            continue;
          }
          if (open != null && open[1] == lo) {
            open[1] = hi;
            continue;
          }
          if (open != null) {
            rest.add(piece(r, open));
          }
          open = new long[] {lo, hi};
        }
        if (open != null) {
          rest.add(piece(r, open));
        }
      }
    }
    return new Split(known, rest);
  }

  private static RangePartition piece(RangePartition r, long[] span) {
    return new RangePartition(r.topic, r.partition, span[0], span[1], r.root, r.failOnDataLoss);
  }

  /** Records of {@code [lo, hi)} in the partition of {@code s} that its snapshot counts;
   *  the spans it cannot count are added to {@code unknown}, in offset order. */
  private static long count(BatchPlanner.Snapshot s, long lo, long hi, List<long[]> unknown) {
    if (s == null) {
      unknown.add(new long[] {lo, hi});
      return 0;
    }
    long total = 0;
    int last = s.bases.length - 1;
    for (int i = 0; i <= last; i++) {
      long base = s.bases[i];
      long bound = i < last ? s.bases[i + 1] : hi;  // no offset of segment i reaches it
      if (base >= hi || bound <= lo) {
        continue;
      }
      if (i == last && s.active != null) {
        total += s.active.count(lo, hi, unknown);
        continue;
      }
      Sealed sum = s.sealed == null ? null : s.sealed[i];
      if (sum != null && sum.nextOffset <= lo) {
        continue;
      }
      if (sum == null || base < lo || sum.nextOffset > hi || sum.dataRecords < 0) {
        // no summary, partly in the range, or a count the summary does not have
        unknown.add(new long[] {Math.max(lo, base), Math.min(hi, bound)});
        continue;
      }
      total += sum.dataRecords;
    }
    return total;
  }
}
