package io.sparklog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.zip.CRC32C;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;

/**
 * The number of records a batch scan of planned ranges returns, found on the driver from
 * the files' own metadata, without the tasks: the frame headers of each active segment
 * up to the ranges' end ({@link ActiveFrames#walk}) and the {@code .index} summary of
 * each sealed segment ({@link Sealed}: its record count, usable
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

  /** Bytes read at once while walking frames smaller than {@link #SKIP_BODY_BYTES}. */
  static final int CHUNK_BYTES = 8 << 20;
  /** A frame at least this large has its body skipped by a new read at the next header
   *  (a read costs about what reading this many bytes does). */
  static final int SKIP_BODY_BYTES = 512 << 10;
  /** Bytes read at the next header after a skipped body. */
  static final int HEADER_READ_BYTES = 64 << 10;
  /** Most partitions whose files are read at the same time. */
  static final int THREADS = 16;

  /** The frames of an active segment as {@link #walk} found them, in order. */
  static final class ActiveFrames {
    private long[] base = new long[64];
    private long[] last = new long[64];
    private int[] records = new int[64];
    private byte[] kind = new byte[64];
    private int n;
    /** Offsets from here on were not walked (a frame the walk could not take, or the end
     *  of the visible bytes): a read counts them. */
    private long walkedTo;

    /**
     * The frames of the active segment {@code seg} whose offsets start below
     * {@code until}, from its frame headers: control frames and frames with explicit
     * offsets are read whole and CRC-checked (what the row scan checks of them decides
     * whether their count is sure). The walk stops at a frame that is cut off by the end
     * of the visible bytes (being written) or that it cannot take (an inconsistent
     * header, an offset gap it does not expect): what follows is left to the tasks.
     */
    static ActiveFrames walk(FileSystem fs, LogFiles.Segment seg, long until)
        throws IOException {
      ActiveFrames frames = new ActiveFrames();
      try (FSDataInputStream in = fs.open(seg.log)) {
        long end = LogFiles.visibleLength(fs, seg.log, in);
        byte[] window = new byte[0];
        long windowStart = 0;
        long pos = 0;
        long expected = seg.baseOffset;
        int want = SKIP_BODY_BYTES;  // until a frame shows the size: a header's read
        while (expected < until && end - pos >= FrameHeader.SIZE) {
          if (pos < windowStart || pos + FrameHeader.SIZE > windowStart + window.length) {
            int chunk = want < SKIP_BODY_BYTES ? CHUNK_BYTES : HEADER_READ_BYTES;
            window = new byte[(int) Math.min(chunk, end - pos)];
            in.readFully(pos, window, 0, window.length);
            windowStart = pos;
          }
          ByteBuffer h = ByteBuffer.wrap(window, (int) (pos - windowStart), FrameHeader.SIZE)
              .slice();
          int length = FrameHeader.length(h);
          long size = (long) length + FrameHeader.LOG_OVERHEAD;
          if (length < FrameHeader.SIZE - FrameHeader.LOG_OVERHEAD || size > end - pos) {
            break;
          }
          int count = FrameHeader.recordCount(h);
          int delta = FrameHeader.lastOffsetDelta(h);
          long base = FrameHeader.baseOffset(h);
          boolean explicit = !FrameHeader.implicitOffsets(h);
          if (!FrameHeader.knownMagic(h) || count <= 0 || delta < count - 1
              || !FrameHeader.knownCodec(h)
              || !(base == expected || (base > expected && explicit))) {
            break;
          }
          frames.add(base, base + delta, count, kind(in, h, pos, (int) size));
          want = (int) size;
          expected = base + delta + 1;
          pos += size;
        }
        frames.walkedTo = expected;
      }
      return frames;
    }

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
     *  the frames they cannot, and of what was not walked, are added to {@code unknown},
     *  in offset order. */
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
      if (hi > walkedTo) {
        unknown.add(new long[] {Math.max(lo, walkedTo), hi});
      }
      return total;
    }
  }

  /** The {@link RecordCount} kind of the frame of header {@code h} at {@code pos}: what the
   *  row scan checks of it (a header alone for implicit offsets, the whole frame's CRC32C
   *  for control frames and explicit offsets: an Arrow frame's bit 6, a Kafka batch whose
   *  records' offset deltas leave gaps) decides whether its count is sure. */
  private static byte kind(FSDataInputStream in, ByteBuffer h, long pos, int size)
      throws IOException {
    int attributes = FrameHeader.attributes(h);
    boolean kafka = FrameHeader.magic(h) == KafkaBatch.MAGIC;
    if ((attributes & FrameHeader.CONTROL_BIT) == 0
        && (kafka || (attributes & FrameHeader.EXPLICIT_OFFSETS_BIT) == 0)) {
      if (FrameHeader.lastOffsetDelta(h) == FrameHeader.recordCount(h) - 1) {
        return IMPLICIT;
      }
      if (!kafka) {
        return UNSURE;
      }
    }
    byte[] frame = new byte[size];
    in.readFully(pos, frame, 0, size);
    CRC32C crc = new CRC32C();
    crc.update(frame, FrameHeader.CRC_START, size - FrameHeader.CRC_START);
    if ((int) crc.getValue() != FrameHeader.crc(ByteBuffer.wrap(frame))) {
      return UNSURE;
    }
    return (attributes & FrameHeader.CONTROL_BIT) != 0 ? CONTROL : EXPLICIT;
  }

  /** What counting needs of one topic-partition's files: the base offsets of its live
   *  segments, the sound summary of each sealed one and the frames of an active last
   *  one. */
  static final class Snapshot {
    /** Base offsets of the live segments, ascending. */
    final long[] bases;
    /** The frames of an active last segment (else null). */
    final ActiveFrames active;
    /** The sound summary of each sealed segment, by the index of {@link #bases} (null
     *  entries: none). */
    final Sealed[] sealed;

    Snapshot(long[] bases, ActiveFrames active, Sealed[] sealed) {
      this.bases = bases;
      this.active = active;
      this.sealed = sealed;
    }

    /** The snapshot of {@code topic}/{@code partition} under {@code root} as far as the
     *  offset {@code until} (the end of the ranges counted). */
    static Snapshot of(FileSystem fs, String root, String topic, int partition, long until)
        throws IOException {
      List<LogFiles.Segment> segments =
          LogFiles.listSegments(fs, LogFiles.partitionDir(root, topic, partition));
      long[] bases = new long[segments.size()];
      Sealed[] sealed = new Sealed[bases.length];
      ActiveFrames active = null;
      for (int i = 0; i < bases.length; i++) {
        LogFiles.Segment seg = segments.get(i);
        bases[i] = seg.baseOffset;
        if (seg.baseOffset >= until) {
          continue;
        }
        if (seg.hasIndex) {
          sealed[i] = Sealed.of(fs, seg);
        } else if (i == bases.length - 1) {
          active = ActiveFrames.walk(fs, seg, until);
        }
      }
      return new Snapshot(bases, active, sealed);
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
   * The records the row scan of {@code ranges} returns, counted from a {@link Snapshot} of
   * each of their partitions (read in parallel through {@code conf}'s file systems) where
   * it says it exactly, and the pieces of the ranges where it does not (a sealed segment
   * without a usable count or only partly in a range, a frame the row scan might refuse
   * or cut by a range with explicit offsets, offsets beyond the walked frames).
   */
  static Split split(List<RangePartition> ranges, Configuration conf) throws IOException {
    Map<String, List<RangePartition>> byPartition = new TreeMap<>();
    for (RangePartition r : ranges) {
      byPartition.computeIfAbsent(r.root + "\u0000" + r.topic + "\u0000" + r.partition,
          k -> new ArrayList<>()).add(r);
    }
    Map<String, Snapshot> snapshotOf = snapshots(byPartition, conf);
    long known = 0;
    List<RangePartition> rest = new ArrayList<>();
    for (Map.Entry<String, List<RangePartition>> e : byPartition.entrySet()) {
      List<RangePartition> mine = e.getValue();
      mine.sort((a, b) -> Long.compare(a.start, b.start));
      Snapshot s = snapshotOf.get(e.getKey());
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
  /** A {@link Snapshot} of each partition of {@code byPartition} (key: root, topic and
   *  partition), as far as its ranges reach. */
  private static Map<String, Snapshot> snapshots(Map<String, List<RangePartition>> byPartition,
      Configuration conf) throws IOException {
    Map<String, Snapshot> out = new TreeMap<>();
    if (byPartition.isEmpty()) {
      return out;
    }
    ExecutorService pool = Executors.newFixedThreadPool(Math.min(byPartition.size(), THREADS));
    try {
      Map<String, Future<Snapshot>> futures = new TreeMap<>();
      for (Map.Entry<String, List<RangePartition>> e : byPartition.entrySet()) {
        RangePartition any = e.getValue().get(0);
        long until = 0;
        for (RangePartition r : e.getValue()) {
          until = Math.max(until, r.end);
        }
        long end = until;
        FileSystem fs = LogFiles.fileSystem(any.root, conf);
        futures.put(e.getKey(), pool.submit(
            () -> Snapshot.of(fs, any.root, any.topic, any.partition, end)));
      }
      for (Map.Entry<String, Future<Snapshot>> e : futures.entrySet()) {
        try {
          out.put(e.getKey(), e.getValue().get());
        } catch (ExecutionException ex) {
          Throwable cause = ex.getCause();
          throw cause instanceof IOException ? (IOException) cause : new IOException(cause);
        } catch (InterruptedException ex) {
          Thread.currentThread().interrupt();
          throw new IOException("interrupted while counting", ex);
        }
      }
      return out;
    } finally {
      pool.shutdownNow();
    }
  }

  private static long count(Snapshot s, long lo, long hi, List<long[]> unknown) {
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
      Sealed sum = s.sealed[i];
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
