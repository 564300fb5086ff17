"""Helpers for tests that run real tablet-server processes (impl/processes/tservers.py).

A small synchronous facade over the RPC layer: each call runs its own ``trio.run``, so a
test reads as a script (start, write, kill, check). Every wait is bounded by a deadline.
``assert_traces_clean`` runs the trace checker over the cluster's traces: every test that
runs servers ends with it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
import trio

from revivify.checker.local import check_paths
from revivify.impl.consensus.messages import Peer
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import ConnectionClosed, RpcError, WrongServerUuid, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.tablet.ops import RowOp
from revivify.impl.tserver import api

T = TypeVar("T", bound=msgspec.Struct)
R = TypeVar("R")

RETRYABLE = (api.NotLeader, api.OperationAborted, api.TabletNotRunning, ConnectionClosed)


def run(fn: Callable[[], Awaitable[R]], seconds: float = 60.0) -> R:
    async def main() -> R:
        with trio.fail_after(seconds):
            return await fn()
    return trio.run(main)


async def acall(address: str, uuid: str, method: str, body: msgspec.Struct,
                response: type[T]) -> T:
    host, port = parse_address(address)
    async with open_rpc_client(host, port, uuid, "test-client",
                               app_errors=api.APP_ERRORS) as client:
        return await client.call(method, body, response)


def call(address: str, uuid: str, method: str, body: msgspec.Struct, response: type[T],
         seconds: float = 30.0) -> T:
    return run(lambda: acall(address, uuid, method, body, response), seconds)


def discover_uuid(address: str) -> str:
    try:
        call(address, "", api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    except WrongServerUuid as exc:
        return exc.expected
    raise AssertionError("a request to the empty UUID was not refused")


def create_tablet(cluster: ProcessCluster, tablet_id: str,
                  members: Sequence[int] | None = None) -> list[Peer]:
    members = list(range(len(cluster.servers))) if members is None else list(members)
    peers = [Peer(cluster.servers[i].uuid, cluster.servers[i].address) for i in members]
    for i in members:
        s = cluster.servers[i]
        call(s.address, s.uuid, api.ADMIN_CREATE_TABLET, api.CreateTablet(tablet_id, peers),
             api.TabletCreated)
    return peers


def state(cluster: ProcessCluster, i: int, tablet_id: str) -> api.ReplicaInfo:
    s = cluster.servers[i]
    return call(s.address, s.uuid, api.ADMIN_CONSENSUS_STATE, api.TabletRef(tablet_id),
                api.ReplicaInfo)


def wait_for(predicate: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (RpcError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds}s waiting for {what} (last error: {last})")


def leader(cluster: ProcessCluster, tablet_id: str, seconds: float = 20.0,
           among: Sequence[int] | None = None) -> int:
    """The index of the server whose replica leads (in the highest term seen)."""
    def find() -> int | None:
        best: tuple[int, int] | None = None
        for i in among if among is not None else range(len(cluster.servers)):
            if not cluster.servers[i].running:
                continue
            try:
                info = state(cluster, i, tablet_id)
            except (RpcError, OSError):
                continue
            if info.role == "LEADER" and (best is None or info.term > best[0]):
                best = (info.term, i)
        return None if best is None else best[1] + 1
    return int(wait_for(find, seconds, f"a leader of {tablet_id}")) - 1


class Writer:
    """Writes through the current leader, retrying with the same (client_id, seq)."""

    def __init__(self, cluster: ProcessCluster, tablet_id: str, client_id: str) -> None:
        self.cluster = cluster
        self.tablet_id = tablet_id
        self.client_id = client_id
        self.seq = 0
        self.acked: dict[bytes, bytes | None] = {}

    async def write(self, ops: list[RowOp], seconds: float = 30.0) -> api.Written:
        seq = self.seq
        self.seq += 1
        req = api.Write(self.tablet_id, self.client_id, seq, ops)
        deadline = trio.current_time() + seconds
        backoff = 0.05
        last: BaseException | None = None
        while trio.current_time() < deadline:
            for s in self.cluster.servers:
                if not s.running:
                    continue
                try:
                    result = await acall(s.address, s.uuid, api.DATA_WRITE, req, api.Written)
                except (*RETRYABLE, RpcError, OSError) as exc:  # type: ignore[misc]
                    last = exc
                    continue
                for op in ops:
                    self.acked[op.key] = op.value if op.kind == "put" else None
                return result
            await trio.sleep(backoff)
            backoff = min(backoff * 2, 0.5)
        raise AssertionError(f"write {self.client_id}/{seq} not acknowledged in {seconds}s: "
                             f"{last}")


async def read_all(cluster: ProcessCluster, tablet_id: str, seconds: float = 30.0
                   ) -> dict[bytes, bytes]:
    """Every row, read linearizably from the leader (paging through the scan)."""
    deadline = trio.current_time() + seconds
    last: BaseException | None = None
    while trio.current_time() < deadline:
        for s in cluster.servers:
            if not s.running:
                continue
            try:
                rows: dict[bytes, bytes] = {}
                start: bytes | None = None
                while True:
                    page = await acall(s.address, s.uuid, api.DATA_SCAN,
                                       api.Scan(tablet_id, start, None, 5000), api.ScanResult)
                    rows.update(page.rows)
                    if not page.more:
                        return rows
                    start = page.rows[-1][0] + b"\0"
            except (*RETRYABLE, RpcError, OSError) as exc:  # type: ignore[misc]
                last = exc
        await trio.sleep(0.1)
    raise AssertionError(f"no scan of {tablet_id} succeeded in {seconds}s: {last}")


def assert_acked_readable(cluster: ProcessCluster, tablet_id: str,
                          acked: dict[bytes, bytes | None]) -> None:
    rows = run(lambda: read_all(cluster, tablet_id))
    missing = [k for k, v in acked.items() if v is not None and rows.get(k) != v]
    resurrected = [k for k, v in acked.items() if v is None and k in rows]
    assert not missing, f"{len(missing)} acknowledged rows lost, e.g. {missing[:3]}"
    assert not resurrected, f"deleted rows came back: {resurrected[:3]}"


def assert_traces_clean(cluster: ProcessCluster) -> None:
    report = check_paths([cluster.trace_dir])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert report.events > 0, "no trace events were written"
    assert not bad, "trace violations:\n" + "\n".join(
        f"{v.kind} {v.file}:{v.line} {v.message}" for v in bad[:10])
