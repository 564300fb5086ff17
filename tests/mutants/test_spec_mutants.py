"""Every seeded bug in the spec is caught: by a proof, and by the explorer.

A checker that cannot fail proves nothing. For each mutant (spec.mutants) the z3 prover must
report one of the claims the mutant is expected to break as failed (an induction failure,
or a bounded-model-checking counterexample from Init when z3 cannot decide the induction
query), and the explorer must reach a state that violates one of those claims.
"""

from __future__ import annotations

import pytest

from revivify.checker.explore import explore
from revivify.checker.prove import prove
from revivify.spec.actions import Bounds
from revivify.spec.mutants import MUTANTS, Mutant

ALL = sorted(MUTANTS.values(), key=lambda m: m.name)
STRENGTHENING = {"LifecycleShape", "LeaderHadMajority", "MemberHistoryIsVotes",
                 "VotesNameServers"}


def _failed_claims(report_names: list[tuple[str, str, str]]) -> set[str]:
    failed: set[str] = set()
    for name, result, _ in report_names:
        if result == "FAILED":
            claim = name.split(": ", 1)[-1]
            failed.update(c.strip() for c in claim.split(","))
    return failed


def test_there_are_enough_mutants() -> None:
    assert len(MUTANTS) >= 8


@pytest.mark.parametrize("mutant", ALL, ids=lambda m: m.name)
def test_mutant_fails_a_proof(mutant: Mutant) -> None:
    """Induction first (fast); bounded model checking from Init only when z3 could not
    decide the induction query for the claims this mutant breaks."""
    spec = mutant.build(3)
    expected = mutant.caught_by | STRENGTHENING
    report = prove(spec, bmc_depth=0, timeout_ms=3_000)
    failed = _failed_claims([(o.name, o.result, o.detail) for o in report.obligations])
    if not failed & expected:
        report = prove(spec, bmc_depth=8, timeout_ms=3_000, bmc_budget_s=90)
        failed = _failed_claims([(o.name, o.result, o.detail) for o in report.obligations])
    assert not report.ok, f"{mutant.name} passed every proof"
    # The real spec proves every claim (tests/spec/test_prove.py), so any failure here is
    # the mutant's; it must be one of the claims guarding the seeded bug, or one of the
    # strengthening invariants that the safety claims rest on.
    assert failed & expected, (
        f"{mutant.name}: expected one of {sorted(expected)} to fail, "
        f"failed: {sorted(failed)}\n{report.counterexample}")


# Small bounds first: each is exhausted (or capped) in seconds, and every bug needs only one
# of these shapes: one term with a crash, one term with a crash and a disk fault (a wipe or
# damage), two terms (a stale leader), or a log of two entries (a leader that truncates its
# own log can only be seen to do so below its last index).
SCHEDULE = (
    Bounds(max_term=1, max_index=1, max_crashes=1, max_wipes=0),
    Bounds(max_term=1, max_index=1, max_crashes=1, max_wipes=1),
    Bounds(max_term=2, max_index=0, max_crashes=0, max_wipes=0),
    Bounds(max_term=1, max_index=2, max_crashes=0, max_wipes=0),
)


@pytest.mark.parametrize("mutant", ALL, ids=lambda m: m.name)
def test_mutant_caught_by_explorer(mutant: Mutant) -> None:
    spec = mutant.build(3)
    for bounds in SCHEDULE:
        result = explore(spec, bounds, max_states=60_000)
        if result.violation is not None:
            assert result.violation.invariant in mutant.caught_by | STRENGTHENING, (
                result.violation.describe())
            assert len(result.violation.trace) >= 2  # a path from Init, not just a state
            return
    pytest.fail(f"{mutant.name} explored clean under every bound in the schedule")
