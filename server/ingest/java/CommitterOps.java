package io.tierlake.internal;

import java.lang.reflect.Field;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.hive.HiveTableOperations;

/**
 * A stream table's committer's own table operations: Iceberg's Hive operations, except that
 * the first read after one of its own commits, when the metastore names the file just written,
 * takes the metadata it wrote instead of reading and parsing that file again.
 *
 * <p>Why: Iceberg reads a table back after every commit (the transaction's clean-up asks
 * {@code current()}, which refreshes): a metastore {@code get_table} and the metadata JSON
 * parsed again, 12 % of the server's CPU under 16 writers (half of it the parse), all of it
 * inside the table's commit lock, which is what limits a table's statements per second.
 *
 * <p>Exact because the commit landed with exactly that metadata at exactly that file
 * ({@link #doCommit} returns only then; a failed or unknown commit leaves nothing to
 * reuse): the file is what {@link org.apache.iceberg.TableMetadataParser} wrote from this
 * object, and reading it would give it back with its location set. The metastore is asked as
 * before, so a commit made by anyone else since is found as before (its file is read). Only the
 * first read after a commit of this object's can be served from memory.
 */
final class CommitterOps extends HiveTableOperations {
    private static final Field CONF;

    static {
        try {
            CONF = HiveTableOperations.class.getDeclaredField("conf");
            CONF.setAccessible(true);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private String written;
    private TableMetadata writtenMetadata;
    private String landed;
    private TableMetadata landedMetadata;
    /** Reads after a commit served from memory (tests, counters). */
    static final java.util.concurrent.atomic.AtomicLong REUSED = new java.util.concurrent.atomic.AtomicLong();

    private CommitterOps(Configuration conf, HiveTableOperations from, String catalogName) {
        super(conf, from.metaClients(), from.io(), catalogName, from.database(), from.table());
    }

    /**
     * {@code table} over operations of this kind, starting from the metadata {@code table} holds (nothing
     * read); {@code table} itself when its operations are not the Hive catalog's or already these.
     */
    static Table of(Table table) {
        if (!(table instanceof HasTableOperations)) {
            return table;
        }
        TableOperations ops = ((HasTableOperations) table).operations();
        if (!(ops instanceof HiveTableOperations) || ops instanceof CommitterOps) {
            return table;
        }
        HiveTableOperations hive = (HiveTableOperations) ops;
        TableMetadata current = hive.current();
        String name = table.name();
        String suffix = "." + hive.database() + "." + hive.table();
        // Only the operations' messages name the catalog: a name that does not end as expected keeps it whole.
        String catalog = name.toLowerCase(java.util.Locale.ROOT).endsWith(suffix.toLowerCase(java.util.Locale.ROOT))
                ? name.substring(0, name.length() - suffix.length()) : name;
        CommitterOps mine;
        try {
            mine = new CommitterOps((Configuration) CONF.get(hive), hive, catalog);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
        mine.seed(current);
        // The catalog's metrics reporter, as the table it loaded had it.
        return table instanceof BaseTable ? new BaseTable(mine, name, ((BaseTable) table).reporter())
                : new BaseTable(mine, name);
    }

    private void seed(TableMetadata metadata) {
        refreshFromMetadataLocation(metadata.metadataFileLocation(), null, 0, location -> metadata);
    }

    @Override
    protected String writeNewMetadataIfRequired(boolean newTable, TableMetadata metadata) {
        String location = super.writeNewMetadataIfRequired(newTable, metadata);
        written = location;
        writtenMetadata = metadata;
        return location;
    }

    @Override
    protected void doCommit(TableMetadata base, TableMetadata metadata) {
        written = null;
        writtenMetadata = null;
        landed = null;
        landedMetadata = null;
        super.doCommit(base, metadata);
        // Returned: the metastore points at the file written (a failure or an unknown state throws).
        landed = written;
        landedMetadata = writtenMetadata;
    }

    @Override
    protected void doRefresh() {
        String location = landed;
        TableMetadata metadata = landedMetadata;
        landed = null;
        landedMetadata = null;
        if (location == null || metadata == null) {
            super.doRefresh();
            return;
        }
        // The metastore is still asked (its answer also refills its cache, which the INSERT templates
        // read); only the file is not read and parsed again when the answer is the file just written.
        String current;
        try {
            current = metaClients().run(client -> client.getTable(database(), table())).getParameters()
                    .get(METADATA_LOCATION_PROP);
        } catch (org.apache.thrift.TException | InterruptedException | RuntimeException e) {
            if (e instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
            super.doRefresh();  // Iceberg's own read and its errors
            return;
        }
        if (!location.equals(current)) {
            super.doRefresh();
            return;
        }
        TableMetadata read = TableMetadata.buildFrom(metadata).discardChanges().withMetadataLocation(location).build();
        REUSED.incrementAndGet();
        refreshFromMetadataLocation(location, null, 0, l -> read);
    }
}
