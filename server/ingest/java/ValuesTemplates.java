package io.tierlake.internal;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.ResolveInlineTables$;
import org.apache.spark.sql.catalyst.analysis.UnresolvedInlineTable;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.internal.SQLConf$;
import org.apache.spark.sql.types.DataTypes;
import scala.collection.JavaConverters;
import scala.runtime.AbstractFunction0;

/**
 * The analysed form of {@code INSERT INTO t [(cols)] VALUES (…), …} kept per statement
 * template: the text with its plain literals (strings, integers, decimals) cut out, and
 * their types. A statement whose template and literal types were analysed before is
 * staged without Spark's parse and analysis: its literals are put into the parse Spark
 * made of the first statement, Spark's own {@code ResolveInlineTables} turns them into
 * rows, and the analysed projection (the table's casts) is evaluated over them.
 *
 * <p>Why it is exact (docs/ingest.md, "Statements analysed once"):
 * <ul>
 * <li>A template is kept only after Spark parsed one statement of it and every cut-out
 *     literal was found in that parse, at the very characters cut out, as the very
 *     {@code Literal} (value and type) this class makes of the text; every cell of the
 *     {@code VALUES} is a literal. The scan gives up (the statement takes Spark's path)
 *     on anything it does not fully know: comments, {@code $} (variable substitution),
 *     a backslash, non-ASCII outside a string, a number next to a dot or a letter.
 *     Spark's analysis depends on the literals' types, not their values; the types
 *     are part of the key.</li>
 * <li>The session's state that analysis reads is part of the key and compared whole:
 *     every SQL setting, the current catalog and namespace, the role its plans are
 *     checked as (AuthzCheck); a temporary view of the table's name takes Spark's path.</li>
 * <li>The table is the one Spark would load now: the metastore's current metadata file
 *     (CachingObjectStore, from memory) is the one the table's committer committed or
 *     read last, and that metadata has the schema, partition spec and properties the
 *     statement was analysed against. Anything else (another writer's commit, an ALTER,
 *     a remote metastore) takes Spark's path, whose table the committer then adopts.</li>
 * </ul>
 */
final class ValuesTemplates {
    private ValuesTemplates() {}

    static final int MAX_ENTRIES = 512;
    static final int MAX_TEXT = 256 * 1024;
    /**
     * What the kept forms may hold in all: the texts they were kept from (a key is at most its text; the
     * first statement's rows, kept with its form, at most what its text spelt) and their VALUES cells.
     * Reaching either forgets every form, as reaching {@link #MAX_ENTRIES} does.
     */
    static final long MAX_KEPT_CHARS = 16L * 1024 * 1024;
    static final long MAX_KEPT_CELLS = 200_000;
    private static final AtomicLong KEPT_CHARS = new AtomicLong();
    private static final AtomicLong KEPT_CELLS = new AtomicLong();
    /** Integers of up to 18 digits are Spark's INT or BIGINT; decimals of up to 30 digits are not rounded. */
    static final int MAX_INTEGER_DIGITS = 18;
    static final int MAX_DECIMAL_DIGITS = 30;

    static final AtomicLong HITS = new AtomicLong();
    static final AtomicLong MISSES = new AtomicLong();
    /** Misses whose template was kept but whose session state or table had changed since. */
    static final AtomicLong STALE_SESSION = new AtomicLong();
    static final AtomicLong STALE_TABLE = new AtomicLong();
    static final AtomicLong KEPT = new AtomicLong();
    static final AtomicLong REFUSED = new AtomicLong();

    /** key → Entry, or NOT_KEPT for a template whose parse did not match its scan. */
    private static final Map<String, Object> ENTRIES = new ConcurrentHashMap<>();
    private static final Object NOT_KEPT = new Object();

    /** A statement's text cut at its plain literals. */
    static final class Scan {
        final String template;
        final List<String> slots = new ArrayList<>();
        final List<int[]> spans = new ArrayList<>();  // [start, end) in the text
        final StringBuilder kinds = new StringBuilder();

        Scan(String template) {
            this.template = template;
        }
    }

    private static boolean ident(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }

    private static boolean digit(char c) {
        return c >= '0' && c <= '9';
    }

    /** The non-blank character before {@code i}, or 0. */
    private static char before(String text, int i) {
        for (int k = i - 1; k >= 0; k--) {
            char c = text.charAt(k);
            if (!Character.isWhitespace(c)) {
                return c;
            }
        }
        return 0;
    }

