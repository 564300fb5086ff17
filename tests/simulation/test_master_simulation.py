"""The deterministic simulation of the real masters and tablet servers
(impl/testing/master_simulation.py) as a Hypothesis stateful machine.

Three real masters and four real tablet servers in one process on SimDisk, MemoryNetwork and
MockClock; each rule is one step (CreateTable / DeleteTable / AlterTable through the real
master client, rows through the real table client, a master crashed now or right after its
k-th next durable catalog step, a master restarted, a tablet server crashed now or right
after its k-th next durable step, a tablet server restarted, a master or a tablet server
cut off, every cut healed, time passing). After every rule:

  (a) every process's fsync'd state, masters included (the catalog tablet), is what its
      last traced event of each tablet claims (``check_durable``);
  (b) at most one ready leader master per term, over every status seen so far (checked
      inside each step: ``MasterSimulation._observe_leaders``);
  (c) every trace so far replays clean through ``check_paths`` (the catalog rules of
      checker/catalog.py included);
and at teardown
  (d) healed and restarted, the cluster heals itself within a bound of virtual time: every
      tablet of every live table has its replica count of RUNNING VOTER replicas; a table
      whose CreateTable was acknowledged is in the leader's catalog, a deleted one is not,
      acknowledged schema versions and rows are all there (``MasterSimulation.verify``);
      and the traces are clean again.

Profiles: ``make test`` runs ``test_master_simulation_fast`` (derandomized: the same
examples every run; see FAST below for its size and cost). ``make soak``
(``HYPOTHESIS_PROFILE=soak``) runs ``test_master_simulation_long`` with 100 random programs
of up to 40 steps (``-m slow`` alone: 40 derandomized ones of up to 30). A failure prints
the steps (``state.crash_master(...)``) and the seed the simulation ran with; the run is a
function of those, so pasting the printed program into a test (as
``test_a_program_replays_exactly`` and the found-here tests do) replays it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from revivify.checker.local import check_paths
from revivify.impl.testing.master_simulation import (
    AlterTable,
    CrashMaster,
    CrashMasterAtStep,
    CrashTserver,
    CrashTserverAtStep,
    CreateTable,
    DeleteTable,
    Heal,
    IsolateMaster,
    IsolateTserver,
    MasterSimulation,
    MasterStep,
    RestartMaster,
    RestartTserver,
    Wait,
    WriteRows,
)
from revivify.impl.testing.simdisk import SimDisk
from revivify.impl.testing.simulation import SimulationFailed

MASTERS = 3
TSERVERS = 4
MAX_TABLES = 4
masters = st.integers(0, MASTERS - 1)
tservers = st.integers(0, TSERVERS - 1)
tables = st.integers(0, MAX_TABLES - 1)

# The make test profile: derandomized examples x steps (about 25 s of CPU on this machine,
# about 9 steps per CPU second with every check after every step).
FAST = (12, 20)


@attrs.define
class Stats:
    """Totals over every example of a run (printed by the tests: steps per second)."""

    examples: int = 0
    steps: int = 0
    sim_seconds: float = 0.0  # wall time inside simulation steps
    check_seconds: float = 0.0  # wall time in the checks
    cpu_seconds: float = 0.0  # process CPU time of the steps and checks (a loaded machine)
    virtual_seconds: float = 0.0
    seeds: list[int] = attrs.Factory(list)
    counters: Counter[str] = attrs.Factory(Counter)
    failures: Counter[str] = attrs.Factory(Counter)  # why client operations failed
    events: Counter[str] = attrs.Factory(Counter)  # traced events by name, summed

    def add(self, sim: MasterSimulation) -> None:
        self.counters.update(attrs.asdict(sim.mcounters))
        self.counters.update({"skipped": sim.counters.skipped,
                              "durable_checks": sim.counters.durable_checks,
                              "frontier": sim.counters.frontier})
        self.events.update(sim.tail.kinds)
        self.failures.update(sim.failures)
        self.virtual_seconds += sim.now

    def line(self) -> str:
        total = self.sim_seconds + self.check_seconds
        shown = ("master_ready", "catalog_commit", "master_call", "copy_start_replica",
                 "become_leader", "startup")
        return (f"master simulation: {self.examples} examples, {self.steps} steps, "
                f"{self.virtual_seconds:.0f} virtual s; "
                f"{self.steps / self.sim_seconds if self.sim_seconds else 0:.1f} steps/s "
                f"simulated, {self.steps / total if total else 0:.1f} steps/s with the "
                f"checks, {self.steps / self.cpu_seconds if self.cpu_seconds else 0:.1f} "
                f"steps per CPU second with the checks; {dict(self.counters)}; events "
                f"{ {k: self.events[k] for k in shown} }; client failures "
                f"{dict(self.failures)}; seeds {self.seeds}")


class MasterSimulationMachine(RuleBasedStateMachine):
    """Rules are the simulation's steps; the checks run after each (the module header)."""

    master_options: ClassVar[dict[str, object]] = {}  # MasterOptions overrides (bugs)
    stats = Stats()

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="revivify-msim-")
        self.sim: MasterSimulation | None = None

    @initialize(seed=st.integers(0, 2**16 - 1))
    def start(self, seed: int) -> None:
        self.sim = MasterSimulation(os.path.join(self.dir, "traces"), seed=seed,
                                    masters=MASTERS, servers=TSERVERS,
                                    master_options=self.master_options).__enter__()
        self.stats.examples += 1
        self.stats.seeds.append(seed)
        self._step(CreateTable(1))  # every program starts with a table

    def _step(self, step: MasterStep) -> None:
        sim = self.sim
        assert sim is not None
        started = time.perf_counter()
        cpu = time.process_time()
        sim.run(step)
        middle = time.perf_counter()
        sim.check_durable()
        _check_traces(sim)
        self.stats.cpu_seconds += time.process_time() - cpu
        self.stats.steps += 1
        self.stats.sim_seconds += middle - started
        self.stats.check_seconds += time.perf_counter() - middle

    def _tables(self) -> int:
        return len(self.sim.tables) if self.sim is not None else 0

    @precondition(lambda self: self._tables() < MAX_TABLES)
    @rule(tablets=st.integers(1, 2))
    def create_table(self, tablets: int) -> None:
        self._step(CreateTable(tablets))

    @precondition(lambda self: self._tables() >= 2)
    @rule(table=tables)
    def delete_table(self, table: int) -> None:
        self._step(DeleteTable(table))

    @rule(table=tables)
    def alter_table(self, table: int) -> None:
        self._step(AlterTable(table))

    @rule(table=tables, rows=st.integers(1, 3))
    def write_rows(self, table: int, rows: int) -> None:
        self._step(WriteRows(table, rows))

    # The same rule twice: Hypothesis picks rules uniformly, and rows are what the faults
    # should meet.
    @rule(table=tables, rows=st.integers(1, 3))
    def write_more_rows(self, table: int, rows: int) -> None:
        self._step(WriteRows(table, rows))

    @rule(master=masters, leader=st.booleans())
    def crash_master(self, master: int, leader: bool) -> None:
        self._step(CrashMaster(master, leader))

    @rule(master=masters, after=st.integers(1, 8), table=tables, leader=st.booleans())
    def crash_master_at_step(self, master: int, after: int, table: int, leader: bool) -> None:
        self._step(CrashMasterAtStep(master, after, table, leader))

    @rule(master=masters)
    def restart_master(self, master: int) -> None:
        self._step(RestartMaster(master))

    # Twice too: two master crash rules, and with two masters down the catalog has no
    # majority, so every client operation fails (NoLeader) until one comes back.
    @rule(master=masters)
    def restart_master_again(self, master: int) -> None:
        self._step(RestartMaster(master))

    @rule(server=tservers)
    def crash_tserver(self, server: int) -> None:
        self._step(CrashTserver(server))

    @rule(server=tservers, after=st.integers(1, 12), table=tables)
    def crash_tserver_at_step(self, server: int, after: int, table: int) -> None:
        self._step(CrashTserverAtStep(server, after, table))

    @rule(server=tservers)
    def restart_tserver(self, server: int) -> None:
        self._step(RestartTserver(server))

    @rule(master=masters)
    def isolate_master(self, master: int) -> None:
        self._step(IsolateMaster(master))

    @rule(server=tservers)
    def isolate_tserver(self, server: int) -> None:
        self._step(IsolateTserver(server))

    @rule()
    def heal(self) -> None:
        self._step(Heal())

    @rule(seconds=st.sampled_from([1.0, 5.0, 15.0]))
    def wait(self, seconds: float) -> None:
        self._step(Wait(seconds))

    def teardown(self) -> None:
        sim = self.sim
        try:
            if sim is not None:
                started = time.perf_counter()
                cpu = time.process_time()
                sim.verify()
                sim.check_durable()
                _check_traces(sim)
                self.stats.check_seconds += time.perf_counter() - started
                self.stats.cpu_seconds += time.process_time() - cpu
                self.stats.add(sim)
        finally:
            if sim is not None:
                sim.__exit__(None, None, None)
            shutil.rmtree(self.dir, ignore_errors=True)


