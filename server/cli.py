"""The ``tierlake`` command."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from tierlake_client.jdbc import (
    connect,
    parse_jdbc_url,  # noqa: F401 - part of the CLI module's API
    resolve_password,
)

from tierlake.server.clients.statements import StatementBuffer
from tierlake.server.clients.table_format import format_table
from tierlake.server.config.config import Config, parse_conf_args
from tierlake.server.exceptions import TierlakeError
from tierlake.server.gateway.auth import passwords
from tierlake.server.runtime.log_setup import configure_python_logging, redirect_console


def _server(args: argparse.Namespace) -> int:
    # import here: `tierlake sql` and `tierlake passwd` start without loading the engine (200+ modules)
    from tierlake.server.app import Server

    config = Config.load(
        home=args.home,
        config_file=args.config,
        conf=parse_conf_args(args.conf),
        gateway_host=args.host,
        gateway_port=args.port,
        master=args.master,
        tiering_workers=args.workers,
    )
    configure_python_logging(config.logs_dir)
    saved_err = os.dup(2)
    saved_out = redirect_console(config.logs_dir)
    out = os.fdopen(saved_out, "w", buffering=1)
    err = os.fdopen(saved_err, "w", buffering=1)
    stop = threading.Event()
    server = Server(config)
    try:
        with _progress(err, "tierlake: starting (Spark, metastore, sys schema)"):
            server.start()
    except TierlakeError as e:
        print(f"tierlake: {e.message}", file=err)
        return 2
    except Exception as e:  # noqa: BLE001 - startup failure: say where the details are
        print(f"tierlake: startup failed: {e}\n(details in {config.logs_dir})", file=err)
        return 1
    _on_stop_signals(stop)
    # The status page is on a free port in development mode: the ready line is where to find it.
    status = f" (status page: {server.http.url})" if server.http is not None else ""
    print(f"tierlake ready: {server.jdbc_url}{status}", file=out)
    wait_for_stop(stop)
    server.stop()
    return 0


class _progress:
    """On a terminal, ``what… N s`` on one line while a long operation runs (cleared at its end)."""

    def __init__(self, out, what: str):
        self.out, self.what = out, what
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def _show(self) -> None:
        import time

        started = time.monotonic()
        while not self.done.wait(1.0):
            print(f"\r{self.what}… {time.monotonic() - started:.0f} s", end="", file=self.out, flush=True)

    def __enter__(self) -> _progress:
        if self.out.isatty():
            self.thread = threading.Thread(target=self._show, name="tierlake-progress", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join()
            print("\r" + " " * (len(self.what) + 12) + "\r", end="", file=self.out, flush=True)


# How often the main thread wakes while it waits for a stop signal.
SIGNAL_POLL_S = 0.1


def wait_for_stop(stop: threading.Event) -> None:
    """Wait until a stop signal set ``stop``, waking every ``SIGNAL_POLL_S``.

    Python runs signal handlers in the main thread only, and the kernel may hand
    a signal sent to the process (or its group) to any thread: the C handler then
    only records it, and a main thread blocked in an untimed wait never gets to
    run the Python handler (SIGTERM went unnoticed for minutes under load). Each
    timed wait returns to the interpreter, which runs a pending handler at once."""
    while not stop.wait(SIGNAL_POLL_S):
        pass


def _on_stop_signals(stop: threading.Event) -> None:
    """SIGINT and SIGTERM set ``stop``: the main thread then stops the server in order and exits 0.

    Installed after the SparkContext exists: pyspark's own SIGINT handler
    (installed when it starts) cancels every Spark job and raises
    KeyboardInterrupt in the main thread, which cut rounds mid-MERGE and made
    the worker fail with "cannot schedule new futures after shutdown"."""
    import logging

    def handler(signum, _frame):
        if not stop.is_set():
            logging.getLogger("tierlake.server").info("%s received: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def _tiering_service(args: argparse.Namespace) -> int:
    # import here: `tierlake sql` and `tierlake passwd` start without loading the engine (200+ modules)
    from tierlake.server.app import JVM_FEATURES
    from tierlake.server.tiering.service import TieringService

    config = Config.load(home=args.home or ".tierlake-tiering", config_file=args.config,
                         conf=parse_conf_args(args.conf), master=args.master)
    configure_python_logging(config.logs_dir)
    saved_err = os.dup(2)
    out = os.fdopen(redirect_console(config.logs_dir), "w", buffering=1)
    err = os.fdopen(saved_err, "w", buffering=1)
    stop = threading.Event()
    password = resolve_password(args.password, config.text("tierlake.client.password-file"))
    service = TieringService(config, args.url, JVM_FEATURES, args.user, password,
                             ca_file=args.ca_file or config.text("tierlake.client.ssl.ca-file") or None)
    try:
        with _progress(err, "tierlake: starting the tiering service"):
            service.start(args.workers)
    except TierlakeError as e:
        print(f"tierlake: {e.message}", file=err)
        return 2
    except Exception as e:  # noqa: BLE001
        print(f"tierlake: tiering service failed to start: {e}\n(details in {config.logs_dir})", file=err)
        return 1
    _on_stop_signals(stop)
    metrics = f" (metrics: {service.http.url}metrics)" if service.http is not None else ""
    print(f"tierlake tiering-service ready: jobs {', '.join(w.job_id for w in service.workers)} -> {args.url}"
          f"{metrics}", file=out)
    wait_for_stop(stop)
    service.stop()
    return 0


def _passwd(args: argparse.Namespace) -> int:
    import getpass

    path = args.file
    if not path:
        config = Config.load(home=args.home, config_file=args.config, conf=parse_conf_args(args.conf))
        path = config.text("tierlake.gateway.password-file")
    if not path:
        print("tierlake: no password file: give --file or set tierlake.gateway.password-file", file=sys.stderr)
        return 2
    if args.delete:
        found = passwords.delete_user(path, args.user)
        print(f"{'deleted' if found else 'no such user'} {args.user} in {path}")
        return 0 if found else 1
    roles = passwords.parse_roles(args.role) if args.role else None
    password = None
    if not args.keep_password:
        if sys.stdin.isatty():
            password = getpass.getpass(f"password for {args.user}: ")
            if getpass.getpass("again: ") != password:
                print("tierlake: the passwords differ", file=sys.stderr)
                return 1
        else:
            password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            print("tierlake: empty password", file=sys.stderr)
            return 1
    entry = passwords.set_user(path, args.user, password, roles)
    print(f"{entry.name} ({', '.join(sorted(entry.roles))}) saved in {path}")
    return 0


def _sql(args: argparse.Namespace) -> int:
    from pyhive import exc

    try:
        conn = connect(args.url, args.user, resolve_password(args.password), args.ca_file)
    except Exception as e:  # noqa: BLE001 - connection failures are user errors here
        print(f"tierlake: cannot connect to {args.url}: {e}", file=sys.stderr)
        return 2
    status = 0
    with conn:
        cursor = conn.cursor()

        def run(statement: str) -> None:
            nonlocal status
            try:
                _execute_with_progress(cursor, statement)
                rows = _fetch(cursor)
                if rows is None or (rows == [] and _result_only(cursor)):
                    print("OK")
                else:
                    print(format_table([d[0] for d in cursor.description], rows))
                    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
            except exc.OperationalError as e:
                print(f"Error: {_error_text(e)}", file=sys.stderr)
                status = 1
            sys.stdout.flush()

        if args.statements:
            for statement in args.statements:
                run(statement)
        else:
            _interactive(run, args.url)
            if sys.stdin.isatty():
                return 0  # a person saw each error as it came; statements piped in still set the status
    return status


HISTORY_FILE = "~/.tierlake_sql_history"
HISTORY_LENGTH = 1000


def _interactive(run, url: str) -> None:
    """Statements from the terminal (line editing and history through the
    standard library's ``readline``) or from stdin, each ending with ``;``
    (a statement may span lines); ``\\q`` or end of input quits."""
    tty = sys.stdin.isatty()
    history = os.path.expanduser(HISTORY_FILE)
    if tty:
        try:
            import readline

            readline.set_history_length(HISTORY_LENGTH)
            if os.path.exists(history):
                readline.read_history_file(history)
        except (ImportError, OSError):  # no readline (or an unreadable history): plain input() still works
            readline = None
        print(f"connected to {url}; end statements with ';', \\q quits", file=sys.stderr)
    buffer = StatementBuffer()
    try:
        while True:
            try:
                line = input(("tierlake> " if buffer.empty else "      -> ") if tty else "")
            except EOFError:
                break
            except KeyboardInterrupt:  # Ctrl-C drops the statement being typed, as psql does
                print(file=sys.stderr)
                buffer = StatementBuffer()
                continue
            if buffer.empty and line.strip() in ("\\q", "quit", "exit"):
                break
            for statement in buffer.feed(line):
                run(statement)
        rest = buffer.rest()
        if rest:
            run(rest)
    finally:
        if tty and readline is not None:
            try:
                readline.write_history_file(history)
            except OSError:
                pass


def _execute_with_progress(cursor, statement: str) -> None:
    """Run a statement; on a terminal, show its elapsed time while it runs."""
    import time

    from TCLIService.ttypes import TOperationState

    if not sys.stderr.isatty():
        cursor.execute(statement)
        return
    started = time.monotonic()
    cursor.execute(statement, async_=True)
    running = (TOperationState.INITIALIZED_STATE, TOperationState.PENDING_STATE, TOperationState.RUNNING_STATE)
    shown = False
    while cursor.poll().operationState in running:
        elapsed = time.monotonic() - started
        if elapsed >= 1:
            print(f"\r  running… {elapsed:.0f} s", end="", file=sys.stderr, flush=True)
            shown = True
        time.sleep(0.25)
    if shown:
        print("\r" + " " * 24 + "\r", end="", file=sys.stderr, flush=True)
    state = cursor.poll()
    if state.operationState == TOperationState.ERROR_STATE:
        from pyhive import exc
        from TCLIService.ttypes import TStatus

        raise exc.OperationalError(type("Failed", (), {"status": TStatus(
            errorMessage=state.errorMessage, sqlState=state.sqlState, errorCode=state.errorCode)})())


def _fetch(cursor) -> list | None:
    """All rows, or None for a statement without a result set."""
    if not cursor.description:
        return None
    try:
        return cursor.fetchall()
    except TypeError:
        # Spark's Thrift Server describes DDL as one STRING column "Result"
        # and then answers the fetch with an empty row-based row set even on
        # columnar protocols, which PyHive cannot decode.
        if [d[0] for d in cursor.description] == ["Result"]:
            return None
        raise


def _result_only(cursor) -> bool:
    """The statement answered Spark's one ``Result`` column of DDL and writes
    (the gateway's own answer to an INSERT into a stream table included)."""
    return [d[0] for d in cursor.description or ()] == ["Result"]


def _error_text(e: Exception) -> str:
    status = getattr(e.args[0], "status", None) if e.args else None
    if status is not None:
        # Errors of asynchronous operations carry the server's Java stack trace.
        lines = []
        for line in (status.errorMessage or "").splitlines():
            if line.lstrip().startswith(("at ", "... ")) or line.startswith("Caused by"):
                break
            lines.append(line)
        message = "\n".join(lines).strip()
        return f"{message} (state={status.sqlState},code={status.errorCode})"
    return str(e)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tierlake", description="Fluss-style lake tiering on Spark.")
    sub = parser.add_subparsers(dest="command", required=True)

    srv = sub.add_parser("server", help="run the server (Spark, sys schema, JDBC gateway) in the foreground")
    srv.add_argument("--host", help="gateway bind address (default 127.0.0.1)")
    srv.add_argument("--port", type=int, help="gateway port (default 10000)")
    srv.add_argument("--home", help="state directory (default $TIERLAKE_HOME or ./.tierlake)")
    srv.add_argument("--master", help="Spark master (default local[*])")
    srv.add_argument("--workers", type=int, help="tiering worker threads in this server (default 1; 0 for none)")
    srv.add_argument("--config", help="config file (default $TIERLAKE_HOME/tierlake.conf)")
    srv.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a setting (repeatable)")
    srv.set_defaults(func=_server)

    ts = sub.add_parser("tiering-service", help="run tiering workers as a separate Spark app")
    ts.add_argument("--url", default=os.environ.get("TIERLAKE_URL", "jdbc:hive2://127.0.0.1:10000/default"),
                    help="the tierlake server's JDBC URL")
    ts.add_argument("--workers", type=int, default=1, help="worker threads (default 1)")
    ts.add_argument("--home", help="this service's state directory (default ./.tierlake-tiering)")
    ts.add_argument("--master", help="Spark master (default local[*])")
    ts.add_argument("--config", help="config file")
    ts.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a setting (repeatable)")
    ts.add_argument("--user", default="tiering-service", help="gateway user (default tiering-service)")
    ts.add_argument("--password", help="gateway password (default $TIERLAKE_PASSWORD, "
                                       "else the file in tierlake.client.password-file)")
    ts.add_argument("--ca-file", help="CA certificate (PEM) for a ;ssl=true URL (default tierlake.client.ssl.ca-file)")
    ts.set_defaults(func=_tiering_service)

    q = sub.add_parser("sql", help="run statements through the gateway and print the results")
    q.add_argument("statements", nargs="*", metavar="STATEMENT",
                   help="statements to run; none: an interactive session (statements end with ';', \\q quits)")
    q.add_argument("--url", default=os.environ.get("TIERLAKE_URL", "jdbc:hive2://127.0.0.1:10000/default"))
    q.add_argument("--user", default=os.environ.get("USER", "tierlake"))
    q.add_argument("--password", help="gateway password (default $TIERLAKE_PASSWORD)")
    q.add_argument("--ca-file", help="CA certificate (PEM) to check the gateway's TLS certificate (;ssl=true URLs)")
    q.set_defaults(func=_sql)

    pw = sub.add_parser("passwd", help="add or change a gateway user (password read from the terminal or stdin)")
    pw.add_argument("user")
    pw.add_argument("--role", help="comma-separated roles: reader, writer, admin, tiering-service "
                                   "(required for a new user; default: keep)")
    pw.add_argument("--file", help="password file (default tierlake.gateway.password-file)")
    pw.add_argument("--keep-password", action="store_true", help="change only the roles")
    pw.add_argument("--delete", action="store_true", help="remove the user")
    pw.add_argument("--home", help="state directory whose tierlake.conf names the file")
    pw.add_argument("--config", help="config file")
    pw.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a setting (repeatable)")
    pw.set_defaults(func=_passwd)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TierlakeError as e:
        print(f"tierlake: {e.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
