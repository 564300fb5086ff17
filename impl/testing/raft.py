"""RaftCluster: a deterministic in-process harness of N Raft cores, with a safety checker.

What it is
----------
The consensus core (revivify.impl.consensus.core) is sans-I/O: it takes inputs as method
calls and hands back a ``Ready`` of durable steps, messages, committed entries and read
states. Production wraps it in a trio shell that writes cmeta files and a WAL and sends RPCs;
this module is the other shell, the one tests run: everything in memory, nothing concurrent,
every choice (which message is delivered next, which is lost, when a node crashes and how
much of its Ready survived) made by the test, every random choice a core makes drawn from a
``random.Random`` seeded from the cluster's seed, the node's uuid and its incarnation. The
same calls give the same run, byte for byte, so a script's output can be compared verbatim
(tests/consensus/testdata) and a Hypothesis state machine can shrink a failure.

Model
-----
* A node (``RaftNode``) is a uuid (``"1"``, ``"2"``, ...), its *durable state* and, while it
  is up, a core. The durable state (``DurableState``) is what a crash keeps: the cmeta last
  written (term, vote, committed config) and the WAL, a list of entries with the WAL's
  suffix-overwrite rule (an append whose first index is at or below the last one replaces
  the tail from there), plus the index up to which the state machine's effects were flushed.
* The shell loop of one node is ``process_ready(uuid)``: take ``core.ready()`` and walk
  ``plan(ready)`` (impl/consensus/plan.py: the same list of effects the tablet server
  walks) in order: PersistStep (write the cmeta, or append the batch to the WAL), TraceStep (record
  the step's fact), Send (queue the messages on the network), Apply (the committed entries,
  to the node's state machine: a list of entries), Release (the read states); then check
  that the durable state equals the core's view (a term, vote, config or entry the core
  holds but did not hand over as a step would be lost by a crash) and
  ``core.advance(ready)``. Nothing else is given to the core between ``ready()`` and
  ``advance()``, which is the core's contract.
* The network is one FIFO of messages in flight (``RaftCluster.queue``). ``deliver`` hands
  messages to their destinations' ``step``; a message whose destination is down, unknown or
  on the other side of a partition is dropped at delivery (so healing a partition lets the
  messages still in flight through, as on a real network). The queue can be manipulated
  directly: drop, duplicate, swap (reorder), deliver one chosen message, hold messages
  aside (a slow link) and release them later, after everything sent meanwhile.
* ``crash(uuid)`` throws away the core and everything volatile: pending output not yet taken
  by ``ready()``, and the state machine above the flushed index. ``crash(uuid,
  after_effects=k)`` (or ``process_ready(uuid, crash_after=k)``) crashes *inside* a Ready:
  the first k effects of its plan happened (writes are durable, facts recorded, messages
  in flight), the rest did not. ``crash_after`` may also be a function of the plan that
  picks the point, e.g. ``after_appends_left``: a leader whose AppendRequests left before
  its own WAL append was durable.
  ``restart(uuid)`` builds a fresh core from the durable state: term, vote and committed
  config from the cmeta, the RaftLog from the WAL, the applied index at the flushed point
  (``flush(uuid)`` records the current applied index as flushed) or 0.
* ``stabilize()`` processes every Ready and delivers every message, round after round, until
  nothing is left to do. Time only moves with ``tick``, so a correct core always goes quiet;
  a cluster still busy after ``max_rounds`` rounds raises ``LivelockError`` naming what was
  still going on.

Safety checking (``SafetyChecker``)
-----------------------------------
Every input to a core and every executed step is observed; the first violation raises
``InvariantViolation``. What is checked, across all time, crashes included:

* election safety: at most one leader per term (a history of every leader ever seen);
* log matching: one entry per (term, index) ever, each with one predecessor term (so two
  logs holding an entry agree on everything below it); and, pairwise between the current
  logs (the WAL of a node that is down), identical prefixes up to the last common OpId;
* leader completeness: an entry seen committed by any node in term t is in the log of every
  leader of a term >= t;
* state-machine safety: no two nodes apply different entries at one index, and each node
  applies indexes in order;
* acknowledged writes: a proposal committed on the leader that proposed it (the client's
  acknowledgement) is in the log of every leader of a later term;
* terms never decrease, per incarnation in memory and per node in the durable cmeta; one
  vote per (node, term) durably, across crashes (a vote written, then a different vote or
  no vote for the same term, is a violation), and none changed in memory;
* linearizable reads: a released ReadIndex is at least the highest commit index any node had
  reached before the read was requested;
* durability: after the steps of a Ready, the cmeta and the WAL equal the core's state; and
  no core ever reports ``anomalies``; an ``AssertionError`` raised inside a core (its own
  safety assertions) is reported as a violation too.

API (all on ``RaftCluster``)
----------------------------
    nodes         add_nodes(n, join=None) -> uuids; node(uuid); core(uuid); uuids(); up();
                  leaders(); leader()
    inputs        tick(uuid, n); tick_all(n); campaign; propose(uuid, data) -> Entry;
                  change_config(uuid, kind, target, cas=, member_type=, promote=) -> Entry;
                  transfer(uuid, target); step_down; read_index(uuid, request_id)
    shell         process_ready(uuid, crash_after=None | k | f(plan)); process_all()
    network       deliver(count=None, src=, dest=); deliver_at(i); drop(i);
                  drop_matching(src=, dest=); duplicate(i); swap(i, j); hold(src=, dest=);
                  release(); partition(*groups); heal(); connected(a, b)
    faults        crash(uuid, after_effects=None); restart(uuid, applied="flushed"|"zero");
                  flush(uuid)
    loops         round(); stabilize(max_rounds=None)
    observation   check(); logs(); status_line(uuid); log_line(uuid); take_output();
                  reads (ReadResult list); checker (the SafetyChecker); nodes[uuid].facts,
                  .applied, .durable

Inputs that the core refuses raise its typed errors (NotLeader, ConfigChangeRefused,
TransferRefused) unchanged; an input to a node that is down raises ``NodeDown``.

Output
------
Everything the harness does is also written, one line per event, to ``lines`` (drain it
with ``take_output()``), in a compact form that tests/consensus/testdata scripts compare
verbatim:

    > 1 ready                                   a Ready being executed (one made only of
                                                messages prints nothing: see them delivered)
      start_election me=1 => cmeta t=1 vote=1 cfg@0      fact => durable change
      log_append ... => wal 2.3:a 2.4:b (overwrites from 3)   a WAL append replacing a tail
      commit index=1 op_term=1                           a fact with no durable change
      apply 1.1:noop                                     the state machine
      read r1 at 3 / read r2 failed                      ReadIndex answers
    1 crashed after 3 of 5 effects; lost 1 writes, 1 facts, 2 messages, 0 applies
    1->2 App t=1 prev=0.0 commit=0 [1.1:noop] ctx=1   a message delivered
    1->3 Vote t=1 last=0.0 DROPPED (partition)  a message lost (partition, down, lost)

Messages: ``PreVote``/``Vote t= last=term.index [transfer]``; ``PreVoteResp``/``VoteResp
t= granted|rejected (why)``; ``App t= prev=term.index commit= [entries] ctx=`` (ctx tags a
ReadIndex round); ``AppResp t= ok match= last=`` or ``STATUS prev= last= hint=term@index
(why)`` for a refusal (its AppendStatus, the position it refuses, and the fast-backtracking
hint: the conflicting term and its first index); ``TimeoutNow t=``.
Entries print as ``term.index:payload``: ``noop``, the write's bytes, or ``cfg{...}`` for a
configuration (a member is its uuid; ``~`` marks a NON_VOTER and ``~+`` one to promote).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import attrs
import msgspec

from revivify.impl.consensus.core import Cmeta, Options, RaftCore, RaftFact, ReadState, Role, Step
from revivify.impl.consensus.log import RaftLog
from revivify.impl.consensus.messages import (
    ENTRY_CONFIG,
    ENTRY_NOOP,
    VOTER,
    AppendRequest,
    AppendResponse,
    ChangeKind,
    Config,
    ConfigChange,
    Entry,
    MemberType,
    Message,
    Peer,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    decode_config,
)
from revivify.impl.consensus.plan import (
    Apply,
    PersistStep,
    PlanEffect,
    Send,
    TraceStep,
    dispatch,
    plan,
)


class HarnessError(Exception):
    """A misuse of the harness (an unknown node, an input to a node that is down)."""


class NodeDown(HarnessError):
    """An input was given to a node that is crashed."""


class InvariantViolation(HarnessError):
    """A safety property of Raft was violated (the core has a bug, or a seeded one)."""


class LivelockError(HarnessError):
    """``stabilize`` did not go quiet within its bound of rounds."""


# ---------------------------------------------------------------------------------------
# formatting: one line per value, the vocabulary of the testdata scripts


def format_config(config: Config) -> str:
    """``{1 2 3 4~+}``: voters by uuid, ``~`` a NON_VOTER, ``~+`` one marked for promotion."""
    parts = []
    for p in config.peers:
        mark = "" if p.member_type == VOTER else ("~+" if p.promote else "~")
        parts.append(p.uuid + mark)
    return "{" + " ".join(parts) + "}"


def format_entry(e: Entry) -> str:
    if e.kind == ENTRY_NOOP:
        payload = "noop"
    elif e.kind == ENTRY_CONFIG:
        payload = "cfg" + format_config(decode_config(e.data))
    else:
        try:
            payload = e.data.decode("ascii")
            if not payload.isprintable() or " " in payload:
                payload = repr(e.data)
        except UnicodeDecodeError:
            payload = repr(e.data)
    return f"{e.term}.{e.index}:{payload}"


def format_entries(entries: Sequence[Entry]) -> str:
    return " ".join(format_entry(e) for e in entries)


def format_message(m: Message) -> str:
    """One line per message: route, kind, term, then the kind's fields."""
    head = f"{m.src}->{m.dest}"
    if isinstance(m, VoteRequest):
        kind = "PreVote" if m.pre_vote else "Vote"
        tail = " transfer" if m.ignore_lease else ""
        return f"{head} {kind} t={m.term} last={m.last_term}.{m.last_index}{tail}"
    if isinstance(m, VoteResponse):
        kind = "PreVoteResp" if m.pre_vote else "VoteResp"
        verdict = "granted" if m.granted else f"rejected ({m.reason})"
        return f"{head} {kind} t={m.term} {verdict}"
    if isinstance(m, AppendRequest):
        s = f"{head} App t={m.term} prev={m.prev_term}.{m.prev_index} commit={m.commit_index}"
        if m.entries:
            s += f" [{format_entries(m.entries)}]"
        if m.read_ctx:
            s += f" ctx={m.read_ctx}"
        return s
    if isinstance(m, AppendResponse):
        s = f"{head} AppResp t={m.term}"
        if m.success:
            s += f" ok match={m.match_index} last={m.last_index}"
        else:
            s += f" {m.status.value} prev={m.prev_index} last={m.last_index}"
            if m.conflict_term or m.conflict_index:
                s += f" hint={m.conflict_term}@{m.conflict_index}"
        if m.read_ctx:
            s += f" ctx={m.read_ctx}"
        if not m.success and m.detail:
            s += f" ({m.detail})"
        return s
    assert isinstance(m, TimeoutNow)
    return f"{head} TimeoutNow t={m.term}"


