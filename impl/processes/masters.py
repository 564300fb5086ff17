"""A local cluster of real master and tablet-server processes on 127.0.0.1.

The sibling of tservers.py's ProcessCluster (which it uses for the tablet servers; each
process is run by control.py: spawn, await_listening, kill_process, stop_process):
``MasterProcesses(root, masters=3, tservers=3)`` picks a free port for each master up front
(every master must be given every master's address), starts ALL the processes, masters and
tablet servers (with ``--masters``), before reading their "listening" lines (a master
creates the catalog only once every master answers, and a tablet server retries its
heartbeats until the masters answer, so nothing waits on anything else), and then waits for
each line. Masters live in ``root/m-<i>``, tablet servers in ``root/ts-<i>``, all traces in
``root/traces``. ``kill_master`` is SIGKILL, ``stop_master`` SIGTERM; ``close`` kills
whatever still runs. Every wait has a deadline.

``detached=True`` (``revivify cluster start``, impl/cli/cluster.py) runs every process in a
session of its own with its output in its log file, so the cluster outlives the command;
``master_ports`` and ``tserver_ports`` bring a cluster back on the ports it had, and
``master_web_ports`` and ``tserver_web_ports`` its pages on theirs (default 0: any free port;
each server's ``web`` is the address its web line names).

Not to be confused with impl/testing/mastercluster.py's `SimMasterCluster`: the same
servers in ONE process on the test doubles (SimDisk, MemoryNetwork, MockClock).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from types import TracebackType

from .control import (
    Placement,
    ServerProcess,
    await_listening,
    await_web,
    free_ports,
    kill_process,
    spawn,
    stop_process,
    web_bind,
)
from .tservers import ProcessCluster

MASTER_LISTENING = re.compile(r"revivify master ([0-9a-f]+) listening on (\S+)")


class MasterProcesses:
    """Masters and tablet servers as real processes (module docstring)."""

    def __init__(self, root: str, masters: int = 3, tservers: int = 3, *,
                 master_args: Sequence[str] = (), tserver_args: Sequence[str] = (),
                 python: str = sys.executable, start_timeout: float = 30.0,
                 detached: bool = False, master_ports: Sequence[int] = (),
                 tserver_ports: Sequence[int] = (), master_web_ports: Sequence[int] = (),
                 tserver_web_ports: Sequence[int] = (),
                 master_placements: Sequence[Placement] = (),
                 tserver_placements: Sequence[Placement] = ()) -> None:
        self.root = root
        self.trace_dir = os.path.join(root, "traces")
        os.makedirs(self.trace_dir, exist_ok=True)
        self.python = python
        self.detached = detached
        self.master_args = list(master_args)
        self.tserver_args = list(tserver_args)
        assert not master_ports or len(master_ports) == masters, (master_ports, masters)
        ports = list(master_ports) or free_ports(masters)  # distinct: picked together
        self.masters = [
            ServerProcess(i, os.path.join(root, f"m-{i}"), self.trace_dir,
                          os.path.join(root, f"m-{i}.log"),
                          port=ports[i],
                          web_port=master_web_ports[i] if master_web_ports else 0)
            for i in range(masters)]
        assert not master_placements or len(master_placements) == masters
        for m, placement in zip(self.masters, master_placements, strict=False):
            m.place(placement)
        self.tservers = ProcessCluster(
            root, tservers, python=python, start_timeout=start_timeout,
            args=["--masters", self.master_list, *tserver_args], detached=detached,
            ports=tserver_ports, web_ports=tserver_web_ports, placements=tserver_placements)

    @property
    def start_timeout(self) -> float:
        """How long a start waits for a server's lines: masters and tablet servers alike
        (`cluster restart --timeout` sets it for whichever it restarts)."""
        return self.tservers.start_timeout

    @start_timeout.setter
    def start_timeout(self, seconds: float) -> None:
        self.tservers.start_timeout = seconds

    def __enter__(self) -> MasterProcesses:
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

    def spawn_all(self) -> None:
        """Start every process that is not running, masters first; no waiting."""
        for i, m in enumerate(self.masters):
            if not m.running:
                self.spawn_master(i)
        for i, s in enumerate(self.tservers.servers):
            if not s.running:
                self.tservers.spawn(i)

    def await_all(self) -> None:
        """Every process's "listening" line (after spawn_all)."""
        for i in range(len(self.masters)):
            self.await_master(i)
        for i in range(len(self.tservers.servers)):
            self.tservers.await_started(i)

    def start_all(self) -> None:
        self.spawn_all()
        self.await_all()

    def start_master(self, i: int) -> ServerProcess:
        self.spawn_master(i)
        return self.await_master(i)

    def spawn_master(self, i: int) -> None:
        m = self.masters[i]
        cmd = [self.python, "-m", "revivify.impl.servers.master", "--fs-root", m.fs_root,
               *m.rpc_flags(), "--trace-dir", m.trace_dir,
               *web_bind(m, self.master_args), *self.master_args]
        if len(self.masters) > 1:
            cmd += ["--masters", self.master_list]
        spawn(m, cmd, detached=self.detached)

    def await_master(self, i: int) -> ServerProcess:
        m = self.masters[i]
        found = await_listening(m, MASTER_LISTENING, f"master {i}", self.start_timeout)
        m.uuid = found.group(1)
        await_web(m, f"master {i}", self.start_timeout)
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


__all__ = ["MASTER_LISTENING", "MasterProcesses"]
