package io.sparklog.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.Snappy;

/**
 * The records of a Kafka record batch (magic 2), the second frame kind of a segment
 * (docs/format.md; docs/storage.md, "Kafka record batches: the second frame kind"). Its
 * 61-byte header is the layout {@link FrameHeader} reads, byte 16 ({@code magic}) 2 where an
 * Arrow frame has 1; what follows is Kafka's records section, compressed as one block by
 * the codec of attributes bits 0-2 (Kafka's ids: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
 * Mirrors {@code sparklog/format/kafka_batch.py}.
 *
 * <p>{@link #decode} decompresses the section with the codec libraries Spark ships
 * ({@code java.util.zip}, snappy-java for both Kafka's xerial framing and raw snappy,
 * lz4-java for Kafka's LZ4 frames, zstd-jni: not {@code kafka-clients}, which pyspark does
 * not ship) and walks the records: per record a zigzag varint {@code length}, an
 * {@code attributes} byte (unused), {@code timestampDelta} (varlong), {@code offsetDelta},
 * {@code keyLength} (-1: null) and the key, {@code valueLength} and the value,
 * {@code headersCount} and per header a key (UTF-8) and a value (-1: null). It keeps
 * positions, not copies: the reader copies only the records of its range into Spark's
 * columns. The caller has checked the frame's CRC-32C; anything that does not parse raises
 * {@link MalformedBatchException} naming the record and field.
 */
