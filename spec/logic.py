"""Logic helpers that work on Python values and on z3 terms alike.

Theory of operation
-------------------
The spec is written once. Its guards and effects are ordinary Python functions over a state
whose fields are *either* Python values (ints, bools, small immutable maps) *or* z3 terms
(Int, Bool, Array). The same function is then:

* evaluated on concrete values by the trace checker, the explorer and Hypothesis, and
* evaluated on z3 terms by the prover, which yields a symbolic guard (a BoolRef) and a
  symbolic successor state (fields are z3 expressions).

For that to work, spec code obeys three rules (the "two-interpreter discipline"):

1. Never branch with ``if`` on a state field or parameter. Use :func:`ite`.
2. Never use ``and`` / ``or`` / ``not`` on state fields. Use :func:`all_`, :func:`any_`,
   :func:`not_`, :func:`implies`.
3. Compare with :func:`eq` / :func:`ne` (``==`` on attrs values would compare whole objects)
   and read or write maps with :func:`get` / :func:`put`.

Ordering (``<``, ``<=``) and arithmetic (``+``) already work on both kinds of value.

Maps: on the concrete side a map is a :class:`FMap` (an immutable sorted tuple of pairs with
a default, hashable so that states can be stored in sets); on the z3 side it is an Array.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, TypeAlias

import z3

# A value as spec code sees it: a Python scalar or a z3 expression. Spec code is typed with
# these aliases so that mypy checks the concrete shape while z3 terms flow through the same
# code at proof time.
Int: TypeAlias = Any
Bool: TypeAlias = Any


def is_sym(x: object) -> bool:
    """True when x is a z3 term (the prover is interpreting the spec)."""
    return isinstance(x, z3.ExprRef)


def _any_sym(xs: tuple[object, ...]) -> bool:
    return any(isinstance(x, z3.ExprRef) for x in xs)


# Fast paths. Every helper below first checks whether all its arguments are plain Python
# bools or ints (an exact ``type(x) is`` test, so no subclass or stand-in object such as the
# explorer's probes takes it) and then computes the concrete answer directly; any other
# argument (a z3 term, a map, anything else) takes the general path, which is unchanged, so
# the z3 interpretation builds exactly the same terms as before.
_PLAIN: Final = frozenset({bool, int})


def all_(*xs: Bool) -> Bool:
    """Conjunction; short-circuits on concrete False."""
    for x in xs:
        if type(x) not in _PLAIN:
            break
    else:
        return all(xs)
    if _any_sym(xs):
        return z3.And(*[_to_z3_bool(x) for x in xs])
    return all(xs)


def any_(*xs: Bool) -> Bool:
    """Disjunction; short-circuits on concrete True."""
    for x in xs:
        if type(x) not in _PLAIN:
            break
    else:
        return any(xs)
    if _any_sym(xs):
        return z3.Or(*[_to_z3_bool(x) for x in xs])
    return any(xs)


def not_(x: Bool) -> Bool:
    if x is True:
        return False
    if x is False:
        return True
    if is_sym(x):
        return z3.Not(x)
    return not x


def implies(a: Bool, b: Bool) -> Bool:
    if type(a) in _PLAIN and type(b) in _PLAIN:
        return (not a) or bool(b)
    if is_sym(a) or is_sym(b):
        return z3.Implies(_to_z3_bool(a), _to_z3_bool(b))
    return (not a) or bool(b)


def ite(cond: Bool, then: Any, other: Any) -> Any:
    """If-then-else as an expression: the only way spec code chooses between values."""
    if type(cond) in _PLAIN and type(then) in _PLAIN and type(other) in _PLAIN:
        return then if cond else other
    if is_sym(cond) or is_sym(then) or is_sym(other):
        if isinstance(then, FMap) or isinstance(other, FMap):
            raise TypeError("ite over maps needs both sides symbolic (z3 Arrays)")
        return z3.If(_to_z3_bool(cond), _lift(then, other), _lift(other, then))
    return then if cond else other


def eq(a: Any, b: Any) -> Bool:
    if type(a) in _PLAIN and type(b) in _PLAIN:
        return a == b
    if is_sym(a) or is_sym(b):
        return _lift(a, b) == _lift(b, a)
    return bool(a == b)


def ne(a: Any, b: Any) -> Bool:
    if type(a) in _PLAIN and type(b) in _PLAIN:
        return a != b
    return not_(eq(a, b))


def max_(a: Int, b: Int) -> Int:
    return ite(a >= b, a, b)


def member(x: Int, values: tuple[int, ...]) -> Bool:
    """x is one of the listed constants."""
    if type(x) in _PLAIN:
        for v in values:
            if type(v) not in _PLAIN:
                break
        else:
            return x in values
    return any_(*(eq(x, v) for v in values))


def count(*conds: Bool) -> Int:
    """How many of the conditions hold (an Int term when any is symbolic)."""
    for c in conds:
        if type(c) not in _PLAIN:
            break
    else:
        return sum(1 for c in conds if c)
    if _any_sym(conds):
        return z3.Sum(*[z3.If(_to_z3_bool(c), 1, 0) for c in conds])
    return sum(1 for c in conds if c)


def opid_ge(a_term: Int, a_index: Int, b_term: Int, b_index: Int) -> Bool:
    """OpId (a_term, a_index) >= (b_term, b_index) in Raft's log order (term first)."""
    if (type(a_term) in _PLAIN and type(a_index) in _PLAIN and type(b_term) in _PLAIN
            and type(b_index) in _PLAIN):
        return a_term > b_term or (a_term == b_term and a_index >= b_index)
    return any_(a_term > b_term, all_(eq(a_term, b_term), a_index >= b_index))


