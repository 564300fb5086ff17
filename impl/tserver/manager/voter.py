"""A tombstone's part in Raft (Kudu's tombstoned voting, seed 001 "Future work").

A ``TombstoneVoter`` is a RaftCore in the TOMBSTONE role that answers votes from the
retained cmeta and last logged OpId, refuses appends (the leader learns the replica needs a
copy) and never campaigns. A COPYING replica runs one too once its cmeta is merged (it votes
while copying). A tombstone without a cmeta (a first copy that crashed before writing one)
votes from an empty cmeta, written with its first vote.

Order of a vote (the same rule as every durable step): the cmeta is written and fsync'd,
the lifecycle core records it (``TabletManager.vote_recorded``), the fact is traced with the
tablet's durable state, and only then is the answer sent. The write and the trace are one
durable step (``TabletManager.durable_step``: the tablet's step lock, shielded): a copy step
of the same tablet waits, so a crash loses at most one event of the tablet.
"""

from __future__ import annotations

import random
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Protocol

import trio

from revivify.impl.consensus.core import RaftCore, ReadState, Step
from revivify.impl.consensus.log import RaftLog
from revivify.impl.consensus.messages import Config, Entry, Message
from revivify.impl.consensus.plan import plan, walk
from revivify.impl.storage.values import ConsensusMeta

from ..durable import Durable
from ..replica import config_from_storage, config_to_storage


class VoterHost(Protocol):
    """What a voter needs of the tablet manager (manager/shell.py), typed here so that the
    voter does not import the shell that starts it."""

    host: Any  # the server: uuid, raft_options, blocking, metadata, tracer, send

    def durable_step(self, tablet_id: str) -> AbstractAsyncContextManager[None]: ...

    def vote_recorded(self, tablet_id: str, cmeta: ConsensusMeta) -> Durable: ...

    def durable_of(self, tablet_id: str) -> Durable | None: ...

    def may_vote(self, tablet_id: str) -> bool: ...


class _NoLongerVoting(Exception):
    """The tablet left the voter's states (a DeleteTablet DELETED) while a vote waited for
    its step lock: the vote is neither made durable nor answered, and the voter ends."""

# Inputs queued for a voter beyond this are dropped (Raft re-sends: a voter that cannot
# keep up loses requests, never memory).
MAX_INBOX: Final = 1024


class TombstoneVoter:
    def __init__(self, manager: VoterHost, tablet_id: str, durable: Durable) -> None:
        self.manager = manager
        self.tablet_id = tablet_id
        host = manager.host
        cm = durable.cmeta
        last_term, last_index = durable.last_logged()
        config = config_from_storage(cm.committed_config) if cm else Config(0, ())
        self.core = RaftCore(me=host.uuid, term=cm.current_term if cm else 0,
                             voted_for=cm.voted_for if cm else None, committed_config=config,
                             log=RaftLog(base_term=last_term, base_index=last_index),
                             applied_index=last_index, rng=random.Random(0),
                             options=host.raft_options, tombstone=True)
        self._inbox: list[Message | None] = []  # None: a tick
        # Steps of the batch being walked whose fact went out with their PersistStep. The steps
        # themselves, not their id(): a set of ids kept across batches matched a later step
        # that reused a freed step's address, and its fact was never traced (found by
        # tests/simulation: traces differed between two runs). Cleared after each batch.
        self._traced: list[Step] = []
        self._wake = trio.Event()
        self.scope = trio.CancelScope()
        self.done = trio.Event()

    def deliver(self, messages: list[Message]) -> None:
        if len(self._inbox) + len(messages) > MAX_INBOX:
            return  # bounded: a flood is dropped, the senders retry
        self._inbox.extend(messages)
        self._wake.set()

    def tick(self) -> None:
        if len(self._inbox) < MAX_INBOX:
            self._inbox.append(None)
            self._wake.set()

    async def stop(self) -> None:
        """Stop voting (a copy is about to change what the votes compare against); a vote
        being made durable finishes first (worker threads are not abandoned)."""
        self.scope.cancel()
        await self.done.wait()

    async def run(self) -> None:
        try:
            with self.scope:
                await self._run()
        except _NoLongerVoting:
            pass  # the deletion that changed the state stops this voter next
        finally:
            self.done.set()

    async def _run(self) -> None:
        core = self.core
        while True:
            if not self._inbox:
                await self._wake.wait()
            self._wake = trio.Event()
            inbox, self._inbox = self._inbox, []
            for m in inbox:
                if m is None:
                    core.tick()
                else:
                    core.step(m)
            while core.has_ready():
                rd = core.ready()
                # The one order every Raft shell follows (impl/consensus/plan.py): a vote is
                # durable and traced before its answer leaves.
                await walk(plan(rd), self)
                core.advance(rd)
                self._traced.clear()

    # ------------------------------------------------------------------ the plan's effects
    # (consensus/plan.py PlanShell: ``walk`` calls these in the plan's order)

    async def persist_step(self, step: Step) -> None:
        """A vote: the cmeta written and fsync'd, the lifecycle core told, the fact traced
        with the tablet's durable state, all under the tablet's step lock (so the fact goes
        out here, with its write, and ``trace_step`` skips it)."""
        assert step.cmeta is not None and not step.entries, "a tombstone appends nothing"
        manager, host = self.manager, self.manager.host
        cmeta = ConsensusMeta(self.tablet_id, step.cmeta.term, step.cmeta.voted_for,
                              config_to_storage(step.cmeta.committed_config))
        async with manager.durable_step(self.tablet_id):
            if not manager.may_vote(self.tablet_id):
                raise _NoLongerVoting(self.tablet_id)
            await host.blocking(host.metadata.write_cmeta, cmeta)
            durable = manager.vote_recorded(self.tablet_id, cmeta)
            host.tracer.event(step.fact.event, step.fact.args, durable.record(),
                              tablet=self.tablet_id)
            self._traced.append(step)

    async def trace_step(self, step: Step) -> None:
        if any(step is s for s in self._traced):
            return  # traced with its PersistStep, under the step lock
        durable_now = self.manager.durable_of(self.tablet_id)
        assert durable_now is not None
        self.manager.host.tracer.event(step.fact.event, step.fact.args, durable_now.record(),
                                       tablet=self.tablet_id)

    async def send_messages(self, messages: tuple[Message, ...]) -> None:
        for m in messages:
            self.manager.host.send(m.dest, self.tablet_id, [m])

    # A tombstone commits and applies nothing, and serves no reads: nothing to do.

    async def apply_entries(self, entries: tuple[Entry, ...]) -> None:
        pass

    async def release_reads(self, read_states: tuple[ReadState, ...],
                            read_failures: tuple[int, ...]) -> None:
        pass


__all__ = ["MAX_INBOX", "TombstoneVoter"]
