"""A Spark standalone cluster on this machine's loopback interface, from the pyspark install.

``standalone_cluster()`` starts one master and N workers as processes (pyspark's
``bin/spark-class`` running ``org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker``; the pip package has no ``sbin/start-master.sh``), every one bound
to 127.0.0.1 on ports picked free (``spark.port.maxRetries=0``: a port taken in the meantime
fails the start instead of silently moving to the next port), with its log and the workers'
work directories (the executors' ``stdout``/``stderr``) in one directory. It waits until the
master's JSON UI reports every worker ALIVE, and stops the processes when the ``with`` block
ends, whatever ended it: SIGTERM to each process group (a worker's executors and their Python
workers included), SIGKILL after a grace period. On Linux the daemons also get SIGTERM if the
process that started them dies (``PR_SET_PDEATHSIG``), so a killed test run leaves no JVMs.

A failed start raises ``ClusterStartError`` with the tail of every daemon's log. Clients
(``revivify trace validate --engine spark --master spark://127.0.0.1:P``) find a
``spark-defaults.conf`` for the cluster in ``client_conf_dir`` (use it as ``SPARK_CONF_DIR``):
executor memory that fits a worker, ``spark.cores.max`` = the cluster's cores and
``spark.scheduler.minRegisteredResourcesRatio=1``, so a job starts only once every worker's
executor has registered (else the first executor could run every task of a small job alone).

Used by ``tests/trace/test_spark_standalone.py`` (``make check-spark-cluster``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import attrs

HOST = "127.0.0.1"
APP_NAME = "revivify-trace-validate"
# JVM flags for short-lived daemons, executors and drivers on a small machine: the C1 JIT
# only and the serial collector. Starting three JVMs at once on two cores takes about 9 s
# with them against 14 s without (most of the CPU went to the C2 compiler's threads).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message carries the daemons' log tails."""


