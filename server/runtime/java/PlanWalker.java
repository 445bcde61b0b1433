package io.tierlake.internal;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.trees.TreeNode;

/**
 * Flattens an unresolved logical plan into lines the gateway authorises
 * (server/gateway/planauth.py). One py4j call per statement, linear in the
 * plan's size, iterative (no stack overflow on deep plans).
 *
 * Every constructor field of every node is visited (productIterator), so
 * nothing a node carries is hidden: plans inside expressions (subqueries),
 * CTE definitions, INSERT targets, EXPLAIN'd plans. Lines:
 *   N id parent kind class   (kind: P plan, E expression, O other tree node)
 *   S owner text             (a String field of node `owner`)
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

    /** Every function name ``session`` resolves unqualified, one a line. */
    public static String functionNames(org.apache.spark.sql.SparkSession session) {
        StringBuilder out = new StringBuilder();
        scala.collection.Iterator<org.apache.spark.sql.catalyst.FunctionIdentifier> it =
            session.sessionState().functionRegistry().listFunction().iterator();
        while (it.hasNext()) out.append(it.next().funcName()).append('\n');
        return out.toString();
    }

    public static String describe(Object root, int maxNodes) {
        StringBuilder out = new StringBuilder();
        ArrayDeque<Object[]> stack = new ArrayDeque<>();
        stack.push(new Object[] {root, -1});
        int next = 0;
        while (!stack.isEmpty()) {
            Object[] top = stack.pop();
            Object o = top[0];
            int owner = (Integer) top[1];
            List<Object> fields = null;
            int fieldOwner = owner;
            if (o instanceof TreeNode) {
                int id = next++;
                if (id >= maxNodes) {
                    throw new IllegalArgumentException("the statement's plan has more than " + maxNodes + " nodes");
                }
                char kind = o instanceof LogicalPlan ? 'P' : (o instanceof Expression ? 'E' : 'O');
                out.append("N\t").append(id).append('\t').append(owner).append('\t').append(kind)
                   .append('\t').append(o.getClass().getName()).append('\n');
                fields = new ArrayList<>();
                scala.collection.Iterator<Object> it = ((scala.Product) o).productIterator();
                while (it.hasNext()) fields.add(it.next());
                fieldOwner = id;
            } else if (o instanceof String) {
                out.append("S\t").append(owner).append('\t');
                esc(out, (String) o);
                out.append('\n');
            } else if (o instanceof scala.Option) {
                scala.Option<?> opt = (scala.Option<?>) o;
                if (opt.isDefined()) {
                    fields = new ArrayList<>();
                    fields.add(opt.get());
                }
            } else if (o instanceof scala.collection.Seq && strings((scala.collection.Seq<?>) o) != null) {
                out.append("Q\t").append(owner);
                for (String part : strings((scala.collection.Seq<?>) o)) {
                    out.append('\t');
                    esc(out, part);
                }
                out.append('\n');
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
                    if (fields.get(i) != null) stack.push(new Object[] {fields.get(i), fieldOwner});
                }
            }
        }
        return out.toString();
    }
}
