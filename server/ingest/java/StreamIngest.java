package io.tierlake.internal;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.time.OffsetDateTime;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.PartitionField;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.CommitMetadata;
import org.apache.iceberg.spark.SparkSchemaUtil;
import org.apache.iceberg.spark.data.SparkParquetWriters;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.objects.AssertNotNull;
import org.apache.spark.sql.catalyst.plans.logical.AppendData;
import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.CommandExecutionMode;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.internal.SessionState;
import org.apache.spark.sql.types.StructType;
import scala.runtime.AbstractPartialFunction;

/**
 * The write path of stream tables (server/ingest/): an {@code INSERT} is
 * analysed by Spark in the client's own session (Spark decides the table,
 * the columns, the types and the casts), checked (change types, NULL keys),
 * and committed by the table's one {@link Committer}, so concurrent writers
 * of one table never race each other for its metadata.
 *
 * <p>A statement whose rows Spark's optimizer folds into a local relation
 * (plain {@code VALUES}, literals, casts) is written here without a Spark
 * job: its rows join the table's commit queue. Whoever holds the table's
 * lock writes everything queued to Parquet data files through Iceberg's
 * Spark value writers (one file per partition per snapshot, not one per
 * statement: with 16 writers a primary-key table of 4 buckets wrote 4 files
 * per statement) and commits them in one Iceberg {@link Transaction}: a
 * snapshot per run of statements with disjoint keys (commit order stays the
 * changelog order), one metadata commit for all of them (group commit). A
 * statement returns only once the commit holding it landed.
 *
 * <p>Any other INSERT (a query) runs as a Spark job while holding the
 * table's lock, after the queue is drained, with the same checks added to
 * its plan ({@code raise_error}).
 *
 * <p>A write may carry a request id (snapshot-summary key
 * {@link #REQUEST_ID}): a request id already committed to the table is
 * acknowledged again and writes nothing. The committer remembers ids for
 * the retention ({@link #configureLedger}) from three sources: the table's
 * snapshots, its own commits, and the ledger table ({@code
 * sys.write_requests}) that stream-snapshot expiry fills with the ids of
 * the snapshots it removes, so a request id outlives its snapshot and the
 * snapshot count can stay small at any write rate.
 */
public final class StreamIngest {
    /** Snapshot-summary key naming the client's request id of a write. */
    public static final String REQUEST_ID = "tierlake.write.request-id";
    private static final Map<String, Committer> COMMITTERS = new ConcurrentHashMap<>();
    private static final AtomicLong TASK_IDS = new AtomicLong();
    /** Counters for the ingest benchmark and metrics: statements, groups, rows. */
    public static final AtomicLong STATEMENTS = new AtomicLong();
    public static final AtomicLong GROUPS = new AtomicLong();
    public static final AtomicLong ROWS = new AtomicLong();
    /** Where a group commit's time under the table's lock goes (counters(): ms, summed over groups). */
    static final AtomicLong NANOS_FILES = new AtomicLong();
    static final AtomicLong NANOS_MANIFESTS = new AtomicLong();
    static final AtomicLong NANOS_COMMIT = new AtomicLong();
    static final AtomicLong NANOS_REFRESH = new AtomicLong();
    private static final com.fasterxml.jackson.databind.ObjectMapper JSON =
            new com.fasterxml.jackson.databind.ObjectMapper();
    /** The ledger of request ids whose snapshots were expired (sys.write_requests), or null. */
    private static volatile Table ledger;
    /** How long a request id is remembered (tierlake.write.request-id-retention). */
    private static volatile long retentionMs = 3_600_000L;

    private StreamIngest() {}

    /**
     * The ledger table ({@code sys.write_requests}: table_uuid, request_id,
     * snapshot_id, committed_at) and how long an id is remembered. Called
     * once at the server's start; committers made before keep their ids.
     */
    public static void configureLedger(Table table, long retention) {
        ledger = table;
        retentionMs = retention;
    }

