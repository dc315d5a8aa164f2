package io.sparklog.spark;

import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.TreeMap;
import java.util.zip.CRC32C;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The storage layout of docs/format.md read through Hadoop's {@link FileSystem}: topic
 * configs, a partition directory's segments, the sparse offset index of sealed segments
 * and the log start offset checkpoint.
 */
final class LogFiles {
  static final String LOG_SUFFIX = ".log";
  static final String INDEX_SUFFIX = ".index";
  static final String SWAP_SUFFIX = ".log.swap";
  static final String LOG_START_SUFFIX = ".log-start-offset-checkpoint";
  private static final ObjectMapper JSON = new ObjectMapper();

  private LogFiles() {
  }

  /** One segment of a partition directory, as listed. */
  static final class Segment {
    final long baseOffset;
    final Path log;
    final long listedSize;
    final boolean hasIndex;

    Segment(long baseOffset, Path log, long listedSize, boolean hasIndex) {
      this.baseOffset = baseOffset;
      this.log = log;
      this.listedSize = listedSize;
      this.hasIndex = hasIndex;
    }

    /** The offset index beside the segment's .log (same name stem). */
    Path index() {
      String name = log.getName();
      return new Path(log.getParent(),
          name.substring(0, name.length() - LOG_SUFFIX.length()) + INDEX_SUFFIX);
    }
  }

  /** The URI of a storage root; a plain path is a local one, as for the Python storage. */
  static URI rootUri(String root) {
    URI uri = URI.create(root.replace(" ", "%20"));
    if (uri.getScheme() == null) {
      return new File(root).getAbsoluteFile().toURI();
    }
    return uri;
  }

  /** Path of {@code parts} under the root. */
  static Path path(String root, String... parts) {
    StringBuilder s = new StringBuilder(rootUri(root).toString().replaceAll("/+$", ""));
    for (String p : parts) {
      s.append('/').append(p);
    }
    return new Path(URI.create(s.toString()));
  }

  /** The partition directory {@code <root>/topics/<topic>/<partition>}. */
  static Path partitionDir(String root, String topic, int partition) {
    return path(root, "topics", topic, Integer.toString(partition));
  }

  /**
   * The file system of the root (local roots use the raw local file system: no .crc side
   * files). Throws when Hadoop has no file system for its scheme.
   */
  static FileSystem fileSystem(String root, Configuration conf) throws IOException {
    FileSystem fs = FileSystem.get(rootUri(root), conf);
    if (fs instanceof LocalFileSystem) {
      return ((LocalFileSystem) fs).getRawFileSystem();
    }
    return fs;
  }

  /** The whole content of a (small) file. */
  static byte[] readAll(FileSystem fs, Path p) throws IOException {
    try (InputStream in = fs.open(p)) {
      return in.readAllBytes();
    }
  }

  /** Latest version of a versioned file family {@code <version:010d><suffix>} in dir, or null. */
  static Path latestVersion(FileSystem fs, Path dir, String suffix) throws IOException {
    long best = -1;
    Path found = null;
    for (FileStatus st : fs.listStatus(dir)) {
      String name = st.getPath().getName();
      if (name.endsWith(suffix) && !name.startsWith(".")) {
        String stem = name.substring(0, name.length() - suffix.length());
        if (!stem.isEmpty() && stem.chars().allMatch(Character::isDigit)) {
          long v = Long.parseLong(stem);
          if (v > best) {
            best = v;
            found = st.getPath();
          }
        }
      }
    }
    return found;
  }

  /** The record schema of a typed topic, null for a raw topic (its latest config). */
  static Schema topicSchema(FileSystem fs, String root, String topic) throws IOException {
    Path dir = path(root, "topics", topic, "config");
    Path latest;
    try {
      latest = latestVersion(fs, dir, ".json");
    } catch (FileNotFoundException e) {
      latest = null;
    }
    if (latest == null) {
      throw new FileNotFoundException("topic " + topic + " has no config in " + dir);
    }
    JsonNode doc = JSON.readTree(readAll(fs, latest));
    JsonNode schema = doc.get("schema");
    if (schema == null || schema.isNull() || schema.asText().isEmpty()) {
      return null;
    }
    byte[] ipc = Base64.getDecoder().decode(schema.asText());
    return MessageSerializer.deserializeSchema(
        new ReadChannel(Channels.newChannel(new ByteArrayInputStream(ipc))));
  }

