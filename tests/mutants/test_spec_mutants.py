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

import re

import attrs
import pytest

from revivify.checker.explore import explore
from revivify.checker.prove import prove
from revivify.spec import actions as spec_actions
from revivify.spec import logic, model
from revivify.spec.invariants import INVARIANTS, SAFETY_CLAIMS
from revivify.spec.mutants import MUTANTS, TWO_TERMS_RAFT, TWO_TERMS_RAFT_ONE_INDEX, Mutant
from revivify.spec.system import Spec

ALL = sorted(MUTANTS.values(), key=lambda m: m.name)
STRENGTHENING = {"LifecycleShape", "LeaderHadMajority", "MemberHistoryIsVotes",
                 "VotesNameServers", "LeaderLedItsTerm", "LedOncePerTerm",
                 "FullDeleteAfterDrop", "LogMatching", "LogShape", "PendingConfigInLog",
                 "LogOnlyInWals"}


def claims_only(spec: Spec) -> Spec:
    """The spec with its strengthening invariants left out: what the explorer reports is
    then a claim."""
    return attrs.evolve(spec, invariants=tuple(i for i in spec.invariants
                                               if not i.strengthening))


def test_there_are_enough_mutants() -> None:
    assert len(MUTANTS) >= 30


def test_strengthening_list_is_the_specs() -> None:
    """The list above is the spec's strengthening invariants (a new lemma is named here)."""
    assert {i.name for i in INVARIANTS if i.strengthening} == STRENGTHENING


# Names in the header of spec/actions.py that are neither mutants nor the spec's own: Kudu's
# and the implementation's (a CAS field, a planner), a Bounds field, a Python keyword, a
# module.
_HEADER_OUTSIDE_NAMES = {"cas_config_opid_index_less_or_equal", "plan_purge", "max_index",
                         "if", "model", "ACTIONS", "CheckLeaderTermNotLower"}


def test_actions_header_names_only_what_exists() -> None:
    """Every mutant the header of spec/actions.py names exists (``mutants``), and so does
    every claim it names: a ``snake_case`` name there is a mutant or a name of the spec,
    a ``CamelCase`` one a claim or an invariant."""
    doc = spec_actions.__doc__ or ""
    spec_names = (set(dir(spec_actions)) | set(dir(model)) | set(dir(logic))
                  | {f.name for f in attrs.fields(model.ServerState)}
                  | {a.name for a in spec_actions.ACTIONS}
                  | {p for a in spec_actions.ACTIONS for p in a.params}
                  | {"merge", "mutants", "logic"})
    unknown = {n for n in re.findall(r"``([a-z][a-z0-9_]*)``", doc)
               if n not in MUTANTS and n not in spec_names and n not in _HEADER_OUTSIDE_NAMES}
    assert not unknown, f"the header names mutants spec/mutants.py lacks: {sorted(unknown)}"
    claims = SAFETY_CLAIMS | {i.name for i in INVARIANTS}
    unknown = {n for n in re.findall(r"``([A-Z][A-Za-z]+)``", doc)
               if n not in claims and n not in _HEADER_OUTSIDE_NAMES}
    assert not unknown, f"the header names claims the spec lacks: {sorted(unknown)}"


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


# -- two entries of one term -----------------------------------------------------------
# At max index 1 two logs whose last terms are equal are equal, so a bug in how the
# up-to-date comparison weighs indexes cannot show; the mutants that need two entries of
# one term are explored at max index 2 (``TWO_TERMS_RAFT``: Raft alone, two terms).


def test_off_by_one_needs_two_indexes() -> None:
    """The off-by-one in the vote's up-to-date comparison (equal last terms, a candidate one
    entry behind passes) is caught at max index 2 by a claim about committed entries, and
    the same bounds at max index 1 explore every state clean: the second index is what
    catches it."""
    mutant = MUTANTS["vote_index_off_by_one"]
    assert mutant.bounds == TWO_TERMS_RAFT and TWO_TERMS_RAFT.max_index == 2
    spec = claims_only(mutant.build(3))
    one = explore(spec, TWO_TERMS_RAFT_ONE_INDEX, max_states=mutant.max_states)
    assert one.violation is None and one.complete, one.violation and one.violation.describe()
    two = explore(spec, TWO_TERMS_RAFT, max_states=mutant.max_states)
    v = two.violation
    assert v is not None, f"explored clean ({two.distinct_states} states)"
    assert v.invariant in mutant.caught_by, v.describe()
    # the counterexample holds two entries of one term somewhere
    assert any(any(s.log[1] == s.log[2] != 0 for s in step.state) for step in v.trace), \
        v.describe()


@pytest.mark.slow
def test_two_indexes_two_terms_clean() -> None:
    """The real spec explores clean within ``TWO_TERMS_RAFT`` (so what the max-index-2 run
    finds in a mutant is the mutant's): 269,431 states, about 32 s of CPU."""
    from revivify.spec import default_spec

    r = explore(default_spec(3), TWO_TERMS_RAFT)
    assert r.violation is None and r.complete
