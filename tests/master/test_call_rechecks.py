"""Every attempt of a master call re-checked (impl/master/calls.py "Every attempt
re-checked"), and writers' locations for RUNNING tablets only (impl/master/queries.py
"Locations for writers"): the two bugs the master simulation found, at the unit level."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import attrs
import msgspec
import trio
import trio.testing
from master_helpers import create, ok, process, replica, run, table, tablets

from revivify.impl.master.calls import (
    TabletServerCall,
    alter_schema,
    change_config,
    delete_tablet,
    still_called_for,
)
from revivify.impl.master.catalog import Catalog, TabletState
from revivify.impl.master.operations import plan_delete_table
from revivify.impl.master.queries import table_locations
from revivify.impl.master.server import MasterOptions, MasterServer
from revivify.impl.tserver import api as ts_api


def _created() -> tuple[Catalog, tuple[TabletServerCall, ...]]:
    catalog, _, calls = create(Catalog(), tablets=1)
    assert all(t.state is TabletState.CREATING for t in tablets(catalog))
    return catalog, calls


def _deleted(catalog: Catalog) -> Catalog:
    after, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
    return after


def _running(catalog: Catalog) -> Catalog:
    (tablet,) = tablets(catalog)
    after, _, _ = process(catalog, tablet.consensus.config.peers[0].uuid, replica(tablet))
    assert tablets(after)[0].state is TabletState.RUNNING
    return after


class TestStillCalledFor:
    """The catalog side of the re-check: which records still call for a call."""

    def test_a_create_only_while_its_tablet_is_creating_and_its_table_live(self) -> None:
        catalog, calls = _created()
        assert calls and all(still_called_for(catalog, c) for c in calls)
        assert not any(still_called_for(_deleted(catalog), c) for c in calls)
        assert not any(still_called_for(_running(catalog), c) for c in calls)

    def test_a_create_only_to_a_member(self) -> None:
        catalog, calls = _created()
        stranger = attrs.evolve(calls[0], dest="ts-99")
        assert not still_called_for(catalog, stranger)

    def test_a_delete_deleted_always(self) -> None:
        catalog, _ = _created()
        (tablet,) = tablets(catalog)
        call = delete_tablet("ts-1", tablet.tablet_id, "DELETED", None, "t")
        assert still_called_for(catalog, call) and still_called_for(_deleted(catalog), call)

    def test_a_tombstone_or_change_config_only_at_the_recorded_index(self) -> None:
        catalog = _running(_created()[0])
        (tablet,) = tablets(catalog)
        index = tablet.consensus.config.opid_index
        member = tablet.consensus.config.peers[0].uuid
        tomb = delete_tablet("ts-99", tablet.tablet_id, "TOMBSTONE", index, "t")
        assert still_called_for(catalog, tomb)
        assert not still_called_for(catalog, attrs.evolve(tomb, dest=member))
        stale = delete_tablet("ts-99", tablet.tablet_id, "TOMBSTONE", index - 1, "t")
        assert not still_called_for(catalog, stale)
        change = change_config(member, tablet.tablet_id, cast(Any, None), index, "t")
        assert still_called_for(catalog, change)
        assert not still_called_for(catalog, attrs.evolve(
            change, body=ts_api.ChangeConfig(tablet.tablet_id, cast(Any, None), index + 1)))
        assert not still_called_for(_deleted(catalog), change)

    def test_an_alter_only_at_the_tables_version(self) -> None:
        catalog = _running(_created()[0])
        (tablet,) = tablets(catalog)
        current = alter_schema("ts-1", tablet.tablet_id, table(catalog), "t")
        assert still_called_for(catalog, current)
        older = msgspec.structs.replace(table(catalog),
                                        schema_version=table(catalog).schema_version - 1)
        assert not still_called_for(catalog, alter_schema("ts-1", tablet.tablet_id, older,
                                                          "t"))
        assert not still_called_for(_deleted(catalog), current)


def _master(catalog: Catalog, term: int = 1) -> MasterServer:
    """A MasterServer that is not started: the ready leader of ``term`` over ``catalog``,
    its tracer a no-op (send_calls and _deliver need no more)."""
    master = MasterServer(MasterOptions(fs_root="/nonexistent", call_retry_seconds=30.0))
    master.ts = cast(Any, SimpleNamespace(tracer=SimpleNamespace(event=lambda *a: None)))
    master.catalog = catalog
    master.ready_term = term
    return master


def _run(scenario: Any) -> None:
    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))


class TestDelivery:
    """The shell side: _deliver re-checks before every attempt (server.py)."""

    def _record(self, master: MasterServer, attempts: list[tuple[float, str, str]],
                answer: bool = False, seconds: float = 0.0) -> None:
        async def try_call(call: TabletServerCall, address: str, *rest: Any) -> bool:
            attempts.append((trio.current_time(), call.method, call.dest))
            await trio.sleep(seconds)  # an attempt on the wire this long
            return answer

        master._try_call = try_call  # type: ignore[method-assign, assignment]
        master._address_for = lambda call: "ts:7050"  # type: ignore[method-assign]

    def test_a_create_is_not_retried_once_its_table_is_deleted(self) -> None:
        catalog, calls = _created()
        master = _master(catalog)
        attempts: list[tuple[float, str, str]] = []
        self._record(master, attempts)  # the server never answers: retried

        async def scenario() -> None:
            async with trio.open_nursery() as nursery:
                master._nursery = nursery
                master.send_calls(calls[:1], 1)
                await trio.sleep(5.0)
                assert attempts, "retried while CREATING"
                master.catalog = _deleted(catalog)  # the delete committed here
                before = len(attempts)
                await trio.sleep(60.0)
                assert len(attempts) == before, "a create attempt after the delete"
                assert not master._inflight

        _run(scenario)

    def test_a_create_is_not_retried_by_a_leader_of_another_term(self) -> None:
        catalog, calls = _created()
        master = _master(catalog)
        attempts: list[tuple[float, str, str]] = []
        self._record(master, attempts)

        async def scenario() -> None:
            async with trio.open_nursery() as nursery:
                master._nursery = nursery
                master.send_calls(calls[:1], 1)
                await trio.sleep(2.0)
                master.ready_term = 3  # deposed, then the ready leader of a later term
                before = len(attempts)
                await trio.sleep(60.0)
                assert len(attempts) == before

        _run(scenario)

    def test_no_attempt_while_the_snapshot_awaits_a_rebuild(self) -> None:
        catalog, calls = _created()
        master = _master(catalog)
        attempts: list[tuple[float, str, str]] = []
        self._record(master, attempts)

        async def scenario() -> None:
            async with trio.open_nursery() as nursery:
                master._nursery = nursery
                master._needs_rebuild = True
                master.send_calls(calls[:1], 1)
                await trio.sleep(5.0)
                assert not attempts and master._inflight, "waiting, not given up"
                master._needs_rebuild = False
                await trio.sleep(5.0)
                assert attempts
                nursery.cancel_scope.cancel()

        _run(scenario)

    def test_a_delete_waits_for_a_create_on_the_wire_to_the_same_replica(self) -> None:
        catalog, calls = _created()
        create_call = calls[0]
        master = _master(catalog)
        attempts: list[tuple[float, str, str]] = []
        # A fake attempt that keeps the real _try_call's on-wire bookkeeping: the create
        # is on the wire for 3 s, then answered.
        async def try_call(call: TabletServerCall, address: str, term: int) -> bool:
            attempts.append((trio.current_time(), call.method, call.dest))
            if isinstance(call.body, ts_api.CreateTablet):
                pair = (call.dest, call.tablet_id)
                ended = trio.Event()
                master._creates_on_wire[pair] = (1, ended)
                await trio.sleep(3.0)
                del master._creates_on_wire[pair]
                ended.set()
            return True

        master._try_call = try_call  # type: ignore[method-assign, assignment]
        master._address_for = lambda call: "ts:7050"  # type: ignore[method-assign]
        (tablet,) = tablets(catalog)
        delete = delete_tablet(create_call.dest, tablet.tablet_id, "DELETED", None, "t")

        async def scenario() -> None:
            async with trio.open_nursery() as nursery:
                master._nursery = nursery
                master.send_calls((create_call,), 1)
                await trio.sleep(1.0)  # the create is on the wire
                master.catalog = _deleted(catalog)
                master.send_calls((delete,), 1)
            assert [(m.split(".")[-1]) for _, m, _ in attempts] == [
                "CreateTablet", "DeleteTablet"]
            assert attempts[1][0] >= attempts[0][0] + 3.0, "the delete left after it"

        _run(scenario)


class TestWritersLocations:
    """GetTableLocations running_only: no replicas for a tablet that is not RUNNING."""

    def _locations(self, catalog: Catalog, running_only: bool) -> Any:
        found = table_locations(catalog, "t", address=lambda uuid: None,
                                live=lambda uuid: True, running_only=running_only)
        assert not isinstance(found, Exception)
        return found

    def test_a_creating_tablet_has_no_locations_for_writers(self) -> None:
        catalog, _ = _created()
        (located,) = self._locations(catalog, True).tablets
        assert located.state is TabletState.CREATING and located.replicas == ()

    def test_admin_views_still_see_a_creating_tablets_replicas(self) -> None:
        catalog, _ = _created()
        (located,) = self._locations(catalog, False).tablets
        assert located.state is TabletState.CREATING and len(located.replicas) == 3

    def test_a_running_tablet_has_its_locations(self) -> None:
        (located,) = self._locations(_running(_created()[0]), True).tablets
        assert located.state is TabletState.RUNNING and len(located.replicas) == 3


class TestCreateCarriesTheTerm:
    """A CreateTablet goes out with the releasing term (``master_term``), and the tablet
    server's TabletDeleted (a late create of a tablet it deleted for good) is moot."""

    def test_a_create_carries_the_term_and_tablet_deleted_is_moot(
            self, monkeypatch: Any) -> None:
        catalog, calls = _created()
        master = _master(catalog, term=4)
        master.ts = cast(Any, SimpleNamespace(tracer=cast(Any, master.ts).tracer, network=None,
                                              uuid="master-1"))
        sent: list[Any] = []

        class FakeClient:
            async def __aenter__(self) -> FakeClient:
                return self

            async def __aexit__(self, *exc: object) -> None:
                return None

            async def call(self, method: str, body: Any, response: type) -> Any:
                sent.append(body)
                raise ts_api.TabletDeleted(body.tablet_id)

        monkeypatch.setattr("revivify.impl.master.server.open_rpc_client",
                            lambda *a, **k: FakeClient())

        async def scenario() -> None:
            assert await master._try_call(calls[0], "127.0.0.1:7050", 4) is True

        _run(scenario)
        (body,) = sent
        assert isinstance(body, ts_api.CreateTablet) and body.master_term == 4
        assert body.tablet_id == calls[0].tablet_id
        planned = calls[0].body
        assert isinstance(planned, ts_api.CreateTablet) and planned.master_term is None  # unchanged
