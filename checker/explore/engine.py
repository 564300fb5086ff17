"""The explorer's engine: each server's moves in a system state, from the spec's own
enumerators, guards and effects, asked once and cached (see the package's theory of
operation, "Caching the spec's answers": per-server plans, neighbourhoods, guards and
effects)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from revivify.spec.actions import (
    FAILURE_ACTIONS,
    FAULT_ACTIONS,
    REQUEST_ACTIONS,
    Bounds,
    Params,
)
from revivify.spec.logic import FMap
from revivify.spec.model import SystemState
from revivify.spec.system import Spec

from .checks import StateChecks
from .moves import (
    COUNTER_BITS,
    CRASH,
    FAULT,
    FREE,
    KINDS,
    MAX_BUDGET,
    NO_MOVES,
    REQUEST,
    Moves,
    Plan,
    Projections,
    budget_mask,
    is_plain,
    params_key,
)
from .probes import FieldProbe, Undecided, never_enabled, probe
from .results import ExplorerError
from .symmetry import MAX_SERVERS, SID_BITS, SID_MASK, Interner, make_canon

CRASH_ACTION: Final = "crash"
WIPE_ACTION: Final = "wipe"
# The actions the wipe budget counts: the environment's faults (a wipe, damage to the WAL,
# the blocks or the cmeta, the drop of the table) and the failures processes log (a copy
# that fails).
FAULTS: Final = frozenset(FAULT_ACTIONS + FAILURE_ACTIONS)
# The actions the request budget counts: the environment's requests (lifecycle requests and
# the config changes a leader accepts).
REQUESTS: Final = frozenset(REQUEST_ACTIONS)


def budget_kind(name: str) -> int:
    """The budget an action spends (``moves``: FREE, FAULT, CRASH, REQUEST)."""
    if name == CRASH_ACTION:
        return CRASH
    if name in FAULTS:
        return FAULT
    if name in REQUESTS:
        return REQUEST
    return FREE


def budget_limits(bounds: Bounds) -> tuple[int, ...]:
    """The limit of each budget kind 1.. (FAULT, CRASH, REQUEST)."""
    return (bounds.max_wipes, bounds.max_crashes, bounds.max_requests)


class Explorer:
    def __init__(self, spec: Spec, bounds: Bounds, symmetry: bool, verify: bool) -> None:
        if spec.n_servers < 1:
            raise ValueError("a spec needs at least one server")
        if symmetry and spec.n_servers > MAX_SERVERS:
            raise ValueError(f"symmetry reduction supports at most {MAX_SERVERS} servers")
        if max(budget_limits(bounds)) > MAX_BUDGET:
            raise ValueError(f"crash, wipe and request budgets must be at most {MAX_BUDGET}")
        self.spec = spec
        self.bounds = bounds
        self.n = spec.n_servers
        self.verify = verify
        self.plain = is_plain(spec)
        self.actions = spec.actions
        names = [a.name for a in self.actions]
        self.crash_idx = names.index(CRASH_ACTION) if CRASH_ACTION in names else -1
        self.wipe_idx = names.index(WIPE_ACTION) if WIPE_ACTION in names else -1
        self.fault_idx = frozenset(k for k, name in enumerate(names) if name in FAULTS)
        self.kind_of = [budget_kind(name) for name in names]
        self.others_of = [tuple(j for j in range(self.n) if j != i) for i in range(self.n)]
        self.limits = budget_limits(bounds)
        self.interner = Interner(self.n, symmetry)
        self.canon = make_canon(self.interner)
        self.plans: dict[tuple[int, int], Plan] = {}
        self.moves: dict[tuple[int, int, tuple[tuple[str, Any], ...]], int] = {}  # -1: off
        # neighbourhoods: read sets per action, projections per set of fields
        # per action: parameters (non-local enumerators) or moves (system guards)
        self.act_cache: dict[tuple[int, ...], tuple[list[Any], dict[int, Any]]] = {}
        self.act_fs: list[int] = [-1 for _ in self.actions]  # ids of act_fields, act_own
        self.act_fo: list[int] = [-1 for _ in self.actions]
        self.moves_cache: dict[tuple[int, ...], Moves] = {}
        self.neigh_off = False
        self.gen = 0
        self.act_fields: list[frozenset[str]] = [frozenset() for _ in self.actions]
        self.act_own: list[frozenset[str]] = [frozenset() for _ in self.actions]
        self.fieldsets: dict[frozenset[str], int] = {}
        self.projections: list[Projections] = []
        # state invariants and step properties (checks.py)
        self.checks = StateChecks(spec, self.interner, self.plain)

    # -- keys --------------------------------------------------------------------------

    def key(self, sids: Sequence[int], cw: int) -> int:
        """The explored state: the canonical system state and the packed budget counters."""
        return (self.canon(*sids) << ((KINDS - 1) * COUNTER_BITS)) | cw

    def unpack(self, key: int) -> tuple[list[int], int]:
        shift = (KINDS - 1) * COUNTER_BITS
        cw = key & ((1 << shift) - 1)
        packed = key >> shift
        sids = [(packed >> ((self.n - 1 - pos) * SID_BITS)) & SID_MASK
                for pos in range(self.n)]
        return sids, cw

    def system(self, sids: Sequence[int]) -> SystemState:
        objs = self.interner.objs
        return tuple([objs[s] for s in sids])

    # -- transitions -------------------------------------------------------------------

    def local_move(self, a_idx: int, sid: int, p: Params) -> int:
        """The next sid if the action's local guard holds for server state sid, else -1."""
        mk = (a_idx, sid, params_key(p))
        got = self.moves.get(mk)
        if got is None:
            action = self.actions[a_idx]
            s = self.interner.objs[sid]
            got = self.interner.sid(action.effect(s, **p)) if action.guard(s, **p) else -1
            self.moves[mk] = got
        return got

    def make_moves(self, sid: int, full: list[tuple[int, Params, int]]) -> Moves:
        if not full:
            return NO_MOVES
        mv = Moves([[] for _ in range(KINDS)], [], full, [])
        for a_idx, _p, nsid in full:
            kind = self.kind_of[a_idx]
            if kind == FREE and nsid == sid:
                mv.loops.append(a_idx)
            else:
                mv.by_kind[kind].append((a_idx, nsid))
            bad = self.checks.pair_failures(sid, nsid)
            if bad:
                mv.bad.append((kind, bad[0]))
        return mv.finish()

    def plan(self, i: int, sids: Sequence[int]) -> Plan:
        sid = sids[i]
        system = self.system(sids)
        local: list[tuple[int, Params, int]] = []
        guarded: list[tuple[int, Params, int]] = []
        nonlocal_actions: list[int] = []
        for a_idx, action in enumerate(self.actions):
            if never_enabled(action, self.interner.objs[sid]):
                continue
            rp = probe(system, i)
            params = list(action.enum(rp, i, self.bounds))
            if rp.touched:
                nonlocal_actions.append(a_idx)
                continue
            for p in params:
                nsid = self.local_move(a_idx, sid, p)
                if nsid < 0:
                    continue
                if action.system_guard is not None:
                    rp = probe(system, i)
                    ok = action.system_guard(rp, i, **p)
                    if rp.touched:
                        guarded.append((a_idx, p, nsid))
                        continue
                    if not ok:
                        continue
                local.append((a_idx, p, nsid))
        neigh_actions = list(dict.fromkeys([a for a, _p, _n in guarded] + nonlocal_actions))
        plan = Plan(self.make_moves(sid, local), guarded, nonlocal_actions, neigh_actions,
                     tuple(j for j in range(self.n) if j != i))
        self.plans[(i, sid)] = plan
        return plan

    def action_params(self, a_idx: int, i: int, system: Any) -> list[Params]:
        """The parameters of a non-local action's enumerator for server i that pass its
        system guard (the local guard is not consulted here)."""
        action = self.actions[a_idx]
        guard = action.system_guard
        return [p for p in action.enum(system, i, self.bounds)
                if guard is None or guard(system, i, **p)]

    def action_moves(self, a_idx: int, i: int, sid: int, plan: Plan,
                     system: Any) -> list[tuple[int, Params, int]]:
        """The moves of server i by one action that depends on other servers (budgets
        ignored), on the system tuple ``system``."""
        if a_idx in plan.nonlocal_actions:
            return self.local_moves(a_idx, sid, self.action_params(a_idx, i, system))
        guard = self.actions[a_idx].system_guard
        assert guard is not None
        return [(a, p, nsid) for a, p, nsid in plan.guarded
                if a == a_idx and guard(system, i, **p)]

    def local_moves(self, a_idx: int, sid: int,
                    params: list[Params]) -> list[tuple[int, Params, int]]:
        out = []
        for p in params:
            nsid = self.local_move(a_idx, sid, p)
            if nsid >= 0:
                out.append((a_idx, p, nsid))
        return out

    def nonlocal_moves(self, i: int, sid: int, plan: Plan,
                       system: SystemState) -> list[tuple[int, Params, int]]:
        """The moves of server i that depend on other servers (all budgets ignored)."""
        return [m for a_idx in plan.neigh_actions
                for m in self.action_moves(a_idx, i, sid, plan, system)]

    def fieldset(self, fields: frozenset[str]) -> int:
        """The id of a set of fields (its projections are interned under that id)."""
        fs = self.fieldsets.get(fields)
        if fs is None:
            fs = self.fieldsets[fields] = len(self.projections)
            self.projections.append(Projections(tuple(sorted(fields)), self.interner.objs))
        return fs

    def plan_key(self, plan: Plan, sids: Sequence[int]) -> Any:
        """The key of plan's neighbourhood cache for the other servers of sids (the
        explorer's loop computes the same inline)."""
        if plan.gen != self.gen:
            fields = frozenset().union(*(self.act_fields[a] for a in plan.neigh_actions))
            plan.proj = self.projections[self.fieldset(fields)]
            plan.tab = plan.proj.tab
            plan.nb = {}
            plan.gen = self.gen
        tab = plan.tab
        if len(tab) < len(self.interner.objs):
            assert plan.proj is not None
            plan.proj.fill()  # appends to tab in place
        o = plan.others
        if len(o) == 2:
            return (tab[sids[o[0]]] << SID_BITS) | tab[sids[o[1]]]
        return tuple([tab[sids[j]] for j in o])

    def act_key(self, a_idx: int, i: int, sids: Sequence[int], own: bool) -> tuple[int, ...]:
        """The key of one action's cached answer: the other servers' projections onto the
        fields it read from them, and server i's projection onto the fields it read from
        server i (``own``: a non-local action's parameters), or server i's whole state."""
        fs = self.act_fs[a_idx]
        if fs < 0:
            fs = self.act_fs[a_idx] = self.fieldset(self.act_fields[a_idx])
            self.act_fo[a_idx] = self.fieldset(self.act_own[a_idx])
        tab = self.projections[fs].tab
        if len(tab) < len(self.interner.objs):
            tab = self.projections[fs].fill()
        if own:
            fo = self.act_fo[a_idx]
            me = self.projections[fo].pid(sids[i])
        else:
            fo, me = -1, sids[i]
        others = self.others_of[i]
        if len(others) == 2:  # three servers: the common case, without a loop
            return (a_idx, fs, fo, i, me, tab[sids[others[0]]], tab[sids[others[1]]])
        return (a_idx, fs, fo, i, me, *[tab[sids[j]] for j in others])

    def neighbourhood(self, i: int, sids: Sequence[int], plan: Plan) -> Moves:
        """nonlocal_moves, cached on (i, sid_i, the other servers' projections onto the
        fields that these actions' enumerators and system guards were ever seen to read),
        and below that per action (on the fields that action was seen to read).

        Read-set memoisation: each action runs on a system whose other servers record the
        fields read from them. A cached answer was computed from those fields only, so any
        state that agrees with it on them gets the same answer (the spec is deterministic);
        when an action reads a field it never read before, its read set grows, and the
        cached neighbourhoods are dropped (per-action answers are keyed by their field set,
        so they stay valid)."""
        sid = sids[i]
        if self.neigh_off:
            return self.make_moves(sid, self.nonlocal_moves(i, sid, plan, self.system(sids)))
        nk = self.plan_key(plan, sids)
        got = plan.nb.get(nk)
        if got is not None:
            return got
        system: SystemState | None = None
        parts: list[list[tuple[int, Params, int]]] = []
        grown = False
        for a_idx in plan.neigh_actions:
            own = a_idx in plan.nonlocal_actions
            ak = self.act_key(a_idx, i, sids, own)
            entry: Any = self.act_cache.get(ak)
            if entry is None:
                if system is None:
                    system = self.system(sids)
                reads: set[str] = set()
                reads_own: set[str] = set()
                me = FieldProbe(system[i], reads_own) if own else system[i]
                probed: Any = tuple([me if j == i else FieldProbe(s, reads)
                                     for j, s in enumerate(system)])
                try:
                    answer: list[Any]
                    if own:
                        answer = self.action_params(a_idx, i, probed)
                        values = [v for p in answer for v in p.values()]
                    else:
                        answer = self.action_moves(a_idx, i, sid, plan, probed)
                        values = [v for _, p, _n in answer for v in p.values()]
                    if any(type(v) is not int and type(v) is not bool and type(v) is not FMap
                           for v in values):
                        raise Undecided
                except Exception:
                    # Something the probe cannot stand in for (identity, hashing, a server
                    # object in the parameters): stop caching, run plainly from now on.
                    self.neigh_off = True
                    self.act_cache.clear()
                    return self.make_moves(sid, self.nonlocal_moves(i, sid, plan,
                                                                    self.system(sids)))
                if not (reads <= self.act_fields[a_idx] and reads_own <= self.act_own[a_idx]):
                    self.act_fields[a_idx] = self.act_fields[a_idx] | reads
                    self.act_own[a_idx] = self.act_own[a_idx] | reads_own
                    self.act_fs[a_idx] = -1
                    grown = True
                    ak = self.act_key(a_idx, i, sids, own)
                entry = self.act_cache[ak] = (answer, {})
            if own:
                # the parameters, through the local guard and effect of this server state
                by_sid = entry[1]
                moves = by_sid.get(sid)
                if moves is None:
                    moves = by_sid[sid] = self.local_moves(a_idx, sid, entry[0])
                parts.append(moves)
            else:
                parts.append(entry[0])
        if grown:
            self.gen += 1
            nk = self.plan_key(plan, sids)
        # the same per-action answers give the same moves (the lists are cached, so their
        # ids are stable)
        mk = (sid, *[id(m) for m in parts])
        got = self.moves_cache.get(mk)
        if got is None:
            got = self.moves_cache[mk] = self.make_moves(
                sid, [m for part in parts for m in part])
        plan.nb[nk] = got
        return got

    def budget_ok(self, a_idx: int, mask: int) -> bool:
        kind = self.kind_of[a_idx]
        return kind == FREE or bool(mask & (1 << (kind - 1)))

    def successors_fast(
        self, sids: list[int], cw: int,
    ) -> list[tuple[int, int, Params, int]]:
        """(action index, server, params, next sid) for every enabled transition, from the
        caches (for verify: the explorer's loop reads the caches directly)."""
        mask = budget_mask(cw, self.limits)
        out: list[tuple[int, int, Params, int]] = []
        for i, sid in enumerate(sids):
            plan = self.plans.get((i, sid)) or self.plan(i, sids)
            groups = [plan.local]
            if plan.neigh_actions:
                groups.append(self.neighbourhood(i, sids, plan))
            out.extend((a_idx, i, p, nsid) for mv in groups for a_idx, p, nsid in mv.full
                       if self.budget_ok(a_idx, mask))
        return out

    def successors_generic(
        self, sids: list[int], cw: int,
    ) -> list[tuple[int, int, Params, int]]:
        system = self.system(sids)
        index = {id(a): k for k, a in enumerate(self.actions)}
        mask = budget_mask(cw, self.limits)
        return [(index[id(action)], i, p, self.interner.sid(nxt[i]))
                for action, i, p, nxt in self.spec.successors(system, self.bounds)
                if self.budget_ok(index[id(action)], mask)]

    # -- verification (tests) ----------------------------------------------------------

    def check_against_generic(self, sids: list[int], cw: int,
                              fast: list[tuple[int, int, Params, int]]) -> None:
        system = self.system(sids)
        want = sorted(self.checks.state_failures(sids))
        got = sorted(self.spec.violations(system))
        if want != got:
            raise ExplorerError(f"cached invariants {want} != spec {got} in {system!r}")
        generic = sorted((a, i, params_key(p), n)
                         for a, i, p, n in self.successors_generic(sids, cw))
        mine = sorted((a, i, params_key(p), n) for a, i, p, n in fast)
        if generic != mine:
            raise ExplorerError(f"cached successors differ from the spec's in {system!r}")
        for a_idx, i, _p, nsid in fast:
            post = (*system[:i], self.interner.objs[nsid], *system[i + 1:])
            cached = sorted(self.checks.step_failures(sids[i], nsid, i, sids))
            spec_says = sorted(self.spec.step_violations(system, post, i))
            if cached != spec_says:
                raise ExplorerError(
                    f"cached step properties {cached} != spec {spec_says} "
                    f"for {self.actions[a_idx].name}")


__all__ = ["CRASH_ACTION", "FAULTS", "REQUESTS", "WIPE_ACTION", "Explorer", "budget_kind",
           "budget_limits"]
