"""Report processing, rule by rule (seed 004 appendix B with its fixes, appendix A's fencing),
and the seed's known issues (KUDU-1358, 1353, 1374, 495) at the level of the pure core."""

from __future__ import annotations

import random

import pytest
from master_helpers import (
    config,
    create,
    describe,
    ok,
    process,
    replica,
    report,
    run,
    servers,
    table,
    tablets,
)

from revivify.impl.master.catalog import Catalog, TableState, TabletState
from revivify.impl.master.errors import InvalidArgument, NotCommitted
from revivify.impl.master.operations import (
    AlterTable,
    CreateTable,
    plan_alter_table,
    plan_create_table,
    plan_delete_table,
    plan_replace_tablets,
)
from revivify.impl.master.queries import table_locations
from revivify.impl.master.reports import Rule, Situation, merge_consensus, process_report
from revivify.impl.master.tserver_map import RegState, TabletServerMap
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.master_api import (
    REPLICA_STATES,
    Heartbeat,
    Registration,
    ReplicaState,
    ReportedReplica,
    TabletReport,
)


def fresh() -> Catalog:
    catalog, _, _ = create(Catalog())
    return catalog


def with_config(catalog: Catalog, index: int, *uuids: str, term: int = 2,
                leader: str = "ts-1") -> Catalog:
    """The leader reports a committed config at ``index`` for the first tablet."""
    tablet = tablets(catalog)[0]
    catalog, processed, _ = process(catalog, leader, replica(
        tablet, term=term, leader=leader, config=config(index, *uuids)))
    assert processed.verdicts[0].rule is Rule.UPDATE
    return catalog


class TestFencing:
    @pytest.mark.parametrize("state", REPLICA_STATES)
    def test_a_replica_without_a_record_is_never_deleted(self, state: ReplicaState) -> None:
        catalog = fresh()
        orphan = ReportedReplica("no-such-tablet", state)
        after, processed, calls = process(catalog, "ts-1", orphan)
        assert processed.rule_of("no-such-tablet") is Rule.ORPHAN_KEPT
        assert calls == () and after == catalog

    @pytest.mark.parametrize("deleted_how", ["table", "replaced"])
    @pytest.mark.parametrize("state", ["RUNNING", "STARTING", "CREATING", "COPYING",
                                       "TOMBSTONED"])
    def test_a_replica_of_a_deleted_tablet_is_deleted(self, deleted_how: str,
                                                      state: ReplicaState) -> None:
        catalog = fresh()
        tablet = tablets(catalog)[0]
        if deleted_how == "table":
            catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        else:
            catalog, _, _ = run(catalog, ok(plan_replace_tablets(
                catalog, [tablet.tablet_id], servers=servers(3), rng=random.Random(1))))
        after, processed, calls = process(catalog, "ts-2", replica(tablet, state))
        assert processed.rule_of(tablet.tablet_id) is Rule.DELETE
        assert describe(calls) == [("ts-2", "DeleteTablet", ("DELETED", None))]
        assert after == catalog  # nothing to write: the record already says so

    def test_a_deletion_in_progress_or_a_failed_replica_is_left_alone(self) -> None:
        catalog = fresh()
        tablet = tablets(catalog)[0]
        for state, rule in (("DELETING", Rule.IN_PROGRESS), ("FAILED", Rule.FAILED_KEPT)):
            _, processed, calls = process(catalog, "ts-9", replica(tablet, state))  # type: ignore[arg-type]
            assert processed.rule_of(tablet.tablet_id) is rule and calls == ()


