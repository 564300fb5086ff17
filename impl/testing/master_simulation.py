"""A deterministic simulation of the real masters and tablet servers, one step at a time.

What it runs
------------
The in-process master cluster of ``mastercluster.py``: three real masters (``open_master``:
the catalog tablet on Raft, the leader-ready gate, reports, the healing policy) and four
real tablet servers (``open_tserver``), each process on its own crash-simulating
``SimDisk``, all on one seeded ``MemoryNetwork``, under ``trio.testing.MockClock``. The
client is the real one (``impl/client``): CreateTable, DeleteTable and AlterTable through a
``MasterClient`` (leader discovery, hints, retries, request ids), rows through a
``TableClient`` (locations from the leader master, the tablet's leader, exactly-once seqs).

A *step* is one of the frozen values below: create, delete or alter a table, write rows,
crash a master now or right after its k-th next durable step of the catalog tablet,
restart a master, crash a tablet server now or right after its k-th next durable step,
restart a tablet server, cut a master or a tablet server off
from every other server (the client still reaches it), heal every cut, let time pass
(heartbeats; the leader master's background task re-replicates what a dead server held).
Steps name masters, servers and tables by index modulo what exists, so a shrunk program
still runs; a step that cannot apply is counted as skipped.

How it stays deterministic
--------------------------
Everything ``simulation.py``'s module header says holds here, and this class inherits its
machinery (``Simulation``: the background trio thread, the per-step virtual and wall time
bounds, freezing the clock and waiting for every task to block between steps, the seeded
trio scheduler, the seeded server UUIDs and block ids, small WAL segments, the trace hook
that crashes a process right after a chosen traced step). Added here: the masters' own
client id (``secrets.token_hex`` in impl/master/server.py) is seeded too, and every client
the simulation opens gets a seeded ``random.Random`` (the retry jitter) and a fixed id.

The checks
----------
After each step the caller runs (the test module does):

  * ``check_durable``: for every tablet server AND every master (the catalog tablet), its
    disk as a crash would leave it, read as startup reads it, is what its last traced event
    of each tablet claims (``simulation.py`` "The durable-state check"), with the same crash
    frontier allowance for a process crashed right after a chosen step;
  * ``check_leaders``: at most one ready leader master per term, over every status seen at
    every step boundary so far (the trace checker judges the same from ``master_ready``
    events; this one asks the masters themselves);
  * the traces through the checker (the caller brings it: impl never imports the checker),
    the catalog rules included.

``verify`` at the end: every cut healed, every process restarted; then, within a bound of
virtual time, the cluster must heal itself: every live table RUNNING and each of its
tablets RUNNING in the catalog with exactly its replica count of VOTERs, each of them a
RUNNING replica on a live tablet server. Then a table whose CreateTable was acknowledged
(and no DeleteTable of it tried) is in the leader's catalog, one whose DeleteTable was
acknowledged is not, an acknowledged AlterTable's schema version is not lost, and every
acknowledged row reads back with its value (a row of unknown outcome: its value or
absent).

Cost: a step is a few milliseconds to a second of CPU (a Wait of 15 virtual seconds runs
every Raft tick and heartbeat of seven processes); with every check after every step about
9 steps per CPU second (tests/simulation/test_master_simulation.py prints the figures).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, Literal, TypeAlias

import attrs
import msgspec
import trio

from revivify.impl.client import (
    ClientError,
    ClientOptions,
    DeadlineExceeded,
    TableNotFoundError,
    open_master_client,
    open_table_client,
)
from revivify.impl.master import api as master_api
from revivify.impl.master import server as master_server_module
from revivify.impl.rpc import RpcError
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver import api

from .mastercluster import SimMasterCluster, open_master_cluster
from .simulation import (
    ROOT,
    DurableProcess,
    Heal,
    Simulation,
    SimulationFailed,
    Wait,
    seed_trio_scheduler,
)

logger = logging.getLogger(__name__)

# What a direct call may answer instead of its response: the cluster moves under the steps.
_REFUSALS: tuple[type[BaseException], ...] = (RpcError, OSError, *api.APP_ERRORS,
                                              *master_api.APP_ERRORS)
# The simulation's clients give up sooner than the defaults (30 s): a step has a budget.
CLIENT_OPTIONS = ClientOptions(deadline=8.0, call_timeout=1.0)

# ---------------------------------------------------------------------------- the steps


@attrs.frozen
class CreateTable:
    """A new table ``tb<n>`` of ``tablets`` hash partitions, 3 replicas each."""

    tablets: int = 1


@attrs.frozen
class DeleteTable:
    table: int  # an index into the tables not known to be deleted


@attrs.frozen
class AlterTable:
    """A column added (a schema version bump: ALTERING until every tablet reports it)."""

    table: int


@attrs.frozen
class WriteRows:
    """``rows`` fresh keys put into table ``table`` through a TableClient."""

    table: int
    rows: int = 1


@attrs.frozen
class CrashMaster:
    """A machine crash of a master now (the ready leader with ``leader``, if there is one;
    else the ``master``-th running one): its disk keeps what was fsync'd."""

    master: int
    leader: bool = False


