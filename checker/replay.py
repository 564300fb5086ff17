"""The pure core: replay one key's events, key = (node UUID, tablet), against the spec.

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

import itertools
import json
from collections import Counter, deque
from collections.abc import Container, Iterable, Iterator
from typing import Any, Final, NamedTuple, Protocol

import attrs

from revivify.checker.compiled import (
    CompiledAction,
    cached_action,
    from_scalars,
    invariants_hold,
    steps_hold,
    to_scalars,
)
from revivify.checker.logshape import (
    APPEND_HEAD,
    APPEND_MID,
    COMMIT_HEAD,
    POS_PARAMS,
    ShapeOutcome,
    floor_of,
    shift,
    shift_exact,
    split_append,
    split_commit,
    split_state,
)
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
    state_from_tuple,
)
from revivify.spec.actions import (
    FAULT_ACTIONS,
    NO_PENDING_CONFIG,
    SPEC_ONLY_PARAMS,
    TRACE_FILLS,
    UNTRACED_MAPS,
    Action,
    as_reported,
    last_logged,
    pending_config_held,
    startup_case,
    stc_failures,
)
from revivify.spec.invariants import INVARIANTS, STEP_PROPERTIES, check_state, check_step
from revivify.spec.logic import empty_map
from revivify.spec.model import (
    BLOCKS_NAMES,
    DAMAGE_KINDS,
    DOES_NOT_EXIST,
    MAP_FIELDS,
    NO_SERVER,
    NO_VOTE,
    OP_NAMES,
    SB_NAMES,
    STARTUP_NAMES,
    STARTUP_NOTHING,
    STC_NAMES,
    WAL_IN_PLACE,
    WAL_NAMES,
    ServerState,
)
from revivify.spec.system import Spec, default_spec

# The writer loses at most the event of the step in flight (traces/README.md): one unlogged
# step per key at a crash.
DEFAULT_MAX_FRONTIER: Final = 1
WINDOW: Final = 6
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

# Actions whose effect is the identity: never useful as an unlogged frontier step.
_NO_EFFECT: Final = frozenset({"commit", "stc_reject"})
# Not process steps before a crash: the crash itself, startup, and the disk faults (damage
# is tried at every boundary, see the module docstring; a wipe makes a new key).
_NOT_STEPS: Final = frozenset({"crash", "startup", *FAULT_ACTIONS})
_DAMAGE_KINDS: Final = DAMAGE_KINDS

_TERM_PARAMS: Final = frozenset({"t", "caller_term", "remote_term", "remote_last_term",
                                 "op_term", "cand_last_term", "opid_term"})
_INDEX_PARAMS: Final = frozenset({"config_index", "remote_config_index", "remote_last_index",
                                  "op_index", "index", "cand_last_index", "opid_index",
                                  "first_index"})
_ID_PARAMS: Final = frozenset({"candidate", "me", "caller", "source"})


@attrs.frozen
class Violation:
    """One finding. ``subject`` identifies it across engines: ``file:line`` for findings
    about one line, ``tablet=.. term=..`` and the like for global ones."""

    kind: str
    severity: str  # "violation" | "error" | "warning"
    file: str
    line: int
    subject: str
    message: str
    node: str = ""
    tablet: str = ""
    event: str = ""
    failed: str = ""
    expected: tuple[str, ...] = ()
    observed: str = ""
    last_matched: str = ""
    context: tuple[str, ...] = ()
    frontier: int = -1
    witnesses: tuple[str, ...] = ()
    # The kinds of the other findings the same fault caused (same line; see
    # ``Report.add``), folded into this one.
    also: tuple[str, ...] = ()

    def identity(self) -> tuple[str, str]:
        return (self.kind, self.subject)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False) | {
            "expected": list(self.expected), "context": list(self.context),
            "witnesses": list(self.witnesses), "also": list(self.also)}


class _Problem(NamedTuple):
    kind: str
    severity: str
    failed: str
    message: str
    expected: tuple[str, ...]
    observed: str


class Outcome:
    """The memoised result of one step (or one incarnation boundary).

    ``fast`` tells a driver what the step needs beyond the memo hit: ``FAST_PLAIN`` only
    the per-key term check and bookkeeping, ``FAST_COMMIT`` that plus extending the key's
    commit run (``a`` = index, ``b`` = term), ``SLOW`` the general ``Replayer.feed_raw``
    (a problem, or a vote/identity/leader check). ``hits`` counts the events replayed
    with this outcome (their coverage; ``Replayer.coverage`` sums them)."""

    __slots__ = ("a", "b", "branch", "event", "ext", "fast", "frontier", "hits", "lead",
                 "log", "obs_term", "params", "post", "problem", "walc", "walx")

    def __init__(self, post: int, problem: _Problem | None, params: dict[str, Any],
                 branch: str, obs_term: int, frontier: int) -> None:
        self.post = post
        self.problem = problem
        self.params = params
        self.branch = branch
        self.obs_term = obs_term
        self.frontier = frontier
        self.event = ""
        self.hits = 0
        self.fast = SLOW
        self.a = self.b = 0
        # A commit by the leader of its own term (``FAST_LEADER_COMMIT``), a log_append of
        # the key's current term (``FAST_APPEND``); a step that lowered the WAL's last
        # OpId in Raft's order (kept SLOW).
        self.lead = False
        self.walc = False
        # The step moves the WAL (its location or last OpId: the rebuilt log follows it);
        # a log_append's (first_index, prev_term or None, terms or None).
        self.walx = False
        self.log: tuple[int, int | None, tuple[tuple[int, int], ...] | None] | None = None
        # A log_append whose batch is entries of op_term only, after one of op_term (if it
        # says): its first index (drivers extend the log's last run inline), else 0.
        self.ext = 0


SLOW: Final = 0
FAST_PLAIN: Final = 1
FAST_COMMIT: Final = 2
# A commit by a leader of an entry of its own term: the commit run, plus the key's
# highest such commit per term (``KeyState.lcommits``; CommitWithoutMajority).
FAST_LEADER_COMMIT: Final = 3
# A log_append (``a`` = op_term, ``b`` = op_index, ``log`` its batch): the rebuilt log
# (``Replayer.log_append_step``) and, for an entry of the key's current term (``lead``),
# the key's first append of the term (``KeyState.appends``; CausalityViolation). The
# highest WAL OpId (``KeyState.h_term``/``h_index``) needs nothing on a memo hit: a fast
# step never lowers it (one that does is SLOW), so the general path records it from the
# state it starts from, and ``finish_key`` from the last.
FAST_LOG: Final = 4


@attrs.define(slots=True)
class KeyState:
    """One key's replay state: small, and all that survives between events."""

    node: str
    tablet: str
    node_id: int
    state: int = -1
    inc: int = -1
    # The last events (file, line, event, args), the newest last: the context of a finding.
    window: deque[tuple[str, int, str, bytes]] = attrs.Factory(lambda: deque(maxlen=WINDOW))
    max_term: int = -1
    max_term_at: str = ""
    votes: dict[int, tuple[int, str]] = attrs.Factory(dict)
    # The open run of commits: indices c_lo..c_hi, each *named* by a commit event of this
    # key with term c_term (a batch commit names only its last index: a commit that skips
    # indices breaks the run); the first logged at c_file:c_line. Flushed as one fact when
    # the run breaks (global_checks).
    c_lo: int = 0
    c_hi: int = -1
    c_term: int | None = None
    c_file: str = ""
    c_line: int = 0
    # The global checks' per-key facts (flushed by ``finish_key``): the Lamport clock of
    # the event being fed; the config known here (index and its voters as sorted JSON;
    # -1 when unknown: before create_tablet or config_commit, after a tablet copy); the
    # highest WAL last OpId any reported state showed (h_term, h_index); per term, the
    # highest commit of an entry of that term while leading it (index, lamport, file,
    # line, config, voters), the latest one pending in ``lc_pending`` (index, term,
    # lamport, file, line) until the term, the config or the incarnation changes; per
    # term, the first log_append of an entry of the key's current term (lamport, file,
    # line), ``app_term`` the term already recorded in this incarnation.
    lam: int = 0
    cfg_index: int = -1
    cfg_voters: str = ""
    h_term: int = 0
    h_index: int = 0
    lcommits: dict[int, tuple[int, int, str, int, int, str]] = attrs.Factory(dict)
    lc_pending: tuple[int, int, int, str, int] | None = None
    appends: dict[int, tuple[int, str, int]] = attrs.Factory(dict)
    app_term: int = -1
    # The entry term whose lowest-clocked append this incarnation has recorded
    # (``tappends``; clocks only grow within an incarnation), for the drivers' shortcut.
    tap_term: int = -1
    # The node's trace starts at its format (server_format in incarnation 1): every
    # tablet it holds must have been created or copied in the trace (``PhantomTablet``).
    born: bool = False
    # The rebuilt log (``Replayer.log_*``; traces/README.md "Version 3"): ``log_on`` while
    # a WAL is in place; indices ``log_lo..log_hi`` are known, as runs ``[start, term]``
    # (starts ascending, the first at ``log_lo``); indices below ``log_lo`` are unknown (a
    # copied WAL, a batch without terms, steps lost at a crash). ``commit_hi``: the highest
    # index this key committed in this log's lifetime (reset when the WAL leaves).
    log_on: bool = False
    log_lo: int = 1
    log_hi: int = 0
    log_runs: list[list[int]] = attrs.Factory(list)
    commit_hi: int = 0
    # Committed entries not yet reported: ``c_done + 1..commit_hi``, committed while the
    # key was in term ``ctx``, the first of them at ``cr_file:cr_line`` (flushed as
    # "commit" and "crun" facts before the log below ``commit_hi`` can change).
    c_done: int = 0
    ctx: int = -1
    cr_file: str = ""
    cr_line: int = 0
    # Facts for the log checks, each small: the (term, start, previous term) of every run
    # of a term whose start the key saw; per entry term its lowest-clocked append
    # (lamport, file, line); per term of the key its highest commit while not leading
    # (index, lamport, file, line); the UUIDs its events name (configs, candidates, copy
    # callers and sources).
    starts: set[tuple[int, int, int]] = attrs.Factory(set)
    tappends: dict[int, tuple[int, str, int]] = attrs.Factory(dict)
    fcommits: dict[int, tuple[int, int, str, int]] = attrs.Factory(dict)
    named: set[str] = attrs.Factory(set)
    # The key began a tablet copy: its replica may start with a commit index (the copied
    # data's) that no commit of its own logged.
    copied: bool = False
    # Shape mode (checker/logshape.py): ``state`` is then a shape, and ``pos`` the WAL's
    # last index it is relative to; -1: ``state`` is a concrete state
    # (``Replayer.concretize``).
    pos: int = -1


