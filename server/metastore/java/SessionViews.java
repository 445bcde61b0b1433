package io.tierlake.internal;

import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStoreClient;
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
 * text is then read again. Fresh views
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

  private static void syncText(String database, String name) {
    Configuration conf = SparkSession.active().sessionState().newHadoopConf();
    synchronized (SessionViews.class) {
      try {
        if (client == null) client = new HiveMetaStoreClient(new HiveConf(conf, HiveConf.class));
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
          try {
            client.alter_table(database, name, entry);
            return;
          } catch (org.apache.thrift.TException | RuntimeException e) {
            // Another alter landed between this read and this write: read the entry again.
            String why = String.valueOf(e.getMessage());
            if (attempt >= 9 || (why.indexOf("stale copy") < 0 && why.indexOf("has been modified") < 0)) throw e;
          }
        }
      } catch (org.apache.thrift.TException | RuntimeException e) {
        if (client != null) client.close();
        client = null;
        throw new IllegalStateException("cannot write the replaced view's text to the metastore: " + e.getMessage(), e);
      }
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
