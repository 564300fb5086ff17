"""The known-bad traces of the masters' ordering contract (contract version 4): each breaks
one rule of spec/catalog.py, checked by checker/catalog.py.

A case is a few masters' trace files written through the real trace writer
(``impl/trace.py``, so every line is what the contract allows) with the master events only:
the catalog checks need nothing else. Half the cases end with every master stopped
(``server_stop``), half with the guilty master crashed (its file just ends, as after a
kill -9): the catalog's rules must hold either way; each rule of issue 32
(``ReadyHoldsCommittedRecords``, ``ReadyLeaderElected``) has at least one case of each. The cases of
``ReadyLeaderElected`` need the catalog replica's own Raft events: they are written by the
spec's ``Recorder`` (checker/walks.py, as bad_v3.py's) for tablet ``sys-catalog``, the
master events added to its files, with terms and UUIDs no other case here uses. Each case goes to
``traces/bad/catalog-<name>/`` with its ``expected.json`` (the kind, and the file and line
it must be rejected at). ``CLEAN`` is the same kind of history with nothing broken (a
failover in the middle of a table's life), written to ``traces/legal/``. Regenerate::

    python tests/trace/bad_catalog.py traces
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from revivify.checker.walks import Recorder
from revivify.contract.events import (
    CATALOG_TABLET,
    CatalogCommitArgs,
    CatalogTable,
    CatalogTablet,
    MasterCallArgs,
    MasterReadyArgs,
)
from revivify.impl.trace import TraceWriter
from revivify.spec.system import default_spec

A, B, C = "a1" * 16, "b2" * 16, "c3" * 16  # masters
TS = ("d4" * 16, "e5" * 16, "f6" * 16)  # tablet servers
TS4 = "0f" * 16  # a fourth tablet server, outside every config
TABLE = "7a" * 16
T0, T1 = "70" * 16, "71" * 16  # the table's two tablets
STRANGER = "99" * 16  # a tablet no catalog has heard of


def table(state: str = "RUNNING", version: int = 1, tablets: int = 2,
          row: int = 0) -> CatalogTable:
    """The table's record; ``row``: its row version (0: not given, as before issue 32)."""
    return CatalogTable(TABLE, "orders", state, version, tablets, row)  # type: ignore[arg-type]


def tablet(tid: str, part: int, state: str = "RUNNING", config_index: int = 0,
           peers: tuple[str, ...] = TS, row: int = 0) -> CatalogTablet:
    return CatalogTablet(tid, TABLE, part, state, config_index,  # type: ignore[arg-type]
                         sorted(peers), row)


WHOLE = ([table()], [tablet(T0, 0), tablet(T1, 1)])


