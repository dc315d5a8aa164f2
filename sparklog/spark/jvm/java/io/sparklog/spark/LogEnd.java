package io.sparklog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.zip.CRC32C;

import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;

/**
 * Where a partition's readable log ends (its high watermark in {@code path} mode), as
 * Python's {@code LogReader.offsets()} finds it: the next offset a sealed last segment's
 * {@code .index} records, or, for an active last segment, the offset after the last
 * complete frame of a contiguous scan of its frame headers, the last frame read whole and
 * its CRC32C checked ({@code sparklog/log/scan.py}, {@code FrameScan} with
 * {@code headers_only}). A frame cut off by the end of the visible bytes (being written,
 * or a torn tail) ends the log before it, as there.
 *
 * <p>What the Python reader repairs or reports (a stale or corrupt index, a corrupt frame,
 * a gap in the offsets) throws {@link PlanOptions.Unsupported}: the Python planner then
 * plans the read and says what it found.
 */
final class LogEnd {
  /** Bytes read at once while walking frames smaller than {@link #SKIP_BODY_BYTES}. */
  static final int CHUNK_BYTES = 8 << 20;
  /** A frame at least this large has its body skipped by a new read at the next header
   *  (a read costs about what reading this many bytes does), as the Python scan does. */
  static final int SKIP_BODY_BYTES = 512 << 10;
  /** Bytes read at the next header after a skipped body. */
  static final int HEADER_READ_BYTES = 64 << 10;

  private LogEnd() {
  }

  /** The log end offset of a partition whose live segments are {@code segments} and whose
   *  log starts at {@code logStart}. */
  static long of(FileSystem fs, List<LogFiles.Segment> segments, long logStart)
      throws IOException, PlanOptions.Unsupported {
    return of(fs, segments, logStart, null);
  }

  /** As {@link #of(FileSystem, List, long)}; the frames of an active last segment are
   *  added to {@code frames} (null: not kept) as the row scan would take them, its control
   *  frames and frames with explicit offsets read whole and CRC-checked
   *  ({@link RecordCount}). */
  static long of(FileSystem fs, List<LogFiles.Segment> segments, long logStart,
      RecordCount.ActiveFrames frames) throws IOException, PlanOptions.Unsupported {
    if (segments.isEmpty()) {
      return logStart;
    }
    LogFiles.Segment last = segments.get(segments.size() - 1);
    if (last.hasIndex) {
      ByteBuffer index = LogFiles.validIndex(fs, last);
      if (index == null) {
        throw new PlanOptions.Unsupported(last.log + " has no sound index");
      }
      return index.getLong(OffsetIndexHeader.NEXT_OFFSET_OFFSET);
    }
    return scanActive(fs, last, frames);
  }

  private static long scanActive(FileSystem fs, LogFiles.Segment seg,
      RecordCount.ActiveFrames frames) throws IOException, PlanOptions.Unsupported {
    try (FSDataInputStream in = fs.open(seg.log)) {
      long end = LogFiles.visibleLength(fs, seg.log, in);
      byte[] window = new byte[0];
      long windowStart = 0;
      long pos = 0;
      long expected = seg.baseOffset;
      long lastPos = -1;
      int lastSize = 0;
      int want = SKIP_BODY_BYTES;  // until a frame shows the size: a header's read
      while (end - pos >= FrameHeader.SIZE) {
        if (pos < windowStart || pos + FrameHeader.SIZE > windowStart + window.length) {
          int chunk = want < SKIP_BODY_BYTES ? CHUNK_BYTES : HEADER_READ_BYTES;
          window = new byte[(int) Math.min(chunk, end - pos)];
          in.readFully(pos, window, 0, window.length);
          windowStart = pos;
        }
        ByteBuffer h = ByteBuffer.wrap(window, (int) (pos - windowStart), FrameHeader.SIZE)
            .slice();
        int length = FrameHeader.length(h);
        if (length < FrameHeader.SIZE - FrameHeader.LOG_OVERHEAD) {
          throw new PlanOptions.Unsupported(seg.log + ": invalid frame length at " + pos);
        }
        long size = (long) length + FrameHeader.LOG_OVERHEAD;
        if (size > end - pos) {
          break;  // still being written, or a torn tail: the log ends before it
        }
        int count = FrameHeader.recordCount(h);
        int delta = FrameHeader.lastOffsetDelta(h);
        long base = FrameHeader.baseOffset(h);
        boolean explicit = (FrameHeader.attributes(h) & FrameHeader.EXPLICIT_OFFSETS_BIT) != 0;
        if (FrameHeader.magic(h) != FrameHeader.MAGIC || count <= 0 || delta < count - 1
            || (FrameHeader.attributes(h) & FrameHeader.CODEC_MASK) > 2
            || !(base == expected || (base > expected && explicit))) {
          throw new PlanOptions.Unsupported(seg.log + ": unexpected frame at " + pos);
        }
        if (frames != null) {
          frames.add(base, base + delta, count, kind(in, h, pos, (int) size));
        }
        lastPos = pos;
        lastSize = (int) size;
        want = lastSize;
        expected = base + delta + 1;
        pos += size;
      }
      if (lastPos >= 0) {
        byte[] frame = new byte[lastSize];
        in.readFully(lastPos, frame, 0, lastSize);
        CRC32C crc = new CRC32C();
        crc.update(frame, FrameHeader.CRC_START, lastSize - FrameHeader.CRC_START);
        if ((int) crc.getValue() != FrameHeader.crc(ByteBuffer.wrap(frame))) {
          throw new PlanOptions.Unsupported(seg.log + ": CRC mismatch in the last frame");
        }
      }
      return expected;
    }
  }

  /** The {@link RecordCount} kind of the frame of header {@code h} at {@code pos}: what the
   *  row scan checks of it (a header alone for implicit offsets, the whole frame's CRC32C
   *  for control frames and explicit offsets) decides whether its count is sure. */
  private static byte kind(FSDataInputStream in, ByteBuffer h, long pos, int size)
      throws IOException {
    int attributes = FrameHeader.attributes(h);
    if ((attributes & (FrameHeader.CONTROL_BIT | FrameHeader.EXPLICIT_OFFSETS_BIT)) == 0) {
      return FrameHeader.lastOffsetDelta(h) == FrameHeader.recordCount(h) - 1
          ? RecordCount.IMPLICIT : RecordCount.UNSURE;
    }
    byte[] frame = new byte[size];
    in.readFully(pos, frame, 0, size);
    CRC32C crc = new CRC32C();
    crc.update(frame, FrameHeader.CRC_START, size - FrameHeader.CRC_START);
    if ((int) crc.getValue() != FrameHeader.crc(ByteBuffer.wrap(frame))) {
      return RecordCount.UNSURE;
    }
    return (attributes & FrameHeader.CONTROL_BIT) != 0 ? RecordCount.CONTROL
        : RecordCount.EXPLICIT;
  }
}
