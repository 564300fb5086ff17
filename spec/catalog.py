"""The masters' ordering contract, as an executable spec of what a master may do when.

Seed 004 ("Ensure strict ordering", appendix A's fencing audit, KUDU-1353/1374/495) asks a
master to change the catalog with ONE replicated write per operation, to act on tablet
servers only after that write committed, never to delete a replica its catalog does not
say is gone, and to serve only once it leads and has rebuilt its state from the catalog
alone. This module states those rules over the facts a master traces (the master events of
the trace contract) so that the checker can replay a master's trace against them, as it
replays a tablet server's against the lifecycle spec.

State of one master incarnation (``MasterState``): the catalog as this master knows it (the
records it rebuilt when it became ready, advanced by each write it committed since), the
index of the last write it applied, and the term it is the ready leader of (None: not
ready; a restart forgets readiness, it is volatile).

Actions, each a guard (named: the checker reports the name) and an effect, in ``ACTIONS``:

    ready(term, index, catalog)    the leader-ready gate opened: the rebuilt catalog
                                   replaces what the node held
        ReadyTermMonotonic         never ready in a term below one it was ready in
        ReadyLeaderElected         the node's own catalog replica, as its Raft events
                                   left it in this incarnation, leads ``term``: it won
                                   the election of that term and has not left it
    commit(term, index, records)   a catalog write committed and applied
        ReadyLeaderWrites          only the ready leader of ``term`` writes
        CatalogIndexMonotonic      above the last index it applied
    call(term, method, tablet...)  a call to a tablet server released
        ReadyLeaderCalls           only by the ready leader of ``term``
        CallAfterCommit            the committed catalog holds what the call acts on: a
                                   CREATING tablet whose config names the destination
                                   (CreateTablet); the table at the call's schema version
                                   or later (AlterSchema); the tablet (ChangeConfig)
        DeleteOnlyWithRecord       DeleteTablet DELETED: the record is DELETED or REPLACED
                                   or its table REMOVED; TOMBSTONE: the destination is not
                                   a member of the record's config and the CAS names that
                                   config's index. A tablet with no record is never
                                   deleted (appendix A: the one unfenced case)

Invariant after every ready and commit (``half_created``):

    NoHalfCreatedTable             every table not REMOVED has exactly ``num_tablets`` live
                                   (CREATING or RUNNING) tablets, one per partition: a
                                   table is never visible with some of its tablets missing

Across masters (checker/catalog.py, from the facts of every node):

    OneReadyLeaderPerTerm          at most one master is ready in a term
    ReadyHoldsCommitted            a master ready in term t at index i has applied every
                                   write committed in a term below t (i >= its index): the
                                   catalog a new leader serves from lacks nothing committed
    ReadyHoldsCommittedRecords     ...and what it rebuilt holds it: for every record the
                                   last traced write at an index j <= i (any term) wrote,
                                   the catalog of a master_ready at index i holds that
                                   record, at the write's row version or later, and at
                                   the same version the very same record. Comparing
                                   indexes alone accepts a rebuild that claims index i
                                   but lost rows or writes (a scan of a stale snapshot)

Why ReadyHoldsCommittedRecords compares (record id, row version, digest) and not the
whole catalog or a hash chain of the writes: a write that failed at its master (KUDU-495)
is not traced but may commit later, so the checker never knows every write below i, and
a chain or a digest of the catalog at i cannot be recomputed from the traced writes (nor
by the master: its rebuild reads rows, not the log, which copies and log GC truncate).
What needs no such knowledge: rows are never deleted (C1); an entry at j <= i committed
once is the same entry on every replica that applied i (State Machine Safety), whoever
wrote it and in whatever term; and a row's version counts its writes (impl C4: a write
holds the previous version + 1, and two writes of one snapshot never both commit), so
along the committed log a row's versions only grow, one write per version. Hence at i
the row exists, its version is at least that of the last traced write at or below i
(an untraced write may only have raised it), and if it is equal the row is that write's
(same digest). Records traced with version 0 (no version given) are compared by
presence only. The cost is the records the traced writes hold (facts.CatalogRecord, two
ints and two short strings each) plus, per ready, its records (facts.MasterReady.holds):
the size of the catalog once per election or rebuild.

Why ReadyLeaderElected reads the replica's replayed state and not a global table of
``become_leader`` facts: the gate opens only while the replica leads and has committed
an entry of its term (impl/master/gate.py checks both under the write lock and traces
``master_ready`` without yielding). The replica's steps are traced in the core's order
(impl/consensus/plan.py), and nothing of a term commits before that term's
``become_leader`` fact is written (no message leaves before the steps emitted before it
are traced, and the leader counts itself only after its own append, a later step), so
the ``become_leader`` of ``term`` and every earlier step down are in the file, in seq
order, before the ``master_ready`` line; a step down after the check comes after it. At
that line the replay of the catalog replica (checker/local.py) must therefore be leader
with cmeta term ``term``, in this incarnation (a restart forgets leadership). That is
stronger than "won term t somewhere": it also rejects a gate that opens after its replica
was deposed. It applies to a node
whose trace holds its catalog replica's events at all (a real master always does: it
creates or starts the replica before its gate can open); the catalog-only corpora of
tests/trace/bad_catalog.py, which write master events alone, are not constrained by it
(``Ready.replica`` None).

Why these are sound for a correct master (impl/master/server.py): it traces ``master_ready``
under the write lock once it leads, has committed an entry of its term and applied its
whole log; ``catalog_commit`` after its write's entry applied, before any call the write
releases (``master_call``, traced at release); the rebuilt catalog and the committed writes
are exactly the rows (C1: rows are never deleted), so the view a node replays is the
catalog it decided on. A write that failed (KUDU-495) is not traced and marks the catalog
for a rebuild: nothing is released until the next ``master_ready`` (same term) carries the
rows, the write included if it committed after all.

Values here are plain Python (the catalog is not part of the z3-proven tablet spec); the
mutants (spec/mutants.py, ``CATALOG_MUTANTS``) drop one rule each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

TABLE_STATES: Final = ("PREPARING", "RUNNING", "ALTERING", "REMOVED")
TABLET_STATES: Final = ("CREATING", "RUNNING", "REPLACED", "DELETED")
LIVE_TABLET: Final = frozenset({"CREATING", "RUNNING"})
GONE_TABLET: Final = frozenset({"REPLACED", "DELETED"})
METHODS: Final = ("create_tablet", "delete_tablet", "alter_schema", "change_config")


@attrs.frozen
class TableRow:
    table_id: str
    name: str
    state: str
    schema_version: int
    num_tablets: int


@attrs.frozen
class TabletRow:
    tablet_id: str
    table_id: str
    partition: int
    state: str
    config_index: int
    peers: frozenset[str]


@attrs.frozen
class Call:
    term: int
    method: str
    tablet_id: str
    dest: str
    mode: str | None = None
    cas_config_index: int | None = None
    schema_version: int | None = None


@attrs.frozen
class MasterState:
    """One master incarnation's view (module docstring)."""

    tables: Mapping[str, TableRow] = attrs.field(factory=dict)
    tablets: Mapping[str, TabletRow] = attrs.field(factory=dict)
    index: int = 0
    ready_term: int | None = None
    max_ready_term: int = 0  # across incarnations: terms only grow


