"""plan(ready): the one order in which shells execute a Ready (impl/consensus/plan.py).

``violations`` below restates the plan's rules as a checker of any order of effects, so the
same function condemns the order the tablet server's shell used before (every
AppendRequest sent before any step, which let a new leader's first append leave before its
become_leader fact was traced: the trace checker's CausalityViolation AppendAfterLeader)
and accepts plan()'s, on hand-picked batches and on every batch of Hypothesis runs of the
Raft state machine. Then: a leader that crashes after its appends left and before its own
WAL append was durable leaves a cluster that stays safe.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from raft_machine import RaftMachine

from revivify.impl.consensus import plan as plan_mod
from revivify.impl.consensus.core import Options, Ready
from revivify.impl.consensus.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    VoteResponse,
)
from revivify.impl.consensus.plan import (
    Apply,
    PersistStep,
    PlanEffect,
    Release,
    Send,
    TraceStep,
    describe,
    may_overtake,
    plan,
)
from revivify.impl.testing import raft as harness
from revivify.impl.testing.raft import RaftCluster, after_appends_left


def violations(rd: Ready, effects: Sequence[PlanEffect]) -> list[str]:
    """Every way ``effects`` breaks the rules of executing ``rd`` (empty: a legal order)."""
    out: list[str] = []
    traced: set[int] = set()  # indexes of the steps traced so far
    persisted: set[int] = set()
    index = {id(s): k for k, s in enumerate(rd.steps)}
    sent: list[Message] = []
    for pos, e in enumerate(effects):
        if isinstance(e, PersistStep):
            k = index[id(e.step)]
            if any(j not in traced for j in range(k)):
                out.append(f"{pos}: persist of step {k} before earlier steps were traced")
            persisted.add(k)
        elif isinstance(e, TraceStep):
            k = index[id(e.step)]
            durable = e.step.cmeta is not None or bool(e.step.entries)
            if durable and k not in persisted:
                out.append(f"{pos}: trace of step {k} before its change is durable")
            if any(j not in traced for j in range(k)):
                out.append(f"{pos}: trace of step {k} out of order")
            traced.add(k)
        elif isinstance(e, Send):
            for m in e.messages:
                i = next(i for i, x in enumerate(rd.messages) if x is m)
                for j in range(rd.after_steps[i]):
                    if j not in traced and not may_overtake(m, rd.steps[j]):
                        out.append(f"{pos}: {type(m).__name__}->{m.dest} sent before step "
                                   f"{j} ({rd.steps[j].fact.event}) was traced")
                sent.append(m)
        elif isinstance(e, Apply):
            if len(traced) != len(rd.steps):
                out.append(f"{pos}: apply before every step is durable")
        else:
            assert isinstance(e, Release)
    if sorted(map(id, sent)) != sorted(map(id, rd.messages)):
        out.append("not every message sent exactly once")
    if len(traced) != len(rd.steps):
        out.append("not every step traced")
    for dest in {m.dest for m in rd.messages}:
        core_order = [id(m) for m in rd.messages if m.dest == dest]
        if [id(m) for m in sent if m.dest == dest] != core_order:
            out.append(f"messages to {dest} reordered")
    return out


def legacy_order(rd: Ready) -> list[PlanEffect]:
    """What impl/tserver/replica.py did before plan(): every AppendRequest first, then each
    step (write, trace), then the other messages, then apply and reads."""
    effects: list[PlanEffect] = []
    early = tuple(m for m in rd.messages if isinstance(m, AppendRequest))
    if early:
        effects.append(Send(early))
    for s in rd.steps:
        if s.cmeta is not None or s.entries:
            effects.append(PersistStep(s))
        effects.append(TraceStep(s))
    late = tuple(m for m in rd.messages if not isinstance(m, AppendRequest))
    if late:
        effects.append(Send(late))
    if rd.committed:
        effects.append(Apply(rd.committed))
    return effects


def take(c: RaftCluster, uuid: str) -> Ready:
    """The pending Ready of ``uuid``, executed by the harness afterwards unchanged."""
    core = c.core(uuid)
    rd = core.ready()
    # Put it back: the harness's process_ready takes core.ready() itself.
    core._steps[:0] = list(rd.steps)
    core._messages[:0] = list(rd.messages)
    core._after_steps[:0] = list(rd.after_steps)
    return rd


def elected(c: RaftCluster) -> Ready:
    """Node 1 campaigns in a 3-node cluster, up to the Ready in which it becomes leader."""
    c.add_nodes(3)
    c.campaign("1")
    for _ in range(4):  # pre-votes out, answered; votes out, answered
        c.process_all()
        c.deliver()
    assert c.core("1").is_leader()
    return take(c, "1")


def index_of(effects: Sequence[PlanEffect], pred: object) -> int:
    return next(k for k, e in enumerate(effects) if pred(e))  # type: ignore[operator]


class TestElection:
    """The bug: a new leader's first AppendRequest left before become_leader was traced."""

    def test_become_leader_is_traced_before_the_first_append_leaves(self) -> None:
        rd = elected(RaftCluster())
        effects = plan(rd)
        assert describe(effects) == [
            "trace become_leader",
            "send AppendRequest->2 AppendRequest->3",  # overtakes the leader's own append
            "persist log_append (wal 1..1)",
            "trace log_append",
        ]
        leader = index_of(effects, lambda e: isinstance(e, TraceStep)
                          and e.step.fact.event == "become_leader")
        first_send = index_of(effects, lambda e: isinstance(e, Send))
        assert leader < first_send
        assert violations(rd, effects) == []

    def test_the_old_shell_order_is_caught(self) -> None:
        rd = elected(RaftCluster())
        problems = violations(rd, legacy_order(rd))
        assert problems and all("become_leader" in p for p in problems), problems