def _check_traces(sim: MasterSimulation) -> None:
    """(c) The traces so far, through the checker (warnings allowed: a torn last line)."""
    report = check_paths([sim.trace_dir])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    if bad:
        raise SimulationFailed(f"seed {sim.seed}: the traces break the spec:\n" + "\n".join(
            f"  {v.kind} {os.path.basename(v.file)}:{v.line} {v.message}" for v in bad[:8])
            + f"\nsteps: {sim.steps}")


def _settings(examples: int, steps: int, *, soak_sized: bool = True) -> settings:
    """``examples`` x ``steps``; under the soak profile (random examples, not derandomized)
    100 x 40 when ``soak_sized`` (the long test only: make soak runs the fast one too)."""
    soak = soak_sized and os.environ.get("HYPOTHESIS_PROFILE") == "soak"
    return settings(max_examples=100 if soak else examples,
                    stateful_step_count=40 if soak else steps, deadline=None,
                    suppress_health_check=list(HealthCheck))


def test_master_simulation_fast() -> None:
    """The ``make test`` profile: FAST derandomized examples x steps."""
    MasterSimulationMachine.stats = Stats()
    run_state_machine_as_test(MasterSimulationMachine,
                              settings=_settings(*FAST, soak_sized=False))
    print(MasterSimulationMachine.stats.line())


