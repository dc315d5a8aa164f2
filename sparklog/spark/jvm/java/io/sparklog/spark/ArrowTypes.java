package io.sparklog.spark;

import java.util.List;

import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Which Arrow record columns Spark's {@code ArrowColumnVector} reads as the Spark type the
 * source declares without any conversion (see {@code _spark_type} in
 * {@code sparklog/spark/source/schema.py}). Columns needing a conversion (unsigned
 * integers, timestamps other than microseconds, dictionary or view encodings, maps...)
 * keep the scan on the Python reader.
 */
public final class ArrowTypes {
  private ArrowTypes() {
  }

  /** True if the Arrow field {@code f} reads 1:1 as the Spark type {@code t}. */
  public static boolean direct(Field f, DataType t) {
    if (f.getDictionary() != null) {
      return false;
    }
    ArrowType a = f.getType();
    switch (a.getTypeID()) {
      case Bool:
        return t instanceof BooleanType;
      case Int: {
        ArrowType.Int i = (ArrowType.Int) a;
        if (!i.getIsSigned()) {
          return false;
        }
        switch (i.getBitWidth()) {
          case 8: return t instanceof ByteType;
          case 16: return t instanceof ShortType;
          case 32: return t instanceof IntegerType;
          case 64: return t instanceof LongType;
          default: return false;
        }
      }
      case FloatingPoint: {
        FloatingPointPrecision p = ((ArrowType.FloatingPoint) a).getPrecision();
        return (p == FloatingPointPrecision.SINGLE && t instanceof FloatType)
            || (p == FloatingPointPrecision.DOUBLE && t instanceof DoubleType);
      }
      case Decimal: {
        ArrowType.Decimal d = (ArrowType.Decimal) a;
        return d.getBitWidth() == 128 && t instanceof DecimalType
            && ((DecimalType) t).precision() == d.getPrecision()
            && ((DecimalType) t).scale() == d.getScale();
      }
      case Utf8:
      case LargeUtf8:
        return t instanceof StringType;
      case Binary:
      case LargeBinary:
        return t instanceof BinaryType;
      case Date:
        return ((ArrowType.Date) a).getUnit() == DateUnit.DAY && t instanceof DateType;
      case Timestamp:
        return ((ArrowType.Timestamp) a).getUnit() == TimeUnit.MICROSECOND
            && t instanceof TimestampType;
      case List: {
        if (!(t instanceof ArrayType)) {
          return false;
        }
        List<Field> children = f.getChildren();
        return children.size() == 1
            && direct(children.get(0), ((ArrayType) t).elementType());
      }
      case Struct: {
        if (!(t instanceof StructType)) {
          return false;
        }
        StructField[] sf = ((StructType) t).fields();
        List<Field> children = f.getChildren();
        if (children.size() != sf.length) {
          return false;
        }
        for (int i = 0; i < sf.length; i++) {
          if (!children.get(i).getName().equals(sf[i].name())
              || !direct(children.get(i), sf[i].dataType())) {
            return false;
          }
        }
        return true;
      }
      default:
        return false;
    }
  }
}
