"""One nemesis run: start the cluster, run the workload under the seeded faults, heal, read
every key, stop cleanly, check the histories and the traces, summarise.

    python -m revivify.impl.testing.nemesis --profile short --seed 1

Phases (each bounded; any failure still ends in cleanup):

1. Start 3 tablet servers (and masters for the masters profile), each in a network
   namespace of its own (``--partitions kernel``, netns.py; on 127.0.0.1 with ``rpc``), with
   REVIVIFY_FAULT_FILE set, create the tablet (3 replicas), wait for a leader.
2. Workload (workload.py) and nemesis at once: the faults of schedule.py, one at a time,
   each injected at its offset (or as soon as the previous one is healed), held, healed.
3. Heal everything: faults lifted, paused servers resumed, dead servers restarted, a replica
   left FAILED by a disk fault tombstoned so that the leader copies it back (Kudu heals
   by copy; without the masters' re-replication, issue 19, the nemesis asks for it by
   tombstoning the failed replica, and the leader's own copy request does the rest); if no
   copy brought it back within COPY_SECONDS, the server is restarted.
4. Final reads: every key once more, through a fresh client, recorded in the histories
   (``final``): an acknowledged write must be readable.
5. Clean stop (SIGTERM: every trace ends with server_stop), then ``revivify history check``
   on both histories and ``revivify trace check`` on the traces, through the CLI.
6. The summary table on stdout, ``summary.json`` in the run's directory (and --json-out);
   exit 0 only if nothing was lost, both histories are linearizable, the traces are clean
   and every fault was healed. The availability target is reported met or missed, never a
   reason to fail (timing on a shared machine).

Ctrl-C or SIGTERM at any point: every process is killed, the fault file removed and the
network (namespaces, links, cut tables) deleted.
"""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import attrs
import trio

from revivify.impl.client import ClientOptions, open_table_client, open_tablet_client
from revivify.impl.client.master import master_call
from revivify.impl.faultfile import POLL_SECONDS
from revivify.impl.master import api as master_api
from revivify.impl.rpc.backoff import Backoff

from . import schedule as sched
from .cluster import Cluster
from .operator import CliRows, Ddl
from .operator import cli as operator_cli
from .report import FaultRecord, availability, count_outcomes, lost_writes, render
from .workload import REGISTER_KEY, History, Worker

TABLE = "nemesis"
COPY_SECONDS = 30.0
CATCH_UP_SECONDS = 20.0  # after each heal, for every replica to catch up (caught_up)
SETTLE_SECONDS = 90.0
LOST_KEY = "lost"  # the self-test's phantom write goes to this key (never written for real)


@attrs.frozen
class Options:
    profile: sched.Profile
    seed: int
    workdir: str | None = None
    keep: bool = False
    json_out: str | None = None
    self_test: str | None = None  # "lose-write": a phantom acknowledged write is recorded
    tick_ms: int = 50
    election_ticks: int = 10
    check_timeout: float = 120.0
    partitions: str = "kernel"  # cluster.py: "kernel" (netns + nft) or "rpc" (fault file)

    @property
    def election_timeout(self) -> float:
        return self.tick_ms * self.election_ticks / 1000

    @property
    def call_timeout(self) -> float:
        """The workload clients' per-call timeout: twice the election timeout. A call to a
        paused or cut-off leader gives up after it and the client looks for the leader
        again; a new one is elected within one to two election timeouts, so the window
        without a successful operation stays near 2x the election timeout, inside the 3x
        target. With the library's default (2 s, sized for real clusters' longer election
        timeouts) every client waits out the whole 2 s on the stalled leader."""
        return 2 * self.election_timeout

    @property
    def backoff(self) -> Backoff:
        """The workload clients' delays between attempts: the library's schedule capped at
        half an election timeout. After a leader stalls, a new one is elected within one to
        two election timeouts; a client whose discovery rounds found none yet must not sleep
        the library's 0.8-1 s (sized for real clusters) past the election, or the window
        without a successful operation grows by that sleep (a 10-minute run: election 1.27 s
        after a leader's SIGSTOP, the first success 0.83 s after that)."""
        return Backoff(initial=0.05, max=self.election_timeout / 2, multiplier=2.0,
                       jitter=0.5)