@pytest.mark.slow
@pytest.mark.timeout(7200)  # the soak size takes tens of minutes on a shared machine
def test_master_simulation_long() -> None:
    """The long profile (``make soak``, or ``-m slow``): more and longer programs."""
    MasterSimulationMachine.stats = Stats()
    run_state_machine_as_test(MasterSimulationMachine, settings=_settings(40, 30))
    print(MasterSimulationMachine.stats.line())


# ---------------------------------------------------------------------------- it can fail


def _fails(machine: type[MasterSimulationMachine], examples: int = 10) -> str:
    """Run ``machine`` until an example fails (no shrinking: only the verdict)."""
    with pytest.raises(AssertionError) as failure:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=examples, stateful_step_count=8, deadline=None, database=None,
            derandomize=True, phases=[Phase.generate],
            suppress_health_check=list(HealthCheck)))
    return str(failure.value)


def test_a_catalog_acknowledged_before_its_fsync_is_caught() -> None:
    """Seeded bug: the masters never fsync (``fsync=False``): the catalog tablet's trace
    claims WAL entries the crash image of a master's disk does not hold (check (a))."""
    class NoFsync(MasterSimulationMachine):
        master_options: ClassVar[dict[str, object]] = {"fsync": False}

    message = _fails(NoFsync)
    assert "durable state differs from the trace" in message and "master" in message


