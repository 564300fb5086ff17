"""The compiled spec (checker/compiled.py) is the spec: on every state, every guard, effect,
invariant and step property gives what the interpreted spec gives, for the real spec and
for every mutant, over ServerState objects and over Scalars tuples; a footprint names every
field its invariant reads."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from revivify.checker.compiled import (
    SCALAR_FIELDS,
    NotCompilable,
    cached_action,
    cached_guard,
    cached_invariant,
    cached_step_property,
    from_scalars,
    invariants_hold,
    steps_hold,
    to_scalars,
)
from revivify.checker.replay import LOCAL_INVARIANTS, LOCAL_STEP_PROPERTIES, canon
from revivify.spec import Spec, default_spec
from revivify.spec.actions import MAP_PARAMS
from revivify.spec.invariants import check_state, check_step
from revivify.spec.logic import FMap
from revivify.spec.model import BOOL_FIELDS, MAP_FIELDS, ServerState
from revivify.spec.mutants import MUTANTS

SPEC = default_spec()
SPECS: dict[str, Spec] = {"real": SPEC} | {name: m.build(3) for name, m in MUTANTS.items()}
# The real spec's functions are most of every mutant's: a mutant is tried on the rows it
# changes only.

ints = st.integers(min_value=-1, max_value=4)


@st.composite
def states(draw: Any, maps: bool = False) -> ServerState:
    """A server state with small field values (the edges of every comparison the spec
    makes: -1 NO_VOTE, 0 none, the enumerations' codes), maps empty or small."""
    values: dict[str, Any] = {}
    for f in SCALAR_FIELDS:
        values[f] = draw(st.booleans()) if f in BOOL_FIELDS else draw(ints)
    if maps:
        for f, default in MAP_FIELDS.items():
            vals = st.booleans() if isinstance(default, bool) else ints
            items = draw(st.dictionaries(st.integers(0, 3), vals, max_size=3))
            m = FMap((), default)
            for k, v in items.items():
                m = m.set(k, v)
            values[f] = m
    return ServerState(**values)


def _params(draw: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {p: (FMap((), 0) if p in MAP_PARAMS else draw(ints)) for p in names}


def _compiled_actions(spec: Spec) -> list[Any]:
    return [a for a in spec.actions if cached_action(a) is not None]


def test_the_real_spec_compiles() -> None:
    """Every action and every local check of the real spec compiles (nothing falls back to
    the interpreter on the replay's hot path)."""
    for a in SPEC.actions:
        assert cached_action(a) is not None, a.name
        assert cached_action(a, scalars=True) is not None, a.name
    local = tuple(i for i in SPEC.invariants if i.name in LOCAL_INVARIANTS)
    steps = tuple(p for p in SPEC.step_properties if p.name in LOCAL_STEP_PROPERTIES)
    assert invariants_hold(local, scalars=True) is not None
    assert steps_hold(steps, scalars=True) is not None


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_actions_agree(data: Any) -> None:
    """Guard and effect (maps emptied: ``canon``), compiled and interpreted, on states
    with empty maps (the replay's) over both layouts."""
    _actions_agree("real", data)


@pytest.mark.parametrize("name", sorted(MUTANTS))
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutant_actions_agree(name: str, data: Any) -> None:
    """The same for the rows each mutant changes."""
    _actions_agree(name, data)


def _actions_agree(name: str, data: Any) -> None:
    spec = SPECS[name]
    s = canon(data.draw(states()))
    t = to_scalars(s)
    changed = [a for a in _compiled_actions(spec) if name == "real" or a not in SPEC.actions]
    for a in changed:
        def params(_: None, a: Any = a) -> st.SearchStrategy[dict[str, Any]]:
            return st.fixed_dictionaries(
                {q: (st.just(FMap((), 0)) if q in MAP_PARAMS else ints) for q in a.params})

        p = data.draw(st.builds(lambda: None).flatmap(params))
        args = [p[q] for q in a.params]
        obj, tup = cached_action(a), cached_action(a, scalars=True)
        assert obj is not None and tup is not None
        want_guard = bool(a.guard(s, **p))
        assert bool(obj.guard(s, *args)) == want_guard, a.name
        assert bool(tup.guard(t, *args)) == want_guard, a.name
        try:
            want = canon(a.effect(s, **p))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        assert obj.effect(s, *args) == want, a.name
        assert from_scalars(tup.effect(t, *args)) == want, a.name


@settings(max_examples=300, deadline=None, derandomize=True)
@given(pre=states(maps=True), post=states(maps=True))
def test_checks_agree(pre: ServerState, post: ServerState) -> None:
    """Every invariant and step property that compiles gives the interpreted verdict (on
    states with maps, for the ServerState layout; maps emptied for the Scalars one)."""
    _checks_agree("real", pre, post)


@pytest.mark.parametrize("name", sorted(MUTANTS))
@settings(max_examples=15, deadline=None, derandomize=True)
@given(pre=states(maps=True), post=states(maps=True))
def test_mutant_checks_agree(name: str, pre: ServerState, post: ServerState) -> None:
    """The same for the invariants and step properties each mutant changes."""
    _checks_agree(name, pre, post)


def _checks_agree(name: str, pre: ServerState, post: ServerState) -> None:
    spec = SPECS[name]
    for inv in spec.invariants:
        if name != "real" and inv in SPEC.invariants:
            continue
        c = cached_invariant(inv)
        if c is None:
            continue
        assert bool(c.fn(post)) == (not check_state([inv], (post,))), inv.name
        e = canon(post)
        ct = cached_invariant(inv, scalars=True)
        assert ct is not None
        assert bool(ct.fn(to_scalars(e))) == (not check_state([inv], (e,))), inv.name
    for prop in spec.step_properties:
        if name != "real" and prop in SPEC.step_properties:
            continue
        c = cached_step_property(prop)
        if c is None:
            continue
        assert bool(c.fn(pre, post)) == (not check_step([prop], pre, post)), prop.name


@settings(max_examples=200, deadline=None, derandomize=True)
@given(s=states(maps=True), other=states(maps=True))
def test_footprints_are_what_invariants_read(s: ServerState, other: ServerState) -> None:
    """An invariant's footprint is every field it reads: two states that agree on it get
    the same verdict from the interpreted spec (so the replay may skip an invariant whose
    fields a step left alone)."""
    for inv in SPEC.invariants:
        c = cached_invariant(inv)
        if c is None:
            continue
        mixed = attrs.evolve(other, **{f: getattr(s, f) for f in c.footprint})
        assert check_state([inv], (s,)) == check_state([inv], (mixed,)), inv.name


def _map_params(draw: Any, a: Any) -> dict[str, Any]:
    """Parameters for an action, maps (``entries``, ``remote_log``) small but not empty."""
    out: dict[str, Any] = {}
    for q in a.params:
        if q in MAP_PARAMS:
            m = FMap((), 0)
            for k, v in draw(st.dictionaries(st.integers(0, 3), ints, max_size=3)).items():
                m = m.set(k, v)
            out[q] = m
        else:
            out[q] = draw(ints)
    return out


def _guards_agree(name: str, data: Any) -> None:
    spec = SPECS[name]
    s = data.draw(states(maps=True))
    other = data.draw(states(maps=True))
    for a in spec.actions:
        if name != "real" and a in SPEC.actions:
            continue
        c = cached_guard(a)
        if c is None:
            continue
        p = _map_params(data.draw, a)
        want = bool(a.guard(s, **p))
        assert bool(c.fn(s, *[p[q] for q in a.params])) == want, a.name
        # the footprint: a state that agrees with s on it gets the same verdict from the
        # interpreted guard (the explorer caches verdicts on it)
        mixed = attrs.evolve(other, **{f: getattr(s, f) for f in c.footprint})
        assert bool(a.guard(mixed, **p)) == want, a.name


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_explorer_guards_agree(data: Any) -> None:
    """The explorer's compiled guards (``compile_guard``: states with maps, map
    parameters) give the interpreted verdict, and a state's projection onto a guard's
    footprint decides it."""
    _guards_agree("real", data)


@pytest.mark.parametrize("name", sorted(MUTANTS))
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutant_explorer_guards_agree(name: str, data: Any) -> None:
    """The same for the rows each mutant changes."""
    _guards_agree(name, data)


def test_the_real_spec_guards_compile() -> None:
    """Every local guard of the real spec compiles for the explorer."""
    for a in SPEC.actions:
        assert cached_guard(a) is not None, a.name


def test_what_does_not_compile_says_so() -> None:
    """A function that will not run on z3 terms is NotCompilable, not a wrong function."""
    from revivify.checker.compiled import compile_invariant
    from revivify.spec.invariants import Invariant

    def branches(sys: Any, t: Any) -> Any:
        return sys[0].term if sys[0].up else 0  # an ``if`` on a state field

    with pytest.raises(NotCompilable):
        compile_invariant(Invariant("Branches", "", branches, per_server=True))
