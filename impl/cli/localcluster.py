"""A local cluster of real tablet-server processes on 127.0.0.1 (the demo, integration tests,
benchmarks; later ``revivify cluster start``).

``ProcessCluster(root, n)`` starts ``n`` processes of ``python -m revivify.impl.tserver.main``,
each with its own directory ``root/ts-<i>``, all writing traces into ``root/traces``. The
first start binds port 0 and reads the chosen port from the process's "listening" line;
restarts reuse that port (peers know a server by its address). ``kill`` is SIGKILL (a
crash: the process loses everything it had not fsync'd), ``stop`` is SIGTERM (a clean stop:
the process traces ``server_stop``). ``close`` kills whatever still runs.

Nothing here waits forever: every wait has a deadline and raises ``ProcessError`` naming the
server and the tail of its stderr.
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

_LISTENING = re.compile(r"revivify tserver ([0-9a-f]+) listening on (\S+)")


class ProcessError(Exception):
    pass


@attrs.define
class ServerProcess:
    index: int
    fs_root: str
    trace_dir: str
    log_path: str
    port: int = 0
    uuid: str = ""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""


def reap(s: ServerProcess) -> None:
    """Forget a process that has exited (close its stdout pipe)."""
    if s.proc is not None:
        if s.proc.stdout is not None:
            s.proc.stdout.close()
        s.proc = None


def kill_process(s: ServerProcess) -> None:
    """SIGKILL to the process group (a crash), then wait and reap."""
    if s.proc is not None and s.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(s.proc.pid, signal.SIGKILL)
        s.proc.wait(timeout=30)
    reap(s)


def stop_process(s: ServerProcess, what: str, timeout: float = 30.0) -> int:
    """SIGTERM and wait (a clean stop); the exit code. One that does not stop in time is
    killed and named with its stderr's tail."""
    if s.proc is None:
        return 0
    if s.proc.poll() is None:
        s.proc.send_signal(signal.SIGTERM)
        try:
            s.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_process(s)
            raise ProcessError(f"{what} did not stop within {timeout}s; stderr:\n"
                               f"{s.stderr_tail()}") from None
    code = s.proc.returncode
    reap(s)
    return code


class ProcessCluster:
    def __init__(self, root: str, n: int, *, args: Sequence[str] = (),
                 python: str = sys.executable, start_timeout: float = 30.0) -> None:
        self.root = root
        self.trace_dir = os.path.join(root, "traces")
        self.args = list(args)
        self.python = python
        self.start_timeout = start_timeout
        os.makedirs(self.trace_dir, exist_ok=True)
        self.servers = [
            ServerProcess(i, os.path.join(root, f"ts-{i}"), self.trace_dir,
                          os.path.join(root, f"ts-{i}.log"))
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
            self.start(i)

    def start(self, i: int, extra: Sequence[str] = ()) -> ServerProcess:
        s = self.servers[i]
        if s.running:
            raise ProcessError(f"server {i} is already running")
        cmd = [self.python, "-m", "revivify.impl.tserver.main", "--fs-root", s.fs_root,
               "--rpc-bind", f"127.0.0.1:{s.port}", "--trace-dir", s.trace_dir,
               *self.args, *extra]
        log = open(s.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        try:
            s.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                      start_new_session=True)
        finally:
            log.close()
        assert s.proc.stdout is not None
        line = self._read_line(s, s.proc.stdout)
        m = _LISTENING.search(line)
        if m is None:
            raise ProcessError(f"server {i}: unexpected first line {line!r}")
        try:
            _, port = parse_address(m.group(2))
        except BadAddress as exc:
            raise ProcessError(f"server {i}: {exc} in its first line {line!r}") from None
        uuid = m.group(1)
        if s.uuid and s.uuid != uuid:
            s.uuid = uuid  # a wiped directory came back with a new identity
        s.uuid, s.port = uuid, port
        return s

    def _read_line(self, s: ServerProcess, stream: object) -> str:
        deadline = time.monotonic() + self.start_timeout
        sel = selectors.DefaultSelector()
        sel.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
        buf = b""
        try:
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0 or (s.proc is not None and s.proc.poll() is not None
                                 and not sel.select(0)):
                    raise ProcessError(
                        f"server {s.index} did not start (exit code "
                        f"{s.proc.poll() if s.proc else None}); stderr:\n{s.stderr_tail()}")
                if sel.select(min(left, 0.2)):
                    chunk = os.read(stream.fileno(), 4096)  # type: ignore[attr-defined]
                    if not chunk:
                        continue
                    buf += chunk
        finally:
            sel.close()
        return buf.split(b"\n", 1)[0].decode(errors="replace")

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


__all__ = ["ProcessCluster", "ProcessError", "ServerProcess"]
