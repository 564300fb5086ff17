"""Trace files from the spec itself: seeded random walks, scripted scenarios, mutations.

A ``Recorder`` drives a multi-server spec state and writes what real servers would write:
one JSON Lines file per (node UUID, incarnation), a ``server_format`` when a UUID is born,
a ``server_start`` at each incarnation, a ``startup`` event for every tablet found on disk
(a FAILED one with its reason), and one event per spec step with its arguments and the
durable state after it. A crash writes nothing; a wipe gives the server a new UUID; damage
to a down server's WAL or blocks, and an operator's purge of its quarantine, write nothing
either (the next startup reports them).
Lamport clocks come from one counter across the walk: a total order is a valid Lamport
clock, and it puts every vote after the ``start_election`` it answers. With
``drop_before_crash`` the last event of an incarnation is sometimes left out, as if the
process died between its fsync and its trace write: the checker's crash frontier must
explain it.

``random_walk`` picks among ``Spec.successors`` (seeded), ``scenario_*`` functions build the
situations the known-bad corpus needs, and ``write_bad_corpus`` mutates them into the
traces of ``traces/bad/`` with the expected finding beside each: ``BAD_CASES`` is that
corpus as a table (a base history, the edits that break it, the finding), which one small
interpreter (``_build``) plays.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
from collections.abc import Callable
from typing import Any, Final

import attrs

from revivify.checker import traces as trace_contract
from revivify.checker.traces import (
    SCHEMA_VERSION,
    encode_cmeta,
    encode_state,
    write_contract_schema,
)
from revivify.spec.actions import (
    FAULT_ACTIONS,
    SPEC_ONLY_PARAMS,
    Action,
    Bounds,
    startup_case,
)
from revivify.spec.logic import FMap, run_of
from revivify.spec.model import (
    BLOCKS_DAMAGED,
    BLOCKS_PRESENT,
    DAMAGE_BLOCKS,
    DAMAGE_KINDS,
    DAMAGE_WAL,
    DOES_NOT_EXIST,
    SB_NAMES,
    STARTUP_FAILED,
    STARTUP_NAMES,
    STC_NAMES,
    WAL_DAMAGED,
    WAL_LIVE,
    ServerState,
)
from revivify.spec.system import Spec, default_spec

TABLET = "tablet-0001"
WALL_BASE = 1_700_000_000_000_000_000


def make_uuid(seed: int, server: int, gen: int) -> str:
    return hashlib.sha1(f"{seed}/{server}/{gen}".encode()).hexdigest()[:32]


@attrs.define
class Recorder:
    """A spec system state plus the trace files its servers have written."""

    spec: Spec
    seed: int
    sys: tuple[ServerState, ...]
    tablet: str = TABLET
    files: dict[tuple[str, int], list[dict[str, Any]]] = attrs.Factory(dict)
    order: list[tuple[str, int]] = attrs.Factory(list)
    gen: list[int] = attrs.Factory(list)
    inc: list[int] = attrs.Factory(list)
    seq: list[int] = attrs.Factory(list)
    clock: int = 0
    fresh_uuid: list[bool] = attrs.Factory(list)

    @classmethod
    def new(cls, spec: Spec, seed: int, created: bool = False,
            tablet: str = TABLET) -> Recorder:
        n = spec.n_servers
        sys = tuple(ServerState(up=False) for _ in range(n))
        r = cls(spec=spec, seed=seed, sys=sys, tablet=tablet, gen=[0] * n, inc=[0] * n,
                seq=[0] * n, fresh_uuid=[True] * n)
        for i in range(n):
            r.start(i)
        if created:
            for i in range(n):
                r.step(i, "create_tablet", config_index=0)
        return r

    def uuid(self, i: int) -> str:
        return make_uuid(self.seed, i, self.gen[i])

    def member_uuid(self, i: int) -> str:
        return make_uuid(self.seed, i, 0)

    def uuid_of(self) -> dict[int, str]:
        return {i: self.member_uuid(i) for i in range(len(self.sys))}

    def emit(self, i: int, event: str, args: dict[str, Any], state: ServerState | None,
             tablet: str | None = None) -> dict[str, Any]:
        self.clock += 1
        key = (self.uuid(i), self.inc[i])
        if key not in self.files:
            self.files[key] = []
            self.order.append(key)
        line = {"v": SCHEMA_VERSION, "node": key[0], "inc": key[1], "seq": self.seq[i],
                "lamport": self.clock, "wall_ns": WALL_BASE + self.clock * 1_000_000,
                "tablet": tablet if state is not None else None, "event": event,
                "args": args,
                "state": encode_state(state, self.uuid_of()) if state is not None else None}
        self.seq[i] += 1
        self.files[key].append(line)
        return line

    # -- lifecycle of a server ---------------------------------------------------------
    def start(self, i: int) -> None:
        """A new incarnation: server events, then the spec's startup for the tablet."""
        self.inc[i] += 1
        self.seq[i] = 0
        if self.fresh_uuid[i]:
            self.emit(i, "server_format", {}, None)
            self.fresh_uuid[i] = False
        self.emit(i, "server_start", {}, None)
        s = self.sys[i]
        case = startup_case(s)
        self._apply(i, self.spec.action("startup"), {"case": case})
        if s.sb != DOES_NOT_EXIST:
            args: dict[str, Any] = {"case": STARTUP_NAMES[case]}
            if case == STARTUP_FAILED:
                args["reason"] = failure_reason(s)
            self.emit(i, "startup", args, self.sys[i], self.tablet)

    def crash(self, i: int, drop_last: bool = False) -> None:
        if drop_last:
            events = self.files.get((self.uuid(i), self.inc[i]), [])
            if events and events[-1]["tablet"] is not None:
                events.pop()
        self._apply(i, self.spec.action("crash"), {})

    def stop(self, i: int) -> None:
        """A clean stop: ``server_stop`` logged, then the spec's crash (nothing is lost)."""
        self.emit(i, "server_stop", {}, None)
        self._apply(i, self.spec.action("crash"), {})

    def damage(self, i: int, what: int) -> None:
        """A disk fault while server i is down: nothing is written (its next startup
        reports the DAMAGED WAL or blocks, or the missing cmeta, case FAILED)."""
        self._apply(i, self.spec.action("damage"), {"what": what})

    def purge(self, i: int) -> None:
        """An operator purges server i's quarantine while it is down (``revivify
        local-replica purge-quarantine``): nothing is written (its next startup reports no
        quarantine, and an ABSENT WAL where it was QUARANTINED)."""
        self._apply(i, self.spec.action("purge"), {})

    def drop(self, i: int) -> None:
        """The master drops the table and tells server i (a ghost: nothing is written)."""
        self._apply(i, self.spec.action("drop"), {})

    def wipe(self, i: int) -> None:
        self._apply(i, self.spec.action("wipe"), {})
        self.gen[i] += 1
        self.inc[i] = 0
        self.fresh_uuid[i] = True

    def _apply(self, i: int, action: Action, p: dict[str, Any]) -> None:
        self.sys = action.apply(self.sys, i, p)

    # -- tablet steps ----------------------------------------------------------------
    def step(self, i: int, name: str, check: bool = True, **p: Any) -> dict[str, Any]:
        action = self.spec.action(name)
        pre = self.sys[i]
        p = self.fill_params(name, i, p)
        if check and not action.enabled(self.sys, i, p):
            raise ValueError(f"{name}{p} not enabled on server {i}: {pre.describe()}")
        self._apply(i, action, p)
        return self.emit(i, name, self.trace_args(name, i, p, pre), self.sys[i], self.tablet)

    def fill_params(self, name: str, i: int, p: dict[str, Any]) -> dict[str, Any]:
        """The spec parameters a scenario leaves out, as a real server would have them: the
        request addressed to this server's UUID, a DeleteTablet CAS that passes, the caller
        of a StartTabletCopy (the leader of its term), the entries of an append (a leader's
        own, or the slice of the leader's log it came from) and a copied WAL's entries (its
        source's)."""
        s = self.sys[i]
        params = self.spec.action(name).params
        out = dict(p)
        if "dest" in params:
            out.setdefault("dest", s.uuid_gen)
        if "cas_config_index" in params:
            out.setdefault("cas_config_index", s.config_index)
        if "caller" in params and "caller" not in out:
            out["caller"] = next((j for j, k in enumerate(self.sys) if j != i and k.leader
                                  and k.term == p["caller_term"]), (i + 1) % len(self.sys))
        if name == "log_append" and "entries" not in out:
            first, last, term = p["first_index"], p["op_index"], p["op_term"]
            lead = next((k for j, k in enumerate(self.sys) if j != i and k.leader
                         and k.term == s.term and k.wal_last_index >= last), None)
            if s.leader or lead is None:
                out["entries"] = run_of(first, last, term)
                out.setdefault("prev_term", s.log[first - 1])
            else:
                out["entries"] = FMap(tuple((k, v) for k, v in lead.log
                                            if first <= k <= last), 0)
                out.setdefault("prev_term", lead.log[first - 1])
        if name == "copy_download_wal" and "remote_log" not in out:
            src = self.sys[s.op_src] if 0 <= s.op_src < len(self.sys) else None
            out["remote_log"] = src.log if src is not None else FMap((), 0)
        return out

    def trace_args(self, name: str, i: int, p: dict[str, Any],
                   pre: ServerState) -> dict[str, Any]:
        """What a real server writes: the spec's parameters but those no trace carries
        (``SPEC_ONLY_PARAMS``), identities as UUIDs, enumerations as names, and the extra
        facts of the contract."""
        uuids = self.uuid_of()
        args = {k: v for k, v in p.items() if k not in SPEC_ONLY_PARAMS}
        for k in ("candidate", "me", "caller"):
            if k in args:
                args[k] = uuids[args[k]]
        if name == "log_append" and _accepts(name, "terms"):
            # Version 3: the term before the batch, and the batch's terms as runs.
            entries: FMap = p["entries"]
            runs: list[list[int]] = []
            for index in range(p["first_index"], p["op_index"] + 1):
                term = entries[index]
                if runs and runs[-1][0] == term:
                    runs[-1][1] += 1
                else:
                    runs.append([term, 1])
            args["terms"] = runs
        elif name == "log_append":
            args.pop("prev_term", None)
        if name == "copy_begin" and _accepts(name, "source") and pre.op_src >= 0:
            args["source"] = uuids[pre.op_src]
        if name == "copy_abort":
            args["reason"] = "the source stopped answering"
        if name in ("stc_accept", "stc_reject"):
            args["expected_state"] = SB_NAMES[p["expected_state"]]
            args["has_opid"] = bool(p["has_opid"])
            args["answer"] = STC_NAMES[p["reason"]] if name == "stc_reject" else "OK"
            if name == "stc_reject":
                args["reason"] = STC_NAMES[p["reason"]]
        if name == "startup":
            args["case"] = STARTUP_NAMES[p["case"]]
        if name == "step_down":
            args["reason"] = "check-quorum: no majority heard from"  # informative only
        if name in ("create_tablet", "config_commit"):
            # The spec's config is its n servers (their first UUIDs), all VOTERs.
            args["voters"] = sorted(uuids.values())
        if name == "copy_merge_cmeta":
            args["local"] = encode_cmeta(pre, uuids)
            args["remote"] = {"term": p["remote_term"], "voted_for": None,
                              "config_index": p["remote_config_index"]}
            args["result"] = encode_cmeta(self.sys[i], uuids)
        return args

    # -- scenario helpers (the hand-built corpus cases) --------------------------------
    def elect(self, leader: int, voter: int, t: int, last: tuple[int, int]) -> None:
        """``leader`` campaigns (its term becomes t) and wins with ``voter``'s vote, the
        request carrying the candidate's last OpId ``last``."""
        self.step(leader, "start_election", me=leader)
        self.step(voter, "vote_granted", candidate=leader, t=t, cand_last_term=last[0],
                  cand_last_index=last[1])
        self.step(leader, "become_leader", me=leader, t=t)

    def stop_all(self) -> Recorder:
        """Every running server stops cleanly: no step can have been lost unlogged, so the
        global checks see every vote, append and commit."""
        for i in range(len(self.sys)):
            if self.sys[i].up:
                self.stop(i)
        return self

    def write_case(self, root: str, name: str, expected: dict[str, Any]) -> list[str]:
        """Write a corpus case to ``root/<name>/``: its traces, every tablet event of tablet
        ``tablet-<name>`` (so that cases can be checked together), and ``expected.json``.
        Returns the trace files' paths."""
        d = os.path.join(root, name)
        shutil.rmtree(d, ignore_errors=True)
        for key in self.order:
            for line in self.files[key]:
                if line["tablet"] is not None:
                    line["tablet"] = f"tablet-{name}"
        paths = self.write(d)
        with open(os.path.join(d, "expected.json"), "w") as out:
            json.dump(expected, out, indent=2)
            out.write("\n")
        return paths

    # -- output ----------------------------------------------------------------------
    def write(self, directory: str, *, version: int | None = None) -> list[str]:
        """Write one file per incarnation; ``version=2``: as a version-2 writer would
        (``as_version_2``), for the cases kept at that version."""
        os.makedirs(directory, exist_ok=True)
        paths = []
        for node, inc in self.order:
            path = os.path.join(directory, f"{node}.{inc:04d}.jsonl")
            with open(path, "w") as f:
                for line in self.files[(node, inc)]:
                    if version == 2:
                        line = as_version_2(line)
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
            paths.append(path)
        return paths


