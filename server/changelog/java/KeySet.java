package io.tierlake.internal;

import java.io.Serializable;
import java.util.Collection;

/**
 * The keys of a fresh view's few pending changes as a set of primitive longs, for the lake scan's
 * test "is this row's key absent from the pending changes" (FreshMerge.SmallAntiJoin).
 *
 * <p>Why not Spark's InSet: for a BIGINT or TIMESTAMP key it probes a Scala immutable hash set of
 * boxed values, a boxing, a generic hash and a trie walk per lake row (about 25 ns; on a 1M-row
 * lake that was most of a fresh count(*)'s cost over the lake's). This set is open addressing over
 * a long[] at most a quarter full, probed by a generated call on the literal that holds it
 * (Invoke on an ObjectType literal: a final field of the generated class), so a row costs a
 * multiply, a shift and usually one array read.
 *
 * <p>Integral, date and timestamp keys only: their internal values are exact integers (a date an
 * int of days, a timestamp a long of microseconds). Immutable once built; serialised with the plan
 * to the executors.
 */
public final class KeySet implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final long EMPTY = Long.MIN_VALUE; // a slot holding no key; the key itself is kept apart

  private final long[] slots;
  private final int shift;
  private final boolean hasEmptyKey;
  private final int size;

  public KeySet(Collection<? extends Number> keys) {
    int capacity = 16;
    while (capacity < keys.size() * 4L) capacity <<= 1;
    slots = new long[capacity];
    java.util.Arrays.fill(slots, EMPTY);
    shift = 64 - Integer.numberOfTrailingZeros(capacity);
    boolean empty = false;
    int count = 0;
    for (Number n : keys) {
      long key = n.longValue();
      if (key == EMPTY) {
        if (!empty) count++;
        empty = true;
        continue;
      }
      int at = slot(key);
      while (slots[at] != EMPTY && slots[at] != key) at = (at + 1) & (slots.length - 1);
      if (slots[at] == EMPTY) count++;
      slots[at] = key;
    }
    hasEmptyKey = empty;
    size = count;
  }

  private int slot(long key) {
    return (int) ((key * 0x9E3779B97F4A7C15L) >>> shift);
  }

  public boolean contains(long key) {
    if (key == EMPTY) return hasEmptyKey;
    int at = slot(key);
    long found;
    while ((found = slots[at]) != EMPTY) {
      if (found == key) return true;
      at = (at + 1) & (slots.length - 1);
    }
    return false;
  }

  // One per Java type Spark gives a key column (Invoke finds the method by the argument's class).
  public boolean absent(long key) { return !contains(key); }

  public boolean absent(int key) { return !contains(key); }

  public boolean absent(short key) { return !contains(key); }

  public boolean absent(byte key) { return !contains(key); }

  public int size() { return size; }

  @Override
  public String toString() {
    return "pending keys (" + size + ")";
  }
}
