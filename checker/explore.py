"""Exhaustive bounded exploration of the spec: every reachable state, every invariant.

``revivify explore`` (``explore_main``) and :func:`explore` enumerate every state of a
:class:`~revivify.spec.system.Spec` reachable from its initial state within bounds (terms,
log indexes, crashes, disk wipes), check every state invariant in every state and every step
property on every transition, and report what they saw: distinct states, transitions, depth,
time, and how often each action fired (an action that never fired is *dead*: either the
bounds are too small to reach it, or the spec has a guard that can never hold).

The explorer takes a ``Spec`` object, never the module-level table, so the same code checks
the real spec and each deliberately broken variant (``spec.mutants``). It runs the spec's own
enumerators, guards and effects; everything below only decides *when* to call them.

Theory of operation
-------------------
**Breadth-first search.** States are expanded level by level from a FIFO frontier. A state is
checked against the invariants when it is first discovered, and a transition against the step
properties when it is generated, so the first violation found lies at the smallest depth: the
counterexample is a shortest path from the initial state. Each discovered state records its
parent; the trace is rebuilt by walking the parents back to the initial state and then
*replaying* the path forward through the generic ``Spec.successors`` (picking, at each step, a
successor in the recorded state's symmetry class). The replay starts from the real initial
state, so the trace is a genuine run with consistent server numbers, and it re-confirms the
violation through ``Spec.violations`` / ``Spec.step_violations`` on the unoptimised path.

**Budgets.** The spec does not bound crashes and disk faults (a server may crash forever). The
explorer counts them: the explored state is (system state, crashes used, faults used), and
the ``crash`` action, and the disk faults (``FAULT_ACTIONS``: ``wipe`` and ``damage``, which
share the one "wipes" budget, ``--wipes``), are not fired once their budget is spent. Terms
and log indexes are bounded by the spec's own enumerators (``Bounds.max_term``,
``Bounds.max_index``).

**Symmetry reduction.** Servers are interchangeable: the spec names a server only by its
position ``i`` in the system tuple and by the integers stored in ``voted_for`` and in the
values of the ghost maps ``votes`` and ``member_votes`` (a candidate's index). For a
permutation p of the servers let p.S be the state whose server p(j) is server j of S with
every stored server index v replaced by p(v). Then (1) the initial state is fixed by every p
(all servers start alike); (2) S -> S' by action a on server i with parameters P iff
p.S -> p.S' by a on server p(i) with p(P): enumerators iterate over all servers uniformly,
guards compare server indices only for equality (with ``i`` or with each other), and the
majority count is a count over all servers; (3) every invariant and step property holds in S
iff it holds in p.S (they quantify over all servers, and ``VotesNameServers`` checks
0 <= v < n, a range every p preserves). By (1)-(3) the reachable states are closed under
permutation and a violation is reachable iff one is reachable from a representative of each
class, so exploring one representative per class (orbit) is sound and complete. The
representative is the minimum over all n! relabelings (exact, not a heuristic): with servers
interned as small integers (below) and the relabeling tables precomputed per server state, a
relabeling costs n table look-ups, and for three servers the six candidates are compared in
one generated expression. Symmetry must be switched off (``symmetry=False``,
``--no-symmetry``) for a spec variant that treats some server specially; the test suite
checks the reduction against the unreduced search on small bounds (same number of orbits,
same verdict).

**State compression.** Each distinct server state is interned once as a small integer (its
*sid*); a system state is the tuple of its servers' sids, packed with the two budget counters
into one Python int (24 bits per server, 8 per counter). The visited set maps that int to its
parent's int. Unlike TLC's 64-bit fingerprints (hash compaction, which loses a state with
probability about n^2 / 2^65 when two states' fingerprints collide), the packing is injective:
no state can be missed, and the table is still about 100 bytes per state.

**Caching the spec's answers.** The generic spec code (``attrs.evolve``, the
two-interpreter helpers of ``spec.logic``) costs tens of microseconds per call, so the
explorer asks each question once:

* *Per-server moves.* For a server state s at position i, the explorer calls every action's
  enumerator with a read-recording system tuple (:class:`_ReadProbe`). An enumerator (or a
  system guard) that read nothing but ``sys[i]`` (and ``len(sys)``) is a deterministic
  function of (i, s, bounds), so its answer, and the guard and effect applied to each of its
  parameters, are cached for (i, s) (the server's *plan*).
* *Neighbourhoods.* The other actions (their enumerator or system guard read other servers)
  run on a system whose servers are :class:`_FieldProbe` s that record which fields are read.
  Their answer is cached per action on (the projection of server i onto the fields read from
  it, the projection of every other server onto the fields read from the others), and per
  plan on (i, s, the other servers' projections onto the union of its actions' fields). This
  is read-set memoisation: a cached answer was computed from those fields only and the spec
  is deterministic, so any state that agrees on them gets the same answer; when an action
  reads a field it never read before, its field set grows and the per-plan caches are
  dropped. It is sound for any spec, mutants included; a call the probes cannot stand in for
  (hashing or comparing a whole server) switches the caching off.
* *Guards and effects* take one server state and the parameters, so their results are cached
  on (action, sid, parameters).
* *Step properties* are defined over one server's pre- and post-state: cached on the pair and
  decided when a plan or neighbourhood is built (a move that leaves the system unchanged,
  say a rejected StartTabletCopy, is then only counted: its successor is the state itself).
* *State invariants.* ``check_state`` evaluates each predicate for every term relevant to the
  system. The invariants the spec flags ``per_server`` ("every server satisfies f") are
  cached per (server state, relevant terms), evaluated on a system of n copies of that one
  server (so n is unchanged); all the others are cached on (relevant terms, the projection
  of each server onto the fields they were seen to read), by the same read-set memoisation.
  ``verify=True`` cross-checks every cached answer against the generic ``Spec`` methods (the
  tests run with it).

A spec whose ``Spec``/``Action`` classes override ``successors``, ``enabled``, ``apply``,
``violations`` or ``step_violations`` is explored through those generic methods (slower,
same results).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, NoReturn

import attrs

from revivify.spec import invariants as spec_invariants
from revivify.spec.actions import FAULT_ACTIONS, Action, Bounds, Params
from revivify.spec.logic import FMap
from revivify.spec.model import ServerState, SystemState
from revivify.spec.system import Spec, default_spec

CRASH_ACTION: Final = "crash"
WIPE_ACTION: Final = "wipe"
# The actions the wipe budget counts: disk faults (a wipe, and damage to the WAL or blocks).
FAULTS: Final = frozenset(FAULT_ACTIONS)

# Where a server state stores other servers' indices (the symmetry relabels these).
ID_FIELDS: Final = ("voted_for",)
ID_MAP_FIELDS: Final = ("votes", "member_votes")

SID_BITS: Final = 24
SID_MASK: Final = (1 << SID_BITS) - 1
COUNTER_BITS: Final = 8
COUNTER_MASK: Final = (1 << COUNTER_BITS) - 1
MAX_SERVERS: Final = 6  # 6! = 720 relabelings: beyond that use symmetry=False
MAX_BUDGET: Final = COUNTER_MASK

# ---------------------------------------------------------------------------------------
# Results.


@attrs.frozen
class TraceStep:
    """One step of a counterexample: the action that led here (None for the initial state),
    the server it ran on, its parameters, and the whole system state after it."""

    action: str | None
    server: int | None
    params: Params
    state: SystemState
    crashes: int = 0
    wipes: int = 0

    def headline(self) -> str:
        if self.action is None:
            return "initial state"
        args = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.action}(server {self.server}{', ' if args else ''}{args})"


@attrs.frozen
class Violation:
    """An invariant (or step property) that failed, with a shortest path to the failure."""

    invariant: str
    kind: str  # "invariant" (a state invariant) or "step" (a step property)
    trace: tuple[TraceStep, ...]
    doc: str = ""

    def describe(self) -> str:
        """The counterexample as a readable sequence of states."""
        what = "step property" if self.kind == "step" else "invariant"
        lines = [f"{what} {self.invariant} violated after {len(self.trace) - 1} steps:"]
        if self.doc:
            lines.append("  " + " ".join(self.doc.split()))
        for n, step in enumerate(self.trace):
            lines.append(f"  [{n}] {step.headline()}")
            for i, s in enumerate(step.state):
                mark = "*" if step.server == i else " "
                lines.append(f"      {mark}s{i}: {s.describe()}")
        return "\n".join(lines)


@attrs.frozen
class Progress:
    distinct_states: int
    transitions: int
    depth: int
    frontier: int
    seconds: float


@attrs.frozen
class ExploreResult:
    distinct_states: int
    transitions: int
    depth: int
    seconds: float
    coverage: dict[str, int]
    dead_actions: tuple[str, ...]
    violation: Violation | None
    complete: bool  # False when max_states stopped the search early
    server_states: int  # distinct single-server states interned
    symmetry: bool

    @property
    def states_per_second(self) -> float:
        return self.distinct_states / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "distinct_states": self.distinct_states,
            "transitions": self.transitions,
            "depth": self.depth,
            "seconds": round(self.seconds, 3),
            "states_per_second": round(self.states_per_second, 1),
            "complete": self.complete,
            "symmetry": self.symmetry,
            "server_states": self.server_states,
            "coverage": self.coverage,
            "dead_actions": list(self.dead_actions),
            "violation": None,
        }
        if self.violation is not None:
            out["violation"] = {
                "invariant": self.violation.invariant,
                "kind": self.violation.kind,
                "trace": [
                    {"action": s.action, "server": s.server, "params": s.params,
                     "state": [x.describe() for x in s.state]}
                    for s in self.violation.trace
                ],
            }
        return out


class ExplorerError(Exception):
    """The explorer's own consistency check failed (a cached answer disagreed with the
    generic spec, or a counterexample could not be replayed)."""


# ---------------------------------------------------------------------------------------
# The read-recording system tuple.


class _ReadProbe(tuple[ServerState, ...]):
    """A system tuple that records whether anything but ``self[own]`` (and ``len``) was read.

    Used to find out whether an enumerator or a system guard depends only on the acting
    server: if one call read nothing else, the same (server index, server state) gives the
    same answer, and it may be cached."""

    own: int
    touched: bool

    def __getitem__(self, k: Any) -> Any:
        if not (isinstance(k, int) and (k == self.own or k + len(self) == self.own)):
            self.touched = True
        return super().__getitem__(k)

    def __iter__(self) -> Iterator[ServerState]:
        self.touched = True
        return super().__iter__()

    def __contains__(self, x: object) -> bool:
        self.touched = True
        return super().__contains__(x)

    def __reversed__(self) -> Iterator[ServerState]:
        self.touched = True
        return reversed(tuple(super().__iter__()))

    def __eq__(self, other: object) -> bool:
        self.touched = True
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        self.touched = True
        return super().__ne__(other)

    def __hash__(self) -> int:
        self.touched = True
        return super().__hash__()

    def index(self, *args: Any) -> int:
        self.touched = True
        return super().index(*args)

    def count(self, x: Any) -> int:
        self.touched = True
        return super().count(x)


def _probe(system: SystemState, own: int) -> _ReadProbe:
    p = _ReadProbe(system)
    p.own = own
    p.touched = False
    return p


class _FieldProbe:
    """Another server's state, recording which fields are read from it (read-set
    memoisation of the enumerators that look at other servers)."""

    __slots__ = ("_reads", "_state")

    def __init__(self, state: ServerState, reads: set[str]) -> None:
        object.__setattr__(self, "_state", state)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name: str) -> Any:
        self._reads.add(name)
        return getattr(self._state, name)

    def __eq__(self, other: object) -> bool:
        raise _Undecided

    def __hash__(self) -> int:
        raise _Undecided


class _Undecided(Exception):
    """A guard tried to look at a parameter it was given as ``TOP``."""


class _Top:
    """An unknown parameter value (the top of a one-point abstract domain).

    Every operation on it yields ``TOP`` and every attempt to observe it (truth value,
    ``==`` coerced to bool, hashing, indexing, conversion to int) raises. So when a local guard
    called with every parameter ``TOP`` returns a falsy value without raising, its
    evaluation never depended on the parameters, and the guard is false for *every*
    parameter value: the (costly, system-wide) enumerator need not run for that server state.
    Spec code that branches on a parameter just raises, and nothing is skipped."""

    __slots__ = ()

    def __bool__(self) -> bool:
        raise _Undecided

    def __hash__(self) -> int:
        raise _Undecided

    def __index__(self) -> int:
        raise _Undecided

    def __int__(self) -> int:
        raise _Undecided

    def __iter__(self) -> Iterator[Any]:
        raise _Undecided

    def __getitem__(self, k: Any) -> Any:
        raise _Undecided

    def _op(self, *_: Any) -> _Top:
        return self

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _op  # type: ignore[assignment]
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _op
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __neg__ = _op
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __invert__ = _op


TOP: Final = _Top()


def never_enabled(action: Action, s: ServerState) -> bool:
    """True when the action's local guard is false for ``s`` whatever the parameters."""
    try:
        return not action.guard(s, **{name: TOP for name in action.params})
    except Exception:  # the guard looked at a parameter (or could not run on TOP)
        return False


