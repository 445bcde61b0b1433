package io.tierlake.internal;

import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationClosed;
import org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationError;
import org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationFinish;
import org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationStart;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Fails the Spark jobs of a Thrift Server statement that outlived its deadline,
 * with an error that says so.
 *
 * <p>Spark's own {@code spark.sql.thriftServer.queryTimeout} cancels the
 * operation into the TIMEDOUT state and records no error: PyHive then reports
 * "Expected state FINISHED, but found TIMEDOUT" and Hive JDBC "Query timed out
 * after 0 seconds" (its own, unset, per-statement timeout). Cancelling the
 * statement's running jobs with a reason instead makes the statement fail
 * through Spark's ordinary error path, and every client shows "Job N cancelled
 * because the statement ran longer than ...". Spark's setting stays as the
 * backstop for a statement past its deadline outside any job (planning).
 *
 * <p>The Thrift Server posts each statement's start (its job group and start
 * time) on the listener bus before the statement's first job, in order on the
 * same queue as the jobs' starts.
 *
 * <p>Work outside any job — the optimizer folding a constant expression such as
 * {@code levenshtein(repeat('a', 200000), repeat('b', 200000))} in the
 * statement's own thread on the driver — ignores job cancellation and thread
 * interrupts alike (Catalyst never looks at either). From its deadline on, the
 * statement's thread is looked at once a second, and stopped
 * ({@link Thread#stop}, a {@code ThreadDeath} the Thrift Server reports as the
 * statement's error) when it is provably in pure computation while Spark plans
 * it: runnable, the thread still the statement's (AuthzCheck's parser notes it
 * when the statement's text is parsed, so a pool thread that moved on to
 * another statement is never taken for it), inside a Catalyst rule (the
 * optimizer's or the analyser's) or an evaluation the analyser makes itself
 * (an inline table's rows, a LIMIT's value), and every frame out to it in code that holds no shared state
 * (Catalyst's expressions and trees, Spark's string type, the JDK's lang,
 * util, math and digests): no I/O, no class loading or code generation, no
 * catalog, metastore or Iceberg call, no lock wait. Anywhere else the thread
 * is left alone and looked at again a second later.
 */
public final class StatementDeadline extends SparkListener {
    static final String JOB_GROUP = "spark.jobGroup.id";
    private static final Logger LOG = LoggerFactory.getLogger(StatementDeadline.class);
    // A thread past its deadline outside the optimizer is looked at again this often.
    private static final long REAP_EVERY_MS = 1000;
    // Frames above the optimizer's rule executor in which a thread may be stopped: pure computation.
    private static final String[] STOPPABLE = {
        "org.apache.spark.sql.catalyst.", "org.apache.spark.unsafe.", "org.apache.spark.sql.types.",
        "scala.", "java.lang.", "java.util.", "java.math.", "java.text.", "java.security.",
        "sun.security.provider.", "jdk.internal.util.", "jdk.internal.misc.", "jdk.internal.reflect.",
        "org.apache.commons.codec.", "org.apache.commons.lang3.", "com.fasterxml.jackson.",
    };
    // ...except these: class loading, code generation, locks and concurrency, reflection into anything.
    private static final String[] NEVER = {
        "java.lang.ClassLoader", "java.lang.Class.", "java.lang.invoke.", "java.lang.reflect.", "java.lang.Thread.",
        "java.lang.Runtime", "java.lang.System.", "java.lang.ProcessBuilder", "java.util.concurrent.",
        "java.util.ServiceLoader", "java.util.logging.", "java.util.zip.", "java.util.jar.",
        "org.apache.spark.sql.catalyst.expressions.codegen.", "org.apache.spark.sql.catalyst.catalog.",
        "org.apache.spark.sql.catalyst.analysis.", "org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection",
    };
    private static final String RULE_EXECUTOR = "org.apache.spark.sql.catalyst.rules.RuleExecutor";
    // Where the analyser evaluates expressions itself: an inline table's rows (VALUES), a LIMIT,
    // OFFSET or TABLESAMPLE's value.
    private static final String[] EVALUATORS = {
        "org.apache.spark.sql.catalyst.analysis.ResolveInlineTables", "org.apache.spark.sql.catalyst.analysis.CheckAnalysis",
    };
    private static final String STATEMENT = "org.apache.spark.sql.hive.thriftserver.SparkExecuteStatementOperation";

    // Each statement's thread (by job group), and each thread's latest statement, as AuthzCheck saw them.
    private static final Map<String, Thread> THREADS = new ConcurrentHashMap<>();
    private static final Map<Thread, String> LATEST = Collections.synchronizedMap(new WeakHashMap<>());
    // Users whose sessions the gateway last bound to the reader role (AuthzCheck tells us; this class
    // knows nothing of roles, so the bounds sit below authorisation).
    private static final Set<String> READERS = ConcurrentHashMap.newKeySet();
    private static final Set<String> STOPPED = ConcurrentHashMap.newKeySet();
    // Thread's interrupt status (one field since Java 14): HotSpot interrupts a thread it stops, and
    // a Thrift handler thread (a synchronous statement's) goes on to its connection's next statement
    // with the flag still set, which fails that statement's catalog reads and its wait for its job.
    // Null when java.lang is not open to this code (Spark's launcher opens it): no thread is stopped.
    private static final java.lang.reflect.Field INTERRUPT_STATUS = interruptStatus();

    private static java.lang.reflect.Field interruptStatus() {
        try {
            java.lang.reflect.Field field = Thread.class.getDeclaredField("interrupted");
            field.setAccessible(true);
            return field;
        } catch (ReflectiveOperationException | RuntimeException e) {
            LoggerFactory.getLogger(StatementDeadline.class).warn("statements planning past their deadline will"
                + " not be stopped: Thread's interrupt status is not accessible ({})", e.toString());
            return null;
        }
    }
    // A statement that never posts its close (a lost event) is forgotten this long after its deadline.
    private static final long FORGET_AFTER_MS = TimeUnit.HOURS.toMillis(1);

    private final SparkContext sc;
    private final long timeoutMs;
    private final String reason;
    // Readers' statements (their user last bound to the reader role: noteUser) get the shorter of the two.
    private volatile long readerTimeoutMs;
    private volatile String readerReason;
    private final Map<String, String> reasons = new ConcurrentHashMap<>();
    private final Map<String, Long> deadlines = new ConcurrentHashMap<>();
    private final Map<Integer, ScheduledFuture<?>> timers = new ConcurrentHashMap<>();
    // Statements whose execution ended (finished or failed): their thread is no longer theirs.
    private final Set<String> ended = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService clock = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "tierlake-statement-deadline");
        t.setDaemon(true);
        return t;
    });

    private StatementDeadline(SparkContext sc, long timeoutMs, String reason) {
        this.sc = sc;
        this.timeoutMs = timeoutMs;
        this.reason = reason;
    }

    /** Whether {@code user}'s statements are a reader's, as the gateway last bound the user's sessions. */
    public static void noteUser(String user, boolean reader) {
        if (reader) {
            READERS.add(user);
        } else {
            READERS.remove(user);
        }
    }

    /** Listen on {@code sc}'s bus: statements' jobs fail {@code timeoutMs} after the statement started. */
    public static StatementDeadline install(SparkContext sc, long timeoutMs, String reason) {
        StatementDeadline deadline = new StatementDeadline(sc, timeoutMs, reason);
        sc.addSparkListener(deadline);
        latest = deadline;
        return deadline;
    }

    private static volatile StatementDeadline latest;

    /** The deadline installed last (null: none), to change its readers' bound (tests). */
    public static StatementDeadline installed() {
        return latest;
    }

    /** Readers' statements fail after {@code timeoutMs} (0: as everyone's) with {@code reason}. */
    public void readers(long timeoutMs, String reason) {
        this.readerTimeoutMs = timeoutMs;
        this.readerReason = reason;
    }

    public long readerTimeoutMs() {
        return readerTimeoutMs;
    }

    public String readerReason() {
        return readerReason;
    }

    /** Statements being watched (tests). */
    public int watched() {
        return deadlines.size();
    }

    /**
     * The calling thread runs the statement of job group {@code group} (null: not a Thrift Server
     * statement). Called by AuthzCheck's check rule, on the statement's thread, once its plan is
     * analysed.
     */
    public static void noteThread(String group) {
        if (group == null) return;
        Thread thread = Thread.currentThread();
        if (THREADS.size() > 10_000) THREADS.values().removeIf(t -> !t.isAlive());
        THREADS.put(group, thread);
        LATEST.put(thread, group);
    }

    /** Statements whose planning thread a deadline stopped (job groups; tests). */
    public static boolean stopped(String group) {
        return STOPPED.contains(group);
    }

    /**
     * Whether a thread with this stack (innermost frame first) may be stopped: a statement's, in pure
     * computation inside a Catalyst rule (the optimizer's or the analyser's) or an evaluation the
     * analyser makes itself (an inline table's rows, a LIMIT's value), every frame out to it pure.
     */
    public static boolean stoppable(StackTraceElement[] frames) {
        boolean statement = false;
        for (StackTraceElement frame : frames) {
            statement |= frame.getClassName().startsWith(STATEMENT);
        }
        if (!statement) return false;
        for (int i = 0; i < frames.length; i++) {
            String cls = frames[i].getClassName();
            if (cls.equals(RULE_EXECUTOR)) return i > 0;
            for (String evaluator : EVALUATORS) {
                if (cls.startsWith(evaluator)) return i > 0;
            }
            if (!pure(frames[i])) return false;
        }
        return false;
    }

    /**
     * Whether a thread running this frame holds no shared state: Catalyst's expressions and trees,
     * Spark's string type, the JDK's lang, util, math and digests; never class loading, code generation,
     * locks, reflection, a catalog or a native method (TaskReaper uses it too).
     */
    static boolean pure(StackTraceElement frame) {
        String cls = frame.getClassName();
        if ("<clinit>".equals(frame.getMethodName()) || frame.isNativeMethod()) return false;
        boolean pure = false;
        for (String prefix : STOPPABLE) pure |= cls.startsWith(prefix);
        for (String prefix : NEVER) pure &= !cls.startsWith(prefix);
        return pure;
    }

    /** From the deadline of {@code group} on: stop its thread where it plans past it (see the class comment). */
    private void reap(String group, long deadline) {
        if (!deadlines.containsKey(group) || ended.contains(group)
                || System.currentTimeMillis() > deadline + FORGET_AFTER_MS) {
            return;
        }
        Thread thread = THREADS.get(group);
        if (INTERRUPT_STATUS != null && thread != null && thread.isAlive() && group.equals(LATEST.get(thread))
                && thread.getState() == Thread.State.RUNNABLE && stoppable(thread.getStackTrace())
                && group.equals(LATEST.get(thread))) {
            STOPPED.add(group);
            if (STOPPED.size() > 10_000) STOPPED.clear();
            LOG.warn("stopping the thread {} of statement {}: it is planning (in the optimizer, outside any"
                + " Spark job) {}", thread.getName(), group, reasons.getOrDefault(group, reason));
            try {
                thread.stop();  // deprecated, still Java 17's; nothing else stops a computation that never yields
            } catch (UnsupportedOperationException e) {  // Java 20 on
                LOG.warn("cannot stop the thread {} of statement {} on this JVM: {}", thread.getName(), group,
                    e.toString());
                return;
            }
            try {
                // The ThreadDeath is pending and needs no interrupt: the thread is computing, not waiting.
                INTERRUPT_STATUS.setBoolean(thread, false);
            } catch (IllegalAccessException e) {
                LOG.warn("the stopped thread {} keeps its interrupt status: {}", thread.getName(), e.toString());
            }
            return;
        }
        clock.schedule(() -> reap(group, deadline), REAP_EVERY_MS, TimeUnit.MILLISECONDS);
    }

    @Override
    public void onOtherEvent(SparkListenerEvent event) {
        if (event instanceof SparkListenerThriftServerOperationStart) {
            SparkListenerThriftServerOperationStart start = (SparkListenerThriftServerOperationStart) event;
            long now = System.currentTimeMillis();
            deadlines.entrySet().removeIf(d -> {
                boolean old = d.getValue() + FORGET_AFTER_MS < now;
                if (old) {
                    reasons.remove(d.getKey());
                    ended.remove(d.getKey());
                    THREADS.remove(d.getKey());
                }
                return old;
            });
            long limit = timeoutMs;
            String why = reason;
            long readers = readerTimeoutMs;
            if (readers > 0 && (limit <= 0 || readers < limit)
                    && start.userName() != null && READERS.contains(start.userName())) {
                limit = readers;
                why = readerReason;
            }
            if (limit > 0) {
                String group = start.groupId();
                long deadline = start.startTime() + limit;
                deadlines.put(group, deadline);
                reasons.put(group, why);
                clock.schedule(() -> reap(group, deadline), Math.max(0, deadline - now), TimeUnit.MILLISECONDS);
            }
        } else if (event instanceof SparkListenerThriftServerOperationFinish) {
            ended.add(((SparkListenerThriftServerOperationFinish) event).id());
        } else if (event instanceof SparkListenerThriftServerOperationError) {
            ended.add(((SparkListenerThriftServerOperationError) event).id());
        } else if (event instanceof SparkListenerThriftServerOperationClosed) {
            String id = ((SparkListenerThriftServerOperationClosed) event).id();
            deadlines.remove(id);
            reasons.remove(id);
            ended.remove(id);
            THREADS.remove(id);
        }
    }

    @Override
    public void onJobStart(SparkListenerJobStart jobStart) {
        String group = jobStart.properties() == null ? null : jobStart.properties().getProperty(JOB_GROUP);
        Long deadline = group == null ? null : deadlines.get(group);
        if (deadline == null) {
            return;
        }
        int jobId = jobStart.jobId();
        long delay = Math.max(0, deadline - System.currentTimeMillis());
        String why = reasons.getOrDefault(group, reason);
        timers.put(jobId, clock.schedule(() -> {
            timers.remove(jobId);
            sc.cancelJob(jobId, why);
        }, delay, TimeUnit.MILLISECONDS));
    }

    @Override
    public void onJobEnd(SparkListenerJobEnd jobEnd) {
        ScheduledFuture<?> timer = timers.remove(jobEnd.jobId());
        if (timer != null) {
            timer.cancel(false);
        }
    }
}
