"""The master core's tables: each is total, and each row is reached and does what it says.

Three tables (the style of tests/consensus/test_transitions.py):

* catalog.TABLE_TRANSITIONS / TABLET_TRANSITIONS: (state or None, event) -> state; with the
  REFUSED_* sets they cover every pair, and a scripted run of the planners reaches every
  row (the PREPARING row from a hand-made record: no planner writes that state);
* reports.RULES: (situation, reported replica state) -> rule; every one of the 49 pairs is
  built as a real catalog and report, and process_report must classify it so and act as
  the rule says (calls and write);
* tserver_map.HEARTBEAT_TRANSITIONS: (role, registration state, heartbeat input) -> row;
  every one of the 36 triples is driven on a real map and must end in the row's state,
  process the report iff the row says so, and ask to register iff the row says so.
"""

from __future__ import annotations

import itertools
import random

import msgspec
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

from revivify.impl.master.catalog import (
    REFUSED_TABLE,
    REFUSED_TABLET,
    TABLE_EVENTS,
    TABLE_TRANSITIONS,
    TABLET_EVENTS,
    TABLET_TRANSITIONS,
    Catalog,
    CatalogWrite,
    IllegalTransition,
    TableState,
    TabletState,
    next_table_state,
    next_tablet_state,
)
from revivify.impl.master.operations import (
    AlterTable,
    plan_alter_table,
    plan_delete_table,
    plan_replace_tablets,
)
from revivify.impl.master.reports import RULES, Rule, Situation, process_report
from revivify.impl.master.tserver_map import (
    HEARTBEAT_TRANSITIONS,
    INPUTS,
    ROLES,
    HeartbeatInput,
    RegState,
    Role,
    TabletServerMap,
)
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.master_api import (
    REPLICA_STATES,
    Heartbeat,
    Registration,
    ReplicaState,
    ReportedReplica,
    TabletReport,
)

# ---------------------------------------------------------------------------- catalog states


def test_the_state_tables_are_total() -> None:
    table_pairs = set(itertools.product((None, *TableState), TABLE_EVENTS))
    assert set(TABLE_TRANSITIONS) | REFUSED_TABLE == table_pairs
    assert not set(TABLE_TRANSITIONS) & REFUSED_TABLE
    tablet_pairs = set(itertools.product((None, *TabletState), TABLET_EVENTS))
    assert set(TABLET_TRANSITIONS) | REFUSED_TABLET == tablet_pairs
    assert not set(TABLET_TRANSITIONS) & REFUSED_TABLET
    for state, event in REFUSED_TABLE:
        with pytest.raises(IllegalTransition):
            next_table_state(state, event)
    for tstate, tevent in REFUSED_TABLET:
        with pytest.raises(IllegalTransition):
            next_tablet_state(tstate, tevent)


def test_deleted_records_are_final() -> None:
    assert not any(s is TableState.REMOVED for s, _ in TABLE_TRANSITIONS)
    assert not any(s in (TabletState.DELETED, TabletState.REPLACED)
                   for s, _ in TABLET_TRANSITIONS)
    assert TableState.PREPARING not in TABLE_TRANSITIONS.values()


def changes(before: Catalog, after: Catalog) -> set[tuple[str, object, object]]:
    """(kind, state before or None, state after) of every record the write touched."""
    out: set[tuple[str, object, object]] = set()
    for table_id, record in after.tables.items():
        old = before.tables.get(table_id)
        if old != record:
            out.add(("table", None if old is None else old.state, record.state))
    for tablet_id, tablet in after.tablets.items():
        old_tablet = before.tablets.get(tablet_id)
        if old_tablet != tablet:
            out.add(("tablet", None if old_tablet is None else old_tablet.state, tablet.state))
    return out


def allowed() -> set[tuple[str, object, object]]:
    return ({("table", s, after) for (s, _), after in TABLE_TRANSITIONS.items()}
            | {("tablet", s, after) for (s, _), after in TABLET_TRANSITIONS.items()})


