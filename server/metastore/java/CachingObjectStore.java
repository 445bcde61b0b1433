package io.tierlake.internal;

import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.hive.metastore.ObjectStore;
import org.apache.hadoop.hive.metastore.api.ColumnStatistics;
import org.apache.hadoop.hive.metastore.api.Database;
import org.apache.hadoop.hive.metastore.api.InvalidInputException;
import org.apache.hadoop.hive.metastore.api.InvalidObjectException;
import org.apache.hadoop.hive.metastore.api.MetaException;
import org.apache.hadoop.hive.metastore.api.NoSuchObjectException;
import org.apache.hadoop.hive.metastore.api.SQLForeignKey;
import org.apache.hadoop.hive.metastore.api.SQLPrimaryKey;
import org.apache.hadoop.hive.metastore.api.Table;

/**
 * The embedded metastore's {@code hive.metastore.rawstore.impl}: Hive's
 * {@link ObjectStore} with {@code getTable} and {@code getDatabase} answered from
 * memory while the table's (database's) row has not changed.
 *
 * <p>Why: every Iceberg table load (each INSERT's analysis, each round's
 * reads) and every commit asks the metastore for the table; on the embedded
 * Derby each {@code getTable} is several DataNucleus queries, measured at
 * 17 % of the server's CPU under 16 concurrent writers. Spark asks for the
 * database twice each time it resolves a view (the view's own database must
 * exist, then its current database), each a DataNucleus query: 1.4 ms of a
 * fresh view's key lookup (docs/tiering.md, "Fresh views").
 *
 * <p>Correct because every change to a table row of the embedded Derby
 * database passes through this class in this JVM (Derby admits one process;
 * others reach it through this JVM's metastore service; the server installs
 * this class only then, as it does {@link CasAlterHandler}). Each table has a
 * version, bumped when a change is made and again when its transaction ends;
 * an entry serves only while the version it was read under is current, and a
 * read that saw the version move is not kept. Reads inside a transaction go
 * to the database, and callers get copies.
 */
public class CachingObjectStore extends ObjectStore {
    private static final ConcurrentHashMap<String, AtomicLong> VERSIONS = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<String, Entry> CACHE = new ConcurrentHashMap<>();
    private static final AtomicLong HITS = new AtomicLong();
    private static final AtomicLong MISSES = new AtomicLong();
    /** Set by {@link CasAlterHandler} around its compare: it reads the database. */
    static final ThreadLocal<Boolean> BYPASS = ThreadLocal.withInitial(() -> Boolean.FALSE);
    private final ThreadLocal<Set<String>> touched = ThreadLocal.withInitial(HashSet::new);

    /** A table's or a database's row as read under {@code version} (kept and handed out as copies). */
    private static final class Entry {
        final long version;
        final Object row;

        Entry(long version, Object row) {
            this.version = version;
            this.row = row;
        }
    }

    /** A metastore read that may throw what the overridden method declares. */
    private interface Read<T, E extends Exception> {
        T run() throws E;
    }

    static String key(String db, String table) {
        return (db == null ? "" : db.toLowerCase(Locale.ROOT)) + "." + (table == null ? "" : table.toLowerCase(Locale.ROOT));
    }

    private static AtomicLong version(String key) {
        return VERSIONS.computeIfAbsent(key, k -> new AtomicLong());
    }

    private void changed(String db, String table) {
        String k = key(db, table);
        version(k).incrementAndGet();
        CACHE.remove(k);
        touched.get().add(k);
    }

    /** A database's key: its name and an empty table name (a table's key has both). */
    static String databaseKey(String db) {
        return key(db, null);
    }

    private void databaseChanged(String db) {
        changed(db, null);
    }

    /**
     * {@code read}'s row from memory while the row's version is the one it was read under; else
     * read (in a transaction, or where CasAlterHandler compares, always from the database).
     */
    private <T, E extends Exception> T cached(String k, Read<T, E> read, java.util.function.UnaryOperator<T> copy)
            throws E {
        if (isActiveTransaction() || BYPASS.get()) {
            return read.run();
        }
        AtomicLong v = version(k);
        long before = v.get();
        Entry e = CACHE.get(k);
        if (e != null && e.version == before) {
            HITS.incrementAndGet();
            @SuppressWarnings("unchecked")
            T row = (T) e.row;
            return copy.apply(row);
        }
        MISSES.incrementAndGet();
        T row = read.run(); // a missing database throws: nothing is kept
        if (row != null && v.get() == before) {
            CACHE.put(k, new Entry(before, copy.apply(row)));
        }
        return row;
    }

