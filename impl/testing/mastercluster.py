"""An in-process cluster of masters and tablet servers: SimDisk, MemoryNetwork, MockClock.

The masters (impl/master/server.py) and the tablet servers (through ``cluster.Cluster``)
run the same code as the real processes, in one trio run, on one in-memory network: each
process has its own crash-simulating disk, disk calls run inline, so under
``trio.testing.MockClock(autojump_threshold=0)`` a minute of failovers takes a moment and
a machine crash (``crash_master``) keeps exactly what was fsync'd. Traces go to a real
directory for the checker.

    async with open_master_cluster(trace_dir, masters=3, tservers=3) as c:
        await c.start_all()
        leader = await c.ready_leader()
        await c.call_master(leader, api.MASTER_CREATE_TABLE, request, api.TableCreatedReply)
        await c.crash_master(leader)
        await c.ready_leader()          # a new one, ready

Masters are hosts ``m-0``, ``m-1``...; tablet servers ``ts-0``...; the test's client is
``client``. ``net`` is the shared MemoryNetwork: partition, heal, kill, delays.

`SimMasterCluster` is the in-process twin of impl/processes/masters.py's `MasterProcesses`
(the same servers as real processes on 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from typing import TypeVar

import attrs
import msgspec
import trio

from revivify.impl.master import api
from revivify.impl.master.server import MasterOptions, MasterServer, open_master
from revivify.impl.rpc import RpcError, open_rpc_client

from .cluster import PORT, Cluster
from .simdisk import SimDisk

T = TypeVar("T", bound=msgspec.Struct)


@attrs.define
class SimMaster:
    index: int
    host: str
    disk: SimDisk
    master: MasterServer | None = None
    scope: trio.CancelScope | None = None
    done: trio.Event | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{PORT}"


class SimMasterCluster:
    """Masters and tablet servers in one trio run on the test doubles (module docstring)."""

    def __init__(self, nursery: trio.Nursery, trace_dir: str, masters: int, tservers: int,
                 *, seed: int, master_options: dict[str, object] | None = None,
                 tserver_options: dict[str, object] | None = None) -> None:
        self.nursery = nursery
        self.trace_dir = trace_dir
        self.rng = random.Random(seed)
        self.masters = [SimMaster(i, f"m-{i}", SimDisk()) for i in range(masters)]
        self.addresses = tuple(m.address for m in self.masters)
        self.master_options = master_options or {}
        self.tservers = Cluster(nursery, trace_dir, tservers, seed=seed, options={
            "masters": self.addresses, "heartbeat_seconds": 0.5, **(tserver_options or {})})
        self.net = self.tservers.net

    async def start_all(self) -> None:
        # Every master before any waits: a master creates the catalog only once every
        # master answers.
        for i in range(len(self.masters)):
            await self.start_master(i)
        await self.tservers.start_all()

    async def start_master(self, i: int) -> MasterServer:
        """Start (or restart, from its disk) master ``i``; it serves when this returns."""
        await self._reap_master(i)
        m = self.masters[i]
        if m.master is not None:
            raise RuntimeError(f"master {i} is already running")
        options = MasterOptions(fs_root=f"/srv/{m.host}", rpc_host=m.host, rpc_port=PORT,
                                masters=self.addresses, trace_dir=self.trace_dir,
                                threads=False, seed=self.rng.randrange(1 << 30),
                                **self.master_options)  # type: ignore[arg-type]
        return await self.serve_master(m, options)

    async def serve_master(self, m: SimMaster, options: MasterOptions) -> MasterServer:
        """Run ``m`` with ``options`` in the cluster's nursery, on its disk and host; it
        serves when this returns (start_master's options, or a test's own: a joiner)."""
        started = trio.Event()
        m.done = trio.Event()
        m.scope = trio.CancelScope()

        async def run() -> None:
            assert m.scope is not None and m.done is not None
            try:
                with m.scope:
                    async with open_master(options, disk=m.disk,
                                           network=self.net.host(m.host)) as master:
                        m.master = master
                        started.set()
                        await trio.sleep_forever()
            finally:
                m.master = None
                m.done.set()

        self.nursery.start_soon(run)
        await started.wait()
        assert m.master is not None
        return m.master

    async def stop_master(self, i: int) -> None:
        """A clean stop (server_stop traced)."""
        m = self.masters[i]
        if m.scope is None or m.done is None:
            return
        m.scope.cancel()
        await m.done.wait()
        m.scope = None

    async def crash_master(self, i: int) -> None:
        """A machine crash: the disk keeps what was fsync'd, nothing more is traced, the
        network sees the process die."""
        self.crash_master_now(i)
        await self._reap_master(i)

    def crash_master_now(self, i: int) -> bool:
        """The synchronous half of ``crash_master``, callable from inside the master itself
        (a trace hook: the crash falls right after a chosen durable step). The disk image
        is taken now; the master's tasks, cancelled, may still write to the old disk until
        they finish, which no longer matters (``start_master`` waits for them). False if
        the master was not running (or is already crashing)."""
        m = self.masters[i]
        if m.master is None or m.scope is None or m.scope.cancel_called:
            return False
        crashed = m.disk.crash()
        m.master.server.tracer.silence()
        self.net.kill(m.host)
        m.scope.cancel()
        m.disk = crashed  # the running master keeps its own reference to the old disk
        return True

    async def _reap_master(self, i: int) -> None:
        """Wait for a crashed (cancelled) master's tasks to finish."""
        m = self.masters[i]
        if m.scope is not None and m.scope.cancel_called and m.done is not None:
            await m.done.wait()
            m.scope = None

    async def stop_all(self) -> None:
        for i in range(len(self.tservers.servers)):
            await self.tservers.stop(i)
        for i in range(len(self.masters)):
            await self.stop_master(i)

    def running(self) -> list[int]:
        return [m.index for m in self.masters if m.master is not None]

    async def call_master(self, i: int, method: str, body: msgspec.Struct,
                          response: type[T]) -> T:
        """One call to master ``i`` (its UUID learnt from the master itself)."""
        m = self.masters[i]
        assert m.master is not None, f"master {i} is not running"
        async with open_rpc_client(m.host, PORT, m.master.uuid, "sim-client",
                                   app_errors=api.APP_ERRORS,
                                   network=self.net.host("client")) as client:
            return await client.call(method, body, response)

    async def ready_leader(self, among: list[int] | None = None) -> int:
        """Poll (in simulated time) until a running master is the ready leader."""
        while True:
            for i in among if among is not None else self.running():
                if self.masters[i].master is None:
                    continue
                try:
                    status = await self.call_master(i, api.MASTER_STATUS, api.Empty(),
                                                    api.MasterStatus)
                except (RpcError, OSError):
                    continue
                if status.ready:
                    return i
            await trio.sleep(0.05)


@contextlib.asynccontextmanager
async def open_master_cluster(trace_dir: str, masters: int = 3, tservers: int = 3, *,
                              seed: int = 0, master_options: dict[str, object] | None = None,
                              tserver_options: dict[str, object] | None = None,
                              ) -> AsyncIterator[SimMasterCluster]:
    async with trio.open_nursery() as nursery:
        cluster = SimMasterCluster(nursery, trace_dir, masters, tservers, seed=seed,
                                master_options=master_options,
                                tserver_options=tserver_options)
        try:
            yield cluster
        finally:
            await cluster.stop_all()


__all__ = ["SimMaster", "SimMasterCluster", "open_master_cluster"]