class Run:
    def __init__(self, options: Options, cluster: Cluster) -> None:
        self.options = options
        self.profile = options.profile
        self.cluster = cluster
        self.tablet_id = ""  # the first tablet: "the leader" of a fault is its leader's
        self.tablet_ids: list[str] = []
        self.ddl = Ddl()
        self.last_ksck: Any = None  # the problems of the last ksck that was not healthy
        self.t0 = 0.0
        self.faults: list[FaultRecord] = []
        self.register = History("register")
        self.map = History("kv")
        self.problems: list[str] = []
        self.final_reads_ok = True
        self.checks: list[dict[str, Any]] = []  # check_each: the checks after each fault

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, text: str) -> None:
        print(f"[nemesis {self.now():7.2f}] {text}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ clients

    def client_options(self) -> ClientOptions:
        return ClientOptions(max_attempts=10_000, deadline=self.profile.op_deadline,
                             call_timeout=self.options.call_timeout,
                             backoff=self.options.backoff)

    def open_rows(self, rng: random.Random, *, cli: bool = False) -> Any:
        if cli:
            assert self.cluster.masters is not None
            # The CLI's own deadline inside the workload's: its process start counts too.
            return CliRows.open(self.cluster.masters.master_list, TABLE,
                                0.7 * self.profile.op_deadline)
        if self.cluster.masters is not None:
            return open_table_client(self.cluster.masters.master_addresses, TABLE,
                                     options=self.client_options(), rng=rng)
        return open_tablet_client(self.cluster.tservers.addresses, self.tablet_id,
                                  options=self.client_options(), rng=rng)

    # ------------------------------------------------------------------ phases

    async def setup(self) -> None:
        await trio.to_thread.run_sync(self.cluster.start_all)
        if self.cluster.masters is not None:
            request = master_api.CreateTableRequest(TABLE, [], self.profile.tablets, 3,
                                                    request_id="nemesis")
            options = attrs.evolve(self.client_options(), deadline=SETTLE_SECONDS)
            reply = await master_call(self.cluster.masters.master_addresses,
                                      master_api.MASTER_CREATE_TABLE, request,
                                      master_api.TableCreatedReply, options)
            self.tablet_ids = list(reply.tablet_ids)
        else:
            self.tablet_ids = ["nemesis"]
            await self.cluster.create_tablet(self.tablet_ids[0])
        self.tablet_id = self.tablet_ids[0]
        await self.settle("start")

    async def healthy(self) -> bool:
        """The cluster as ``revivify ksck`` sees it (masters profiles): every master and
        tablet server up, one ready leader, every tablet HEALTHY (exit 0)."""
        assert self.cluster.masters is not None
        masters = self.cluster.masters.master_list
        code, doc = await trio.to_thread.run_sync(
            lambda: operator_cli("ksck", "--masters", masters, timeout=30))
        self.last_ksck = doc.get("problems", doc) if isinstance(doc, dict) else doc
        return code == 0

    async def until_healthy(self, seconds: float) -> bool:
        with trio.move_on_after(seconds):
            while not await self.healthy():
                await trio.sleep(0.5)
            return True
        self.log(f"ksck's problems: {str(self.last_ksck)[:600]}")
        return False

    async def settle(self, why: str) -> None:
        """Wait until all three replicas run and one leads (healing FAILED ones); with
        masters, until ksck says the cluster is healthy (the masters heal by themselves)."""
        if self.cluster.masters is not None:
            if not await self.until_healthy(SETTLE_SECONDS):
                self.problems.append(f"{why}: the cluster did not become healthy (ksck) "
                                     f"within {SETTLE_SECONDS:g} s")
            return
        deadline = trio.current_time() + SETTLE_SECONDS
        while True:
            states = await self.cluster.states(self.tablet_id)
            if (all(st == "RUNNING" for st, _, _ in states)
                    and any(role == "LEADER" for _, role, _ in states)):
                return
            if trio.current_time() > deadline:
                self.problems.append(f"{why}: the tablet did not settle: {states}")
                return
            for i, (st, _, _) in enumerate(states):
                if st == "FAILED":
                    await self.heal_failed(i, "settle")
            await trio.sleep(0.2)

    async def workload(self, stop: trio.Event) -> None:
        base = random.Random(f"workload:{self.options.seed}")
        map_keys = tuple(f"k{n}" for n in range(self.profile.map_keys))
        n_library = self.profile.register_clients + self.profile.map_clients
        n_workers = n_library + self.profile.cli_clients
        async with trio.open_nursery() as nursery:
            for n in range(n_workers):
                on_register = n < self.profile.register_clients
                worker = Worker(self.register if on_register else self.map, n, n_workers,
                                (REGISTER_KEY,) if on_register else map_keys,
                                random.Random(base.random()), self.profile.op_deadline,
                                self.now)
                nursery.start_soon(self._worker, worker, random.Random(base.random()), stop,
                                   n >= n_library)
            if self.profile.ddl and self.cluster.masters is not None:
                nursery.start_soon(self.ddl.run, self.cluster.masters.master_list, stop,
                                   random.Random(base.random()))

    async def _worker(self, worker: Worker, rng: random.Random, stop: trio.Event,
                      cli: bool) -> None:
        async with self.open_rows(rng, cli=cli) as rows:
            await worker.run(rows, stop)

    async def nemesis(self, faults: list[sched.Fault]) -> None:
        for fault in faults:
            await trio.sleep(max(0.0, fault.at - self.now()))
            await self.one_fault(fault)

    async def one_fault(self, fault: sched.Fault) -> None:
        c = self.cluster
        target = fault.target
        on_master = fault.kind in (sched.MASTER_KILL, sched.MASTER_PAUSE,
                                   sched.MASTER_PARTITION)
        which = ""
        if target == sched.TARGET_LEADER:
            leader = await (c.leader_master() if on_master else c.leader(self.tablet_id))
            target = leader if leader is not None else 0
            which = " (the leader)" if leader is not None else " (no leader found)"
        injected = self.now()
        detail = ""
        what = "master" if on_master else "server"
        self.log(f"inject {fault.kind} on {what} {target}{which} for {fault.hold:.2f} s")
        if on_master or fault.kind in (sched.KILL_TWO, sched.MASTER_AND_TSERVER,
                                       sched.ALL_DOWN):
            detail = await self.inject_cluster_fault(fault.kind, target)
        elif fault.kind == sched.KILL:
            await trio.to_thread.run_sync(c.kill, target)
        elif fault.kind == sched.POWER_LOSS_ALL:
            await trio.to_thread.run_sync(c.kill_all)
            detail = "every tablet server"
        elif fault.kind == sched.PAUSE:
            c.pause(target)
        elif fault.kind in (sched.PARTITION_ONE, sched.PARTITION_LEADER):
            await trio.to_thread.run_sync(c.isolate, target)
        elif fault.kind == sched.PARTITION_BRIDGE:
            a, b = [i for i in range(len(c.servers)) if i != target][:2]
            await trio.to_thread.run_sync(c.cut_pair, a, b)
            detail = f"servers {a} and {b} cut, {target} bridges"
        elif fault.kind == sched.PARTITION_HALVES:
            minority, majority = await trio.to_thread.run_sync(c.split, target)
            detail = f"{' '.join(minority)} | {' '.join(majority)}"
        elif fault.kind == sched.PARTITION_FLAP:
            detail = await self.flap(target, fault.hold)
        elif fault.kind in sched.CLOCKS:
            detail = self.clock(fault.kind, target)
        elif fault.kind == sched.DISK_WAL_FSYNC:
            c.break_disk(target, "wals/", "fsync", "EIO")
        elif fault.kind == sched.DISK_DATA_WRITE:
            c.break_disk(target, "data/", "write", "EIO")
        elif fault.kind == sched.DISK_FULL:
            c.break_disk(target, "", "write", "ENOSPC")
        else:
            raise AssertionError(f"unknown fault {fault.kind}")
        if fault.kind != sched.PARTITION_FLAP:  # a flap held itself
            await trio.sleep(fault.hold)
        heal = await self.heal(fault.kind, target)
        healed = self.now()
        self.log(f"healed {fault.kind} on {what} {target}: {heal}")
        recovered = round(self.now() - healed, 3) if await self.caught_up() else None
        self.faults.append(FaultRecord(fault.kind, target, round(injected, 3),
                                       round(healed, 3), heal, detail, recovered))
        if self.profile.check_each:
            await self.check_after(fault.kind, recovered is not None)

    async def check_after(self, kind: str, healthy: bool) -> None:
        """check_each: after a healed fault, the cluster healthy (ksck, within
        CATCH_UP_SECONDS: caught_up) and both histories so far linearizable. A prefix of a
        history is a history: operations still open are unknown to the checker (as an
        ``info`` is), so a prefix of a linearizable run is linearizable and a violation
        found now is one the whole run has too, found where it happened. (The traces are
        checked once, at the end: a server's trace is read to its end, and a running
        server's has none yet.)"""
        n = len(self.checks) + 1
        folder = os.path.join(self.cluster.root, "checks")
        os.makedirs(folder, exist_ok=True)
        verdicts: dict[str, bool | None] = {}
        for history in (self.register, self.map):
            path = os.path.join(folder, f"{n}-{kind}-{history.model}.jsonl")
            history.write_jsonl(path)
            verdicts[history.model] = await trio.to_thread.run_sync(
                check_history, path, history.model, self.options.check_timeout)
        self.checks.append({"after": kind, "ksck_healthy": healthy,
                            "linearizable": verdicts})
        self.log(f"checks after {kind}: ksck {'healthy' if healthy else 'NOT healthy'}, "
                 f"linearizable {verdicts}")
        if not healthy:
            self.problems.append(f"after {kind}: ksck not healthy within "
                                 f"{CATCH_UP_SECONDS:g} s of the heal")
        for model, verdict in verdicts.items():
            if verdict is not True:
                self.problems.append(f"after {kind}: the {model} history so far is "
                                     f"{'not linearizable' if verdict is False else 'unchecked'}")

    async def flap(self, target: int, hold: float) -> str:
        """partition-flap: tablet server `target` cut off from every other server, healed,
        cut off again, each FLAP_SECONDS, for `hold` seconds (ends cut or healed, whichever
        the last step was; the heal lifts it). Each cut is new to TCP: connections that
        survived the last one are in back-off when the next one begins."""
        c = self.cluster
        end = trio.current_time() + hold
        flips = 0
        while trio.current_time() < end:
            if flips % 2 == 0:
                await trio.to_thread.run_sync(c.isolate, target)
            else:
                await trio.to_thread.run_sync(c.lift_cuts)
            flips += 1
            await trio.sleep(min(sched.FLAP_SECONDS, max(0.0, end - trio.current_time())))
        return f"{(flips + 1) // 2} cut(s) of {sched.FLAP_SECONDS:g} s"

    def clock(self, kind: str, target: int) -> str:
        """clock-jump / clock-fast on server `target` (tablet servers, then masters)."""
        c = self.cluster
        n = len(c.servers)
        name = f"ts{target}" if target < n else f"m{target - n}"
        if kind == sched.CLOCK_JUMP:
            c.clock_fault(name, jump=sched.CLOCK_JUMP_SECONDS)
            return f"{name}'s clock {sched.CLOCK_JUMP_SECONDS:g} s ahead"
        c.clock_fault(name, rate=sched.CLOCK_RATE)
        return f"{name}'s clock at {sched.CLOCK_RATE:g}x"

    async def inject_cluster_fault(self, kind: str, target: int) -> str:
        """The masters' faults and the faults of two servers at once; what was hit."""
        c = self.cluster
        if kind == sched.MASTER_KILL:
            await trio.to_thread.run_sync(c.kill_master, target)
        elif kind == sched.MASTER_PAUSE:
            c.pause_master(target)
        elif kind == sched.MASTER_PARTITION:
            await trio.to_thread.run_sync(c.isolate_master, target)
        elif kind == sched.KILL_TWO:
            other = (target + 1) % len(c.servers)
            await trio.to_thread.run_sync(c.kill, target)
            await trio.to_thread.run_sync(c.kill, other)
            return f"tablet servers {target} and {other}"
        elif kind == sched.MASTER_AND_TSERVER:
            master = await c.leader_master()
            master = 0 if master is None else master
            await trio.to_thread.run_sync(c.kill_master, master)
            await trio.to_thread.run_sync(c.kill, target)
            return f"master {master} and tablet server {target}"
        elif kind == sched.ALL_DOWN:
            await trio.to_thread.run_sync(c.kill_everything)
            return "every master and tablet server"
        return ""

    async def caught_up(self) -> bool:
        """Before the next fault: every replica RUNNING and caught up with the leader's
        commit index (bounded by CATCH_UP_SECONDS; with masters, ksck healthy). A replica
        copied back or restarted is RUNNING before its log has caught up; a fault injected
        then leaves two replicas out of three impaired, which is not the one-stalled-server
        situation whose availability the summary's target measures (10-minute runs: a
        SIGSTOP right after a copy gave the only windows over the target, 2.1 s). Whether
        it did within the bound (the summary's ``recovered_s``; with masters each ksck is a
        CLI process, so that figure is coarse, about a second)."""
        if self.cluster.masters is not None:
            if not await self.until_healthy(CATCH_UP_SECONDS):
                self.log(f"the cluster not healthy within {CATCH_UP_SECONDS:g} s: next "
                         "fault anyway")
                return False
            return True
        with trio.move_on_after(CATCH_UP_SECONDS):
            while not await self.cluster.caught_up(self.tablet_id):
                await trio.sleep(0.1)
            return True
        self.log(f"replicas not all caught up within {CATCH_UP_SECONDS:g} s: next fault "
                 "anyway")
        return False

    async def heal(self, kind: str, target: int) -> str:
        c = self.cluster
        if kind == sched.KILL:
            await trio.to_thread.run_sync(c.start, target)
            return "restarted"
        if kind == sched.POWER_LOSS_ALL:
            await trio.to_thread.run_sync(c.start_tservers)
            return "every tablet server restarted"
        if kind in (sched.KILL_TWO, sched.MASTER_AND_TSERVER, sched.ALL_DOWN,
                    sched.MASTER_KILL):
            await trio.to_thread.run_sync(c.start_everything)
            return "restarted"
        if kind == sched.MASTER_PAUSE:
            c.start_everything()  # resumes the paused master
            return "resumed"
        if kind == sched.PAUSE:
            c.resume(target)
            return "resumed"
        await trio.to_thread.run_sync(c.lift_faults)
        # Every server sees the lifted fault within one poll of the fault file
        # (impl/faultfile.py POLL_SECONDS): heal after that, or a tombstone may still hit it.
        await trio.sleep(4 * POLL_SECONDS)
        if kind in sched.CLOCKS:
            return "clock at 1x (a jump stays)"
        if kind not in sched.DISK:
            return "cut lifted"
        if not c.servers[target].running:  # the server stopped on the disk error
            await trio.to_thread.run_sync(c.start, target)
            return "restarted (the server had stopped)"
        state, _, _ = await c.replica_state(target, self.tablet_id)
        if state != "FAILED":
            return f"lifted (replica {state})"
        return await self.heal_failed(target, kind)

    async def heal_failed(self, i: int, why: str) -> str:
        """A FAILED replica: tombstone it and let the leader copy it back; restart the
        server if no copy did within COPY_SECONDS."""
        c = self.cluster
        self.log(f"server {i}: replica FAILED ({why}): tombstoning it for a copy")
        try:
            await c.tombstone(i, self.tablet_id)
        except Exception as exc:
            self.log(f"server {i}: tombstone refused: {exc!r}")
        with trio.move_on_after(COPY_SECONDS):
            while True:
                state, _, _ = await c.replica_state(i, self.tablet_id)
                if state == "RUNNING":
                    return "copied"
                await trio.sleep(0.2)
        self.log(f"server {i}: not copied back within {COPY_SECONDS:g} s: restarting it")
        await trio.to_thread.run_sync(c.kill, i)
        await trio.to_thread.run_sync(c.start, i)
        return "restarted (no copy in time)"

    async def final_reads(self) -> None:
        keys = [(self.register, REGISTER_KEY)]
        keys += [(self.map, f"k{n}") for n in range(self.profile.map_keys)]
        if self.options.self_test == "lose-write":
            # An acknowledged write the servers never saw: the checks must call it lost.
            value = next(self.map.values)
            process = 10_000
            for kind in ("invoke", "ok"):
                self.map.record({"process": process, "type": kind, "f": "write",
                                 "key": LOST_KEY, "value": value, "time": self.now()})
            keys.append((self.map, LOST_KEY))
        async with self.open_rows(random.Random(0)) as rows:
            for n, (history, key) in enumerate(keys):
                worker = Worker(history, 20_000 + n, 1, (key,), random.Random(n),
                                self.profile.op_deadline, self.now)
                for _attempt in range(10):
                    if await worker.read(rows, key, final=True):
                        history.events[-1]["final"] = True
                        break
                else:
                    self.final_reads_ok = False
                    self.problems.append(f"key {key!r}: no final read succeeded")

    # ------------------------------------------------------------------ the run

    async def main(self) -> None:
        self.t0 = time.monotonic()  # setup's log lines; the workload's clock starts below
        await self.setup()
        faults = sched.schedule(self.profile, self.options.seed)
        self.log(f"tablet {self.tablet_id}; {len(faults)} faults planned")
        self.t0 = time.monotonic()
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.workload, stop)
            await self.nemesis(faults)
            await trio.sleep(max(0.0, self.profile.duration - self.now()))
            stop.set()
        self.workload_end = self.now()
        self.log("workload stopped; healing everything")
        self.cluster.lift_faults()
        await trio.to_thread.run_sync(self.cluster.start_everything)
        await self.settle("final")
        await self.final_reads()
        if self.profile.ddl and self.cluster.masters is not None:
            self.problems.extend(await trio.to_thread.run_sync(
                self.ddl.check, self.cluster.masters.master_list))