    /** {@code text} cut at its plain literals, or null when it holds anything this scan does not fully know. */
    static Scan scan(String text) {
        int n = text.length();
        if (n > MAX_TEXT) {
            return null;
        }
        for (int k = 0; k < n; k++) {
            if (Character.isSurrogate(text.charAt(k))) {
                return null;  // Spark's positions count code points, the spans here count chars
            }
        }
        StringBuilder t = new StringBuilder(n);
        List<Object[]> slots = new ArrayList<>();
        int i = 0;
        while (i < n) {
            char c = text.charAt(i);
            if (c >= 128 || c == '$' || c == 0 || c == 1 || c == '\\') {
                return null;
            }
            if (c == '\'' || c == '"') {
                int j = text.indexOf(c, i + 1);
                if (j < 0 || text.substring(i + 1, j).indexOf('\\') >= 0 || text.substring(i + 1, j).indexOf(0) >= 0) {
                    return null;
                }
                if (i > 0 && ident(text.charAt(i - 1))) {
                    t.append(text, i, j + 1);  // X'..', DATE'..', r'..': part of the template
                } else {
                    slots.add(new Object[] {i, j + 1, 'S'});
                    t.append('\0').append('S');
                }
                i = j + 1;
                continue;
            }
            if (c == '`') {
                int j = i + 1;
                int k;
                while (true) {
                    k = text.indexOf('`', j);
                    if (k < 0) {
                        return null;
                    }
                    if (k + 1 < n && text.charAt(k + 1) == '`') {
                        j = k + 2;
                        continue;
                    }
                    break;
                }
                for (int m = i; m <= k; m++) {
                    if (text.charAt(m) >= 128 || text.charAt(m) == 0) {
                        return null;
                    }
                }
                t.append(text, i, k + 1);
                i = k + 1;
                continue;
            }
            if ((c == '-' && i + 1 < n && text.charAt(i + 1) == '-') || (c == '/' && i + 1 < n && text.charAt(i + 1) == '*')) {
                return null;
            }
            int start = i;
            int from = i;
            if (c == '-' && i + 1 < n && digit(text.charAt(i + 1)) && (before(text, i) == '(' || before(text, i) == ',')) {
                from = i + 1;  // a signed number: Spark's literal covers the sign
            } else if (!ident(c)) {
                t.append(c);
                i++;
                continue;
            }
            int j = from;
            while (j < n && ident(text.charAt(j))) {
                j++;
            }
            boolean digits = true;
            for (int m = from; m < j && digits; m++) {
                digits = digit(text.charAt(m));
            }
            if (!digits) {
                if (from != start) {  // '-' before a name: an operator
                    t.append('-');
                    i = from;
                    continue;
                }
                t.append(text, i, j);
                i = j;
                continue;
            }
            if (start > 0 && text.charAt(start - 1) == '.') {
                return null;
            }
            if (j < n && text.charAt(j) == '.') {
                int k = j + 1;
                while (k < n && digit(text.charAt(k))) {
                    k++;
                }
                if (k == j + 1 || (k < n && (ident(text.charAt(k)) || text.charAt(k) == '.'))) {
                    return null;
                }
                if ((j - from) + (k - j - 1) > MAX_DECIMAL_DIGITS) {
                    t.append(text, start, k);
                } else {
                    slots.add(new Object[] {start, k, 'D'});
                    t.append('\0').append('D');
                }
                i = k;
                continue;
            }
            if (j - from > MAX_INTEGER_DIGITS) {
                t.append(text, start, j);
            } else {
                slots.add(new Object[] {start, j, 'I'});
                t.append('\0').append('I');
            }
            i = j;
        }
        Scan scan = new Scan(t.toString());
        for (Object[] s : slots) {
            int a = (Integer) s[0];
            int b = (Integer) s[1];
            scan.slots.add(text.substring(a, b));
            scan.spans.add(new int[] {a, b});
            scan.kinds.append((char) (Character) s[2]);
        }
        return scan;
    }

    /** The literal Spark's parser makes of a cut-out slot (AstBuilder's integer, decimal and string literals). */
    static Literal literal(char kind, String slot) {
        switch (kind) {
            case 'S':
                return org.apache.spark.sql.catalyst.expressions.Literal$.MODULE$.create(
                        org.apache.spark.sql.catalyst.util.SparkParserUtils$.MODULE$.unescapeSQLString(slot),
                        DataTypes.StringType);
            case 'I': {
                long v = Long.parseLong(slot);  // at most 18 digits and a sign
                return org.apache.spark.sql.catalyst.expressions.Literal$.MODULE$.apply(
                        v >= Integer.MIN_VALUE && v <= Integer.MAX_VALUE ? (Object) Integer.valueOf((int) v) : (Object) Long.valueOf(v));
            }
            case 'D':
                return org.apache.spark.sql.catalyst.expressions.Literal$.MODULE$.apply(new BigDecimal(slot));
            default:
                throw new IllegalArgumentException("slot kind " + kind);
        }
    }

