"""z3 proofs of the spec: merge lemmas, inductive invariants, bounded model checking.

Theory of operation
-------------------
The spec's guards and effects are written once, interpreter-neutral (``spec.logic``). Here
they are evaluated on z3 terms: a *symbolic* server state has a z3 constant per field (Int,
Bool, or an Int->Int / Int->Bool Array for the ghost histories), the action parameters are
fresh Int constants, and calling ``action.guard`` / ``action.effect`` yields a BoolRef and a
successor state whose fields are z3 expressions. Nothing here restates a transition.

Obligations:

* merge lemmas, for all integer terms, votes and configs (``merge_lemmas``);
* initiation: Init => Inv, for every invariant;
* consecution: for every action, every server, every invariant ``I``:
  ``Inv(s) /\\ enabled(a, i, p, s) /\\ s' = effect(a, i, p, s) => I(s')``, where ``Inv`` is the
  conjunction of all invariants (safety ones and the ones named "strengthening"), each
  quantified over every term ``t``; the negated goal uses a fresh term (Skolem constant);
* step properties, likewise: ``Inv(s) /\\ enabled => P(s_i, s'_i, t)`` for a fresh ``t``;
* bounded model checking from Init to a depth (default 12) for whatever was not proven
  inductive: the reachable counterexample, printed as a sequence of states.

An invariant that is inductive relative to the others (all of them together are inductive)
holds in every reachable state for any number of terms and log indexes; that is the
difference between a proof and the explorer's bounded search.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import attrs
import z3

from revivify.checker.symbolic import FIELDS, symbolic_server
from revivify.spec.actions import MAP_PARAMS, Action
from revivify.spec.invariants import Invariant, check_state
from revivify.spec.logic import FMap, unrolled_ranges
from revivify.spec.merge import merge_cmeta
from revivify.spec.model import (
    BOOL_FIELDS,
    MAP_FIELDS,
    NO_VOTE,
    ServerState,
    SystemState,
)
from revivify.spec.system import Spec, default_spec

# ---------------------------------------------------------------------------------------
# Symbolic states.


def symbolic_system(prefix: str, n: int) -> SystemState:
    return tuple(symbolic_server(f"{prefix}{i}") for i in range(n))


def _z3_value(name: str, value: Any) -> Any:
    if name in MAP_FIELDS:
        if isinstance(value, FMap):
            default = MAP_FIELDS[name]
            sort = z3.BoolSort() if isinstance(default, bool) else z3.IntSort()
            arr = z3.K(z3.IntSort(), z3.BoolVal(default) if sort == z3.BoolSort()
                       else z3.IntVal(default))
            for k, v in value:
                arr = z3.Store(arr, k, v)
            return arr
        return value
    if isinstance(value, bool):
        return z3.BoolVal(value)
    if isinstance(value, int):
        return z3.IntVal(value)
    return value


def states_equal(a: ServerState, b: ServerState) -> Any:
    return z3.And(*[_z3_value(f, getattr(a, f)) == _z3_value(f, getattr(b, f))
                    for f in FIELDS])


def systems_equal(a: SystemState, b: SystemState) -> Any:
    return z3.And(*[states_equal(x, y) for x, y in zip(a, b, strict=True)])


def _as_bool(x: Any) -> Any:
    return z3.BoolVal(x) if isinstance(x, bool) else x


def inv_at(invariants: Iterable[Invariant], sys_: SystemState, t: Any) -> Any:
    return z3.And(*[_as_bool(inv.pred(sys_, t)) for inv in invariants])


def inv_forall(invariants: Iterable[Invariant], sys_: SystemState) -> Any:
    """Inv(s) for every term. Invariants that do not mention the term are asserted as they
    are: a quantifier over them would only make z3's instantiation work harder."""
    t, u = z3.Int("t_all"), z3.Int("t_other")
    plain: list[Any] = []
    quantified: list[Any] = []
    for inv in invariants:
        at_t, at_u = _as_bool(inv.pred(sys_, t)), _as_bool(inv.pred(sys_, u))
        (plain if at_t.eq(at_u) else quantified).append(at_t)
    if not quantified:
        return z3.And(*plain)
    return z3.And(*plain, z3.ForAll([t], z3.And(*quantified)))


