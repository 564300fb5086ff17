"""The per-key replay state and the checker's findings: the values the parts of the replay
share (``checker.replay`` the core, ``logtrack`` the rebuilt log, ``frontier`` the crash
frontier, ``explain`` the words of a finding).

* ``Violation``: one finding, as both engines report it; ``_Problem``: what a step's
  outcome says is wrong, before it is placed at a file and line.
* ``Outcome``: the memoised result of one step (or boundary), and how a driver may replay a
  memo hit inline (``SLOW`` / ``FAST_*``).
* ``KeyState`` / ``NodeState``: all that survives between events, per (node, tablet) and per
  node: small, so memory follows the live keys, never the events.
* ``StateTable``: the interned spec states (``Scalars`` tuples, ServerStates on demand).
* ``canon`` / ``resync``: the canonical state (no ghost maps) and the state adopted after a
  violation (one fault, one finding).
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import attrs

from revivify.checker.compiled import from_scalars
from revivify.checker.traces import state_from_tuple
from revivify.spec.actions import (
    NO_PENDING_CONFIG,
    UNTRACED_MAPS,
    Action,
    pending_config_held,
)
from revivify.spec.logic import empty_map
from revivify.spec.model import MAP_FIELDS, ServerState

# The last events a key keeps: the context of a finding.
WINDOW: Final = 6
# One entry of a key's window: (file, line, event, raw args).
WindowEntry = tuple[str, int, str, bytes]


def remember(window: list[WindowEntry], entry: WindowEntry) -> None:
    """Append ``entry`` to a key's window, dropping the oldest beyond ``WINDOW``. A plain
    list, not a ``deque(maxlen=WINDOW)``: a deque allocates a block of 64 slots (about
    760 bytes), and a follower keeps every node's keys alive at once (checker/follow.py)."""
    window.append(entry)
    if len(window) > WINDOW:
        del window[0]
# Parameters that name servers (interned to ints in the spec's parameters).
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
# (``LogTracker.log_append_step``) and, for an entry of the key's current term (``lead``),
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
    window: list[WindowEntry] = attrs.Factory(list)  # ``remember``: at most WINDOW
    max_term: int = -1
    # Where ``max_term`` was first seen (file, line): two fields, not a "file:line" string
    # made per key (the follower keeps every node's keys).
    max_term_file: str = ""
    max_term_line: int = 0
    votes: dict[int, tuple[int, str, int]] = attrs.Factory(dict)  # term -> (whom, file, line)
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
    # The rebuilt log (``LogTracker.log_*``; traces/README.md "Version 3"): ``log_on`` while
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
