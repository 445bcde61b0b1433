"""A throwaway PostgreSQL on loopback for the shared-metastore tests.

initdb + pg_ctl into a temp directory on a free port; as root the server runs
as the ``postgres`` system user (PostgreSQL refuses to run as root). The
packages come from ``.ci/system-deps``; ``unavailable()`` says why a test
cannot have one.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

JDBC_JAR_CANDIDATES = ("/usr/share/java/postgresql.jar",)


def bin_dir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(versions[-1]).parent if versions else None


def jdbc_jar() -> str | None:
    return next((j for j in JDBC_JAR_CANDIDATES if os.path.exists(j)), None)


def _run_as() -> list[str]:
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


def unavailable() -> str | None:
    """Why no PostgreSQL can be started here, or None."""
    if bin_dir() is None:
        return "PostgreSQL is not installed (run .ci/system-deps as root: apt-get install postgresql)"
    if jdbc_jar() is None:
        return "the PostgreSQL JDBC driver is not installed (apt-get install libpostgresql-jdbc-java)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL as"
    return None


class LocalPostgres:
    """One PostgreSQL cluster: ``start()``, ``create_database(name)``, ``stop()``."""

    def __init__(self, port: int, user: str = "tierlake", password: str = "tierlake-test"):
        self.port, self.user, self.password = port, user, password
        # Not under pytest's tmp dir: that is 0700 root, unreadable for postgres.
        self.root = Path(tempfile.mkdtemp(prefix="tierlake-pg-"))
        self.data = self.root / "data"
        self.bin = bin_dir()

    def _pg(self, tool: str, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(_run_as() + [str(self.bin / tool), *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120, check=True, **kw)

    def start(self) -> LocalPostgres:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        os.chmod(self.root, 0o700)
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        self._pg("initdb", "-D", str(self.data), "-U", self.user, "--pwfile", str(pwfile), "-A", "scram-sha-256",
                 "-E", "UTF8", "--no-locale")
        pwfile.unlink()
        # Loopback TCP only; the socket in our own dir, not /var/run/postgresql.
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.root / "postgres.log"), "-o", opts, "-w",
                 "-t", "60", "start")
        return self

    def psql(self, sql: str, database: str = "postgres") -> str:
        env = dict(os.environ, PGPASSWORD=self.password)
        return self._pg("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", database,
                        "-v", "ON_ERROR_STOP=1", "-Atc", sql, env=env).stdout

    def create_database(self, name: str) -> str:
        """A new empty database; returns its JDBC URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.jdbc_url(name)

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        try:
            self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.root, ignore_errors=True)
