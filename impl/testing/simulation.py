"""A deterministic simulation of the real tablet servers, driven one step at a time.

What it runs
------------
The in-process cluster of ``cluster.py``: the real tablet-server code (``open_tserver``),
each server on its own crash-simulating ``SimDisk``, all on one seeded ``MemoryNetwork``,
under ``trio.testing.MockClock``. A *step* (one of the frozen values below: create a tablet,
write, crash, crash right after the k-th next durable step, restart, isolate, make links
drop and delay, heal, tombstone a replica, move a replica, wipe a disk, drop a tablet, let
time pass) is executed by ``Simulation.execute``; after it the caller runs the checks
(``check_durable``; the traces through a checker the caller brings, since impl never
imports the checker; ``verify_writes`` at the end). A step is bounded in virtual time (a
hang) and in wall time (a busy loop at one virtual instant, where the clock cannot jump).
A step that cannot apply (no such tablet, nobody to crash) is counted as skipped; steps
name servers and tablets by index modulo what exists, so a shrunk program still runs.

Why a thread
------------
Hypothesis's stateful rules are synchronous and a trio program is one ``trio.run``. The
simulation runs its ``trio.run`` in a background thread and each step crosses over with
``trio.from_thread.run``. What keeps that deterministic is the clock, not the thread:

* while a step runs, ``autojump_threshold`` is 0 (virtual time jumps to the next deadline
  whenever every task waits), and each step has a budget of virtual seconds;
* when the step's own work is done, the threshold goes to infinity (the MockClock's
  ``rate`` is 0, so time stands still) and the step waits for
  ``trio.testing.wait_all_tasks_blocked()``: every task that could run at that virtual
  instant has run. Only then does the answer go back to the calling thread. Between two
  steps nothing in the trio thread is runnable and no timer can fire, so how long the
  caller takes (Hypothesis drawing, the trace checker) cannot change what happens next.

The other sources of nondeterminism and what is done about each:

* trio's scheduler shuffles each batch of runnable tasks with its own ``random.Random``
  (``trio._core._run._r``). Once Hypothesis is imported, trio's Hypothesis plugin sorts each
  batch by task creation order before shuffling and registers that Random with
  Hypothesis, which reseeds it for every example; without Hypothesis the batch is reversed
  at random from the same Random. Either way it is a function of that Random's state, so
  ``Simulation`` seeds it from the simulation's seed when its run starts. The two orders
  differ, so a replay outside pytest must import Hypothesis first (before trio runs) to
  see what the Hypothesis machine saw: seed 5337's stuck NON_VOTER (tests/simulation)
  reproduced only so. ``random.seed``
  (the global Random) plays no part: trio does not use it.
* server UUIDs (``uuid.uuid4`` at format time) and data-block ids (``secrets.token_hex``)
  come from the OS: ``deterministic_ids`` swaps the two module references the servers use
  for seeded stand-ins while a simulation runs (test support only, restored after).
* the network's drops, the servers' Raft timers: seeded by the cluster's seed.
* left alone: the wall-clock fields of the trace (``wall_ns``), the copy service's session
  expiry (real ``time.monotonic``, 60 s: far beyond a simulation's wall time), and Python's
  string hashing (``PYTHONHASHSEED``): the servers sort what they send, but a replay in
  another process is exact only if no set iteration order leaks into behaviour
  (``tests/simulation`` runs one program in two processes with different hash seeds and
  compares the traces).

The durable-state check (``check_durable``)
-------------------------------------------
For each server, its disk as a crash would leave it (``SimDisk.crash()``: only what was
fsync'd) is read the way startup reads it (the shell's own ``classify``, and the WAL's
last OpId by salvage) into the trace contract's ``DurableState`` per tablet: the spec's
durable fields (superblock data state and retained OpId, quarantine, cmeta term / vote /
config index, WAL location and last OpId, blocks). That is compared with the ``state`` of
the last event the server traced for the tablet (nothing traced: DOES_NOT_EXIST with
nothing at rest). At a step boundary every durable step's write and its event have both
happened (the executor holds them together and the step waits until no task can run), so
for a running server the two must be equal. For a server that crashed right after a
chosen durable step (``CrashAtStep``), another tablet of that server may have had a step
fsync'd whose event was never written: the trace contract's crash frontier of one step per
tablet. Those tablets are reported as ``frontier`` (counted, not failed); the checker
judges them when the next incarnation's ``startup`` event shows what was found.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any, TypeAlias, TypeVar

import attrs
import msgspec
import trio
import trio.testing

from revivify.impl.consensus.messages import ConfigChange, Peer
from revivify.impl.rpc import RpcError
from revivify.impl.storage import blocks as blocks_module
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.wal import LogOptions, salvage_last_opid
from revivify.impl.tablet.ops import RowOp
from revivify.impl.tserver import api
from revivify.impl.tserver import replica as replica_module
from revivify.impl.tserver import server as server_module
from revivify.impl.tserver.durable import Durable
from revivify.impl.tserver.manager.core import Case
from revivify.impl.tserver.manager.shell import TabletManager

from .cluster import Cluster, open_cluster
from .memnet import LinkFaults
from .simdisk import SimDisk

logger = logging.getLogger(__name__)

T = TypeVar("T")
ROOT = "/srv"
# What a call may answer instead of its response: the cluster moves under the steps.
_REFUSALS: tuple[type[BaseException], ...] = (RpcError, *api.APP_ERRORS)

# ---------------------------------------------------------------------------- the steps


@attrs.frozen
class CreateTablet:
    """A new tablet (``t<n>``) on ``replicas`` servers starting at server ``first``."""

    first: int


@attrs.frozen
class Write:
    """``rows`` fresh keys written to tablet ``tablet`` (an index into the live tablets)."""

    tablet: int
    rows: int = 1


# ``server`` in Crash, CrashAtStep and Isolate is an index into the running servers (modulo
# their number), in Restart into the servers that are down: a shrunk or replayed program
# then still does something, and crashes and restarts meet.


@attrs.frozen
class Crash:
    """A machine crash now: the disk keeps what was fsync'd."""

    server: int


