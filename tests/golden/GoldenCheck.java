package io.sparklog.spark;

import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.zip.CRC32C;

import net.razorvine.pickle.Unpickler;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The JVM reader's side of the golden fixtures (tests/golden/test_golden.py compiles and
 * runs it): decodes the committed files with the reader's own classes (FrameHeader,
 * OffsetIndexHeader through LogFiles, RangePartition) and prints what it read, one fact
 * per line, for the Python test to compare with the values it states.
 *
 * <p>Usage: {@code GoldenCheck <storage root> <planned-range.pickle>}
 */
public final class GoldenCheck {
  private static final String[] TOPICS = {"raw", "lz4", "typed", "compacted"};

  private GoldenCheck() {
  }

  public static void main(String[] args) throws Exception {
    String root = args[0];
    for (Field f : FrameHeader.class.getDeclaredFields()) {  // the *_OFFSET constants
      String name = f.getName();
      if (name.endsWith("_OFFSET")) {
        System.out.println("field " + name.substring(0, name.length() - "_OFFSET".length())
            .toLowerCase(Locale.ROOT) + " " + f.getInt(null));
      }
    }
    System.out.println("const size " + FrameHeader.SIZE + " log_overhead "
        + FrameHeader.LOG_OVERHEAD + " crc_start " + FrameHeader.CRC_START + " magic "
        + FrameHeader.MAGIC + " index_size " + OffsetIndexHeader.SIZE);
    FileSystem fs = LogFiles.fileSystem(root, new Configuration());
    for (String topic : TOPICS) {
      Path dir = LogFiles.partitionDir(root, topic, 0);
      for (LogFiles.Segment seg : LogFiles.listSegments(fs, dir)) {
        byte[] data = LogFiles.readAll(fs, seg.log);
        int pos = 0;
        while (pos < data.length) {
          ByteBuffer h = ByteBuffer.wrap(data, pos, data.length - pos).slice();
          int size = FrameHeader.length(h) + FrameHeader.LOG_OVERHEAD;
          CRC32C crc = new CRC32C();
          crc.update(data, pos + FrameHeader.CRC_START, size - FrameHeader.CRC_START);
          System.out.println("frame " + topic + " " + seg.baseOffset + " " + pos + " "
              + FrameHeader.baseOffset(h) + " " + FrameHeader.length(h) + " "
              + FrameHeader.leaderEpoch(h) + " " + FrameHeader.magic(h) + " "
              + Integer.toUnsignedLong(FrameHeader.crc(h)) + " " + FrameHeader.attributes(h)
              + " " + FrameHeader.lastOffsetDelta(h) + " " + FrameHeader.firstTimestamp(h)
              + " " + FrameHeader.maxTimestamp(h) + " " + FrameHeader.producerId(h) + " "
              + FrameHeader.producerEpoch(h) + " " + FrameHeader.baseSequence(h) + " "
              + FrameHeader.recordCount(h) + " crc-ok=" + ((int) crc.getValue()
              == FrameHeader.crc(h)));
          pos += size;
        }
        if (seg.hasIndex) {
          RecordCount.Sealed summary = RecordCount.Sealed.of(fs, seg);
          System.out.println("summary " + topic + " " + seg.baseOffset + " "
              + summary.nextOffset + " " + summary.dataRecords);
          for (long offset = seg.baseOffset; offset < seg.baseOffset + 6; offset++) {
            System.out.println("indexed " + topic + " " + offset + " "
                + LogFiles.indexedPosition(fs, seg, offset));
          }
        }
      }
    }
    mixed(fs, root);
    Schema typed = LogFiles.topicSchema(fs, root, "typed");
    System.out.println("schema typed " + typed.getFields());
    byte[] pickled = Files.readAllBytes(Paths.get(args[1]));
    RangePartition r = RangePartition.fromPlanned(new Unpickler().loads(pickled));
    System.out.println("range " + r.topic + " " + r.partition + " " + r.start + " " + r.end
        + " " + r.root + " " + r.failOnDataLoss);
  }

  /** The mixed topic's frames (kind, codec, record count, CRC), the records of its Kafka
   *  batches as {@link KafkaBatch} decodes them, and its sealed segments' summaries. */
  private static void mixed(FileSystem fs, String root) throws Exception {
    HexFormat hex = HexFormat.of();
    for (LogFiles.Segment seg : LogFiles.listSegments(fs, LogFiles.partitionDir(root, "mixed",
        0))) {
      byte[] data = LogFiles.readAll(fs, seg.log);
      int pos = 0;
      while (pos < data.length) {
        ByteBuffer h = ByteBuffer.wrap(data, pos, data.length - pos).slice();
        int size = FrameHeader.length(h) + FrameHeader.LOG_OVERHEAD;
        byte[] frame = Arrays.copyOfRange(data, pos, pos + size);
        CRC32C crc = new CRC32C();
        crc.update(frame, FrameHeader.CRC_START, size - FrameHeader.CRC_START);
        long base = FrameHeader.baseOffset(h);
        System.out.println("kind mixed " + seg.baseOffset + " " + pos + " " + base + " "
            + FrameHeader.magic(h) + " " + (FrameHeader.attributes(h) & FrameHeader.CODEC_MASK)
            + " " + FrameHeader.recordCount(h) + " crc-ok="
            + ((int) crc.getValue() == FrameHeader.crc(h)));
        if (FrameHeader.magic(h) == KafkaBatch.MAGIC) {
          KafkaBatch k = new KafkaBatch();
          k.decode(frame, size);
          for (int i = 0; i < k.count; i++) {
            List<String> headers = new ArrayList<>();
            for (int j = k.headerFirst[i]; j < k.headerFirst[i] + k.headerCount[i]; j++) {
              headers.add(new String(k.data, k.hKeyPos[j], k.hKeyLen[j],
                  java.nio.charset.StandardCharsets.UTF_8) + "=" + (k.hValueLen[j] < 0 ? "null"
                  : hex.formatHex(k.data, k.hValuePos[j], k.hValuePos[j] + k.hValueLen[j])));
            }
            System.out.println("record mixed " + (base + k.offsetDelta[i]) + " "
                + k.timestamp[i] + " " + (k.keyLen[i] < 0 ? "null"
                : hex.formatHex(k.data, k.keyPos[i], k.keyPos[i] + k.keyLen[i])) + " "
                + (k.valueLen[i] < 0 ? "null"
                : hex.formatHex(k.data, k.valuePos[i], k.valuePos[i] + k.valueLen[i])) + " "
                + (headers.isEmpty() ? "null" : String.join(",", headers)));
          }
        }
        pos += size;
      }
      if (seg.hasIndex) {
        RecordCount.Sealed summary = RecordCount.Sealed.of(fs, seg);
        System.out.println("mixed-summary " + seg.baseOffset + " " + summary.nextOffset + " "
            + summary.dataRecords);
      }
    }
  }
}
