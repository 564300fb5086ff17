"""tserver/rolewatch.py: elections started, won and lost, and leader changes, counted from
what the replica driver sees of its core after each batch (states may be skipped)."""

from __future__ import annotations

import logging
from typing import Any

import attrs
from observe_helpers import captured_logs, parse, value

from revivify.impl.consensus.core import Role
from revivify.impl.consensus.messages import Config, Peer
from revivify.impl.observe.metrics import ServerMetrics
from revivify.impl.tserver.rolewatch import RoleWatch


@attrs.define
class FakeCore:
    role: Role = Role.FOLLOWER
    term: int = 0
    leader: str | None = None
    me: str = "a"
    committed_config: Config = attrs.field(
        factory=lambda: Config(0, (Peer("a", "h:1"), Peer("b", "h:2"))))


def watch() -> tuple[RoleWatch, FakeCore, ServerMetrics]:
    core, metrics = FakeCore(), ServerMetrics()
    return RoleWatch("t1", core, metrics.raft), core, metrics  # type: ignore[arg-type]


def see(w: RoleWatch, core: FakeCore, **state: Any) -> None:
    for k, v in state.items():
        setattr(core, k, v)
    w.see(core)  # type: ignore[arg-type]


def counts(metrics: ServerMetrics) -> tuple[float, float, float, float]:
    s = parse(metrics.exposition())
    return (value(s, "revivify_raft_elections_started_total"),
            value(s, "revivify_raft_elections_won_total"),
            value(s, "revivify_raft_elections_lost_total"),
            value(s, "revivify_raft_leader_changes_total"))


def test_a_won_election_seen_step_by_step_and_in_one_batch() -> None:
    w, core, m = watch()
    see(w, core, role=Role.PRE_CANDIDATE)  # a pre-vote is no election
    assert counts(m) == (0, 0, 0, 0)
    see(w, core, role=Role.CANDIDATE, term=1)
    see(w, core, role=Role.LEADER, leader="a")
    assert counts(m) == (1, 1, 0, 1)
    see(w, core)  # nothing changed: nothing counted
    assert counts(m) == (1, 1, 0, 1)
    w2, core2, m2 = watch()  # a single voter: FOLLOWER -> LEADER within one batch
    see(w2, core2, role=Role.LEADER, term=1, leader="a")
    assert counts(m2) == (1, 1, 0, 1)


def test_a_lost_election_and_a_leader_elsewhere() -> None:
    w, core, m = watch()
    see(w, core, role=Role.CANDIDATE, term=3)
    see(w, core, role=Role.CANDIDATE, term=4)  # timed out: a second election, the first lost
    assert counts(m) == (2, 0, 1, 0)
    see(w, core, role=Role.FOLLOWER, term=4, leader="b")
    assert counts(m) == (2, 0, 2, 1)
    see(w, core, leader=None)  # between leaders: no change counted
    see(w, core, term=5, leader="b")  # the same leader again, next term: not a change
    assert counts(m) == (2, 0, 2, 1)


def test_the_log_says_won_lost_leader_and_config() -> None:
    w, core, _ = watch()
    with captured_logs() as lines:
        see(w, core, role=Role.CANDIDATE, term=2)
        see(w, core, role=Role.FOLLOWER, leader="b")
        see(w, core, role=Role.LEADER, term=3, leader="a")
        see(w, core, committed_config=Config(7, (Peer("a", "h:1"),)))
    messages = lines.messages()
    assert messages == [
        "tablet t1: lost the election of term 2 (now FOLLOWER in term 2)",
        "tablet t1: leader is now b (term 2)",
        "tablet t1: won the election of term 3",
        "tablet t1: config committed at index 7: a:VOTER",
    ]
    assert all(r.levelno == logging.INFO for r in lines.records)