def restart(s: MasterState) -> MasterState:
    """A new incarnation: readiness and the view are volatile; the terms seen are not."""
    return MasterState(max_ready_term=s.max_ready_term)


def _upsert(s: MasterState, tables: Iterable[TableRow],
            tablets: Iterable[TabletRow]) -> tuple[dict[str, TableRow], dict[str, TabletRow]]:
    new_tables = dict(s.tables)
    new_tablets = dict(s.tablets)
    for t in tables:
        new_tables[t.table_id] = t
    for tb in tablets:
        new_tablets[tb.tablet_id] = tb
    return new_tables, new_tablets


# ---------------------------------------------------------------------------- guards
# Each returns None when the step is allowed, else the message of the broken rule.

@attrs.frozen
class ReplicaView:
    """The node's catalog replica when the gate opened, as the tablet replay left it:
    its cmeta ``term``, whether it leads, and whether that state is of the incarnation the
    ``master_ready`` is in (False: the replica has no event since the restart)."""

    term: int
    leader: bool
    this_incarnation: bool


@attrs.frozen
class Ready:
    term: int
    index: int
    tables: tuple[TableRow, ...]
    tablets: tuple[TabletRow, ...]
    # None: the node's trace holds no event of its catalog replica (module docstring).
    replica: ReplicaView | None = None