@pytest.mark.parametrize("heal", [True, False])
def test_a_lost_disk_is_healed_and_without_the_policy_it_is_caught(
        tmp_path: Path, heal: bool) -> None:
    """A tablet server crashes and its disk is lost (it comes back empty, with a new
    UUID): only re-replication by the leader master's healing policy makes the tablet whole
    again, and it does. With the policy off (``heal=False``, a seeded bug) check (d) says
    the cluster did not heal itself."""
    with MasterSimulation(str(tmp_path / "traces"), seed=5,
                          master_options={"heal": heal}) as sim:
        sim.run(CreateTable(1))
        sim.run(WriteRows(0, 3))
        sim.run(Wait(2.0))
        sim.run(CrashTserver(0))
        sim.cluster.servers[0].disk = SimDisk()
        if heal:
            sim.verify(seconds=60.0)
            sim.check_durable()  # reads the traces so far, too
            assert sim.mcounters.replicas_checked == 3
            assert sim.tail.kinds["copy_start_replica"] >= 1  # re-replicated by a copy
        else:
            with pytest.raises(SimulationFailed, match="did not heal itself"):
                sim.verify(seconds=30.0)


def test_two_ready_leaders_in_one_term_are_caught(tmp_path: Path) -> None:
    """Check (b) on its own: a record that another master was ready in every term so far
    makes the next status of the real ready leader a second one in its term."""
    with MasterSimulation(str(tmp_path / "traces"), seed=2) as sim:
        sim.ready_by_term = {term: "another-master" for term in range(100)}
        with pytest.raises(SimulationFailed, match="two ready leader masters in term"):
            sim.run(Wait(1.0))


def test_a_lost_acknowledged_row_is_caught(tmp_path: Path) -> None:
    """Check (d)'s read-back: a row the model holds as acknowledged but never written."""
    with MasterSimulation(str(tmp_path / "traces"), seed=4) as sim:
        sim.run(CreateTable(1))
        sim.run(WriteRows(0, 2))
        sim.tables[0].acked[b"never-written"] = b"v"
        with pytest.raises(SimulationFailed, match="acknowledged row b'never-written'"):
            sim.verify()


# ---------------------------------------------------------------------------- determinism

PROGRAM: list[MasterStep] = [
    CreateTable(1), WriteRows(0, 3), CrashMaster(0, leader=True), WriteRows(0, 2),
    CreateTable(2), CrashTserver(1), Wait(5.0), AlterTable(0), RestartMaster(0),
    CrashMasterAtStep(0, 3), IsolateTserver(0), WriteRows(1, 2), IsolateMaster(1), Heal(),
    DeleteTable(0), RestartTserver(0), CrashTserverAtStep(1, 4), Wait(2.0),
]


def _run_program(trace_dir: str, seed: int) -> tuple[str, dict[str, Any]]:
    with MasterSimulation(trace_dir, seed=seed) as sim:
        for step in PROGRAM:
            sim.run(step)
            sim.check_durable()
        sim.verify()
        counters = attrs.asdict(sim.mcounters)
    assert counters["master_crashes_at_step"] == 1 and counters["rows_acked"] >= 5
    assert counters["tserver_crashes_at_step"] == 1
    return _digest(trace_dir), counters


def _digest(trace_dir: str) -> str:
    """The traces without their wall-clock field, as one hash."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(trace_dir)):
        for line in Path(trace_dir, name).read_text().splitlines():
            event: dict[str, Any] = json.loads(line)
            event.pop("wall_ns")
            h.update(json.dumps(event, sort_keys=True).encode())
    return h.hexdigest()


def _in_fresh_interpreter(trace_dir: Path, seed: int, hash_seed: str) -> str:
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_master_simulation as t
        print(t._run_program({str(trace_dir)!r}, seed={seed})[0])
    """)
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, "-c", script], env=env, check=True,
                          capture_output=True, text=True, timeout=300).stdout.split()[-1]


