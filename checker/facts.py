"""The global facts: what the per-key replay, the masters' replay and the driver tell the
checks across keys (``global_checks``), one typed record per kind.

A fact is small and final: the replay of one key (node UUID, tablet) cannot decide whether
two leaders won a term, whether a majority held a committed entry, or whether a vote came
before the request it answers; it states what it saw (a leader of term t at file:line, the
runs of entries it committed, the state a crashed incarnation last reported) and the
checks across keys decide from the facts of every key. So the facts are the whole interface
between the two halves of the checker, and both engines move them: the local engine hands
each record to ``GlobalChecks.fact``; the Spark engine turns it into a row of the task
output's columns (``to_columns``), moves the row through the JVM, and turns it back on the
driver (``from_columns``) or aggregates the rows in Spark (``spark.global_findings``).

Invariants a reader can rely on:

* every record is frozen and holds only ints, bools and strings: equal facts are equal
  values, and a record can be merged in any order (each merge in ``global_checks`` is a
  min, a max or a set union over a total order);
* ``from_columns(to_columns(f)) == f`` for every record ``f`` (tests/trace/test_facts.py):
  the columnar form is a projection, not a second definition. ``COLUMNS`` places each
  field in one of the task output's columns (``spark._OUT_FIELDS``: ``tablet``, ``node``,
  ``file``, ``line``, ``payload``, ``a``, ``b``, ``c``, ``d``); a column no field takes
  holds the constant the row always held (``0``, ``""``, or None for a column the kind
  never used), so the rows are those of the tuple form they replace.

Records are msgspec Structs (``gc=False``: they hold no containers, so no cycles): made
by a C constructor, the cheapest typed record Python offers, about a tuple's cost.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Protocol, TypeAlias

import msgspec

from revivify.contract.events import CATALOG_TABLET

# A fact's columns, in ``COLUMNS`` order: (tablet, node, file, line, payload, a, b, c, d).
Columns: TypeAlias = tuple[Any, ...]
# The column names, in that order (a subset of ``spark._OUT_FIELDS``).
COLUMN_NAMES: Final = ("tablet", "node", "file", "line", "payload", "a", "b", "c", "d")


class _Record(msgspec.Struct, frozen=True, gc=False):
    """The base of every fact: its kind (the row's ``rtype``) and its column layout."""

    # The kind's name in the columnar form (the ``rtype`` of its rows).
    KIND: ClassVar[str]
    # Per column of ``COLUMN_NAMES``: the name of the field it holds, or a constant (an
    # int, None, or "", never the name of a field).
    COLUMNS: ClassVar[tuple[str | int | None, ...]]


# --- The facts of the first checks: leaders, commit runs, formats, incarnations ----------


class Leader(_Record, frozen=True, gc=False):
    """``node`` became leader of ``tablet`` in ``term`` (``TwoLeaders``)."""

    KIND = "leader"
    COLUMNS = ("tablet", "node", "file", "line", None, "term", None, None, None)
    tablet: str
    term: int
    node: str
    file: str
    line: int


class CommitRun(_Record, frozen=True, gc=False):
    """``node`` committed each index ``lo..hi`` naming ``term``, the first of them at
    ``file:line`` (``CommitTermMismatch``)."""

    KIND = "commit"
    COLUMNS = ("tablet", "node", "file", "line", None, "lo", "hi", "term", None)
    tablet: str
    lo: int
    hi: int
    term: int
    node: str
    file: str
    line: int


class ServerFormat(_Record, frozen=True, gc=False):
    """``node`` was formatted at ``file:line`` (``UuidReused``)."""

    KIND = "format"
    COLUMNS = (None, "node", "file", "line", None, None, None, None, None)
    node: str
    file: str
    line: int


class Incarnation(_Record, frozen=True, gc=False):
    """A trace file read: its node, incarnation, first and last Lamport clocks, and whether
    it ended with ``server_stop`` (what a crash may hide, completeness of a node)."""

    KIND = "incarnation"
    COLUMNS = (None, "node", None, None, None, "inc", "first", "last", "clean")
    node: str
    inc: int
    first: int
    last: int
    clean: bool


# --- The majority and causality checks --------------------------------------------------


class Lead(_Record, frozen=True, gc=False):
    """``node`` (incarnation ``inc``) became leader of ``term``, knowing the config
    ``config_index`` with ``voters`` (sorted JSON), or -1 and "" when it did not know it
    (``LeaderWithoutMajority``, ``CausalityViolation``, the log checks)."""

    KIND = "lead"
    COLUMNS = ("tablet", "node", "file", "line", "voters", "term", "config_index", "inc",
               "lamport")
    tablet: str
    term: int
    config_index: int
    inc: int
    node: str
    file: str
    line: int
    lamport: int
    voters: str


class Elect(_Record, frozen=True, gc=False):
    """``node`` (incarnation ``inc``) started an election for ``term``."""

    KIND = "elect"
    COLUMNS = ("tablet", "node", "file", "line", "", "term", "inc", 0, "lamport")
    tablet: str
    term: int
    inc: int
    node: str
    file: str
    line: int
    lamport: int


class _VoteAnswer(_Record, frozen=True, gc=False):
    """A voter's answer to a candidate in a term, logged (``Vote``, ``Deny``)."""

    COLUMNS = ("tablet", "voter", "file", "line", "candidate", "term", 0, 0, "lamport")
    tablet: str
    term: int
    voter: str
    file: str
    line: int
    lamport: int
    candidate: str


class Vote(_VoteAnswer, frozen=True, gc=False):
    """``voter`` granted its vote in ``term`` to ``candidate``."""

    KIND = "vote"


class LeaderCommit(_Record, frozen=True, gc=False):
    """The key's highest commit of an entry of its term ``term`` while leading it, in the
    config it knew (``CommitWithoutMajority``, ``CommitBeyondLeader``)."""

    KIND = "lcommit"
    COLUMNS = ("tablet", "leader", "file", "line", "voters", "term", "index",
               "config_index", "lamport")
    tablet: str
    term: int
    index: int
    config_index: int
    leader: str
    file: str
    line: int
    lamport: int
    voters: str


class Hold(_Record, frozen=True, gc=False):
    """The highest WAL last OpId (``term``, ``index``) any state of the key reported."""

    KIND = "hold"
    COLUMNS = ("tablet", "node", "", 0, "", "term", "index", 0, 0)
    tablet: str
    term: int
    index: int
    node: str


class _FirstAppend(_Record, frozen=True, gc=False):
    """The key's lowest-clocked log_append of an entry of ``term`` (``OwnTermAppend``,
    ``EntryTermAppend``)."""

    COLUMNS = ("tablet", "node", "file", "line", "", "term", 0, 0, "lamport")
    tablet: str
    term: int
    node: str
    file: str
    line: int
    lamport: int


class OwnTermAppend(_FirstAppend, frozen=True, gc=False):
    """The key's first log_append of an entry of its own current term ``term`` (lowest
    clock over its incarnations; ``CausalityViolation``)."""

    KIND = "append"


class ConfigCommit(_Record, frozen=True, gc=False):
    """``node`` committed the config ``config_index`` with ``voters`` (sorted JSON)."""

    KIND = "config"
    COLUMNS = ("tablet", "node", "file", "line", "voters", "config_index", 0, 0,
               "lamport")
    tablet: str
    config_index: int
    node: str
    file: str
    line: int
    lamport: int
    voters: str


# --- The log checks (contract version 3: the rebuilt logs) ------------------------------


class RunStart(_Record, frozen=True, gc=False):
    """In the key's rebuilt log a run of entries of ``term`` starts at ``start``, after
    an entry of ``prev_term`` (``LogMatching``)."""

    KIND = "start"
    COLUMNS = ("tablet", "node", "file", "line", "", "term", "start", "prev_term",
               "lamport")
    tablet: str
    term: int
    start: int
    prev_term: int
    node: str
    file: str
    line: int
    lamport: int


class CommittedRun(_Record, frozen=True, gc=False):
    """Entries ``lo..hi`` of ``term`` the key's rebuilt log says it committed, while the
    key was in term ``committed_in`` (``LeaderCompleteness``, ``CommittedEntryTruncated``)."""

    KIND = "crun"
    COLUMNS = ("tablet", "node", "file", "line", "", "lo", "hi", "term", "committed_in")
    tablet: str
    lo: int
    hi: int
    term: int
    node: str
    file: str
    line: int
    committed_in: int


class LeaderLog(_Record, frozen=True, gc=False):
    """The leader's log as it won ``term``: indices ``lo..hi`` known, as the runs
    ``[[start, term], ...]`` in ``runs`` (JSON) (``LeaderCompleteness``)."""

    KIND = "llog"
    COLUMNS = ("tablet", "node", "file", "line", "runs", "term", "lo", "hi", "lamport")
    tablet: str
    term: int
    lo: int
    hi: int
    node: str
    file: str
    line: int
    lamport: int
    runs: str


class Truncation(_Record, frozen=True, gc=False):
    """Known entries ``lo..hi`` of ``term`` a batch removed or replaced, the node then in
    term ``node_term`` (``CommittedEntryTruncated``)."""

    KIND = "trunc"
    COLUMNS = ("tablet", "node", "file", "line", "", "lo", "hi", "term", "node_term")
    tablet: str
    lo: int
    hi: int
    term: int
    node: str
    file: str
    line: int
    node_term: int


class EntryTermAppend(_FirstAppend, frozen=True, gc=False):
    """The key's lowest-clocked append of an entry of ``term``, whatever the key's own
    term (``AppendOfUnelectedTerm``)."""

    KIND = "tappend"


class FollowerCommit(_Record, frozen=True, gc=False):
    """The key's highest commit ``index`` while in ``term`` and not leading it
    (``CommitBeyondLeader``)."""

    KIND = "fcommit"
    COLUMNS = ("tablet", "node", "file", "line", "", "term", "index", 0, "lamport")
    tablet: str
    term: int
    index: int
    node: str
    file: str
    line: int
    lamport: int


class Named(_Record, frozen=True, gc=False):
    """The UUIDs the key's events name, itself included, one a line (``names``), and
    whether it began a tablet copy (the log checks ask whether every named trace is in
    the input).  """

    KIND = "named"
    COLUMNS = ("tablet", "node", "", 0, "names", "copied", 0, 0, 0)
    tablet: str
    copied: bool
    node: str
    names: str


# --- What bounds a crash's excuse (emitted by the driver, ``local``) ---------------------


class KeyLast(_Record, frozen=True, gc=False):
    """The key's state after its last event in incarnation ``inc``: its cmeta term (-1
    without a cmeta), its vote's UUID or "", its WAL's last index."""

    KIND = "klast"
    COLUMNS = ("tablet", "node", "", 0, "voted_for", "inc", "term", "wal_last_index", 0)
    tablet: str
    inc: int
    term: int
    wal_last_index: int
    node: str
    voted_for: str


class Deny(_VoteAnswer, frozen=True, gc=False):
    """A logged vote_denied: ``voter`` refused ``candidate`` in ``term``."""

    KIND = "deny"


class Blind(_Record, frozen=True, gc=False):
    """A line of ``node``'s incarnation ``inc`` (``file``) gave no event: what that
    incarnation did is not all in the input, so its crash is bounded by nothing."""

    KIND = "blind"
    COLUMNS = ("", "node", "file", 0, "", "inc", 0, 0, 0)
    inc: int
    node: str
    file: str


# --- The masters (checker/catalog.py) ----------------------------------------------------


class _CatalogStep(_Record, frozen=True, gc=False):
    """A master's step at catalog ``index`` in ``term`` (``MasterReady``,
    ``CatalogWrite``)."""

    term: int
    index: int
    node: str
    file: str
    line: int
    lamport: int


class MasterReady(_CatalogStep, frozen=True, gc=False):
    """A master became ready in ``term`` at catalog ``index`` (``OneReadyLeaderPerTerm``,
    ``ReadyHoldsCommitted``), holding the records ``holds`` (``<key>@<version>#<digest>``
    per record, the key ``table/<id>`` or ``tablet/<id>``, sorted, space-separated:
    ``ReadyHoldsCommittedRecords``; as long as the catalog, once per election or
    rebuild)."""

    KIND = "mready"
    COLUMNS = (CATALOG_TABLET, "node", "file", "line", "holds", "term", "index", 0,
               "lamport")
    holds: str


class CatalogRecord(_CatalogStep, frozen=True, gc=False):
    """A catalog write committed at ``index`` in ``term`` holds the record ``key``
    (``table/<id>`` or ``tablet/<id>``) at row ``version``, whose contents hash to
    ``digest``: one per record of each write (``ReadyHoldsCommittedRecords``). The
    digest rides in the ``tablet`` column, which this kind has no other use for."""

    KIND = "crecord"
    COLUMNS = ("digest", "node", "file", "line", "key", "term", "index", "version",
               "lamport")
    key: str
    version: int
    digest: str


class CatalogWrite(_CatalogStep, frozen=True, gc=False):
    """A master committed the catalog write ``op`` at ``index`` in ``term``."""

    KIND = "ccommit"
    COLUMNS = (CATALOG_TABLET, "node", "file", "line", "op", "term", "index", 0, "lamport")
    op: str


GlobalFact: TypeAlias = (Leader | CommitRun | ServerFormat | Incarnation | Lead | Elect | Vote
                         | LeaderCommit | Hold | OwnTermAppend | ConfigCommit | RunStart
                         | CommittedRun | LeaderLog | Truncation | EntryTermAppend
                         | FollowerCommit | Named | KeyLast | Deny | Blind | MasterReady
                         | CatalogWrite | CatalogRecord)

RECORDS: Final[tuple[type[GlobalFact], ...]] = (
    Leader, CommitRun, ServerFormat, Incarnation, Lead, Elect, Vote, LeaderCommit, Hold,
    OwnTermAppend, ConfigCommit, RunStart, CommittedRun, LeaderLog, Truncation,
    EntryTermAppend, FollowerCommit, Named, KeyLast, Deny, Blind, MasterReady, CatalogWrite,
    CatalogRecord)
# The kinds whose rows a Spark plan that runs the global checks in Spark still passes to
# the driver as they are (every kind but the three it aggregates itself: leaders, commit
# runs, formats; see ``spark.global_findings``).
DRIVER_KINDS: Final = tuple(r.KIND for r in RECORDS
                            if r not in (Leader, CommitRun, ServerFormat))


class FactSink(Protocol):
    """Where facts go: ``global_checks.GlobalChecks`` in the local engine and on the Spark
    driver, a task's rows in Spark (``spark._Rows``)."""

    def fact(self, f: GlobalFact) -> None:
        """Take one fact."""


# --- The columnar projection -------------------------------------------------------------
#
# Per record type, compiled once: for ``to_columns`` a getter per column (a field, or the
# constant), for ``from_columns`` the column of each field in declaration order. A bool
# field travels as an int (the column is int64) and comes back as a bool.

def _plan(record: type[GlobalFact]) -> tuple[tuple[tuple[bool, Any], ...],
                                            tuple[tuple[int, bool], ...]]:
    """``record``'s projection: per column, (holds a field?, the field's name or the
    constant); per field, (its column, is it a bool?). Checks that ``COLUMNS`` places
    every field exactly once."""
    fields = record.__struct_fields__
    spec = record.COLUMNS
    placed = sorted(c for c in spec if isinstance(c, str) and c in fields)
    assert len(spec) == len(COLUMN_NAMES) and placed == sorted(fields), record
    hints: dict[str, Any] = {}
    for klass in reversed(record.__mro__):
        hints.update(getattr(klass, "__annotations__", {}))
    out = tuple((isinstance(c, str) and c in fields, c) for c in spec)
    back = tuple((spec.index(f), str(hints[f]) == "bool") for f in fields)
    return out, back


_PLANS: Final = {r: _plan(r) for r in RECORDS}
_BY_KIND: Final = {r.KIND: r for r in RECORDS}


def to_columns(fact: GlobalFact) -> Columns:
    """The fact as its columns (``COLUMN_NAMES`` order)."""
    out, _ = _PLANS[type(fact)]
    return tuple((int(v) if isinstance(v := getattr(fact, c), bool) else v)
                 if is_field else c for is_field, c in out)


def from_columns(kind: str, columns: Columns) -> GlobalFact:
    """The fact of kind ``kind`` (its ``KIND``) whose columns are ``columns`` (as
    ``to_columns`` gives them)."""
    record = _BY_KIND[kind]
    _, back = _PLANS[record]
    values: list[Any] = [bool(columns[i]) if as_bool else columns[i] for i, as_bool in back]
    return record(*values)


__all__ = [
    "COLUMN_NAMES", "DRIVER_KINDS", "RECORDS", "Blind", "CatalogRecord", "CatalogWrite",
    "Columns",
    "CommitRun", "CommittedRun", "ConfigCommit", "Deny", "Elect", "EntryTermAppend",
    "FactSink", "FollowerCommit", "GlobalFact", "Hold", "Incarnation", "KeyLast", "Lead", "Leader",
    "LeaderCommit", "LeaderLog", "MasterReady", "Named", "OwnTermAppend", "RunStart",
    "ServerFormat", "Truncation", "Vote", "from_columns", "to_columns",
]