# What version 3 added to the lines (traces/README.md, "Version 3"): a version-2 writer
# wrote none of it.
V3_ONLY_ARGS: dict[str, tuple[str, ...]] = {"log_append": ("prev_term", "terms"),
                                            "copy_begin": ("source",)}


def as_version_2(line: dict[str, Any]) -> dict[str, Any]:
    """The line as the version-2 writer wrote it: without version 3's args, and ``v`` 2
    unless a case gave it another version on purpose (1, 99)."""
    drop = V3_ONLY_ARGS.get(line.get("event", ""), ())
    args = line.get("args")
    if isinstance(args, dict) and drop:
        args = {k: v for k, v in args.items() if k not in drop}
    return {**line, "v": 2 if line.get("v") == SCHEMA_VERSION else line.get("v"),
            "args": args}

    def lines(self, node_server: int, inc: int) -> list[dict[str, Any]]:
        return self.files[(self.uuid(node_server), inc)]


def _accepts(event: str, field: str) -> bool:
    """The reader's args type for ``event`` has ``field`` (what this contract version
    writes: the walks follow the reader they are checked with)."""
    types = getattr(trace_contract, "ARGS_TYPES", {})
    t = types.get(event)
    return t is not None and field in getattr(t, "__struct_fields__", ())


def failure_reason(s: ServerState) -> str:
    """The free-text reason a server gives for a FAILED startup (the checker does not read
    it; the DAMAGED state it reports is what the spec checks)."""
    why = []
    if s.wal == WAL_DAMAGED:
        why.append("WAL segment failed verification (bad checksum)")
    elif s.wal != WAL_LIVE:
        why.append("WAL directory missing")
    if s.blocks == BLOCKS_DAMAGED:
        why.append("data blocks missing or corrupt")
    elif s.blocks != BLOCKS_PRESENT:
        why.append("data blocks missing")
    if not s.cmeta:
        why.append("consensus metadata missing")
    return "; ".join(why) or "unreadable on-disk state"



