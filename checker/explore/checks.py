"""The explorer's verdicts on properties, cached: state invariants per state, step
properties per step of one server.

How each cache is keyed (and why it is sound) is in the package's theory of operation,
"Caching the spec's answers". In short:

* invariants the spec flags ``per_server`` ("every server satisfies f") are decided per
  server state, on a system of n copies of it (so n is unchanged), once for those that do
  not read their term and per term for those that do (``Invariant.uses_term``);
* the others (cross-server ones) are decided per tuple of the servers' projections onto the
  fields they were ever seen to read (read-set memoisation: ``FieldProbe``); a field never
  read before widens the projection and drops the cache;
* step properties are decided per (pre, post) pair of one server's states (a plain spec's
  ``Spec.step_violations`` looks at the acting server only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from revivify.checker.compiled import (
    cached_invariant,
    cached_step_property,
    invariants_hold,
    steps_hold,
)
from revivify.spec import invariants as spec_invariants
from revivify.spec.model import SystemState
from revivify.spec.system import Spec

from .moves import Projections
from .probes import FieldProbe
from .symmetry import SID_BITS, SidInterner, pack_sids


class StateChecks:
    """Invariant and step-property verdicts over interned server states (sids)."""

    def __init__(self, spec: Spec, interner: SidInterner, plain: bool) -> None:
        self.spec = spec
        self.interner = interner
        self.n = interner.n
        self.plain = plain
        self.step_cache: dict[tuple[int, int], tuple[str, ...]] = {}
        self.step_fns = [None if p.uses_term or (c := cached_step_property(p)) is None
                         else c.fn for p in spec.step_properties]
        # every compiled step property in one function: decides the common step (all hold)
        # in one call
        self.steps_all = steps_hold(tuple(p for p, fn in zip(spec.step_properties,
                                                             self.step_fns, strict=True)
                                          if fn is not None))
        self.terms_cache: dict[frozenset[int], int] = {}
        self.terms_list: list[list[int]] = []
        self.terms_by_sids: dict[int, int] = {}  # packed termset ids -> tid
        invs = spec.invariants
        self.inv_names = [inv.name for inv in invs]
        # Per-server invariants (the spec's own flag), split by whether they read the term;
        # the others are cross-server. A spec that overrides the generic methods is asked
        # directly (``plain`` False).
        self.per_server = [k for k, inv in enumerate(invs) if plain and inv.per_server]
        self.server_free = [k for k in self.per_server if not invs[k].uses_term]
        self.server_term = [k for k in self.per_server if invs[k].uses_term]
        self.cross = [k for k, inv in enumerate(invs) if plain and not inv.per_server]
        # The per-server invariants that do not read the term, compiled (``checker.compiled``:
        # each one's predicate on the one-server system (s,), which for a per-server
        # invariant is its predicate on n copies of s): all of them in one function, which
        # decides the common case (every one holds) in one call, and each one alone (None:
        # not compilable, the interpreted predicate decides) to name those that fail.
        # tests/spec/test_compiled.py holds them equal to the interpreted ones.
        compiled = {k: c.fn for k in self.server_free
                    if (c := cached_invariant(invs[k])) is not None}
        self.free_fns = [(k, compiled.get(k)) for k in self.server_free]
        self.free_all = invariants_hold(tuple(invs[k] for k in compiled)) if compiled else None
        self.free_interp = [k for k in self.server_free if k not in compiled]
        self.server_inv_cache: dict[int, tuple[int, ...]] = {}  # (tid, sid) packed
        self.server_free_cache: dict[int, tuple[int, ...]] = {}  # sid
        self.server_term_cache: dict[tuple[int, int], tuple[int, ...]] = {}  # (sid, term)
        self.cross_off = False
        self.cross_fields: frozenset[str] = frozenset()
        self.cross_proj = Projections((), interner.objs)
        self.cross_cache: dict[int, tuple[int, ...]] = {}  # (tid, pids) packed
        # per cross-server invariant: the projection onto the fields it was seen to read,
        # and its verdict (True: it fails) on (the term, if it reads it, and) the servers'
        # projections
        self.inv_proj: dict[int, Projections] = {
            k: Projections((), interner.objs) for k in self.cross}
        self.inv_cache: dict[int, dict[tuple[int, ...], bool]] = {k: {} for k in self.cross}

    def system(self, sids: Sequence[int]) -> SystemState:
        objs = self.interner.objs
        return tuple([objs[s] for s in sids])

    # -- step properties -----------------------------------------------------------------

    def pair_failures(self, pre_sid: int, post_sid: int) -> tuple[str, ...]:
        """The step properties a step of one server from pre_sid to post_sid fails (plain
        specs: ``Spec.step_violations`` looks at that server only)."""
        got = self.step_cache.get((pre_sid, post_sid))
        if got is None:
            objs = self.interner.objs
            pre, post = objs[pre_sid], objs[post_sid]
            # the compiled ones all hold (the common step): only the others are asked
            compiled_hold = self.steps_all is not None and self.steps_all(pre, post)
            terms: list[int] | None = None
            failed: list[str] = []
            # ``check_step``, with the step properties that do not read their term compiled
            # (``checker.compiled``; tests/spec/test_compiled.py holds them equal)
            for prop, compiled in zip(self.spec.step_properties, self.step_fns, strict=True):
                if compiled is not None:
                    ok = compiled_hold or bool(compiled(pre, post))
                else:
                    if terms is None:
                        terms = spec_invariants.relevant_terms((pre, post))
                    ok = all(prop.pred(pre, post, t)
                             for t in (terms if prop.uses_term else terms[:1]))
                if not ok:
                    failed.append(prop.name)
            got = self.step_cache[(pre_sid, post_sid)] = tuple(failed)
        return got

    def step_failures(self, pre_sid: int, post_sid: int, i: int,
                      sids: list[int]) -> tuple[str, ...]:
        if self.plain:
            return self.pair_failures(pre_sid, post_sid)
        objs = self.interner.objs
        pre = self.system(sids)
        post = (*pre[:i], objs[post_sid], *pre[i + 1:])
        return tuple(self.spec.step_violations(pre, post, i))

    # -- state invariants ----------------------------------------------------------------

    def terms_id(self, sids: Sequence[int]) -> int:
        """The id of ``relevant_terms(system)``, built from each server's own terms."""
        tsid = self.interner.termset_id
        ck = pack_sids([tsid[s] for s in sids])
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
        caches of state_failures, looked up without building the answer; any miss takes
        the general path)."""
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
                if len(tab) < len(self.interner.objs):
                    # server states interned since the table was last filled (a move's
                    # orbit): fill it, or every check would miss until one is visited
                    tab = self.cross_proj.fill()
                if (self.cross_off
                        or self.cross_cache.get((tid << 72) | (tab[a] << 48) | (tab[b] << 24)
                                                | tab[c]) != ()):
                    return not self.state_failures(sids)
            return True
        tid = self.terms_by_sids.get(pack_sids([tsid[s] for s in sids]))
        if tid is None:
            return not self.state_failures(sids)
        for s in sids:
            if cache.get((tid << SID_BITS) | s) != ():
                return not self.state_failures(sids)
        if self.cross:
            tab = self.cross_proj.tab
            if len(tab) < len(self.interner.objs):
                tab = self.cross_proj.fill()
            if (self.cross_off
                    or self.cross_cache.get(pack_sids([tid, *[tab[s] for s in sids]])) != ()):
                return not self.state_failures(sids)
        return True

    def server_failures(self, sid: int, tid: int) -> tuple[int, ...]:
        """The per-server invariants server state sid fails, on n copies of itself: those
        that do not read the term once per sid, the others for each term of tid (each
        term's verdict cached on (sid, term))."""
        invs = self.spec.invariants
        copies = (self.interner.objs[sid],) * self.n
        terms = self.terms_list[tid]
        free = self.server_free_cache.get(sid)
        if free is None:
            s = copies[0]
            if (self.free_all is not None and self.free_all(s)
                    and all(invs[k].pred(copies, terms[0]) for k in self.free_interp)):
                free = ()
            else:
                free = tuple(k for k, fn in self.free_fns
                             if not (fn(s) if fn is not None
                                     else invs[k].pred(copies, terms[0])))
            self.server_free_cache[sid] = free
        failed: set[int] = set(free)
        if self.server_term:
            cache = self.server_term_cache
            for t in terms:
                got = cache.get((sid, t))
                if got is None:
                    got = cache[(sid, t)] = tuple(k for k in self.server_term
                                                  if not invs[k].pred(copies, t))
                failed.update(got)
        return tuple(sorted(failed))

    def cross_failures(self, sids: Sequence[int], tid: int) -> tuple[int, ...]:
        """The cross-server invariants, cached on (terms, each server's projection onto the
        fields they were seen to read), and below that per invariant on each server's
        projection onto the fields that invariant was seen to read (and the term, for
        those that read it): read-set memoisation, as for the explorer's moves."""
        invs = self.spec.invariants
        terms = self.terms_list[tid]
        if self.cross_off:
            system = self.system(sids)
            return tuple(k for k in self.cross
                         if not all(invs[k].pred(system, t)
                                    for t in (terms if invs[k].uses_term else terms[:1])))
        pid = self.cross_proj.pid
        ck = pack_sids([tid, *[pid(s) for s in sids]])
        got = self.cross_cache.get(ck)
        if got is not None:
            return got
        failed: list[int] = []
        for k in self.cross:
            proj = self.inv_proj[k]
            kp = tuple([proj.pid(s) for s in sids])
            cache = self.inv_cache[k]
            uses_term = invs[k].uses_term
            for t in (terms if uses_term else terms[:1]):
                key = (t, *kp) if uses_term else kp
                fails = cache.get(key)
                if fails is None:
                    reads: set[str] = set()
                    probed: Any = tuple([FieldProbe(s, reads) for s in self.system(sids)])
                    try:
                        fails = not bool(invs[k].pred(probed, t))
                    except Exception:
                        self.cross_off = True
                        self._drop_cross()
                        return self.cross_failures(sids, tid)
                    if not reads <= proj.fields_set:
                        # a field never read before: key this invariant (and the union
                        # over all of them) on the larger projection
                        fields = tuple(sorted(proj.fields_set | reads))
                        self.inv_proj[k] = Projections(fields, self.interner.objs)
                        self.inv_cache[k] = {}
                        self.cross_fields = self.cross_fields | reads
                        self.cross_proj = Projections(tuple(sorted(self.cross_fields)),
                                                      self.interner.objs)
                        self.cross_cache.clear()
                        return self.cross_failures(sids, tid)
                    cache[key] = fails
                if fails:
                    failed.append(k)
                    break
        got = self.cross_cache[ck] = tuple(failed)
        return got

    def _drop_cross(self) -> None:
        self.cross_cache.clear()
        for cache in self.inv_cache.values():
            cache.clear()


__all__ = ["StateChecks"]