def format_fact(f: RaftFact) -> str:
    fields = msgspec.structs.asdict(f.args)
    args = " ".join(f"{k}={_fmt_arg(v)}" for k, v in sorted(fields.items()))
    return f"{f.event} {args}".rstrip()


def _fmt_arg(v: object) -> str:
    if isinstance(v, list):  # run-length terms: [[term, count], ...]
        return str([list(x) if isinstance(x, tuple) else x for x in v])
    return "-" if v is None else str(v)


def format_cmeta(c: Cmeta) -> str:
    return f"cmeta t={c.term} vote={_fmt_arg(c.voted_for)} cfg@{c.committed_config.opid_index}"


def format_step(step: Step, overwrites_from: int | None = None) -> str:
    """``fact => durable change`` (the fact alone when the step changes nothing durable)."""
    line = format_fact(step.fact)
    if step.cmeta is not None:
        line += " => " + format_cmeta(step.cmeta)
    if step.entries:
        line += " => wal " + format_entries(step.entries)
        if overwrites_from is not None:
            line += f" (overwrites from {overwrites_from})"
    return line


def node_sort_key(uuid: str) -> tuple[int, str]:
    return (int(uuid), "") if uuid.isdigit() else (1 << 30, uuid)


# ---------------------------------------------------------------------------------------
# nodes