# ---------------------------------------------------------------------------------------
# Server-state interning and symmetry.


def relabel(s: ServerState, perm: Sequence[int]) -> ServerState:
    """The server state with every stored server index v replaced by perm[v]."""
    n = len(perm)
    changes: dict[str, Any] = {}
    for f in ID_FIELDS:
        v = getattr(s, f)
        if isinstance(v, int) and 0 <= v < n and perm[v] != v:
            changes[f] = perm[v]
    for f in ID_MAP_FIELDS:
        m = getattr(s, f)
        if isinstance(m, FMap) and any(isinstance(v, int) and 0 <= v < n and perm[v] != v
                                       for _, v in m):
            items = tuple(sorted(
                (k, perm[v] if isinstance(v, int) and 0 <= v < n else v) for k, v in m))
            changes[f] = FMap(items, m.default)
    return attrs.evolve(s, **changes) if changes else s


def permute_system(system: SystemState, perm: Sequence[int]) -> SystemState:
    """p.S: server perm[j] of the result is server j of ``system``, relabeled."""
    out: list[ServerState | None] = [None] * len(system)
    for j, s in enumerate(system):
        out[perm[j]] = relabel(s, perm)
    return tuple(x for x in out if x is not None)


class _Interner:
    """Server states as small integers, with their relabelings and relevant terms."""

    def __init__(self, n: int, symmetry: bool) -> None:
        self.n = n
        self.perms: list[tuple[int, ...]] = (
            list(itertools.permutations(range(n))) if symmetry else [tuple(range(n))])
        self.sid_of: dict[ServerState, int] = {}
        self.objs: list[ServerState] = []
        self.relab: list[list[int]] = [[] for _ in self.perms]  # relab[p][sid]
        self.termset: list[frozenset[int]] = []
        self.termset_id: list[int] = []
        self.termset_ids: dict[frozenset[int], int] = {}

    def sid(self, s: ServerState) -> int:
        got = self.sid_of.get(s)
        if got is not None:
            return got
        orbit = {relabel(s, p) for p in self.perms}
        for m in orbit:
            self.sid_of[m] = len(self.objs)
            self.objs.append(m)
            terms = frozenset(spec_invariants.relevant_terms((m,))[:-1])
            self.termset.append(terms)
            self.termset_id.append(self.termset_ids.setdefault(terms, len(self.termset_ids)))
            for table in self.relab:
                table.append(-1)
        for m in orbit:
            k = self.sid_of[m]
            for pi, p in enumerate(self.perms):
                self.relab[pi][k] = self.sid_of[relabel(m, p)]
        if len(self.objs) > SID_MASK:
            raise ExplorerError(f"more than {SID_MASK} distinct server states")
        return self.sid_of[s]


