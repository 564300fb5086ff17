"""In-process scenarios that look for a seeded bug (the runner's first detector).

Each scenario runs tablet servers in one process (impl/testing/cluster.py: SimDisk,
MemoryNetwork, MockClock) through writes, leader crashes, tombstones, tablet copies,
machine crashes at chosen durable steps and restarts; then every trace is replayed by the
checker (``check_paths``) and every acknowledged write is read back. A scenario returns its
findings: the checker's violation kinds (warnings excepted), ``LostWrite``, ``StaleRead``,
``Hang`` (nothing answered within the virtual-time budget) or ``Error:<type>`` (the
scenario could not go on, e.g. a replica that never came back). Without a mutant every
scenario finds nothing (the runner checks that first, and test_impl_mutants.py too).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import trio
import trio.testing

from revivify.checker.local import check_paths
from revivify.impl.consensus.messages import ChangeKind, ConfigChange, Peer
from revivify.impl.rpc import RpcError
from revivify.impl.tablet.ops import RowOp
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api

# Virtual seconds a scenario may take before it counts as hung.
BUDGET = 200.0


class Found(Exception):
    """A scenario saw the bug's effect directly (a lost write, a stale read)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@attrs.frozen
class Outcome:
    findings: tuple[str, ...]  # kinds, most specific first; () when nothing was seen
    detail: str = ""


# ------------------------------------------------------------------------------ helpers


async def write(cluster: Cluster, tablet: str, seq: int, key: bytes, value: bytes) -> None:
    """Write through whichever server leads, retrying with the same (client, seq)."""
    req = api.Write(tablet, "c", seq, [RowOp("put", key, value)])
    while True:
        for i, s in enumerate(cluster.servers):
            if s.server is None:
                continue
            try:
                await cluster.call(i, api.DATA_WRITE, req, api.Written)
                return
            except (api.NotLeader, api.OperationAborted, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)


async def read(cluster: Cluster, tablet: str, key: bytes) -> bytes | None:
    while True:
        for i, s in enumerate(cluster.servers):
            if s.server is None:
                continue
            try:
                r = await cluster.call(i, api.DATA_READ, api.Read(tablet, key), api.ReadResult)
                return r.value if r.found else None
            except (api.NotLeader, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)


async def write_many(cluster: Cluster, acked: dict[bytes, bytes], start: int, n: int) -> None:
    for seq in range(start, start + n):
        key = b"k%03d" % seq
        await write(cluster, "t1", seq, key, b"v" + key)
        acked[key] = b"v" + key


async def check_reads(cluster: Cluster, acked: dict[bytes, bytes]) -> None:
    for key, value in acked.items():
        got = await read(cluster, "t1", key)
        if got != value:
            raise Found("LostWrite", f"{key!r} acknowledged as {value!r}, read {got!r}")


