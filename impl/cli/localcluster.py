"""A local cluster of real tablet-server processes on 127.0.0.1 (the demo, integration tests,
benchmarks, and, through mastercluster.py, ``revivify cluster``), and the one process manager
every local cluster uses.

``ProcessCluster(root, n)`` starts ``n`` processes of ``python -m revivify.impl.tserver.main``,
each with its own directory ``root/ts-<i>``, all writing traces into ``root/traces``. The
first start binds the port it was given (0: any) and reads the port from the process's
"listening" line; restarts reuse that port (peers know a server by its address). ``kill`` is
SIGKILL (a crash: the process loses everything it had not fsync'd), ``stop`` is SIGTERM (a
clean stop: the process traces ``server_stop``). ``close`` kills whatever still runs.

Two ways to run a process (``spawn``):

* attached (tests, the demo, benchmarks): its stdout is a pipe the "listening" line is read
  from; it dies with the cluster object (``close``);
* detached (``revivify cluster start``): a new session, stdin from /dev/null, stdout and
  stderr appended to its log file (the "listening" line is looked for there, past the
  offset the log had at the spawn), so it outlives the command that started it. A later
  command knows it only by its pid and the pid's start time (``ServerProcess.pid`` and
  ``start_ticks``, kept in ``cluster.json``): the pair names one process even after the pid
  is reused, and a zombie counts as dead.

Nothing here waits forever: every wait has a deadline and raises ``ProcessError`` naming the
server and the tail of its log.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import TracebackType

import attrs

from revivify.impl.rpc.address import BadAddress, parse_address

TSERVER_LISTENING = re.compile(r"revivify tserver ([0-9a-f]+) listening on (\S+)")

_POLL_SECONDS = 0.05


class ProcessError(Exception):
    pass


# ---------------------------------------------------------------------------- one process


def process_start_ticks(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot, /proc/PID/stat field 22), or
    None if there is no such process or it is a zombie (it has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # "pid (comm) state ...": comm may hold spaces and parentheses; it ends at the last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def pid_alive(pid: int, start_ticks: int) -> bool:
    """Whether the process that had `pid` and started at `start_ticks` still runs (not a
    zombie, not another process that got the pid since)."""
    if pid <= 0:
        return False
    if not os.path.isdir("/proc"):  # not Linux: no start time to compare, signal 0 only
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # No start time recorded: the process had already exited when it was spawned (a zombie
    # at once), so whatever has the pid now is another process.
    ticks = process_start_ticks(pid)
    return ticks is not None and start_ticks != 0 and ticks == start_ticks


@attrs.define
class ServerProcess:
    index: int
    fs_root: str
    trace_dir: str
    log_path: str
    port: int = 0
    uuid: str = ""
    proc: subprocess.Popen[bytes] | None = None
    pid: int = 0  # the last process started (kept after it exits, for cluster.json)
    start_ticks: int = 0  # its start time (process_start_ticks): pid + this = one process
    log_offset: int = 0  # detached: the log's size at the spawn (where its output begins)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid > 0 and pid_alive(self.pid, self.start_ticks)

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""


def spawn(s: ServerProcess, cmd: Sequence[str], *, detached: bool = False) -> None:
    """Start `cmd` as the process of `s` in a session of its own (so a SIGKILL to its group
    reaches it alone, and a Ctrl-C at the terminal does not)."""
    if s.running:
        raise ProcessError(f"{os.path.basename(s.fs_root)} is already running (pid {s.pid})")
    os.makedirs(os.path.dirname(s.log_path) or ".", exist_ok=True)
    log = open(s.log_path, "ab")  # noqa: SIM115 (the child keeps it)
    try:
        s.log_offset = log.tell()
        if detached:
            s.proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=log, start_new_session=True, close_fds=True)
        else:
            s.proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=log,
                                      start_new_session=True)
    finally:
        log.close()
    s.pid = s.proc.pid
    s.start_ticks = process_start_ticks(s.pid) or 0


def await_listening(s: ServerProcess, pattern: re.Pattern[str], what: str,
                    timeout: float) -> re.Match[str]:
    """The "listening" line of the process just spawned, matched by `pattern` (its first
    stdout line when attached; any line of the log past the spawn when detached)."""
    if s.proc is not None and s.proc.stdout is not None:
        line = _read_first_line(s, s.proc.stdout, what, timeout)
        found = pattern.search(line)
        if found is None:
            raise ProcessError(f"{what}: unexpected first line {line!r}")
        return found
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(s.log_path, "rb") as f:
                f.seek(s.log_offset)
                text = f.read().decode(errors="replace")
        except OSError:
            text = ""
        found = pattern.search(text)
        if found is not None:
            return found
        if not s.running:
            code = s.proc.poll() if s.proc is not None else None
            raise ProcessError(f"{what} did not start (exit code {code}); log "
                               f"{s.log_path}:\n{s.stderr_tail()}")
        if time.monotonic() > deadline:
            raise ProcessError(f"{what} did not start within {timeout:g}s; log "
                               f"{s.log_path}:\n{s.stderr_tail()}")
        time.sleep(_POLL_SECONDS)


def _read_first_line(s: ServerProcess, stream: object, what: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
    buf = b""
    try:
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or (s.proc is not None and s.proc.poll() is not None
                             and not sel.select(0)):
                raise ProcessError(
                    f"{what} did not start (exit code "
                    f"{s.proc.poll() if s.proc else None}); stderr:\n{s.stderr_tail()}")
            if sel.select(min(left, 0.2)):
                chunk = os.read(stream.fileno(), 4096)  # type: ignore[attr-defined]
                if not chunk:
                    continue
                buf += chunk
    finally:
        sel.close()
    return buf.split(b"\n", 1)[0].decode(errors="replace")


def reap(s: ServerProcess) -> None:
    """Forget a process that has exited (close its stdout pipe; collect a child's exit
    status so it does not linger as a zombie)."""
    if s.proc is not None:
        if s.proc.stdout is not None:
            s.proc.stdout.close()
        s.proc.poll()
        s.proc = None
    elif s.pid > 0:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(s.pid, os.WNOHANG)  # our child after all (a CLI run in-process)


def signal_process(s: ServerProcess, signum: int) -> bool:
    """Send `signum` to the process group of `s` if its process runs; whether it did."""
    if not s.running:
        return False
    pid = s.proc.pid if s.proc is not None else s.pid
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # not a group leader we may signal: the process alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return True


def _wait_gone(s: ServerProcess, timeout: float) -> bool:
    """Wait until the process of `s` has exited; whether it did within `timeout`."""
    if s.proc is not None:
        try:
            s.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout
    while s.running:
        reap(s)  # a zombie child of ours: collect it
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_SECONDS)
    return True


def kill_process(s: ServerProcess, timeout: float = 30.0) -> None:
    """SIGKILL to the process group (a crash), then wait and reap."""
    if signal_process(s, signal.SIGKILL) and not _wait_gone(s, timeout):
        raise ProcessError(f"pid {s.pid} did not die within {timeout:g}s of SIGKILL")
    reap(s)


def stop_process(s: ServerProcess, what: str, timeout: float = 30.0) -> int:
    """SIGTERM and wait (a clean stop); the exit code (0 for a detached process, whose code
    is its parent's to collect). One that does not stop in time is killed and named with
    its log's tail."""
    if s.proc is None and not s.running:
        return 0
    if signal_process(s, signal.SIGTERM) and not _wait_gone(s, timeout):
        kill_process(s)
        raise ProcessError(f"{what} did not stop within {timeout:g}s; log:\n"
                           f"{s.stderr_tail()}") from None
    code = 0 if s.proc is None else s.proc.returncode
    reap(s)
    return code


# ---------------------------------------------------------------------------- tservers


class ProcessCluster:
    def __init__(self, root: str, n: int, *, args: Sequence[str] = (),
                 python: str = sys.executable, start_timeout: float = 30.0,
                 detached: bool = False, ports: Sequence[int] = ()) -> None:
        self.root = root
        self.trace_dir = os.path.join(root, "traces")
        self.args = list(args)
        self.python = python
        self.start_timeout = start_timeout
        self.detached = detached
        os.makedirs(self.trace_dir, exist_ok=True)
        assert not ports or len(ports) == n, (ports, n)
        self.servers = [
            ServerProcess(i, os.path.join(root, f"ts-{i}"), self.trace_dir,
                          os.path.join(root, f"ts-{i}.log"), port=ports[i] if ports else 0)
            for i in range(n)
        ]

    def __enter__(self) -> ProcessCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.servers]

    def start_all(self) -> None:
        for i in range(len(self.servers)):
            self.spawn(i)
        for i in range(len(self.servers)):
            self.await_started(i)

    def start(self, i: int, extra: Sequence[str] = ()) -> ServerProcess:
        self.spawn(i, extra)
        return self.await_started(i)

    def spawn(self, i: int, extra: Sequence[str] = ()) -> None:
        """Start server `i`'s process (``await_started`` waits for it to serve)."""
        s = self.servers[i]
        if s.running:
            raise ProcessError(f"server {i} is already running")
        cmd = [self.python, "-m", "revivify.impl.tserver.main", "--fs-root", s.fs_root,
               "--rpc-bind", f"127.0.0.1:{s.port}", "--trace-dir", s.trace_dir,
               *self.args, *extra]
        spawn(s, cmd, detached=self.detached)

    def await_started(self, i: int) -> ServerProcess:
        """Server `i`'s "listening" line: its UUID and port."""
        s = self.servers[i]
        m = await_listening(s, TSERVER_LISTENING, f"server {i}", self.start_timeout)
        try:
            _, port = parse_address(m.group(2))
        except BadAddress as exc:
            raise ProcessError(f"server {i}: {exc} in its line {m.group(0)!r}") from None
        # A wiped directory comes back with a new identity: the line is the truth.
        s.uuid, s.port = m.group(1), port
        return s

    def kill(self, i: int) -> None:
        """SIGKILL: a crash."""
        kill_process(self.servers[i])

    def stop(self, i: int, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean stop. Returns the exit code."""
        return stop_process(self.servers[i], f"server {i}", timeout)

    def restart(self, i: int) -> ServerProcess:
        self.stop(i)
        return self.start(i)

    def close(self) -> None:
        for s in self.servers:
            kill_process(s)


__all__ = [
    "TSERVER_LISTENING",
    "ProcessCluster",
    "ProcessError",
    "ServerProcess",
    "await_listening",
    "kill_process",
    "pid_alive",
    "process_start_ticks",
    "reap",
    "signal_process",
    "spawn",
    "stop_process",
]
