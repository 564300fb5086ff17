"""One process's part of a search that runs in several: its ``Explorer``, the stable names
of its sids, and the owner and stable encoding of an explored state.

Why the partitioned, level-synchronous search counts what the single process counts
---------------------------------------------------------------------------------------
Level d of a breadth-first search is a set, the states at distance d from the initial state,
whatever the order in which one search visits them. The distributed searches (``parallel``:
worker processes; ``sparkjob``: a Spark job) build exactly that set: level d + 1 is every
successor of level d that no earlier level holds, and a level starts only when the previous
one is complete everywhere (the synchronisation), so a state first reached at depth d + 1 is
never taken for new at a later depth, nor missed. Each orbit is expanded exactly once, as in
one process: the Spark job gives each state one *owner* (a function of its orbit, below)
that alone keeps it and expands it; the worker processes each hold every state and expand
each (state, server) pair once between them, the server's orbit naming the worker
(``parallel``, "Sharing the work"); there the owner of a new state decides that it is new
(every worker that found it routes it to the owner, which sends it on to those that did
not), counts it and checks its invariants. Transitions and coverage are summed over the
expansions, and the number of moves of each action from p.S equals that from S (the
package's theory, "Symmetry reduction", (2)): which representative of an orbit a process
happens to hold does not change the counts. Hence the same distinct states per level,
transitions, coverage and depth. A violation is found while level d is expanded (a step
property on a transition from it, an invariant in a new state of level d + 1), so its depth,
the length of its shortest counterexample, is the single process's too; which of several
violations of one level is reported may differ.

The owner must not depend on the process that computes it: sids and the canonical
representative (``symmetry.make_canon``, a minimum over sids) do, and ``hash`` of bytes is
salted per process. ``orbit[sid]`` is the least 64-bit digest (``codec.digest``) of the
stable encodings of the server state's relabelings under every server permutation: a
function of the server state's orbit alone. A system state p.S holds the relabelings
by p of S's servers, so the multiset of its servers' ``orbit`` values, and their sum, is the
same for every member of S's orbit: the owner is that sum (with the budget counters)
modulo the number of owners. The digests only spread states over owners; a collision
sends two orbits to one owner, which still tells them apart by their exact keys.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any, Final

import attrs

from revivify.spec.actions import Bounds
from revivify.spec.system import Spec

from .codec import decode_server, digest, encode_server, pack_state, unpack_state
from .counterexample import replay
from .engine import Explorer
from .results import ExplorerError, ExploreResult, ExploreViolation
from .search import Search
from .symmetry import SID_BITS, SID_MASK

# An odd 64-bit constant: the budget counters' share of the owner (the golden ratio's).
MIX: Final = 0x9E3779B97F4A7C15


class NotDistributable(ExplorerError):
    """The spec cannot be explored by other processes (it cannot be sent to them, or it
    overrides the methods whose answers the explorer caches)."""


def require_plain(ex: Explorer) -> None:
    if not ex.plain:
        raise NotDistributable(
            f"spec {ex.spec.name!r} overrides Spec/Action methods: only one process can "
            f"explore it (without --workers / --engine spark)")


@attrs.frozen
class SpecSource:
    """How another process gets the spec: the object itself when it pickles, else (the
    mutants' closures do not) the name of its ``spec.mutants`` entry, rebuilt there."""

    spec: Spec | None
    mutant: str | None
    n_servers: int

    @staticmethod
    def of(spec: Spec) -> SpecSource:
        try:
            pickle.dumps(spec)
            return SpecSource(spec, None, spec.n_servers)
        except (pickle.PicklingError, AttributeError, TypeError):
            pass
        from revivify.spec.mutants import MUTANTS

        name = spec.name.removeprefix("mutant:")
        if spec.name.startswith("mutant:") and name in MUTANTS:
            rebuilt = MUTANTS[name].build(spec.n_servers)
            if ([a.name for a in rebuilt.actions] == [a.name for a in spec.actions]
                    and rebuilt.invariants == spec.invariants
                    and rebuilt.step_properties == spec.step_properties):
                return SpecSource(None, name, spec.n_servers)
        raise NotDistributable(
            f"spec {spec.name!r} cannot be sent to other processes: it does not pickle and is "
            f"not one of spec.mutants")

    def build(self) -> Spec:
        if self.spec is not None:
            return self.spec
        from revivify.spec.mutants import MUTANTS

        assert self.mutant is not None
        return MUTANTS[self.mutant].build(self.n_servers)


class NodeSearch(Search):
    """The breadth-first expansion of ``Search`` without its loop: a violation records the
    state where it was found (``violation_at``: ([that key], (kind, name))); its path is
    walked back across the processes that hold it."""

    def chain_to(self, key: int) -> list[int]:
        return [key]

    def expand(self, key: int, append: Callable[[int], None]) -> bool:
        """Every move from the state ``key`` (see ``Search._expand_plain``)."""
        return self._expand_plain(key, append)

    def expand_share(self, key: int, append: Callable[[int], None], owned: bytearray) -> bool:
        """This process's share of the moves from the state ``key`` (``parallel``): those
        of the servers whose states ``owned`` marks; the new states' invariants are left
        to their owner."""
        return self._expand_plain(key, append, owned, False)

    def take_tally(self) -> tuple[int, list[int]]:
        """The transitions and per-action coverage of the expansions since the last call
        (each Moves' uses are counted, then zeroed)."""
        coverage = [0] * len(self.ex.actions)
        self.coverage = coverage
        total = self.tally(True)
        for mv in self.ex.moves_of.values():
            mv.uses[:] = [0] * len(mv.uses)
        return total, coverage


class Node:
    """One process's explorer, with stable names for its sids (``encs``, ``orbit``)."""

    def __init__(self, spec: Spec, bounds: Bounds, symmetry: bool, verify: bool) -> None:
        ex = self.ex = Explorer(spec, bounds, symmetry, verify)
        require_plain(ex)
        self.search = NodeSearch(ex, {}, [0] * len(ex.actions), None, None, 0.0, 0.0)
        # run_plain's unpacking of a key, which expand relies on
        self.search.prepare()
        self.encs: list[bytes] = []  # sid -> encode_server(its state)
        self.digests: list[int] = []  # sid -> digest(encs[sid])
        self.orbit: list[int] = []  # sid -> least digest over its relabelings (the docstring)
        self.sid_of_enc: dict[bytes, int] = {}

    def fill(self) -> None:
        """Name every sid interned so far (an interning adds a whole orbit at once, so
        every relabeling of a new sid is there)."""
        objs = self.ex.interner.objs
        for sid in range(len(self.encs), len(objs)):
            enc = encode_server(objs[sid])
            self.encs.append(enc)
            self.digests.append(digest(enc))
            self.sid_of_enc[enc] = sid
        relab, digests = self.ex.interner.relab, self.digests
        for sid in range(len(self.orbit), len(objs)):
            self.orbit.append(min(digests[table[sid]] for table in relab))

    def sid(self, enc: bytes) -> int:
        got = self.sid_of_enc.get(enc)
        if got is None:
            got = self.ex.interner.sid(decode_server(enc))
            self.fill()
        return got

    def owner(self, key: int, owners: int) -> int:
        """The owner of the state ``key`` among ``owners`` (the same in every process;
        ``fill`` first)."""
        sids, cw = self.ex.unpack(key)
        orbit = self.orbit
        return (sum([orbit[s] for s in sids]) + cw * MIX) % owners

    def owner_of(self, owners: int) -> Callable[[int], int]:
        """``owner`` as a generated straight-line function of a key (``search.prepare``
        first): the owner of each state a parallel worker finds is asked once per state,
        where a call, a list and a loop per state would cost more than the sum itself."""
        n, shift_c = self.ex.n, self.search._shift_c
        terms = [f"O[(k >> {shift_c + (n - 1 - pos) * SID_BITS}) & {SID_MASK}]"
                 for pos in range(n)]
        src = (f"def owner(k):\n    return ({' + '.join(terms)} + "
               f"(k & {(1 << shift_c) - 1}) * {MIX}) % {owners}\n")
        env: dict[str, Any] = {"O": self.orbit}  # grows in place (``fill``)
        exec(src, env)
        fn: Callable[[int], int] = env["owner"]
        return fn

    def translator(self, table: list[int]) -> Callable[[int], int]:
        """A generated function: a key in another process's numbering (``table``: its sid
        -> mine, grown in place as it names its sids) as this process's canonical key:
        each sid translated, then ``ex.canon`` inline (the least packing over the
        relabelings), the budget counters kept."""
        n, shift_c = self.ex.n, self.search._shift_c
        interner = self.ex.interner
        lines = [f"    t{j} = T[(k >> {shift_c + (n - 1 - j) * SID_BITS}) & {SID_MASK}]"
                 for j in range(n)]
        shifts = [(n - 1 - pos) * SID_BITS for pos in range(n)]
        terms = []
        for pi, p in enumerate(interner.perms):
            terms.append(" | ".join(f"(R{pi}[t{j}] << {shifts[p[j]]})" if shifts[p[j]]
                                    else f"R{pi}[t{j}]" for j in range(n)))
        least = f"({terms[0]})" if len(terms) == 1 else "min(" + ", ".join(terms) + ")"
        src = ("def translate(k):\n" + "\n".join(lines) +
               f"\n    return ({least} << {shift_c}) | (k & {(1 << shift_c) - 1})\n")
        env: dict[str, Any] = {f"R{pi}": t for pi, t in enumerate(interner.relab)}
        env["T"] = table
        exec(src, env)  # straight-line, like ``symmetry.make_canon``
        fn: Callable[[int], int] = env["translate"]
        return fn

    def stable(self, key: int) -> bytes:
        """The state's orbit as stable bytes: over every server permutation p, the least
        tuple of encodings of p.S (``fill`` first)."""
        sids, cw = self.ex.unpack(key)
        interner, encs, n = self.ex.interner, self.encs, self.ex.n
        best: list[bytes] | None = None
        for p, table in zip(interner.perms, interner.relab, strict=True):
            out: list[bytes] = [b""] * n
            for j, s in enumerate(sids):
                out[p[j]] = encs[table[s]]
            if best is None or out < best:
                best = out
        assert best is not None
        return pack_state(cw, best)

    def local(self, data: bytes) -> int:
        """The key of the state ``stable`` encoded, in this process's numbering."""
        cw, encs = unpack_state(data)
        return self.ex.key([self.sid(e) for e in encs], cw)

    def servers(self, key: int) -> tuple[list[bytes], int]:
        """The state's servers (stable encodings, in its positions) and its counters."""
        sids, cw = self.ex.unpack(key)
        self.fill()
        return [self.encs[s] for s in sids], cw


def property_docs(spec: Spec) -> dict[str, str]:
    """Each invariant's and step property's doc, by name."""
    docs = {inv.name: inv.doc for inv in spec.invariants}
    docs.update({p.name: p.doc for p in spec.step_properties})
    return docs


def distributed_result(spec: Spec, t0: float, distinct: int, transitions: int,
                       coverage: list[int], depth: int, levels: list[int], workers: int,
                       violation: ExploreViolation | None, complete: bool,
                       server_states: int, symmetry: bool, cpu_seconds: float,
                       engine: str = "local") -> ExploreResult:
    """The ExploreResult of a search in several processes (its seconds: since ``t0``)."""
    cov = {a.name: coverage[k] for k, a in enumerate(spec.actions)}
    return ExploreResult(
        distinct_states=distinct, transitions=transitions, depth=depth,
        seconds=time.perf_counter() - t0, coverage=cov,
        dead_actions=tuple(name for name, c in cov.items() if c == 0), violation=violation,
        complete=complete, server_states=server_states, symmetry=symmetry,
        levels=tuple(levels), engine=engine, workers=workers, cpu_seconds=cpu_seconds)


def initial_violation(spec: Spec, ex: Explorer, t0: float, cpu0: float, symmetry: bool,
                      engine: str, workers: int) -> ExploreResult | None:
    """The result of a search whose initial state breaks an invariant (nothing to
    distribute: that state is the counterexample), else None."""
    sids = [ex.interner.sid(s) for s in spec.initial()]
    bad = ex.checks.state_failures(sids)
    if not bad:
        return None
    final = ("invariant", bad[0])
    violation = ExploreViolation(bad[0], "invariant", replay(ex, [ex.key(sids, 0)], final),
                                 property_docs(spec).get(bad[0], ""))
    return distributed_result(spec, t0, 1, 0, [0] * len(spec.actions), 0, [1], workers,
                              violation, False, len(ex.interner.objs), symmetry,
                              time.process_time() - cpu0, engine)


__all__ = ["MIX", "Node", "NodeSearch", "NotDistributable", "SpecSource", "distributed_result",
           "initial_violation", "property_docs", "require_plain"]
