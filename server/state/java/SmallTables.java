package io.tierlake.internal;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.temporal.ChronoUnit;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.OverwriteFiles;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.UpdateProperties;
import org.apache.iceberg.data.GenericAppenderFactory;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.relocated.com.google.common.util.concurrent.MoreExecutors;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;

/**
 * Reads and rewrites tierlake's small {@code sys} tables (coordinator state,
 * jobs, round history) with Iceberg's generic data API: no Spark job for a
 * few hundred rows. The Spark path (a local relation written by
 * {@code overwrite}) cost ~0.1–0.2 s of planning and scheduling per commit,
 * the bulk of a heartbeat; the Iceberg commit itself is the same operation
 * Spark's overwrite makes (an overwrite by the filter {@code true}, validated
 * from the base snapshot: serializable isolation).
 *
 * <p>Rows travel as one JSON array of objects; timestamps as microseconds
 * since the epoch. Unpartitioned tables of primitive columns and
 * {@code map<string,string>} only: anything else throws
 * {@link UnsupportedOperationException} and the caller uses Spark.
 */
public final class SmallTables {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final OffsetDateTime EPOCH = Instant.EPOCH.atOffset(ZoneOffset.UTC);
    /** Snapshot-summary key of {@link #replace}'s commits: a random token per commit. */
    static final String WRITE_ID = "tierlake.write-id";

    /**
     * Where a commit reads and writes its manifests: the calling thread. Iceberg's
     * default worker pool is waited for by polling every 10 ms (Tasks.waitFor), four
     * times in an overwrite; for the one or two small manifests of these tables the
     * polls were most of a commit's time (about 40 of 100 ms), the work itself is a
     * few milliseconds.
     */
    static final ExecutorService IN_CALLER = MoreExecutors.newDirectExecutorService();

    private SmallTables() {}

    /** Whether {@code table} is one this class can read and write. */
    public static boolean supports(Table table) {
        if (!table.spec().isUnpartitioned()) {
            return false;
        }
        for (Types.NestedField field : table.schema().columns()) {
            if (!supported(field.type())) {
                return false;
            }
        }
        return true;
    }

    private static boolean supported(Type type) {
        switch (type.typeId()) {
            case BOOLEAN: case INTEGER: case LONG: case FLOAT: case DOUBLE: case STRING: case TIMESTAMP:
                return true;
            case MAP:
                Types.MapType map = type.asMapType();
                return map.keyType().typeId() == Type.TypeID.STRING && map.valueType().typeId() == Type.TypeID.STRING;
            default:
                return false;
        }
    }

    /** Every row of {@code table} at {@code snapshotId}, as a JSON array. */
    public static String read(Table table, long snapshotId) throws IOException {
        Schema schema = table.schema();
        ArrayNode out = JSON.createArrayNode();
        try (CloseableIterable<Record> rows = IcebergGenerics.read(table).useSnapshot(snapshotId).build()) {
            for (Record row : rows) {
                ObjectNode node = out.addObject();
                for (Types.NestedField field : schema.columns()) {
                    put(node, field, row.getField(field.name()));
                }
            }
        }
        return JSON.writeValueAsString(out);
    }