def test_every_state_row_is_reached_by_the_planners() -> None:
    seen: set[tuple[str, object, object]] = set()

    def step(catalog: Catalog, new: Catalog) -> Catalog:
        found = changes(catalog, new)
        assert found <= allowed(), found - allowed()
        seen.update(found)
        return new

    catalog = Catalog()
    catalog = step(catalog, create(catalog, live=servers(5))[0])           # create
    first = tablets(catalog)[0]
    catalog = step(catalog, run(catalog, ok(plan_replace_tablets(           # replace
        catalog, [first.tablet_id], servers=servers(5), rng=random.Random(3))))[0])
    catalog = step(catalog, process(catalog, "ts-9", replica(               # report, no leader
        tablets(catalog)[0], leader=None))[0])
    for tablet in tablets(catalog)[1:]:                                     # leader_reported
        catalog = step(catalog, process(catalog, tablet.consensus.config.peers[0].uuid,
                                        replica(tablet, term=1))[0])
    running = tablets(catalog)[1]
    catalog = step(catalog, process(catalog, running.consensus.config.peers[0].uuid,  # report
                                    replica(running, term=2))[0])
    catalog = step(catalog, run(catalog, ok(plan_alter_table(               # rename, RUNNING
        catalog, AlterTable("t", new_name="u"), reserved=())))[0])
    for _ in range(2):                                                      # alter x2
        catalog = step(catalog, run(catalog, ok(plan_alter_table(
            catalog, AlterTable("u", add_columns=(Column(f"c{len(table(catalog, 'u').schema)}"),)),
            reserved=())))[0])
    catalog = step(catalog, run(catalog, ok(plan_alter_table(               # rename, ALTERING
        catalog, AlterTable("u", new_name="t"), reserved=())))[0])
    for tablet in tablets(catalog):                                         # alter_done
        catalog = step(catalog, process(catalog, tablet.consensus.config.peers[0].uuid, replica(
            tablet, term=tablet.consensus.term, leader=tablet.consensus.leader,
            schema_version=2))[0])
    assert table(catalog).state is TableState.RUNNING
    catalog = step(catalog, run(catalog, ok(plan_delete_table(catalog, "t")))[0])  # delete
    catalog, _, _ = create(catalog, "a", request_id="a", seed=1)
    catalog = step(catalog, run(catalog, ok(plan_alter_table(
        catalog, AlterTable("a", add_columns=(Column("c"),)), reserved=())))[0])
    catalog = step(catalog, run(catalog, ok(plan_delete_table(catalog, "a")))[0])  # ALTERING
    # PREPARING: never written by a planner; a row in that state still deletes.
    prepared = msgspec.structs.replace(table(create(Catalog(), "p", seed=2)[0], "p"),
                                       state=TableState.PREPARING)
    catalog = catalog.apply(CatalogWrite(tables=(prepared,)))
    catalog = step(catalog, run(catalog, ok(plan_delete_table(catalog, "p")))[0])
    assert seen == allowed(), allowed() - seen


# ---------------------------------------------------------------------------- report rules


def test_the_rules_are_total() -> None:
    assert set(RULES) == set(itertools.product(Situation, REPLICA_STATES))


def build(situation: Situation, state: ReplicaState) -> tuple[Catalog, str, ReportedReplica]:
    """A catalog, a reporting server and its replica in ``situation`` and ``state``."""
    catalog, _, _ = create(Catalog())
    tablet = tablets(catalog)[0]
    if situation is Situation.NO_RECORD:
        return catalog, "ts-1", msgspec.structs.replace(replica(tablet, state),
                                                        tablet_id="nope")
    if situation is Situation.GONE:
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        return catalog, "ts-1", replica(tablet, state)
    if situation is Situation.NO_CONSENSUS:
        return catalog, "ts-1", replica(tablet, state, consensus=False)
    if situation is Situation.MEMBER:
        return catalog, "ts-1", replica(tablet, state, term=1, leader="ts-1")
    # Record the config at index 5 first.
    catalog, _, _ = process(catalog, "ts-1", replica(tablet, term=2, leader="ts-1",
                                                     config=config(5, "ts-1", "ts-2", "ts-3")))
    tablet = tablets(catalog)[0]
    reported = {
        Situation.STALE_NON_MEMBER: config(3, "ts-1", "ts-2", "ts-3", "ts-4"),
        Situation.NEWER_NON_MEMBER: config(7, "ts-1", "ts-2", "ts-3", "ts-4"),
        Situation.CONFLICT: config(5, "ts-4", "ts-5", "ts-6"),
    }[situation]
    return catalog, "ts-4", replica(tablet, state, term=2, leader=None, config=reported)


