-- Every registered procedure with its signature and one-line description.
CREATE OR REPLACE VIEW sys.procedures AS
SELECT name, signature, returns, description, read_only
FROM sys.procedure_catalog
