package io.tierlake.internal;

import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.spark.executor.Executor;
import org.apache.spark.scheduler.Task;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Frees the cores of killed tasks that never look at their kill.
 *
 * <p>Spark kills a task (its job cancelled: a statement's deadline, a client's cancel) by setting
 * its kill reason and interrupting its thread; the task notices between rows. A single row that
 * takes minutes — {@code levenshtein} of two long strings built from a column, a regular expression
 * backtracking over one value — never yields, so the task keeps its core until the row is done:
 * the reader's statement failed at its timeout, its cores stayed busy. Spark's own task reaper
 * ({@code spark.task.reaper.*}) can only end the whole executor JVM, which with a local master is
 * the server.
 *
 * <p>Once a second this looks at the local executor's running tasks. A task killed
 * {@link #GRACE_MS} ago or longer whose thread is runnable and provably in pure computation is
 * stopped ({@link Thread#stop}, as StatementDeadline stops a statement's optimizer): every frame
 * from the innermost out to the first that is not pure ({@link StatementDeadline#pure}) is
 * Catalyst expression evaluation, generated code or the JDK's lang/util/math, at least one of them
 * an expression's, and that first other frame is Spark SQL's operator code driving the row. A task
 * in I/O, a shuffle or sort buffer, a lock, a Python worker or anything else is left alone and
 * looked at again a second later. The stop fails the task (its job is already cancelled) and
 * unwinds its finally blocks, which free its managed memory; TaskErrorGuard keeps the
 * {@code ThreadDeath} from reaching Spark's handler, which would exit the JVM.
 */
public final class TaskReaper {
    private static final Logger LOG = LoggerFactory.getLogger(TaskReaper.class);
    static final long GRACE_MS = 2000;
    private static final long EVERY_MS = 1000;
    private static final String EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions.";
    private static final String OPERATORS = "org.apache.spark.sql.execution.";
    // Threads this reaper stopped (their ThreadDeath is TaskErrorGuard's to absorb), by thread id.
    private static final Set<Long> STOPPED = ConcurrentHashMap.newKeySet();
    private static volatile TaskReaper running;

    private final Executor executor;
    private final Map<Long, Long> killedSince = new ConcurrentHashMap<>();
    private final ScheduledExecutorService clock = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "tierlake-task-reaper");
        t.setDaemon(true);
        return t;
    });
    private long reaped;

    private TaskReaper(Executor executor) {
        this.executor = executor;
    }

    /** Watch {@code executor}'s tasks (a local master's, in this JVM); once per executor. */
    static synchronized void start(Executor executor) {
        if (running != null && running.executor == executor) {
            return;
        }
        if (running != null) {
            running.clock.shutdownNow();
        }
        TaskReaper reaper = new TaskReaper(executor);
        reaper.clock.scheduleWithFixedDelay(reaper::look, EVERY_MS, EVERY_MS, TimeUnit.MILLISECONDS);
        running = reaper;
    }

    /** Whether {@code thread} is one this reaper stopped (TaskErrorGuard). */
    static boolean stoppedHere(Thread thread) {
        return STOPPED.contains(thread.getId());
    }

    /** Tasks stopped since start (tests). */
    public static long reaped() {
        TaskReaper r = running;
        return r == null ? 0 : r.reaped;
    }

    /**
     * Whether a task thread with this stack (innermost frame first) may be stopped: pure computation
     * with an expression's evaluation in it, out to Spark SQL's operator code.
     */
    public static boolean stoppable(StackTraceElement[] frames) {
        boolean expression = false;
        for (StackTraceElement frame : frames) {
            if (!StatementDeadline.pure(frame)) {
                return expression && frame.getClassName().startsWith(OPERATORS);
            }
            expression |= frame.getClassName().startsWith(EXPRESSIONS);
        }
        return false;
    }

    private void look() {
        try {
            long now = System.currentTimeMillis();
            Map<Object, Executor.TaskRunner> tasks = executor.runningTasks();
            killedSince.keySet().removeIf(id -> !tasks.containsKey(id));
            if (tasks.isEmpty()) {
                return;
            }
            Map<Long, Thread> threads = null;
            for (Map.Entry<Object, Executor.TaskRunner> e : tasks.entrySet()) {
                Executor.TaskRunner runner = e.getValue();
                Task<Object> task = runner.task();
                if (task == null || task.reasonIfKilled().isEmpty() || runner.isFinished()) {
                    continue;
                }
                long taskId = runner.taskId();
                long since = killedSince.computeIfAbsent(taskId, id -> now);
                if (now - since < GRACE_MS) {
                    continue;
                }
                if (threads == null) {
                    threads = new java.util.HashMap<>();
                    for (Thread t : Thread.getAllStackTraces().keySet()) {
                        threads.put(t.getId(), t);
                    }
                }
                Thread thread = threads.get(runner.getThreadId());
                if (thread == null || thread.getState() != Thread.State.RUNNABLE
                        || !stoppable(thread.getStackTrace()) || runner.isFinished()) {
                    continue;
                }
                STOPPED.add(thread.getId());
                reaped++;
                LOG.warn("stopping {} ({}): killed {} ms ago ({}) and still computing one row",
                        runner.taskName(), thread.getName(), now - since, task.reasonIfKilled().get());
                // Deprecated, still Java 17's; nothing else stops a computation that never yields. Its interrupt
                // status is left as Spark's kill set it, as after any killed task.
                thread.stop();
            }
        } catch (UnsupportedOperationException e) {  // Java 20 on: Thread.stop is gone
            LOG.warn("killed tasks that never yield keep their cores on this JVM: {}", e.toString());
            clock.shutdown();
        } catch (Throwable t) {
            LOG.warn("the task reaper's look failed; it looks again in a second", t);
        }
    }

    /** Called by TaskErrorGuard once the stopped thread's ThreadDeath reached it: the thread is a pool thread again. */
    static void done(Thread thread) {
        STOPPED.remove(thread.getId());
    }
}
