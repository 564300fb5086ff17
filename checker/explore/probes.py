"""Stand-ins that record what spec code reads (read-set memoisation) or prove that it reads
nothing (``TOP``): the explorer's caches are sound because of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from revivify.spec.actions import Action
from revivify.spec.model import ServerState, SystemState


class ReadProbe(tuple[ServerState, ...]):
    """A system tuple that records whether anything but ``self[own]`` (and ``len``) was read.

    Used to find out whether an enumerator or a system guard depends only on the acting
    server: if one call read nothing else, the same (server index, server state) gives the
    same answer, and it may be cached."""

    own: int
    touched: bool

    def __getitem__(self, k: Any) -> Any:
        if not (isinstance(k, int) and (k == self.own or k + len(self) == self.own)):
            self.touched = True
        return super().__getitem__(k)

    def __iter__(self) -> Iterator[ServerState]:
        self.touched = True
        return super().__iter__()

    def __contains__(self, x: object) -> bool:
        self.touched = True
        return super().__contains__(x)

    def __reversed__(self) -> Iterator[ServerState]:
        self.touched = True
        return reversed(tuple(super().__iter__()))

    def __eq__(self, other: object) -> bool:
        self.touched = True
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        self.touched = True
        return super().__ne__(other)

    def __hash__(self) -> int:
        self.touched = True
        return super().__hash__()

    def index(self, *args: Any) -> int:
        self.touched = True
        return super().index(*args)

    def count(self, x: Any) -> int:
        self.touched = True
        return super().count(x)


def probe(system: SystemState, own: int) -> ReadProbe:
    p = ReadProbe(system)
    p.own = own
    p.touched = False
    return p


class FieldProbe:
    """Another server's state, recording which fields are read from it (read-set
    memoisation of the enumerators that look at other servers)."""

    __slots__ = ("_reads", "_state")

    def __init__(self, state: ServerState, reads: set[str]) -> None:
        object.__setattr__(self, "_state", state)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name: str) -> Any:
        self._reads.add(name)
        return getattr(self._state, name)

    def __eq__(self, other: object) -> bool:
        raise Undecided

    def __hash__(self) -> int:
        raise Undecided


class Undecided(Exception):
    """A guard tried to look at a parameter it was given as ``TOP``."""


class Top:
    """An unknown parameter value (the top of a one-point abstract domain).

    Every operation on it yields ``TOP`` and every attempt to observe it (truth value,
    ``==`` coerced to bool, hashing, indexing, conversion to int) raises. So when a local guard
    called with every parameter ``TOP`` returns a falsy value without raising, its
    evaluation never depended on the parameters, and the guard is false for *every*
    parameter value: the (costly, system-wide) enumerator need not run for that server state.
    Spec code that branches on a parameter just raises, and nothing is skipped."""

    __slots__ = ()

    def __bool__(self) -> bool:
        raise Undecided

    def __hash__(self) -> int:
        raise Undecided

    def __index__(self) -> int:
        raise Undecided

    def __int__(self) -> int:
        raise Undecided

    def __iter__(self) -> Iterator[Any]:
        raise Undecided

    def __getitem__(self, k: Any) -> Any:
        raise Undecided

    def _op(self, *_: Any) -> Top:
        return self

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _op  # type: ignore[assignment]
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _op
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __neg__ = _op
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __invert__ = _op


TOP: Final = Top()


def never_enabled(action: Action, s: ServerState) -> bool:
    """True when the action's local guard is false for ``s`` whatever the parameters."""
    try:
        return not action.guard(s, **{name: TOP for name in action.params})
    except Exception:  # the guard looked at a parameter (or could not run on TOP)
        return False


__all__ = ["TOP", "FieldProbe", "ReadProbe", "Top", "Undecided", "never_enabled", "probe"]
