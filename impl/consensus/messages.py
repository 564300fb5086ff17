"""Raft's values and wire messages: log entries, configurations, and the five messages.

Everything here is a frozen msgspec Struct, so the same value is what the core handles, what
the trio shell ships in an RPC body (msgpack) and what tests print. No I/O, no trio.

Messages are one-way (the etcd shape): a reply is a message of its own, sent when the core
says so, after whatever it promised was made durable. Every message names its sender
(``src``), its destination (``dest``: a replica refuses a message addressed to another UUID,
so a message that outlived a wiped server's identity never counts) and the sender's term.

    VoteRequest   candidate -> voter     pre_vote: a pre-election (term is the term the
                                          candidate *would* campaign in; nobody's term moves)
    VoteResponse  voter -> candidate
    AppendRequest leader -> peer          entries may be empty (a heartbeat); read_ctx tags a
                                          ReadIndex confirmation round
    AppendResponse peer -> leader         status says what happened (AppendStatus: OK, or
                                          why not); prev_index names the request answered,
                                          so a late refusal is told from a current one; on
                                          LOG_MISMATCH conflict_term/conflict_index let the
                                          leader skip a whole term at a time (fast backtrack)
    TimeoutNow    leader -> transferee    "campaign now, ignoring my lease" (leadership
                                          transfer)
"""

from __future__ import annotations

import enum
from typing import Final, Literal

import msgspec

VOTER: Final = "VOTER"
NON_VOTER: Final = "NON_VOTER"
MemberType = Literal["VOTER", "NON_VOTER"]

ENTRY_NOOP: Final = "noop"  # a new leader's first entry (commits earlier terms' entries)
ENTRY_WRITE: Final = "write"  # an application payload (the tablet's row operations)
ENTRY_CONFIG: Final = "config"  # a membership change: `data` is an encoded Config
EntryKind = Literal["noop", "write", "config"]


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One Raft log entry at OpId (term, index)."""

    term: int
    index: int
    kind: EntryKind
    data: bytes = b""


class Peer(msgspec.Struct, frozen=True):
    """A member of a tablet's Raft configuration.

    NON_VOTER members receive the log but neither vote nor count toward any majority (the
    seed's LEARNER / Kudu's PRE_VOTER). ``promote``: the leader turns this NON_VOTER into a
    VOTER by itself once it has caught up.
    """

    uuid: str
    address: str
    member_type: MemberType = "VOTER"
    promote: bool = False


class Config(msgspec.Struct, frozen=True):
    """A configuration. ``opid_index`` is the index of the log entry that carried it (0 for
    the configuration a tablet is created with). It is the compare-and-set token of config
    changes: a change names the committed configuration's opid_index it was planned on."""

    opid_index: int
    peers: tuple[Peer, ...]

    def peer(self, uuid: str) -> Peer | None:
        for p in self.peers:
            if p.uuid == uuid:
                return p
        return None

    def voters(self) -> frozenset[str]:
        return frozenset(p.uuid for p in self.peers if p.member_type == VOTER)

    def uuids(self) -> tuple[str, ...]:
        return tuple(p.uuid for p in self.peers)

    def is_voter(self, uuid: str) -> bool:
        p = self.peer(uuid)
        return p is not None and p.member_type == VOTER


ChangeKind = Literal["ADD", "REMOVE", "CHANGE_ROLE"]


class ConfigChange(msgspec.Struct, frozen=True):
    """One-server-at-a-time membership change (Raft thesis section 4.1).

    ADD ``peer`` (as given: VOTER, or NON_VOTER optionally with ``promote``); REMOVE the
    member named ``peer.uuid``; CHANGE_ROLE of ``peer.uuid`` to ``peer.member_type``.
    """

    kind: ChangeKind
    peer: Peer


_config_encoder = msgspec.msgpack.Encoder()
_config_decoder = msgspec.msgpack.Decoder(Config)


def encode_config(config: Config) -> bytes:
    return _config_encoder.encode(config)


def decode_config(data: bytes) -> Config:
    """Decode a config entry's payload (msgspec.DecodeError / ValidationError on garbage)."""
    return _config_decoder.decode(data)


class VoteRequest(msgspec.Struct, frozen=True, tag="vote"):
    src: str
    dest: str
    term: int
    last_term: int
    last_index: int
    pre_vote: bool = False
    # Set by a leadership transfer: vote even though a leader was heard from recently.
    ignore_lease: bool = False


class VoteResponse(msgspec.Struct, frozen=True, tag="vote_resp"):
    src: str
    dest: str
    term: int
    granted: bool
    pre_vote: bool = False
    reason: str = ""


class AppendRequest(msgspec.Struct, frozen=True, tag="append"):
    src: str
    dest: str
    term: int
    prev_term: int
    prev_index: int
    entries: tuple[Entry, ...]
    commit_index: int
    read_ctx: int = 0


class AppendStatus(enum.Enum):
    """What an AppendResponse says. The leader's control flow reads this, never ``detail``
    (free text for people: logs and the scenario scripts)."""

    OK = "OK"  # the log matches the leader's through match_index
    # The consistency check failed at the request's prev_index: the responder has no entry
    # there (conflict_term 0) or one of another term (conflict_term, first index of it).
    LOG_MISMATCH = "LOG_MISMATCH"
    # The request's term is below the responder's: the sender is a deposed leader (it
    # learns the new term from the response's ``term`` and steps down).
    STALE_TERM = "STALE_TERM"
    # The responder's replica was deleted (a tombstone): no entry can help it, only a
    # tablet copy.
    TOMBSTONED = "TOMBSTONED"


class AppendResponse(msgspec.Struct, frozen=True, tag="append_resp"):
    src: str
    dest: str
    term: int
    status: AppendStatus
    # The prev_index of the request this answers: a refusal names the position it refuses,
    # so that the leader ignores a late one for a position it has already moved past
    # (etcd's rejected index), instead of moving ``next`` back a second time.
    prev_index: int = 0
    match_index: int = 0  # OK: the last index known to match the leader's log
    last_index: int = 0  # the responder's last log index
    conflict_term: int = 0  # LOG_MISMATCH: the term at prev_index here (0: no entry)
    conflict_index: int = 0  # LOG_MISMATCH: where the leader should retry from
    read_ctx: int = 0
    detail: str = ""  # why, for people (never parsed)

    @property
    def success(self) -> bool:
        return self.status is AppendStatus.OK


class TimeoutNow(msgspec.Struct, frozen=True, tag="timeout_now"):
    src: str
    dest: str
    term: int


Message = VoteRequest | VoteResponse | AppendRequest | AppendResponse | TimeoutNow

__all__ = [
    "ENTRY_CONFIG",
    "ENTRY_NOOP",
    "ENTRY_WRITE",
    "NON_VOTER",
    "VOTER",
    "AppendRequest",
    "AppendResponse",
    "AppendStatus",
    "ChangeKind",
    "Config",
    "ConfigChange",
    "Entry",
    "EntryKind",
    "MemberType",
    "Message",
    "Peer",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
    "decode_config",
    "encode_config",
]
