"""A tablet has at most one durable step between its write and its trace event: a copy
step waits while the tablet's voter makes a vote durable (and the other way round), so a
crash loses at most one event per tablet, the crash frontier the checker allows."""

from __future__ import annotations

import trio
import trio.testing

from revivify.impl.tserver.lifecycle import DiskView
from revivify.impl.tserver.tablet_copy import _one_step


def test_a_copy_step_waits_for_the_tablets_step_in_flight() -> None:
    trio.run(_waits)


async def _waits() -> None:
    view = DiskView(data_state="COPYING")
    order: list[str] = []

    async def step() -> str:
        order.append("copy step durable and traced")
        return "done"

    async with trio.open_nursery() as nursery, view.step_lock:  # a vote being made durable
        result: list[str] = []

        async def run() -> None:
            result.append(await _one_step(view, step))

        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []  # the copy step waits
        order.append("vote durable and traced")
    assert order == ["vote durable and traced", "copy step durable and traced"]
    assert result == ["done"]


def test_other_tablets_do_not_wait() -> None:
    trio.run(_independent)


async def _independent() -> None:
    a, b = DiskView(data_state="COPYING"), DiskView(data_state="COPYING")

    async def step() -> int:
        return 1

    async with a.step_lock:
        with trio.fail_after(5):
            assert await _one_step(b, step) == 1
