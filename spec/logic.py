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

import itertools
from collections.abc import Iterator
from typing import Any, Final, TypeAlias

import z3

# A value as spec code sees it: a Python scalar or a z3 expression. Spec code is typed with
# these aliases so that mypy checks the concrete shape while z3 terms flow through the same
# code at proof time. ``Map``: an int-keyed map, an ``FMap`` on Python values or a z3 Array
# term (see "Maps" below).
Int: TypeAlias = Any
Bool: TypeAlias = Any
Map: TypeAlias = Any


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
    if type(m) is FMap and type(key) is int:
        for k, v in m.items:
            if k == key:
                return v
        return m._default
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


# ---------------------------------------------------------------------------------------
# Logs: maps from a log index to the term of the entry there (0: no entry).


def overwrite_range(m: Any, lo: Int, hi: Int, src: Any) -> Any:
    """A log written from index ``lo`` to ``hi``: ``m`` below ``lo``, ``src`` on lo..hi,
    and nothing (the default) above ``hi`` (a follower truncates what followed, a leader
    had nothing there). On z3 terms a ``Lambda`` over the index."""
    if is_sym(m) or is_sym(src) or is_sym(lo) or is_sym(hi):
        j = z3.Int("j_log")
        mm = _as_array(m)
        ss = _as_array(src)
        return z3.Lambda([j], z3.If(j < lo, z3.Select(mm, j),
                                    z3.If(j <= hi, z3.Select(ss, j), _default_of(mm))))
    items = tuple(sorted([(k, v) for k, v in m if k < lo]
                         + [(k, v) for k, v in src if lo <= k <= hi]))
    return FMap(tuple((k, v) for k, v in items if v != m.default), m.default)


def run_of(lo: int, hi: int, value: int, default: int = 0) -> FMap:
    """A concrete map holding ``value`` on lo..hi (a batch of entries of one term)."""
    return FMap(tuple((k, value) for k in range(lo, hi + 1) if value != default), default)


def forall_entries(m: Any, body: Any) -> Bool:
    """``body(index, value)`` for every key a map stores (a value other than its default):
    on a concrete map a loop over its items, on z3 terms a quantifier."""
    if type(m) is FMap:
        return all_(*[body(k, v) for k, v in m.items])
    j = z3.Int("j_entry")
    return z3.ForAll([j], z3.Implies(z3.Select(m, j) != 0,
                                     _to_z3_bool(body(j, z3.Select(m, j)))))


# When set (``unrolled_ranges``), a range over symbolic bounds is not a quantifier but the
# first few indices of it, and no longer: an under-approximation without quantifiers, for a
# solver that must find a model (a candidate counterexample, then confirmed concretely).
_UNROLL: list[int] = []


