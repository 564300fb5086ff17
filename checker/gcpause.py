"""Python's cyclic garbage collector, paused for a block.

For work that builds millions of long-lived containers and next to no cyclic garbage (the
explorer's search, checker/explore/collector.py; the Spark driver's facts, checker/spark.py):
each full collection would walk every one of them again, for nothing. The collector is on
again after the block if it was before, and its next collection frees what cycles the block
left.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block (and on again after it, if it was)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


__all__ = ["paused"]
