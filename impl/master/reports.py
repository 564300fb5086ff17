"""Tablet-report processing: what one server's report means for the catalog, as a pure plan.

Seed 004 appendix B "Heartbeat for tablet t", with the fixes the seed asks for and the
fencing rule of appendix A. `process_report(catalog, server, report)` returns ONE Plan (the
contract of operations.py): the catalog rows the report changes, in one write, and the
calls to tablet servers, released by ``plan.commit`` once that write committed (an empty
write commits at once). Only the leader master processes reports (tserver_map.py).

Each reported replica is classified by a situation (what the catalog says about it) and its
reported state, and the (situation, state) pair selects one rule in `RULES`, a total table:

    situation         what the committed records say
    ---------         ---------------------------------------------------------------------
    NO_RECORD         no tablet record (or it names no table record)
    GONE              the tablet is DELETED or REPLACED, or its table is REMOVED
    NO_CONSENSUS      live record; the replica reported no committed consensus state
    MEMBER            live record; the reporter is in the recorded committed config
    STALE_NON_MEMBER  not in the recorded config, and the replica's config is older than
                      the recorded one (or the same, and the replica is not in it either)
    NEWER_NON_MEMBER  not in the recorded config, but the replica's config is newer: it was
                      just added and the catalog has not heard (Kudu's "in the process of
                      copying" case)
    CONFLICT          not in the recorded config, the same config index, but a member of
                      its own config: two configs at one index (a bug elsewhere); kept

    rule              action
    ----              ---------------------------------------------------------------------
    ORPHAN_KEPT       nothing. Appendix A: a replica the catalog has no record of is never
                      deleted (records are kept forever, so this is a drastic case: a server
                      reporting to the wrong cluster). The only unfenced delete is gone.
    FAILED_KEPT       nothing: a FAILED replica is evidence; nothing is decided from it.
    IN_PROGRESS       nothing: a deletion is already running there.
    DELETE            DeleteTablet mode DELETED (no CAS needed: a deleted tablet is never
                      undeleted, so the decision cannot become wrong). A tombstone of a
                      deleted tablet gets it too (its cmeta has no future to vote in).
    TOMBSTONE_KEPT    nothing: a tombstone of a live tablet is not deleted again, and its
                      stale consensus facts update nothing.
    NO_CONSENSUS      nothing to learn yet (a replica starting or copying without cmeta).
    EVICT             DeleteTablet mode TOMBSTONE, cas_config_index = the recorded config's
                      opid_index: the server refuses if its config is newer than what the
                      master decided on.
    UPDATE            merge the reported consensus state (below); CREATING -> RUNNING once
                      a leader is known; record the schema version; evict what the new
                      config dropped; send an alter if the tablet's schema is old.
    CONFLICT_KEPT     nothing (the anomaly is named in the reply for the shell to log).

The merge (appendix B step 6, Kudu's 6a-6d): a reported leader is disregarded unless it is in
the reporter's own config. The record changes only if the reported committed config is
newer (higher opid_index), or the report names a leader and the record has none for that
term or the report's term is newer. Terms never go back in a record. In the same term, a
missing reported leader keeps the recorded one, and two different leaders for one term
change nothing (CONFLICT noted). When the config is replaced by a newer one, every peer of
the old config missing from the new one is tombstoned with the new config's index as CAS
(appendix A case 4), and so is the reporter if it is not in the new config itself.

Schema (appendix B steps 10-11): a replica reporting version v shows v is committed on the
tablet, so the record keeps the highest version reported. If that is below the table's, the
recorded leader gets an idempotent AlterSchema. A table ALTERING becomes RUNNING in the
same write once every live tablet has reported the table's version (tablet rows first).

Full and incremental reports are processed alike: every rule looks only at the replica
and the committed records, so processing a report again, or a new leader processing the
full report its predecessor already saw, writes nothing new and decides the same calls
again (KUDU-1374; tested by the state machine). One decision is edge-triggered: the peers a
newer config dropped are tombstoned when that config is first recorded. If that call is
lost with its master, the dropped peer's own report (in full, to the new leader) finds it
outside the recorded config with an older one, and rule EVICT sends the same tombstone with
the same CAS.

The plan reads (for freshness, operations.py) every tablet and table record it consulted,
not only those it writes: a report planned before another write changed one of them is
planned again, so every call it releases matches the committed records.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

import attrs

from revivify.impl.consensus.messages import Config
from revivify.impl.tserver.master_api import (
    REPLICA_STATES,
    ReplicaState,
    ReportedReplica,
    TabletReport,
)

from .calls import TabletServerCall, alter_schema, delete_tablet
from .catalog import (
    Catalog,
    CatalogWrite,
    ConsensusState,
    TableRecord,
    TableState,
    TabletEvent,
    TabletRecord,
    TabletState,
    evolve,
    next_table_state,
    next_tablet_state,
    record_key,
)
from .errors import InvalidArgument
from .operations import Plan, make_plan


class Situation(enum.Enum):
    NO_RECORD = "NO_RECORD"
    GONE = "GONE"
    NO_CONSENSUS = "NO_CONSENSUS"
    MEMBER = "MEMBER"
    STALE_NON_MEMBER = "STALE_NON_MEMBER"
    NEWER_NON_MEMBER = "NEWER_NON_MEMBER"
    CONFLICT = "CONFLICT"


class Rule(enum.Enum):
    ORPHAN_KEPT = "ORPHAN_KEPT"
    FAILED_KEPT = "FAILED_KEPT"
    IN_PROGRESS = "IN_PROGRESS"
    DELETE = "DELETE"
    TOMBSTONE_KEPT = "TOMBSTONE_KEPT"
    NO_CONSENSUS = "NO_CONSENSUS"
    EVICT = "EVICT"
    UPDATE = "UPDATE"
    CONFLICT_KEPT = "CONFLICT_KEPT"


def _rules() -> dict[tuple[Situation, ReplicaState], Rule]:
    table: dict[tuple[Situation, ReplicaState], Rule] = {}
    for state in REPLICA_STATES:
        table[(Situation.NO_RECORD, state)] = Rule.ORPHAN_KEPT
        for situation in Situation:
            if situation is Situation.NO_RECORD:
                continue
            if state == "FAILED":
                rule = Rule.FAILED_KEPT
            elif state == "DELETING":
                rule = Rule.IN_PROGRESS
            elif situation is Situation.GONE:
                rule = Rule.DELETE
            elif state == "TOMBSTONED":
                rule = Rule.TOMBSTONE_KEPT
            else:
                rule = {
                    Situation.NO_CONSENSUS: Rule.NO_CONSENSUS,
                    Situation.MEMBER: Rule.UPDATE,
                    Situation.NEWER_NON_MEMBER: Rule.UPDATE,
                    Situation.STALE_NON_MEMBER: Rule.EVICT,
                    Situation.CONFLICT: Rule.CONFLICT_KEPT,
                }[situation]
            table[(situation, state)] = rule
    return table


# (situation, reported replica state) -> rule: total (tests/master/test_transitions.py).
RULES: Final[Mapping[tuple[Situation, ReplicaState], Rule]] = _rules()


@attrs.frozen
class Verdict:
    """What the report of one replica led to (for the shell's logs and the tests)."""

    tablet_id: str
    situation: Situation
    rule: Rule
    notes: tuple[str, ...] = ()


@attrs.frozen
class ReportProcessed:
    server_uuid: str
    verdicts: tuple[Verdict, ...]

    def rule_of(self, tablet_id: str) -> Rule:
        return next(v.rule for v in self.verdicts if v.tablet_id == tablet_id)


def situation_of(catalog: Catalog, server_uuid: str, replica: ReportedReplica) -> Situation:
    """What the committed records say about this replica (module docstring)."""
    record = catalog.tablets.get(replica.tablet_id)
    table = None if record is None else catalog.tables.get(record.table_id)
    if record is None or table is None:
        return Situation.NO_RECORD
    if not record.live or not table.live:
        return Situation.GONE
    if replica.consensus is None:
        return Situation.NO_CONSENSUS
    if record.is_member(server_uuid):
        return Situation.MEMBER
    reported = replica.consensus.config
    recorded = record.consensus.config
    if reported.opid_index < recorded.opid_index:
        return Situation.STALE_NON_MEMBER
    if reported.opid_index > recorded.opid_index:
        return Situation.NEWER_NON_MEMBER
    if reported.peer(server_uuid) is None:
        return Situation.STALE_NON_MEMBER  # it knows it was removed at this very index
    return Situation.CONFLICT


def process_report(catalog: Catalog, server_uuid: str,
                   report: TabletReport) -> Plan[ReportProcessed] | InvalidArgument:
    """The plan for one report of ``server_uuid`` (see the module docstring)."""
    ids = [r.tablet_id for r in report.replicas]
    if len(ids) != len(set(ids)):
        return InvalidArgument("a report lists a tablet twice")
    verdicts: list[Verdict] = []
    calls: list[TabletServerCall] = []
    updated: dict[str, TabletRecord] = {}
    for replica in report.replicas:
        situation = situation_of(catalog, server_uuid, replica)
        rule = RULES[(situation, replica.state)]
        notes: tuple[str, ...] = ()
        if rule is Rule.DELETE:
            calls.append(delete_tablet(server_uuid, replica.tablet_id, "DELETED", None,
                                       "the tablet or its table was deleted"))
        elif rule is Rule.EVICT:
            record = catalog.tablets[replica.tablet_id]
            index = record.consensus.config.opid_index
            calls.append(delete_tablet(
                server_uuid, replica.tablet_id, "TOMBSTONE", index,
                f"not in the committed config (index {index}) the catalog holds"))
        elif rule is Rule.UPDATE:
            record = catalog.tablets[replica.tablet_id]
            table = catalog.tables[record.table_id]
            new_record, more_calls, notes = _update(record, table, server_uuid, replica)
            calls.extend(more_calls)
            if new_record != record:
                updated[record.tablet_id] = new_record
        verdicts.append(Verdict(replica.tablet_id, situation, rule, notes))

    tables = _finished_alters(catalog, updated)
    write = CatalogWrite(tablets=tuple(updated[t] for t in sorted(updated)),
                         tables=tuple(tables[t] for t in sorted(tables)))
    # Every record a decision rested on, written or not: a plan proposed after one of them
    # changed is re-planned, so the calls it releases always match the committed records
    # (a stale EVICT would only be refused by its CAS, but it is not even sent).
    reads: dict[bytes, int] = {}
    for consulted in report.replicas:
        tablet = catalog.tablets.get(consulted.tablet_id)
        if tablet is not None:
            reads[record_key(tablet)] = tablet.version
            owner = catalog.tables.get(tablet.table_id)
            if owner is not None:
                reads[record_key(owner)] = owner.version
    # `_finished_alters` looked at every tablet of an ALTERING table: those are reads too.
    # Without them, two reports planned on one snapshot (the last two tablets of an alter,
    # from two servers) would each see the other's tablet at the old version, both commit,
    # and the table would stay ALTERING with every tablet at the new version (found in real
    # processes: tests/master_integration/test_master_failover.py).
    for table_id in {t.table_id for t in updated.values()}:
        owner = catalog.tables[table_id]
        if owner.state is TableState.ALTERING:
            for tablet in catalog.tablets_of(table_id):
                reads[record_key(tablet)] = tablet.version
    return make_plan("tablet_report", write, ReportProcessed(server_uuid, tuple(verdicts)), calls,
                 tables=tables, tablets=updated, reads=reads)


def _update(record: TabletRecord, table: TableRecord, server_uuid: str,
            replica: ReportedReplica,
            ) -> tuple[TabletRecord, list[TabletServerCall], tuple[str, ...]]:
    """Rule UPDATE for one replica: the new record, the calls it implies, notes."""
    assert replica.consensus is not None
    notes: list[str] = []
    calls: list[TabletServerCall] = []
    merged, conflict = merge_consensus(record.consensus, replica.consensus.term,
                                       replica.consensus.leader, replica.consensus.config)
    if conflict:
        notes.append(f"two leaders reported for term {record.consensus.term}: "
                     f"{record.consensus.leader} and {replica.consensus.leader}")
    changes: dict[str, object] = {}
    if merged != record.consensus:
        changes["consensus"] = merged
        notes.append("consensus")
        old, new = record.consensus.config, merged.config
        if new.opid_index > old.opid_index:
            for peer in old.peers:
                if new.peer(peer.uuid) is None:
                    calls.append(delete_tablet(
                        peer.uuid, record.tablet_id, "TOMBSTONE", new.opid_index,
                        f"removed from the config at index {new.opid_index}"))
                    notes.append(f"evicted {peer.uuid}")
    if merged.config.peer(server_uuid) is None and replica.state != "TOMBSTONED" \
            and merged.config.opid_index >= replica.consensus.config.opid_index \
            and not any(c.dest == server_uuid for c in calls):
        # The reporter is not in the (newer) config it reported itself: it knows it was
        # removed; tombstone it with that config's index as the CAS.
        calls.append(delete_tablet(server_uuid, record.tablet_id, "TOMBSTONE",
                                   merged.config.opid_index,
                                   "not in its own committed config"))
        notes.append(f"evicted {server_uuid}")
    event: TabletEvent = "report"
    if record.state is TabletState.CREATING and merged.leader is not None:
        event = "leader_reported"
        notes.append("running")
    if replica.schema_version is not None \
            and replica.schema_version > record.reported_schema_version:
        changes["reported_schema_version"] = replica.schema_version
        notes.append(f"schema version {replica.schema_version}")
    reported_schema = max(record.reported_schema_version, replica.schema_version or 0)
    if replica.schema_version is not None and reported_schema < table.schema_version \
            and merged.leader is not None:
        calls.append(alter_schema(merged.leader, record.tablet_id, table,
                                  f"reported schema version {replica.schema_version} < "
                                  f"{table.schema_version}"))
        notes.append("alter sent")
    state = next_tablet_state(record.state, event)
    if state is not record.state:
        changes["state"] = state
        changes["state_message"] = f"leader {merged.leader} reported in term {merged.term}"
    if not changes:
        return record, calls, tuple(notes)
    return evolve(record, **changes), calls, tuple(notes)


def merge_consensus(recorded: ConsensusState, term: int, leader: str | None,
                    config: Config) -> tuple[ConsensusState, bool]:
    """The recorded consensus state after a report of (term, leader, committed config);
    and whether the report named another leader for the recorded term (then nothing
    changes). See the module docstring."""
    if leader is not None and config.peer(leader) is None:
        leader = None  # a leader outside the reporter's own config is not trusted
    newer_config = config.opid_index > recorded.config.opid_index
    newer_leader = leader is not None and (
        term > recorded.term or (term == recorded.term and recorded.leader is None))
    if term == recorded.term and leader is not None and recorded.leader is not None \
            and leader != recorded.leader:
        return recorded, True
    if not (newer_config or newer_leader):
        return recorded, False
    new_config = config if newer_config else recorded.config
    if term > recorded.term:
        new_term, new_leader = term, leader
    elif term == recorded.term:
        new_term, new_leader = term, recorded.leader or leader
    else:
        new_term, new_leader = recorded.term, recorded.leader
    if new_leader is not None and new_config.peer(new_leader) is None:
        new_leader = None  # the leader we knew is not in the config we now record
    merged = ConsensusState(new_term, new_leader, new_config)
    assert merged.term >= recorded.term
    assert merged.config.opid_index >= recorded.config.opid_index
    return merged, False


def _finished_alters(catalog: Catalog,
                     updated: Mapping[str, TabletRecord]) -> dict[str, TableRecord]:
    """The ALTERING tables of the updated tablets whose every live tablet now reports the
    table's schema version: RUNNING again, in the same write (appendix B step 11.2)."""
    out: dict[str, TableRecord] = {}
    for table_id in sorted({t.table_id for t in updated.values()}):
        table = catalog.tables[table_id]
        if table.state is not TableState.ALTERING:
            continue
        tablets = [updated.get(t.tablet_id, t) for t in catalog.tablets_of(table_id)]
        if all(t.reported_schema_version >= table.schema_version for t in tablets if t.live):
            out[table_id] = evolve(table, state=next_table_state(table.state, "alter_done"),
                                   state_message="")
    return out


__all__ = [
    "RULES",
    "ReportProcessed",
    "Rule",
    "Situation",
    "Verdict",
    "merge_consensus",
    "process_report",
    "situation_of",
]