@attrs.frozen
class CrashMasterAtStep:
    """A machine crash of a master right after its ``after``-th next traced durable step
    of the catalog tablet; meanwhile an AlterTable of ``table`` (a CreateTable when there is
    no table) and some time, so that catalog steps happen. Disarmed at the step's end."""

    master: int
    after: int
    table: int = 0
    leader: bool = True


@attrs.frozen
class CrashTserverAtStep:
    """A machine crash of a tablet server (an index into the running ones) right after its
    ``after``-th next traced durable tablet step; meanwhile rows written to the tables from
    ``table`` on. Disarmed at the step's end."""

    server: int
    after: int
    table: int = 0


@attrs.frozen
class RestartMaster:
    master: int  # an index into the masters that are down


@attrs.frozen
class CrashTserver:
    server: int  # an index into the running tablet servers


@attrs.frozen
class RestartTserver:
    server: int  # an index into the tablet servers that are down


@attrs.frozen
class IsolateMaster:
    """Cut a master off from every other server (the client still reaches it)."""

    master: int


@attrs.frozen
class IsolateTserver:
    """Cut a tablet server off from every other server (the client still reaches it)."""

    server: int


MasterStep: TypeAlias = (CreateTable | DeleteTable | AlterTable | WriteRows | CrashMaster
                         | CrashMasterAtStep | RestartMaster | CrashTserver
                         | CrashTserverAtStep | RestartTserver
                         | IsolateMaster | IsolateTserver | Heal | Wait)

# ---------------------------------------------------------------------------- the model

Outcome: TypeAlias = Literal["acked", "unknown", "no"]


@attrs.define
class TableModel:
    """What the client was told about one table (its name never reused)."""

    name: str
    tablets: int
    created: Outcome  # CreateTable answered OK / may have committed / surely did not
    deleted: Outcome = "no"  # DeleteTable likewise ("no": never tried)
    schema_version: int = 0  # the highest acknowledged by an AlterTable
    columns: int = 0
    acked: dict[bytes, bytes] = attrs.Factory(dict)  # acknowledged rows (fresh keys)
    unknown: dict[bytes, bytes] = attrs.Factory(dict)  # outcome unknown: absent or this


@attrs.define
class MasterCounters:
    creates_acked: int = 0
    creates_unknown: int = 0
    deletes_acked: int = 0
    deletes_unknown: int = 0
    alters_acked: int = 0
    alters_failed: int = 0
    rows_acked: int = 0
    rows_unknown: int = 0
    master_crashes: int = 0
    master_crashes_at_step: int = 0
    leader_crashes: int = 0
    tserver_crashes: int = 0
    tserver_crashes_at_step: int = 0
    isolations: int = 0
    ready_leaders_seen: int = 0  # (term, master) pairs seen ready at a step boundary
    settle_seconds: float = 0.0  # virtual seconds the final heal took
    replicas_checked: int = 0  # RUNNING voter replicas counted at the end


