package io.tierlake.internal;

import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;

/**
 * The role each client session's plans are checked as: written by the gateway's authoriser
 * (AuthzCheck.bind), read by its analysis check and by whatever keeps an analysis for reuse
 * (ingest's ValuesTemplates: a form analysed under one role never serves another). Weak keys:
 * a closed session's entry goes with it.
 */
public final class SessionRoles {
    private static final Map<SparkSession, String> ROLES = Collections.synchronizedMap(new WeakHashMap<>());

    private SessionRoles() {}

    static void bind(SparkSession session, String role) {
        ROLES.put(session, role);
    }

    /** The session's role, or null: not bound (development mode, the server's own sessions). */
    public static String of(SparkSession session) {
        return ROLES.get(session);
    }
}