def _make_canon(interner: _Interner) -> Callable[..., int]:
    """A generated function: the packed minimum over all relabelings of (sid_0..sid_n-1)."""
    n = interner.n
    shifts = [(n - 1 - pos) * SID_BITS for pos in range(n)]
    terms = []
    for pi, p in enumerate(interner.perms):
        parts = [f"(R{pi}[s{j}] << {shifts[p[j]]})" if shifts[p[j]] else f"R{pi}[s{j}]"
                 for j in range(n)]
        terms.append(" | ".join(parts))
    args = ", ".join(f"s{j}" for j in range(n))
    body = terms[0] if len(terms) == 1 else "min(" + ", ".join(terms) + ")"
    src = f"def canon({args}):\n    return {body}\n"
    env: dict[str, Any] = {f"R{pi}": t for pi, t in enumerate(interner.relab)}
    exec(src, env)  # generated straight-line code: n! candidates, n look-ups each
    fn: Callable[..., int] = env["canon"]
    return fn


# ---------------------------------------------------------------------------------------
# The explorer.


def _pack(values: Sequence[int]) -> int:
    """Small non-negative integers (each below 2**SID_BITS) packed into one int."""
    out = 0
    for v in values:
        out = (out << SID_BITS) | v
    return out


def _params_key(p: Params) -> tuple[tuple[str, Any], ...]:
    return tuple(p.items())


def _is_plain(spec: Spec) -> bool:
    """True when the spec runs the stock Spec/Action methods (so the cached path applies)."""
    cls = type(spec)
    if (cls.successors is not Spec.successors or cls.violations is not Spec.violations
            or cls.step_violations is not Spec.step_violations):
        return False
    return all(type(a).enabled is Action.enabled and type(a).apply is Action.apply
               for a in spec.actions)


@attrs.define
class _Moves:
    """Some moves of one server in one server state, as (action index, next sid) pairs split
    by the budget they spend, with their step-property verdicts decided up front."""

    free: list[tuple[int, int]]
    crash: list[tuple[int, int]]
    wipe: list[tuple[int, int]]
    # (budget kind 0 free / 1 crash / 2 wipe, the first step property it fails): a move
    # that breaks a step property (the explorer reports it when the budget allows the move)
    bad: list[tuple[int, str]]
    full: list[tuple[int, Params, int]]  # with parameters: for verify and counterexamples
    # Moves that leave the server (and so the system) unchanged without spending a budget:
    # their successor is the state being expanded, already seen; only counted.
    loops: list[int]
    # By budget (2 * crash allowed + wipe allowed): the non-empty lists of moves allowed,
    # each with what it adds to the packed (crashes, wipes) counters, and the first step
    # property an allowed move fails (or None).
    sel: tuple[tuple[tuple[list[int], int, list[tuple[int, int]]], ...], ...] = ()
    loop_cov: list[tuple[int, int]] = attrs.Factory(list)
    bad_at: tuple[str | None, ...] = (None, None, None, None)

    def finish(self) -> _Moves:
        def group(moves: list[tuple[int, int]], add: int) -> tuple[Any, ...]:
            # (distinct next sids, counter increment, transitions per action)
            if not moves:
                return ()
            targets = list(dict.fromkeys(nsid for _a, nsid in moves))
            per_action: dict[int, int] = {}
            for a_idx, _n in moves:
                per_action[a_idx] = per_action.get(a_idx, 0) + 1
            return ((targets, add, list(per_action.items())),)

        free = group(self.free, 0)
        crash = group(self.crash, 1 << COUNTER_BITS)
        wipe = group(self.wipe, 1)
        self.sel = (free, free + wipe, free + crash, free + crash + wipe)
        self.loop_cov = [(a, self.loops.count(a)) for a in dict.fromkeys(self.loops)]
        allowed = ({0}, {0, 2}, {0, 1}, {0, 1, 2})
        self.bad_at = tuple(next((prop for kind, prop in self.bad if kind in ok), None)
                            for ok in allowed)
        return self


_NO_MOVES: Final = _Moves([], [], [], [], [], []).finish()