def action_params(action: Action, tag: str) -> dict[str, Any]:
    """Fresh z3 constants for an action's parameters: Ints, and Int -> Int Arrays for the
    parameters that carry a whole log (``MAP_PARAMS``)."""
    return {p: (z3.Array(f"{tag}.{action.name}.{p}", z3.IntSort(), z3.IntSort())
                if p in MAP_PARAMS else z3.Int(f"{tag}.{action.name}.{p}"))
            for p in action.params}


def _param_value(model: Any, v: Any, keys: Sequence[int]) -> Any:
    """A parameter's value in a model: an int, or a log (FMap) read at ``keys``."""
    if isinstance(v, z3.ArrayRef):
        m = FMap((), 0)
        for k in keys:
            m = m.set(k, model.eval(z3.Select(v, k), model_completion=True).as_long())
        return m
    return model.eval(v, model_completion=True).as_long()


# ---------------------------------------------------------------------------------------
# Results.


@attrs.frozen
class Obligation:
    name: str
    result: str  # "proved" | "FAILED" | "unknown" | "not needed" | "bounded"
    seconds: float
    detail: str = ""


@attrs.frozen
class ProofReport:
    obligations: tuple[Obligation, ...]
    counterexample: str = ""

    @property
    def ok(self) -> bool:
        """Every inductive claim proven; the bounded ones without a counterexample."""
        return all(o.result in ("proved", "not needed", "bounded") for o in self.obligations)


def _solver(timeout_ms: int) -> z3.Solver:
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    return s


# ---------------------------------------------------------------------------------------
# (a) merge lemmas


def merge_lemmas(timeout_ms: int = 10_000) -> list[Obligation]:
    present = z3.Bool("local_present")
    lt, lv, rt, rc = z3.Ints("local_term local_vote remote_term remote_config")
    m = merge_cmeta(present, lt, lv, rt, rc)
    lemmas: list[tuple[str, Any]] = [
        ("merge: term never below the local term",
         z3.Implies(present, m.term >= lt)),
        ("merge: term never below the remote term", m.term >= rt),
        ("merge: same term keeps the local vote",
         z3.Implies(z3.And(present, m.term == lt), m.voted_for == lv)),
        ("merge: vote is the local vote or none",
         z3.Or(m.voted_for == lv, m.voted_for == NO_VOTE)),
        ("merge: a rising term clears the vote",
         z3.Implies(z3.And(present, rt > lt), m.voted_for == NO_VOTE)),
        ("merge: remote config adopted", m.config_index == rc),
        ("merge: no local cmeta adopts remote term, no vote",
         z3.Implies(z3.Not(present), z3.And(m.term == rt, m.voted_for == NO_VOTE))),
    ]
    out = []
    for name, claim in lemmas:
        start = time.perf_counter()
        s = _solver(timeout_ms)
        s.add(z3.Not(claim))
        r = s.check()
        out.append(Obligation(name, _verdict(r), time.perf_counter() - start,
                              "" if r == z3.unsat else _model_text(s)))
    return out


def _verdict(r: Any) -> str:
    return "proved" if r == z3.unsat else ("FAILED" if r == z3.sat else "unknown")


def _model_text(s: z3.Solver) -> str:
    try:
        return str(s.model())
    except z3.Z3Exception:
        return "(no model)"


# ---------------------------------------------------------------------------------------
# (b) induction


def _concrete_server(model: Any, s: ServerState, terms: Sequence[int]) -> ServerState:
    values: dict[str, Any] = {}
    for f in FIELDS:
        v = getattr(s, f)
        if f in MAP_FIELDS:
            m = FMap((), MAP_FIELDS[f])
            for t in terms:
                got = model.eval(z3.Select(_z3_value(f, v), t), model_completion=True)
                m = m.set(t, z3.is_true(got) if z3.is_bool(got) else got.as_long())
            values[f] = m
        else:
            got = model.eval(_z3_value(f, v), model_completion=True)
            values[f] = z3.is_true(got) if z3.is_bool(got) else got.as_long()
    return ServerState(**values)


