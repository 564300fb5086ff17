"""Symbolic server states: a ``ServerState`` whose every field is a fresh z3 constant.

The spec is written once, in the two-interpreter discipline of ``spec/logic.py``; calling
its guards, effects and invariants on a symbolic state yields them as z3 terms over these
constants. Three parts of the checker start there, and they build that state here: the
prover (``prove``: obligations over every state), the spec compiler (``compiled``: a
function's z3 term printed as Python, its footprint the constants it mentions) and shape
mode's proof (``logshape``: steps commute with a shift of the log positions, over states
whose maps are empty, as the replay keeps them).

A constant is named ``prefix.field``: two states built with distinct prefixes share no
constant, and a compiled function's footprint reads back as field names.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import z3

from revivify.spec.model import BOOL_FIELDS, MAP_FIELDS, ServerState

# Every field of a server state, in declaration order.
FIELDS: Final[tuple[str, ...]] = tuple(f.name for f in attrs.fields(ServerState))


def symbolic_server(prefix: str, empty_maps: bool = False) -> ServerState:
    """A server state whose fields are fresh z3 constants ``prefix.field``: an Int or a
    Bool, and for a map an Int -> Int or Int -> Bool Array (or, with ``empty_maps``, the
    constant array of the map's default: every map empty)."""
    values: dict[str, Any] = {}
    for name in FIELDS:
        full = f"{prefix}.{name}"
        if name in MAP_FIELDS:
            default = MAP_FIELDS[name]
            if empty_maps:
                values[name] = z3.K(z3.IntSort(), z3.BoolVal(default)
                                    if isinstance(default, bool) else z3.IntVal(default))
            else:
                rng = z3.BoolSort() if isinstance(default, bool) else z3.IntSort()
                values[name] = z3.Array(full, z3.IntSort(), rng)
        elif name in BOOL_FIELDS:
            values[name] = z3.Bool(full)
        else:
            values[name] = z3.Int(full)
    return ServerState(**values)


__all__ = ["FIELDS", "symbolic_server"]
