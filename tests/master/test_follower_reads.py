"""Follower reads (KUDU-500; impl/master/queries.py "Follower reads"): the freshness rule on
its own, then masters and tablet servers in one process (MemoryNetwork, MockClock): a
follower serves within its bound, refuses once cut off from the leader longer than the
bound, and never shows a table the leader has not committed."""

from __future__ import annotations

from pathlib import Path

import trio
from test_master_sim import create, run, until

from revivify.impl.client import ClientOptions
from revivify.impl.client.errors import Rejected
from revivify.impl.client.master import open_master_client
from revivify.impl.master import api
from revivify.impl.master.queries import ANCHORS_KEPT, Freshness
from revivify.impl.rpc import RpcError
from revivify.impl.testing.mastercluster import SimMasterCluster


class TestFreshness:
    def test_never_anchored_is_unknown(self) -> None:
        assert Freshness().staleness(10.0, 5) is None

    def test_an_anchor_counts_once_its_index_is_applied(self) -> None:
        f = Freshness()
        f.anchor(asked_at=1.0, index=7, applied_index=5)
        assert f.staleness(3.0, 6) is None  # index 7 not applied yet
        assert f.staleness(3.0, 7) == 2.0

    def test_the_newest_applied_anchor_sets_the_age(self) -> None:
        f = Freshness()
        f.anchor(1.0, 3, applied_index=3)
        f.anchor(2.0, 9, applied_index=3)
        assert f.staleness(4.0, 3) == 3.0  # only the first is applied
        assert f.staleness(4.0, 9) == 2.0
        f.anchor(0.5, 1, applied_index=9)  # an older answer arriving late changes nothing
        assert f.staleness(4.0, 9) == 2.0

    def test_pending_anchors_are_bounded(self) -> None:
        f = Freshness()
        for k in range(3 * ANCHORS_KEPT):
            f.anchor(float(k), 100 + k, applied_index=0)
        assert len(f.pending) == ANCHORS_KEPT
        assert f.staleness(100.0, 1000) == 100.0 - (3 * ANCHORS_KEPT - 1)


async def tables_at(c: SimMasterCluster, i: int, freshness: float | None
                    ) -> api.TableList:
    return await c.call_master(i, api.MASTER_LIST_TABLES, api.ListTablesRequest(freshness),
                               api.TableList)


async def _anchored(c: SimMasterCluster, i: int, bound: float) -> bool:
    try:
        await tables_at(c, i, bound)
    except (api.StaleCatalog, api.ServiceUnavailable, RpcError, OSError):
        return False
    return True


def test_a_follower_serves_within_its_bound_and_refuses_once_cut_off(
        tmp_path: Path) -> None:
    bound = 2.0

    async def scenario(c: SimMasterCluster) -> None:
        leader = await c.ready_leader()
        follower = next(i for i in c.running() if i != leader)
        made = await create(c, leader, "fr1", 2, 3)
        acked_at = trio.current_time()
        # Without a bound a follower still refuses (seed 004): the leader answers.
        try:
            await tables_at(c, follower, None)
            raise AssertionError("a follower answered a read without a freshness bound")
        except api.MasterNotLeader as exc:
            assert exc.leader_uuid == c.masters[leader].master.uuid  # type: ignore[union-attr]
        await until(lambda: _anchored(c, follower, bound), "the follower anchored")
        got = await tables_at(c, follower, bound)
        served = got.served_by
        assert served is not None and not served.leader and served.staleness <= bound
        # Served within the bound: fr1, acknowledged before the anchor was asked, is there.
        assert acked_at <= trio.current_time() - served.staleness
        assert [t.name for t in got.tables] == ["fr1"]
        locs = await c.call_master(follower, api.MASTER_TABLE_LOCATIONS,
                                   api.TableLocationsRequest("fr1", bound),
                                   api.TableLocationsReply)
        assert sorted(t.tablet_id for t in locs.tablets) == sorted(made.tablet_ids)
        assert locs.served_by is not None and not locs.served_by.leader

        # Cut the follower off from every other master (not from the tablet servers).
        others = [m.host for m in c.masters if m.index != follower]
        c.net.partition([c.masters[follower].host], others)
        cut_at = trio.current_time()
        await create(c, leader, "fr2", 1, 3)  # committed by the majority, not seen there
        fr2_acked = trio.current_time()
        refused = None
        while refused is None:
            try:
                got = await tables_at(c, follower, bound)
            except api.StaleCatalog as exc:
                refused = exc
                break
            now = trio.current_time()
            assert got.served_by is not None and got.served_by.staleness <= bound
            # Never older than the bound: fr2 was acknowledged before now - bound => seen.
            assert now - bound < fr2_acked or "fr2" in {t.name for t in got.tables}
            await trio.sleep(0.1)
        # It refused within the bound (plus one wait for a read index) of being cut off.
        assert trio.current_time() - cut_at <= bound + 1.5, trio.current_time() - cut_at
        assert refused.bound_ms == 2000 and refused.staleness_ms > 2000
        assert "stale" in str(refused)
        # A larger bound is still met; the leader answers any bound.
        assert {t.name for t in (await tables_at(c, leader, 0.0)).tables} == {"fr1", "fr2"}
        c.net.heal()
        await until(lambda: _anchored(c, follower, bound), "the follower anchored again")
        names = {t.name for t in (await tables_at(c, follower, bound)).tables}
        assert names == {"fr1", "fr2"}

    run(tmp_path, scenario)