class History:
    """Trace files of several masters, each line through the real writer. ``at`` marks
    the line the case must be rejected at. Each case's masters get UUIDs of their own
    (``salt`` in the last 4 hex digits) and terms and catalog indexes of their own (100 x
    ``salt`` added), so that cases can be checked together: the rules across masters
    assume the traces of one cluster, and these read as one cluster's history, case after
    case."""

    def __init__(self, root: str, salt: int) -> None:
        self.root = root
        self.salt = f"{salt:04x}"
        self.off = 100 * salt
        self.writers: dict[tuple[str, int], TraceWriter] = {}
        self.lines: dict[tuple[str, int], int] = {}
        self.at: tuple[str, int] | None = None

    def uuid(self, node: str) -> str:
        return node[:-4] + self.salt

    def rid(self, record_id: str) -> str:
        """A table's or tablet's id in this case."""
        return record_id[:-4] + self.salt

    def _tables(self, tables: list[CatalogTable]) -> list[CatalogTable]:
        return [CatalogTable(self.rid(t.id), t.name, t.state, t.schema_version, t.num_tablets,
                             t.version) for t in tables]

    def _tablets(self, tablets: list[CatalogTablet]) -> list[CatalogTablet]:
        return [CatalogTablet(self.rid(t.id), self.rid(t.table), t.partition, t.state,
                              t.config_index, t.peers, t.version) for t in tablets]

    def start(self, node: str, inc: int) -> None:
        w = TraceWriter(self.root, self.uuid(node), inc, wall_ns=lambda: 0)
        self.writers[(node, inc)] = w
        self.lines[(node, inc)] = 0
        if inc == 1:
            self.event(node, inc, "server_format")
        self.event(node, inc, "server_start")

    def event(self, node: str, inc: int, event: str, args: Any = None,
              at: bool = False) -> None:
        self.writers[(node, inc)].event(event, args)
        self.lines[(node, inc)] += 1
        if at:
            self.at = (f"{self.uuid(node)}.{inc:04d}.jsonl", self.lines[(node, inc)])

    def ready(self, node: str, inc: int, term: int, index: int,
              catalog: tuple[list[CatalogTable], list[CatalogTablet]] = ([], []),
              at: bool = False) -> None:
        self.event(node, inc, "master_ready",
                   MasterReadyArgs(term + self.off, index + self.off,
                                   self._tables(catalog[0]), self._tablets(catalog[1])), at)

    def commit(self, node: str, inc: int, term: int, index: int, op: str,
               tables: list[CatalogTable], tablets: list[CatalogTablet],
               at: bool = False) -> None:
        self.event(node, inc, "catalog_commit",
                   CatalogCommitArgs(term + self.off, index + self.off, op,
                                     self._tables(tables), self._tablets(tablets)), at)

    def call(self, node: str, inc: int, term: int, method: str, tid: str, dest: str,
             at: bool = False, **kw: Any) -> None:
        self.event(node, inc, "master_call",
                   MasterCallArgs(term + self.off, method, self.rid(tid), dest,  # type: ignore[arg-type]
                                  **kw), at)

    def stop(self, node: str, inc: int) -> None:
        self.event(node, inc, "server_stop")

    def close(self) -> None:
        for w in self.writers.values():
            w.close()


def create_table(h: History, node: str, inc: int, term: int, index: int) -> None:
    """CreateTable done right: one write with the table and both tablets, then the
    calls to every replica."""
    h.commit(node, inc, term, index, "create_table", [table(row=1)],
             [tablet(T0, 0, "CREATING", row=1), tablet(T1, 1, "CREATING", row=1)])
    for tid in (T0, T1):
        for ts in TS:
            h.call(node, inc, term, "create_tablet", tid, ts)


Case = Callable[[History], None]
CASES: dict[str, tuple[Case, str, str]] = {}


def case(name: str, kind: str, what: str) -> Callable[[Case], Case]:
    def add(build: Case) -> Case:
        CASES[name] = (build, kind, what)
        return build
    return add


@case("catalog-call-before-commit", "CallAfterCommit",
      "CreateTablet calls released before the CreateTable write committed (seed 004's "
      "first exception to the ordering contract); every master stopped")
def call_before_commit(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 1, 1)
    h.call(A, 1, 1, "create_tablet", T0, TS[0], at=True)
    create_table(h, A, 1, 1, 2)
    h.stop(A, 1)


@case("catalog-delete-before-commit", "DeleteOnlyWithRecord",
      "DeleteTablet calls for a table whose delete has not committed (seed 004's second "
      "exception); the master crashed before its write committed")
def delete_before_commit(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 1, 1)
    create_table(h, A, 1, 1, 2)
    h.call(A, 1, 1, "delete_tablet", T1, TS[2], mode="DELETED", at=True)


@case("catalog-delete-unknown-tablet", "DeleteOnlyWithRecord",
      "a replica of a tablet the catalog never heard of is tombstoned (appendix A: the one "
      "unfenced case, kept instead); master crashed")
def delete_unknown(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 2, 4, WHOLE)
    h.call(A, 1, 2, "delete_tablet", STRANGER, TS[0], mode="TOMBSTONE",
           cas_config_index=0, at=True)


@case("catalog-tombstone-a-member", "DeleteOnlyWithRecord",
      "a replica inside the committed config is tombstoned as if it had been evicted")
