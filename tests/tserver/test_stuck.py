"""A slow stop names what it waits for (impl/tserver/stuck.py)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from revivify.impl.tserver.stuck import describe_tasks, watch_stop


async def _stuck_forever(release: trio.Event) -> None:
    with trio.CancelScope(shield=True):
        await release.wait()


def test_a_stop_that_hangs_is_reported_with_the_waiting_line(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        release = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stuck_forever, release, name="stuck-task")
            await trio.testing.wait_all_tasks_blocked()
            assert any(line.startswith("stuck-task: ") and "_stuck_forever" in line
                       for line in describe_tasks())
            nursery.cancel_scope.cancel()
            watch = watch_stop(grace=0.05, every=10)
            with trio.CancelScope(shield=True):  # this body is cancelled too
                await trio.sleep(0.2)  # the task is cancelled, but shielded: still there
                release.set()
        watch.cancel()

    with caplog.at_level(logging.WARNING, logger="revivify.impl.tserver.stuck"):
        trio.run(main)
    (record,) = [r for r in caplog.records if "stopping for" in r.getMessage()]
    assert "stuck-task" in record.getMessage() and "_stuck_forever" in record.getMessage()


def test_a_quick_stop_reports_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        watch = watch_stop(grace=0.05)
        watch.cancel()
        await trio.sleep(0.2)

    with caplog.at_level(logging.WARNING, logger="revivify.impl.tserver.stuck"):
        trio.run(main)
    assert not [r for r in caplog.records if "stopping for" in r.getMessage()]
