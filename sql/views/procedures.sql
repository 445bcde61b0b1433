-- Every registered procedure with its signature, one-line description and
-- the role a user needs to call it (when the gateway has a password file).
CREATE OR REPLACE VIEW sys.procedures AS
SELECT c.name, c.signature, c.returns, c.description, c.read_only, r.role
FROM sys.procedure_catalog c
LEFT JOIN sys.procedure_roles r ON r.name = c.name
