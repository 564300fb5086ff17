"""The explorer's engine: each server's moves in a system state, from the spec's own
enumerators, guards and effects, asked once and cached (see the package's theory of
operation, "Caching the spec's answers": per-server plans, neighbourhoods, guards and
effects)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from revivify.checker.compiled import cached_guard
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
from .symmetry import MAX_SERVERS, SID_BITS, SID_MASK, SidInterner, make_canon

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
        self.interner = SidInterner(self.n, symmetry)
        self.canon = make_canon(self.interner)
        # Each local guard compiled from its z3 form (``checker.compiled``: the guard as z3
        # sees it, printed as Python), None where it will not compile (the interpreted one
        # is used). ``tests/spec/test_compiled.py`` holds them equal to the spec's guards;
        # ``verify`` re-checks every successor set against the interpreted spec.
        self.guards: list[Any] = [
            (cg.fn, a.params) if (cg := cached_guard(a)) is not None else None
            for a in self.actions]
        # A compiled guard reads nothing but its footprint (the fields its code names), so
        # its verdict is cached on the server state's projection onto it and the parameters
        # (``guard_cache``); an interpreted guard's on the whole state (projection None).
        footprints: dict[frozenset[str], Projections] = {}
        self.guard_proj: list[Projections | None] = [
            footprints.setdefault(cg.footprint, Projections(tuple(sorted(cg.footprint)),
                                                            self.interner.objs))
            if (cg := cached_guard(a)) is not None else None for a in self.actions]
        self.guard_cache: dict[tuple[Any, ...], bool] = {}
        self.never_cache: dict[tuple[int, int, bool], bool] = {}
        self.plans: dict[tuple[int, int], Plan] = {}
        self.moves: dict[tuple[int, int, tuple[tuple[str, Any], ...]], int] = {}  # -1: off
        self.moves_of: dict[Any, Moves] = {}  # make_moves, interned
        # neighbourhoods: read sets per action, projections per set of fields
        # per action: parameters (non-local enumerators) or moves (system guards)
        # per action answer: (parameters or moves, finished Moves by (action, sid), the
        # parameters' keys)
        # (and the id of the parameters' keys, interned in ``sigs``: -1 for moves)
        self.act_cache: dict[tuple[int, ...], tuple[list[Any], dict[tuple[int, int], Moves],
                                                    list[Any] | None, int]] = {}
        self.sigs: dict[tuple[Any, ...], int] = {}
        self.act_fs: list[int] = [-1 for _ in self.actions]  # ids of act_fields, act_own
        self.act_fo: list[int] = [-1 for _ in self.actions]
        self.neigh_off = False
        self.gen = 0
        # Actions with the same enumerator and system guard (RequestVote granted and
        # denied) share their parameters' answer and its read sets: ``rep`` is the first.
        firsts: dict[tuple[Any, Any], int] = {}
        self.rep = [firsts.setdefault((a.enum, a.system_guard), k)
                    for k, a in enumerate(self.actions)]
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

    def local_move(self, a_idx: int, sid: int, p: Params,
                   pk: tuple[tuple[str, Any], ...] | None = None) -> int:
        """The next sid if the action's local guard holds for server state sid, else -1
        (``pk``: ``params_key(p)``, when the caller has it)."""
        if pk is None:
            pk = params_key(p)
        mk = (a_idx, sid, pk)
        got = self.moves.get(mk)
        if got is None:
            if self.guard_holds(a_idx, sid, p, pk):
                got = self.interner.sid(self.actions[a_idx].effect(self.interner.objs[sid],
                                                                   **p))
            else:
                got = -1
            self.moves[mk] = got
        return got

    def guard_holds(self, a_idx: int, sid: int, p: Params,
                    pk: tuple[tuple[str, Any], ...]) -> bool:
        """The action's local guard for server state sid and parameters p, cached on the
        state's projection onto the guard's footprint."""
        proj = self.guard_proj[a_idx]
        gk = (a_idx, sid if proj is None else proj.pid(sid), proj is None, pk)
        ok = self.guard_cache.get(gk)
        if ok is None:
            s = self.interner.objs[sid]
            compiled = self.guards[a_idx]
            if compiled is not None:
                fn, names = compiled
                ok = bool(fn(s, *[p[name] for name in names]))
            else:
                ok = bool(self.actions[a_idx].guard(s, **p))
            self.guard_cache[gk] = ok
        return ok

    def never(self, a_idx: int, sid: int) -> bool:
        """``never_enabled`` (the local guard false whatever the parameters), cached like
        the guard's verdicts on the state's projection onto the guard's footprint."""
        proj = self.guard_proj[a_idx]
        key = (a_idx, sid if proj is None else proj.pid(sid), proj is None)
        got = self.never_cache.get(key)
        if got is None:
            got = self.never_cache[key] = never_enabled(self.actions[a_idx],
                                                        self.interner.objs[sid])
        return got

    def make_moves(self, sid: int, full: list[tuple[int, Params, int]],
                   ck: Any = None) -> Moves:
        """The finished Moves of server state sid for these (action, parameters, next sid)
        triples, interned on their content (or on ``ck``, a key that determines them):
        two neighbourhoods that allow the same moves share one Moves (finishing one costs
        far more than the look-up). Every Moves the search uses is in ``moves_of`` (the
        search tallies coverage from there)."""
        if not full:
            if ck is not None:
                self.moves_of[ck] = NO_MOVES  # (never used by the loop: nothing to tally)
            return NO_MOVES
        if ck is None:
            ck = (sid, tuple([(a_idx, params_key(p), nsid) for a_idx, p, nsid in full]))
        got = self.moves_of.get(ck)
        if got is not None:
            return got
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
        got = self.moves_of[ck] = mv.finish()
        return got

    def plan(self, i: int, sids: Sequence[int]) -> Plan:
        sid = sids[i]
        system = self.system(sids)
        local: list[tuple[int, Params, int]] = []
        guarded: list[tuple[int, Params, int]] = []
        nonlocal_actions: list[int] = []
        for a_idx, action in enumerate(self.actions):
            if self.never(a_idx, sid):
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

    def local_moves(self, a_idx: int, sid: int, params: list[Params],
                    keys: list[tuple[tuple[str, Any], ...]] | None = None,
                    ) -> list[tuple[int, Params, int]]:
        """The moves of server state sid by the action for each of ``params`` whose local
        guard holds (``keys``: their ``params_key``, when the caller has them)."""
        out = []
        if keys is None:
            keys = [params_key(p) for p in params]
        known = self.moves
        for p, pk in zip(params, keys, strict=True):
            # the next sid (-1: the guard is false), cached on (action, sid, parameters)
            nsid = known.get((a_idx, sid, pk))
            if nsid is None:
                nsid = self.local_move(a_idx, sid, p, pk)
            if nsid >= 0:
                out.append((a_idx, p, nsid))
        return out

    def fieldset(self, fields: frozenset[str]) -> int:
        """The id of a set of fields (its projections are interned under that id)."""
        fs = self.fieldsets.get(fields)
        if fs is None:
            fs = self.fieldsets[fields] = len(self.projections)
            self.projections.append(Projections(tuple(sorted(fields)), self.interner.objs))
        return fs

    def act_key(self, a_idx: int, i: int, sids: Sequence[int], own: bool) -> tuple[int, ...]:
        """The key of one action's cached answer: the other servers' projections onto the
        fields it read from them, and server i's projection onto the fields it read from
        server i (``own``: a non-local action's parameters), or server i's whole state."""
        r = self.rep[a_idx]
        fs = self.act_fs[r]
        if fs < 0:
            fs = self.act_fs[r] = self.fieldset(self.act_fields[r])
            self.act_fo[r] = self.fieldset(self.act_own[r])
        tab = self.projections[fs].tab
        if len(tab) < len(self.interner.objs):
            tab = self.projections[fs].fill()
        if own:
            # the parameters: shared by the actions of one enumerator and system guard
            fo = self.act_fo[r]
            me = self.projections[fo].pid(sids[i])
            who = r
        else:
            fo, me, who = -1, sids[i], -1 - a_idx
        others = self.others_of[i]
        if len(others) == 2:  # three servers: the common case, without a loop
            return (who, fs, fo, i, me, tab[sids[others[0]]], tab[sids[others[1]]])
        return (who, fs, fo, i, me, *[tab[sids[j]] for j in others])

    def neighbourhood(self, i: int, sids: Sequence[int], plan: Plan) -> list[Moves]:
        """The moves of server i that depend on other servers, one finished Moves per
        action of ``plan.neigh_actions`` (budgets ignored; empty ones left out), from the
        per-plan caches (what the explorer's loop looks up inline)."""
        out = []
        for pos in range(len(plan.neigh_actions)):
            mv = self.part(i, sids, plan, pos)
            if mv.full:
                out.append(mv)
        return out

    def part(self, i: int, sids: Sequence[int], plan: Plan, pos: int) -> Moves:
        """The moves of server i by the action at ``pos`` of ``plan.neigh_actions``,
        cached per plan on the other servers' projections onto the fields that action was
        ever seen to read, and below that per action across server states
        (``action_part``).

        Read-set memoisation: each action runs on a system whose other servers record the
        fields read from them. A cached answer was computed from those fields only, so any
        state that agrees with it on them gets the same answer (the spec is deterministic);
        when an action reads a field it never read before, its read set grows and the
        per-plan caches are rebuilt on the larger projection (per-action answers are keyed
        by their field set, so they stay valid)."""
        a_idx = plan.neigh_actions[pos]
        sid = sids[i]
        if self.neigh_off:
            return self.make_moves(sid, self.action_moves(a_idx, i, sid, plan,
                                                          self.system(sids)))
        if plan.act_gen != self.gen:
            self.plan_actions(plan)
        ak = self.part_key(plan, pos, sids)
        moves = plan.act_nb[pos].get(ak)
        if moves is None:
            gen = self.gen
            moves = self.action_part(a_idx, i, sids, plan)
            if self.neigh_off:
                return self.part(i, sids, plan, pos)
            if self.gen != gen:
                # the action read a field it never read before: key on the larger
                # projection from now on
                self.plan_actions(plan)
                ak = self.part_key(plan, pos, sids)
            plan.act_nb[pos][ak] = moves
        return moves

    def part_key(self, plan: Plan, pos: int, sids: Sequence[int]) -> Any:
        """The key of a plan's cache of one action: the other servers' projections onto
        the fields it reads (the explorer's loop computes the same inline)."""
        tab = plan.act_tabs[pos]
        if len(tab) < len(self.interner.objs):
            tab = self.projections[plan.act_proj[pos]].fill()
        o = plan.others
        if len(o) == 2:
            return (tab[sids[o[0]]] << SID_BITS) | tab[sids[o[1]]]
        return tuple([tab[sids[j]] for j in o])

    def plan_actions(self, plan: Plan) -> None:
        """(Re)build a plan's per-action caches for the current read sets."""
        plan.act_proj = []
        for a_idx in plan.neigh_actions:
            r = self.rep[a_idx]
            fs = self.act_fs[r]
            if fs < 0:
                fs = self.act_fs[r] = self.fieldset(self.act_fields[r])
                self.act_fo[r] = self.fieldset(self.act_own[r])
            plan.act_proj.append(fs)
        plan.act_tabs = [self.projections[fs].tab for fs in plan.act_proj]
        plan.act_nb = [{} for _ in plan.neigh_actions]
        # the actions that read the same fields of the others (StartTabletCopy accepted
        # and rejected, RequestVote granted and denied) share one look-up in the loop
        positions: dict[int, list[int]] = {}
        for pos, fs in enumerate(plan.act_proj):
            positions.setdefault(fs, []).append(pos)
        plan.act_groups = [(fs, self.projections[fs].tab, tuple(poss), {})
                           for fs, poss in positions.items()]
        plan.act_gen = self.gen

    def action_part(self, a_idx: int, i: int, sids: Sequence[int], plan: Plan) -> Moves:
        """The finished moves of server i by one action that depends on other servers,
        from its answer cached across server states (``act_cache``: keyed on server i's
        projection onto the fields the action read from it, for a non-local enumerator, or
        on server i's state, for a system guard, and on the others' projections), with
        read-set growth (``self.gen`` goes up) and the fall-back to plain runs
        (``self.neigh_off``) when a probe cannot stand in."""
        sid = sids[i]
        own = a_idx in plan.nonlocal_actions
        ak = self.act_key(a_idx, i, sids, own)
        entry: Any = self.act_cache.get(ak)
        if entry is None:
            system = self.system(sids)
            reads: set[str] = set()
            reads_own: set[str] = set()
            me = FieldProbe(system[i], reads_own) if own else system[i]
            probed: Any = tuple([me if j == i else FieldProbe(s, reads)
                                 for j, s in enumerate(system)])
            keys: list[Any] | None = None
            try:
                answer: list[Any]
                if own:
                    params = self.action_params(a_idx, i, probed)
                    answer = params
                    values = [v for p in params for v in p.values()]
                    keys = [params_key(p) for p in params]
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
                return NO_MOVES
            r = self.rep[a_idx]
            if not (reads <= self.act_fields[r] and reads_own <= self.act_own[r]):
                self.act_fields[r] = self.act_fields[r] | reads
                self.act_own[r] = self.act_own[r] | reads_own
                self.act_fs[r] = -1
                self.gen += 1
                ak = self.act_key(a_idx, i, sids, own)
            sig = -1 if keys is None else self.sigs.setdefault(tuple(keys), len(self.sigs))
            entry = self.act_cache[ak] = (answer, {}, keys, sig)
        if not entry[0]:
            return NO_MOVES
        # Each action's moves, finished (budget groups, step verdicts) once: for a
        # non-local enumerator per server state and action (its parameters through the
        # local guard and effect of that state), for a system guard in the entry itself
        # (its key holds the server state).
        by_sid = entry[1]
        mk = (a_idx, sid)
        moves: Moves | None = by_sid.get(mk)
        if moves is None:
            if own:
                # the moves are a function of (action, sid, the parameters): entries with
                # the same parameters (``sig``: their keys, interned) share one Moves, and
                # a hit skips the local guards and effects too
                ck = (a_idx, sid, entry[3])
                moves = self.moves_of.get(ck)
                if moves is None:
                    moves = self.make_moves(
                        sid, self.local_moves(a_idx, sid, entry[0], entry[2]), ck)
                by_sid[mk] = moves
            else:
                moves = by_sid[mk] = self.make_moves(sid, entry[0])
        return moves

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
            groups = [plan.local, *self.neighbourhood(i, sids, plan)]
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
