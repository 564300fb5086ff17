"""The tablet-server map: registration, liveness and report bookkeeping, from heartbeats.

Seed 004 map 1 ("tserver UUID to tserver instance") and its fixes. Every master keeps one,
leader or follower, fed by the heartbeats every tablet server sends to every master; it is
never rebuilt from the catalog (seed 004 "Remove some unnecessary in-memory caches": it is
warm from the moment a master runs, which is what KUDU-1358 needed). Time is injected: each
call takes ``now`` (the shell's clock, seconds, never decreasing); nothing here reads a
clock.

Per server one registration state, one (role, state, input) table
------------------------------------------------------------------
    UNKNOWN     not in the map (or known under another incarnation): asked to register
    REGISTERED  registered (its address is known); its next report must be FULL
    REPORTING   a full report was processed by this master as leader; incrementals follow

A heartbeat is classified into inputs, run through `HEARTBEAT_TRANSITIONS` in order:
``register`` (it carries a registration) then, if it carries a report, one of ``full_report``,
``incremental_report``, ``stale_report`` (seq not above the last one: a duplicate or
reordered report, dropped), ``gap_report`` (an incremental that skips a seq: one was lost,
processed but a full report is asked for); a heartbeat with neither is ``heartbeat``.
Each row gives the next state, whether the report is to be processed, and whether to ask
the server to register. The response asks for a full report while the server is
REGISTERED and this master is leader.

Why these rows:
* Only the leader processes reports (seed 004 "Follower masters must process heartbeats,
  at least in part"): follower rows never process one and never reach REPORTING.
* Becoming leader (`set_leadership`) puts every REPORTING server back to REGISTERED: the
  leader asks each for a full report before trusting incrementals, so a leader that knew a
  server before (KUDU-1353: it would get empty incremental reports) and a leader that
  inherits a dead leader's undone work (KUDU-1374) both see every tablet again.
* A report whose processing failed (its catalog write did not replicate: KUDU-495) puts
  the server back to REGISTERED (`report_failed`): the edge-triggered tablets it held are
  reported again in full.
* A server not in the map, or known under another incarnation, is asked to register and
  its report is dropped: without its address nothing can be sent back to it anyway.

Liveness: a server is live while ``now - last_heartbeat <= dead_after``; placement takes
live servers only (`candidates`). A dead server stays in the map (ListTabletServers shows
it dead) until it heartbeats again. The healing policy's own timeout is never shorter
(healing.py "One notion of a dead server").
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Final, Literal

import attrs

from revivify.impl.tserver.master_api import Heartbeat, HeartbeatResponse, TabletReport

from .placement import Candidate


class RegState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    REGISTERED = "REGISTERED"
    REPORTING = "REPORTING"


HeartbeatInput = Literal["heartbeat", "register", "full_report", "incremental_report",
                         "stale_report", "gap_report"]
INPUTS: Final[tuple[HeartbeatInput, ...]] = (
    "heartbeat", "register", "full_report", "incremental_report", "stale_report",
    "gap_report")
ROLES: Final = ("leader", "follower")
Role = Literal["leader", "follower"]


@attrs.frozen
class Row:
    next: RegState
    process_report: bool = False
    needs_register: bool = False


_U, _R, _P = RegState.UNKNOWN, RegState.REGISTERED, RegState.REPORTING

# The leader's rows; the follower's are derived below (never process, never REPORTING).
_LEADER_ROWS: Final[dict[tuple[RegState, HeartbeatInput], Row]] = {
    (_U, "heartbeat"): Row(_U, needs_register=True),
    (_U, "register"): Row(_R),
    (_U, "full_report"): Row(_U, needs_register=True),
    (_U, "incremental_report"): Row(_U, needs_register=True),
    (_U, "stale_report"): Row(_U, needs_register=True),
    (_U, "gap_report"): Row(_U, needs_register=True),
    (_R, "heartbeat"): Row(_R),
    (_R, "register"): Row(_R),
    (_R, "full_report"): Row(_P, process_report=True),
    # Incrementals are true facts: process them, but keep asking for the full report.
    (_R, "incremental_report"): Row(_R, process_report=True),
    (_R, "stale_report"): Row(_R),
    (_R, "gap_report"): Row(_R, process_report=True),
    (_P, "heartbeat"): Row(_P),
    (_P, "register"): Row(_R),  # re-registration (a restart): a full report follows
    (_P, "full_report"): Row(_P, process_report=True),
    (_P, "incremental_report"): Row(_P, process_report=True),
    (_P, "stale_report"): Row(_P),
    (_P, "gap_report"): Row(_R, process_report=True),  # one was lost: ask for all
}


def _follower_row(row: Row) -> Row:
    return Row(_R if row.next is _P else row.next, process_report=False,
               needs_register=row.needs_register)


HEARTBEAT_TRANSITIONS: Final[dict[tuple[Role, RegState, HeartbeatInput], Row]] = {
    **{("leader", s, i): row for (s, i), row in _LEADER_ROWS.items()},
    **{("follower", s, i): _follower_row(row) for (s, i), row in _LEADER_ROWS.items()},
}


class HeartbeatProtocolError(Exception):
    """An input the table has no row for (a bug in the caller or the table)."""


@attrs.frozen
class ServerEntry:
    uuid: str
    address: str
    incarnation: int
    state: RegState
    last_heartbeat: float
    last_report_seq: int = -1  # the highest report seq seen in this incarnation


@attrs.frozen
class ServerInfo:
    """One row of ListTabletServers."""

    uuid: str
    address: str
    live: bool
    seconds_since_heartbeat: float
    state: RegState


@attrs.frozen
class HeartbeatVerdict:
    """What the shell does with a heartbeat: answer ``response`` and, if ``report`` is set,
    process it (reports.py) as this master, the leader."""

    response: HeartbeatResponse
    report: TabletReport | None
    inputs: tuple[HeartbeatInput, ...]  # the table's inputs, in the order they ran


@attrs.define
class TabletServerMap:
    """The servers this master has heard from. One per master process; a plain object."""

    master_uuid: str
    dead_after: float  # seconds without a heartbeat before a server counts as dead
    _servers: dict[str, ServerEntry] = attrs.field(factory=dict, init=False)
    _leader_term: int | None = attrs.field(default=None, init=False)  # None: not leader
    _term: int = attrs.field(default=0, init=False)
    _now: float = attrs.field(default=float("-inf"), init=False)

    def __attrs_post_init__(self) -> None:
        assert self.dead_after > 0

    # -- role

    @property
    def is_leader(self) -> bool:
        return self._leader_term is not None

    def set_leadership(self, term: int, leader: bool) -> None:
        """The shell reports this master's role: leader (once ready, in ``term``) or not.
        Becoming leader in a new term asks every server for a full report."""
        assert term >= self._term, "terms never go back"
        self._term = term
        if not leader:
            self._leader_term = None
            return
        if self._leader_term != term:
            self._leader_term = term
            for uuid, entry in self._servers.items():
                if entry.state is RegState.REPORTING:
                    self._servers[uuid] = attrs.evolve(entry, state=RegState.REGISTERED)

    # -- heartbeats

    def heartbeat(self, hb: Heartbeat, now: float) -> HeartbeatVerdict:
        self._tick(now)
        role: Role = "leader" if self.is_leader else "follower"
        entry = self._servers.get(hb.server_uuid)
        if entry is not None and entry.incarnation != hb.incarnation \
                and hb.registration is None:
            entry = None  # another run of that server: its address may have changed
        state = RegState.UNKNOWN if entry is None else entry.state
        inputs: list[HeartbeatInput] = []
        needs_register = False
        report_to_process: TabletReport | None = None

        if hb.registration is not None:
            row = self._row(role, state, "register")
            inputs.append("register")
            fresh_incarnation = entry is None or entry.incarnation != hb.incarnation
            entry = ServerEntry(
                uuid=hb.server_uuid, address=hb.registration.address,
                incarnation=hb.incarnation, state=row.next, last_heartbeat=now,
                last_report_seq=-1 if fresh_incarnation or entry is None
                else entry.last_report_seq)
            state = row.next
        if hb.report is not None:
            last_seq = -1 if entry is None else entry.last_report_seq
            kind = _classify(hb.report, last_seq)
            row = self._row(role, state, kind)
            inputs.append(kind)
            needs_register |= row.needs_register
            if row.process_report:
                report_to_process = hb.report
            if entry is not None and row.next is not RegState.UNKNOWN:
                entry = attrs.evolve(entry, state=row.next,
                                     last_report_seq=max(last_seq, hb.report.seq))
            state = row.next
        if not inputs:
            row = self._row(role, state, "heartbeat")
            inputs.append("heartbeat")
            needs_register |= row.needs_register
            if entry is not None and row.next is not RegState.UNKNOWN:
                entry = attrs.evolve(entry, state=row.next)
            state = row.next
        if entry is not None and state is not RegState.UNKNOWN:
            self._servers[hb.server_uuid] = attrs.evolve(entry, last_heartbeat=now)
        assert not (needs_register and report_to_process is not None)
        response = HeartbeatResponse(
            master_uuid=self.master_uuid, leader=self.is_leader, term=self._term,
            needs_register=needs_register,
            needs_full_report=self.is_leader and state is RegState.REGISTERED)
        return HeartbeatVerdict(response, report_to_process, tuple(inputs))

    def report_failed(self, uuid: str) -> None:
        """The catalog write of this server's report did not commit: ask for it all again."""
        entry = self._servers.get(uuid)
        if entry is not None and entry.state is RegState.REPORTING:
            self._servers[uuid] = attrs.evolve(entry, state=RegState.REGISTERED)

    def forget(self, uuid: str, now: float) -> bool:
        """Drop a dead server from the map (an operator's unregister); True if it was known.
        A live server is never forgotten (the caller refuses first); a forgotten server that
        heartbeats again is UNKNOWN, so it is asked to register and comes back."""
        assert not self.is_live(uuid, now), "only a dead server is forgotten"
        return self._servers.pop(uuid, None) is not None

    # -- reads

    def entry(self, uuid: str) -> ServerEntry | None:
        return self._servers.get(uuid)

    def address(self, uuid: str) -> str | None:
        entry = self._servers.get(uuid)
        return None if entry is None else entry.address

    def is_live(self, uuid: str, now: float) -> bool:
        self._tick(now)
        entry = self._servers.get(uuid)
        return entry is not None and now - entry.last_heartbeat <= self.dead_after

    def candidates(self, now: float) -> list[Candidate]:
        """The live servers, for placement, in uuid order."""
        return [Candidate(e.uuid, e.address) for e in self._entries()
                if self.is_live(e.uuid, now)]

    def describe(self, now: float) -> list[ServerInfo]:
        """ListTabletServers: every server heard from, live or dead."""
        self._tick(now)
        return [ServerInfo(e.uuid, e.address, now - e.last_heartbeat <= self.dead_after,
                           now - e.last_heartbeat, e.state) for e in self._entries()]

    def _entries(self) -> Iterator[ServerEntry]:
        return (self._servers[uuid] for uuid in sorted(self._servers))

    def _tick(self, now: float) -> None:
        assert now >= self._now, f"the clock went back: {now} < {self._now}"
        self._now = now

    @staticmethod
    def _row(role: Role, state: RegState, kind: HeartbeatInput) -> Row:
        row = HEARTBEAT_TRANSITIONS.get((role, state, kind))
        if row is None:
            raise HeartbeatProtocolError(f"no row for ({role}, {state.value}, {kind})")
        return row


def _classify(report: TabletReport, last_seq: int) -> HeartbeatInput:
    if report.seq <= last_seq:
        return "stale_report"
    if report.full:
        return "full_report"
    if report.seq != last_seq + 1:
        return "gap_report"
    return "incremental_report"


__all__ = [
    "HEARTBEAT_TRANSITIONS",
    "INPUTS",
    "ROLES",
    "HeartbeatInput",
    "HeartbeatProtocolError",
    "HeartbeatVerdict",
    "RegState",
    "Role",
    "Row",
    "ServerEntry",
    "ServerInfo",
    "TabletServerMap",
]