@contextlib.contextmanager
def deterministic_master_ids(seed: int) -> Iterator[None]:
    """The master's own client id (``secrets.token_hex`` in impl/master/server.py) seeded
    while the block runs (test support only, restored after)."""
    rng = random.Random(seed ^ 0xA57E)

    def token_hex(nbytes: int | None = None) -> str:
        return rng.randbytes(nbytes or 32).hex()

    saved = getattr(master_server_module, "secrets")  # noqa: B009 (not exported)
    setattr(master_server_module, "secrets", SimpleNamespace(token_hex=token_hex))  # noqa: B010
    try:
        yield
    finally:
        setattr(master_server_module, "secrets", saved)  # noqa: B010


class MasterSimulation(Simulation):
    """The master cluster, its thread (inherited), the model of what the client was told,
    and the checks (the module header). ``servers`` is the number of tablet servers."""

    def __init__(self, trace_dir: str, *, seed: int, masters: int = 3, servers: int = 4,
                 replicas: int = 3, step_seconds: float = 60.0,
                 master_options: dict[str, object] | None = None,
                 options: dict[str, object] | None = None,
                 wall_seconds_per_step: float = 120.0) -> None:
        super().__init__(trace_dir, seed=seed, servers=servers, replicas=replicas,
                         step_seconds=step_seconds, options=options,
                         wall_seconds_per_step=wall_seconds_per_step)
        self.n_masters = masters
        self.master_options: dict[str, object] = dict(master_options or {})
        self.tables: list[TableModel] = []
        self.mcounters = MasterCounters()
        self.steps: list[MasterStep] = []
        self.master_uuids: dict[int, str] = {}
        self.masters_crashed_at_step: set[int] = set()
        self.isolated_masters: set[int] = set()
        self.ready_by_term: dict[int, str] = {}  # term -> the master seen ready in it
        self.clients = 0  # clients opened (each its own id and Random)
        # why client operations failed ("alter: DeadlineExceeded(CatalogWriteFailed)"...)
        self.failures: collections.Counter[str] = collections.Counter()
        self._mc: SimMasterCluster | None = None

    # ------------------------------------------------------------------ the thread

    def __enter__(self) -> MasterSimulation:
        self._stack.enter_context(deterministic_master_ids(self.seed))
        super().__enter__()
        return self

    async def _main(self) -> None:
        seed_trio_scheduler(self.seed)
        self._token = trio.lowlevel.current_trio_token()
        self._finish = trio.Event()
        async with open_master_cluster(
                self.trace_dir, self.n_masters, self.n, seed=self.seed,
                master_options=self.master_options, tserver_options=self.options) as mc:
            self._mc = mc
            self._cluster = mc.tservers
            self.clock.autojump_threshold = 0
            with trio.fail_after(120):  # virtual seconds: a cluster that never forms
                await mc.start_all()
                await mc.ready_leader()
            self._learn_master_uuids()
            await self._settle()
            self._ready.set()
            await self._finish.wait()
            self.clock.autojump_threshold = 0  # clean stops may wait on timers

    @property
    def mc(self) -> SimMasterCluster:
        assert self._mc is not None
        return self._mc

    def _learn_master_uuids(self) -> None:
        for m in self.mc.masters:
            if m.master is not None:
                self.master_uuids[m.index] = m.master.uuid

    # ------------------------------------------------------------------ steps

    def run(self, step: MasterStep) -> None:
        """Run one step (in the trio thread), record it, then read the masters' status."""
        self.steps.append(step)
        self.counters.steps += 1
        self._call(lambda: self._run(step))

    async def _run(self, step: MasterStep) -> None:
        if isinstance(step, CreateTable):
            await self._create_table(step.tablets)
        elif isinstance(step, DeleteTable):
            await self._delete(step)
        elif isinstance(step, AlterTable):
            await self._alter(step.table)
        elif isinstance(step, WriteRows):
            t = self._table(step.table)
            if t is not None:
                await self._write_rows(t, step.rows)
        elif isinstance(step, CrashMaster):
            i = await self._pick_master(step.master, step.leader)
            if i is not None:
                self.mcounters.master_crashes += 1
                await self.mc.crash_master(i)
        elif isinstance(step, CrashMasterAtStep):
            i = await self._pick_master(step.master, step.leader)
            if i is not None:
                await self._crash_master_at_step(i, step)
        elif isinstance(step, RestartMaster):
            down = [m.index for m in self.mc.masters if m.master is None]
            if not down:
                self.counters.skipped += 1
            else:
                i = down[step.master % len(down)]
                await self.mc.start_master(i)
                self.masters_crashed_at_step.discard(i)
                self._learn_master_uuids()
        elif isinstance(step, CrashTserver):
            i = self._pick(step.server, running=True)
            if i is not None:
                self.mcounters.tserver_crashes += 1
                await self.cluster.crash(i)
        elif isinstance(step, CrashTserverAtStep):
            i = self._pick(step.server, running=True)
            if i is not None:
                await self._crash_tserver_at_step(i, step)
        elif isinstance(step, RestartTserver):
            i = self._pick(step.server, running=False)
            if i is not None:
                await self.cluster.start(i)
                self.crashed_at_step.discard(i)
        elif isinstance(step, IsolateMaster):
            running = self.mc.running()
            if not running:
                self.counters.skipped += 1
            else:
                i = running[step.master % len(running)]
                self.isolated_masters.add(i)
                self._cut_off(self.mc.masters[i].host)
        elif isinstance(step, IsolateTserver):
            i = self._pick(step.server, running=True)
            if i is not None:
                self.isolated.add(i)
                self._cut_off(self.cluster.servers[i].host)
        elif isinstance(step, Heal):
            self._heal_all()
        else:
            assert isinstance(step, Wait), step
            await trio.sleep(step.seconds)
        await self._observe_leaders()

    def _cut_off(self, host: str) -> None:
        """Partition ``host`` from every other server; the client ("client") still
        reaches every host (as in simulation.py's Isolate)."""
        self.mcounters.isolations += 1
        others = [m.host for m in self.mc.masters] + [s.host for s in self.cluster.servers]
        self.mc.net.partition([host], [h for h in others if h != host])

    def _heal_all(self) -> None:
        self.isolated.clear()
        self.isolated_masters.clear()
        self.mc.net.heal()

    def _live_tables(self) -> list[TableModel]:
        return [t for t in self.tables if t.deleted != "acked"]

    def _table(self, index: int) -> TableModel | None:
        live = self._live_tables()
        if not live:
            self.counters.skipped += 1
            return None
        return live[index % len(live)]

    async def _status(self, i: int) -> master_api.MasterStatus | None:
        if self.mc.masters[i].master is None:
            return None
        with trio.move_on_after(1.0):
            try:
                return await self.mc.call_master(i, master_api.MASTER_STATUS,
                                                 master_api.Empty(), master_api.MasterStatus)
            except _REFUSALS:
                return None
        return None

    async def _pick_master(self, index: int, leader: bool) -> int | None:
        """The ready leader (``leader``, when one answers) or the ``index``-th running
        master (modulo); None: no master runs."""
        running = self.mc.running()
        if not running:
            self.counters.skipped += 1
            return None
        if leader:
            for i in running:
                status = await self._status(i)
                if status is not None and status.ready:
                    self.mcounters.leader_crashes += 1
                    return i
        return running[index % len(running)]

    def _new_client_rng(self) -> tuple[str, random.Random]:
        """A fixed id and a seeded Random for the next client the simulation opens."""
        self.clients += 1
        return f"sim-{self.clients}", random.Random(self.seed * 1_000_003 + self.clients)

    async def _master_call(self, method: str, body: msgspec.Struct,
                           response: type[Any]) -> Any:
        """One call answered by the ready leader master, through a fresh MasterClient."""
        _, rng = self._new_client_rng()
        async with open_master_client(self.mc.addresses, network=self.mc.net.host("client"),
                                      options=CLIENT_OPTIONS, rng=rng) as client:
            return await client.call(method, body, response)

    def _failed(self, what: str, exc: ClientError) -> None:
        last = exc.last_error
        if isinstance(last, master_api.Refused):
            cause = last.reason
        else:
            cause = type(last).__name__ if last is not None else ""
        self.failures[f"{what}: {type(exc).__name__}({cause})"] += 1

    async def _create_table(self, tablets: int) -> TableModel:
        name = f"tb{len(self.tables)}"
        request = master_api.CreateTableRequest(name, [Column("key", key=True)], tablets,
                                                self.replicas, request_id=f"create-{name}")
        model = TableModel(name, tablets, "unknown")
        self.tables.append(model)
        try:
            await self._master_call(master_api.MASTER_CREATE_TABLE, request,
                                    master_api.TableCreatedReply)
        except DeadlineExceeded as exc:
            self._failed("create", exc)
            # Even outcome_unknown=False is not "surely absent": a CatalogWriteFailed leaves
            # a write that may still commit under a later leader (impl/master/runner.py).
            self.mcounters.creates_unknown += 1
        except ClientError as exc:  # refused: never created (a fresh name: not ALREADY_PRESENT)
            self._failed("create", exc)
            model.created = "no"
        else:
            model.created = "acked"
            self.mcounters.creates_acked += 1
        return model

    async def _delete(self, step: DeleteTable) -> None:
        t = self._table(step.table)
        if t is None:
            return
        t.deleted = "unknown"  # from the moment it is sent
        try:
            await self._master_call(master_api.MASTER_DELETE_TABLE,
                                    master_api.TableName(t.name), master_api.TableDeletedReply)
        except ClientError as exc:
            self._failed("delete", exc)
            # NOT_FOUND too: its CreateTable may not have committed (unknown outcome)
            self.mcounters.deletes_unknown += 1
        else:
            t.deleted = "acked"
            self.mcounters.deletes_acked += 1

    async def _alter(self, index: int) -> None:
        t = self._table(index)
        if t is None:
            return
        t.columns += 1
        request = master_api.AlterTableRequest(
            t.name, add_columns=[Column(f"c{t.columns}", "int64")])
        try:
            reply = await self._master_call(master_api.MASTER_ALTER_TABLE, request,
                                            master_api.TableAlteredReply)
        except ClientError as exc:
            self._failed("alter", exc)
            self.mcounters.alters_failed += 1
        else:
            self.mcounters.alters_acked += 1
            t.schema_version = max(t.schema_version, reply.schema_version)

    async def _write_rows(self, t: TableModel, rows: int) -> None:
        client_id, rng = self._new_client_rng()
        host = self.mc.net.host("client")
        async with open_table_client(self.mc.addresses, t.name, client_id=client_id,
                                     network=host, master_network=host,
                                     options=CLIENT_OPTIONS, rng=rng) as table:
            for _ in range(rows):
                key = b"k%06d" % self.next_key
                value = b"v%06d-%d" % (self.next_key, self.seed)
                self.next_key += 1
                try:
                    await table.put(key, value)
                except TableNotFoundError:
                    return  # no write was sent
                except ClientError as exc:
                    self._failed("write", exc)
                    t.unknown[key] = value
                    self.mcounters.rows_unknown += 1
                    return  # the cluster cannot take writes now: the next step moves on
                t.acked[key] = value
                self.mcounters.rows_acked += 1

    async def _crash_master_at_step(self, i: int, step: CrashMasterAtStep) -> None:
        async def catalog_writes() -> None:  # each a few durable steps on every master
            if self._live_tables():
                await self._alter(step.table)
            else:
                await self._create_table(1)

        if await self._crash_at(self.master_uuids[i], step.after,
                                lambda: self.mc.crash_master_now(i), catalog_writes,
                                give_up_after=10.0, who="master simulation"):
            self.mcounters.master_crashes_at_step += 1
            self.masters_crashed_at_step.add(i)
            await self.mc.crash_master(i)  # reap its tasks

    async def _crash_tserver_at_step(self, i: int, step: CrashTserverAtStep) -> None:
        async def rows() -> None:  # each a few durable steps on every replica
            for k in range(4):
                t = self._table(step.table + k)
                if t is not None:
                    await self._write_rows(t, 2)

        if await self._crash_at(self.cluster.uuids[i], step.after,
                                lambda: self.cluster.crash_now(i), rows,
                                give_up_after=10.0, who="master simulation"):
            self.mcounters.tserver_crashes_at_step += 1
            self.crashed_at_step.add(i)
            await self.cluster.crash(i)  # reap its tasks

    # ------------------------------------------------------------------ checks

    async def _observe_leaders(self) -> None:
        """Record which master says it is the ready leader in which term (check_leaders)."""
        for i in self.mc.running():
            status = await self._status(i)
            if status is None or not status.ready:
                continue
            seen = self.ready_by_term.setdefault(status.term, status.uuid)
            if seen == status.uuid:
                self.mcounters.ready_leaders_seen += 1
            else:
                raise SimulationFailed(
                    f"two ready leader masters in term {status.term}: {seen} and "
                    f"{status.uuid}; steps: {self.steps}")

    def _durable_processes(self) -> list[DurableProcess]:
        """check_durable (inherited) over the tablet servers and the masters alike."""
        processes = [DurableProcess(f"tablet server {s.index}", s.disk, f"{ROOT}/{s.host}",
                                    self.cluster.uuids.get(s.index),
                                    s.index in self.crashed_at_step and s.server is None)
                     for s in self.cluster.servers]
        processes += [DurableProcess(f"master {m.index}", m.disk, f"{ROOT}/{m.host}",
                                     self.master_uuids.get(m.index),
                                     m.index in self.masters_crashed_at_step
                                     and m.master is None)
                      for m in self.mc.masters]
        return processes

    def _durable_problems(self) -> list[str]:
        problems = super()._durable_problems()
        if problems:
            problems.append(f"master steps: {self.steps}")
        return problems

    def verify(self, seconds: float = 240.0) -> None:
        """Heal, restart everything, wait for the cluster to heal itself, then check what
        the client was told (the module header)."""
        self._call(lambda: self._verify_all(seconds), budget=seconds + 120)

    async def _verify_all(self, seconds: float) -> None:
        self._heal_all()
        for m in self.mc.masters:
            if m.master is None:
                await self.mc.start_master(m.index)
                self.masters_crashed_at_step.discard(m.index)
        self._learn_master_uuids()
        for i in range(self.n):
            if not self._running(i):
                await self.cluster.start(i)
                self.crashed_at_step.discard(i)
        started = trio.current_time()
        deadline = started + seconds
        problem: str | None = "not looked yet"
        tables: dict[str, master_api.TableInfo] = {}
        while problem is not None:
            if trio.current_time() > deadline:
                raise SimulationFailed(
                    f"seed {self.seed}: the cluster did not heal itself within {seconds} "
                    f"virtual seconds: {problem}; steps: {self.steps}")
            await trio.sleep(1.0)
            problem, tables = await self._healed()
        self.mcounters.settle_seconds = trio.current_time() - started
        await self._observe_leaders()
        await self._check_model(tables)

    async def _healed(self) -> tuple[str | None, dict[str, master_api.TableInfo]]:
        """None if every live table and tablet is whole (the module header), else why not;
        and the live tables."""
        try:
            listed = await self._master_call(master_api.MASTER_LIST_TABLES, master_api.Empty(),
                                             master_api.TableList)
        except ClientError as exc:
            return f"no table list from a leader master ({exc})", {}
        tables = {t.name: t for t in listed.tables}
        replicas = 0
        for info in tables.values():
            if info.state != "RUNNING":
                return f"table {info.name} is {info.state}", tables
            try:
                locs = await self._master_call(
                    master_api.MASTER_TABLE_LOCATIONS, master_api.TableName(info.name),
                    master_api.TableLocationsReply)
            except ClientError as exc:
                return f"no locations of {info.name} ({exc})", tables
            if len(locs.tablets) != info.num_tablets:
                return f"table {info.name}: {len(locs.tablets)} live tablets", tables
            for tablet in locs.tablets:
                voters = [r.uuid for r in tablet.replicas if r.member_type == "VOTER"]
                if tablet.state != "RUNNING" or len(voters) != self.replicas \
                        or len(tablet.replicas) != self.replicas:
                    return (f"tablet {tablet.tablet_id} of {info.name}: {tablet.state}, "
                            f"replicas {[(r.uuid[:6], r.member_type) for r in tablet.replicas]}"
                            f", want {self.replicas} VOTERs"), tables
                for uuid in voters:
                    if not await self._replica_running(uuid, tablet.tablet_id):
                        return (f"tablet {tablet.tablet_id} of {info.name}: the replica on "
                                f"{uuid[:8]} is not RUNNING"), tables
                    replicas += 1
        self.mcounters.replicas_checked = replicas
        return None, tables

    async def _replica_running(self, uuid: str, tablet_id: str) -> bool:
        i = self._index_of(uuid)
        if i is None or not self._running(i):
            return False
        try:
            info = await self._call_rpc(i, api.ADMIN_CONSENSUS_STATE, api.TabletRef(tablet_id),
                                        api.ReplicaInfo, 1.0)
        except _REFUSALS:
            return False
        return info is not None and info.state == "RUNNING"

    async def _check_model(self, tables: dict[str, master_api.TableInfo]) -> None:
        for t in self.tables:
            info = tables.get(t.name)
            if t.created == "acked" and t.deleted == "no" and info is None:
                raise SimulationFailed(f"seed {self.seed}: table {t.name}'s CreateTable was "
                                       f"acknowledged, the leader's catalog lacks it; steps: "
                                       f"{self.steps}")
            if t.created == "no" and info is not None:
                raise SimulationFailed(f"seed {self.seed}: table {t.name}'s CreateTable was "
                                       f"refused, yet it exists; steps: {self.steps}")
            if t.deleted == "acked" and info is not None:
                raise SimulationFailed(f"seed {self.seed}: table {t.name}'s DeleteTable was "
                                       f"acknowledged, it is still listed; steps: "
                                       f"{self.steps}")
            if info is None:
                continue
            if info.schema_version < t.schema_version:
                raise SimulationFailed(
                    f"seed {self.seed}: table {t.name} is at schema version "
                    f"{info.schema_version}, an AlterTable to {t.schema_version} was "
                    f"acknowledged; steps: {self.steps}")
            await self._read_back(t)

    async def _read_back(self, t: TableModel) -> None:
        client_id, rng = self._new_client_rng()
        host = self.mc.net.host("client")
        async with open_table_client(self.mc.addresses, t.name, client_id=client_id,
                                     network=host, master_network=host,
                                     options=attrs.evolve(CLIENT_OPTIONS, deadline=30.0),
                                     rng=rng) as table:
            for key, want in sorted({**t.unknown, **t.acked}.items()):
                try:
                    got = await table.get(key)
                except ClientError as exc:
                    raise SimulationFailed(f"seed {self.seed}: table {t.name}: {key!r} "
                                           f"unreadable after healing ({exc}); steps: "
                                           f"{self.steps}") from exc
                if key in t.acked and got != want:
                    raise SimulationFailed(
                        f"seed {self.seed}: table {t.name}: acknowledged row {key!r}={want!r} "
                        f"reads back as {got!r}; steps: {self.steps}")
                if key in t.unknown and got is not None and got != want:
                    raise SimulationFailed(f"seed {self.seed}: table {t.name}: {key!r} reads "
                                           f"{got!r}, never written")


__all__ = [
    "CLIENT_OPTIONS",
    "AlterTable",
    "CrashMaster",
    "CrashMasterAtStep",
    "CrashTserver",
    "CrashTserverAtStep",
    "CreateTable",
    "DeleteTable",
    "Heal",
    "IsolateMaster",
    "IsolateTserver",
    "MasterCounters",
    "MasterSimulation",
    "MasterStep",
    "RestartMaster",
    "RestartTserver",
    "TableModel",
    "Wait",
    "WriteRows",
    "deterministic_master_ids",
]
