package io.tierlake.internal;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.Schema;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.data.SparkParquetReaders;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation$;
import org.apache.spark.sql.catalyst.plans.LeftAnti$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation$;
import org.apache.spark.sql.expressions.Window;
import org.apache.spark.sql.expressions.WindowSpec;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Function1;
import scala.Option;
import scala.collection.JavaConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * A fresh view's pending changes merged in the driver while the query is
 * planned (server/changelog/fresh_view.py, docs/tiering.md "Fresh views").
 *
 * <p>{@code tierlake_inc.`db`.`t`.`winners_after_<id>_at_<pos>_keys_<f..>_seq_<f>_change_<f>`}
 * (a primary-key table: the winning change per key, field ids name the key,
 * sequence-by and change-type columns, so a rename does not matter) and
 * {@code …`pending_after_<id>_at_<pos>`} (a log table: every pending row) are
 * tables of this catalog (IncrementalCatalog.java) that only this class's
 * optimizer rule reads: it replaces each with a {@code LocalRelation} of its
 * rows. Why: a view that computes the winners with Spark pays, whatever the
 * number of pending changes, a scan job of the pending files' metadata, a
 * shuffle for the per-key window and a broadcast of the winners into the
 * lake's anti join, each a job or stage of its own; with the winners a local
 * relation Spark's own rules fold the query's filter into them at planning
 * (a key lookup whose key is not pending drops the anti join), and with
 * nothing pending the plan is the lake query's.
 *
 * <p>The rows are read with Iceberg's Parquet reader in this JVM, only when
 * the pending files hold at most {@code spark.tierlake.fresh.local-merge-rows}
 * rows (the setting {@code tierlake.fresh.local-merge-rows}), and only from
 * the appends after {@code <id>} (FreshEntries.java, the same files an
 * incremental read returns). Otherwise (more rows, a file not in Parquet, the
 * snapshots after {@code <id>} expired) the relation becomes empty and the
 * view's distributed form answers: it is in the same view text, over
 * {@code after_<id>} and {@code entries_after_<id>_at_<pos>}, and this rule
 * empties it instead when the local form answers. One decision per view and
 * query, so the two forms never both count a change.
 */