final class KafkaBatch {
  /** {@code magic} of a Kafka record batch (v2). */
  static final byte MAGIC = 2;
  static final int NONE = 0;
  static final int GZIP = 1;
  static final int SNAPPY = 2;
  static final int LZ4 = 3;
  static final int ZSTD = 4;
  /** Kafka's compression names by id (attributes bits 0-2). */
  private static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
  /** The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength,
   *  valueLength and headersCount of one byte each. */
  static final int MIN_RECORD_SIZE = 7;
  /** Most bytes the records of one batch may decompress to (a Java array's limit). */
  static final int MAX_RECORDS_BYTES = Integer.MAX_VALUE - 8;
  private static final byte[] XERIAL_MAGIC =
      {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
  /** xerial's stream header: magic, version int32, compatible version int32. */
  private static final int XERIAL_HEADER_SIZE = 16;

  /** Bytes of the records: the frame itself (uncompressed) or {@link #inflated}. */
  byte[] data;
  /** Records' bytes are {@code data[start, end)}. */
  int start;
  int end;
  int count;
  /** Per record: offset delta, timestamp (ms, absolute), key and value position and
   *  length (-1: null) in {@link #data}, first header (index into the header arrays) and
   *  header count. */
  int[] offsetDelta = new int[0];
  long[] timestamp = new long[0];
  int[] keyPos = new int[0];
  int[] keyLen = new int[0];
  int[] valuePos = new int[0];
  int[] valueLen = new int[0];
  int[] headerFirst = new int[0];
  int[] headerCount = new int[0];
  /** Per header: key and value position and length (-1: null value) in {@link #data}. */
  int[] hKeyPos = new int[0];
  int[] hKeyLen = new int[0];
  int[] hValuePos = new int[0];
  int[] hValueLen = new int[0];
  int headers;

  private byte[] inflated = new byte[0];
  private int pos;
  private final CharsetDecoder utf8 = StandardCharsets.UTF_8.newDecoder()
      .onMalformedInput(CodingErrorAction.REPORT)
      .onUnmappableCharacter(CodingErrorAction.REPORT);

  /** The name of Kafka's compression type {@code id} ("unknown" beyond 4). */
  static String codecName(int id) {
    return id >= 0 && id < CODECS.length ? CODECS[id] : "unknown";
  }

  /** A batch's records do not decompress or parse; the message names what is wrong. */
  static final class MalformedBatchException extends IOException {
    private static final long serialVersionUID = 1L;

    MalformedBatchException(String message) {
      super(message);
    }
  }

  /**
   * Decode the records of the batch in {@code frame[0, size)}, whose header the caller
   * read (and whose CRC-32C it checked): decompress them and walk
   * {@code recordCount} records, which must fill the section exactly, with offset deltas
   * growing within {@code [0, lastOffsetDelta]}. Record timestamps are
   * {@code baseTimestamp + timestampDelta}, or {@code maxTimestamp} for all of a
   * LogAppendTime batch, as Kafka's consumer reads them.
   */
  void decode(byte[] frame, int size) throws MalformedBatchException {
    ByteBuffer h = ByteBuffer.wrap(frame, 0, size);
    int attributes = FrameHeader.attributes(h);
    int codec = attributes & FrameHeader.CODEC_MASK;
    count = FrameHeader.recordCount(h);
    int lastDelta = FrameHeader.lastOffsetDelta(h);
    long baseTimestamp = FrameHeader.firstTimestamp(h);
    boolean logAppendTime = (attributes & FrameHeader.LOG_APPEND_TIME_BIT) != 0;
    long maxTimestamp = FrameHeader.maxTimestamp(h);
    decompress(frame, FrameHeader.SIZE, size - FrameHeader.SIZE, codec);
    if (count < 0 || (long) count * MIN_RECORD_SIZE > end - start) {
      throw new MalformedBatchException("recordCount " + count + " cannot fit in "
          + (end - start) + " bytes of records (a record takes at least "
          + MIN_RECORD_SIZE + ")");
    }
    grow(count);
    headers = 0;
    pos = start;
    int previous = -1;
    for (int i = 0; i < count; i++) {
      String field = "length";
      int header = -1;  // the header being read (named in an error)
      try {
        int length = varint();
        int recEnd = pos + length;
        if (length < MIN_RECORD_SIZE - 1 || length > end - pos) {
          throw new MalformedBatchException("length " + length + " is not within ["
              + (MIN_RECORD_SIZE - 1) + ", " + (end - pos) + "] (the bytes left)");
        }
        pos++;  // attributes: unused
        field = "timestampDelta";
        long tsDelta = varlong();
        field = "offsetDelta";
        int delta = varint();
        if (delta <= previous || delta > lastDelta) {
          throw new MalformedBatchException("offsetDelta " + delta + " does not grow within "
              + "(" + previous + ", lastOffsetDelta " + lastDelta + "]");
        }
        previous = delta;
        offsetDelta[i] = delta;
        try {
          timestamp[i] = logAppendTime ? maxTimestamp : Math.addExact(baseTimestamp, tsDelta);
        } catch (ArithmeticException e) {
          throw new MalformedBatchException("baseTimestamp " + baseTimestamp + " plus "
              + tsDelta + " overflows int64");
        }
        field = "keyLength";
        keyLen[i] = bytes(recEnd, "keyLength");
        keyPos[i] = pos - Math.max(keyLen[i], 0);
        field = "valueLength";
        valueLen[i] = bytes(recEnd, "valueLength");
        valuePos[i] = pos - Math.max(valueLen[i], 0);
        field = "headersCount";
        int n = varint();
        if (n < 0 || (long) n * 2 > recEnd - pos) {
          throw new MalformedBatchException("headersCount " + n + " does not fit the record");
        }
        headerFirst[i] = headers;
        headerCount[i] = n;
        growHeaders(headers + n);
        for (int k = 0; k < n; k++) {
          header = k;
          field = " key";
          int kl = bytes(recEnd, "headerKeyLength");
          if (kl < 0) {
            throw new MalformedBatchException("headerKeyLength " + kl);
          }
          hKeyLen[headers] = kl;
          hKeyPos[headers] = pos - kl;
          checkUtf8(hKeyPos[headers], kl);
          field = " value";
          int vl = bytes(recEnd, "headerValueLength");
          hValueLen[headers] = vl;
          hValuePos[headers] = pos - Math.max(vl, 0);
          headers++;
        }
        if (pos != recEnd) {
          header = -1;
          field = "length";
          throw new MalformedBatchException("its fields take " + (pos - recEnd + length)
              + " bytes, its length says " + length);
        }
      } catch (MalformedBatchException e) {
        throw new MalformedBatchException("record " + i + ": "
            + (header < 0 ? "" : "header " + header) + field + ": " + e.getMessage());
      } catch (ArrayIndexOutOfBoundsException e) {
        throw new MalformedBatchException("record " + i + ": "
            + (header < 0 ? "" : "header " + header) + field + ": the records end inside it "
            + "(recordCount " + count + ")");
      }
    }
    if (pos != end) {
      throw new MalformedBatchException((end - pos) + " bytes remain after the last of its "
          + count + " records (recordCount disagrees with the records)");
    }
  }

  /** The index of the first record whose offset ({@code base} + delta) is at least
   *  {@code offset} ({@link #count} when none is). */
  int firstAtOrAfter(long base, long offset) {
    int lo = 0;
    int hi = count;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (base + offsetDelta[mid] < offset) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  // --- records ------------------------------------------------------------------------

  private void grow(int n) {
    if (offsetDelta.length >= n) {
      return;
    }
    offsetDelta = new int[n];
    timestamp = new long[n];
    keyPos = new int[n];
    keyLen = new int[n];
    valuePos = new int[n];
    valueLen = new int[n];
    headerFirst = new int[n];
    headerCount = new int[n];
  }

  private void growHeaders(int n) {
    if (hKeyPos.length >= n) {
      return;
    }
    int c = Math.max(n, hKeyPos.length * 2);
    hKeyPos = Arrays.copyOf(hKeyPos, c);
    hKeyLen = Arrays.copyOf(hKeyLen, c);
    hValuePos = Arrays.copyOf(hValuePos, c);
    hValueLen = Arrays.copyOf(hValueLen, c);
  }

  /** A length varint and the bytes it counts (skipped); the length (-1: null). */
  private int bytes(int recEnd, String name) throws MalformedBatchException {
    int n = varint();
    if (n < -1) {
      throw new MalformedBatchException(name + " " + n);
    }
    if (n > recEnd - pos) {
      throw new MalformedBatchException(name + " " + n + " runs past the record");
    }
    pos += Math.max(n, 0);
    return n;
  }

  private void checkUtf8(int at, int len) throws MalformedBatchException {
    int i = at;
    while (i < at + len && data[i] >= 0) {  // ASCII: nothing to decode
      i++;
    }
    if (i == at + len) {
      return;
    }
    try {
      utf8.reset().decode(ByteBuffer.wrap(data, at, len));
    } catch (CharacterCodingException e) {
      throw new MalformedBatchException("the header key is not UTF-8");
    }
  }

  /** A zigzag varint of at most 5 bytes (Kafka's {@code ByteUtils.readVarint}). */
  private int varint() throws MalformedBatchException {
    int raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      if (pos >= end) {
        throw new ArrayIndexOutOfBoundsException();
      }
      int b = data[pos++] & 0xff;
      raw |= (b & 0x7f) << shift;
      if (b < 0x80) {
        if (shift == 28 && b > 0x0f) {
          break;
        }
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw new MalformedBatchException("a varint is malformed (too long)");
  }

  /** A zigzag varlong of at most 10 bytes (Kafka's {@code ByteUtils.readVarlong}). */
  private long varlong() throws MalformedBatchException {
    long raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= end) {
        throw new ArrayIndexOutOfBoundsException();
      }
      int b = data[pos++] & 0xff;
      raw |= (long) (b & 0x7f) << shift;
      if (b < 0x80) {
        if (shift == 63 && b > 0x01) {
          break;
        }
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw new MalformedBatchException("a varlong is malformed (too long)");
  }

  // --- decompression ------------------------------------------------------------------

  private void decompress(byte[] frame, int at, int len, int codec)
      throws MalformedBatchException {
    if (codec == NONE) {
      data = frame;
      start = at;
      end = at + len;
      return;
    }
    data = inflated;
    start = 0;
    end = 0;
    try {
      switch (codec) {
        case GZIP:
          readAll(new GZIPInputStream(new ByteArrayInputStream(frame, at, len)));
          break;
        case SNAPPY:
          unsnappy(frame, at, len);
          break;
        case LZ4:
          readAll(new LZ4FrameInputStream(new ByteArrayInputStream(frame, at, len)));
          break;
        case ZSTD:
          readAll(new ZstdInputStreamNoFinalizer(new ByteArrayInputStream(frame, at, len)));
          break;
        default:
          throw new MalformedBatchException("unknown compression type " + codec);
      }
    } catch (MalformedBatchException e) {
      throw e;
    } catch (IOException | RuntimeException e) {
      throw new MalformedBatchException(codecName(codec) + " records cannot be decompressed: "
          + e);
    } finally {
      inflated = data;
    }
  }

  /** Room for {@code more} bytes after {@link #end} in {@link #data}. */
  private void ensure(long more) throws MalformedBatchException {
    long need = end + more;
    if (need > MAX_RECORDS_BYTES) {
      throw new MalformedBatchException("the records decompress to more than "
          + MAX_RECORDS_BYTES + " bytes");
    }
    if (need > data.length) {
      data = Arrays.copyOf(data, (int) Math.min(MAX_RECORDS_BYTES,
          Math.max(need, Math.max(1 << 16, 2L * data.length))));
    }
  }

  private void readAll(InputStream in) throws IOException {
    try (InputStream s = in) {
      while (true) {
        ensure(1);
        int got = s.read(data, end, data.length - end);
        if (got < 0) {
          return;
        }
        end += got;
      }
    }
  }

  /** Snappy as Kafka's clients write it: xerial's framing (snappy-java's stream, Kafka's
   *  Java client: a 16-byte header, then blocks of an int32 length and a raw snappy
   *  block) or one raw snappy block (librdkafka). */
  private void unsnappy(byte[] frame, int at, int len) throws IOException {
    if (len < XERIAL_MAGIC.length || !Arrays.equals(frame, at, at + XERIAL_MAGIC.length,
        XERIAL_MAGIC, 0, XERIAL_MAGIC.length)) {
      snappyBlock(frame, at, len);
      return;
    }
    if (len < XERIAL_HEADER_SIZE) {
      throw new MalformedBatchException("truncated xerial snappy header");
    }
    ByteBuffer b = ByteBuffer.wrap(frame, at, len);
    int p = at + XERIAL_HEADER_SIZE;
    int stop = at + len;
    while (p < stop) {
      if (stop - p < 4) {
        throw new MalformedBatchException("truncated xerial snappy block length");
      }
      int size = b.getInt(p);
      p += 4;
      if (size < 0 || size > stop - p) {
        throw new MalformedBatchException("xerial snappy block of " + size + " bytes at byte "
            + (p - 4 - at) + " of the records runs past them");
      }
      snappyBlock(frame, p, size);
      p += size;
    }
  }

  private void snappyBlock(byte[] frame, int at, int len) throws IOException {
    if (len == 0) {
      throw new MalformedBatchException("an empty snappy block");
    }
    int size = Snappy.uncompressedLength(frame, at, len);
    if (size < 0) {
      throw new MalformedBatchException("a snappy block has no valid length prefix");
    }
    ensure(size);
    end += Snappy.uncompress(frame, at, len, data, end);
  }
}
