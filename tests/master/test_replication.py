"""AddReplica, RemoveReplica, MoveReplica and the healing policy (`decide`) as pure
functions of the committed catalog and the servers' liveness (seed 001's master part)."""

from __future__ import annotations

import random
from typing import Any

from master_helpers import config, create, describe, ok, process, replica, run, servers, tablets

from revivify.impl.consensus.messages import NON_VOTER, Config, Peer
from revivify.impl.master.catalog import Catalog, ReplicaMove
from revivify.impl.master.errors import IllegalState, InvalidArgument, NotFound
from revivify.impl.master.placement import Candidate
from revivify.impl.master.replication import (
    Healing,
    decide,
    failed_after_report,
    plan_add_replica,
    plan_move_replica,
    plan_remove_replica,
    server_view,
)
from revivify.impl.tserver.master_api import TabletReport


def running() -> Catalog:
    """One tablet on ts-1..3 (replica count 3), ts-1 its leader in term 1."""
    catalog, _, _ = create(Catalog(), tablets=1, live=servers(3))
    tablet = tablets(catalog)[0]
    catalog, _, _ = process(catalog, "ts-1", replica(tablet, term=1, leader="ts-1"))
    return catalog


def record_config(catalog: Catalog, cfg: Config, term: int = 1, leader: str = "ts-1"
                  ) -> Catalog:
    tablet = tablets(catalog)[0]
    catalog, _, _ = process(catalog, leader, replica(tablet, term=term, leader=leader,
                                                     config=cfg))
    return catalog


def promoted(cfg: Config, index: int) -> Config:
    return Config(index, tuple(Peer(p.uuid, p.address) for p in cfg.peers))


class TestAddRemove:
    def test_add_goes_to_the_leader_with_the_recorded_index_as_cas(self) -> None:
        catalog = record_config(running(), config(4, "ts-1", "ts-2", "ts-3"))
        tablet = tablets(catalog)[0]
        plan = ok(plan_add_replica(catalog, tablet.tablet_id, Candidate("ts-4", "h4:1")))
        assert plan.write.is_empty() and plan.is_fresh(catalog)
        ((call,),) = [plan.commit(catalog).calls]
        assert call.dest == "ts-1" and call.method == "Admin.ChangeConfig"
        body: Any = call.body
        assert body.cas_config_index == 4
        assert body.change.kind == "ADD"
        assert body.change.peer == Peer("ts-4", "h4:1", NON_VOTER, promote=True)

    def test_remove(self) -> None:
        catalog = running()
        tablet = tablets(catalog)[0]
        plan = ok(plan_remove_replica(catalog, tablet.tablet_id, "ts-3"))
        assert describe(plan.commit(catalog).calls) == [("ts-1", "ChangeConfig", None)]

    def test_retries_after_the_change_are_idempotent(self) -> None:
        """A retry (after a master failover, say) of an add that took effect, or of a
        remove, sends nothing and says so."""
        catalog = running()
        tablet_id = tablets(catalog)[0].tablet_id
        again = ok(plan_add_replica(catalog, tablet_id, Candidate("ts-2", "a")))
        assert again.commit(catalog).calls == () and again.commit(catalog).reply.already_done
        gone = ok(plan_remove_replica(catalog, tablet_id, "ts-9"))
        assert gone.commit(catalog).calls == () and gone.commit(catalog).reply.already_done

    def test_refusals(self) -> None:
        fresh_catalog, _, _ = create(Catalog(), tablets=1)
        creating = tablets(fresh_catalog)[0].tablet_id
        assert isinstance(plan_add_replica(fresh_catalog, creating, Candidate("ts-4", "a")),
                          IllegalState)
        catalog = running()
        tablet_id = tablets(catalog)[0].tablet_id
        assert plan_add_replica(catalog, "nope", Candidate("ts-4", "a")) == \
            NotFound("tablet", "nope")
        assert isinstance(plan_remove_replica(catalog, tablet_id, "ts-1"), IllegalState)
        alone = record_config(catalog, config(2, "ts-1"), term=1)
        assert isinstance(plan_remove_replica(alone, tablet_id, "ts-1"), IllegalState)


