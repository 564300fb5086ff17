"""The crash frontier: what may have happened between a key's last logged step and its next
incarnation's startup (replay's docstring, "Crash frontier" and "Damage").

A crash is not an event. Across a crash boundary the replay accepts any sequence of up to
``max_frontier`` unlogged local spec steps from the last matched state (parameters drawn
from values visible in that state and in the state the next incarnation reports), then the
spec's ``crash``; while the server is down, the spec's ``damage`` and ``purge`` (no process
logs them); then the new incarnation's ``startup``. The fewest unlogged steps that explain
the reported state is the boundary's frontier size. Every candidate is a spec step: the
guards and effects are the spec's own (``Action.guard`` / ``Action.effect``), the frontier
only enumerates parameters.

``replay.Replayer`` holds one ``CrashFrontier`` and asks it about each boundary it meets
(``boundary``, ``born_startup``, ``nostart``); the frontier reads back only what
``FrontierHost`` names (the replay's current state table, its interned states, its
compiled spec and its decoder of events), and memoises nothing itself: the replay memoises
each boundary's ``Outcome``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any, Final, Protocol

from revivify.checker.compiled import CompiledAction, from_scalars, to_scalars
from revivify.checker.explain import Explainer
from revivify.checker.keys import _ID_PARAMS, Outcome, StateTable, _Problem, canon, resync
from revivify.checker.traces import TRACED_FIELDS, describe_tuple, spec_tuple, state_from_tuple
from revivify.spec.actions import (
    FAULT_ACTIONS,
    TRACE_FILLS,
    Action,
    as_reported,
    startup_case,
)
from revivify.spec.model import (
    DAMAGE_KINDS,
    DOES_NOT_EXIST,
    NO_VOTE,
    STARTUP_NAMES,
    STARTUP_NOTHING,
    ServerState,
)
from revivify.spec.system import Spec

# Actions whose effect is the identity: never useful as an unlogged frontier step.
_NO_EFFECT: Final = frozenset({"commit", "stc_reject"})
# Not process steps before a crash: the crash itself, startup, and the disk faults (damage
# is tried at every boundary, see replay's docstring; a wipe makes a new key).
_NOT_STEPS: Final = frozenset({"crash", "startup", *FAULT_ACTIONS})
_DAMAGE_KINDS: Final = DAMAGE_KINDS

_TERM_PARAMS: Final = frozenset({"t", "caller_term", "remote_term", "remote_last_term",
                                 "op_term", "cand_last_term", "opid_term"})
_INDEX_PARAMS: Final = frozenset({"config_index", "remote_config_index", "remote_last_index",
                                  "op_index", "index", "cand_last_index", "opid_index",
                                  "first_index"})


# A tablet event decoded: its args record, the spec parameters they give, and the durable
# state it reports as a ``traces.spec_tuple``.
Decoded = tuple[Any, dict[str, Any], tuple[Any, ...]]


class FrontierHost(Protocol):
    """What the crash frontier reads of the replay that holds it (``replay.Replayer``).
    The state table and the fresh state are replaced when the replay drops its memo
    tables, so they are read at each use, never kept."""

    @property
    def states(self) -> StateTable:
        """The interned states of the replay."""
        ...

    @property
    def fresh(self) -> int:
        """The id of a server hosting nothing (up, every field at its initial value)."""
        ...

    def intern(self, s: ServerState) -> int:
        """The id of a canonical state."""
        ...

    def compiled(self, event: str) -> CompiledAction | None:
        """The action ``event`` compiled (checker/compiled.py), None where it does not
        compile."""
        ...

    def decode(self, event: str, args_b: bytes, st_b: bytes) -> Decoded | _Problem:
        """An event's args, its spec parameters and the state it reports, or what is
        wrong with it."""
        ...


class CrashFrontier:
    """Incarnation boundaries, as the spec and ``max_frontier`` unlogged steps allow."""

    __slots__ = ("actions", "host", "max_frontier", "spec", "words")

    def __init__(self, spec: Spec, max_frontier: int, words: Explainer,
                 host: FrontierHost) -> None:
        self.spec = spec
        self.actions: dict[str, Action] = {a.name: a for a in spec.actions}
        self.max_frontier = max_frontier
        self.words = words
        self.host = host

    def nostart(self, sid: int, clean: bool) -> Outcome:
        """An incarnation boundary the key crossed without logging a startup."""
        s = self.host.states[sid]
        cands = [(s, 0)] if clean else self._frontier(s, spec_tuple(s))
        crash = self.actions["crash"]
        crashed = self._while_down((crash.effect(c), d) for c, d in cands if crash.guard(c))
        return self._missing_startup(s, crashed)

    # -----------------------------------------------------------------------------------
    # Incarnation boundaries.

    def boundary(self, sid: int, clean: bool, event: str, args_b: bytes,
                 st_b: bytes) -> Outcome:
        """The first event of a key's incarnation after its state ``sid`` (-1: the key's
        first event): what crossing the boundary (``clean``: the last incarnation ended
        with server_stop) to this event may have done, the fewest unlogged steps first."""
        decoded = self.host.decode(event, args_b, st_b)
        if isinstance(decoded, _Problem):
            return Outcome(sid if sid >= 0 else self.host.fresh, decoded, {}, "bad-input", -1, 0)
        _, params, obs = decoded
        startup = self.actions["startup"]
        crash = self.actions["crash"]
        if sid < 0:
            # The first event of a key. A tablet first seen at a startup existed before the
            # traces began: take its durable state as reported. Otherwise it starts from a
            # server hosting nothing.
            if event != "startup":
                return Outcome(self.host.fresh, None, {}, "", -1, 0)
            base = as_reported(state_from_tuple(obs, ServerState(up=False)))
            return self._startup_from([(base, 0)], obs, params, base, startup)
        s = self.host.states[sid]
        # Lazily, in order: the first candidate that explains the startup ends the search
        # (most boundaries: the crash lost nothing, the first candidate), and only a
        # boundary nothing explains enumerates every candidate.
        cands = [(s, 0)] if clean else self._frontier(s, obs)
        crashed = self._while_down((crash.effect(c), d) for c, d in cands if crash.guard(c))
        if event == "startup":
            return self._startup_from(crashed, obs, params, crash.effect(s), startup)
        return self._missing_startup(s, crashed)

    def born_startup(self, clean: bool, event: str, args_b: bytes, st_b: bytes) -> Outcome:
        """The first event of a key on a node whose trace starts at its format, a startup:
        the boundary from a server hosting nothing. What no unlogged step explains came
        from nowhere (``PhantomTablet``)."""
        out = self.boundary(self.host.fresh, clean, event, args_b, st_b)
        pr = out.problem
        if pr is not None and pr.kind == "StateMismatch":
            out.problem = _Problem(
                "PhantomTablet", "violation", "created or copied in the trace",
                "the node's trace is whole from its server_format on, but it never created "
                "or copied this tablet, and no step lost at a crash explains the data "
                "this startup reports",
                (self.words.describe(self.host.states[self.host.fresh]),), pr.observed)
        return out

    def _missing_startup(self, s: ServerState,
                         crashed: Iterable[tuple[ServerState, int]]) -> Outcome:
        """A boundary crossed without a startup: fine when some crashed candidate holds
        nothing on disk for the tablet (startup case NOTHING: no event), else
        ``MissingStartup``."""
        startup = self.actions["startup"]
        for c, depth in crashed:
            if startup.guard(c, case=STARTUP_NOTHING):
                post = canon(startup.effect(c, case=STARTUP_NOTHING))
                return Outcome(self.host.intern(post), None, {}, "", -1, depth)
        cr = self.actions["crash"].effect(s)
        case = startup_case(cr)
        post = canon(startup.effect(cr, case=case))
        return Outcome(self.host.intern(post), _Problem(
            "MissingStartup", "violation", "startup_guard",
            f"a new incarnation began but logged no startup for this tablet, which exists "
            f"on disk (the spec expects startup case {STARTUP_NAMES[case]})",
            (self.words.describe(cr),), ""), {}, "", -1, 0)

    def _while_down(self, crashed: Iterable[tuple[ServerState, int]]) -> Iterator[
            tuple[ServerState, int]]:
        """Each crashed candidate, then the same with its WAL, its blocks or both damaged
        (the spec's ``damage``), then each of those with its quarantine purged (the
        spec's ``purge``): what may happen to a server that is down. The undamaged one
        comes first, the unpurged ones before the purged."""
        damage = self.actions.get("damage")
        purge = self.actions.get("purge")
        if damage is None and purge is None:
            yield from crashed
            return
        for c, depth in crashed:
            variants = [c]
            if damage is not None:
                for what in _DAMAGE_KINDS:
                    variants += [canon(damage.effect(v, what=what)) for v in variants
                                 if damage.guard(v, what=what)]
            if purge is not None:
                variants += [canon(purge.effect(v)) for v in variants if purge.guard(v)]
            for v in variants:
                yield v, depth

    def _startup_from(self, candidates: Iterable[tuple[ServerState, int]],
                      obs: tuple[Any, ...], params: dict[str, Any], fallback: ServerState,
                      startup: Action) -> Outcome:
        case = params["case"]
        obs_term = obs[5] if obs[4] else -1
        crashed: list[tuple[ServerState, int]] = []  # every candidate, once all are tried
        for c, depth in candidates:
            crashed.append((c, depth))
            if startup.guard(c, case=case):
                post = canon(startup.effect(c, case=case))
                if spec_tuple(post) == obs:
                    return Outcome(self.host.intern(post), None, params, STARTUP_NAMES[case],
                                   obs_term, depth)
        # Nothing explains it. Prefer "right state, wrong case" (a guard) over a mismatch.
        for c, _ in crashed:
            if spec_tuple(c) == obs:
                want = startup_case(c)
                post = canon(startup.effect(c, case=want))
                return Outcome(self.host.intern(post), _Problem(
                    "GuardFailed", "violation", self.words.failed(startup, c, params),
                    f"startup(case={STARTUP_NAMES[case]}) is not allowed: the spec classifies "
                    f"this on-disk state as {STARTUP_NAMES[want]}",
                    (self.words.describe(c),), describe_tuple(obs, self.words.interner)),
                    params, "guard-failed", obs_term, 0)
        expected = tuple(sorted({self.words.describe(c) for c, _ in crashed}))[:8]
        base = resync(obs, fallback)
        post = canon(startup.effect(base, case=startup_case(base)))
        return Outcome(self.host.intern(post), _Problem(
            "StateMismatch", "violation", "crash frontier",
            f"no sequence of up to {self.max_frontier} unlogged steps, a crash and "
            f"startup(case={STARTUP_NAMES[case]}) leads to the reported state "
            f"({len(crashed)} candidate states tried)" + self._closest(crashed, obs),
            expected, describe_tuple(obs, self.words.interner)), params, "mismatch", obs_term,
            len(crashed))

    def _closest(self, crashed: list[tuple[ServerState, int]], obs: tuple[Any, ...]) -> str:
        """Where the candidate nearest to the reported state differs from it (a hint: the
        fields a writer most likely got wrong)."""
        best: list[str] | None = None
        for c, _ in crashed:
            diffs = [f"{f}: spec {self.words.val(f, e)} vs trace {self.words.val(f, o)}"
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
        # The compiled spec where it compiles (the same guards and effects, as plain
        # Python over Scalars tuples; checker/compiled.py), else the interpreted one.
        compiled = {a.name: self.host.compiled(a.name) for a in steps}
        seen = {s}
        level = [s]
        yield s, 0
        for depth in range(1, self.max_frontier + 1):
            nxt: list[ServerState] = []
            for st in level:
                t = to_scalars(st)  # canonical: s from the state table, the rest canon'd
                for a in steps:
                    ca = compiled[a.name]
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
                        if ca is not None:
                            args = [p[name] for name in a.params]
                            if not ca.guard(t, *args):
                                continue
                            post = from_scalars(ca.effect(t, *args))
                        elif not a.guard(st, **p):
                            continue
                        else:
                            post = canon(a.effect(st, **p))
                        if post not in seen:
                            seen.add(post)
                            nxt.append(post)
                            yield post, depth
            level = nxt
            if not level:
                return