class TestOrder:
    def test_a_vote_answer_waits_for_the_durable_traced_vote(self) -> None:
        c = RaftCluster(options=Options(pre_vote=False))
        c.add_nodes(3)
        c.campaign("1")
        c.process_ready("1")
        c.deliver(dest="2")
        rd = take(c, "2")
        effects = plan(rd)
        assert describe(effects) == ["persist vote_granted (cmeta)", "trace vote_granted",
                                     "send VoteResponse->1"]
        assert violations(rd, effects) == []

    def test_a_follower_acknowledges_only_after_its_append_is_traced(self) -> None:
        c = RaftCluster()
        c.add_nodes(3)
        c.campaign("1")
        c.stabilize()
        c.propose("1", b"a")
        c.process_ready("1")
        c.deliver(dest="2")
        rd = take(c, "2")
        effects = plan(rd)
        ack = index_of(effects, lambda e: isinstance(e, Send)
                       and isinstance(e.messages[0], AppendResponse))
        append = index_of(effects, lambda e: isinstance(e, TraceStep)
                          and e.step.fact.event == "log_append")
        assert append < ack
        assert violations(rd, effects) == []

    def test_a_config_entry_leaves_after_its_acceptance_is_traced(self) -> None:
        c = RaftCluster()
        c.add_nodes(3)
        c.add_nodes(1, join=True)
        c.campaign("1")
        c.stabilize()
        c.propose("1", b"a")
        c.change_config("1", "ADD", "4", cas=0)
        rd = take(c, "1")
        effects = plan(rd)
        # log_append(a) | config_change (a fact) | log_append(config): the appends of both
        # entries to 2 and 3 wait for the config_change fact, and overtake only the
        # config entry's own WAL append.
        assert describe(effects) == [
            "persist log_append (wal 2..2)", "trace log_append", "trace config_change",
            "send AppendRequest->2 AppendRequest->3 AppendRequest->4",
            "persist log_append (wal 3..3)", "trace log_append"]
        assert violations(rd, effects) == []

    def test_messages_to_one_destination_keep_their_order(self) -> None:
        c = RaftCluster()
        c.add_nodes(3)
        c.campaign("1")
        c.stabilize()
        core = c.core("1")
        core.propose(b"a")
        core._flush_output()  # the broadcast of a, after its append
        core.tick()
        core.tick()  # heartbeats (after the append of a: they may not overtake it)
        core.propose(b"b")  # joins a's append (group commit); its broadcast may overtake
        # that append, but not the heartbeats to the same peers sent before it
        rd = take(c, "1")
        effects = plan(rd)
        assert violations(rd, effects) == []
        to2 = [m for e in effects if isinstance(e, Send) for m in e.messages if m.dest == "2"]
        assert to2 == [m for m in rd.messages if m.dest == "2"]

    def test_apply_and_reads_come_last(self) -> None:
        c = RaftCluster()
        c.add_nodes(1)
        c.campaign("1")
        c.stabilize()
        c.propose("1", b"a")
        c.process_ready("1")  # durable: the single voter commits at advance
        c.read_index("1", 7)
        rd = take(c, "1")
        effects = plan(rd)
        kinds = [type(e).__name__ for e in effects]
        assert kinds[-2:] == ["Apply", "Release"], kinds