class TestMove:
    def test_a_move_is_one_write_and_sends_nothing_itself(self) -> None:
        catalog = running()
        tablet_id = tablets(catalog)[0].tablet_id
        plan = ok(plan_move_replica(catalog, tablet_id, "ts-2", Candidate("ts-4", "h4:1")))
        after, reply, calls = run(catalog, plan)
        assert calls == () and not reply.already_recorded
        assert after.tablets[tablet_id].move == ReplicaMove("ts-2", "ts-4", "move replica")
        # The same move again: nothing written; another move of the tablet: refused.
        again = ok(plan_move_replica(after, tablet_id, "ts-2", Candidate("ts-4", "h4:1")))
        assert again.write.is_empty() and again.commit(after).reply.already_recorded
        assert isinstance(plan_move_replica(after, tablet_id, "ts-3", None), IllegalState)

    def test_a_retry_after_the_move_finished_answers_done(self) -> None:
        catalog = record_config(running(), config(9, "ts-1", "ts-3", "ts-4"))
        tablet_id = tablets(catalog)[0].tablet_id
        plan = ok(plan_move_replica(catalog, tablet_id, "ts-2", Candidate("ts-4", "a")))
        assert plan.write.is_empty() and plan.commit(catalog).reply.done
        assert isinstance(plan_move_replica(catalog, tablet_id, "ts-2",
                                            Candidate("ts-5", "a")), InvalidArgument)
        assert isinstance(plan_move_replica(catalog, tablet_id, "ts-3",
                                            Candidate("ts-3", "a")), InvalidArgument)


# ---------------------------------------------------------------------------- the policy


def heal(catalog: Catalog, dead: set[str] = frozenset(),  # type: ignore[assignment]
         unknown: set[str] = frozenset(), n: int = 5,  # type: ignore[assignment]
         failed: set[str] = frozenset(),  # type: ignore[assignment]
         ) -> tuple[Catalog, Healing, list[tuple[str, str, str]]]:
    """One round of the policy as the shell runs it: its write applied first, then the
    changes decided again on the catalog that holds it. ``failed``: servers on which every
    tablet's replica was reported FAILED (the servers themselves live)."""
    everyone = servers(n)
    live = [c for c in everyone if c.uuid not in dead | unknown]
    view = server_view({c.uuid for c in live}, dead, live,
                       [(t, u) for t in catalog.tablets for u in failed])
    healing = decide(catalog, view, random.Random(0))
    if healing.write is not None:
        catalog, _, calls = run(catalog, healing.write)
        assert calls == ()
        healing = decide(catalog, view, random.Random(0))
    out = []
    for plan in healing.changes:
        ((call,),) = [plan.commit(catalog).calls]
        body: Any = call.body
        out.append((call.dest, body.change.kind, body.change.peer.uuid))
    return catalog, healing, out


