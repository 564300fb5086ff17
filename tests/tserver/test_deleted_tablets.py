"""A master's late CreateTablet cannot bring back a tablet its server deleted (mode DELETED).

A CreateTablet attempt that timed out, or one from a leader master deposed without knowing
it, can reach a tablet server after the DeleteTablet DELETED of the same replica. Nothing is
undeleted and a tablet id is never reused, so the server remembers the ids it deleted for
good and refuses a master's create of one (TabletDeleted); before this guard such a create
made the replica afresh at term 0 on a server that had voted in a later term (the checker's
TermRegression). An operator's create (no ``master_term``) is still obeyed.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from lifecycle_script import DURABLES, FakeReplica

from revivify.checker.local import check_paths
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api
from revivify.impl.tserver.manager.core import (
    Create,
    Creating,
    Delete,
    DeletionEnded,
    Kind,
    LifecycleCore,
    Mode,
    Running,
    Slot,
    Stopped,
    Tombstoned,
)

READY = DURABLES["ready"]
TOMBSTONE = DURABLES["tombstone"]


def _core(state: object, memory: int = 8) -> LifecycleCore:
    core = LifecycleCore(deleted_memory=memory)
    core.slots["t1"] = Slot("t1", state)  # type: ignore[arg-type]
    return core


def _fully_deleted(core: LifecycleCore, tablet_id: str = "t1") -> None:
    """A DeleteTablet DELETED of a RUNNING replica, through its Stopped."""
    assert core.handle(tablet_id, Delete(Mode.DELETED)).refusal is None
    assert core.handle(tablet_id, Stopped(READY)).refusal is None
    assert core.state(tablet_id).kind is Kind.DELETING  # until its steps are durable
    assert core.handle(tablet_id, DeletionEnded()).refusal is None
    assert core.state(tablet_id).kind is Kind.ABSENT


class TestCore:
    def test_a_masters_create_after_a_full_delete_is_refused(self) -> None:
        core = _core(Running(FakeReplica(READY)))
        _fully_deleted(core)
        batch = core.handle("t1", Create(from_master=True))
        assert isinstance(batch.refusal, api.TabletDeleted)
        assert batch.effects == () and core.state("t1").kind is Kind.ABSENT
        assert "t1" in str(batch.refusal) and "stale" in str(batch.refusal)

    def test_a_tombstone_deleted_for_good_is_remembered_too(self) -> None:
        core = _core(Tombstoned(TOMBSTONE))
        assert core.handle("t1", Delete(Mode.DELETED)).refusal is None
        assert core.handle("t1", DeletionEnded()).refusal is None
        assert core.state("t1").kind is Kind.ABSENT
        assert isinstance(core.handle("t1", Create(from_master=True)).refusal,
                          api.TabletDeleted)

    def test_an_operators_create_after_a_full_delete_is_obeyed(self) -> None:
        core = _core(Running(FakeReplica(READY)))
        _fully_deleted(core)
        assert core.handle("t1", Create()).refusal is None
        assert isinstance(core.state("t1"), Creating)
        assert "t1" not in core.deleted  # made again on purpose: a master's create is fine

    def test_a_tombstone_is_not_a_deletion_for_good(self) -> None:
        core = _core(Running(FakeReplica(READY)))
        core.handle("t1", Delete(Mode.TOMBSTONE))
        core.handle("t1", Stopped(READY))
        core.handle("t1", DeletionEnded())
        assert core.state("t1").kind is Kind.TOMBSTONED and not core.deleted
        # the tombstone is still a replica here: the usual answer
        assert isinstance(core.handle("t1", Create(from_master=True)).refusal,
                          api.TabletAlreadyExists)

    def test_a_masters_create_of_a_tablet_never_deleted_here_is_obeyed(self) -> None:
        core = LifecycleCore()
        assert core.handle("t9", Create(from_master=True)).refusal is None
        assert core.state("t9").kind is Kind.CREATING

    def test_the_memory_is_bounded_oldest_first(self) -> None:
        core = LifecycleCore(deleted_memory=2)
        for t in ("a", "b", "c"):
            core.slots[t] = Slot(t, Running(FakeReplica(READY)))
            _fully_deleted(core, t)
        assert list(core.deleted) == ["b", "c"]
        assert core.handle("a", Create(from_master=True)).refusal is None  # forgotten
        assert isinstance(core.handle("c", Create(from_master=True)).refusal,
                          api.TabletDeleted)


def _run(fn, tmp_path) -> list[str]:  # type: ignore[no-untyped-def]
    """``fn`` on three in-process servers; the trace check's findings (kinds)."""
    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 3) as cluster:
            await cluster.start_all()
            await fn(cluster)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    report = check_paths([str(tmp_path / "traces")])
    assert report.events > 0
    return [v.kind for v in report.sorted() if v.severity != "warning"]


async def _create(cluster: Cluster, tablet: str, master_term: int | None) -> list[object]:
    """CreateTablet on every server; each server's answer (TabletCreated or the error)."""
    peers = cluster.peers()
    out: list[object] = []
    for i in range(3):
        try:
            out.append(await cluster.call(i, api.ADMIN_CREATE_TABLET,
                                          api.CreateTablet(tablet, peers, master_term),
                                          api.TabletCreated))
        except api.TabletDeleted as exc:
            out.append(exc)
    return out


async def _elect_then_delete(cluster: Cluster, tablet: str) -> None:
    await _create(cluster, tablet, master_term=1)
    await cluster.wait_for_leader(tablet)  # every replica votes in term >= 1
    for i in range(3):
        await cluster.call(i, api.ADMIN_DELETE_TABLET, api.DeleteTablet(tablet, "DELETED"),
                           api.Ack)


def test_a_late_master_create_is_refused_over_rpc(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def scenario(cluster: Cluster) -> None:
        await _elect_then_delete(cluster, "t1")
        answers = await _create(cluster, "t1", master_term=1)  # the late copy
        assert all(isinstance(a, api.TabletDeleted) for a in answers), answers
        for i in range(3):
            with pytest.raises(api.TabletNotFound):
                await cluster.state(i, "t1")

    assert _run(scenario, tmp_path) == []


def test_without_the_guard_the_checker_names_the_term_regression(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What the guard prevents: the same late create as an operator's (no master term) is
    obeyed, and the trace check finds the replica back at term 0."""
    async def scenario(cluster: Cluster) -> None:
        await _elect_then_delete(cluster, "t1")
        answers = await _create(cluster, "t1", master_term=None)
        assert all(isinstance(a, api.TabletCreated) for a in answers), answers

    assert "TermRegression" in _run(scenario, tmp_path)
