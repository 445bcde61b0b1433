package io.tierlake.internal;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.MetadataColumn;
import org.apache.spark.sql.connector.catalog.SupportsMetadataColumns;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The incremental read a fresh view names (server/changelog/fresh_view.py,
 * docs/tiering.md "Fresh views"). Spark 3.5 SQL has no syntax for a read
 * option, so a view cannot ask Iceberg for the snapshot range a round reads
 * with {@code start-snapshot-id}; this read-only catalog gives that read a
 * table name:
 *
 * <pre>  tierlake_inc.`db`.`t`.`after_&lt;snapshotId&gt;`</pre>
 *
 * is {@code spark_catalog.db.t} (an Iceberg table) read with the option
 * {@code start-snapshot-id=<snapshotId>}: Iceberg plans an
 * IncrementalAppendScan, i.e. only the data files that the {@code append}
 * snapshots after that snapshot added (replace commits are skipped, their
 * rows being the originals'), so the cost follows what was committed after
 * the position, not the table's history. Filters and column pruning are
 * pushed down as usual, and the metadata columns ({@code _file}, {@code _pos})
 * stay available.
 *
 * Registered as {@code spark.sql.catalog.tierlake_inc} by
 * server/runtime/session.py; no compile-time Iceberg dependency (the table
 * is loaded and scanned through Spark's connector interfaces). Nothing can
 * be created, altered or listed here.
 */
public final class IncrementalCatalog implements TableCatalog {
  private static final Pattern AFTER = Pattern.compile("after_(\\d+)");
  private static final Pattern ENTRIES_AFTER = Pattern.compile("entries_after_(\\d+)(?:_at_(\\d+))?");
  private static final Pattern MERGED = Pattern.compile(
      "(winners|pending)_after_(\\d+)_at_(\\d+)(?:_keys((?:_\\d+)+)_seq_(\\d+|none)_change_(\\d+|none))?");
  private static final String SESSION_CATALOG = "spark_catalog";
  private String name;

  @Override public void initialize(String name, CaseInsensitiveStringMap options) { this.name = name; }
  @Override public String name() { return name; }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    Matcher entries = ENTRIES_AFTER.matcher(ident.name());
    if (entries.matches()) return entriesAfter(ident, entries.group(1), entries.group(2));
    Matcher merged = MERGED.matcher(ident.name());
    if (merged.matches()) return merged(ident, merged);
    Matcher m = AFTER.matcher(ident.name());
    String[] ns = ident.namespace();
    if (ns.length != 2 || !m.matches()) throw new NoSuchTableException(ident);
    // The session the statement runs in (a Thrift Server session's own
    // catalog); the server's default session when a thread has none.
    TableCatalog session = (TableCatalog)
        SparkSession.active().sessionState().catalogManager().catalog(SESSION_CATALOG);
    Table stream = session.loadTable(Identifier.of(new String[] {ns[0]}, ns[1]));
    if (!"iceberg".equalsIgnoreCase(stream.properties().get("provider"))
        || !(stream instanceof SupportsRead) || !(stream instanceof SupportsMetadataColumns)) {
      throw new IllegalArgumentException(ns[0] + "." + ns[1] + " is not an Iceberg table");
    }
    String after = m.group(1);
    // Nothing committed after the position: Iceberg refuses a start that is
    // the end snapshot ("not a parent ancestor of end snapshot"), so the
    // answer is an empty scan. The table was loaded once: its current
    // snapshot is the one the scan would read.
    boolean empty = after.equals(stream.properties().get("current-snapshot-id"));
    if (!empty && !readsAfter(stream, Long.parseLong(after))) {
      // The snapshot after the start was expired (a user's expire_snapshots,
      // or a view pinned before an expiry): Iceberg's incremental scan would
      // fail ("not a parent ancestor"). Every live file instead: the fresh
      // view keeps those committed after its position by their data sequence
      // number (all_entries), the same rows at the cost of a full scan. The
      // name says so in the plan (BatchScan <name>).
      return new After(stream, null, false, name + "." + ident + " [full scan: snapshots after " + after
          + " expired]");
    }
    return new After(stream, after, empty, name + "." + ident);
  }

  /**
   * {@code winners_after_<id>_at_<pos>_keys_<ids>_seq_<id|none>_change_<id|none>} and
   * {@code pending_after_<id>_at_<pos>}: a fresh view's pending changes, merged in the driver
   * (FreshMerge.java, compiled with Iceberg).
   */
  private Table merged(Identifier ident, Matcher m) throws NoSuchTableException {
    String[] ns = ident.namespace();
    boolean keyed = "winners".equals(m.group(1));
    if (ns.length != 2 || keyed != (m.group(4) != null)) throw new NoSuchTableException(ident);
    TableCatalog session = (TableCatalog)
        SparkSession.active().sessionState().catalogManager().catalog(SESSION_CATALOG);
    Table stream = session.loadTable(Identifier.of(new String[] {ns[0]}, ns[1]));
    if (!"iceberg".equalsIgnoreCase(stream.properties().get("provider"))) {
      throw new IllegalArgumentException(ns[0] + "." + ns[1] + " is not an Iceberg table");
    }
    int[] keys = null;
    int sequenceBy = -1;
    int change = -1;
    if (keyed) {
      String[] ids = m.group(4).substring(1).split("_");
      keys = new int[ids.length];
      for (int i = 0; i < ids.length; i++) keys[i] = Integer.parseInt(ids[i]);
      sequenceBy = "none".equals(m.group(5)) ? -1 : Integer.parseInt(m.group(5));
      change = "none".equals(m.group(6)) ? -1 : Integer.parseInt(m.group(6));
    }
    java.lang.reflect.Method table;
    try {
      table = Class.forName("io.tierlake.internal.FreshMerge").getMethod("table",
          Object.class, Object.class, String[].class, String.class, long.class, long.class, int[].class, int.class,
          int.class);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("fresh views need tierlake's classes compiled with Iceberg", e);
    }
    return (Table) invoke(table, stream, this, ns, name + "." + ident,
        Long.parseLong(m.group(2)), Long.parseLong(m.group(3)), keys, sequenceBy, change);
  }

  /**
   * A static method of a class compiled with Iceberg (FreshMerge, FreshEntries), called by
   * reflection because this class compiles without it: what the method threw is rethrown as it
   * was, so the client sees Iceberg's or tierlake's own error, not a reflection wrapper.
   */
  static Object invoke(java.lang.reflect.Method method, Object... args) {
    try {
      return method.invoke(null, args);
    } catch (java.lang.reflect.InvocationTargetException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RuntimeException) throw (RuntimeException) cause;
      throw new IllegalStateException(cause);
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * {@code tierlake_inc.`db`.`t`.`entries_after_<id>_at_<position>`}: the
   * pending files with their data sequence numbers, which a fresh view joins
   * to order changes across commits (FreshEntries.java: computed from the
   * snapshots after {@code <id>} only, which the view's pin keeps); no rows
   * when nothing was committed after {@code <id>} (the view's stream part is
   * empty then too), so a view with nothing pending reads no stream metadata
   * at all. Without {@code _at_<position>}, or where FreshEntries could not
   * be compiled (no Iceberg jar): the stream's {@code all_entries}.
   */
  private Table entriesAfter(Identifier ident, String after, String position) throws NoSuchTableException {
    String[] ns = ident.namespace();
    if (ns.length != 2) throw new NoSuchTableException(ident);
    TableCatalog session = (TableCatalog)
        SparkSession.active().sessionState().catalogManager().catalog(SESSION_CATALOG);
    Identifier streamIdent = Identifier.of(new String[] {ns[0]}, ns[1]);
    if (position != null) {
      try {
        java.lang.reflect.Method scan = Class.forName("io.tierlake.internal.FreshEntries")
            .getMethod("scanBuilder", Object.class, long.class, long.class);
        StructType schema = (StructType) Class.forName("io.tierlake.internal.FreshEntries")
            .getField("SCHEMA").get(null);
        return new Computed(session, streamIdent, scan, schema, Long.parseLong(after), Long.parseLong(position),
            name + "." + ident);
      } catch (ReflectiveOperationException e) {
        // FreshEntries not compiled (no Iceberg jar): all_entries below
      }
    }
    Table stream = session.loadTable(streamIdent);
    if (!"iceberg".equalsIgnoreCase(stream.properties().get("provider"))) {
      throw new IllegalArgumentException(ns[0] + "." + ns[1] + " is not an Iceberg table");
    }
    boolean empty = after.equals(stream.properties().get("current-snapshot-id"));
    Table entries = session.loadTable(Identifier.of(new String[] {ns[0], ns[1]}, "all_entries"));
    return new Entries(entries, empty, name + "." + ident);
  }

  /**
   * FreshEntries' rows, computed when the scan is built (the query's planning). The stream is
   * loaded then too, not when the view is resolved: the schema is fixed, and a fresh view whose
   * pending changes are merged in the driver (FreshMerge.java) never builds this scan.
   */
  static final class Computed implements SupportsRead {
    private final TableCatalog session;
    private final Identifier streamIdent;
    private final java.lang.reflect.Method scan;
    private final StructType schema;
    private final long after;
    private final long position;
    private final String name;

    Computed(TableCatalog session, Identifier streamIdent, java.lang.reflect.Method scan, StructType schema,
             long after, long position, String name) {
      this.session = session;
      this.streamIdent = streamIdent;
      this.scan = scan;
      this.schema = schema;
      this.after = after;
      this.position = position;
      this.name = name;
    }

    @Override public String name() { return name; }
    @Override public StructType schema() { return schema; }
    @Override public Transform[] partitioning() { return new Transform[0]; }
    @Override public Map<String, String> properties() { return new HashMap<>(); }
    @Override public Set<TableCapability> capabilities() { return EnumSet.of(TableCapability.BATCH_READ); }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      Table stream;
      try {
        stream = session.loadTable(streamIdent);
      } catch (NoSuchTableException e) {
        throw new IllegalStateException(e);
      }
      if (!"iceberg".equalsIgnoreCase(stream.properties().get("provider"))) {
        throw new IllegalArgumentException(streamIdent + " is not an Iceberg table");
      }
      // Nothing committed after the position: no rows (the view's stream part is empty too).
      if (Long.toString(after).equals(stream.properties().get("current-snapshot-id"))) {
        return new EmptyScanBuilder(schema);
      }
      return (ScanBuilder) invoke(scan, stream, after, position);
    }
  }

  /** The stream's all_entries, or no rows. */
  static final class Entries implements SupportsRead {
    private final Table entries;
    private final boolean empty;
    private final String name;

    Entries(Table entries, boolean empty, String name) {
      this.entries = entries;
      this.empty = empty;
      this.name = name;
    }

    @Override public String name() { return name; }
    @Override public StructType schema() { return entries.schema(); }
    @Override public Transform[] partitioning() { return new Transform[0]; }
    @Override public Map<String, String> properties() { return entries.properties(); }
    @Override public Set<TableCapability> capabilities() { return EnumSet.of(TableCapability.BATCH_READ); }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      if (empty) return new EmptyScanBuilder(schema());
      return ((SupportsRead) entries).newScanBuilder(options);
    }
  }

  /**
   * Whether Iceberg can scan the appends after snapshot {@code after}: the walk the local merge
   * decides by too (FreshEntries.snapshotsAfter), so both forms of a view agree on it.
   */
  static boolean readsAfter(Table stream, long after) {
    try {
      java.lang.reflect.Method reads = Class.forName("io.tierlake.internal.FreshEntries")
          .getMethod("readsAfter", Object.class, long.class);
      return (Boolean) invoke(reads, stream, after);
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      return true; // no Iceberg classes, or not Iceberg's SparkTable: let Iceberg's own scan decide
    }
  }

  /** spark_catalog's table, scanned after a snapshot. */
  static final class After implements SupportsRead, SupportsMetadataColumns {
    private final Table stream;
    private final String after;
    private final boolean empty;
    private final String name;

    After(Table stream, String after, boolean empty, String name) {
      this.stream = stream;
      this.after = after;
      this.empty = empty;
      this.name = name;
    }

    @Override public String name() { return name; }
    @Override public StructType schema() { return stream.schema(); }
    @Override public Transform[] partitioning() { return stream.partitioning(); }
    @Override public Map<String, String> properties() { return stream.properties(); }
    @Override public Set<TableCapability> capabilities() { return EnumSet.of(TableCapability.BATCH_READ); }
    @Override public MetadataColumn[] metadataColumns() {
      return ((SupportsMetadataColumns) stream).metadataColumns();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      if (empty) return new EmptyScanBuilder(schema());
      if (after == null) return ((SupportsRead) stream).newScanBuilder(options); // the full scan
      Map<String, String> merged = new HashMap<>(options.asCaseSensitiveMap());
      merged.put("start-snapshot-id", after); // Iceberg's SparkReadOptions.START_SNAPSHOT_ID
      return ((SupportsRead) stream).newScanBuilder(new CaseInsensitiveStringMap(merged));
    }
  }

  /** No rows, with whatever columns (data or metadata) the query asks for. */
  static final class EmptyScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private StructType schema;

    EmptyScanBuilder(StructType schema) { this.schema = schema; }

    @Override public void pruneColumns(StructType required) { this.schema = required; }
    @Override public Scan build() { return this; }
    @Override public StructType readSchema() { return schema; }
    @Override public Batch toBatch() { return this; }
    @Override public InputPartition[] planInputPartitions() { return new InputPartition[0]; }
    @Override public PartitionReaderFactory createReaderFactory() {
      return partition -> {
        throw new IllegalStateException("an empty scan has no partitions");
      };
    }
  }

  @Override public Identifier[] listTables(String[] namespace) { return new Identifier[0]; }

  @Override
  public Table createTable(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> props) {
    throw new UnsupportedOperationException(name + " is read-only");
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw new UnsupportedOperationException(name + " is read-only");
  }

  @Override public boolean dropTable(Identifier ident) { return false; }

  @Override
  public void renameTable(Identifier from, Identifier to) {
    throw new UnsupportedOperationException(name + " is read-only");
  }
}