# Walks spend up to this many faults (wipes, damage, purges, the drop) unless told
# otherwise.
WALK_BOUNDS = Bounds(max_wipes=2)


def random_walk(seed: int, steps: int = 80, n_servers: int = 3,
                bounds: Bounds | None = None, drop_before_crash: float = 0.3,
                spec: Spec | None = None) -> Recorder:
    """A seeded random walk of the multi-server spec, recorded as traces."""
    rng = random.Random(seed)
    spec = spec or default_spec(n_servers)
    bounds = bounds or WALK_BOUNDS
    r = Recorder.new(spec, seed, created=True, tablet=f"tablet-{seed:04d}")
    crashes = faults = 0
    for _ in range(steps):
        succ = [(a, i, p) for a, i, p, _ in spec.successors(r.sys, bounds)
                if a.name not in ("crash", "startup", *FAULT_ACTIONS)]
        roll = rng.random()
        up = [i for i, s in enumerate(r.sys) if s.up]
        down = [i for i, s in enumerate(r.sys) if not s.up]
        if down and (roll < 0.25 or not succ):
            i = rng.choice(down)
            fault = rng.random()
            if faults < bounds.max_wipes and fault < 0.3:
                # a fault while down: a wipe (new UUID), damage found at startup, an
                # operator's purge of the quarantine, or the drop of the table (every
                # server is told; full deletes may follow)
                damage = spec.action("damage")
                kinds = [w for w in DAMAGE_KINDS if damage.guard(r.sys[i], what=w)]
                purgeable = bool(spec.action("purge").guard(r.sys[i]))
                if fault < 0.05:
                    for j in range(len(r.sys)):
                        if not r.sys[j].dropped:
                            r.drop(j)
                elif fault < 0.1:
                    r.wipe(i)
                elif purgeable and (fault < 0.2 or not kinds):
                    r.purge(i)
                elif not kinds:
                    r.wipe(i)
                else:
                    r.damage(i, rng.choice(kinds))
                faults += 1
            r.start(i)
            continue
        if up and crashes < bounds.max_crashes * n_servers and roll > 0.93:
            i = rng.choice(up)
            if rng.random() < 0.25:
                r.stop(i)
            else:
                r.crash(i, drop_last=rng.random() < drop_before_crash)
            crashes += 1
            continue
        if not succ:
            break
        # Pick an action name first, then one of its instances: rare lifecycle steps are
        # then as likely as the many parameterised Raft steps.
        # Deleting every replica would leave no copy source: start deletions sparingly.
        names = sorted({a.name for a, _, _ in succ})
        if len(names) > 1 and rng.random() < 0.85:
            names = [n for n in names if n != "delete_shutdown"]
        name = rng.choice(names)
        a, i, p = rng.choice([x for x in succ if x[0].name == name])
        r.step(i, a.name, **p)
    return r