def _concrete_system(model: Any, sys_: SystemState, extra_terms: Iterable[Any] = ()) -> \
        tuple[ServerState, ...]:
    # Map keys are terms (vote histories) or log indexes (logs): read both ranges.
    terms: set[int] = set(range(0, 4))
    for s in sys_:
        got = model.eval(_z3_value("term", s.term), model_completion=True).as_long()
        terms.update(range(0, min(max(got, 0), 48) + 2))
        terms.update((got, got + 1))
        for last in (s.wal_last_index, s.ghost_last_index):
            top = model.eval(_z3_value("wal_last_index", last), model_completion=True)
            terms.update(range(0, min(max(top.as_long(), 0), 20) + 2))
    # the terms the state itself names (a current term far out, the goal's term), and the
    # small ones around 0
    for t in extra_terms:
        terms.add(model.eval(t, model_completion=True).as_long())
    ordered = sorted(terms)
    return tuple(_concrete_server(model, s, ordered) for s in sys_)


def describe_system(sys_: Sequence[ServerState]) -> str:
    return "\n".join(f"    server {i}: {s.describe()}" for i, s in enumerate(sys_))


def initiation(spec: Spec, timeout_ms: int) -> list[Obligation]:
    out = []
    init = spec.initial()
    sym = symbolic_system("init", spec.n_servers)
    t = z3.Int("t_init")
    for inv in spec.invariants:
        start = time.perf_counter()
        s = _solver(timeout_ms)
        s.add(systems_equal(sym, init))
        s.add(z3.Not(_as_bool(inv.pred(sym, t))))
        r = s.check()
        out.append(Obligation(f"init => {inv.name}", _verdict(r), time.perf_counter() - start))
    return out


@attrs.frozen
class _Cti:
    """A counterexample to induction: a state satisfying Inv and a step breaking a claim."""

    claim: str
    action: str
    server: int
    params: dict[str, Any]
    pre: tuple[ServerState, ...]
    post: tuple[ServerState, ...]

    def text(self) -> str:
        return (f"  {self.claim} is not preserved by {self.action} on server {self.server} "
                f"with {self.params}\n  from (a state satisfying every invariant):\n"
                f"{describe_system(self.pre)}\n  to:\n{describe_system(self.post)}")


def consecution(
    spec: Spec, timeout_ms: int, progress: Callable[[str], None] | None = None,
    only_actions: Collection[str] | None = None,
) -> tuple[list[Obligation], list[_Cti]]:
    """Every invariant and step property preserved by every action on every server (or by
    the rows ``only_actions`` names: a variant of a proven spec needs only its changed rows
    checked)."""
    n = spec.n_servers
    pre = symbolic_system("s", n)
    invariants = _inductive_invariants(spec)
    hyp = inv_forall(invariants, pre)
    t = z3.Int("t_goal")
    seconds: dict[str, float] = {c: 0.0 for c in _claims(spec)}
    failed: dict[str, str] = {}
    unknown: dict[str, str] = {}
    ctis: list[_Cti] = []
    for action in spec.actions:
        if only_actions is not None and action.name not in only_actions:
            continue
        if progress:
            progress(action.name)
        for i in range(n):
            params = action_params(action, f"p{i}")
            enabled = _as_bool(action.enabled(pre, i, params))
            post = action.apply(pre, i, params)
            solver = _solver(timeout_ms)
            solver.add(hyp, enabled)
            goals = [(inv.name, _as_bool(inv.pred(post, t))) for inv in invariants]
            goals += [(p.name, _as_bool(p.pred(pre[i], post[i], t)))
                      for p in spec.step_properties if p.inductive]
            for name, goal in goals:
                # One counterexample per claim is enough; an undecided (action, claim) pair
                # stays undecided on the other, interchangeable, servers.
                if name in failed or unknown.get(name, "").startswith(f"{action.name}:"):
                    continue
                start = time.perf_counter()
                solver.push()
                solver.add(z3.Not(goal))
                r = solver.check()
                if r == z3.sat and name not in failed:
                    model = solver.model()
                    cti = _Cti(name, action.name, i,
                               {k: _param_value(model, v, range(0, 6))
                                for k, v in params.items()},
                               _concrete_system(model, pre, [t]),
                               _concrete_system(model, post, [t]))
                    ctis.append(cti)
                    failed[name] = f"{action.name} on server {i}"
                elif r == z3.unknown and name not in failed:
                    found = _ground_cti(spec, action, i, pre, params, name, t, timeout_ms)
                    if found is not None:
                        ctis.append(found)
                        failed[name] = f"{action.name} on server {i}"
                    else:
                        unknown.setdefault(name, f"{action.name}: {solver.reason_unknown()}")
                solver.pop()
                spent = time.perf_counter() - start
                seconds[name] += spent
                if spent > 2 and progress:
                    progress(f"{action.name} on server {i}: {name} took {spent:.1f}s")
    return _consecution_obligations(spec, failed, unknown, seconds), ctis


