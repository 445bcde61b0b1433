-- Hive 2.3's transaction and lock tables for a PostgreSQL metastore.
--
-- TxnDbUtil.prepDb creates these for Derby only (its DDL uses Derby's
-- "for bit data"); this is the same set with PostgreSQL types, as in Hive's
-- hive-txn-schema-2.3.0.postgres.sql. Names are unquoted, like the queries of
-- Hive's TxnHandler, so both fold to lower case. Every statement is
-- idempotent; the caller runs the script in one transaction, and the
-- advisory lock (any constant, the same in every tierlake process) makes
-- processes starting together create the set once.
SELECT pg_advisory_xact_lock(73190001);

CREATE TABLE IF NOT EXISTS TXNS (
  TXN_ID bigint PRIMARY KEY,
  TXN_STATE char(1) NOT NULL,
  TXN_STARTED bigint NOT NULL,
  TXN_LAST_HEARTBEAT bigint NOT NULL,
  TXN_USER varchar(128) NOT NULL,
  TXN_HOST varchar(128) NOT NULL,
  TXN_AGENT_INFO varchar(128),
  TXN_META_INFO varchar(128),
  TXN_HEARTBEAT_COUNT integer
);

CREATE TABLE IF NOT EXISTS TXN_COMPONENTS (
  TC_TXNID bigint REFERENCES TXNS (TXN_ID),
  TC_DATABASE varchar(128) NOT NULL,
  TC_TABLE varchar(128),
  TC_PARTITION varchar(767) DEFAULT NULL,
  TC_OPERATION_TYPE char(1) NOT NULL
);

CREATE INDEX IF NOT EXISTS TC_TXNID_INDEX ON TXN_COMPONENTS USING hash (TC_TXNID);

CREATE TABLE IF NOT EXISTS COMPLETED_TXN_COMPONENTS (
  CTC_TXNID bigint,
  CTC_DATABASE varchar(128) NOT NULL,
  CTC_TABLE varchar(256),
  CTC_PARTITION varchar(767)
);

CREATE TABLE IF NOT EXISTS NEXT_TXN_ID (
  NTXN_NEXT bigint NOT NULL
);

INSERT INTO NEXT_TXN_ID SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM NEXT_TXN_ID);

CREATE TABLE IF NOT EXISTS HIVE_LOCKS (
  HL_LOCK_EXT_ID bigint NOT NULL,
  HL_LOCK_INT_ID bigint NOT NULL,
  HL_TXNID bigint,
  HL_DB varchar(128) NOT NULL,
  HL_TABLE varchar(128),
  HL_PARTITION varchar(767) DEFAULT NULL,
  HL_LOCK_STATE char(1) NOT NULL,
  HL_LOCK_TYPE char(1) NOT NULL,
  HL_LAST_HEARTBEAT bigint NOT NULL,
  HL_ACQUIRED_AT bigint,
  HL_USER varchar(128) NOT NULL,
  HL_HOST varchar(128) NOT NULL,
  HL_HEARTBEAT_COUNT integer,
  HL_AGENT_INFO varchar(128),
  HL_BLOCKEDBY_EXT_ID bigint,
  HL_BLOCKEDBY_INT_ID bigint,
  PRIMARY KEY (HL_LOCK_EXT_ID, HL_LOCK_INT_ID)
);

CREATE INDEX IF NOT EXISTS HL_TXNID_INDEX ON HIVE_LOCKS USING hash (HL_TXNID);

CREATE TABLE IF NOT EXISTS NEXT_LOCK_ID (
  NL_NEXT bigint NOT NULL
);

INSERT INTO NEXT_LOCK_ID SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM NEXT_LOCK_ID);

CREATE TABLE IF NOT EXISTS COMPACTION_QUEUE (
  CQ_ID bigint PRIMARY KEY,
  CQ_DATABASE varchar(128) NOT NULL,
  CQ_TABLE varchar(128) NOT NULL,
  CQ_PARTITION varchar(767),
  CQ_STATE char(1) NOT NULL,
  CQ_TYPE char(1) NOT NULL,
  CQ_TBLPROPERTIES varchar(2048),
  CQ_WORKER_ID varchar(128),
  CQ_START bigint,
  CQ_RUN_AS varchar(128),
  CQ_HIGHEST_TXN_ID bigint,
  CQ_META_INFO bytea,
  CQ_HADOOP_JOB_ID varchar(32)
);

CREATE TABLE IF NOT EXISTS NEXT_COMPACTION_QUEUE_ID (
  NCQ_NEXT bigint NOT NULL
);

INSERT INTO NEXT_COMPACTION_QUEUE_ID SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM NEXT_COMPACTION_QUEUE_ID);

CREATE TABLE IF NOT EXISTS COMPLETED_COMPACTIONS (
  CC_ID bigint PRIMARY KEY,
  CC_DATABASE varchar(128) NOT NULL,
  CC_TABLE varchar(128) NOT NULL,
  CC_PARTITION varchar(767),
  CC_STATE char(1) NOT NULL,
  CC_TYPE char(1) NOT NULL,
  CC_TBLPROPERTIES varchar(2048),
  CC_WORKER_ID varchar(128),
  CC_START bigint,
  CC_END bigint,
  CC_RUN_AS varchar(128),
  CC_HIGHEST_TXN_ID bigint,
  CC_META_INFO bytea,
  CC_HADOOP_JOB_ID varchar(32)
);

CREATE TABLE IF NOT EXISTS AUX_TABLE (
  MT_KEY1 varchar(128) NOT NULL,
  MT_KEY2 bigint NOT NULL,
  MT_COMMENT varchar(255),
  PRIMARY KEY (MT_KEY1, MT_KEY2)
);

CREATE TABLE IF NOT EXISTS WRITE_SET (
  WS_DATABASE varchar(128) NOT NULL,
  WS_TABLE varchar(128) NOT NULL,
  WS_PARTITION varchar(767),
  WS_TXNID bigint NOT NULL,
  WS_COMMIT_ID bigint NOT NULL,
  WS_OPERATION_TYPE char(1) NOT NULL
);
