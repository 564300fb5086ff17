"""A fake tablet server for the client and CLI tests: the real RPC interface, scripted state.

Imported as a top-level module (pytest's default import mode puts tests/client on sys.path;
tests/cli/test_admin_cli.py adds it). Every server of a FakeCluster serves the methods of
revivify.impl.tserver.api through a real revivify.impl.rpc Service, over TCP on 127.0.0.1
or a MemoryNetwork; what they answer comes from state the test controls:

* a tablet's truth lives in the cluster (FakeTablet: peers, leader, term, rows, the
  exactly-once client table, config index), so whichever server leads serves the same data;
  each server only says whether it hosts the tablet (``hosted``);
* a server that is not the leader answers data calls with NotLeader (with the leader's UUID
  and address as a hint unless ``tablet.hide_hints``) and ConsensusState with role FOLLOWER;
* ``server.fail_next[method]`` is a list of errors raised by the next calls of `method`,
  one per call; an entry ``("apply", error)`` applies the call first and then raises (a
  write whose answer is lost: OperationAborted after commit);
* ``server.after_next[method]`` is a list of functions, one run after each of the next
  calls of `method` was applied and before its answer is sent (e.g. a partition: the
  answer is lost);
* every call that reached a handler is appended to ``cluster.log`` as (server uuid, method,
  request), so tests can assert what was sent where, and in which order.
"""

from __future__ import annotations

import functools
import itertools
import random
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import msgspec
import trio

from revivify.impl.consensus.messages import ConfigChange, Peer
from revivify.impl.rpc import AppError, CallContext, RpcServer, Service, serve_rpc
from revivify.impl.testing import MemoryNetwork
from revivify.impl.tserver import api

Failure = AppError | tuple[str, AppError]


@attrs.define
class FakeTablet:
    tablet_id: str
    peers: list[Peer]
    leader: str | None
    term: int = 1
    index: int = 1
    config_index: int = 0
    rows: dict[bytes, bytes] = attrs.field(factory=dict)
    clients: dict[str, tuple[int, api.Written]] = attrs.field(factory=dict)
    hide_hints: bool = False

    def address_of(self, uuid: str | None) -> str | None:
        for peer in self.peers:
            if peer.uuid == uuid:
                return peer.address
        return None


