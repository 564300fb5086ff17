"""What a stopping server is still waiting for: a report of trio's task tree.

A clean stop cancels every task and waits for them; a task that does not end (a shielded
wait on something that will never come) would leave the process hanging with nothing to
show. ``report_slow_stop`` runs as a system task (outside the cancelled nursery) and logs,
after a grace period and then periodically, every task still alive with the innermost
frame it is suspended in: the user sees what the stop waits on, and a bug report carries
it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from types import FrameType
from typing import Any

import trio

logger = logging.getLogger(__name__)


def _innermost(coro: Any) -> FrameType | None:
    """The innermost frame of ours (not trio's) a coroutine chain is suspended in,
    following ``await`` down."""
    frame: FrameType | None = None
    seen = 0
    while coro is not None and seen < 200:  # bounded: a chain is never that deep
        seen += 1
        here = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if here is not None and f"{os.sep}trio{os.sep}" not in here.f_code.co_filename:
            frame = here
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frame


def _tasks(task: trio.lowlevel.Task) -> Iterator[trio.lowlevel.Task]:
    yield task
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            yield from _tasks(child)


def describe_tasks() -> list[str]:
    """One line per live task without children: its name and where it waits."""
    lines: list[str] = []
    root = trio.lowlevel.current_root_task()
    if root is None:
        return lines
    for task in _tasks(root):
        if any(n.child_tasks for n in task.child_nurseries) or task.name.startswith(
                ("<TrioToken", "<init>", f"{__name__}.")):
            continue  # a parent waits for its children (they are the news); trio's own
        frame = _innermost(task.coro)
        where = "?" if frame is None else \
            f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        lines.append(f"{task.name}: {where}")
    return sorted(lines)


def watch_stop(grace: float = 10.0, every: float = 30.0) -> trio.CancelScope:
    """Start reporting a slow stop (a system task: the stop's cancellation does not reach
    it); cancel the returned scope once the stop is done."""
    scope = trio.CancelScope()

    async def watch() -> None:
        with scope:
            await report_slow_stop(grace, every)

    trio.lowlevel.spawn_system_task(watch)
    return scope


async def report_slow_stop(grace: float = 10.0, every: float = 30.0) -> None:
    """Log what is still running once the stop took `grace` seconds, then every `every`
    seconds."""
    await trio.sleep(grace)
    waited = grace
    while True:
        tasks = [line for line in describe_tasks() if "report_slow_stop" not in line]
        logger.warning("the server has been stopping for %.1fs; still waiting for %d "
                       "task(s):\n  %s", waited, len(tasks), "\n  ".join(tasks))
        await trio.sleep(every)
        waited += every
