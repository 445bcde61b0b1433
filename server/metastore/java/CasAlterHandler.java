package io.tierlake.internal;

import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import org.apache.hadoop.hive.metastore.HiveAlterHandler;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.RawStore;
import org.apache.hadoop.hive.metastore.Warehouse;
import org.apache.hadoop.hive.metastore.api.EnvironmentContext;
import org.apache.hadoop.hive.metastore.api.InvalidOperationException;
import org.apache.hadoop.hive.metastore.api.MetaException;
import org.apache.hadoop.hive.metastore.api.Table;

/**
 * The embedded metastore's {@code hive.metastore.alter.impl}: an Iceberg commit's
 * {@code alter_table} lands only if the table's {@code metadata_location} is still the
 * one the commit was based on, checked and changed atomically.
 *
 * <p>Why: Iceberg's Hive catalog otherwise serialises commits with metastore locks.
 * On Hive 2.3's embedded Derby each lock is several statements whose text carries
 * literal ids, so Derby parses and generates a class for every one of them; that and
 * the lock polls were the largest share of a commit's CPU. Hive 4 metastores take
 * the check instead ({@code expected_parameter_key}/{@code expected_parameter_value} in
 * the environment context, what Iceberg sends with {@code iceberg.engine.hive.lock-enabled}
 * = false); Hive 2.3 ignores those keys, so this handler implements them.
 *
 * <p>Atomic because every metastore call for the embedded Derby database runs in this
 * JVM (Derby admits one; other processes reach it through this JVM's metastore
 * service), and the check and the change happen under one monitor per table that is
 * JVM-wide: an interned string, the same object for every class loader that loads
 * this class. With a shared PostgreSQL metastore (several JVMs) the server keeps
 * Iceberg's locks and does not install this handler.
 *
 * <p>An alter that carries no expected value but moves an Iceberg table's
 * {@code metadata_location} (a client that still locks) is held to its own
 * {@code previous_metadata_location}, so the two kinds of client can share a table; one that
 * moves it without naming the current location as its previous (a stale copy of the table sent
 * back: a rename or a property change made from an old read) is refused, since it would undo
 * the commits made since that read.
 */
public class CasAlterHandler extends HiveAlterHandler {
    static final String LOCATION = "metadata_location";
    static final String PREVIOUS = "previous_metadata_location";
    static final String EXPECTED_KEY = "expected_parameter_key";
    static final String EXPECTED_VALUE = "expected_parameter_value";
    /**
     * Tables ({@code db.table}) another application (one that takes Hive locks:
     * Spark elsewhere, a tiering service) is committing to (its lock request,
     * TierlakeTxnHandler.java) or whose commit was just refused, with the time
     * until which the server's stream committers hold back
     * (StreamIngest.java): Iceberg retries such a commit after a back-off
     * (100 ms, then doubling) from a fresh read of the table, and under steady
     * ingest a group commit would land in between every time.
     */
    static final Map<String, Long> FOREIGN_WAITING = new java.util.concurrent.ConcurrentHashMap<>();
    static final long FOREIGN_PAUSE_MS = 1500;
    /**
     * Set while this thread commits as a stream table's committer (StreamIngest.java sets it): its
     * commits are the server's own, every other commit an outsider's that may have to pause them.
     */
    static final ThreadLocal<Boolean> COMMITTER = ThreadLocal.withInitial(() -> Boolean.FALSE);
    static final java.util.concurrent.atomic.AtomicLong FOREIGN_LOCKS = new java.util.concurrent.atomic.AtomicLong();

    /** Lock requests of other applications seen so far (tests). */
    public static long foreignLocks() {
        return FOREIGN_LOCKS.get();
    }

    // HiveAlterHandler's overload without the handler calls this one (a virtual call): both are covered.
    @Override
    public void alterTable(RawStore msdb, Warehouse wh, String dbname, String name, Table newt,
                           EnvironmentContext context, HiveMetaStore.HMSHandler handler)
            throws InvalidOperationException, MetaException {
        boolean outsider;
        synchronized (monitor(dbname, name)) {
            outsider = check(msdb, dbname, name, newt, context);
            super.alterTable(msdb, wh, dbname, name, newt, context, handler);
        }
        if (outsider && !FOREIGN_WAITING.isEmpty()) {
            FOREIGN_WAITING.remove(CachingObjectStore.key(dbname, name));  // its commit landed
        }
    }