    private static void put(ObjectNode node, Types.NestedField field, Object value) {
        String name = field.name();
        if (value == null) {
            node.putNull(name);
        } else if (value instanceof OffsetDateTime) {
            node.put(name, ChronoUnit.MICROS.between(EPOCH, (OffsetDateTime) value));
        } else if (value instanceof LocalDateTime) {
            node.put(name, ChronoUnit.MICROS.between(EPOCH, ((LocalDateTime) value).atOffset(ZoneOffset.UTC)));
        } else if (value instanceof Map) {
            ObjectNode map = node.putObject(name);
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                map.put(String.valueOf(e.getKey()), e.getValue() == null ? null : String.valueOf(e.getValue()));
            }
        } else {
            node.putPOJO(name, value);
        }
    }

    /**
     * Replace every row of {@code table} with {@code json} (a JSON array), in
     * one commit that fails if the table changed since {@code base} (no
     * check when {@code base} is negative: the table had no snapshot).
     *
     * <p>Returns the id of the snapshot the commit made (-1 if it cannot be
     * found): that snapshot holds exactly these rows, so the caller may serve
     * them from memory while it is the current one.
     */
    public static long replace(Table table, String json, long base) throws IOException {
        return replace(table, json, base, null);
    }

    /**
     * {@link #replace(Table, String, long)}, and set {@code properties} (a JSON
     * object of strings; null for none) on the table in the same commit: the
     * coordinator keeps its table-id counter there, so an id is allocated in
     * the commit that registers the table and is never handed out twice, even
     * after {@code kill -9} or with the history written behind.
     */
    public static long replace(Table table, String json, long base, String properties) throws IOException {
        DataFile file = write(table, json);
        Transaction tx = properties == null ? null : table.newTransaction();
        if (tx != null) {
            UpdateProperties update = tx.updateProperties();
            Iterator<Map.Entry<String, JsonNode>> fields = JSON.readTree(properties).fields();
            while (fields.hasNext()) {
                Map.Entry<String, JsonNode> e = fields.next();
                update.set(e.getKey(), e.getValue().asText());
            }
            update.commit();
        }
        OverwriteFiles overwrite = (tx == null ? table.newOverwrite() : tx.newOverwrite())
                .overwriteByRowFilter(Expressions.alwaysTrue())
                .scanManifestsWith(IN_CALLER);
        if (file != null) {
            overwrite = overwrite.addFile(file);
        }
        if (base >= 0) {
            overwrite = overwrite.validateFromSnapshot(base)
                    .conflictDetectionFilter(Expressions.alwaysTrue())
                    .validateNoConflictingData()
                    .validateNoConflictingDeletes();
        }
        // Iceberg may retry the commit on a newer base, and the table object
        // refreshes after it (another commit may already follow): the id is
        // found by a token in the snapshot's summary, not by "the current one".
        String token = UUID.randomUUID().toString();
        overwrite.set(WRITE_ID, token);
        overwrite.commit();
        if (tx != null) {
            tx.commitTransaction();
        }
        return snapshotWith(table, token);
    }

    private static long snapshotWith(Table table, String token) {
        long found = -1;
        for (Snapshot snapshot : table.snapshots()) {
            if (token.equals(snapshot.summary().get(WRITE_ID))) {
                found = snapshot.snapshotId();
            }
        }
        return found;
    }

    /** Append {@code json} (a JSON array) to {@code table} in one commit. */
    public static void append(Table table, String json) throws IOException {
        DataFile file = write(table, json);
        if (file != null) {
            table.newAppend().appendFile(file).scanManifestsWith(IN_CALLER).commit();
        }
    }

    /**
     * Append {@code json} once under {@code token}: if a commit carrying the
     * token is already in the table's history (an earlier attempt whose
     * outcome was unknown did land), nothing is appended. Returns whether this
     * call appended. The caller keeps the token and the rows together across
     * its retries (coordinator/history.py).
     */
    public static boolean appendOnce(Table table, String json, String token) throws IOException {
        table.refresh();
        if (snapshotWith(table, token) >= 0) {
            return false;
        }
        DataFile file = write(table, json);
        if (file == null) {
            return false;
        }
        table.newAppend().appendFile(file).scanManifestsWith(IN_CALLER).set(WRITE_ID, token).commit();
        return true;
    }

    private static DataFile write(Table table, String json) throws IOException {
        JsonNode rows = JSON.readTree(json);
        if (rows.size() == 0) {
            return null;
        }
        Schema schema = table.schema();
        OutputFileFactory files = OutputFileFactory.builderFor(table, 0, System.nanoTime())
                .format(FileFormat.PARQUET).build();
        DataWriter<Record> writer = new GenericAppenderFactory(schema, table.spec())
                .newDataWriter(files.newOutputFile(), FileFormat.PARQUET, null);
        try (DataWriter<Record> w = writer) {
            for (JsonNode row : rows) {
                GenericRecord record = GenericRecord.create(schema);
                for (Types.NestedField field : schema.columns()) {
                    record.setField(field.name(), value(field.type(), row.get(field.name())));
                }
                w.write(record);
            }
        } catch (UncheckedIOException e) {
            throw e.getCause();
        }
        return writer.toDataFile();
    }

    private static Object value(Type type, JsonNode node) {
        if (node == null || node.isNull()) {
            return null;
        }
        switch (type.typeId()) {
            case BOOLEAN: return node.asBoolean();
            case INTEGER: return node.asInt();
            case LONG: return node.asLong();
            case FLOAT: return (float) node.asDouble();
            case DOUBLE: return node.asDouble();
            case STRING: return node.asText();
            case TIMESTAMP: {
                OffsetDateTime at = EPOCH.plus(Duration.of(node.asLong(), ChronoUnit.MICROS));
                return ((Types.TimestampType) type).shouldAdjustToUTC() ? at : at.toLocalDateTime();
            }
            case MAP: {
                Map<String, String> map = new LinkedHashMap<>();
                Iterator<Map.Entry<String, JsonNode>> fields = node.fields();
                while (fields.hasNext()) {
                    Map.Entry<String, JsonNode> e = fields.next();
                    map.put(e.getKey(), e.getValue().isNull() ? null : e.getValue().asText());
                }
                return map;
            }
            default:
                throw new UnsupportedOperationException("column type " + type + " is not supported here");
        }
    }
}
