"""Shared bench helpers: an in-process server on a scratch home (on ``local[2]``
or a Spark cluster: ``--master``), timing, the server's CPU time."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

LOCAL_MASTER = "local[2]"


def add_master_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master", default=LOCAL_MASTER,
        help=f"the server's Spark master (default {LOCAL_MASTER}); 'standalone': a standalone master and one "
             "worker (2 cores, 2g) from pyspark's jars, started for the run on loopback (tests/standalone.py); "
             "spark://HOST:PORT: a running cluster")


@contextlib.contextmanager
def spark_master(master: str) -> Iterator[dict[str, str]]:
    """The server settings that run it on ``master``; ``standalone`` starts a
    local standalone cluster for the block and stops it after. A cluster's
    application gets one executor of 2 cores (as many task slots as
    ``local[2]``) and 1 GB."""
    if master.startswith("local"):
        yield {"tierlake.master": master}
        return
    cluster = None
    if master == "standalone":
        from tests.standalone import LocalStandalone

        cluster = LocalStandalone(cores=2, memory="2g").start()
        master = cluster.url
    try:
        yield {"tierlake.master": master, "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
               "spark.cores.max": "2", "spark.executor.cores": "2", "spark.executor.memory": "1g"}
    finally:
        if cluster is not None:
            cluster.stop()


def start_server(**conf: str):
    from tierlake.server.app import Server
    from tierlake.server.config.config import Config
    from tierlake.server.runtime.log_setup import configure_python_logging

    home = tempfile.mkdtemp(prefix="tierlake-bench-")
    settings = {"tierlake.master": LOCAL_MASTER, "tierlake.gateway.port": "0",
                "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "4g"}
    settings.update(conf)
    config = Config.load(home=home, conf=settings)
    configure_python_logging(config.logs_dir)
    return Server(config).start()


def sample(fn: Callable[[], object], runs: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def row(label: str, values: list[float], baseline: list[float] | None = None) -> str:
    text = f"| {label} | {statistics.median(values) * 1000:.0f} ms | {p(values, 0.95) * 1000:.0f} ms |"
    if baseline is not None:
        text += f" {statistics.median(values) / statistics.median(baseline):.2f}× |"
    else:
        text += " — |"
    return text


# --- The server's CPU time (issue 53 item 1: a measure that travels between machines) -------------

# Processes the bench starts as clients: multiprocessing's spawned children (writers, feeders,
# readers) and its resource tracker. They and their descendants are never the server's.
CLIENT_MARKERS = ("--multiprocessing-fork", "multiprocessing.resource_tracker", "multiprocessing.forkserver")

SERVER_CPU_HOW = (
    "server CPU = user+system CPU time from /proc/<pid>/stat (utime+stime) of the server's processes, "
    "read at the start and the end of the measured window: the bench's own Python process (the server "
    "runs in it: gateway, committer, tiering workers; the bench's own threads there only wait) and all "
    "its descendants (the Spark JVM, Spark's Python workers; with --master standalone the cluster's "
    "JVMs), plus the CPU of children those descendants reaped (cutime+cstime), except client "
    "processes (the bench process's Python children, i.e. multiprocessing's: writers, feeders, readers, "
    "also once exited and not yet reaped) and their descendants. The bench process's own cutime is not "
    "counted: the clients it joins are reaped into it. 'of which JIT': the same for the JVM's JIT compiler "
    "threads (/proc/<jvm>/task/*/stat named C1/C2 CompilerThre).")


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, own ticks utime+stime, reaped children's ticks cutime+cstime), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # After the ")": state ppid pgrp ... utime(12th) stime cutime cstime, counted from state = 0.
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")  # HotSpot's compiler threads, as Linux names them (15 chars)


def _jit_ticks(pid: int) -> int:
    """utime+stime of a JVM's JIT compiler threads (live ones: a thread that ended takes its share with it)."""
    ticks = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = text.split("(", 1)[1].rsplit(")", 1)[0]
        if name.startswith(JIT_THREADS):
            fields = text.rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks


def _comm(pid: int) -> str:
    """The process's name; kept for a zombie (an exited, not yet reaped child), whose cmdline is empty."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split("(", 1)[1].rsplit(")", 1)[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _tree(root: int) -> dict[int, list[int]]:
    """Children of every process under ``root`` (a scan of /proc: ppid links)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                children.setdefault(st[0], []).append(int(name))
    return children


@dataclasses.dataclass
class CpuReading:
    at: float  # time.monotonic()
    ticks: int  # counted CPU ticks of the server's processes (their own and what they reaped)
    own_ticks: int  # the server processes' own utime+stime only (what ``ps -o cputime`` shows)
    jit_ticks: int  # of ``ticks``: the JVMs' JIT compiler threads
    server_pids: list[int]
    client_pids: list[int]
    own_children_ticks: int  # the bench process's cutime+cstime (clients it reaped): not counted
    names: dict[int, str]  # pid → "name(parent pid)" of every process above, as read

    def describe(self, pids: list[int]) -> str:
        """``pid:name(parent)`` of each (for a cross-check's output)."""
        return " ".join(f"{pid}:{self.names.get(pid, '?')}" for pid in pids)


