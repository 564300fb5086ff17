"""The tablet server's RPC interface: method names, request and response bodies, errors.

One module that both sides import (the server's service and the client library), so the
wire shape is written once. Bodies are msgspec Structs (msgpack on the wire); every request
goes through the RPC layer's destination check first (a request naming another server's UUID
is refused with WrongServerUuid before any handler runs).

Methods
-------
    Raft.Message          RaftMessages(tablet_id, messages, src_address) -> Ack
    Admin.Status          Empty                               -> ServerStatus
    Admin.CreateTablet    CreateTablet(tablet_id, peers, master_term) -> TabletCreated
    Admin.ConsensusState  TabletRef(tablet_id)                -> ReplicaInfo
    Admin.StepDown        StepDown(tablet_id, new_leader)     -> Ack
    Admin.ChangeConfig    ChangeConfig(tablet_id, change, cas_config_index) -> ConfigChanged
    Admin.DeleteTablet    DeleteTablet(tablet_id, mode, cas_config_index) -> Ack
    Admin.StartTabletCopy StartTabletCopy(tablet_id, caller_uuid, caller_term, source_uuid,
                          source_address, expected_state, last_opid) -> Ack
    Admin.ListCopies      Empty                               -> CopyList
    Admin.CancelCopy      TabletRef(tablet_id)                -> Ack
    Data.Write            Write(tablet_id, client_id, seq, ops) -> Written
    Data.Read             Read(tablet_id, key)                -> ReadResult
    Data.Scan             Scan(tablet_id, start, end, limit)  -> ScanResult

Errors (AppError subclasses; the client library registers them all, see ``APP_ERRORS``):
NotLeader(leader_uuid, leader_address, term), TabletNotFound(tablet_id),
TabletNotRunning(tablet_id, state, reason), TabletAlreadyExists(tablet_id),
TabletDeleted(tablet_id) (a master's CreateTablet for a tablet this server process deleted
with mode DELETED: a late copy of a create sent before the delete),
ConfigChangeRefused(reason, detail, committed_index), InvalidArgument(detail),
TabletCreateFailed(tablet_id, errno, detail) (a disk error failed a CreateTablet: nothing
of it is kept, the server serves on, the create may be retried),
CopyRefused(reason, detail) (StartTabletCopy refused: ALREADY_IN_PROGRESS, ILLEGAL_STATE,
STALE_TERM, OPID_MISMATCH, or THROTTLED: the server's copy pool is full, ask again later),
OperationAborted(detail) (the outcome of a write is unknown: leadership was lost before it
committed; a retry with the same (client_id, seq) is applied at most once).
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from revivify.impl.consensus.messages import ConfigChange, Message, Peer
from revivify.impl.rpc.errors import AppError
from revivify.impl.tablet.ops import RowOp


class Kind(enum.Enum):
    """A tablet's lifecycle state on one server: the kind of its slot in the lifecycle core
    (manager/core.py, which moves it), and the names ``ReplicaInfo.state`` and
    ``TabletNotRunning.state`` carry on the wire. Defined here, below the core and the
    replica shell, so that both name the states the wire shows from this one enum."""

    ABSENT = "ABSENT"
    STARTING = "STARTING"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    COPYING = "COPYING"
    TOMBSTONED = "TOMBSTONED"
    DELETING = "DELETING"


RAFT_MESSAGE: Final = "Raft.Message"
# Answered Ack at once: a Raft peer link's liveness probe (server.py, "Link liveness").
RAFT_PING: Final = "Raft.Ping"
ADMIN_STATUS: Final = "Admin.Status"
ADMIN_CREATE_TABLET: Final = "Admin.CreateTablet"
ADMIN_CONSENSUS_STATE: Final = "Admin.ConsensusState"
ADMIN_STEP_DOWN: Final = "Admin.StepDown"
ADMIN_CHANGE_CONFIG: Final = "Admin.ChangeConfig"
ADMIN_DELETE_TABLET: Final = "Admin.DeleteTablet"
ADMIN_START_TABLET_COPY: Final = "Admin.StartTabletCopy"
ADMIN_LIST_COPIES: Final = "Admin.ListCopies"
ADMIN_CANCEL_COPY: Final = "Admin.CancelCopy"
DATA_WRITE: Final = "Data.Write"
DATA_READ: Final = "Data.Read"
DATA_SCAN: Final = "Data.Scan"


class Ack(msgspec.Struct, frozen=True):
    pass


class Empty(msgspec.Struct, frozen=True):
    pass


class RaftMessages(msgspec.Struct, frozen=True):
    """Raft messages for one tablet, pushed one way (answers come back as pushes of their
    own). ``src_address``: where the sending server listens (empty from older senders), so
    a receiver can answer a sender it knows from no config: a tombstone's config predates
    a leader that joined since, and a tombstone appends nothing that would tell it."""

    tablet_id: str
    messages: list[Message]
    src_address: str = ""


class TabletRef(msgspec.Struct, frozen=True):
    tablet_id: str


class CreateTablet(msgspec.Struct, frozen=True):
    """Create a replica. ``master_term``: the term of the leader master that sent it (None:
    an operator's create). A master's create of a tablet this server process fully deleted
    (mode DELETED) is refused with TabletDeleted: a tablet id is never reused, so such a
    create is a late copy of one sent before the delete."""

    tablet_id: str
    peers: list[Peer]
    master_term: int | None = None


class TabletCreated(msgspec.Struct, frozen=True):
    tablet_id: str


class ReplicaInfo(msgspec.Struct, frozen=True):
    """One replica as its server sees it (``tablet status``, ``tserver status``)."""

    tablet_id: str
    state: str  # a Kind's name but ABSENT (RUNNING, FAILED, TOMBSTONED, COPYING, ...)
    reason: str  # why FAILED, or a copy's progress (empty otherwise)
    role: str  # LEADER | FOLLOWER | PRE_CANDIDATE | CANDIDATE | "" when not running
    term: int
    voted_for: str | None
    leader: str | None
    last_opid: tuple[int, int]
    commit_index: int
    applied_index: int
    config_index: int
    peers: list[Peer]
    member_type: str  # this server's role in the active config (VOTER / NON_VOTER / NONE)


class ServerStatus(msgspec.Struct, frozen=True):
    uuid: str
    address: str
    replicas: list[ReplicaInfo]


class StepDown(msgspec.Struct, frozen=True):
    tablet_id: str
    new_leader: str | None = None  # transfer leadership to this voter instead


class DeleteTablet(msgspec.Struct, frozen=True):
    """Delete a replica: mode TOMBSTONE keeps the cmeta and the last logged OpId (the
    tombstone votes on); refused if the replica's committed config index is above
    ``cas_config_index`` (the caller planned on a stale config)."""

    tablet_id: str
    mode: str = "TOMBSTONE"
    cas_config_index: int | None = None


class StartTabletCopy(msgspec.Struct, frozen=True):
    """Seed 001 StartTabletCopy: copy ``tablet_id`` here from ``source_uuid`` at
    ``source_address``. ``caller_term`` is the requesting leader's term (an operator's
    request passes the source's term); ``expected_state`` is what the caller believes this
    replica is (DOES_NOT_EXIST, DELETED or READY: behind the leader's log GC);
    ``last_opid``, if given, must be this replica's last logged OpId."""

    tablet_id: str
    caller_uuid: str
    caller_term: int
    source_uuid: str
    source_address: str
    expected_state: str = "DOES_NOT_EXIST"
    last_opid: tuple[int, int] | None = None


class CopyInfo(msgspec.Struct, frozen=True):
    """A tablet copy running on this server (the destination)."""

    tablet_id: str
    source_uuid: str
    source_address: str
    phase: str  # begin | cmeta | wal | blocks | ready | done | failed (copy.CopyPhase)
    bytes_done: int
    total_bytes: int
    files_done: int
    files_total: int
    elapsed_seconds: float
    rate_bytes_per_second: float
    retries: int
    current_file: str | None = None
    error: str | None = None


class CopyList(msgspec.Struct, frozen=True):
    copies: list[CopyInfo]
    max_concurrent: int


class ChangeConfig(msgspec.Struct, frozen=True):
    tablet_id: str
    change: ConfigChange
    cas_config_index: int


class ConfigChanged(msgspec.Struct, frozen=True):
    config_index: int  # the OpId index of the committed change


class Write(msgspec.Struct, frozen=True):
    tablet_id: str
    client_id: str
    seq: int
    ops: list[RowOp]


class Written(msgspec.Struct, frozen=True):
    index: int
    ops_applied: int
    duplicate: bool


class Read(msgspec.Struct, frozen=True):
    tablet_id: str
    key: bytes


class ReadResult(msgspec.Struct, frozen=True):
    found: bool
    value: bytes = b""


class Scan(msgspec.Struct, frozen=True):
    tablet_id: str
    start: bytes | None = None
    end: bytes | None = None
    limit: int = 1000


class ScanResult(msgspec.Struct, frozen=True):
    rows: list[tuple[bytes, bytes]]
    more: bool  # the limit cut the scan: continue from the last key returned + b"\0"


# ---------------------------------------------------------------------------- errors


class NotLeader(AppError):
    code = "tserver.not_leader"
    fields = ("leader_uuid", "leader_address", "term")  # ``detail``: in the message only

    def __init__(self, leader_uuid: str | None, leader_address: str | None, term: int,
                 detail: str = "") -> None:
        hint = f"; try {leader_uuid} at {leader_address}" if leader_uuid else ""
        super().__init__(f"not the leader (term {term}){hint}{': ' + detail if detail else ''}")
        self.leader_uuid = leader_uuid
        self.leader_address = leader_address
        self.term = term


class TabletNotFound(AppError):
    code = "tserver.tablet_not_found"
    fields = ("tablet_id",)

    def __init__(self, tablet_id: str) -> None:
        super().__init__(f"tablet {tablet_id} is not hosted here")
        self.tablet_id = tablet_id


class TabletNotRunning(AppError):
    code = "tserver.tablet_not_running"
    fields = ("tablet_id", "state", "reason")

    def __init__(self, tablet_id: str, state: str, reason: str) -> None:
        super().__init__(f"tablet {tablet_id} is {state}{': ' + reason if reason else ''}")
        self.tablet_id = tablet_id
        self.state = state
        self.reason = reason


class TabletAlreadyExists(AppError):
    code = "tserver.tablet_exists"
    fields = ("tablet_id",)

    def __init__(self, tablet_id: str) -> None:
        super().__init__(f"tablet {tablet_id} already exists here")
        self.tablet_id = tablet_id


class TabletDeleted(AppError):
    """A master's CreateTablet for a tablet this server deleted for good (mode DELETED):
    stale, since nothing is undeleted and a tablet id is never reused."""

    code = "tserver.tablet_deleted"
    fields = ("tablet_id",)

    def __init__(self, tablet_id: str) -> None:
        super().__init__(f"tablet {tablet_id} was deleted from this server (mode DELETED); "
                         "a master's CreateTablet for it is stale: a tablet id is never "
                         "reused")
        self.tablet_id = tablet_id


class ConfigChangeRefused(AppError):
    code = "tserver.config_change_refused"
    fields = ("reason", "detail", "committed_index")

    def __init__(self, reason: str, detail: str, committed_index: int) -> None:
        super().__init__(f"config change refused ({reason}): {detail}")
        self.reason = reason
        self.detail = detail
        self.committed_index = committed_index


class InvalidArgument(AppError):
    code = "tserver.invalid_argument"
    fields = ("detail",)

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class OperationAborted(AppError):
    code = "tserver.aborted"
    fields = ("detail",)

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class TabletCreateFailed(AppError):
    """CreateTablet failed on this server's disk (``errno`` the OS error's number, 0 when
    none): the create was not made; what it wrote before its commit point (the superblock)
    is removed now or, if the disk still refuses, at the next startup. The server keeps
    serving; the create may be retried (or the tablet copied here)."""

    code = "tserver.create_failed"
    fields = ("tablet_id", "errno", "detail")

    def __init__(self, tablet_id: str, errno: int, detail: str) -> None:
        super().__init__(f"CreateTablet of {tablet_id} failed: {detail}")
        self.tablet_id = tablet_id
        self.errno = errno
        self.detail = detail


class CopyRefused(AppError):
    """StartTabletCopy refused. ``reason`` is the first failing check (seed 001's order with
    the term checks first, see impl/tserver/tablet_copy.py) or THROTTLED."""

    code = "tserver.copy_refused"
    fields = ("reason", "detail")

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"tablet copy refused ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


APP_ERRORS: Final[tuple[type[AppError], ...]] = (
    NotLeader, TabletNotFound, TabletNotRunning, TabletAlreadyExists, ConfigChangeRefused,
    InvalidArgument, OperationAborted, CopyRefused, TabletDeleted, TabletCreateFailed,
)

__all__ = [
    "ADMIN_CANCEL_COPY",
    "ADMIN_CHANGE_CONFIG",
    "ADMIN_CONSENSUS_STATE",
    "ADMIN_CREATE_TABLET",
    "ADMIN_DELETE_TABLET",
    "ADMIN_LIST_COPIES",
    "ADMIN_START_TABLET_COPY",
    "ADMIN_STATUS",
    "ADMIN_STEP_DOWN",
    "APP_ERRORS",
    "DATA_READ",
    "DATA_SCAN",
    "DATA_WRITE",
    "RAFT_MESSAGE",
    "RAFT_PING",
    "Ack",
    "ChangeConfig",
    "ConfigChangeRefused",
    "ConfigChanged",
    "CopyInfo",
    "CopyList",
    "CopyRefused",
    "CreateTablet",
    "DeleteTablet",
    "Empty",
    "InvalidArgument",
    "Kind",
    "NotLeader",
    "OperationAborted",
    "RaftMessages",
    "Read",
    "ReadResult",
    "ReplicaInfo",
    "Scan",
    "ScanResult",
    "ServerStatus",
    "StartTabletCopy",
    "StepDown",
    "TabletAlreadyExists",
    "TabletCreateFailed",
    "TabletCreated",
    "TabletDeleted",
    "TabletNotFound",
    "TabletNotRunning",
    "TabletRef",
    "Write",
    "Written",
]
