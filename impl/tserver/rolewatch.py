"""What an operator hears of a replica's Raft: elections, leaders, configs.

The Raft core (impl/consensus/core.py) is sans-I/O and reports nothing of the kind; the
replica driver (replica.py) calls ``RoleWatch.see`` after every batch it ran, and the watch
compares the core's role, term, leader and committed config with what it saw last.

The driver runs several inputs per batch, so the watch may miss an intermediate state: a
single-voter tablet goes FOLLOWER -> PRE_CANDIDATE -> CANDIDATE -> LEADER in one batch. The
rules are written so that counts stay right anyway:

* an election of term T is *started* when the watch first sees this replica CANDIDATE in T,
  or LEADER in T without having seen it CANDIDATE in T (it must have been);
* it is *won* when the replica is seen LEADER in T, and *lost* when, having been seen
  CANDIDATE in T, it is next seen neither CANDIDATE nor LEADER of T (a vote refused, or a
  higher term or a leader of T appeared);
* the *leader changed* when the core names a leader different from the last one named
  (None, between leaders, does not count: it is not a leader).

Pre-votes (PRE_CANDIDATE) are not elections: they change no term and are not counted.
Costs: four attribute reads and comparisons per batch, never per write.
"""

from __future__ import annotations

import logging

from revivify.impl.consensus.core import RaftCore, Role
from revivify.impl.observe.metrics import RaftMetrics

logger = logging.getLogger("revivify.impl.tserver.raft")


class RoleWatch:
    """The last role, term, leader and committed config seen of one replica's core."""

    __slots__ = ("_candidate_term", "_config_index", "_leader", "_metrics", "_role", "_term",
                 "tablet_id")

    def __init__(self, tablet_id: str, core: RaftCore, metrics: RaftMetrics) -> None:
        self.tablet_id = tablet_id
        self._metrics = metrics
        self._role = core.role
        self._term = core.term
        self._leader = core.leader
        self._config_index = core.committed_config.opid_index
        self._candidate_term: int | None = None  # the term of an election seen, not decided

    def see(self, core: RaftCore) -> None:
        role, term, leader = core.role, core.term, core.leader
        if role is not self._role or term != self._term:
            self._election(role, term)
            self._role, self._term = role, term
        if leader is not None and leader != self._leader:
            self._metrics.leader_changes.inc()
            if leader != core.me:  # (this replica's own win has its line: _election)
                logger.info("tablet %s: leader is now %s (term %d)", self.tablet_id, leader,
                            term)
            self._leader = leader
        config = core.committed_config
        if config.opid_index != self._config_index:
            self._config_index = config.opid_index
            members = ", ".join(f"{p.uuid}:{p.member_type}" for p in config.peers)
            logger.info("tablet %s: config committed at index %d: %s", self.tablet_id,
                        config.opid_index, members)

    def _election(self, role: Role, term: int) -> None:
        """The role or term changed: an election started, won or lost (module docstring)."""
        m = self._metrics
        pending = self._candidate_term
        if pending is not None and not (term == pending and role in (Role.CANDIDATE,
                                                                     Role.LEADER)):
            m.elections_lost.inc()
            logger.info("tablet %s: lost the election of term %d (now %s in term %d)",
                        self.tablet_id, pending, role.value, term)
            self._candidate_term = pending = None
        if role is Role.CANDIDATE and pending != term:
            m.elections_started.inc()
            self._candidate_term = term
        elif role is Role.LEADER and (self._role is not Role.LEADER or term != self._term):
            if pending != term:
                m.elections_started.inc()
            m.elections_won.inc()
            self._candidate_term = None
            logger.info("tablet %s: won the election of term %d", self.tablet_id, term)


__all__ = ["RoleWatch"]
