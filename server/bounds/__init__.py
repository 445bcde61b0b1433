"""What one statement may cost the server, and one life for the server and
its JVM: statement deadlines (java/StatementDeadline.java), a task's memory
error failing its query (java/TaskErrorGuard.java), killed tasks stuck in one
row stopped (java/TaskReaper.java), the result-size bound (resource_bounds.py),
and the process ending with its driver JVM (jvm_watch.py). docs/security.md.
"""
