"""A tablet has at most one durable step between its write and its trace event: a copy
step waits while the tablet's voter makes a vote durable (and the other way round), so a
crash loses at most one event per tablet, the crash frontier the checker allows."""

from __future__ import annotations

import types

import trio
import trio.testing

from revivify.impl.tserver.manager.shell import TabletManager


def _manager() -> TabletManager:
    return TabletManager(types.SimpleNamespace())  # type: ignore[arg-type]


def test_a_copy_step_waits_for_the_tablets_step_in_flight() -> None:
    trio.run(_waits)


async def _waits() -> None:
    manager = _manager()
    order: list[str] = []

    async def copy_step() -> None:
        async with manager.step_lock("t1"):
            order.append("copy step durable and traced")

    async with trio.open_nursery() as nursery, manager.step_lock("t1"):  # a vote in flight
        nursery.start_soon(copy_step)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []  # the copy step waits
        order.append("vote durable and traced")
    assert order == ["vote durable and traced", "copy step durable and traced"]


def test_other_tablets_do_not_wait() -> None:
    trio.run(_independent)


async def _independent() -> None:
    manager = _manager()
    async with manager.step_lock("a"):
        with trio.fail_after(5):
            async with manager.step_lock("b"):
                pass


def test_a_durable_step_is_not_separated_from_its_event_by_a_cancellation() -> None:
    """``durable_step``: a step begun finishes (write and event) though its task is
    cancelled meanwhile; waiting for the lock is cancellable, the step is not."""
    trio.run(_shielded)


async def _shielded() -> None:
    manager = _manager()
    order: list[str] = []

    async def step() -> None:
        async with manager.durable_step("t1"):
            order.append("written")
            await trio.sleep(0.05)  # the fsync
            order.append("traced")

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(step)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    assert order == ["written", "traced"]

    # A step in flight (the lock held): one waiting for it is cancellable.
    async with manager.step_lock("t1"), trio.open_nursery() as nursery:
        nursery.start_soon(step)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert order == ["written", "traced"]  # the waiting step never began