@attrs.define
class DurableState:
    """What survives a crash: the cmeta file and the WAL (and the flushed index)."""

    cmeta: Cmeta
    wal: list[Entry] = attrs.Factory(list)
    flushed_index: int = 0  # the state machine's effects up to here are on disk

    @property
    def last_index(self) -> int:
        return self.wal[-1].index if self.wal else 0

    def append(self, entries: Sequence[Entry]) -> int | None:
        """Append a batch with the WAL's rule: an index written again replaces the suffix
        from there. Returns the index overwritten from, or None for a plain append."""
        first = entries[0].index
        if first > self.last_index + 1:
            raise InvariantViolation(
                f"WAL append starts at {first}, beyond the log's end {self.last_index}")
        overwrites = first if first <= self.last_index else None
        del self.wal[first - 1:]
        self.wal.extend(entries)
        return overwrites


@attrs.define(eq=False)
class RaftNode:
    """One server: durable state, and a core while it is up."""

    uuid: str
    options: Options
    durable: DurableState
    core: RaftCore | None = None
    incarnation: int = 0
    applied: list[Entry] = attrs.Factory(list)  # this incarnation's state machine, in order
    applied_base: int = 0  # the index the state machine started from (the flushed point)
    facts: list[RaftFact] = attrs.Factory(list)  # every fact executed, every incarnation
    apply_log: list[tuple[int, Entry]] = attrs.Factory(list)  # (incarnation, entry), all

    @property
    def up(self) -> bool:
        return self.core is not None

    @property
    def applied_index(self) -> int:
        return self.applied_base + len(self.applied)


@attrs.frozen
class Proposal:
    """A write the harness proposed: acknowledged once committed on its leader."""

    node: str
    entry: Entry


@attrs.frozen
class ReadResult:
    node: str
    request_id: int
    index: int | None  # None: the read failed (leadership lost)


# ---------------------------------------------------------------------------------------
# the safety checker


