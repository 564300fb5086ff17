"""The ready leader's background task: creation nudges, replacement of tablets whose
creation timed out, and a round of the healing policy.

Every ``background_seconds`` (or at once when ``wake`` is called: a recorded MoveReplica),
while this master is the ready leader:

1. CreateTablet nudges to every replica of every CREATING tablet (``creation_nudges``: from
   committed records alone, so a new leader continues its predecessor's creations);
2. the replacement of tablets CREATING for longer than ``creation_timeout`` under this
   leader (``plan_replace_tablets``: old REPLACED and new CREATING in one write). The
   ``CreationWatch`` that times them starts afresh each time the gate opens
   (``ReadyGate.opened``), so a tablet gets a full timeout under every leader;
3. one round of the healing policy (healing.py), unless ``heal`` is off.

A round that fails because this master lost leadership meanwhile is logged; the next round
starts from the gate again.
"""

from __future__ import annotations

import random

import trio

from revivify.impl.rpc import AppError

from .embedded import EmbeddedServer, master_logger
from .errors import MasterError
from .gate import ReadyGate
from .healing import Healer
from .operations import CreationWatch, creation_nudges, plan_replace_tablets
from .runner import CallSender, PlanRunner

logger = master_logger()


class Background:
    """The background task of the ready leader (module docstring)."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate, runner: PlanRunner,
                 calls: CallSender, healer: Healer | None, rng: random.Random, *,
                 interval: float, creation_timeout: float) -> None:
        self._embedded = embedded
        self._gate = gate
        self._runner = runner
        self._calls = calls
        self._healer = healer  # None: the healing policy is off
        self._rng = rng
        self._interval = interval
        self._creation_timeout = creation_timeout
        self._wake = trio.Event()  # a recorded move: run a round now
        self._watch = CreationWatch()
        self._watch_opened = 0  # the gate opening the watch started at

    def wake(self) -> None:
        """Run a round now (a move was just recorded)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            with trio.move_on_after(self._interval):
                await self._wake.wait()
            self._wake = trio.Event()
            if self._gate.ready_term is None:
                continue
            try:
                await self._round()
            except AppError as exc:  # lost leadership meanwhile: the next round
                logger.info("background round: %s", exc)

    async def _round(self) -> None:
        term = self._gate.ready_term
        if term is None:
            return
        self._calls.send_calls(creation_nudges(self._gate.catalog), term)
        await self._replace_timed_out()
        if self._healer is not None:
            await self._healer.round(term)

    async def _replace_timed_out(self) -> None:
        """Step 2 of a round (module docstring)."""
        now = self._embedded.now()
        if self._watch_opened != self._gate.opened:
            self._watch, self._watch_opened = CreationWatch(), self._gate.opened
        self._watch = self._watch.observe(self._gate.catalog, now)
        timed_out = self._watch.timed_out(now, self._creation_timeout)
        if not timed_out:
            return
        servers = self._embedded.tmap().candidates(now)
        result = await self._runner.run_plan(lambda c: plan_replace_tablets(
            c, timed_out, servers=servers, rng=self._rng))
        if isinstance(result, MasterError):
            logger.info("replacing timed-out tablets %s: %s", timed_out, result.message)
        else:
            logger.info("replaced timed-out tablets: %s", result.reply.replaced)


__all__ = ["Background"]
