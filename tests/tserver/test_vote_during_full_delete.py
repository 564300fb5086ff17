"""A tombstone's vote in flight when a DeleteTablet DELETED arrives.

The voter makes a vote durable under the tablet's step lock: the cmeta written and fsync'd,
then the lifecycle core records it (``vote_recorded``), then the fact is traced. The
DeleteTablet used to step the lifecycle core from TOMBSTONED to DELETING at once, without
that lock, so a vote whose cmeta write was in flight came back to a DELETING slot, which has
no row for a recorded vote: a LifecycleProtocolError in the voter, which took the whole
server down. The deletion is now stepped into the core under the step lock: the vote in
flight is recorded and traced first, then the tablet is deleted (its removals see the
voted cmeta), and the trace checks clean.

Deterministic: the in-process cluster on SimDisk with a mock clock; the tombstone's vote is
parked inside its durable step (lock held, before the cmeta write) while the deletion is
asked."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import trio
import trio.testing
from test_full_delete_window import VICTIM, led_elsewhere, trace_findings

from revivify.impl.testing.cluster import open_cluster
from revivify.impl.tserver import api
from revivify.impl.tserver.manager.core import Tombstoned
from revivify.impl.tserver.manager.shell import TabletManager

TABLET = "t1"  # (the tablet of led_elsewhere)


def _park_first_vote(manager: TabletManager, parked: trio.Event,
                     release: trio.Event) -> None:
    """The first durable step of the tombstoned tablet (a vote: nothing else is durable in
    a tombstone) waits inside the step lock until ``release``."""
    durable_step = manager.durable_step

    @contextlib.asynccontextmanager
    async def parking(tid: str) -> AsyncIterator[None]:
        async with durable_step(tid):
            tombstone = isinstance(manager.core.state(tid), Tombstoned)
            if tid == TABLET and tombstone and not parked.is_set():
                parked.set()
                await release.wait()
            yield

    manager.durable_step = parking  # type: ignore[method-assign,assignment]


def test_a_full_delete_waits_for_the_tombstones_vote_in_flight(tmp_path: Path) -> None:
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 3, seed=7) as cluster:
            lead, _ = await led_elsewhere(cluster)
            await cluster.call(VICTIM, api.ADMIN_DELETE_TABLET, api.DeleteTablet(TABLET),
                               api.Ack)  # a tombstone: it keeps voting
            server = cluster.servers[VICTIM].server
            assert server is not None
            parked, release = trio.Event(), trio.Event()
            _park_first_vote(server.tablets, parked, release)
            other = 1 - lead  # the other live voter takes over: it asks the tombstone too
            await cluster.call(lead, api.ADMIN_STEP_DOWN,
                               api.StepDown(TABLET, cluster.uuids[other]), api.Ack)
            with trio.fail_after(60):
                await parked.wait()
            deleted = trio.Event()

            async def delete() -> None:
                await cluster.call(VICTIM, api.ADMIN_DELETE_TABLET,
                                   api.DeleteTablet(TABLET, "DELETED"), api.Ack)
                deleted.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(delete)
                await trio.testing.wait_all_tasks_blocked()
                outcome["deleted while the vote was in flight"] = deleted.is_set()
                release.set()
                with trio.fail_after(60):
                    await deleted.wait()
            try:
                await cluster.state(VICTIM, TABLET)
                outcome["after"] = "still there"
            except api.TabletNotFound:
                outcome["after"] = "ABSENT"
            outcome["leader"] = await cluster.wait_for_leader(TABLET, among=[0, 1])
            for i in range(3):
                await cluster.stop(i)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome["deleted while the vote was in flight"] is False, outcome
    assert outcome["after"] == "ABSENT", outcome
    events, findings = trace_findings(tmp_path)
    assert events > 0 and not findings, findings
