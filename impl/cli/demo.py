"""``make demo``: what checks the system, then a cluster that heals itself, as a user runs it.

    python -m revivify.impl.cli.demo [--quick [--short]] [--workdir DIR]

Part one, the checking (skipped with ``--quick``), a line each: ``revivify prove`` (z3: the
spec's invariants inductive for every term); ``prove --mutant stc_seed_order`` (the seed's
StartTabletCopy order fails its proof); ``explore`` within small bounds; a known-bad trace
(a tombstone voting twice in one term) rejected by ``trace check``; random walks of the spec
written as trace files and checked clean.

Part two, the cluster, driving the real ``revivify`` commands, each its own process, as a
person at a terminal would (the demo is also a test of the CLI):

 1. ``cluster start --num-masters 3 --num-tservers 4 --watch`` in a fresh directory; each
    server's status pages (its web address, from ``cluster status``) listed, and the trace
    follower's page (``--watch``: ``trace follow`` beside the cluster, checking its traces
    as they are written, the verdict on the masters' home pages);
 2. ``table create demo --tablets 4 --replicas 3``;
 3. writers start: 4 clients writing distinct keys through the masters (the client
    library, in a thread of this process: a command per row would measure Python's
    start-up), every acknowledged write recorded, every outcome-unknown one too; they run
    until stage 11;
 4. ``cluster kill`` of a tablet server (SIGKILL): ``ksck`` says NOT HEALTHY,
    under-replicated, and so does the leader master's ``/metrics``
    (``revivify_master_tablets{health="under_replicated"}``, quoted in the summary);
 5. the masters re-replicate by tablet copy on their own: ``ksck --json`` polled, a line
    per tablet as it turns HEALTHY again, the time from the kill;
 6. the dead server restarted (``cluster restart``): its removed replicas become tombstones,
    ``ksck`` exits 0;
 7. ``cluster kill`` of the leader master: the time until another master is the ready
    leader, then a DDL (``table create demo2``) works; the old leader restarted;
 8. a fourth master started with ``master run --join`` (``cluster`` has no command for an
    extra master, so the demo starts the process), ``master add``, caught up as a VOTER,
    ``master remove``, stopped (stages 8 and 9 not with ``--short``);
 9. ``tserver retire`` of a tablet server: every replica moved off it;
10. ``ksck`` healthy; 11. the writers stop, and the tablet servers' ``/metrics`` say how many
    WAL bytes they appended and how many elections they won (quoted in the summary);
12. ``cluster stop`` then ``cluster start``;
13. ``row scan --json`` of the table: every acknowledged row read back (exit 1 if any is
    lost); 14. the trace follower's live verdict, once it has read every line;
15. ``cluster stop`` (the follower last); 16. every trace checked by ``trace check`` and
    (not with ``--quick``) by ``trace validate --engine spark``; the follower's verdicts
    (from its ``/api/v1/follower`` before the last stop, once it had read every line, and
    its final one in ``follower.log``) printed next to ``trace check``'s: they must be the
    same.

A numbered line per stage with its figures, then a summary table. Every command's full
output goes to ``DIR/demo.log``. Exit 0 when every stage did what it should, 1 when one did
not (a lost row, a command's unexpected exit code, a stage that did not finish in time).
Nothing is left running on any exit, Ctrl-C and SIGTERM included: every process
``DIR/cluster.json`` records, and the extra master, is SIGKILLed on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import attrs

# Figures and bounds. The bounds only stop a stage that hangs; they are not measurements.
STAGE_TIMEOUT = 180.0  # seconds a polled stage (healing, ksck turning healthy) may take
COMMAND_TIMEOUT = 600.0  # seconds any one command may run (retire, Spark)
WRITERS = 4
WRITE_PAUSE = 0.03  # seconds each writer rests between writes: leave the 2 cores room
TABLETS = 4
REPLICAS = 3
MASTER_FAILED_AFTER_MS = 3000  # --tserver-failed-after-ms for the masters: the policy's timeout
DEFAULT_OUT = Path(os.environ.get("REVIVIFY_DEMO_OUT", "demo-out"))


class DemoFailed(Exception):
    """A stage did not do what it should: the one line to print (exit 1)."""


@attrs.define
class Writers:
    """WRITERS clients in a background thread, each writing its own keys (w<c>-<n>) through
    the masters until `stop`; what was acknowledged, and what may or may not have been."""

    masters: list[str]
    table: str
    acked: dict[bytes, bytes] = attrs.Factory(dict)
    unknown: dict[bytes, bytes] = attrs.Factory(dict)
    failed: int = 0
    errors: list[str] = attrs.Factory(list)
    stop_event: threading.Event = attrs.Factory(threading.Event)
    thread: threading.Thread | None = None
    started_at: float = 0.0
    stopped_at: float = 0.0

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.thread = threading.Thread(target=self._run, name="demo-writers", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=60)
        if not self.stopped_at:
            self.stopped_at = time.monotonic()

    def _run(self) -> None:
        import trio

        trio.run(self._all)

    async def _all(self) -> None:
        import trio

        async with trio.open_nursery() as nursery:
            for c in range(WRITERS):
                nursery.start_soon(self._one, c)

    async def _one(self, c: int) -> None:
        import trio

        from revivify.impl.client import ClientOptions, open_table_client
        from revivify.impl.client.errors import OUTCOME_UNKNOWN, outcome_of

        options = ClientOptions(deadline=20.0)
        n = 0
        while not self.stop_event.is_set():
            try:
                async with open_table_client(self.masters, self.table,
                                             options=options) as table:
                    while not self.stop_event.is_set():
                        key, value = b"w%d-%06d" % (c, n), b"v%d-%d" % (c, n)
                        n += 1
                        try:
                            await table.put(key, value)
                        except Exception as exc:  # recorded, then the next key
                            if outcome_of(exc) == OUTCOME_UNKNOWN:
                                self.unknown[key] = value
                            else:
                                self.failed += 1
                            self.errors.append(f"{key.decode()}: {exc}")
                            continue
                        self.acked[key] = value
                        await trio.sleep(WRITE_PAUSE)
            except Exception as exc:  # the client itself (masters unreachable): a new one
                self.errors.append(f"writer {c}: {exc}")
                await trio.sleep(0.5)
        self.stopped_at = time.monotonic()

    def progress(self) -> str:
        return f"{len(self.acked)} acked, {len(self.unknown)} unknown, {self.failed} failed"


@attrs.define
class Demo:
    root: Path
    quick: bool
    short: bool = False
    log: Any = None
    stage_no: int = 0
    summary: list[tuple[str, str]] = attrs.Factory(list)
    writers: Writers | None = None
    extra_master: Any = None  # a processes.control.ServerProcess while it runs
    follower_web: str | None = None  # http://HOST:PORT of the trace follower's pages
    follower_live: dict[str, Any] | None = None  # its /api/v1/follower before the stop

    # ------------------------------------------------------------------ printing, commands

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.note(line)

    def note(self, text: str) -> None:
        if self.log is not None:
            self.log.write(text.rstrip("\n") + "\n")
            self.log.flush()

    def stage(self, text: str) -> None:
        self.stage_no += 1
        self.say(f"{self.stage_no:>2}. {text}")

    def detail(self, text: str) -> None:
        self.say(f"      {text}")

    def figure(self, name: str, value: str) -> None:
        self.summary.append((name, value))

    def cli(self, *argv: str, expect: tuple[int, ...] = (0,),
            timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """`revivify ARGV` in its own process, as a user runs it; its output to demo.log."""
        cmd = [sys.executable, "-m", "revivify.impl.cli.main", *argv]
        started = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL, check=False)
        self.note(f"$ revivify {' '.join(argv)}\n{out.stdout}{out.stderr}"
                  f"[exit {out.returncode}, {time.monotonic() - started:.1f} s]")
        if out.returncode not in expect:
            last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise DemoFailed(f"revivify {' '.join(argv[:3])} exited {out.returncode}, "
                             f"expected {' or '.join(map(str, expect))}: {last}")
        return out

    def cli_json(self, *argv: str, expect: tuple[int, ...] = (0,)) -> Any:
        return json.loads(self.cli(*argv, "--json", expect=expect).stdout)

    @property
    def cluster_dir(self) -> str:
        return str(self.root / "cluster")

    def at(self, *argv: str) -> tuple[str, ...]:
        return (*argv, "--root", self.cluster_dir)

    # ------------------------------------------------------------------ part one

    def checking(self) -> None:
        for text, argv, expect in (
            ("z3: every invariant of the spec is inductive (3 servers, any term)",
             ("prove",), 0),
            ("z3: the seed's StartTabletCopy order (delete, then check the term) fails its "
             "proof", ("prove", "--mutant", "stc_seed_order", "--bmc-depth", "8",
                       "--timeout", "5"), 1),
            ("explore: every reachable state within term 1, index 1, all invariants hold",
             ("explore", "--max-term", "1", "--max-index", "1"), 0),
            ("a known-bad trace (a tombstone votes twice in a term) is rejected with its "
             "evidence",
             ("trace", "check", "traces/bad/vote-twice-after-restart"), 1),
        ):
            started = time.monotonic()
            self.cli(*argv, expect=(expect,))
            self.stage(f"{text} [exit {expect}, {time.monotonic() - started:.1f} s]")
        self.spec_walks()

    def spec_walks(self) -> None:
        """Random walks of the spec, crashes included, written as trace files (one per
        incarnation) and checked as a server's traces are."""
        from revivify.checker.walks import random_walk

        started = time.monotonic()
        walks = self.root / "spec-walks"
        for seed in range(100, 112):
            random_walk(seed, steps=160).write(str(walks / f"walk-{seed:03d}"))
        report = self.cli_json("trace", "check", str(walks))
        self.stage(f"12 random walks of the spec (crashes included) written as traces: "
                   f"trace check, {report['events']} events in {report['files']} files clean "
                   f"[{time.monotonic() - started:.1f} s]")

    # ------------------------------------------------------------------ part two

    def cluster(self) -> None:
        started = time.monotonic()
        self.cli("cluster", "start", "--root", self.cluster_dir, "--num-masters", "3",
                 "--num-tservers", "4", "--watch",
                 f"--master-arg=--tserver-failed-after-ms={MASTER_FAILED_AFTER_MS}")
        status = self.cli_json(*self.at("cluster", "status"))
        self.stage(f"cluster start: 3 masters, 4 tablet servers ready in "
                   f"{time.monotonic() - started:.1f} s (under {self.cluster_dir})")
        self.figure("cluster start", f"{time.monotonic() - started:.1f} s")
        masters = [m["address"] for m in status["masters"]]
        self.detail("status pages: " + ", ".join(
            f"{s['name']} {s['web']}" for s in status["masters"] + status["tservers"]
            if s.get("web")))
        if status.get("follower"):
            self.follower_web = status["follower"]["web"]
            self.detail(f"trace follower: {status['follower']['page']} (the masters' home "
                        "pages show its verdict)")

        created = self.cli_json(*self.at("table", "create", "demo", "--tablets", str(TABLETS),
                                         "--replicas", str(REPLICAS)))
        self.stage(f"table create demo: {len(created['tablets'])} tablets x {REPLICAS} "
                   f"replicas on 4 servers")

        self.writers = Writers(masters, "demo")
        self.writers.start()
        self.wait_for("the writers' first acknowledged writes",
                      lambda: len(self.writers.acked) >= 20 if self.writers else False, 60)
        self.stage(f"{WRITERS} writers running through the masters: "
                   f"{self.writers.progress()} so far")

        self.heal_after_tserver_kill(status)
        self.master_failover(status)
        if not self.short:
            self.master_add_remove(status, masters)
            self.retire(status)

        self.ksck_healthy("ksck")
        writers = self.writers
        writers.stop()
        seconds = writers.stopped_at - writers.started_at
        self.stage(f"writers stopped after {seconds:.0f} s: {writers.progress()} "
                   f"({len(writers.acked) / max(seconds, 0.1):.0f} acked writes/s)")
        self.figure("rows acknowledged", f"{len(writers.acked)} "
                    f"({len(writers.unknown)} outcome unknown, {writers.failed} failed)")
        live = self.cli_json(*self.at("cluster", "status"), expect=(0, 1))["tservers"]
        wal = sum(scrape(s["web"]).get(("revivify_wal_appended_bytes_total", ()), 0.0)
                  for s in live if s.get("web") and s["alive"])
        won = sum(scrape(s["web"]).get(("revivify_raft_elections_won_total", ()), 0.0)
                  for s in live if s.get("web") and s["alive"])
        self.detail(f"the tablet servers' /metrics: {wal / (1 << 20):.1f} MiB appended to "
                    f"their WALs, {won:g} elections won (since each server's last start)")
        self.figure("WAL MiB appended, elections won (/metrics)", f"{wal / (1 << 20):.1f}, "
                    f"{won:g}")
        for line in writers.errors[:5]:
            self.note(f"writer error: {line}")

        started = time.monotonic()
        self.cli("cluster", "stop", "--root", self.cluster_dir)
        self.cli("cluster", "start", "--root", self.cluster_dir)
        self.ksck_healthy(None)
        self.stage(f"cluster stop, cluster start: every server back on its directory, port "
                   f"and UUID; ksck healthy after {time.monotonic() - started:.1f} s")
        self.figure("full restart to healthy", f"{time.monotonic() - started:.1f} s")

        self.read_back(writers)
        self.follower_caught_up()

        self.cli("cluster", "stop", "--root", self.cluster_dir)
        alive = self.cli_json(*self.at("cluster", "status"), expect=(1,))
        running = [s["name"] for s in alive["masters"] + alive["tservers"] if s["alive"]]
        if running:
            raise DemoFailed(f"still running after cluster stop: {', '.join(running)}")
        self.stage("cluster stop: every server stopped cleanly (SIGTERM)")

    def heal_after_tserver_kill(self, status: dict[str, Any]) -> None:
        victim = status["tservers"][1]
        # The SIGKILL is sent between the start of `cluster kill` and its end: the times
        # below count from the start (an upper bound: the command's Python start-up too),
        # with the time from its end beside them (a lower bound).
        killed_at, killed_ns = time.monotonic(), time.time_ns()
        self.cli(*self.at("cluster", "kill", victim["name"]))
        kill_took = time.monotonic() - killed_at
        report = self.wait_ksck(lambda d: any(
            t["status"] == "UNDER_REPLICATED" for t in self.tablets(d)), "under-replicated")
        under = sum(t["status"] == "UNDER_REPLICATED" for t in self.tablets(report))
        self.stage(f"cluster kill {victim['name']} (SIGKILL): ksck NOT HEALTHY, {under} "
                   f"tablet(s) under-replicated")
        # The leader master counts a tablet under-replicated once it counts the server dead
        # (its --tserver-dead-after-ms after the last heartbeat): poll its /metrics till then.
        seen: float | None = None
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up and not seen:
            seen = self.leader_master_metric(status, "revivify_master_tablets",
                                             health="under_replicated")
            time.sleep(0.5)
        if seen is not None:
            self.detail(f"the leader master's /metrics: revivify_master_tablets"
                        f"{{health=\"under_replicated\"}} {seen:g}")
            self.figure("under-replicated tablets after the kill (/metrics)", f"{seen:g}")
        self.stage("the masters re-replicate by tablet copy (ksck polled):")
        healed: dict[str, float] = {}

        def progress(doc: dict[str, Any]) -> bool:
            for t in self.tablets(doc):
                if t["status"] == "HEALTHY" and t["tablet_id"] not in healed and all(
                        r["uuid"] != victim["uuid"] for r in t["replicas"]):
                    healed[t["tablet_id"]] = time.monotonic() - killed_at
                    on = [r["address"] for r in t["replicas"]]
                    self.detail(f"tablet {t['tablet_id'][:8]} healed at "
                                f"{healed[t['tablet_id']]:5.1f} s: 3 live voters "
                                f"({', '.join(on)}); writers: {self.progress()}")
            return all(t["status"] == "HEALTHY" and all(
                r["uuid"] != victim["uuid"] for r in t["replicas"]) for t in self.tablets(doc))

        self.wait_ksck(progress, "every tablet HEALTHY without the dead server")
        heal = time.monotonic() - killed_at
        self.detail(f"every tablet fully replicated again {heal - kill_took:.1f}-{heal:.1f} s "
                    f"after the kill (failure timeout {MASTER_FAILED_AFTER_MS / 1000:g} s "
                    f"included), by {self.copies_since(killed_ns)} tablet copies (the servers' "
                    f"traces: copy_start_replica)")
        self.figure("tserver kill -9 to every tablet healed",
                    f"{heal - kill_took:.1f}-{heal:.1f} s")

        started = time.monotonic()
        self.cli(*self.at("cluster", "restart", victim["name"]))
        self.ksck_healthy(None)
        self.stage(f"cluster restart {victim['name']}: its removed replicas tombstoned; ksck "
                   f"HEALTHY after {time.monotonic() - started:.1f} s")

    def master_failover(self, status: dict[str, Any]) -> None:
        import trio

        from revivify.impl.client.master import master_status

        listed = self.cli_json(*self.at("master", "list"))
        leader = next(m for m in listed["masters"] if m["role"] == "LEADER" and m["ready"])
        name = next(m["name"] for m in status["masters"] if m["uuid"] == leader["uuid"])
        others: list[str] = [m["address"] for m in status["masters"]
                             if m["uuid"] != leader["uuid"]]
        killed_at = time.monotonic()  # bounds again, as for the tablet server
        self.cli(*self.at("cluster", "kill", name))
        kill_took = time.monotonic() - killed_at

        async def new_leader() -> str:
            while True:
                for address in others:
                    with contextlib.suppress(Exception):
                        if (await master_status(address)).ready:
                            return address
                await trio.sleep(0.02)

        address = trio.run(new_leader)
        failover = time.monotonic() - killed_at
        self.cli(*self.at("table", "create", "demo2", "--tablets", "2", "--replicas", "3",
                          "--deadline", "60"))
        ddl = time.monotonic() - killed_at
        self.stage(f"cluster kill {name} (the leader master, SIGKILL): {address} the ready "
                   f"leader after {max(failover - kill_took, 0):.2f}-{failover:.2f} s; table "
                   f"create demo2 done at {ddl:.1f} s")
        self.figure("leader master kill -9 to a new ready leader",
                    f"{max(failover - kill_took, 0):.2f}-{failover:.2f} s")
        self.figure("... to a DDL done (CLI start-up included)", f"{ddl:.1f} s")
        self.cli(*self.at("cluster", "restart", name))
        self.detail(f"cluster restart {name}: a follower again; writers: {self.progress()}")

    def master_add_remove(self, status: dict[str, Any], masters: list[str]) -> None:
        from revivify.impl.processes.control import (
            ServerProcess,
            await_listening,
            free_port,
            spawn,
            stop_process,
        )
        from revivify.impl.processes.masters import MASTER_LISTENING

        started = time.monotonic()
        new = ServerProcess(len(masters), os.path.join(self.cluster_dir, "m-extra"),
                            os.path.join(self.cluster_dir, "traces"),
                            os.path.join(self.cluster_dir, "m-extra.log"), port=free_port())
        self.extra_master = new
        spawn(new, [sys.executable, "-m", "revivify.impl.cli.main", "master", "run",
                    "--fs-root", new.fs_root, "--rpc-bind", new.address,
                    "--trace-dir", new.trace_dir, "--join", "--webserver-bind", "127.0.0.1:0",
                    "--masters", ",".join([*masters, new.address])], detached=True)
        new.uuid = await_listening(new, MASTER_LISTENING, "the new master", 60).group(1)
        self.cli(*self.at("master", "add", new.address, "--deadline", "60"))
        self.wait_for("the new master a VOTER of the catalog",
                      lambda: self.catalog_member_type(new.address) == "VOTER", STAGE_TIMEOUT)
        joined = time.monotonic() - started
        self.stage(f"master run --join + master add {new.address}: the catalog copied to it, "
                   f"a VOTER after {joined:.1f} s (4 masters)")
        self.figure("master add to VOTER", f"{joined:.1f} s")
        started = time.monotonic()
        self.cli(*self.at("master", "remove", new.uuid, "--deadline", "60"))
        self.wait_for("three masters again", lambda: len(
            self.cli_json(*self.at("ksck"), expect=(0, 1))["masters"][0]["config"]) == 3,
            STAGE_TIMEOUT)
        stop_process(new, "the extra master", 30)
        self.extra_master = None
        self.stage(f"master remove {new.uuid[:8]}: 3 masters in the catalog's config again "
                   f"after {time.monotonic() - started:.1f} s; the extra master stopped")

    def catalog_member_type(self, address: str) -> str | None:
        out = self.cli("replica", "list", "--tserver", address, "--json", expect=(0, 1, 2))
        if out.returncode != 0:
            return None
        rows = json.loads(out.stdout)["replicas"]
        return next((str(r.get("member_type")) for r in rows if r.get("state") == "RUNNING"),
                    None)

    def retire(self, status: dict[str, Any]) -> None:
        victim = status["tservers"][2]
        started, started_ns = time.monotonic(), time.time_ns()
        out = self.cli_json(*self.at("tserver", "retire", victim["uuid"]))
        self.stage(f"tserver retire {victim['name']}: {out['count']} replica(s) moved off it "
                   f"in {time.monotonic() - started:.1f} s ({self.copies_since(started_ns)} "
                   f"tablet copies); it holds none")
        self.figure("tserver retire", f"{out['count']} replicas in "
                    f"{time.monotonic() - started:.1f} s")

    def read_back(self, writers: Writers) -> None:
        doc = self.cli_json(*self.at("row", "scan", "--table", "demo", "--deadline", "60"))
        rows = {r["key"].encode(): r["value"].encode() for r in doc["rows"]}
        lost = sorted(k for k, v in writers.acked.items() if rows.get(k) != v)
        unknown_applied = sum(rows.get(k) == v for k, v in writers.unknown.items())
        self.stage(f"row scan --table demo: {len(rows)} rows read back; "
                   f"{len(writers.acked)} acknowledged, {len(lost)} lost; "
                   f"{unknown_applied}/{len(writers.unknown)} outcome-unknown writes applied")
        self.figure("acknowledged rows lost", str(len(lost)))
        if lost:
            raise DemoFailed(f"{len(lost)} acknowledged row(s) lost, e.g. "
                             f"{', '.join(k.decode() for k in lost[:5])}")

    def traces(self) -> None:
        traces = os.path.join(self.cluster_dir, "traces")
        started = time.monotonic()
        report = self.cli_json("trace", "check", traces)
        self.stage(f"trace check: {report['events']} events in {report['files']} files "
                   f"(every master and tablet server incarnation): 0 violations "
                   f"[{time.monotonic() - started:.1f} s]")
        self.figure("trace events checked", f"{report['events']}, 0 violations")
        self.compare_follower("CLEAN" if report["exit_code"] == 0 else "VIOLATIONS")
        if self.quick:
            return
        started = time.monotonic()
        self.cli("trace", "validate", traces, "--engine", "spark", "--master", "local[2]",
                 "--out", str(self.root / "spark-report"))
        self.stage(f"trace validate --engine spark (local[2]): the same traces clean "
                   f"[{time.monotonic() - started:.1f} s]")
        self.figure("Spark validation", "clean")

    def follower_caught_up(self) -> None:
        """The follower's live verdict once it has read every line written so far: its
        events checked unchanged over two seconds with no file grown for a second (the
        cluster idle: the writers stopped, the rows read back)."""
        if self.follower_web is None:
            return
        seen: list[int] = []

        def settled() -> bool:
            doc = follower_doc(self.follower_web or "")
            if doc is None:
                return False
            seen.append(doc["events_checked"])
            self.follower_live = doc
            return len(seen) >= 4 and len(set(seen[-4:])) == 1 and doc["idle_seconds"] >= 1
        self.wait_for("the trace follower caught up", settled, STAGE_TIMEOUT)
        doc = self.follower_live or {}
        self.stage(f"trace follower (beside the cluster throughout): {doc['verdict']}, "
                   f"{doc['events_checked']} events in {doc['files']} files checked as "
                   f"they were written, {doc['findings_total']} findings")

    def compare_follower(self, batch: str) -> None:
        """The follower's verdict next to ``trace check``'s; the demo fails if they differ.
        Two of the follower's: the live one (before the stop) and its final one, the
        last ``result:`` line it logged when ``cluster stop`` stopped it."""
        if self.follower_live is None:
            return
        live = self.follower_live["verdict"]
        final = "?"
        with contextlib.suppress(OSError):
            text = Path(self.cluster_dir, "follower.log").read_text(errors="replace")
            results = [line for line in text.splitlines() if line.startswith("result:")]
            if results:
                final = "CLEAN" if results[-1].endswith("exit 0") else "VIOLATIONS"
        self.detail(f"verdicts: trace follower {live} (live), {final} (final); trace check "
                    f"{batch}")
        self.figure("follower verdict (live, final) vs trace check",
                    f"{live}, {final} vs {batch}")
        if live != batch or final != batch:
            raise DemoFailed(f"the trace follower's verdict ({live} live, {final} final) "
                             f"differs from trace check's ({batch})")

    # ------------------------------------------------------------------ helpers

    def copies_since(self, wall_ns: int) -> int:
        """Tablet copies finished since `wall_ns`, as the servers' traces record them."""
        count = 0
        for path in Path(self.cluster_dir, "traces").glob("*.jsonl"):
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if '"copy_start_replica"' not in line:
                        continue
                    with contextlib.suppress(ValueError):
                        event = json.loads(line)
                        count += (event.get("event") == "copy_start_replica"
                                  and event.get("wall_ns", 0) >= wall_ns)
        return count

    def progress(self) -> str:
        return self.writers.progress() if self.writers else "-"

    @staticmethod
    def tablets(doc: dict[str, Any]) -> list[dict[str, Any]]:
        return [t for table in doc["tables"] if table["name"] == "demo"
                for t in table["tablets"]]

    def leader_master_metric(self, status: dict[str, Any], name: str, **labels: str
                             ) -> float | None:
        """``name{labels}`` on the /metrics of the master that says it is the ready leader
        (``revivify_master_ready`` 1); None if no master's page answered so."""
        want = tuple(sorted(labels.items()))
        for m in status["masters"]:
            if not m.get("web"):
                continue
            values = scrape(m["web"])
            if values.get(("revivify_master_ready", ())) == 1.0:
                return values.get((name, want))
        return None

    def wait_for(self, what: str, probe: Callable[[], bool], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not probe():
            if time.monotonic() > deadline:
                raise DemoFailed(f"not within {seconds:g} s: {what}")
            time.sleep(0.2)

    def wait_ksck(self, probe: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + STAGE_TIMEOUT
        while True:
            doc: dict[str, Any] = self.cli_json(*self.at("ksck"), expect=(0, 1))
            if probe(doc):
                return doc
            if time.monotonic() > deadline:
                raise DemoFailed(f"not within {STAGE_TIMEOUT:g} s: {what} (ksck: "
                                 f"{doc['summary']})")
            time.sleep(0.3)

    def ksck_healthy(self, stage: str | None) -> None:
        started = time.monotonic()
        doc = self.wait_ksck(lambda d: bool(d["healthy"]), "ksck healthy")
        self.cli(*self.at("ksck"))  # exit 0, as a user would see it
        if stage is not None:
            self.stage(f"{stage}: {doc['summary']} "
                       f"[{time.monotonic() - started:.1f} s]")

    def cleanup(self) -> None:
        """Leave nothing running: the writers, the extra master, every recorded process."""
        from revivify.impl.cli import clusterfile
        from revivify.impl.processes.control import kill_process, pid_alive

        if self.writers is not None:
            self.writers.stop_event.set()
        if self.extra_master is not None:
            kill_process(self.extra_master)
        with contextlib.suppress(clusterfile.ClusterFileError):
            record = clusterfile.load(self.cluster_dir)
            servers: list[Any] = [*record.masters, *record.tservers,
                                  *([record.follower] if record.follower else [])]
            for r in servers:
                if pid_alive(r.pid, r.start_ticks):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(r.pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while any(pid_alive(r.pid, r.start_ticks) for r in servers) and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
        if self.writers is not None:
            self.writers.stop()


def scrape(web: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A server's /metrics, parsed by prometheus_client's own parser: (sample name, sorted
    labels) -> value; empty if the page does not answer (a server that is down)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(web + "/metrics", timeout=10) as page:
            text = page.read().decode()
    except OSError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def follower_doc(web: str) -> dict[str, Any] | None:
    """The trace follower's ``/api/v1/follower``; None if it does not answer."""
    import urllib.request

    try:
        with urllib.request.urlopen(web + "/api/v1/follower", timeout=10) as page:
            doc: dict[str, Any] = json.loads(page.read())
    except (OSError, ValueError):
        return None
    return doc


def print_summary(demo: Demo, seconds: float, verdict: str) -> None:
    rows = [*demo.summary, ("demo duration", f"{seconds:.0f} s"), ("verdict", verdict)]
    width = max(len(name) for name, _ in rows)
    print("\n" + "-" * (width + 40))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print("-" * (width + 40), flush=True)


def missing_extras() -> list[str]:
    """The optional extras the demo needs and this installation lacks (none is imported)."""
    import importlib.util

    from revivify.impl.cli.main import EXTRA_OF_MODULE

    return sorted({extra for module, extra in EXTRA_OF_MODULE.items()
                   if importlib.util.find_spec(module) is None})


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    # SIGINT too, explicitly: a process started in the background by a non-interactive
    # shell inherits SIGINT ignored, and Python then leaves it ignored.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m revivify.impl.cli.demo",
                                     description="the checking, then a cluster that heals "
                                                 "itself")
    parser.add_argument("--quick", action="store_true",
                        help="the cluster part only, and no Spark (what the tests run)")
    parser.add_argument("--short", action="store_true",
                        help="with --quick: no master add/remove and no retire either (their "
                             "own tests cover them; what `make test` runs)")
    parser.add_argument("--workdir", default=None, metavar="DIR",
                        help=f"where the cluster, its logs and traces go (emptied first; "
                             f"default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    missing = [] if args.quick else missing_extras()
    if missing:  # the checking runs z3 and Spark
        print(f"demo: needs the {' and '.join(repr(m) for m in missing)} extra"
              f"{'s' if len(missing) > 1 else ''}: pip install "
              f"'revivify[{','.join(missing)}]'", file=sys.stderr)
        return 2
    root = Path(args.workdir) if args.workdir else DEFAULT_OUT
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    demo = Demo(root.resolve(), args.quick or args.short, args.short)
    started = time.monotonic()
    verdict, code = "PASS", 0
    with open(root / "demo.log", "w") as log, sigterm_as_interrupt():
        demo.log = log
        print(f"revivify demo: every command's output in {root / 'demo.log'}", flush=True)
        try:
            if not args.quick:
                demo.checking()
            demo.cluster()
            demo.traces()
        except DemoFailed as exc:
            demo.say(f"demo: FAILED: {exc}")
            verdict, code = f"FAIL: {exc}", 1
        except KeyboardInterrupt:
            demo.say("demo: interrupted; killing every process it started")
            verdict, code = "interrupted", 130
        except subprocess.TimeoutExpired as exc:
            demo.say(f"demo: FAILED: a command hung: {exc}")
            verdict, code = "FAIL: a command hung", 1
        finally:
            demo.cleanup()
    print_summary(demo, time.monotonic() - started, verdict)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