@attrs.frozen
class CrashAtStep:
    """A machine crash right after the server's ``after``-th next durable (traced tablet)
    step; meanwhile writes and some time, so that steps happen. Disarmed at the step's end."""

    server: int
    after: int
    tablet: int = 0


@attrs.frozen
class Restart:
    server: int


@attrs.frozen
class Isolate:
    """Cut a server off from the other servers (the test client still reaches it)."""

    server: int


@attrs.frozen
class Flaky:
    """Every link between two servers drops chunks (a drop resets its connection: Raft
    re-sends) with ``drop`` probability and delays each by ``delay`` seconds, until Heal."""

    drop: float
    delay: float


@attrs.frozen
class Heal:
    """Every cut and every link fault removed."""


@attrs.frozen
class Tombstone:
    """Admin.DeleteTablet TOMBSTONE of a member replica; its leader copies it back."""

    tablet: int
    member: int  # an index into the tablet's members


@attrs.frozen
class Move:
    """Move a replica: ADD a server that does not host the tablet, REMOVE a member, then
    tombstone the removed member's replica (the leader copies the tablet to the new one)."""

    tablet: int
    member: int


@attrs.frozen
class Wipe:
    """The server's disk is replaced by an empty one (it comes back with a new UUID); the
    tablets it was a member of get the new server in place of the old one."""

    server: int


@attrs.frozen
class Drop:
    """Every replica of the tablet deleted for good (mode DELETED): the table is dropped."""

    tablet: int


@attrs.frozen
class Wait:
    seconds: float


Step: TypeAlias = (CreateTablet | Write | Crash | CrashAtStep | Restart | Isolate | Flaky
                   | Heal | Tombstone | Move | Wipe | Drop | Wait)


# ---------------------------------------------------------------------------- determinism


@contextlib.contextmanager
def deterministic_ids(seed: int) -> Iterator[None]:
    """Seeded server UUIDs and block ids while the block runs (the module header)."""
    rng = random.Random(seed ^ 0x5EED)

    def uuid4() -> uuidlib.UUID:
        return uuidlib.UUID(int=rng.getrandbits(128), version=4)

    def token_hex(nbytes: int | None = None) -> str:
        return rng.randbytes(nbytes or 32).hex()

    # The module references the servers call through (``uuidlib.uuid4()`` at format time in
    # server.py, ``secrets.token_hex`` for a block id in blocks.py).
    saved_uuid = getattr(server_module, "uuidlib")  # noqa: B009 (not exported)
    saved_secrets = getattr(blocks_module, "secrets")  # noqa: B009
    setattr(server_module, "uuidlib", SimpleNamespace(uuid4=uuid4))  # noqa: B010
    setattr(blocks_module, "secrets", SimpleNamespace(token_hex=token_hex))  # noqa: B010
    try:
        yield
    finally:
        setattr(server_module, "uuidlib", saved_uuid)  # noqa: B010
        setattr(blocks_module, "secrets", saved_secrets)  # noqa: B010


@contextlib.contextmanager
def small_wal_segments(segment_bytes: int) -> Iterator[None]:
    """WAL segments of ``segment_bytes`` (preallocated, zero-filled, as in production)
    instead of 8 MiB: SimDisk copies a whole file at each fsync and each crash image, and
    small segments make the simulation roll segments over too."""
    original = server_module.TabletServer.log_options

    def log_options(self: server_module.TabletServer) -> LogOptions:
        return attrs.evolve(original(self), segment_size=segment_bytes)

    server_module.TabletServer.log_options = log_options  # type: ignore[method-assign]
    try:
        yield
    finally:
        server_module.TabletServer.log_options = original  # type: ignore[method-assign]


