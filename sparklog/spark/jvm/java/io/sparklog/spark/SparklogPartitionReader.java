package io.sparklog.spark;

import java.io.ByteArrayInputStream;
import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32C;

import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.util.TransferPair;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.StreamCapabilities;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one {@link RangePartition} from storage as {@link ColumnarBatch}es, one per frame,
 * sliced exactly to {@code [start, end)}: opens the partition's segments through Hadoop,
 * seeks through the sparse {@code .index} of sealed segments, validates every frame it
 * decodes (magic, length, CRC32C, codec), skips control frames and dispatches on the
 * frame's kind (byte 16, {@code magic}): an Arrow frame's IPC body (lz4/zstd buffer
 * compression included) goes to Spark zero-copy ({@link ArrowColumnVector}); a Kafka
 * record batch's records ({@link KafkaBatch}) are copied into Spark's key, value and
 * headers columns, the same rows an Arrow frame of those records gives. Topic, partition,
 * offset, timestamp and timestampType are computed from the frame header (and, in a Kafka
 * batch, the records' own offset and timestamp deltas). Only the output columns are
 * produced: a query needing no record column (e.g. {@code count()}) reads frames without
 * decoding their bodies.
 *
 * <p>Retention racing the scan: when the range's segments are gone, the partition's log
 * start offset decides, as in {@code sparklog/spark/source/scan.py}: the lost offsets fail
 * the task (failOnDataLoss) or are skipped with a warning.
 */
public class SparklogPartitionReader implements PartitionReader<ColumnarBatch> {
  private static final Logger LOG = LoggerFactory.getLogger(SparklogPartitionReader.class);

  private static final int K_TOPIC = 0;
  private static final int K_PARTITION = 1;
  private static final int K_OFFSET = 2;
  private static final int K_TIMESTAMP = 3;
  private static final int K_TIMESTAMP_TYPE = 4;
  private static final int K_RECORD = 5;
  /** A skip up to this far is read through by the stream (HDFS's block reader skips up to
   *  its TCP window, 128 KiB, without a new request); further, {@link #readAt} reads at
   *  the position instead. */
  private static final long STREAM_SKIP_BYTES = 128 << 10;
  /** Reads up to this size at a far position are positioned reads (headers). */
  private static final int PREAD_MAX_BYTES = 64 << 10;

  private final RangePartition range;
  private final StructField[] fields;
  private final int[] kinds;
  private final boolean recordColumns;
  private final boolean wantTimestamp;
  private final UTF8String topicUtf8;
  private final FileSystem fs;
  private final Path dir;
  private final BufferAllocator allocator;
  private final List<AutoCloseable> batchResources = new ArrayList<>();
  private final OnHeapColumnVector offsetVector;
  private final OnHeapColumnVector timestampVector;
  /** Record columns of Kafka batches, by output field (made when first needed). */
  private final OnHeapColumnVector[] kafkaVectors;
  private final KafkaBatch kafka = new KafkaBatch();
  private final byte[] header = new byte[FrameHeader.SIZE];
  private byte[] buf = new byte[1 << 16];

  private long position;
  private List<LogFiles.Segment> segments;
  /** Segments found replaced (compaction) under this read so far. */
  private int replans;
  private static final int MAX_REPLANS = 8;
  private int segIndex = -1;
  private FSDataInputStream in;
  private long streamPos;
  /** Whether the open stream reads at a position by itself (HDFS), not by seeking. */
  private boolean positionedReads;
  private long filePos;
  private long segLength;  // exact for indexed (sealed) segments, else read until EOF
  private boolean indexed;
  private ColumnarBatch current;
  /** Offset the previous frame read ends at; frames must not go back below it. */
  private long nextOffset = Long.MIN_VALUE;
  private long framesRead;
  private long bytesRead;
  private long recordsRead;

  /** A reader of {@code range} producing the columns of {@code schema}. */
  public SparklogPartitionReader(RangePartition range, StructType schema, Configuration conf) {
    this.range = range;
    this.fields = schema.fields();
    this.kinds = new int[fields.length];
    boolean records = false;
    boolean ts = false;
    for (int i = 0; i < fields.length; i++) {
      switch (fields[i].name()) {
        case Columns.TOPIC: kinds[i] = K_TOPIC; break;
        case Columns.PARTITION: kinds[i] = K_PARTITION; break;
        case Columns.OFFSET: kinds[i] = K_OFFSET; break;
        case Columns.TIMESTAMP: kinds[i] = K_TIMESTAMP; ts = true; break;
        case Columns.TIMESTAMP_TYPE: kinds[i] = K_TIMESTAMP_TYPE; break;
        default: kinds[i] = K_RECORD; records = true;
      }
    }
    this.recordColumns = records;
    this.wantTimestamp = ts;
    this.topicUtf8 = UTF8String.fromString(range.topic);
    this.position = range.start;
    this.offsetVector = new OnHeapColumnVector(1024, DataTypes.LongType);
    this.timestampVector = new OnHeapColumnVector(1024, DataTypes.TimestampType);
    this.kafkaVectors = new OnHeapColumnVector[fields.length];
    try {
      this.fs = LogFiles.fileSystem(range.root, conf);
    } catch (IOException e) {
      throw new IllegalStateException("cannot open storage root " + range.root + ": " + e, e);
    }
    this.dir = LogFiles.partitionDir(range.root, range.topic, range.partition);
    this.allocator = new RootAllocator(Long.MAX_VALUE);
  }

  /** A frame read and validated: its header fields and bytes ({@code buf[0, size)}). */
  private static final class Frame {
    long base;
    /** The frame's kind: {@link FrameHeader#MAGIC} (Arrow) or {@link KafkaBatch#MAGIC}. */
    int magic;
    int attributes;
    int recordCount;
    long lastOffset;
    long maxTimestamp;
    int size;
    long filePos;
    /** Whether the whole frame was read (in {@code buf}) and its CRC checked. */
    boolean body;
  }

  @Override
  public boolean next() throws IOException {
    releaseBatch();
    while (position < range.end) {
      Frame f = nextFrame();
      if (f == null) {
        position = range.end;  // no record left below the end (compaction gaps)
        break;
      }
      if ((f.attributes & FrameHeader.CONTROL_BIT) != 0) {
        position = Math.min(Math.max(position, f.lastOffset + 1), range.end);
        continue;
      }
      ColumnarBatch b = decode(f);
      if (b != null) {
        current = b;
        recordsRead += b.numRows();
        return true;
      }
    }
    return false;
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return ReaderMetrics.values(framesRead, bytesRead, recordsRead);
  }

  @Override
  public void close() throws IOException {
    releaseBatch();
    closeSegment();
    offsetVector.close();
    timestampVector.close();
    for (OnHeapColumnVector v : kafkaVectors) {
      if (v != null) {
        v.close();
      }
    }
    try {
      allocator.close();
    } catch (IllegalStateException e) {
      LOG.warn("sparklog: Arrow memory not released reading {}: {}", range, e.getMessage());
    }
  }

  private void releaseBatch() {
    current = null;
    for (int i = batchResources.size() - 1; i >= 0; i--) {
      try {
        batchResources.get(i).close();
      } catch (Exception e) {
        LOG.warn("sparklog: closing a batch of {} failed: {}", range, e.toString());
      }
    }
    batchResources.clear();
  }

  // --- segments ---------------------------------------------------------------------------

  private String where() {
    return "topic '" + range.topic + "' partition " + range.partition;
  }

  private void closeSegment() {
    if (in != null) {
      try {
        in.close();
      } catch (IOException e) {
        LOG.debug("closing {}", segments.get(segIndex).log, e);
      }
      in = null;
    }
  }

  /** Opens the segment holding {@code position}; false when the offsets were lost. */
  private boolean openSegmentFor() throws IOException {
    closeSegment();
    segments = LogFiles.listSegments(fs, dir);
    if (segments.isEmpty() || position < segments.get(0).baseOffset) {
      lost(null);
      return false;
    }
    int i = 0;
    while (i + 1 < segments.size() && segments.get(i + 1).baseOffset <= position) {
      i++;
    }
    return open(i);
  }

  private boolean open(int i) throws IOException {
    closeSegment();
    LogFiles.Segment seg = segments.get(i);
    try {
      in = fs.open(seg.log);
    } catch (FileNotFoundException e) {
      lost(e);
      return false;
    }
    segIndex = i;
    streamPos = 0;
    indexed = seg.hasIndex;
    segLength = indexed ? seg.listedSize : Long.MAX_VALUE;
    filePos = LogFiles.indexedPosition(fs, seg, position);
    positionedReads = in.hasCapability(StreamCapabilities.PREADBYTEBUFFER);
    return true;
  }

  /**
   * Moves to the next segment (listing again past the last one); false at the log's end.
   * The listing again finds the live segment holding {@code position}: the one just read
   * (then the next one is opened), or a cleaned segment that replaced it meanwhile
   * (compaction), which is read on from {@code position}.
   */
  private boolean nextSegment() throws IOException {
    Path current = segments.get(segIndex).log;
    if (segIndex + 1 >= segments.size()) {
      segments = LogFiles.listSegments(fs, dir);
      segIndex = -1;
      for (int i = 0; i < segments.size(); i++) {
        if (segments.get(i).baseOffset <= position) {
          segIndex = i;
        }
      }
      if (segIndex < 0) {
        lost(new FileNotFoundException("segment " + current + " of " + dir + " is gone"));
        return true;
      }
      if (!segments.get(segIndex).log.equals(current)) {
        return open(segIndex) || true;  // replaced by a cleaned segment: read on in it
      }
      if (segIndex + 1 >= segments.size()) {
        return false;
      }
    }
    return open(segIndex + 1) || true;
  }

  /**
   * The range's next offsets are gone (retention): raise or skip to the log start, as
   * Python's read_range does. {@code cause} null: found missing in the listing.
   */
  private void lost(IOException cause) throws IOException {
    closeSegment();
    segments = LogFiles.listSegments(fs, dir);
    long logStart = LogFiles.logStartOffset(fs, dir, segments);
    if (logStart <= position && cause != null && replans < MAX_REPLANS
        && !segments.isEmpty() && segments.get(0).baseOffset <= position) {
      replans++;  // the file was replaced by compaction and deleted: read the replacement
      return;
    }
    if (logStart <= position) {
      String why = where() + ": offset " + position + " is not in any segment of " + dir
          + " (log start " + logStart + ")";
      throw cause != null ? new IOException(why, cause) : new IOException(why);
    }
    long lostEnd = Math.min(logStart, range.end);
    String message = dataLossMessage(range.topic, range.partition, position, lostEnd,
        "deleted while the scan ran; the log now starts at " + logStart);
    if (range.failOnDataLoss) {
      throw new OffsetOutOfRangeException(message, cause);
    }
    LOG.warn("{} Skipping them (failOnDataLoss=false).", message.split(" If you")[0]);
    position = lostEnd;
  }

  /** The text of Python's {@code data_loss_message} (planning.py). */
  static String dataLossMessage(String topic, int partition, long first, long end, String why) {
    return "topic '" + topic + "' partition " + partition + ": offsets [" + first + ", " + end
        + ") are no longer available (" + why + "); some data may have been lost. If you "
        + "don't want the query to fail on such cases, set the source option failOnDataLoss "
        + "to false.";
  }

  // --- frames -----------------------------------------------------------------------------

  /**
   * Reads {@code len} bytes at {@code pos} of the open segment. A short read that the open
   * stream would reach only by a far seek (a frame header after a skipped body:
   * {@code count()}) is a positioned read where the stream has positioned reads of its own
   * ({@link #positionedReads}): on HDFS a seek past what the current block reader has
   * buffered makes the next stream read open a new block reader from there to the block's
   * end, a new DataNode request and connection that is then dropped unread, whereas a
   * positioned read asks the DataNode for these bytes only and keeps its connection for
   * the next one. Everything else (bodies, frames in sequence, short skips) reads the
   * stream.
   */
  private void readAt(long pos, byte[] dst, int off, int len) throws IOException {
    if (pos != streamPos && len <= PREAD_MAX_BYTES && positionedReads
        && (pos < streamPos || pos - streamPos > STREAM_SKIP_BYTES)) {
      in.readFully(pos, dst, off, len);
      return;
    }
    if (pos != streamPos) {
      in.seek(pos);
    }
    in.readFully(dst, off, len);
    streamPos = pos + len;
  }

  private CorruptFrameException corrupt(long pos, String why) {
    Path p = segIndex >= 0 && segments != null && segIndex < segments.size()
        ? segments.get(segIndex).log : dir;
    return new CorruptFrameException("corrupt frame in " + p + " at position " + pos + " ("
        + where() + ", reading offsets [" + range.start + ", " + range.end + ")): " + why);
  }

  /** The next valid frame with records at or after {@code position} and before the end. */
  private Frame nextFrame() throws IOException {
    while (position < range.end) {
      if (in == null) {
        if (!openSegmentFor()) {
          continue;
        }
      }
      if (filePos + FrameHeader.SIZE > segLength) {
        if (filePos != segLength) {
          throw corrupt(filePos, (segLength - filePos) + " bytes left at the end of the "
              + "segment, less than a frame header");
        }
        if (!nextSegment()) {
          throw beyondEnd();
        }
        continue;
      }
      try {
        readAt(filePos, header, 0, FrameHeader.SIZE);
      } catch (EOFException e) {
        if (indexed) {
          throw corrupt(filePos, "the segment ends inside a frame header");
        }
        if (!nextSegment()) {
          throw beyondEnd();
        }
        continue;
      } catch (FileNotFoundException e) {
        lost(e);
        continue;
      }
      ByteBuffer h = ByteBuffer.wrap(header);
      long base = FrameHeader.baseOffset(h);
      int length = FrameHeader.length(h);
      int magic = FrameHeader.magic(h);
      if (length < FrameHeader.SIZE - FrameHeader.LOG_OVERHEAD || !FrameHeader.knownMagic(h)) {
        throw corrupt(filePos, "bad frame header (length " + length + ", magic " + magic
            + ": 1 is an Arrow frame, 2 a Kafka record batch)");
      }
      if (base < nextOffset) {
        throw corrupt(filePos, "base offset " + base + " is below the previous frame's next "
            + "offset " + nextOffset + " (offsets must grow through a partition)");
      }
      if (base >= range.end) {
        return null;
      }
      long fileEnd = filePos + length + (long) FrameHeader.LOG_OVERHEAD;
      if (fileEnd > segments.get(segIndex).listedSize && fileEnd > visibleLength()) {
        // checked before any skip or allocation: a damaged length must not send the
        // reader into another file position or allocate gigabytes
        throw indexed || segIndex + 1 < segments.size()
            ? corrupt(filePos, "the frame of " + (length + (long) FrameHeader.LOG_OVERHEAD)
                + " bytes runs past the segment's end")
            : beyondEnd();
      }
      int size = length + FrameHeader.LOG_OVERHEAD;
      long last = base + FrameHeader.lastOffsetDelta(h);
      nextOffset = last + 1;
      if (last < position) {
        filePos += size;
        continue;
      }
      if (!needsBody(h) && filePos + size <= segments.get(segIndex).listedSize) {
        // nothing of the body is queried: the header alone answers (count(), offsets)
        Frame f = headerOnly(h, filePos, size);
        framesRead++;
        bytesRead += FrameHeader.SIZE;
        filePos += size;
        return f;
      }
      if (buf.length < size) {
        buf = new byte[Math.max(size, buf.length * 2)];
      }
      System.arraycopy(header, 0, buf, 0, FrameHeader.SIZE);
      try {
        readAt(filePos + FrameHeader.SIZE, buf, FrameHeader.SIZE, size - FrameHeader.SIZE);
      } catch (EOFException e) {
        throw indexed || segIndex + 1 < segments.size()
            ? corrupt(filePos, "the frame of " + size + " bytes runs past the segment's end")
            : beyondEnd();
      } catch (FileNotFoundException e) {
        lost(e);
        continue;
      }
      Frame f = validate(filePos, size);
      framesRead++;
      bytesRead += size;
      filePos += size;
      return f;
    }
    return null;
  }

  /** The bytes of the open segment a reader can see now (a file being written grows
   *  past its listed size; HDFS reports that through getVisibleLength()). */
  private long visibleLength() throws IOException {
    return LogFiles.visibleLength(fs, segments.get(segIndex).log, in);
  }

  private IOException beyondEnd() {
    return new OffsetOutOfRangeException(where() + ": offsets [" + position + ", " + range.end
        + ") are beyond the end of the log in " + dir, null);
  }

  /**
   * Whether the frame of header {@code h} must be read whole: for record columns, explicit
   * offsets (an Arrow frame's bit 6; a Kafka batch's records carry their own offset deltas,
   * which only a {@code lastOffsetDelta} of {@code recordCount - 1} leaves implicit), or
   * CreateTime timestamps, and control frames always (they are small, and a damaged control
   * bit must not silently drop a frame of records from a count). Otherwise
   * ({@code count()}, queries of offsets or LogAppendTime timestamps only) the header
   * answers, and the body is neither read nor CRC-checked, as Parquet answers
   * {@code count()} from its footers.
   */
  private boolean needsBody(ByteBuffer h) {
    int attributes = FrameHeader.attributes(h);
    return recordColumns || !FrameHeader.implicitOffsets(h)
        || (attributes & FrameHeader.CONTROL_BIT) != 0
        || (wantTimestamp && (attributes & FrameHeader.LOG_APPEND_TIME_BIT) == 0);
  }

  /** The frame of header {@code h} without its body (implicit offsets, as
   *  {@link #needsBody} leaves no other): they must match its record count, since the CRC
   *  that covers both is not checked here. */
  private Frame headerOnly(ByteBuffer h, long pos, int size) throws CorruptFrameException {
    Frame f = frameOf(h, pos, size);
    if (f.lastOffset - f.base != f.recordCount - 1) {
      throw corrupt(pos, "record count " + f.recordCount + ", last offset delta "
          + (f.lastOffset - f.base) + " (implicit offsets)");
    }
    return f;
  }

  private Frame validate(long pos, int size) throws CorruptFrameException {
    ByteBuffer b = ByteBuffer.wrap(buf, 0, size);
    CRC32C crc = new CRC32C();
    crc.update(buf, FrameHeader.CRC_START, size - FrameHeader.CRC_START);
    int stored = FrameHeader.crc(b);
    if ((int) crc.getValue() != stored) {
      throw corrupt(pos, String.format("CRC32C mismatch (stored 0x%08x, computed 0x%08x)",
          stored, (int) crc.getValue()));
    }
    Frame f = frameOf(b, pos, size);
    f.body = true;
    return f;
  }

  /** The header fields of the frame at {@code pos}, checked for consistency. */
  private Frame frameOf(ByteBuffer b, long pos, int size) throws CorruptFrameException {
    Frame f = new Frame();
    f.base = FrameHeader.baseOffset(b);
    f.magic = FrameHeader.magic(b);
    f.attributes = FrameHeader.attributes(b);
    int lastDelta = FrameHeader.lastOffsetDelta(b);
    f.maxTimestamp = FrameHeader.maxTimestamp(b);
    f.recordCount = FrameHeader.recordCount(b);
    if (f.recordCount <= 0 || lastDelta < f.recordCount - 1) {
      throw corrupt(pos, "record count " + f.recordCount + ", last offset delta " + lastDelta);
    }
    if (!FrameHeader.knownCodec(b)) {
      throw corrupt(pos, "unknown codec " + (f.attributes & FrameHeader.CODEC_MASK)
          + (f.magic == KafkaBatch.MAGIC
          ? " (a Kafka record batch's are 0-4)" : " (an Arrow frame's are 0-2)"));
    }
    f.lastOffset = f.base + lastDelta;
    f.size = size;
    f.filePos = pos;
    return f;
  }

  // --- decoding ---------------------------------------------------------------------------

  private ColumnarBatch decode(Frame f) throws IOException {
    boolean logAppendTime = (f.attributes & FrameHeader.LOG_APPEND_TIME_BIT) != 0;
    if (f.magic == KafkaBatch.MAGIC) {
      if (f.body && (recordColumns || (wantTimestamp && !logAppendTime)
          || f.lastOffset - f.base != f.recordCount - 1)) {
        return decodeKafka(f, logAppendTime);
      }
      // the header answers (implicit offsets, no record column): as an Arrow frame's
    }
    boolean explicit = f.magic == FrameHeader.MAGIC
        && (f.attributes & FrameHeader.EXPLICIT_OFFSETS_BIT) != 0;
    VectorSchemaRoot root = null;
    if (recordColumns || explicit || (wantTimestamp && !logAppendTime)) {
      ArrowStreamReader reader;
      try {
        reader = new ArrowStreamReader(
            new ByteArrayInputStream(buf, FrameHeader.SIZE, f.size - FrameHeader.SIZE),
            allocator, CommonsCompressionFactory.INSTANCE);
        batchResources.add(reader);
        if (!reader.loadNextBatch()) {
          throw corrupt(f.filePos, "the Arrow IPC body holds no record batch");
        }
        root = reader.getVectorSchemaRoot();
      } catch (CorruptFrameException e) {
        throw e;
      } catch (IOException | RuntimeException e) {
        throw corrupt(f.filePos, "cannot decode the Arrow IPC body: " + e);
      }
      if (root.getRowCount() != f.recordCount) {
        throw corrupt(f.filePos, "the body holds " + root.getRowCount() + " records, the "
            + "header says " + f.recordCount);
      }
    }
    int lo;
    int hi;
    IntVector deltas = null;
    if (explicit) {
      FieldVector v = root.getVector(Columns.BODY_OFFSET_DELTA);
      if (!(v instanceof IntVector)) {
        throw corrupt(f.filePos, "explicit-offset frame without an int32 __offset_delta column");
      }
      deltas = (IntVector) v;
      lo = f.recordCount;
      hi = f.recordCount;
      long prev = -1;
      for (int i = 0; i < f.recordCount; i++) {
        long off = f.base + deltas.get(i);
        if (off <= prev) {
          throw corrupt(f.filePos, "explicit offsets do not grow at record " + i);
        }
        prev = off;
        if (lo == f.recordCount && off >= position) {
          lo = i;
        }
        if (off >= range.end) {
          hi = i;
          break;
        }
      }
      hi = Math.max(hi, lo);
    } else {
      lo = (int) Math.max(position - f.base, 0);
      hi = (int) Math.min(range.end - f.base, f.recordCount);
    }
    position = Math.min(Math.max(position, f.lastOffset + 1), range.end);
    int n = hi - lo;
    if (n <= 0) {
      return null;
    }
    ColumnVector[] cols = new ColumnVector[fields.length];
    for (int j = 0; j < fields.length; j++) {
      DataType type = fields[j].dataType();
      ColumnVector constant = constantColumn(kinds[j], n, type, logAppendTime);
      if (constant != null) {
        cols[j] = constant;
        continue;
      }
      switch (kinds[j]) {
        case K_OFFSET: {
          offsetVector.reset();
          offsetVector.reserve(n);
          for (int i = 0; i < n; i++) {
            offsetVector.putLong(i, explicit ? f.base + deltas.get(lo + i) : f.base + lo + i);
          }
          cols[j] = offsetVector;
          break;
        }
        case K_TIMESTAMP: {
          if (logAppendTime) {
            ConstantColumnVector c = new ConstantColumnVector(n, type);
            c.setLong(Math.multiplyExact(f.maxTimestamp, 1000L));
            cols[j] = c;
            break;
          }
          FieldVector v = root.getVector(Columns.BODY_TIMESTAMP);
          if (!(v instanceof BaseFixedWidthVector) || !(v.getField().getType()
              instanceof ArrowType.Timestamp) || ((ArrowType.Timestamp) v.getField().getType())
              .getUnit() != TimeUnit.MILLISECOND) {
            throw corrupt(f.filePos, "no __timestamp column of timestamp[ms] in the body");
          }
          timestampVector.reset();
          timestampVector.reserve(n);
          var data = ((BaseFixedWidthVector) v).getDataBuffer();
          for (int i = 0; i < n; i++) {
            timestampVector.putLong(i, data.getLong((long) (lo + i) * 8) * 1000L);
          }
          cols[j] = timestampVector;
          break;
        }
        default: {
          String name = fields[j].name();
          FieldVector v = root.getVector(name);
          if (v == null) {
            if (name.equals(Columns.HEADERS)) {
              ConstantColumnVector c = new ConstantColumnVector(n, type);
              c.setNull();
              cols[j] = c;
              break;
            }
            throw new SchemaMismatchException(where() + ": the frame at position " + f.filePos
                + " has no column '" + name + "'");
          }
          if (!ArrowTypes.direct(v.getField(), type)) {
            throw new SchemaMismatchException(where() + ": column '" + name + "' of the frame "
                + "at position " + f.filePos + " has Arrow type " + v.getField()
                + ", not one read as " + type.simpleString());
          }
          if (lo != 0 || n != f.recordCount) {
            TransferPair tp = v.getTransferPair(allocator);
            tp.splitAndTransfer(lo, n);
            v = (FieldVector) tp.getTo();
            batchResources.add(v);
          }
          cols[j] = new ArrowColumnVector(v);
        }
      }
    }
    return new ColumnarBatch(cols, n);
  }

  /**
   * The rows of the Kafka record batch {@code f} (in {@code buf}) with offsets in
   * {@code [position, range.end)}: its records decoded ({@link KafkaBatch}), their offsets
   * {@code base + offsetDelta}, their timestamps, and key, value and headers copied into
   * Spark's columns (a record without headers has null headers, as in Spark's Kafka
   * source and the Python reader). A Kafka batch holds a raw topic's records only: any
   * other record column is a schema mismatch.
   */
  private ColumnarBatch decodeKafka(Frame f, boolean logAppendTime) throws IOException {
    try {
      kafka.decode(buf, f.size);
    } catch (KafkaBatch.MalformedBatchException e) {
      throw corrupt(f.filePos, "Kafka record batch (" + KafkaBatch.codecName(
          f.attributes & FrameHeader.CODEC_MASK) + "): " + e.getMessage());
    }
    int lo = kafka.firstAtOrAfter(f.base, position);
    int hi = Math.max(lo, kafka.firstAtOrAfter(f.base, range.end));
    position = Math.min(Math.max(position, f.lastOffset + 1), range.end);
    int n = hi - lo;
    if (n <= 0) {
      return null;
    }
    ColumnVector[] cols = new ColumnVector[fields.length];
    for (int j = 0; j < fields.length; j++) {
      DataType type = fields[j].dataType();
      ColumnVector constant = constantColumn(kinds[j], n, type, logAppendTime);
      if (constant != null) {
        cols[j] = constant;
        continue;
      }
      switch (kinds[j]) {
        case K_OFFSET: {
          offsetVector.reset();
          offsetVector.reserve(n);
          for (int i = 0; i < n; i++) {
            offsetVector.putLong(i, f.base + kafka.offsetDelta[lo + i]);
          }
          cols[j] = offsetVector;
          break;
        }
        case K_TIMESTAMP: {
          timestampVector.reset();
          timestampVector.reserve(n);
          for (int i = 0; i < n; i++) {
            timestampVector.putLong(i, kafka.timestamp[lo + i] * 1000L);
          }
          cols[j] = timestampVector;
          break;
        }
        default:
          cols[j] = kafkaColumn(j, f, lo, n);
      }
    }
    return new ColumnarBatch(cols, n);
  }

  /** The column of field kind {@code kind} that is the same for all {@code n} rows of a
   *  frame (topic, partition, timestamp type), or null for a kind read from the frame. */
  private ColumnVector constantColumn(int kind, int n, DataType type, boolean logAppendTime) {
    ConstantColumnVector c;
    switch (kind) {
      case K_TOPIC:
        c = new ConstantColumnVector(n, type);
        c.setUtf8String(topicUtf8);
        return c;
      case K_PARTITION:
        c = new ConstantColumnVector(n, type);
        c.setInt(range.partition);
        return c;
      case K_TIMESTAMP_TYPE:
        c = new ConstantColumnVector(n, type);
        c.setInt(logAppendTime ? 1 : 0);
        return c;
      default:
        return null;
    }
  }

  /** Output field {@code j} (key, value or headers) of records {@code [lo, lo + n)} of the
   *  decoded Kafka batch. */
  private OnHeapColumnVector kafkaColumn(int j, Frame f, int lo, int n)
      throws SchemaMismatchException {
    String name = fields[j].name();
    DataType type = fields[j].dataType();
    DataType want = name.equals(Columns.HEADERS) ? Columns.kafkaSchema(true)
        .apply(Columns.HEADERS).dataType() : DataTypes.BinaryType;
    if (!(name.equals("key") || name.equals("value") || name.equals(Columns.HEADERS))
        || !want.sameType(type)) {
      throw new SchemaMismatchException(where() + ": the frame at position " + f.filePos
          + " is a Kafka record batch (key, value and headers: a raw topic's records), "
          + "which has no column '" + name + "' of type " + type.simpleString());
    }
    OnHeapColumnVector v = kafkaVectors[j];
    if (v == null) {
      v = new OnHeapColumnVector(Math.max(n, 1024), type);
      kafkaVectors[j] = v;
    }
    v.reset();
    v.reserve(n);
    KafkaBatch k = kafka;
    byte[] data = k.data;
    if (name.equals("key") || name.equals("value")) {
      int[] pos = name.equals("key") ? k.keyPos : k.valuePos;
      int[] len = name.equals("key") ? k.keyLen : k.valueLen;
      for (int i = lo; i < lo + n; i++) {
        if (len[i] < 0) {
          v.appendNull();
        } else {
          v.appendByteArray(data, pos[i], len[i]);
        }
      }
      return v;
    }
    WritableColumnVector items = v.arrayData();
    WritableColumnVector keys = items.getChild(0);
    WritableColumnVector values = items.getChild(1);
    for (int i = lo; i < lo + n; i++) {
      int count = k.headerCount[i];
      if (count == 0) {
        v.appendNull();
        continue;
      }
      v.appendArray(count);
      for (int h = k.headerFirst[i]; h < k.headerFirst[i] + count; h++) {
        items.appendStruct(false);
        keys.appendByteArray(data, k.hKeyPos[h], k.hKeyLen[h]);
        if (k.hValueLen[h] < 0) {
          values.appendNull();
        } else {
          values.appendByteArray(data, k.hValuePos[h], k.hValueLen[h]);
        }
      }
    }
    return v;
  }

  /** A frame failed validation; the message names the segment file and position. */
  public static class CorruptFrameException extends IOException {
    private static final long serialVersionUID = 1L;

    CorruptFrameException(String message) {
      super(message);
    }
  }

  /** Offsets of the range are gone (retention) or beyond the end of the log. */
  public static class OffsetOutOfRangeException extends IOException {
    private static final long serialVersionUID = 1L;

    OffsetOutOfRangeException(String message, Throwable cause) {
      super(message, cause);
    }
  }

  /** A frame's columns do not match the output schema. */
  public static class SchemaMismatchException extends IOException {
    private static final long serialVersionUID = 1L;

    SchemaMismatchException(String message) {
      super(message);
    }
  }
}
