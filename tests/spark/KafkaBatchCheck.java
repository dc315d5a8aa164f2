package io.sparklog.spark;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * The JVM reader's Kafka batch decoder ({@link KafkaBatch}) on the batches of a directory
 * (tests/spark/test_kafka_batches.py compiles and runs it against the reader's jar): per
 * file, in name order, one line: {@code <name> ok <record>;<record>...} with each record's
 * offset delta, timestamp, key, value and headers (hex, "null" for null), or
 * {@code <name> error <message>} for a {@link KafkaBatch.MalformedBatchException}, or
 * {@code <name> CRASH <exception>} for anything else (never expected).
 *
 * <p>Usage: {@code KafkaBatchCheck <directory>}
 */
public final class KafkaBatchCheck {
  private KafkaBatchCheck() {
  }

  public static void main(String[] args) throws Exception {
    HexFormat hex = HexFormat.of();
    File[] files = new File(args[0]).listFiles();
    Arrays.sort(files);
    KafkaBatch k = new KafkaBatch();  // reused, as the reader reuses it
    for (File file : files) {
      byte[] frame = Files.readAllBytes(file.toPath());
      StringBuilder out = new StringBuilder(file.getName());
      try {
        k.decode(frame, frame.length);
        List<String> records = new ArrayList<>();
        for (int i = 0; i < k.count; i++) {
          List<String> headers = new ArrayList<>();
          for (int j = k.headerFirst[i]; j < k.headerFirst[i] + k.headerCount[i]; j++) {
            headers.add(new String(k.data, k.hKeyPos[j], k.hKeyLen[j], StandardCharsets.UTF_8)
                + "=" + text(hex, k.data, k.hValuePos[j], k.hValueLen[j]));
          }
          records.add(k.offsetDelta[i] + " " + k.timestamp[i] + " "
              + text(hex, k.data, k.keyPos[i], k.keyLen[i]) + " "
              + text(hex, k.data, k.valuePos[i], k.valueLen[i]) + " "
              + String.join(",", headers));
        }
        out.append(" ok ").append(String.join(";", records));
      } catch (KafkaBatch.MalformedBatchException e) {
        out.append(" error ").append(e.getMessage());
      } catch (Throwable e) {
        out.append(" CRASH ").append(e);
      }
      System.out.println(out);
    }
  }

  private static String text(HexFormat hex, byte[] data, int pos, int len) {
    return len < 0 ? "null" : hex.formatHex(data, pos, pos + len);
  }
}
