"""A DeleteTablet with mode DELETED and a StartTabletCopy that arrives while its last durable
steps (``delete_remove_cmeta``, ``delete_remove_superblock``) are still to run.

Suspected from reading, shown here: the lifecycle core used to make the slot ABSENT as soon
as it planned the deletion's steps, so a StartTabletCopy (expected DOES_NOT_EXIST) arriving
between two of those steps found "no replica here", was accepted (``stc_accept``) and began
a copy into a tablet whose cmeta and superblock were being removed under it: the copy's
COPYING superblock and merged cmeta interleaved with the removals (and the checker refused
the accept: the spec's server still holds the DELETED superblock, with a deletion in
flight). As Kudu's TSTabletManager keeps a deleting tablet in its transition map, the slot
now stays DELETING until the removals are durable: the copy is refused ALREADY_IN_PROGRESS
(untraced, see core.py ``_busy_copy``), and accepted once the deletion is done.

Deterministic: the in-process cluster on SimDisk with a mock clock; the deleting server's
lifecycle shell is parked right before the chosen step (a wrapper around its durable-step
lock), the copy request is sent, then the deletion is let go."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from revivify.checker.local import check_paths
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api
from revivify.impl.tserver.manager.shell import TabletManager

VICTIM = 2


def _park_before(manager: TabletManager, tablet_id: str, after_event: str,
                 parked: trio.Event, release: trio.Event) -> None:
    """Park ``manager``'s next durable step of ``tablet_id`` once ``after_event`` was
    traced: right before it takes the step lock, until ``release`` is set."""
    _park(manager, tablet_id, {after_event: (parked, release)})


def _park(manager: TabletManager, tablet_id: str,
          parks: dict[str, tuple[trio.Event, trio.Event]]) -> None:
    """``_park_before`` at several points: the key is the lifecycle event (traced by the
    shell) after which the tablet's next durable step waits."""
    traced: list[str] = []
    trace, durable_step = manager.trace, manager.durable_step

    def tracing(tid: str, fact: Any) -> None:
        if tid == tablet_id:
            traced.append(fact.event)
        trace(tid, fact)

    @contextlib.asynccontextmanager
    async def parking(tid: str) -> AsyncIterator[None]:
        if tid == tablet_id and traced and traced[-1] in parks:
            parked, release = parks[traced[-1]]
            if not release.is_set():
                parked.set()
                await release.wait()
        async with durable_step(tid):
            yield

    manager.trace = tracing  # type: ignore[method-assign,assignment]
    manager.durable_step = parking  # type: ignore[method-assign,assignment]


async def _stc(cluster: Cluster, dest: int, source: int, term: int,
               expected: str = "DOES_NOT_EXIST") -> object:
    """StartTabletCopy of t1 into ``dest`` from ``source``: Ack or the refusal."""
    s = cluster.servers[source]
    try:
        return await cluster.call(dest, api.ADMIN_START_TABLET_COPY, api.StartTabletCopy(
            "t1", s.uuid, term, s.uuid, s.address, expected), api.Ack)
    except api.CopyRefused as exc:
        return exc


async def led_elsewhere(cluster: Cluster) -> tuple[int, int]:
    """Tablet t1 created on the three servers and led by one that is not VICTIM: (the
    leader, its term)."""
    await cluster.start_all()
    await cluster.create_tablet("t1")
    lead = await cluster.wait_for_leader("t1")
    if lead == VICTIM:
        await cluster.call(VICTIM, api.ADMIN_STEP_DOWN,
                           api.StepDown("t1", cluster.uuids[0]), api.Ack)
        lead = await cluster.wait_for_leader("t1", among=[0, 1])
    return lead, (await cluster.state(lead, "t1")).term


def trace_findings(tmp_path: Path) -> tuple[int, list[str]]:
    """The trace check of the run: (events read, every finding that is not a warning)."""
    report = check_paths([str(tmp_path / "traces")])
    return report.events, [f"{v.kind} at {v.event}: {v.message[:160]}"
                           for v in report.sorted() if v.severity != "warning"]