def tombstone_member(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 2, 4, WHOLE)
    h.call(A, 1, 2, "delete_tablet", T0, TS[1], mode="TOMBSTONE", cas_config_index=0,
           at=True)
    h.stop(A, 1)


@case("catalog-tombstone-wrong-cas", "DeleteOnlyWithRecord",
      "an evicted replica is tombstoned with a CAS that is not the record's config index")
def tombstone_cas(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 2, 4, WHOLE)
    h.call(A, 1, 2, "delete_tablet", T0, TS4, mode="TOMBSTONE", cas_config_index=7,
           at=True)
    h.stop(A, 1)


@case("catalog-half-created-table", "NoHalfCreatedTable",
      "CreateTable in two writes: the table committed with one of its two tablets; the "
      "master crashed before the second write")
def half_created(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 1, 1)
    h.commit(A, 1, 1, 2, "create_table", [table()], [tablet(T0, 0, "CREATING")], at=True)


@case("catalog-alter-before-commit", "CallAfterCommit",
      "AlterSchema to version 2 sent while the committed table is at version 1")
def alter_before_commit(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 2, 4, WHOLE)
    h.call(A, 1, 2, "alter_schema", T0, TS[0], schema_version=2, at=True)
    h.commit(A, 1, 2, 5, "alter_table", [table("ALTERING", 2)], [])
    h.stop(A, 1)


@case("catalog-write-after-restart", "ReadyLeaderWrites",
      "a master restarted after a crash writes the catalog without passing the gate again")
def write_after_restart(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 1, 1)
    create_table(h, A, 1, 1, 2)
    h.start(A, 2)
    h.commit(A, 2, 1, 3, "tablet_report", [], [tablet(T0, 0)], at=True)
    h.stop(A, 2)


@case("catalog-call-by-deposed-term", "ReadyLeaderCalls",
      "a call released in a term the master is not ready in (an old term's decision)")
def call_old_term(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 3, 4, WHOLE)
    h.call(A, 1, 2, "create_tablet", T0, TS[0], at=True)
    h.stop(A, 1)


@case("catalog-index-goes-back", "CatalogIndexMonotonic",
      "a catalog write at an index below the one the master already applied")
def index_back(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 2, 4, WHOLE)
    h.commit(A, 1, 2, 3, "tablet_report", [], [tablet(T0, 0)], at=True)


@case("catalog-ready-term-goes-back", "ReadyTermMonotonic",
      "a master ready in term 3, restarted, ready again in term 2")
def ready_back(h: History) -> None:
    h.start(A, 1)
    h.ready(A, 1, 3, 4, WHOLE)
    h.start(A, 2)
    h.ready(A, 2, 2, 4, WHOLE, at=True)
    h.stop(A, 2)


@case("catalog-two-ready-masters", "OneReadyLeaderPerTerm",
      "two masters pass the leader-ready gate in the same term")
def two_ready(h: History) -> None:
    h.start(A, 1)
    h.start(B, 1)
    h.ready(A, 1, 2, 4, WHOLE)
    h.ready(B, 1, 2, 4, WHOLE, at=True)  # B > A: the finding names the last file
    h.stop(A, 1)
    h.stop(B, 1)


@case("catalog-stale-ready", "ReadyHoldsCommitted",
      "the leader commits CreateTable and is killed; the next leader becomes ready at an "
      "index below that write (KUDU-1353: it would serve a catalog without the table)")
def stale_ready(h: History) -> None:
    h.start(A, 1)
    h.start(B, 1)
    h.ready(A, 1, 1, 1)
    create_table(h, A, 1, 1, 2)
    h.ready(B, 1, 2, 1, at=True)
    h.stop(B, 1)


@case("catalog-ready-misses-records", "ReadyHoldsCommittedRecords",
      "the leader commits CreateTable at index 2 and is killed; the next leader becomes "
      "ready at index 3 (so it claims the write) with a rebuilt catalog that lacks the "
      "table and its tablets (a rebuild that lost rows), and is stopped")