class ServerCpu:
    """CPU seconds of the server's process tree, clients excluded (see :data:`SERVER_CPU_HOW`)."""

    def __init__(self, root: int | None = None):
        self.root = root if root is not None else os.getpid()
        self.tick = os.sysconf("SC_CLK_TCK")
        self.clients: set[int] = set()  # once a client, always one (an exited one is a zombie: no cmdline)

    def _is_client(self, pid: int, parent: int) -> bool:
        if pid in self.clients:
            return True
        # The bench's clients are multiprocessing's children of the bench process: Python processes. The
        # server starts no Python process of its own (its children are the JVM, and javac at its start);
        # Spark's Python workers are the JVM's children, not the bench process's.
        if any(m in _cmdline(pid) for m in CLIENT_MARKERS) or (
                parent == self.root and _comm(pid).startswith("python")):
            self.clients.add(pid)
            return True
        return False

    def read(self) -> CpuReading:
        children = _tree(self.root)
        root = _stat(self.root)
        assert root is not None
        ticks, own, server, clients = root[1], root[1], [self.root], []
        names = {self.root: f"{_comm(self.root)}({root[0]})"}
        jit = 0
        stack = [(pid, self.root) for pid in children.get(self.root, [])]
        while stack:
            pid, parent = stack.pop()
            names[pid] = f"{_comm(pid)}({parent})"
            if self._is_client(pid, parent):
                clients.append(pid)  # and not its descendants either
                continue
            st = _stat(pid)
            if st is None:
                continue
            server.append(pid)
            ticks += st[1] + st[2]
            own += st[1]
            if _comm(pid) == "java":
                jit += _jit_ticks(pid)
            stack.extend((child, pid) for child in children.get(pid, []))
        return CpuReading(time.monotonic(), ticks, own, jit, sorted(server), sorted(clients), root[2], names)

    def seconds(self, start: CpuReading, end: CpuReading) -> float:
        return (end.ticks - start.ticks) / self.tick

    def jit_seconds(self, start: CpuReading, end: CpuReading) -> float:
        """Of :meth:`seconds`: the JVMs' JIT compiler threads (a young server's JIT takes a core for minutes)."""
        return (end.jit_ticks - start.jit_ticks) / self.tick


def ps_cpu_seconds(pids: list[int]) -> dict[int, int]:
    """``ps -o cputime`` ([DD-]HH:MM:SS of utime+stime, whole seconds) of the live ones of ``pids``:
    a cross-check of the /proc reading, by another tool."""
    import subprocess

    if not pids:
        return {}
    out = subprocess.run(["ps", "-o", "pid=,cputime=", "-p", ",".join(map(str, pids))], capture_output=True,
                         text=True).stdout
    seconds = {}
    for line in out.splitlines():
        if not line.strip():
            continue
        pid, text = line.split()
        days, _, hms = text.rpartition("-")
        h, m, sec = (int(x) for x in hms.split(":"))
        seconds[int(pid)] = (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + sec
    return seconds


def counter_total(counter) -> float:
    """The sum over all labels of a prometheus_client counter of this process (the in-process server's)."""
    return sum(s.value for metric in counter.collect() for s in metric.samples if s.name.endswith("_total"))


def acknowledged_inserts() -> float:
    """INSERTs into stream tables the in-process server has acknowledged so far (its metric)."""
    from tierlake.server.observability import metrics

    return counter_total(metrics.INGEST_ACKNOWLEDGED)


def gateway_statements() -> float:
    """Statements the in-process server's gateway has answered so far (any kind and outcome)."""
    from tierlake.server.observability import metrics

    return counter_total(metrics.GATEWAY_STATEMENTS)


def _burn(seconds: float, done: str | None = None) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    if done:
        open(done, "w").close()


def _self_check() -> None:
    """``python -m bench.common``: :class:`ServerCpu` on a synthetic tree. A stand-in for the JVM (bash, a
    child of this process) runs two Python burners one after the other (its children: they exit and it reaps
    them, so their CPU reaches the tree only through its cutime); a multiprocessing client (a Python child of
    this process) burns 3 s and exits, and is still unreaped (a zombie) at the reading. The burners report their
    own CPU; the client's must not be counted."""
    import multiprocessing
    import subprocess
    import sys

    scratch = tempfile.mkdtemp(prefix="tierlake-cpu-check-")
    burner = os.path.join(scratch, "burn.py")
    with open(burner, "w") as f:
        f.write("import sys, time\nend = time.process_time() + float(sys.argv[1])\n"
                "while time.process_time() < end: pass\nopen(sys.argv[2], 'w').write(str(time.process_time()))\n")
    cpu = ServerCpu()
    client = multiprocessing.get_context("spawn").Process(target=_burn, args=(3.0, os.path.join(scratch, "c")))
    stand_in = subprocess.Popen(["bash", "-c", f"sleep 1; {sys.executable} {burner} 1.5 {scratch}/b1; "
                                 f"{sys.executable} {burner} 1.0 {scratch}/b2; touch {scratch}/b; sleep 300"])
    try:
        r0 = cpu.read()
        client.start()
        while not all(os.path.exists(os.path.join(scratch, x)) for x in ("b", "c")):
            time.sleep(0.2)
        time.sleep(1)
        r1 = cpu.read()
        state = open(f"/proc/{client.pid}/stat").read().rsplit(")", 1)[1].split()[0]
        burners = sum(float(open(os.path.join(scratch, x)).read()) for x in ("b1", "b2"))
        print(f"server: {r1.describe(r1.server_pids)}; clients: {r1.describe(r1.client_pids)} "
              f"(client {client.pid} in state {state}: Z is exited, not reaped)")
        print(f"server CPU {cpu.seconds(r0, r1):.2f} s; the burners' own CPU {burners:.2f} s (their process_time; "
              f"plus their interpreters' start-up)")
        client.join()
        r2 = cpu.read()
        print(f"client joined: this process's cutime +{(r2.own_children_ticks - r0.own_children_ticks) / cpu.tick:.2f}"
              f" s (its 3 s and start-up: not counted); server CPU up to now {cpu.seconds(r0, r2):.2f} s")
    finally:
        import shutil

        stand_in.kill()
        stand_in.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    _self_check()
