package io.sparklog.spark;

/**
 * The 72-byte header of a sealed segment's {@code .index} file (docs/format.md, "Offset
 * index"), field positions named as in {@link FrameHeader}; mirrors the layout stated in
 * {@code sparklog/log/index.py}. Entries (u32 relative offset, u32 position) follow it.
 */
final class OffsetIndexHeader {
  static final String MAGIC = "SLOI";
  static final short VERSION = 1;
  static final int MAGIC_OFFSET = 0;
  static final int VERSION_OFFSET = 4;
  /** u16 flags (written as 0 before they existed: no flag set). */
  static final int FLAGS_OFFSET = 6;
  /** Flag: the segment holds no control frame, so {@code record_count} is the number of
   *  records a read of the whole segment returns. */
  static final int FLAG_NO_CONTROL = 1;
  static final int BASE_OFFSET_OFFSET = 8;
  static final int NEXT_OFFSET_OFFSET = 16;
  static final int LOG_SIZE_OFFSET = 24;
  static final int RECORD_COUNT_OFFSET = 48;
  static final int ENTRY_COUNT_OFFSET = 60;
  static final int HEADER_CRC_OFFSET = 64;
  static final int ENTRIES_CRC_OFFSET = 68;
  /** Bytes of the header; the entries start here. */
  static final int SIZE = 72;
  /** Bytes of one entry: relative offset, then position. */
  static final int ENTRY_SIZE = 8;
  static final int ENTRY_POSITION_OFFSET = 4;

  private OffsetIndexHeader() {
  }
}