# ---------------------------------------------------------------------------------------
# Scenarios for the known-bad corpus (each a valid history; mutations make it bad).


def scenario_election(seed: int = 7) -> Recorder:
    """Server 0 wins term 1 with server 1's vote, appends and commits; all replicate."""
    r = Recorder.new(default_spec(3), seed, created=True)
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    r.step(0, "become_leader", me=0, t=1)
    r.step(0, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(1, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(0, "commit", index=1, op_term=1)
    r.step(1, "commit", index=1, op_term=1, check=False)
    return r


def scenario_copy(seed: int = 11) -> Recorder:
    """Server 2 is deleted (a tombstone at term 1 with its vote) and copied back from 0."""
    r = scenario_election(seed)
    r.step(2, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    for name in ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                 "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal"):
        r.step(2, name)
    r.step(2, "stc_accept", caller_term=1, expected_state=1, has_opid=0, opid_term=0,
           opid_index=0)
    r.step(2, "copy_begin")
    r.step(2, "copy_merge_cmeta", remote_term=1, remote_config_index=0)
    r.step(2, "copy_download_wal", remote_last_term=1, remote_last_index=1)
    r.step(2, "copy_download_block")
    r.step(2, "copy_blocks_done")
    r.step(2, "copy_mark_ready")
    r.step(2, "copy_start_replica")
    return r


def scenario_restart(seed: int = 13) -> Recorder:
    """Server 1 votes in term 1, crashes, restarts (with the vote in its cmeta)."""
    r = scenario_election(seed)
    r.crash(1)
    r.start(1)
    r.step(1, "vote_denied", candidate=2, t=1, cand_last_term=0, cand_last_index=0,
           check=False)
    return r


def scenario_delete_crash(seed: int = 17) -> Recorder:
    """Server 2 crashes after marking DELETED (WAL still live): startup rolls forward."""
    r = Recorder.new(default_spec(3), seed, created=True)
    for name in ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                 "delete_mark_deleted"):
        r.step(2, name)
    r.crash(2)
    r.start(2)
    r.step(2, "delete_copy_cmeta")
    r.step(2, "delete_move_wal")
    return r


def scenario_batches(seed: int = 19) -> Recorder:
    """Server 0 wins term 1, appends entries 1..3 as one batch (one event), commits them
    with one event and commits the config change at index 2; server 1 follows."""
    r = Recorder.new(default_spec(3), seed, created=True)
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    r.step(0, "become_leader", me=0, t=1)
    r.step(0, "log_append", first_index=1, op_term=1, op_index=3)
    r.step(1, "log_append", first_index=1, op_term=1, op_index=3)
    r.step(0, "commit", index=3, op_term=1)
    r.step(1, "commit", index=3, op_term=1, check=False)  # a follower learns it
    r.step(0, "config_commit", config_index=2)
    r.step(1, "config_commit", config_index=2)
    return r


def scenario_damage(seed: int = 23, what: int = DAMAGE_WAL) -> Recorder:
    """Server 2 stops; its WAL (or its blocks) is damaged while it is down; it starts
    FAILED with a reason; the replica is then deleted (a tombstone)."""
    r = Recorder.new(default_spec(3), seed, created=True)
    r.stop(2)
    r.damage(2, what)
    r.start(2)
    for name in ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                 "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal"):
        r.step(2, name)
    return r


def scenario_truncate(seed: int = 31) -> Recorder:
    """Leadership changes hands and a follower's log is overwritten: server 0 leads term 1
    and appends 1..2 as one batch, server 1 gets index 1; server 0 steps down; server 1
    wins term 2 (server 2's vote folds the term rise), appends (2, 2); server 0 learns term
    2 and truncates its (1, 2) for (2, 2); server 2 takes 1..2 as one batch; commit 2."""
    r = Recorder.new(default_spec(3), seed, created=True)
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    r.step(0, "become_leader", me=0, t=1)
    r.step(0, "log_append", first_index=1, op_term=1, op_index=2)
    r.step(1, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(0, "step_down")
    r.step(1, "start_election", me=1)
    r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=1, cand_last_index=1)
    r.step(1, "become_leader", me=1, t=2)
    r.step(1, "log_append", first_index=2, op_term=2, op_index=2)
    r.step(0, "learn_term", t=2)
    r.step(0, "log_append", first_index=2, op_term=2, op_index=2)
    r.step(2, "log_append", first_index=1, op_term=2, op_index=2)
    r.step(1, "commit", index=2, op_term=2)
    r.step(0, "commit", index=2, op_term=2, check=False)
    return r