def _cli(*args: str, timeout: float) -> tuple[int, Any]:
    """Run ``revivify ARGS --json --quiet``; (exit code, the parsed document or the text)."""
    cmd = [sys.executable, "-m", "revivify.impl.cli.main", *args, "--json", "--quiet"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 2, f"no verdict within {timeout:g} s"
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        return done.returncode, (done.stdout + done.stderr).strip()[-2000:]


def check_history(path: str, model: str, timeout: float) -> bool | None:
    """``revivify history check PATH --model MODEL``: True linearizable, False not, None
    no verdict (timed out or unusable)."""
    code, _ = _cli("history", "check", path, "--model", model, "--timeout",
                   str(int(timeout)), timeout=timeout + 30)
    return {0: True, 1: False}.get(code)


def summarize(run: Run, options: Options, root: str) -> dict[str, Any]:
    register_path = os.path.join(root, "register.jsonl")
    map_path = os.path.join(root, "map.jsonl")
    run.register.write_jsonl(register_path)
    run.map.write_jsonl(map_path)
    linearizable: dict[str, bool | None] = {}
    for model, path in (("register", register_path), ("kv", map_path)):
        linearizable[model] = check_history(path, model, options.check_timeout)
    code, doc = _cli("trace", "check", run.cluster.trace_dir, timeout=600)
    trace_verdict = {0: "clean", 1: "VIOLATIONS"}.get(code, "UNUSABLE")
    events = run.register.events + run.map.events
    lost = lost_writes(run.register.events) + lost_writes(run.map.events)
    av = availability(events, run.faults, getattr(run, "workload_end", run.now()))
    call_timeout = options.call_timeout
    p99_limit = 2 * options.election_timeout + call_timeout
    gap_limit = 3 * options.election_timeout
    stall_p99 = av["stall_p99_latency_s"]
    met = (stall_p99 is not None and stall_p99 <= p99_limit
           and av["stall_longest_unavailability_s"] <= gap_limit)
    problems = list(run.problems)
    if lost:
        problems.append(f"{len(lost)} lost write(s): {lost[:3]}")
    for model, verdict in linearizable.items():
        if verdict is not True:
            what = "not linearizable" if verdict is False else "unchecked"
            problems.append(f"{model} history {what}")
    if trace_verdict != "clean":
        problems.append(f"traces: {trace_verdict}")
    by_model = {"register": count_outcomes(run.register.events),
                "kv": count_outcomes(run.map.events)}
    total = {k: by_model["register"][k] + by_model["kv"][k] for k in ("ok", "fail", "info")}
    return {
        "profile": options.profile.name, "seed": options.seed,
        "cluster": _cluster_text(options.profile),
        "ddl": run.ddl.counts() if options.profile.ddl else None,
        "workload_seconds": round(getattr(run, "workload_end", run.now()), 2),
        "operations": total, "by_model": by_model,
        "faults_by_kind": dict(collections.Counter(f.kind for f in run.faults)),
        "heals": dict(collections.Counter(f.heal for f in run.faults)),
        "faults": [attrs.asdict(f) for f in run.faults],
        "availability": av,
        "target": {"met": met, "p99_limit_s": p99_limit, "gap_limit_s": gap_limit,
                   "election_timeout_s": options.election_timeout,
                   "call_timeout_s": call_timeout},
        "lost_writes": len(lost), "lost": lost, "final_reads_ok": run.final_reads_ok,
        "linearizable": linearizable, "trace_verdict": trace_verdict,
        "checks_after_faults": run.checks,
        "trace_report": doc if code != 0 else None,
        "self_test": options.self_test, "workdir": root,
        "partitions": options.partitions,
        "passed": not problems, "problems": problems,
    }


def _cluster_text(profile: sched.Profile) -> str:
    if not profile.masters:
        return f"{profile.tservers} tablet servers, no masters"
    return (f"{profile.tservers} tablet servers + {profile.masters} masters, a table of "
            f"{profile.tablets} tablet(s)"
            + (f", {profile.cli_clients} CLI client(s)" if profile.cli_clients else "")
            + (", DDL all along" if profile.ddl else ""))


def run(options: Options) -> int:
    """The whole run (module docstring); the exit code."""
    root = options.workdir or tempfile.mkdtemp(prefix="revivify-nemesis-")
    os.makedirs(root, exist_ok=True)
    args = ["--tick-ms", str(options.tick_ms), "--election-ticks", str(options.election_ticks),
            "--flush-mb", "0.005"]
    master_args = ["--tick-ms", str(options.tick_ms),
                   "--election-ticks", str(options.election_ticks)]
    try:
        cluster = Cluster(root, masters=options.profile.masters, tserver_args=args,
                          tservers=options.profile.tservers, master_args=master_args,
                          partitions=options.partitions)
    except BaseException:  # no network (netns.NetworkError): nothing ran, keep nothing
        if options.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
        raise
    if cluster.network is not None and cluster.network.swept:
        print(f"nemesis: removed an earlier run's leftovers: {cluster.network.swept}",
              file=sys.stderr)
    the_run = Run(options, cluster)
    summary: dict[str, Any] | None = None
    try:
        try:
            trio.run(the_run.main)
        except Exception as exc:  # still summarise what happened
            the_run.problems.append(f"the run failed: {exc!r}")
            print(f"nemesis: the run failed: {exc!r}", file=sys.stderr)
        try:
            cluster.stop_all()
        except Exception as exc:
            the_run.problems.append(f"clean stop failed: {exc!r}")
        summary = summarize(the_run, options, root)
    finally:
        cluster.close()
    print(render(summary))
    text = json.dumps(summary, indent=2, default=str)
    with open(os.path.join(root, "summary.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    if options.json_out:
        with open(options.json_out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(f"nemesis: histories, traces, logs and summary.json in {root}", file=sys.stderr)
    if summary["passed"] and not options.keep and options.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
        print("nemesis: passed; directory removed (--keep keeps it)", file=sys.stderr)
    return 0 if summary["passed"] else 1


__all__ = ["Options", "run"]
