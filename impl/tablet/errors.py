"""The error hierarchy of tablet data: each error names what is wrong and where.

    TabletError
    ├── WriteError                                  a client write cannot be accepted
    │   ├── MalformedWrite(reason)                  payload bytes are not a WriteBatch
    │   └── InvalidWrite(reason, op_index)          a decodable batch breaks a limit
    ├── ApplyOutOfOrder(tablet_id, reason, ...)     the caller applied a wrong index/term
    ├── TabletDataCorrupt(path, reason, block_id)   a superblock or live block is bad/missing
    ├── TabletStateError(tablet_id, reason)         no superblock, not READY, or changed by
    │                                               someone else under the store
    └── TabletStoreFailed(tablet_id, cause)         an earlier flush/compaction failed; the
                                                    store accepts nothing but reads

The caller's reactions: a WriteError goes back to the client; ApplyOutOfOrder is a bug in the
caller (Raft applying out of order) and changes nothing; TabletDataCorrupt, TabletStateError
and TabletStoreFailed take the tablet offline (FAILED with the error's message) and the
evidence stays on disk, untouched.
"""

from __future__ import annotations


class TabletError(Exception):
    """Base of every error raised by revivify.impl.tablet."""


class WriteError(TabletError):
    """A client write cannot be accepted (undecodable or outside the limits)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class MalformedWrite(WriteError):
    """The bytes of a replicated write payload do not decode to a WriteBatch."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed write payload: {reason}", reason)


class InvalidWrite(WriteError):
    """A WriteBatch breaks a limit; `op_index` is the offending op (None: the batch itself)."""

    def __init__(self, reason: str, op_index: int | None = None) -> None:
        where = "write batch" if op_index is None else f"op {op_index} of the write batch"
        super().__init__(f"invalid {where}: {reason}", reason)
        self.op_index = op_index


class ApplyOutOfOrder(TabletError):
    """`apply*` was called with an index other than applied_index + 1 or a lower term."""

    def __init__(
        self, tablet_id: str, reason: str, *, applied_index: int, index: int, term: int
    ) -> None:
        super().__init__(f"tablet {tablet_id}: cannot apply entry {term}.{index}: {reason}")
        self.tablet_id = tablet_id
        self.reason = reason
        self.applied_index = applied_index
        self.index = index
        self.term = term


class TabletDataCorrupt(TabletError):
    """The superblock or a live block of the tablet at `path` is corrupt or missing."""

    def __init__(self, path: str, reason: str, *, block_id: str | None = None) -> None:
        super().__init__(f"{path}: tablet data corrupt: {reason}")
        self.path = path
        self.reason = reason
        self.block_id = block_id


class TabletStateError(TabletError):
    """The tablet's superblock is missing, not READY, or was changed under the store."""

    def __init__(self, tablet_id: str, reason: str) -> None:
        super().__init__(f"tablet {tablet_id}: {reason}")
        self.tablet_id = tablet_id
        self.reason = reason


class TabletStoreFailed(TabletError):
    """A flush or compaction failed part way; the in-memory view no longer matches the disk."""

    def __init__(self, tablet_id: str, cause: BaseException) -> None:
        super().__init__(f"tablet {tablet_id}: store failed: {cause!r}; reopen it from disk")
        self.tablet_id = tablet_id
        self.cause = cause