def scenario_damage_copy(seed: int = 37) -> Recorder:
    """Server 2's blocks are damaged while it is down; it starts FAILED, is deleted and
    copied back from the leader, and runs again."""
    r = scenario_election(seed)
    r.crash(2)
    r.damage(2, DAMAGE_BLOCKS)
    r.start(2)
    for name in ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                 "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal"):
        r.step(2, name)
    r.step(2, "stc_accept", caller_term=1, expected_state=1, has_opid=0, opid_term=0,
           opid_index=0)
    r.step(2, "copy_begin")
    r.step(2, "copy_merge_cmeta", remote_term=1, remote_config_index=0)
    r.step(2, "copy_download_wal", remote_last_term=1, remote_last_index=1)
    r.step(2, "copy_blocks_done")
    r.step(2, "copy_mark_ready")
    r.step(2, "copy_start_replica")
    r.stop(2)
    r.damage(2, DAMAGE_WAL)
    r.start(2)  # FAILED again: its WAL fails verification this time
    return r


# Clean hand-made traces of what schema version 2 added, kept beside the random walks (with
# seeds of their own: the UUIDs and tablet ids of one corpus never collide).
CLEAN_SCENARIOS: dict[str, Callable[[int], Recorder]] = {
    "batches": scenario_batches,
    "truncate": scenario_truncate,
    "damage-wal": scenario_damage,
    "damage-blocks-copy": scenario_damage_copy,
}


def _where(r: Recorder, target: dict[str, Any]) -> dict[str, Any]:
    """Where a line is in the written corpus: its file's name and its line number."""
    f = r.files[(target["node"], target["inc"])]
    return {"file": f"{target['node']}.{target['inc']:04d}.jsonl",
            "line": next(n for n, line in enumerate(f, 1) if line is target)}


# ---------------------------------------------------------------------------------------
# The known-bad corpus of contract version 2: a table of cases.
#
# Each case is data: a valid history (``base``: a scenario above, or a fresh cluster),
# the edits that break it (spec steps a real server would refuse, events it would never
# write, lines rewritten, cut, swapped or renumbered), how its first file is torn, and the
# finding the checker must report. ``_build`` interprets the edits in order; a step
# marked ``target`` is the line a global check must reject (``expected.json``'s ``at``).


@attrs.frozen
class Uuid:
    """Stands for server ``server``'s UUID in the tablet's config (generation 0)."""

    server: int


@attrs.frozen
class Sel:
    """A line of the history: the ``nth`` line (in file order, then line order) whose
    event is ``event`` (``nth=-1``: the last), or the last line of that line's file."""

    event: str
    nth: int = 0
    file_end: bool = False


@attrs.frozen
class Step:
    """Server ``server`` takes spec step ``action`` (``check=False``: even if the spec's
    guard refuses it) and writes its event."""

    server: int
    action: str
    params: dict[str, Any] = attrs.field(factory=dict)
    check: bool = True
    target: bool = False


@attrs.frozen
class Emit:
    """Server ``server`` writes an event no spec step took (its state as it is)."""

    server: int
    event: str
    args: dict[str, Any]


@attrs.frozen
class Server:
    """A server-level move: ``crash``, ``wipe``, ``start``, ``stop``, or ``reuse-uuid``
    (a wiped server comes back on its old UUID, as incarnation ``inc`` + 1)."""

    move: str
    server: int
    inc: int = 0


@attrs.frozen
class StopAll:
    """Every running server stops cleanly: the global checks see every step."""


@attrs.frozen
class Set:
    """Set a field of the selected line (``path``: keys joined by dots; ``value`` copied,
    ``Uuid`` resolved)."""

    at: Sel
    path: str
    value: Any


@attrs.frozen
class SetOnward:
    """Set a field in the selected line and every later line of its file that has the
    field's parent (of event ``event`` only, when given)."""

    at: Sel
    path: str
    value: Any
    event: str | None = None


@attrs.frozen
class SetEvery:
    """Set a top-level field in every line of every file."""

    field: str
    value: Any


@attrs.frozen
class Remove:
    """Remove a field of the selected line."""

    at: Sel
    path: str


@attrs.frozen
class Truncate:
    """Cut the selected line's file after it (the process wrote nothing more)."""

    at: Sel


@attrs.frozen
class Cut:
    """Remove the lines from ``first`` to ``last`` (one file) and renumber its lines."""

    first: Sel
    last: Sel


@attrs.frozen
class Swap:
    """Swap the selected line with the next one of its file."""

    at: Sel


@attrs.frozen
class ShiftSeq:
    """Add one to the sequence number of the selected line and every later one of its
    file."""

    at: Sel


Edit = Step | Emit | Server | StopAll | Set | SetOnward | SetEvery | Remove | Truncate | Cut \
    | Swap | ShiftSeq


@attrs.frozen
class BadCase:
    """A known-bad trace: ``base`` broken by ``edits``; what the checker must report."""

    name: str
    kind: str  # the finding's kind
    what: str  # what it shows (expected.json's description)
    base: Callable[[], Recorder]
    edits: tuple[Edit, ...] = ()
    tear: str | None = None  # "torn-middle", "torn-last" (first file) or "gzip-copy"
    # Written at contract version 2 (``as_version_2``, the reader's version-2 path), or 3.
    version: int = 2


def _created(seed: int) -> Callable[[], Recorder]:
    """A fresh cluster: the tablet created on every server of its config."""
    return lambda: Recorder.new(default_spec(3), seed, created=True)


def _locate(r: Recorder, sel: Sel) -> tuple[list[dict[str, Any]], int]:
    """The selected line's file and its index there."""
    hits = [line for key in r.order for line in r.files[key] if line["event"] == sel.event]
    line = hits[sel.nth]
    f = r.files[(line["node"], line["inc"])]
    return f, (len(f) - 1 if sel.file_end else f.index(line))


def _resolve(r: Recorder, value: Any) -> Any:
    if isinstance(value, Uuid):
        return r.member_uuid(value.server)
    if isinstance(value, dict):
        return {k: _resolve(r, v) for k, v in value.items()}
    return value


def _parent(line: dict[str, Any], path: str) -> tuple[Any, str]:
    """The object that holds the field ``path`` names (None if a step on the way is
    missing or empty), and the field's key."""
    *keys, last = path.split(".")
    obj: Any = line
    for k in keys:
        obj = obj.get(k) if obj else None
    return obj, last