    /** Another application locks {@code db.table} to commit: the server's stream committers pause. */
    public static void foreignCommitStarting(String dbname, String name) {
        FOREIGN_LOCKS.incrementAndGet();
        FOREIGN_WAITING.put(CachingObjectStore.key(dbname, name), System.currentTimeMillis() + FOREIGN_PAUSE_MS);
    }

    static Object monitor(String dbname, String name) {
        return ("io.tierlake.internal.CasAlterHandler:" + dbname.toLowerCase(Locale.ROOT) + "."
                + name.toLowerCase(Locale.ROOT)).intern();
    }

    /**
     * Refuses a stale alter; true for a commit that may land and that the stream
     * committers may be holding back for: a locking client's, or one of this
     * process's made outside a committer (maintenance: a compaction's or an
     * expiry's commit, which Iceberg retries after a back-off as well).
     */
    private static boolean check(RawStore msdb, String dbname, String name, Table newt, EnvironmentContext context)
            throws MetaException {
        Map<String, String> props = context == null ? null : context.getProperties();
        Map<String, String> params = newt.getParameters();
        boolean cas = props != null && props.get(EXPECTED_KEY) != null;
        String key = cas ? props.get(EXPECTED_KEY) : LOCATION;
        Table current;
        CachingObjectStore.BYPASS.set(Boolean.TRUE);  // the compare reads the database, never a cached copy
        try {
            current = msdb.getTable(dbname, name);
        } finally {
            CachingObjectStore.BYPASS.set(Boolean.FALSE);
        }
        String actual = current == null || current.getParameters() == null ? null : current.getParameters().get(key);
        String incoming = params == null ? null : params.get(key);
        if (Objects.equals(actual, incoming)) {
            // Nothing moves: a rename or a property change that keeps the metadata (or a table
            // that is not Iceberg's), or this very commit sent again (the metastore retries a call
            // that failed in Derby; metadata file names are unique, so only the same commit can
            // carry the same location).
            return false;
        }
        String expected;
        boolean locking = false;
        if (cas) {
            expected = props.get(EXPECTED_VALUE);
        } else if (incoming != null && params.get(PREVIOUS) != null) {
            expected = params.get(PREVIOUS);
            locking = true;
        } else if (actual == null) {
            return false;  // not an Iceberg table yet (Iceberg's migrate): no commit to undo
        } else {
            // The alter moves (or drops) metadata_location without naming the current one as
            // its previous: a stale copy of the table sent back (Hive or Spark v1 property
            // changes, a rename, any client that read the table before the last commit).
            // Letting it through would silently undo every commit since that read.
            throw new MetaException(String.format(
                    "Refused: this alter of %s.%s would set metadata_location to '%s' but the table's is '%s' and "
                    + "the alter does not name it as previous_metadata_location (it was made from a stale copy "
                    + "of the table); read the table again and repeat the change",
                    dbname, name, incoming, actual));
        }
        boolean outsider = locking || (cas && !COMMITTER.get());
        if (!Objects.equals(expected, actual)) {
            if (outsider) {
                // Another application (it locks: Spark elsewhere, a tiering service), or
                // maintenance in this process, lost the race to the server's group commits:
                // they pause so its retry lands (a stream compaction under steady ingest
                // otherwise failed all of Iceberg's retries, 110 s, every few minutes).
                foreignCommitStarting(dbname, name);
            }
            // Iceberg's HiveTableOperations turns exactly this message into a CommitFailedException
            // (it retries on the refreshed metadata), as it does for a Hive 4 metastore's.
            throw new MetaException(String.format(
                    "The table has been modified. The parameter value for key '%s' is '%s'. The expected was value was '%s'",
                    key, actual, expected));
        }
        return outsider;
    }
}