def _to_z3_bool(x: Any) -> Any:
    if isinstance(x, bool):
        return z3.BoolVal(x)
    return x


def _lift(x: Any, like: Any) -> Any:
    """Turn a Python constant into a z3 value of the same sort as `like`."""
    if is_sym(x):
        return x
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, int):
        return z3.IntVal(x)
    return x


# ---------------------------------------------------------------------------------------
# Maps: FMap on the concrete side, z3 Array on the symbolic side.


class FMap:
    """An immutable, hashable map with a default value, for ghost histories.

    Stored as a sorted tuple of (key, value) pairs that excludes default-valued keys, so two
    maps with the same contents are equal and hash alike (states are deduplicated in sets).
    """

    __slots__ = ("_default", "_hash", "items")

    def __init__(self, items: tuple[tuple[int, Any], ...] = (), default: Any = None) -> None:
        self.items = items
        self._default = default
        self._hash = hash((items, default))

    @property
    def default(self) -> Any:
        return self._default

    def __getitem__(self, key: int) -> Any:
        for k, v in self.items:
            if k == key:
                return v
        return self._default

    def set(self, key: int, value: Any) -> FMap:
        kept = [(k, v) for k, v in self.items if k != key]
        if value != self._default:
            kept.append((key, value))
        kept.sort()
        return FMap(tuple(kept), self._default)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FMap)
            and self.items == other.items
            and self._default == other._default
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in self.items) + "}"


def get(m: Any, key: Int) -> Any:
    """m[key]: FMap lookup, or z3 Select."""
    if is_sym(m):
        return z3.Select(m, _lift(key, z3.IntVal(0)))
    if is_sym(key):
        raise TypeError("symbolic key into a concrete map")
    return m[key]


def put(m: Any, key: Int, value: Any) -> Any:
    """m with m[key] = value: FMap.set, or z3 Store."""
    if is_sym(m):
        return z3.Store(m, _lift(key, z3.IntVal(0)), _lift(value, z3.IntVal(0)))
    if is_sym(key) or is_sym(value):
        raise TypeError("symbolic key or value into a concrete map")
    return m.set(key, value)


def put_if(cond: Bool, m: Any, key: Int, value: Any) -> Any:
    """m with m[key] = value when cond holds, else m unchanged (maps cannot go through ite
    on the concrete side, so conditional stores get their own helper)."""
    if is_sym(m):
        return z3.If(_to_z3_bool(cond), put(m, key, value), m)
    if is_sym(cond):
        raise TypeError("symbolic condition over a concrete map")
    return put(m, key, value) if cond else m


def empty_map(default: Any) -> Any:
    """An empty concrete map (the symbolic side builds its Arrays in the prover)."""
    return FMap((), default)
