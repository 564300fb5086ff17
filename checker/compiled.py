"""The spec compiled to Python: a third interpreter of the one spec, for the hot paths.

Theory of operation
-------------------
The spec is written once, in the two-interpreter discipline of ``spec/logic.py``: its
guards, effects, invariants and step properties run on Python values (replay, explorer,
Hypothesis) and on z3 terms (the prover). On Python values every helper call
(``all_``, ``eq``, ``implies``, ``member``, ``attrs.evolve``) pays for the generality that
lets it also build z3 terms: the trace checker spent about 90% of its time there.

This module adds a third interpreter built from the second: it runs a spec function *once*
on z3 terms (one fresh constant per state field and per parameter), which yields the
function as a z3 expression over those constants, and translates that expression into the
source of a plain Python function (``and``/``or``/``not``, comparisons, conditional
expressions, integer arithmetic), which it compiles with ``compile``. Nothing is written by
hand: a compiled guard is the guard, as z3 sees it, printed as Python.

Why it is the same function. On every input of the shapes the spec is written for (ints,
bools, maps), the concrete helpers and the z3 terms they build agree: that is what the
prover already relies on (it proves on the terms what the checker evaluates on values).
The translation is the standard semantics of each z3 operator it accepts (Int is Python's
unbounded int, Bool is bool, Select is a map lookup); anything else (a quantifier, a lambda,
an operator not in ``_OPS``, a spec function that will not run on z3 terms at all, as a
mutant that branches with ``if``) raises ``NotCompilable`` and the caller keeps the
interpreted function. ``tests/spec/test_compiled.py`` checks the two interpretations agree on
every state the explorer reaches at small bounds and on random states (Hypothesis), for the
real spec and every mutant.

Footprints. The constants a compiled expression mentions are the fields it reads: its
*footprint*, derived, not declared, so it cannot be wrong (the function's code reads
nothing else). The trace checker re-evaluates after a step only the invariants whose
footprint the step changed: an invariant whose fields are all unchanged has the same value
after the step as before it, so the step cannot have broken it.

Shared subterms. A z3 expression is a DAG (``last_logged`` is used by several conditions).
Every compound subterm used more than once is computed once into a local, in dependency
order, before the result expression; the rest is inlined. Hoisting gives up short-circuit
evaluation for those subterms, which is harmless: the accepted operators are total on ints
and bools (no division), so evaluating a subterm early cannot fail or change a result.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any, Final

import attrs
import z3

from revivify.checker.symbolic import FIELDS, symbolic_server
from revivify.spec.actions import MAP_PARAMS, Action
from revivify.spec.invariants import Invariant, StepProperty
from revivify.spec.logic import FMap
from revivify.spec.model import MAP_FIELDS, ServerState

SCALAR_FIELDS: Final = tuple(f for f in FIELDS if f not in MAP_FIELDS)


class NotCompilable(Exception):
    """The spec function cannot be compiled (keep the interpreted one)."""


def _sym_params(names: Iterable[str]) -> dict[str, Any]:
    return {p: (z3.Array(f"p.{p}", z3.IntSort(), z3.IntSort()) if p in MAP_PARAMS
                else z3.Int(f"p.{p}")) for p in names}


def _as_expr(x: Any) -> Any:
    if isinstance(x, z3.ExprRef):
        return x
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, int):
        return z3.IntVal(x)
    raise NotCompilable(f"not a term: {x!r}")


# z3 operator kind -> Python source template over the translated arguments.
_K = z3.z3consts
_INFIX: Final = {
    _K.Z3_OP_AND: " and ", _K.Z3_OP_OR: " or ", _K.Z3_OP_ADD: " + ", _K.Z3_OP_MUL: " * ",
}
_BINARY: Final = {
    _K.Z3_OP_EQ: "==", _K.Z3_OP_LE: "<=", _K.Z3_OP_LT: "<", _K.Z3_OP_GE: ">=",
    _K.Z3_OP_GT: ">", _K.Z3_OP_SUB: "-", _K.Z3_OP_IFF: "==", _K.Z3_OP_XOR: "!=",
}
_OPS: Final = frozenset({*_INFIX, *_BINARY, _K.Z3_OP_NOT, _K.Z3_OP_IMPLIES, _K.Z3_OP_ITE,
                         _K.Z3_OP_DISTINCT, _K.Z3_OP_UMINUS, _K.Z3_OP_SELECT,
                         _K.Z3_OP_CONST_ARRAY, _K.Z3_OP_STORE, _K.Z3_OP_ANUM,
                         _K.Z3_OP_TRUE, _K.Z3_OP_FALSE, _K.Z3_OP_UNINTERPRETED})


def _get(m: Any, key: int) -> Any:
    """A map lookup (z3's Select) on an FMap."""
    for k, v in m.items:
        if k == key:
            return v
    return m.default


def _store(m: Any, key: int, value: Any) -> Any:
    return m.set(key, value)


def _const(default: Any) -> FMap:
    return FMap((), default)


class _Emitter:
    """Translates z3 expressions over named constants into one Python function's body."""

    def __init__(self, names: dict[str, str]) -> None:
        # constant name ("s.sb", "p.index") -> Python source reading it ("s.sb", "p_index")
        self.names = names
        self.read: set[str] = set()
        self.uses: dict[int, int] = {}
        self.lines: list[str] = []
        self.bound: dict[int, str] = {}

    def count(self, e: Any) -> None:
        """Count the parents of every compound subterm (the DAG's sharing)."""
        stack = [e]
        while stack:
            x = stack.pop()
            if z3.is_quantifier(x):
                raise NotCompilable("a quantifier")
            k = x.get_id()
            n = self.uses.get(k, 0)
            self.uses[k] = n + 1
            if n == 0:
                stack.extend(x.children())

    def expr(self, e: Any) -> str:
        k = e.get_id()
        got = self.bound.get(k)
        if got is not None:
            return got
        src = self._translate(e)
        if self.uses.get(k, 0) > 1 and e.num_args() > 0:
            name = f"v{len(self.bound)}"
            self.lines.append(f"    {name} = {src}")
            self.bound[k] = name
            return name
        return src

    def _translate(self, e: Any) -> str:
        kind = e.decl().kind()
        if kind not in _OPS:
            raise NotCompilable(f"operator {e.decl()}")
        if kind == _K.Z3_OP_ANUM:
            if not z3.is_int_value(e):
                raise NotCompilable(f"a non-integer numeral {e}")
            return str(e.as_long())
        if kind == _K.Z3_OP_TRUE:
            return "True"
        if kind == _K.Z3_OP_FALSE:
            return "False"
        if kind == _K.Z3_OP_UNINTERPRETED:
            if e.num_args() != 0:
                raise NotCompilable(f"a function {e.decl()}")
            name = e.decl().name()
            src = self.names.get(name)
            if src is None:
                raise NotCompilable(f"an unknown constant {name}")
            self.read.add(name)
            return src
        args = [self.expr(a) for a in e.children()]
        if kind in _INFIX:
            return "(" + _INFIX[kind].join(args) + ")"
        if kind in _BINARY:
            if len(args) != 2:
                raise NotCompilable(f"{e.decl()} of {len(args)} arguments")
            return f"({args[0]} {_BINARY[kind]} {args[1]})"
        if kind == _K.Z3_OP_NOT:
            return f"(not {args[0]})"
        if kind == _K.Z3_OP_IMPLIES:
            return f"((not {args[0]}) or {args[1]})"
        if kind == _K.Z3_OP_ITE:
            return f"({args[1]} if {args[0]} else {args[2]})"
        if kind == _K.Z3_OP_DISTINCT:
            if len(args) == 2:
                return f"({args[0]} != {args[1]})"
            return f"(len({{{', '.join(args)}}}) == {len(args)})"
        if kind == _K.Z3_OP_UMINUS:
            return f"(-{args[0]})"
        if kind == _K.Z3_OP_SELECT:
            return f"_get({args[0]}, {args[1]})"
        if kind == _K.Z3_OP_STORE:
            return f"_store({args[0]}, {args[1]}, {args[2]})"
        if kind == _K.Z3_OP_CONST_ARRAY:
            return f"_const({args[0]})"
        raise NotCompilable(f"operator {e.decl()}")  # pragma: no cover (all of _OPS above)


def _build(signature: str, body: list[str], result: str, extra: dict[str, Any],
           label: str) -> Callable[..., Any]:
    src = f"def _compiled({signature}):\n" + "\n".join(body) + f"\n    return {result}\n"
    env: dict[str, Any] = {"_get": _get, "_store": _store, "_const": _const, **_EMPTIES,
                           "_Scalars": Scalars, "_tnew": tuple.__new__, **extra}
    exec(compile(src, f"<compiled {label}>", "exec"), env)
    fn: Callable[..., Any] = env["_compiled"]
    fn.__doc__ = src
    return fn


def _state_names(prefix: str, var: str, scalars: bool = False) -> dict[str, str]:
    """How compiled code reads each field of the state in ``var``: an attribute of a
    ``ServerState``, or (``scalars``) an item of a ``Scalars`` tuple, whose maps are empty
    (the replay's canonical states: ``replay.canon``)."""
    if not scalars:
        return {f"{prefix}.{f}": f"{var}.{f}" for f in FIELDS}
    return {f"{prefix}.{f}": (f"_empty_{f}" if f in MAP_FIELDS else
                              f"{var}[{SCALAR_FIELDS.index(f)}]") for f in FIELDS}


# A canonical state (every map empty) as a tuple of its scalar fields in ``SCALAR_FIELDS``
# order, fields readable by name too: what the trace replay interns and the compiled spec
# reads. Tuples build, hash and compare in C; a ServerState is made from one on demand.
Scalars: Any = collections.namedtuple("Scalars", SCALAR_FIELDS)  # type: ignore[misc]
_EMPTIES: Final = {f"_empty_{f}": FMap((), d) for f, d in MAP_FIELDS.items()}


def to_scalars(s: ServerState) -> Any:
    """A canonical state's scalar fields (its maps must be empty)."""
    return Scalars._make([getattr(s, f) for f in SCALAR_FIELDS])


def from_scalars(t: Any) -> ServerState:
    """The ServerState of a ``Scalars`` tuple (every map empty)."""
    return ServerState(**t._asdict())


def _fields_read(read: Iterable[str], prefix: str) -> frozenset[str]:
    return frozenset(n.split(".", 1)[1] for n in read if n.startswith(prefix + "."))


@attrs.frozen
class CompiledPredicate:
    """A predicate over one server state (``fn(s)``), or over a step (``fn(pre, post)``),
    and the fields it reads (of the state, or of the pre- and post-state)."""

    name: str
    fn: Callable[..., bool]
    footprint: frozenset[str]
    pre_footprint: frozenset[str] = frozenset()


def _run_sym(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return f(*args, **kwargs)
    except NotCompilable:
        raise
    except Exception as e:  # a function that will not run on z3 terms
        raise NotCompilable(f"{type(e).__name__}: {e}") from e


def compile_invariant(inv: Invariant, scalars: bool = False) -> CompiledPredicate:
    """A per-server invariant that does not read its term, as ``fn(s)``: its predicate on
    the one-server system ``(s,)`` (how the replay checks it); ``scalars``: over a
    ``Scalars`` tuple."""
    if not inv.per_server or inv.uses_term:
        raise NotCompilable(f"{inv.name}: not a per-server invariant of one evaluation")
    s = symbolic_server("s")
    e = _as_expr(_run_sym(inv.pred, (s,), z3.Int("t")))
    em = _Emitter(_state_names("s", "s", scalars))
    em.count(e)
    result = em.expr(e)
    if "t" in em.read:
        raise NotCompilable(f"{inv.name} reads its term")
    return CompiledPredicate(inv.name, _build("s", em.lines, result, {}, inv.name),
                             _fields_read(em.read, "s"))


def compile_step_property(prop: StepProperty, scalars: bool = False) -> CompiledPredicate:
    """A step property that does not read its term, as ``fn(pre, post)``."""
    if prop.uses_term:
        raise NotCompilable(f"{prop.name} reads its term")
    pre, post = symbolic_server("a"), symbolic_server("b")
    e = _as_expr(_run_sym(prop.pred, pre, post, z3.Int("t")))
    em = _Emitter(_state_names("a", "a", scalars) | _state_names("b", "b", scalars))
    em.count(e)
    result = em.expr(e)
    return CompiledPredicate(prop.name, _build("a, b", em.lines, result, {}, prop.name),
                             _fields_read(em.read, "b"), _fields_read(em.read, "a"))


@attrs.frozen
class CompiledAction:
    """An action's guard and effect as plain functions of (state, parameters in the
    action's order). ``effect`` computes the scalar fields and leaves every map empty
    (the trace replay's canonical state: ``replay.canon``); ``guard_reads``: the fields the
    guard reads (the maps among them, if any, are empty in such a state)."""

    name: str
    guard: Callable[..., bool]
    effect: Callable[..., ServerState]
    guard_reads: frozenset[str]


def compile_action(action: Action, scalars: bool = False) -> CompiledAction:
    """The action's guard and its effect on the scalar fields (maps emptied); ``scalars``:
    over ``Scalars`` tuples (the effect returns one), else ``ServerState`` objects."""
    s = symbolic_server("s")
    params = _sym_params(action.params)
    names = _state_names("s", "s", scalars) | {f"p.{p}": f"p_{p}" for p in action.params}
    signature = ", ".join(["s", *(f"p_{p}" for p in action.params)])
    g = _as_expr(_run_sym(action.guard, s, **params))
    em = _Emitter(names)
    em.count(g)
    result = em.expr(g)
    guard = _build(signature, em.lines, result, {}, f"{action.name} guard")
    post = _run_sym(action.effect, s, **params)
    if not isinstance(post, ServerState):
        raise NotCompilable(f"{action.name}: the effect is not a state")
    values = [_as_expr(getattr(post, f)) for f in SCALAR_FIELDS]
    em2 = _Emitter(names)
    for v in values:
        em2.count(v)
    srcs = [em2.expr(v) for v in values]
    # Keyword construction through the class (attrs' __init__ checks nothing, so this is
    # the class's own constructor; maps take their defaults: empty).
    if scalars:
        call = "_tnew(_Scalars, (" + ", ".join(srcs) + ",))"
    else:
        call = "_State(" + ", ".join(
            [f"{f}={src}" for f, src in zip(SCALAR_FIELDS, srcs, strict=True)]
            + [f"{f}=_empty_{f}" for f in MAP_FIELDS]) + ")"
    effect = _build(signature, em2.lines, call, {"_State": ServerState},
                    f"{action.name} effect")
    return CompiledAction(action.name, guard, effect, _fields_read(em.read, "s"))


def compile_guard(action: Action) -> CompiledPredicate:
    """The action's local guard alone, as ``fn(s, *parameters in the action's order)`` over
    ``ServerState`` objects, maps included (a ``Select`` is an ``FMap`` lookup), and the
    fields of ``s`` it reads: the explorer's guard (its effects stay interpreted, maps and
    all), whose verdicts it caches on that footprint."""
    s = symbolic_server("s")
    params = _sym_params(action.params)
    names = _state_names("s", "s") | {f"p.{p}": f"p_{p}" for p in action.params}
    signature = ", ".join(["s", *(f"p_{p}" for p in action.params)])
    g = _as_expr(_run_sym(action.guard, s, **params))
    em = _Emitter(names)
    em.count(g)
    result = em.expr(g)
    return CompiledPredicate(action.name, _build(signature, em.lines, result, {},
                                                 f"{action.name} guard"),
                             _fields_read(em.read, "s"))


def compile_all(preds: list[tuple[Callable[..., Any], tuple[Any, ...]]], signature: str,
                names: dict[str, str], label: str) -> Callable[..., bool]:
    """The conjunction of several predicates as one function (shared subterms computed
    once): the fast "everything holds" check before the one-by-one verdicts."""
    terms = [_as_expr(_run_sym(p, *args)) for p, args in preds]
    e = z3.And(*terms) if terms else z3.BoolVal(True)
    em = _Emitter(names)
    em.count(e)
    result = em.expr(e)
    return _build(signature, em.lines, result, {}, label)


# Compiled functions, by the spec function they come from (a Replayer per Spark task, per
# test, per mutant: each spec function is compiled once per process). None: not compilable.
_ACTIONS: dict[tuple[Any, ...], CompiledAction | None] = {}
_INVARIANTS: dict[Any, CompiledPredicate | None] = {}
_STEPS: dict[Any, CompiledPredicate | None] = {}
_ALL: dict[tuple[Any, ...], Callable[..., bool] | None] = {}


def cached_action(action: Action, scalars: bool = False) -> CompiledAction | None:
    key = (action.name, action.guard, action.effect, action.params, scalars)
    if key not in _ACTIONS:
        try:
            _ACTIONS[key] = compile_action(action, scalars)
        except NotCompilable:
            _ACTIONS[key] = None
    return _ACTIONS[key]


_GUARDS: dict[tuple[Any, ...], CompiledPredicate | None] = {}


def cached_guard(action: Action) -> CompiledPredicate | None:
    """``compile_guard``, once per guard function and parameter list (None: not
    compilable, keep the interpreted guard)."""
    key = (action.guard, action.params)
    if key not in _GUARDS:
        try:
            _GUARDS[key] = compile_guard(action)
        except NotCompilable:
            _GUARDS[key] = None
    return _GUARDS[key]


def cached_invariant(inv: Invariant, scalars: bool = False) -> CompiledPredicate | None:
    key = (inv.name, inv.pred, inv.per_server, inv.uses_term, scalars)
    if key not in _INVARIANTS:
        try:
            _INVARIANTS[key] = compile_invariant(inv, scalars)
        except NotCompilable:
            _INVARIANTS[key] = None
    return _INVARIANTS[key]


def cached_step_property(prop: StepProperty,
                         scalars: bool = False) -> CompiledPredicate | None:
    key = (prop.name, prop.pred, prop.uses_term, scalars)
    if key not in _STEPS:
        try:
            _STEPS[key] = compile_step_property(prop, scalars)
        except NotCompilable:
            _STEPS[key] = None
    return _STEPS[key]


def invariants_hold(invs: tuple[Invariant, ...],
                    scalars: bool = False) -> Callable[[Any], bool] | None:
    """``fn(s)``: every one of these per-server invariants holds for ``s`` (None when one
    of them is not compilable)."""
    key = ("inv", scalars, *[(i.name, i.pred) for i in invs])
    if key not in _ALL:
        if any(cached_invariant(i) is None for i in invs):
            _ALL[key] = None
        else:
            s = symbolic_server("s")
            t = z3.Int("t")
            _ALL[key] = compile_all([(i.pred, ((s,), t)) for i in invs], "s",
                                    _state_names("s", "s", scalars), "invariants")
    return _ALL[key]


def steps_hold(props: tuple[StepProperty, ...],
               scalars: bool = False) -> Callable[[Any, Any], bool] | None:
    """``fn(pre, post)``: every one of these step properties holds for the step."""
    key = ("step", scalars, *[(p.name, p.pred) for p in props])
    if key not in _ALL:
        if any(cached_step_property(p) is None for p in props):
            _ALL[key] = None
        else:
            a, b = symbolic_server("a"), symbolic_server("b")
            t = z3.Int("t")
            _ALL[key] = compile_all([(p.pred, (a, b, t)) for p in props], "a, b",
                                    _state_names("a", "a", scalars)
                                    | _state_names("b", "b", scalars), "step properties")
    return _ALL[key]


__all__ = ["SCALAR_FIELDS", "CompiledAction", "CompiledPredicate", "NotCompilable",
           "Scalars", "cached_action", "cached_guard", "cached_invariant",
           "cached_step_property", "compile_action", "compile_all", "compile_guard",
           "compile_invariant", "compile_step_property", "from_scalars", "invariants_hold",
           "steps_hold", "to_scalars"]