@attrs.frozen
class Commit:
    term: int
    index: int
    op: str
    tables: tuple[TableRow, ...]
    tablets: tuple[TabletRow, ...]


def ready_term_monotonic(s: MasterState, a: Ready) -> str | None:
    if a.term < s.max_ready_term:
        return f"ready in term {a.term} after being ready in term {s.max_ready_term}"
    return None


def ready_leader_elected(s: MasterState, a: Ready) -> str | None:
    r = a.replica
    if r is None:
        return None
    if not r.this_incarnation:
        return (f"ready in term {a.term} before its catalog replica took any step in this "
                f"incarnation (a restart forgets leadership)")
    if not r.leader or r.term != a.term:
        return (f"ready in term {a.term} but its catalog replica "
                + (f"leads term {r.term}" if r.leader else
                   f"is not leader in term {r.term}")
                + (f", never elected in term {a.term}" if r.term != a.term else
                   " (it lost the election or stepped down)"))
    return None


def record_key(kind: str, record_id: str) -> str:
    """A record's id as ReadyHoldsCommittedRecords compares it: the catalog row's key
    (``table/<id>``, ``tablet/<id>``), so that a table and a tablet never share one."""
    return f"{kind}/{record_id}"


def ready_leader_writes(s: MasterState, a: Commit) -> str | None:
    if s.ready_term != a.term:
        return (f"a catalog write of term {a.term} by a master "
                + ("not ready" if s.ready_term is None else f"ready in term {s.ready_term}"))
    return None


def catalog_index_monotonic(s: MasterState, a: Commit) -> str | None:
    if a.index <= s.index:
        return f"catalog write at index {a.index}, not above the last applied {s.index}"
    return None


def ready_leader_calls(s: MasterState, c: Call) -> str | None:
    if s.ready_term != c.term:
        return (f"{c.method} for tablet {c.tablet_id} released in term {c.term} by a master "
                + ("not ready" if s.ready_term is None else f"ready in term {s.ready_term}"))
    return None


def call_after_commit(s: MasterState, c: Call) -> str | None:
    if c.method == "delete_tablet":
        return None  # DeleteOnlyWithRecord
    record = s.tablets.get(c.tablet_id)
    if record is None:
        return (f"{c.method} for tablet {c.tablet_id}, which the committed catalog has no "
                f"record of")
    if c.method == "create_tablet":
        if record.state != "CREATING" or c.dest not in record.peers:
            return (f"create_tablet of {c.tablet_id} on {c.dest}: the committed record is "
                    f"{record.state} with members {sorted(record.peers)}")
    elif c.method == "alter_schema":
        table = s.tables.get(record.table_id)
        have = table.schema_version if table is not None else None
        if have is None or c.schema_version is None or have < c.schema_version:
            return (f"alter_schema of {c.tablet_id} to version {c.schema_version}: the "
                    f"committed table is at version {have}")
    return None


def delete_only_with_record(s: MasterState, c: Call) -> str | None:
    if c.method != "delete_tablet":
        return None
    record = s.tablets.get(c.tablet_id)
    if record is None:
        return (f"delete_tablet of {c.tablet_id} on {c.dest}: the catalog has no record of "
                f"it (a tablet never heard of is kept)")
    table = s.tables.get(record.table_id)
    if c.mode == "DELETED":
        if record.state in GONE_TABLET or (table is not None and table.state == "REMOVED"):
            return None
        return (f"delete_tablet DELETED of {c.tablet_id} on {c.dest}: the committed record "
                f"is {record.state}"
                + (f" and its table {table.state}" if table is not None else ""))
    if c.dest in record.peers:
        return (f"delete_tablet TOMBSTONE of {c.tablet_id} on {c.dest}, a member of the "
                f"record's config (index {record.config_index})")
    if c.cas_config_index != record.config_index:
        return (f"delete_tablet TOMBSTONE of {c.tablet_id} on {c.dest} with CAS "
                f"{c.cas_config_index}, not the record's config index {record.config_index}")
    return None


# ---------------------------------------------------------------------------- invariant


