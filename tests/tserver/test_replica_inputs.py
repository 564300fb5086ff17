"""The replica shell's inputs: a failed replica fails every waiter (reads waiting for the
store to apply their index used to hang), and its inbox of Raft messages is bounded."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from revivify.impl.consensus import core as raft
from revivify.impl.consensus.log import RaftLog
from revivify.impl.consensus.messages import Config, Message, Peer, VoteRequest
from revivify.impl.tablet.ops import WriteBatch, put
from revivify.impl.tserver import api
from revivify.impl.tserver.replica import MAX_QUEUED_MESSAGES, Replica, _Waiter


class _Store:
    applied_index = 0

    def lookup_result(self, client_id: str, seq: int) -> None:
        return None  # no write seen yet


def _replica(runs: bool = True) -> Replica:
    core = raft.RaftCore(me="a", term=1, voted_for=None,
                         committed_config=Config(0, (Peer("a", "h:1"), Peer("b", "h:2"))),
                         log=RaftLog(), applied_index=0, rng=random.Random(0),
                         options=raft.Options())
    unused: Any = None
    return Replica(tablet_id="t1", me="a", core=core, log=unused, store=_Store(),  # type: ignore[arg-type]
                   metadata=unused, trace=unused, blocking=unused,
                   send=lambda *_: None, address_of=lambda _: None, runs=lambda: runs)


def test_a_failed_replica_fails_the_reads_waiting_for_their_index() -> None:
    async def main() -> None:
        replica = _replica()
        waiter = _Waiter()
        replica._index_waiters.append((5, waiter))  # a confirmed read, index not applied
        replica.fail("EIO on fsync")
        with trio.fail_after(1), pytest.raises(api.TabletNotRunning) as caught:
            await waiter.wait()
        assert caught.value.state == "FAILED" and "EIO" in caught.value.reason
        assert replica._index_waiters == []

    trio.run(main)


def test_whether_a_replica_serves_is_its_slots_answer() -> None:
    """A replica asks the lifecycle core whether it runs (``runs``: its slot is RUNNING);
    it keeps no state of its own. Its slot left RUNNING: a call is refused FAILED, with the
    reason its driver stopped, and it neither flushes nor reports a role."""
    async def main() -> None:
        replica = _replica(runs=False)
        replica.reason = "the replica is being deleted"
        with pytest.raises(api.TabletNotRunning) as caught:
            await replica.read_barrier()
        assert caught.value.state == "FAILED" and caught.value.reason == replica.reason
        assert not replica.wants_flush()

    trio.run(main)
    assert _replica(runs=True).info().state == "RUNNING"


def test_the_message_inbox_is_bounded() -> None:
    replica = _replica()
    m: Message = VoteRequest("b", "a", 2, 0, 0)
    for _ in range(MAX_QUEUED_MESSAGES):
        replica.deliver([m])
    assert replica.dropped_messages == 0
    replica.deliver([m, m])
    assert replica.dropped_messages == 2
    assert len(replica._inbox) == MAX_QUEUED_MESSAGES


def test_ticks_behind_a_busy_driver_are_counted_not_queued() -> None:
    replica = _replica()
    for _ in range(100):
        replica.tick()
    assert len(replica._inbox) == 1  # one entry carries all 100 ticks
    replica._inbox[0]()  # the driver steps it: 100 ticks, past an election timeout
    assert replica._ticks_pending == 0
    assert replica.core.has_ready()  # the election timer fired: a pre-vote to send


def test_durable_reports_the_last_traced_step_not_the_cores_status() -> None:
    """A lifecycle fact (stc_reject, stc_accept) is traced with ``Replica.durable()``. That
    must be the state of the last traced step: the core's status runs ahead (a vote taken in
    memory, an entry appended before its fsync), and a fact carrying it reaches the trace
    before the step's own event. The checker found exactly that in a nemesis run under load
    (stc_reject reporting WAL index n+1 right after log_append n)."""
    traced: list[tuple[str, int]] = []

    class _Metadata:
        def write_cmeta(self, cmeta: object) -> None:
            pass

    class _Trace:
        def event(self, event: str, args: object, state: Any, *, tablet: str) -> None:
            traced.append((event, state.cmeta.term))

    async def blocking(fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def main() -> None:
        replica = _replica()
        replica.metadata = _Metadata()  # type: ignore[assignment]
        replica.trace = _Trace()  # type: ignore[assignment]
        replica._blocking = blocking
        before = replica.durable()
        assert before.cmeta is not None and before.cmeta.current_term == 1
        replica.core.step(VoteRequest("b", "a", 2, 0, 0))  # the core votes, in memory
        assert replica.core.status().term == 2 and replica.core.has_ready()
        unpersisted = replica.durable()
        assert unpersisted.cmeta is not None and unpersisted.cmeta.current_term == 1
        rd = replica.core.ready()
        await replica._execute(rd)
        replica.core.advance(rd)
        assert traced and traced[0][1] == 2  # the vote's event, then durable() follows it
        after = replica.durable()
        assert after.cmeta is not None
        assert (after.cmeta.current_term, after.cmeta.voted_for) == (2, "b")

    trio.run(main)


def test_a_commit_is_answered_before_the_next_proposals_wal_append() -> None:
    """A follower's response that commits write 1, queued together with write 2's proposal,
    answers write 1 at once: it used to be stepped in one batch with the proposal, whose
    plan applies commits only after its own WAL append, so under many clients each write
    waited for two leader fsyncs. Here write 2's append blocks until write 1 is answered."""
    from revivify.impl.consensus.messages import (
        AppendRequest,
        AppendResponse,
        AppendStatus,
        VoteResponse,
    )
    from revivify.impl.tablet.ops import WriteBatch, put
    from revivify.impl.tablet.store import ApplyResult

    held: list[Message] = []  # b's answers, delivered when the test says

    def answer(m: Message) -> Message | None:
        if isinstance(m, VoteRequest):
            return VoteResponse("b", "a", m.term, True, pre_vote=m.pre_vote)
        if isinstance(m, AppendRequest):
            match = m.prev_index + len(m.entries)
            return AppendResponse("b", "a", m.term, AppendStatus.OK, prev_index=m.prev_index,
                                  match_index=match, last_index=match)
        return None

    def send(dest: str, tablet: str, batch: list[Message]) -> None:
        held.extend(r for r in map(answer, batch) if r is not None)

    class _Store:
        applied_index = 0

        def lookup_result(self, client_id: str, seq: int) -> None:
            return None

        def apply_entry(self, index: int, term: int, kind: str, data: bytes
                        ) -> ApplyResult | None:
            self.applied_index = index
            return ApplyResult(index, 1) if kind == "write" else None

    class _Metadata:
        def write_cmeta(self, cmeta: object) -> None:
            pass

    class _Trace:
        def event(self, *args: object, **kwargs: object) -> None:
            pass

    gate = [trio.Event()]  # the WAL appends wait for gate[0]
    gate[0].set()

    class _Log:
        async def append(self, entries: list[Any]) -> None:
            await gate[0].wait()

    async def blocking(fn: Any, *args: Any) -> Any:
        return fn(*args)

    def batch(seq: int) -> WriteBatch:
        return WriteBatch("c", seq, [put(b"k", b"v")])

    async def main() -> None:
        replica = _replica()
        replica.store = _Store()  # type: ignore[assignment]
        replica.metadata = _Metadata()  # type: ignore[assignment]
        replica.trace = _Trace()  # type: ignore[assignment]
        replica.log = _Log()  # type: ignore[assignment]
        replica._blocking = blocking
        replica._send = send
        async with trio.open_nursery() as nursery:
            nursery.start_soon(replica.run)
            with trio.fail_after(5):
                while not (replica.core.is_leader() and replica.store.applied_index >= 1):
                    replica.tick()
                    if held:
                        replica.deliver(held[:])
                        held.clear()
                    await trio.sleep(0.001)
                await trio.sleep(0.01)
                held.clear()  # heartbeat answers: not needed
                written: list[int] = []

                async def write(seq: int) -> None:
                    written.append((await replica.write(batch(seq))).index)

                nursery.start_soon(write, 1)
                while not any(isinstance(m, AppendResponse) and m.match_index >= 2
                              for m in held):
                    await trio.sleep(0.001)
                commit_1: list[Message] = [m for m in held if isinstance(m, AppendResponse)]
                held.clear()
                gate[0] = trio.Event()  # write 2's WAL append will block

                async def respond_and_propose() -> None:
                    replica.deliver(commit_1)  # both queued before the driver runs
                    await write(2)

                nursery.start_soon(respond_and_propose)
            with trio.move_on_after(1):
                while not written:
                    await trio.sleep(0.001)
            answered_while_appending = list(written)
            gate[0].set()  # (the append is shielded: a durable step is finished, then traced)
            nursery.cancel_scope.cancel()
        assert answered_while_appending == [2]  # write 1, at 2 (the leader's no-op is 1)

    trio.run(main)


def test_a_failed_replica_fails_the_writes_still_queued() -> None:
    """A write whose proposal waits in the driver's queue (never stepped into the core: the
    driver is busy, or has stopped) fails with the replica instead of waiting for ever."""
    async def main() -> None:
        replica = _replica()
        outcome: list[BaseException] = []

        async def write() -> None:
            try:
                await replica.write(WriteBatch("c1", 1, [put(b"k", b"v")]))
            except api.TabletNotRunning as exc:
                outcome.append(exc)

        with trio.fail_after(5):  # (the old code: the caller waited for ever)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                await trio.testing.wait_all_tasks_blocked()
                assert len(replica._proposals) == 1  # queued: no driver runs here
                replica.fail("EIO on fsync")
        assert len(outcome) == 1 and "EIO" in outcome[0].reason  # type: ignore[attr-defined]
        # After the failure, a call that gets past the running check fails at once too.
        with trio.fail_after(1), pytest.raises(api.TabletNotRunning):
            await replica.write(WriteBatch("c1", 2, [put(b"k", b"w")]))

    trio.run(main)
