package io.tierlake.internal;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegralType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Values as Spark compares grouping and join keys (docs/tiering.md, "Key types"): the one place
 * tierlake's own JVM code decides whether two keys are the same key (StreamIngest's group commit
 * and INSERT-time checks, FreshMerge's local merge), so that it agrees with the SQL the round and
 * the fresh view's distributed form run.
 *
 * <p>{@link #value} turns a value Spark holds internally ({@code row.get(i, type)}) into one whose
 * {@code equals}/{@code hashCode} are Spark's equality: BINARY by content (a {@code byte[]}
 * compares by identity), {@code -0.0} equal to {@code 0.0} and every NaN equal to NaN (Spark's
 * NormalizeFloatingNumbers, which its joins, windows and aggregates apply to their keys), DECIMAL
 * by value, STRING by its bytes, structs and arrays element by element; integers, booleans, dates
 * (days) and timestamps (microseconds, with or without time zone) are already exact; integers are
 * given as longs and floats as doubles, so a key keeps its identity across Iceberg's type
 * promotions (INT to BIGINT, FLOAT to DOUBLE, a wider DECIMAL) between two statements. {@link #key}
 * is a row's key columns as one such value (a list: composite keys compare column by column, with
 * no separator two values could collide on). Maps are not grouping keys in Spark; they are given
 * here as the list of their entries in order, for comparing whole rows ({@code to_json} in the
 * round's SQL compares them in order too).
 */
public final class SparkKeys {
  private SparkKeys() {}

  /** A BINARY value compared by content; shown as {@code X'…'}. */
  public static final class Bytes {
    private final byte[] bytes;
    private final int hash;

    Bytes(byte[] bytes) {
      this.bytes = bytes;
      this.hash = Arrays.hashCode(bytes);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Bytes && Arrays.equals(bytes, ((Bytes) o).bytes);
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public String toString() {
      StringBuilder b = new StringBuilder(bytes.length * 2 + 3).append("X'");
      for (byte x : bytes) b.append(Character.toUpperCase(Character.forDigit((x >> 4) & 0xF, 16)))
          .append(Character.toUpperCase(Character.forDigit(x & 0xF, 16)));
      return b.append('\'').toString();
    }
  }

  /**
   * Spark's own ordering of {@code type}'s internal values (what ORDER BY uses): for sequence-by
   * values, which decide which change of a key wins.
   */
  public static scala.math.Ordering<Object> ordering(DataType type) {
    return org.apache.spark.sql.catalyst.util.TypeUtils.getInterpretedOrdering(type);
  }

  /** {@code v} (Spark's internal value of {@code type}, or null) as a value compared as Spark compares it. */
  public static Object value(Object v, DataType type) {
    if (v == null) return null;
    if (type instanceof BinaryType) return new Bytes(((byte[]) v).clone());
    if (type instanceof DoubleType) {
      double d = (Double) v;
      if (Double.isNaN(d)) return Double.NaN;
      return d == 0.0d ? 0.0d : d; // -0.0 == 0.0
    }
    if (type instanceof FloatType) { // as a double: a FLOAT column promoted to DOUBLE keeps its keys
      float f = (Float) v;
      if (Float.isNaN(f)) return Double.NaN;
      return f == 0.0f ? 0.0d : (double) f;
    }
    if (type instanceof IntegralType) return ((Number) v).longValue(); // likewise INT promoted to BIGINT
    if (type instanceof DecimalType) {
      BigDecimal d = ((org.apache.spark.sql.types.Decimal) v).toJavaBigDecimal();
      return d.signum() == 0 ? BigDecimal.ZERO : d.stripTrailingZeros();
    }
    if (type instanceof StringType) return ((UTF8String) v).clone(); // its own bytes, not a reader's buffer
    if (type instanceof StructType) {
      StructType struct = (StructType) type;
      InternalRow row = (InternalRow) v;
      List<Object> out = new ArrayList<>(struct.fields().length);
      for (int i = 0; i < struct.fields().length; i++) {
        DataType t = struct.fields()[i].dataType();
        out.add(row.isNullAt(i) ? null : value(row.get(i, t), t));
      }
      return out;
    }
    if (type instanceof ArrayType) {
      return elements((ArrayData) v, ((ArrayType) type).elementType());
    }
    if (type instanceof MapType) {
      MapData map = (MapData) v;
      return Arrays.asList(elements(map.keyArray(), ((MapType) type).keyType()),
          elements(map.valueArray(), ((MapType) type).valueType()));
    }
    return v; // Boolean, Integer (DATE: days), Long (TIMESTAMP, TIMESTAMP_NTZ: microseconds): exact
  }

  private static List<Object> elements(ArrayData array, DataType elementType) {
    List<Object> out = new ArrayList<>(array.numElements());
    for (int i = 0; i < array.numElements(); i++) {
      out.add(array.isNullAt(i) ? null : value(array.get(i, elementType), elementType));
    }
    return out;
  }

  /** The values of {@code row} at {@code positions} (of {@code types}, by position in the row), as one key. */
  public static List<Object> key(InternalRow row, int[] positions, DataType[] types) {
    List<Object> out = new ArrayList<>(positions.length);
    for (int p : positions) out.add(row.isNullAt(p) ? null : value(row.get(p, types[p]), types[p]));
    return out;
  }

  /** A value from {@link #value} as a message shows it (BINARY as {@code X'…'}). */
  public static String show(Object value) {
    if (value instanceof BigDecimal) return ((BigDecimal) value).toPlainString();
    return String.valueOf(value);
  }
}