class unrolled_ranges:
    """``with unrolled_ranges(k):`` ``all_in_range`` over symbolic bounds covers at most
    ``k`` indices, written out (see ``_UNROLL``)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __enter__(self) -> None:
        _UNROLL.append(self.k)

    def __exit__(self, *exc: object) -> None:
        _UNROLL.pop()


def all_in_range(lo: Int, hi: Int, body: Any) -> Bool:
    """``body(j)`` for every index j in lo..hi (concrete bounds: a loop; else a z3
    quantifier, or its first indices under ``unrolled_ranges``)."""
    if type(lo) in _PLAIN and type(hi) in _PLAIN:
        return all_(*[body(j) for j in range(lo, hi + 1)])
    if _UNROLL:
        k = _UNROLL[-1]
        return z3.And(hi - lo < k, *[z3.Implies(lo + n <= hi, _to_z3_bool(body(lo + n)))
                                     for n in range(k)])
    j = z3.Int("j_range")
    return z3.ForAll([j], z3.Implies(z3.And(j >= lo, j <= hi), _to_z3_bool(body(j))))


def forall_index(maps: tuple[Any, ...], body: Any, extra: tuple[Int, ...] = ()) -> Bool:
    """``body(j)`` for every integer index j. Concretely the maps are constant outside their
    stored keys, so it is enough to try every stored key, the ``extra`` indices the body
    names, their neighbours, and one fresh index (which stands for all the others); on z3
    terms it is a quantifier."""
    if any(is_sym(m) for m in maps) or any(is_sym(x) for x in extra):
        j = z3.Int("j_all")
        return z3.ForAll([j], _to_z3_bool(body(j)))
    keys: set[int] = {0, 1}
    for m in maps:
        keys.update(k for k, _ in m)
    for x in extra:
        keys.update((x - 1, x, x + 1))
    keys.add(max(keys) + 1)
    return all(bool(body(j)) for j in sorted(keys))


def logs_match(a: Any, b: Any) -> Bool:
    """Raft's Log Matching for two logs: where both hold an entry of the same term at an
    index, they hold the same entries up to it."""
    if type(a) is FMap and type(b) is FMap:
        top = 0
        for k, v in a.items:
            if v != 0 and b[k] == v and k > top:
                top = k
        return all(a[k] == b[k] for k in range(1, top + 1))
    j, k = z3.Ints("j_match k_match")
    aa, bb = _as_array(a), _as_array(b)
    return z3.ForAll([j, k], z3.Implies(
        z3.And(z3.Select(aa, j) != 0, z3.Select(aa, j) == z3.Select(bb, j), k >= 1, k <= j),
        z3.Select(aa, k) == z3.Select(bb, k)))


def log_well_formed(m: Any, last_index: Int, last_term: Int, bounded: Bool,
                    term: Int) -> Bool:
    """A log holds entries (terms >= 1) exactly at 1..last_index, the last of term
    last_term, terms never decrease along it, and (when ``bounded``) none is above
    ``term``."""
    if (type(m) is FMap and type(last_index) is int and type(last_term) is int
            and type(bounded) is bool and type(term) is int):
        if last_index == 0:
            return last_term == 0 and len(m) == 0
        terms = [m[k] for k in range(1, last_index + 1)]
        return (len(m) == last_index and terms[-1] == last_term and terms[0] >= 1
                and all(x <= y for x, y in itertools.pairwise(terms))
                and (not bounded or terms[-1] <= term))
    j = z3.Int("j_shape")
    arr = _as_array(m)
    at = z3.Select(arr, j)
    return z3.And(
        z3.Implies(last_index == 0, last_term == 0),
        z3.Implies(last_index >= 1, z3.Select(arr, last_index) == last_term),
        z3.ForAll([j], z3.And(
            (z3.And(j >= 1, j <= last_index)) == (at != 0), at >= 0,
            z3.Implies(_to_z3_bool(bounded), at <= term),
            z3.Implies(z3.And(j >= 1, j < last_index), at <= z3.Select(arr, j + 1)))))


def map_eq(a: Any, b: Any) -> Bool:
    """Two maps are equal (FMap to FMap, or z3 Arrays, extensionally)."""
    if is_sym(a) or is_sym(b):
        return _as_array(a) == _as_array(b)
    return bool(a == b)


def ite_map(cond: Bool, then: Any, other: Any) -> Any:
    """If-then-else between two maps (concrete maps, or z3 Arrays)."""
    if is_sym(cond) or is_sym(then) or is_sym(other):
        return z3.If(_to_z3_bool(cond), _as_array(then), _as_array(other))
    return then if cond else other


def empty_map_sym(m: Any, default: Any) -> Any:
    """An empty map holding ``default`` everywhere, of the kind of ``m`` (concrete or z3)."""
    if is_sym(m):
        val = z3.BoolVal(default) if isinstance(default, bool) else z3.IntVal(default)
        return z3.K(z3.IntSort(), val)
    return FMap((), default)


def _as_array(m: Any) -> Any:
    if is_sym(m):
        return m
    arr = z3.K(z3.IntSort(), z3.IntVal(m.default))
    for k, v in m:
        arr = z3.Store(arr, k, v)
    return arr


def _default_of(arr: Any) -> Any:
    """The value a log holds where it has no entry (0, the default of every log map)."""
    return z3.IntVal(0)