  /**
   * The live segments of a partition directory in offset order: the Java twin of Python's
   * {@code sparklog.log.layout.live_segments} (docs/format.md, "Compaction"). A cleaned
   * segment {@code <base>.<end>.c<generation>.log} counts once its {@code .index} exists;
   * committed cleaned segments are taken from the highest generation down, each live
   * unless its base lies inside the range of a live one of a higher generation; a segment
   * {@code <base>.log} is live unless its base lies inside a live cleaned segment's range.
   * Waits (as the Python reader) while a writer swaps a repaired segment in (a .log.swap
   * without its .log).
   */
  static List<Segment> listSegments(FileSystem fs, Path dir) throws IOException {
    for (int attempt = 0; ; attempt++) {
      TreeMap<Long, FileStatus> logs = new TreeMap<>();
      java.util.Set<String> indexes = new java.util.HashSet<>();
      List<Long> swaps = new ArrayList<>();
      List<long[]> cleaned = new ArrayList<>();  // base, end, generation
      java.util.Map<String, FileStatus> cleanedLogs = new java.util.HashMap<>();
      for (FileStatus st : fs.listStatus(dir)) {
        String name = st.getPath().getName();
        Long base = baseOf(name, LOG_SUFFIX);
        long[] c;
        if (base != null) {
          logs.put(base, st);
        } else if ((base = baseOf(name, INDEX_SUFFIX)) != null) {
          indexes.add(stemOf(name, INDEX_SUFFIX));
        } else if ((base = baseOf(name, SWAP_SUFFIX)) != null) {
          swaps.add(base);
        } else if ((c = cleanedOf(name, INDEX_SUFFIX)) != null) {
          indexes.add(stemOf(name, INDEX_SUFFIX));
        } else if ((c = cleanedOf(name, LOG_SUFFIX)) != null) {
          cleaned.add(c);
          cleanedLogs.put(stemOf(name, LOG_SUFFIX), st);
        }
      }
      boolean swapping = swaps.stream().anyMatch(b -> !logs.containsKey(b));
      if (swapping && attempt < 40) {
        try {
          Thread.sleep(50);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IOException("interrupted while a segment of " + dir + " is swapped in", e);
        }
        continue;
      }
      cleaned.removeIf(c -> !indexes.contains(cleanedStem(c)));  // not committed
      cleaned.sort((a, b) -> a[2] != b[2] ? Long.compare(b[2], a[2]) : Long.compare(a[0], b[0]));
      List<long[]> live = new ArrayList<>();
      for (long[] c : cleaned) {
        if (!covered(live, c[0])) {
          live.add(c);
        }
      }
      TreeMap<Long, Segment> out = new TreeMap<>();
      for (var e : logs.entrySet()) {
        if (!covered(live, e.getKey())) {
          out.put(e.getKey(), new Segment(e.getKey(), e.getValue().getPath(),
              e.getValue().getLen(), indexes.contains(String.format("%020d", e.getKey()))));
        }
      }
      for (long[] c : live) {
        FileStatus st = cleanedLogs.get(cleanedStem(c));
        out.put(c[0], new Segment(c[0], st.getPath(), st.getLen(), true));
      }
      return new ArrayList<>(out.values());
    }
  }

  private static boolean covered(List<long[]> ranges, long offset) {
    for (long[] r : ranges) {
      if (r[0] <= offset && offset < r[1]) {
        return true;
      }
    }
    return false;
  }

  /** The name stem of a cleaned segment (base, end, generation). */
  static String cleanedStem(long[] c) {
    return String.format("%020d.%020d.c%d", c[0], c[1], c[2]);
  }

  private static Long baseOf(String name, String suffix) {
    if (name.length() != 20 + suffix.length() || !name.endsWith(suffix)) {
      return null;
    }
    String stem = name.substring(0, 20);
    return stem.chars().allMatch(Character::isDigit) ? Long.parseLong(stem) : null;
  }

  private static String stemOf(String name, String suffix) {
    return name.substring(0, name.length() - suffix.length());
  }

  /** (base, end, generation) of a cleaned segment's file {@code <base>.<end>.c<g><suffix>}. */
  private static long[] cleanedOf(String name, String suffix) {
    if (!name.endsWith(suffix)) {
      return null;
    }
    String[] parts = stemOf(name, suffix).split("\\.", -1);
    if (parts.length != 3 || parts[0].length() != 20 || parts[1].length() != 20
        || !parts[0].chars().allMatch(Character::isDigit)
        || !parts[1].chars().allMatch(Character::isDigit)
        || parts[2].length() < 2 || parts[2].charAt(0) != 'c'
        || !parts[2].substring(1).chars().allMatch(Character::isDigit)) {
      return null;
    }
    long g = Long.parseLong(parts[2].substring(1));
    long base = Long.parseLong(parts[0]);
    long end = Long.parseLong(parts[1]);
    if (g < 1 || end < base || !cleanedStem(new long[] {base, end, g}).equals(stemOf(name, suffix))) {
      return null;
    }
    return new long[] {base, end, g};
  }

  /**
   * The partition's log start offset: the latest checkpoint, raised to the first
   * segment's base offset (docs/format.md section 5).
   */
  static long logStartOffset(FileSystem fs, Path dir, List<Segment> segments) throws IOException {
    long start = 0;
    Path latest = latestVersion(fs, dir, LOG_START_SUFFIX);
    if (latest != null) {
      JsonNode doc = JSON.readTree(readAll(fs, latest));
      JsonNode v = doc.get("log_start_offset");
      if (v != null && v.canConvertToLong()) {
        start = v.asLong();
      }
    }
    if (!segments.isEmpty()) {
      start = Math.max(start, segments.get(0).baseOffset);
    }
    return start;
  }

