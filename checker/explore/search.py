"""The breadth-first search: level by level from the initial state, every new state
checked against the invariants when it is first found and every transition against the
step properties, so the first violation lies at the smallest depth (see the package's
theory of operation, "Breadth-first search" and "Budgets")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from revivify.spec.actions import Bounds
from revivify.spec.model import SystemState
from revivify.spec.system import Spec

from .collector import paused
from .counterexample import replay
from .engine import Explorer
from .moves import COUNTER_BITS, COUNTER_MASK, KINDS, Moves, counter_add
from .results import ExploreProgress, ExploreResult, ExploreViolation
from .symmetry import SID_BITS, make_unpack


def explore(
    spec: Spec,
    bounds: Bounds,
    *,
    max_states: int | None = None,
    progress: Callable[[ExploreProgress], None] | None = None,
    progress_seconds: float = 5.0,
    symmetry: bool = True,
    verify: bool = False,
    workers: int = 1,
) -> ExploreResult:
    """Breadth-first search of every state of ``spec`` reachable within ``bounds``.

    Stops at the first violation (shortest counterexample) or after ``max_states`` distinct
    states. ``progress`` is called about every ``progress_seconds`` and at the end of each
    level. ``verify`` checks every cached answer against the generic ``Spec`` methods (slow;
    for tests). ``workers`` > 1: the search on that many processes (``parallel``; the same
    counts, ``max_states`` checked by each worker on the states it holds)."""
    if workers != 1:
        from .parallel import explore_parallel

        return explore_parallel(spec, bounds, workers, max_states=max_states,
                                progress=progress, symmetry=symmetry, verify=verify)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    ex = Explorer(spec, bounds, symmetry, verify)
    actions = spec.actions
    coverage = [0] * len(actions)
    docs = {inv.name: inv.doc for inv in spec.invariants}
    docs.update({p.name: p.doc for p in spec.step_properties})

    init_sids = [ex.interner.sid(s) for s in spec.initial()]
    init_key = ex.key(init_sids, 0)
    parents: dict[int, int] = {init_key: -1}
    search = Search(ex, parents, coverage, max_states, progress, progress_seconds, t0)
    bad = ex.checks.state_failures(ex.unpack(init_key)[0])
    if bad:
        search.violation_at = ([init_key], ("invariant", bad[0]))
    else:
        with paused():  # the collector off (``collector`` says why)
            (search.run_plain if ex.plain else search.run_generic)(init_key)

    violation: ExploreViolation | None = None
    if search.violation_at is not None:
        chain, final = search.violation_at
        violation = ExploreViolation(final[1], final[0], replay(ex, chain, final),
                              docs.get(final[1], ""))
    seconds = time.perf_counter() - t0
    cov = {a.name: coverage[k] for k, a in enumerate(actions)}
    return ExploreResult(
        distinct_states=len(parents),
        transitions=search.transitions,
        depth=search.depth,
        seconds=seconds,
        coverage=cov,
        dead_actions=tuple(name for name, c in cov.items() if c == 0),
        violation=violation,
        complete=search.complete and violation is None,
        server_states=len(ex.interner.objs),
        symmetry=symmetry,
        levels=tuple(search.levels),
        cpu_seconds=time.process_time() - cpu0,
    )


class Search:
    """The breadth-first loop (two versions: over the caches, and over Spec.successors)."""

    def __init__(self, ex: Explorer, parents: dict[int, int], coverage: list[int],
                 max_states: int | None, progress: Callable[[ExploreProgress], None] | None,
                 progress_seconds: float, t0: float) -> None:
        self.ex = ex
        self.parents = parents
        self.coverage = coverage
        self.max_states = max_states
        self.progress = progress
        self.progress_seconds = progress_seconds
        self.t0 = t0
        self.next_report = t0 + progress_seconds
        self.transitions = 0
        self.depth = 0
        self.levels = [1]  # the states first found at each depth (the initial state: 1)
        self.complete = True
        self.violation_at: tuple[list[int], tuple[str, str]] | None = None
        # run_plain's unpacking of a key: the counters' width, each server's sid's shift.
        self._shift_c = 0
        self._shifts: list[int] = []
        self._unpack: Callable[[int], list[int]] = make_unpack(ex.n)

    def chain_to(self, key: int) -> list[int]:
        parents = self.parents
        out = [key]
        while parents[out[-1]] != -1:
            out.append(parents[out[-1]])
        return out[::-1]

    def report(self, frontier: int) -> None:
        assert self.progress is not None
        now = time.perf_counter()
        if now >= self.next_report:
            self.next_report = now + self.progress_seconds
            self.progress(ExploreProgress(len(self.parents), self.transitions, self.depth + 1,
                                   frontier, now - self.t0))

    def level_done(self, found: int) -> None:
        """A level ended with ``found`` new states (at depth ``self.depth + 1``)."""
        if found:
            self.depth += 1  # the deepest level holding a discovered state
            self.levels.append(found)
        if self.progress is not None and found:
            if self.ex.plain:
                self.transitions = self.tally(False)
            self.progress(ExploreProgress(len(self.parents), self.transitions, self.depth,
                                          found, time.perf_counter() - self.t0, self.depth))

    def prepare(self) -> None:
        """The explored state's key, as ``_expand_plain`` unpacks it: the canonical sids
        above the packed budget counters (faults, crashes, requests: COUNTER_BITS each;
        see moves.FREE..REQUEST)."""
        self._shift_c = (KINDS - 1) * COUNTER_BITS
        self._shifts = [(self.ex.n - 1 - pos) * SID_BITS for pos in range(self.ex.n)]

    def run_plain(self, init_key: int) -> None:
        """BFS over the caches: per-server plans and neighbourhoods give (action, next sid)
        pairs with their step verdicts decided; only new states are checked. Level by
        level; stops at the first violation or at ``max_states``."""
        self.prepare()
        frontier = [init_key]
        expanded = 0
        while frontier:
            next_frontier: list[int] = []
            for key in frontier:
                if self._expand_plain(key, next_frontier.append):
                    break
                expanded += 1
                if self.max_states is not None and len(self.parents) >= self.max_states:
                    self.complete = False
                    break
                if (self.progress is not None and (expanded & 1023) == 0
                        and time.perf_counter() >= self.next_report):
                    self.transitions = self.tally(False)
                    self.report(len(next_frontier))
            self.level_done(len(next_frontier))
            if not self.complete or self.violation_at is not None:
                break
            frontier = next_frontier
        self.transitions = self.tally(True)

    def _expand_plain(self, key: int, append: Callable[[int], None],
                      owned: bytearray | None = None, check: bool = True) -> bool:
        """Every move of every server from the state ``key``: each new state recorded
        (its parent, ``append``ed to the next level) and checked; True when a step
        property or an invariant fails (``violation_at`` says which).

        The parallel search (``parallel``) expands a state in parts: ``owned`` (by sid,
        non-zero for the server states this process expands) leaves out the servers in
        the other processes' server states, and ``check`` False leaves the new states'
        invariants to be checked once, by their owner, after the level's exchange."""
        ex = self.ex
        parents = self.parents
        state_ok = ex.checks.state_ok
        canon = ex.canon
        shift_c = self._shift_c
        cw = key & ((1 << shift_c) - 1)
        sids = self._unpack(key >> shift_c)
        if ex.verify:
            ex.check_against_generic(sids, cw, ex.successors_fast(sids, cw))
        # which budgets may still be spent (moves.budget_mask, inline)
        max_w, max_c, max_r = ex.limits
        bits = COUNTER_BITS
        budget = (((cw & COUNTER_MASK) < max_w)
                  | ((((cw >> bits) & COUNTER_MASK) < max_c) << 1)
                  | ((((cw >> (2 * bits)) & COUNTER_MASK) < max_r) << 2))
        for i in range(ex.n):
            sid = sids[i]
            if owned is not None and not owned[sid]:
                continue
            for mv in self._moves(i, sids):
                if mv.bad:
                    prop = mv.bad_at[budget]
                    if prop is not None:
                        self.violation_at = (self.chain_to(key), ("step", prop))
                        return True
                # counted, not tallied: coverage and transitions are summed from the uses
                # of each Moves at the end (tally)
                mv.uses[budget] += 1
                for targets, add in mv.tsel[budget]:
                    ncw = cw + add
                    for nsid in targets:
                        sids[i] = nsid
                        nkey = (canon(*sids) << shift_c) | ncw
                        if nkey not in parents:
                            parents[nkey] = key
                            append(nkey)
                            if check and not state_ok(sids):
                                bad = ex.checks.state_failures(sids)
                                self.violation_at = (self.chain_to(nkey),
                                                     ("invariant", bad[0]))
                                return True
                    sids[i] = sid
        return False

    def _moves(self, i: int, sids: list[int]) -> list[Moves]:
        """Server ``i``'s moves in the state ``sids``: those that depend on it alone, then
        one Moves per action that depends on the others, from its plan's per-action caches
        (the lookup of ``ex.part``, inline; n == 3: two other servers)."""
        ex = self.ex
        n = ex.n
        objs = ex.interner.objs
        plan = ex.plans.get((i, sids[i]))
        if plan is None:
            plan = ex.plan(i, sids)
        mvs = [plan.local] if plan.local.full else []
        if not plan.neigh_actions:
            return mvs
        if plan.act_gen != ex.gen or ex.neigh_off:
            mvs.extend(ex.neighbourhood(i, sids, plan))
            return mvs
        o = plan.others
        for fs, tab, poss, table in plan.act_groups:
            got = None
            if len(tab) == len(objs):
                got = table.get((tab[sids[o[0]]] << SID_BITS) | tab[sids[o[1]]]
                                if n == 3 else tuple([tab[sids[j]] for j in o]))
            if got is None:
                gen = ex.gen
                got = tuple([m for pos in poss if (m := ex.part(i, sids, plan, pos)).full])
                if ex.gen != gen or ex.neigh_off:
                    # a read set grew (the plan's tables were rebuilt) or the caches are
                    # off: this server's moves again, the slow way
                    mvs = [plan.local] if plan.local.full else []
                    mvs.extend(ex.neighbourhood(i, sids, plan))
                    return mvs
                if len(tab) < len(objs):
                    tab = ex.projections[fs].fill()
                table[(tab[sids[o[0]]] << SID_BITS) | tab[sids[o[1]]]
                      if n == 3 else tuple([tab[sids[j]] for j in o])] = got
            if got:
                mvs.extend(got)
        return mvs

    def tally(self, into_coverage: bool) -> int:
        """The transitions the loop took (and, ``into_coverage``, each action's count added
        to the coverage): every finished Moves (all are interned in ``moves_of``) times
        its uses under each budget mask."""
        total = 0
        coverage = self.coverage
        for mv in self.ex.moves_of.values():
            for mask, used in enumerate(mv.uses):
                if used:
                    for a_idx, count in mv.counts(mask):
                        total += used * count
                        if into_coverage:
                            coverage[a_idx] += used * count
        return total

    def run_generic(self, init_key: int) -> None:
        """BFS through Spec.successors (a spec that overrides the generic methods)."""
        ex = self.ex
        parents = self.parents
        frontier = [init_key]
        expanded = 0
        while frontier:
            next_frontier: list[int] = []
            for key in frontier:
                sids, cw = ex.unpack(key)
                for a_idx, i, _p, nsid in ex.successors_generic(sids, cw):
                    self.transitions += 1
                    self.coverage[a_idx] += 1
                    bad_step = ex.checks.step_failures(sids[i], nsid, i, sids)
                    if bad_step:
                        self.violation_at = (self.chain_to(key), ("step", bad_step[0]))
                        break
                    post = [*sids[:i], nsid, *sids[i + 1:]]
                    nkey = ex.key(post, cw + counter_add(ex.kind_of[a_idx]))
                    if nkey not in parents:
                        parents[nkey] = key
                        next_frontier.append(nkey)
                        bad = ex.checks.state_failures(post)
                        if bad:
                            self.violation_at = (self.chain_to(nkey), ("invariant", bad[0]))
                            break
                if self.violation_at is not None:
                    break
                expanded += 1
                if self.max_states is not None and len(parents) >= self.max_states:
                    self.complete = False
                    break
                if self.progress is not None and (expanded & 1023) == 0:
                    self.report(len(next_frontier))
            self.level_done(len(next_frontier))
            if not self.complete or self.violation_at is not None:
                break
            frontier = next_frontier


def orbit_count(spec: Spec, states: Iterable[SystemState]) -> int:
    """How many symmetry classes a set of system states falls into (for tests)."""
    ex = Explorer(spec, Bounds(), True, False)
    return len({ex.canon(*[ex.interner.sid(s) for s in st]) for st in states})


__all__ = ["Search", "explore", "orbit_count"]
