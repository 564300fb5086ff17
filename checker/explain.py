"""The words of a finding: how the replay names states, parameters, the guard conditions a
refused step breaks, and the branch of the spec a step exercised (coverage).

Nothing here decides anything: the spec decided (``Action.conditions`` names each condition
of a guard in a user's words, ``startup_case`` and ``stc_failures`` classify what a startup
or a StartTabletCopy found); these functions only print what it decided, with servers by
UUID and enumerations by name. ``finding`` places a step's problem at a file and line (it
needs only the key); ``Explainer`` holds the replay's UUID interner and speaks of states and
parameters (the replay and its crash frontier each hold the one ``Explainer``).
"""

from __future__ import annotations

from typing import Any

from revivify.checker.keys import _ID_PARAMS, KeyState, Violation, _Problem
from revivify.checker.traces import Interner, describe_tuple, spec_tuple
from revivify.spec.actions import SPEC_ONLY_PARAMS, Action, startup_case, stc_failures
from revivify.spec.model import (
    BLOCKS_NAMES,
    OP_NAMES,
    SB_NAMES,
    STARTUP_NAMES,
    STC_NAMES,
    WAL_NAMES,
    ServerState,
)


def add_finding(found: list[Violation] | None, v: Violation) -> list[Violation]:
    """``found`` with ``v`` appended (None: no findings yet, the common case)."""
    if found is None:
        return [v]
    found.append(v)
    return found


def key_finding(k: KeyState, file: str, line: int, event: str, args_b: bytes,
                pr: _Problem, frontier: int) -> Violation:
    """The problem ``pr`` of key ``k``'s event at ``file:line``, as a finding with the key's
    last events as its context."""
    last = k.window[-1] if k.window else None
    return Violation(
        kind=pr.kind, severity=pr.severity, file=file, line=line,
        subject=f"{file}:{line}", message=pr.message, node=k.node, tablet=k.tablet,
        event=event, failed=pr.failed, expected=pr.expected, observed=pr.observed,
        last_matched=f"{last[0]}:{last[1]} {last[2]}" if last else "",
        frontier=frontier,
        context=(*(f"{f}:{n} {e} {a.decode('utf-8', 'replace')}"
                   for f, n, e, a in k.window),
                 f"{file}:{line} {event} {args_b.decode('utf-8', 'replace')}  <=="),
    )


class Explainer:
    """The words of states and parameters, servers by the UUIDs of ``interner``."""

    __slots__ = ("interner",)

    def __init__(self, interner: Interner) -> None:
        self.interner = interner

    def val(self, field: str, v: Any) -> str:
        if field == "voted_for":
            return self.interner.name(v) or "none"
        if field == "sb":
            return SB_NAMES.get(v, str(v))
        if field == "wal":
            return WAL_NAMES.get(v, str(v))
        if field == "blocks":
            return BLOCKS_NAMES.get(v, str(v))
        return str(v)

    def arg_problem(self, field: str, got: tuple[Any, ...],
                    want: tuple[Any, ...]) -> _Problem:
        def cmeta_words(c: tuple[Any, ...]) -> str:
            if not c[0]:
                return "none"
            return f"(term={c[1]}, vote={self.interner.name(c[2]) or '-'}, cfg={c[3]})"

        return _Problem("ArgMismatch", "violation", field,
                        f"{field} is {cmeta_words(got)}, the spec has {cmeta_words(want)}",
                        (cmeta_words(want),), cmeta_words(got))

    def describe(self, s: ServerState) -> str:
        return describe_tuple(spec_tuple(s), self.interner) + self.volatile(s)

    @staticmethod
    def volatile(s: ServerState) -> str:
        vol = ["up" if s.up else "down"]
        if s.running:
            vol.append("running")
        if s.leader:
            vol.append("leader")
        if s.failed:
            vol.append("failed")
        if s.op:
            vol.append(f"{OP_NAMES[s.op]}@{s.step}")
        return f" [{','.join(vol)}]"

    def fmt(self, params: dict[str, Any]) -> str:
        """The parameters as the trace says them: enumerations and servers by name; the
        spec's own parameters no trace carries (filled in for the guard) left out."""
        names: dict[str, dict[int, str]] = {"expected_state": SB_NAMES, "reason": STC_NAMES,
                                            "case": STARTUP_NAMES}
        shown = []
        for k, v in params.items():
            if k in SPEC_ONLY_PARAMS:
                continue
            if k in names:
                text = names[k].get(v, str(v))
            elif k in _ID_PARAMS:
                text = self.interner.name(v) or str(v)
            elif k == "has_opid":
                text = "true" if v else "false"
            else:
                text = str(v)
            shown.append(f"{k}={text}")
        return "(" + ", ".join(shown) + ")"

    @staticmethod
    def failed(action: Action, s: ServerState, params: dict[str, Any]) -> str:
        """A GuardFailed finding's ``failed``: the names of the conditions the step breaks,
        or the guard's name when none does by name (an action without conditions, or a
        replaced guard that refuses what they allow)."""
        conds = action.conditions(s, **params) if action.conditions is not None else []
        return "; ".join(name for name, holds in conds if not holds) or action.guard.__name__

    def explain(self, action: Action, s: ServerState, params: dict[str, Any]) -> str:
        where = f"in {self.describe(s)}"
        if action.name == "startup":
            want = startup_case(s)
            return (f"the spec classifies this on-disk state as "
                    f"{STARTUP_NAMES[want]}, the trace says {STARTUP_NAMES[params['case']]}")
        conds = action.conditions(s, **params) if action.conditions is not None else []
        broken = [name for name, holds in conds if not holds]
        if action.name == "stc_reject" and broken == [name for name, _ in conds[-1:]]:
            # Only the reason is wrong: it must be the first check that fails, in order.
            p = {k: v for k, v in params.items() if k != "reason"}
            fails = [STC_NAMES[c] for c, f in stc_failures(s, **p) if f]
            if not fails:
                return f"every StartTabletCopy check passes (the copy is accepted), {where}"
            return (f"the first StartTabletCopy check that fails is {fails[0]} (the spec's "
                    f"checks fail with {', '.join(fails)}), {where}")
        if broken:
            return "it needs " + "; ".join(broken) + f", {where}"
        return f"the spec's guard {action.guard.__name__} is false {where}"

    @staticmethod
    def branch(event: str, pre: ServerState, post: ServerState, p: dict[str, Any]) -> str:
        """The guard branch a step exercised (for coverage)."""
        if event == "startup":
            return STARTUP_NAMES[p["case"]]
        if event == "stc_reject":
            return STC_NAMES[p["reason"]]
        if event == "stc_accept":
            return f"from_{SB_NAMES[pre.sb]}"
        if event.startswith("delete_"):
            return OP_NAMES[pre.op]
        if event == "copy_merge_cmeta":
            if not pre.cmeta:
                return "no_local_cmeta"
            return "term_rises" if p["remote_term"] > pre.term else "term_kept"
        if event == "log_append":
            who = "leader" if pre.leader else "follower"
            batch = "_batch" if p["op_index"] > p["first_index"] else ""
            cut = "_truncate" if p["first_index"] <= pre.wal_last_index else ""
            return who + batch + cut
        if event in ("vote_granted", "vote_denied"):
            return "tombstone" if pre.sb != 3 else "replica"
        return ""
