"""The cyclic garbage collector, off while a search runs.

Why: the explorer allocates millions of container objects that live as long as the search
(the caches' tuples of Moves, plans, the levels' lists) and next to no cyclic garbage: at
``--max-term 1 --max-index 2`` a whole search leaves 254 unreachable objects behind, all
freed by one collection after it. With the collector on, every few hundred thousand
allocations a full collection walks every live container again, for nothing: 15-17% of one
process's CPU at those bounds, 11% of two workers'. A collection at the end of each level
followed by ``gc.freeze`` (so each object is looked at once) cost 3% of a worker's CPU and
found nothing worth it. So a search runs with the collector off, in one process
(``search.explore``) and in each worker (``parallel``) alike, so their CPU compares fairly;
the collector is turned back on afterwards if it was on, and its next collection frees what
cycles the search left.
"""

from __future__ import annotations

from revivify.checker.gcpause import paused

__all__ = ["paused"]
