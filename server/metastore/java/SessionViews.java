package io.tierlake.internal;

import java.util.Collections;
import java.util.Map;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStoreClient;
import org.apache.hadoop.hive.metastore.api.LockComponent;
import org.apache.hadoop.hive.metastore.api.LockLevel;
import org.apache.hadoop.hive.metastore.api.LockRequest;
import org.apache.hadoop.hive.metastore.api.LockResponse;
import org.apache.hadoop.hive.metastore.api.LockState;
import org.apache.hadoop.hive.metastore.api.LockType;
import org.apache.hadoop.hive.metastore.api.ShowLocksRequest;
import org.apache.hadoop.hive.metastore.api.ShowLocksResponseElement;
import org.apache.hadoop.hive.metastore.api.Table;
import org.apache.iceberg.hadoop.HadoopFileIO;
import org.apache.iceberg.view.SQLViewRepresentation;
import org.apache.iceberg.view.ViewMetadata;
import org.apache.iceberg.view.ViewMetadataParser;
import org.apache.iceberg.view.ViewRepresentation;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchViewException;
import org.apache.spark.sql.connector.catalog.FunctionCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.connector.catalog.ViewCatalog;
import org.apache.spark.sql.types.StructType;

/**
 * The server's {@code spark_catalog}: Iceberg's SparkSessionCatalog, whose
 * {@code CREATE OR REPLACE VIEW} also replaces the view's text in the Hive
 * metastore.
 *
 * <p>Why: in {@code spark_catalog} a view is an Iceberg view (the session
 * catalog is a view catalog), and Iceberg 1.10's Hive view operations write
 * the SQL into the metastore entry's view text only when they create the view
 * (apache/iceberg#15490). Spark 3.5 resolves a session-catalog view by that
 * text, so every query of a replaced view kept reading its first version.
 *
 * <p>Two replaces racing each other both land, the later winning, as they do
 * for a Spark view (Iceberg refuses the one it finds overtaken, "View was
 * updated concurrently": it is made again on the new version). After Iceberg's replace, the entry's text becomes the SQL of the Iceberg
 * version the entry names ({@code metadata_location} of the same read), so two
 * replaces racing each other leave the text of the one in force; the embedded
 * metastore refuses an alter made from a copy another alter overtook
 * (CasAlterHandler.java) or one whose Iceberg metadata location moved, and the
 * text is then read again. Any other metastore (a metastore service, a shared
 * database) runs no such check: there the read and the write of the entry
 * hold Hive's EXCLUSIVE lock on the view, the lock Iceberg's own view commits
 * take, so a replace landing in between cannot be written over with the older
 * {@code metadata_location} this read saw (a lost replace). Fresh views
 * (their SQL carries a {@code tierlake-pin}) are left alone: their re-pin
 * writes the text under its own compare-and-set, which keeps pins from
 * moving back (server/changelog/fresh_view.py).
 */