class TestEviction:
    def test_a_replica_outside_the_config_with_an_older_config_is_tombstoned(self) -> None:
        catalog = with_config(fresh(), 5, "ts-1", "ts-2", "ts-3")
        tablet = tablets(catalog)[0]
        old = config(3, "ts-1", "ts-2", "ts-3", "ts-4")
        _, processed, calls = process(catalog, "ts-4", replica(tablet, config=old, term=1))
        assert processed.rule_of(tablet.tablet_id) is Rule.EVICT
        assert describe(calls) == [("ts-4", "DeleteTablet", ("TOMBSTONE", 5))]

    def test_a_replica_with_a_newer_config_is_not_tombstoned_but_learned_from(self) -> None:
        catalog = with_config(fresh(), 5, "ts-1", "ts-2", "ts-3")
        tablet = tablets(catalog)[0]
        newer = config(7, "ts-1", "ts-2", "ts-3", "ts-4")
        after, processed, calls = process(catalog, "ts-4",
                                          replica(tablet, config=newer, term=2, leader=None))
        verdict = processed.verdicts[0]
        assert (verdict.situation, verdict.rule) == (Situation.NEWER_NON_MEMBER, Rule.UPDATE)
        assert calls == ()
        assert after.tablets[tablet.tablet_id].consensus.config == newer

    def test_a_tombstone_is_not_deleted_again(self) -> None:
        catalog = with_config(fresh(), 5, "ts-1", "ts-2", "ts-3")
        tablet = tablets(catalog)[0]
        old = config(3, "ts-1", "ts-2", "ts-3", "ts-4")
        _, processed, calls = process(catalog, "ts-4",
                                      replica(tablet, "TOMBSTONED", config=old, term=1))
        assert processed.rule_of(tablet.tablet_id) is Rule.TOMBSTONE_KEPT and calls == ()

    def test_a_new_config_tombstones_the_peers_it_dropped(self) -> None:
        catalog = fresh()
        tablet = tablets(catalog)[0]
        smaller = config(4, "ts-1", "ts-2")
        after, _, calls = process(catalog, "ts-1",
                                  replica(tablet, term=3, leader="ts-1", config=smaller))
        assert describe(calls) == [("ts-3", "DeleteTablet", ("TOMBSTONE", 4))]
        assert after.tablets[tablet.tablet_id].consensus.config == smaller

    def test_a_replica_that_knows_it_was_removed_is_tombstoned(self) -> None:
        catalog = with_config(fresh(), 5, "ts-1", "ts-2")
        tablet = tablets(catalog)[0]
        # ts-3 learned the commit of its own removal (index 5): same index, not in it.
        _, processed, calls = process(catalog, "ts-3",
                                      replica(tablet, config=config(5, "ts-1", "ts-2"),
                                              term=2, leader=None))
        assert processed.verdicts[0].situation is Situation.STALE_NON_MEMBER
        assert describe(calls) == [("ts-3", "DeleteTablet", ("TOMBSTONE", 5))]

    def test_same_index_different_configs_is_a_conflict_kept(self) -> None:
        catalog = fresh()
        tablet = tablets(catalog)[0]
        _, processed, calls = process(catalog, "ts-4",
                                      replica(tablet, config=config(0, "ts-4", "ts-5", "ts-6")))
        assert processed.rule_of(tablet.tablet_id) is Rule.CONFLICT_KEPT and calls == ()


class TestConsensusState:
    def test_creating_becomes_running_when_a_leader_reports(self) -> None:
        catalog = fresh()
        tablet = tablets(catalog)[0]
        after, processed, _ = process(catalog, "ts-2", replica(tablet, term=1, leader=None))
        assert after.tablets[tablet.tablet_id].state is TabletState.CREATING
        after, processed, _ = process(after, "ts-1", replica(tablet, term=1, leader="ts-1"))
        record = after.tablets[tablet.tablet_id]
        assert record.state is TabletState.RUNNING
        assert (record.consensus.term, record.consensus.leader) == (1, "ts-1")
        assert "running" in processed.verdicts[0].notes

    def test_a_newer_term_with_a_leader_updates_an_older_one_does_not(self) -> None:
        catalog = with_config(fresh(), 0, "ts-1", "ts-2", "ts-3", term=4, leader="ts-1")
        tablet = tablets(catalog)[0]
        after, _, _ = process(catalog, "ts-2", replica(tablet, term=5, leader="ts-2"))
        assert after.tablets[tablet.tablet_id].consensus.leader == "ts-2"
        again, _, _ = process(after, "ts-3", replica(tablet, term=3, leader="ts-3"))
        assert again == after

    def test_same_term_keeps_the_known_leader_and_refuses_a_second_one(self) -> None:
        recorded = tablets(with_config(fresh(), 0, "ts-1", "ts-2", "ts-3", term=4))[0].consensus
        merged, conflict = merge_consensus(recorded, 4, None, config(6, "ts-1", "ts-2", "ts-3"))
        assert not conflict and merged.leader == "ts-1" and merged.config.opid_index == 6
        merged, conflict = merge_consensus(recorded, 4, "ts-2", recorded.config)
        assert conflict and merged == recorded

    def test_a_leader_outside_its_own_config_is_disregarded(self) -> None:
        recorded = tablets(fresh())[0].consensus
        merged, _ = merge_consensus(recorded, 3, "ts-9", recorded.config)
        assert merged == recorded

    def test_terms_never_go_back(self) -> None:
        recorded = tablets(with_config(fresh(), 2, "ts-1", "ts-2", "ts-3", term=7))[0].consensus
        merged, _ = merge_consensus(recorded, 5, "ts-2", config(9, "ts-1", "ts-2", "ts-3"))
        assert (merged.term, merged.leader, merged.config.opid_index) == (7, "ts-1", 9)