    /**
     * One analysed template: what a hit needs to stage a statement without Spark's parse and analysis.
     * It holds no session, plan or table (a closed session or an old metadata is not kept alive by it):
     * the table a hit writes with is the committer's metadata, checked against what is recorded here.
     */
    static final class Entry {
        final scala.collection.immutable.Map<String, String> conf;
        final scala.collection.Seq<String> name;
        final UnresolvedInlineTable parsed;
        final int[][] cells;  // slot → {row, column}
        final StreamIngest.LocalForm form;
        final String tableName;
        final String tableUuid;
        final String dbKey;
        final String tableKey;
        final int schemaId;
        final int specId;
        final int sortOrderId;
        final int formatVersion;
        final String location;
        final Map<String, String> properties;
        final long chars;
        final long cellCount;

        Entry(scala.collection.immutable.Map<String, String> conf, scala.collection.Seq<String> name,
              UnresolvedInlineTable parsed, int[][] cells, StreamIngest.LocalForm form, Table table, long chars) {
            this.conf = conf;
            this.name = name;
            this.parsed = parsed;
            this.cells = cells;
            this.form = form;
            this.tableName = table.name();
            this.tableUuid = table.uuid().toString();
            String[] parts = table.name().split("\\.");
            this.dbKey = parts.length >= 2 ? parts[parts.length - 2] : null;
            this.tableKey = parts.length >= 2 ? parts[parts.length - 1] : null;
            this.schemaId = table.schema().schemaId();
            this.specId = table.spec().specId();
            this.sortOrderId = table.sortOrder().orderId();
            this.formatVersion = ((org.apache.iceberg.HasTableOperations) table).operations().current().formatVersion();
            this.location = table.location();
            this.properties = new java.util.HashMap<>(table.properties());
            this.chars = chars;
            this.cellCount = (long) parsed.rows().size() * parsed.names().size();
        }

        /** Whether {@code latest} is, in all a kept form and the rows' files depend on, the table analysed. */
        boolean analysedAgainst(TableMetadata latest) {
            return latest.currentSchemaId() == schemaId && latest.defaultSpecId() == specId
                    && latest.defaultSortOrderId() == sortOrderId && latest.formatVersion() == formatVersion
                    && latest.location().equals(location) && latest.properties().equals(properties);
        }
    }

    /** The session state a form depends on: every SQL setting, and the current catalog, namespace and role. */
    static final class Context {
        final scala.collection.immutable.Map<String, String> conf;
        final String text;

        private Context(scala.collection.immutable.Map<String, String> conf, String text) {
            this.conf = conf;
            this.text = text;
        }

        static Context of(SparkSession session) {
            scala.collection.immutable.Map<String, String> conf = session.sessionState().conf().getAllConfs();
            org.apache.spark.sql.connector.catalog.CatalogManager catalogs = session.sessionState().catalogManager();
            String role = SessionRoles.of(session);
            return new Context(conf, (role == null ? "" : role) + '\u0002' + catalogs.currentCatalog().name() + '\u0002'
                    + String.join("\u0003", catalogs.currentNamespace()) + '\u0002' + conf.hashCode());
        }

        boolean same(Context other) {
            return text.equals(other.text) && conf.equals(other.conf);
        }
    }

    private static String key(Scan scan, List<Literal> literals, String context) {
        StringBuilder k = new StringBuilder(scan.template.length() + 16 * literals.size() + context.length() + 2);
        k.append(scan.template).append('\u0001');
        for (Literal l : literals) {
            k.append(l.dataType().catalogString()).append(',');
        }
        return k.append('\u0001').append(context).toString();
    }

    private static List<Literal> literals(Scan scan) {
        List<Literal> out = new ArrayList<>(scan.slots.size());
        for (int s = 0; s < scan.slots.size(); s++) {
            out.add(literal(scan.kinds.charAt(s), scan.slots.get(s)));
        }
        return out;
    }

