"""The cyclic garbage collector, paused while a search runs.

Why: the explorer allocates millions of container objects that live as long as the search
(the caches' tuples of Moves, plans, the levels' lists), and almost no cyclic garbage (at
``--max-term 1 --max-index 2`` a whole search leaves 254 unreachable objects behind). With
the collector on, every few hundred thousand allocations a full collection walks all of
them again: 17% of one process's CPU at those bounds, 11% of two workers'. So a search runs
with the collector off; at the end of each level (``Paused.level_done``) one collection
looks at what the level allocated (and frees any cycles in it), then ``gc.freeze`` moves
the survivors out of every later collection's sight: the work is one look at each object,
the memory bounded as before. The single process and the parallel workers follow the same
policy, so their CPU compares fairly.

On leaving, the frozen objects are handed back to the collector (``gc.unfreeze``: they join
the oldest generation) and the collector is turned back on if it was. A caller's own frozen
objects, if it froze any, are unfrozen too.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


class Paused:
    """The handle ``paused`` yields: ``level_done`` at the end of each level."""

    def level_done(self) -> None:
        gc.collect()
        gc.freeze()


@contextmanager
def paused() -> Iterator[Paused]:
    """The collector off for the block, a collection at each ``level_done``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield Paused()
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


__all__ = ["Paused", "paused"]