class TestSchema:
    def altered(self) -> Catalog:
        catalog = fresh()
        for tablet in tablets(catalog):
            catalog, _, _ = process(catalog, "ts-1", replica(tablet, term=1, leader="ts-1"))
        catalog, _, calls = run(catalog, ok(plan_alter_table(
            catalog, AlterTable("t", add_columns=(Column("c"),)), reserved=())))
        assert describe(calls) == [("ts-1", "AlterSchema", 1)] * 3  # the recorded leaders
        return catalog

    def test_an_old_schema_gets_an_idempotent_alter(self) -> None:
        catalog = self.altered()
        tablet = tablets(catalog)[0]
        _, _, calls = process(catalog, "ts-2", replica(tablet, term=1, leader="ts-1",
                                                       schema_version=0))
        assert describe(calls) == [("ts-1", "AlterSchema", 1)]

    def test_altering_becomes_running_once_every_tablet_reports_the_version(self) -> None:
        catalog = self.altered()
        assert table(catalog).state is TableState.ALTERING
        first, *rest = tablets(catalog)
        catalog, _, _ = process(catalog, "ts-1", replica(first, term=1, schema_version=1))
        assert table(catalog).state is TableState.ALTERING
        plan = ok(process_report(catalog, "ts-1", report(
            *(replica(t, term=1, schema_version=1) for t in rest))))
        assert [type(r).__name__ for r in plan.write.records()] == \
            ["TabletRecord", "TabletRecord", "TableRecord"]  # tablets first
        catalog, _, calls = run(catalog, plan)
        assert table(catalog).state is TableState.RUNNING and calls == ()

    def test_the_last_two_reports_planned_together_still_finish_the_alter(self) -> None:
        """Two servers' reports planned on one snapshot, each bringing one of the last two
        tablets to the version: the one committed second is not fresh any more (its finish
        check read the other tablet), so it is planned again and finishes the alter. Found
        in real processes: both committed, and the table stayed ALTERING for good."""
        catalog = self.altered()
        first, second, third = tablets(catalog)
        catalog, _, _ = process(catalog, "ts-1", replica(first, term=1, schema_version=1))
        plan_b = ok(process_report(catalog, "ts-2", report(
            replica(second, term=1, schema_version=1))))
        plan_c = ok(process_report(catalog, "ts-3", report(
            replica(third, term=1, schema_version=1))))
        catalog, _, _ = run(catalog, plan_b)
        assert table(catalog).state is TableState.ALTERING
        assert not plan_c.is_fresh(catalog)
        catalog, _, _ = process(catalog, "ts-3", replica(third, term=1, schema_version=1))
        assert table(catalog).state is TableState.RUNNING


class TestReport:
    def test_a_tablet_listed_twice_is_refused(self) -> None:
        tablet = tablets(fresh())[0]
        assert isinstance(process_report(fresh(), "ts-1", report(replica(tablet),
                                                                 replica(tablet))),
                          InvalidArgument)

    def test_processing_a_report_again_writes_nothing_and_decides_the_same(self) -> None:
        catalog = with_config(fresh(), 0, "ts-1", "ts-2", "ts-3")
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        deleted = catalog.tablets_of(table_id=next(iter(catalog.tables)))
        rep = report(*(replica(t) for t in deleted))
        first = ok(process_report(catalog, "ts-1", rep))
        catalog2, _, calls1 = run(catalog, first)
        second = ok(process_report(catalog2, "ts-1", rep))
        assert second.write.is_empty()
        assert describe(second.commit(catalog2).calls) == describe(calls1)

    def test_incremental_and_full_reports_are_processed_alike(self) -> None:
        catalog = fresh()
        tablet = tablets(catalog)[0]
        rep = replica(tablet, term=1, leader="ts-1")
        full = ok(process_report(catalog, "ts-1", TabletReport(True, 0, [rep])))
        incremental = ok(process_report(catalog, "ts-1", TabletReport(False, 7, [rep])))
        assert full.write == incremental.write