@pytest.mark.parametrize(("situation", "state"), sorted(RULES, key=repr))
def test_every_rule_is_reached_and_acts_as_it_says(situation: Situation,
                                                   state: ReplicaState) -> None:
    catalog, server, rep = build(situation, state)
    plan = ok(process_report(catalog, server, report(rep)))
    ((verdict,),) = [plan.commit(catalog.apply(plan.write)).reply.verdicts]
    rule = RULES[(situation, state)]
    assert (verdict.situation, verdict.rule) == (situation, rule)
    calls = describe(plan.commit(catalog.apply(plan.write)).calls)
    if rule is Rule.DELETE:
        assert calls == [(server, "DeleteTablet", ("DELETED", None))]
    elif rule is Rule.EVICT:
        assert calls == [(server, "DeleteTablet", ("TOMBSTONE", 5))]
    elif rule is Rule.UPDATE:
        assert all(method != "DeleteTablet" or detail[0] == "TOMBSTONE"
                   for _, method, detail in calls)
    else:  # every *_KEPT rule, IN_PROGRESS, NO_CONSENSUS: nothing at all
        assert calls == [] and plan.write.is_empty()


# ---------------------------------------------------------------------------- tserver map


def test_the_heartbeat_table_is_total() -> None:
    assert set(HEARTBEAT_TRANSITIONS) == set(itertools.product(ROLES, RegState, INPUTS))
    for (role, _, _), row in HEARTBEAT_TRANSITIONS.items():
        if role == "follower":
            assert not row.process_report and row.next is not RegState.REPORTING


def map_in(role: Role, state: RegState) -> TabletServerMap:
    tsmap = TabletServerMap("m", dead_after=5.0)
    tsmap.set_leadership(1, leader=True)
    if state is not RegState.UNKNOWN:
        tsmap.heartbeat(Heartbeat("ts-1", 1, Registration("addr")), now=0.0)
    if state is RegState.REPORTING:
        tsmap.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(True, 0, [])), now=0.0)
    if role == "follower":
        tsmap.set_leadership(2, leader=False)
    entry = tsmap.entry("ts-1")
    assert (RegState.UNKNOWN if entry is None else entry.state) is state
    return tsmap


def heartbeat_for(kind: HeartbeatInput, last_seq: int) -> Heartbeat:
    reports = {
        "full_report": TabletReport(True, last_seq + 1, []),
        "incremental_report": TabletReport(False, last_seq + 1, []),
        "stale_report": TabletReport(False, last_seq, []),
        "gap_report": TabletReport(False, last_seq + 2, []),
    }
    if kind == "register":
        return Heartbeat("ts-1", 1, Registration("addr"))
    return Heartbeat("ts-1", 1, report=reports.get(kind))


@pytest.mark.parametrize(("role", "state", "kind"),
                         sorted(HEARTBEAT_TRANSITIONS, key=repr))
def test_every_heartbeat_row_is_reached(role: Role, state: RegState,
                                       kind: HeartbeatInput) -> None:
    tsmap = map_in(role, state)
    entry = tsmap.entry("ts-1")
    verdict = tsmap.heartbeat(heartbeat_for(kind, -1 if entry is None else entry.last_report_seq),
                              now=1.0)
    row = HEARTBEAT_TRANSITIONS[(role, state, kind)]
    assert verdict.inputs == (kind,)
    after = tsmap.entry("ts-1")
    assert (RegState.UNKNOWN if after is None else after.state) is row.next
    assert (verdict.report is not None) == row.process_report
    assert verdict.response.needs_register == row.needs_register
    assert verdict.response.needs_full_report == (
        role == "leader" and row.next is RegState.REGISTERED)

