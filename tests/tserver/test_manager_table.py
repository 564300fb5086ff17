"""The lifecycle core's table: every (state, input) pair has a row, and every row does what
its kind promises (Hypothesis tries every pair with varied inputs): a refusal touches
nothing, a protocol error is raised only for the pairs the table lists as such, every
durable step's fact carries the state after it, and a batch's facts never skip a step the
checker's replay needs (deletion steps in order, the commit point before the roll-forward
steps)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lifecycle_script import CMETA, DURABLES, FakeReplica

from revivify.impl.tserver import api
from revivify.impl.tserver.durable import Blocks, Durable, Sb, Wal, running
from revivify.impl.tserver.manager.core import (
    INPUT_TYPES,
    LIFECYCLE_TRANSITIONS,
    PROTOCOL_ERRORS,
    BlockDownloaded,
    BlocksDone,
    Case,
    Classified,
    CmetaMerged,
    CopyBegun,
    CopyEnded,
    Copying,
    CopyStage,
    Create,
    CreateFailed,
    Creating,
    Delete,
    Deleting,
    DeletionEnded,
    Failed,
    Kind,
    LifecycleCore,
    LifecyclePersist,
    LifecycleProtocolError,
    LifecycleTrace,
    MarkedReady,
    Mode,
    Register,
    ReplicaFailed,
    ReplicaStarted,
    ReplicaStartFailed,
    Running,
    Slot,
    StartCopy,
    Starting,
    State,
    Stopped,
    Tombstoned,
    Volatile,
    VoteRecorded,
    WalDownloaded,
)

# The sample values the scenario scripts use (lifecycle_script.py).
READY = DURABLES["ready"]
TOMBSTONE = DURABLES["tombstone"]
COPYING = DURABLES["copying"]
NOTHING = DURABLES["nothing"]


def states() -> dict[Kind, list[State]]:
    """Sample states of every kind (each phase of a copy, each mode of a deletion)."""
    return {
        Kind.ABSENT: [],  # no slot
        Kind.STARTING: [Starting(Durable(Sb.READY)), Starting(Durable(Sb.DELETED))],
        Kind.CREATING: [Creating()],
        Kind.RUNNING: [Running(FakeReplica(READY))],
        Kind.FAILED: [Failed("WAL: bad checksum", attrs.evolve(READY, wal=Wal.DAMAGED),
                             hosted=False)],
        Kind.COPYING: [Copying(CopyStage.TOMBSTONING, READY, "src"),
                       Copying(CopyStage.DOWNLOADING, TOMBSTONE, "src"),
                       Copying(CopyStage.DOWNLOADING, COPYING, "src"),
                       Copying(CopyStage.DOWNLOADING, attrs.evolve(COPYING, data_state=Sb.READY,
                                                                   tombstone_last=(0, 0),
                                                                   blocks=Blocks.PRESENT), "src"),
                       Copying(CopyStage.STARTING, attrs.evolve(
                           COPYING, data_state=Sb.READY, tombstone_last=(0, 0),
                           blocks=Blocks.PRESENT), "src")],
        Kind.TOMBSTONED: [Tombstoned(TOMBSTONE)],
        Kind.DELETING: [Deleting(Mode.TOMBSTONE, READY), Deleting(Mode.DELETED, READY),
                        # its steps running (DeletionEnded comes next)
                        Deleting(Mode.TOMBSTONE, TOMBSTONE), Deleting(Mode.DELETED, NOTHING)],
    }


def inputs(state: State) -> list[Any]:
    """Sample inputs of every type that fit ``state`` where they are legal."""
    d = READY
    if isinstance(state, Starting):
        cases = [Classified(Case.READY, running(CMETA, (0, 0), None)),
                 Classified(Case.FAILED, d, "cmeta missing")]
        if state.durable.data_state is Sb.DELETED:
            cases = [Classified(Case.TOMBSTONE, TOMBSTONE),
                     Classified(Case.ROLL_FORWARD, attrs.evolve(TOMBSTONE, wal=Wal.LIVE,
                                                                wal_last=(3, 9)))]
    else:
        cases = [Classified(Case.COPYING_TO_DELETED, COPYING)]
    step_inputs = [CopyBegun(), CmetaMerged(None, CMETA, CMETA), WalDownloaded((4, 12)),
                   BlockDownloaded("b1"), BlocksDone(), MarkedReady()]
    return [
        Register(Durable(Sb.READY)), *cases,
        ReplicaStarted(FakeReplica(READY), READY, ("a", "b")),
        ReplicaStartFailed("WAL: torn", attrs.evolve(READY, wal=Wal.DAMAGED)),
        ReplicaFailed("EIO"), Create(), Create(from_master=True), CreateFailed("disk full"),
        Delete(Mode.TOMBSTONE), Delete(Mode.DELETED), Delete(Mode.TOMBSTONE, 1),
        Stopped(READY), DeletionEnded(),
        StartCopy("leader", 5, "src", Sb.DELETED, None, NOTHING),
        StartCopy("leader", 5, "src", Sb.READY, (3, 9), NOTHING),
        StartCopy("leader", 1, "src", Sb.DOES_NOT_EXIST, None, NOTHING),
        *step_inputs, CopyEnded(None), CopyEnded("source gone"),
        VoteRecorded(attrs.evolve(CMETA, current_term=4)),
    ]


def _core_with(state: State) -> LifecycleCore:
    core = LifecycleCore(max_concurrent_copies=2)
    if state.kind is not Kind.ABSENT:
        core.slots["t1"] = Slot("t1", state)
    return core


def all_cases() -> list[tuple[State, Any]]:
    from revivify.impl.tserver.manager.core import ABSENT

    out = []
    for kind, samples in states().items():
        for state in samples or [ABSENT]:
            assert state.kind is kind
            for event in inputs(state):
                out.append((state, event))
    return out


def test_every_pair_has_a_row() -> None:
    missing = [(k, t.__name__) for k in Kind for t in INPUT_TYPES
               if (k, t) not in LIFECYCLE_TRANSITIONS]
    assert not missing
    assert len(LIFECYCLE_TRANSITIONS) == len(Kind) * len(INPUT_TYPES)


def test_the_deliberate_rows() -> None:
    """A table of protocol errors would be total and useless: the rows that act (or refuse
    on purpose) are counted here, so that a row added or dropped shows in review."""
    acting = len(LIFECYCLE_TRANSITIONS) - len(PROTOCOL_ERRORS)
    assert acting == 45  # a COPYING slot's copy steps: one row per step record (six)
    assert (Kind.STARTING, StartCopy) not in PROTOCOL_ERRORS
    assert (Kind.STARTING, Delete) not in PROTOCOL_ERRORS
    assert (Kind.RUNNING, Stopped) in PROTOCOL_ERRORS


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(all_cases()))
def test_every_pair(case: tuple[State, Any]) -> None:
    state, event = case
    core = _core_with(state)
    before = core.state("t1")
    pair = (state.kind, type(event))
    if pair in PROTOCOL_ERRORS:
        with pytest.raises(LifecycleProtocolError):
            core.handle("t1", event)
        return
    try:
        batch = core.handle("t1", event)
    except AssertionError:
        # A row's precondition on the input's shape (a ROLL_FORWARD with no live WAL, a
        # copy step out of its phase): the shell never produces those; the core says so.
        return
    after = core.state("t1")
    if batch.refusal is not None:
        # A refusal changes nothing: same state, and no durable step.
        assert after == before
        assert not any(isinstance(e, LifecyclePersist) for e in batch.effects)
        assert all(isinstance(e, LifecycleTrace) and e.fact.event == "stc_reject"
                   for e in batch.effects)
    # Exactly one state: ABSENT is no slot at all.
    assert ("t1" in core.slots) == (after.kind is not Kind.ABSENT)
    _check_facts(batch.effects)


DELETE_ORDER = ["delete_create_qdir", "delete_copy_superblock", "delete_mark_deleted",
                "delete_copy_cmeta", "delete_move_wal"]


def _check_facts(effects: tuple[Any, ...]) -> None:
    """Every durable step names its fact; the deletion steps come whole and in order."""
    names = [e.fact.event for e in effects if isinstance(e, LifecyclePersist | LifecycleTrace)]
    for e in effects:
        if isinstance(e, LifecyclePersist):
            assert e.fact.event.startswith("delete_"), e
    if "delete_create_qdir" in names:
        i = names.index("delete_create_qdir")
        assert names[i:i + 5] == DELETE_ORDER, names
    if "delete_remove_cmeta" in names:
        assert names[-2:] == ["delete_remove_cmeta", "delete_remove_superblock"]
    # The voter starts only after the tombstone is whole (its WAL moved away).
    if Volatile.START_VOTER in effects and "delete_move_wal" in names:
        assert effects.index(Volatile.START_VOTER) > max(
            i for i, e in enumerate(effects)
            if isinstance(e, LifecyclePersist) and e.fact.event == "delete_move_wal")


def test_a_starting_tablet_is_refused_retryably_never_as_unknown() -> None:
    """The startup race: a STARTING tablet is TabletNotRunning(STARTING) to every call, and
    a StartTabletCopy for it is not traced (as if never received)."""
    core = LifecycleCore()
    core.handle("t1", Register(Durable(Sb.READY)))
    for event in (Delete(Mode.TOMBSTONE), StartCopy("l", 9, "s", Sb.DOES_NOT_EXIST, None,
                                                     NOTHING)):
        batch = core.handle("t1", event)
        assert isinstance(batch.refusal, api.TabletNotRunning)
        assert batch.refusal.state == "STARTING"
        assert batch.effects == ()
    assert isinstance(core.handle("t1", Create()).refusal, api.TabletAlreadyExists)


def test_the_copy_limit_throttles_new_copies_only() -> None:
    core = LifecycleCore(max_concurrent_copies=1)
    core.slots["t1"] = Slot("t1", Copying(CopyStage.DOWNLOADING, TOMBSTONE, "s"))
    core.slots["t2"] = Slot("t2", Tombstoned(TOMBSTONE))
    throttled = core.handle("t2", StartCopy("l", 9, "s", Sb.DELETED, None, NOTHING))
    assert isinstance(throttled.refusal, api.CopyRefused)
    assert throttled.refusal.reason == "THROTTLED" and throttled.effects == ()
    again = core.handle("t1", StartCopy("l", 9, "s", Sb.DELETED, None, NOTHING))
    assert isinstance(again.refusal, api.CopyRefused)
    assert again.refusal.reason == "ALREADY_IN_PROGRESS"
    assert [e.fact.event for e in again.effects if isinstance(e, LifecycleTrace)] == ["stc_reject"]
