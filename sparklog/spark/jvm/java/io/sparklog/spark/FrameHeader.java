package io.sparklog.spark;

import java.nio.ByteBuffer;

/**
 * The 61-byte frame header of docs/format.md ("Frame header"), as Kafka's
 * {@code DefaultRecordBatch} names its offsets: the position of every field and accessors
 * reading them from a big-endian buffer holding a frame at position 0. Mirrors
 * {@code sparklog/format/header.py} (its {@code HEADER_FIELDS}); the golden tests
 * (tests/golden/) check both against the same committed bytes and against each other.
 */
final class FrameHeader {
  static final int BASE_OFFSET_OFFSET = 0;
  static final int LENGTH_OFFSET = 8;
  static final int LEADER_EPOCH_OFFSET = 12;
  static final int MAGIC_OFFSET = 16;
  static final int CRC_OFFSET = 17;
  static final int ATTRIBUTES_OFFSET = 21;
  static final int LAST_OFFSET_DELTA_OFFSET = 23;
  static final int FIRST_TIMESTAMP_OFFSET = 27;
  static final int MAX_TIMESTAMP_OFFSET = 35;
  static final int PRODUCER_ID_OFFSET = 43;
  static final int PRODUCER_EPOCH_OFFSET = 51;
  static final int BASE_SEQUENCE_OFFSET = 53;
  static final int RECORD_COUNT_OFFSET = 57;
  /** Bytes of the header; the body follows (an Arrow IPC stream, or a Kafka batch's
   *  records). */
  static final int SIZE = 61;
  /** Base offset and length: the bytes a frame's length field does not count. */
  static final int LOG_OVERHEAD = LEADER_EPOCH_OFFSET;
  /** The CRC32C covers the frame from the attributes to its end. */
  static final int CRC_START = ATTRIBUTES_OFFSET;
  /** The {@code magic} of an Arrow frame (a Kafka record batch has
   *  {@link KafkaBatch#MAGIC}). */
  static final byte MAGIC = 1;

  // attributes bits
  static final int CODEC_MASK = 0x07;
  static final int LOG_APPEND_TIME_BIT = 1 << 3;
  static final int TRANSACTIONAL_BIT = 1 << 4;
  static final int CONTROL_BIT = 1 << 5;
  static final int EXPLICIT_OFFSETS_BIT = 1 << 6;

  private FrameHeader() {
  }

  static long baseOffset(ByteBuffer h) {
    return h.getLong(BASE_OFFSET_OFFSET);
  }

  /** Bytes after the length field (frame size - {@link #LOG_OVERHEAD}). */
  static int length(ByteBuffer h) {
    return h.getInt(LENGTH_OFFSET);
  }

  static int leaderEpoch(ByteBuffer h) {
    return h.getInt(LEADER_EPOCH_OFFSET);
  }

  static byte magic(ByteBuffer h) {
    return h.get(MAGIC_OFFSET);
  }

  static int crc(ByteBuffer h) {
    return h.getInt(CRC_OFFSET);
  }

  /** The attributes, unsigned. */
  static int attributes(ByteBuffer h) {
    return h.getShort(ATTRIBUTES_OFFSET) & 0xffff;
  }

  static int lastOffsetDelta(ByteBuffer h) {
    return h.getInt(LAST_OFFSET_DELTA_OFFSET);
  }

  static long firstTimestamp(ByteBuffer h) {
    return h.getLong(FIRST_TIMESTAMP_OFFSET);
  }

  static long maxTimestamp(ByteBuffer h) {
    return h.getLong(MAX_TIMESTAMP_OFFSET);
  }

  static long producerId(ByteBuffer h) {
    return h.getLong(PRODUCER_ID_OFFSET);
  }

  static short producerEpoch(ByteBuffer h) {
    return h.getShort(PRODUCER_EPOCH_OFFSET);
  }

  static int baseSequence(ByteBuffer h) {
    return h.getInt(BASE_SEQUENCE_OFFSET);
  }

  static int recordCount(ByteBuffer h) {
    return h.getInt(RECORD_COUNT_OFFSET);
  }

  /** Whether {@code h} is a frame of a kind this reader knows: byte 16 ({@code magic}) 1,
   *  an Arrow frame, or 2, a Kafka record batch ({@link KafkaBatch}). */
  static boolean knownMagic(ByteBuffer h) {
    byte m = magic(h);
    return m == MAGIC || m == KafkaBatch.MAGIC;
  }

  /** Whether the codec of attributes bits 0-2 is one of the frame's kind: an Arrow
   *  frame's 0 none, 1 lz4, 2 zstd; a Kafka batch's 0-4 (none, gzip, snappy, lz4, zstd). */
  static boolean knownCodec(ByteBuffer h) {
    int codec = attributes(h) & CODEC_MASK;
    return codec <= (magic(h) == KafkaBatch.MAGIC ? KafkaBatch.ZSTD : 2);
  }

  /** Whether the frame of header {@code h} (either kind) holds offsets
   *  {@code base, base + 1, ...}: an Arrow frame without bit 6 (explicit offsets), or a
   *  Kafka batch whose {@code lastOffsetDelta} is {@code recordCount - 1} (its records'
   *  growing offset deltas then are 0, 1, ...). Bit 6 of a Kafka batch is its delete
   *  horizon, not explicit offsets. */
  static boolean implicitOffsets(ByteBuffer h) {
    if (magic(h) == KafkaBatch.MAGIC) {
      return lastOffsetDelta(h) == recordCount(h) - 1;
    }
    return (attributes(h) & EXPLICIT_OFFSETS_BIT) == 0;
  }
}