def test_a_follower_never_shows_a_table_the_leader_has_not_committed(
        tmp_path: Path) -> None:
    """The leader cut off from both followers appends a CreateTable it cannot commit; no
    follower read ever shows that table, before or after a new leader takes over."""
    bound = 5.0

    async def scenario(c: SimMasterCluster) -> None:
        old = await c.ready_leader()
        await create(c, old, "kept", 1, 3)
        followers = [i for i in c.running() if i != old]
        for f in followers:
            await until(lambda f=f: _anchored(c, f, bound), "anchored")  # type: ignore[misc]
        c.net.partition([c.masters[old].host], [c.masters[f].host for f in followers])
        seen: set[str] = set()

        async def watch() -> None:
            while True:
                for i in [old, *followers]:
                    try:
                        got = await tables_at(c, i, bound)
                    except (api.StaleCatalog, api.MasterNotLeader, api.ServiceUnavailable,
                            RpcError, OSError):
                        continue
                    seen.update(t.name for t in got.tables)
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            try:
                await create(c, old, "lost", 1, 3)
                raise AssertionError("a write without a majority committed")
            except (api.CatalogWriteFailed, api.MasterNotLeader, api.ServiceUnavailable):
                pass
            new = await c.ready_leader(among=followers)
            await create(c, new, "after", 1, 3)
            c.net.heal()
            await until(lambda: _anchored(c, old, bound), "the old leader follows")
            await trio.sleep(2.0)
            nursery.cancel_scope.cancel()
        assert "lost" not in seen, seen
        assert {"kept", "after"} <= seen
        committed = {t.name for t in (await tables_at(c, new, None)).tables}
        assert "lost" not in committed and seen <= committed

    run(tmp_path, scenario)


def test_the_client_reads_from_any_master_within_the_bound(tmp_path: Path) -> None:
    """MasterClient.call_any asks the masters in order: the first (a follower) serves while
    fresh; cut off, it is passed over for another master; a missing table is Rejected."""
    bound = 1.0

    async def scenario(c: SimMasterCluster) -> None:
        leader = await c.ready_leader()
        await create(c, leader, "fr3", 1, 3)
        follower = next(i for i in c.running() if i != leader)
        order = [c.masters[follower].address,
                 *[m.address for m in c.masters if m.index != follower]]
        options = ClientOptions(deadline=10.0, call_timeout=1.0)
        async with open_master_client(order, network=c.net.host("reader"),
                                      options=options) as client:
            await until(lambda: _anchored(c, follower, bound), "the follower anchored")
            got = await client.call_any(api.MASTER_LIST_TABLES, api.ListTablesRequest(bound),
                                        api.TableList)
            assert [t.name for t in got.tables] == ["fr3"]
            assert got.served_by is not None
            assert got.served_by.uuid == c.masters[follower].master.uuid  # type: ignore
            c.net.partition([c.masters[follower].host],
                            [m.host for m in c.masters if m.index != follower])
            await trio.sleep(bound + 0.5)
            got = await client.call_any(api.MASTER_LIST_TABLES, api.ListTablesRequest(bound),
                                        api.TableList)
            assert got.served_by is not None
            assert got.served_by.uuid != c.masters[follower].master.uuid  # type: ignore
            assert [t.name for t in got.tables] == ["fr3"]
            try:
                await client.call_any(api.MASTER_TABLE_LOCATIONS,
                                      api.TableLocationsRequest("nope", bound),
                                      api.TableLocationsReply)
                raise AssertionError("a missing table was found")
            except Rejected as exc:
                assert "NOT_FOUND" in str(exc)
            c.net.heal()

    run(tmp_path, scenario)


class TestAppliedCatalogCache:
    """The catalog a follower read serves is built once per (replica, applied index): by the
    replica object itself, not its id(), so a new replica (a catalog copy) is never served
    the old one's catalog even at the same applied index."""

    def test_a_new_replica_at_the_same_index_gets_its_own_catalog(self, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        from collections.abc import Callable
        from types import SimpleNamespace
        from typing import Any

        from revivify.impl.master import follower_reads
        from revivify.impl.master.server import MasterOptions, MasterServer

        reads = MasterServer(MasterOptions(fs_root="/nonexistent")).reads
        monkeypatch.setattr(follower_reads, "Catalog",
                            SimpleNamespace(from_rows=lambda rows: ("catalog", *rows)))

        def replica(rows: list[str], applied: int) -> Any:
            scans = []

            def scan() -> list[str]:
                scans.append(1)
                return rows
            return SimpleNamespace(store=SimpleNamespace(applied_index=applied, scan=scan),
                                   scans=scans)

        catalog_at: Callable[[Any], Any] = reads._catalog_at  # the stubs' rows, not a Catalog
        a = replica(["a"], 7)
        assert catalog_at(a) == ("catalog", "a")
        assert catalog_at(a) == ("catalog", "a") and len(a.scans) == 1
        del a  # the old replica goes (CPython tends to reuse its address for the next one)
        b = replica(["b"], 7)  # another replica, the same applied index
        b_store, b_scans = b.store, b.scans
        assert catalog_at(b) == ("catalog", "b")
        assert reads._applied_catalog is not None and reads._applied_catalog[0] is b
        b_store.applied_index = 8
        assert catalog_at(b) == ("catalog", "b") and len(b_scans) == 2