def java_binary() -> str | None:
    """The ``java`` Spark's scripts would run (``$JAVA_HOME/bin/java``, else the PATH's), or
    ``None`` when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def spark_home() -> str:
    """``$SPARK_HOME`` when set, else the pyspark package's directory (it ships ``jars/`` and
    ``bin/spark-class``)."""
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * lines))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(cannot read {path}: {e})"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux ``prctl``)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@attrs.define
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: str
    webui_port: int
    work_dir: str | None = None

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"


@attrs.define
class StandaloneCluster:
    master_url: str
    master: Daemon
    workers: list[Daemon]
    log_dir: str
    client_conf_dir: str

    @property
    def webui_url(self) -> str:
        return self.master.webui_url

    def state(self) -> Any:
        """The master's JSON UI: workers, active and completed applications."""
        return get_json(f"{self.webui_url}/json/")

    def worker_state(self, worker: Daemon) -> Any:
        """A worker's JSON UI: its running and finished executors (``appid``, ``id``)."""
        return get_json(f"{worker.webui_url}/json/")

    def apps(self, name: str = APP_NAME) -> list[dict[str, Any]]:
        """The master's applications of that name, active and completed."""
        st = self.state()
        return [a for a in [*st.get("activeapps", []), *st.get("completedapps", [])]
                if a.get("name") == name]

    def wait_finished(self, app_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """The application's entry once the master lists it as completed."""
        deadline = time.monotonic() + timeout
        while True:
            for a in self.state().get("completedapps", []):
                if a.get("id") == app_id:
                    return dict(a)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{app_id} not completed after {timeout} s")
            time.sleep(0.2)

    def executors(self, app_id: str) -> dict[str, list[dict[str, Any]]]:
        """Each worker's executors of the application (running or finished), by worker."""
        out: dict[str, list[dict[str, Any]]] = {}
        for w in self.workers:
            st = self.worker_state(w)
            out[w.name] = [e for e in [*st.get("executors", []),
                                       *st.get("finishedexecutors", [])]
                           if e.get("appid") == app_id]
        return out

    def tasks_run(self, app_id: str) -> dict[str, int]:
        """Tasks each worker's executors ran for the application, counted from the
        executors' own logs (``Executor: Running task ... (TID n)`` in
        ``<work dir>/<app>/<executor>/stderr``)."""
        out: dict[str, int] = {}
        for w in self.workers:
            n = 0
            app_dir = os.path.join(w.work_dir or "", app_id)
            for ex in sorted(os.listdir(app_dir)) if os.path.isdir(app_dir) else []:
                with contextlib.suppress(OSError), open(
                        os.path.join(app_dir, ex, "stderr"), "rb") as f:
                    n += sum(1 for line in f if b"Executor: Running task " in line)
            out[w.name] = n
        return out

    def log_tails(self, lines: int = 40) -> str:
        parts = []
        for d in [self.master, *self.workers]:
            code = d.proc.poll()
            status = "running" if code is None else f"exited with {code}"
            parts.append(f"--- {d.name} (pid {d.proc.pid}, {status}), {d.log}:\n"
                         f"{tail(d.log, lines)}")
        return "\n".join(parts)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to every daemon's process group (workers first, then the master), then
        SIGKILL to whatever is left after ``grace`` seconds."""
        daemons = [*self.workers, self.master]
        for d in daemons:
            _signal_group(d.proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for d in daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.proc.wait(max(0.1, deadline - time.monotonic()))
        for d in daemons:
            # The group too: an executor (or its Python workers) may outlive its worker.
            _signal_group(d.proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.proc.wait(5)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the process group the daemon leads (it was started in a session of its own,
    so the group is it and its descendants)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _spawn(name: str, cmd: list[str], env: dict[str, str], log_dir: str,
           webui_port: int, work_dir: str | None = None) -> Daemon:
    log = os.path.join(log_dir, f"{name}.log")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh,
                                stderr=subprocess.STDOUT, env=env, cwd=log_dir,
                                start_new_session=True, preexec_fn=_die_with_parent)
    return Daemon(name, proc, log, webui_port, work_dir)


def _write_conf(path: str, props: dict[str, str]) -> None:
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "spark-defaults.conf"), "w") as f:
        f.writelines(f"{k} {v}\n" for k, v in props.items())


def start(workers: int = 2, cores: int = 1, memory: str = "512m",
          log_dir: str | None = None, timeout: float = 90.0,
          python: str | None = None) -> StandaloneCluster:
    """Start the master and ``workers`` workers (``cores`` cores and ``memory`` each) and
    wait until all are ALIVE; ``ClusterStartError`` (with the log tails) if they are not
    within ``timeout`` seconds or a daemon exits. ``python``: the Python workers'
    interpreter (``PYSPARK_PYTHON``; default this one)."""
    java = java_binary()
    if java is None:
        raise ClusterStartError("no Java runtime: java is not on PATH and JAVA_HOME is unset")
    home = spark_home()
    spark_class = os.path.join(home, "bin", "spark-class")
    if not os.access(spark_class, os.X_OK):
        raise ClusterStartError(f"{spark_class} is missing or not executable (SPARK_HOME "
                                f"{home})")
    log_dir = os.path.abspath(log_dir or tempfile.mkdtemp(prefix="revivify-spark-cluster-"))
    os.makedirs(log_dir, exist_ok=True)
    daemon_conf = os.path.join(log_dir, "daemon-conf")
    _write_conf(daemon_conf, {})  # no user spark-defaults.conf leaks into the daemons
    opts = "-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false"
    env = {**os.environ, "SPARK_HOME": home, "SPARK_CONF_DIR": daemon_conf,
           "SPARK_LOCAL_IP": HOST, "SPARK_LOCAL_HOSTNAME": HOST,
           "JAVA_HOME": os.environ.get("JAVA_HOME") or os.path.dirname(
               os.path.dirname(os.path.realpath(java))),
           "SPARK_DAEMON_MEMORY": "512m", "SPARK_MASTER_OPTS": opts,
           "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_DAEMON_JAVA_OPTS", QUICK_JVM),
           "SPARK_LAUNCHER_OPTS": os.environ.get("SPARK_LAUNCHER_OPTS", QUICK_JVM),
           "SPARK_WORKER_OPTS": opts, "SPARK_NO_DAEMONIZE": "1",
           "PYSPARK_PYTHON": python or sys.executable}
    port, ui = free_port(), free_port()
    master_url = f"spark://{HOST}:{port}"
    master = _spawn("master", [spark_class, "org.apache.spark.deploy.master.Master",
                               "--host", HOST, "--port", str(port),
                               "--webui-port", str(ui)], env, log_dir, ui)
    ws: list[Daemon] = []
    try:
        for i in range(1, workers + 1):
            wport, wui = free_port(), free_port()
            work = os.path.join(log_dir, f"worker-{i}-work")
            os.makedirs(work, exist_ok=True)
            ws.append(_spawn(f"worker-{i}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                "--port", str(wport), "--webui-port", str(wui), "--cores", str(cores),
                "--memory", memory, "--work-dir", work, master_url], env, log_dir, wui,
                work))
    except BaseException:
        StandaloneCluster(master_url, master, ws, log_dir, "").stop()
        raise
    client_conf = os.path.join(log_dir, "client-conf")
    _write_conf(client_conf, {
        "spark.master": master_url,
        "spark.executor.memory": memory,
        "spark.cores.max": str(workers * cores),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.executor.extraJavaOptions": QUICK_JVM,
        "spark.driver.extraJavaOptions": QUICK_JVM,
    })
    cluster = StandaloneCluster(master_url, master, ws, log_dir, client_conf)
    try:
        _wait_alive(cluster, workers, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_alive(cluster: StandaloneCluster, workers: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = "no answer from the master's JSON UI"
    while True:
        for d in [cluster.master, *cluster.workers]:
            if d.proc.poll() is not None:
                raise ClusterStartError(
                    f"{d.name} exited with {d.proc.returncode} while the cluster started\n"
                    f"{cluster.log_tails()}")
        try:
            st = cluster.state()
            alive = [w for w in st.get("workers", []) if w.get("state") == "ALIVE"]
            seen = f"{len(alive)}/{workers} workers ALIVE, master {st.get('status')}"
            if st.get("status") == "ALIVE" and len(alive) >= workers:
                return
        except (OSError, ValueError, urllib.error.URLError) as e:
            seen = f"master's JSON UI: {type(e).__name__}: {e}"
        if time.monotonic() > deadline:
            raise ClusterStartError(f"the cluster did not come up in {timeout:.0f} s ({seen})"
                                    f"\n{cluster.log_tails()}")
        time.sleep(0.25)


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "512m",
                       log_dir: str | None = None, timeout: float = 90.0,
                       python: str | None = None) -> Iterator[StandaloneCluster]:
    """``start`` ... ``stop``, the stop also when the body raises."""
    cluster = start(workers, cores, memory, log_dir, timeout, python)
    try:
        yield cluster
    finally:
        cluster.stop()


def listening(pid: int) -> list[tuple[str, int]] | None:
    """The TCP addresses (ip, port) the process listens on, from ``/proc`` (``None`` where
    there is no ``/proc``). IPv4-mapped IPv6 addresses are given as IPv4."""
    import ipaddress

    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    except OSError:
        return None
    out: list[tuple[str, int]] = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) < 10 or cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            addr_hex, port_hex = cols[1].split(":")
            raw = bytes.fromhex(addr_hex)
            if sys.byteorder == "little":  # /proc prints each 32-bit word in host order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(raw)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            out.append((str(ip), int(port_hex, 16)))
    return out