class TestPolicy:
    def test_a_healthy_tablet_is_left_alone(self) -> None:
        _, healing, calls = heal(running())
        assert healing.write is None and calls == [] and not healing.waiting

    def test_a_dead_replica_is_moved_3_4_3(self) -> None:
        """ts-3 dies: the move is recorded (one write), a replacement is added as a
        NON_VOTER with promote, nothing while it catches up, the dead one is removed once
        the replacement is a voter, and the finished move is cleared."""
        catalog, _, calls = heal(running(), dead={"ts-3"})
        tablet_id = tablets(catalog)[0].tablet_id
        assert catalog.tablets[tablet_id].move == ReplicaMove(
            "ts-3", None, "tablet server ts-3 is dead", automatic=True)
        ((dest, kind, added),) = calls
        assert (dest, kind) == ("ts-1", "ADD") and added in {"ts-4", "ts-5"}
        pending = Config(5, (*config(0, "ts-1", "ts-2", "ts-3").peers,
                             Peer(added, "a", NON_VOTER, promote=True)))
        catalog = record_config(catalog, pending)
        catalog, healing, calls = heal(catalog, dead={"ts-3"})
        assert calls == [] and "catching up" in healing.waiting[tablet_id]
        catalog = record_config(catalog, promoted(pending, 6))
        catalog, _, calls = heal(catalog, dead={"ts-3"})
        assert calls == [("ts-1", "REMOVE", "ts-3")]
        catalog = record_config(catalog, config(7, "ts-1", "ts-2", added))
        catalog, healing, calls = heal(catalog, dead={"ts-3"})
        assert calls == [] and catalog.tablets[tablet_id].move is None
        _, healing, calls = heal(catalog, dead={"ts-3"})
        assert healing.write is None and calls == []

    def test_a_new_leader_continues_a_recorded_move_from_the_records(self) -> None:
        """Mid-move the dead server comes back: the recorded move still removes it (a
        leader deciding afresh from four live voters could keep it and drop another)."""
        catalog, _, calls = heal(running(), dead={"ts-3"})
        ((_, _, added),) = calls
        catalog = record_config(catalog, config(6, "ts-1", "ts-2", "ts-3", added))
        _, _, calls = heal(catalog)  # nobody dead now, a fresh rng
        assert calls == [("ts-1", "REMOVE", "ts-3")]

    def test_an_automatic_move_is_abandoned_when_its_server_returns_before_the_add(
            self) -> None:
        """ts-3 stalls past the timeout with no spare server to add: the move is recorded,
        nothing can be added; ts-3 comes back and the move is cleared (an operator's move
        would stay)."""
        catalog, healing, calls = heal(running(), dead={"ts-3"}, n=3)
        tablet_id = tablets(catalog)[0].tablet_id
        assert calls == [] and healing.waiting[tablet_id] == "no live server to add"
        assert catalog.tablets[tablet_id].move is not None
        catalog, _, calls = heal(catalog, n=3)
        assert calls == [] and catalog.tablets[tablet_id].move is None
        catalog, _, _ = run(catalog, ok(plan_move_replica(catalog, tablet_id, "ts-3", None)))
        catalog, _, _ = heal(catalog, n=3)
        assert catalog.tablets[tablet_id].move is not None

    def test_a_named_destination_is_used(self) -> None:
        catalog = running()
        tablet_id = tablets(catalog)[0].tablet_id
        catalog, _, _ = run(catalog, ok(plan_move_replica(catalog, tablet_id, "ts-2",
                                                          Candidate("ts-5", "a"))))
        _, _, calls = heal(catalog)
        assert calls == [("ts-1", "ADD", "ts-5")]

    def test_the_leader_is_not_removed(self) -> None:
        catalog = running()
        tablet_id = tablets(catalog)[0].tablet_id
        catalog, _, _ = run(catalog, ok(plan_move_replica(catalog, tablet_id, "ts-1", None)))
        catalog = record_config(catalog, config(5, "ts-1", "ts-2", "ts-3", "ts-4"))
        _, healing, calls = heal(catalog)
        assert calls == [] and "leads" in healing.waiting[tablet_id]
        # Once ts-2 leads, ts-1 goes.
        catalog = record_config(catalog, config(5, "ts-1", "ts-2", "ts-3", "ts-4"), term=2,
                                leader="ts-2")
        _, _, calls = heal(catalog)
        assert calls == [("ts-2", "REMOVE", "ts-1")]

    def test_an_over_replicated_tablet_loses_a_dead_voter_first(self) -> None:
        catalog = record_config(running(), config(4, "ts-1", "ts-2", "ts-3", "ts-4"))
        _, _, calls = heal(catalog, dead={"ts-2"})
        assert calls == [("ts-1", "REMOVE", "ts-2")]
        _, _, calls = heal(catalog)
        ((dest, kind, victim),) = calls
        assert (dest, kind) == ("ts-1", "REMOVE") and victim != "ts-1"

    def test_an_under_replicated_tablet_gets_a_member(self) -> None:
        catalog = record_config(running(), config(3, "ts-1", "ts-2"))
        _, healing, calls = heal(catalog)
        assert healing.write is None
        ((dest, kind, _),) = calls
        assert (dest, kind) == ("ts-1", "ADD")

    def test_never_below_a_live_majority(self) -> None:
        """Four voters, two of them dead: the dead are removed one by one (each removal
        keeps a live majority), never a live one."""
        catalog = record_config(running(), config(4, "ts-1", "ts-2", "ts-3", "ts-4"))
        catalog, _, calls = heal(catalog, dead={"ts-3", "ts-4"})
        assert calls == [("ts-1", "REMOVE", "ts-3")]

    def test_a_non_voter_on_a_dead_server_is_removed(self) -> None:
        pending = Config(5, (*config(0, "ts-1", "ts-2", "ts-3").peers,
                             Peer("ts-4", "a", NON_VOTER, promote=True)))
        catalog = record_config(running(), pending)
        _, _, calls = heal(catalog, dead={"ts-4"})
        assert calls == [("ts-1", "REMOVE", "ts-4")]

    def test_nothing_without_a_live_leader_a_server_to_add_or_known_liveness(self) -> None:
        catalog = running()
        tablet_id = tablets(catalog)[0].tablet_id
        _, healing, calls = heal(catalog, dead={"ts-3", "ts-4", "ts-5"})
        assert calls == [] and healing.waiting[tablet_id] == "no live server to add"
        _, healing, calls = heal(catalog, dead={"ts-1"})
        assert calls == [] and healing.waiting[tablet_id] == "no live leader known"
        _, healing, calls = heal(catalog, unknown={"ts-3"})
        assert healing.write is None and calls == []
        unled, _, _ = create(Catalog(), tablets=1)
        _, healing, calls = heal(unled, dead={"ts-3"})
        assert healing.write is None and calls == []

    def test_one_decision_per_tablet_per_round(self) -> None:
        catalog, _, _ = create(Catalog(), tablets=4, live=servers(3))
        for tablet in tablets(catalog):
            catalog, _, _ = process(catalog, "ts-1", replica(tablet, term=1, leader="ts-1"))
        catalog, healing, calls = heal(catalog, dead={"ts-2"})
        assert len(calls) == 4
        assert len({p.commit(catalog).reply.tablet_id for p in healing.changes}) == 4
        # Placement spreads the replacements: two on each of the two spare servers.
        assert sorted(c[2] for c in calls) == ["ts-4", "ts-4", "ts-5", "ts-5"]
        # The four moves were recorded by the round's ONE write (`heal` applied it).
        assert all(t.move is not None and t.move.from_uuid == "ts-2"
                   for t in tablets(catalog))