    /**
     * {@code statement} staged from its template's analysed form, or null: it has no
     * kept template, or anything the form depends on changed (then Spark parses and
     * analyses it, and {@link #keep} may keep its form).
     */
    static StreamIngest.Staged stage(SparkSession session, String statement) {
        Scan scan = scan(statement);
        if (scan == null || scan.slots.isEmpty()) {
            return null;
        }
        List<Literal> literals;
        try {
            literals = literals(scan);
        } catch (RuntimeException e) {
            return null;  // Spark's parser reports it
        }
        Context context = Context.of(session);
        Object found = ENTRIES.get(key(scan, literals, context.text));
        if (!(found instanceof Entry)) {
            MISSES.incrementAndGet();
            return null;
        }
        Entry e = (Entry) found;
        if (!e.conf.equals(context.conf) || session.sessionState().catalog().isTempView(e.name)) {
            MISSES.incrementAndGet();
            STALE_SESSION.incrementAndGet();
            return null;
        }
        Table table = current(e);
        if (table == null) {
            MISSES.incrementAndGet();
            STALE_TABLE.incrementAndGet();
            return null;
        }
        List<InternalRow> rows = rows(session, e, literals);
        if (rows == null) {
            MISSES.incrementAndGet();
            return null;
        }
        HITS.incrementAndGet();
        return new StreamIngest.Staged(session, table, e.form, rows);
    }

    /**
     * The table as Spark would load it now, if it is, in all the entry depends on, the one the entry was
     * analysed against: the metastore's current metadata file is the one the table's committer committed
     * or read last, and that metadata has the entry's schema, spec, sort order, location and properties.
     * Else null.
     */
    private static Table current(Entry e) {
        if (e.dbKey == null) {
            return null;
        }
        TableMetadata latest = StreamIngest.latestCommitted(e.tableUuid);
        String location = CachingObjectStore.metadataLocation(e.dbKey, e.tableKey);
        if (latest == null || location == null || !location.equals(latest.metadataFileLocation())
                || !e.analysedAgainst(latest)) {
            return null;
        }
        return StreamIngest.committedTable(e.tableUuid, e.tableName, latest);
    }

    private static List<InternalRow> rows(SparkSession session, Entry e, List<Literal> literals) {
        List<List<Expression>> rows = new ArrayList<>();
        scala.collection.Iterator<scala.collection.Seq<Expression>> it = e.parsed.rows().iterator();
        while (it.hasNext()) {
            rows.add(new ArrayList<>(JavaConverters.seqAsJavaList(it.next())));
        }
        for (int s = 0; s < e.cells.length; s++) {
            rows.get(e.cells[s][0]).set(e.cells[s][1], literals.get(s));
        }
        List<scala.collection.Seq<Expression>> seqs = new ArrayList<>(rows.size());
        for (List<Expression> r : rows) {
            seqs.add(JavaConverters.asScalaBuffer(r).toSeq());
        }
        UnresolvedInlineTable table = new UnresolvedInlineTable(e.parsed.names(), JavaConverters.asScalaBuffer(seqs).toSeq());
        LogicalPlan resolved = resolveInline(session, table);
        if (!(resolved instanceof LocalRelation) || !e.form.matches((LocalRelation) resolved)) {
            return null;
        }
        scala.collection.Seq<InternalRow> data = ((LocalRelation) resolved).data();
        return inConf(session, () -> e.form.rows(data));
    }

    /** Spark's own rule for an inline table, under the session's SQL settings (casts, time zone). */
    private static LogicalPlan resolveInline(SparkSession session, UnresolvedInlineTable table) {
        return inConf(session, () -> (LogicalPlan) ResolveInlineTables$.MODULE$.apply(table));
    }

    private static <T> T inConf(SparkSession session, java.util.function.Supplier<T> body) {
        return SQLConf$.MODULE$.withExistingConf(session.sessionState().conf(), new AbstractFunction0<T>() {
            @Override
            public T apply() {
                return body.get();
            }
        });
    }

