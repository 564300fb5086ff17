"""The transition table: every (role, input) pair has a row, is reached, and never crashes.

core.RAFT_TRANSITIONS maps (Role, input type) to a handler, where an input is a tick
(core.Tick) or a message class (core.INPUTS). A pair without a row would be a
RaftProtocolError at run time, so the table must
be total: checked here statically, then dynamically by putting a core in each role and
giving it each input (the row's handler must be the one that runs).

Then Hypothesis drives one core, started in each role, with random local inputs (propose,
config changes, reads, transfers, step-downs, campaigns, ticks, Ready/advance cycles) and
random *plausible* messages from its peers: any term near its own; AppendRequests that
agree with its committed prefix and keep terms non-decreasing (what a real leader's log
looks like); AppendResponses that claim no more than the leader's log holds. The only
exceptions allowed out of the core are its typed refusals (NotLeader, ConfigChangeRefused,
TransferRefused). Each row's declared ``facts`` must cover the facts its handler emits.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from raft_machine import rows_checked

from revivify.impl.consensus.core import (
    INPUTS,
    RAFT_TRANSITIONS,
    RaftCore,
    Role,
    Tick,
    Transition,
)
from revivify.impl.consensus.errors import ConfigChangeRefused, NotLeader, TransferRefused
from revivify.impl.consensus.log import RaftLog
from revivify.impl.consensus.messages import (
    ENTRY_NOOP,
    ENTRY_WRITE,
    AppendRequest,
    AppendResponse,
    AppendStatus,
    ChangeKind,
    ConfigChange,
    Entry,
    MemberType,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from revivify.impl.testing.raft import RaftCluster, peer

REFUSALS = (NotLeader, ConfigChangeRefused, TransferRefused)


def test_the_table_is_total() -> None:
    pairs = {(role, kind) for role in Role for kind in INPUTS}
    assert set(RAFT_TRANSITIONS) == pairs
    for row in RAFT_TRANSITIONS.values():
        assert isinstance(row, Transition)


def core_in(role: Role, seed: int = 0) -> tuple[RaftCluster, RaftCore]:
    """A 3-node cluster (plus a joining node 4) whose node 1 is in ``role``."""
    c = RaftCluster(seed=seed, check=False)
    c.add_nodes(3)
    c.add_nodes(1, join=True)
    if role is Role.FOLLOWER:
        c.campaign("2")
        c.stabilize()
        c.propose("2", b"a")
        c.stabilize()
    elif role is Role.PRE_CANDIDATE:
        c.campaign("1")
    elif role is Role.TOMBSTONE:
        c.campaign("2")
        c.stabilize()
        c.propose("2", b"a")
        c.stabilize()
        old = c.core("1")
        # Node 1's replica deleted: a tombstone with its cmeta and its last logged OpId.
        c.node("1").core = RaftCore(
            me="1", term=old.term, voted_for=old.voted_for,
            committed_config=old.committed_config,
            log=RaftLog(base_term=old.log.last_term, base_index=old.log.last_index),
            applied_index=old.log.last_index, rng=random.Random(seed), tombstone=True)
    elif role is Role.CANDIDATE:
        c.campaign("1")
        c.process_ready("1")
        c.deliver()
        c.process_all()
        c.deliver()
    else:
        c.campaign("1")
        c.stabilize()
        c.propose("1", b"a")
        c.stabilize()
    core = c.core("1")
    assert core.role is role
    return c, core


def plausible(name: str, core: RaftCore) -> Message:
    """A message of type ``name`` from node 2, in node 1's term, that Raft could send."""
    t, log = core.term, core.log
    if name == "VoteRequest":
        return VoteRequest("2", "1", t, log.last_term, log.last_index)
    if name == "VoteResponse":
        return VoteResponse("2", "1", t, False, pre_vote=core.role is Role.PRE_CANDIDATE)
    if name == "AppendRequest":
        return AppendRequest("2", "1", t, log.last_term, log.last_index, (), core.commit_index)
    if name == "AppendResponse":
        return AppendResponse("2", "1", t, AppendStatus.OK, prev_index=log.last_index,
                              match_index=log.last_index, last_index=log.last_index)
    assert name == "TimeoutNow"
    return TimeoutNow("2", "1", t)


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.name)
@pytest.mark.parametrize("kind", INPUTS, ids=lambda t: t.__name__)
def test_every_pair_runs_its_row(role: Role, kind: type,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, core = core_in(role)
    name = kind.__name__
    ran: list[tuple[Role, type]] = []
    row = RAFT_TRANSITIONS[(role, kind)]

    def spy(c: RaftCore, m: Message | None) -> None:
        ran.append((c.role, kind))
        row.handler(c, m)

    monkeypatch.setitem(RAFT_TRANSITIONS, (role, kind), Transition(spy, row.facts))
    if kind is Tick:
        core.tick()
    else:
        core.step(plausible(name, core))
    assert ran == [(role, kind)]
    rd = core.ready()
    core.advance(rd)
    if (role, name) == (Role.LEADER, "AppendRequest"):
        # a second leader in one term cannot happen; the core reports it, never acts on it
        assert core.anomalies and core.role is Role.LEADER
    else:
        assert not core.anomalies


# ---------------------------------------------------------------------------------------
# random inputs in every role


@st.composite
def append_request(draw: st.DrawFn, core: RaftCore) -> AppendRequest:
    log = core.log
    term = draw(st.sampled_from([core.term] * 3 + [max(0, core.term - 1), core.term + 1]))
    prev = draw(st.integers(log.base_index, log.last_index))
    prev_term = log.term_at(prev) or 0
    if draw(st.integers(0, 4)) == 0 and prev > core.commit_index:
        # maybe wrong: a refusal (only above the commit index: at or below it every leader
        # holds the same entries as this core, and the core asserts so)
        prev_term = draw(st.integers(0, term))
    entries: list[Entry] = []
    last_term = prev_term
    for index in range(prev + 1, prev + 1 + draw(st.integers(0, 3))):
        if index <= core.commit_index:
            e = log.entry(index)  # a real leader agrees with everything committed
        else:
            e = Entry(draw(st.integers(last_term, max(last_term, term))), index,
                      draw(st.sampled_from([ENTRY_NOOP, ENTRY_WRITE])), b"z")
        entries.append(e)
        last_term = e.term
    if last_term > term:
        term = last_term
    commit = draw(st.integers(0, prev + len(entries)))
    src = draw(st.sampled_from(["2", "3"]))
    return AppendRequest(src, "1", term, prev_term, prev, tuple(entries), commit,
                         read_ctx=draw(st.integers(0, 3)))


@st.composite
def message(draw: st.DrawFn, core: RaftCore) -> Message:
    src = draw(st.sampled_from(["2", "3", "4"]))
    # mostly the core's own term, so that the core stays in its role for a while
    term = draw(st.sampled_from([core.term] * 3 + [max(0, core.term - 1), core.term + 1,
                                                   core.term + 2]))
    last = core.log.last_index
    kind = draw(st.sampled_from(INPUTS[1:])).__name__
    if kind == "VoteRequest":
        if draw(st.booleans()):  # a candidate at least as up to date as this core
            lt, li = max(core.log.last_term, min(term, core.log.last_term + 1)), last
        else:
            lt, li = draw(st.integers(0, term)), draw(st.integers(0, last + 2))
        return VoteRequest(src, "1", term, lt, li,
                           pre_vote=draw(st.booleans()), ignore_lease=draw(st.booleans()))
    if kind == "VoteResponse":
        return VoteResponse(src, "1", term, draw(st.booleans()), pre_vote=draw(st.booleans()))
    if kind == "AppendRequest":
        return draw(append_request(core))
    if kind == "AppendResponse":
        status = draw(st.sampled_from(list(AppendStatus)))
        ok = status is AppendStatus.OK
        return AppendResponse(src, "1", term, status, prev_index=draw(st.integers(0, last)),
                              match_index=draw(st.integers(0, last)),
                              last_index=draw(st.integers(0, last + 2)),
                              conflict_term=0 if ok else draw(st.integers(0, term)),
                              conflict_index=0 if ok else draw(st.integers(0, last + 1)),
                              read_ctx=draw(st.integers(0, 3)))
    return TimeoutNow(src, "1", term)


# local inputs, weighted so that a core stays a while in the role it started in
LOCAL = ("tick", "tick", "tick", "ready", "ready", "ready", "propose", "propose", "change",
         "change", "read", "read", "ticks", "transfer", "step_down", "campaign")


def local_input(core: RaftCore, what: str, data: st.DataObject) -> None:
    if what == "tick":
        core.tick()
    elif what == "ticks":
        for _ in range(data.draw(st.integers(1, 12))):
            core.tick()
    elif what == "ready":
        core.advance(core.ready())
    elif what == "propose":
        core.propose(b"p")
    elif what == "change":
        kinds: list[ChangeKind] = ["ADD", "REMOVE", "CHANGE_ROLE"]
        member_types: list[MemberType] = ["VOTER", "NON_VOTER"]
        kind = data.draw(st.sampled_from(kinds))
        who = data.draw(st.sampled_from(["1", "2", "3", "4"]))
        mt = data.draw(st.sampled_from(member_types))
        cas = data.draw(st.sampled_from([core.committed_config.opid_index, 0, 7]))
        core.propose_config_change(ConfigChange(kind, peer(who, mt, data.draw(st.booleans()))),
                                   cas)
    elif what == "read":
        core.read_index(data.draw(st.integers(1, 5)))
    elif what == "transfer":
        core.transfer_leadership(data.draw(st.sampled_from(["1", "2", "3", "4"])))
    elif what == "step_down":
        core.step_down()
    else:
        core.campaign()


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.name)
@settings(max_examples=60)
@given(seed=st.integers(0, 3), data=st.data())
def test_random_inputs_in_every_role(role: Role, seed: int, data: st.DataObject) -> None:
    _, core = core_in(role, seed)
    with rows_checked() as problems:
        for _ in range(data.draw(st.integers(1, 30), label="inputs")):
            try:
                if data.draw(st.booleans()):
                    core.step(data.draw(message(core)))
                else:
                    local_input(core, data.draw(st.sampled_from(LOCAL)), data)
            except REFUSALS:
                pass
            assert not problems, problems
        core.advance(core.ready())
    core.log.check()
    # a forged "second leader" (an AppendRequest of the leader's own term from a peer) is
    # the only way to raise an anomaly here; anything else would be a bug
    assert all("two leaders" in a for a in core.anomalies)


def test_the_table_is_restored_after_checking() -> None:
    before = dict(RAFT_TRANSITIONS)
    with rows_checked():
        assert before != RAFT_TRANSITIONS
    assert before == RAFT_TRANSITIONS


def test_a_leader_granting_a_transfer_vote_declares_it() -> None:
    """Regression: the LEADER/VoteRequest row declared only vote_denied, but a vote request
    of a higher term from a leadership transfer (ignore_lease) reaches it while the core is
    still LEADER, and is granted."""
    _, core = core_in(Role.LEADER)
    with rows_checked() as problems:
        core.step(VoteRequest("2", "1", core.term + 1, core.term, core.log.last_index,
                              ignore_lease=True))
    assert not problems
    assert core.role is Role.FOLLOWER and core.voted_for == "2"
