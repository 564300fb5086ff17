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

Memory: one ``MasterState`` per node being replayed (the catalog, a few hundred bytes per
record) and, globally, one fact per ready and per catalog write: catalog writes are rare
next to the data path's events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs
import msgspec

from revivify.checker.facts import CatalogWrite, FactSink, MasterReady
from revivify.checker.replay import Violation
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
    TableRow,
    TabletRow,
    restart,
)

_DECODERS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    "master_ready": msgspec.json.Decoder(MasterReadyArgs),
    "catalog_commit": msgspec.json.Decoder(CatalogCommitArgs),
    "master_call": msgspec.json.Decoder(MasterCallArgs),
}


def _table(t: CatalogTable) -> TableRow:
    return TableRow(t.id, t.name, t.state, t.schema_version, t.num_tablets)


def _tablet(t: CatalogTablet) -> TabletRow:
    return TabletRow(t.id, t.table, t.partition, t.state, t.config_index, frozenset(t.peers))


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
             args_b: bytes) -> None:
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
            self.sink.fact(MasterReady(a.term, a.index, self.node, file, line, lamport))
            self.state, broken = self.spec.ready(self.state, Ready(
                a.term, a.index, tuple(map(_table, a.tables)), tuple(map(_tablet, a.tablets))))
        elif isinstance(a, CatalogCommitArgs):
            self.sink.fact(CatalogWrite(a.term, a.index, self.node, file, line, lamport,
                                        a.op))
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

    def ready(self, f: MasterReady) -> None:
        """A master became ready: keep each node's first ready per term."""
        by_node = self.readies.setdefault(f.term, {})
        seen = (f.index, f.lamport, f.file, f.line)
        old = by_node.get(f.node)
        if old is None or seen < old:
            by_node[f.node] = seen

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
        return out


__all__ = ["CatalogGlobal", "CatalogReplay"]