    /**
     * Keep the analysed form of {@code statement}, which Spark parsed as {@code parsed} and
     * {@code staged} analysed, when every literal this class cuts out is where Spark's parse has it.
     */
    static void keep(SparkSession session, String statement, LogicalPlan parsed, StreamIngest.Staged staged,
                     Context before) {
        if (staged == null || !staged.isLocal() || staged.localForm() == null || !(parsed instanceof InsertIntoStatement)
                || staged.table().properties().containsKey("encryption.key-id")) {
            return;  // nothing to keep now; not a property of the template (the table may change)
        }
        Scan scan = scan(statement);
        if (scan == null || scan.slots.isEmpty()) {
            return;
        }
        List<Literal> literals;
        try {
            literals = literals(scan);
        } catch (RuntimeException e) {
            return;
        }
        Context context = Context.of(session);
        if (!context.same(before)) {
            return;  // the session changed while Spark analysed it (a USE or SET run beside it)
        }
        String key = key(scan, literals, context.text);
        Object old = ENTRIES.get(key);
        if (old == NOT_KEPT) {
            return;  // its text does not match its parse: that does not change
        }
        // A kept form that no longer served (the table or the session changed) is replaced by this one.
        Entry entry = entry(session, scan, literals, (InsertIntoStatement) parsed, staged, context.conf,
                statement.length());
        if (entry == null) {
            REFUSED.incrementAndGet();
            if (!(old instanceof Entry)) {
                ENTRIES.put(key, NOT_KEPT);
            }
            return;
        }
        if (old instanceof Entry) {
            KEPT_CHARS.addAndGet(-((Entry) old).chars);
            KEPT_CELLS.addAndGet(-((Entry) old).cellCount);
        }
        if (ENTRIES.size() >= MAX_ENTRIES || KEPT_CHARS.addAndGet(entry.chars) > MAX_KEPT_CHARS
                || KEPT_CELLS.addAndGet(entry.cellCount) > MAX_KEPT_CELLS) {
            clear();
            KEPT_CHARS.addAndGet(entry.chars);
            KEPT_CELLS.addAndGet(entry.cellCount);
        }
        KEPT.incrementAndGet();
        ENTRIES.put(key, entry);
    }

    /** The form of a statement whose every cut-out literal is where Spark's parse has it, else null. */
    private static Entry entry(SparkSession session, Scan scan, List<Literal> literals, InsertIntoStatement insert,
                               StreamIngest.Staged staged, scala.collection.immutable.Map<String, String> conf,
                               long chars) {
        if (!(insert.table() instanceof UnresolvedRelation) || !(insert.query() instanceof UnresolvedInlineTable)
                || !insert.partitionSpec().isEmpty() || insert.overwrite() || insert.ifPartitionNotExists()
                || insert.byName()) {
            return null;
        }
        StreamIngest.LocalForm form = staged.localForm();
        if (form == null) {
            return null;
        }
        UnresolvedInlineTable inline = (UnresolvedInlineTable) insert.query();
        List<scala.collection.Seq<Expression>> rows = JavaConverters.seqAsJavaList(inline.rows());
        int[][] cells = new int[literals.size()][];
        for (int r = 0; r < rows.size(); r++) {
            List<Expression> row = JavaConverters.seqAsJavaList(rows.get(r));
            for (int c = 0; c < row.size(); c++) {
                Expression cell = row.get(c);
                if (!(cell instanceof Literal)) {
                    return null;
                }
                scala.Option<Object> a = cell.origin().startIndex();
                scala.Option<Object> b = cell.origin().stopIndex();
                if (a.isEmpty() || b.isEmpty()) {
                    // Spark keeps no position for some literals (DATE'…', X'…'): never a cut-out one,
                    // each of which must be found at its position below.
                    continue;
                }
                int start = (Integer) a.get();
                int stop = (Integer) b.get() + 1;
                for (int s = 0; s < scan.spans.size(); s++) {
                    int[] span = scan.spans.get(s);
                    if (span[0] == start && span[1] == stop) {
                        if (cells[s] != null || !cell.equals(literals.get(s))) {
                            return null;
                        }
                        cells[s] = new int[] {r, c};
                    } else if (span[0] < stop && start < span[1]) {
                        return null;  // a cell that covers a cut-out literal and more
                    }
                }
            }
        }
        for (int[] cell : cells) {
            if (cell == null) {
                return null;  // a cut-out literal that is no cell of the VALUES
            }
        }
        LogicalPlan resolved = resolveInline(session, inline);
        if (!(resolved instanceof LocalRelation) || !form.matches((LocalRelation) resolved)) {
            return null;
        }
        return new Entry(conf, ((UnresolvedRelation) insert.table()).multipartIdentifier(), inline, cells, form,
                staged.table(), chars);
    }

    /** Forget every template: a bound was reached. */
    static void clear() {
        ENTRIES.clear();
        KEPT_CHARS.set(0);
        KEPT_CELLS.set(0);
    }

    static String counters() {
        return "\"templateHits\":" + HITS.get() + ",\"templateMisses\":" + MISSES.get() + ",\"templateStaleSession\":"
                + STALE_SESSION.get() + ",\"templateStaleTable\":" + STALE_TABLE.get() + ",\"templatesKept\":"
                + KEPT.get() + ",\"templatesRefused\":" + REFUSED.get() + ",\"templatesHeld\":" + ENTRIES.size()
                + ",\"templateChars\":" + KEPT_CHARS.get() + ",\"templateCells\":" + KEPT_CELLS.get();
    }
}
