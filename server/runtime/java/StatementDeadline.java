package io.tierlake.internal;

import java.util.Map;
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
import org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationStart;

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
 */
public final class StatementDeadline extends SparkListener {
    private static final String JOB_GROUP = "spark.jobGroup.id";
    // A statement that never posts its close (a lost event) is forgotten this long after its deadline.
    private static final long FORGET_AFTER_MS = TimeUnit.HOURS.toMillis(1);

    private final SparkContext sc;
    private final long timeoutMs;
    private final String reason;
    // Readers' statements (AuthzCheck's role of the statement's user) get the shorter of the two.
    private volatile long readerTimeoutMs;
    private volatile String readerReason;
    private final Map<String, String> reasons = new ConcurrentHashMap<>();
    private final Map<String, Long> deadlines = new ConcurrentHashMap<>();
    private final Map<Integer, ScheduledFuture<?>> timers = new ConcurrentHashMap<>();
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

    /** Listen on {@code sc}'s bus: statements' jobs fail {@code timeoutMs} after the statement started. */
    public static StatementDeadline install(SparkContext sc, long timeoutMs, String reason) {
        StatementDeadline deadline = new StatementDeadline(sc, timeoutMs, reason);
        sc.addSparkListener(deadline);
        return deadline;
    }

    /** Readers' statements fail after {@code timeoutMs} (0: as everyone's) with {@code reason}. */
    public void readers(long timeoutMs, String reason) {
        this.readerTimeoutMs = timeoutMs;
        this.readerReason = reason;
    }

    /** Statements being watched (tests). */
    public int watched() {
        return deadlines.size();
    }

    @Override
    public void onOtherEvent(SparkListenerEvent event) {
        if (event instanceof SparkListenerThriftServerOperationStart) {
            SparkListenerThriftServerOperationStart start = (SparkListenerThriftServerOperationStart) event;
            long now = System.currentTimeMillis();
            deadlines.entrySet().removeIf(d -> {
                boolean old = d.getValue() + FORGET_AFTER_MS < now;
                if (old) reasons.remove(d.getKey());
                return old;
            });
            long limit = timeoutMs;
            String why = reason;
            long readers = readerTimeoutMs;
            if (readers > 0 && (limit <= 0 || readers < limit)
                    && AuthzCheck.READER.equals(AuthzCheck.roleOfUser(start.userName()))) {
                limit = readers;
                why = readerReason;
            }
            if (limit > 0) {
                deadlines.put(start.groupId(), start.startTime() + limit);
                reasons.put(start.groupId(), why);
            }
        } else if (event instanceof SparkListenerThriftServerOperationClosed) {
            String id = ((SparkListenerThriftServerOperationClosed) event).id();
            deadlines.remove(id);
            reasons.remove(id);
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
