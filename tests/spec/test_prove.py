"""The z3 prover on the real spec: every obligation proved, and the proof has teeth."""

from __future__ import annotations

import z3

from revivify.checker.prove import (
    format_table,
    inv_forall,
    merge_lemmas,
    prove,
    symbolic_system,
    systems_equal,
)
from revivify.spec import default_spec
from revivify.spec.invariants import INVARIANTS
from revivify.spec.merge import merge_cmeta
from revivify.spec.model import NO_VOTE


class TestMerge:
    """The cmeta merge, on values and as z3 lemmas."""

    def test_lemmas_proved(self) -> None:
        results = merge_lemmas()
        assert results and all(o.result == "proved" for o in results), results

    def test_lower_remote_term_keeps_local_term_and_vote(self) -> None:
        m = merge_cmeta(True, 5, 2, 3, 9)
        assert (m.term, m.voted_for, m.config_index) == (5, 2, 9)

    def test_higher_remote_term_clears_vote(self) -> None:
        m = merge_cmeta(True, 5, 2, 7, 9)
        assert (m.term, m.voted_for) == (7, NO_VOTE)

    def test_no_local_cmeta_adopts_remote(self) -> None:
        m = merge_cmeta(False, 0, NO_VOTE, 4, 1)
        assert (m.term, m.voted_for, m.config_index) == (4, NO_VOTE, 1)

    def test_a_false_lemma_fails(self) -> None:
        """The lemma machinery can fail: 'the merged term is the remote term' is false."""
        present = z3.Bool("p")
        lt, lv, rt, rc = z3.Ints("lt lv rt rc")
        m = merge_cmeta(present, lt, lv, rt, rc)
        s = z3.Solver()
        s.add(z3.Not(m.term == rt))
        assert s.check() == z3.sat


class TestInduction:
    """Init => Inv and consecution for every action, for 3 servers."""

    def test_real_spec_proves(self) -> None:
        report = prove(default_spec(3), bmc_depth=0, timeout_ms=30_000)
        table = format_table(report)
        assert report.ok, table + "\n" + report.counterexample
        names = {o.name for o in report.obligations}
        for inv in INVARIANTS:
            assert f"init => {inv.name}" in names
            if inv.inductive:
                assert f"inductive: {inv.name}" in names
        # the log's claims are not proven: reported as bounded, never as proved
        bounded = [o for o in report.obligations if o.result == "bounded"]
        assert len(bounded) == 1 and "CommittedInLaterLeaders" in bounded[0].name
        assert not any(o.result == "proved" and "CommittedNeverLost" in o.name
                       for o in report.obligations if not o.name.startswith("init"))

    def test_bounded_claims_model_checked(self) -> None:
        """Asked for, the log's claims are model checked from Init (no counterexample)."""
        report = prove(default_spec(3), bmc_depth=0, timeout_ms=30_000, bounded_depth=3)
        row = next(o for o in report.obligations if o.result == "bounded")
        assert row.name.startswith("bounded, bmc depth 3/3"), row

    def test_invariants_without_strengthening_are_not_inductive(self) -> None:
        """The strengthening invariants are needed: drop them and a safety claim fails."""
        import attrs

        spec = default_spec(3)
        weak = attrs.evolve(spec, invariants=tuple(i for i in spec.invariants
                                                   if not i.strengthening))
        report = prove(weak, bmc_depth=0, timeout_ms=1_000)
        failed = [o.name for o in report.obligations if o.result == "FAILED"]
        assert failed, format_table(report)
        assert not report.ok

    def test_only_changed_rows(self) -> None:
        """A variant's proof may check only the rows it changes."""
        report = prove(default_spec(3), bmc_depth=0, timeout_ms=30_000,
                       only_actions={"copy_merge_cmeta"})
        assert report.ok

    def test_quantified_hypothesis_is_satisfiable(self) -> None:
        """Inv over a symbolic state is not vacuous (the initial state is a model of it),
        else every consecution obligation would be trivially true. The state is pinned to
        Init so z3 decides a ground instance instead of building a model of a quantifier."""
        sym = symbolic_system("x", 3)
        s = z3.Solver()
        s.set("timeout", 60_000)
        s.add(systems_equal(sym, default_spec(3).initial()))
        s.add(inv_forall(INVARIANTS, sym))
        assert s.check() == z3.sat