def seed_trio_scheduler(seed: int) -> None:
    """Seed the Random trio's run loop shuffles its batches with (a private name: checked)."""
    from trio._core import _run

    r = getattr(_run, "_r", None)
    assert isinstance(r, random.Random), "trio's scheduler Random moved: update this"
    r.seed(seed)


# ---------------------------------------------------------------------------- tracer hook

# Node UUID -> a callback run right after each of that node's traced tablet events
# (CrashAtStep). Installed on the Tracer class while a simulation runs.
_after_event: dict[str, Callable[[str, str], None]] = {}


@contextlib.contextmanager
def _tracer_hook() -> Iterator[None]:
    original = replica_module.Tracer.event

    def event(self: replica_module.Tracer, event: str, args: Any = None, state: Any = None,
              tablet: str | None = None) -> int:
        lamport = original(self, event, args, state, tablet)
        hook = _after_event.get(self.writer.node)
        if hook is not None and tablet is not None and state is not None \
                and not self.silenced:
            hook(tablet, event)
        return lamport

    replica_module.Tracer.event = event  # type: ignore[method-assign]
    try:
        yield
    finally:
        replica_module.Tracer.event = original  # type: ignore[method-assign]


# ---------------------------------------------------------------------------- the disk view


@attrs.frozen
class _Host:
    disk: SimDisk
    layout: ServerLayout
    metadata: MetadataStore


def _normal(value: object) -> Any:
    """A JSON-shaped value (tuples as lists), for comparing a record with a trace's."""
    return msgspec.json.decode(msgspec.json.encode(value))


def durable_view(disk: SimDisk, root: str, tablets: set[str]) -> dict[str, Any]:
    """Each tablet's durable state on ``disk`` as a crash now would leave it, as the trace
    contract's ``state`` records it (JSON-shaped); ``tablets`` adds ids the server traced
    (a tablet with no superblock left reads as DOES_NOT_EXIST plus what is at rest)."""
    image = disk.crash()
    layout = ServerLayout(root, image)
    if not image.is_dir(root):
        return {}
    manager = TabletManager(_Host(image, layout, MetadataStore(layout)))  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    on_disk = set(layout.tablet_ids())
    for tablet_id in sorted(on_disk | tablets):
        d: Durable
        if tablet_id in on_disk and manager.host.metadata.load_superblock(tablet_id):
            event = manager.classify(tablet_id)
            d = event.durable
            if event.case is Case.READY:
                last = salvage_last_opid(image, layout.wal_dir(tablet_id))
                d = attrs.evolve(d, wal_last=(last.term, last.index) if last else (0, 0))
        else:
            d = manager.at_rest(tablet_id)
        out[tablet_id] = _normal(d.record())
    return out