@attrs.define
class _Plan:
    """What server i in server state sid can do, as far as it depends on that server only."""

    local: _Moves  # always enabled (within budgets), whatever the other servers are
    guarded: list[tuple[int, Params, int]]  # local part enabled; the system guard reads others
    nonlocal_actions: list[int]  # enumerator reads other servers: enumerate in each state
    neigh_actions: list[int]  # the actions of guarded and nonlocal_actions, in order
    others: tuple[int, ...]  # the other servers' positions
    # The neighbourhood cache (valid while gen is the explorer's read-set generation): the
    # other servers' projections (table tab) onto the fields these actions read -> moves.
    gen: int = -1
    proj: _Projections | None = None
    tab: list[int] = attrs.Factory(list)  # proj.tab
    nb: dict[Any, _Moves] = attrs.Factory(dict)


class _Projections:
    """Server states projected onto a set of fields, interned as small integers."""

    def __init__(self, fields: tuple[str, ...], objs: list[ServerState]) -> None:
        self.fields = fields
        self.objs = objs
        self.tab: list[int] = []  # sid -> projection id, for every sid interned so far
        self.intern: dict[tuple[Any, ...], int] = {}

    def fill(self) -> list[int]:
        tab, fields, intern = self.tab, self.fields, self.intern
        for s in self.objs[len(tab):]:
            tab.append(intern.setdefault(tuple([getattr(s, f) for f in fields]), len(intern)))
        return tab

    def pid(self, sid: int) -> int:
        tab = self.tab
        if sid >= len(tab):
            tab = self.fill()
        return tab[sid]


