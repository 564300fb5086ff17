"""One server process on this machine: start it, wait for it to serve, signal it, reap it.

The process manager every local cluster of real processes uses (tservers.py's
`ProcessCluster`, masters.py's `MasterProcesses`, and through them ``revivify cluster``, the
demo, the nemesis, the integration tests and the benchmarks). A `ServerProcess` is one
server's directory, log file and port, and the process it runs now, if any. ``kill_process``
is SIGKILL (a crash: the process loses everything it had not fsync'd), ``stop_process`` is
SIGTERM (a clean stop: the process traces ``server_stop``).

Two ways to run a process (``spawn``):

* attached (tests, the demo, benchmarks): its stdout is a pipe the "listening" line is read
  from; it dies with the cluster object that started it (its ``close``);
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
import socket
import subprocess
import time
from collections.abc import Sequence

import attrs

from .pids import pid_alive, process_start_ticks

_POLL_SECONDS = 0.05


class ProcessError(Exception):
    pass


def free_port() -> int:
    """A port free right now (another process may take it before us: rare on a test box)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free right now. Each is held bound until all are picked: a
    port picked and released is free again, and the kernel may hand it out to the next
    pick (two masters of one cluster once got the same port, and the second refused to
    start: "--masters lists an address twice")."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


@attrs.frozen
class Placement:
    """Where a server process runs on the network: the address it binds and advertises, and
    the network namespace (``ip netns``) it runs in; "" is the spawner's own. The nemesis
    runs each server in a namespace of its own (impl/testing/nemesis/netns.py) so that a
    partition can drop its packets in the kernel; everything else uses the default.
    ``wildcard``: bind every interface (``--rpc-bind 0.0.0.0:PORT``) and advertise ``host``
    (``--rpc-advertised-address HOST:PORT``), as on a machine with several interfaces
    (tests/hosts); the port must then be fixed (not 0)."""

    host: str = "127.0.0.1"
    netns: str = ""
    wildcard: bool = False


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
    web_port: int = 0  # --webserver-bind's port (0: any free one; the web line says which)
    web: str = ""  # HOST:PORT of its status pages, from its web line ("" off or not yet)
    # Attached: stdout read past the last line taken (the web line follows the listening
    # line, possibly in the same read).
    pending: bytes = b""
    host: str = "127.0.0.1"  # the address it binds and advertises (Placement)
    netns: str = ""  # the network namespace it runs in ("": the spawner's; Placement)
    wildcard: bool = False  # binds 0.0.0.0 and advertises host (Placement)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def place(self, placement: Placement) -> None:
        self.host, self.netns = placement.host, placement.netns
        self.wildcard = placement.wildcard

    def rpc_flags(self) -> list[str]:
        """``--rpc-bind`` (and ``--rpc-advertised-address``) for the server's command line:
        its address, or a wildcard bind advertising it."""
        if not self.wildcard:
            return ["--rpc-bind", self.address]
        if self.port == 0:
            raise ProcessError(f"{os.path.basename(self.fs_root)}: a wildcard bind needs a "
                               f"fixed port to advertise")
        return ["--rpc-bind", f"0.0.0.0:{self.port}", "--rpc-advertised-address",
                self.address]

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
    if s.netns:
        # `ip netns exec` enters the namespace and execs the command: the pid is the
        # server's own, so signals and the pid + start time identity are unchanged.
        cmd = ["ip", "netns", "exec", s.netns, *cmd]
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
    s.pending, s.web = b"", ""


def await_listening(s: ServerProcess, pattern: re.Pattern[str], what: str,
                    timeout: float) -> re.Match[str]:
    """The "listening" line of the process just spawned, matched by `pattern` (its first
    stdout line, then the next one, when attached; any line of the log past the spawn when
    detached)."""
    if s.proc is not None and s.proc.stdout is not None:
        line = _read_line(s, s.proc.stdout, what, timeout)
        found = pattern.search(line)
        if found is None:
            raise ProcessError(f"{what}: unexpected line {line!r}")
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


def web_bind(s: ServerProcess, args: Sequence[str]) -> list[str]:
    """The ``--webserver-bind`` flag for ``s``: its web port on its own host (127.0.0.1, or
    its namespace's address: Placement), unless ``args`` name one already (theirs wins).
    Never the default port (8050/8051): several servers run on this machine."""
    if any(a == "--webserver-bind" or a.startswith("--webserver-bind=") for a in args):
        return []
    return ["--webserver-bind", f"{s.host}:{s.web_port}"]


WEB_LINE = re.compile(r"revivify (?:master|tserver) [0-9a-f]+ web (?:on http://(\S+)|off)")


def await_web(s: ServerProcess, what: str, timeout: float) -> str:
    """The web line that follows the "listening" line: the pages' HOST:PORT, or "" when
    the server serves none (``web off``). Sets ``s.web``."""
    found = await_listening(s, WEB_LINE, f"{what} (its web line)", timeout)
    s.web = found.group(1) or ""
    return s.web


def _read_line(s: ServerProcess, stream: object, what: str, timeout: float) -> str:
    """The next line of the process's stdout (what follows it is kept in ``s.pending``)."""
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
    buf = s.pending
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
    line, s.pending = buf.split(b"\n", 1)
    return line.decode(errors="replace")


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


__all__ = [
    "Placement",
    "ProcessError",
    "ServerProcess",
    "await_listening",
    "await_web",
    "free_port",
    "kill_process",
    "pid_alive",
    "process_start_ticks",
    "reap",
    "signal_process",
    "spawn",
    "stop_process",
    "web_bind",
]
