"""What a refused step's finding says: the conditions it breaks, by name ("every block
downloaded"), never the spec's guard function, and its parameters as the trace spells them
(``expected_state=READY``, ``reason=STALE_TERM``, a caller by UUID), never as codes."""

from __future__ import annotations

from pathlib import Path

from revivify.checker.local import check_paths
from revivify.checker.replay import Replayer, Violation
from revivify.checker.report import Report
from revivify.checker.walks import Recorder
from revivify.spec import default_spec
from revivify.spec.actions import ACTIONS
from revivify.spec.model import DELETED, READY, STARTUP_READY, STC_STALE_TERM

from .conftest import TRACES

# Every name a guard function has (the spec's, and the startup path's literal one).
GUARD_NAMES = {a.guard.__name__ for a in ACTIONS} | {"startup_guard"}


def refused(report: Report, event: str) -> Violation:
    (v,) = [v for v in report.findings.values()
            if v.kind == "GuardFailed" and v.event == event]
    return v


def names_no_guard(v: Violation) -> None:
    for name in GUARD_NAMES:
        assert name not in v.message, (name, v.message)
        assert name not in v.failed, (name, v.failed)


def test_ready_before_blocks_names_the_broken_condition() -> None:
    report = check_paths([str(TRACES / "bad" / "ready-before-blocks")])
    v = refused(report, "copy_mark_ready")
    assert v.failed == "every block downloaded"
    assert v.message.startswith("copy_mark_ready() is not allowed here: it needs every block "
                                "downloaded, in sb=COPYING"), v.message
    names_no_guard(v)
    text = report.text()
    assert "  failed:   every block downloaded\n" in text, text


def elected() -> Recorder:
    """Server 0 leads term 1; servers 0 and 1 hold entry 1 of term 1."""
    r = Recorder.new(default_spec(3), 11, created=True)
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    r.step(0, "become_leader", me=0, t=1)
    r.step(0, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(1, "log_append", first_index=1, op_term=1, op_index=1)
    return r


def test_refused_copy_prints_enumerations_by_name(tmp_path: Path) -> None:
    """A StartTabletCopy accepted from a caller in a term below the replica's last logged
    one: the STALE_TERM check it breaks, by name, and expected_state=READY."""
    r = elected()
    r.step(1, "stc_accept", check=False, caller=0, caller_term=0, expected_state=READY,
           has_opid=0, opid_term=0, opid_index=0)
    r.write(str(tmp_path))
    v = refused(check_paths([str(tmp_path)]), "stc_accept")
    assert v.failed == "caller_term at least the last logged term (else STALE_TERM)"
    assert (f"stc_accept(caller={r.uuid(0)}, caller_term=0, expected_state=READY, "
            "has_opid=false, opid_term=0, opid_index=0) is not allowed here: it needs "
            "caller_term at least the last logged term (else STALE_TERM), in ") in v.message
    names_no_guard(v)


def test_refused_reject_names_the_first_failing_check(tmp_path: Path) -> None:
    """A StartTabletCopy rejected with STALE_TERM where ILLEGAL_STATE fails first."""
    r = elected()
    r.step(1, "stc_reject", check=False, caller=0, caller_term=1, expected_state=DELETED,
           has_opid=0, opid_term=0, opid_index=0, reason=STC_STALE_TERM)
    r.write(str(tmp_path))
    v = refused(check_paths([str(tmp_path)]), "stc_reject")
    assert v.failed == "reason the first StartTabletCopy check that fails"
    assert "expected_state=DELETED" in v.message and "reason=STALE_TERM" in v.message
    assert "the first StartTabletCopy check that fails is ILLEGAL_STATE" in v.message
    names_no_guard(v)


def test_fmt_prints_names() -> None:
    r = Replayer()
    caller = r.interner.id("caller-uuid")
    assert r.words.fmt({"caller": caller, "caller_term": 2, "expected_state": READY,
                   "has_opid": 1, "opid_term": 1, "opid_index": 3, "dest": 0,
                   "reason": STC_STALE_TERM}) == (
        "(caller=caller-uuid, caller_term=2, expected_state=READY, has_opid=true, "
        "opid_term=1, opid_index=3, reason=STALE_TERM)")
    assert r.words.fmt({"case": STARTUP_READY}) == "(case=READY)"