public class SessionViews<T extends TableCatalog & FunctionCatalog & SupportsNamespaces & ViewCatalog>
    extends org.apache.iceberg.spark.SparkSessionCatalog<T> {
  static final String FRESH_PIN_MARK = "tierlake-pin";
  private static final String PIN_PARAMETER = "tierlake_fresh_pin"; // fresh_view.PIN_PARAMETER
  // One metastore client for the process, made on first use (an embedded metastore's client builds
  // its own handler), one replace at a time, made again after a failure.
  private static HiveMetaStoreClient client;
  // How long the text's write waits for Hive's lock on the view (Iceberg's view commits hold it for one
  // metastore update; Iceberg itself waits up to 3 minutes).
  static final long LOCK_TIMEOUT_MS = 60_000;
  // Tests: a pause between the entry's read and its write, and how many writes have reached it.
  private static volatile long pauseBeforeWriteMs = 0;
  private static final java.util.concurrent.atomic.AtomicLong PAUSED = new java.util.concurrent.atomic.AtomicLong();

  /** Tests: pause each write of a replaced view's text {@code ms} after its read (0: no pause). */
  public static void pauseBeforeWrite(long ms) {
    pauseBeforeWriteMs = ms;
  }

  /** Tests: how many writes have paused so far. */
  public static long pausedWrites() {
    return PAUSED.get();
  }

  @Override
  public View replaceView(Identifier ident, String sql, String currentCatalog, String[] currentNamespace,
                          StructType schema, String[] queryColumnNames, String[] columnAliases,
                          String[] columnComments, Map<String, String> properties)
      throws NoSuchNamespaceException, NoSuchViewException {
    boolean fresh = sql.contains(FRESH_PIN_MARK);
    for (int attempt = 0; ; attempt++) {
      View view;
      try {
        view = super.replaceView(ident, sql, currentCatalog, currentNamespace, schema, queryColumnNames,
            columnAliases, columnComments, properties);
      } catch (org.apache.iceberg.exceptions.AlreadyExistsException e) {
        // Another replace landed first ("View was updated concurrently"): a replace means the
        // last one wins, as it does for a Spark view, so it is made again on the new version.
        // A fresh view's re-pin decides itself whether to try again (its pin may be the older).
        if (fresh || attempt >= 9 || String.valueOf(e.getMessage()).indexOf("concurrently") < 0) throw e;
        continue;
      }
      if (ident.namespace().length == 1 && !fresh) syncText(ident.namespace()[0], ident.name());
      return view;
    }
  }

  /** Whether the session catalog's Iceberg commits take Hive's lock (all but the embedded metastore,
   *  whose alter_table is a compare-and-set: server/metastore/jvm.py). */
  private static boolean viewsLocked(SparkSession session, Configuration conf) {
    String own = session.conf().get("spark.sql.catalog.spark_catalog.hadoop.iceberg.engine.hive.lock-enabled", null);
    String value = own != null ? own : conf.get("iceberg.engine.hive.lock-enabled");
    return value == null || !"false".equalsIgnoreCase(value.trim());
  }

  private static void syncText(String database, String name) {
    SparkSession session = SparkSession.active();
    Configuration conf = session.sessionState().newHadoopConf();
    boolean locked = viewsLocked(session, conf);
    synchronized (SessionViews.class) {
      long lock = -1;
      try {
        if (client == null) client = new HiveMetaStoreClient(new HiveConf(conf, HiveConf.class));
        if (locked) lock = lock(client, database, name);
        for (int attempt = 0; ; attempt++) {
          Table entry = client.getTable(database, name);
          Map<String, String> params = entry.getParameters();
          String location = params == null ? null : params.get("metadata_location");
          if (location == null || params.containsKey(PIN_PARAMETER)) return; // not an Iceberg view / a fresh view
          String text = sparkSql(conf, location);
          if (text == null
              || (text.equals(entry.getViewOriginalText()) && text.equals(entry.getViewExpandedText()))) {
            return;
          }
          entry.setViewOriginalText(text);
          entry.setViewExpandedText(text);
          if (pauseBeforeWriteMs > 0) {
            PAUSED.incrementAndGet();
            Thread.sleep(pauseBeforeWriteMs);
          }
          // Still ours and fresh for the write (Hive times a lock out without heartbeats): raises if gone.
          if (lock >= 0) client.heartbeat(0, lock);
          try {
            client.alter_table(database, name, entry);
            return;
          } catch (org.apache.thrift.TException | RuntimeException e) {
            // Another alter landed between this read and this write: read the entry again.
            String why = String.valueOf(e.getMessage());
            if (attempt >= 9 || (why.indexOf("stale copy") < 0 && why.indexOf("has been modified") < 0)) throw e;
          }
        }
      } catch (org.apache.thrift.TException | RuntimeException | InterruptedException e) {
        if (lock >= 0) unlock(conf, lock);
        lock = -1;
        if (client != null) client.close();
        client = null;
        if (e instanceof InterruptedException) Thread.currentThread().interrupt();
        throw new IllegalStateException("cannot write the replaced view's text to the metastore: " + e.getMessage(), e);
      } finally {
        if (lock >= 0) unlock(conf, lock);
      }
    }
  }

  /** Hive's EXCLUSIVE table lock on the view's entry, as Iceberg's MetastoreLock requests it (one excludes
   *  the other); its id once acquired. Named as the replace named the view, so as Iceberg's lock is. */
  private static long lock(HiveMetaStoreClient client, String database, String name)
      throws org.apache.thrift.TException, InterruptedException {
    LockComponent component = new LockComponent(LockType.EXCLUSIVE, LockLevel.TABLE, database);
    component.setTablename(name);
    String agent = "tierlake-session-views-" + UUID.randomUUID();
    LockRequest request = new LockRequest(Collections.singletonList(component), System.getProperty("user.name", "tierlake"),
        java.net.InetAddress.getLoopbackAddress().getHostName());
    request.setAgentInfo(agent);
    LockResponse response;
    try {
      response = client.lock(request);
    } catch (org.apache.thrift.TException | RuntimeException e) {
      // The request may have been taken before its answer was lost: release what this agent holds,
      // else it would hold the view's commits back until Hive times it out.
      releaseAgent(client, database, name, agent);
      throw e;
    }
    long id = response.getLockid();
    long deadline = System.currentTimeMillis() + LOCK_TIMEOUT_MS;
    long pause = 50;
    try {
      while (response.getState() != LockState.ACQUIRED) {
        if (response.getState() != LockState.WAITING || System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("the metastore lock on the view " + database + "." + name + " was "
              + (response.getState() != LockState.WAITING ? "ended " + response.getState() : "not granted in "
              + LOCK_TIMEOUT_MS / 1000 + " s") + "; the view's text was not written");
        }
        Thread.sleep(pause);
        pause = Math.min(pause * 3 / 2, 1000);
        response = client.checkLock(id);
      }
    } catch (org.apache.thrift.TException | RuntimeException | InterruptedException e) {
      try {
        client.unlock(id);
      } catch (org.apache.thrift.TException | RuntimeException ignored) {
        // Hive times it out (hive.txn.timeout)
      }
      throw e;
    }
    return id;
  }

  private static void releaseAgent(HiveMetaStoreClient client, String database, String name, String agent) {
    try {
      ShowLocksRequest request = new ShowLocksRequest();
      request.setDbname(database);
      request.setTablename(name);
      for (ShowLocksResponseElement held : client.showLocks(request).getLocks()) {
        if (agent.equals(held.getAgentInfo())) client.unlock(held.getLockid());
      }
    } catch (org.apache.thrift.TException | RuntimeException ignored) {
      // Hive times it out (hive.txn.timeout)
    }
  }

  /** Release the lock; through a new client when the shared one fails (it is being replaced). */
  private static void unlock(Configuration conf, long lock) {
    try {
      if (client != null) {
        client.unlock(lock);
        return;
      }
    } catch (org.apache.thrift.TException | RuntimeException e) {
      // tried again below
    }
    try {
      HiveMetaStoreClient other = new HiveMetaStoreClient(new HiveConf(conf, HiveConf.class));
      try {
        other.unlock(lock);
      } finally {
        other.close();
      }
    } catch (org.apache.thrift.TException | RuntimeException e) {
      // Hive times it out (hive.txn.timeout)
    }
  }

  /** The Spark SQL of the view version in force at {@code location} (Iceberg view metadata). */
  private static String sparkSql(Configuration conf, String location) {
    HadoopFileIO io = new HadoopFileIO(conf);
    try {
      ViewMetadata metadata = ViewMetadataParser.read(io.newInputFile(location));
      for (ViewRepresentation r : metadata.currentVersion().representations()) {
        if (r instanceof SQLViewRepresentation && "spark".equalsIgnoreCase(((SQLViewRepresentation) r).dialect())) {
          return ((SQLViewRepresentation) r).sql();
        }
      }
      return null;
    } finally {
      io.close();
    }
  }
}