@attrs.define(eq=False)
class FakeServer:
    cluster: FakeCluster
    uuid: str
    address: str = ""
    hosted: set[str] = attrs.field(factory=set)
    fail_next: dict[str, list[Failure]] = attrs.field(factory=dict)
    after_next: dict[str, list[Callable[[], None]]] = attrs.field(factory=dict)

    def service(self) -> Service:
        service = Service("fake-tserver")
        table: list[tuple[str, type[Any], type[Any], Callable[[Any], Awaitable[Any]]]] = [
            (api.ADMIN_STATUS, api.Empty, api.ServerStatus, self.status),
            (api.ADMIN_CREATE_TABLET, api.CreateTablet, api.TabletCreated, self.create),
            (api.ADMIN_CONSENSUS_STATE, api.TabletRef, api.ReplicaInfo, self.consensus_state),
            (api.ADMIN_STEP_DOWN, api.StepDown, api.Ack, self.step_down),
            (api.ADMIN_CHANGE_CONFIG, api.ChangeConfig, api.ConfigChanged,
             self.change_config),
            (api.DATA_WRITE, api.Write, api.Written, self.write),
            (api.DATA_READ, api.Read, api.ReadResult, self.read),
            (api.DATA_SCAN, api.Scan, api.ScanResult, self.scan),
        ]
        for method, request_type, response_type, handler in table:
            service.register(method, request_type, response_type,
                             self._wrap(method, handler))
        return service

    def _wrap(self, method: str, handler: Callable[[Any], Awaitable[Any]]
              ) -> Callable[[Any, CallContext], Awaitable[Any]]:
        async def run(request: Any, context: CallContext) -> Any:
            self.cluster.log.append((self.uuid, method, request))
            pending = self.fail_next.get(method)
            if pending:
                failure = pending.pop(0)
                if isinstance(failure, tuple):
                    await handler(request)
                    raise failure[1]
                raise failure
            result = await handler(request)
            hooks = self.after_next.get(method)
            if hooks:
                hooks.pop(0)()
            return result
        return run

    # ------------------------------------------------------------------ helpers

    def _tablet(self, tablet_id: str) -> FakeTablet:
        tablet = self.cluster.tablets.get(tablet_id)
        if tablet is None or tablet_id not in self.hosted:
            raise api.TabletNotFound(tablet_id)
        return tablet

    def _leading(self, tablet_id: str) -> FakeTablet:
        tablet = self._tablet(tablet_id)
        if tablet.leader != self.uuid:
            hint = None if tablet.hide_hints else tablet.leader
            raise api.NotLeader(hint, tablet.address_of(hint), tablet.term)
        return tablet

    def info(self, tablet: FakeTablet) -> api.ReplicaInfo:
        return api.ReplicaInfo(
            tablet_id=tablet.tablet_id, state="RUNNING", reason="",
            role="LEADER" if tablet.leader == self.uuid else "FOLLOWER",
            term=tablet.term, voted_for=tablet.leader,
            leader=None if tablet.hide_hints else tablet.leader,
            last_opid=(tablet.term, tablet.index), commit_index=tablet.index,
            applied_index=tablet.index, config_index=tablet.config_index,
            peers=list(tablet.peers),
            member_type=next((p.member_type for p in tablet.peers if p.uuid == self.uuid),
                             "NONE"))

    # ------------------------------------------------------------------ handlers

    async def status(self, request: api.Empty) -> api.ServerStatus:
        return api.ServerStatus(self.uuid, self.address,
                                [self.info(self.cluster.tablets[t]) for t in sorted(self.hosted)])

    async def create(self, request: api.CreateTablet) -> api.TabletCreated:
        if request.tablet_id in self.hosted:
            raise api.TabletAlreadyExists(request.tablet_id)
        if request.tablet_id not in self.cluster.tablets:
            self.cluster.tablets[request.tablet_id] = FakeTablet(
                request.tablet_id, list(request.peers), request.peers[0].uuid)
        self.hosted.add(request.tablet_id)
        return api.TabletCreated(request.tablet_id)

    async def consensus_state(self, request: api.TabletRef) -> api.ReplicaInfo:
        return self.info(self._tablet(request.tablet_id))

    async def step_down(self, request: api.StepDown) -> api.Ack:
        tablet = self._leading(request.tablet_id)
        voters = [p.uuid for p in tablet.peers if p.member_type == "VOTER"]
        if request.new_leader is not None:
            if request.new_leader not in voters:
                raise api.InvalidArgument(f"{request.new_leader} is not a voter")
            tablet.leader = request.new_leader
        else:
            others = [v for v in voters if v != self.uuid]
            tablet.leader = others[0] if others else self.uuid
        tablet.term += 1
        return api.Ack()

    async def change_config(self, request: api.ChangeConfig) -> api.ConfigChanged:
        tablet = self._leading(request.tablet_id)
        if request.cas_config_index != tablet.config_index:
            raise api.ConfigChangeRefused(
                "cas_mismatch", f"committed config is at {tablet.config_index}, not "
                f"{request.cas_config_index}", tablet.config_index)
        change: ConfigChange = request.change
        peers = [p for p in tablet.peers if p.uuid != change.peer.uuid]
        if change.kind == "ADD":
            if any(p.uuid == change.peer.uuid for p in tablet.peers):
                raise api.ConfigChangeRefused("already_member", change.peer.uuid,
                                              tablet.config_index)
            peers.append(change.peer)
        elif change.kind == "CHANGE_ROLE":
            old = next(p for p in tablet.peers if p.uuid == change.peer.uuid)
            peers.append(Peer(old.uuid, old.address, change.peer.member_type))
        tablet.peers = peers
        tablet.index += 1
        tablet.config_index = tablet.index
        return api.ConfigChanged(tablet.index)

    async def write(self, request: api.Write) -> api.Written:
        tablet = self._leading(request.tablet_id)
        last = tablet.clients.get(request.client_id)
        if last is not None and request.seq <= last[0]:
            if request.seq == last[0]:
                return msgspec.structs.replace(last[1], duplicate=True)
            return api.Written(tablet.index, 0, True)
        tablet.index += 1
        for op in request.ops:
            if op.kind == "put":
                tablet.rows[op.key] = op.value
            else:
                tablet.rows.pop(op.key, None)
        written = api.Written(tablet.index, len(request.ops), False)
        tablet.clients[request.client_id] = (request.seq, written)
        return written

    async def read(self, request: api.Read) -> api.ReadResult:
        tablet = self._leading(request.tablet_id)
        value = tablet.rows.get(request.key)
        return api.ReadResult(False) if value is None else api.ReadResult(True, value)

    async def scan(self, request: api.Scan) -> api.ScanResult:
        tablet = self._leading(request.tablet_id)
        keys = sorted(k for k in tablet.rows
                      if (request.start is None or k >= request.start)
                      and (request.end is None or k < request.end))
        page = keys[:request.limit]
        return api.ScanResult([(k, tablet.rows[k]) for k in page], len(keys) > len(page))


