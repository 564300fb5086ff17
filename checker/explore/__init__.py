"""Exhaustive bounded exploration of the spec: every reachable state, every invariant.

``revivify explore`` (``explore_main``) and :func:`explore` enumerate every state of a
:class:`~revivify.spec.system.Spec` reachable from its initial state within bounds (terms,
log indexes, crashes, faults, lifecycle requests), check every state invariant in every
state and every step property on every transition, and report what they saw: distinct
states, transitions, depth, time, and how often each action fired (an action that never
fired is *dead*: either the bounds are too small to reach it, or the spec has a guard that
can never hold).

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

**Budgets.** The spec does not bound crashes, the environment's faults or its lifecycle
requests (a server may crash forever, a master may delete and copy replicas forever). The
explorer counts them: the explored state is (system state, faults used, crashes used,
requests used), and the ``crash`` action, the faults (``FAULT_ACTIONS``: ``wipe``,
``damage`` and the ghost ``drop`` of the table, and ``FAILURE_ACTIONS``: ``copy_abort``,
which share the one "wipes" budget, ``--wipes``) and the environment's requests
(``REQUEST_ACTIONS``: ``delete_shutdown``, ``stc_accept``, ``delete_remove_cmeta``,
``config_change``, ``--requests``) are not fired once their budget is spent (``moves``:
the budget kinds and their packed counters). Terms, log indexes and the lifecycle requests
in flight are bounded by the spec's own enumerators (``Bounds.max_term``, ``Bounds.max_index``,
``Bounds.max_ops_in_flight``): bounds on what the environment sends, never on what a guard
allows.

**Symmetry reduction.** Servers are interchangeable: the spec names a server only by its
position ``i`` in the system tuple and by the integers stored in ``voted_for`` and in the
values of the ghost maps ``votes`` and ``member_votes`` (a candidate's index), and by the
index of a copy's source (``op_src``): ``spec.model.ID_FIELDS`` / ``ID_MAP_FIELDS``. For a
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
*sid*); a system state is the tuple of its servers' sids, packed with the three budget
counters into one Python int (24 bits per server, 8 per counter). The visited set maps that
int to its parent's int. Unlike TLC's 64-bit fingerprints (hash compaction, which loses a state with
probability about n^2 / 2^65 when two states' fingerprints collide), the packing is injective:
no state can be missed, and the table is still about 100 bytes per state.

**Caching the spec's answers.** The generic spec code (``attrs.evolve``, the
two-interpreter helpers of ``spec.logic``) costs tens of microseconds per call, so the
explorer asks each question once:

* *Per-server moves.* For a server state s at position i, the explorer calls every action's
  enumerator with a read-recording system tuple (:class:`ReadProbe`). An enumerator (or a
  system guard) that read nothing but ``sys[i]`` (and ``len(sys)``) is a deterministic
  function of (i, s, bounds), so its answer, and the guard and effect applied to each of its
  parameters, are cached for (i, s) (the server's *plan*).
* *Neighbourhoods.* The other actions (their enumerator or system guard read other servers)
  run on a system whose servers are :class:`FieldProbe` s that record which fields are read.
  Their answer is cached per action on (the projection of server i onto the fields read from
  it, the projection of every other server onto the fields read from the others; RequestVote
  granted and denied, which share enumerator and system guard, share it), and its moves per
  plan and action on (i, s, the other servers' projections onto that action's fields): one
  finished ``Moves`` per action, which the search loop looks up inline (a key that holds the
  union of every action's fields, tried before, was new in most states). This is read-set
  memoisation: a cached answer was computed from those fields only and the spec is
  deterministic, so any state that agrees on them gets the same answer; when an action
  reads a field it never read before, its field set grows and the per-plan caches are
  rebuilt. It is sound for any spec, mutants included; a call the probes cannot stand in for
  (hashing or comparing a whole server) switches the caching off.
* *Guards and effects* take one server state and the parameters. Each local guard runs
  compiled from its z3 form (``checker.compiled.compile_guard``: the guard as z3 sees it,
  printed as Python; the interpreted guard where it will not compile), and its verdict is
  cached on (action, the server state's projection onto the guard's *footprint*, the fields
  its code names, parameters): a derived footprint, so it cannot be wrong, and
  ``tests/spec/test_compiled.py`` checks that the projection decides the interpreted guard
  too. ``never_enabled`` is cached the same way. Effects (interpreted, maps and all) are
  cached on (action, sid, parameters).
* *Finished moves* (a ``Moves``: targets grouped by budget, step verdicts decided) are
  interned on what determines them: (sid, the (action, parameters, next sid) triples), or,
  for an action whose enumerator reads other servers, (action, sid, the id of its
  parameter list): many neighbourhoods of one server state allow the same moves, and a
  hit skips the guards, effects and the finishing. The loop counts how often it used each
  ``Moves`` under each budget mask; coverage and the transition count are tallied from
  those counts at the end (``Search.tally``), not per move.
* *Step properties* are defined over one server's pre- and post-state: cached on the pair and
  decided when a plan or neighbourhood is built (a move that leaves the system unchanged,
  say a rejected StartTabletCopy, is then only counted: its successor is the state itself).
* *State invariants.* ``check_state`` evaluates each predicate that reads its term
  (``Invariant.uses_term``) for every term relevant to the system, the others once. The
  invariants the spec flags ``per_server`` ("every server satisfies f") are cached per
  server state (and per term, for those that read it), evaluated on a system of n copies
  of that one server (so n is unchanged; those that do not read their term through one
  compiled conjunction first, ``checker.compiled.invariants_hold``, the interpreted
  predicates naming the ones that fail); each of the others is cached on the projection of
  each server onto the fields *it* was seen to read (and the term), by the same read-set
  memoisation, and their verdicts together on the projections onto the union of those
  fields (``checks``). A step that leaves a server's projection unchanged therefore never
  re-evaluates an invariant: the invariant's footprint, derived by the probes.
  ``verify=True`` cross-checks every cached answer against the generic ``Spec`` methods (the
  tests run with it).

A spec whose ``Spec``/``Action`` classes override ``successors``, ``enabled``, ``apply``,
``violations`` or ``step_violations`` is explored through those generic methods (slower,
same results).

Layout
------
* ``results``: what a search returns (``ExploreResult``, ``ExploreViolation``, ``TraceStep``);
* ``probes``: the read-recording stand-ins (``ReadProbe``, ``FieldProbe``, ``TOP``);
* ``symmetry``: interning of server states and the canonical representative of an orbit;
* ``moves``: the cached answers about one server (``Moves``, ``Plan``, ``Projections``);
* ``engine``: ``Explorer``, the transition caches (plans, neighbourhoods, guards, effects);
* ``checks``: ``StateChecks``, the invariant and step-property caches;
* ``search``: the breadth-first loop and ``explore``; ``counterexample``: the replay of a
  shortest path as a real run; ``cli``: ``revivify explore``;
* the search in several processes (``--workers``, ``--engine spark``): ``codec`` (server
  states as bytes every process reads alike), ``node`` (one process's share, the owner of a
  state, and why the partitioned level-synchronous search counts what one process counts),
  ``parallel`` (worker processes), ``sparkjob`` (a Spark job), ``warm`` (the workers' fork
  server's preload).
"""

from revivify.checker.explore.cli import (
    DEFAULT_BOUNDS,
    DEFAULT_SERVERS,
    explore_main,
    format_result,
)
from revivify.checker.explore.probes import TOP, never_enabled
from revivify.checker.explore.results import (
    ExploreProgress,
    ExplorerError,
    ExploreResult,
    ExploreViolation,
    TraceStep,
)
from revivify.checker.explore.search import explore, orbit_count
from revivify.checker.explore.symmetry import permute_system, relabel

__all__ = [
    "DEFAULT_BOUNDS",
    "DEFAULT_SERVERS",
    "TOP",
    "ExploreProgress",
    "ExploreResult",
    "ExploreViolation",
    "ExplorerError",
    "TraceStep",
    "explore",
    "explore_main",
    "format_result",
    "never_enabled",
    "orbit_count",
    "permute_system",
    "relabel",
]
