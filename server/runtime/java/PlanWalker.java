package io.tierlake.internal;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.trees.TreeNode;

/**
 * Flattens an unresolved logical plan into lines the gateway authorises
 * (server/gateway/auth/planauth.py). One py4j call per statement, linear in the
 * plan's size, iterative (no stack overflow on deep plans).
 *
 * Every constructor field of every node is visited (productIterator), so
 * nothing a node carries is hidden: plans inside expressions (subqueries),
 * CTE definitions, INSERT targets, EXPLAIN'd plans. Every plan node, and
 * every expression that is not a plain one of Spark's own expression
 * packages (functions are noted: their names matter), is written out:
 *   N id parent kind class   (kind: P plan, E expression, O other tree node;
 *                             parent: the nearest written-out ancestor)
 *   S owner text             (a String field of a node whose names matter)
 *   Q owner part part ...    (a Seq of Strings, e.g. a multipart identifier)
 * Fields are tab-separated; tabs, newlines and backslashes are escaped.
 */
public final class PlanWalker {
    private PlanWalker() {}

    private static void esc(StringBuilder out, String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\\') out.append("\\\\");
            else if (c == '\t') out.append("\\t");
            else if (c == '\n') out.append("\\n");
            else if (c == '\r') out.append("\\r");
            else out.append(c);
        }
    }

    private static List<String> strings(scala.collection.Seq<?> seq) {
        List<String> parts = new ArrayList<>();
        scala.collection.Iterator<?> it = seq.iterator();
        while (it.hasNext()) {
            Object o = it.next();
            if (!(o instanceof String)) return null;
            parts.add((String) o);
        }
        return parts.isEmpty() ? null : parts;
    }

    /**
     * ``session``'s parse of ``text`` with ``session`` active on this thread. Spark's parser reads
     * its settings (variable substitution among them) from the thread's active session; a py4j
     * thread has none, so it would read the defaults and expand ${env:...} that the session itself,
     * with substitution off, runs literally: the gateway would decide on other text than runs.
     */
    public static LogicalPlan parse(org.apache.spark.sql.SparkSession session, String text) throws Exception {
        scala.Option<org.apache.spark.sql.SparkSession> before = org.apache.spark.sql.SparkSession.getActiveSession();
        org.apache.spark.sql.SparkSession.setActiveSession(session);
        try {
            return session.sessionState().sqlParser().parsePlan(text);
        } finally {
            if (before.isDefined()) org.apache.spark.sql.SparkSession.setActiveSession(before.get());
            else org.apache.spark.sql.SparkSession.clearActiveSession();
        }
    }

    /** Every function name ``session`` resolves unqualified, one a line. */
    public static String functionNames(org.apache.spark.sql.SparkSession session) {
        StringBuilder out = new StringBuilder();
        scala.collection.Iterator<org.apache.spark.sql.catalyst.FunctionIdentifier> it =
            session.sessionState().functionRegistry().listFunction().iterator();
        while (it.hasNext()) {
            org.apache.spark.sql.catalyst.FunctionIdentifier f = it.next();
            // A persistent function, once called, sits in the registry under its database; its bare
            // name is not a built-in (unqualified, it resolves to the current database's function).
            if (f.database().isDefined()) continue;
            out.append(f.funcName()).append('\n');
        }
        return out.toString();
    }

    /**
     * Whether Spark would read ``name.`path``` as files through a data source of that name: Spark's
     * own lookup (ResolveSQLOnFile calls it), so every spelling Spark accepts counts, e.g. a short
     * name compared with equalsIgnoreCase ("c\u017fv" is csv).
     */
    public static boolean isDataSource(org.apache.spark.sql.SparkSession session, String name) {
        try {
            org.apache.spark.sql.execution.datasources.DataSource$.MODULE$.lookupDataSource(
                name, session.sessionState().conf());
            return true;
        } catch (Throwable notFound) {
            return false;
        }
    }

    /**
     * What Spark's ResolveIdentifierClause makes of ``IDENTIFIER('literal')``: the builder run on
     * the parsed name, so the walk sees the relation or function Spark will resolve. A non-literal
     * name is left as it is (the gateway then asks for admin).
     */
    @SuppressWarnings("unchecked")
    private static Object withIdentifierResolved(Object o) {
        try {
            if (o instanceof org.apache.spark.sql.catalyst.analysis.PlanWithUnresolvedIdentifier) {
                org.apache.spark.sql.catalyst.analysis.PlanWithUnresolvedIdentifier p =
                    (org.apache.spark.sql.catalyst.analysis.PlanWithUnresolvedIdentifier) o;
                scala.collection.Seq<String> name = literalName(p.identifierExpr());
                return name == null ? o : p.planBuilder().apply(name, p.children());
            }
            if (o instanceof org.apache.spark.sql.catalyst.analysis.ExpressionWithUnresolvedIdentifier) {
                org.apache.spark.sql.catalyst.analysis.ExpressionWithUnresolvedIdentifier e =
                    (org.apache.spark.sql.catalyst.analysis.ExpressionWithUnresolvedIdentifier) o;
                scala.collection.Seq<String> name = literalName(e.identifierExpr());
                return name == null ? o : e.exprBuilder().apply(name);
            }
        } catch (RuntimeException unparsable) {
            return o;  // Spark refuses such a name too
        }
        return o;
    }

    private static scala.collection.Seq<String> literalName(Expression expr) {
        if (!(expr instanceof org.apache.spark.sql.catalyst.expressions.Literal)) return null;
        Object value = ((org.apache.spark.sql.catalyst.expressions.Literal) expr).value();
        if (!(value instanceof org.apache.spark.unsafe.types.UTF8String)) return null;
        return org.apache.spark.sql.catalyst.parser.CatalystSqlParser$.MODULE$.parseMultipartIdentifier(value.toString());
    }

    /** A Scala object's class name ends in "$": its simple name is the part before. */
    private static String objectName(Object o) {
        String name = o.getClass().getName();
        if (name.endsWith("$")) name = name.substring(0, name.length() - 1);
        return simpleName(name);
    }

    // Expressions the gateway's rules look at; every other expression of
    // Spark's own expression packages is a reader's and is walked through
    // without being written out (a 1 MB SELECT has ~200k of them).
    private static final java.util.Set<String> NOTED_EXPRESSIONS = new java.util.HashSet<>(java.util.Arrays.asList(
        "UnresolvedFunction", "UnresolvedGenerator", "ExpressionWithUnresolvedIdentifier"));
    private static final String[] PLAIN_EXPRESSION_PACKAGES = {
        "org.apache.spark.sql.catalyst.expressions.", "org.apache.spark.sql.catalyst.analysis."};
    // Nodes whose own String fields the rules read (names, settings).
    private static final java.util.Set<String> STRING_OWNERS = new java.util.HashSet<>(java.util.Arrays.asList(
        "UnresolvedRelation", "UnresolvedFunction", "UnresolvedTableValuedFunction", "UnresolvedGenerator",
        "SetCommand", "ResetCommand"));

    private static String simpleName(String className) {
        int cut = Math.max(className.lastIndexOf('.'), className.lastIndexOf('$'));
        return className.substring(cut + 1);
    }

    private static boolean plainExpression(String className, String simple) {
        if (NOTED_EXPRESSIONS.contains(simple)) return false;
        for (String pkg : PLAIN_EXPRESSION_PACKAGES) {
            if (className.startsWith(pkg)) return true;
        }
        return false;
    }

    /**
     * Stack entries: {object, nearest written-out ancestor id, whether the
     * object's direct owner node is a STRING_OWNERS one}.
     */
    public static String describe(Object root, int maxNodes) {
        StringBuilder out = new StringBuilder();
        ArrayDeque<Object[]> stack = new ArrayDeque<>();
        stack.push(new Object[] {root, -1, Boolean.FALSE});
        int next = 0;
        int visited = 0;
        while (!stack.isEmpty()) {
            Object[] top = stack.pop();
            Object o = withIdentifierResolved(top[0]);
            int owner = (Integer) top[1];
            boolean noted = (Boolean) top[2];
            List<Object> fields = null;
            int fieldOwner = owner;
            boolean fieldsNoted = noted;
            if (o instanceof TreeNode) {
                if (++visited > maxNodes) {
                    throw new IllegalArgumentException("the statement's plan has more than " + maxNodes + " nodes");
                }
                String className = o.getClass().getName();
                String simple = simpleName(className);
                boolean isPlan = o instanceof LogicalPlan;
                boolean isExpression = !isPlan && o instanceof Expression;
                if (isExpression && plainExpression(className, simple)) {
                    fieldsNoted = false;
                } else {
                    int id = next++;
                    char kind = isPlan ? 'P' : (isExpression ? 'E' : 'O');
                    out.append("N\t").append(id).append('\t').append(owner).append('\t').append(kind)
                       .append('\t').append(className).append('\n');
                    fieldOwner = id;
                    fieldsNoted = STRING_OWNERS.contains(simple);
                    if (o instanceof org.apache.spark.sql.execution.command.CreateViewCommand) {
                        // Local temporary, global temporary or persisted: only the first is a reader's.
                        out.append("S\t").append(id).append("\tview-type:")
                           .append(objectName(((org.apache.spark.sql.execution.command.CreateViewCommand) o).viewType()))
                           .append('\n');
                    }
                }
                fields = new ArrayList<>();
                scala.collection.Iterator<Object> it = ((scala.Product) o).productIterator();
                while (it.hasNext()) fields.add(it.next());
            } else if (o instanceof String) {
                if (noted) {
                    out.append("S\t").append(owner).append('\t');
                    esc(out, (String) o);
                    out.append('\n');
                }
            } else if (o instanceof scala.Option) {
                scala.Option<?> opt = (scala.Option<?>) o;
                if (opt.isDefined()) {
                    fields = new ArrayList<>();
                    fields.add(opt.get());
                }
            } else if (o instanceof scala.collection.Seq && strings((scala.collection.Seq<?>) o) != null) {
                if (noted) {
                    out.append("Q\t").append(owner);
                    for (String part : strings((scala.collection.Seq<?>) o)) {
                        out.append('\t');
                        esc(out, part);
                    }
                    out.append('\n');
                }
            } else if (o instanceof scala.collection.Iterable) {
                fields = new ArrayList<>();
                scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) o).iterator();
                while (it.hasNext()) fields.add(it.next());
            } else if (o instanceof scala.Product) {
                fields = new ArrayList<>();
                scala.collection.Iterator<Object> it = ((scala.Product) o).productIterator();
                while (it.hasNext()) fields.add(it.next());
            } else if (o instanceof java.util.Map) {
                fields = new ArrayList<>();
                for (java.util.Map.Entry<?, ?> e : ((java.util.Map<?, ?>) o).entrySet()) {
                    fields.add(String.valueOf(e.getKey()));
                    fields.add(String.valueOf(e.getValue()));
                }
            }
            if (fields != null) {
                for (int i = fields.size() - 1; i >= 0; i--) {
                    if (fields.get(i) != null) stack.push(new Object[] {fields.get(i), fieldOwner, fieldsNoted});
                }
            }
        }
        return out.toString();
    }
}