def _build(case: BadCase) -> tuple[Recorder, dict[str, Any] | None]:
    """The case's history with its edits applied, and the line a global check must
    reject it at (a ``target`` step's), if any."""
    r = case.base()
    target = None
    for e in case.edits:
        match e:
            case Step(server, action, params, check, is_target):
                line = r.step(server, action, check=check, **params)
                target = line if is_target else target
            case Emit(server, event, args):
                r.emit(server, event, _resolve(r, args), r.sys[server], r.tablet)
            case Server("reuse-uuid", server, inc):
                r.gen[server] -= 1
                r.inc[server] = inc
                r.start(server)
            case Server(move, server):
                getattr(r, move)(server)
            case StopAll():
                r.stop_all()
            case Set(at, path, value):
                f, n = _locate(r, at)
                obj, key = _parent(f[n], path)
                obj[key] = _resolve(r, value)
            case SetOnward(at, path, value, event):
                f, n = _locate(r, at)
                for line in f[n:]:
                    obj, key = _parent(line, path)
                    if obj and event in (None, line["event"]):
                        obj[key] = _resolve(r, value)
            case SetEvery(field, value):
                for incarnation in r.order:
                    for line in r.files[incarnation]:
                        line[field] = value
            case Remove(at, path):
                f, n = _locate(r, at)
                obj, key = _parent(f[n], path)
                del obj[key]
            case Truncate(at):
                f, n = _locate(r, at)
                del f[n + 1:]
            case Cut(first, last):
                f, lo = _locate(r, first)
                _, hi = _locate(r, last)
                del f[lo:hi + 1]
                for k, line in enumerate(f):
                    line["seq"] = k
            case Swap(at):
                f, n = _locate(r, at)
                f[n], f[n + 1] = f[n + 1], f[n]
            case ShiftSeq(at):
                f, n = _locate(r, at)
                for line in f[n:]:
                    line["seq"] += 1
            case _:
                raise TypeError(f"not an edit: {e!r}")
    return r, target


_LEADER = Sel("become_leader")
_APPEND_1 = {"first_index": 1, "op_term": 1, "op_index": 1}