class TestFailedReplica:
    """A replica FAILED on a live server (its disk failed) is replaced like one on a dead
    server: a NON_VOTER with promote added elsewhere, then the FAILED one removed."""

    def test_a_failed_replica_is_moved_3_4_3(self) -> None:
        catalog, _, calls = heal(running(), failed={"ts-3"})
        tablet_id = tablets(catalog)[0].tablet_id
        assert catalog.tablets[tablet_id].move == ReplicaMove(
            "ts-3", None, "the replica on ts-3 FAILED", automatic=True)
        ((dest, kind, added),) = calls
        assert (dest, kind) == ("ts-1", "ADD") and added in {"ts-4", "ts-5"}
        pending = Config(5, (*config(0, "ts-1", "ts-2", "ts-3").peers,
                             Peer(added, "a", NON_VOTER, promote=True)))
        catalog = record_config(catalog, pending)
        # Its server is live, yet the move is not abandoned: the replica is lost.
        catalog, healing, calls = heal(catalog, failed={"ts-3"})
        assert calls == [] and "catching up" in healing.waiting[tablet_id]
        assert catalog.tablets[tablet_id].move is not None
        catalog = record_config(catalog, promoted(pending, 6))
        catalog, _, calls = heal(catalog, failed={"ts-3"})
        assert calls == [("ts-1", "REMOVE", "ts-3")]
        catalog = record_config(catalog, config(7, "ts-1", "ts-2", added))
        catalog, _, calls = heal(catalog, failed={"ts-3"})
        assert calls == [] and catalog.tablets[tablet_id].move is None

    def test_without_a_failed_report_nothing_moves(self) -> None:
        """The same live servers, no FAILED report: the tablet is healthy (the test above
        is caused by the report, not by the setup)."""
        _, healing, calls = heal(running())
        assert healing.write is None and calls == []

    def test_a_failed_leader_is_no_live_leader(self) -> None:
        catalog, healing, calls = heal(running(), failed={"ts-1"})
        tablet_id = tablets(catalog)[0].tablet_id
        assert calls == [] and healing.waiting[tablet_id] == "no live leader known"

    def test_a_failed_non_voter_is_removed(self) -> None:
        pending = Config(5, (*config(0, "ts-1", "ts-2", "ts-3").peers,
                             Peer("ts-4", "a", NON_VOTER, promote=True)))
        _, _, calls = heal(record_config(running(), pending), failed={"ts-4"})
        assert calls == [("ts-1", "REMOVE", "ts-4")]

    def test_an_over_replicated_tablet_loses_the_failed_voter(self) -> None:
        catalog = record_config(running(), config(4, "ts-1", "ts-2", "ts-3", "ts-4"))
        _, _, calls = heal(catalog, failed={"ts-2"})
        assert calls == [("ts-1", "REMOVE", "ts-2")]

    def test_failed_replicas_never_count_toward_a_live_majority(self) -> None:
        """Four voters, two FAILED: removing one FAILED leaves 3 voters with 2 healthy (a
        majority); the policy removes the FAILED ones, never a healthy one."""
        catalog = record_config(running(), config(4, "ts-1", "ts-2", "ts-3", "ts-4"))
        _, _, calls = heal(catalog, failed={"ts-3", "ts-4"})
        assert calls == [("ts-1", "REMOVE", "ts-3")]


class TestFailedAfterReport:
    def test_full_replaces_incremental_updates(self) -> None:
        catalog = running()
        tablet = tablets(catalog)[0]
        failed = TabletReport(False, 1, [replica(tablet, "FAILED")])
        assert failed_after_report(frozenset(), failed) == {tablet.tablet_id}
        # An incremental report that does not name it keeps it; one that does, updates it.
        other = TabletReport(False, 2, [])
        assert failed_after_report(frozenset({tablet.tablet_id}), other) == {tablet.tablet_id}
        tomb = TabletReport(False, 3, [replica(tablet, "TOMBSTONED")])
        assert failed_after_report(frozenset({tablet.tablet_id}), tomb) == frozenset()
        # A full report says everything: a tablet it leaves out is not FAILED any more.
        assert failed_after_report(frozenset({"x"}), TabletReport(True, 4, [])) == frozenset()
