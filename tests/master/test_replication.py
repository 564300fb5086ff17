"""AddReplica, RemoveReplica and the 3-4-3 re-replication policy (seed 001's master part)."""

from __future__ import annotations

import random

from master_helpers import config, create, describe, ok, process, replica, servers, tablets

from revivify.impl.consensus.messages import NON_VOTER, Config, Peer
from revivify.impl.master.catalog import Catalog
from revivify.impl.master.errors import IllegalState, InvalidArgument, NotFound
from revivify.impl.master.placement import Candidate
from revivify.impl.master.replication import (
    plan_add_replica,
    plan_remove_replica,
    rereplication_calls,
)


def running() -> Catalog:
    """One tablet on ts-1..3 (replica count 3), ts-1 its leader in term 1."""
    catalog, _, _ = create(Catalog(), tablets=1, live=servers(3))
    tablet = tablets(catalog)[0]
    catalog, _, _ = process(catalog, "ts-1", replica(tablet, term=1, leader="ts-1"))
    return catalog


def record_config(catalog: Catalog, cfg: Config, term: int = 1) -> Catalog:
    tablet = tablets(catalog)[0]
    catalog, _, _ = process(catalog, "ts-1", replica(tablet, term=term, leader="ts-1",
                                                     config=cfg))
    return catalog


class TestAddRemove:
    def test_add_goes_to_the_leader_with_the_recorded_index_as_cas(self) -> None:
        catalog = record_config(running(), config(4, "ts-1", "ts-2", "ts-3"))
        tablet = tablets(catalog)[0]
        plan = ok(plan_add_replica(catalog, tablet.tablet_id, Candidate("ts-4", "h4:1")))
        assert plan.write.is_empty() and plan.is_fresh(catalog)
        ((call,),) = [plan.commit(catalog).calls]
        assert call.dest == "ts-1" and call.method == "Admin.ChangeConfig"
        body = call.body
        assert body.cas_config_index == 4  # type: ignore[union-attr]
        assert body.change.kind == "ADD"  # type: ignore[union-attr]
        assert body.change.peer == Peer("ts-4", "h4:1", NON_VOTER, promote=True)  # type: ignore[union-attr]

    def test_remove(self) -> None:
        catalog = running()
        tablet = tablets(catalog)[0]
        plan = ok(plan_remove_replica(catalog, tablet.tablet_id, "ts-3"))
        assert describe(plan.commit(catalog).calls) == [("ts-1", "ChangeConfig", None)]

    def test_refusals(self) -> None:
        fresh_catalog, _, _ = create(Catalog(), tablets=1)
        creating = tablets(fresh_catalog)[0].tablet_id
        assert isinstance(plan_add_replica(fresh_catalog, creating, Candidate("ts-4", "a")),
                          IllegalState)
        catalog = running()
        tablet_id = tablets(catalog)[0].tablet_id
        assert plan_add_replica(catalog, "nope", Candidate("ts-4", "a")) == \
            NotFound("tablet", "nope")
        assert isinstance(plan_add_replica(catalog, tablet_id, Candidate("ts-2", "a")),
                          InvalidArgument)
        assert isinstance(plan_remove_replica(catalog, tablet_id, "ts-9"), InvalidArgument)
        assert isinstance(plan_remove_replica(catalog, tablet_id, "ts-1"), IllegalState)
        alone = record_config(catalog, config(2, "ts-1"), term=1)
        assert isinstance(plan_remove_replica(alone, tablet_id, "ts-1"), IllegalState)


class TestPolicy:
    def calls(self, catalog: Catalog, dead: set[str]) -> list[tuple[str, str, object]]:
        live = [c for c in servers(5) if c.uuid not in dead]
        out = rereplication_calls(catalog, live=lambda u: u not in dead, candidates=live,
                                  rng=random.Random(0))
        return [(c.dest, c.body.change.kind, c.body.change.peer.uuid)  # type: ignore[union-attr]
                for c in out]

    def test_a_healthy_tablet_is_left_alone(self) -> None:
        assert self.calls(running(), dead=set()) == []

    def test_a_dead_voter_is_replaced_first_then_removed_3_4_3(self) -> None:
        """The disk-loss story: ts-3 is wiped (it comes back under a new UUID, ts-3's goes
        dead). The leader gets a new member first, then loses the dead one."""
        catalog = running()
        ((dest, kind, added),) = self.calls(catalog, dead={"ts-3"})
        assert (dest, kind) == ("ts-1", "ADD") and added in {"ts-4", "ts-5"}
        # The leader adds it as NON_VOTER: nothing more until it is promoted.
        pending = Config(5, (*config(0, "ts-1", "ts-2", "ts-3").peers,
                             Peer(added, "a", NON_VOTER, promote=True)))
        catalog = record_config(catalog, pending)
        assert self.calls(catalog, dead={"ts-3"}) == []
        catalog = record_config(catalog, config(6, "ts-1", "ts-2", "ts-3", added))
        assert self.calls(catalog, dead={"ts-3"}) == [("ts-1", "REMOVE", "ts-3")]
        catalog = record_config(catalog, config(7, "ts-1", "ts-2", added))
        assert self.calls(catalog, dead={"ts-3"}) == []

    def test_an_under_replicated_tablet_gets_a_member(self) -> None:
        catalog = record_config(running(), config(3, "ts-1", "ts-2"))
        ((dest, kind, _),) = self.calls(catalog, dead=set())
        assert (dest, kind) == ("ts-1", "ADD")

    def test_nothing_without_a_leader_or_a_live_server_to_add(self) -> None:
        catalog = running()
        assert self.calls(catalog, dead={"ts-3", "ts-4", "ts-5"}) == []
        unled, _, _ = create(Catalog(), tablets=1)
        assert self.calls(unled, dead={"ts-3"}) == []