async def replica_state(cluster: Cluster, i: int) -> str:
    status = await cluster.call(i, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    return next((r.state for r in status.replicas if r.tablet_id == "t1"), "")


async def until_state(cluster: Cluster, i: int, wanted: str) -> None:
    while True:
        try:
            if await replica_state(cluster, i) == wanted:
                return
        except RpcError:
            pass
        await trio.sleep(0.05)


async def no_failed_replica(cluster: Cluster) -> None:
    """No disk fault is injected here, so a replica that startup finds FAILED (a file it
    made durable is missing or damaged) is a bug. Called a (virtual) second after restarts,
    when startup has classified every tablet."""
    await trio.sleep(1)
    for i, s in enumerate(cluster.servers):
        if s.server is None:
            continue
        status = await cluster.call(i, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
        for r in status.replicas:
            if r.state == "FAILED":
                raise Found("ReplicaFailed", f"server {i} {r.tablet_id}: {r.reason}")


def crash_after(cluster: Cluster, i: int, event: str) -> trio.Event:
    """Arm a machine crash of server ``i`` right after it traces ``event`` (the durable
    step is done, nothing after it is): the returned event is set once it is down."""
    s = cluster.servers[i]
    assert s.server is not None
    tracer = s.server.tracer
    orig = tracer.event
    down = trio.Event()
    fired = False

    def traced(name: str, *args: object, **kwargs: object) -> int:
        nonlocal fired
        lamport: int = orig(name, *args, **kwargs)  # type: ignore[arg-type]
        if name == event and not fired:
            fired = True
            crashed = s.disk.crash()  # the disk as it is now: fsync'd state only
            tracer.silence()
            assert s.scope is not None and s.done is not None
            s.scope.cancel()
            done = s.done

            async def finish() -> None:
                await done.wait()
                s.scope = None
                s.disk = crashed
                down.set()
            cluster.nursery.start_soon(finish)
        return lamport
    tracer.event = traced  # type: ignore[method-assign,assignment]
    return down


async def setup(cluster: Cluster, acked: dict[bytes, bytes], n: int = 20) -> int:
    await cluster.start_all()
    await cluster.create_tablet("t1")
    lead = await cluster.wait_for_leader("t1")
    await write_many(cluster, acked, 0, n)
    return lead


# ------------------------------------------------------------------------------ scenarios


async def crash_restart(cluster: Cluster) -> None:
    """Writes, the leader's machine crashes, more writes, it restarts; then every machine
    crashes at once and restarts: every acknowledged write is read back."""
    acked: dict[bytes, bytes] = {}
    lead = await setup(cluster, acked, 30)
    await cluster.crash(lead)
    await cluster.wait_for_leader("t1", among=[i for i in range(3) if i != lead])
    await write_many(cluster, acked, 30, 10)
    await cluster.start(lead)
    await no_failed_replica(cluster)
    await check_reads(cluster, acked)
    for i in range(3):
        await cluster.crash(i)
    for i in range(3):
        await cluster.start(i)
    await no_failed_replica(cluster)
    await cluster.wait_for_leader("t1")
    await check_reads(cluster, acked)


async def partitioned_leader(cluster: Cluster) -> None:
    """The leader is cut off from its peers (not from the client): a write sent to it must
    not be acknowledged (it cannot commit); a new leader takes another write; the old leader
    must not answer a read with the old value; after healing, every acknowledged write is
    there."""
    acked: dict[bytes, bytes] = {}
    await cluster.start_all()
    await cluster.create_tablet("t1")
    lead = await cluster.wait_for_leader("t1")
    await write(cluster, "t1", 0, b"a", b"1")
    acked[b"a"] = b"1"
    others = [cluster.servers[i].host for i in range(3) if i != lead]
    cluster.net.partition([cluster.servers[lead].host], others)
    with trio.move_on_after(1):
        try:
            await cluster.call(lead, api.DATA_WRITE, api.Write(
                "t1", "c", 1, [RowOp("put", b"z", b"9")]), api.Written)
            acked[b"z"] = b"9"  # acknowledged: it must survive
        except (api.NotLeader, api.OperationAborted, api.TabletNotRunning, RpcError):
            pass
    new = await cluster.wait_for_leader("t1", among=[i for i in range(3) if i != lead])
    await cluster.call(new, api.DATA_WRITE, api.Write("t1", "c2", 0, [RowOp("put", b"a", b"2")]),
                       api.Written)
    acked[b"a"] = b"2"
    with trio.move_on_after(2):
        try:
            r = await cluster.call(lead, api.DATA_READ, api.Read("t1", b"a"), api.ReadResult)
        except (api.NotLeader, api.TabletNotRunning, RpcError):
            pass
        else:
            if r.value != b"2":
                raise Found("StaleRead", f"the cut-off leader answered {r.value!r}, not b'2'")
    cluster.net.heal()
    await check_reads(cluster, acked)


async def copy_after_leader_change(cluster: Cluster) -> None:
    """A follower misses a leader change (cut off while leadership moves), is tombstoned,
    and is re-created by the new leader: its cmeta merge meets a remote term above its own
    (or its own term without a vote). Then it is needed for a majority."""
    acked: dict[bytes, bytes] = {}
    lead = await setup(cluster, acked, 10)
    f, g = (lead + 1) % 3, (lead + 2) % 3
    cluster.net.partition([cluster.servers[f].host],
                          [cluster.servers[lead].host, cluster.servers[g].host])
    await cluster.call(lead, api.ADMIN_STEP_DOWN, api.StepDown("t1", cluster.uuids[g]),
                       api.Ack)
    while await cluster.wait_for_leader("t1", among=[lead, g]) != g:
        await trio.sleep(0.1)
    await write_many(cluster, acked, 10, 5)
    await cluster.call(f, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
    cluster.net.heal()
    await until_state(cluster, f, "RUNNING")
    await cluster.crash(g)
    await cluster.wait_for_leader("t1", among=[lead, f])
    await check_reads(cluster, acked)
    await cluster.start(g)


async def stale_copy_request(cluster: Cluster) -> None:
    """A deposed leader's StartTabletCopy (its term below the tombstone's last logged term)
    reaches a tombstoned follower: it must be refused (STALE_TERM). The follower is cut off
    from its peers meanwhile, so the current leader's own copy does not race it."""
    acked: dict[bytes, bytes] = {}
    lead = await setup(cluster, acked, 5)
    f, g = (lead + 1) % 3, (lead + 2) % 3
    old_term = (await cluster.state(lead, "t1")).term
    await cluster.call(lead, api.ADMIN_STEP_DOWN, api.StepDown("t1", cluster.uuids[g]),
                       api.Ack)
    while await cluster.wait_for_leader("t1") != g:
        await trio.sleep(0.1)
    await write_many(cluster, acked, 5, 5)
    new_term = (await cluster.state(g, "t1")).term
    while (await cluster.state(f, "t1")).last_opid[0] < new_term:
        await trio.sleep(0.05)
    cluster.net.partition([cluster.servers[f].host],
                          [cluster.servers[lead].host, cluster.servers[g].host])
    await cluster.call(f, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
    with contextlib.suppress(api.CopyRefused, RpcError):
        await cluster.call(f, api.ADMIN_START_TABLET_COPY, api.StartTabletCopy(
            "t1", cluster.uuids[lead], old_term, cluster.uuids[lead], cluster.address(lead),
            "DELETED"), api.Ack)
    cluster.net.heal()
    await until_state(cluster, f, "RUNNING")
    await check_reads(cluster, acked)


async def _tombstone_with_crash(cluster: Cluster, event: str) -> None:
    """A follower is tombstoned and its machine crashes right after ``event`` (a deletion
    step, or a step of the copy by which its leader then re-creates it); it restarts, is
    copied back, and is then needed for a majority."""
    acked: dict[bytes, bytes] = {}
    lead = await setup(cluster, acked)
    f = (lead + 1) % 3
    if event.startswith("copy_"):
        down = crash_after(cluster, f, event)
        await cluster.call(f, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
    else:
        down = crash_after(cluster, f, event)
        with trio.CancelScope() as scope:
            cluster.nursery.start_soon(_cancel_when, down, scope)
            with contextlib.suppress(RpcError):  # its server crashed under the call
                await cluster.call(f, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
    await down.wait()
    await cluster.start(f)
    await no_failed_replica(cluster)
    await until_state(cluster, f, "RUNNING")
    await write_many(cluster, acked, 20, 5)
    await cluster.crash(lead)  # the re-created replica is needed for a majority
    await cluster.wait_for_leader("t1", among=[i for i in range(3) if i != lead])
    await check_reads(cluster, acked)
    await cluster.start(lead)


async def _cancel_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def crash_in_delete(event: str) -> Callable[[Cluster], Awaitable[None]]:
    async def scenario(cluster: Cluster) -> None:
        await _tombstone_with_crash(cluster, event)
    scenario.__name__ = f"crash_after_{event}"
    return scenario


async def tombstone_vote(cluster: Cluster) -> None:
    """A tombstone must not help elect a candidate whose log is behind its last OpId: g is
    down while writes commit on the leader and f; f is tombstoned, the leader crashes, g
    comes back and campaigns; then the old leader comes back too and every acknowledged
    write must still be there."""
    acked: dict[bytes, bytes] = {}
    lead = await setup(cluster, acked, 5)
    f, g = (lead + 1) % 3, (lead + 2) % 3
    await cluster.crash(g)
    await write_many(cluster, acked, 5, 10)
    await cluster.call(f, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
    await cluster.crash(lead)  # at once: before it can re-create f by a copy
    await cluster.start(g)
    await trio.sleep(5)
    await cluster.start(lead)
    await cluster.wait_for_leader("t1")
    await check_reads(cluster, acked)


async def late_master_create(cluster: Cluster) -> None:
    """A master's CreateTablet delivered after the DeleteTablet DELETED of the same replica
    (an attempt that timed out, or from a deposed leader master): the servers must refuse
    it (TabletDeleted); re-created, the replica is back at term 0 after voting in term 1."""
    await cluster.start_all()
    peers = cluster.peers()
    create = api.CreateTablet("t1", peers, master_term=1)
    for i in range(3):
        await cluster.call(i, api.ADMIN_CREATE_TABLET, create, api.TabletCreated)
    await cluster.wait_for_leader("t1")
    for i in range(3):
        await cluster.call(i, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1", "DELETED"),
                           api.Ack)
    for i in range(3):
        with contextlib.suppress(api.TabletDeleted):
            await cluster.call(i, api.ADMIN_CREATE_TABLET, create, api.TabletCreated)


async def _member_type(cluster: Cluster, i: int) -> str:
    try:
        return (await cluster.state(i, "t1")).member_type
    except (RpcError, api.TabletNotFound, api.TabletNotRunning):
        return ""


async def _config_change(cluster: Cluster, leader: int, kind: ChangeKind, peer: Peer) -> None:
    index = (await cluster.state(leader, "t1")).config_index
    await cluster.call(leader, api.ADMIN_CHANGE_CONFIG,
                       api.ChangeConfig("t1", ConfigChange(kind, peer), index),
                       api.ConfigChanged)


async def tombstone_unknown_leader(cluster: Cluster) -> None:
    """Four servers. Server 2 is cut off while server 3 joins the tablet, then removed and
    tombstoned: its config never names server 3. The cut heals, server 3 leads, and server
    2 is added back as a NON_VOTER: the leader must hear its TOMBSTONED answers (a push
    names its sender's address) and copy it back, else it never becomes a VOTER."""
    await cluster.start_all()
    hosts = [s.host for s in cluster.servers]
    await cluster.create_tablet("t1", [0, 1, 2])
    lead = await cluster.wait_for_leader("t1")
    if lead == 2:
        await cluster.call(2, api.ADMIN_STEP_DOWN, api.StepDown("t1", cluster.uuids[0]),
                           api.Ack)
        lead = await cluster.wait_for_leader("t1", among=[0, 1])
    cluster.net.partition([hosts[2]], [hosts[0], hosts[1], hosts[3]])
    p2, p3 = cluster.peers([2, 3])
    await _config_change(cluster, lead, "ADD", Peer(p3.uuid, p3.address, "NON_VOTER",
                                                    promote=True))
    while await _member_type(cluster, 3) != "VOTER":
        await trio.sleep(0.2)
    await _config_change(cluster, lead, "REMOVE", p2)
    index = (await cluster.state(2, "t1")).config_index
    await cluster.call(2, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1", "TOMBSTONE", index),
                       api.Ack)
    cluster.net.heal()
    await cluster.call(lead, api.ADMIN_STEP_DOWN, api.StepDown("t1", cluster.uuids[3]),
                       api.Ack)
    while (await cluster.state(3, "t1")).role != "LEADER":
        await trio.sleep(0.2)
    await _config_change(cluster, 3, "ADD", Peer(p2.uuid, p2.address, "NON_VOTER",
                                                 promote=True))
    with trio.move_on_after(60):
        while await _member_type(cluster, 2) != "VOTER":
            await trio.sleep(0.2)
        return
    raise Found("NotHealed", "the NON_VOTER on the tombstone was never copied back")


tombstone_unknown_leader.servers = 4  # type: ignore[attr-defined]


SCENARIOS: tuple[Callable[[Cluster], Awaitable[None]], ...] = (
    crash_restart,
    partitioned_leader,
    tombstone_vote,
    copy_after_leader_change,
    stale_copy_request,
    crash_in_delete("delete_copy_superblock"),
    crash_in_delete("delete_mark_deleted"),
    crash_in_delete("delete_move_wal"),
    crash_in_delete("copy_begin"),
    crash_in_delete("copy_merge_cmeta"),
    crash_in_delete("copy_download_wal"),
    crash_in_delete("copy_blocks_done"),
    late_master_create,
    tombstone_unknown_leader,
)


def run_scenario(scenario: Callable[[Cluster], Awaitable[None]], workdir: str | None = None,
                 seed: int = 0) -> Outcome:
    """Run one scenario on a fresh cluster (3 servers, or the scenario's ``servers``),
    then check its traces."""
    with tempfile.TemporaryDirectory(prefix="mutant-sim-", dir=workdir) as tmp:
        traces = str(Path(tmp) / "traces")
        direct: list[str] = []
        detail = ""

        async def main() -> None:
            nonlocal detail
            async with open_cluster(traces, getattr(scenario, "servers", 3),
                                    seed=seed) as cluster:
                try:
                    with trio.fail_after(BUDGET):
                        await scenario(cluster)
                except Found as exc:
                    direct.append(exc.kind)
                    detail = str(exc)
                except trio.TooSlowError:
                    direct.append("Hang")
                    detail = f"no progress within {BUDGET:.0f} virtual seconds"

        try:
            trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        except Exception as exc:  # the scenario (or a server) broke: the bug showed
            direct.append(f"Error:{type(exc).__name__}")
            detail = f"{type(exc).__name__}: {exc}"[:300]
        report = check_paths([traces])
        bad = [v for v in report.sorted() if v.severity != "warning"]
        kinds: list[str] = []
        for v in bad:
            if v.kind not in kinds:
                kinds.append(v.kind)
        if bad:  # the checker's evidence first: it names the rule
            v = bad[0]
            detail = f"{v.kind} {Path(v.file).name}:{v.line} {v.message}"[:300] + \
                (f" | {detail}" if detail else "")
        # The checker's finding first: it names the rule, a symptom does not.
        return Outcome((*kinds, *direct), detail)


__all__ = ["SCENARIOS", "Found", "Outcome", "run_scenario"]
