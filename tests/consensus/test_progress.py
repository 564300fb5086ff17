"""Flow control: the leader's Progress per peer (impl/consensus/progress.py), and has_ready.

The table first (every pair of states tried, only the listed ones allowed), then the
window (count and bytes), then the behaviour in a cluster: one probe at a time, a bounded
pipeline, a late refusal ignored instead of moving ``next`` back a second time, a
TOMBSTONED status (not a message text) asking for a copy. Last, ``has_ready()`` changes
nothing: asked any number of times between inputs, the next ``ready()`` is the same.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revivify.impl.consensus import progress as progress_mod
from revivify.impl.consensus.core import Options, RaftCore, Role
from revivify.impl.consensus.errors import ConsensusError
from revivify.impl.consensus.messages import AppendRequest, AppendResponse, AppendStatus
from revivify.impl.consensus.progress import (
    PROGRESS_TRANSITIONS,
    Inflights,
    Progress,
    ProgressState,
)
from revivify.impl.testing.raft import RaftCluster

P, R, C = ProgressState.PROBE, ProgressState.REPLICATE, ProgressState.NEEDS_COPY


def fresh(state: ProgressState, *, count: int = 4, size: int = 100) -> Progress:
    pr = Progress(Inflights(count, size), match=3, next=4)
    if state is R:
        pr.become_replicate()
    elif state is C:
        pr.become_needs_copy("READY")
    assert pr.state is state
    return pr


class TestTable:
    @pytest.mark.parametrize("start", list(ProgressState), ids=lambda s: s.name)
    @pytest.mark.parametrize("end", list(ProgressState), ids=lambda s: s.name)
    def test_every_pair_is_allowed_exactly_when_listed(self, start: ProgressState,
                                                       end: ProgressState) -> None:
        pr = fresh(start)
        go = {P: lambda: pr.become_probe(9), R: pr.become_replicate,
              C: lambda: pr.become_needs_copy("DELETED")}[end]
        if (start, end) in PROGRESS_TRANSITIONS:
            go()
            assert pr.state is end
            pr.check()
        else:
            with pytest.raises(AssertionError, match="no progress transition"):
                go()

    def test_the_table_lets_no_state_be_a_dead_end(self) -> None:
        for s in ProgressState:
            assert any(a is s and b is not s for a, b in PROGRESS_TRANSITIONS)

    def test_probe_never_moves_below_match(self) -> None:
        pr = fresh(R)
        pr.become_probe(1)
        assert pr.next == pr.match + 1


class TestInflights:
    def test_count_bound(self) -> None:
        w = Inflights(2, 1 << 20)
        w.add(5, 1)
        assert not w.full()
        w.add(7, 1)
        assert w.full()
        with pytest.raises(AssertionError):
            w.add(9, 1)
        w.free_le(5)
        assert len(w) == 1 and not w.full()

    def test_bytes_are_a_soft_cap(self) -> None:
        w = Inflights(10, 10)
        w.add(1, 4)
        w.add(2, 4)
        assert not w.full()
        w.add(3, 40)  # crosses the cap: allowed once, then full
        assert w.full() and w.bytes == 48
        w.free_le(2)
        assert w.bytes == 40 and w.full()
        w.free_le(3)
        assert w.bytes == 0 and not w.full()

    def test_indexes_enter_in_order(self) -> None:
        w = Inflights(4, 100)
        w.add(5, 1)
        with pytest.raises(AssertionError):
            w.add(5, 1)

    def test_progress_rejects_a_send_while_paused(self) -> None:
        pr = fresh(P)
        pr.sent_entries(4, 1)
        assert pr.is_paused() and pr.next == 4  # a probe does not move next
        with pytest.raises(AssertionError):
            pr.sent_entries(4, 1)


# ---------------------------------------------------------------------------------------
# in a cluster


def cluster(**options: int) -> RaftCluster:
    c = RaftCluster(options=Options(**options))  # type: ignore[arg-type]
    c.add_nodes(3)
    c.campaign("1")
    c.stabilize()
    return c


def appends_to(c: RaftCluster, dest: str) -> list[AppendRequest]:
    return [m for m in [*c.queue, *c.held]
            if isinstance(m, AppendRequest) and m.dest == dest and m.entries]


def test_a_new_leader_probes_then_replicates() -> None:
    c = RaftCluster()
    c.add_nodes(3)
    c.campaign("1")
    while not c.core("1").is_leader():
        c.round()
    leader = c.core("1")
    assert all(p.state is P and not p.probe_sent for u, p in leader.progress.items()
               if u != "1")
    c.process_ready("1")  # the no-op goes out: the first probe
    assert all(p.state is P and p.probe_sent and p.next == 1
               for u, p in leader.progress.items() if u != "1")
    c.stabilize()
    assert all(p.state is R and p.match == 1 and p.next == 2
               for u, p in leader.progress.items() if u != "1")


def test_the_window_bounds_appends_in_flight_by_count() -> None:
    c = cluster(max_inflight_appends=3, max_append_entries=1)
    c.hold(dest="2")  # a slow link: nothing reaches 2 for now
    for k in range(10):
        c.propose("1", f"w{k}".encode())
        c.process_ready("1")
    c.hold(dest="2")
    assert len(appends_to(c, "2")) == 3
    pr = c.core("1").progress["2"]
    assert pr.state is R and pr.is_paused() and len(pr.inflights) == 3
    c.release()
    c.stabilize()
    assert c.core("2").log.last_index == 11  # caught up once acknowledgements came back
    assert len(c.core("1").progress["2"].inflights) == 0


def test_the_window_bounds_appends_in_flight_by_bytes() -> None:
    c = cluster(max_inflight_bytes=10, max_append_entries=1)
    c.hold(dest="2")
    for _ in range(6):
        c.propose("1", b"abcd")
        c.process_ready("1")
    c.hold(dest="2")
    assert len(appends_to(c, "2")) == 3  # 4 + 4 + 4 bytes: the third crosses the cap
    c.release()
    c.stabilize()
    assert c.core("2").log.last_index == 7


def test_a_probe_goes_one_at_a_time() -> None:
    c = cluster()
    c.partition(["1", "2"], ["3"])
    for k in range(5):
        c.propose("1", f"w{k}".encode())
        c.stabilize()
    c.heal()
    c.tick("1", 2)  # a heartbeat: 3 refuses (it lacks the entries), the leader probes
    c.process_ready("1")
    c.deliver(dest="3")
    c.process_ready("3")
    c.deliver(dest="1")
    pr = c.core("1").progress["3"]
    assert pr.state is P and pr.probe_sent
    c.propose("1", b"more")
    c.process_ready("1")
    # Proposals do not add appends for a peer being probed: one is out, unanswered.
    assert len(appends_to(c, "3")) == 1
    c.stabilize()
    assert c.core("3").log.last_index == c.core("1").log.last_index
    assert c.core("1").progress["3"].state is R


def test_a_late_refusal_does_not_move_next_back_again() -> None:
    c = cluster()
    c.partition(["1", "2"], ["3"])
    for k in range(3):
        c.propose("1", f"w{k}".encode())
        c.stabilize()
    c.heal()
    c.tick("1", 2)
    c.process_ready("1")
    c.deliver(dest="3")
    c.process_ready("3")
    refusal = next(m for m in c.queue if isinstance(m, AppendResponse) and m.src == "3")
    assert refusal.status is AppendStatus.LOG_MISMATCH and refusal.prev_index == 4
    c.duplicate(c.queue.index(refusal))  # the network delivers it twice, the copy late
    c.deliver(count=1, dest="1")
    c.stabilize()  # (the copy is delivered too: see below)
    assert c.core("3").log.last_index == 4
    leader = c.core("1")
    before = (leader.progress["3"].state, leader.progress["3"].next)
    assert before == (R, 5)
    # Delivered again now, when the leader has moved past index 4 for peer 3.
    leader.step(refusal)
    assert (leader.progress["3"].state, leader.progress["3"].next) == before
    assert "stale LOG_MISMATCH for 4" in leader.dropped[-1]


def test_tombstoned_is_a_status_and_asks_for_a_copy() -> None:
    c = cluster()
    leader = c.core("1")
    pr = leader.progress["2"]
    # A tombstone answers the leader's next append with the TOMBSTONED status.
    leader.step(AppendResponse("2", "1", leader.term, AppendStatus.TOMBSTONED,
                               prev_index=pr.next - 1, last_index=0, detail="anything"))
    peer = next(p for p in leader.status().peers if p.uuid == "2")
    assert peer.needs_copy and peer.state is C and peer.copy_expected == "DELETED"
    # A late TOMBSTONED for a position 3 has acknowledged is ignored.
    leader.step(AppendResponse("3", "1", leader.term, AppendStatus.TOMBSTONED,
                               prev_index=0, last_index=0))
    assert leader.progress["3"].state is R


def test_tombstoned_replica_answers_with_the_status() -> None:
    import random

    from revivify.impl.consensus.log import RaftLog

    c = cluster()
    old = c.core("2")
    tomb = RaftCore(me="2", term=old.term, voted_for=old.voted_for,
                    committed_config=old.committed_config,
                    log=RaftLog(base_term=old.log.last_term, base_index=old.log.last_index),
                    applied_index=old.log.last_index, rng=random.Random(0), tombstone=True)
    assert tomb.role is Role.TOMBSTONE
    tomb.step(AppendRequest("1", "2", old.term, 1, 1, (), 1))
    (answer,) = tomb.ready().messages
    assert isinstance(answer, AppendResponse)
    assert answer.status is AppendStatus.TOMBSTONED and answer.prev_index == 1


# ---------------------------------------------------------------------------------------
# has_ready() is pure


INPUTS = ("propose", "propose", "read", "tick", "deliver", "ready", "has_ready")


@settings(max_examples=80, deadline=None)
@given(script=st.lists(st.tuples(st.sampled_from(INPUTS), st.integers(0, 7)), max_size=25),
       asks=st.lists(st.integers(0, 3), min_size=25, max_size=25))
def test_has_ready_changes_nothing(script: list[tuple[str, int]], asks: list[int]) -> None:
    """Two copies of a leader get the same inputs; one is asked has_ready() any number of
    times between them. Every ready() of both is the same, and has_ready() says whether
    it is empty."""
    c = cluster()
    c.propose("1", b"a")
    c.process_ready("1")
    c.deliver()
    a = c.core("1")
    b = copy.deepcopy(a)
    inbox = [m for m in c.queue if m.dest == "1"]

    def both(fn: Callable[[RaftCore], object]) -> None:
        for core in (a, b):
            with contextlib.suppress(ConsensusError):
                fn(core)

    for (what, arg), n in zip(script, asks, strict=False):
        for _ in range(n):
            a.has_ready()
        if what == "propose":
            both(functools.partial(RaftCore.propose, data=b"p%d" % arg))
        elif what == "read":
            both(functools.partial(RaftCore.read_index, request_id=arg))
        elif what == "tick":
            both(RaftCore.tick)
        elif what == "deliver" and inbox:
            both(functools.partial(RaftCore.step, message=inbox[arg % len(inbox)]))
        elif what == "ready":
            expect = a.has_ready()
            ra, rb = a.ready(), b.ready()
            assert ra == rb
            assert expect == (not ra.is_empty())
            a.advance(ra)
            b.advance(rb)
        else:
            assert a.has_ready() == b.has_ready()
    expect = a.has_ready()
    ra, rb = a.ready(), b.ready()
    assert ra == rb and expect == (not ra.is_empty())


def test_has_ready_does_not_broadcast_early() -> None:
    """Regression: has_ready() used to run the broadcast of pending proposals, so a
    proposal made after it went out in an append of its own (and a read queued after it
    in a ReadIndex round of its own)."""
    c = cluster()
    leader = c.core("1")
    leader.propose(b"a")
    assert leader.has_ready()
    leader.propose(b"b")
    leader.read_index(1)
    assert leader.has_ready()
    leader.read_index(2)
    rd = leader.ready()
    to2 = [m for m in rd.messages if isinstance(m, AppendRequest) and m.dest == "2"]
    assert [[e.data for e in m.entries] for m in to2 if m.entries] == [[b"a", b"b"]]
    # one ReadIndex round for both reads
    assert {m.read_ctx for m in rd.messages if isinstance(m, AppendRequest)} - {0} == {1}


def test_the_module_keeps_its_public_face() -> None:
    assert set(progress_mod.__all__) >= {"Progress", "ProgressState", "Inflights"}


def test_a_copied_replica_behind_the_log_gc_is_copied_again_as_ready() -> None:
    """A peer whose server lacked the tablet (DOES_NOT_EXIST) got a copy, but this log was
    garbage-collected past the copy's last entry meanwhile. Its answer (LOG_MISMATCH, a
    live log ending below our first entry) says it is READY now: the next copy must expect
    READY, else it is refused ILLEGAL_STATE at every retry and the peer never catches up
    (the master add that timed out in CI)."""
    c = cluster()
    c.partition(["1", "2"], ["3"])  # 3 has only the first entries (its match is low)
    for k in range(4):
        c.propose("1", f"w{k}".encode())
        c.stabilize()
    leader = c.core("1")
    leader.peer_missing("3")
    assert leader.progress["3"].copy_expected == "DOES_NOT_EXIST"
    copied_up_to = 2  # the copy's last entry, now below the leader's log
    leader.compact(leader.log.last_index - 1)
    assert leader.log.term_at(copied_up_to) is None
    last = leader.log.last_index
    leader.step(AppendResponse("3", "1", leader.term, AppendStatus.LOG_MISMATCH,
                               prev_index=last, last_index=copied_up_to,
                               conflict_index=copied_up_to + 1))
    pr = leader.progress["3"]
    assert pr.state is C and pr.copy_expected == "READY"