def test_a_program_replays_exactly(tmp_path: Path) -> None:
    """The same steps and seed give identical traces (but for wall time) and the same
    outcomes: twice in one process, and in two fresh interpreters with different string-hash
    seeds; another seed gives other traces; the traces are clean.

    Known gap: a run in a process that has already run the Hypothesis machine (pytest
    running this whole module) gave other traces than a fresh interpreter (the same
    steps and seed; seen once under ``pytest tests/simulation/test_master_simulation.py``),
    so some process-global state outlives a simulation; the fresh-interpreter comparison is
    the one asserted, and a failing seed is replayed in a fresh process."""
    here = _run_program(str(tmp_path / "a"), seed=7)
    assert _run_program(str(tmp_path / "b"), seed=7) == here
    fresh = _in_fresh_interpreter(tmp_path / "d", 7, "4242")
    assert _in_fresh_interpreter(tmp_path / "e", 7, "17") == fresh
    assert _run_program(str(tmp_path / "c"), seed=8)[0] != here[0]
    assert _in_fresh_interpreter(tmp_path / "f", 8, "4242") != fresh
    report = check_paths([str(tmp_path / "a")])
    assert report.server_events > 0
    assert not [v for v in report.sorted() if v.severity != "warning"]


# ---------------------------------------------------------------------------- found here
# Two master bugs this machine found, both fixed; their programs are replayed as regression
# tests by test_master_sim_fixes.py (fixes: impl/master/queries.py "Locations for writers"
# with impl/client/table.py, and impl/master/calls.py "Every attempt re-checked").

# Shrunk from the random exploration (seed 200, 30 steps, by Hypothesis, then by hand): the
# table's one tablet elects a leader and acknowledges rows before any replica's report of
# that leader reaches the masters, so the catalog still holds the tablet CREATING; every
# tablet server then stays down past the masters' creation_timeout (60 s), and the leader
# master REPLACES the tablet (catalog_commit replace_tablets: the old one REPLACED, a new
# empty one CREATING for the same partition, DeleteTablet DELETED to the old replicas).
# After the heal the new tablet is RUNNING with 3 replicas and the acknowledged rows are
# gone. GetTableLocations hands out a CREATING tablet (impl/master/queries.py
# table_locations: every live tablet), and the table client writes to it; Kudu's master
# answers ServiceUnavailable for a tablet that is not RUNNING (BuildLocationsForTablet), so
# no write is acknowledged by a tablet the master may still replace. Seeds 1, 3, 200 fail.
CREATING_TABLET_REPLACED: list[MasterStep] = [
    CreateTable(1), WriteRows(0, 3), CrashTserver(0), CrashTserver(0), CrashTserver(0),
    CrashTserver(0), Wait(15.0), Wait(15.0), Wait(15.0), Wait(15.0), Wait(15.0),
]


