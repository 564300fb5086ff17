"""The healing policy's shell: one round of replication.py's ``decide`` on the ready
leader, run by the background task (background.py) unless ``heal`` is off.

A round is ONE write and then calls. The write (moves recorded for tablets with a member on
a server silent longer than ``failed_after``, with a replica reported FAILED, or
over-replicated; finished or abandoned moves cleared) goes through the plan runner, planned
again on the snapshot the runner holds; its ChangeConfig calls are decided again on the
snapshot that holds that write and released through delivery.py (so each is traced as
``master_call`` after the write's ``catalog_commit``, for a tablet the committed catalog
holds, CAS = the recorded config index). A ChangeConfig sent is not sent again for the same
tablet, CAS and leader for ``change_backoff`` seconds (``SentChanges``: its effect comes back
in a report); delivery drops a tablet's mark when its ChangeConfig turned out moot
(NotLeader, TabletNotRunning, TabletNotFound), and the policy decides again from fresher
records.

Liveness for the policy (``server_view``): live = heard from within ``failed_after``;
dead = silent longer, or never heard from once this master has run that long (a restarted
master does not take every server for dead); failed = the replicas live servers last
reported FAILED to this master as the leader (``note_report``: soft state, replication.py
"A FAILED replica").

One notion of a dead server (issue 31): ``failed_after >= dead_after`` is enforced
(MasterOptions), and both are measured here and in the tablet-server map from the same
``last_heartbeat`` on the same clock, so a server this policy takes for dead (silent
longer than ``failed_after``) is already dead to the map (``tserver list``, ksck,
placement): replicas never move off a server still listed live.
"""

from __future__ import annotations

import random

from revivify.impl.observe.metrics import NULL, Inc
from revivify.impl.tserver import api as ts_api
from revivify.impl.tserver.master_api import TabletReport

from .calls import TabletServerCall
from .catalog import Catalog
from .embedded import EmbeddedServer, master_logger
from .errors import InvalidArgument, MasterError
from .gate import ReadyGate
from .operations import Plan
from .replication import Healing, ServerView, decide, failed_after_report, server_view
from .runner import CallSender, PlanRunner

logger = master_logger()


class SentChanges:
    """tablet id -> (CAS index, leader, when) of the last ChangeConfig the policy sent."""

    def __init__(self, backoff: float) -> None:
        self._backoff = backoff
        self._sent: dict[str, tuple[int, str, float]] = {}

    def admit(self, call: TabletServerCall, now: float) -> bool:
        """Send ``call`` now? Not if the same change went to the same leader within the
        backoff; if yes, it is marked sent."""
        assert isinstance(call.body, ts_api.ChangeConfig)
        sent = self._sent.get(call.tablet_id)
        mark = (call.body.cas_config_index, call.dest)
        if sent is not None and sent[:2] == mark and now - sent[2] < self._backoff:
            return False
        self._sent[call.tablet_id] = (*mark, now)
        return True

    def forget(self, tablet_id: str) -> None:
        """The tablet's change turned out moot: the next round may send one at once."""
        self._sent.pop(tablet_id, None)


class Healer:
    """Rounds of the healing policy on the ready leader (module docstring)."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate, runner: PlanRunner,
                 calls: CallSender, changes: SentChanges, rng: random.Random, *,
                 failed_after: float, heal_changes: Inc = NULL) -> None:
        self._embedded = embedded
        self._heal_changes = heal_changes  # ChangeConfigs released (impl/observe)
        self._gate = gate
        self._runner = runner
        self._calls = calls
        self._changes = changes
        self._rng = rng
        self._failed_after = failed_after
        # server uuid -> the tablets its reports (processed here) last said were FAILED
        self._failed: dict[str, frozenset[str]] = {}

    def note_report(self, server_uuid: str, report: TabletReport) -> None:
        """A report this master received as the leader (before it is processed)."""
        self._failed[server_uuid] = failed_after_report(
            self._failed.get(server_uuid, frozenset()), report)

    def server_view(self, catalog: Catalog) -> ServerView:
        """Liveness for the policy (module docstring)."""
        now = self._embedded.now()
        tmap = self._embedded.tmap()
        limit = self._failed_after
        started = self._embedded.started_at
        warm = now - (started if started is not None else now) > limit
        uuids = {i.uuid for i in tmap.describe(now)} | set(catalog.replica_counts())
        live: set[str] = set()
        dead: set[str] = set()
        for uuid in uuids:
            entry = tmap.entry(uuid)
            if entry is not None and now - entry.last_heartbeat <= limit:
                live.add(uuid)
            elif entry is not None or warm:
                dead.add(uuid)
        candidates = [c for c in tmap.candidates(now) if c.uuid in live]
        failed = [(tablet_id, uuid) for uuid, tablet_ids in self._failed.items()
                  if uuid in live for tablet_id in tablet_ids]
        return server_view(live, dead, candidates, failed)

    async def round(self, term: int) -> None:
        """One round of the policy: its one write (moves recorded or cleared), then its
        ChangeConfig calls, each decided on the committed catalog."""
        healing = self._decide()
        if healing.write is not None:
            await self._record_moves()
            healing = self._decide()  # the calls: on the snapshot that holds the write
        if self._gate.ready_term != term:
            return
        self._send_changes(healing, term)
        for tablet_id, why in sorted(healing.waiting.items()):
            logger.debug("healing %s waits: %s", tablet_id, why)

    def _decide(self) -> Healing:
        catalog = self._gate.catalog
        return decide(catalog, self.server_view(catalog), self._rng)

    async def _record_moves(self) -> None:
        """The round's one write, through the runner (planned again on its snapshot)."""
        result = await self._runner.run_plan(lambda c: _heal_write(
            decide(c, self.server_view(c), self._rng)))
        if isinstance(result, MasterError):
            logger.info("recording moves: %s", result.message)
        else:
            logger.info("moves recorded or finished: %s", result.reply)

    def _send_changes(self, healing: Healing, term: int) -> None:
        """Release the round's ChangeConfig calls (each change's plan writes nothing: it is
        committed on the snapshot it is still fresh on), minus those sent just now."""
        now = self._embedded.now()
        catalog = self._gate.catalog
        for plan in healing.changes:
            if plan.write.is_empty() and not plan.is_fresh(catalog):
                continue
            for call in plan.commit(catalog).calls:
                assert isinstance(call.body, ts_api.ChangeConfig)
                if not self._changes.admit(call, now):
                    continue  # sent already: its effect comes back in a report
                self._heal_changes.inc()
                logger.info("healing %s: %s %s (%s)", call.tablet_id, call.body.change.kind,
                            call.body.change.peer.uuid, call.why)
                self._calls.send_calls((call,), term)


def _heal_write(healing: Healing) -> Plan[tuple[str, ...]] | MasterError:
    """The round's one write, planned again on the current snapshot (run_plan re-plans a
    plan whose rows changed; nothing to write any more is a refusal, logged)."""
    if healing.write is None:
        return InvalidArgument("no move to record or clear any more")
    return healing.write


__all__ = ["Healer", "SentChanges"]
