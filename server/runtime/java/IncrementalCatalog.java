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
  private static final String SESSION_CATALOG = "spark_catalog";
  private String name;

  @Override public void initialize(String name, CaseInsensitiveStringMap options) { this.name = name; }
  @Override public String name() { return name; }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
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
    return new After(stream, after, empty, name + "." + ident);
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