async def _copy_once_allowed(cluster: Cluster, lead: int, term: int,
                             answers: dict[str, object],
                             expected: str = "DOES_NOT_EXIST") -> None:
    """Ask for the copy until it is accepted, then wait for the replica to run: the last
    refusal in ``answers["after"]``, ``answers["copied"]`` once it runs (30 s at most)."""
    with trio.move_on_after(30):
        while not isinstance(answer := await _stc(cluster, VICTIM, lead, term, expected),
                             api.Ack):
            answers["after"] = answer
            await trio.sleep(0.1)
        answers["after"] = answer
        while (await _state(cluster, VICTIM)) != "RUNNING":
            await trio.sleep(0.1)
        answers["copied"] = True


def _refused_during_then_copied(answers: dict[str, object], tmp_path: Path, window: str,
                                steps: str) -> None:
    """The copy asked inside the window was refused ALREADY_IN_PROGRESS, the one asked
    after ``steps`` ran, and the traces check clean."""
    during = answers["during"]
    events, findings = trace_findings(tmp_path)
    assert isinstance(during, api.CopyRefused) and during.reason == "ALREADY_IN_PROGRESS", (
        f"a copy was {'accepted' if not isinstance(during, Exception) else during!r} "
        f"{window} ({answers}; checker: {findings})")
    assert events > 0 and not findings, findings
    assert answers.get("copied"), f"no copy after {steps}: {answers}"


@pytest.mark.parametrize("after_event", ["delete_move_wal", "delete_remove_cmeta"])
def test_a_copy_cannot_interleave_with_a_full_deletes_last_steps(
        tmp_path: Path, after_event: str) -> None:
    answers: dict[str, object] = {}

    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 3, seed=5) as cluster:
            lead, term = await led_elsewhere(cluster)
            server = cluster.servers[VICTIM].server
            assert server is not None
            parked, release = trio.Event(), trio.Event()
            _park_before(server.tablets, "t1", after_event, parked, release)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cluster.call, VICTIM, api.ADMIN_DELETE_TABLET,
                                   api.DeleteTablet("t1", "DELETED"), api.Ack)
                with trio.fail_after(30):
                    await parked.wait()
                # The deletion's durable steps are not all done: the copy must wait.
                answers["during"] = await _stc(cluster, VICTIM, lead, term)
                release.set()
            # The deletion done, the tablet does not exist here: a copy is accepted.
            await _copy_once_allowed(cluster, lead, term, answers)
            answers["final"] = await _state(cluster, VICTIM)
            for i in range(3):
                await cluster.stop(i)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    _refused_during_then_copied(answers, tmp_path, "in the middle of the full delete",
                                "the deletion")


async def _state(cluster: Cluster, i: int) -> str:
    try:
        return (await cluster.state(i, "t1")).state
    except api.TabletNotFound:
        return "ABSENT"


def test_a_copy_cannot_begin_while_an_aborted_copy_tombstones_itself(tmp_path: Path) -> None:
    """The same window after a copy ends before its commit point: the COPYING replica
    tombstones itself again (deletion steps 2-6 after ``copy_abort``). The slot used to be
    TOMBSTONED before those steps ran, so a new StartTabletCopy (expected DELETED) was
    accepted among them. The startup cases ROLL_FORWARD and COPYING_TO_DELETED run the same
    steps from the same kind of batch and now also stay DELETING until they are durable."""
    answers: dict[str, object] = {}

    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 3, seed=5) as cluster:
            lead, term = await led_elsewhere(cluster)
            await cluster.call(VICTIM, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"),
                               api.Ack)
            server = cluster.servers[VICTIM].server
            assert server is not None
            in_copy, abort = (trio.Event(), trio.Event()), (trio.Event(), trio.Event())
            _park(server.tablets, "t1", {"copy_merge_cmeta": in_copy, "copy_abort": abort})
            assert isinstance(await _stc(cluster, VICTIM, lead, term, "DELETED"), api.Ack)
            with trio.fail_after(30):
                await in_copy[0].wait()  # the copy is parked before its WAL step
                await cluster.call(VICTIM, api.ADMIN_CANCEL_COPY, api.TabletRef("t1"),
                                   api.Ack)
                await abort[0].wait()  # copy_abort traced, the tombstone's steps to come
            answers["during"] = await _stc(cluster, VICTIM, lead, term, "DELETED")
            in_copy[1].set()
            abort[1].set()
            await _copy_once_allowed(cluster, lead, term, answers, "DELETED")
            for i in range(3):
                await cluster.stop(i)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    _refused_during_then_copied(answers, tmp_path, "while the aborted copy tombstoned itself",
                                "the tombstoning")