def _consecution_obligations(spec: Spec, failed: dict[str, str], unknown: dict[str, str],
                             seconds: dict[str, float]) -> list[Obligation]:
    """One obligation per claim: FAILED where some step broke it (``failed``: which),
    unknown where z3 could not decide (``unknown``: why), else proved."""
    out = []
    for name in _claims(spec):
        if name in failed:
            out.append(Obligation(f"inductive: {name}", "FAILED", seconds[name],
                                  f"broken by {failed[name]}"))
        elif name in unknown:
            out.append(Obligation(f"inductive: {name}", "unknown", seconds[name],
                                  unknown[name]))
        else:
            out.append(Obligation(f"inductive: {name}", "proved", seconds[name]))
    return out


def _ground_cti(spec: Spec, action: Action, i: int, pre: SystemState, params: dict[str, Any],
                claim: str, t: Any, timeout_ms: int) -> _Cti | None:
    """Look for a counterexample to induction without quantifiers, then confirm it concretely.

    z3 often cannot *satisfy* a query whose hypothesis is quantified over every term (it
    would have to build a model of the quantifier). Instantiating the hypothesis at the terms
    the step can touch (the goal's term, every server's term and term+1, every parameter)
    gives a quantifier-free query z3 decides quickly. Its model is only a candidate: the
    instantiation is weaker than the quantifier, so the candidate is turned into concrete
    states and judged by the concrete spec, which must agree that the pre-state satisfies
    every invariant and that the step breaks the claim. Only then is it reported."""
    keys = [t, *[v for v in params.values() if not isinstance(v, z3.ArrayRef)]]
    for srv in pre:
        keys += [srv.term, srv.term + 1]
    post = action.apply(pre, i, params)
    invariants = _inductive_invariants(spec)
    goal = next((inv.pred(post, t) for inv in invariants if inv.name == claim), None)
    if goal is None:
        prop = next(p for p in spec.step_properties if p.name == claim)
        goal = prop.pred(pre[i], post[i], t)
    solver = _solver(timeout_ms)
    solver.add(*[inv_at(invariants, pre, k) for k in keys])
    # Batches of at most 3 entries, written out: the guard without its quantifier.
    with unrolled_ranges(3):
        solver.add(_as_bool(action.enabled(pre, i, params)), z3.Not(_as_bool(goal)))
    # A small candidate first (terms, indexes and parameters within -1..6: readable, and
    # cheap to turn into concrete states), else any.
    small = [z3.And(x >= -1, x <= 6) for x in _small_ints(pre, params)]
    solver.push()
    solver.add(*small)
    found = solver.check()
    if found != z3.sat:
        solver.pop()
        found = solver.check()
    if found != z3.sat:
        return None
    model = solver.model()
    values = sorted({model.eval(_z3_value("term", k), model_completion=True).as_long()
                     for k in keys} | set(range(0, 8)))
    values = [v for v in values if -5 <= v <= 64] or [0]
    pre_c = tuple(_concrete_server(model, srv, values) for srv in pre)
    p_c = {k: _param_value(model, v, range(0, 9)) for k, v in params.items()}
    try:
        if check_state(invariants, pre_c) or not action.enabled(pre_c, i, p_c):
            return None
        post_c = action.apply(pre_c, i, p_c)
        broken = spec.violations(post_c) + spec.step_violations(pre_c, post_c, i)
    except (KeyError, TypeError, ValueError):
        return None
    if claim not in broken:
        return None
    return _Cti(claim, action.name, i, p_c, pre_c, post_c)