@attrs.define(slots=True)
class NodeState:
    """What a driver keeps per node across its files: whether its trace starts at its
    format (``born``) and the last incarnation read (``MissingIncarnation``)."""

    node: str
    born: bool = False
    inc: int = 0


class StateTable:
    """The interned states of a replay: each canonical state (every map empty) as its
    ``Scalars`` tuple (what the compiled spec reads and the memo keys on, by id), its
    ``ServerState`` made on demand (for the interpreted spec: refused steps, boundaries,
    explanations)."""

    __slots__ = ("ids", "objs", "tuples")

    def __init__(self) -> None:
        self.tuples: list[Any] = []
        self.ids: dict[Any, int] = {}
        self.objs: list[ServerState | None] = []

    def __len__(self) -> int:
        return len(self.tuples)

    def __getitem__(self, sid: int) -> ServerState:
        obj = self.objs[sid]
        if obj is None:
            obj = self.objs[sid] = from_scalars(self.tuples[sid])
        return obj

    def intern(self, t: Any, obj: ServerState | None = None) -> int:
        got = self.ids.get(t)
        if got is None:
            got = self.ids[t] = len(self.tuples)
            self.tuples.append(t)
            self.objs.append(obj)
        return got


class _Sized:
    """Stands in for the system tuple where a guard only asks how many servers exist."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def canon(s: ServerState) -> ServerState:
    """Clear the ghost maps and the logs no trace carries (see the module docstring)."""
    if any(len(getattr(s, f)) for f in UNTRACED_MAPS):
        return attrs.evolve(s, **_EMPTY_MAPS)
    return s


_EMPTY_MAPS = {f: empty_map(MAP_FIELDS[f]) for f in UNTRACED_MAPS}


def resync(obs: tuple[Any, ...], base: ServerState) -> ServerState:
    """``base`` (the spec's state) with the durable state a trace reports in place of its
    own, after a violation: the replay goes on from what the server says it has. A
    pending config change whose entry that WAL cannot hold (a truncation or a move the
    spec did not expect) is dropped with it: no later config_commit is refused for it."""
    s = state_from_tuple(obs, base)
    if not pending_config_held(s):
        s = attrs.evolve(s, **NO_PENDING_CONFIG)
    return canon(s)


def _forced(action: Action, s: ServerState, params: dict[str, Any]) -> ServerState:
    """The step's effect on a state its guard refuses (the pre-state if the effect cannot
    be computed there)."""
    try:
        return action.effect(s, **params)
    except (KeyError, IndexError, TypeError, ValueError):
        return s


class FactSink(Protocol):
    """Where the facts for the global checks go (``global_checks.GlobalChecks`` locally,
    rows of the facts DataFrame in Spark)."""

    def leader(self, tablet: str, term: int, node: str, file: str, line: int) -> None: ...

    def commit_run(self, tablet: str, lo: int, hi: int, term: int, node: str, file: str,
                   line: int) -> None: ...

    def server_format(self, node: str, file: str, line: int) -> None: ...

    def gfact(self, kind: str, tablet: str, a: int, b: int, c: int, node: str, file: str,
              line: int, lamport: int, payload: str) -> None:
        """A fact of the majority and causality checks (``global_checks.GFACT_KINDS``)."""

    def incarnation(self, node: str, inc: int, first: int, last: int, clean: bool) -> None:
        """A trace file read: its node, incarnation, first and last Lamport clocks, and
        whether it ended with ``server_stop``."""


# A fact: (kind, tablet, a, b, c, node, file, line, lamport, payload):
# ("leader", tablet, term, 0, 0, node, file, line, ...) or
# ("commit", tablet, lo, hi, term, node, file, line, ...): the key committed each index
# lo..hi with that term, the first of them at file:line; or one of
# ``global_checks.GFACT_KINDS`` (see there).
Fact = tuple[str, str, int, int, int, str, str, int, int, str]


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
        self.compiled: dict[str, CompiledAction | None] = {}
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
        self.facts: list[Fact] = []
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
        self._flush_run(k)
        if k.state >= 0:
            self._hold(k, k.state)
        self.flush_leader_commit(k)
        tablet, node = k.tablet, k.node
        facts = self.facts
        if k.h_term or k.h_index:
            facts.append(("hold", tablet, k.h_term, k.h_index, 0, node, "", 0, 0, ""))
        for t, (index, lam, f, ln, cfg, voters) in k.lcommits.items():
            facts.append(("lcommit", tablet, t, index, cfg, node, f, ln, lam, voters))
        for t, (lam, f, ln) in k.appends.items():
            facts.append(("append", tablet, t, 0, 0, node, f, ln, lam, ""))
        self._flush_committed(k)
        for t, (lam, f, ln) in k.tappends.items():
            facts.append(("tappend", tablet, t, 0, 0, node, f, ln, lam, ""))
        for t, (index, lam, f, ln) in k.fcommits.items():
            facts.append(("fcommit", tablet, t, index, 0, node, f, ln, lam, ""))
        if k.state >= 0:
            facts.append(("named", tablet, int(k.copied), 0, 0, node, "", 0, 0,
                          "\n".join(sorted(k.named | {node}))))
        k.h_term = k.h_index = 0
        k.lcommits = {}
        k.appends = {}
        k.app_term = -1
        k.tap_term = -1
        k.tappends = {}
        k.fcommits = {}
        k.named = set()
        k.copied = False

    def _flush_run(self, k: KeyState) -> None:
        if k.c_term is not None:
            self.facts.append(("commit", k.tablet, k.c_lo, k.c_hi, k.c_term, k.node,
                               k.c_file, k.c_line, 0, ""))
        k.c_hi = k.c_lo - 1
        k.c_term = None

    def leader_commit(self, k: KeyState, index: int, term: int, file: str,
                      line: int, lamport: int) -> None:
        """A commit of an entry of the leader's own term (drivers inline this): it is
        pending until another term's commit, a config change, a new incarnation or the
        end of the key flushes it (a leader's commits only grow within its term)."""
        p = k.lc_pending
        if p is not None and p[1] != term:
            self.flush_leader_commit(k)
        k.lc_pending = (index, term, lamport, file, line)

    def flush_leader_commit(self, k: KeyState) -> None:
        p = k.lc_pending
        if p is None:
            return
        k.lc_pending = None
        index, term, lamport, file, line = p
        got = k.lcommits.get(term)
        if got is None or index > got[0]:
            k.lcommits[term] = (index, lamport, file, line, k.cfg_index, k.cfg_voters)

    def first_append(self, k: KeyState, term: int, file: str, line: int,
                     lamport: int) -> None:
        """A log_append of an entry of the key's current term ``term``, the first of the
        term in this incarnation (clocks restart with an incarnation: keep the lowest)."""
        k.app_term = term
        got = k.appends.get(term)
        if got is None or lamport < got[0]:
            k.appends[term] = (lamport, file, line)

    def _hold(self, k: KeyState, sid: int) -> None:
        s = self.states.tuples[sid]
        if s.wal_last_term > k.h_term or (s.wal_last_term == k.h_term
                                          and s.wal_last_index > k.h_index):
            k.h_term = s.wal_last_term
            k.h_index = s.wal_last_index

    def wal_seen(self, k: KeyState, term: int, index: int, obs_term: int, file: str,
                 line: int, lamport: int, append: bool) -> None:
        """A reported state whose WAL ends at (term, index); ``append``: a log_append
        (drivers inline this for a memo hit)."""
        if term > k.h_term or (term == k.h_term and index > k.h_index):
            k.h_term = term
            k.h_index = index
        if append and term == obs_term and term != k.app_term:
            self.first_append(k, term, file, line, lamport)

    def commit_break(self, k: KeyState, index: int, term: int, file: str,
                     line: int) -> None:
        """A commit that does not extend the key's run (drivers extend it inline when
        ``index == k.c_hi + 1 and term == k.c_term``): flush the run, open a new one."""
        self._flush_run(k)
        k.c_lo = k.c_hi = index
        k.c_term = term
        k.c_file = file
        k.c_line = line

    # -----------------------------------------------------------------------------------
    # The rebuilt log (traces/README.md "Version 3"). Per key, the log as index -> term,
    # kept as runs over the known indices ``log_lo..log_hi``; indices below ``log_lo`` are
    # unknown. A version-3 log_append says every entry's term (``terms``) and the term
    # before the batch (``prev_term``); a version-2 one only its last entry's. Anything
    # else that moves the WAL (create, a copied WAL, deletion, a crash's lost steps, a
    # resynchronised state) is followed from the state the step reports: the last OpId is
    # known, the rest unknown (``log_sync``). The checks read the log at four moments: an
    # append (its prev_term, the entries it removes), a commit (the committed entries and
    # their terms), an election (the leader's log), and the end (facts for global_checks).

    def log_term(self, k: KeyState, index: int) -> int | None:
        """The term of the entry at ``index`` in the key's rebuilt log, if known."""
        if index == 0:
            return 0
        if not k.log_on or index < k.log_lo or index > k.log_hi:
            return None
        for start, term in reversed(k.log_runs):
            if start <= index:
                return term
        return None

    def log_sync(self, k: KeyState, s: Any) -> None:
        """Follow a step that moved the WAL without saying its entries: keep the rebuilt
        log when it still ends at the state's last OpId, else know only that OpId. A WAL
        that left (deletion) ends the log's lifetime (its commits with it)."""
        if s.wal not in WAL_IN_PLACE:
            if k.log_on or k.commit_hi:
                self._flush_committed(k)
                k.log_on = False
                k.log_lo, k.log_hi, k.log_runs = 1, 0, []
                k.commit_hi = k.c_done = 0
            return
        if k.log_on and k.log_hi == s.wal_last_index and \
                self.log_term(k, k.log_hi) == s.wal_last_term:
            return
        self._flush_committed(k)
        if not k.log_on:
            # A new log (created, or copied): nothing committed in it yet.
            k.commit_hi = k.c_done = 0
        k.log_on = True
        k.log_hi = s.wal_last_index
        if k.log_hi == 0:
            k.log_lo, k.log_runs = 1, []
        else:
            k.log_lo, k.log_runs = k.log_hi, [[k.log_hi, s.wal_last_term]]

    def log_append_step(self, k: KeyState, first: int, prev: int | None,
                        terms: tuple[tuple[int, int], ...] | None, op_term: int,
                        op_index: int, node_term: int, file: str, line: int, lamport: int,
                        args_b: bytes) -> list[Violation] | None:
        """A log_append the spec accepted (the batch ``first..op_index``, its ``prev_term``
        and ``terms`` if it says them, by a node in term ``node_term`` after the step):
        check its prev_term against the rebuilt log, find the entries it removes, apply
        the batch, note its runs' starts and terms."""
        assert first >= 1 and op_index >= first, (first, op_index)
        found: list[Violation] | None = None
        runs = k.log_runs
        if not k.log_on:  # a WAL the model has not seen (cannot happen after log_sync)
            k.log_on, k.log_lo, k.log_hi = True, first, first - 1
            runs.clear()
        if first == k.log_hi + 1:  # the common case: a pure append
            known_prev: int | None = runs[-1][1] if runs else 0 if first == 1 else None
        else:
            known_prev = self.log_term(k, first - 1)
        if prev is not None and known_prev is not None and known_prev != prev:
            found = [self._violation(k, file, line, "log_append", args_b, _Problem(
                "ArgMismatch", "violation", "args.prev_term",
                f"prev_term {prev}, but this node's log holds term {known_prev} at index "
                f"{first - 1}", (str(known_prev),), str(prev)), -1)]
        pred = prev if prev is not None else known_prev
        if k.commit_hi > k.c_done and (first <= k.log_hi or (terms is None and
                                                             first < op_index)):
            self._flush_committed(k)  # before the runs below commit_hi change
        if first <= k.log_hi:
            found = self._truncation(k, first, terms, op_term, op_index, node_term, file,
                                     line, args_b, found)
            # Cut the log before ``first``.
            if first <= k.log_lo:
                runs.clear()
                k.log_lo = first
            else:
                while runs and runs[-1][0] >= first:
                    runs.pop()
        tappends = k.tappends
        if terms is None and first < op_index:
            # Version 2: only the last entry's term is known.
            runs.clear()
            k.log_lo, k.log_hi = op_index, op_index
            runs.append([op_index, op_term])
            got = tappends.get(op_term)
            if got is None or lamport < got[0]:
                tappends[op_term] = (lamport, file, line)
            k.tap_term = op_term
            return found
        pos = first
        for term, count in terms if terms is not None else ((op_term, 1),):
            if pred != term and pred is not None and (term, pos, pred) not in k.starts:
                k.starts.add((term, pos, pred))
                self.facts.append(("start", k.tablet, term, pos, pred, k.node, file, line,
                                   lamport, ""))
            if not (runs and runs[-1][1] == term):
                runs.append([pos, term])
            got = tappends.get(term)
            if got is None or lamport < got[0]:
                tappends[term] = (lamport, file, line)
            pos += count
            pred = term
        k.log_hi = op_index
        k.tap_term = op_term
        return found

    def _truncation(self, k: KeyState, first: int, terms: tuple[tuple[int, int], ...] | None,
                    op_term: int, op_index: int, node_term: int, file: str, line: int,
                    args_b: bytes, found: list[Violation] | None) -> list[Violation] | None:
        """The entries a batch starting at ``first <= log_hi`` removes or replaces. Each
        known one goes out as a "trunc" fact (global_checks compares it with what was
        committed); removing an entry this key committed whose term the log no longer
        knows is reported here (``CommittedEntryTruncated``)."""
        hi = k.log_hi
        # The batch's known terms over first..op_index, as (lo, hi, term) segments.
        new: list[tuple[int, int, int]] = []
        if terms is not None:
            pos = first
            for term, count in terms:
                new.append((pos, pos + count - 1, term))
                pos += count
        else:
            new.append((op_index, op_index, op_term))
        old = self._segments(k, max(first, k.log_lo), hi)
        for lo, top, term in old:
            gone: list[tuple[int, int]] = []
            if top > op_index:
                gone.append((max(lo, op_index + 1), top))
            for nlo, nhi, nterm in new:
                a, b = max(lo, nlo), min(top, nhi)
                if a <= b and nterm != term:
                    gone.append((a, b))
            for a, b in gone:
                self.facts.append(("trunc", k.tablet, a, b, term, k.node, file, line,
                                   node_term, ""))
        top_unknown = min(k.commit_hi, hi, k.log_lo - 1)
        if op_index + 1 <= top_unknown:
            found = self._add(found, self._violation(k, file, line, "log_append", args_b,
                                                     _Problem(
                "CommittedEntryTruncated", "violation", "StateMachineSafety",
                f"the batch {first}..{op_index} removes entries {op_index + 1}.."
                f"{top_unknown}, which this node committed (up to index {k.commit_hi})",
                (), ""), -1))
        return found

    def _segments(self, k: KeyState, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The rebuilt log's known entries in lo..hi as (lo, hi, term) segments."""
        out: list[tuple[int, int, int]] = []
        if not k.log_on:
            return out
        lo, hi = max(lo, k.log_lo), min(hi, k.log_hi)
        runs = k.log_runs
        for n, (start, term) in enumerate(runs):
            end = runs[n + 1][0] - 1 if n + 1 < len(runs) else k.log_hi
            a, b = max(start, lo), min(end, hi)
            if a <= b:
                out.append((a, b, term))
        return out

    def commit_step(self, k: KeyState, index: int, term: int, lead: bool, tx: int,
                    file: str, line: int, lamport: int, args_b: bytes) -> list[
                        Violation] | None:
        """A commit of ``index`` (naming ``term``) by the key, in its term ``tx``: what
        the rebuilt log says (``CommitNotInLog``; the entries it commits, reported by
        ``_flush_committed``), the key's run of named commits where the log does not know
        the entry, its leader commits and its highest commit per term while following."""
        runs = k.log_runs
        hi = k.log_hi
        if runs:
            last = runs[-1]
            have = last[1] if last[0] <= index <= hi else self.log_term(k, index)
        else:
            have = None
        if have != term:  # the log does not say it (or says otherwise): name it
            if index == k.c_hi + 1 and term == k.c_term:
                k.c_hi = index
            else:
                self.commit_break(k, index, term, file, line)
        if lead:  # = leader_commit
            lp = k.lc_pending
            if lp is not None and lp[1] != term:
                self.flush_leader_commit(k)
            k.lc_pending = (index, term, lamport, file, line)
        else:
            got = k.fcommits.get(tx)
            if got is None or index > got[0]:
                k.fcommits[tx] = (index, lamport, file, line)
        if runs and index > k.commit_hi:
            if tx != k.ctx:
                self._flush_committed(k)
                k.ctx = tx
            if k.commit_hi == k.c_done:
                k.cr_file, k.cr_line = file, line
            k.commit_hi = index if index <= hi else hi
        if have is None or have == term:
            return None
        return [self._violation(k, file, line, "commit", args_b, _Problem(
            "CommitNotInLog", "violation", "StateMachineSafety",
            f"commit of index {index} naming term {term}, but this node's log holds "
            f"term {have} at index {index}", (str(have),), str(term)), -1)]

    def _flush_committed(self, k: KeyState) -> None:
        """Report the committed entries ``c_done + 1..commit_hi`` the rebuilt log knows,
        as runs of one term: "commit" facts (CommitTermMismatch, every index) and "crun"
        facts with the term the key committed them in (the log checks)."""
        if k.commit_hi > k.c_done:
            for a, b, t in self._segments(k, k.c_done + 1, k.commit_hi):
                self.facts.append(("commit", k.tablet, a, b, t, k.node, k.cr_file,
                                   k.cr_line, 0, ""))
                self.facts.append(("crun", k.tablet, a, b, t, k.node, k.cr_file,
                                   k.cr_line, k.ctx, ""))
        k.c_done = k.commit_hi

    def fast_log(self, k: KeyState, out: Outcome, file: str, line: int, lamport: int,
                 args_b: bytes) -> list[Violation] | None:
        """A memo hit of a log_append (drivers call it with ``k.state`` already the step's
        post state; = ``_after`` for such a step)."""
        if out.lead and out.a != k.app_term:
            self.first_append(k, out.a, file, line, lamport)
        assert out.log is not None
        first, prev, terms = out.log
        return self.log_append_step(k, first, prev, terms, out.a, out.b,
                                    self.states.tuples[out.post].term, file, line, lamport,
                                    args_b)

    def fast_commit(self, k: KeyState, out: Outcome, file: str, line: int, lamport: int,
                    args_b: bytes) -> list[Violation] | None:
        """A memo hit of a commit (as ``fast_log``)."""
        return self.commit_step(k, out.a, out.b, out.lead, out.obs_term, file, line,
                                lamport, args_b)

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
        # = logshape.split_append / split_commit and digits, inlined (the hot path).
        if event == "log_append":
            p = args_b.split(b",", 3)
            if len(p) != 4:
                return False
            a, b = p[0], p[2]
            if a[:15] != APPEND_HEAD or b[:11] != APPEND_MID:
                return False
            a, b = a[15:], b[11:]
            if not (a.isdigit() and b.isdigit()) or (a[0] == 48 and len(a) > 1) or \
                    (b[0] == 48 and len(b) > 1):
                return False
            first = int(a)
            index = int(b)
            so = self.shape_appends.get((k.state, first - pos, index - pos, p[1], p[3]))
        elif event == "commit":
            p = args_b.split(b",", 1)
            a = p[0]
            if len(p) != 2 or a[:9] != COMMIT_HEAD:
                return False
            a = a[9:]
            if not a.isdigit() or (a[0] == 48 and len(a) > 1):
                return False
            index = int(a)
            so = self.shape_commits.get((k.state, index - pos, p[1]))
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
            k.max_term_at = f"{file}:{line}"
        k.state = so.post
        k.pos = pos + so.dpos
        found: list[Violation] | None
        term = so.a
        if event == "log_append":  # = fast_log
            runs = k.log_runs
            if so.one and first == k.log_hi + 1 and term == k.tap_term and runs and \
                    runs[-1][1] == term and (not so.lead or term == k.app_term):
                k.log_hi = index  # it extends the log's last run: nothing else
                found = None
            else:
                if so.lead and term != k.app_term:
                    self.first_append(k, term, file, line, lamport)
                found = self.log_append_step(k, first, so.prev, so.terms, term, index,
                                             so.node_term, file, line, lamport, args_b)
        else:  # = fast_commit
            found = self.commit_step(k, index, term, so.lead, ot, file, line, lamport,
                                     args_b)
        k.window.append((file, line, event, args_b))
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
                out = self.memo[key] = self._nostart(k.state, prev_clean)
            if out.problem is None:
                continue
            found = self._add(found, attrs.evolve(
                self._violation(k, file, line, "server_stop", b"", out.problem,
                                out.frontier),
                subject=f"{file}:{line} tablet={k.tablet}",
                message=f"incarnation {inc} ended cleanly (server_stop) with no event for "
                        f"tablet {k.tablet}: " + out.problem.message))
            self.flush_leader_commit(k)
            k.app_term = -1
            k.tap_term = -1
            k.inc = inc
            k.state = out.post
            self.log_sync(k, self.states.tuples[k.state])
        return found

    def _nostart(self, sid: int, clean: bool) -> Outcome:
        """An incarnation boundary the key crossed without logging a startup."""
        s = self.states[sid]
        cands = [(s, 0)] if clean else list(self._frontier(s, spec_tuple(s)))
        crash = self.actions["crash"]
        crashed = self._while_down([(crash.effect(c), d) for c, d in cands if crash.guard(c)])
        return self._missing_startup(s, crashed)


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
            self._hold(k, k.state)
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
                out = self._memoise(key, self._born_startup(prev_clean, event, args_b, st_b)
                                    if born else self._boundary(k.state, prev_clean, event,
                                                                args_b, st_b), event)
            if not first or (born and inc > 1):
                # Boundaries by how many unlogged steps explain them (-1: none does).
                self.frontiers[out.frontier if out.problem is None else -1] += 1
            if inc != k.inc:
                self.flush_leader_commit(k)
                k.app_term = -1
                k.tap_term = -1
            k.inc = inc
            if out.problem is not None:
                found = [self._violation(k, file, line, event, args_b, out.problem,
                                         out.frontier)]
            k.state = out.post
            self.log_sync(k, self.states.tuples[k.state])
            if event == "startup":
                return self._after(k, file, line, event, args_b, out, found)
        pre = k.state
        key = (pre, event, args_b, st_b)
        out = self.memo.get(key)
        if out is None:
            out = self._memoise(key, self._step(pre, event, args_b, st_b), event)
        if out.problem is not None:
            v = self._violation(k, file, line, event, args_b, out.problem, -1)
            found = [v] if found is None else [*found, v]
        k.state = out.post
        found = self._after(k, file, line, event, args_b, out, found)
        if out.fast and event in POS_PARAMS:
            self._to_shape(k, pre, event, args_b, st_b, out)
        return found

    def _after(self, k: KeyState, file: str, line: int, event: str, args_b: bytes,
               out: Outcome, found: list[Violation] | None) -> list[Violation] | None:
        """Per-event checks that are not memoisable (they depend on the key's history)."""
        out.hits += 1
        if out.obs_term >= 0:
            if out.obs_term < k.max_term:
                found = self._add(found, self._violation(k, file, line, event, args_b,
                                                         _Problem(
                    "TermRegression", "violation", "TermMonotonic",
                    f"term {out.obs_term} after term {k.max_term} (seen at {k.max_term_at})",
                    (), ""), -1))
                # One fault, one finding: the replay goes on from the term the node
                # reports (as it resynchronises a state), so the events of the lower term
                # that follow are not each reported again.
                k.max_term = out.obs_term
                k.max_term_at = f"{file}:{line}"
            elif out.obs_term > k.max_term:
                k.max_term = out.obs_term
                k.max_term_at = f"{file}:{line}"
        p = out.params
        post = self.states.tuples[k.state]
        if post.wal_last_index or post.wal_last_term:
            self.wal_seen(k, post.wal_last_term, post.wal_last_index, out.obs_term, file,
                          line, k.lam, event == "log_append" and bool(p))
        if k.cfg_index >= 0 and post.config_index != k.cfg_index and \
                event not in self._config_events:
            # The committed config moved without a config_commit here (one lost at a
            # crash, a resynchronised state): its voters are not known.
            self.flush_leader_commit(k)
            k.cfg_index, k.cfg_voters = -1, ""
        if event == "log_append" and out.log is not None and out.problem is None:
            # The batch as the step's parameters say (``out.a``/``out.b`` are set only
            # for a fast outcome; a truncation that lowers the WAL's last OpId is SLOW).
            first, prev, terms = out.log
            got = self.log_append_step(k, first, prev, terms, p["op_term"], p["op_index"],
                                       post.term, file, line, k.lam, args_b)
            if got:
                found = got if found is None else [*found, *got]
        self.log_sync(k, post)
        if p and event in self._config_events:
            self._config_event(k, event, args_b, file, line, post.config_index)
        elif event in self._named_events:
            wrong = self._named_event(k, event, args_b, file, line, post.op_src)
            if wrong is not None:
                found = self._add(found, wrong)
        elif p and event in self._param_events:
            if event in ("vote_granted", "vote_denied", "start_election"):
                named = self.interner.name(p["me" if event == "start_election"
                                             else "candidate"])
                if named:
                    k.named.add(named)
            if event == "vote_granted":
                self.facts.append(("vote", k.tablet, p["t"], 0, 0, k.node, file, line, k.lam,
                                   self.interner.name(p["candidate"]) or ""))
            elif event == "start_election":
                self.facts.append(("elect", k.tablet, out.obs_term, k.inc, 0, k.node, file,
                                   line, k.lam, ""))
            if event == "vote_granted" or event == "start_election":
                t = p["t"] if event == "vote_granted" else out.obs_term
                who = p["candidate"] if event == "vote_granted" else p["me"]
                prior = k.votes.get(t)
                if prior is None:
                    k.votes[t] = (who, f"{file}:{line}")
                elif prior[0] != who:
                    found = self._add(found, self._violation(k, file, line, event, args_b,
                                                             _Problem(
                        "DoubleVote", "violation", "VoteOnce",
                        f"vote for {self.interner.name(who)} in term {t}, but this node "
                        f"voted for {self.interner.name(prior[0])} in term {t} at {prior[1]}",
                        (), ""), -1))
            guard = self.actions[event].identity_guard
            ok = True
            if guard is not None:
                # Identities are interned ints: the "system" has as many servers as
                # UUIDs seen (only len() is read by these two guards).
                ok = bool(guard(_Sized(len(self.interner.names)), k.node_id, **p))
            elif event == "become_leader":
                ok = p["me"] == k.node_id
            if not ok:
                found = self._add(found, self._violation(k, file, line, event, args_b,
                                                         _Problem(
                    "IdentityMismatch", "violation", getattr(guard, "__name__", "is_self"),
                    f"{event} names {self.interner.name(p.get('me', p.get('candidate', -1)))}"
                    f" but was logged by {k.node}", (), ""), -1))
            if event == "become_leader":
                self.facts.append(("leader", k.tablet, p["t"], 0, 0, k.node, file, line,
                                   0, ""))
                # The config this node knew when it won, if the trace says it (a lost
                # config_commit shows as a state whose config index differs).
                known = k.cfg_index >= 0 and post.config_index == k.cfg_index
                self.facts.append(("lead", k.tablet, p["t"], k.cfg_index if known else -1,
                                   k.inc, k.node, file, line, k.lam,
                                   k.cfg_voters if known else ""))
                # The leader's log as it won (Leader Completeness): its known runs.
                lo = k.log_lo if k.log_on else post.wal_last_index + 1
                self.facts.append(("llog", k.tablet, p["t"], lo, post.wal_last_index,
                                   k.node, file, line, k.lam,
                                   json.dumps(k.log_runs if k.log_on else [],
                                              separators=(",", ":"))))
        elif p and event == "commit":
            got = self.commit_step(k, p["index"], p["op_term"], out.lead, out.obs_term,
                                   file, line, k.lam, args_b)
            if got:
                found = got if found is None else [*found, *got]
        k.window.append((file, line, event, args_b))
        return found

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
        return self._violation(k, file, line, "copy_begin", args_b, _Problem(
            "ArgMismatch", "violation", "args.source",
            f"copy_begin downloads from {a.source}, but the StartTabletCopy this replica "
            f"accepted came from {caller}, a server of the tablet: the copy's source is "
            "its caller", (caller,), a.source), -1)

    def _config_event(self, k: KeyState, event: str, args_b: bytes, file: str, line: int,
                      config_index: int) -> None:
        """create_tablet / config_commit name the config's voters; a tablet copy adopts a
        config whose voters the trace does not say."""
        self.flush_leader_commit(k)  # with the config it was made in
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
            self.facts.append(("config", k.tablet, int(getattr(a, "config_index", -1)), 0, 0,
                               k.node, file, line, k.lam, k.cfg_voters))

    @staticmethod
    def _add(found: list[Violation] | None, v: Violation) -> list[Violation]:
        if found is None:
            return [v]
        found.append(v)
        return found

    def _violation(self, k: KeyState, file: str, line: int, event: str, args_b: bytes,
                   pr: _Problem, frontier: int) -> Violation:
        last = k.window[-1] if k.window else None
        return Violation(
            kind=pr.kind, severity=pr.severity, file=file, line=line,
            subject=f"{file}:{line}", message=pr.message, node=k.node, tablet=k.tablet,
            event=event, failed=pr.failed, expected=pr.expected, observed=pr.observed,
            last_matched=f"{last[0]}:{last[1]} {last[2]}" if last else "",
            frontier=frontier,
            context=(*(f"{f}:{n} {e} {a.decode('utf-8', 'replace')}"
                       for f, n, e, a in k.window),
                     f"{file}:{line} {event} {args_b.decode('utf-8', 'replace')}  <=="),
        )

    # -----------------------------------------------------------------------------------
    # Memo misses: where the spec is consulted.

    def _decode(self, event: str, args_b: bytes, st_b: bytes) -> (
            tuple[Any, dict[str, Any], tuple[Any, ...]] | _Problem):
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
        decoded = self._decode(event, args_b, st_b)
        if isinstance(decoded, _Problem):
            return Outcome(sid, decoded, {}, "bad-input", -1, -1)
        a, params, obs = decoded
        action = self.actions[event]
        # The compiled spec reads the state's Scalars tuple (``s``); the interpreted one
        # (a refused step, an action that does not compile) its ServerState.
        fast = self._compiled(event)
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
                "GuardFailed", "violation", self._failed(action, s, params),
                f"{event}{self._fmt(params)} is not allowed here: "
                + self._explain(action, s, params),
                (self._describe(s),), describe_tuple(obs, self.interner)),
                params, "guard-failed", obs_term, -1)
        # The compiled effect leaves every map empty (it is canon(effect)) and gives the
        # post-state's Scalars tuple.
        post: Any = fast.effect(s, *args) if fast is not None else \
            canon(action.effect(s, **params))
        branch = self._branch(event, s, post, params)
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
        diffs = [f"{f}: spec {self._val(f, e)} vs trace {self._val(f, o)}"
                 for f, e, o in zip(TRACED_FIELDS, expected, obs, strict=True) if e != o]
        return _Problem("StateMismatch", "violation", "effect",
                        "reported state differs from the spec's: " + "; ".join(diffs),
                        (self._describe(post),), describe_tuple(obs, self.interner))

    def _val(self, field: str, v: Any) -> str:
        if field == "voted_for":
            return self.interner.name(v) or "none"
        if field == "sb":
            return SB_NAMES.get(v, str(v))
        if field == "wal":
            return WAL_NAMES.get(v, str(v))
        if field == "blocks":
            return BLOCKS_NAMES.get(v, str(v))
        return str(v)

    def _arg_checks(self, a: Any, pre: ServerState, post: ServerState) -> _Problem | None:
        if isinstance(a, MergeArgs):
            local = cmeta_tuple(a.local, self.interner)
            want_local = spec_tuple(pre)[4:8]
            result = cmeta_tuple(a.result, self.interner)
            want_result = spec_tuple(post)[4:8]
            remote: CmetaState = a.remote
            if local != want_local:
                return self._arg_problem("args.local", local, want_local)
            if (remote.term, remote.config_index) != (a.remote_term, a.remote_config_index):
                return _Problem("ArgMismatch", "violation", "args.remote",
                                "args.remote disagrees with remote_term/remote_config_index",
                                (), "")
            if result != want_result:
                return self._arg_problem("args.result", result, want_result)
        if isinstance(a, StcRejectArgs):
            if a.answer != a.reason:
                return _Problem("ArgMismatch", "violation", "args.answer",
                                f"answer {a.answer} but reason {a.reason}", (), "")
        elif isinstance(a, StcArgs) and a.answer != "OK":
            return _Problem("ArgMismatch", "violation", "args.answer",
                            f"stc_accept answered {a.answer}", (), "")
        return None

    def _arg_problem(self, field: str, got: tuple[Any, ...],
                     want: tuple[Any, ...]) -> _Problem:
        def fmt(c: tuple[Any, ...]) -> str:
            if not c[0]:
                return "none"
            return f"(term={c[1]}, vote={self.interner.name(c[2]) or '-'}, cfg={c[3]})"

        return _Problem("ArgMismatch", "violation", field,
                        f"{field} is {fmt(got)}, the spec has {fmt(want)}", (fmt(want),),
                        fmt(got))

    def _compiled(self, event: str) -> CompiledAction | None:
        if event not in self.compiled:
            self.compiled[event] = cached_action(self.actions[event], scalars=True)
        return self.compiled[event]

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
                        (self._describe(post_s),), "")

    def _describe(self, s: ServerState) -> str:
        return describe_tuple(spec_tuple(s), self.interner) + self._volatile(s)

    @staticmethod
    def _volatile(s: ServerState) -> str:
        vol = ["up" if s.up else "down"]
        if s.running:
            vol.append("running")
        if s.leader:
            vol.append("leader")
        if s.failed:
            vol.append("failed")
        if s.op:
            vol.append(f"{OP_NAMES[s.op]}@{s.step}")
        return f" [{','.join(vol)}]"

    def _fmt(self, params: dict[str, Any]) -> str:
        """The parameters as the trace says them: enumerations and servers by name; the
        spec's own parameters no trace carries (filled in for the guard) left out."""
        names: dict[str, dict[int, str]] = {"expected_state": SB_NAMES, "reason": STC_NAMES,
                                            "case": STARTUP_NAMES}
        shown = []
        for k, v in params.items():
            if k in SPEC_ONLY_PARAMS:
                continue
            if k in names:
                text = names[k].get(v, str(v))
            elif k in _ID_PARAMS:
                text = self.interner.name(v) or str(v)
            elif k == "has_opid":
                text = "true" if v else "false"
            else:
                text = str(v)
            shown.append(f"{k}={text}")
        return "(" + ", ".join(shown) + ")"

    @staticmethod
    def _failed(action: Action, s: ServerState, params: dict[str, Any]) -> str:
        """A GuardFailed finding's ``failed``: the names of the conditions the step breaks,
        or the guard's name when none does by name (an action without conditions, or a
        replaced guard that refuses what they allow)."""
        conds = action.conditions(s, **params) if action.conditions is not None else []
        return "; ".join(name for name, holds in conds if not holds) or action.guard.__name__

    def _explain(self, action: Action, s: ServerState, params: dict[str, Any]) -> str:
        where = f"in {self._describe(s)}"
        if action.name == "startup":
            want = startup_case(s)
            return (f"the spec classifies this on-disk state as "
                    f"{STARTUP_NAMES[want]}, the trace says {STARTUP_NAMES[params['case']]}")
        conds = action.conditions(s, **params) if action.conditions is not None else []
        broken = [name for name, holds in conds if not holds]
        if action.name == "stc_reject" and broken == [name for name, _ in conds[-1:]]:
            # Only the reason is wrong: it must be the first check that fails, in order.
            p = {k: v for k, v in params.items() if k != "reason"}
            fails = [STC_NAMES[c] for c, f in stc_failures(s, **p) if f]
            if not fails:
                return f"every StartTabletCopy check passes (the copy is accepted), {where}"
            return (f"the first StartTabletCopy check that fails is {fails[0]} (the spec's "
                    f"checks fail with {', '.join(fails)}), {where}")
        if broken:
            return "it needs " + "; ".join(broken) + f", {where}"
        return f"the spec's guard {action.guard.__name__} is false {where}"

    @staticmethod
    def _branch(event: str, pre: ServerState, post: ServerState, p: dict[str, Any]) -> str:
        """The guard branch a step exercised (for coverage)."""
        if event == "startup":
            return STARTUP_NAMES[p["case"]]
        if event == "stc_reject":
            return STC_NAMES[p["reason"]]
        if event == "stc_accept":
            return f"from_{SB_NAMES[pre.sb]}"
        if event.startswith("delete_"):
            return OP_NAMES[pre.op]
        if event == "copy_merge_cmeta":
            if not pre.cmeta:
                return "no_local_cmeta"
            return "term_rises" if p["remote_term"] > pre.term else "term_kept"
        if event == "log_append":
            who = "leader" if pre.leader else "follower"
            batch = "_batch" if p["op_index"] > p["first_index"] else ""
            cut = "_truncate" if p["first_index"] <= pre.wal_last_index else ""
            return who + batch + cut
        if event in ("vote_granted", "vote_denied"):
            return "tombstone" if pre.sb != 3 else "replica"
        return ""

    # -----------------------------------------------------------------------------------
    # Incarnation boundaries.

    def _boundary(self, sid: int, clean: bool, event: str, args_b: bytes,
                  st_b: bytes) -> Outcome:
        self.memo_misses += 1
        decoded = self._decode(event, args_b, st_b)
        if isinstance(decoded, _Problem):
            return Outcome(sid if sid >= 0 else self.fresh, decoded, {}, "bad-input", -1, 0)
        _, params, obs = decoded
        startup = self.actions["startup"]
        crash = self.actions["crash"]
        if sid < 0:
            # The first event of a key. A tablet first seen at a startup existed before the
            # traces began: take its durable state as reported. Otherwise it starts from a
            # server hosting nothing.
            if event != "startup":
                return Outcome(self.fresh, None, {}, "", -1, 0)
            base = as_reported(state_from_tuple(obs, ServerState(up=False)))
            return self._startup_from([(base, 0)], obs, params, base, startup)
        s = self.states[sid]
        cands = [(s, 0)] if clean else list(self._frontier(s, obs))
        crashed = self._while_down([(crash.effect(c), d) for c, d in cands if crash.guard(c)])
        if event == "startup":
            return self._startup_from(crashed, obs, params, crash.effect(s), startup)
        return self._missing_startup(s, crashed)

    def _born_startup(self, clean: bool, event: str, args_b: bytes, st_b: bytes) -> Outcome:
        """The first event of a key on a node whose trace starts at its format, a startup:
        the boundary from a server hosting nothing. What no unlogged step explains came
        from nowhere (``PhantomTablet``)."""
        out = self._boundary(self.fresh, clean, event, args_b, st_b)
        pr = out.problem
        if pr is not None and pr.kind == "StateMismatch":
            out.problem = _Problem(
                "PhantomTablet", "violation", "created or copied in the trace",
                "the node's trace is whole from its server_format on, but it never created "
                "or copied this tablet, and no step lost at a crash explains the data "
                "this startup reports", (self._describe(self.states[self.fresh]),),
                pr.observed)
        return out

    def _missing_startup(self, s: ServerState,
                         crashed: list[tuple[ServerState, int]]) -> Outcome:
        """A boundary crossed without a startup: fine when some crashed candidate holds
        nothing on disk for the tablet (startup case NOTHING: no event), else
        ``MissingStartup``."""
        startup = self.actions["startup"]
        for c, depth in crashed:
            if startup.guard(c, case=STARTUP_NOTHING):
                post = canon(startup.effect(c, case=STARTUP_NOTHING))
                return Outcome(self.intern(post), None, {}, "", -1, depth)
        cr = self.actions["crash"].effect(s)
        case = startup_case(cr)
        post = canon(startup.effect(cr, case=case))
        return Outcome(self.intern(post), _Problem(
            "MissingStartup", "violation", "startup_guard",
            f"a new incarnation began but logged no startup for this tablet, which exists "
            f"on disk (the spec expects startup case {STARTUP_NAMES[case]})",
            (self._describe(cr),), ""), {}, "", -1, 0)

    def _while_down(self, crashed: list[tuple[ServerState, int]]) -> list[
            tuple[ServerState, int]]:
        """Each crashed candidate, then the same with its WAL, its blocks or both damaged
        (the spec's ``damage``), then each of those with its quarantine purged (the
        spec's ``purge``): what may happen to a server that is down. The undamaged one
        comes first, the unpurged ones before the purged."""
        damage = self.actions.get("damage")
        purge = self.actions.get("purge")
        if damage is None and purge is None:
            return crashed
        out: list[tuple[ServerState, int]] = []
        for c, depth in crashed:
            variants = [c]
            if damage is not None:
                for what in _DAMAGE_KINDS:
                    variants += [canon(damage.effect(v, what=what)) for v in variants
                                 if damage.guard(v, what=what)]
            if purge is not None:
                variants += [canon(purge.effect(v)) for v in variants if purge.guard(v)]
            out += [(v, depth) for v in variants]
        return out

    def _startup_from(self, crashed: list[tuple[ServerState, int]], obs: tuple[Any, ...],
                      params: dict[str, Any], fallback: ServerState,
                      startup: Action) -> Outcome:
        case = params["case"]
        obs_term = obs[5] if obs[4] else -1
        for c, depth in crashed:
            if startup.guard(c, case=case):
                post = canon(startup.effect(c, case=case))
                if spec_tuple(post) == obs:
                    return Outcome(self.intern(post), None, params, STARTUP_NAMES[case],
                                   obs_term, depth)
        # Nothing explains it. Prefer "right state, wrong case" (a guard) over a mismatch.
        for c, _ in crashed:
            if spec_tuple(c) == obs:
                want = startup_case(c)
                post = canon(startup.effect(c, case=want))
                return Outcome(self.intern(post), _Problem(
                    "GuardFailed", "violation", self._failed(startup, c, params),
                    f"startup(case={STARTUP_NAMES[case]}) is not allowed: the spec classifies "
                    f"this on-disk state as {STARTUP_NAMES[want]}",
                    (self._describe(c),), describe_tuple(obs, self.interner)),
                    params, "guard-failed", obs_term, 0)
        expected = tuple(sorted({self._describe(c) for c, _ in crashed}))[:8]
        base = resync(obs, fallback)
        post = canon(startup.effect(base, case=startup_case(base)))
        return Outcome(self.intern(post), _Problem(
            "StateMismatch", "violation", "crash frontier",
            f"no sequence of up to {self.max_frontier} unlogged steps, a crash and "
            f"startup(case={STARTUP_NAMES[case]}) leads to the reported state "
            f"({len(crashed)} candidate states tried)" + self._closest(crashed, obs),
            expected, describe_tuple(obs, self.interner)), params, "mismatch", obs_term,
            len(crashed))

    def _closest(self, crashed: list[tuple[ServerState, int]], obs: tuple[Any, ...]) -> str:
        """Where the candidate nearest to the reported state differs from it (a hint: the
        fields a writer most likely got wrong)."""
        best: list[str] | None = None
        for c, _ in crashed:
            diffs = [f"{f}: spec {self._val(f, e)} vs trace {self._val(f, o)}"
                     for f, e, o in zip(TRACED_FIELDS, spec_tuple(c), obs, strict=True)
                     if e != o]
            if best is None or len(diffs) < len(best):
                best = diffs
        return "; the nearest differs in " + ", ".join(best) if best else ""

    def _frontier(self, s: ServerState, obs: tuple[Any, ...]) -> Iterator[
            tuple[ServerState, int]]:
        """States reachable from ``s`` by up to ``max_frontier`` local steps, breadth
        first (so the first match has the fewest unlogged steps)."""
        d = dict(zip(TRACED_FIELDS, obs, strict=True))
        terms = {0, 1, s.term, s.term + 1, d["term"], d["wal_last_term"], d["sb_last_term"],
                 s.wal_last_term}
        indices = {0, 1, s.wal_last_index, s.wal_last_index + 1, d["wal_last_index"],
                   d["sb_last_index"], d["config_index"], s.config_index}
        ids = {v for v in (d["voted_for"], s.voted_for) if v != NO_VOTE}
        domains: dict[str, Iterable[Any]] = {"expected_state": (DOES_NOT_EXIST, 1, 3),
                                             "has_opid": (0,)}
        steps = [a for a in self.spec.actions
                 if a.name not in _NOT_STEPS and a.name not in _NO_EFFECT]
        seen = {s}
        level = [s]
        yield s, 0
        for depth in range(1, self.max_frontier + 1):
            nxt: list[ServerState] = []
            for st in level:
                for a in steps:
                    pools = [sorted(terms) if p in _TERM_PARAMS else
                             # a batch's start does not change where it leads: 1 (any
                             # follower's batch may start there) or last + 1 (a leader's)
                             (1, st.wal_last_index + 1) if p == "first_index" else
                             sorted(indices) if p in _INDEX_PARAMS else
                             sorted(ids) if p in _ID_PARAMS
                             else (None,) if p in TRACE_FILLS
                             else domains.get(p, (0,)) for p in a.params]
                    for combo in itertools.product(*pools):
                        p = dict(zip(a.params, combo, strict=True))
                        for name in a.params:  # what a trace never says: as the replay fills it
                            if p[name] is None:
                                p[name] = TRACE_FILLS[name](st, p)
                        if not a.guard(st, **p):
                            continue
                        post = canon(a.effect(st, **p))
                        if post not in seen:
                            seen.add(post)
                            nxt.append(post)
                            yield post, depth
            level = nxt
            if not level:
                return


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
