"""The log-position abstraction: one memo entry for every append or commit of one shape.

Why. A real server's WAL grows with every ``log_append`` and every ``commit`` names a new
index, so the memo key of ``checker.replay`` (state id, event, raw args, raw state) is new at
every such step: each one decodes its line and consults the spec afresh (about 20 us where
a memo hit costs 2). Yet the k-th append of a term and the (k+1)-th are the same step,
moved one index along the log.

What. A key in *shape mode* (``KeyState.pos >= 0``) holds its state as a *shape*: the
concrete ``Scalars`` tuple with every position field (``POS_FIELDS``: where the WAL ends,
and the ghost that follows it) replaced by its offset from the WAL's last index ``pos``,
which the key keeps apart. An append or a commit is looked up by (shape, event, the
positions its args name as offsets from ``pos``, the rest of its args as raw bytes), and the
reported state is matched against the outcome's expected bytes with the WAL's last index
written in (``ShapeOutcome.expect``). A hit moves ``pos``; the shape does not change.

Why it is exact (the soundness argument). Let a step be (s, p, obs): the pre-state, the
parameters, the reported state. Shift it by d: every position field of s, every position
parameter (``POS_PARAMS``) and the reported WAL's last index, plus d; nothing else. Two
steps with the same lookup key are shifts of each other, by construction of the key (the
args' and the state's other bytes are equal, the positions' digits canonical, so they
decode to equal values, the positions d apart). The claim: if H holds for both steps, a
step whose outcome was clean (guard true, reported state equal to the effect's, every local
invariant and step property holding) has a clean outcome after the shift, whose post-state
is the original post-state shifted by d. H: every position value is above every other
integer of the state and of the parameters (terms, enumerations, config indices; not the
identities, ``ID_FIELDS``, which are names, not numbers) by more than ``MARGIN``.

* The spec part (guard, effect on the scalar fields, the local invariants, the step
  properties) is *proved*, per action, by z3 (``shift_exact``): for all states, parameters
  and d satisfying H on both sides, with every map empty (the replay's canonical states)
  and the map parameters arbitrary. The proof runs the spec's own functions on z3 terms,
  so nothing about the rules is restated here; an action for which z3 does not prove it
  (a mutant that compares an index with a term, say) is never abstracted.
* The checker part is shift-invariant by reading: the args' validation
  (``traces._check_terms``: counts, terms, ``first_index == 1`` which H excludes on both
  sides); ``_leader_batch`` (terms against the state's term); the comparison with the
  reported state (the reported WAL index is an offset in the key, every other field equal
  bytes); the coverage branch (positions compared with positions); ``Outcome.lead``,
  ``walc``, ``walx`` (OpIds compared with OpIds shifted alike).
* The per-key history checks (the term check, the rebuilt log, the commit facts) are not
  memoised at all: the driver runs them on the concrete indices of each event.

Only clean outcomes of ``log_append`` and ``commit`` whose fast kind is not SLOW, and after
which every local invariant and step property holds (the proof's premise: the replay calls
a step clean when it breaks no invariant its pre-state did not already break), are
memoised here; anything else (no shape entry, a layout other than the writer's canonical
one, H false, an unproved action) takes the concrete path after ``Replayer.concretize``,
which rebuilds the concrete state (the shape with ``pos`` added back): the same replay as
before, only slower.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

import attrs
import z3

from revivify.checker.compiled import SCALAR_FIELDS
from revivify.checker.symbolic import symbolic_server
from revivify.spec.actions import SPEC_ONLY_PARAMS, TRACE_FILLS, Action
from revivify.spec.invariants import Invariant, StepProperty
from revivify.spec.model import BOOL_FIELDS, ID_FIELDS, MAP_FIELDS, ServerState

# The fields that move with the WAL's end: its last index, and the ghost that follows it.
POS_FIELDS: Final = ("wal_last_index", "ghost_last_index")
# The parameters that name log positions, per abstracted action.
POS_PARAMS: Final = {"log_append": ("first_index", "op_index"), "commit": ("index",)}
# Identities: interned names, never compared with a number (the proof checks it).
ID_PARAMS: Final = frozenset({"dest", "candidate", "me", "caller", "source"})
MARGIN: Final = 4

# Integer fields H bounds: not a position, not a bool, not an identity.
OTHER_FIELDS: Final = tuple(f for f in SCALAR_FIELDS if f not in BOOL_FIELDS
                            and f not in POS_FIELDS and f not in ID_FIELDS)


def _canon(s: ServerState) -> ServerState:
    """Every map emptied (the replay's canonical state)."""
    return attrs.evolve(s, **{f: v for f, v in attrs.asdict(symbolic_server("_", empty_maps=True),
                                                            recurse=False).items()
                              if f in MAP_FIELDS})


def _b(x: Any) -> Any:
    return z3.BoolVal(x) if isinstance(x, bool) else x


def _hyp(s: ServerState, p: dict[str, Any], pos_params: Iterable[str]) -> Any:
    """H: every position above every other integer by more than MARGIN."""
    pos = [getattr(s, f) for f in POS_FIELDS] + [p[n] for n in pos_params]
    others = [getattr(s, f) for f in OTHER_FIELDS] + [
        v for n, v in p.items() if n not in pos_params and n not in ID_PARAMS
        and isinstance(v, z3.ArithRef)]
    return z3.And(*[o + MARGIN < y for y in pos for o in others],
                  *[y > MARGIN for y in pos])


_PROVED: dict[tuple[Any, ...], bool] = {}


def shift_exact(action: Action, invariants: Iterable[Invariant],
                step_props: Iterable[StepProperty]) -> bool:
    """Proved: a clean step of ``action`` stays clean, its post-state shifted, when every
    position shifts alike and H holds before and after (see the module docstring). False
    when z3 does not prove it (or the spec will not run on z3 terms)."""
    invs = tuple(invariants)
    props = tuple(step_props)
    key = (action.name, action.guard, action.effect, *(i.pred for i in invs),
           *(p.pred for p in props))
    got = _PROVED.get(key)
    if got is None:
        try:
            got = _prove(action, invs, props)
        except Exception:  # a spec function that will not run on z3 terms
            got = False
        _PROVED[key] = got
    return got


def _prove(action: Action, invs: tuple[Invariant, ...],
           props: tuple[StepProperty, ...]) -> bool:
    pos_params = POS_PARAMS.get(action.name)
    if pos_params is None:
        return False
    d = z3.Int("shift.d")
    s1 = symbolic_server("s", empty_maps=True)
    s2 = attrs.evolve(s1, **{f: getattr(s1, f) + d for f in POS_FIELDS})
    p1: dict[str, Any] = {}
    for n in action.params:
        if n not in SPEC_ONLY_PARAMS:
            p1[n] = z3.Int(f"p.{n}")
    p2 = {n: (v + d if n in pos_params else v) for n, v in p1.items()}

    def filled(s: ServerState, p: dict[str, Any], tag: str) -> dict[str, Any]:
        out = dict(p)
        for n in action.params:
            if n in SPEC_ONLY_PARAMS:
                # The map parameters arbitrary, and independent on the two sides: what
                # the replay passes (TRACE_FILLS) is one of them.
                v = TRACE_FILLS[n](s, out)
                if not isinstance(v, z3.ExprRef) and not isinstance(v, int):
                    v = z3.Array(f"{tag}.{n}", z3.IntSort(), z3.IntSort())
                out[n] = v
        return out

    f1, f2 = filled(s1, p1, "one"), filled(s2, p2, "two")
    g1, g2 = _b(action.guard(s1, **f1)), _b(action.guard(s2, **f2))
    post1, post2 = _canon(action.effect(s1, **f1)), _canon(action.effect(s2, **f2))

    def clean(pre: ServerState, post: ServerState) -> Any:
        return z3.And(*[_b(i.pred((post,), z3.Int("inv.t"))) for i in invs],
                      *[_b(p.pred(pre, post, z3.Int("step.t"))) for p in props])

    same = []
    for f in SCALAR_FIELDS:
        a, b = _b(getattr(post1, f)), _b(getattr(post2, f))
        same.append(b == (a + d if f in POS_FIELDS else a))
    claim = z3.Implies(
        z3.And(_hyp(s1, p1, pos_params), _hyp(s2, p2, pos_params), g1, clean(s1, post1)),
        z3.And(g2, clean(s2, post2), *same))
    solver = z3.Solver()
    solver.set("timeout", 20_000)
    solver.add(z3.Not(claim))
    return bool(solver.check() == z3.unsat)



# ---------------------------------------------------------------------------------------
# States: a shape is a state with its positions as offsets from the WAL's last index.

def shift(t: Any, d: int) -> Any:
    """The ``Scalars`` tuple ``t`` with every position field moved by ``d``."""
    return t._replace(wal_last_index=t.wal_last_index + d,
                      ghost_last_index=t.ghost_last_index + d)


def floor_of(t: Any, others: Iterable[int]) -> int:
    """What every position must exceed for H: each other integer of the state ``t`` and of
    the parameters (``others``) plus MARGIN, and MARGIN itself."""
    return int(max(MARGIN, *(getattr(t, f) + MARGIN for f in OTHER_FIELDS),
                   *(o + MARGIN for o in others)))


# ---------------------------------------------------------------------------------------
# The writer's canonical bytes. A line in another layout is simply not abstracted.

# A log_append's and a commit's args as the writer lays them out, positions in canonical
# digits (what int() and a JSON decoder read alike: no sign, space or leading zero; ``\d``
# is ASCII in a bytes pattern). One C call splits and validates a line.
APPEND_ARGS: Final = re.compile(
    rb'\{"first_index":(0|[1-9]\d*),("op_term":[^,]*),"op_index":(0|[1-9]\d*),(.*)', re.S)
COMMIT_ARGS: Final = re.compile(rb'\{"index":(0|[1-9]\d*),(.*)', re.S)
WAL_MARK: Final = b'"wal":{"location":"LIVE","last_opid":['


def digits(b: bytes) -> int | None:
    """A JSON non-negative integer in canonical form (no sign, space or leading zero), as
    int() and a JSON decoder both read it; None for anything else."""
    if not b.isdigit() or (b[0] == 48 and len(b) > 1):
        return None
    return int(b)


def split_append(args_b: bytes) -> tuple[int, int, bytes, bytes] | None:
    """A log_append's args as (first_index, op_index, the op_term field, the rest)."""
    m = APPEND_ARGS.match(args_b)
    if m is None:
        return None
    first, term, last, rest = m.groups()
    return int(first), int(last), term, rest


def split_commit(args_b: bytes) -> tuple[int, bytes] | None:
    """A commit's args as (index, the rest)."""
    m = COMMIT_ARGS.match(args_b)
    return None if m is None else (int(m[1]), m[2])


def split_state(st_b: bytes, wal_last_index: int) -> tuple[bytes, bytes] | None:
    """A reported state around the digits of its WAL's last index: (before, after), when
    the state names one WAL, live, whose last_opid closes its object and whose last index
    is ``wal_last_index`` in canonical digits. Then ``before + digits(i) + after`` is the
    same state with the WAL ending at ``i`` and nothing else changed."""
    if st_b.count(b'"wal"') != 1:
        return None
    at = st_b.find(WAL_MARK)
    if at < 0:
        return None
    comma = st_b.find(b",", at + len(WAL_MARK))
    end = st_b.find(b"]}", comma)
    if comma < 0 or end < 0 or digits(st_b[at + len(WAL_MARK):comma]) is None or \
            digits(st_b[comma + 1:end]) != wal_last_index:
        return None
    return st_b[:comma + 1], st_b[end:]


class ShapeOutcome:
    """The memoised clean outcome of an append or a commit, for every key whose state has
    the shape and every position of the step (``KeyState.pos`` = the WAL's last index
    before it) where H holds: ``pos > need``. The reported state must be ``pre + digits(pos
    + obs_off) + suf``; after it the key's shape is ``post`` and its WAL ends at ``pos +
    dpos``. The rest is what the per-key checks need (``Outcome``'s fields by the same
    names; ``one``: the batch is entries of op_term only after one of op_term)."""

    __slots__ = ("a", "branch", "dpos", "event", "fast", "hits", "lead", "need", "node_term",
                 "obs_off", "obs_term", "one", "post", "pre", "prev", "suf", "terms")

    def __init__(self, event: str, branch: str, post: int, dpos: int, need: int,
                 pre: bytes, suf: bytes, obs_off: int, fast: int, a: int, lead: bool,
                 obs_term: int, node_term: int) -> None:
        self.event = event
        self.branch = branch
        self.post = post
        self.dpos = dpos
        self.need = need
        self.pre = pre
        self.suf = suf
        self.obs_off = obs_off
        self.fast = fast
        self.a = a
        self.lead = lead
        self.obs_term = obs_term
        self.node_term = node_term
        self.hits = 0
        self.prev: int | None = None
        self.terms: tuple[tuple[int, int], ...] | None = None
        self.one = False
