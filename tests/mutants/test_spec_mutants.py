"""Every seeded bug in the spec is caught: by the explorer, with a named safety claim.

A checker that cannot fail proves nothing. For each mutant (spec.mutants) the explorer must
reach a state (or a step) that breaks one of the claims the mutant names, and a claim is a
safety invariant or step property, never a strengthening invariant (proof scaffolding): the
explorer runs with the claims only, so a lemma that fails first does not count. When the
broken claim is one the prover proves by induction (``Mutant.proof``), the z3 prover must
also report a claim as failed (an induction failure, or a bounded-model-checking
counterexample from Init when z3 cannot decide the induction query).
"""

from __future__ import annotations

import attrs
import pytest

from revivify.checker.explore import explore
from revivify.checker.prove import prove
from revivify.spec.invariants import SAFETY_CLAIMS
from revivify.spec.mutants import MUTANTS, Mutant
from revivify.spec.system import Spec

ALL = sorted(MUTANTS.values(), key=lambda m: m.name)
STRENGTHENING = {"LifecycleShape", "LeaderHadMajority", "MemberHistoryIsVotes",
                 "VotesNameServers", "LeaderLedItsTerm", "LedOncePerTerm",
                 "FullDeleteAfterDrop", "LogMatching", "LogShape", "PendingConfigInLog"}


def claims_only(spec: Spec) -> Spec:
    """The spec with its strengthening invariants left out: what the explorer reports is
    then a claim."""
    return attrs.evolve(spec, invariants=tuple(i for i in spec.invariants
                                               if not i.strengthening))


def test_there_are_enough_mutants() -> None:
    assert len(MUTANTS) >= 30


def test_mutants_name_claims() -> None:
    """Each mutant names claims (never a strengthening invariant) that the spec has."""
    for m in ALL:
        assert m.caught_by and m.caught_by <= SAFETY_CLAIMS, m.name
        assert not m.caught_by & STRENGTHENING, m.name


@pytest.mark.parametrize("mutant", ALL, ids=lambda m: m.name)
def test_mutant_caught_by_explorer(mutant: Mutant) -> None:
    spec = claims_only(mutant.build(3))
    result = explore(spec, mutant.bounds, max_states=mutant.max_states)
    v = result.violation
    assert v is not None, (f"{mutant.name} explored clean within {mutant.bounds} "
                           f"({result.distinct_states} states)")
    assert v.invariant in mutant.caught_by, v.describe()
    assert len(v.trace) >= 2  # a path from Init, not just a state


PROVED = [m for m in ALL if m.proof]


@pytest.mark.parametrize("mutant", PROVED, ids=lambda m: m.name)
def test_mutant_is_not_proven(mutant: Mutant) -> None:
    """The prover never certifies a mutant: induction over the rows the mutant changes (the
    others are the real spec's, proven in tests/spec/test_prove.py) fails, or cannot be
    decided, for one of the claims guarding the seeded bug or for a strengthening
    invariant the claims rest on. (Caught means the explorer's finding, above.)"""
    spec = mutant.build(3)
    expected = mutant.caught_by | STRENGTHENING
    report = prove(spec, bmc_depth=0, timeout_ms=3_000, only_actions=mutant.changed_rows())
    assert not report.ok, f"{mutant.name} passed every proof"
    open_claims = {o.name.removeprefix("inductive: ") for o in report.obligations
                   if o.result in ("FAILED", "unknown") and o.name.startswith("inductive: ")}
    # The real spec proves every claim, so any failure here is the mutant's.
    assert open_claims & expected, (
        f"{mutant.name}: expected one of {sorted(expected)} not to be proven, "
        f"open: {sorted(open_claims)}\n{report.counterexample}")
