"""The consensus core's errors: each carries its data (the shell maps them to RPC errors).

    ConsensusError
    ├── NotLeader(leader_hint, term)            propose / read / change asked of a non-leader
    ├── ConfigChangeRefused(reason, detail,     the compare-and-set or a rule refused it;
    │                       committed_index)     reason is one of REFUSALS
    └── TransferRefused(reason)                 leadership transfer not possible now
"""

from __future__ import annotations

from typing import Final


class ConsensusError(Exception):
    """Base class of the consensus core's refusals."""


class NotLeader(ConsensusError):
    def __init__(self, leader_hint: str | None, term: int, detail: str = "") -> None:
        hint = f"; the leader is probably {leader_hint}" if leader_hint else "; leader unknown"
        super().__init__(f"not the leader of term {term}{hint}{': ' + detail if detail else ''}")
        self.leader_hint = leader_hint
        self.term = term


# Why a config change was refused (Kudu's ChangeConfig errors, one at a time):
CAS_MISMATCH: Final = "CAS_MISMATCH"  # the caller planned on another committed config
CHANGE_PENDING: Final = "CHANGE_PENDING"  # an earlier change is not yet committed
LEADER_NOT_READY: Final = "LEADER_NOT_READY"  # no entry of the leader's term committed yet
ALREADY_MEMBER: Final = "ALREADY_MEMBER"
NOT_MEMBER: Final = "NOT_MEMBER"
REMOVES_LEADER: Final = "REMOVES_LEADER"  # transfer leadership first
NO_VOTERS_LEFT: Final = "NO_VOTERS_LEFT"
ROLE_UNCHANGED: Final = "ROLE_UNCHANGED"
REFUSALS: Final = (CAS_MISMATCH, CHANGE_PENDING, LEADER_NOT_READY, ALREADY_MEMBER, NOT_MEMBER,
                   REMOVES_LEADER, NO_VOTERS_LEFT, ROLE_UNCHANGED)


class ConfigChangeRefused(ConsensusError):
    def __init__(self, reason: str, detail: str, committed_index: int) -> None:
        super().__init__(f"config change refused ({reason}): {detail}")
        self.reason = reason
        self.detail = detail
        self.committed_index = committed_index


class TransferRefused(ConsensusError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"leadership transfer refused: {reason}")
        self.reason = reason


__all__ = [
    "ALREADY_MEMBER", "CAS_MISMATCH", "CHANGE_PENDING", "LEADER_NOT_READY", "NOT_MEMBER",
    "NO_VOTERS_LEFT", "REFUSALS", "REMOVES_LEADER", "ROLE_UNCHANGED", "ConfigChangeRefused",
    "ConsensusError", "NotLeader", "TransferRefused",
]
