"""A local cluster of real tablet-server processes on 127.0.0.1, without masters (the demo,
the integration tests, the nemesis, benchmarks; masters.py adds masters to one).

``ProcessCluster(root, n)`` starts ``n`` processes of ``python -m revivify.impl.servers.tserver``,
each with its own directory ``root/ts-<i>``, all writing traces into ``root/traces``. The
first start binds the port it was given (0: any) and reads the port from the process's
"listening" line; restarts reuse that port (peers know a server by its address). ``kill`` is
SIGKILL (a crash), ``stop`` is SIGTERM (a clean stop); ``close`` kills whatever still runs.
Each process is run by control.py (attached, or detached with ``detached=True``). Each serves
its status pages on ``--webserver-bind 127.0.0.1:<web port>`` (0, any free port, unless
``web_ports`` says; ``args`` with a ``--webserver-bind`` of their own win) and ``s.web`` is
the address its web line names.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from types import TracebackType

from revivify.impl.rpc.address import BadAddress, parse_address

from .control import (
    Placement,
    ProcessError,
    ServerProcess,
    await_listening,
    await_web,
    kill_process,
    spawn,
    stop_process,
    web_bind,
)

TSERVER_LISTENING = re.compile(r"revivify tserver ([0-9a-f]+) listening on (\S+)")


class ProcessCluster:
    """Tablet-server processes without masters (module docstring)."""

    def __init__(self, root: str, n: int, *, args: Sequence[str] = (),
                 python: str = sys.executable, start_timeout: float = 30.0,
                 detached: bool = False, ports: Sequence[int] = (),
                 web_ports: Sequence[int] = (),
                 placements: Sequence[Placement] = ()) -> None:
        self.root = root
        self.trace_dir = os.path.join(root, "traces")
        self.args = list(args)
        self.python = python
        self.start_timeout = start_timeout
        self.detached = detached
        os.makedirs(self.trace_dir, exist_ok=True)
        assert not ports or len(ports) == n, (ports, n)
        assert not web_ports or len(web_ports) == n, (web_ports, n)
        self.servers = [
            ServerProcess(i, os.path.join(root, f"ts-{i}"), self.trace_dir,
                          os.path.join(root, f"ts-{i}.log"), port=ports[i] if ports else 0,
                          web_port=web_ports[i] if web_ports else 0)
            for i in range(n)
        ]
        assert not placements or len(placements) == n, (placements, n)
        for s, placement in zip(self.servers, placements, strict=False):
            s.place(placement)

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
        cmd = [self.python, "-m", "revivify.impl.servers.tserver", "--fs-root", s.fs_root,
               *s.rpc_flags(), "--trace-dir", s.trace_dir,
               *web_bind(s, [*self.args, *extra]), *self.args, *extra]
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
        await_web(s, f"server {i}", self.start_timeout)
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


__all__ = ["TSERVER_LISTENING", "ProcessCluster"]