def _small_ints(pre: SystemState, params: dict[str, Any]) -> list[Any]:
    """The Int fields of the servers and the Int parameters (to keep a candidate small)."""
    out = [v for v in params.values() if isinstance(v, z3.ArithRef)]
    for srv in pre:
        out += [getattr(srv, f) for f in FIELDS
                if f not in MAP_FIELDS and f not in BOOL_FIELDS
                and isinstance(getattr(srv, f), z3.ArithRef)]
    return out


def _inductive_invariants(spec: Spec) -> tuple[Invariant, ...]:
    """The invariants proven by induction, and the only ones a proof may assume."""
    return tuple(i for i in spec.invariants if i.inductive)


def _claims(spec: Spec) -> list[str]:
    """The claims proven by induction (invariants and step properties)."""
    return ([i.name for i in spec.invariants if i.inductive]
            + [p.name for p in spec.step_properties if p.inductive])


def _bounded_claims(spec: Spec) -> list[str]:
    """The claims checked by bounded model checking only (``inductive=False``)."""
    return ([i.name for i in spec.invariants if not i.inductive]
            + [p.name for p in spec.step_properties if not p.inductive])


# ---------------------------------------------------------------------------------------
# (c) bounded model checking


@attrs.frozen
class BmcResult:
    claim: str
    depth_checked: int
    found_at: int | None
    text: str
    seconds: float


def bmc(spec: Spec, claims: Sequence[str], depth: int, timeout_ms: int,
        budget_s: float = float("inf")) -> BmcResult:
    """Search for a path from Init of at most `depth` steps that breaks any named claim.

    Depths are tried in increasing order, so the first counterexample is a shortest one.
    Stops early when the time budget is spent; ``depth_checked`` says how far it got."""
    n = spec.n_servers
    wanted_invs = [inv for inv in spec.invariants if inv.name in claims]
    wanted_props = [p for p in spec.step_properties if p.name in claims]
    start = time.perf_counter()
    solver = _solver(timeout_ms)
    states: list[SystemState] = [symbolic_system("b0_", n)]
    solver.add(systems_equal(states[0], spec.initial()))
    choices: list[list[tuple[Action, int, dict[str, Any], Any]]] = []
    t = z3.Int("t_bmc")
    for k in range(depth + 1):
        # Does state k break a state invariant, or step k-1 a step property?
        bad = [z3.Not(_as_bool(inv.pred(states[k], t))) for inv in wanted_invs]
        if k > 0:
            for _action, i, _, sel in choices[k - 1]:
                for prop in wanted_props:
                    bad.append(z3.And(sel, z3.Not(_as_bool(
                        prop.pred(states[k - 1][i], states[k][i], t)))))
        if bad:
            solver.push()
            solver.add(z3.Or(*bad))
            r = solver.check()
            if r == z3.sat:
                text = _bmc_trace(solver.model(), states, choices, t, spec)
                solver.pop()
                return BmcResult(",".join(claims), k, k, text, time.perf_counter() - start)
            solver.pop()
        if k == depth or time.perf_counter() - start > budget_s:
            return BmcResult(",".join(claims), k, None, "", time.perf_counter() - start)
        # Unroll one more step: exactly one (action, server) fires.
        nxt = symbolic_system(f"b{k + 1}_", n)
        step_choices = []
        disj = []
        for action in spec.actions:
            for i in range(n):
                params = action_params(action, f"b{k}.{i}")
                sel = z3.Bool(f"b{k}.{action.name}.{i}")
                post = action.apply(states[k], i, params)
                solver.add(z3.Implies(sel, z3.And(_as_bool(action.enabled(states[k], i, params)),
                                                   systems_equal(nxt, post))))
                step_choices.append((action, i, params, sel))
                disj.append(sel)
        solver.add(z3.Or(*disj))
        states.append(nxt)
        choices.append(step_choices)
    return BmcResult(",".join(claims), depth, None, "", time.perf_counter() - start)


