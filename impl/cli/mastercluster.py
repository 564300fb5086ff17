"""A local cluster of real master and tablet-server processes on 127.0.0.1.

The sibling of localcluster.py's ProcessCluster (which it uses for the tablet servers):
``MasterCluster(root, masters=3, tservers=3)`` picks a free port for each master up front
(every master must be given every master's address), starts ALL master processes before
reading their "listening" lines (a master creates the catalog only once every master
answers, so one-by-one start-and-wait would be fine too, but this is faster), then starts
the tablet servers with ``--masters``. Masters live in ``root/m-<i>``, tablet servers in
``root/ts-<i>``, all traces in ``root/traces``. ``kill_master`` is SIGKILL,
``stop_master`` SIGTERM; ``close`` kills whatever still runs. Every wait has a deadline.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType

from .localcluster import (
    ProcessCluster,
    ProcessError,
    ServerProcess,
    kill_process,
    stop_process,
)

_LISTENING = re.compile(r"revivify master ([0-9a-f]+) listening on (\S+)")


def free_port() -> int:
    """A port free right now (another process may take it before us: rare on a test box)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class MasterCluster:
    def __init__(self, root: str, masters: int = 3, tservers: int = 3, *,
                 master_args: Sequence[str] = (), tserver_args: Sequence[str] = (),
                 python: str = sys.executable, start_timeout: float = 30.0) -> None:
        self.root = root
        self.trace_dir = os.path.join(root, "traces")
        os.makedirs(self.trace_dir, exist_ok=True)
        self.python = python
        self.start_timeout = start_timeout
        self.master_args = list(master_args)
        self.masters = [
            ServerProcess(i, os.path.join(root, f"m-{i}"), self.trace_dir,
                          os.path.join(root, f"m-{i}.log"), port=free_port())
            for i in range(masters)]
        self.tservers = ProcessCluster(
            root, tservers, python=python, start_timeout=start_timeout,
            args=["--masters", self.master_list, *tserver_args])
        # ProcessCluster reads lines with its own helper; reuse it for the masters.
        self._reader = self.tservers

    def __enter__(self) -> MasterCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def master_addresses(self) -> list[str]:
        return [m.address for m in self.masters]

    @property
    def master_list(self) -> str:
        return ",".join(self.master_addresses)

    def start_all(self) -> None:
        for i in range(len(self.masters)):
            self._spawn_master(i)
        for i in range(len(self.masters)):
            self._await_master(i)
        self.tservers.start_all()

    def start_master(self, i: int) -> ServerProcess:
        self._spawn_master(i)
        return self._await_master(i)

    def _spawn_master(self, i: int) -> None:
        m = self.masters[i]
        if m.running:
            raise ProcessError(f"master {i} is already running")
        cmd = [self.python, "-m", "revivify.impl.master.main", "--fs-root", m.fs_root,
               "--rpc-bind", m.address, "--trace-dir", m.trace_dir, *self.master_args]
        if len(self.masters) > 1:
            cmd += ["--masters", self.master_list]
        log = open(m.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        try:
            m.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                      start_new_session=True)
        finally:
            log.close()

    def _await_master(self, i: int) -> ServerProcess:
        m = self.masters[i]
        assert m.proc is not None and m.proc.stdout is not None
        line = self._reader._read_line(m, m.proc.stdout)
        found = _LISTENING.search(line)
        if found is None:
            raise ProcessError(f"master {i}: unexpected first line {line!r}")
        m.uuid = found.group(1)
        return m

    def kill_master(self, i: int) -> None:
        kill_process(self.masters[i])

    def stop_master(self, i: int, timeout: float = 30.0) -> int:
        return stop_process(self.masters[i], f"master {i}", timeout)

    def stop_all(self) -> None:
        """A clean stop of everything (SIGTERM): tablet servers first, then masters."""
        for i in range(len(self.tservers.servers)):
            self.tservers.stop(i)
        for i in range(len(self.masters)):
            self.stop_master(i)

    def close(self) -> None:
        self.tservers.close()
        for m in self.masters:
            kill_process(m)


__all__ = ["MasterCluster", "free_port"]