def half_created(s: MasterState) -> str | None:
    """NoHalfCreatedTable: the first table (by id) not REMOVED whose live tablets are not
    exactly one per partition, described; None when every table is whole."""
    live: dict[str, list[int]] = {}
    for tb in s.tablets.values():
        if tb.state in LIVE_TABLET:
            live.setdefault(tb.table_id, []).append(tb.partition)
    for table_id in sorted(s.tables):
        t = s.tables[table_id]
        if t.state == "REMOVED":
            continue
        parts = sorted(live.get(table_id, ()))
        if parts != list(range(t.num_tablets)):
            return (f"table {t.name} ({table_id}) is {t.state} with {t.num_tablets} tablets "
                    f"but its live tablets hold partitions {parts}")
    return None


# ---------------------------------------------------------------------------- the table


@attrs.frozen
class Rule:
    name: str
    guard: Callable[[MasterState, Any], str | None]  # the action's record: Ready, ...


@attrs.frozen
class CatalogSpec:
    """The rules by action, and the invariant. ``default`` is the spec; a mutant is the
    same table with one rule dropped (spec/mutants.py)."""

    rules: Mapping[str, tuple[Rule, ...]]
    invariant: Callable[[MasterState], str | None] | None = half_created
    invariant_name: str = "NoHalfCreatedTable"
    # The checks across masters this spec asks for (decided by checker/catalog.py).
    global_rules: frozenset[str] = frozenset({"OneReadyLeaderPerTerm", "ReadyHoldsCommitted",
                                              "ReadyHoldsCommittedRecords"})

    def without(self, name: str) -> CatalogSpec:
        if name == self.invariant_name:
            return attrs.evolve(self, invariant=None)
        if name in self.global_rules:
            return attrs.evolve(self, global_rules=self.global_rules - {name})
        if not any(r.name == name for rules in self.rules.values() for r in rules):
            raise KeyError(f"no catalog rule named {name}")
        return attrs.evolve(self, rules={
            action: tuple(r for r in rules if r.name != name)
            for action, rules in self.rules.items()})

    def names(self) -> tuple[str, ...]:
        rules = [r.name for rules in self.rules.values() for r in rules]
        return (*rules, self.invariant_name, *sorted(self.global_rules))

    def _check(self, action: str, s: MasterState, a: object) -> tuple[str, str] | None:
        for r in self.rules[action]:
            why = r.guard(s, a)
            if why is not None:
                return r.name, why
        return None

    def _after(self, s: MasterState) -> tuple[str, str] | None:
        if self.invariant is None:
            return None
        why = self.invariant(s)
        return None if why is None else (self.invariant_name, why)

    def ready(self, s: MasterState, a: Ready) -> tuple[MasterState, tuple[str, str] | None]:
        """The state after ``a`` and the first broken rule (name, message), if any. A
        broken guard still takes the step: the replay goes on from what the master did."""
        broken = self._check("ready", s, a)
        post = MasterState({t.table_id: t for t in a.tables},
                           {t.tablet_id: t for t in a.tablets}, a.index, a.term,
                           max(s.max_ready_term, a.term))
        return post, broken or self._after(post)

    def commit(self, s: MasterState, a: Commit) -> tuple[MasterState, tuple[str, str] | None]:
        broken = self._check("commit", s, a)
        tables, tablets = _upsert(s, a.tables, a.tablets)
        post = attrs.evolve(s, tables=tables, tablets=tablets, index=max(s.index, a.index))
        return post, broken or self._after(post)

    def call(self, s: MasterState, c: Call) -> tuple[str, str] | None:
        return self._check("call", s, c)


DEFAULT: Final = CatalogSpec({
    "ready": (Rule("ReadyTermMonotonic", ready_term_monotonic),
              Rule("ReadyLeaderElected", ready_leader_elected)),
    "commit": (Rule("ReadyLeaderWrites", ready_leader_writes),
               Rule("CatalogIndexMonotonic", catalog_index_monotonic)),
    "call": (Rule("ReadyLeaderCalls", ready_leader_calls),
             Rule("CallAfterCommit", call_after_commit),
             Rule("DeleteOnlyWithRecord", delete_only_with_record)),
})

__all__ = ["DEFAULT", "Call", "CatalogSpec", "Commit", "MasterState",
           "Ready", "ReplicaView", "Rule", "TableRow", "TabletRow", "half_created",
           "record_key", "restart"]
