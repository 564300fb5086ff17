"""The catalog checks: a master's trace replayed against the catalog spec (spec/catalog.py).

A master's trace file holds, beside its catalog tablet's Raft events (checked like any
tablet's), the master events of the trace contract (``master_ready``, ``catalog_commit``,
``master_call``; tablet null). ``CatalogReplay`` takes one node's master events in the
order the driver replays them (incarnation, then seq), keeps the node's ``MasterState`` and
reports each broken rule of the spec as a finding at its line: the kind is the rule's name
(``CallAfterCommit``, ``DeleteOnlyWithRecord``, ``NoHalfCreatedTable``...). A new
incarnation is a restart (readiness is volatile).

The checks across masters need every node's facts, so the replay emits them as global
facts (``facts.MasterReady`` per (term, node) and ``facts.CatalogWrite`` per write, each
with its catalog index) and ``CatalogGlobal`` decides them, in both engines
(the Spark driver merges the same facts into the same tables):

* ``OneReadyLeaderPerTerm``: at most one node is ready in a term;
* ``ReadyHoldsCommitted``: a node ready in term t at catalog index i holds every write
  committed in a term below t (i is at least that write's index). The first ready of a
  node in a term is kept (the lowest index: a later rebuild in the same term only knows
  more), each write's (term, index).
* ``ReadyHoldsCommittedRecords``: what a ready at catalog index i rebuilt holds, for
  every record a traced write committed at an index <= i (in any term), that record at
  the write's row version or a later one, and the write's very record at the same
  version (spec/catalog.py says why this comparison and why any term). Each write emits
  one ``facts.CatalogRecord`` per record it holds (its id, row version and a digest of
  the record); the global table keeps them per record id. Each ready's fact carries the
  same of every record it holds (``MasterReady.holds``) and every ready is kept, not
  only a term's first: a later rebuild in the same term (after a failed write) may lose
  rows the first had.

``ReadyLeaderElected`` is not across masters: it compares a node's ``master_ready`` with
its own catalog replica's replayed state at that line, which the driver hands to
``CatalogReplay.feed`` (``ReplicaView``; local.py reads it from the node's live keys, in
both engines, since each node is replayed whole by one task).

Memory: one ``MasterState`` per node being replayed (the catalog, a few hundred bytes per
record) and, globally, one fact per ready (with ~60 bytes per record it holds: the
catalog's size, once per election or rebuild) and per catalog write, and one per record
per write (two ints and two short strings): bounded by the catalog's size times the
number of elections, plus the records the traced writes hold, which is what the traces'
``catalog_commit`` lines hold anyway; catalog writes are rare next to the data path's
events.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable
from typing import Any, Final, TypeAlias

import attrs
import msgspec

from revivify.checker.facts import CatalogRecord, CatalogWrite, FactSink, MasterReady
from revivify.checker.replay import KeyState, Replayer, Violation
from revivify.contract.events import (
    CATALOG_TABLET,
    CatalogCommitArgs,
    CatalogTable,
    CatalogTablet,
    MasterCallArgs,
    MasterReadyArgs,
)
from revivify.spec.catalog import (
    DEFAULT,
    Call,
    CatalogSpec,
    Commit,
    MasterState,
    Ready,
    ReplicaView,
    TableRow,
    TabletRow,
    record_key,
    restart,
)

# A traced write of one record: (index, row version, digest, term, node, file, line).
_RecordWrite: TypeAlias = tuple[int, int, str, int, str, str, int]

_DECODERS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    "master_ready": msgspec.json.Decoder(MasterReadyArgs),
    "catalog_commit": msgspec.json.Decoder(CatalogCommitArgs),
    "master_call": msgspec.json.Decoder(MasterCallArgs),
}


def _table(t: CatalogTable) -> TableRow:
    return TableRow(t.id, t.name, t.state, t.schema_version, t.num_tablets)


def _tablet(t: CatalogTablet) -> TabletRow:
    return TabletRow(t.id, t.table, t.partition, t.state, t.config_index, frozenset(t.peers))


def digest(r: CatalogTable | CatalogTablet) -> str:
    """A record's contents as 16 hex digits (blake2b-64 of its canonical JSON, peers
    sorted): two records at one row version must have the same digest. 64 bits: a
    collision between a write and a rebuilt record that differ is a 2^-64 event per
    comparison, not a design risk."""
    if isinstance(r, CatalogTablet):
        r = msgspec.structs.replace(r, peers=sorted(r.peers))
    return hashlib.blake2b(msgspec.json.encode(r), digest_size=8).hexdigest()


def keys_of(tables: list[CatalogTable], tablets: list[CatalogTablet]
            ) -> list[tuple[str, int, str]]:
    """The records as ReadyHoldsCommittedRecords compares them, sorted: (id as
    ``spec.catalog.record_key`` spells it, row version, digest)."""
    return sorted([(record_key("table", t.id), t.version, digest(t)) for t in tables]
                  + [(record_key("tablet", t.id), t.version, digest(t)) for t in tablets])


def holds_of(tables: list[CatalogTable], tablets: list[CatalogTablet]) -> str:
    """A ready's records as one fact field (facts hold strings): ``key@version#digest``,
    sorted, one space between (ids are UUIDs: no space, ``@`` or ``#`` in them)."""
    return " ".join(f"{k}@{v}#{d}" for k, v, d in keys_of(tables, tablets))


def parse_holds(holds: str) -> dict[str, tuple[int, str]]:
    """``holds_of``'s string back: record key -> (version, digest)."""
    out: dict[str, tuple[int, str]] = {}
    for token in holds.split():
        key, _, rest = token.partition("@")
        version, _, d = rest.partition("#")
        out[key] = (int(version or 0), d)
    return out


def catalog_replica(r: Replayer, k: KeyState | None, node: str,
                    inc: int) -> ReplicaView | None:
    """The catalog replica's key ``k`` of ``node`` as the tablet replay ``r`` left it,
    seen from a ``master_ready`` of incarnation ``inc``; None when the node's trace has
    no event of it (``k`` None or another node's key). Concretizes a key in shape mode:
    its state is then positions, not the state (checker/logshape.py)."""
    if k is None or k.node != node or k.state < 0:
        return None
    r.concretize(k)
    s = r.states.tuples[k.state]
    return ReplicaView(term=int(s.term), leader=bool(s.leader), this_incarnation=k.inc == inc)


@attrs.define
class CatalogReplay:
    """One node's master events through the catalog spec (module docstring)."""

    node: str
    sink: FactSink
    add: Callable[[Violation], None]
    spec: CatalogSpec = DEFAULT
    state: MasterState = attrs.Factory(MasterState)
    inc: int = -1
    events: int = 0

    def feed(self, file: str, line: int, inc: int, lamport: int, event: str,
             args_b: bytes, replica: ReplicaView | None = None) -> None:
        """One master event. ``replica``: the node's catalog replica as the tablet replay
        left it at this line (read for ``master_ready`` only; None when the node's trace
        has no event of it)."""
        self.events += 1
        if inc != self.inc:
            if self.inc >= 0:
                self.state = restart(self.state)
            self.inc = inc
        try:
            a = _DECODERS[event].decode(args_b)
        except msgspec.MsgspecError as exc:
            self.add(Violation(
                kind="MalformedLine", severity="error", file=file, line=line,
                subject=f"{file}:{line}", message=f"{event}: {exc}", node=self.node,
                event=event, failed="contract"))
            return
        broken: tuple[str, str] | None
        if isinstance(a, MasterReadyArgs):
            self.sink.fact(MasterReady(a.term, a.index, self.node, file, line, lamport,
                                       holds_of(a.tables, a.tablets)))
            self.state, broken = self.spec.ready(self.state, Ready(
                a.term, a.index, tuple(map(_table, a.tables)), tuple(map(_tablet, a.tablets)),
                replica))
        elif isinstance(a, CatalogCommitArgs):
            self.sink.fact(CatalogWrite(a.term, a.index, self.node, file, line, lamport,
                                        a.op))
            for key, version, d in keys_of(a.tables, a.tablets):
                self.sink.fact(CatalogRecord(a.term, a.index, self.node, file, line, lamport,
                                             key, version, d))
            self.state, broken = self.spec.commit(self.state, Commit(
                a.term, a.index, a.op, tuple(map(_table, a.tables)),
                tuple(map(_tablet, a.tablets))))
        else:
            broken = self.spec.call(self.state, Call(
                a.term, a.method, a.tablet, a.dest, a.mode, a.cas_config_index,
                a.schema_version))
        if broken is not None:
            rule, message = broken
            tablet = a.tablet if isinstance(a, MasterCallArgs) else ""
            self.add(Violation(
                kind=rule, severity="violation", file=file, line=line,
                subject=f"{file}:{line}", message=message, node=self.node, tablet=tablet,
                event=event, failed=rule,
                observed=f"ready term {self.state.ready_term}, catalog index "
                         f"{self.state.index}"))


@attrs.define
class CatalogGlobal:
    """The checks across masters, from the ``mready`` and ``ccommit`` facts."""

    rules: frozenset[str] = DEFAULT.global_rules
    # (term) -> {node: (index, lamport, file, line)}: each node's first ready in the term
    readies: dict[int, dict[str, tuple[int, int, str, int]]] = attrs.Factory(dict)
    # each write: (term, index, node, file, line)
    commits: set[tuple[int, int, str, str, int]] = attrs.Factory(set)
    # per record id: every traced write of it (index, version, digest, term, node, file,
    # line); a set, so that a fact merged twice is one write
    writes: dict[str, set[_RecordWrite]] = attrs.Factory(dict)
    # every ready: (file, line, term, index, node, its records as ``holds_of`` spells them)
    rebuilt: set[tuple[str, int, int, int, str, str]] = attrs.Factory(set)

    def ready(self, f: MasterReady) -> None:
        """A master became ready: keep each node's first ready per term."""
        by_node = self.readies.setdefault(f.term, {})
        seen = (f.index, f.lamport, f.file, f.line)
        old = by_node.get(f.node)
        if old is None or seen < old:
            by_node[f.node] = seen
        self.rebuilt.add((f.file, f.line, f.term, f.index, f.node, f.holds))

    def record(self, f: CatalogRecord) -> None:
        """A committed write holds record ``f.key``: keep the write."""
        self.writes.setdefault(f.key, set()).add(
            (f.index, f.version, f.digest, f.term, f.node, f.file, f.line))

    def write(self, f: CatalogWrite) -> None:
        """A master committed a catalog write."""
        self.commits.add((f.term, f.index, f.node, f.file, f.line))

    def violations(self) -> list[Violation]:
        out: list[Violation] = []
        if "OneReadyLeaderPerTerm" in self.rules:
            for term, by_node in sorted(self.readies.items()):
                if len(by_node) > 1:
                    w = sorted((f, ln, n) for n, (_, _, f, ln) in by_node.items())
                    f, ln, _ = w[-1]
                    out.append(Violation(
                        kind="OneReadyLeaderPerTerm", severity="violation", file=f, line=ln,
                        subject=f"catalog term={term}",
                        message=f"{len(by_node)} masters ready in term {term}: "
                                + ", ".join(sorted(by_node)),
                        tablet=CATALOG_TABLET, event="master_ready",
                        failed="OneReadyLeaderPerTerm",
                        witnesses=tuple(f"{fl}:{li} {n}" for fl, li, n in w)))
        if "ReadyHoldsCommitted" in self.rules and self.commits:
            # The highest index written in a term below t, for each ready term t.
            by_term = sorted(self.commits)
            for term, by_node in sorted(self.readies.items()):
                below = [c for c in by_term if c[0] < term]
                if not below:
                    continue
                top = max(below, key=lambda c: c[1])
                for node, (index, _, f, ln) in sorted(by_node.items()):
                    if index < top[1]:
                        out.append(Violation(
                            kind="ReadyHoldsCommitted", severity="violation", file=f,
                            line=ln, subject=f"catalog term={term} node={node}",
                            message=f"master {node} became ready in term {term} at catalog "
                                    f"index {index}, below index {top[1]} that {top[2]} "
                                    f"committed in term {top[0]}",
                            node=node, tablet=CATALOG_TABLET, event="master_ready",
                            failed="ReadyHoldsCommitted",
                            witnesses=(f"{top[3]}:{top[4]} {top[2]} term={top[0]} "
                                       f"index={top[1]}",)))
        if "ReadyHoldsCommittedRecords" in self.rules and self.writes:
            out.extend(self._stale_records())
        return out

    def _stale_records(self) -> list[Violation]:
        """ReadyHoldsCommittedRecords: per ready at index i, per record, the last traced
        write of it at an index <= i; the ready must hold the record, at that write's
        version or later, and at the same version the same record (versions 0: not
        given, presence only). One finding per ready, naming its lowest-index problem."""
        by_key = {key: sorted(ws) for key, ws in self.writes.items()}
        indexes = {key: [w[0] for w in ws] for key, ws in by_key.items()}
        out: list[Violation] = []
        for f, ln, term, index, node, holds_s in sorted(self.rebuilt):
            holds = parse_holds(holds_s)
            problems: list[tuple[_RecordWrite, str, str]] = []
            for key, ws in by_key.items():
                pos = bisect.bisect_right(indexes[key], index)
                if pos == 0:
                    continue  # first written above i: not yet in the catalog at i
                w = ws[pos - 1]  # the last write at or below i (the highest version there)
                held = holds.get(key)
                if held is None:
                    problems.append((w, key, "lacks it"))
                elif held[0] and w[1] and held[0] < w[1]:
                    problems.append((w, key, f"holds version {held[0]}"))
                elif held[0] == w[1] and held[0] and held[1] != w[2]:
                    problems.append((w, key, f"holds version {held[0]} with other contents"))
            if not problems:
                continue
            problems.sort()
            (w_index, w_version, _, w_term, w_node, _, _), key, what = problems[0]
            out.append(Violation(
                kind="ReadyHoldsCommittedRecords", severity="violation", file=f, line=ln,
                # every ready is checked: two of one node in a term are two findings
                subject=f"catalog term={term} node={node} index={index}",
                message=f"master {node} became ready in term {term} at catalog index "
                        f"{index} with {len(problems)} record(s) not as committed at or "
                        f"below that index; the first: {key}, which {w_node} committed at "
                        f"version {w_version} at index {w_index} in term {w_term}: the "
                        f"rebuilt catalog {what}",
                node=node, tablet=CATALOG_TABLET, event="master_ready",
                failed="ReadyHoldsCommittedRecords",
                witnesses=tuple(f"{w[5]}:{w[6]} {w[4]} term={w[3]} index={w[0]} {k} "
                                f"version={w[1]}: {what}" for w, k, what in problems[:5])))
        return out


__all__ = ["CatalogGlobal", "CatalogReplay", "catalog_replica", "digest", "holds_of", "keys_of",
           "parse_holds"]