# Found by the random exploration (seed 31, 35 steps; not shrunk further; the masters'
# creation_timeout raised to 10,000 s there so that the bug above could not mask others):
# table tb1's one tablet never reported a leader, so it stays CREATING across three leader
# masters (terms 1, 4 and 5), each releasing CreateTablet calls to its replicas (the
# creation nudges of impl/master/server.py, retried for up to call_retry_seconds). The
# term-5 leader then deletes the table (catalog_commit delete_table: the tablet DELETED)
# and its DeleteTablet DELETED reaches tablet server f6bc18..., which deletes the replica
# for good (delete_* steps down to DOES_NOT_EXIST). Then a CreateTablet of that same tablet
# arrives there (a retry of a call released before the delete, by this leader or a former
# one: the trace does not say which; no master_call is traced for a retry) and the server
# creates the replica afresh at term 0 after it had voted in term 1: the checker reports
# TermRegression (f6bc18....0001.jsonl line 31, "term 0 after term 1"), and the deleted
# table's tablet lives again on that server. A CreateTablet released before a write that
# deletes its tablet must not be delivered (or retried) after it; and/or the tablet server
# could refuse to re-create an id it deleted. Reproduced exactly by the program below.
CREATE_AFTER_DELETE: list[MasterStep] = [
    CreateTable(tablets=1), AlterTable(table=0), CreateTable(tablets=1),
    WriteRows(table=0, rows=1), WriteRows(table=1, rows=1), CrashMaster(master=2, leader=False),
    CrashTserverAtStep(server=1, after=5, table=3), CrashMaster(master=1, leader=False),
    IsolateTserver(server=1), CreateTable(tablets=1), WriteRows(table=3, rows=2),
    AlterTable(table=0), CrashMaster(master=1, leader=True), CreateTable(tablets=1),
    RestartMaster(master=2), RestartTserver(server=3), IsolateTserver(server=3),
    IsolateTserver(server=2), CrashTserverAtStep(server=3, after=7, table=0),
    DeleteTable(table=3), RestartMaster(master=2), AlterTable(table=2),
    WriteRows(table=1, rows=3), IsolateTserver(server=0), CrashMaster(master=2, leader=False),
    RestartMaster(master=2), AlterTable(table=2), IsolateTserver(server=3),
    WriteRows(table=2, rows=2), RestartTserver(server=2), IsolateTserver(server=2),
    DeleteTable(table=0), IsolateTserver(server=2), RestartTserver(server=2),
    DeleteTable(table=3),
]


# Found by the long profile (seed 5337, 30 steps; the failing example Hypothesis printed):
# tablet tb0's replica on server 4e8238... is tombstoned while that server is cut off, so
# its config (index 0) never names de1789..., which joins the tablet meanwhile and later
# leads it in term 3. The policy adds the tombstone back as a NON_VOTER (promote); the
# leader's AppendRequests reach it (it learns term 3), but its TOMBSTONED answers go
# nowhere: a push is answered by a push, and the tombstone knew no address for a sender its
# config does not name. The leader's progress for it stays PROBE with a probe out, never
# NEEDS_COPY, so no tablet copy is asked, and the tablet keeps three VOTERs and a NON_VOTER
# past the 240 s heal ("the cluster did not heal itself"). Fixed by every Raft push naming
# where its sender listens (impl/tserver/api.py RaftMessages.src_address). Reproduces only
# with Hypothesis imported (trio then orders each batch of runnable tasks its own way: see
# impl/testing/simulation.py), as in this module.
TOMBSTONE_UNKNOWN_LEADER: list[MasterStep] = [
    CreateTable(tablets=1), IsolateTserver(server=2), IsolateMaster(master=0),
    CrashTserverAtStep(server=2, after=10, table=3), RestartTserver(server=0),
    RestartTserver(server=3), Heal(), CrashMasterAtStep(master=0, after=3, table=0,
                                                          leader=False),
    CrashMaster(master=2, leader=True), IsolateTserver(server=0), RestartTserver(server=0),
    AlterTable(table=0), WriteRows(table=2, rows=2), IsolateMaster(master=0),
    RestartTserver(server=0), CrashTserverAtStep(server=3, after=12, table=3),
    RestartMaster(master=0), RestartMaster(master=1), Heal(), RestartTserver(server=2),
    AlterTable(table=0), RestartMaster(master=0), CrashTserverAtStep(server=1, after=7,
                                                                     table=0),
    IsolateTserver(server=2), WriteRows(table=0, rows=1), Wait(seconds=1.0),
    RestartTserver(server=3), RestartMaster(master=2), AlterTable(table=3),
    Wait(seconds=15.0),
]
