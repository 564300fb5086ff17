"""The rule every durable step of the tablet server keeps, written once.

A durable step is a write made durable (fsync'd) and then its trace event. The pair must
never be separated by a cancellation: a step made durable and not traced would be a step
the checker never hears of, although no crash happened (a clean stop promises the trace
lost nothing). So the pair runs shielded. Where several parts of one tablet can make steps
at once (the lifecycle shell's deletion steps, the tombstone's voter, a copy's download),
the pair also holds the tablet's step lock (``TabletManager.step_lock``): at most one
durable step of a tablet is between its write and its event, so a crash loses at most one
event of the tablet, the checker's crash frontier. Waiting for the lock is not shielded
(nothing is written yet), only the step.

A running replica's driver (replica.py) is its tablet's only durable writer while it runs
(the lifecycle writes nothing durable for a RUNNING slot: a deletion stops the replica
first), so it takes no lock: ``durable_step(None)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio


@contextlib.asynccontextmanager
async def durable_step(lock: trio.Lock | None) -> AsyncIterator[None]:
    """Hold ``lock`` (if any), then run the block shielded from cancellation: write, fsync
    and trace one step inside it."""
    if lock is None:
        with trio.CancelScope(shield=True):
            yield
        return
    async with lock:
        with trio.CancelScope(shield=True):
            yield


__all__ = ["durable_step"]
