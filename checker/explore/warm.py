"""Imported by the parallel explorer's fork server (``parallel``: its preload), never by
hand: compiles the stock spec's guards, invariants and step properties into
``checker.compiled``'s caches, keyed by the spec's functions, so each worker forked from the
server starts with them (a mutant shares every row it does not change) instead of spending
a second or so compiling its own."""

from revivify.checker.explore.engine import Explorer
from revivify.spec.actions import Bounds
from revivify.spec.system import default_spec

Explorer(default_spec(), Bounds(), True, False)