BAD_CASES: tuple[BadCase, ...] = (
    # After the restart server 1 "forgets" its term-1 vote for server 0 and grants a vote to
    # server 2 in the same term (the state it reports agrees with itself).
    BadCase("vote-twice-after-restart", "DoubleVote",
            "a node votes twice in term 1 across a restart", scenario_restart,
            (Set(Sel("vote_denied", file_end=True), "state.cmeta.voted_for", Uuid(2)),
             Set(Sel("vote_denied", file_end=True), "event", "vote_granted"))),
    # The copied replica then reports term 0: the merge's term went backwards.
    BadCase("term-down-after-copy", "TermRegression",
            "the term goes from 1 to 0 after a tablet copy", scenario_copy,
            (SetOnward(Sel("copy_start_replica"), "state.cmeta.term", 0,
                       event="copy_start_replica"),)),
    # The restart after the crash calls the deletion finished, and never finishes it.
    BadCase("startup-leaves-deleted-with-wal", "GuardFailed",
            "startup calls a DELETED replica with a live WAL a finished tombstone",
            scenario_delete_crash,
            (Set(Sel("startup", -1), "args.case", "TOMBSTONE"), Truncate(Sel("startup", -1)))),
    BadCase("ready-before-blocks", "GuardFailed",
            "copy_mark_ready before the blocks are downloaded", scenario_copy,
            (Cut(Sel("copy_download_block"), Sel("copy_blocks_done")),)),
    BadCase("merge-drops-vote", "StateMismatch",
            "the cmeta merge forgets the local vote of the same term", scenario_copy,
            (Set(Sel("copy_merge_cmeta"), "args.result.voted_for", None),
             SetOnward(Sel("copy_merge_cmeta"), "state.cmeta.voted_for", None))),
    BadCase("events-out-of-order", "OutOfOrder", "two events of one file swapped",
            scenario_election, (Swap(_LEADER),)),
    BadCase("sequence-gap", "SequenceGap", "a sequence number is skipped", scenario_election,
            (ShiftSeq(_LEADER),)),
    BadCase("unknown-event", "UnknownEvent", "an event the contract lacks", scenario_election,
            (Set(_LEADER, "event", "become_king"),)),
    BadCase("torn-line-in-middle", "MalformedLine", "a truncated line followed by more lines",
            scenario_election, tear="torn-middle"),
    BadCase("wrong-schema-version", "UnsupportedSchemaVersion", "schema version 99",
            scenario_election, (SetEvery("v", 99),)),
    # Server 2 also declares itself leader of term 1 (its own vote, no majority).
    BadCase("two-leaders-one-term", "TwoLeaders", "two nodes lead tablet-0001 in term 1",
            scenario_election,
            (Step(2, "learn_term", {"t": 1}),
             Emit(2, "become_leader", {"me": Uuid(2), "t": 1}))),
    BadCase("reused-uuid", "UuidReused", "a wiped server formats itself with its old UUID",
            scenario_election,
            (Server("crash", 2), Server("wipe", 2), Server("reuse-uuid", 2, inc=2))),
    BadCase("two-terms-committed-at-one-index", "CommitTermMismatch",
            "index 1 committed with term 1 on one replica and term 0 on another",
            scenario_election,
            (Set(Sel("commit", -1), "args.op_term", 0), Set(Sel("commit", -1), "args.index", 1))),
    BadCase("torn-last-line", "TornLine", "only a warning: the process died mid-write",
            scenario_election, tear="torn-last"),
    BadCase("incarnation-collected-twice", "DuplicateIncarnation",
            "one incarnation's trace given twice (the file and its .gz archive)",
            scenario_election, tear="gzip-copy"),
    # -- schema version 2: batched appends, step_down, config_commit, damage ---------------
    # The leader rewrites its own log from index 2 (Leader Append-Only broken).
    BadCase("leader-truncates-own-log", "GuardFailed",
            "a leader's log_append starts at index 2 of its 3-entry log (it truncates its log)",
            scenario_batches,
            (Step(0, "log_append", {"first_index": 2, "op_term": 1, "op_index": 2},
                  check=False),)),
    # Server 2 (in term 1, no entry yet) takes a batch starting at 3: 1..2 missing.
    BadCase("append-leaves-gap", "GuardFailed",
            "a follower's batch starts past its last index + 1", scenario_batches,
            (Step(2, "learn_term", {"t": 1}),
             Step(2, "log_append", {"first_index": 3, "op_term": 1, "op_index": 3},
                  check=False))),
    BadCase("step-down-not-leader", "GuardFailed", "a follower logs step_down",
            scenario_batches, (Step(1, "step_down", check=False),)),
    BadCase("config-commit-beyond-wal", "GuardFailed",
            "a config change at index 5 committed into the cmeta of a replica whose WAL ends "
            "at 3", scenario_batches,
            (Step(1, "config_commit", {"config_index": 5}, check=False),)),
    # Server 2 campaigns alone up to term 2 and commits index 3 with term 2, where the
    # others committed it (as the last entry of a batch) with term 1. Its log is empty, so
    # its local guard refuses the commit too: one fault, one line. (A log of term-2 entries
    # would be a second fault: entries of a term nobody won, which a crash no longer
    # excuses, global_checks._lost_leader.)
    BadCase("batched-commit-two-terms", "CommitTermMismatch",
            "index 3, the last of a committed batch, committed with term 1 and with term 2",
            scenario_batches,
            (Step(2, "start_election", {"me": 2}), Step(2, "start_election", {"me": 2}),
             Step(2, "commit", {"index": 3, "op_term": 2}, check=False))),
    BadCase("schema-version-1", "UnsupportedSchemaVersion",
            "a version-1 trace (before batched appends): refused", scenario_election,
            (SetEvery("v", 1),)),
    # The state says DAMAGED, the case READY (and nothing follows).
    BadCase("damaged-wal-started-ready", "GuardFailed",
            "startup reports a DAMAGED WAL but starts the replica READY", scenario_damage,
            (Set(Sel("startup"), "args", {"case": "READY"}), Truncate(Sel("startup")))),
    BadCase("failed-startup-over-intact-state", "GuardFailed",
            "startup reports FAILED while the state it reports is intact (damage not stated)",
            _created(29),
            (Server("stop", 2), Server("start", 2),
             Set(Sel("startup"), "args",
                 {"case": "FAILED", "reason": "WAL segment failed verification"}))),
    BadCase("failed-startup-without-reason", "BadArgs", "a FAILED startup that gives no reason",
            lambda: scenario_damage(what=DAMAGE_BLOCKS),
            (Remove(Sel("startup"), "args.reason"), Truncate(Sel("startup")))),
    # -- global checks across nodes: majorities and causality --------------------------
    # Each ends with every server stopped cleanly: no step can have been lost unlogged, so
    # the traces show every vote and every append (see global_checks).
    # Server 0 campaigns and declares itself leader of term 1 on its own vote alone (1 of
    # the 3 voters create_tablet named); servers 1 and 2 never voted.
    BadCase("leader-without-majority", "LeaderWithoutMajority",
            "a node becomes leader of term 1 with 1 of the config's 3 voters' votes",
            _created(41),
            (Step(0, "start_election", {"me": 0}),
             Step(0, "become_leader", {"me": 0, "t": 1}, check=False, target=True),
             Step(0, "log_append", _APPEND_1), StopAll())),
    # Server 0 wins term 1 fairly, appends 1..2 and commits index 2 while no follower ever
    # appended anything: 1 of 3 voters holds (1, 2).
    BadCase("commit-without-majority", "CommitWithoutMajority",
            "a leader commits index 2 of its term that only its own log holds", _created(43),
            (Step(0, "start_election", {"me": 0}),
             Step(1, "vote_granted", {"candidate": 0, "t": 1, "cand_last_term": 0,
                                      "cand_last_index": 0}),
             Step(0, "become_leader", {"me": 0, "t": 1}),
             Step(0, "log_append", {"first_index": 1, "op_term": 1, "op_index": 2}),
             Step(0, "commit", {"index": 2, "op_term": 1}, check=False, target=True),
             StopAll())),
    # Server 1 grants its term-1 vote to server 0 (Lamport order) before server 0 started
    # the election that asks for it.
    BadCase("vote-before-request", "CausalityViolation",
            "a vote for term 1 whose Lamport clock is below the candidate's start_election",
            _created(47),
            (Step(1, "vote_granted", {"candidate": 0, "t": 1, "cand_last_term": 0,
                                      "cand_last_index": 0}, check=False, target=True),
             Step(0, "start_election", {"me": 0}),
             Step(0, "become_leader", {"me": 0, "t": 1}, check=False), StopAll())),
    # Server 2 (in term 1) appends an entry of term 1 before server 0 became the leader of
    # term 1, the only node that can have sent it.
    BadCase("append-before-leader", "CausalityViolation",
            "a follower appends an entry of term 1 before the term's leader was elected",
            _created(53),
            (Step(0, "start_election", {"me": 0}),
             Step(1, "vote_granted", {"candidate": 0, "t": 1, "cand_last_term": 0,
                                      "cand_last_index": 0}),
             Step(2, "learn_term", {"t": 1}),
             Step(2, "log_append", _APPEND_1, check=False, target=True),
             Step(0, "become_leader", {"me": 0, "t": 1}), Step(0, "log_append", _APPEND_1),
             StopAll())),
    # Server 0 leads term 1, has committed 1..3 (an entry of its term: ready) and the config
    # at index 2; it then accepts a change planned on config index 0, below its committed
    # one (DeleteTablet's <= would refuse it too; the CAS is exact), and appends its entry
    # at 4. Written at version 3 (tests/trace/bad_v3.py writes the rest of version 3's).
    BadCase("config-change-stale-cas", "GuardFailed",
            "a leader accepts a config change whose CAS (index 0) is below its committed config "
            "index (2)", lambda: scenario_batches(59),
            (Step(0, "config_change", {"cas_index": 0, "config_index": 4}, check=False,
                  target=True),
             Step(0, "log_append", {"first_index": 4, "op_term": 1, "op_index": 4}),
             StopAll()), version=3),
)