def _bmc_trace(model: Any, states: list[SystemState],
               choices: list[list[tuple[Action, int, dict[str, Any], Any]]], t: Any,
               spec: Spec) -> str:
    lines = ["  counterexample (from Init):"]
    concrete = [_concrete_system(model, s, [t]) for s in states]
    lines.append("  state 0:\n" + describe_system(concrete[0]))
    for k, step_choices in enumerate(choices):
        for action, i, params, sel in step_choices:
            if z3.is_true(model.eval(sel, model_completion=True)):
                shown = {p: _param_value(model, v, range(0, 6)) for p, v in params.items()}
                lines.append(f"  step {k + 1}: {action.name} on server {i} {shown}")
                break
        lines.append(f"  state {k + 1}:\n" + describe_system(concrete[k + 1]))
    broken = spec.violations(concrete[-1])
    if broken:
        lines.append(f"  violated in the last state: {', '.join(broken)}")
    elif len(concrete) > 1:
        for i in range(len(concrete[-1])):
            props = spec.step_violations(concrete[-2], concrete[-1], i)
            if props:
                lines.append(f"  violated by the last step: {', '.join(props)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Driver


def prove(
    spec: Spec,
    *,
    bmc_depth: int = 12,
    timeout_ms: int = 60_000,
    always_bmc: bool = False,
    bmc_budget_s: float = 600.0,
    bounded_depth: int = 0,
    progress: Callable[[str], None] | None = None,
    only_actions: Collection[str] | None = None,
) -> ProofReport:
    obligations: list[Obligation] = []
    obligations += merge_lemmas(timeout_ms)
    obligations += initiation(spec, timeout_ms)
    cons, ctis = consecution(spec, timeout_ms, progress, only_actions)
    obligations += cons
    not_inductive = [o.name.removeprefix("inductive: ") for o in cons if o.result != "proved"]
    texts = [c.text() for c in ctis]
    if not_inductive or always_bmc:
        claims = not_inductive or _claims(spec)
        if progress:
            progress(f"bmc depth {bmc_depth}")
        res = bmc(spec, claims, bmc_depth, timeout_ms, bmc_budget_s)
        if res.found_at is None:
            # No counterexample within the bound: the claims hold to that depth, but they
            # are not proven in general (the strengthening is missing), so the obligations
            # above stay failed; this row only says how far the bounded search got.
            verdict = "proved" if res.depth_checked >= bmc_depth else "unknown"
            obligations.append(Obligation(
                f"bmc depth {res.depth_checked}/{bmc_depth}: {', '.join(claims)}", verdict,
                res.seconds, "no counterexample within the bound"))
        else:
            obligations.append(Obligation(f"bmc: {', '.join(claims)}", "FAILED", res.seconds,
                                          f"reachable in {res.found_at} steps"))
            texts.insert(0, res.text)
    else:
        obligations.append(Obligation(f"bmc depth {bmc_depth}", "not needed", 0.0,
                                      "every inductive claim is proven"))
    bounded = _bounded_claims(spec)
    if bounded and bounded_depth > 0:
        # The claims about the log: never proven, only searched for a counterexample from
        # Init (the explorer checks them in every reachable state within its bounds).
        if progress:
            progress(f"bmc depth {bounded_depth} (bounded claims)")
        res = bmc(spec, bounded, bounded_depth, timeout_ms, bmc_budget_s)
        name = f"bounded, bmc depth {res.depth_checked}/{bounded_depth}: {', '.join(bounded)}"
        if res.found_at is None:
            obligations.append(Obligation(name, "bounded", res.seconds,
                                          "no counterexample within the bound; not inductive "
                                          "(explored, see revivify explore)"))
        else:
            obligations.append(Obligation(f"bmc: {', '.join(bounded)}", "FAILED", res.seconds,
                                          f"reachable in {res.found_at} steps"))
            texts.insert(0, res.text)
    elif bounded:
        obligations.append(Obligation(f"bounded: {', '.join(bounded)}", "bounded", 0.0,
                                      "not inductive; checked by revivify explore"))
    return ProofReport(tuple(obligations), "\n\n".join(texts))


def format_table(report: ProofReport) -> str:
    width = max(len(o.name) for o in report.obligations)
    lines = [f"{'obligation':<{width}}  {'result':<10}  {'seconds':>8}",
             f"{'-' * width}  {'-' * 10}  {'-' * 8}"]
    for o in report.obligations:
        extra = f"  {o.detail}" if o.detail and o.result != "proved" else ""
        lines.append(f"{o.name:<{width}}  {o.result:<10}  {o.seconds:>8.2f}{extra}")
    total = sum(o.seconds for o in report.obligations)
    lines.append(f"{'total':<{width}}  {'':<10}  {total:>8.2f}")
    return "\n".join(lines)


def prove_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="revivify prove",
        description="Prove the spec with z3: merge lemmas, inductive invariants, and bounded "
                    "model checking for anything not proven inductive.")
    parser.add_argument("--servers", type=int, default=3, help="servers hosting the tablet")
    parser.add_argument("--bmc-depth", type=int, default=12, help="BMC unrolling depth")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="z3 timeout per query, seconds")
    parser.add_argument("--bmc-budget", type=float, default=600.0,
                        help="stop bounded model checking after this many seconds")
    parser.add_argument("--always-bmc", action="store_true",
                        help="run BMC even when every claim is inductive")
    parser.add_argument("--bounded-depth", type=int, default=0,
                        help="BMC depth for the claims that are not inductive (the log's; "
                             "default 0: they are checked by revivify explore)")
    parser.add_argument("--mutant", default=None,
                        help="prove a deliberately broken spec variant (see spec.mutants)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    if args.servers < 1 or args.servers > 7:
        print("revivify prove: --servers must be between 1 and 7", file=sys.stderr)
        return 2
    if args.bmc_depth < 0 or args.bounded_depth < 0:
        print("revivify prove: --bmc-depth and --bounded-depth must be >= 0", file=sys.stderr)
        return 2
    spec = default_spec(args.servers)
    if args.mutant:
        from revivify.spec.mutants import MUTANTS

        if args.mutant not in MUTANTS:
            print(f"revivify prove: unknown mutant {args.mutant!r}; known: "
                  f"{', '.join(sorted(MUTANTS))}", file=sys.stderr)
            return 2
        spec = MUTANTS[args.mutant].build(args.servers)

    def progress(what: str) -> None:
        if not args.json:
            print(f"  ... {what}", file=sys.stderr, flush=True)

    report = prove(spec, bmc_depth=args.bmc_depth, timeout_ms=int(args.timeout * 1000),
                   always_bmc=args.always_bmc, bmc_budget_s=args.bmc_budget,
                   bounded_depth=args.bounded_depth, progress=progress)
    if args.json:
        print(json.dumps({
            "ok": report.ok,
            "obligations": [attrs.asdict(o) for o in report.obligations],
            "counterexample": report.counterexample,
        }, indent=2))
    else:
        print(format_table(report))
        if report.counterexample:
            print("\n" + report.counterexample)
        print("\nall obligations proved" if report.ok else "\nPROOF FAILED")
    return 0 if report.ok else 1
