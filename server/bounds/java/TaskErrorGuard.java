package io.tierlake.internal;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.SparkContext;
import org.apache.spark.executor.Executor;
import org.apache.spark.scheduler.SchedulerBackend;
import org.apache.spark.scheduler.local.LocalEndpoint;
import org.apache.spark.scheduler.local.LocalSchedulerBackend;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps one query's memory blow-up from taking the whole server down.
 *
 * <p>With a local master the executor runs in the server's own JVM, and Spark's
 * TaskRunner hands every "fatal" task error (any OutOfMemoryError or
 * StackOverflowError, also as a cause) to the executor's
 * uncaughtExceptionHandler, SparkUncaughtExceptionHandler, which calls
 * System.exit: a reader's {@code SELECT repeat(s, 2000000000) FROM t} ended
 * every session, the gateway and tiering. In a cluster that exit costs one
 * executor; here it is the driver. Spark has already reported the task as
 * failed (its job fails with the error) before it calls the handler, and it
 * frees the task's managed memory in a finally block, so the failed giant
 * allocation holds nothing: for a heap OutOfMemoryError or a stack overflow
 * in a task thread this handler logs and returns instead of exiting. Errors
 * that say the JVM itself is broken (Metaspace, no native threads, an
 * InternalError, ...) and anything outside task threads still go to Spark's
 * handler.
 *
 * <p>The executor is reached by reflection (LocalSchedulerBackend keeps only
 * an RpcEndpointRef to the LocalEndpoint that owns it) and its handler field
 * is final: the field is replaced once, right after the SparkContext started.
 *
 * <p>It also starts {@link TaskReaper}, which stops killed tasks stuck in one row, and absorbs the
 * {@code ThreadDeath} of the threads it stopped (Spark counts ThreadDeath as fatal).
 */
public final class TaskErrorGuard implements Thread.UncaughtExceptionHandler {
    private static final Logger LOG = LoggerFactory.getLogger(TaskErrorGuard.class);
    private static final String HANDLER_FIELD = "org$apache$spark$executor$Executor$$uncaughtExceptionHandler";
    // Spark's Executor.isFatalError looks this deep into causes (spark.executor.killOnFatalError.depth).
    private static final int CAUSE_DEPTH = 5;
    private static final AtomicLong SURVIVED = new AtomicLong();

    private final Thread.UncaughtExceptionHandler spark;

    private TaskErrorGuard(Thread.UncaughtExceptionHandler spark) {
        this.spark = spark;
    }

    /**
     * Put the guard in front of the local executor's handler; false when the
     * master is not local (executors in other JVMs) or it is already there.
     */
    public static synchronized boolean install(SparkContext sc) throws ReflectiveOperationException {
        Executor executor = localExecutor(sc);
        if (executor == null) {
            return false;
        }
        Field field = Executor.class.getDeclaredField(HANDLER_FIELD);
        field.setAccessible(true);
        Object current = field.get(executor);
        if (current instanceof TaskErrorGuard) {
            return false;
        }
        field.set(executor, new TaskErrorGuard((Thread.UncaughtExceptionHandler) current));
        TaskReaper.start(executor);  // its stopped threads' ThreadDeath is absorbed below
        return true;
    }

    /** Whether the local executor's handler is the guard (tests). */
    public static boolean installed(SparkContext sc) throws ReflectiveOperationException {
        Executor executor = localExecutor(sc);
        if (executor == null) {
            return false;
        }
        Field field = Executor.class.getDeclaredField(HANDLER_FIELD);
        field.setAccessible(true);
        return field.get(executor) instanceof TaskErrorGuard;
    }

    /** Task errors the guard kept from exiting the JVM since start. */
    public static long survived() {
        return SURVIVED.get();
    }

    private static Executor localExecutor(SparkContext sc) throws ReflectiveOperationException {
        SchedulerBackend backend = sc.schedulerBackend();
        if (!(backend instanceof LocalSchedulerBackend)) {
            return null;
        }
        Object rpcEnv = sc.env().rpcEnv();
        Object dispatcher = read(rpcEnv, "dispatcher");
        Map<?, ?> endpoints = (Map<?, ?>) read(dispatcher, "endpointRefs");
        for (Object endpoint : endpoints.keySet()) {
            if (endpoint instanceof LocalEndpoint && read(endpoint, "executorBackend") == backend) {
                Method executor = LocalEndpoint.class.getMethod("org$apache$spark$scheduler$local$LocalEndpoint$$executor");
                return (Executor) executor.invoke(endpoint);
            }
        }
        throw new IllegalStateException("no LocalEndpoint of the local scheduler backend is registered");
    }

    private static Object read(Object target, String name) throws ReflectiveOperationException {
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(target);
            } catch (NoSuchFieldException e) {
                // declared further up
            }
        }
        throw new NoSuchFieldException(target.getClass().getName() + "." + name);
    }

    @Override
    public void uncaughtException(Thread thread, Throwable error) {
        if (error instanceof ThreadDeath && TaskReaper.stoppedHere(thread)) {
            TaskReaper.done(thread);  // a killed task's row stopped by the reaper: its task is failed, nothing else
            return;
        }
        Throwable cause = survivable(error);
        if (cause != null && thread.getName().startsWith("Executor task launch worker")) {
            SURVIVED.incrementAndGet();
            try {
                LOG.error("a task failed with {} in {}; its query fails, the server stays up",
                        cause, thread.getName(), error);
            } catch (Throwable ignored) {
                // logging itself may fail right after an OutOfMemoryError; the task is reported failed anyway
            }
            return;
        }
        spark.uncaughtException(thread, error);
    }

    /** The first fatal error in the cause chain when it is one a task can cause and recover from, else null. */
    static Throwable survivable(Throwable error) {
        Throwable t = error;
        for (int depth = 0; t != null && depth <= CAUSE_DEPTH; depth++, t = t.getCause()) {
            if (t instanceof StackOverflowError) {
                return t;
            }
            if (t instanceof OutOfMemoryError) {
                String message = String.valueOf(t.getMessage());
                // Class metadata and native threads are not a task's own: the JVM is short of them for everyone.
                boolean jvmWide = message.contains("Metaspace") || message.contains("Compressed class space")
                        || message.contains("native thread");
                return jvmWide ? null : t;
            }
            if (t instanceof VirtualMachineError || t instanceof ThreadDeath) {
                return null;
            }
        }
        return null;
    }
}