# The cases here were written at contract version 2 and stay there (``as_version_2``):
# they keep the reader's version-2 path exercised, fault by fault. Cases added since are
# written at version 3.
V3_BAD_CASES: frozenset[str] = frozenset(c.name for c in BAD_CASES if c.version == 3)

# Kinds a checker reports with exit code 2 (the input cannot be read as a trace), and the
# one that is only a warning (0); every other kind exits 1.
_UNREADABLE_KINDS: Final = frozenset({"UnknownEvent", "MalformedLine",
                                      "UnsupportedSchemaVersion", "BadArgs",
                                      "DuplicateIncarnation"})


def _tear(paths: list[str], tear: str) -> None:
    """Tear the first trace file as the case says: archived a second time (gzip), or a
    line cut in half (in the middle of the file, or its last)."""
    if tear == "gzip-copy":
        # mtime=0: the archive's bytes are the same on every regeneration.
        with open(paths[0], "rb") as src, gzip.GzipFile(paths[0] + ".gz", "wb",
                                                        mtime=0) as gz:
            gz.write(src.read())
        return
    with open(paths[0]) as f:
        lines = f.readlines()
    if tear == "torn-middle":
        lines[1] = lines[1][: len(lines[1]) // 2] + "\n"
    else:
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
    with open(paths[0], "w") as f:
        f.writelines(lines)


def write_bad_corpus(root: str) -> list[str]:
    """(Re)write ``traces/bad/<case>/`` with the traces and ``expected.json``, for every
    case of ``BAD_CASES``."""
    names = []
    for case in BAD_CASES:
        d = os.path.join(root, case.name)
        shutil.rmtree(d, ignore_errors=True)
        r, target = _build(case)
        # Each case its own tablet: the cases can be checked together (one Spark job)
        # without one case's leaders, votes or configs bearing on another's.
        for key in r.order:
            for line in r.files[key]:
                if line["tablet"] is not None:
                    line["tablet"] = f"tablet-{case.name}"
        paths = r.write(d, version=case.version)
        if case.tear is not None:
            _tear(paths, case.tear)
        expected: dict[str, Any] = {
            "kind": case.kind, "description": case.what,
            "exit_code": 0 if case.kind == "TornLine" else
            2 if case.kind in _UNREADABLE_KINDS else 1}
        if target is not None:
            expected["at"] = _where(r, target)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f, indent=2)
            f.write("\n")
        names.append(case.name)
    return names


def write_walk_corpus(root: str, seeds: range, steps: int = 80) -> tuple[list[int],
                                                                          list[int]]:
    """Write clean spec walks under ``root/walk-<seed>/`` and the clean hand-made
    ``CLEAN_SCENARIOS`` under ``root/scenario-<name>/``; return (kept, rejected) seeds.

    A walk is rejected when the checker reports anything on it. (Since the spec's
    ``commit`` has the leader-only ``leader_commit`` system guard, a walk can no longer
    commit two terms at one index, and every seed of ``main`` is kept.)"""
    from revivify.checker.local import check_paths

    kept, rejected = [], []
    for k, (name, build) in enumerate(CLEAN_SCENARIOS.items()):
        d = os.path.join(root, f"scenario-{name}")
        shutil.rmtree(d, ignore_errors=True)
        r = build(1000 + k)
        for key in r.order:
            for line in r.files[key]:
                if line["tablet"] is not None:
                    line["tablet"] = f"tablet-{name}"
        r.write(d)
        rep = check_paths([d])
        if rep.findings:
            raise AssertionError(f"scenario {name} is not clean:\n{rep.text()}")
    for seed in seeds:
        d = os.path.join(root, f"walk-{seed:03d}")
        shutil.rmtree(d, ignore_errors=True)
        random_walk(seed, steps=steps).write(d)
        rep = check_paths([d])
        if rep.findings:
            shutil.rmtree(d)
            rejected.append(seed)
        else:
            kept.append(seed)
    return kept, rejected


WALK_SEEDS: Final = range(40)
WALK_STEPS: Final = 160


def main(argv: list[str] | None = None) -> int:
    """python -m revivify.checker.walks [TRACES_DIR]: regenerate schema.json, spec-walks/
    and this module's cases in bad/ (the committed corpus is exactly this output: a test
    regenerates it and compares the bytes)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m revivify.checker.walks",
        description="Regenerate the trace corpus written from the spec: schema.json, the clean "
                    "spec walks (spec-walks/) and the known-bad traces of contract version 2 "
                    "(bad/; tests/trace/bad_v3.py writes version 3's).")
    parser.add_argument("traces_dir", nargs="?", default="traces",
                        help="the corpus directory (default: traces)")
    root = parser.parse_args(argv).traces_dir
    write_contract_schema(os.path.join(root, "schema.json"))
    kept, rejected = write_walk_corpus(os.path.join(root, "spec-walks"), WALK_SEEDS,
                                       steps=WALK_STEPS)
    print(f"spec walks: kept {len(kept)}, rejected {len(rejected)} {rejected}")
    names = write_bad_corpus(os.path.join(root, "bad"))
    print(f"bad traces: {len(names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
