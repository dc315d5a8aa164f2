package io.sparklog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.ProjectingInternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The Python batch when the scan falls back to it after columns were pruned: the Python
 * reader yields whole rows, this keeps the pruned columns.
 */
public class ProjectingBatch implements Batch {
  private final Batch delegate;
  private final InputPartition[] partitions;
  private final StructType output;
  private final int[] ordinals;

  /** Projects the rows of {@code delegate} (schema {@code full}) to {@code output}. */
  public ProjectingBatch(Batch delegate, InputPartition[] partitions, StructType full,
      StructType output) {
    this.delegate = delegate;
    this.partitions = partitions;
    this.output = output;
    this.ordinals = new int[output.fields().length];
    for (int i = 0; i < ordinals.length; i++) {
      ordinals[i] = full.fieldIndex(output.fields()[i].name());
    }
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return partitions;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory(delegate.createReaderFactory(), output, ordinals);
  }

  static final class Factory implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;
    private final PartitionReaderFactory delegate;
    private final StructType output;
    private final int[] ordinals;

    Factory(PartitionReaderFactory delegate, StructType output, int[] ordinals) {
      this.delegate = delegate;
      this.output = output;
      this.ordinals = ordinals;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      PartitionReader<InternalRow> rows = delegate.createReader(partition);
      List<Object> cols = new ArrayList<>();
      for (int o : ordinals) {
        cols.add(o);
      }
      ProjectingInternalRow row = new ProjectingInternalRow(output,
          scala.jdk.javaapi.CollectionConverters.asScala(cols).toIndexedSeq());
      return new PartitionReader<InternalRow>() {
        @Override
        public boolean next() throws IOException {
          return rows.next();
        }

        @Override
        public InternalRow get() {
          row.project(rows.get());
          return row;
        }

        @Override
        public void close() throws IOException {
          rows.close();
        }
      };
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return false;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      throw new UnsupportedOperationException("row reader");
    }
  }
}