@attrs.define(eq=False)
class FakeCluster:
    servers: list[FakeServer] = attrs.field(factory=list)
    tablets: dict[str, FakeTablet] = attrs.field(factory=dict)
    log: list[tuple[str, str, Any]] = attrs.field(factory=list)
    rpc_servers: dict[str, RpcServer] = attrs.field(factory=dict)

    def add_server(self, uuid: str) -> FakeServer:
        server = FakeServer(self, uuid)
        self.servers.append(server)
        return server

    def server(self, uuid: str) -> FakeServer:
        return next(s for s in self.servers if s.uuid == uuid)

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.servers]

    def add_tablet(self, tablet_id: str, hosts: list[FakeServer] | None = None,
                   leader: int | None = 0) -> FakeTablet:
        """A tablet on `hosts` (all servers by default), led by hosts[leader]."""
        hosts = list(self.servers) if hosts is None else hosts
        tablet = FakeTablet(tablet_id, [Peer(s.uuid, s.address) for s in hosts],
                            None if leader is None else hosts[leader].uuid)
        self.tablets[tablet_id] = tablet
        for server in hosts:
            server.hosted.add(tablet_id)
        return tablet

    def calls(self, method: str) -> list[tuple[str, Any]]:
        return [(uuid, request) for uuid, m, request in self.log if m == method]


@asynccontextmanager
async def memory_cluster(net: MemoryNetwork, n: int = 3, port: int = 7050
                         ) -> AsyncIterator[FakeCluster]:
    """`n` fake servers "ts-1".."ts-n" on `net`, port `port`; cancelled at the end."""
    cluster = FakeCluster()
    async with trio.open_nursery() as nursery:
        for i in range(1, n + 1):
            server = cluster.add_server(f"uuid-{i}")
            server.address = f"ts-{i}:{port}"
            cluster.rpc_servers[server.uuid] = await nursery.start(functools.partial(
                serve_rpc, server.service(), server.uuid, f"ts-{i}", port,
                network=net.host(f"ts-{i}")))
        yield cluster
        nursery.cancel_scope.cancel()


async def serve_tcp_cluster(cluster: FakeCluster, n: int,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
    """Serve `n` fake servers over TCP on 127.0.0.1 (ephemeral ports) until cancelled."""
    async with trio.open_nursery() as nursery:
        for i in range(1, n + 1):
            server = cluster.add_server(f"uuid-{i}")
            rpc: RpcServer = await nursery.start(functools.partial(
                serve_rpc, server.service(), server.uuid, "127.0.0.1", 0))
            server.address = f"127.0.0.1:{rpc.port}"
            cluster.rpc_servers[server.uuid] = rpc
        task_status.started()


class ThreadedCluster:
    """A FakeCluster served over TCP by a trio loop in a thread (for the in-process CLI)."""

    def __init__(self, cluster: FakeCluster, token: trio.lowlevel.TrioToken,
                 cancel: trio.CancelScope) -> None:
        self.cluster = cluster
        self._token = token
        self._cancel = cancel

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` in the servers' trio thread (to change their state safely)."""
        return trio.from_thread.run_sync(fn, trio_token=self._token)

    def stop(self) -> None:
        trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)


@contextmanager
def threaded_cluster(n: int = 3) -> Iterator[ThreadedCluster]:
    cluster = FakeCluster()
    ready: list[ThreadedCluster] = []
    started = threading.Event()
    errors: list[BaseException] = []

    async def main() -> None:
        with trio.CancelScope() as cancel:
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_tcp_cluster, cluster, n)
                ready.append(ThreadedCluster(cluster, trio.lowlevel.current_trio_token(),
                                             cancel))
                started.set()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:
            errors.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=thread_main, daemon=True)
    thread.start()
    started.wait(30)
    if not ready:
        raise RuntimeError(f"fake cluster did not start: {errors!r}")
    try:
        yield ready[0]
    finally:
        ready[0].stop()
        thread.join(30)


def free_port() -> int:
    """A TCP port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def seeded(seed: int = 0) -> random.Random:
    return random.Random(seed)


_ids = itertools.count(1)


def tablet_id() -> str:
    return f"tablet-{next(_ids)}"
