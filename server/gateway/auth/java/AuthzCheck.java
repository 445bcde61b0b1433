package io.tierlake.internal;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.Function1;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The second line of the gateway's authorisation, inside Spark: a check rule
 * (a session extension, as Apache Kyuubi's AuthZ plugin installs its own)
 * that sees every plan a client's session has analysed, with names resolved
 * by Spark itself. The gateway decides first, on Spark's parse
 * (server/gateway/auth/planauth.py); this rule refuses what resolution can still
 * turn into something else: files read through a data source, a JVM method
 * called by reflection, a document fetched by an XPath function, a
 * persistent function's code, a write by a role that may not write (or a
 * write into ``sys``).
 *
 * Only sessions the gateway bound to a role are checked ({@link #bind}): the
 * server's own sessions (tiering, maintenance) are not clients'; the
 * gateway's sessions for a client's sys reads are bound to that client's role. Views are checked through: a reader's query of a view over files
 * is refused like the files.
 *
 * <p>What is refused, to whom and with which words is the policy's (server/gateway/auth/policy.json, the
 * same file the gateway's first line reads), handed over once by {@link #configure} before any session is
 * bound. Until then nothing is known, so every statement of a non-admin session is refused.
 */
public final class AuthzCheck extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    public static final String ADMIN = "admin";
    public static final String WRITER = "writer";
    public static final String READER = "reader";
    private static final String SESSION_CATALOG = "spark_catalog";

    private static final String NOBODY = "nobody";

    /** The policy {@link #configure} read, or null: not configured (deny by default). */
    private static volatile Policy policy;

    /**
     * Read the authorisation policy (the text of server/gateway/auth/policy.json) for every check from now
     * on. A policy missing an entry or field this rule needs is refused whole (IllegalArgumentException)
     * and the one before stays.
     */
    public static void configure(String json) {
        policy = Policy.parse(json);
    }

    /** Whether {@link #configure} has given this rule a policy. */
    public static boolean configured() {
        return policy != null;
    }

    private static int rank(String role) {
        if (NOBODY.equals(role)) return 3;
        if (ADMIN.equals(role)) return 2;
        return WRITER.equals(role) ? 1 : 0;
    }

    /** Whether ``role`` may do what ``needs`` (reader, writer, admin or nobody) is declared for. */
    private static boolean allows(String role, String needs) {
        return !NOBODY.equals(needs) && rank(role) >= rank(needs);
    }

    private static String fill(String template, String... pairs) {
        String out = template;
        for (int i = 0; i + 1 < pairs.length; i += 2) out = out.replace("{" + pairs[i] + "}", pairs[i + 1]);
        return out;
    }

    /** What was refused and the least role it needs ("nobody": refused to every role). */
    private static final class Refusal {
        final String what;
        final String role;

        Refusal(String what, String role) {
            this.what = what;
            this.role = role;
        }
    }

    /** One entry of the policy as this rule applies it: the resolved classes it covers and its role. */
    static final class Rule {
        final String id;
        final String role;
        final String resolved;
        private final List<String> classes = new ArrayList<>();
        private final List<Class<?>> instanceOf = new ArrayList<>();

        Rule(JsonNode entry) {
            this.id = entry.path("id").asText();
            this.role = role(entry, "role");
            this.resolved = entry.path("resolved").asText(null);
            for (JsonNode c : entry.path("classes")) classes.add(c.asText());
            for (JsonNode c : entry.path("instance_of")) {
                try {
                    instanceOf.add(Class.forName(c.asText(), false, AuthzCheck.class.getClassLoader()));
                } catch (ClassNotFoundException ex) {
                    throw new IllegalArgumentException("policy entry " + id + ": no class " + c.asText(), ex);
                }
            }
        }

        /** Whether the resolved class named ``simple`` is one of this entry's ('*' at an end: any prefix or suffix). */
        boolean matches(String simple) {
            for (String c : classes) {
                if (c.endsWith("*") ? simple.startsWith(c.substring(0, c.length() - 1))
                        : c.startsWith("*") ? simple.endsWith(c.substring(1)) : simple.equals(c)) {
                    return true;
                }
            }
            return false;
        }

        boolean matchesNode(Object node) {
            for (Class<?> c : instanceOf) if (c.isInstance(node)) return true;
            return matches(simple(node));
        }
    }

    /** The policy's entries this rule applies, parsed once. */
    static final class Policy {
        final List<Rule> nobodyFunctions = new ArrayList<>();
        final List<Rule> roleFunctions = new ArrayList<>();
        final List<Rule> nodeRules = new ArrayList<>();
        final Rule reflection;
        final java.util.Set<String> reflectionClasses;
        final Rule regex;
        final String regexNonLiteralRole;
        final String regexNonLiteral;
        final Rule writes;
        final Rule sysWrites;
        final String sysDatabase;
        final Rule tieredWrites;
        final Rule filesByPath;
        final Rule useOtherCatalog;

        private Policy(JsonNode root) {
            Map<String, JsonNode> byId = new HashMap<>();
            for (JsonNode entry : root.path("entries")) {
                byId.put(entry.path("id").asText(), entry);
                String kind = entry.path("kind").asText();
                String decidedBy = entry.path("decided_by").asText();
                String role = entry.path("role").asText();
                if ("parsed".equals(decidedBy) || READER.equals(role) || !entry.path("classes").isArray()
                        && !entry.path("instance_of").isArray()) {
                    continue;
                }
                if ("function".equals(kind)) {
                    (NOBODY.equals(role) ? nobodyFunctions : roleFunctions).add(new Rule(entry));
                } else if ("statement".equals(kind)) {
                    nodeRules.add(new Rule(entry));
                }
            }
            reflection = new Rule(entry(byId, "reflection-classes"));
            java.util.TreeSet<String> allowed = new java.util.TreeSet<>();
            for (JsonNode c : entry(byId, "reflection-classes").path("allowed_classes")) allowed.add(c.asText());
            reflectionClasses = Collections.unmodifiableSet(allowed);
            JsonNode regexEntry = entry(byId, "regex-patterns");
            regex = new Rule(regexEntry);
            regexNonLiteralRole = role(regexEntry, "non_literal_role");
            regexNonLiteral = required(regexEntry, "non_literal");
            writes = new Rule(entry(byId, "writes"));
            sysWrites = new Rule(entry(byId, "writes-into-sys"));
            sysDatabase = required(entry(byId, "writes-into-sys"), "database");
            tieredWrites = new Rule(entry(byId, "writes-into-tiered-tables"));
            filesByPath = new Rule(entry(byId, "files-by-path"));
            useOtherCatalog = new Rule(entry(byId, "use-other-catalog"));
            for (Rule r : new Rule[] {reflection, regex, sysWrites, useOtherCatalog}) {
                if (r.resolved == null) throw new IllegalArgumentException("policy entry " + r.id + ": no resolved");
            }
        }

        static Policy parse(String json) {
            try {
                return new Policy(new ObjectMapper().readTree(json));
            } catch (java.io.IOException ex) {
                throw new IllegalArgumentException("the authorisation policy is not JSON: " + ex.getMessage(), ex);
            }
        }

        private static JsonNode entry(Map<String, JsonNode> byId, String id) {
            JsonNode entry = byId.get(id);
            if (entry == null) throw new IllegalArgumentException("the authorisation policy has no entry " + id);
            return entry;
        }
    }

    /** A role field: a misspelt role would otherwise rank as a reader's and allow everyone. */
    private static String role(JsonNode entry, String field) {
        String role = required(entry, field);
        if (!NOBODY.equals(role) && !ADMIN.equals(role) && !WRITER.equals(role) && !READER.equals(role)) {
            throw new IllegalArgumentException("policy entry " + entry.path("id").asText() + ": no role " + role);
        }
        return role;
    }

    private static String required(JsonNode entry, String field) {
        JsonNode value = entry.get(field);
        if (value == null || !value.isTextual()) {
            throw new IllegalArgumentException("policy entry " + entry.path("id").asText() + ": no " + field);
        }
        return value.asText();
    }

    /** Check every plan ``session`` (``user``'s) analyses from now on as ``role`` (admin, writer or reader). */
    public static void bind(SparkSession session, String role, String user) {
        SessionRoles.bind(session, role);
        // The Thrift Server's statement events name the user, not the session: the deadline of a
        // reader's statements goes by the role its user was last bound to.
        if (user != null) StatementDeadline.noteUser(user, READER.equals(role));
    }

    public static String roleOf(SparkSession session) {
        return SessionRoles.of(session);
    }

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        // The statement's own thread, noted when its text is parsed (the Thrift Server set its job group
        // just before): from then on its deadline may stop this thread should planning, analysis
        // included, outlive it (StatementDeadline), and never for a statement the thread ran before.
        extensions.injectParser(new scala.runtime.AbstractFunction2<SparkSession,
                org.apache.spark.sql.catalyst.parser.ParserInterface, org.apache.spark.sql.catalyst.parser.ParserInterface>() {
            @Override
            public org.apache.spark.sql.catalyst.parser.ParserInterface apply(
                    SparkSession session, org.apache.spark.sql.catalyst.parser.ParserInterface delegate) {
                return new NotingParser(session, delegate);
            }
        });
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
                return new AbstractFunction1<LogicalPlan, BoxedUnit>() {
                    @Override
                    public BoxedUnit apply(LogicalPlan plan) {
                        // This is the statement's own thread (the Thrift Server set its job group here):
                        // its deadline can stop the thread should planning outlive it.
                        StatementDeadline.noteThread(session.sparkContext().getLocalProperty(StatementDeadline.JOB_GROUP));
                        String role = SessionRoles.of(session);
                        // A session no role was bound to (development mode, the server's own) is
                        // checked as admin's: what no role may run (XPath, reflection outside the
                        // policy's reflection-classes) is refused there too.
                        String refused = refusal(plan, role == null ? ADMIN : role);
                        if (refused != null) throw new SecurityException(refused);
                        return BoxedUnit.UNIT;
                    }
                };
            }
        });
        return BoxedUnit.UNIT;
    }

    /** Spark's parser (or the one before it), noting the statement's thread at each plan parsed. */
    private static final class NotingParser implements org.apache.spark.sql.catalyst.parser.ParserInterface {
        private final SparkSession session;
        private final org.apache.spark.sql.catalyst.parser.ParserInterface delegate;

        NotingParser(SparkSession session, org.apache.spark.sql.catalyst.parser.ParserInterface delegate) {
            this.session = session;
            this.delegate = delegate;
        }

        private void note() {
            StatementDeadline.noteThread(session.sparkContext().getLocalProperty(StatementDeadline.JOB_GROUP));
        }

        @Override
        public LogicalPlan parsePlan(String sqlText) throws org.apache.spark.sql.catalyst.parser.ParseException {
            note();
            return delegate.parsePlan(sqlText);
        }

        @Override
        public LogicalPlan parseQuery(String sqlText) throws org.apache.spark.sql.catalyst.parser.ParseException {
            note();
            return delegate.parseQuery(sqlText);
        }

        @Override
        public Expression parseExpression(String sqlText) throws org.apache.spark.sql.catalyst.parser.ParseException {
            return delegate.parseExpression(sqlText);
        }

        @Override
        public org.apache.spark.sql.catalyst.TableIdentifier parseTableIdentifier(String sqlText)
                throws org.apache.spark.sql.catalyst.parser.ParseException {
            return delegate.parseTableIdentifier(sqlText);
        }

        @Override
        public org.apache.spark.sql.catalyst.FunctionIdentifier parseFunctionIdentifier(String sqlText)
                throws org.apache.spark.sql.catalyst.parser.ParseException {
            return delegate.parseFunctionIdentifier(sqlText);
        }

        @Override
        public scala.collection.Seq<String> parseMultipartIdentifier(String sqlText)
                throws org.apache.spark.sql.catalyst.parser.ParseException {
            return delegate.parseMultipartIdentifier(sqlText);
        }

        @Override
        public org.apache.spark.sql.types.StructType parseTableSchema(String sqlText)
                throws org.apache.spark.sql.catalyst.parser.ParseException {
            return delegate.parseTableSchema(sqlText);
        }

        @Override
        public org.apache.spark.sql.types.DataType parseDataType(String sqlText)
                throws org.apache.spark.sql.catalyst.parser.ParseException {
            return delegate.parseDataType(sqlText);
        }
    }

    private static String simple(Object o) {
        String name = o.getClass().getName();
        if (name.endsWith("$")) name = name.substring(0, name.length() - 1);
        return name.substring(Math.max(name.lastIndexOf('.'), name.lastIndexOf('$')) + 1);
    }

    /** Table property of a stream table (server/catalog/properties.py, ENABLED). */
    static final String STREAM_PROPERTY = "table.datalake.enabled";
    /** Table property of a lake table: its stream table (sql/templates/create_lake_table.sql.j2). */
    static final String LAKE_PROPERTY = "tierlake.stream-table";

    /** The table a write node writes (its first field: AppendData, Overwrite*, ReplaceData, WriteDelta,
     *  DeleteFromTable, UpdateTable, MergeIntoTable all name their target first), or null. */
    private static org.apache.spark.sql.connector.catalog.Table writeTable(LogicalPlan write) {
        Object target = write.productArity() > 0 ? write.productElement(0) : null;
        for (int depth = 0; depth < 16 && target != null; depth++) {
            if (target instanceof org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation) {
                return ((org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation) target).table();
            } else if (target instanceof org.apache.spark.sql.catalyst.analysis.ResolvedTable) {
                return ((org.apache.spark.sql.catalyst.analysis.ResolvedTable) target).table();
            } else if (target instanceof scala.Option) {
                scala.Option<?> option = (scala.Option<?>) target;
                target = option.isDefined() ? option.get() : null;
            } else if (target instanceof LogicalPlan && ((LogicalPlan) target).children().size() == 1) {
                target = ((LogicalPlan) target).children().head();  // SubqueryAlias, a projection
            } else {
                return null;
            }
        }
        return null;
    }

    /** True while this thread runs tierlake's ingest path (StreamIngest), which analyses a writer's
     *  INSERT into a stream table in the writer's own session after its checks; a statement Spark
     *  runs for a client (relayed by the gateway) never has it on its stack. */
    private static boolean inIngest() {
        return StackWalker.getInstance().walk(frames ->
            frames.anyMatch(f -> f.getClassName().startsWith("io.tierlake.internal.StreamIngest")));
    }

    private static String verb(LogicalPlan write) {
        String name = simple(write);
        switch (name) {
            case "MergeIntoTable": return "MERGE";
            case "UpdateTable": return "UPDATE";
            case "DeleteFromTable": return "DELETE";
            case "ReplaceData": case "WriteDelta": return "MERGE, UPDATE or DELETE (" + name + ")";
            case "OverwriteByExpression": case "OverwritePartitionsDynamic": return "INSERT OVERWRITE";
            case "AppendData": return "an append outside INSERT's ingest checks (MERGE … WHEN NOT MATCHED THEN INSERT)";
            default: return name;
        }
    }

    /**
     * Writers append to stream tables, through the ingest path, and do nothing else to tiered
     * tables (issue 51): a MERGE, UPDATE, DELETE or overwrite of a stream table is a commit that
     * tiering cannot carry (the table would go Failed), an insert-only MERGE skips the ingest
     * checks (a forged change type fails every round), and a write into a lake table makes the
     * lake differ from its stream. Decided on the table Spark resolved; null when allowed.
     */
    private static String tieredWrite(LogicalPlan write) {
        org.apache.spark.sql.connector.catalog.Table table = writeTable(write);
        if (table instanceof org.apache.spark.sql.connector.write.RowLevelOperationTable) {
            // DELETE, UPDATE and MERGE are rewritten to ReplaceData/WriteDelta over this wrapper, which
            // answers no properties of its own.
            table = ((org.apache.spark.sql.connector.write.RowLevelOperationTable) table).table();
        }
        if (table == null) return null;
        Map<String, String> props = table.properties();
        if (props == null) return null;
        if (props.containsKey(LAKE_PROPERTY)) {
            return "a write into the lake table " + table.name() + " (lake tables are written by tiering only)";
        }
        if ("true".equalsIgnoreCase(props.get(STREAM_PROPERTY))) {
            if (write instanceof org.apache.spark.sql.catalyst.plans.logical.AppendData && inIngest()) return null;
            return verb(write) + " of the stream table " + table.name()
                + " (writers append to stream tables with INSERT INTO, through the ingest checks; anything else"
                + " would stop or falsify its tiering)";
        }
        return null;
    }

    /** The namespace (database) of the first table a write node names, or null. */
    private static String writeNamespace(LogicalPlan write) {
        ArrayDeque<Object> stack = new ArrayDeque<>();
        scala.collection.Iterator<Object> fields = write.productIterator();
        while (fields.hasNext()) stack.add(fields.next());
        while (!stack.isEmpty()) {
            Object o = stack.poll();
            if (o instanceof org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation) {
                scala.Option<org.apache.spark.sql.connector.catalog.Identifier> id =
                    ((org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation) o).identifier();
                if (id.isDefined() && id.get().namespace().length > 0) {
                    return id.get().namespace()[id.get().namespace().length - 1];
                }
            } else if (o instanceof org.apache.spark.sql.catalyst.catalog.CatalogTable) {
                return ((org.apache.spark.sql.catalyst.catalog.CatalogTable) o).identifier().database().getOrElse(null);
            } else if (o instanceof scala.Option && ((scala.Option<?>) o).isDefined()) {
                stack.add(((scala.Option<?>) o).get());
            } else if (o instanceof LogicalPlan) {
                stack.add(o);
                scala.collection.Iterator<Object> more = ((LogicalPlan) o).productIterator();
                while (more.hasNext()) stack.add(more.next());
                if (stack.size() > 10_000) return null;
            }
        }
        return null;
    }

    private static String fileRead(LogicalPlan node) {
        if (node instanceof org.apache.spark.sql.execution.datasources.LogicalRelation) {
            org.apache.spark.sql.execution.datasources.LogicalRelation r =
                (org.apache.spark.sql.execution.datasources.LogicalRelation) node;
            if (r.catalogTable().isEmpty()) return "a read of files by path (" + simple(r.relation()) + ")";
        }
        if (node instanceof org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation) {
            org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation r =
                (org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation) node;
            if (r.table() instanceof org.apache.spark.sql.execution.datasources.v2.FileTable
                    || r.catalog().isEmpty() || r.identifier().isEmpty()
                    || simple(r.identifier().get()).equals("PathIdentifier")) {
                return "a read of files by path (" + r.table().name() + ")";
            }
        }
        return null;
    }

    /**
     * {@code USE <catalog>.<namespace>} of a catalog other than the session catalog. The gateway
     * refuses a reader's names in other catalogs on Spark's parse (the incremental-read catalog
     * that fresh views read the stream through among them); after such a USE they would be one-
     * or two-part names it resolves against the session catalog, while Spark resolves them in the
     * other catalog.
     */
    private static String otherCatalog(LogicalPlan node, Policy p) {
        if (!(node instanceof org.apache.spark.sql.catalyst.plans.logical.SetCatalogAndNamespace)) return null;
        LogicalPlan target = ((org.apache.spark.sql.catalyst.plans.logical.SetCatalogAndNamespace) node).child();
        if (!(target instanceof org.apache.spark.sql.catalyst.analysis.ResolvedNamespace)) return null;
        String catalog = ((org.apache.spark.sql.catalyst.analysis.ResolvedNamespace) target).catalog().name();
        if (SESSION_CATALOG.equalsIgnoreCase(catalog)) return null;
        return fill(p.useOtherCatalog.resolved, "catalog", catalog);
    }

    /**
     * Why a call by reflection may not run, or null when its class is one of the policy's
     * ``reflection-classes``: pure functions of their arguments (and Thread.sleep, which a statement
     * deadline interrupts). Anything else (System.exit, Runtime, process creation, properties, threads)
     * could end or take over the JVM that serves everyone, so it is refused whoever asks (issue 51,
     * "one life"). Only a literal class name can be checked: any other is refused.
     */
    private static Refusal reflection(Expression e, String name, Policy p) {
        if (!p.reflection.matches(name)) return null;
        scala.collection.Seq<Expression> args = e.children();
        Object cls = args.size() > 0 && args.apply(0).foldable() ? args.apply(0).eval(null) : null;
        Object method = args.size() > 1 && args.apply(1).foldable() ? args.apply(1).eval(null) : null;
        String target = cls == null ? null : cls.toString();
        if (target != null && p.reflectionClasses.contains(target)) return null;
        return new Refusal(fill(p.reflection.resolved, "target", target + (method == null ? "" : "." + method),
            "allowed", String.join(", ", p.reflectionClasses)), p.reflection.role);
    }

    /**
     * Why a regular expression may not run, or null. java.util.regex backtracks, ignores thread
     * interrupts and so a statement's deadline: {@code 'aaaa…a' rlike '(.*a){12}$'} kept a core for
     * minutes after its reader was told the statement timed out (issue 51). So a pattern with a
     * repeated group that itself holds a repeated part — the shape of catastrophic backtracking —
     * is refused for every role (as XPath is), and a reader's or writer's pattern must be a literal
     * (one that comes from data cannot be checked before it runs). Possessive quantifiers
     * ({@code a*+}) and atomic groups ({@code (?>…)}) do not backtrack and are allowed.
     */
    private static Refusal regex(Expression e, String name, String role, Policy p) {
        if (!p.regex.matches(name) || e.children().size() < 2) return null;
        Expression pattern = e.children().apply(1);
        if (!pattern.foldable()) {
            return allows(role, p.regexNonLiteralRole) ? null
                : new Refusal(fill(p.regexNonLiteral, "pretty", e.prettyName()), p.regexNonLiteralRole);
        }
        Object value = pattern.eval(null);
        if (value == null) return null;
        String nested = nestedRepetition(value.toString());
        return nested == null ? null
            : new Refusal(fill(p.regex.resolved, "nested", nested, "pretty", e.prettyName()), p.regex.role);
    }

    /** A description of the first repeated group holding a repeated part in {@code p}, or null. */
    static String nestedRepetition(String p) {
        // Per open group: whether it holds a repetition that can backtrack; whether it is atomic.
        ArrayDeque<boolean[]> groups = new ArrayDeque<>();
        boolean[] top = {false, false};
        groups.push(top);
        boolean lastGroupRepeats = false;
        int groupStart = -1;
        int i = 0;
        while (i < p.length()) {
            char c = p.charAt(i);
            if (c == '\\') {
                if (i + 1 < p.length() && p.charAt(i + 1) == 'Q') {
                    int end = p.indexOf("\\E", i + 2);
                    i = end < 0 ? p.length() : end + 2;
                } else {
                    i += 2;
                }
                i = afterQuantifier(p, i, groups.peek(), false);
                continue;
            }
            if (c == '[') {
                int depth = 1;
                i++;
                if (i < p.length() && p.charAt(i) == '^') i++;
                if (i < p.length() && p.charAt(i) == ']') i++;
                while (i < p.length() && depth > 0) {
                    char d = p.charAt(i);
                    if (d == '\\') i++;
                    else if (d == '[') depth++;
                    else if (d == ']') depth--;
                    i++;
                }
                i = afterQuantifier(p, i, groups.peek(), false);
                continue;
            }
            if (c == '(') {
                boolean atomic = p.startsWith("(?>", i);
                groups.push(new boolean[] {false, atomic});
                i++;
                continue;
            }
            if (c == ')') {
                boolean[] group = groups.size() > 1 ? groups.pop() : groups.peek();
                int q = i + 1;
                boolean inner = group[0] && !group[1];
                if (inner && repeats(p, q) && !possessive(p, q)) {
                    return "a repeated group that repeats inside, at " + (i + 1) + " of '" + p + "'";
                }
                i = afterQuantifier(p, q, groups.peek(), inner);
                continue;
            }
            i = afterQuantifier(p, i + 1, groups.peek(), false);
        }
        return null;
    }

    /** Past the quantifier at {@code i}, if any; marks {@code group} when it repeats and can backtrack
     *  (or when {@code inner}: the atom before it was a group that held such a repetition). */
    private static int afterQuantifier(String p, int i, boolean[] group, boolean inner) {
        if (inner) group[0] = true;
        if (i >= p.length()) return i;
        char c = p.charAt(i);
        int end = i;
        if (c == '*' || c == '+' || c == '?') {
            end = i + 1;
        } else if (c == '{') {
            int close = p.indexOf('}', i);
            if (close < 0) return i;
            end = close + 1;
        } else {
            return i;
        }
        boolean isPossessive = end < p.length() && p.charAt(end) == '+';
        if (repeats(p, i) && !isPossessive) group[0] = true;
        if (end < p.length() && (p.charAt(end) == '?' || p.charAt(end) == '+')) end++;
        return end;
    }

    /** Whether the quantifier at {@code i} repeats (more than once): *, +, {n,}, {n,m} with m > 1, {n} with n > 1. */
    private static boolean repeats(String p, int i) {
        if (i >= p.length()) return false;
        char c = p.charAt(i);
        if (c == '*' || c == '+') return true;
        if (c != '{') return false;
        int close = p.indexOf('}', i);
        if (close < 0) return false;
        String body = p.substring(i + 1, close);
        try {
            int comma = body.indexOf(',');
            if (comma < 0) return Integer.parseInt(body.trim()) > 1;
            String max = body.substring(comma + 1).trim();
            return max.isEmpty() || Integer.parseInt(max) > 1;
        } catch (NumberFormatException ex) {
            return false;
        }
    }

    private static boolean possessive(String p, int i) {
        if (i >= p.length()) return false;
        char c = p.charAt(i);
        int end = i + 1;
        if (c == '{') {
            int close = p.indexOf('}', i);
            if (close < 0) return false;
            end = close + 1;
        } else if (c != '*' && c != '+' && c != '?') {
            return false;
        }
        return end < p.length() && p.charAt(end) == '+';
    }

    private static Refusal function(Expression e, String role, Policy p) {
        String name = simple(e);
        // Refused to everyone first, then what the call's arguments decide (even an admin's), then roles.
        for (Rule r : p.nobodyFunctions) {
            if (r.matches(name)) return new Refusal(fill(r.resolved, "class", name, "pretty", e.prettyName()), NOBODY);
        }
        Refusal reflected = reflection(e, name, p);
        if (reflected != null) return reflected;
        Refusal regex = regex(e, name, role, p);
        if (regex != null) return regex;
        for (Rule r : p.roleFunctions) {
            if (r.matches(name) && !allows(role, r.role)) {
                return new Refusal(fill(r.resolved, "class", name, "pretty", e.prettyName()), r.role);
            }
        }
        return null;
    }

    private static String refused(Refusal r) {
        return NOBODY.equals(r.role)
            ? "permission denied: " + r.what + " is not allowed (decided on Spark's resolved plan)"
            : denied(r.what, r.role);
    }

    /**
     * Why ``plan`` (analysed) may not run for ``role``, or null. Every node is
     * visited, with the plans of subqueries and views; a refusal names what
     * Spark resolved and the role it needs.
     */
    public static String refusal(LogicalPlan plan, String role) {
        Policy p = policy;
        if (p == null) {
            // Never configured: nothing is known to be allowed. The server's own sessions are checked as
            // admin's, and they run before the gateway configures this rule.
            return ADMIN.equals(role) ? null
                : "permission denied: the authorisation policy is not loaded (decided on Spark's resolved plan)";
        }
        ArrayDeque<Object> stack = new ArrayDeque<>();
        stack.push(plan);
        int visited = 0;
        while (!stack.isEmpty()) {
            Object o = stack.pop();
            if (++visited > 5_000_000) return "permission denied: the statement's plan is too large to check";
            if (o instanceof LogicalPlan) {
                LogicalPlan node = (LogicalPlan) o;
                if (!allows(role, p.filesByPath.role)) {
                    String read = fileRead(node);
                    if (read != null) return denied(read, p.filesByPath.role);
                }
                if (!allows(role, p.useOtherCatalog.role)) {
                    String use = otherCatalog(node, p);
                    if (use != null) return denied(use, p.useOtherCatalog.role);
                }
                for (Rule r : p.nodeRules) {
                    if (!allows(role, r.role) && r.matchesNode(node)) {
                        return refused(new Refusal(fill(r.resolved, "class", simple(node)), r.role));
                    }
                }
                if (p.writes.matchesNode(node)) {
                    if (!allows(role, p.sysWrites.role)) {
                        String namespace = writeNamespace(node);
                        if (namespace != null && namespace.equalsIgnoreCase(p.sysDatabase)) {
                            return refused(new Refusal(p.sysWrites.resolved, p.sysWrites.role));
                        }
                    }
                    if (!allows(role, p.tieredWrites.role)) {
                        String tiered = tieredWrite(node);
                        if (tiered != null) return refused(new Refusal(tiered, p.tieredWrites.role));
                    }
                }
                scala.collection.Iterator<LogicalPlan> children = node.children().iterator();
                while (children.hasNext()) stack.push(children.next());
                scala.collection.Iterator<Expression> expressions = node.expressions().iterator();
                while (expressions.hasNext()) stack.push(expressions.next());
                // A view's plan, a CTE's definitions, a command's query: plans held outside children().
                scala.collection.Iterator<? extends Object> inner = node.innerChildren().iterator();
                while (inner.hasNext()) stack.push(inner.next());
            } else if (o instanceof Expression) {
                Expression e = (Expression) o;
                Refusal refused = function(e, role, p);
                if (refused != null) return refused(refused);
                if (e instanceof SubqueryExpression) stack.push(((SubqueryExpression) e).plan());
                scala.collection.Iterator<Expression> children = e.children().iterator();
                while (children.hasNext()) stack.push(children.next());
            }
        }
        return null;
    }

    private static String denied(String what, String role) {
        return "permission denied: " + what + " needs the " + role + " role (decided on Spark's resolved plan)";
    }
}