def ready_misses_records(h: History) -> None:
    h.start(A, 1)
    h.start(B, 1)
    h.ready(A, 1, 1, 1)
    create_table(h, A, 1, 1, 2)
    h.ready(B, 1, 2, 3, at=True)
    h.stop(B, 1)


@case("catalog-ready-misses-records-killed", "ReadyHoldsCommittedRecords",
      "the leader commits CreateTable at index 2 and stops; the next leader becomes ready "
      "at exactly index 2 without the table and its tablets, and is killed")
def ready_misses_records_killed(h: History) -> None:
    h.start(A, 1)
    h.start(B, 1)
    h.ready(A, 1, 1, 1)
    create_table(h, A, 1, 1, 2)
    h.stop(A, 1)
    h.ready(B, 1, 2, 2, at=True)


@case("catalog-ready-holds-stale-record", "ReadyHoldsCommittedRecords",
      "the leader creates the table (row version 1) and alters it (version 2, at index 3), "
      "and is killed; the next leader becomes ready at index 4 holding the table at "
      "version 1: the rebuild lost the committed alter (it would serve the old schema)")
def ready_holds_stale(h: History) -> None:
    h.start(A, 1)
    h.start(B, 1)
    h.ready(A, 1, 1, 1)
    create_table(h, A, 1, 1, 2)
    h.commit(A, 1, 1, 3, "alter_table", [table("ALTERING", 2, row=2)], [])
    h.ready(B, 1, 2, 4, ([table(row=1)], [tablet(T0, 0, "CREATING", row=1),
                                          tablet(T1, 1, "CREATING", row=1)]), at=True)
    h.stop(B, 1)


# The cases of ReadyLeaderElected: a master's catalog replica, through the spec's own
# steps (Recorder), and its master_ready. name -> (build, what it shows); the build
# returns the recorder and the master_ready line the case must be rejected at.
ElectedCase = Callable[[], tuple[Recorder, dict[str, Any]]]
ELECTED: dict[str, tuple[ElectedCase, str]] = {}


def elected_case(name: str, what: str) -> Callable[[ElectedCase], ElectedCase]:
    def add(build: ElectedCase) -> ElectedCase:
        ELECTED[name] = (build, what)
        return build
    return add


def masters(seed: int) -> Recorder:
    """Three masters whose catalog replicas exist (created, config index 0)."""
    return Recorder.new(default_spec(3), seed, created=True, tablet=CATALOG_TABLET)


def master_ready(r: Recorder, i: int, term: int, index: int) -> dict[str, Any]:
    """Master i's gate opens in ``term`` at ``index`` with an empty catalog."""
    return r.emit(i, "master_ready", msgspec.to_builtins(MasterReadyArgs(term, index, [], [])),
                  None)


@elected_case("catalog-ready-without-election",
              "a master's catalog replica wins term 1; the master's gate opens in term 2, "
              "a term its replica never campaigned in; every master stopped")
def ready_without_election() -> tuple[Recorder, dict[str, Any]]:
    r = masters(3201)
    r.elect(0, 1, 1, (0, 0))
    at = master_ready(r, 0, 2, 0)
    r.stop_all()
    return r, at


@elected_case("catalog-ready-without-election-killed",
              "a master's catalog replica wins term 4 and is deposed: another wins term 5 "
              "and it learns term 5; its gate then opens in term 5, which its replica "
              "never won (a gate reading the term after the step down), and it is killed")
def ready_after_deposed() -> tuple[Recorder, dict[str, Any]]:
    r = masters(3202)
    for i in range(3):
        r.step(i, "learn_term", t=3)
    r.elect(0, 1, 4, (0, 0))
    r.elect(1, 2, 5, (0, 0))
    r.step(0, "learn_term", t=5)
    at = master_ready(r, 0, 5, 0)
    r.crash(0)
    r.stop(1)
    r.stop(2)
    return r, at