class SafetyChecker:
    """Raft's safety properties, checked on every observation (see the module docstring).

    The cluster calls ``observe(node)`` after every input to a node and every Ready, and
    ``on_*`` for every durable write, apply and read; ``check_logs`` compares all logs
    pairwise. The first violation raises ``InvariantViolation``.
    """

    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}  # term -> the one leader ever seen in it
        self.committed: dict[int, tuple[Entry, int]] = {}  # index -> entry, first term seen
        self.max_commit = 0
        self.applied: dict[int, Entry] = {}
        self.entries: dict[tuple[int, int], Entry] = {}  # (term, index) -> the entry
        self.prev_term: dict[tuple[int, int], int] = {}  # (term, index) -> term at index-1
        self.acked: list[Entry] = []
        self.proposals: list[Proposal] = []
        self.durable_term: dict[str, int] = {}
        self.durable_votes: dict[tuple[str, int], str | None] = {}
        self.memory: dict[tuple[str, int], tuple[int, str | None]] = {}
        self.read_floor: dict[tuple[str, int], int] = {}  # (node, request) -> lowest index

    def fail(self, what: str) -> None:
        raise InvariantViolation(what)

    # ---- per node, after every input

    def observe(self, node: RaftNode) -> None:
        core = node.core
        if core is None:
            return
        uuid = node.uuid
        if core.anomalies:
            self.fail(f"{uuid} reports anomalies: {core.anomalies}")
        # terms and votes never go back within an incarnation
        key = (uuid, node.incarnation)
        seen = self.memory.get(key)
        if seen is not None:
            term, vote = seen
            if core.term < term:
                self.fail(f"{uuid}: term went back from {term} to {core.term}")
            if core.term == term and vote is not None and core.voted_for != vote:
                self.fail(f"{uuid}: vote in term {term} changed from {vote} to "
                          f"{core.voted_for}")
        self.memory[key] = (core.term, core.voted_for)
        log = core.log
        self._observe_log(uuid, log.slice(log.first_index, log.last_index), log.base_term)
        # commitment: what this node holds committed, first seen in this term
        for e in log.slice(1, core.commit_index):
            known = self.committed.get(e.index)
            if known is None:
                self.committed[e.index] = (e, core.term)
            elif known[0] != e:
                self.fail(f"{uuid} holds {format_entry(e)} committed at {e.index}, where "
                          f"{format_entry(known[0])} was committed before")
        self.max_commit = max(self.max_commit, core.commit_index)
        # acknowledgements: a proposal committed on its own leader
        still: list[Proposal] = []
        for p in self.proposals:
            if p.node != uuid:
                still.append(p)
                continue
            e = p.entry
            if core.role is Role.LEADER and core.term == e.term \
                    and core.commit_index >= e.index and log.term_at(e.index) == e.term:
                self.acked.append(e)
            elif core.term == e.term and core.role is Role.LEADER:
                still.append(p)
            # else: the proposer lost leadership; the client never learns the outcome
        self.proposals = still
        if core.role is Role.LEADER:
            self._observe_leader(uuid, core)

    def _observe_log(self, uuid: str, entries: Sequence[Entry], base_term: int) -> None:
        prev = base_term
        for e in entries:
            key = (e.term, e.index)
            known = self.entries.get(key)
            if known is None:
                self.entries[key] = e
                self.prev_term[key] = prev
            else:
                if known != e:
                    self.fail(f"{uuid}: two entries at OpId {e.term}.{e.index}: "
                              f"{format_entry(known)} and {format_entry(e)}")
                if self.prev_term[key] != prev:
                    self.fail(f"{uuid}: log matching: {e.term}.{e.index} follows term {prev} "
                              f"here, term {self.prev_term[key]} elsewhere")
            prev = e.term

    def _observe_leader(self, uuid: str, core: RaftCore) -> None:
        term = core.term
        other = self.leaders.setdefault(term, uuid)
        if other != uuid:
            self.fail(f"two leaders in term {term}: {other} and {uuid}")
        log = core.log
        for index, (e, seen_term) in self.committed.items():
            if seen_term <= term and (log.term_at(index) != e.term or log.entry(index) != e):
                self.fail(f"leader completeness: {uuid}, leader of term {term}, lacks "
                          f"{format_entry(e)} committed in term {seen_term}")
        for e in self.acked:
            if e.term < term and (log.term_at(e.index) != e.term or log.entry(e.index) != e):
                self.fail(f"acknowledged write {format_entry(e)} missing from the log of "
                          f"{uuid}, leader of term {term}")

    # ---- events

    def on_cmeta(self, uuid: str, cmeta: Cmeta) -> None:
        last = self.durable_term.get(uuid, 0)
        if cmeta.term < last:
            self.fail(f"{uuid}: durable term went back from {last} to {cmeta.term}")
        self.durable_term[uuid] = cmeta.term
        key = (uuid, cmeta.term)
        if key in self.durable_votes:
            before = self.durable_votes[key]
            if before is not None and cmeta.voted_for != before:
                self.fail(f"{uuid}: durable vote in term {cmeta.term} changed from {before} "
                          f"to {cmeta.voted_for}")
        self.durable_votes[key] = cmeta.voted_for

    def on_apply(self, node: RaftNode, e: Entry) -> None:
        if e.index != node.applied_index + 1:
            self.fail(f"{node.uuid} applies {format_entry(e)} after index "
                      f"{node.applied_index}")
        known = self.applied.setdefault(e.index, e)
        if known != e:
            self.fail(f"state machine safety: {node.uuid} applies {format_entry(e)} where "
                      f"{format_entry(known)} was applied")

    def on_propose(self, uuid: str, e: Entry) -> None:
        self.proposals.append(Proposal(uuid, e))

    def on_read_request(self, uuid: str, request_id: int) -> None:
        self.read_floor[(uuid, request_id)] = self.max_commit

    def on_read(self, uuid: str, request_id: int, index: int) -> None:
        floor = self.read_floor.pop((uuid, request_id), 0)
        if index < floor:
            self.fail(f"stale read: {uuid} released r{request_id} at {index}, but index "
                      f"{floor} was committed before the read was asked")

    # ---- all logs at once

    def check_logs(self, logs: dict[str, list[Entry]]) -> None:
        """Log matching between every pair of current logs (entries from index 1)."""
        items = sorted(logs.items())
        for k, (a, la) in enumerate(items):
            for b, lb in items[k + 1:]:
                n = min(len(la), len(lb))
                i = n
                while i > 0 and la[i - 1].term != lb[i - 1].term:
                    i -= 1
                if la[:i] != lb[:i]:
                    j = next(j for j in range(i) if la[j] != lb[j])
                    self.fail(f"log matching: {a} and {b} share {la[i - 1].term}.{i} but "
                              f"differ at {j + 1}: {format_entry(la[j])} / "
                              f"{format_entry(lb[j])}")