    private void ended() {
        Set<String> keys = touched.get();
        if (isActiveTransaction() || keys.isEmpty()) {
            return;
        }
        for (String k : keys) {
            version(k).incrementAndGet();
            CACHE.remove(k);
        }
        keys.clear();
    }

    /**
     * The {@code metadata_location} of the table's row while this cache holds the row as it is now
     * (read under the current version), else null: whoever needs it then reads the metastore.
     * The INSERT templates (ValuesTemplates.java) ask it, from memory, whether a table changed.
     */
    static String metadataLocation(String db, String table) {
        String k = key(db, table);
        AtomicLong v = VERSIONS.get(k);
        Entry e = CACHE.get(k);
        if (v == null || e == null || e.version != v.get() || !(e.row instanceof Table)) {
            return null;
        }
        java.util.Map<String, String> parameters = ((Table) e.row).getParameters();
        return parameters == null ? null : parameters.get("metadata_location");
    }

    /** Hits and misses as {@code "hits misses"} (tests, benchmarks). */
    public static String stats() {
        return HITS.get() + " " + MISSES.get();
    }

    @Override
    public Table getTable(String dbName, String tableName) throws MetaException {
        return cached(key(dbName, tableName), () -> super.getTable(dbName, tableName), Table::new);
    }

    @Override
    public Database getDatabase(String name) throws NoSuchObjectException {
        return cached(databaseKey(name), () -> super.getDatabase(name), Database::new);
    }

    @Override
    public void createDatabase(Database db) throws InvalidObjectException, MetaException {
        databaseChanged(db.getName());
        try {
            super.createDatabase(db);
        } finally {
            ended();
        }
    }

    @Override
    public boolean alterDatabase(String name, Database db) throws NoSuchObjectException, MetaException {
        databaseChanged(name);
        try {
            return super.alterDatabase(name, db);
        } finally {
            ended();
        }
    }

    @Override
    public boolean dropDatabase(String name) throws NoSuchObjectException, MetaException {
        databaseChanged(name);
        try {
            return super.dropDatabase(name);
        } finally {
            ended();
        }
    }

    @Override
    public void alterTable(String dbname, String name, Table newTable) throws InvalidObjectException, MetaException {
        changed(dbname, name);
        if (newTable != null) {
            changed(newTable.getDbName(), newTable.getTableName());
        }
        try {
            super.alterTable(dbname, name, newTable);
        } finally {
            ended();
        }
    }

    @Override
    public boolean dropTable(String dbName, String tableName)
            throws MetaException, NoSuchObjectException, InvalidObjectException, InvalidInputException {
        changed(dbName, tableName);
        try {
            return super.dropTable(dbName, tableName);
        } finally {
            ended();
        }
    }

    @Override
    public void createTable(Table tbl) throws InvalidObjectException, MetaException {
        changed(tbl.getDbName(), tbl.getTableName());
        try {
            super.createTable(tbl);
        } finally {
            ended();
        }
    }

    @Override
    public void createTableWithConstraints(Table tbl, List<SQLPrimaryKey> primaryKeys, List<SQLForeignKey> foreignKeys)
            throws InvalidObjectException, MetaException {
        changed(tbl.getDbName(), tbl.getTableName());
        try {
            super.createTableWithConstraints(tbl, primaryKeys, foreignKeys);
        } finally {
            ended();
        }
    }

    @Override
    public boolean updateTableColumnStatistics(ColumnStatistics colStats)
            throws NoSuchObjectException, MetaException, InvalidObjectException, InvalidInputException {
        // Hive 2.3 also rewrites the table's parameters (COLUMN_STATS_ACCURATE) here.
        changed(colStats.getStatsDesc().getDbName(), colStats.getStatsDesc().getTableName());
        try {
            return super.updateTableColumnStatistics(colStats);
        } finally {
            ended();
        }
    }

    @Override
    public boolean deleteTableColumnStatistics(String dbName, String tableName, String colName)
            throws NoSuchObjectException, MetaException, InvalidObjectException, InvalidInputException {
        changed(dbName, tableName);
        try {
            return super.deleteTableColumnStatistics(dbName, tableName, colName);
        } finally {
            ended();
        }
    }

    @Override
    public boolean commitTransaction() {
        try {
            return super.commitTransaction();
        } finally {
            ended();
        }
    }

    @Override
    public void rollbackTransaction() {
        try {
            super.rollbackTransaction();
        } finally {
            ended();
        }
    }
}