def ready_after_election() -> Recorder:
    """The legal shape: the replica wins term 1, commits its no-op with a follower, and
    the gate opens in term 1 at index 1. Not in traces/legal/: every legal case there is
    checked together as one cluster, and catalog-failover's masters are ready in terms 1
    and 2 (tests/trace/test_catalog_checks.py writes it where it checks it)."""
    r = masters(3203)
    r.elect(0, 1, 1, (0, 0))
    r.step(0, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(1, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(0, "commit", index=1, op_term=1)
    master_ready(r, 0, 1, 1)
    return r.stop_all()


def clean(h: History) -> None:
    """A table's life across a failover: created by A, A killed, B ready with the whole
    catalog; a report makes a tablet RUNNING, an evicted replica is tombstoned, the table
    deleted; a stray replica of an unknown tablet is left alone."""
    h.start(A, 1)
    h.start(B, 1)
    h.start(C, 1)
    h.ready(A, 1, 1, 1)
    create_table(h, A, 1, 1, 2)
    h.ready(B, 1, 2, 3, ([table(row=1)], [tablet(T0, 0, "CREATING", row=1),
                                          tablet(T1, 1, "CREATING", row=1)]))
    for tid in (T0, T1):  # the nudges of the new leader
        h.call(B, 1, 2, "create_tablet", tid, TS[0])
    h.commit(B, 1, 2, 4, "tablet_report", [], [tablet(T0, 0, config_index=5,
                                                      peers=(TS[0], TS[1], TS4), row=2)])
    h.call(B, 1, 2, "delete_tablet", T0, TS[2], mode="TOMBSTONE", cas_config_index=5)
    h.commit(B, 1, 2, 5, "alter_table", [table("ALTERING", 2, row=2)], [])
    h.call(B, 1, 2, "alter_schema", T1, TS[1], schema_version=2)
    h.commit(B, 1, 2, 6, "delete_table", [table("REMOVED", 2, row=3)],
             [tablet(T0, 0, "DELETED", 5, (TS[0], TS[1], TS4), row=3),
              tablet(T1, 1, "DELETED", row=2)])
    for ts in TS:
        h.call(B, 1, 2, "delete_tablet", T1, ts, mode="DELETED")
    h.stop(B, 1)
    h.stop(C, 1)


def write(root: str) -> list[str]:
    """(Re)write ``root/bad/<case>/`` for every case and ``root/legal/catalog-failover/``;
    return the bad cases' names."""
    for salt, (name, (build, kind, what)) in enumerate(CASES.items(), 1):
        d = os.path.join(root, "bad", name)
        shutil.rmtree(d, ignore_errors=True)
        h = History(d, salt)
        build(h)
        h.close()
        assert h.at is not None, name
        expected = {"kind": kind, "description": what, "exit_code": 1,
                    "at": {"file": h.at[0], "line": h.at[1]}}
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f, indent=2)
            f.write("\n")
    for name, (ebuild, what) in ELECTED.items():
        d = os.path.join(root, "bad", name)
        shutil.rmtree(d, ignore_errors=True)
        r, at = ebuild()
        r.write(d)
        lines = r.files[(at["node"], at["inc"])]
        _expected(d, {"kind": "ReadyLeaderElected", "description": what, "exit_code": 1,
                      "at": {"file": f"{at['node']}.{at['inc']:04d}.jsonl",
                             "line": next(n for n, ln in enumerate(lines, 1) if ln is at)}})
    d = os.path.join(root, "legal", "catalog-failover")
    shutil.rmtree(d, ignore_errors=True)
    h = History(d, 0)
    clean(h)
    h.close()
    legal = {"description": "a table's life across a master failover: created, the leader "
                            "killed, the new leader ready with the whole catalog, a replica "
                            "evicted and tombstoned, an alter, the table deleted",
             "exit_code": 0, "node": h.uuid(B),
             "shows": ["master_ready", "catalog_commit", "master_call", "catalog_commit",
                       "master_call"]}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(legal, f, indent=2)
        f.write("\n")
    return [*CASES, *ELECTED]


def _expected(d: str, expected: dict[str, Any]) -> None:
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    print("\n".join(write(sys.argv[1] if len(sys.argv) > 1 else "traces")))