# ---------------------------------------------------------------------------------------
# the cluster


RestartFrom = Literal["flushed", "zero"]


class RaftCluster:
    """N Raft cores, a network and a disk per node, all in memory and deterministic."""

    def __init__(self, *, seed: int = 0, options: Options | None = None,
                 check: bool = True, max_rounds: int = 1000,
                 on_line: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.options = options or Options()
        self.nodes: dict[str, RaftNode] = {}
        self.queue: list[Message] = []
        self.held: list[Message] = []  # delayed: not in flight until released
        self.groups: list[frozenset[str]] | None = None  # None: fully connected
        self.checker: SafetyChecker | None = SafetyChecker() if check else None
        self.max_rounds = max_rounds
        self.lines: list[str] = []
        self.reads: list[ReadResult] = []
        self.delivered = 0
        self.dropped = 0
        self._on_line = on_line

    # ------------------------------------------------------------------ output

    def _out(self, line: str) -> None:
        self.lines.append(line)
        if self._on_line is not None:
            self._on_line(line)

    def take_output(self) -> list[str]:
        """The lines written since the last call (and forget them)."""
        out, self.lines = self.lines, []
        return out

    # ------------------------------------------------------------------ nodes

    def add_nodes(self, n: int, *, join: bool | None = None,
                  options: Options | None = None) -> list[str]:
        """Create ``n`` nodes, uuids continuing ``"1"``, ``"2"``, ... The first nodes of a
        cluster (``join`` None or False) share a bootstrap configuration of all of them, at
        opid_index 0; later ones (``join`` None or True) start empty, as a server that is
        about to be added: no configuration, no log, no vote; they learn the configuration
        from the leader's log."""
        if join is None:
            join = bool(self.nodes)
        start = len(self.nodes) + 1
        uuids = [str(k) for k in range(start, start + n)]
        config = Config(0, ()) if join else Config(0, tuple(peer(u) for u in uuids))
        for u in uuids:
            node = RaftNode(u, options or self.options, DurableState(Cmeta(0, None, config)))
            self.nodes[u] = node
            self._boot(node, applied_index=0)
            self._out(f"{u}: {'joining, empty config' if join else 'bootstrap'} "
                      f"{format_config(config)}")
        return uuids

    def node(self, uuid: str) -> RaftNode:
        try:
            return self.nodes[uuid]
        except KeyError:
            raise HarnessError(f"no node {uuid!r}") from None

    def core(self, uuid: str) -> RaftCore:
        core = self.node(uuid).core
        if core is None:
            raise NodeDown(f"{uuid} is down")
        return core

    def uuids(self) -> list[str]:
        return sorted(self.nodes, key=node_sort_key)

    def up(self) -> list[str]:
        return [u for u in self.uuids() if self.nodes[u].up]

    def leaders(self) -> list[str]:
        """Nodes that are up and think they lead (more than one: different terms)."""
        return [u for u in self.up() if self.core(u).role is Role.LEADER]

    def leader(self) -> str | None:
        """The leader of the highest term among the nodes up, if any."""
        best: tuple[int, str] | None = None
        for u in self.leaders():
            t = self.core(u).term
            if best is None or t > best[0]:
                best = (t, u)
        return best[1] if best else None

    def _boot(self, node: RaftNode, *, applied_index: int) -> None:
        d = node.durable
        node.incarnation += 1
        rng = random.Random(f"{self.seed}/{node.uuid}/{node.incarnation}")
        node.core = RaftCore(me=node.uuid, term=d.cmeta.term, voted_for=d.cmeta.voted_for,
                             committed_config=d.cmeta.committed_config,
                             log=RaftLog(list(d.wal)), applied_index=applied_index, rng=rng,
                             options=node.options)
        node.applied = []
        node.applied_base = applied_index
        self._observe(node)

    # ------------------------------------------------------------------ inputs

    def _input(self, uuid: str, what: Callable[[RaftCore], object]) -> object:
        node = self.node(uuid)
        core = self.core(uuid)
        try:
            result = what(core)
        except AssertionError as exc:
            raise InvariantViolation(f"{uuid}: the core's own assertion failed: {exc}") \
                from exc
        self._observe(node)
        return result

    def _observe(self, node: RaftNode) -> None:
        if self.checker is not None:
            self.checker.observe(node)

    def tick(self, uuid: str, n: int = 1) -> None:
        for _ in range(n):
            self._input(uuid, RaftCore.tick)

    def tick_all(self, n: int = 1) -> None:
        for _ in range(n):
            for u in self.up():
                self._input(u, RaftCore.tick)

    def campaign(self, uuid: str) -> None:
        self._input(uuid, RaftCore.campaign)

    def propose(self, uuid: str, data: bytes) -> Entry:
        entry = self._input(uuid, lambda c: c.propose(data))
        assert isinstance(entry, Entry)
        if self.checker is not None:
            self.checker.on_propose(uuid, entry)
        return entry

    def change_config(self, uuid: str, kind: ChangeKind, target: str, *, cas: int,
                      member_type: MemberType = VOTER, promote: bool = False) -> Entry:
        """ADD ``target`` (as ``member_type``, optionally to be promoted), REMOVE it, or
        CHANGE_ROLE it to ``member_type``, planned on the committed config at ``cas``."""
        change = ConfigChange(kind, peer(target, member_type, promote))
        entry = self._input(uuid, lambda c: c.propose_config_change(change, cas))
        assert isinstance(entry, Entry)
        return entry

    def transfer(self, uuid: str, target: str) -> None:
        self._input(uuid, lambda c: c.transfer_leadership(target))

    def step_down(self, uuid: str) -> None:
        self._input(uuid, RaftCore.step_down)

    def read_index(self, uuid: str, request_id: int) -> None:
        self._input(uuid, lambda c: c.read_index(request_id))
        if self.checker is not None:
            self.checker.on_read_request(uuid, request_id)

    # ------------------------------------------------------------------ the shell

    def process_ready(self, uuid: str, *, crash_after: int | CrashPoint | None = None
                      ) -> bool:
        """Execute one Ready of ``uuid``: walk its plan (see the module docstring). With
        ``crash_after=k`` the node crashes after the first k effects of the plan; with a
        function, after the effect it picks (None: no crash). Returns whether there was a
        Ready."""
        node = self.node(uuid)
        core = self.core(uuid)
        if not core.has_ready():
            if crash_after is not None and not callable(crash_after):
                self.crash(uuid)
            return False
        rd = core.ready()
        effects = plan(rd)
        stop = crash_after(effects) if callable(crash_after) else crash_after
        if rd.steps or rd.committed or rd.read_states or rd.read_failures \
                or stop is not None:
            self._out(f"> {uuid} ready")  # (a Ready of messages only: see them delivered)
        shell = _NodeShell(self, node)
        for k, effect in enumerate(effects):
            if stop is not None and k >= stop:
                self._crash(node, f"after {k} of {len(effects)} effects; lost "
                                  f"{_lost(effects[k:])}")
                return True
            dispatch(effect, shell)
        if stop is not None:
            self._crash(node, f"after {len(effects)} of {len(effects)} effects")
            return True
        self._check_durable(node, core)
        try:
            core.advance(rd)
        except AssertionError as exc:
            raise InvariantViolation(f"{uuid}: the core's own assertion failed: {exc}") \
                from exc
        self._observe(node)
        return True

    def _persist(self, node: RaftNode, step: Step) -> None:
        overwrites: int | None = None
        if step.cmeta is not None:
            if self.checker is not None:
                self.checker.on_cmeta(node.uuid, step.cmeta)
            node.durable.cmeta = step.cmeta
        if step.entries:
            overwrites = node.durable.append(step.entries)
            if overwrites is not None and overwrites <= node.durable.flushed_index:
                raise InvariantViolation(f"{node.uuid}: WAL overwrite from {overwrites} "
                                         f"below the flushed index {node.durable.flushed_index}")
        self._out("  " + format_step(step, overwrites))

    def _check_durable(self, node: RaftNode, core: RaftCore) -> None:
        """After every step of a Ready: the disk says what the core believes."""
        d = node.durable
        want = Cmeta(core.term, core.voted_for, core.committed_config)
        if d.cmeta != want:
            raise InvariantViolation(f"{node.uuid}: durable {format_cmeta(d.cmeta)} differs "
                                     f"from the core's {format_cmeta(want)} after a Ready")
        log = core.log.slice(1, core.log.last_index)
        if d.wal != log:
            raise InvariantViolation(f"{node.uuid}: WAL [{format_entries(d.wal)}] differs "
                                     f"from the core's log [{format_entries(log)}]")

    def _answer_reads(self, node: RaftNode, read_states: Sequence[ReadState],
                      read_failures: Sequence[int]) -> None:
        for rs in read_states:
            if self.checker is not None:
                self.checker.on_read(node.uuid, rs.request_id, rs.index)
            self.reads.append(ReadResult(node.uuid, rs.request_id, rs.index))
            self._out(f"  read r{rs.request_id} at {rs.index}")
        for rid in read_failures:
            if self.checker is not None:
                self.checker.read_floor.pop((node.uuid, rid), None)
            self.reads.append(ReadResult(node.uuid, rid, None))
            self._out(f"  read r{rid} failed")

    def process_all(self) -> bool:
        """One Ready of every node that is up and has one; whether any had."""
        did = False
        for u in self.up():
            did = self.process_ready(u) or did
        return did

    # ------------------------------------------------------------------ network

    def connected(self, a: str, b: str) -> bool:
        if self.groups is None:
            return True
        return any(a in g and b in g for g in self.groups)

    def partition(self, *groups: Iterable[str]) -> None:
        """Cut the network into ``groups``; a node named in no group is isolated."""
        gs = [frozenset(g) for g in groups]
        named = frozenset().union(*gs)
        for g in gs:
            for u in g:
                self.node(u)
        gs.extend(frozenset({u}) for u in self.uuids() if u not in named)
        self.groups = gs
        self._out("partition " + " / ".join(" ".join(sorted(g, key=node_sort_key))
                                            for g in gs))

    def heal(self) -> None:
        self.groups = None
        self._out("healed")

    def _deliver(self, m: Message) -> None:
        node = self.nodes.get(m.dest)
        why = None
        if node is None:
            why = f"no node {m.dest}"
        elif node.core is None:
            why = f"{m.dest} is down"
        elif not self.connected(m.src, m.dest):
            why = "partition"
        if why is not None:
            self.dropped += 1
            self._out(f"{format_message(m)} DROPPED ({why})")
            return
        self.delivered += 1
        self._out(format_message(m))
        self._input(m.dest, lambda c: c.step(m))

    def deliver(self, count: int | None = None, *, src: str | None = None,
                dest: str | None = None) -> int:
        """Deliver the messages in flight now (or the first ``count`` of them), optionally
        only those from ``src`` and/or to ``dest``; later messages wait. Returns how many."""
        picked: list[Message] = []
        rest: list[Message] = []
        for m in self.queue:
            if (count is None or len(picked) < count) and (src is None or m.src == src) \
                    and (dest is None or m.dest == dest):
                picked.append(m)
            else:
                rest.append(m)
        self.queue = rest
        for m in picked:
            self._deliver(m)
        return len(picked)

    def deliver_at(self, i: int) -> Message:
        """Deliver the message at position ``i`` of the queue (any order: a reordering)."""
        m = self.queue.pop(i)
        self._deliver(m)
        return m

    def drop(self, i: int) -> Message:
        m = self.queue.pop(i)
        self.dropped += 1
        self._out(f"{format_message(m)} DROPPED (lost)")
        return m

    def drop_matching(self, *, src: str | None = None, dest: str | None = None) -> int:
        n = 0
        keep: list[Message] = []
        for m in self.queue:
            if (src is None or m.src == src) and (dest is None or m.dest == dest):
                n += 1
                self.dropped += 1
                self._out(f"{format_message(m)} DROPPED (lost)")
            else:
                keep.append(m)
        self.queue = keep
        return n

    def hold(self, *, src: str | None = None, dest: str | None = None) -> int:
        """Set the matching messages in flight aside: a slow link. ``deliver`` and
        ``stabilize`` do not see them until ``release``. Returns how many."""
        keep: list[Message] = []
        n = 0
        for m in self.queue:
            if (src is None or m.src == src) and (dest is None or m.dest == dest):
                self.held.append(m)
                n += 1
            else:
                keep.append(m)
        self.queue = keep
        self._out(f"held {n} messages" + (f" from {src}" if src else "")
                  + (f" to {dest}" if dest else ""))
        return n

    def release(self) -> int:
        """Put the held messages back in flight, after the others (they arrive late)."""
        n = len(self.held)
        self.queue.extend(self.held)
        self.held = []
        self._out(f"released {n} messages")
        return n

    def duplicate(self, i: int) -> Message:
        """Queue a second copy of the message at ``i``, at the end."""
        m = self.queue[i]
        self.queue.append(m)
        return m

    def swap(self, i: int, j: int) -> None:
        self.queue[i], self.queue[j] = self.queue[j], self.queue[i]

    # ------------------------------------------------------------------ faults

    def crash(self, uuid: str, *, after_effects: int | None = None) -> None:
        """Crash ``uuid``. With ``after_effects=k`` and output pending, crash inside that
        Ready after the first k effects of its plan (``process_ready(uuid, crash_after=k)``)."""
        node = self.node(uuid)
        if node.core is None:
            raise NodeDown(f"{uuid} is already down")
        if after_effects is not None and node.core.has_ready():
            self.process_ready(uuid, crash_after=after_effects)
            return
        self._crash(node, "")

    def _crash(self, node: RaftNode, how: str) -> None:
        node.core = None
        node.applied = []
        self._out(f"{node.uuid} crashed" + (f" {how}" if how else ""))

    def flush(self, uuid: str) -> int:
        """Make the state machine durable up to its applied index (as a tablet flush)."""
        node = self.node(uuid)
        node.durable.flushed_index = self.core(uuid).applied_index
        self._out(f"{uuid} flushed to {node.durable.flushed_index}")
        return node.durable.flushed_index

    def restart(self, uuid: str, *, applied: RestartFrom = "flushed") -> None:
        """Boot a crashed node from its durable state, its state machine at the flushed
        index (or at 0: replay everything)."""
        node = self.node(uuid)
        if node.core is not None:
            raise HarnessError(f"{uuid} is up")
        index = node.durable.flushed_index if applied == "flushed" else 0
        self._boot(node, applied_index=index)
        c = node.durable.cmeta
        self._out(f"{uuid} restarted: {format_cmeta(c)} wal={_opid(node.durable.wal)} "
                  f"applied={index}")

    # ------------------------------------------------------------------ loops

    def round(self) -> bool:
        """One round: a Ready of every node that has one, then every message in flight
        delivered. Returns whether there was anything to do."""
        did = self.process_all()
        if self.queue:
            self.deliver()
            did = True
        self.check_logs()
        return did

    def stabilize(self, max_rounds: int | None = None) -> int:
        """Process Readies and deliver messages until nothing is left; rounds taken."""
        bound = self.max_rounds if max_rounds is None else max_rounds
        for rounds in range(bound):
            if not self.round():
                return rounds
        busy = [u for u in self.up() if self.core(u).has_ready()]
        raise LivelockError(
            f"livelock: still busy after {bound} rounds (nodes with output: {busy}; "
            f"in flight: {[format_message(m) for m in self.queue[:6]]})")

    # ------------------------------------------------------------------ checks & views

    def logs(self) -> dict[str, list[Entry]]:
        """Every node's log: the core's when it is up, the WAL when it is down."""
        out: dict[str, list[Entry]] = {}
        for u, node in self.nodes.items():
            if node.core is not None:
                out[u] = node.core.log.slice(1, node.core.log.last_index)
            else:
                out[u] = list(node.durable.wal)
        return out

    def check_logs(self) -> None:
        if self.checker is not None:
            self.checker.check_logs(self.logs())

    def check(self) -> None:
        """Every invariant, now (they are also checked as the run goes)."""
        for node in self.nodes.values():
            self._observe(node)
        self.check_logs()

    def status_line(self, uuid: str) -> str:
        node = self.node(uuid)
        core = node.core
        if core is None:
            d = node.durable
            return (f"{uuid}: DOWN {format_cmeta(d.cmeta)} wal={_opid(d.wal)} "
                    f"flushed={d.flushed_index}")
        s = core.status()
        line = (f"{uuid}: {s.role.name} t={s.term} vote={_fmt_arg(s.voted_for)} "
                f"leader={_fmt_arg(s.leader)} last={s.last_term}.{s.last_index} "
                f"commit={s.commit_index} applied={s.applied_index} "
                f"cfg@{s.committed_config.opid_index}{format_config(s.committed_config)}")
        if s.active_config != s.committed_config:
            line += f" active@{s.active_config.opid_index}{format_config(s.active_config)}"
        return line

    def log_line(self, uuid: str) -> str:
        entries = self.logs()[uuid]
        node = self.node(uuid)
        commit = node.core.commit_index if node.core is not None else None
        head = f"{uuid} log:" if commit is None else f"{uuid} log (commit={commit}):"
        return f"{head} {format_entries(entries)}".rstrip()


def peer(uuid: str, member_type: MemberType = VOTER, promote: bool = False) -> Peer:
    """The harness's Peer for ``uuid`` (address ``ts-<uuid>``)."""
    return Peer(uuid, f"ts-{uuid}", member_type, promote)


CrashPoint = Callable[[Sequence[PlanEffect]], "int | None"]


def after_appends_left(effects: Sequence[PlanEffect]) -> int | None:
    """The crash point "the leader's AppendRequests left, its own WAL append of their
    entries is not durable yet" (plan.py rule 3): just after the first Send of entries that
    a PersistStep of a WAL append follows. None if the plan has no such point."""
    for k, e in enumerate(effects):
        if isinstance(e, Send) \
                and any(isinstance(m, AppendRequest) and m.entries for m in e.messages) \
                and any(isinstance(later, PersistStep) and later.step.entries
                        for later in effects[k + 1:]):
            return k + 1
    return None


def _lost(effects: Sequence[PlanEffect]) -> str:
    writes = sum(isinstance(e, PersistStep) for e in effects)
    facts = sum(isinstance(e, TraceStep) for e in effects)
    messages = sum(len(e.messages) for e in effects if isinstance(e, Send))
    applies = sum(len(e.entries) for e in effects if isinstance(e, Apply))
    return f"{writes} writes, {facts} facts, {messages} messages, {applies} applies"


def _opid(wal: Sequence[Entry]) -> str:
    return f"{wal[-1].term}.{wal[-1].index}" if wal else "0.0"



@attrs.frozen
class _NodeShell:
    """One node's effects, as the tablet server's shell does them, in memory (the harness's
    side of consensus/plan.py's PlanShell; ``dispatch`` routes each effect here)."""

    cluster: RaftCluster
    node: RaftNode

    def persist_step(self, step: Step) -> None:
        self.cluster._persist(self.node, step)

    def trace_step(self, step: Step) -> None:
        self.node.facts.append(step.fact)
        if step.cmeta is None and not step.entries:  # (a durable step printed at PersistStep)
            self.cluster._out("  " + format_step(step))

    def send_messages(self, messages: tuple[Message, ...]) -> None:
        self.cluster.queue.extend(messages)

    def apply_entries(self, entries: tuple[Entry, ...]) -> None:
        checker = self.cluster.checker
        for e in entries:
            if checker is not None:
                checker.on_apply(self.node, e)
            self.node.applied.append(e)
            self.node.apply_log.append((self.node.incarnation, e))
            self.cluster._out(f"  apply {format_entry(e)}")

    def release_reads(self, read_states: tuple[ReadState, ...],
                      read_failures: tuple[int, ...]) -> None:
        self.cluster._answer_reads(self.node, read_states, read_failures)

__all__ = [
    "CrashPoint",
    "DurableState",
    "HarnessError",
    "InvariantViolation",
    "LivelockError",
    "NodeDown",
    "Proposal",
    "RaftCluster",
    "RaftNode",
    "ReadResult",
    "RestartFrom",
    "SafetyChecker",
    "after_appends_left",
    "format_config",
    "format_entries",
    "format_entry",
    "format_fact",
    "format_message",
    "format_step",
    "node_sort_key",
    "peer",
]