class TestKnownIssues:
    def test_kudu_1358_a_new_leader_knows_every_live_server_at_once(self) -> None:
        """Every master records heartbeats, follower or not: the moment one becomes leader
        its CreateTable places over every live server, spread evenly."""
        tsmap = TabletServerMap("m-2", dead_after=10.0)
        for s in servers(6):
            tsmap.heartbeat(Heartbeat(s.uuid, 1, Registration(s.address)), now=1.0)
        tsmap.set_leadership(term=3, leader=True)
        live = tsmap.candidates(now=2.0)
        assert len(live) == 6
        plan = ok(plan_create_table(Catalog(), CreateTable("t", (Column("k", key=True),), 6, 3),
                                    servers=live, reserved=(), rng=random.Random(0)))
        catalog, _, _ = run(Catalog(), plan)
        assert sorted(catalog.replica_counts().values()) == [3] * 6

    def test_kudu_1353_locations_and_alters_right_after_failover(self) -> None:
        """The new leader rebuilds its snapshot from the catalog rows alone: every tablet's
        replicas and leader are there at once (no per-tablet location cache to warm up), so
        GetTableLocations answers and AlterTable reaches the leaders immediately."""
        catalog = fresh()
        for tablet in tablets(catalog):
            catalog, _, _ = process(catalog, "ts-2", replica(tablet, term=1, leader="ts-2"))
        rebuilt = Catalog.from_rows(catalog.rows())  # the new leader's leader-ready gate
        assert rebuilt == catalog
        locations = table_locations(rebuilt, "t", address=lambda _: None, live=lambda _: True)
        assert not isinstance(locations, Exception) and hasattr(locations, "tablets")
        for location in locations.tablets:  # type: ignore[union-attr]
            assert [r.uuid for r in location.replicas if r.leader] == ["ts-2"]
            assert len(location.replicas) == 3
        _, _, calls = run(rebuilt, ok(plan_alter_table(
            rebuilt, AlterTable("t", add_columns=(Column("c"),)), reserved=())))
        assert describe(calls) == [("ts-2", "AlterSchema", 1)] * 3

    def test_kudu_1374_a_new_leader_redoes_what_a_dead_leader_decided(self) -> None:
        """The old leader answered the heartbeat (the server cleared its edge-triggered
        report) and died before sending the DeleteTablet it decided. The new leader asks
        every server for a full report and decides the same call from the same rows."""
        catalog = fresh()
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        tablet = catalog.tablets_of(next(iter(catalog.tables)))[0]
        rep = replica(tablet)
        old_leader = TabletServerMap("m-1", dead_after=10.0)
        old_leader.set_leadership(term=1, leader=True)
        old_leader.heartbeat(Heartbeat("ts-1", 1, Registration("a")), now=0.0)
        verdict = old_leader.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(True, 0, [rep])),
                                       now=1.0)
        assert verdict.report is not None
        decided = ok(process_report(catalog, "ts-1", verdict.report)).commit(catalog).calls
        # ... m-1 dies here; its calls are never sent ...
        new_leader = TabletServerMap("m-2", dead_after=10.0)
        new_leader.heartbeat(Heartbeat("ts-1", 1, Registration("a")), now=0.5)
        new_leader.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(False, 1, [])), now=1.5)
        new_leader.set_leadership(term=2, leader=True)
        asked = new_leader.heartbeat(Heartbeat("ts-1", 1), now=2.0)
        assert asked.response.needs_full_report and asked.response.leader
        verdict = new_leader.heartbeat(
            Heartbeat("ts-1", 1, report=TabletReport(True, 2, [rep])), now=3.0)
        assert verdict.report is not None
        rebuilt = Catalog.from_rows(catalog.rows())
        redone = ok(process_report(rebuilt, "ts-1", verdict.report)).commit(rebuilt).calls
        assert describe(redone) == describe(decided) == [
            ("ts-1", "DeleteTablet", ("DELETED", None))]
        entry = new_leader.entry("ts-1")
        assert entry is not None and entry.state is RegState.REPORTING

    def test_kudu_495_a_report_whose_write_fails_is_asked_for_again(self) -> None:
        """The report's catalog write did not replicate: nothing is sent, the catalog is
        unchanged, the server is asked for a full report, and processing it again gives
        the same plan."""
        catalog = fresh()
        tablet = tablets(catalog)[0]
        tsmap = TabletServerMap("m-1", dead_after=10.0)
        tsmap.set_leadership(term=1, leader=True)
        tsmap.heartbeat(Heartbeat("ts-1", 1, Registration("a")), now=0.0)
        rep = TabletReport(True, 0, [replica(tablet, term=1, leader="ts-1")])
        verdict = tsmap.heartbeat(Heartbeat("ts-1", 1, report=rep), now=1.0)
        assert verdict.report is not None and not verdict.response.needs_full_report
        plan = ok(process_report(catalog, "ts-1", verdict.report))
        assert not plan.write.is_empty()
        # ... the proposal fails (leadership lost, or a timeout) ...
        with pytest.raises(NotCommitted):
            plan.commit(catalog)
        tsmap.report_failed("ts-1")
        assert tsmap.heartbeat(Heartbeat("ts-1", 1), now=2.0).response.needs_full_report
        assert ok(process_report(catalog, "ts-1", verdict.report)).write == plan.write
