"""A Hypothesis state machine over the master core: planners, reports, in-flight writes that
commit or fail, and the invariants of the ordering contract checked after every step.

The machine plays the shell: it plans an operation on the committed snapshot (reserving
names in flight, holding the plan's locks: a plan whose locks meet an in-flight plan's
waits, here: is dropped), then later either commits it (the shell checks freshness first,
applies the write, resolves the plan) or fails its replication (KUDU-495). Reports are
random but plausible: any server, any replica state, the recorded config or an older or
newer one, terms around the recorded one, leaders from the reported config or none.

Checked on every commit and after every step:
* a plan's calls do not come out before its write is held (NotCommitted), unless empty;
* every call is allowed by the committed records at its release (appendix A): DELETED only
  for a deleted/replaced tablet or a removed table; TOMBSTONE only for a server outside the
  recorded config, with that config's index as CAS; CreateTablet only to a member of a
  CREATING tablet; AlterSchema only to the recorded leader; never a call for a tablet the
  catalog has no record of;
* every state change is a row of the catalog's transition tables; row versions go up by one
  per write; rows are never lost (records kept forever);
* the snapshot passes its own check (C2, C3) and equals its rebuild from rows alone;
* re-planning a committed CreateTable (same request id) or re-processing a committed report
  writes nothing; the report decides the same calls again.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from master_helpers import SCHEMA, config, describe, servers
from test_master_transitions import allowed, changes

from revivify.impl.master.calls import TabletServerCall
from revivify.impl.master.catalog import Catalog, TabletState, record_key
from revivify.impl.master.errors import MasterError, NotCommitted
from revivify.impl.master.operations import (
    AlterTable,
    CreateTable,
    Plan,
    plan_alter_table,
    plan_create_table,
    plan_delete_table,
    plan_replace_tablets,
)
from revivify.impl.master.replication import (
    decide,
    plan_add_replica,
    plan_move_replica,
    plan_remove_replica,
    server_view,
)
from revivify.impl.master.reports import process_report
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.api import ChangeConfig
from revivify.impl.tserver.master_api import (
    REPLICA_STATES,
    ReportedConsensus,
    ReportedReplica,
    TabletReport,
)

NAMES = ("a", "b", "c")
SERVERS = servers(5)
UUIDS = [s.uuid for s in SERVERS]


def check_call(catalog: Catalog, call: TabletServerCall) -> None:
    """The fencing audit (appendix A) for one released call, against the committed rows."""
    tablet = catalog.tablets.get(call.tablet_id)
    assert tablet is not None, f"a call for a tablet without a record: {call}"
    table = catalog.tables[tablet.table_id]
    body: Any = call.body
    if call.method == "Admin.DeleteTablet" and body.mode == "DELETED":
        assert not tablet.live or not table.live, call
    elif call.method == "Admin.DeleteTablet":
        assert body.mode == "TOMBSTONE"
        assert tablet.consensus.config.peer(call.dest) is None, call
        assert body.cas_config_index == tablet.consensus.config.opid_index, call
    elif call.method == "Admin.CreateTablet":
        assert tablet.state is TabletState.CREATING and table.live, call
        assert tablet.is_member(call.dest), call
    elif call.method == "Admin.ChangeConfig":  # seed 001: to the leader, CAS on the index
        assert tablet.state is TabletState.RUNNING and table.live, call
        assert call.dest == tablet.consensus.leader, call
        assert body.cas_config_index == tablet.consensus.config.opid_index, call
    elif call.method == "Admin.AlterSchema":
        assert call.dest == tablet.consensus.leader, call
        assert body.schema_version == table.schema_version, call
    else:  # pragma: no cover
        raise AssertionError(f"unexpected call {call}")


class MasterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.catalog = Catalog()
        self.rng = random.Random(0)
        self.in_flight: list[tuple[Plan[Any], Any]] = []  # (plan, what to re-check after)
        self.requests = 0

    # -- the shell's steps

    def reserved(self) -> set[str]:
        return {name for plan, _ in self.in_flight for name in plan.reserve}

    def propose(self, result: Plan[Any] | MasterError, recheck: Any = None) -> None:
        if not isinstance(result, Plan):
            return
        if result.write.is_empty():
            self.release(self.catalog, result, recheck)
            return
        with_raises_not_committed(result, self.catalog)
        locked = {key for plan, _ in self.in_flight for key in plan.locks}
        if locked & set(result.locks):
            return  # it would wait for the locks; the shell re-plans after
        self.in_flight.append((result, recheck))

    def release(self, catalog: Catalog, plan: Plan[Any], recheck: Any) -> None:
        done = plan.commit(catalog)
        for call in done.calls:
            check_call(catalog, call)
        if recheck is not None:
            recheck(catalog, done)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def commit_one(self, data: st.DataObject) -> None:
        plan, recheck = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        if not plan.is_fresh(self.catalog):
            return  # the shell re-plans: never propose a write planned on changed rows
        assert not plan.write.stale_rows(self.catalog)
        before = self.catalog
        after = before.apply(plan.write)
        found = changes(before, after)
        assert found <= allowed(), found - allowed()
        for record in plan.write.records():
            old = before.record(record_key(record))
            assert record.version == (0 if old is None else old.version) + 1
        self.catalog = after
        self.release(after, plan, recheck)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def replication_fails(self, data: st.DataObject) -> None:
        plan, _ = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        with_raises_not_committed(plan, self.catalog)

    # -- operations

    @rule(name=st.sampled_from(NAMES), num_tablets=st.integers(1, 4),
          replicas=st.sampled_from([1, 3]), retry=st.booleans())
    def create_table(self, name: str, num_tablets: int, replicas: int, retry: bool) -> None:
        if not retry:
            self.requests += 1
        request = CreateTable(name, SCHEMA, num_tablets, replicas, f"req-{self.requests}")

        def recheck(catalog: Catalog, done: Any) -> None:
            again = plan_create_table(catalog, request, servers=SERVERS, reserved=(),
                                      rng=self.rng)
            assert isinstance(again, Plan) and again.write.is_empty()
            assert again.commit(catalog).reply.table_id == done.reply.table_id

        self.propose(plan_create_table(self.catalog, request, servers=SERVERS,
                                       reserved=self.reserved(), rng=self.rng), recheck)

    @rule(name=st.sampled_from(NAMES))
    def delete_table(self, name: str) -> None:
        self.propose(plan_delete_table(self.catalog, name))

    @rule(name=st.sampled_from(NAMES), rename=st.sampled_from((None, *NAMES)))
    def alter_table(self, name: str, rename: str | None) -> None:
        table = self.catalog.table_by_name(name)
        column = (Column(f"c{len(table.schema)}"),) if table is not None else ()
        self.propose(plan_alter_table(self.catalog, AlterTable(
            name, add_columns=column if rename is None else (), new_name=rename),
            reserved=self.reserved()))

    @rule(data=st.data())
    def replace(self, data: st.DataObject) -> None:
        creating = sorted(t.tablet_id for t in self.catalog.tablets.values()
                          if t.state is TabletState.CREATING)
        if creating:
            chosen = data.draw(st.lists(st.sampled_from(creating), min_size=1, max_size=2))
            self.propose(plan_replace_tablets(self.catalog, chosen, servers=SERVERS,
                                              rng=self.rng))

    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        server = data.draw(st.sampled_from(UUIDS))
        ids = [*sorted(self.catalog.tablets), "orphan-tablet"]
        chosen = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=4))
        replicas = [self.draw_replica(data, tablet_id, server) for tablet_id in chosen]
        rep = TabletReport(full=data.draw(st.booleans()), seq=0, replicas=replicas)

        def recheck(catalog: Catalog, done: Any) -> None:
            again = process_report(catalog, server, rep)
            assert isinstance(again, Plan) and again.write.is_empty(), again
            first = describe(done.calls)
            # The one edge-triggered decision (reports.py): peers a newer config dropped
            # are tombstoned when it is recorded; if that call is lost, the peer's own
            # report decides EVICT with the same CAS.
            dropped = [c for c in done.calls if c.dest != server
                       and c.method == "Admin.DeleteTablet" and c.body.mode == "TOMBSTONE"]
            assert describe(again.commit(catalog).calls) == [
                c for c in first if c not in describe(dropped)]
            for call in dropped:
                cas = call.body.cas_config_index
                tablet = catalog.tablets[call.tablet_id]
                own = ReportedReplica(call.tablet_id, "RUNNING", ReportedConsensus(
                    tablet.consensus.term, None, config(cas - 1, call.dest)), None)
                own_plan = process_report(catalog, call.dest, TabletReport(True, 0, [own]))
                assert isinstance(own_plan, Plan)
                assert own_plan.commit(catalog).calls == (call,) or describe(
                    own_plan.commit(catalog).calls) == describe([call])

        result = process_report(self.catalog, server, rep)
        if isinstance(result, Plan):
            for verdict in result.commit(self.catalog.apply(result.write)).reply.verdicts:
                event(verdict.rule.value)
        self.propose(result, recheck)

    def draw_replica(self, data: st.DataObject, tablet_id: str, server: str) -> ReportedReplica:
        state = data.draw(st.sampled_from(REPLICA_STATES))
        record = self.catalog.tablets.get(tablet_id)
        if record is None:
            return ReportedReplica(tablet_id, state)
        recorded = record.consensus
        shape = data.draw(st.sampled_from(["recorded", "older", "newer", "newer_without"]))
        if shape == "recorded":
            cfg = recorded.config
        else:
            delta = data.draw(st.integers(1, 2))
            index = recorded.config.opid_index + (delta if shape.startswith("newer") else -delta)
            others = data.draw(st.lists(st.sampled_from(UUIDS), unique=True, max_size=2))
            members = set(others) - {server} if shape == "newer_without" else {*others, server}
            cfg = config(max(0, index), *sorted(members or {UUIDS[0]}))
        term = max(0, recorded.term + data.draw(st.integers(-1, 2)))
        leader = data.draw(st.sampled_from([None, *cfg.uuids()]))
        table = self.catalog.tables[record.table_id]
        schema = data.draw(st.integers(0, table.schema_version))
        has_consensus = data.draw(st.integers(0, 9)) > 0
        return ReportedReplica(tablet_id, state,
                               ReportedConsensus(term, leader, cfg) if has_consensus else None,
                               schema)

    @rule(data=st.data(), add=st.booleans())
    def change_replicas(self, data: st.DataObject, add: bool) -> None:
        ids = sorted(self.catalog.tablets)
        if not ids:
            return
        tablet_id = data.draw(st.sampled_from(ids))
        uuid = data.draw(st.sampled_from(UUIDS))
        if add:
            self.propose(plan_add_replica(self.catalog, tablet_id,
                                          SERVERS[UUIDS.index(uuid)]))
        else:
            self.propose(plan_remove_replica(self.catalog, tablet_id, uuid))

    @rule(data=st.data(), to=st.booleans())
    def move(self, data: st.DataObject, to: bool) -> None:
        ids = sorted(self.catalog.tablets)
        if not ids:
            return
        tablet_id = data.draw(st.sampled_from(ids))
        source = data.draw(st.sampled_from(UUIDS))
        dest = data.draw(st.sampled_from(SERVERS)) if to else None
        self.propose(plan_move_replica(self.catalog, tablet_id, source, dest))

    @rule(dead=st.sets(st.sampled_from(UUIDS), max_size=2))
    def heal(self, dead: set[str]) -> None:
        live = [s for s in SERVERS if s.uuid not in dead]
        view = server_view({s.uuid for s in live}, dead, live)
        healing = decide(self.catalog, view, self.rng)
        changed = set() if healing.write is None else \
            {t.tablet_id for t in healing.write.write.tablets}
        for plan in healing.changes:
            ((call,),) = [plan.commit(self.catalog).calls]
            assert call.tablet_id not in changed, "one decision per tablet and round"
            check_call(self.catalog, call)
            assert isinstance(call.body, ChangeConfig), call
            assert call.body.change.peer.uuid not in dead or call.body.change.kind == "REMOVE"
        if healing.write is not None:
            self.propose(healing.write)

    # -- invariants

    @invariant()
    def snapshot_is_consistent(self) -> None:
        self.catalog.check()
        assert Catalog.from_rows(self.catalog.rows()) == self.catalog

    @invariant()
    def names_are_live_and_reserved_names_unique(self) -> None:
        for name, table_id in self.catalog.names.items():
            assert self.catalog.tables[table_id].live and self.catalog.tables[table_id].name == name
        reserved = [n for plan, _ in self.in_flight for n in plan.reserve]
        assert len(reserved) == len(set(reserved))


def with_raises_not_committed(plan: Plan[Any], catalog: Catalog) -> None:
    if plan.write.is_empty():
        return
    try:
        plan.commit(catalog)
    except NotCommitted:
        return
    raise AssertionError("a plan released its calls before its write was held")


TestMasterMachine = MasterMachine.TestCase