public final class FreshMerge extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  public static final String LOCAL_ROWS_CONF = "spark.tierlake.fresh.local-merge-rows";
  private static final long DEFAULT_LOCAL_ROWS = 100_000L;

  // The last answers, by stream snapshot: a dashboard re-querying a view between two commits reads
  // and merges the pending files once. Bounded: 32 answers of at most CACHED_ROWS rows each.
  private static final int CACHED_ROWS = 20_000;
  private static final Map<String, Outcome> CACHE = java.util.Collections.synchronizedMap(
      new LinkedHashMap<String, Outcome>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Outcome> eldest) {
          return size() > 32;
        }
      });

  // Files the local form read per stream table ("db.t"), the last time: tests check what was opened
  // right after a query of one view. Only the most recently merged tables are kept: a server whose
  // tables come and go (renamed, dropped) would otherwise hold a path list per table it ever merged.
  private static final int LAST_READ_TABLES = 16;
  private static final Map<String, List<String>> LAST_READ = java.util.Collections.synchronizedMap(
      new LinkedHashMap<String, List<String>>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, List<String>> eldest) {
          return size() > LAST_READ_TABLES;
        }
      });

  /** The files the local form of {@code db.t}'s fresh view read last, while among the last 16 used (tests). */
  public static String[] lastRead(String streamTable) {
    List<String> files = LAST_READ.get(streamTable);
    return files == null ? new String[0] : files.toArray(new String[0]);
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new LocalMerge(session);
      }
    });
    extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new SmallAntiJoin();
      }
    });
    extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new LocalAggregates();
      }
    });
    extensions.injectPostHocResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new NothingPending(session);
      }
    });
    return BoxedUnit.UNIT;
  }

  /**
   * A fresh view with nothing pending is its lake query from the start: once the view's text is
   * resolved, each pending-changes table whose answer is "merged locally, no rows" becomes an empty
   * relation and Spark's own PropagateEmptyRelation drops the anti join and the union around it.
   * Why here and not in the optimizer (LocalMerge would give the same plan): the optimizer's rules
   * then run over the lake query alone, not over the union first; a view read with nothing pending
   * (right after a round) cost 3.5 ms more to optimize than the lake query. The answer is decided
   * once per query either way (the table caches it), so the two forms never both count a change.
   */
  static final class NothingPending extends Rule<LogicalPlan> {
    private final SparkSession session;

    NothingPending(SparkSession session) { this.session = session; }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      boolean[] found = {false};
      plan.foreach(new AbstractFunction1<LogicalPlan, BoxedUnit>() {
        @Override
        public BoxedUnit apply(LogicalPlan node) {
          if (pending(node) != null) {
            found[0] = true;
          }
          return BoxedUnit.UNIT;
        }
      });
      if (!found[0]) return plan;
      long limit = localRows(session);
      // Analyzer rules may not call transform (Spark checks that in its own tests): this is a
      // resolved plan, rewritten once, as the optimizer would.
      return org.apache.spark.sql.catalyst.plans.logical.AnalysisHelper$.MODULE$.allowInvokingTransformsInAnalyzer(
          new scala.runtime.AbstractFunction0<LogicalPlan>() {
            @Override
            public LogicalPlan apply() {
              LogicalPlan emptied = plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
                @Override
                public boolean isDefinedAt(LogicalPlan node) {
                  LogicalPlan relation = node instanceof org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias
                      ? ((org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias) node).child() : node;
                  Pending pending = pending(relation);
                  if (pending == null) return false;
                  Outcome outcome = pending.outcome(limit);
                  return outcome.local && outcome.rows.isEmpty();
                }

                @Override
                public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, Function1<A1, B1> fallback) {
                  if (!isDefinedAt(node)) return fallback.apply(node);
                  @SuppressWarnings({"unchecked", "rawtypes"})
                  B1 result = (B1) new LocalRelation((scala.collection.Seq) node.output(),
                      JavaConverters.asScalaBuffer(new ArrayList<InternalRow>()).toSeq(), false);
                  return result;
                }
              });
              if (emptied == plan) return plan;
              // The view's aliases of the emptied tables (`w`): Spark's rule sees through none.
              LogicalPlan unaliased = emptied.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
                @Override
                public boolean isDefinedAt(LogicalPlan node) {
                  return node instanceof org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias
                      && ((org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias) node).child() instanceof LocalRelation
                      && ((LocalRelation) ((org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias) node).child())
                          .data().isEmpty();
                }

                @Override
                public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, Function1<A1, B1> fallback) {
                  if (!isDefinedAt(node)) return fallback.apply(node);
                  @SuppressWarnings("unchecked")
                  B1 result = (B1) ((org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias) node).child();
                  return result;
                }
              });
              return org.apache.spark.sql.catalyst.optimizer.PropagateEmptyRelation$.MODULE$.apply(unaliased);
            }
          });
    }
  }

  /**
   * An aggregate without GROUP BY over {@code <lake part> UNION ALL <local rows>} (a fresh view's
   * pending changes merged in the driver) aggregates the lake part alone and adds the local rows'
   * share, computed here: {@code count(*)} becomes {@code count(*) + n}. Why: Spark cannot generate
   * one stage's code across a union, so every lake row left the scan's generated code to reach the
   * aggregate: 19 ms of a 1 M-row {@code count(*)} with a thousand pending changes, a third of it.
   * Only what splits exactly: count, and sum (integral or floating), min and max, each without
   * DISTINCT or FILTER, outside ANSI mode; at most 10,000 local rows; anything else is left as is.
   */
  static final class LocalAggregates extends Rule<LogicalPlan> {
    private static final int MAX_ROWS = 10_000;

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (!plan.containsPattern(UNION) || org.apache.spark.sql.internal.SQLConf.get().ansiEnabled()) return plan;
      return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
        @Override
        public boolean isDefinedAt(LogicalPlan node) {
          return node instanceof org.apache.spark.sql.catalyst.plans.logical.Aggregate
              && ((org.apache.spark.sql.catalyst.plans.logical.Aggregate) node).groupingExpressions().isEmpty()
              && ((org.apache.spark.sql.catalyst.plans.logical.Aggregate) node).child()
                  instanceof org.apache.spark.sql.catalyst.plans.logical.Union;
        }

        @Override
        public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, Function1<A1, B1> fallback) {
          LogicalPlan rewritten = isDefinedAt(node)
              ? rewrite((org.apache.spark.sql.catalyst.plans.logical.Aggregate) node) : null;
          @SuppressWarnings("unchecked")
          B1 result = rewritten == null ? fallback.apply(node) : (B1) rewritten;
          return result;
        }
      });
    }

    private static LogicalPlan rewrite(org.apache.spark.sql.catalyst.plans.logical.Aggregate aggregate) {
      org.apache.spark.sql.catalyst.plans.logical.Union union =
          (org.apache.spark.sql.catalyst.plans.logical.Union) aggregate.child();
      List<LogicalPlan> children = JavaConverters.seqAsJavaList(union.children());
      List<LocalRelation> locals = new ArrayList<>();
      List<LogicalPlan> others = new ArrayList<>();
      long localRows = 0;
      for (LogicalPlan child : children) {
        LocalRelation local = asLocal(child);
        if (local != null && !local.isStreaming()) {
          locals.add(local);
          localRows += local.data().size();
        } else {
          others.add(child);
        }
      }
      // The union's attributes are its first child's: that child stays, under the new aggregate.
      // A streaming aggregate keeps its state per plan shape: left as it is.
      if (locals.isEmpty() || others.isEmpty() || others.get(0) != children.get(0) || localRows > MAX_ROWS
          || aggregate.isStreaming()) {
        return null;
      }
      List<Attribute> unionOutput = JavaConverters.seqAsJavaList(union.output());
      List<org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression> found = new ArrayList<>();
      for (NamedExpression e : JavaConverters.seqAsJavaList(aggregate.aggregateExpressions())) {
        ((Expression) e).foreach(new AbstractFunction1<Expression, BoxedUnit>() {
          @Override
          public BoxedUnit apply(Expression x) {
            if (x instanceof org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression) {
              found.add((org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression) x);
            }
            return BoxedUnit.UNIT;
          }
        });
      }
      if (found.isEmpty()) return null;
      Map<org.apache.spark.sql.catalyst.expressions.ExprId, Expression> merged = new HashMap<>();
      List<NamedExpression> partial = new ArrayList<>();
      for (org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression ae : found) {
        if (merged.containsKey(ae.resultId())) continue;
        if (ae.isDistinct() || ae.filter().isDefined()
            || !(ae.mode() instanceof org.apache.spark.sql.catalyst.expressions.aggregate.Complete$)) {
          return null;
        }
        Alias alias = new Alias(ae, "__tierlake_lake_part",
            org.apache.spark.sql.catalyst.expressions.NamedExpression$.MODULE$.newExprId(),
            JavaConverters.asScalaBuffer(new ArrayList<String>()).toSeq(), Option.empty(),
            JavaConverters.asScalaBuffer(new ArrayList<String>()).toSeq());
        Expression share = localShare(ae.aggregateFunction(), alias.toAttribute(), locals, unionOutput);
        if (share == null) return null;
        partial.add(alias);
        merged.put(ae.resultId(), share);
      }
      LogicalPlan lake = others.size() == 1 ? others.get(0)
          : new org.apache.spark.sql.catalyst.plans.logical.Union(JavaConverters.asScalaBuffer(others).toSeq(),
              union.byName(), union.allowMissingCol());
      LogicalPlan lower = new org.apache.spark.sql.catalyst.plans.logical.Aggregate(
          JavaConverters.asScalaBuffer(new ArrayList<Expression>()).toSeq(),
          JavaConverters.asScalaBuffer(partial).toSeq(), lake);
      List<NamedExpression> top = new ArrayList<>();
      for (NamedExpression e : JavaConverters.seqAsJavaList(aggregate.aggregateExpressions())) {
        top.add((NamedExpression) ((Expression) e).transformUp(new AbstractPartialFunction<Expression, Expression>() {
          @Override
          public boolean isDefinedAt(Expression x) {
            return x instanceof org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
          }

          @Override
          public <A1 extends Expression, B1> B1 applyOrElse(A1 x, Function1<A1, B1> fallback) {
            if (!isDefinedAt(x)) return fallback.apply(x);
            @SuppressWarnings("unchecked")
            B1 result = (B1) merged.get(
                ((org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression) x).resultId());
            return result;
          }
        }));
      }
      return new Project(JavaConverters.asScalaBuffer(top).toSeq(), lower);
    }

    /**
     * {@code lake}'s value (the lake part's aggregate) combined with the local rows' share of
     * {@code function}, or null where the function does not split so.
     */
    private static Expression localShare(org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction function,
                                         Attribute lake, List<LocalRelation> locals, List<Attribute> unionOutput) {
      List<Expression> inputs = new ArrayList<>();
      for (Expression child : JavaConverters.seqAsJavaList(function.children())) {
        Expression bound = bind(child, unionOutput);
        if (bound == null) return null;
        inputs.add(bound);
      }
      if (function instanceof org.apache.spark.sql.catalyst.expressions.aggregate.Count) {
        long count = 0;
        for (InternalRow row : rows(locals)) {
          boolean all = true;
          for (Expression input : inputs) all &= input.eval(row) != null;
          if (all) count++;
        }
        return count == 0 ? lake : new org.apache.spark.sql.catalyst.expressions.Add(lake,
            Literal.create(count, org.apache.spark.sql.types.DataTypes.LongType));
      }
      if (inputs.size() != 1) return null;
      Expression input = inputs.get(0);
      DataType type = function.dataType();
      if (function instanceof org.apache.spark.sql.catalyst.expressions.aggregate.Sum) {
        if (!"LEGACY".equals(((org.apache.spark.sql.catalyst.expressions.aggregate.Sum) function).evalMode().toString())) {
          return null;
        }
        Object sum = null;
        for (InternalRow row : rows(locals)) {
          Object v = input.eval(row);
          if (v == null) continue;
          if (type instanceof org.apache.spark.sql.types.LongType) {
            sum = (sum == null ? 0L : (Long) sum) + ((Number) v).longValue(); // wraps, as Spark's sum does
          } else if (type instanceof org.apache.spark.sql.types.DoubleType) {
            sum = (sum == null ? 0.0 : (Double) sum) + ((Number) v).doubleValue();
          } else {
            return null; // decimal and interval sums: left to Spark
          }
        }
        if (sum == null) return lake;
        Literal share = Literal.create(sum, type);
        return new org.apache.spark.sql.catalyst.expressions.Coalesce(JavaConverters.asScalaBuffer(
            Arrays.<Expression>asList(new org.apache.spark.sql.catalyst.expressions.Add(lake, share), share)).toSeq());
      }
      boolean min = function instanceof org.apache.spark.sql.catalyst.expressions.aggregate.Min;
      if (!min && !(function instanceof org.apache.spark.sql.catalyst.expressions.aggregate.Max)) return null;
      if (!(type instanceof org.apache.spark.sql.types.AtomicType)) return null;
      scala.math.Ordering<Object> ordering =
          org.apache.spark.sql.catalyst.util.TypeUtils$.MODULE$.getInterpretedOrdering(type);
      Object best = null;
      for (InternalRow row : rows(locals)) {
        Object v = input.eval(row);
        if (v != null && (best == null || (min ? ordering.lt(v, best) : ordering.gt(v, best)))) best = v;
      }
      if (best == null) return lake;
      scala.collection.Seq<Expression> both = JavaConverters.asScalaBuffer(
          Arrays.<Expression>asList(lake, new Literal(best, type))).toSeq(); // best: Spark's own value
      // least/greatest skip a NULL: a lake part without rows gives the local rows' value.
      return min ? new org.apache.spark.sql.catalyst.expressions.Least(both)
          : new org.apache.spark.sql.catalyst.expressions.Greatest(both);
    }

    private static List<InternalRow> rows(List<LocalRelation> locals) {
      List<InternalRow> all = new ArrayList<>();
      for (LocalRelation local : locals) all.addAll(JavaConverters.seqAsJavaList(local.data()));
      return all;
    }

    /** {@code e} over a union's rows, its attributes by position (a local relation's row layout). */
    private static Expression bind(Expression e, List<Attribute> output) {
      boolean[] unknown = {false};
      Expression bound = e.transformUp(new AbstractPartialFunction<Expression, Expression>() {
        @Override
        public boolean isDefinedAt(Expression x) { return x instanceof Attribute; }

        @Override
        public <A1 extends Expression, B1> B1 applyOrElse(A1 x, Function1<A1, B1> fallback) {
          if (!isDefinedAt(x)) return fallback.apply(x);
          int ordinal = -1;
          for (int i = 0; i < output.size(); i++) {
            if (output.get(i).exprId().equals(((Attribute) x).exprId())) ordinal = i;
          }
          if (ordinal < 0) unknown[0] = true;
          @SuppressWarnings("unchecked")
          B1 result = (B1) new org.apache.spark.sql.catalyst.expressions.BoundReference(Math.max(ordinal, 0),
              x.dataType(), true);
          return result;
        }
      });
      return unknown[0] || !bound.deterministic() ? null : bound;
    }
  }

  /** The pending-changes table {@code node} reads, or null (not such a relation). */
  static Pending pending(LogicalPlan node) {
    return node instanceof DataSourceV2Relation && ((DataSourceV2Relation) node).table() instanceof Pending
        ? (Pending) ((DataSourceV2Relation) node).table() : null;
  }

  /**
   * {@code plan} as a local relation where it is only projections and filters of one (the
   * optimizer pushes them into a union's or a join's local side; Spark folds them into the rows
   * only in a later batch), else null.
   */
  static LocalRelation asLocal(LogicalPlan plan) {
    for (int i = 0; i < 8 && !(plan instanceof LocalRelation); i++) {
      LogicalPlan folded = ConvertToLocalRelation$.MODULE$.apply(plan);
      if (folded == plan) return null;
      plan = folded;
    }
    return plan instanceof LocalRelation ? (LocalRelation) plan : null;
  }

  // The rules below run for every query the server plans: a plan without their shape is returned
  // at once, from the tree's pattern bits, instead of walked.
  private static final scala.Enumeration.Value UNION = org.apache.spark.sql.catalyst.trees.TreePattern$.MODULE$.UNION();
  private static final scala.Enumeration.Value ANTI_JOIN =
      org.apache.spark.sql.catalyst.trees.TreePattern$.MODULE$.LEFT_SEMI_OR_ANTI_JOIN();

  /** The table IncrementalCatalog returns for a {@code winners_…}/{@code pending_…} name. */
  public static Table table(Object sparkTable, Object catalog, String[] namespace, String name, long after,
                            long position, int[] keyIds, int sequenceById, int changeId) {
    return new Pending((SparkTable) sparkTable, (TableCatalog) catalog, namespace, name, after, position, keyIds,
        sequenceById, changeId);
  }

  /** What one fresh view's pending changes are, decided once. */
  static final class Outcome {
    final boolean local;
    final List<InternalRow> rows;

    Outcome(boolean local, List<InternalRow> rows) {
      this.local = local;
      this.rows = rows;
    }
  }

  static final class Pending implements SupportsRead {
    private final SparkTable stream;
    private final TableCatalog catalog; // tierlake_inc: the distributed form reads through it
    private final String[] namespace; // {db, t}
    private final String name;
    final String key; // "db.t@<after>": one decision per view and query
    final String streamName;
    private final long after;
    private final long position;
    private final int[] keyIds; // null: a log table
    private final int sequenceById; // -1: none
    private final int changeId; // -1: none
    private final Schema schema; // the stream's schema as loaded, read and returned
    private Outcome outcome;

    Pending(SparkTable stream, TableCatalog catalog, String[] namespace, String name, long after, long position,
            int[] keyIds, int sequenceById, int changeId) {
      this.stream = stream;
      this.catalog = catalog;
      this.namespace = namespace;
      this.name = name;
      this.streamName = namespace[0] + "." + namespace[1];
      this.key = streamName + "@" + after;
      this.after = after;
      this.position = position;
      this.keyIds = keyIds;
      this.sequenceById = sequenceById;
      this.changeId = changeId;
      this.schema = stream.table().schema();
    }

    @Override public String name() { return name; }
    @Override public StructType schema() { return stream.schema(); }
    @Override public Transform[] partitioning() { return new Transform[0]; }
    @Override public Map<String, String> properties() { return stream.properties(); }
    @Override public Set<TableCapability> capabilities() { return EnumSet.of(TableCapability.BATCH_READ); }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      // Reached only where the rule did not run: a session without the extension.
      throw new IllegalStateException(name + " is read by the optimizer rule of " + FreshMerge.class.getName()
          + " (spark.sql.extensions), which this session does not have");
    }

    synchronized Outcome outcome(long limit) {
      if (outcome == null) {
        org.apache.iceberg.Snapshot current = stream.table().currentSnapshot();
        // Everything the answer depends on: the same pending files and schema give the same rows.
        // (Whether the snapshots after <id> are still there too: an expiry keeps the current snapshot.)
        String cacheKey = key + ":" + position + ":" + (current == null ? -1 : current.snapshotId()) + ":"
            + FreshEntries.reaches(stream.table(), after) + ":"
            + schema.schemaId() + ":" + Arrays.toString(keyIds) + ":" + sequenceById + ":" + changeId + ":"
            + limit;
        outcome = CACHE.get(cacheKey);
        if (outcome == null) {
          outcome = compute(limit);
          if (!outcome.local || outcome.rows.size() <= CACHED_ROWS) CACHE.put(cacheKey, outcome);
        }
      }
      return outcome;
    }

    /**
     * The same answer merged by Spark, as tiering merges (tiering_pk_winners.sql.j2): the stream
     * read after {@code <id>} (IncrementalCatalog's {@code after_<id>}, which names its full scan
     * where those snapshots are expired), each row's commit from its file
     * ({@code entries_after_<id>_at_<pos>}, broadcast), then per key the last change by commit and
     * sequence-by, -U skipped; for a log table the rows of the pending files. Optimised here, and
     * given the relation's own output attributes, so the query's plan reads it in its place.
     */
    LogicalPlan distributed(SparkSession session, scala.collection.Seq<Attribute> output) {
      Identifier afterId = Identifier.of(namespace, "after_" + after);
      Identifier entriesId = Identifier.of(namespace, "entries_after_" + after + "_at_" + position);
      Dataset<Row> rows;
      Dataset<Row> entries;
      try {
        rows = Dataset.ofRows(session, DataSourceV2Relation$.MODULE$.create(
            catalog.loadTable(afterId), Option.apply(catalog), Option.apply(afterId)));
        entries = Dataset.ofRows(session, DataSourceV2Relation$.MODULE$.create(
            catalog.loadTable(entriesId), Option.apply(catalog), Option.apply(entriesId)));
      } catch (org.apache.spark.sql.catalyst.analysis.NoSuchTableException e) {
        throw new IllegalStateException(e);
      }
      entries = entries.where(functions.col("sequence_number").gt(position)).select(
          functions.col("data_file.file_path").as("__tierlake_file"),
          functions.col("sequence_number").as("__tierlake_commit"));
      List<Types.NestedField> columns = schema.columns();
      Column[] streamColumns = new Column[columns.size()];
      Column[] withFile = new Column[columns.size() + 1];
      for (int i = 0; i < streamColumns.length; i++) {
        streamColumns[i] = column(columns.get(i).name());
        withFile[i] = streamColumns[i];
      }
      withFile[streamColumns.length] = functions.col("_file").as("__tierlake_row_file");
      Column sameFile = functions.col("__tierlake_row_file").equalTo(functions.col("__tierlake_file"));
      Dataset<Row> result;
      if (keyIds == null) {
        result = rows.select(withFile).join(functions.broadcast(entries), sameFile, "left_semi")
            .select(streamColumns);
      } else {
        Dataset<Row> joined = rows.select(withFile).join(functions.broadcast(entries), sameFile);
        if (changeId >= 0) {
          Column change = column(schema.findField(changeId).name());
          joined = joined.where(change.isNull().or(change.notEqual("-U")));
        }
        Column[] keys = new Column[keyIds.length];
        for (int k = 0; k < keys.length; k++) keys[k] = column(schema.findField(keyIds[k]).name());
        Column[] order = sequenceById < 0
            ? new Column[] {functions.col("__tierlake_commit").desc()}
            : new Column[] {functions.col("__tierlake_commit").desc(),
                            column(schema.findField(sequenceById).name()).desc_nulls_last()};
        WindowSpec window = Window.partitionBy(keys).orderBy(order);
        result = joined.withColumn("__tierlake_rank", functions.row_number().over(window))
            .where(functions.col("__tierlake_rank").equalTo(1)).select(streamColumns);
      }
      LogicalPlan plan = result.queryExecution().optimizedPlan();
      List<NamedExpression> aliased = new ArrayList<>();
      List<Attribute> planned = JavaConverters.seqAsJavaList(plan.output());
      List<Attribute> wanted = JavaConverters.seqAsJavaList(output);
      for (int i = 0; i < wanted.size(); i++) {
        aliased.add(new Alias(planned.get(i), wanted.get(i).name(), wanted.get(i).exprId(),
            JavaConverters.asScalaBuffer(new ArrayList<String>()).toSeq(), Option.empty(),
            JavaConverters.asScalaBuffer(new ArrayList<String>()).toSeq()));
      }
      return new Project(JavaConverters.asScalaBuffer(aliased).toSeq(), plan);
    }

    private static Column column(String name) {
      return functions.col("`" + name.replace("`", "``") + "`");
    }

    private Outcome compute(long limit) {
      org.apache.iceberg.Table table = stream.table();
      FreshEntries.Files files = FreshEntries.pending(table, after, position);
      if (!files.incremental) return new Outcome(false, null); // the distributed form names its full scan
      long rows = 0;
      for (DataFile file : files.files) {
        rows += file.recordCount();
        if (file.format() != FileFormat.PARQUET) return new Outcome(false, null);
      }
      if (rows > limit) return new Outcome(false, null);
      List<Types.NestedField> columns = schema.columns();
      DataType[] types = new DataType[columns.size()];
      StructType sparkSchema = stream.schema();
      for (int i = 0; i < types.length; i++) types[i] = sparkSchema.fields()[i].dataType();
      int[] keys = keyIds == null ? null : new int[keyIds.length];
      for (int i = 0; keys != null && i < keys.length; i++) {
        keys[i] = ordinal(columns, keyIds[i]);
        if (keys[i] < 0) return new Outcome(false, null); // a key column dropped since the pin
      }
      int sequenceBy = sequenceById < 0 ? -1 : ordinal(columns, sequenceById);
      scala.math.Ordering<Object> order = sequenceBy < 0 ? null : SparkKeys.ordering(types[sequenceBy]);
      int change = changeId < 0 ? -1 : ordinal(columns, changeId);
      List<InternalRow> all = new ArrayList<>();
      Map<List<Object>, Object[]> winners = new LinkedHashMap<>(); // key -> {row, commit, sequence-by}
      List<String> read = new ArrayList<>();
      for (int f = 0; f < files.files.size(); f++) {
        DataFile file = files.files.get(f);
        long commit = files.sequences.get(f);
        read.add(file.location());
        try (CloseableIterable<InternalRow> reader = Parquet.read(table.io().newInputFile(file.location()))
            .project(schema)
            .createReaderFunc(fileSchema -> SparkParquetReaders.buildReader(schema, fileSchema))
            .build()) {
          for (InternalRow found : reader) {
            // The reader may share buffers between rows: keep a copy.
            InternalRow row = found.copy();
            if (keys == null) {
              all.add(row);
              continue;
            }
            if (change >= 0 && !row.isNullAt(change)
                && "-U".equals(((UTF8String) row.get(change, types[change])).toString())) {
              continue; // a before-image: not a change of its own
            }
            // The key as Spark's window over it compares (SparkKeys: BINARY by content, -0.0 = 0.0,
            // NaN = NaN, DECIMAL by value): the distributed form's PARTITION BY.
            List<Object> id = SparkKeys.key(row, keys, types);
            Object sequence = sequenceBy < 0 || row.isNullAt(sequenceBy) ? null : row.get(sequenceBy, types[sequenceBy]);
            Object[] best = winners.get(id);
            if (best == null || wins(commit, sequence, (Long) best[1], best[2], order)) {
              winners.put(id, new Object[] {row, commit, sequence});
            }
          }
        } catch (java.io.IOException e) {
          throw new java.io.UncheckedIOException(e);
        }
      }
      LAST_READ.put(streamName, read);
      if (keys != null) {
        for (Object[] best : winners.values()) all.add((InternalRow) best[0]);
      }
      return new Outcome(true, all);
    }
  }

  private static int ordinal(List<Types.NestedField> columns, int fieldId) {
    for (int i = 0; i < columns.size(); i++) if (columns.get(i).fieldId() == fieldId) return i;
    return -1;
  }

  /**
   * Whether a change (commit sequence number, sequence-by value) beats the one kept: the tiering
   * rule (tiering_pk_winners.sql.j2), a later commit, then the larger sequence-by value, NULL last;
   * a tie, which tiering refuses as ambiguous, goes to the change read later. Values are compared
   * by Spark's own ordering of their type ({@code order}): BINARY bytes unsigned, -0.0 = 0.0 and
   * NaN the largest, as the round's ORDER BY compares them (Java's compareTo put -0.0 below 0.0 and
   * could not compare BINARY at all).
   */
  static boolean wins(long commit, Object sequence, long keptCommit, Object keptSequence,
                      scala.math.Ordering<Object> order) {
    if (commit != keptCommit) return commit > keptCommit;
    if (sequence == null) return keptSequence == null;
    if (keptSequence == null) return true;
    return order.compare(sequence, keptSequence) >= 0;
  }

  /**
   * {@code x LEFT ANTI JOIN <local rows> ON x.k = r.k} becomes {@code x WHERE x.k IS NULL OR x.k NOT IN
   * (<the rows' keys>)}: how a fresh view takes the keys its pending changes touch out of the lake's
   * rows (a pre-CBO rule: the local relation has been filtered and projected by then). Spark would
   * broadcast the rows into a join, a Spark job of its own before the query's; the set is tested in
   * the scan's own stage. The same rows either way: a NULL key matches nothing on either side. One
   * key column of a type whose values compare by equals (integers, strings, dates, timestamps,
   * decimals), at most 10,000 rows; anything else is left to Spark.
   */
  static final class SmallAntiJoin extends Rule<LogicalPlan> {
    private static final int MAX_ROWS = 10_000;

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (!plan.containsPattern(ANTI_JOIN)) return plan;
      return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
        @Override
        public boolean isDefinedAt(LogicalPlan node) {
          return node instanceof Join && ((Join) node).joinType() == LeftAnti$.MODULE$
              && ((Join) node).condition().isDefined() && ((Join) node).condition().get() instanceof EqualTo;
        }

        @Override
        public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, Function1<A1, B1> fallback) {
          LogicalPlan rewritten = isDefinedAt(node) ? rewrite((Join) node) : null;
          @SuppressWarnings("unchecked")
          B1 result = rewritten == null ? fallback.apply(node) : (B1) rewritten;
          return result;
        }
      });
    }

    private static LogicalPlan rewrite(Join join) {
      LocalRelation local = asLocal(join.right());
      if (local == null) return null; // not only projections and filters of a local relation
      int size = local.data().size();
      if (size == 0 || size > MAX_ROWS || local.isStreaming()) return null; // empty: Spark drops the join
      EqualTo equal = (EqualTo) join.condition().get();
      Expression probe = equal.left();
      Expression key = equal.right();
      if (!(key instanceof Attribute && local.outputSet().contains((Attribute) key))) {
        probe = equal.right();
        key = equal.left();
      }
      if (!(key instanceof Attribute && local.outputSet().contains((Attribute) key))
          || !probe.references().subsetOf(join.left().outputSet()) || probe.references().isEmpty()
          || !comparesByEquals(key.dataType()) || !key.dataType().sameType(probe.dataType())) {
        return null;
      }
      int ordinal = -1;
      List<Attribute> output = JavaConverters.seqAsJavaList(local.output());
      for (int i = 0; i < output.size(); i++) {
        if (output.get(i).exprId().equals(((Attribute) key).exprId())) ordinal = i;
      }
      if (ordinal < 0) return null;
      java.util.Set<Object> keys = new java.util.HashSet<>();
      for (InternalRow row : JavaConverters.seqAsJavaList(local.data())) {
        if (!row.isNullAt(ordinal)) keys.add(row.get(ordinal, key.dataType()));
      }
      Expression absent = primitive(key.dataType())
          ? absentFrom(new KeySet(numbers(keys)), probe)
          : new Not(new InSet(probe, JavaConverters.asScalaSet(keys).toSet()));
      return new Filter(new Or(new IsNull(probe), absent), join.left());
    }

    /** Key types whose values Spark holds as exact integers (a date in days, a timestamp in microseconds). */
    private static boolean primitive(DataType type) {
      return type instanceof org.apache.spark.sql.types.IntegralType
          || type instanceof org.apache.spark.sql.types.DateType
          || type instanceof org.apache.spark.sql.types.TimestampType
          || type instanceof org.apache.spark.sql.types.TimestampNTZType;
    }

    private static List<Number> numbers(java.util.Set<Object> keys) {
      List<Number> out = new ArrayList<>(keys.size());
      for (Object k : keys) out.add((Number) k);
      return out;
    }

    /**
     * {@code keys.absent(probe)}, generated as a call on the literal holding the set (a field of the
     * generated class); Invoke finds the overload by the probe's Java type (byte, short, int, long).
     */
    private static Expression absentFrom(KeySet keys, Expression probe) {
      Expression set = new Literal(keys, new org.apache.spark.sql.types.ObjectType(KeySet.class));
      return new org.apache.spark.sql.catalyst.expressions.objects.Invoke(set, "absent",
          org.apache.spark.sql.types.DataTypes.BooleanType,
          JavaConverters.asScalaBuffer(java.util.Collections.singletonList(probe)).toSeq(),
          JavaConverters.asScalaBuffer(java.util.Collections.<org.apache.spark.sql.types.AbstractDataType>emptyList())
              .toSeq(),
          true, false, true);
    }

    private static boolean comparesByEquals(DataType type) {
      return type instanceof org.apache.spark.sql.types.IntegralType
          || type instanceof org.apache.spark.sql.types.StringType
          || type instanceof org.apache.spark.sql.types.DateType
          || type instanceof org.apache.spark.sql.types.TimestampType
          || type instanceof org.apache.spark.sql.types.TimestampNTZType
          || type instanceof org.apache.spark.sql.types.DecimalType;
    }
  }

  /** At most how many pending rows are merged in the driver (the setting tierlake.fresh.local-merge-rows). */
  static long localRows(SparkSession session) {
    try {
      return Long.parseLong(session.conf().get(LOCAL_ROWS_CONF, Long.toString(DEFAULT_LOCAL_ROWS)).trim());
    } catch (NumberFormatException e) {
      return DEFAULT_LOCAL_ROWS;
    }
  }

  /** The optimizer rule: each pending-changes table becomes a local relation, or empty. */
  static final class LocalMerge extends Rule<LogicalPlan> {
    private final SparkSession session;

    LocalMerge(SparkSession session) { this.session = session; }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      Map<String, Pending> views = new HashMap<>();
      plan.foreach(new AbstractFunction1<LogicalPlan, BoxedUnit>() {
        @Override
        public BoxedUnit apply(LogicalPlan node) {
          Pending pending = pending(node);
          if (pending != null) views.putIfAbsent(pending.key, pending);
          return BoxedUnit.UNIT;
        }
      });
      if (views.isEmpty()) return plan;
      long limit = localRows(session);
      Map<String, Outcome> outcomes = new HashMap<>();
      for (Map.Entry<String, Pending> view : views.entrySet()) {
        outcomes.put(view.getKey(), view.getValue().outcome(limit));
      }
      return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
        @Override
        public boolean isDefinedAt(LogicalPlan node) {
          return pending(node) != null;
        }

        @Override
        public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, Function1<A1, B1> fallback) {
          if (!isDefinedAt(node)) return fallback.apply(node);
          DataSourceV2Relation relation = (DataSourceV2Relation) node;
          // The view's first pending table of its stream decided for all (a self-join reads one answer).
          Pending decided = views.get(((Pending) relation.table()).key);
          Outcome outcome = outcomes.get(decided.key);
          @SuppressWarnings({"unchecked", "rawtypes"})
          B1 result = (B1) (outcome.local ? local(relation, outcome.rows)
              : decided.distributed(session, (scala.collection.Seq) relation.output()));
          return result;
        }
      });
    }


    @SuppressWarnings({"unchecked", "rawtypes"})
    private static LogicalPlan local(DataSourceV2Relation relation, List<InternalRow> rows) {
      return new LocalRelation((scala.collection.Seq) relation.output(),
          JavaConverters.asScalaBuffer(rows).toSeq(), false);
    }
  }
}
