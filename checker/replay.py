"""The pure core: replay one key's events, key = (node UUID, tablet), against the spec.

Parts
-----
``Replayer`` is this module's feed, memo and spec steps, and it holds three parts, each an
object with its own module a reader can hold on its own: ``log_tracker``, a
``logtrack.LogTracker`` (the rebuilt log, commit runs, leader commits, the facts of the
cross-node log checks; its state is in the keys, it holds only the facts list);
``crash_frontier``, a ``frontier.CrashFrontier`` (incarnation boundaries: the unlogged
steps a crash may hide, damage and purges while down; it reads back from the replay only
what ``frontier.FrontierHost`` names); and ``words``, an ``explain.Explainer`` (the words
of a finding). The values they share (``KeyState``, ``Outcome``, ``Violation``, the state
table) are in ``keys``, the facts it emits (``GlobalFact``) and where they go
(``FactSink``) in ``facts``; shape mode's abstraction and its proof in
``logshape``. Every public name is importable from here.

Rules of this file
------------------
* No I/O, no Spark, no knowledge of files beyond the (file, line) labels events carry. The
  local driver and the Spark driver call ``Replayer.feed`` with the same events in the same
  order and get the same findings.
* The spec decides. Every tablet event is the spec action of the same name: its *local*
  guard must hold in the current spec state and the durable projection of its effect must
  equal the state the event reports. The checker never re-states a transition rule; it only
  calls ``action.guard`` and ``action.effect`` (spec/actions.py). System guards that read
  other servers (a majority of votes) are global properties, checked by
  ``global_checks``; the parts that only compare identities (the spec's
  ``Action.identity_guard``: ``is_self``, ``not_self``) are checked here with the node's
  interned id.

Theory of operation
-------------------
State. A key's replay state is one spec ``ServerState``. Volatile fields (up, op, step,
running, leader) are not in traces: the checker carries them forward from the spec. Ghost
maps (votes, member_votes, led) are cleared after every step: no local guard reads them,
and the global vote and leader checks work from the events themselves. Cleared ghosts make
states canonical, so identical situations on different keys are the same state.

Memoisation. States are interned to ints. A step's outcome is a pure function of
(state id, event name, raw args bytes, raw state bytes), so it is computed once and then
looked up: a repeated pattern costs one dict lookup, the first occurrence costs a decode, a
guard, an effect and a comparison (and the state invariants, once per distinct state). An
outcome records what the per-key, history-dependent checks need (``Outcome.fast``), so a
driver can replay a clean memo hit inline without a call (``local.stream_node``); coverage
is counted on the outcomes (``Outcome.hits``). The tables are bounded (``max_memo``): drivers call
``maybe_reset`` between nodes, and within a node every ``RESET_EVERY`` lines with the node's
live keys (their states are carried into the new tables), so memory grows with the number
of live keys, never with the number of events.

Shape mode. A real server's appends and commits would each be a new pattern (each moves
the WAL's last OpId or names a new index): without more, about three steps in four of a
real trace were memo misses. So after a clean append or commit on the general path, a key
goes into *shape mode* (``KeyState.pos``; checker/logshape.py): its state is kept with the
log positions as offsets from the WAL's last index, and the next appends and commits are
looked up by that shape and their positions' offsets (``shape_step``), which hit the memo
for every step of a shape already seen. Why that is exact -- a z3 proof per action that the
spec's guard, effect, local invariants and step properties commute with a shift of every
log position, under a side condition checked on each hit -- is in logshape's docstring.
The per-key history checks (terms, the rebuilt log, commit facts) run on every event's
concrete indices as before. Any other event first turns the key's state concrete again
(``concretize``), so everything below sees concrete states only.

Crash frontier. A crash is not an event. When a key's next event belongs to a later
incarnation, the previous one ended either cleanly (it logged ``server_stop``) or in a
crash. The server writes each event *after* the durable step it stands for, so a kill can
lose the event of the step in flight (one per key: the writer's guarantee). Across a crash
boundary the checker therefore accepts any sequence of up to K (``max_frontier``, default
1) unlogged local spec steps
from the last matched state, with parameters drawn from values visible in that state and in
the state the next incarnation reports; then the spec's ``crash``; then the new
incarnation's ``startup`` (which must be logged when the tablet exists on disk; a tablet
the server never hosted needs none). The smallest number of unlogged steps that explains
the observed startup state is the *frontier size*, reported per boundary.

Damage. While a server is down (after a crash or a clean stop) a disk fault may damage its
WAL or its blocks: the spec's ``damage``, which no process logs (it is not a step a process
takes). The writer reports it at the next startup: the state says ``DAMAGED`` and the case is
FAILED, with a reason. So at every boundary each crashed candidate is also tried with its
WAL, its blocks, or both damaged (the spec's ``damage`` guard and effect), the undamaged
candidate first. Reported damage is therefore explained, and a startup that reports damage
but starts READY, or reports FAILED over an intact state, breaks ``startup_guard``. Damage
the writer hides (READY over a WAL it did not verify) cannot be seen in a trace; the spec's
``RunningIsIntact`` and the ``startup_ignores_damage`` mutant are where that is argued.
An operator may also purge the quarantine of a stopped server (``revivify local-replica
purge-quarantine``): the spec's ``purge``, logged by no process either. The next startup
reports no quarantine, and ABSENT where the WAL was QUARANTINED; so every candidate (damaged
or not) is also tried purged, where the spec's ``purge`` guard allows it (never a deletion
startup must still roll forward), after the unpurged ones.

Resynchronisation. After a violation the replay adopts the observed durable state (over the
spec's volatile state) and goes on, so one bad step is reported once rather than cascading.

The rebuilt log (contract version 3). Each key also carries its Raft log as index -> term
runs, rebuilt from log_append's ``prev_term`` and ``terms`` and followed through every step
that moves the WAL (``log_sync``); the per-key log checks read it as events come, and it
feeds the facts of the cross-node log checks (``global_checks``: Log Matching, Leader
Completeness, State-Machine Safety, appends of a term nobody won, commits beyond the
leader's). traces/README.md "Version 3" states each rule and why it is sound.

Nodes. ``begin_file`` and ``end_file`` (called by the drivers at each file of a node) find
lost incarnation files (``MissingIncarnation``) and clean incarnations that skipped a
tablet's startup (``MissingStartup``); a node whose trace starts at its ``server_format``
is *born*, and the first startup of a tablet on it must come from its own steps
(``PhantomTablet``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Container, Iterable
from typing import Any, Final

import attrs

from revivify.checker.compiled import (
    CompiledAction,
    cached_action,
    from_scalars,
    invariants_hold,
    steps_hold,
    to_scalars,
)
from revivify.checker.explain import Explainer, add_finding, key_finding
from revivify.checker.facts import (
    ConfigCommit,
    Elect,
    FactSink,
    GlobalFact,
    Lead,
    Leader,
    LeaderLog,
    Vote,
)
from revivify.checker.frontier import CrashFrontier, Decoded
from revivify.checker.keys import (
    _ID_PARAMS,
    FAST_COMMIT,
    FAST_LEADER_COMMIT,
    FAST_LOG,
    FAST_PLAIN,
    SLOW,
    WINDOW,
    KeyState,
    NodeState,
    Outcome,
    StateTable,
    Violation,
    _forced,
    _Problem,
    canon,
    remember,
    resync,
)
from revivify.checker.logshape import (
    APPEND_ARGS,
    COMMIT_ARGS,
    POS_PARAMS,
    ShapeOutcome,
    floor_of,
    shift,
    shift_exact,
    split_append,
    split_commit,
    split_state,
)
from revivify.checker.logtrack import LogTracker
from revivify.checker.traces import (
    SB_CODES,
    STARTUP_CODES,
    STC_CODES,
    TRACED_FIELDS,
    ArgsError,
    CmetaState,
    Envelope,
    Interner,
    MergeArgs,
    StcArgs,
    StcRejectArgs,
    cmeta_tuple,
    decode_args,
    decode_state,
    describe_tuple,
    spec_tuple,
)
from revivify.spec.actions import (
    TRACE_FILLS,
    Action,
    last_logged,
)
from revivify.spec.invariants import INVARIANTS, STEP_PROPERTIES, check_state, check_step
from revivify.spec.model import (
    NO_SERVER,
    ServerState,
)
from revivify.spec.system import Spec, default_spec

# The writer loses at most the event of the step in flight (traces/README.md): one unlogged
# step per key at a crash.
DEFAULT_MAX_FRONTIER: Final = 1
# Lines between a driver's checks of the memo tables' size within a node (``maybe_reset``).
RESET_EVERY: Final = 1 << 14

# The invariants and step properties a per-key replay can check, chosen by the spec's own
# flags: those over one server's state (``per_server``) that read no ghost history
# (``reads_ghosts``; no trace carries ghosts, and the replay clears them). The others need
# the whole system; their trace-level forms live in global_checks.
LOCAL_INVARIANTS: Final = frozenset(
    i.name for i in INVARIANTS if i.per_server and not i.reads_ghosts
)
LOCAL_STEP_PROPERTIES: Final = frozenset(
    p.name for p in STEP_PROPERTIES if not p.reads_ghosts and p.name != "UuidNeverReused"
)



class _Sized:
    """Stands in for the system tuple where a guard only asks how many servers exist."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class Replayer:
    """The core, with its memo tables. One per process (or per Spark task)."""

    def __init__(self, spec: Spec | None = None, max_frontier: int = DEFAULT_MAX_FRONTIER,
                 interner: Interner | None = None, max_memo: int = 200_000) -> None:
        self.spec = spec or default_spec()
        self.actions: dict[str, Action] = {a.name: a for a in self.spec.actions}
        self.max_frontier = max_frontier
        self.interner = interner or Interner()
        self.max_memo = max_memo
        self.invariants = tuple(i for i in self.spec.invariants if i.name in LOCAL_INVARIANTS)
        self.step_props = tuple(p for p in self.spec.step_properties
                                if p.name in LOCAL_STEP_PROPERTIES)
        # The spec's guards, effects and local checks compiled to plain Python
        # (``checker.compiled``: the same functions, as z3 sees them, printed as Python);
        # None where a function does not compile (the interpreted one is used).
        # Over the interned states' ``Scalars`` tuples (``StateTable``); each action is
        # compiled at its first event (``_compiled``).
        self._compiled: dict[str, CompiledAction | None] = {}
        self._inv_ok = invariants_hold(self.invariants, scalars=True)
        self._step_ok = steps_hold(self.step_props, scalars=True)
        # Events whose per-key checks read their parameters: votes (one per term),
        # identities (the spec's is_self / not_self system guards), leader facts.
        self._param_events = frozenset(
            a.name for a in self.spec.actions
            if a.identity_guard is not None
        ) | {"vote_granted", "start_election", "become_leader"}
        # Rare events whose raw args (voters) or effect on the known config the global
        # checks need: always the general path.
        self._config_events = frozenset({"create_tablet", "config_commit",
                                         "copy_merge_cmeta"})
        self._param_events |= self._config_events
        # Events that name other nodes (a copy's caller and source): the general path
        # notes them (the log checks ask whether every named node's trace is present).
        self._named_events = frozenset({"stc_accept", "stc_reject", "copy_begin"})
        self._coverage: Counter[tuple[str, str]] = Counter()
        self.frontiers: Counter[int] = Counter()
        self.facts: list[GlobalFact] = []
        self.words = Explainer(self.interner)
        self.log_tracker = LogTracker(self.facts)
        self.crash_frontier = CrashFrontier(self.spec, max_frontier, self.words, self)
        self.events = 0
        self.memo_misses = 0
        # Per action: whether z3 proved its steps exact under a shift of the log positions
        # (``logshape.shift_exact``), asked at its first step that could be abstracted.
        self._shift_ok: dict[str, bool] = {}
        self._reset_tables()

    def _reset_tables(self) -> None:
        self._fold_hits()
        self.states = StateTable()
        self.memo: dict[tuple[Any, ...], Outcome] = {}
        # The shape memos (checker/logshape.py): appends by (shape, first_index - pos,
        # op_index - pos, the op_term field, the rest of the args), commits by (shape,
        # index - pos, the rest of the args).
        self.shape_appends: dict[tuple[int, int, int, bytes, bytes], ShapeOutcome] = {}
        self.shape_commits: dict[tuple[int, int, bytes], ShapeOutcome] = {}
        self.state_bad: dict[ServerState, list[str]] = {}
        self.fresh = self.intern(ServerState(up=True))

    def _fold_hits(self) -> None:
        outs: list[Iterable[Outcome | ShapeOutcome]] = [
            getattr(self, "memo", {}).values(), getattr(self, "shape_appends", {}).values(),
            getattr(self, "shape_commits", {}).values()]
        for table in outs:
            for out in table:
                if out.hits:
                    self._coverage[(out.event, out.branch)] += out.hits
                    out.hits = 0

    @property
    def coverage(self) -> Counter[tuple[str, str]]:
        """Events replayed per (action, guard branch)."""
        self._fold_hits()
        return self._coverage

    def reset_counts(self) -> None:
        """Zero the statistics (events, coverage, frontiers), keeping the memo tables: a
        Spark worker reuses one warm replayer for the tasks it runs."""
        self._fold_hits()
        self._coverage.clear()
        self.frontiers.clear()
        self.events = 0
        self.facts.clear()

    def maybe_reset(self, live: Iterable[KeyState] = ()) -> bool:
        """Drop the memo tables if they are large; ``live``: every key in flight (their
        states are interned afresh). True when the tables were dropped (a driver that
        bound ``memo.get`` binds it again)."""
        if len(self.memo) + len(self.states) + len(self.state_bad) + \
                len(self.shape_appends) + len(self.shape_commits) <= self.max_memo:
            return False
        old = self.states
        self._reset_tables()
        for k in live:
            if k.state >= 0:
                k.state = self.states.intern(old.tuples[k.state], old.objs[k.state])
        return True

    def drop_tables(self) -> None:
        """Drop the memo tables, keeping the counts (events, coverage, frontiers): a driver
        done replaying (every key finished) frees them before judging the global checks,
        whose findings' temporaries then reuse that memory. Any key still held has its
        state id refer to nothing afterwards."""
        self._reset_tables()

    def intern(self, s: ServerState) -> int:
        """The id of a canonical state (every map empty: ``canon``)."""
        return self.states.intern(to_scalars(s), s)

    def new_key(self, node: str, tablet: str, born: bool = False) -> KeyState:
        return KeyState(node=node, tablet=tablet, node_id=self.interner.id(node),
                        born=born)

    def concretize(self, k: KeyState) -> None:
        """Leave shape mode: the key's state becomes the concrete one again (the shape with
        its positions moved back by ``pos``)."""
        if k.pos >= 0:
            k.state = self.states.intern(shift(self.states.tuples[k.state], k.pos))
            k.pos = -1

    def finish_key(self, k: KeyState) -> None:
        """The key has no more events: flush its open commit run and its facts."""
        self.concretize(k)
        self.log_tracker.finish(k, self.states.tuples[k.state] if k.state >= 0 else None)

    # -----------------------------------------------------------------------------------
    # Shape mode (checker/logshape.py: what it is and why it is exact).

    def _to_shape(self, k: KeyState, pre_sid: int, event: str, args_b: bytes, st_b: bytes,
                  out: Outcome) -> None:
        """After a clean append or commit on the general path: memoise its shape (when the
        step qualifies: the writer's layout, H, an action z3 proved) and put the key in
        shape mode, so that the next steps of the same shape are lookups."""
        ok = self._shift_ok.get(event)
        if ok is None:
            ok = self._shift_ok[event] = shift_exact(self.actions[event], self.invariants,
                                                     self.step_props)
        if not ok:
            return
        tuples = self.states.tuples
        pre, post = tuples[pre_sid], tuples[k.state]
        # The proof's premise: every local invariant holds after the step and every step
        # property of it (``_invariants`` does not report an invariant the pre-state
        # already broke: such a step is clean, but not one the proof speaks of).
        if self._inv_ok is None or self._step_ok is None or not self._inv_ok(post) or \
                not self._step_ok(pre, post):
            return
        base = pre.wal_last_index
        params = out.params
        cut = split_state(st_b, post.wal_last_index)
        if cut is None:
            return
        skey: tuple[Any, ...]
        positions: tuple[int, ...]
        others: tuple[int, ...]
        if event == "log_append":
            got = split_append(args_b)
            if got is None or (got[0], got[1]) != (params["first_index"],
                                                   params["op_index"]) or \
                    any(b'"first_index"' in x or b'"op_index"' in x for x in got[2:]):
                return
            positions = (got[0], got[1])
            others = (params["op_term"], params["prev_term"])
        else:
            one = split_commit(args_b)
            if one is None or one[0] != params["index"] or b'"index"' in one[1]:
                return
            positions = (one[0],)
            others = (params["op_term"],)
        lowest = min(base, pre.ghost_last_index, *positions)
        floor = floor_of(pre, others)
        if lowest <= floor:  # H does not hold here
            return
        shape = self.states.intern(shift(pre, -base))
        if event == "log_append":
            assert got is not None
            skey = (shape, got[0] - base, got[1] - base, got[2], got[3])
            table: dict[Any, ShapeOutcome] = self.shape_appends
        else:
            assert one is not None
            skey = (shape, one[0] - base, one[1])
            table = self.shape_commits
        after = post.wal_last_index
        so = table.get(skey)
        if so is None:
            so = ShapeOutcome(event, out.branch, self.states.intern(shift(post, -after)),
                              after - base, floor - (lowest - base), cut[0], cut[1],
                              after - base, out.fast, params["op_term"], out.lead,
                              out.obs_term, post.term)
            if out.log is not None:
                so.prev, so.terms = out.log[1], out.log[2]
                so.one = out.ext != 0
            table[skey] = so
        k.state = so.post
        k.pos = after

    def shape_step(self, k: KeyState, file: str, line: int, event: str, args_b: bytes,
                   st_b: bytes, lamport: int) -> bool | list[Violation]:
        """A step of a key in shape mode, in its current incarnation: False when the shape
        memo does not decide it (the driver concretizes the key and takes the general
        path); else the step is replayed (= ``feed_raw`` + ``_after`` for it, on the
        step's concrete indices) and the result is True, or the findings of the per-key
        log checks."""
        pos = k.pos
        so: ShapeOutcome | None
        # = logshape.split_append / split_commit, inlined (the hot path).
        if event == "log_append":
            m = APPEND_ARGS.match(args_b)
            if m is None:
                return False
            a, f_term, b, rest = m.groups()
            first = int(a)
            index = int(b)
            so = self.shape_appends.get((k.state, first - pos, index - pos, f_term, rest))
        elif event == "commit":
            m = COMMIT_ARGS.match(args_b)
            if m is None:
                return False
            index = int(m[1])
            so = self.shape_commits.get((k.state, index - pos, m[2]))
        else:
            return False
        if so is None or pos <= so.need or \
                st_b != so.pre + b"%d" % (pos + so.obs_off) + so.suf:
            return False
        ot = so.obs_term
        if 0 <= ot < k.max_term:
            return False  # a term regression: the general path reports it
        self.events += 1
        so.hits += 1
        if ot > k.max_term:
            k.max_term = ot
            k.max_term_file, k.max_term_line = file, line
        k.state = so.post
        k.pos = pos + so.dpos
        found: list[Violation] | None
        if event == "log_append":
            found = self.log_tracker.append(k, first, so.one, so.prev, so.terms, so.a, index,
                                            so.lead, so.node_term, file, line, lamport,
                                            args_b)
        else:
            found = self.log_tracker.commit_step(k, index, so.a, so.lead, ot, file, line,
                                                 lamport, args_b)
        remember(k.window, (file, line, event, args_b))
        return found or True

    # -----------------------------------------------------------------------------------
    # A node's files: incarnations and the tablets they start.

    def begin_file(self, ns: NodeState, keys: dict[str, KeyState], file: str, line: int,
                   inc: int) -> list[Violation] | None:
        """A node's next file (incarnation ``inc``) begins at ``file:line``. A gap in the
        incarnations (1, 2, 4) is ``MissingIncarnation``: what the lost file did is
        unknown, so the node's keys start over (and its history is no longer whole)."""
        found: list[Violation] | None = None
        if ns.inc and inc > ns.inc + 1:
            gap = str(ns.inc + 1) if inc == ns.inc + 2 else f"{ns.inc + 1}..{inc - 1}"
            found = [Violation(
                kind="MissingIncarnation", severity="violation", file=file, line=line,
                subject=f"node={ns.node} inc={ns.inc + 1}",
                message=f"node {ns.node}: incarnation {inc} follows {ns.inc}; the trace "
                        f"of incarnation {gap} is missing (its events are unknown: this "
                        "node's tablets are replayed afresh from their next startup)",
                node=ns.node, event="server_start", failed="no lost files")]
            for k in keys.values():
                self.finish_key(k)
            keys.clear()
            ns.born = False
        ns.inc = max(ns.inc, inc)
        return found

    def end_file(self, ns: NodeState, keys: dict[str, KeyState], file: str, line: int,
                 inc: int, clean: Container[tuple[str, int]]) -> list[Violation] | None:
        """The node's incarnation ``inc`` ended cleanly at ``file:line`` (server_stop):
        its startup ran to the end, so every tablet on disk logged ``startup``. A key
        with no event in it whose tablet is on disk after every explanation a crash
        frontier offers is ``MissingStartup`` (the key then carries on from the startup
        the spec expects)."""
        if (ns.node, inc) not in clean:
            return None
        found: list[Violation] | None = None
        for k in keys.values():
            if k.state < 0 or k.inc >= inc:
                continue
            self.concretize(k)
            prev_clean = (k.node, k.inc) in clean
            key = ("nostart", k.state, prev_clean)
            out = self.memo.get(key)
            if out is None:
                out = self.memo[key] = self.crash_frontier.nostart(k.state, prev_clean)
            if out.problem is None:
                continue
            found = add_finding(found, attrs.evolve(
                key_finding(k, file, line, "server_stop", b"", out.problem,
                                out.frontier),
                subject=f"{file}:{line} tablet={k.tablet}",
                message=f"incarnation {inc} ended cleanly (server_stop) with no event for "
                        f"tablet {k.tablet}: " + out.problem.message))
            self.log_tracker.flush_leader_commit(k)
            k.app_term = -1
            k.tap_term = -1
            k.inc = inc
            k.state = out.post
            self.log_tracker.log_sync(k, self.states.tuples[k.state])
        return found

    def _memoise(self, key: tuple[Any, ...], out: Outcome, event: str) -> Outcome:
        out.event = event
        if out.problem is None and event not in self._param_events and \
                event not in self._named_events:
            if event == "commit":
                out.fast = FAST_LEADER_COMMIT if out.lead else FAST_COMMIT
                out.a, out.b = out.params["index"], out.params["op_term"]
            elif out.walc:
                pass  # lowers the WAL's last OpId: the general path records the top
            elif event == "log_append":
                out.fast = FAST_LOG
                out.a, out.b = out.params["op_term"], out.params["op_index"]
            elif out.walx:
                pass  # moves the WAL otherwise: the general path follows it (log_sync)
            else:
                out.fast = FAST_PLAIN
        self.memo[key] = out
        return out

    # -----------------------------------------------------------------------------------
    # The general path. Drivers may take a shortcut for a memo hit whose ``fast`` is not
    # SLOW and whose term is not below the key's maximum (see ``local.stream_node``): it
    # must do exactly what ``feed_raw`` + ``_after`` do for such an outcome.

    def feed(self, k: KeyState, file: str, line: int, ev: Envelope,
             clean_stops: Container[tuple[str, int]] = ()) -> list[Violation] | None:
        """Replay one event of key ``k``. ``clean_stops``: the (node, incarnation) pairs
        that ended with ``server_stop``. Returns findings, or None when there are none."""
        k.lam = ev.lamport
        return self.feed_raw(k, file, line, ev.inc, ev.event, bytes(ev.args), bytes(ev.state),
                             clean_stops)

    def feed_raw(self, k: KeyState, file: str, line: int, inc: int, event: str,
                 args_b: bytes, st_b: bytes,
                 clean_stops: Container[tuple[str, int]] = ()) -> list[Violation] | None:
        """``feed`` on the envelope's parts."""
        self.events += 1
        found: list[Violation] | None = None
        self.concretize(k)
        if k.state >= 0:  # the end of a stretch of memo hits (see FAST_LOG)
            self.log_tracker.hold(k, self.states.tuples[k.state])
        if k.state < 0 or inc != k.inc:
            prev_clean = False
            first = k.state < 0
            born = first and k.born and event == "startup"
            if born:
                # The node's trace is whole: the tablet must come from its own steps, of
                # which only the last before a crash may be unlogged (a create_tablet in
                # flight). From nothing, across the previous incarnation's end.
                prev_clean = inc <= 1 or (k.node, inc - 1) in clean_stops
                key: tuple[Any, ...] = ("born", prev_clean, event, args_b, st_b)
            elif first:
                key = ("first", event, args_b, st_b)
            else:
                prev_clean = (k.node, k.inc) in clean_stops
                key = ("boundary", k.state, prev_clean, event, args_b, st_b)
            out = self.memo.get(key)
            if out is None:
                self.memo_misses += 1
                frontier = self.crash_frontier
                out = self._memoise(key, frontier.born_startup(prev_clean, event, args_b, st_b)
                                    if born else frontier.boundary(k.state, prev_clean, event,
                                                                   args_b, st_b), event)
            if not first or (born and inc > 1):
                # Boundaries by how many unlogged steps explain them (-1: none does).
                self.frontiers[out.frontier if out.problem is None else -1] += 1
            if inc != k.inc:
                self.log_tracker.flush_leader_commit(k)
                k.app_term = -1
                k.tap_term = -1
            k.inc = inc
            if out.problem is not None:
                found = [key_finding(k, file, line, event, args_b, out.problem,
                                         out.frontier)]
            k.state = out.post
            self.log_tracker.log_sync(k, self.states.tuples[k.state])
            if event == "startup":
                return self._after(k, file, line, event, args_b, out, found)
        pre = k.state
        key = (pre, event, args_b, st_b)
        out = self.memo.get(key)
        if out is None:
            out = self._memoise(key, self._step(pre, event, args_b, st_b), event)
        if out.problem is not None:
            v = key_finding(k, file, line, event, args_b, out.problem, -1)
            found = [v] if found is None else [*found, v]
        k.state = out.post
        found = self._after(k, file, line, event, args_b, out, found)
        if out.fast and event in POS_PARAMS:
            self._to_shape(k, pre, event, args_b, st_b, out)
        return found

    def _after(self, k: KeyState, file: str, line: int, event: str, args_b: bytes,
               out: Outcome, found: list[Violation] | None) -> list[Violation] | None:
        """Per-event checks that are not memoisable (they depend on the key's history),
        in order: the term, the WAL and config the key has seen, the batch a log_append
        adds to the rebuilt log, then what the event's own kind asks (a config, the nodes
        a copy names, votes, identities and leadership, a commit)."""
        out.hits += 1
        if out.obs_term >= 0:
            found = self._term_seen(k, file, line, event, args_b, out.obs_term, found)
        p = out.params
        post = self.states.tuples[k.state]
        self._wal_and_config_seen(k, file, line, event, out, post)
        if event == "log_append" and out.log is not None and out.problem is None:
            # The batch as the step's parameters say (``out.a``/``out.b`` are set only
            # for a fast outcome; a truncation that lowers the WAL's last OpId is SLOW).
            first, prev, terms = out.log
            got = self.log_tracker.log_append_step(k, first, prev, terms, p["op_term"],
                                                   p["op_index"], post.term, file, line,
                                                   k.lam, args_b)
            if got:
                found = got if found is None else [*found, *got]
        self.log_tracker.log_sync(k, post)
        if p and event in self._config_events:
            self._config_event(k, event, args_b, file, line, post.config_index)
        elif event in self._named_events:
            wrong = self._named_event(k, event, args_b, file, line, post.op_src)
            if wrong is not None:
                found = add_finding(found, wrong)
        elif p and event in self._param_events:
            found = self._param_event(k, file, line, event, args_b, out, post, found)
        elif p and event == "commit":
            got = self.log_tracker.commit_step(k, p["index"], p["op_term"], out.lead,
                                               out.obs_term, file, line, k.lam, args_b)
            if got:
                found = got if found is None else [*found, *got]
        remember(k.window, (file, line, event, args_b))
        return found

    @staticmethod
    def _term_seen(k: KeyState, file: str, line: int, event: str, args_b: bytes,
                   obs_term: int, found: list[Violation] | None) -> list[Violation] | None:
        """The term a step reports never goes down on a key (``TermRegression``)."""
        if obs_term < k.max_term:
            found = add_finding(found, key_finding(k, file, line, event, args_b, _Problem(
                "TermRegression", "violation", "TermMonotonic",
                f"term {obs_term} after term {k.max_term} (seen at "
                f"{k.max_term_file}:{k.max_term_line})",
                (), ""), -1))
            # One fault, one finding: the replay goes on from the term the node reports
            # (as it resynchronises a state), so the events of the lower term that follow
            # are not each reported again.
            k.max_term = obs_term
            k.max_term_file, k.max_term_line = file, line
        elif obs_term > k.max_term:
            k.max_term = obs_term
            k.max_term_file, k.max_term_line = file, line
        return found

    def _wal_and_config_seen(self, k: KeyState, file: str, line: int, event: str,
                             out: Outcome, post: Any) -> None:
        """The WAL's last OpId the step reports (the key's highest, its first append of
        a term) and a committed config that moved without a config_commit."""
        if post.wal_last_index or post.wal_last_term:
            self.log_tracker.wal_seen(k, post.wal_last_term, post.wal_last_index,
                                      out.obs_term, file, line, k.lam,
                                      event == "log_append" and bool(out.params))
        if k.cfg_index >= 0 and post.config_index != k.cfg_index and \
                event not in self._config_events:
            # The committed config moved without a config_commit here (one lost at a
            # crash, a resynchronised state): its voters are not known.
            self.log_tracker.flush_leader_commit(k)
            k.cfg_index, k.cfg_voters = -1, ""

    def _param_event(self, k: KeyState, file: str, line: int, event: str, args_b: bytes,
                     out: Outcome, post: Any,
                     found: list[Violation] | None) -> list[Violation] | None:
        """An event whose checks read its parameters: the nodes a vote names, one vote
        per term (``DoubleVote``), the identities the spec's system guards compare
        (``IdentityMismatch``), and the facts of votes, elections and leaders."""
        p = out.params
        if event in ("vote_granted", "vote_denied", "start_election"):
            named = self.interner.name(p["me" if event == "start_election" else "candidate"])
            if named:
                k.named.add(named)
        if event == "vote_granted":
            self.facts.append(Vote(k.tablet, p["t"], k.node, file, line, k.lam,
                                   self.interner.name(p["candidate"]) or ""))
        elif event == "start_election":
            self.facts.append(Elect(k.tablet, out.obs_term, k.inc, k.node, file, line, k.lam))
        if event == "vote_granted" or event == "start_election":
            t = p["t"] if event == "vote_granted" else out.obs_term
            who = p["candidate"] if event == "vote_granted" else p["me"]
            prior = k.votes.get(t)
            if prior is None:
                k.votes[t] = (who, file, line)
            elif prior[0] != who:
                found = add_finding(found, key_finding(k, file, line, event, args_b, _Problem(
                    "DoubleVote", "violation", "VoteOnce",
                    f"vote for {self.interner.name(who)} in term {t}, but this node "
                    f"voted for {self.interner.name(prior[0])} in term {t} at "
                    f"{prior[1]}:{prior[2]}",
                    (), ""), -1))
        wrong = self._identity(k, file, line, event, args_b, p)
        if wrong is not None:
            found = add_finding(found, wrong)
        if event == "become_leader":
            self._became_leader(k, file, line, p["t"], post)
        return found

    def _identity(self, k: KeyState, file: str, line: int, event: str, args_b: bytes,
                  p: dict[str, Any]) -> Violation | None:
        """The spec's identity guard (``is_self``, ``not_self``; become_leader names its
        node) with the key's node as the server that took the step."""
        guard = self.actions[event].identity_guard
        ok = True
        if guard is not None:
            # Identities are interned ints: the "system" has as many servers as UUIDs
            # seen (only len() is read by these two guards).
            ok = bool(guard(_Sized(len(self.interner.names)), k.node_id, **p))
        elif event == "become_leader":
            ok = p["me"] == k.node_id
        if ok:
            return None
        return key_finding(k, file, line, event, args_b, _Problem(
            "IdentityMismatch", "violation", getattr(guard, "__name__", "is_self"),
            f"{event} names {self.interner.name(p.get('me', p.get('candidate', -1)))}"
            f" but was logged by {k.node}", (), ""), -1)

    def _became_leader(self, k: KeyState, file: str, line: int, term: int,
                       post: Any) -> None:
        """The facts of a become_leader: who won the term, in which config (if the trace
        says it: a lost config_commit shows as a state whose config index differs), and
        its log as it won (Leader Completeness: its known runs)."""
        self.facts.append(Leader(k.tablet, term, k.node, file, line))
        known = k.cfg_index >= 0 and post.config_index == k.cfg_index
        self.facts.append(Lead(k.tablet, term, k.cfg_index if known else -1, k.inc, k.node,
                               file, line, k.lam, k.cfg_voters if known else ""))
        lo = k.log_lo if k.log_on else post.wal_last_index + 1
        self.facts.append(LeaderLog(k.tablet, term, lo, post.wal_last_index, k.node, file,
                                    line, k.lam, json.dumps(k.log_runs if k.log_on else [],
                                                            separators=(",", ":"))))

    def _named_event(self, k: KeyState, event: str, args_b: bytes, file: str, line: int,
                     op_src: int) -> Violation | None:
        """A StartTabletCopy's caller, a copy's source: nodes the log checks count on. And
        the copy's source (``copy_begin``; ``op_src``: the copy's source in the spec's
        state, which copy_begin keeps) checked (``_copy_source``)."""
        if event == "copy_begin":
            k.copied = True
        try:
            a = decode_args(event, args_b)
        except ArgsError:
            return None
        for field in ("caller", "source"):
            name = getattr(a, field, None)
            if isinstance(name, str) and name:
                k.named.add(name)
        if event == "copy_begin":
            return self._copy_source(k, a, file, line, args_b, op_src)
        return None

    def _copy_source(self, k: KeyState, a: Any, file: str, line: int, args_b: bytes,
                     op_src: int) -> Violation | None:
        """A copy downloads from the server that asked for it: the spec's ``stc_accept``
        makes its caller the copy's source (``op_src``; ``copy_source_ok`` reads that
        server), so a ``copy_begin`` whose ``source`` is another server is not the copy
        the spec allows (``ArgMismatch`` on ``args.source``). Checked when the caller is a
        server of the tablet's config as this key knows it (a voter of its create_tablet
        or config_commit): a caller that is no server (an operator's tool, which names a
        source of its own; the spec's callers are servers only) or a config this key does
        not know says nothing, nor does a line without ``source`` (optional) or a state
        whose source is unknown (resynchronised). Not memoised: it reads the key's
        config, so it runs in ``_after`` (copy_begin always takes the general path)."""
        if a.source is None or op_src == NO_SERVER:
            return None
        caller = self.interner.name(op_src)
        if caller is None or a.source == caller or f'"{caller}"' not in k.cfg_voters:
            return None
        return key_finding(k, file, line, "copy_begin", args_b, _Problem(
            "ArgMismatch", "violation", "args.source",
            f"copy_begin downloads from {a.source}, but the StartTabletCopy this replica "
            f"accepted came from {caller}, a server of the tablet: the copy's source is "
            "its caller", (caller,), a.source), -1)

    def _config_event(self, k: KeyState, event: str, args_b: bytes, file: str, line: int,
                      config_index: int) -> None:
        """create_tablet / config_commit name the config's voters; a tablet copy adopts a
        config whose voters the trace does not say."""
        self.log_tracker.flush_leader_commit(k)  # with the config it was made in
        if event == "copy_merge_cmeta":
            k.cfg_index, k.cfg_voters = -1, ""
            return
        try:
            a = decode_args(event, args_b)
        except ArgsError:
            return
        voters = sorted(set(getattr(a, "voters", ())))
        k.named.update(voters)
        k.cfg_index = int(getattr(a, "config_index", -1))
        k.cfg_voters = json.dumps(voters, separators=(",", ":"))
        if k.cfg_index != config_index:  # refused or resynchronised: not known
            k.cfg_index, k.cfg_voters = -1, ""
        if event == "config_commit":
            self.facts.append(ConfigCommit(k.tablet, int(getattr(a, "config_index", -1)),
                                           k.node, file, line, k.lam, k.cfg_voters))


    # -----------------------------------------------------------------------------------
    # Memo misses: where the spec is consulted.

    def decode(self, event: str, args_b: bytes, st_b: bytes) -> Decoded | _Problem:
        """An event's args, its spec parameters and the state it reports, or what is
        wrong with it (``BadArgs``, ``BadState``)."""
        try:
            a = decode_args(event, args_b)
        except ArgsError as e:
            return _Problem("BadArgs", "error", e.field, e.message, (), "")
        try:
            st = decode_state(st_b)
        except ArgsError as e:
            return _Problem("BadState", "error", e.field, e.message, (), "")
        if st is None:
            return _Problem("BadState", "error", "state", "a tablet event needs a state", (),
                            "")
        return a, self._params(event, a), self._observed(st)

    def _observed(self, st: Any) -> tuple[Any, ...]:
        from revivify.checker.traces import durable_tuple

        return durable_tuple(st, self.interner)

    def _params(self, event: str, a: Any) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for name in self.actions[event].params:
            value: Any = getattr(a, name, None)
            if value is None and name in TRACE_FILLS:
                continue  # not in the trace: filled from the state (``_step``)
            if name in _ID_PARAMS:
                value = self.interner.id(value)
            elif name == "expected_state":
                value = SB_CODES[value]
            elif name == "reason":
                value = STC_CODES[value]
            elif name == "case":
                value = STARTUP_CODES[value]
            elif name == "has_opid":
                value = int(value)
            params[name] = value
        return params

    def _step(self, sid: int, event: str, args_b: bytes, st_b: bytes) -> Outcome:
        self.memo_misses += 1
        decoded = self.decode(event, args_b, st_b)
        if isinstance(decoded, _Problem):
            return Outcome(sid, decoded, {}, "bad-input", -1, -1)
        a, params, obs = decoded
        action = self.actions[event]
        # The compiled spec reads the state's Scalars tuple (``s``); the interpreted one
        # (a refused step, an action that does not compile) its ServerState.
        fast = self.compiled(event)
        s: Any = self.states.tuples[sid] if fast is not None else self.states[sid]
        for name in action.params:  # spec parameters a trace does not carry
            if name not in params:
                params[name] = TRACE_FILLS[name](s, params)
        obs_term = obs[5] if obs[4] else -1
        if fast is not None:
            args = [params[name] for name in action.params]
            allowed = fast.guard(s, *args)
        else:
            allowed = action.guard(s, **params)
        if not allowed:
            # One fault, one finding: the replay goes on as if the step had been allowed
            # (its effect moves the volatile state: a replica marked READY may start, a
            # leader may commit), then from the durable state the trace reports.
            s = self.states[sid]
            return Outcome(self.intern(resync(obs, _forced(action, s, params))), _Problem(
                "GuardFailed", "violation", self.words.failed(action, s, params),
                f"{event}{self.words.fmt(params)} is not allowed here: "
                + self.words.explain(action, s, params),
                (self.words.describe(s),), describe_tuple(obs, self.interner)),
                params, "guard-failed", obs_term, -1)
        # The compiled effect leaves every map empty (it is canon(effect)) and gives the
        # post-state's Scalars tuple.
        post: Any = fast.effect(s, *args) if fast is not None else \
            canon(action.effect(s, **params))
        branch = self.words.branch(event, s, post, params)
        problem = self._stale_copy(event, s, params) or self._compare(post, obs) or \
            self._arg_checks(a, s, post) or self._leader_batch(event, a, s) or \
            self._invariants(sid, post, fast is not None)
        if fast is not None:
            if problem is not None and problem.kind == "StateMismatch":
                post_id = self.intern(resync(obs, from_scalars(post)))
            else:
                post_id = self.states.intern(post)
        else:
            if problem is not None and problem.kind == "StateMismatch":
                post = resync(obs, post)
            post_id = self.intern(post)
        out = Outcome(post_id, problem, params, branch, obs_term, -1)
        if event == "commit":
            out.lead = bool(s.leader) and s.term == params["op_term"]
        elif event == "log_append":
            out.lead = params["op_term"] == post.term
            out.log = (a.first_index, a.prev_term,
                       None if a.terms is None else tuple((t, c) for t, c in a.terms))
            one = (a.first_index == a.op_index if a.terms is None else
                   len(a.terms) == 1 and a.prev_term == a.op_term)
            out.ext = a.first_index if one else 0
        out.walc = (post.wal_last_term, post.wal_last_index) < (s.wal_last_term,
                                                                s.wal_last_index)
        out.walx = (post.wal, post.wal_last_term, post.wal_last_index) != (
            s.wal, s.wal_last_term, s.wal_last_index)
        return out

    @staticmethod
    def _leader_batch(event: str, a: Any, s: ServerState) -> _Problem | None:
        """A leader creates entries of its own term only (the spec's guard checks the
        batch's last entry; a version-3 batch says every entry's term)."""
        if event != "log_append" or not s.leader or a.terms is None:
            return None
        other = sorted({t for t, _ in a.terms if t != s.term})
        if not other:
            return None
        return _Problem("ArgMismatch", "violation", "args.terms",
                        f"the leader of term {s.term} appended entries of term(s) {other}: "
                        "a leader only creates entries of its own term", (str(s.term),),
                        str(other))

    @staticmethod
    def _stale_copy(event: str, s: ServerState, params: dict[str, Any]) -> _Problem | None:
        """A copy merges the cmeta of a source whose term is below the replica's retained
        last logged term (Kudu refuses such a copy: StartTabletCopy's STALE_TERM, checked
        against the caller's term, and the source's term must not have gone below it)."""
        if event != "copy_merge_cmeta":
            return None
        last_term = int(last_logged(s)[0])
        if params["remote_term"] >= last_term:
            return None
        return _Problem("StaleCopySource", "violation", "remote_term >= last logged term",
                        f"copy_merge_cmeta from a source in term {params['remote_term']}, "
                        f"below this replica's last logged term {last_term} (the "
                        "tombstone's retained last OpId): the copy must be refused",
                        (f"remote_term >= {last_term}",), str(params["remote_term"]))

    def _compare(self, post: ServerState, obs: tuple[Any, ...]) -> _Problem | None:
        expected = spec_tuple(post)
        if expected == obs:
            return None
        diffs = [f"{f}: spec {self.words.val(f, e)} vs trace {self.words.val(f, o)}"
                 for f, e, o in zip(TRACED_FIELDS, expected, obs, strict=True) if e != o]
        return _Problem("StateMismatch", "violation", "effect",
                        "reported state differs from the spec's: " + "; ".join(diffs),
                        (self.words.describe(post),), describe_tuple(obs, self.interner))

    def _arg_checks(self, a: Any, pre: ServerState, post: ServerState) -> _Problem | None:
        if isinstance(a, MergeArgs):
            local = cmeta_tuple(a.local, self.interner)
            want_local = spec_tuple(pre)[4:8]
            result = cmeta_tuple(a.result, self.interner)
            want_result = spec_tuple(post)[4:8]
            remote: CmetaState = a.remote
            if local != want_local:
                return self.words.arg_problem("args.local", local, want_local)
            if (remote.term, remote.config_index) != (a.remote_term, a.remote_config_index):
                return _Problem("ArgMismatch", "violation", "args.remote",
                                "args.remote disagrees with remote_term/remote_config_index",
                                (), "")
            if result != want_result:
                return self.words.arg_problem("args.result", result, want_result)
        if isinstance(a, StcRejectArgs):
            if a.answer != a.reason:
                return _Problem("ArgMismatch", "violation", "args.answer",
                                f"answer {a.answer} but reason {a.reason}", (), "")
        elif isinstance(a, StcArgs) and a.answer != "OK":
            return _Problem("ArgMismatch", "violation", "args.answer",
                            f"stc_accept answered {a.answer}", (), "")
        return None

    def compiled(self, event: str) -> CompiledAction | None:
        """The action ``event`` compiled (``checker.compiled``), at its first use; None
        where it does not compile (the interpreted one is used)."""
        if event not in self._compiled:
            self._compiled[event] = cached_action(self.actions[event], scalars=True)
        return self._compiled[event]

    def _broken(self, s: ServerState) -> list[str]:
        # The state invariants are a function of the state alone: evaluated once per
        # distinct state (many steps lead to the same one).
        inv = self.state_bad.get(s)
        if inv is None:
            inv = self.state_bad[s] = check_state(self.invariants, (s,))
        return inv

    def _invariants(self, pre_id: int, post: Any, scalars: bool) -> _Problem | None:
        """The local state invariants the step breaks and the step properties it fails.
        ``post``: the post-state's Scalars tuple (``scalars``) or its ServerState. The
        compiled conjunctions decide the common case (everything holds) in one call each;
        the interpreted spec names what fails."""
        pre_t = self.states.tuples[pre_id]
        post_t = post if scalars else to_scalars(post)
        inv_ok = self._inv_ok is not None and self._inv_ok(post_t)
        step_ok = self._step_ok is not None and self._step_ok(pre_t, post_t)
        if inv_ok and step_ok:
            return None
        pre = self.states[pre_id]
        post_s = from_scalars(post_t) if scalars else post
        # One fault, one finding: a state invariant the step starts from broken (the
        # forced effect of a refused step, e.g. a config change accepted with a stale CAS
        # and pending from then on) was the refused step's fault, already reported.
        inv = [] if inv_ok else self._broken(post_s)
        if inv:
            before = self._broken(pre)
            inv = [name for name in inv if name not in before]
        steps = [] if step_ok else check_step(self.step_props, pre, post_s)
        bad = steps + inv
        if not bad:
            return None
        return _Problem("InvariantViolated", "violation", ",".join(bad),
                        "the spec step breaks " + ", ".join(bad) + " (a spec bug?)",
                        (self.words.describe(post_s),), "")


def check(key: tuple[str, str], events: Iterable[tuple[str, int, Envelope]],
          clean_stops: frozenset[tuple[str, int]] = frozenset(),
          replayer: Replayer | None = None) -> list[Violation]:
    """The pure core as one function: one key's events, in order -> its findings."""
    r = replayer or Replayer()
    k = r.new_key(*key)
    out: list[Violation] = []
    for file, line, ev in events:
        found = r.feed(k, file, line, ev, clean_stops)
        if found:
            out.extend(found)
    r.finish_key(k)
    return out


# The replay's parts, importable from here as before (drivers, reports, tests).
__all__ = [
    "DEFAULT_MAX_FRONTIER", "FAST_COMMIT", "FAST_LEADER_COMMIT", "FAST_LOG", "FAST_PLAIN",
    "LOCAL_INVARIANTS", "LOCAL_STEP_PROPERTIES", "RESET_EVERY", "SLOW", "WINDOW",
    "CrashFrontier", "Explainer", "FactSink", "GlobalFact", "KeyState", "LogTracker", "NodeState",
    "Outcome", "Replayer", "StateTable", "Violation", "canon", "check", "resync",
]