  /**
   * A file position at or before the frame holding {@code offset} in a sealed segment,
   * from its sparse {@code .index} (0 when the index is missing, stale or corrupt: the
   * caller then scans from the first frame).
   */
  static long indexedPosition(FileSystem fs, Segment seg, long offset) {
    if (!seg.hasIndex || offset <= seg.baseOffset) {
      return 0;
    }
    ByteBuffer b = validIndex(fs, seg);
    if (b == null) {
      return 0;
    }
    int entries = b.getInt(OffsetIndexHeader.ENTRY_COUNT_OFFSET);
    long rel = offset - seg.baseOffset;
    int lo = 0;
    int hi = entries - 1;
    long pos = 0;
    while (lo <= hi) {  // last entry with relative offset <= rel
      int mid = (lo + hi) >>> 1;
      int entry = OffsetIndexHeader.SIZE + OffsetIndexHeader.ENTRY_SIZE * mid;
      long r = Integer.toUnsignedLong(b.getInt(entry));
      if (r <= rel) {
        pos = Integer.toUnsignedLong(b.getInt(entry + OffsetIndexHeader.ENTRY_POSITION_OFFSET));
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return pos;
  }
  /**
   * The bytes of a sealed segment's {@code .index} when it is sound (magic, version, base
   * offset, the size of the {@code .log} as listed, both CRC32Cs, entry count), else null
   * (missing, stale or corrupt: readers then scan the {@code .log} instead).
   */
  static ByteBuffer validIndex(FileSystem fs, Segment seg) {
    if (!seg.hasIndex) {
      return null;
    }
    byte[] bytes;
    try (FSDataInputStream in = fs.open(seg.index())) {
      bytes = in.readAllBytes();
    } catch (IOException e) {
      return null;
    }
    ByteBuffer b = soundHeader(bytes, seg);
    if (b == null) {
      return null;
    }
    CRC32C crc = new CRC32C();
    int entries = b.getInt(OffsetIndexHeader.ENTRY_COUNT_OFFSET);
    long entryBytes = (long) OffsetIndexHeader.ENTRY_SIZE * entries;
    if (entries < 0 || OffsetIndexHeader.SIZE + entryBytes != bytes.length) {
      return null;
    }
    crc.reset();
    crc.update(bytes, OffsetIndexHeader.SIZE, (int) entryBytes);
    if ((int) crc.getValue() != b.getInt(OffsetIndexHeader.ENTRIES_CRC_OFFSET)) {
      return null;
    }
    return b;
  }

  /**
   * The 72-byte summary of a sealed segment's {@code .index} when it is sound (magic,
   * version, base offset, the size of the {@code .log} as listed, its CRC32C), else null;
   * the entries are not read (a count needs the summary alone: {@link RecordCount}).
   */
  static ByteBuffer validSummary(FileSystem fs, Segment seg) {
    if (!seg.hasIndex) {
      return null;
    }
    byte[] bytes = new byte[OffsetIndexHeader.SIZE];
    try (FSDataInputStream in = fs.open(seg.index())) {
      in.readFully(bytes);
    } catch (IOException e) {
      return null;  // missing, or shorter than a summary
    }
    return soundHeader(bytes, seg);
  }

  /** {@code bytes} (an {@code .index} file or its first 72 bytes) as a buffer when its
   *  summary is sound for {@code seg}, else null. */
  private static ByteBuffer soundHeader(byte[] bytes, Segment seg) {
    if (bytes.length < OffsetIndexHeader.SIZE) {
      return null;
    }
    ByteBuffer b = ByteBuffer.wrap(bytes);  // big-endian
    String magic = new String(bytes, OffsetIndexHeader.MAGIC_OFFSET,
        OffsetIndexHeader.MAGIC.length(), StandardCharsets.US_ASCII);
    if (!magic.equals(OffsetIndexHeader.MAGIC)
        || b.getShort(OffsetIndexHeader.VERSION_OFFSET) != OffsetIndexHeader.VERSION
        || b.getLong(OffsetIndexHeader.BASE_OFFSET_OFFSET) != seg.baseOffset
        || b.getLong(OffsetIndexHeader.LOG_SIZE_OFFSET) != seg.listedSize) {
      return null;
    }
    CRC32C crc = new CRC32C();
    crc.update(bytes, 0, OffsetIndexHeader.HEADER_CRC_OFFSET);
    if ((int) crc.getValue() != b.getInt(OffsetIndexHeader.HEADER_CRC_OFFSET)) {
      return null;
    }
    return b;
  }

  /** The bytes of {@code file} a reader of the open stream {@code in} can see now: a file
   *  being written grows past its listed size, which HDFS reports through
   *  getVisibleLength(); other file systems through the file's status. */
  static long visibleLength(FileSystem fs, Path file, FSDataInputStream in) throws IOException {
    try {
      return (Long) in.getClass().getMethod("getVisibleLength").invoke(in);
    } catch (ReflectiveOperationException | ClassCastException e) {
      return fs.getFileStatus(file).getLen();
    }
  }
}