    /**
     * The request ids of {@code snapshots} (those about to be expired)
     * committed at or after {@code sinceMs}, as a JSON array of ledger rows
     * ({@code request_id}, {@code snapshot_id}, {@code committed_at} in
     * microseconds).
     */
    public static String requestIdsOf(List<Snapshot> snapshots, long sinceMs)
            throws com.fasterxml.jackson.core.JsonProcessingException {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Snapshot s : snapshots) {
            String ids = s.summary() == null ? null : s.summary().get(REQUEST_ID);
            if (ids == null || s.timestampMillis() < sinceMs) {
                continue;
            }
            for (String id : ids.split("\n")) {
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("request_id", id);
                row.put("snapshot_id", s.snapshotId());
                row.put("committed_at", s.timestampMillis() * 1000L);
                out.add(row);
            }
        }
        return JSON.writeValueAsString(out);
    }

    /**
     * The snapshots of {@code table}'s {@code main}, newest first, as a JSON
     * array of {@code [snapshot id, sequence number, timestamp ms]}: one call
     * instead of three per snapshot through py4j (maintenance walks a
     * stream's few hundred snapshots after every round at a high write rate).
     */
    public static String mainAncestry(Table table) throws com.fasterxml.jackson.core.JsonProcessingException {
        List<long[]> out = new ArrayList<>();
        for (Snapshot s = table.currentSnapshot(); s != null;
             s = s.parentId() == null ? null : table.snapshot(s.parentId())) {
            out.add(new long[] {s.snapshotId(), s.sequenceNumber(), s.timestampMillis()});
        }
        return JSON.writeValueAsString(out);
    }

    /** Ids of {@code tableUuid} in the ledger committed within the retention: id → commit time (ms). */
    public static Map<String, Long> ledgerIds(String tableUuid) {
        Table t = ledger;
        Map<String, Long> out = new HashMap<>();
        if (t == null) {
            return out;
        }
        t.refresh();
        if (t.currentSnapshot() == null) {
            return out;
        }
        long since = System.currentTimeMillis() - retentionMs;
        try (CloseableIterable<Record> rows = IcebergGenerics.read(t)
                .where(Expressions.equal("table_uuid", tableUuid)).build()) {
            for (Record row : rows) {
                Object at = row.getField("committed_at");
                long ms = at instanceof OffsetDateTime ? ((OffsetDateTime) at).toInstant().toEpochMilli()
                        : at instanceof java.time.LocalDateTime
                        ? ((java.time.LocalDateTime) at).toInstant(java.time.ZoneOffset.UTC).toEpochMilli()
                        : Long.MAX_VALUE;
                if (ms >= since) {
                    out.merge(String.valueOf(row.getField("request_id")), ms, Math::max);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out;
    }

    /** Hold back while another application's commit to {@code table} is retrying. */
    static void yieldToForeignCommits(Table table) {
        if (CasAlterHandler.FOREIGN_WAITING.isEmpty()) {
            return;
        }
        String[] parts = table.name().split("\\.");
        if (parts.length < 2) {
            return;
        }
        String key = CachingObjectStore.key(parts[parts.length - 2], parts[parts.length - 1]);
        try {
            for (Long until = CasAlterHandler.FOREIGN_WAITING.get(key);
                 until != null && System.currentTimeMillis() < until; until = CasAlterHandler.FOREIGN_WAITING.get(key)) {
                Thread.sleep(10);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        CasAlterHandler.FOREIGN_WAITING.remove(key);
    }

    /**
     * Analyse {@code statement} in {@code session}: null unless it is an
     * {@code INSERT INTO} (an append) into an Iceberg table with the table
     * property {@code table.datalake.enabled=true}. Spark's analysis errors
     * (unknown table or column, a bad cast) are thrown as Spark throws them.
     */
    public static Staged stage(SparkSession session, String statement) throws Exception {
        return stageParsed(session, statement, PlanWalker.parse(session, statement));  // literal ${...}, as the session runs it
    }

    /**
     * {@link #stage} of a statement whose template was analysed before (ValuesTemplates): no
     * parse and no analysis; null when it was not, or anything the kept form depends on changed.
     */
    public static Staged stageCached(SparkSession session, String statement) {
        return ValuesTemplates.stage(session, statement);
    }

    /** {@link #stageParsed}, keeping the analysed form of {@code statement}'s template when it is plain VALUES. */
    public static Staged stageParsed(SparkSession session, String statement, LogicalPlan parsed) {
        // The session's state as the analysis begins: a form is kept only if it did not change meanwhile.
        ValuesTemplates.Context before = ValuesTemplates.Context.of(session);
        Staged staged = stageParsed(session, parsed);
        if (staged != null) {
            ValuesTemplates.keep(session, statement, parsed, staged, before);
        }
        return staged;
    }

    /**
     * The table {@code uuid} as its committer last committed or read it ({@code latest}, which the caller
     * checked): a table over that metadata alone, to write rows analysed against it. Null without a committer.
     */
    static Table committedTable(String uuid, String name, TableMetadata latest) {
        Committer c = COMMITTERS.get(uuid);
        // The location provider as the metastore's table operations make it (from the location and properties).
        return c == null ? null : new org.apache.iceberg.BaseTable(new org.apache.iceberg.StaticTableOperations(
                latest, c.table.io(), org.apache.iceberg.LocationProviders.locationsFor(latest.location(),
                latest.properties())), name);
    }

    /** The metadata the committer of table {@code uuid} committed or read last, or null. */
    static TableMetadata latestCommitted(String uuid) {
        Committer c = COMMITTERS.get(uuid);
        return c == null ? null : c.indexed;
    }

    /** {@link #stage} of a statement Spark already parsed (the gateway's authoriser did). */
    public static Staged stageParsed(SparkSession session, LogicalPlan parsed) {
        SessionState state = session.sessionState();
        if (!(parsed instanceof InsertIntoStatement)) {
            return null;
        }
        LogicalPlan analyzed = state.executePlan(parsed, CommandExecutionMode.SKIP()).analyzed();
        if (!(analyzed instanceof AppendData)) {
            return null;
        }
        AppendData append = (AppendData) analyzed;
        if (!(append.table() instanceof DataSourceV2Relation)) {
            return null;
        }
        Object target = ((DataSourceV2Relation) append.table()).table();
        if (!(target instanceof SparkTable)) {
            return null;
        }
        SparkTable sparkTable = (SparkTable) target;
        if (sparkTable.snapshotId() != null || sparkTable.branch() != null) {
            return null;
        }
        Table table = sparkTable.table();
        if (!"true".equalsIgnoreCase(table.properties().get("table.datalake.enabled"))) {
            return null;
        }
        return new Staged(session, append, table);
    }

    /** Process-wide counters as a JSON object (statements, groups, rows). */
    public static String counters() {
        return "{\"statements\":" + STATEMENTS.get() + ",\"groups\":" + GROUPS.get() + ",\"rows\":"
                + ROWS.get() + ",\"groupMsFiles\":" + NANOS_FILES.get() / 1_000_000 + ",\"groupMsManifests\":"
                + NANOS_MANIFESTS.get() / 1_000_000 + ",\"groupMsCommit\":" + NANOS_COMMIT.get() / 1_000_000
                + ",\"groupMsRefresh\":" + NANOS_REFRESH.get() / 1_000_000 + ",\"metadataReused\":"
                + CommitterOps.REUSED.get() + "," + ValuesTemplates.counters() + "}";
    }

    /**
     * The metadata the committer of {@code table} committed or read last: its file's location and its
     * JSON, or null without a committer (tests compare it with the file read back).
     */
    public static String[] committedMetadata(Table table) {
        Committer c = COMMITTERS.get(table.uuid().toString());
        TableMetadata m = c == null ? null : c.indexed;
        return m == null ? null : new String[] {m.metadataFileLocation(), org.apache.iceberg.TableMetadataParser.toJson(m)};
    }

    /** One analysed INSERT into a stream table, not yet written. */
    public static final class Staged {
        private final SparkSession session;
        private final AppendData append;
        private final Table table;
        private final LogicalPlan query;
        private final List<InternalRow> rows;
        /** How the rows were made from the VALUES (null: a query, or values the optimizer folded). */
        private final LocalForm form;
        /** The key this write is recorded under (server/ingest/request_ids.py), or null: set by the gateway. */
        private volatile String requestId;
        /** The client went away or cancelled: not committed unless its commit already began. */
        private volatile boolean cancelled;
        private volatile Pending pending;
        private final String jobGroup = "tierlake-insert-" + UUID.randomUUID();

        Staged(SparkSession session, AppendData append, Table table) {
            this.session = session;
            this.append = append;
            this.table = table;
            // Spark adds AssertNotNull for NOT NULL key columns; the checks
            // below report NULL keys with their count instead of its error.
            this.query = stripAssertNotNull(append.query());
            boolean writable = writable(table);
            this.form = writable ? LocalForm.of(query) : null;
            this.rows = form != null ? form.rows() : writable ? localRows(session, query) : null;
        }

        /**
         * A statement of a kept template (ValuesTemplates): its rows, made from the kept form, and the
         * table as its committer last committed or read it. No plan: such a statement is never a query.
         */
        Staged(SparkSession session, Table table, LocalForm form, List<InternalRow> rows) {
            this.session = session;
            this.append = null;
            this.table = table;
            this.query = null;
            this.form = form;
            this.rows = rows;
        }

        boolean isLocal() {
            return rows != null;
        }

        LocalForm localForm() {
            return form;
        }

        Table table() {
            return table;
        }

        /**
         * One JSON object: {@code name} ({@code catalog.db.table}), {@code properties},
         * {@code local} (values written without a Spark job), {@code rows} (-1 for a
         * query) and {@code requestId} (the session's {@value #REQUEST_ID}, or null).
         */
        /** Tag this write with its request key (null: untagged). */
        public void requestKey(String key) {
            this.requestId = key == null || key.isEmpty() ? null : key;
        }

        /**
         * Cancel this write (the client cancelled it or went away): a statement still
         * waiting for the table's lock is dropped, a query's Spark job is cancelled. A
         * commit already under way lands; a retry with the same request id finds it.
         */
        public void cancel() {
            cancelled = true;
            Pending p = pending;
            if (p != null) {
                p.cancelled = true;
            }
            if (rows == null) {
                session.sparkContext().cancelJobGroup(jobGroup);
            }
        }

        public String describe() throws com.fasterxml.jackson.core.JsonProcessingException {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("name", table.name());
            out.put("properties", table.properties());
            out.put("local", rows != null);
            out.put("rows", rows == null ? -1 : rows.size());
            out.put("requestId", requestId);
            return JSON.writeValueAsString(out);
        }

        /**
         * The first violation of a primary-key table's rules among local rows,
         * or null: change types outside {@code +I -U +U -D NULL} and NULL keys.
         * Queries are checked while they run.
         */
        public Refused check(String changeType, String keyNames) {
            return check(changeType, keyNames, null);
        }

        /**
         * {@link #check(String, String)}, and then keys with different changes
         * in this statement that {@code sequenceBy} (null: none) does not
         * order (kind {@code ambiguous}: how many keys, the first). The group commit
         * never puts two statements with a common key in one snapshot, so
         * this is the round's rule for one commit (changelog_check.sql.j2):
         * -U rows ignored, a -D's other values do not matter, equal changes
         * never conflict; with sequence-by, a NULL value or a tie at the
         * largest value of different changes is ambiguous.
         */
        public Refused check(String changeType, String keyNames, String sequenceBy) {
            Refused refused = checkValues(changeType, keyNames);
            if (refused != null || rows == null || keyNames == null || keyNames.isEmpty()) {
                return refused;
            }
            return ambiguous(changeType, split(keyNames), sequenceBy);
        }

        private Refused ambiguous(String changeType, String[] keys, String sequenceBy) {
            Schema schema = table.schema();
            int[] keyPos = positions(schema, keys);
            if (keyPos.length == 0) {
                return null;
            }
            int ctPos = changeType == null ? -1 : position(schema, changeType);
            int seqPos = sequenceBy == null ? -1 : position(schema, sequenceBy);
            StructType sparkType = SparkSchemaUtil.convert(schema);
            int width = sparkType.fields().length;
            org.apache.spark.sql.types.DataType[] types = dataTypes(sparkType);
            // Keys and rows compared as Spark compares them (SparkKeys: BINARY by content, -0.0 = 0.0,
            // NaN = NaN, DECIMAL by value), as the round's SQL does (changelog_check.sql.j2).
            Map<List<Object>, List<Object[]>> byKey = new LinkedHashMap<>();
            // Sequence-by values by Spark's own ordering, as the round's ORDER BY: BINARY unsigned,
            // -0.0 = 0.0 (Java's compareTo could not compare BINARY, and ordered -0.0 below 0.0).
            scala.math.Ordering<Object> seqOrder = seqPos < 0 ? null
                    : SparkKeys.ordering(sparkType.fields()[seqPos].dataType());
            for (InternalRow row : rows) {
                boolean nullKey = false;
                for (int k : keyPos) {
                    nullKey |= row.isNullAt(k);
                }
                String ct = ctPos < 0 || row.isNullAt(ctPos) ? null : row.getUTF8String(ctPos).toString();
                if (nullKey || "-U".equals(ct)) {
                    continue;
                }
                Object effect;
                if ("-D".equals(ct)) {
                    effect = "-D";
                } else {
                    int[] others = new int[ctPos < 0 ? width : width - 1];
                    for (int i = 0, o = 0; i < width; i++) {
                        if (i != ctPos) {
                            others[o++] = i;
                        }
                    }
                    effect = SparkKeys.key(row, others, types);
                }
                Object seq = seqPos < 0 || row.isNullAt(seqPos) ? null
                        : row.get(seqPos, sparkType.fields()[seqPos].dataType());
                byKey.computeIfAbsent(SparkKeys.key(row, keyPos, types), x -> new ArrayList<>())
                        .add(new Object[] {seq, effect});
            }
            long count = 0;
            String first = null;
            for (Map.Entry<List<Object>, List<Object[]>> e : byKey.entrySet()) {
                if (e.getValue().size() > 1 && unordered(e.getValue(), seqOrder)) {
                    count++;
                    if (first == null) {
                        StringBuilder named = new StringBuilder("(");
                        for (int i = 0; i < keyPos.length; i++) {
                            String shown = SparkKeys.show(e.getKey().get(i));
                            String v = shown.length() > 40 ? shown.substring(0, 40) + "…" : shown;
                            named.append(i == 0 ? "" : ", ").append(schema.columns().get(keyPos[i]).name())
                                    .append('=').append(v);
                        }
                        first = named.append(')').toString();
                    }
                }
            }
            return count == 0 ? null : new Refused(Refused.AMBIGUOUS, count, first);
        }

        /** Whether different changes of one key have no single largest sequence-by value ({@code order}
         * null: the table has no sequence-by). */
        private static boolean unordered(List<Object[]> changes, scala.math.Ordering<Object> order) {
            Set<Object> effects = new HashSet<>();
            for (Object[] c : changes) {
                effects.add(c[1]);
            }
            if (effects.size() == 1) {
                return false;  // the same change twice
            }
            if (order == null) {
                return true;
            }
            Object max = null;
            for (Object[] c : changes) {
                if (c[0] == null) {
                    return true;  // a NULL sequence-by value
                }
                if (max == null || order.compare(c[0], max) > 0) {
                    max = c[0];
                }
            }
            Set<Object> atMax = new HashSet<>();
            for (Object[] c : changes) {
                if (order.compare(c[0], max) == 0) {
                    atMax.add(c[1]);
                }
            }
            return atMax.size() > 1;
        }

        private Refused checkValues(String changeType, String keyNames) {
            String[] keys = split(keyNames);
            if (rows == null || (keys.length == 0 && changeType == null)) {
                return null;
            }
            Schema schema = table.schema();
            int[] keyPos = positions(schema, keys);
            int ctPos = changeType == null ? -1 : position(schema, changeType);  // -1: not there (checked by rounds)
            long nullKeys = 0;
            Map<String, Long> badTypes = new LinkedHashMap<>();
            for (InternalRow row : rows) {
                for (int k : keyPos) {
                    if (row.isNullAt(k)) {
                        nullKeys++;
                        break;
                    }
                }
                if (ctPos >= 0 && !row.isNullAt(ctPos)) {
                    String value = row.getUTF8String(ctPos).toString();
                    if (!VALID_CHANGE_TYPES.contains(value)) {
                        badTypes.merge(value, 1L, Long::sum);
                    }
                }
            }
            if (!badTypes.isEmpty()) {
                long total = 0;
                StringBuilder detail = new StringBuilder();
                int shown = 0;
                for (Map.Entry<String, Long> e : badTypes.entrySet()) {
                    total += e.getValue();
                    if (shown++ < 5) {
                        String v = e.getKey().length() > 40 ? e.getKey().substring(0, 40) + "…" : e.getKey();
                        detail.append(detail.length() == 0 ? "" : ", ").append('\'').append(v).append("' (")
                                .append(e.getValue()).append(e.getValue() == 1 ? " row)" : " rows)");
                    }
                }
                if (badTypes.size() > 5) {
                    detail.append(", and ").append(badTypes.size() - 5).append(" more values");
                }
                return new Refused(Refused.CHANGE_TYPE, total, detail.toString());
            }
            if (nullKeys > 0) {
                return new Refused(Refused.NULL_KEY, nullKeys, "");
            }
            return null;
        }

        /**
         * Check, write and commit the statement; returns once its commit
         * landed, as one JSON object: {@code {"outcome": "ok", "rows": n}} (a
         * query's rows are not counted: 0), {@code {"outcome": "duplicate"}}
         * when the session's request id is already committed to the table
         * (nothing written), or {@code {"outcome": "refused", "kind", "count",
         * "value"}}: the first violation of local rows ({@link #check}),
         * nothing written. A query is checked while it runs: its first
         * violation fails it with {@link Refused} (thrown). {@code keyNames}:
         * the key columns, one per line; {@code sequenceBy}: the table's
         * sequence-by column, or null. The caller makes every message.
         */
        public String commit(String changeType, String keyNames, String sequenceBy) throws Exception {
            Map<String, Object> out = new LinkedHashMap<>();
            Refused refused = check(changeType, keyNames, sequenceBy);
            if (refused != null) {
                out.put("outcome", "refused");
                out.put("kind", refused.kind());
                out.put("count", refused.count());
                out.put("value", refused.value());
                return JSON.writeValueAsString(out);
            }
            long written;
            try {
                written = commitChecked(changeType, split(keyNames));
            } catch (RuntimeException e) {
                Refused inQuery = Refused.raisedIn(e);
                if (inQuery != null) {
                    throw inQuery;
                }
                throw e;
            }
            out.put("outcome", written < 0 ? "duplicate" : "ok");
            if (written >= 0) {
                out.put("rows", written);
            }
            return JSON.writeValueAsString(out);
        }

        private long commitChecked(String changeType, String[] keys) {
            Committer committer = committer(table);
            if (requestId != null && committer.committed(requestId)) {
                return -1;
            }
            if (cancelled) {
                throw new Cancelled();
            }
            if (rows != null) {
                Set<List<Object>> keySet = keys.length == 0 ? null : keyValues(table.schema(), rows, keys);
                Pending p = new Pending(rows, table, requestId, keySet);
                pending = p;
                p.cancelled = cancelled;
                return committer.commitFiles(p, table);
            }
            LogicalPlan checked = checkedQuery(changeType, keys);
            // The request id is checked again under the lock: a retry waits for the first attempt's query.
            return committer.runQuery(requestId, () -> cancelled, () -> {
                Map<String, String> props = requestId == null
                        ? Collections.emptyMap() : Collections.singletonMap(REQUEST_ID, requestId);
                org.apache.spark.SparkContext sc = session.sparkContext();
                sc.setJobGroup(jobGroup, "tierlake INSERT into " + table.name(), true);
                try {
                    CommitMetadata.withCommitProperties(props, () -> {
                        Dataset.ofRows(session, append.withNewQuery(checked));
                        return null;
                    }, RuntimeException.class);
                } catch (RuntimeException e) {
                    if (cancelled) {
                        throw new Cancelled(e);
                    }
                    throw e;
                } finally {
                    sc.clearJobGroup();
                }
            });
        }

        private LogicalPlan checkedQuery(String changeType, String[] keys) {
            Dataset<Row> df = Dataset.ofRows(session, query);
            String[] names = df.columns();
            Column[] columns = new Column[names.length];
            Set<String> keySet = new HashSet<>();
            for (String k : keys) {
                keySet.add(k.toLowerCase(Locale.ROOT));
            }
            boolean changed = false;
            for (int i = 0; i < names.length; i++) {
                Column c = df.col("`" + names[i].replace("`", "``") + "`");
                String lower = names[i].toLowerCase(Locale.ROOT);
                if (keySet.contains(lower)) {
                    c = functions.when(c.isNull(), functions.raise_error(functions.lit(Refused.raising(Refused.NULL_KEY))))
                            .otherwise(c);
                    changed = true;
                } else if (changeType != null && lower.equals(changeType.toLowerCase(Locale.ROOT))) {
                    c = functions.when(c.isNull().or(c.isin((Object[]) VALID_CHANGE_TYPES.toArray())), c)
                            .otherwise(functions.raise_error(functions.concat(
                                    functions.lit(Refused.raising(Refused.CHANGE_TYPE)), c)));
                    changed = true;
                }
                columns[i] = c.as(names[i]);
            }
            return changed ? df.select(columns).logicalPlan() : append.query();
        }
    }

    /** The message of a write cancelled before its commit began (the Python side's OperationCancelledError). */
    static final String CANCELLED = "tierlake: cancelled before its commit";

    /** A write cancelled before its commit began: nothing was written. */
    public static final class Cancelled extends IllegalStateException {
        Cancelled() {
            super(CANCELLED);
        }

        Cancelled(Throwable cause) {
            super(CANCELLED, cause);
        }
    }

    /**
     * A statement's rows refused by the ingest checks, nothing written: {@code kind} ({@link #AMBIGUOUS},
     * {@link #CHANGE_TYPE}, {@link #NULL_KEY}), how many keys or rows, and the first value or key shown.
     * Local rows are checked before the write (returned as the outcome); a query's rows while it runs,
     * by a {@code raise_error} whose text only this class makes and reads (thrown from commit).
     */
    public static final class Refused extends RuntimeException {
        public static final String AMBIGUOUS = "ambiguous";
        public static final String CHANGE_TYPE = "change_type";
        public static final String NULL_KEY = "null_key";
        private static final String RAISED = "tierlake-ingest-refused:";
        private final String kind;
        private final long count;
        private final String value;

        Refused(String kind, long count, String value) {
            super("ingest refused: " + kind + " (" + count + "): " + value, null, false, false);
            this.kind = kind;
            this.count = count;
            this.value = value;
        }

        public String kind() {
            return kind;
        }

        public long count() {
            return count;
        }

        public String value() {
            return value;
        }

        /** The text a query's check raises for {@code kind} (the bad value follows it). */
        static String raising(String kind) {
            return RAISED + kind + ":";
        }

        /** The refusal a failed query's check raised, from its cause chain, or null. */
        static Refused raisedIn(Throwable e) {
            for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
                String text = t.getMessage();
                int at = text == null ? -1 : text.indexOf(RAISED);
                if (at < 0) {
                    continue;
                }
                String rest = text.substring(at + RAISED.length());
                int colon = rest.indexOf(':');
                if (colon < 0) {
                    continue;
                }
                String value = rest.substring(colon + 1);
                int line = value.indexOf('\n');
                return new Refused(rest.substring(0, colon), 1, line < 0 ? value : value.substring(0, line));
            }
            return null;
        }
    }

    static final Set<String> VALID_CHANGE_TYPES = new HashSet<>(List.of("+I", "-U", "+U", "-D"));

    private static final class Pending {
        /** The statement's rows, written by whoever commits its group (one file per partition per snapshot). */
        final List<InternalRow> data;
        /** The table as the statement was analysed against (its schema is the rows' schema). */
        final Table analysed;
        final String requestId;
        final long rows;
        /** The statement's keys (primary-key tables), or null: statements with common keys need their own snapshots. */
        final Set<List<Object>> keys;
        volatile boolean done;
        volatile long result;
        volatile RuntimeException failure;
        /** Its client went away: dropped unless its group's commit already began. */
        volatile boolean cancelled;

        Pending(List<InternalRow> data, Table analysed, String requestId, Set<List<Object>> keys) {
            this.data = data;
            this.analysed = analysed;
            this.requestId = requestId;
            this.rows = data.size();
            this.keys = keys;
        }
    }

    interface Body {
        void run();
    }

    static Committer committer(Table table) {
        return COMMITTERS.computeIfAbsent(table.uuid().toString(), k -> new Committer(table));
    }

    /**
     * Whether the request key {@code key} is committed to {@code table} (its snapshots,
     * this process's commits, the ledger), checked under the table's commit lock: an
     * atomic CTAS asks before it refuses a table that exists (server/tiering/ctas.py).
     */
    public static boolean committedKey(Table table, String key) {
        Committer c = committer(table);
        c.lock.lock();
        try {
            c.adopt(table);
            c.table.refresh();
            c.index(Committer.current(c.table));
            return c.requestIds.containsKey(key);
        } finally {
            c.lock.unlock();
        }
    }

    /** Forget the committers (tests; a dropped table's committer is never used again). */
    public static void reset() {
        COMMITTERS.clear();
    }

    /**
     * The one committer of a stream table in this process: statements queue
     * their files; whoever holds the lock commits the whole queue.
     */
    static final class Committer {
        private final ReentrantLock lock = new ReentrantLock(true);
        private final ConcurrentLinkedQueue<Pending> queue = new ConcurrentLinkedQueue<>();
        private Table table;
        /**
         * request id → commit time (ms): from the snapshots of {@link #indexed},
         * this committer's own commits and the ledger; kept for the retention
         * whether or not the snapshot is still there.
         */
        private final Map<String, Long> requestIds = new ConcurrentHashMap<>();
        private volatile TableMetadata indexed;
        /** The newest sequence number {@link #index} has seen (format v2 and later). */
        private long indexedSeq = -1;
        private long lastPrune = System.currentTimeMillis();
        private final String uuid;

        Committer(Table table) {
            this.table = CommitterOps.of(table);
            this.uuid = table.uuid().toString();
            // The snapshots first, then the ledger: expiry writes the ledger before it
            // removes a snapshot, so an id is in one of the two whenever it happens.
            index(current(table));
            loadLedger();
        }

        boolean committed(String requestId) {
            return requestIds.containsKey(requestId);
        }

        private static TableMetadata current(Table t) {
            return ((HasTableOperations) t).operations().current();
        }

        private void loadLedger() {
            for (Map.Entry<String, Long> e : ledgerIds(uuid).entrySet()) {
                requestIds.merge(e.getKey(), e.getValue(), Math::max);
            }
        }

        /**
         * Adds the ids of snapshots not seen yet. Snapshots this committer never
         * saw that are gone already (another process committed them and expiry
         * removed them in between) leave a gap in the sequence numbers: their
         * ids are in the ledger, read again then.
         */
        private void index(TableMetadata metadata) {
            if (metadata == indexed) {
                return;
            }
            boolean sequenced = metadata.formatVersion() >= 2;
            long last = metadata.lastSequenceNumber();
            long fresh = 0;
            for (Snapshot s : metadata.snapshots()) {
                if (sequenced && indexed != null && s.sequenceNumber() <= indexedSeq) {
                    continue;
                }
                fresh++;
                String ids = s.summary() == null ? null : s.summary().get(REQUEST_ID);
                if (ids != null) {
                    for (String id : ids.split("\n")) {
                        requestIds.merge(id, s.timestampMillis(), Math::max);
                    }
                }
            }
            if (indexed != null) {
                boolean gap = sequenced ? last - indexedSeq > fresh
                        : metadata.snapshots().size() < indexed.snapshots().size();
                if (gap) {
                    loadLedger();
                }
            }
            indexedSeq = Math.max(indexedSeq, last);
            indexed = metadata;
            prune();
        }

        /**
         * Forget ids older than the retention whose snapshot is gone (at most ten times
         * per retention): an id is remembered for as long as the snapshot that committed
         * it is kept, and at least the retention.
         */
        private void prune() {
            long now = System.currentTimeMillis();
            if (now - lastPrune < Math.max(1000L, retentionMs / 10)) {
                return;
            }
            lastPrune = now;
            long floor = now - retentionMs;
            requestIds.values().removeIf(t -> t < floor);
            if (indexed != null) {
                for (Snapshot s : indexed.snapshots()) {
                    String ids = s.summary() == null ? null : s.summary().get(REQUEST_ID);
                    if (ids != null) {
                        for (String id : ids.split("\n")) {
                            requestIds.merge(id, s.timestampMillis(), Math::max);
                        }
                    }
                }
            }
        }

        /** The newer of the committer's table and a statement's freshly analysed copy. */
        private void adopt(Table candidate) {
            if (((HasTableOperations) candidate).operations() instanceof org.apache.iceberg.StaticTableOperations) {
                return;  // a kept template's view of this committer's own metadata: never newer, never committed to
            }
            TableMetadata mine = current(table);
            TableMetadata theirs = current(candidate);
            if (theirs.lastSequenceNumber() > mine.lastSequenceNumber()
                    || theirs.lastUpdatedMillis() > mine.lastUpdatedMillis()) {
                table = CommitterOps.of(candidate);
            }
        }

        long commitFiles(Pending pending, Table analysed) {
            queue.add(pending);
            while (!pending.done) {
                lock.lock();
                try {
                    adopt(analysed);
                    if (!pending.done) {
                        commitQueued();
                    }
                } finally {
                    lock.unlock();
                }
            }
            if (pending.failure != null) {
                throw pending.failure;
            }
            return pending.result;
        }

        /**
         * Run a query's write under the lock: -1 when {@code requestId} (may be null) is
         * committed by then, nothing run; the cancel check is made once the lock is held.
         */
        long runQuery(String requestId, java.util.function.BooleanSupplier cancelled, Body body) {
            lock.lock();
            try {
                commitQueued();
                if (requestId != null) {
                    table.refresh();
                    index(current(table));
                    if (requestIds.containsKey(requestId)) {
                        return -1;
                    }
                }
                if (cancelled.getAsBoolean()) {
                    throw new Cancelled();
                }
                CasAlterHandler.COMMITTER.set(Boolean.TRUE);  // its commits are the server's own
                try {
                    body.run();
                } finally {
                    CasAlterHandler.COMMITTER.set(Boolean.FALSE);
                }
                STATEMENTS.incrementAndGet();
                table.refresh();
                index(current(table));
                return 0;
            } finally {
                lock.unlock();
            }
        }

        private void commitQueued() {
            List<Pending> batch = new ArrayList<>();
            for (Pending p = queue.poll(); p != null; p = queue.poll()) {
                batch.add(p);
            }
            if (batch.isEmpty()) {
                return;
            }
            List<Pending> writing = new ArrayList<>();
            try {
                index(current(table));
                Set<String> seen = new HashSet<>();
                for (Pending p : batch) {
                    if (p.cancelled) {
                        p.failure = new Cancelled();  // never written
                        p.done = true;
                    } else if (p.requestId != null && requestIds.containsKey(p.requestId)) {
                        p.result = -1;  // a retry of a committed write: nothing is written
                        p.done = true;
                    } else if (p.requestId != null && !seen.add(p.requestId)) {
                        queue.add(p);  // the same id twice at once: decided after this group
                    } else {
                        writing.add(p);
                    }
                }
                if (!writing.isEmpty()) {
                    yieldToForeignCommits(table);
                    commitGroup(writing);
                }
            } catch (RuntimeException e) {
                for (Pending p : writing) {
                    if (p.failure == null && p.result == 0) {
                        p.failure = new CommitStateUnknownException(e);
                    }
                }
            } finally {
                for (Pending p : writing) {
                    p.done = true;
                }
            }
        }

        /**
         * One transaction for {@code writing}. Files are deleted only when the
         * commit certainly did not land (Iceberg's CommitFailedException or a
         * validation error, or a failure before the commit was sent): after
         * anything else the commit may have landed, and a committed snapshot
         * must never lose a file (the JVM's shutdown, after the Python
         * process was killed, fails calls right after a commit).
         */
        private void commitGroup(List<Pending> writing) {
            Transaction tx;
            List<DataFile> written = new ArrayList<>();
            try {
                // One snapshot holds consecutive statements while no key of a
                // primary-key table appears in two of them: the changelog orders
                // a key's changes by commit, so a later statement changing a key
                // again starts a new snapshot (same transaction, next sequence
                // number). Log tables put the whole group in one snapshot.
                tx = table.newTransaction();
                int start = 0;
                while (start < writing.size()) {
                    Set<List<Object>> keysInSnapshot = new HashSet<>();
                    int end = start;
                    while (end < writing.size()) {
                        Set<List<Object>> k = writing.get(end).keys;
                        if (k != null && end > start && !Collections.disjoint(keysInSnapshot, k)) {
                            break;
                        }
                        if (k != null) {
                            keysInSnapshot.addAll(k);
                        }
                        end++;
                    }
                    AppendFiles append = tx.newAppend().scanManifestsWith(SmallTables.IN_CALLER);
                    StringBuilder ids = new StringBuilder();
                    // The snapshot's rows in one file per partition (bucket), not one per statement:
                    // fewer files to write now and to compact later. Rows analysed against another
                    // schema (an ALTER TABLE between two statements) go to files of their own.
                    Map<Integer, List<InternalRow>> bySchema = new LinkedHashMap<>();
                    Map<Integer, Table> schemaTables = new HashMap<>();
                    for (Pending p : writing.subList(start, end)) {
                        int schemaId = p.analysed.schema().schemaId();
                        bySchema.computeIfAbsent(schemaId, k -> new ArrayList<>()).addAll(p.data);
                        schemaTables.putIfAbsent(schemaId, p.analysed);
                        if (p.requestId != null) {
                            ids.append(ids.length() == 0 ? "" : "\n").append(p.requestId);
                        }
                    }
                    long t0 = System.nanoTime();
                    for (Map.Entry<Integer, List<InternalRow>> e : bySchema.entrySet()) {
                        for (DataFile f : write(schemaTables.get(e.getKey()), e.getValue())) {
                            written.add(f);
                            append.appendFile(f);
                        }
                    }
                    if (ids.length() > 0) {
                        append.set(REQUEST_ID, ids.toString());
                    }
                    long t1 = System.nanoTime();
                    append.commit();
                    NANOS_FILES.addAndGet(t1 - t0);
                    NANOS_MANIFESTS.addAndGet(System.nanoTime() - t1);
                    start = end;
                }
            } catch (RuntimeException e) {
                failed(writing, e, written);
                return;
            }
            try {
                CasAlterHandler.COMMITTER.set(Boolean.TRUE);  // its commits are the server's own
                try {
                    long t = System.nanoTime();
                    tx.commitTransaction();
                    NANOS_COMMIT.addAndGet(System.nanoTime() - t);
                } finally {
                    CasAlterHandler.COMMITTER.set(Boolean.FALSE);
                }
            } catch (org.apache.iceberg.exceptions.CommitFailedException
                     | org.apache.iceberg.exceptions.ValidationException e) {
                failed(writing, e, written);
                return;
            } catch (CommitStateUnknownException e) {
                failed(writing, e, null);
                return;
            } catch (RuntimeException e) {
                failed(writing, new CommitStateUnknownException(e), null);
                return;
            }
            GROUPS.incrementAndGet();
            for (Pending p : writing) {
                p.result = p.rows;
                STATEMENTS.incrementAndGet();
                ROWS.addAndGet(p.rows);
            }
            long now = System.currentTimeMillis();
            for (Pending p : writing) {
                if (p.requestId != null) {
                    requestIds.put(p.requestId, now);
                }
            }
            try {
                long t = System.nanoTime();
                index(current(table));
                NANOS_REFRESH.addAndGet(System.nanoTime() - t);
            } catch (RuntimeException e) {
                // indexed stays: the next group indexes from where this one was
            }
        }

        /** {@code written}: files to delete (the commit certainly did not land), or null to keep them. */
        private void failed(List<Pending> writing, RuntimeException e, List<DataFile> written) {
            for (Pending p : writing) {
                p.failure = e;
            }
            if (written != null) {
                deleteQuietly(table, written);
            }
            try {
                table.refresh();
            } catch (RuntimeException ignored) {
                // the next group's commit refreshes or fails on its own
            }
        }
    }

    private static void deleteQuietly(Table table, List<DataFile> files) {
        for (DataFile f : files) {
            try {
                table.io().deleteFile(f.location());
            } catch (RuntimeException ignored) {
                // an orphan file at worst; orphan-file maintenance removes it
            }
        }
    }

    /** Only Parquet tables with top-level partition sources take rows without Spark. */
    static boolean writable(Table table) {
        String format = table.properties().getOrDefault(TableProperties.DEFAULT_FILE_FORMAT,
                TableProperties.DEFAULT_FILE_FORMAT_DEFAULT);
        if (!"parquet".equalsIgnoreCase(format)) {
            return false;
        }
        List<Types.NestedField> columns = table.schema().columns();
        for (PartitionField field : table.spec().fields()) {
            boolean top = false;
            for (Types.NestedField c : columns) {
                top |= c.fieldId() == field.sourceId() && c.type().isPrimitiveType();
            }
            if (!top) {
                return false;
            }
        }
        return true;
    }

    /** The rows as Parquet data files, one per partition, in their order. */
    static List<DataFile> write(Table table, List<InternalRow> rows) {
        Schema schema = table.schema();
        PartitionSpec spec = table.spec();
        StructType sparkType = SparkSchemaUtil.convert(schema);
        Map<StructLike, List<InternalRow>> groups = new LinkedHashMap<>();
        if (spec.isUnpartitioned()) {
            groups.put(null, rows);
        } else {
            PartitionKey key = new PartitionKey(spec, schema);
            RowStruct wrapper = new RowStruct(schema);
            for (InternalRow row : rows) {
                key.partition(wrapper.wrap(row));
                groups.computeIfAbsent(key.copy(), k -> new ArrayList<>()).add(row);
            }
        }
        OutputFileFactory files = OutputFileFactory.builderFor(table, 0, TASK_IDS.incrementAndGet())
                .format(FileFormat.PARQUET).operationId(UUID.randomUUID().toString()).build();
        List<DataFile> written = new ArrayList<>();
        try {
            for (Map.Entry<StructLike, List<InternalRow>> group : groups.entrySet()) {
                EncryptedOutputFile out = group.getKey() == null
                        ? files.newOutputFile() : files.newOutputFile(spec, group.getKey());
                DataWriter<InternalRow> writer = Parquet.writeData(out)
                        .schema(schema)
                        .withSpec(spec)
                        .withPartition(group.getKey())
                        .setAll(table.properties())
                        .metricsConfig(MetricsConfig.forTable(table))
                        .createWriterFunc(msg -> SparkParquetWriters.buildWriter(sparkType, msg))
                        .overwrite()
                        .build();
                try {
                    for (InternalRow row : group.getValue()) {
                        writer.write(row);
                    }
                } finally {
                    writer.close();
                }
                written.add(writer.toDataFile());
            }
        } catch (IOException e) {
            deleteQuietly(table, written);
            throw new UncheckedIOException(e);
        }
        return written;
    }

    /** A Spark row's top-level values as Iceberg's partition transforms read them. */
    static final class RowStruct implements StructLike {
        private final Type[] types;
        private InternalRow row;

        RowStruct(Schema schema) {
            List<Types.NestedField> columns = schema.columns();
            types = new Type[columns.size()];
            for (int i = 0; i < types.length; i++) {
                types[i] = columns.get(i).type();
            }
        }

        RowStruct wrap(InternalRow r) {
            this.row = r;
            return this;
        }

        @Override
        public int size() {
            return types.length;
        }

        @Override
        public <T> T get(int pos, Class<T> javaClass) {
            if (row.isNullAt(pos)) {
                return null;
            }
            Object value;
            switch (types[pos].typeId()) {
                case BOOLEAN: value = row.getBoolean(pos); break;
                case INTEGER: case DATE: value = row.getInt(pos); break;
                case LONG: case TIME: case TIMESTAMP: case TIMESTAMP_NANO: value = row.getLong(pos); break;
                case FLOAT: value = row.getFloat(pos); break;
                case DOUBLE: value = row.getDouble(pos); break;
                case STRING: value = row.getUTF8String(pos).toString(); break;
                case UUID: value = UUID.fromString(row.getUTF8String(pos).toString()); break;
                case FIXED: case BINARY: value = ByteBuffer.wrap(row.getBinary(pos)); break;
                case DECIMAL: {
                    Types.DecimalType d = (Types.DecimalType) types[pos];
                    BigDecimal big = row.getDecimal(pos, d.precision(), d.scale()).toJavaBigDecimal();
                    value = big;
                    break;
                }
                default:
                    throw new UnsupportedOperationException("partition source of type " + types[pos]);
            }
            return javaClass.cast(value);
        }

        @Override
        public <T> void set(int pos, T value) {
            throw new UnsupportedOperationException("read-only");
        }
    }

    private static final Set<String> TIME_LIKE = new HashSet<>(List.of(
            "CurrentTimestamp", "Now", "CurrentDate", "LocalTimestamp", "CurrentTimeZone", "CurrentBatchTimestamp",
            "CurrentUser", "CurrentDatabase", "CurrentCatalog"));

    /**
     * The rows of a query Spark can fold into values, or null. The analysed
     * plan of {@code VALUES} is a projection (casts, defaults) over a local
     * relation; it is evaluated here row by row when every expression is
     * deterministic and reads no clock or session state (those the optimizer
     * fixes once per statement, so such a query goes through the optimizer).
     */
    static List<InternalRow> localRows(SparkSession session, LogicalPlan query) {
        LocalForm form = LocalForm.of(query);
        if (form != null) {
            return form.rows();
        }
        LogicalPlan optimized = session.sessionState().executePlan(query, CommandExecutionMode.SKIP())
                .optimizedPlan();
        return optimized instanceof LocalRelation ? copyRows(((LocalRelation) optimized).data()) : null;
    }

    /**
     * The analysed VALUES as Spark would evaluate them: a local relation, or a projection
     * (casts, defaults) over one whose expressions are deterministic and read no clock or
     * session state, bound to the relation's columns by position; null for anything else.
     * ValuesTemplates evaluates it over the rows of another statement of the same template.
     */
    static final class LocalForm {
        final LocalRelation child;
        /** The projections from the relation up, each bound to its input's columns by position; none: the rows as they are. */
        final List<scala.collection.Seq<Expression>> layers;

        private LocalForm(LocalRelation child, List<scala.collection.Seq<Expression>> layers) {
            this.child = child;
            this.layers = layers;
        }

        static LocalForm of(LogicalPlan query) {
            List<org.apache.spark.sql.catalyst.plans.logical.Project> projects = new ArrayList<>();
            LogicalPlan at = query;
            while (at instanceof org.apache.spark.sql.catalyst.plans.logical.Project) {
                projects.add(0, (org.apache.spark.sql.catalyst.plans.logical.Project) at);
                at = ((org.apache.spark.sql.catalyst.plans.logical.Project) at).child();
            }
            if (!(at instanceof LocalRelation) || projects.size() > 4) {
                return null;
            }
            List<scala.collection.Seq<Expression>> layers = new ArrayList<>();
            for (org.apache.spark.sql.catalyst.plans.logical.Project project : projects) {
                @SuppressWarnings("unchecked")
                scala.collection.Seq<Expression> exprs = (scala.collection.Seq<Expression>) (Object) project.projectList();
                // Bound first: a column reference is Unevaluable, its bound form is not.
                scala.collection.Seq<Expression> bound = bind(exprs, project.child().output());
                scala.collection.Iterator<Expression> it = bound.iterator();
                while (it.hasNext()) {
                    if (!evaluable(it.next())) {
                        return null;
                    }
                }
                layers.add(bound);
            }
            return new LocalForm((LocalRelation) at, layers);
        }

        /** Whether {@code relation}'s rows have the column types this form reads. */
        boolean matches(LocalRelation relation) {
            List<org.apache.spark.sql.catalyst.expressions.Attribute> mine =
                    scala.collection.JavaConverters.seqAsJavaList(child.output());
            List<org.apache.spark.sql.catalyst.expressions.Attribute> theirs =
                    scala.collection.JavaConverters.seqAsJavaList(relation.output());
            if (mine.size() != theirs.size()) {
                return false;
            }
            for (int i = 0; i < mine.size(); i++) {
                if (!mine.get(i).dataType().equals(theirs.get(i).dataType())) {
                    return false;
                }
            }
            return true;
        }

        List<InternalRow> rows() {
            return rows(child.data());
        }

        List<InternalRow> rows(scala.collection.Seq<InternalRow> data) {
            if (layers.isEmpty()) {
                return copyRows(data);
            }
            // Projections per call: an InterpretedMutableProjection holds its output row.
            List<org.apache.spark.sql.catalyst.expressions.MutableProjection> projections = new ArrayList<>();
            for (scala.collection.Seq<Expression> layer : layers) {
                org.apache.spark.sql.catalyst.expressions.MutableProjection projection =
                        org.apache.spark.sql.catalyst.expressions.InterpretedMutableProjection.createProjection(layer);
                projection.initialize(0);
                projections.add(projection);
            }
            List<InternalRow> out = new ArrayList<>();
            scala.collection.Iterator<InternalRow> rows = data.iterator();
            while (rows.hasNext()) {
                InternalRow row = rows.next();
                for (org.apache.spark.sql.catalyst.expressions.MutableProjection projection : projections) {
                    row = projection.apply(row);
                }
                out.add(row.copy());
            }
            return out;
        }
    }

    /**
     * {@code BindReferences.bindReferences(exprs, AttributeSeq(input))}. Reflection: the
     * class {@code AttributeSeq} lives in Scala's package object {@code expressions.package},
     * a name Java source cannot spell.
     */
    @SuppressWarnings("unchecked")
    private static scala.collection.Seq<Expression> bind(
            scala.collection.Seq<Expression> exprs,
            scala.collection.Seq<org.apache.spark.sql.catalyst.expressions.Attribute> input) {
        try {
            Class<?> seqClass = Class.forName("org.apache.spark.sql.catalyst.expressions.package$AttributeSeq");
            Object attrs = seqClass.getConstructor(scala.collection.Seq.class).newInstance(input);
            java.lang.reflect.Method m = org.apache.spark.sql.catalyst.expressions.BindReferences.class
                    .getMethod("bindReferences", scala.collection.Seq.class, seqClass);
            return (scala.collection.Seq<Expression>) m.invoke(null, exprs, attrs);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot bind the VALUES projection", e);
        }
    }

    private static List<InternalRow> copyRows(scala.collection.Seq<InternalRow> data) {
        List<InternalRow> out = new ArrayList<>();
        scala.collection.Iterator<InternalRow> it = data.iterator();
        while (it.hasNext()) {
            out.add(it.next());
        }
        return out;
    }

    private static boolean evaluable(Expression e) {
        if (!e.deterministic() || e instanceof org.apache.spark.sql.catalyst.expressions.Unevaluable
                || TIME_LIKE.contains(e.getClass().getSimpleName())) {
            return false;
        }
        scala.collection.Iterator<Expression> it = e.children().iterator();
        while (it.hasNext()) {
            if (!evaluable(it.next())) {
                return false;
            }
        }
        return true;
    }

    static LogicalPlan stripAssertNotNull(LogicalPlan plan) {
        return plan.transformAllExpressions(new AbstractPartialFunction<Expression, Expression>() {
            @Override
            public boolean isDefinedAt(Expression e) {
                return e instanceof AssertNotNull;
            }

            @Override
            public Expression apply(Expression e) {
                return e instanceof AssertNotNull ? ((AssertNotNull) e).child() : e;
            }
        });
    }

    static String[] split(String names) {
        return names == null || names.isEmpty() ? new String[0] : names.split("\n");
    }

    /**
     * Each row's key, compared as Spark compares keys (SparkKeys: BINARY by content, -0.0 = 0.0,
     * NaN = NaN, DECIMAL by value; a list per row, so composite keys cannot collide).
     */
    static Set<List<Object>> keyValues(Schema schema, List<InternalRow> rows, String[] keys) {
        int[] pos = positions(schema, keys);
        org.apache.spark.sql.types.DataType[] types = dataTypes(SparkSchemaUtil.convert(schema));
        Set<List<Object>> out = new HashSet<>();
        for (InternalRow row : rows) {
            out.add(SparkKeys.key(row, pos, types));
        }
        return out;
    }

    private static org.apache.spark.sql.types.DataType[] dataTypes(StructType sparkType) {
        org.apache.spark.sql.types.DataType[] types = new org.apache.spark.sql.types.DataType[sparkType.fields().length];
        for (int i = 0; i < types.length; i++) {
            types[i] = sparkType.fields()[i].dataType();
        }
        return types;
    }

    private static int position(Schema schema, String name) {
        List<Types.NestedField> columns = schema.columns();
        for (int i = 0; i < columns.size(); i++) {
            if (columns.get(i).name().equalsIgnoreCase(name)) {
                return i;
            }
        }
        return -1;
    }

    /**
     * The positions of the named top-level columns; a name the table no longer
     * has (a key column renamed under its spec) is left out: the round reports
     * that with its fix, and the write goes ahead as Spark analysed it.
     */
    private static int[] positions(Schema schema, String[] names) {
        return java.util.Arrays.stream(names).mapToInt(n -> position(schema, n)).filter(p -> p >= 0).toArray();
    }
}
