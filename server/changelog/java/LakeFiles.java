package io.tierlake.internal;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.DataOperations;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.ManifestFiles;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A log table's round without a Spark job: the data files the stream's
 * appends added are copied, byte for byte, into the lake table's data
 * location and appended to the round's branch in one commit.
 *
 * <p>Iceberg reads a Parquet, ORC or Avro data file by the field ids written
 * in it, so a file of the stream is a valid file of the lake when both
 * tables give every id the same name and type and the lake can never give
 * an id the stream used to another column (its last assigned column id is
 * at least the stream's). Both must be unpartitioned and the lake unsorted:
 * a copied file keeps the stream's layout. Anything else is refused by
 * {@link #blocker} and the round writes through Spark.
 *
 * <p>The files are copied, never shared: the stream's snapshot expiry and
 * orphan-file removal delete the stream's files, the lake's its own.
 */
public final class LakeFiles {
    private LakeFiles() {}

    /**
     * Why the data files the stream snapshots {@code snapshotIds} (comma-separated)
     * added cannot be appended to {@code lake} as they are; null when they can.
     * Reads those snapshots' manifests (kept by the snapshots for {@link #appendCopies}).
     */
    public static String blocker(Table stream, Table lake, String snapshotIds) {
        if (!stream.spec().isUnpartitioned()) {
            return "the stream table is partitioned";
        }
        if (!lake.spec().isUnpartitioned()) {
            return "the lake table is partitioned";
        }
        if (!lake.sortOrder().isUnsorted()) {
            return "the lake table has a sort order";
        }
        // Files without field ids (add_files, a migrated table) are read through the stream's name
        // mapping, which the lake does not have: Iceberg would match their columns by position.
        if (stream.properties().containsKey(TableProperties.DEFAULT_NAME_MAPPING)) {
            return "the stream table reads some files by name mapping";
        }
        if (!(stream instanceof HasTableOperations) || !(lake instanceof HasTableOperations)) {
            return "not a metastore table";
        }
        TableMetadata streamMeta = ((HasTableOperations) stream).operations().current();
        TableMetadata lakeMeta = ((HasTableOperations) lake).operations().current();
        // Version 3 brings column defaults and row lineage, which a copied file would not carry over.
        if (streamMeta.formatVersion() > 2 || lakeMeta.formatVersion() > 2) {
            return "format version 3";
        }
        if (lakeMeta.lastColumnId() < streamMeta.lastColumnId()) {
            return "the lake table could give a field id of the stream to another column";
        }
        if (!same(stream.schema().asStruct(), lake.schema().asStruct())) {
            return "the columns differ";
        }
        for (String text : snapshotIds.split(",")) {
            Snapshot snapshot = stream.snapshot(Long.parseLong(text.trim()));
            if (snapshot == null || !DataOperations.APPEND.equals(snapshot.operation())) {
                return "stream snapshot " + text.trim() + " is not an append";
            }
            for (DataFile file : snapshot.addedDataFiles(stream.io())) {
                PartitionSpec spec = stream.specs().get(file.specId());
                if (spec == null || !spec.isUnpartitioned()) {
                    return "a data file was written while the stream table was partitioned";
                }
            }
        }
        return null;
    }

    /** Field ids, names, types and nullability equal; comments may differ. */
    private static boolean same(Type a, Type b) {
        if (a.isPrimitiveType() || b.isPrimitiveType()) {
            return a.equals(b);
        }
        if (a.typeId() != b.typeId()) {
            return false;
        }
        if (a.isStructType()) {
            List<Types.NestedField> x = a.asStructType().fields();
            List<Types.NestedField> y = b.asStructType().fields();
            if (x.size() != y.size()) {
                return false;
            }
            for (int i = 0; i < x.size(); i++) {
                Types.NestedField f = x.get(i);
                Types.NestedField g = y.get(i);
                if (f.fieldId() != g.fieldId() || !f.name().equals(g.name()) || f.isOptional() != g.isOptional()
                        || !same(f.type(), g.type())) {
                    return false;
                }
            }
            return true;
        }
        if (a.isListType()) {
            Types.ListType x = a.asListType();
            Types.ListType y = b.asListType();
            return x.elementId() == y.elementId() && x.isElementOptional() == y.isElementOptional()
                    && same(x.elementType(), y.elementType());
        }
        Types.MapType x = a.asMapType();
        Types.MapType y = b.asMapType();
        return x.keyId() == y.keyId() && x.valueId() == y.valueId() && x.isValueOptional() == y.isValueOptional()
                && same(x.keyType(), y.keyType()) && same(x.valueType(), y.valueType());
    }

    /**
     * Copies the data files the stream snapshots {@code snapshotIds} (comma-separated
     * appends, checked by {@link #blocker}) added and appends them to {@code branch}
     * of {@code lake} with the commit summary {@code properties}; returns
     * {@code [files, rows, bytes]}. Copies are named after the branch (one per
     * round), so a fenced round's copies never collide with its successor's;
     * they are orphans the lake's orphan-file removal deletes.
     *
     * <p>The branch must still be where the round opened it: Iceberg's append
     * to a missing branch creates it from {@code main}, so a fenced round whose
     * branch a later round dropped would otherwise build a new one on top of
     * that round's commit. The commit fails if the branch was dropped, and
     * throws after it if another commit came in between (the round then drops
     * the branch; its fast-forward would fail anyway).
     */
    public static long[] appendCopies(Table stream, Table lake, String snapshotIds, String branch,
                                      Map<String, String> properties) throws IOException {
        lake.refresh();
        Snapshot base = lake.snapshot(branch);
        if (base == null) {
            throw new IllegalStateException("branch " + branch + " of " + lake.name() + " is gone");
        }
        // In the calling thread: see SmallTables.IN_CALLER.
        AppendFiles append = lake.newAppend().toBranch(branch).scanManifestsWith(SmallTables.IN_CALLER);
        long files = 0;
        long rows = 0;
        long bytes = 0;
        for (String text : snapshotIds.split(",")) {
            Snapshot snapshot = stream.snapshot(Long.parseLong(text.trim()));
            for (DataFile file : snapshot.addedDataFiles(stream.io())) {
                String source = file.location();
                // The counter: two files of one chunk may share a name (other directories).
                String name = branch + "-" + files + "-" + source.substring(source.lastIndexOf('/') + 1);
                String target = lake.locationProvider().newDataLocation(name);
                try (InputStream in = stream.io().newInputFile(source).newStream();
                     OutputStream out = lake.io().newOutputFile(target).create()) {
                    in.transferTo(out);
                }
                append.appendFile(DataFiles.builder(lake.spec()).copy(file).withPath(target)
                        .withSortOrder(lake.sortOrder()).build());
                files++;
                rows += file.recordCount();
                bytes += file.fileSizeInBytes();
            }
        }
        for (Map.Entry<String, String> e : properties.entrySet()) {
            append.set(e.getKey(), e.getValue());
        }
        append.commit();
        Snapshot head = lake.snapshot(branch);
        if (head == null || head.parentId() == null || head.parentId() != base.snapshotId()) {
            throw new IllegalStateException("branch " + branch + " of " + lake.name() + " moved during the copy");
        }
        return new long[] {files, rows, bytes};
    }

    /** The columns of {@link #chunkFiles}: those of {@code sql/templates/stream_files.sql.j2}. */
    private static final StructType CHUNK_FILES = new StructType()
            .add("file_path", DataTypes.StringType, false)
            .add("sequence_number", DataTypes.LongType, false)
            .add("bucket", DataTypes.IntegerType, true)
            .add("record_count", DataTypes.LongType, false)
            .add("file_size_in_bytes", DataTypes.LongType, false);

    /**
     * The data files holding a chunk's rows, one row each, as a local relation
     * (no Spark job: a metadata-table query is a job over the manifests, ~0.1 s
     * per round, and its result cannot be sized for a broadcast). The rows are
     * those {@code stream_files.sql.j2} selects from the {@code entries}
     * metadata table: with {@code snapshotIds} null, the live files as of
     * {@code endSnapshotId} whose data sequence number is in
     * {@code (startPosition, endPosition]} (a manifest merge or rewrite keeps
     * an entry's data sequence number; manifests that can hold no such entry
     * are not read); else (a replace commit inside the range rewrote the
     * appends' files) the files the appends {@code snapshotIds}
     * (comma-separated) themselves added, in that range. {@code bucketField}:
     * the partition field whose value is the {@code bucket} column (null: 0).
     */
    public static Dataset<Row> chunkFiles(SparkSession spark, Table stream, long endSnapshotId, long startPosition,
                                          long endPosition, String snapshotIds, String bucketField)
            throws IOException {
        Map<String, Row> rows = new LinkedHashMap<>();
        if (snapshotIds == null) {
            Snapshot end = stream.snapshot(endSnapshotId);
            if (end == null) {
                throw new IllegalStateException("snapshot " + endSnapshotId + " of " + stream.name() + " is gone");
            }
            for (ManifestFile manifest : end.dataManifests(stream.io())) {
                // An entry's data sequence number is at most its manifest's and at least the manifest's minimum.
                if (manifest.sequenceNumber() <= startPosition || manifest.minSequenceNumber() > endPosition) {
                    continue;
                }
                try (CloseableIterable<DataFile> files = ManifestFiles.read(manifest, stream.io(), stream.specs())) {
                    for (DataFile file : files) {
                        add(rows, stream, file, startPosition, endPosition, bucketField);
                    }
                }
            }
        } else {
            for (String text : snapshotIds.split(",")) {
                if (text.isBlank()) {
                    continue;
                }
                Snapshot snapshot = stream.snapshot(Long.parseLong(text.trim()));
                if (snapshot == null) {
                    throw new IllegalStateException("snapshot " + text.trim() + " of " + stream.name() + " is gone");
                }
                for (DataFile file : snapshot.addedDataFiles(stream.io())) {
                    add(rows, stream, file, startPosition, endPosition, bucketField);
                }
            }
        }
        return spark.createDataFrame(new ArrayList<>(rows.values()), CHUNK_FILES);
    }

    private static void add(Map<String, Row> rows, Table stream, DataFile file, long startPosition,
                            long endPosition, String bucketField) {
        Long sequence = file.dataSequenceNumber();
        if (sequence == null || sequence <= startPosition || sequence > endPosition) {
            return;
        }
        Integer bucket = 0;
        if (bucketField != null) {
            bucket = null;  // a file written under a spec without the field: as the metadata table has it
            List<org.apache.iceberg.PartitionField> fields = stream.specs().get(file.specId()).fields();
            for (int i = 0; i < fields.size(); i++) {
                if (fields.get(i).name().equals(bucketField)) {
                    bucket = file.partition().get(i, Integer.class);
                    break;
                }
            }
        }
        rows.putIfAbsent(file.location(), RowFactory.create(file.location(), sequence, bucket, file.recordCount(),
                file.fileSizeInBytes()));
    }
}