def test_overtaking_is_only_for_an_appends_own_entries() -> None:
    rd = elected(RaftCluster())
    noop_step = next(s for s in rd.steps if s.entries)
    fact_step = next(s for s in rd.steps if not s.entries)
    app = next(m for m in rd.messages if isinstance(m, AppendRequest))
    assert may_overtake(app, noop_step)
    assert not may_overtake(app, fact_step)
    heartbeat = AppendRequest(app.src, app.dest, app.term, app.prev_term, app.prev_index, (),
                              app.commit_index)
    assert not may_overtake(heartbeat, noop_step)
    vote = VoteResponse("1", "2", 1, True)
    assert not may_overtake(vote, noop_step)


# ---------------------------------------------------------------------------------------
# every batch of random runs


@pytest.fixture
def checked_plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Make the harness check every plan it executes; yields [batches checked]."""
    count = [0]

    def checked(rd: Ready) -> tuple[PlanEffect, ...]:
        effects = plan(rd)
        problems = violations(rd, effects)
        assert not problems, (problems, describe(effects))
        count[0] += 1
        return effects

    monkeypatch.setattr(harness, "plan", checked)
    yield count


def test_every_plan_of_random_runs_is_legal(checked_plans: list[int]) -> None:
    run_state_machine_as_test(RaftMachine, settings=settings(
        max_examples=25, stateful_step_count=30, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
    assert checked_plans[0] > 100


# ---------------------------------------------------------------------------------------
# a crash between the leader's sends and its own fsync


def test_a_leader_crashing_after_its_appends_left_keeps_the_cluster_safe() -> None:
    c = RaftCluster()
    c.add_nodes(3)
    c.campaign("1")
    c.stabilize()
    c.propose("1", b"x")
    assert c.process_ready("1", crash_after=after_appends_left)
    # The leader is down; its append of x never became durable there, but x is in flight.
    assert not c.node("1").up
    assert [e.data for e in c.node("1").durable.wal] == [b""]
    assert {m.dest for m in c.queue if isinstance(m, AppendRequest) and m.entries} == {"2", "3"}
    c.stabilize()
    for u in ("2", "3"):
        assert [e.data for e in c.core(u).log.slice(1, 9)] == [b"", b"x"]
    # The followers elect a new leader, which commits x (its no-op commits it).
    for _ in range(60):  # time passes, one tick at a time, until someone leads
        c.tick_all(1)
        c.stabilize()
        if c.leader() is not None:
            break
    new = c.leader()
    assert new in ("2", "3")
    assert c.core(new).commit_index == 3
    c.restart("1")
    c.tick(new, 2)
    c.stabilize()
    assert [e.data for e in c.core("1").log.slice(1, 9)] == [b"", b"x", b""]
    c.check()


def test_the_crash_point_exists_only_where_appends_overtake() -> None:
    c = RaftCluster()
    c.add_nodes(3)
    c.campaign("1")
    c.stabilize()
    c.propose("1", b"x")
    k = after_appends_left(plan(take(c, "1")))
    assert k is not None
    effects = plan(take(c, "1"))
    assert isinstance(effects[k - 1], Send)
    assert any(isinstance(e, PersistStep) and e.step.entries for e in effects[k:])
    # A follower's batch has none (its acknowledgements wait for its append).
    c.process_ready("1")
    c.deliver(dest="2")
    assert after_appends_left(plan(take(c, "2"))) is None


def test_plan_is_imported_by_every_shell() -> None:
    """The harness, the tablet server's replica and a tombstone's voter walk the same plan
    (not a copy of it) with the same executor."""
    import inspect

    from revivify.impl.tserver import replica
    from revivify.impl.tserver.manager import voter

    # (the modules' namespaces: the names are imported there, not re-exported)
    assert vars(harness)["plan"] is plan_mod.plan
    assert vars(harness)["dispatch"] is plan_mod.dispatch
    assert vars(replica)["walk"] is plan_mod.walk and vars(voter)["walk"] is plan_mod.walk
    assert "plan(rd)" in inspect.getsource(replica.Replica._execute)
    assert "walk(plan(rd), self)" in inspect.getsource(voter.TombstoneVoter._run)
