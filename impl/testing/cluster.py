"""An in-process cluster of tablet servers: SimDisk, MemoryNetwork, trio's MockClock.

The same server code as the real processes (impl/tserver/server.py), with every source of
nondeterminism injected: each server gets its own crash-simulating disk (``SimDisk``), all
share one in-memory network (``MemoryNetwork``: partitions, drops, delays, kills), disk calls
run inline (``threads=False``) so a run under ``trio.testing.MockClock(autojump_threshold=0)``
is deterministic for a seed, and traces go to a real directory for the checker.

    async with open_cluster(trace_dir, 3, seed=1) as cluster:
        await cluster.start_all()
        await cluster.create_tablet("t1")
        leader = await cluster.wait_for_leader("t1")
        await cluster.call(leader, api.DATA_WRITE, api.Write(...), api.Written)
        await cluster.crash(leader)      # unsynced writes vanish, no server_stop traced
        await cluster.start(leader)      # restart from the crashed disk

``crash(i)`` models a machine crash: the disk keeps exactly what was fsync'd (a stronger
fault than a process kill), the process writes no further trace event, and its connections
break. ``stop(i)`` is a clean stop (``server_stop`` traced).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import attrs
import msgspec
import trio

from revivify.impl.consensus.messages import Peer
from revivify.impl.rpc import RpcError, open_rpc_client
from revivify.impl.tserver import api
from revivify.impl.tserver.server import ServerOptions, TabletServer, open_tserver

from .memnet import MemoryNetwork
from .simdisk import SimDisk

T = TypeVar("T", bound=msgspec.Struct)

PORT = 7050


@attrs.define
class SimServer:
    index: int
    host: str
    disk: SimDisk
    server: TabletServer | None = None
    scope: trio.CancelScope | None = None
    done: trio.Event | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{PORT}"

    @property
    def uuid(self) -> str:
        assert self.server is not None, f"server {self.index} is not running"
        return self.server.uuid


class Cluster:
    def __init__(self, nursery: trio.Nursery, trace_dir: str, n: int, *, seed: int,
                 options: dict[str, object] | None = None) -> None:
        self.nursery = nursery
        self.trace_dir = trace_dir
        self.rng = random.Random(seed)
        self.net = MemoryNetwork(random.Random(seed))
        self.options = options or {}
        self.servers = [SimServer(i, f"ts-{i}", SimDisk()) for i in range(n)]
        self.uuids: dict[int, str] = {}

    async def start_all(self) -> None:
        for i in range(len(self.servers)):
            await self.start(i)

    async def start(self, i: int, *,
                    startup_gate: Callable[[str], Awaitable[None]] | None = None) -> TabletServer:
        """Start (or restart, from its disk) server ``i``; ``startup_gate(tablet_id)`` is
        awaited before each tablet's startup (the server already serves meanwhile)."""
        await self._reap(i)
        s = self.servers[i]
        if s.server is not None:
            raise RuntimeError(f"server {i} is already running")
        opts = ServerOptions(fs_root=f"/srv/{s.host}", rpc_host=s.host, rpc_port=PORT,
                             trace_dir=self.trace_dir, threads=False,
                             seed=self.rng.randrange(1 << 30), **self.options)  # type: ignore[arg-type]
        started: trio.Event = trio.Event()
        s.done = trio.Event()
        s.scope = trio.CancelScope()

        async def run() -> None:
            assert s.scope is not None and s.done is not None
            try:
                with s.scope:
                    async with open_tserver(opts, disk=s.disk, network=self.net.host(s.host),
                                            startup_gate=startup_gate) as server:
                        s.server = server
                        self.uuids[i] = server.uuid
                        started.set()
                        await trio.sleep_forever()
            finally:
                s.server = None
                s.done.set()

        self.nursery.start_soon(run)
        await started.wait()
        assert s.server is not None
        return s.server

    async def stop(self, i: int) -> None:
        """A clean stop (the server traces server_stop)."""
        s = self.servers[i]
        if s.scope is None or s.done is None:
            return
        s.scope.cancel()
        await s.done.wait()
        s.scope = None

    async def crash(self, i: int) -> None:
        """A machine crash: the disk keeps exactly what was fsync'd; nothing more is traced."""
        self.crash_now(i)
        await self._reap(i)

    def crash_now(self, i: int) -> bool:
        """The synchronous half of ``crash``, callable from inside the server itself (a
        trace hook: the crash falls right after a chosen durable step). The disk image is
        taken now; the server's tasks, cancelled, may still write to the old disk until they
        finish, which no longer matters. ``start`` (or ``crash``) waits for them. False if
        the server was not running (or is already crashing)."""
        s = self.servers[i]
        if s.server is None or s.scope is None or s.scope.cancel_called:
            return False
        crashed = s.disk.crash()
        s.server.tracer.silence()
        s.scope.cancel()
        s.disk = crashed  # the running server keeps its own reference to the old disk
        return True

    async def _reap(self, i: int) -> None:
        """Wait for a crashed (cancelled) server's tasks to finish."""
        s = self.servers[i]
        if s.scope is not None and s.scope.cancel_called and s.done is not None:
            await s.done.wait()
            s.scope = None

    def address(self, i: int) -> str:
        return self.servers[i].address

    def peers(self, members: list[int] | None = None) -> list[Peer]:
        members = list(range(len(self.servers))) if members is None else members
        return [Peer(self.uuids[i], self.servers[i].address) for i in members]

    async def call(self, i: int, method: str, body: msgspec.Struct, response: type[T]) -> T:
        s = self.servers[i]
        async with open_rpc_client(s.host, PORT, self.uuids[i], "cluster-client",
                                   app_errors=api.APP_ERRORS,
                                   network=self.net.host("client")) as client:
            return await client.call(method, body, response)

    async def create_tablet(self, tablet_id: str, members: list[int] | None = None) -> None:
        members = list(range(len(self.servers))) if members is None else members
        peers = self.peers(members)
        for i in members:
            await self.call(i, api.ADMIN_CREATE_TABLET, api.CreateTablet(tablet_id, peers),
                            api.TabletCreated)

    async def state(self, i: int, tablet_id: str) -> api.ReplicaInfo:
        return await self.call(i, api.ADMIN_CONSENSUS_STATE, api.TabletRef(tablet_id),
                               api.ReplicaInfo)

    async def wait_for_leader(self, tablet_id: str, among: list[int] | None = None) -> int:
        """Poll (in simulated time) until a running replica leads; returns its index."""
        while True:
            best: tuple[int, int] | None = None
            for i in among if among is not None else range(len(self.servers)):
                if self.servers[i].server is None:
                    continue
                try:
                    info = await self.state(i, tablet_id)
                except RpcError:
                    continue
                if info.role == "LEADER" and (best is None or info.term > best[0]):
                    best = (info.term, i)
            if best is not None:
                return best[1]
            await trio.sleep(0.05)


@contextlib.asynccontextmanager
async def open_cluster(trace_dir: str, n: int, *, seed: int = 0,
                       options: dict[str, object] | None = None) -> AsyncIterator[Cluster]:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, trace_dir, n, seed=seed, options=options)
        try:
            yield cluster
        finally:
            for i in range(n):
                await cluster.stop(i)


__all__ = ["PORT", "Cluster", "SimServer", "open_cluster"]
