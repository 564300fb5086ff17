"""The explorer's cached answers about one server: its moves (split by the budget they
spend), its plan (what it can do whatever the others are), and interned projections of
server states onto the fields an action was seen to read."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final

import attrs

from revivify.spec.actions import Action, Params
from revivify.spec.model import ServerState
from revivify.spec.system import Spec

COUNTER_BITS: Final = 8
COUNTER_MASK: Final = (1 << COUNTER_BITS) - 1
MAX_BUDGET: Final = COUNTER_MASK


def params_key(p: Params) -> tuple[tuple[str, Any], ...]:
    return tuple(p.items())


def is_plain(spec: Spec) -> bool:
    """True when the spec runs the stock Spec/Action methods (so the cached path applies)."""
    cls = type(spec)
    if (cls.successors is not Spec.successors or cls.violations is not Spec.violations
            or cls.step_violations is not Spec.step_violations):
        return False
    return all(type(a).enabled is Action.enabled and type(a).apply is Action.apply
               for a in spec.actions)


# Budget kinds: 0 spends nothing; the others each have a counter of COUNTER_BITS bits in
# the packed counters (``cw``) of an explored state, kind k at bits (k-1)*COUNTER_BITS:
# 1 the environment's faults (wipes, damage, the drop: ``--wipes``), 2 crashes, 3 lifecycle
# requests (``--requests``). A budget mask has bit k-1 set while kind k may still be spent.
FREE: Final = 0
FAULT: Final = 1
CRASH: Final = 2
REQUEST: Final = 3
KINDS: Final = 4
MASKS: Final = 1 << (KINDS - 1)


# For each budget mask, the kinds it allows (FREE always).
ALLOWED: Final = tuple(tuple([FREE, *[k for k in range(1, KINDS) if m & (1 << (k - 1))]])
                       for m in range(MASKS))


def counter_add(kind: int) -> int:
    """What a move of ``kind`` adds to the packed counters."""
    return 0 if kind == FREE else 1 << (COUNTER_BITS * (kind - 1))


def counter(cw: int, kind: int) -> int:
    return (cw >> (COUNTER_BITS * (kind - 1))) & COUNTER_MASK


def budget_mask(cw: int, limits: tuple[int, ...]) -> int:
    """The kinds still allowed by the counters ``cw`` (``limits`` per kind 1..)."""
    return sum(1 << (k - 1) for k in range(1, KINDS) if counter(cw, k) < limits[k - 1])


@attrs.define
class Moves:
    """Some moves of one server in one server state, as (action index, next sid) pairs split
    by the budget they spend, with their step-property verdicts decided up front."""

    by_kind: list[list[tuple[int, int]]]
    # (budget kind, the first step property it fails): a move that breaks a step property
    # (the explorer reports it when the budget allows the move)
    bad: list[tuple[int, str]]
    full: list[tuple[int, Params, int]]  # with parameters: for verify and counterexamples
    # Moves that leave the server (and so the system) unchanged without spending a budget:
    # their successor is the state being expanded, already seen; only counted.
    loops: list[int]
    # By budget mask: the non-empty lists of moves allowed, each with what it adds to the
    # packed counters, and the first step property an allowed move fails (or None).
    sel: tuple[tuple[tuple[list[int], int, list[tuple[int, int]]], ...], ...] = ()
    loop_cov: list[tuple[int, int]] = attrs.Factory(list)
    bad_at: tuple[str | None, ...] = ()
    # What the search loop reads: by budget mask, the (distinct next sids, counter
    # increment) pairs of ``sel``; and how often the loop used these moves under each mask.
    # Coverage and the transition count are tallied from ``uses`` once, at the end of a
    # search (``counts``), not per move in the loop.
    tsel: tuple[tuple[tuple[list[int], int], ...], ...] = ()
    uses: list[int] = attrs.Factory(lambda: [0] * MASKS)

    def counts(self, mask: int) -> list[tuple[int, int]]:
        """(action index, transitions) of one use of these moves under a budget mask."""
        return [*self.loop_cov, *[c for _t, _a, per in self.sel[mask] for c in per]]

    def finish(self) -> Moves:
        def group(moves: list[tuple[int, int]], add: int) -> tuple[Any, ...]:
            # (distinct next sids, counter increment, transitions per action)
            if not moves:
                return ()
            targets = list(dict.fromkeys(nsid for _a, nsid in moves))
            per_action: dict[int, int] = {}
            for a_idx, _n in moves:
                per_action[a_idx] = per_action.get(a_idx, 0) + 1
            return ((targets, add, list(per_action.items())),)

        by_kind = self.by_kind
        if by_kind[FAULT] or by_kind[CRASH] or by_kind[REQUEST]:
            groups = [group(by_kind[k], counter_add(k)) for k in range(KINDS)]
            self.sel = tuple(tuple(g for k in kinds for g in groups[k]) for kinds in ALLOWED)
        else:  # only free moves (the common case): every budget mask allows them all
            self.sel = (group(by_kind[FREE], 0),) * MASKS
        self.loop_cov = [(a, self.loops.count(a)) for a in dict.fromkeys(self.loops)]
        self.tsel = tuple(tuple((targets, add) for targets, add, _per in groups_m)
                          for groups_m in self.sel)
        if self.bad:
            self.bad_at = tuple(next((prop for kind, prop in self.bad if kind in kinds), None)
                                for kinds in ALLOWED)
        else:
            self.bad_at = _NO_BAD
        return self


_NO_BAD: Final[tuple[str | None, ...]] = (None,) * MASKS


def no_moves() -> Moves:
    return Moves([[] for _ in range(KINDS)], [], [], []).finish()


NO_MOVES: Final = no_moves()


@attrs.define
class Plan:
    """What server i in server state sid can do, as far as it depends on that server only."""

    local: Moves  # always enabled (within budgets), whatever the other servers are
    guarded: list[tuple[int, Params, int]]  # local part enabled; the system guard reads others
    nonlocal_actions: list[int]  # enumerator reads other servers: enumerate in each state
    neigh_actions: list[int]  # the actions of guarded and nonlocal_actions, in order
    others: tuple[int, ...]  # the other servers' positions
    # Per action of neigh_actions (valid while act_gen is the explorer's read-set
    # generation): the projection id of the fields the action reads from the other servers,
    # its table (sid -> projection id), and the other servers' projections -> its moves.
    act_gen: int = -1
    act_proj: list[int] = attrs.Factory(list)
    act_tabs: list[list[int]] = attrs.Factory(list)
    act_nb: list[dict[Any, Moves]] = attrs.Factory(list)
    # The same per group of actions with the same projection: (projection id, its table,
    # the actions' positions, the other servers' projections -> the group's non-empty
    # Moves): the search loop's one look-up per group.
    act_groups: list[tuple[int, list[int], tuple[int, ...], dict[Any, tuple[Moves, ...]]]] = (
        attrs.Factory(list))


def _nothing(_s: ServerState) -> tuple[()]:
    return ()


class Projections:
    """Server states projected onto a set of fields, interned as small integers."""

    def __init__(self, fields: tuple[str, ...], objs: list[ServerState]) -> None:
        self.fields = fields
        self.fields_set = frozenset(fields)
        self.objs = objs
        self.tab: list[int] = []  # sid -> projection id, for every sid interned so far
        self.intern: dict[Any, int] = {}
        # the projection of a state: its fields' values (attrgetter, in C: a tuple for
        # several fields, the value itself for one; either identifies the projection)
        self.project: Callable[[ServerState], Any] = (
            operator.attrgetter(*fields) if fields else _nothing)

    def fill(self) -> list[int]:
        tab, project, intern = self.tab, self.project, self.intern
        for s in self.objs[len(tab):]:
            tab.append(intern.setdefault(project(s), len(intern)))
        return tab

    def pid(self, sid: int) -> int:
        tab = self.tab
        if sid >= len(tab):
            tab = self.fill()
        return tab[sid]


__all__ = ["COUNTER_BITS", "COUNTER_MASK", "CRASH", "FAULT", "FREE", "KINDS", "MASKS",
           "MAX_BUDGET", "NO_MOVES", "REQUEST", "Moves", "Plan", "Projections", "budget_mask",
           "counter", "counter_add", "is_plain", "no_moves", "params_key"]
