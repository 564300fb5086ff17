"""A Hypothesis state machine over a RaftCluster: every fault the harness can inject,
in any order, with Raft's safety properties checked after every step.

The machine is the adversary Raft is designed against: it delivers messages in any order
(any message of the queue, not only the first), loses them, duplicates them, holds what
one node sent and releases it late (after everything sent meanwhile), cuts the network into
two sides (or isolates the leader) and heals it, crashes nodes between and *inside*
Readies (after k effects of the Ready's plan: durable writes, trace facts, messages sent;
the rest is lost; and, on purpose, a leader whose appends left before its own append of
them was durable), restarts them from their durable state with their state machine at 0
or at the last flush, and meanwhile asks whatever node it likes to propose, change the
configuration (with the right compare-and-set index or a stale one), transfer
leadership, step down, serve a read, campaign, or just let time pass.

What is checked (impl/testing/raft.py, SafetyChecker, after every input to any core):
at most one leader per term over all time; log matching, incrementally (one entry and one
predecessor per OpId, ever) and pairwise between all current logs; leader completeness (an
entry seen committed in term t is in the log of every leader of a term >= t);
state-machine safety (one entry per applied index, over all nodes and restarts); every
write acknowledged to its client is in every later leader's log; per node, terms never go
back and at most one vote per term, durably across crashes; every ReadIndex released is at
least the highest commit index reached before the read was asked; after a Ready the disk
holds exactly what the core believes; no core reports an anomaly.

Election timeouts are short (4 ticks, heartbeat every tick) so that elections, check-quorum
step-downs and transfer timeouts happen within a few dozen steps; every example starts from
an elected leader. test_mutants.py shows which seeded bugs this machine finds, and within
what budget; the ones that need a long, precise sequence (figure 8, a stale read, a delayed
message of a deposed leader) are caught by the scripted scenarios instead.

``rows_checked`` (below) wraps the transition table so that a run also checks that every
row emits only the trace facts it declares.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import cast

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from revivify.impl.consensus.core import RAFT_TRANSITIONS, Options, RaftCore, Role, Transition
from revivify.impl.consensus.errors import ConsensusError
from revivify.impl.consensus.messages import NON_VOTER, VOTER, ChangeKind, Message
from revivify.impl.testing.raft import NodeDown, RaftCluster, after_appends_left

OPTIONS = Options(election_ticks=4, heartbeat_ticks=1)
# who: an index into the node list (half the time), or a negative number for "a leader, if
# there is one": -1 the leader of the highest term, -2 the lowest (a deposed one that does
# not know it yet, when there are two)
who = st.one_of(st.integers(-2, -1), st.integers(0, 5))
# after an input: "keep" leaves the output in the core, "send" runs the node's shell once
# (messages enter the network, for the network faults to work on), "settle" runs the
# cluster until quiet (progress)
settle = st.sampled_from(["keep", "send", "send", "settle"])
positions = st.integers(0, 1 << 16)
crash_points = st.one_of(st.none(), st.integers(0, 6))  # effects of the plan
# weighted action lists (an action listed twice is twice as likely)
CLIENT_ACTIONS = ("propose", "propose", "propose", "propose", "propose", "read", "read",
                  "read", "config", "config", "transfer", "step_down", "campaign")
NETWORK_ACTIONS = ("stabilize", "deliver", "deliver", "deliver", "round", "drop",
                   "duplicate", "swap", "hold", "release")
FAULT_ACTIONS = ("heal", "restart", "restart", "flush", "partition", "isolate_leader",
                 "crash")


class RaftMachine(RuleBasedStateMachine):
    """Five rules (time, clients, network, faults, the shell), each choosing among its
    actions from a weighted list: the weights, not Hypothesis's uniform choice of rule,
    decide how often a write or a crash happens. Lists start with their most benign action,
    which is where Hypothesis shrinks to."""

    def __init__(self) -> None:
        super().__init__()
        self.c = RaftCluster(options=OPTIONS, max_rounds=400)
        self.writes = 0
        self.reads = 0

    # ------------------------------------------------------------------ helpers

    def node(self, k: int) -> str:
        if k < 0:
            leaders = sorted(self.c.leaders(), key=lambda u: self.c.core(u).term)
            if leaders:
                return leaders[-1] if k == -1 else leaders[0]
            k = 0
        uuids = self.c.uuids()
        return uuids[k % len(uuids)]

    def live(self, k: int) -> str | None:
        u = self.node(k)
        return u if self.c.node(u).up else None

    def attempt(self, action: Callable[[], object], then: str, u: str | None = None) -> None:
        """Run an input to node ``u`` (None: every node), then what ``then`` says; the
        core's typed refusals and inputs to a node that is down are outcomes, not
        failures."""
        with contextlib.suppress(ConsensusError, NodeDown):
            action()
        if then == "settle":
            self.c.stabilize()
        elif then == "send":
            if u is None:
                self.c.process_all()
            elif self.c.node(u).up:
                self.c.process_ready(u)

    # ------------------------------------------------------------------ setup

    @initialize(n=st.integers(3, 5), seed=st.integers(0, 1 << 16))
    def setup(self, n: int, seed: int) -> None:
        self.c.seed = seed
        self.c.add_nodes(n)
        self.c.add_nodes(1, join=True)  # a server ready to be added
        self.c.campaign("1")  # start from a healthy cluster: node 1 leads term 1
        self.c.stabilize()

    # ------------------------------------------------------------------ rules

    @rule(k=who, everyone=st.booleans(), ticks=st.integers(1, 9), settle=settle)
    def time(self, k: int, everyone: bool, ticks: int, settle: str) -> None:
        """Ticks for one node, or for all: elections, heartbeats, check-quorum, timeouts."""
        if everyone:
            self.attempt(lambda: self.c.tick_all(ticks), settle)
            return
        u = self.live(k)
        if u is not None:
            self.attempt(lambda: self.c.tick(u, ticks), settle, u)

    @rule(action=st.sampled_from(CLIENT_ACTIONS), k=who, member=who,
          kind=st.sampled_from(["ADD", "REMOVE", "CHANGE_ROLE"]), non_voter=st.booleans(),
          promote=st.booleans(), stale=st.integers(0, 4), settle=settle)
    def client(self, action: str, k: int, member: int, kind: str, non_voter: bool,
               promote: bool, stale: int, settle: str) -> None:
        u = self.live(k)
        if u is None:
            return
        c = self.c
        if action == "propose":
            self.writes += 1
            data = f"w{self.writes}".encode()
            self.attempt(lambda: c.propose(u, data), settle, u)
        elif action == "read":
            self.reads += 1
            rid = self.reads
            self.attempt(lambda: c.read_index(u, rid), settle, u)
        elif action == "config":
            cas = c.core(u).committed_config.opid_index
            if stale == 0:  # now and then a stale or made-up compare-and-set index
                cas = cas - 1 if cas else cas + 2
            t = self.node(member)
            assert kind in ("ADD", "REMOVE", "CHANGE_ROLE")
            change_kind = cast(ChangeKind, kind)
            self.attempt(lambda: c.change_config(
                u, change_kind, t, cas=cas, member_type=NON_VOTER if non_voter else VOTER,
                promote=promote), settle, u)
        elif action == "transfer":
            t = self.node(member)
            self.attempt(lambda: c.transfer(u, t), settle, u)
        elif action == "step_down":
            self.attempt(lambda: c.step_down(u), settle, u)
        else:
            assert action == "campaign"
            self.attempt(lambda: c.campaign(u), settle, u)

    @rule(action=st.sampled_from(NETWORK_ACTIONS), i=positions, j=positions,
          then_ready=st.booleans())
    def network(self, action: str, i: int, j: int, then_ready: bool) -> None:
        c = self.c
        if action == "stabilize":
            c.stabilize()
        elif action == "round":
            c.round()
        elif action == "release":
            c.release()
        elif not c.queue:
            return
        elif action == "deliver":  # any message of the queue: a reordering
            m = c.deliver_at(i % len(c.queue))
            if then_ready and c.node(m.dest).up:
                c.process_ready(m.dest)
        elif action == "drop":
            c.drop(i % len(c.queue))
        elif action == "duplicate":
            c.duplicate(i % len(c.queue))
        elif action == "hold":  # a slow link: what one node sends now arrives late
            c.hold(src=c.queue[i % len(c.queue)].src)
        else:
            assert action == "swap"
            c.swap(i % len(c.queue), j % len(c.queue))

    @rule(action=st.sampled_from(FAULT_ACTIONS), k=who, mask=st.integers(1, (1 << 6) - 2),
          after=crash_points, replay=st.booleans())
    def fault(self, action: str, k: int, mask: int, after: int | None, replay: bool) -> None:
        c = self.c
        if action == "heal":
            c.heal()
        elif action == "restart":
            down = [u for u in c.uuids() if not c.node(u).up]
            if down:
                c.restart(down[k % len(down)], applied="zero" if replay else "flushed")
        elif action == "flush":
            u = self.live(k)
            if u is not None:
                c.flush(u)
        elif action == "partition":
            uuids = c.uuids()
            side = [u for b, u in enumerate(uuids) if mask >> b & 1]
            rest = [u for u in uuids if u not in side]
            if side and rest:
                c.partition(side, rest)
        elif action == "isolate_leader":  # the leader, maybe with one follower, on a
            leader = c.leader()            # minority side (Jepsen's partition-leader)
            if leader is not None:
                others = [u for u in c.uuids() if u != leader]
                side = [leader] + ([others[k % len(others)]] if mask & 1 else [])
                c.partition(side, [u for u in others if u not in side])
        else:
            assert action == "crash"
            u = self.live(k)
            if u is not None and len(c.up()) > 1:
                c.crash(u, after_effects=after)  # after=k: inside its pending Ready

    # How often crash_mid_append reached its state, over all instances (a test reads it).
    mid_append_crashes = 0

    @rule(data=st.binary(min_size=1, max_size=3))
    def crash_mid_append(self, data: bytes) -> None:
        """The leader writes, its AppendRequests leave, and it crashes before its own WAL
        append of the same entries is durable (plan.py rule 3): the followers may hold
        entries their leader lost, an ordinary uncommitted suffix that safety must
        survive."""
        c = self.c
        leader = c.leader()
        if leader is None or len(c.up()) < 2:
            return
        with contextlib.suppress(ConsensusError):
            c.propose(leader, data)
        self.writes += 1
        if c.process_ready(leader, crash_after=after_appends_left) and not c.node(leader).up:
            RaftMachine.mid_append_crashes += 1

    @rule(k=who)
    def process_ready(self, k: int) -> None:
        """The shell of one node executes one Ready (output may have piled up)."""
        u = self.live(k)
        if u is not None:
            self.c.process_ready(u)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def safe(self) -> None:
        # (the checker already ran after every input; this adds the pairwise log check
        # after steps that end between two rounds)
        self.c.check()
        self.c.take_output()  # the machine does not keep the transcript

    def teardown(self) -> None:
        # a last quiet period must end quietly: no livelock, and still safe
        if self.c.nodes:
            self.c.heal()
            self.c.release()
            self.c.stabilize()
            self.c.check()


# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def rows_checked() -> Iterator[list[str]]:
    """Wrap every row so that the facts its handler emits are checked against the row's
    declared ``facts``; yields the list of mismatches found."""
    problems: list[str] = []
    saved = dict(RAFT_TRANSITIONS)

    def wrap(key: tuple[Role, type], row: Transition) -> Callable[[RaftCore, Message | None],
                                                                  None]:
        def handler(c: RaftCore, m: Message | None) -> None:
            before = {id(s) for s in c._steps}
            row.handler(c, m)
            emitted = {s.fact.event for s in c._steps if id(s) not in before}
            if not emitted <= set(row.facts):
                problems.append(f"{key[0].name}/{key[1].__name__} emitted {sorted(emitted)}, "
                                f"declares {list(row.facts)}")
        return handler

    for key, row in saved.items():
        RAFT_TRANSITIONS[key] = Transition(wrap(key, row), row.facts)
    try:
        yield problems
    finally:
        RAFT_TRANSITIONS.update(saved)


__all__ = ["OPTIONS", "RaftMachine", "rows_checked"]
