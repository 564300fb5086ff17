"""Symmetry reduction: server states as small integers (sids), their relabelings under every
permutation of the servers, and the generated function that picks one representative per
orbit (see the package's theory of operation)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from revivify.spec import invariants as spec_invariants
from revivify.spec import model as spec_model
from revivify.spec.logic import FMap
from revivify.spec.model import ServerState, SystemState

from .results import ExplorerError

# Where a server state stores other servers' indices (the symmetry relabels these).
ID_FIELDS: Final = spec_model.ID_FIELDS
ID_MAP_FIELDS: Final = spec_model.ID_MAP_FIELDS

SID_BITS: Final = 24
SID_MASK: Final = (1 << SID_BITS) - 1
MAX_SERVERS: Final = 6  # 6! = 720 relabelings: beyond that use symmetry=False


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


class SidInterner:
    """Server states as small integers, with their relabelings and relevant terms."""

    def __init__(self, n: int, symmetry: bool) -> None:
        self.n = n
        self.perms: list[tuple[int, ...]] = (
            list(itertools.permutations(range(n))) if symmetry else [tuple(range(n))])
        # compose[p][q]: the index of the permutation p o q (v -> p[q[v]])
        index = {p: k for k, p in enumerate(self.perms)}
        self.compose: list[list[int]] = [
            [index[tuple(p[q[v]] for v in range(n))] for q in self.perms] for p in self.perms]
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
        # The orbit: s relabeled by every permutation (images[q] = q.s). The relabeling
        # of an image by p is an image too: p.(q.s) = (p o q).s, so n! relabelings give
        # every entry of the tables (``compose``), not n! * n!.
        images = [relabel(s, p) for p in self.perms]
        for m in images:
            if m in self.sid_of:
                continue
            self.sid_of[m] = len(self.objs)
            self.objs.append(m)
            terms = frozenset(spec_invariants.relevant_terms((m,))[:-1])
            self.termset.append(terms)
            self.termset_id.append(self.termset_ids.setdefault(terms, len(self.termset_ids)))
            for table in self.relab:
                table.append(-1)
        ids = [self.sid_of[m] for m in images]
        for qi, k in enumerate(ids):
            for pi, table in enumerate(self.relab):
                table[k] = ids[self.compose[pi][qi]]
        if len(self.objs) > SID_MASK:
            raise ExplorerError(f"more than {SID_MASK} distinct server states")
        return self.sid_of[s]


def make_canon(interner: SidInterner) -> Callable[..., int]:
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


def make_unpack(n: int) -> Callable[[int], list[int]]:
    """A generated function: the n sids packed in an int (``pack_sids``), as a list
    (straight-line: a list comprehension costs a call and a loop per state)."""
    parts = [f"(packed >> {(n - 1 - pos) * SID_BITS}) & {SID_MASK}" if pos < n - 1
             else f"packed & {SID_MASK}" for pos in range(n)]
    env: dict[str, Any] = {}
    exec(f"def unpack(packed):\n    return [{', '.join(parts)}]\n", env)
    fn: Callable[[int], list[int]] = env["unpack"]
    return fn


def pack_sids(values: Sequence[int]) -> int:
    """Small non-negative integers (each below 2**SID_BITS) packed into one int."""
    out = 0
    for v in values:
        out = (out << SID_BITS) | v
    return out


__all__ = ["ID_FIELDS", "ID_MAP_FIELDS", "MAX_SERVERS", "SID_BITS", "SID_MASK", "SidInterner",
           "make_canon", "make_unpack", "pack_sids", "permute_system", "relabel"]
