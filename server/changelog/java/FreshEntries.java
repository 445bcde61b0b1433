package io.tierlake.internal;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataOperations;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The pending files of a fresh view with their data sequence numbers
 * ({@code tierlake_inc.`db`.`t`.`entries_after_<id>_at_<position>`},
 * IncrementalCatalog.java): what the view joins to order changes across
 * commits, computed in the driver when the query is planned.
 *
 * <p>Why not the stream's {@code all_entries}: that metadata table reads the
 * manifests of every retained snapshot, in tasks that run after planning; an
 * expiry between the two (stream maintenance, log retention, a user's) deletes
 * manifests of the older snapshots and the query fails ("Failed to open input
 * stream for file …-m0.avro"). The snapshots after a view's pin are kept while
 * it is pinned, so reading only theirs is safe, and it is cheaper: the
 * manifests of the pending appends, not of the whole retained history.
 *
 * <p>Rows: every file that an {@code append} snapshot after {@code <id>} (an
 * ancestor of the current snapshot) added, with that snapshot's sequence
 * number (an appended file's data sequence number), i.e. exactly the files
 * the incremental read of the same snapshots returns. Where the snapshots
 * after {@code <id>} were expired (the incremental read then scans every live
 * file): every live data file whose data sequence number is above
 * {@code <position>}.
 */
public final class FreshEntries {
  private FreshEntries() {}

  public static final StructType SCHEMA = new StructType()
      .add("status", DataTypes.IntegerType, false)
      .add("sequence_number", DataTypes.LongType, false)
      .add("data_file", new StructType().add("file_path", DataTypes.StringType, false), false);

  /** The pending files of {@code sparkTable} (Iceberg's SparkTable) after snapshot {@code after}. */
  public static org.apache.spark.sql.connector.read.ScanBuilder scanBuilder(Object sparkTable, long after,
                                                                          long position) {
    Files pending = pending(((SparkTable) sparkTable).table(), after, position);
    String[] paths = new String[pending.files.size()];
    for (int i = 0; i < paths.length; i++) paths[i] = pending.files.get(i).location();
    return new Rows(paths, pending.sequences.stream().mapToLong(Long::longValue).toArray());
  }

  /** Pending data files, each with its data sequence number (the commit it came in). */
  static final class Files {
    final List<DataFile> files = new ArrayList<>();
    final List<Long> sequences = new ArrayList<>();
    // From the appends after the start snapshot (false: every live file above the position).
    boolean incremental;
  }

  /**
   * Whether Iceberg can scan the appends after snapshot {@code after} of {@code sparkTable}
   * (Iceberg's SparkTable): IncrementalCatalog asks by reflection, as it compiles without Iceberg.
   */
  public static boolean readsAfter(Object sparkTable, long after) {
    return reaches(((SparkTable) sparkTable).table(), after);
  }

  /** Whether the snapshots after {@code after} can be read ({@link #snapshotsAfter}). */
  static boolean reaches(Table table, long after) {
    return snapshotsAfter(table, after) != null;
  }

  /**
   * The snapshots after {@code after} on the current snapshot's ancestry, newest first (none when
   * it is the current one); null when the walk through parents that were not expired never comes
   * to a snapshot whose parent is {@code after}. The start itself may be expired: Iceberg's
   * incremental scan checks the parent id only (SnapshotUtil.isParentAncestorOf), and this walk
   * must agree with it, or the local merge and the incremental read would disagree on which
   * files are pending.
   */
  static List<Snapshot> snapshotsAfter(Table table, long after) {
    List<Snapshot> snapshots = new ArrayList<>();
    Snapshot snapshot = table.currentSnapshot();
    if (snapshot != null && snapshot.snapshotId() == after) return snapshots;
    while (snapshot != null) {
      snapshots.add(snapshot);
      Long parent = snapshot.parentId();
      if (parent == null) return null;
      if (parent == after) return snapshots;
      snapshot = table.snapshot(parent);
    }
    return null;
  }

  /**
   * The files the appends after {@code after} added, oldest commit first; where those snapshots
   * were expired, every live data file whose data sequence number is above {@code position}.
   */
  static Files pending(Table table, long after, long position) {
    Files pending = new Files();
    List<Snapshot> snapshots = snapshotsAfter(table, after);
    boolean reached = snapshots != null;
    pending.incremental = reached;
    if (reached) {
      for (int i = snapshots.size() - 1; i >= 0; i--) {
        Snapshot append = snapshots.get(i);
        if (!DataOperations.APPEND.equals(append.operation())) continue;
        for (DataFile file : append.addedDataFiles(table.io())) {
          pending.files.add(file);
          pending.sequences.add(append.sequenceNumber());
        }
      }
    } else {
      try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
        for (FileScanTask task : tasks) {
          Long sequence = task.file().dataSequenceNumber();
          if (sequence != null && sequence > position) {
            pending.files.add(task.file());
            pending.sequences.add(sequence);
          }
        }
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }
    return pending;
  }

  /** The rows, in one partition (a few per pending commit). */
  static final class Rows implements ScanBuilder, Scan, Batch, InputPartition, PartitionReaderFactory,
      Serializable {
    private final String[] paths;
    private final long[] sequences;

    Rows(String[] paths, long[] sequences) {
      this.paths = paths;
      this.sequences = sequences;
    }

    @Override public Scan build() { return this; }
    @Override public StructType readSchema() { return SCHEMA; }
    @Override public Batch toBatch() { return this; }
    @Override public InputPartition[] planInputPartitions() {
      return paths.length == 0 ? new InputPartition[0] : new InputPartition[] {this};
    }
    @Override public PartitionReaderFactory createReaderFactory() { return this; }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      Rows rows = (Rows) partition;
      return new PartitionReader<InternalRow>() {
        private int at = -1;

        @Override public boolean next() { return ++at < rows.paths.length; }

        @Override
        public InternalRow get() {
          return new GenericInternalRow(new Object[] {1, rows.sequences[at],
              new GenericInternalRow(new Object[] {UTF8String.fromString(rows.paths[at])})});
        }

        @Override public void close() {}
      };
    }
  }
}