class TraceTail:
    """Reads the trace directory incrementally: the last ``state`` each (node, tablet)
    traced, and each node's newest incarnation."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.offsets: dict[str, int] = {}
        self.claims: dict[tuple[str, str], Any] = {}
        self.events = 0
        self.kinds: collections.Counter[str] = collections.Counter()  # event name -> times

    def poll(self) -> None:
        if not os.path.isdir(self.directory):
            return
        names = sorted(n for n in os.listdir(self.directory) if n.endswith(".jsonl"))
        for name in names:  # <node>.<inc:04d>.jsonl: a node's incarnations in order
            path = os.path.join(self.directory, name)
            offset = self.offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            for line in data[:end].splitlines():
                event = msgspec.json.decode(line)
                self.events += 1
                self.kinds[event["event"]] += 1
                if event.get("tablet") is not None and event.get("state") is not None:
                    self.claims[(event["node"], event["tablet"])] = event["state"]
            self.offsets[path] = offset + end

    def tablets_of(self, node: str) -> set[str]:
        return {t for (n, t) in self.claims if n == node}


# ---------------------------------------------------------------------------- the model


@attrs.define
class TabletModel:
    tablet_id: str
    acked: dict[bytes, bytes] = attrs.Factory(dict)  # acknowledged writes (fresh keys)
    unknown: dict[bytes, bytes] = attrs.Factory(dict)  # outcome unknown: absent or this


@attrs.define
class Counters:
    steps: int = 0
    skipped: int = 0
    writes_acked: int = 0
    writes_unknown: int = 0
    crashes_at_step: int = 0
    tombstones: int = 0  # DeleteTablet TOMBSTONE accepted
    moves: int = 0  # a replica moved (ADD, promoted, REMOVE, tombstoned)
    wipes: int = 0
    durable_checks: int = 0  # (server, tablet) states compared
    frontier: int = 0  # of those, a crashed server's tablet one untraced step ahead


@attrs.frozen
class DurableProcess:
    """One process whose disk check_durable reads: ``node`` is its UUID (None: not yet
    known, nothing to compare); ``frontier_ok``: it crashed right after a traced step and
    is still down, so its disk may be one untraced step ahead (the checker judges that)."""

    name: str
    disk: SimDisk
    root: str
    node: str | None
    frontier_ok: bool


class SimulationFailed(AssertionError):
    """A check failed (the message says which, with the steps so far)."""


class _Budget(Exception):
    pass


class Simulation:
    """The cluster, its thread, the model of acknowledged writes, and the checks."""

    def __init__(self, trace_dir: str, *, seed: int, servers: int = 4, replicas: int = 3,
                 step_seconds: float = 30.0, options: dict[str, object] | None = None,
                 wal_segment_bytes: int | None = 64 << 10,
                 wall_seconds_per_step: float = 120.0) -> None:
        assert 1 <= replicas <= servers
        self.trace_dir = trace_dir
        self.seed = seed
        self.n = servers
        self.replicas = replicas
        self.step_seconds = step_seconds
        self.wal_segment_bytes = wal_segment_bytes
        self.wall_seconds_per_step = wall_seconds_per_step
        self.options: dict[str, object] = {"flush_threshold": 256, **(options or {})}
        self.clock = trio.testing.MockClock(rate=0, autojump_threshold=math.inf)
        self.tablets: list[TabletModel] = []
        self.created = 0
        self.next_key = 0
        self.counters = Counters()
        self.history: list[Step] = []
        self.tail = TraceTail(trace_dir)
        self.isolated: set[int] = set()
        self.crashed_at_step: set[int] = set()  # down after a CrashAtStep, until restarted
        self.wiped: set[str] = set()  # UUIDs whose disks were wiped
        # check_durable's cache: process name -> ((disk, its fsync count, tablets traced),
        # view)
        self._views: dict[str, tuple[tuple[SimDisk, int, frozenset[str]], dict[str, Any]]] = {}
        self._cluster: Cluster | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._finish: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stack = contextlib.ExitStack()
        self.wall_seconds = 0.0

    # ------------------------------------------------------------------ the thread

    def __enter__(self) -> Simulation:
        self._stack.enter_context(deterministic_ids(self.seed))
        self._stack.enter_context(_tracer_hook())
        if self.wal_segment_bytes is not None:
            self._stack.enter_context(small_wal_segments(self.wal_segment_bytes))
        self._thread = threading.Thread(target=self._thread_main, name="simulation",
                                        daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._stack.close()
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._token is not None and self._thread is not None \
                    and self._thread.is_alive():
                with contextlib.suppress(trio.RunFinishedError):
                    self._call_sync(self._shutdown)
            if self._thread is not None:
                self._thread.join(60)
        finally:
            _after_event.clear()
            self._stack.close()

    def _thread_main(self) -> None:
        try:
            trio.run(self._main, clock=self.clock)
        except BaseException as exc:  # reported to the caller of the next step
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        seed_trio_scheduler(self.seed)
        self._token = trio.lowlevel.current_trio_token()
        self._finish = trio.Event()
        async with open_cluster(self.trace_dir, self.n, seed=self.seed,
                                options=self.options) as cluster:
            self._cluster = cluster
            self.clock.autojump_threshold = 0
            await cluster.start_all()
            await self._settle()
            self._ready.set()
            await self._finish.wait()
            self.clock.autojump_threshold = 0  # clean stops may wait on timers

    def _shutdown(self) -> None:
        assert self._finish is not None
        self._finish.set()

    async def _settle(self) -> None:
        """Freeze time and let every task that can run at this instant run."""
        self.clock.autojump_threshold = math.inf
        await trio.testing.wait_all_tasks_blocked()

    def _call(self, fn: Callable[[], Awaitable[T]], budget: float | None = None) -> T:
        """Run ``fn`` in the trio thread, within the step budget, then settle."""
        seconds = self.step_seconds if budget is None else budget

        # Virtual time bounds a step that waits; wall time bounds one that never waits (a
        # busy loop at one virtual instant, where the clock never gets to jump): a timer
        # thread cancels the step through the run's token, which the loop serves even then.
        wall = trio.CancelScope()
        token = self._token
        assert token is not None
        timer = threading.Timer(self.wall_seconds_per_step,
                                lambda: token.run_sync_soon(wall.cancel))

        async def step() -> T:
            self.clock.autojump_threshold = 0
            try:
                with wall:
                    with trio.fail_after(seconds):
                        return await fn()
                raise SimulationFailed(
                    f"a step ran over {self.wall_seconds_per_step} s of wall time at virtual "
                    f"time {self.now:.3f} (a busy loop?); steps: {self.history}")
            except trio.TooSlowError:
                raise SimulationFailed(
                    f"a step took over {seconds} virtual seconds (a hang?); steps: "
                    f"{self.history}") from None
            finally:
                if not wall.cancel_called:  # a busy loop would never let it settle
                    await self._settle()

        started = time.perf_counter()
        timer.start()
        try:
            return trio.from_thread.run(step, trio_token=token)
        except (trio.RunFinishedError, trio.Cancelled):
            if self._error is not None:
                raise SimulationFailed(f"the simulation died: {self._error!r}") from self._error
            raise
        finally:
            timer.cancel()
            self.wall_seconds += time.perf_counter() - started

    @property
    def cluster(self) -> Cluster:
        assert self._cluster is not None
        return self._cluster

    @property
    def now(self) -> float:
        return self.clock.current_time()

    # ------------------------------------------------------------------ steps

    def execute(self, step: Step) -> None:
        """Run one step (in the trio thread) and record it."""
        self.history.append(step)
        self.counters.steps += 1
        self._call(lambda: self._execute(step))

    async def _execute(self, step: Step) -> None:
        if isinstance(step, CreateTablet):
            await self._create(step)
        elif isinstance(step, Write):
            t = self._tablet(step.tablet)
            if t is not None:
                for _ in range(step.rows):
                    await self._write(t)
        elif isinstance(step, Crash):
            i = self._pick(step.server, running=True)
            if i is not None:
                await self.cluster.crash(i)
        elif isinstance(step, CrashAtStep):
            i = self._pick(step.server, running=True)
            if i is not None:
                await self._crash_at_step(i, step)
        elif isinstance(step, Restart):
            i = self._pick(step.server, running=False)
            if i is not None:
                await self.cluster.start(i)
                self.crashed_at_step.discard(i)
        elif isinstance(step, Isolate):
            i = self._pick(step.server, running=True)
            if i is not None:
                self._isolate(i)
        elif isinstance(step, Flaky):
            hosts = [s.host for s in self.cluster.servers]
            for a in hosts:
                for b in hosts:
                    if a != b:
                        self.cluster.net.set_link_faults(a, b, LinkFaults(step.drop, step.delay))
        elif isinstance(step, Heal):
            self._heal()
        elif isinstance(step, Tombstone):
            await self._tombstone(step)
        elif isinstance(step, Move):
            await self._move(step)
        elif isinstance(step, Wipe):
            await self._wipe(step.server)
        elif isinstance(step, Drop):
            await self._drop(step)
        else:
            assert isinstance(step, Wait), step
            await trio.sleep(step.seconds)

    def _tablet(self, index: int) -> TabletModel | None:
        if not self.tablets:
            self.counters.skipped += 1
            return None
        return self.tablets[index % len(self.tablets)]

    def _pick(self, index: int, *, running: bool) -> int | None:
        """The ``index``-th (modulo) server that runs (or is down); None: there is none."""
        among = [i for i in range(self.n) if self._running(i) == running]
        if not among:
            self.counters.skipped += 1
            return None
        return among[index % len(among)]

    def _running(self, i: int) -> bool:
        return self.cluster.servers[i].server is not None

    async def _call_rpc(self, i: int, method: str, body: msgspec.Struct,
                        response: type[Any], seconds: float = 2.0) -> Any:
        """One call with a bound in virtual time; None if it timed out."""
        with trio.move_on_after(seconds):
            return await self.cluster.call(i, method, body, response)
        return None

    async def _create(self, step: CreateTablet) -> None:
        members = [(step.first + k) % self.n for k in range(self.replicas)]
        if not all(self._running(i) for i in members):
            self.counters.skipped += 1
            return
        tablet_id = f"t{self.created}"
        self.created += 1
        model = TabletModel(tablet_id)
        self.tablets.append(model)
        # The same peers for every member; each member must have created it for the model
        # to hold writes to it (every member runs and the client reaches all of them).
        peers = self.cluster.peers(members)
        for i in members:
            await self._call_rpc(i, api.ADMIN_CREATE_TABLET,
                                 api.CreateTablet(tablet_id, peers), api.TabletCreated)

    async def _leader(self, tablet_id: str, seconds: float) -> tuple[int, api.ReplicaInfo] | None:
        """The running replica that leads in the highest term, polled for ``seconds``."""
        with trio.move_on_after(seconds):
            while True:
                best: tuple[int, api.ReplicaInfo] | None = None
                for i in range(self.n):
                    if not self._running(i):
                        continue
                    try:
                        info = await self._call_rpc(i, api.ADMIN_CONSENSUS_STATE,
                                                    api.TabletRef(tablet_id), api.ReplicaInfo,
                                                    0.5)
                    except _REFUSALS:
                        continue
                    if info is not None and info.role == "LEADER" and \
                            (best is None or info.term > best[1].term):
                        best = (i, info)
                if best is not None:
                    return best
                await trio.sleep(0.1)
        return None

    async def _write(self, t: TabletModel) -> None:
        key = b"k%06d" % self.next_key
        value = b"v%06d-%d" % (self.next_key, self.seed)
        seq = self.next_key
        self.next_key += 1
        req = api.Write(t.tablet_id, "sim", seq, [RowOp("put", key, value)])
        with trio.move_on_after(3.0):
            while True:
                for i in range(self.n):
                    if not self._running(i):
                        continue
                    try:
                        written = await self._call_rpc(i, api.DATA_WRITE, req, api.Written, 1.0)
                    except _REFUSALS:
                        continue
                    if written is not None:
                        t.acked[key] = value
                        self.counters.writes_acked += 1
                        return
                await trio.sleep(0.1)
        # Some attempt may have been applied: the key is absent or holds this value.
        t.unknown[key] = value
        self.counters.writes_unknown += 1

    async def _crash_at_step(self, i: int, step: CrashAtStep) -> None:
        async def writes() -> None:
            n = step.tablet
            # Writes (each a few durable steps per replica), at most 20, spaced in virtual
            # time (a write alone may take none: no loop at one instant).
            for _ in range(20 if self.tablets else 0):
                t = self._tablet(n)
                assert t is not None
                await self._write(t)
                await trio.sleep(0.05)
                n += 1

        if await self._crash_at(self.cluster.uuids[i], step.after,
                                lambda: self.cluster.crash_now(i), writes,
                                give_up_after=5.0, who="simulation"):
            self.counters.crashes_at_step += 1
            self.crashed_at_step.add(i)
            await self.cluster.crash(i)  # reap its tasks

    async def _crash_at(self, node: str, after: int, crash_now: Callable[[], bool],
                        activity: Callable[[], Awaitable[None]], *, give_up_after: float,
                        who: str) -> bool:
        """Crash process ``node`` (``crash_now``) right after its ``after``-th next traced
        durable step while ``activity`` runs, or give up after ``give_up_after`` virtual
        seconds; True if it crashed. The hook runs inside the process's own task, between
        the step's event and whatever the process would do next (``_tracer_hook``), so the
        crash lands exactly one traced step in: the crash frontier the checker allows.
        ``who`` names the simulation in the log line."""
        remaining = [after]
        crashed = trio.Event()

        def after_event(tablet_id: str, event: str) -> None:
            remaining[0] -= 1
            if remaining[0] <= 0 and crash_now():
                logger.info("%s: %s crashed right after %s of %s", who, node, event,
                            tablet_id)
                _after_event.pop(node, None)
                crashed.set()

        _after_event[node] = after_event
        try:
            with trio.move_on_after(give_up_after):
                async with trio.open_nursery() as nursery:
                    async def until_crashed() -> None:
                        await crashed.wait()
                        nursery.cancel_scope.cancel()
                    nursery.start_soon(until_crashed)
                    await activity()
                    await crashed.wait()
        finally:
            _after_event.pop(node, None)
        return crashed.is_set()

    def _heal(self) -> None:
        self.isolated.clear()
        self.cluster.net.heal()
        self.cluster.net.clear_link_faults()

    def _isolate(self, i: int) -> None:
        self.isolated.add(i)
        host = self.cluster.servers[i].host
        others = [s.host for s in self.cluster.servers if s.index != i]
        self.cluster.net.partition([host], others)

    async def _members(self, t: TabletModel) -> tuple[int, api.ReplicaInfo] | None:
        return await self._leader(t.tablet_id, 3.0)

    def _index_of(self, uuid: str) -> int | None:
        for i, u in self.cluster.uuids.items():
            if u == uuid:
                return i
        return None

    async def _tombstone(self, step: Tombstone) -> None:
        t = self._tablet(step.tablet)
        found = await self._members(t) if t is not None else None
        if t is None or found is None:
            self.counters.skipped += 1
            return
        _, info = found
        members = [p.uuid for p in info.peers]
        victim = self._index_of(members[step.member % len(members)])
        # Only when every other member runs its replica: two tombstones at once can leave
        # nobody to copy from (a tombstone votes but holds no data).
        others = [self._index_of(u) for u in members if u != self.cluster.uuids.get(victim or 0)]
        if victim is None or not self._running(victim) or not await self._all_running(
                t.tablet_id, others):
            self.counters.skipped += 1
            return
        with contextlib.suppress(*_REFUSALS):
            if await self._call_rpc(victim, api.ADMIN_DELETE_TABLET,
                                    api.DeleteTablet(t.tablet_id, "TOMBSTONE"), api.Ack):
                self.counters.tombstones += 1

    async def _all_running(self, tablet_id: str, servers: list[int | None]) -> bool:
        for i in servers:
            if i is None or not self._running(i):
                return False
            try:
                info = await self._call_rpc(i, api.ADMIN_CONSENSUS_STATE,
                                            api.TabletRef(tablet_id), api.ReplicaInfo, 0.5)
            except _REFUSALS:
                return False
            if info is None or info.state != "RUNNING":
                return False
        return True

    async def _change(self, leader: int, tablet_id: str, change: ConfigChange,
                      cas: int) -> int | None:
        try:
            done = await self._call_rpc(leader, api.ADMIN_CHANGE_CONFIG,
                                        api.ChangeConfig(tablet_id, change, cas),
                                        api.ConfigChanged, 3.0)
        except _REFUSALS:
            return None
        return done.config_index if done is not None else None

    async def _move(self, step: Move) -> None:
        t = self._tablet(step.tablet)
        found = await self._members(t) if t is not None else None
        if t is None or found is None:
            self.counters.skipped += 1
            return
        leader, info = found
        members = [p.uuid for p in info.peers]
        source_uuid = members[step.member % len(members)]
        source = self._index_of(source_uuid)
        spare = [i for i in range(self.n) if self._running(i)
                 and self.cluster.uuids.get(i) not in members]
        if source is None or not spare:
            self.counters.skipped += 1
            return
        dest = spare[0]
        add = ConfigChange("ADD", Peer(self.cluster.uuids[dest], self.cluster.address(dest),
                                       "NON_VOTER", True))
        index = await self._change(leader, t.tablet_id, add, info.config_index)
        if index is None:
            return
        # Wait for the new member to be copied and promoted before the REMOVE.
        with trio.move_on_after(10.0):
            while True:
                now = await self._leader(t.tablet_id, 2.0)
                if now is not None and any(
                        p.uuid == self.cluster.uuids[dest] and p.member_type == "VOTER"
                        for p in now[1].peers):
                    leader, info = now
                    break
                await trio.sleep(0.2)
        if self.cluster.uuids[dest] not in [p.uuid for p in info.peers if
                                            p.member_type == "VOTER"]:
            return
        if source == leader:
            with contextlib.suppress(RpcError, *api.APP_ERRORS):
                await self._call_rpc(leader, api.ADMIN_STEP_DOWN,
                                     api.StepDown(t.tablet_id), api.Ack)
            found = await self._members(t)
            if found is None or found[0] == source:
                return
            leader, info = found
        index = await self._change(leader, t.tablet_id,
                                   ConfigChange("REMOVE", Peer(source_uuid, "")),
                                   info.config_index)
        if index is None or not self._running(source):
            return
        self.counters.moves += 1
        with contextlib.suppress(*_REFUSALS):
            await self._call_rpc(source, api.ADMIN_DELETE_TABLET,
                                 api.DeleteTablet(t.tablet_id, "TOMBSTONE", index), api.Ack)

    async def _wipe(self, i: int) -> None:
        old = self.cluster.uuids.get(i)
        if old is None or not await self._may_wipe(old):
            self.counters.skipped += 1
            return
        await self.cluster.crash(i)
        self.cluster.servers[i].disk = SimDisk()
        self.crashed_at_step.discard(i)
        self.wiped.add(old)
        self.counters.wipes += 1
        await self.cluster.start(i)
        new = self.cluster.uuids[i]
        # Put the new server in the old one's place (the leader copies the tablet to it).
        for t in self.tablets:
            found = await self._members(t)
            if found is None:
                continue
            leader, info = found
            if old not in [p.uuid for p in info.peers] or leader == i:
                continue
            index = await self._change(leader, t.tablet_id,
                                       ConfigChange("REMOVE", Peer(old, "")), info.config_index)
            if index is not None:
                await self._change(leader, t.tablet_id, ConfigChange(
                    "ADD", Peer(new, self.cluster.address(i), "NON_VOTER", True)), index)

    async def _may_wipe(self, uuid: str) -> bool:
        """A wipe loses what the server acknowledged: allowed only if every tablet keeps a
        majority of its voters intact without it (never wiped), as its leader's config says;
        a tablet with no leader to ask forbids it."""
        for t in self.tablets:
            found = await self._members(t)
            if found is None:
                return False
            voters = {p.uuid for p in found[1].peers if p.member_type == "VOTER"}
            intact = voters - self.wiped - {uuid}
            if uuid in voters and len(intact) < len(voters) // 2 + 1:
                return False
        return True

    async def _drop(self, step: Drop) -> None:
        t = self._tablet(step.tablet)
        if t is None:
            return
        self.tablets.remove(t)
        for i in range(self.n):
            if self._running(i):
                with contextlib.suppress(RpcError, *api.APP_ERRORS):
                    await self._call_rpc(i, api.ADMIN_DELETE_TABLET,
                                         api.DeleteTablet(t.tablet_id, "DELETED"), api.Ack)

    # ------------------------------------------------------------------ checks

    def check_durable(self) -> None:
        """(a) Every server's fsync'd state, read as startup reads it, is what its last
        traced event of each tablet claims (the module header)."""
        self.tail.poll()
        problems = self._call_sync(self._durable_problems)
        if problems:
            raise SimulationFailed("durable state differs from the trace:\n" + "\n".join(
                problems[:6]) + f"\nsteps: {self.history}")

    def _call_sync(self, fn: Callable[[], T]) -> T:
        assert self._token is not None
        try:
            return trio.from_thread.run_sync(fn, trio_token=self._token)
        except trio.RunFinishedError:
            if self._error is not None:
                raise SimulationFailed(f"the simulation died: {self._error!r}") from self._error
            raise

    def _durable_processes(self) -> list[DurableProcess]:
        """The processes check_durable compares: every tablet server (MasterSimulation
        adds its masters)."""
        return [DurableProcess(f"server {s.index}", s.disk, f"{ROOT}/{s.host}",
                               self.cluster.uuids.get(s.index),
                               s.index in self.crashed_at_step and s.server is None)
                for s in self.cluster.servers]

    def _durable_problems(self) -> list[str]:
        problems: list[str] = []
        for process in self._durable_processes():
            if process.node is None:
                continue
            for tablet_id, found in self._durable_view(process).items():
                claim = self.tail.claims.get((process.node, tablet_id))
                self.counters.durable_checks += 1
                if claim is None and found["superblock"]["data_state"] == "DOES_NOT_EXIST" \
                        and found["quarantine"] is None and found["wal"]["location"] == "ABSENT":
                    continue
                if claim == found:
                    continue
                if process.frontier_ok:
                    self.counters.frontier += 1  # the crash frontier: the checker judges it
                    continue
                problems.append(f"{process.name} ({process.node}) tablet {tablet_id}: the "
                                f"disk holds {found}, the trace last claimed {claim}")
        return problems

    def _durable_view(self, process: DurableProcess) -> dict[str, Any]:
        """The process's durable view of the tablets it traced. A crash image changes only
        at an fsync: the last view is reused until one (keyed by the disk itself, not its
        id(): a new disk at a freed address is another disk)."""
        assert process.node is not None
        traced = self.tail.tablets_of(process.node)
        key = (process.disk, process.disk.sync_count, frozenset(traced))
        cached = self._views.get(process.name)
        if cached is not None and cached[0][0] is process.disk and cached[0][1:] == key[1:]:
            return cached[1]
        view = durable_view(process.disk, process.root, traced)
        self._views[process.name] = (key, view)
        return view

    def verify_writes(self, seconds: float = 60.0) -> None:
        """(c) Heal, restart every server, and read every acknowledged write back from a
        leader: each is there with its value; a write of unknown outcome is there with its
        value or absent."""
        self._call(lambda: self._verify(seconds), budget=seconds + 60)

    async def _verify(self, seconds: float) -> None:
        self._heal()
        for i in range(self.n):
            if not self._running(i):
                await self.cluster.start(i)
                self.crashed_at_step.discard(i)
        deadline = trio.current_time() + seconds
        for t in self.tablets:
            pending = {**t.unknown, **t.acked}
            while pending:
                if trio.current_time() > deadline:
                    raise SimulationFailed(
                        f"tablet {t.tablet_id}: {len(pending)} keys unreadable after "
                        f"{seconds} s (no leader?); steps: {self.history}")
                found = await self._leader(t.tablet_id, 5.0)
                if found is None:
                    continue
                i, _ = found
                for key in sorted(pending):
                    try:
                        r = await self._call_rpc(i, api.DATA_READ, api.Read(t.tablet_id, key),
                                                 api.ReadResult, 1.0)
                    except _REFUSALS:
                        break
                    if r is None:
                        break
                    want = pending.pop(key)
                    if key in t.acked and (not r.found or r.value != want):
                        raise SimulationFailed(
                            f"tablet {t.tablet_id}: acknowledged write {key!r}={want!r} "
                            f"reads back as {r.value if r.found else None!r}; steps: "
                            f"{self.history}")
                    if key in t.unknown and r.found and r.value != want:
                        raise SimulationFailed(
                            f"tablet {t.tablet_id}: {key!r} reads {r.value!r}, never written")

    def steps_per_second(self) -> float:
        return self.counters.steps / self.wall_seconds if self.wall_seconds else 0.0


__all__ = [
    "Crash",
    "CrashAtStep",
    "CreateTablet",
    "Drop",
    "Flaky",
    "Heal",
    "Isolate",
    "Move",
    "Restart",
    "Simulation",
    "SimulationFailed",
    "Step",
    "Tombstone",
    "TraceTail",
    "Wait",
    "Wipe",
    "Write",
    "deterministic_ids",
    "durable_view",
    "seed_trio_scheduler",
]