class _Explorer:
    def __init__(self, spec: Spec, bounds: Bounds, symmetry: bool, verify: bool) -> None:
        if spec.n_servers < 1:
            raise ValueError("a spec needs at least one server")
        if symmetry and spec.n_servers > MAX_SERVERS:
            raise ValueError(f"symmetry reduction supports at most {MAX_SERVERS} servers")
        if bounds.max_crashes > MAX_BUDGET or bounds.max_wipes > MAX_BUDGET:
            raise ValueError(f"crash and wipe budgets must be at most {MAX_BUDGET}")
        self.spec = spec
        self.bounds = bounds
        self.n = spec.n_servers
        self.verify = verify
        self.plain = _is_plain(spec)
        self.actions = spec.actions
        names = [a.name for a in self.actions]
        self.crash_idx = names.index(CRASH_ACTION) if CRASH_ACTION in names else -1
        self.wipe_idx = names.index(WIPE_ACTION) if WIPE_ACTION in names else -1
        self.fault_idx = frozenset(k for k, name in enumerate(names) if name in FAULTS)
        self.interner = _Interner(self.n, symmetry)
        self.canon = _make_canon(self.interner)
        self.plans: dict[tuple[int, int], _Plan] = {}
        self.moves: dict[tuple[int, int, tuple[tuple[str, Any], ...]], int] = {}  # -1: off
        self.step_cache: dict[tuple[int, int], tuple[str, ...]] = {}
        # neighbourhoods: read sets per action, projections per set of fields
        # per action: parameters (non-local enumerators) or moves (system guards)
        self.act_cache: dict[tuple[int, ...], tuple[list[Any], dict[int, Any]]] = {}
        self.act_fs: list[int] = [-1 for _ in self.actions]  # ids of act_fields, act_own
        self.act_fo: list[int] = [-1 for _ in self.actions]
        self.moves_cache: dict[tuple[int, ...], _Moves] = {}
        self.neigh_off = False
        self.gen = 0
        self.act_fields: list[frozenset[str]] = [frozenset() for _ in self.actions]
        self.act_own: list[frozenset[str]] = [frozenset() for _ in self.actions]
        self.fieldsets: dict[frozenset[str], int] = {}
        self.projections: list[_Projections] = []
        self.terms_cache: dict[frozenset[int], int] = {}
        self.terms_list: list[list[int]] = []
        self.terms_by_sids: dict[int, int] = {}  # packed termset ids -> tid
        # invariants: per-server ones (the spec's own flag) cached per (server state, terms);
        # the others cached on the projection of each server onto the fields they read
        invs = spec.invariants
        self.inv_names = [inv.name for inv in invs]
        self.per_server = [k for k, inv in enumerate(invs) if self.plain and inv.per_server]
        self.cross = [k for k, inv in enumerate(invs) if self.plain and not inv.per_server]
        self.server_inv_cache: dict[int, tuple[int, ...]] = {}  # (tid, sid) packed
        self.cross_off = False
        self.cross_fields: frozenset[str] = frozenset()
        self.cross_proj = _Projections((), self.interner.objs)
        self.cross_cache: dict[int, tuple[int, ...]] = {}  # (tid, pids) packed
        self.cross_term_cache: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.server_term_cache: dict[tuple[int, int], tuple[int, ...]] = {}

    # -- keys --------------------------------------------------------------------------

    def key(self, sids: Sequence[int], crashes: int, wipes: int) -> int:
        return (self.canon(*sids) << (2 * COUNTER_BITS)) | (crashes << COUNTER_BITS) | wipes

    def unpack(self, key: int) -> tuple[list[int], int, int]:
        wipes = key & COUNTER_MASK
        crashes = (key >> COUNTER_BITS) & COUNTER_MASK
        packed = key >> (2 * COUNTER_BITS)
        sids = [(packed >> ((self.n - 1 - pos) * SID_BITS)) & SID_MASK
                for pos in range(self.n)]
        return sids, crashes, wipes

    def system(self, sids: Sequence[int]) -> SystemState:
        objs = self.interner.objs
        return tuple([objs[s] for s in sids])

    # -- transitions -------------------------------------------------------------------

    def local_move(self, a_idx: int, sid: int, p: Params) -> int:
        """The next sid if the action's local guard holds for server state sid, else -1."""
        mk = (a_idx, sid, _params_key(p))
        got = self.moves.get(mk)
        if got is None:
            action = self.actions[a_idx]
            s = self.interner.objs[sid]
            got = self.interner.sid(action.effect(s, **p)) if action.guard(s, **p) else -1
            self.moves[mk] = got
        return got

    def pair_failures(self, pre_sid: int, post_sid: int) -> tuple[str, ...]:
        """The step properties a step of one server from pre_sid to post_sid fails (plain
        specs: ``Spec.step_violations`` looks at that server only)."""
        got = self.step_cache.get((pre_sid, post_sid))
        if got is None:
            objs = self.interner.objs
            got = self.step_cache[(pre_sid, post_sid)] = tuple(spec_invariants.check_step(
                self.spec.step_properties, objs[pre_sid], objs[post_sid]))
        return got

    def make_moves(self, sid: int, full: list[tuple[int, Params, int]]) -> _Moves:
        if not full:
            return _NO_MOVES
        mv = _Moves([], [], [], [], full, [])
        for a_idx, _p, nsid in full:
            kind = 1 if a_idx == self.crash_idx else 2 if a_idx in self.fault_idx else 0
            if kind == 0 and nsid == sid:
                mv.loops.append(a_idx)
            else:
                (mv.free, mv.crash, mv.wipe)[kind].append((a_idx, nsid))
            bad = self.pair_failures(sid, nsid)
            if bad:
                mv.bad.append((kind, bad[0]))
        return mv.finish()

    def plan(self, i: int, sids: Sequence[int]) -> _Plan:
        sid = sids[i]
        system = self.system(sids)
        local: list[tuple[int, Params, int]] = []
        guarded: list[tuple[int, Params, int]] = []
        nonlocal_actions: list[int] = []
        for a_idx, action in enumerate(self.actions):
            if never_enabled(action, self.interner.objs[sid]):
                continue
            probe = _probe(system, i)
            params = list(action.enum(probe, i, self.bounds))
            if probe.touched:
                nonlocal_actions.append(a_idx)
                continue
            for p in params:
                nsid = self.local_move(a_idx, sid, p)
                if nsid < 0:
                    continue
                if action.system_guard is not None:
                    probe = _probe(system, i)
                    ok = action.system_guard(probe, i, **p)
                    if probe.touched:
                        guarded.append((a_idx, p, nsid))
                        continue
                    if not ok:
                        continue
                local.append((a_idx, p, nsid))
        neigh_actions = list(dict.fromkeys([a for a, _p, _n in guarded] + nonlocal_actions))
        plan = _Plan(self.make_moves(sid, local), guarded, nonlocal_actions, neigh_actions,
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

    def action_moves(self, a_idx: int, i: int, sid: int, plan: _Plan,
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

    def nonlocal_moves(self, i: int, sid: int, plan: _Plan,
                       system: SystemState) -> list[tuple[int, Params, int]]:
        """The moves of server i that depend on other servers (all budgets ignored)."""
        return [m for a_idx in plan.neigh_actions
                for m in self.action_moves(a_idx, i, sid, plan, system)]

    def fieldset(self, fields: frozenset[str]) -> int:
        """The id of a set of fields (its projections are interned under that id)."""
        fs = self.fieldsets.get(fields)
        if fs is None:
            fs = self.fieldsets[fields] = len(self.projections)
            self.projections.append(_Projections(tuple(sorted(fields)), self.interner.objs))
        return fs

    def plan_key(self, plan: _Plan, sids: Sequence[int]) -> Any:
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
        return (a_idx, fs, fo, i, me, *[tab[s] for j, s in enumerate(sids) if j != i])

    def neighbourhood(self, i: int, sids: Sequence[int], plan: _Plan) -> _Moves:
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
                me = _FieldProbe(system[i], reads_own) if own else system[i]
                probed: Any = tuple([me if j == i else _FieldProbe(s, reads)
                                     for j, s in enumerate(system)])
                try:
                    answer: list[Any]
                    if own:
                        answer = self.action_params(a_idx, i, probed)
                        values = [v for p in answer for v in p.values()]
                    else:
                        answer = self.action_moves(a_idx, i, sid, plan, probed)
                        values = [v for _, p, _n in answer for v in p.values()]
                    if any(type(v) is not int and type(v) is not bool for v in values):
                        raise _Undecided
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

    def budget_ok(self, a_idx: int, can_crash: bool, can_wipe: bool) -> bool:
        if a_idx == self.crash_idx:
            return can_crash
        if a_idx in self.fault_idx:
            return can_wipe
        return True

    def successors_fast(
        self, sids: list[int], crashes: int, wipes: int,
    ) -> list[tuple[int, int, Params, int]]:
        """(action index, server, params, next sid) for every enabled transition, from the
        caches (for verify: the explorer's loop reads the caches directly)."""
        can_crash = crashes < self.bounds.max_crashes
        can_wipe = wipes < self.bounds.max_wipes
        out: list[tuple[int, int, Params, int]] = []
        for i, sid in enumerate(sids):
            plan = self.plans.get((i, sid)) or self.plan(i, sids)
            groups = [plan.local]
            if plan.neigh_actions:
                groups.append(self.neighbourhood(i, sids, plan))
            out.extend((a_idx, i, p, nsid) for mv in groups for a_idx, p, nsid in mv.full
                       if self.budget_ok(a_idx, can_crash, can_wipe))
        return out

    def successors_generic(
        self, sids: list[int], crashes: int, wipes: int,
    ) -> list[tuple[int, int, Params, int]]:
        system = self.system(sids)
        index = {id(a): k for k, a in enumerate(self.actions)}
        can_crash = crashes < self.bounds.max_crashes
        can_wipe = wipes < self.bounds.max_wipes
        return [(index[id(action)], i, p, self.interner.sid(nxt[i]))
                for action, i, p, nxt in self.spec.successors(system, self.bounds)
                if self.budget_ok(index[id(action)], can_crash, can_wipe)]

    # -- properties --------------------------------------------------------------------

    def step_failures(self, pre_sid: int, post_sid: int, i: int,
                      sids: list[int]) -> tuple[str, ...]:
        if self.plain:
            return self.pair_failures(pre_sid, post_sid)
        objs = self.interner.objs
        pre = self.system(sids)
        post = (*pre[:i], objs[post_sid], *pre[i + 1:])
        return tuple(self.spec.step_violations(pre, post, i))

    def terms_id(self, sids: Sequence[int]) -> int:
        """The id of ``relevant_terms(system)``, built from each server's own terms."""
        tsid = self.interner.termset_id
        ck = _pack([tsid[s] for s in sids])
        tid = self.terms_by_sids.get(ck)
        if tid is None:
            ts = self.interner.termset
            union = frozenset().union(*(ts[s] for s in sids))
            tid = self.terms_cache.get(union)
            if tid is None:
                tid = self.terms_cache[union] = len(self.terms_list)
                self.terms_list.append([*sorted(union), max(union) + 1])
            self.terms_by_sids[ck] = tid
        return tid

    def state_failures(self, sids: Sequence[int]) -> list[str]:
        """Names of the invariants the system state violates, in the spec's order."""
        if not self.plain:
            return list(self.spec.violations(self.system(sids)))
        tid = self.terms_id(sids)
        failed: list[int] = []
        cache = self.server_inv_cache
        for sid in sids:
            got = cache.get((tid << SID_BITS) | sid)
            if got is None:
                got = cache[(tid << SID_BITS) | sid] = self.server_failures(sid, tid)
            if got:
                failed.extend(got)
        if self.cross:
            failed.extend(self.cross_failures(sids, tid))
        if not failed:
            return []
        return [self.inv_names[k] for k in sorted(set(failed))]

    def state_ok(self, sids: Sequence[int]) -> bool:
        """True when the system state holds every invariant (the explorer's fast path: the
        caches of state_failures, looked up without building the answer)."""
        tsid = self.interner.termset_id
        cache = self.server_inv_cache
        if self.n == 3:
            a, b, c = sids
            tid = self.terms_by_sids.get((tsid[a] << 48) | (tsid[b] << 24) | tsid[c])
            if tid is None:
                return not self.state_failures(sids)
            t = tid << SID_BITS
            if cache.get(t | a) != () or cache.get(t | b) != () or cache.get(t | c) != ():
                return not self.state_failures(sids)
            if self.cross:
                tab = self.cross_proj.tab
                if (self.cross_off or len(tab) < len(self.interner.objs)
                        or self.cross_cache.get((tid << 72) | (tab[a] << 48) | (tab[b] << 24)
                                                | tab[c]) != ()):
                    return not self.state_failures(sids)
            return True
        tid = self.terms_by_sids.get(_pack([tsid[s] for s in sids]))
        if tid is None:
            return not self.state_failures(sids)
        for s in sids:
            if cache.get((tid << SID_BITS) | s) != ():
                return not self.state_failures(sids)
        if self.cross:
            tab = self.cross_proj.tab
            if (self.cross_off or len(tab) < len(self.interner.objs)
                    or self.cross_cache.get(_pack([tid, *[tab[s] for s in sids]])) != ()):
                return not self.state_failures(sids)
        return True

    def server_failures(self, sid: int, tid: int) -> tuple[int, ...]:
        """The per-server invariants server state sid fails, on n copies of itself, for the
        terms of tid (each term's verdict cached on (sid, term))."""
        cache = self.server_term_cache
        failed: set[int] = set()
        for t in self.terms_list[tid]:
            got = cache.get((sid, t))
            if got is None:
                copies = (self.interner.objs[sid],) * self.n
                invs = self.spec.invariants
                got = cache[(sid, t)] = tuple(k for k in self.per_server
                                              if not invs[k].pred(copies, t))
            failed.update(got)
        return tuple(sorted(failed))

    def cross_failures(self, sids: Sequence[int], tid: int) -> tuple[int, ...]:
        """The other invariants, cached on (terms, each server's projection onto the fields
        they were seen to read), and below that per term: read-set memoisation, as for
        neighbourhoods."""
        invs = self.spec.invariants
        terms = self.terms_list[tid]
        if self.cross_off:
            system = self.system(sids)
            return tuple(k for k in self.cross if not all(invs[k].pred(system, t)
                                                          for t in terms))
        pid = self.cross_proj.pid
        pids = [pid(s) for s in sids]
        ck = _pack([tid, *pids])
        got = self.cross_cache.get(ck)
        if got is not None:
            return got
        failed: set[int] = set()
        for t in terms:
            tk = (t, *pids)
            got_t = self.cross_term_cache.get(tk)
            if got_t is None:
                reads: set[str] = set()
                probed: Any = tuple([_FieldProbe(s, reads) for s in self.system(sids)])
                try:
                    got_t = tuple(k for k in self.cross if not bool(invs[k].pred(probed, t)))
                except Exception:
                    self.cross_off = True
                    self.cross_cache.clear()
                    self.cross_term_cache.clear()
                    return self.cross_failures(sids, tid)
                if not reads <= self.cross_fields:
                    # a field never read before: key everything on the larger projection
                    self.cross_fields = self.cross_fields | reads
                    self.cross_proj = _Projections(tuple(sorted(self.cross_fields)),
                                                   self.interner.objs)
                    self.cross_cache.clear()
                    self.cross_term_cache.clear()
                    return self.cross_failures(sids, tid)
                self.cross_term_cache[tk] = got_t
            failed.update(got_t)
        got = self.cross_cache[ck] = tuple(sorted(failed))
        return got

    # -- verification (tests) ----------------------------------------------------------

    def check_against_generic(self, sids: list[int], crashes: int, wipes: int,
                              fast: list[tuple[int, int, Params, int]]) -> None:
        system = self.system(sids)
        want = sorted(self.state_failures(sids))
        got = sorted(self.spec.violations(system))
        if want != got:
            raise ExplorerError(f"cached invariants {want} != spec {got} in {system!r}")
        generic = sorted((a, i, _params_key(p), n)
                         for a, i, p, n in self.successors_generic(sids, crashes, wipes))
        mine = sorted((a, i, _params_key(p), n) for a, i, p, n in fast)
        if generic != mine:
            raise ExplorerError(f"cached successors differ from the spec's in {system!r}")
        for a_idx, i, _p, nsid in fast:
            post = (*system[:i], self.interner.objs[nsid], *system[i + 1:])
            cached = sorted(self.step_failures(sids[i], nsid, i, sids))
            spec_says = sorted(self.spec.step_violations(system, post, i))
            if cached != spec_says:
                raise ExplorerError(
                    f"cached step properties {cached} != spec {spec_says} "
                    f"for {self.actions[a_idx].name}")

    # -- counterexamples ---------------------------------------------------------------

    def replay(self, chain: list[int], final: tuple[str, str] | None) -> tuple[TraceStep, ...]:
        """A real run through the recorded states' symmetry classes, via Spec.successors.

        ``final`` = ("step", property) asks for one more transition that violates it."""
        system = self.spec.initial()
        crashes = wipes = 0
        steps = [TraceStep(None, None, {}, system)]
        for target in chain[1:]:
            nxt = self._find(system, crashes, wipes, self._reaches(target))
            if nxt is None:
                raise ExplorerError("could not replay the counterexample")
            system, crashes, wipes, step = nxt
            steps.append(step)
        if final is not None and final[0] == "step":
            prop = final[1]
            nxt = self._find(system, crashes, wipes, lambda a, i, n, c, w: prop in
                             self.spec.step_violations(system, n, i))
            if nxt is None:
                raise ExplorerError(f"could not replay the {prop} violation")
            steps.append(nxt[3])
        elif final is not None and final[1] not in self.spec.violations(system):
            raise ExplorerError(f"the replayed state does not violate {final[1]}")
        return tuple(steps)

    def _reaches(self, target: int) -> Callable[[Action, int, SystemState, int, int], bool]:
        def want(a: Action, i: int, n: SystemState, c: int, w: int) -> bool:
            return self._key_of(n, c, w) == target
        return want

    def _key_of(self, system: SystemState, crashes: int, wipes: int) -> int:
        return self.key([self.interner.sid(s) for s in system], crashes, wipes)

    def _find(
        self, system: SystemState, crashes: int, wipes: int,
        want: Callable[[Action, int, SystemState, int, int], bool],
    ) -> tuple[SystemState, int, int, TraceStep] | None:
        for action, i, p, nxt in self.spec.successors(system, self.bounds):
            c = crashes + (action.name == CRASH_ACTION)
            w = wipes + (action.name in FAULTS)
            if c > self.bounds.max_crashes or w > self.bounds.max_wipes:
                continue
            if want(action, i, nxt, c, w):
                return nxt, c, w, TraceStep(action.name, i, dict(p), nxt, c, w)
        return None


def explore(
    spec: Spec,
    bounds: Bounds,
    *,
    max_states: int | None = None,
    progress: Callable[[Progress], None] | None = None,
    progress_seconds: float = 5.0,
    symmetry: bool = True,
    verify: bool = False,
) -> ExploreResult:
    """Breadth-first search of every state of ``spec`` reachable within ``bounds``.

    Stops at the first violation (shortest counterexample) or after ``max_states`` distinct
    states. ``progress`` is called about every ``progress_seconds``. ``verify`` checks every
    cached answer against the generic ``Spec`` methods (slow; for tests)."""
    t0 = time.perf_counter()
    ex = _Explorer(spec, bounds, symmetry, verify)
    actions = spec.actions
    coverage = [0] * len(actions)
    docs = {inv.name: inv.doc for inv in spec.invariants}
    docs.update({p.name: p.doc for p in spec.step_properties})

    init_sids = [ex.interner.sid(s) for s in spec.initial()]
    init_key = ex.key(init_sids, 0, 0)
    parents: dict[int, int] = {init_key: -1}
    search = _Search(ex, parents, coverage, max_states, progress, progress_seconds, t0)
    bad = ex.state_failures(ex.unpack(init_key)[0])
    if bad:
        search.violation_at = ([init_key], ("invariant", bad[0]))
    else:
        (search.run_plain if ex.plain else search.run_generic)(init_key)

    violation: Violation | None = None
    if search.violation_at is not None:
        chain, final = search.violation_at
        violation = Violation(final[1], final[0], ex.replay(chain, final),
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
    )


class _Search:
    """The breadth-first loop (two versions: over the caches, and over Spec.successors)."""

    def __init__(self, ex: _Explorer, parents: dict[int, int], coverage: list[int],
                 max_states: int | None, progress: Callable[[Progress], None] | None,
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
        self.complete = True
        self.violation_at: tuple[list[int], tuple[str, str]] | None = None

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
            self.progress(Progress(len(self.parents), self.transitions, self.depth + 1,
                                   frontier, now - self.t0))

    def run_plain(self, init_key: int) -> None:
        """BFS over the caches: per-server plans and neighbourhoods give (action, next sid)
        pairs with their step verdicts decided; only new states are checked."""
        ex = self.ex
        parents = self.parents
        coverage = self.coverage
        max_states = self.max_states
        progress = self.progress
        verify = ex.verify
        n = ex.n
        plans = ex.plans
        plan_of = ex.plan
        neighbourhood = ex.neighbourhood
        state_ok = ex.state_ok
        objs = ex.interner.objs
        canon = ex.canon
        shift_c = 2 * COUNTER_BITS
        cw_mask = (1 << shift_c) - 1
        max_c, max_w = ex.bounds.max_crashes, ex.bounds.max_wipes
        shifts = [(n - 1 - pos) * SID_BITS for pos in range(n)]
        servers = range(n)
        transitions = 0
        frontier = [init_key]
        expanded = 0
        while frontier:
            next_frontier: list[int] = []
            append = next_frontier.append
            for key in frontier:
                cw = key & cw_mask
                packed = key >> shift_c
                sids = [(packed >> sh) & SID_MASK for sh in shifts]
                if verify:
                    ex.check_against_generic(sids, cw >> COUNTER_BITS, cw & COUNTER_MASK,
                                             ex.successors_fast(sids, cw >> COUNTER_BITS,
                                                                cw & COUNTER_MASK))
                budget = 2 * ((cw >> COUNTER_BITS) < max_c) + ((cw & COUNTER_MASK) < max_w)
                for i in servers:
                    sid = sids[i]
                    plan = plans.get((i, sid))
                    if plan is None:
                        plan = plan_of(i, sids)
                    mv: _Moves | None = plan.local
                    nb = None
                    if plan.neigh_actions:
                        if plan.gen == ex.gen:  # the cache lookup of ex.neighbourhood, inline
                            tab = plan.tab
                            o = plan.others
                            if len(tab) == len(objs):
                                nb = plan.nb.get((tab[sids[o[0]]] << SID_BITS) | tab[sids[o[1]]]
                                                 if n == 3 else tuple([tab[sids[j]] for j in o]))
                        if nb is None:
                            nb = neighbourhood(i, sids, plan)
                    while mv is not None:
                        if mv.bad:
                            prop = mv.bad_at[budget]
                            if prop is not None:
                                self.violation_at = (self.chain_to(key), ("step", prop))
                                break
                        for a_idx, count in mv.loop_cov:
                            coverage[a_idx] += count
                            transitions += count
                        for targets, add, per_action in mv.sel[budget]:
                            ncw = cw + add
                            for a_idx, count in per_action:
                                coverage[a_idx] += count
                                transitions += count
                            for nsid in targets:
                                sids[i] = nsid
                                nkey = (canon(*sids) << shift_c) | ncw
                                if nkey not in parents:
                                    parents[nkey] = key
                                    append(nkey)
                                    if not state_ok(sids):
                                        bad = ex.state_failures(sids)
                                        sids[i] = sid
                                        self.violation_at = (self.chain_to(nkey),
                                                             ("invariant", bad[0]))
                                        break
                            sids[i] = sid
                            if self.violation_at is not None:
                                break
                        if self.violation_at is not None:
                            break
                        mv, nb = nb, None
                    if self.violation_at is not None:
                        break
                if self.violation_at is not None:
                    break
                expanded += 1
                if max_states is not None and len(parents) >= max_states:
                    self.complete = False
                    break
                if progress is not None and (expanded & 1023) == 0:
                    self.transitions = transitions
                    self.report(len(next_frontier))
            self.transitions = transitions
            if next_frontier:
                self.depth += 1  # the deepest level holding a discovered state
            if not self.complete or self.violation_at is not None:
                break
            frontier = next_frontier

    def run_generic(self, init_key: int) -> None:
        """BFS through Spec.successors (a spec that overrides the generic methods)."""
        ex = self.ex
        parents = self.parents
        frontier = [init_key]
        expanded = 0
        while frontier:
            next_frontier: list[int] = []
            for key in frontier:
                sids, crashes, wipes = ex.unpack(key)
                for a_idx, i, _p, nsid in ex.successors_generic(sids, crashes, wipes):
                    self.transitions += 1
                    self.coverage[a_idx] += 1
                    bad_step = ex.step_failures(sids[i], nsid, i, sids)
                    if bad_step:
                        self.violation_at = (self.chain_to(key), ("step", bad_step[0]))
                        break
                    c = crashes + (a_idx == ex.crash_idx)
                    w = wipes + (a_idx in ex.fault_idx)
                    post = [*sids[:i], nsid, *sids[i + 1:]]
                    nkey = ex.key(post, c, w)
                    if nkey not in parents:
                        parents[nkey] = key
                        next_frontier.append(nkey)
                        bad = ex.state_failures(post)
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
            if next_frontier:
                self.depth += 1
            if not self.complete or self.violation_at is not None:
                break
            frontier = next_frontier


def orbit_count(spec: Spec, states: Iterable[SystemState]) -> int:
    """How many symmetry classes a set of system states falls into (for tests)."""
    ex = _Explorer(spec, Bounds(), True, False)
    return len({ex.canon(*[ex.interner.sid(s) for s in st]) for st in states})


# ---------------------------------------------------------------------------------------
# The command line.

# The largest bounds that finish in about a minute and a half on one core (6.6 million
# states; 4.8 million before step_down): two terms (a stale leader, a leader that stepped
# down, a tombstone voting in a later term) with a crash, traded for log entries (max index
# 0: log_append, commit and config_commit never fire) and disk faults (no wipe, no damage).
# The complementary run ``--max-term 1 --max-index 1 --crashes 1 --wipes 1`` (9.9 million
# states, about two minutes: committed config indexes and damage multiply it) fires every
# action. Measured figures are in README.md.
DEFAULT_SERVERS: Final = 3
DEFAULT_BOUNDS: Final = Bounds(max_term=2, max_index=0, max_crashes=1, max_wipes=0)

USAGE: Final = """usage: revivify explore [--servers N] [--max-term T] [--max-index I] [--crashes C]
                        [--wipes W] [--max-states M] [--no-symmetry] [--json] [--quiet]"""


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgError(message)


def _parser() -> _Parser:
    d = DEFAULT_BOUNDS
    p = _Parser(
        prog="revivify explore", usage=USAGE.removeprefix("usage: "),
        description="Enumerate every reachable state of the spec within bounds, check every "
                    "invariant in every state and every step property on every transition.",
        epilog="Exit status: 0 no violation, 1 a violation (the shortest counterexample is "
               "printed), 2 bad arguments.")
    p.add_argument("--servers", type=int, default=DEFAULT_SERVERS,
                   help=f"servers hosting the tablet (default {DEFAULT_SERVERS})")
    p.add_argument("--max-term", type=int, default=d.max_term,
                   help=f"highest Raft term an election may reach (default {d.max_term})")
    p.add_argument("--max-index", type=int, default=d.max_index,
                   help=f"highest log index a leader may append (default {d.max_index})")
    p.add_argument("--crashes", type=int, default=d.max_crashes,
                   help=f"crashes allowed per run, over all servers (default {d.max_crashes})")
    p.add_argument("--wipes", type=int, default=d.max_wipes,
                   help=f"disk faults (wipes and damage) allowed per run "
                        f"(default {d.max_wipes})")
    p.add_argument("--max-states", type=int, default=None,
                   help="stop after this many distinct states (the result is then partial)")
    p.add_argument("--no-symmetry", action="store_true",
                   help="explore every state, not one per permutation of the servers")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v:>12}" for k, v in rows)


def format_result(result: ExploreResult, spec: Spec, bounds: Bounds) -> str:
    lines = [
        f"revivify explore: {spec.n_servers} servers, max term {bounds.max_term}, "
        f"max index {bounds.max_index}, crashes {bounds.max_crashes}, "
        f"wipes {bounds.max_wipes}, symmetry {'on' if result.symmetry else 'off'}",
        _table([
            ("distinct states", f"{result.distinct_states:,}"),
            ("transitions", f"{result.transitions:,}"),
            ("depth", str(result.depth)),
            ("seconds", f"{result.seconds:.2f}"),
            ("states/s", f"{result.states_per_second:,.0f}"),
            ("server states", f"{result.server_states:,}"),
        ]),
        "coverage (transitions per action):",
    ]
    width = max(len(a) for a in result.coverage)
    for name, count in result.coverage.items():
        flag = "  DEAD (never enabled)" if count == 0 else ""
        lines.append(f"  {name:<{width}}  {count:>12,}{flag}")
    if result.dead_actions:
        lines.append(f"dead actions: {', '.join(result.dead_actions)}")
    if result.violation is not None:
        lines.append("VIOLATION: " + result.violation.describe())
    else:
        done = "all reachable states" if result.complete else "a partial search (--max-states)"
        lines.append(f"no violation: {len(spec.invariants)} invariants and "
                     f"{len(spec.step_properties)} step properties hold in {done}")
    return "\n".join(lines)


def explore_main(argv: list[str], spec: Spec | None = None) -> int:
    """``revivify explore``: exit 0 clean, 1 on a violation, 2 on bad arguments."""
    try:
        args = _parser().parse_args(argv)
        for name in ("servers", "max_term", "max_index", "crashes", "wipes"):
            if getattr(args, name) < 0:
                raise _ArgError(f"--{name.replace('_', '-')} must be >= 0")
        if args.servers < 1:
            raise _ArgError("--servers must be >= 1")
        if not args.no_symmetry and args.servers > MAX_SERVERS:
            raise _ArgError(f"--servers above {MAX_SERVERS} needs --no-symmetry")
        if args.crashes > MAX_BUDGET or args.wipes > MAX_BUDGET:
            raise _ArgError(f"--crashes and --wipes must be at most {MAX_BUDGET}")
        if args.max_states is not None and args.max_states < 1:
            raise _ArgError("--max-states must be >= 1")
    except _ArgError as e:
        print(f"revivify explore: error: {e}", file=sys.stderr)
        return 2
    if spec is None:
        spec = default_spec(args.servers)
    else:
        spec = attrs.evolve(spec, n_servers=args.servers)
    bounds = Bounds(max_term=args.max_term, max_index=args.max_index,
                    max_crashes=args.crashes, max_wipes=args.wipes)

    def report(p: Progress) -> None:
        print(f"explore: {p.distinct_states:,} states, {p.transitions:,} transitions, "
              f"depth {p.depth}, frontier {p.frontier:,}, {p.seconds:.0f}s "
              f"({p.distinct_states / max(p.seconds, 1e-9):,.0f} states/s)",
              file=sys.stderr, flush=True)

    result = explore(spec, bounds, max_states=args.max_states,
                     progress=None if args.quiet or args.json else report,
                     symmetry=not args.no_symmetry)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_result(result, spec, bounds))
    return 1 if result.violation is not None else 0


__all__ = [
    "DEFAULT_BOUNDS", "DEFAULT_SERVERS", "ExploreResult", "ExplorerError", "Progress",
    "TraceStep", "Violation", "explore", "explore_main", "format_result", "orbit_count",
    "permute_system", "relabel",
]
