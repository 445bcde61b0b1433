package org.apache.hadoop.hive.metastore.txn;

import org.apache.hadoop.hive.metastore.api.LockComponent;
import org.apache.hadoop.hive.metastore.api.LockRequest;
import org.apache.hadoop.hive.metastore.api.LockResponse;
import org.apache.hadoop.hive.metastore.api.MetaException;
import org.apache.hadoop.hive.metastore.api.NoSuchTxnException;
import org.apache.hadoop.hive.metastore.api.TxnAbortedException;

/**
 * The embedded metastore's {@code hive.metastore.txn.store.impl}: Hive's own
 * lock store, which also tells tierlake's stream committers that another
 * application is committing to a table.
 *
 * <p>Why: a client that commits with Hive locks (Spark elsewhere, a tiering
 * service) reads the table, writes its metadata, locks and then compares;
 * under steady ingest a server group commit lands between its read and its
 * compare on every retry. Its lock request marks the table, and the server's
 * committers of that table hold back until the client's commit lands or a
 * short pause passes ({@code io.tierlake.internal.CasAlterHandler}).
 *
 * <p>In Hive's package because {@link CompactionTxnHandler} is package-private;
 * the class loader that loads Hive's metastore loads this class too (both are
 * on the driver's class path).
 */
public class TierlakeTxnHandler extends CompactionTxnHandler {
    @Override
    public LockResponse lock(LockRequest rqst) throws NoSuchTxnException, TxnAbortedException, MetaException {
        if (rqst != null && rqst.getComponent() != null) {
            for (LockComponent c : rqst.getComponent()) {
                if (c.getTablename() != null) {
                    io.tierlake.internal.CasAlterHandler.foreignCommitStarting(c.getDbname(), c.getTablename());
                }
            }
        }
        return super.lock(rqst);
    }
}
