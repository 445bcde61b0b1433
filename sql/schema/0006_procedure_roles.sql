-- The role each procedure needs (procedures/roles.py), rewritten at every
-- start from the registry next to sys.procedure_catalog; sys.procedures
-- shows it. A separate table, so the migration stays idempotent.

CREATE TABLE IF NOT EXISTS sys.procedure_roles (
  name  STRING COMMENT 'sys.<name>',
  role  STRING COMMENT 'role a user needs to call it when the gateway has a password file'
) USING iceberg
TBLPROPERTIES ('format-version' = '2');
