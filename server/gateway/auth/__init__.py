"""Authentication and authorisation at the gateway: the password file and its
logins (passwords.py), the per-statement Authorizer (authz.py) deciding on
Spark's own parse (planauth.py) or, for ``CALL sys.<name>``, on the
procedure's role (callparse.py reads what a CALL names), the linear cost check
before Iceberg's parser (parsecost.py), and what a request may carry besides
its statement (requestcheck.py).

Imports nothing else of the gateway: transport and routing use it.
"""
