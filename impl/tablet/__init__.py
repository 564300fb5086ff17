"""The data side of one tablet replica: what Raft's state machine applies committed entries to.

    ops       the replicated write payload: WriteBatch(client_id, seq, ops) of RowOp put /
              delete, its msgpack encoding, and the limits (validate_write)
    store     TabletStore: memory store over flushed blocks, apply with exactly-once,
              get / scan, flush, compaction, bootstrap from disk
    errors    TabletError and its subclasses

Plain synchronous code over the storage `Disk` seam (no trio): it runs on the real disk and
on SimDisk; the tablet server runs the blocking calls in a worker thread.
"""

from typing import TYPE_CHECKING

from revivify.impl.lazy import lazy_exports

if TYPE_CHECKING:
    from revivify.impl.tablet.errors import (
        ApplyOutOfOrder,
        InvalidWrite,
        MalformedWrite,
        TabletDataCorrupt,
        TabletError,
        TabletStateError,
        TabletStoreFailed,
        WriteError,
    )
    from revivify.impl.tablet.ops import (
        RowOp,
        WriteBatch,
        decode_write,
        delete,
        encode_write,
        put,
        validate_write,
    )
    from revivify.impl.tablet.store import ApplyResult, StoreOptions, TabletStore

# Re-exports are lazy: the RPC interfaces import ops.py (the write payload) alone, and must
# not load the store and the storage stack below it (the CLI's start, issue 31).
_SUBMODULE_OF: dict[str, str] = {
    "ApplyOutOfOrder": "errors",
    "ApplyResult": "store",
    "InvalidWrite": "errors",
    "MalformedWrite": "errors",
    "RowOp": "ops",
    "StoreOptions": "store",
    "TabletDataCorrupt": "errors",
    "TabletError": "errors",
    "TabletStateError": "errors",
    "TabletStore": "store",
    "TabletStoreFailed": "errors",
    "WriteBatch": "ops",
    "WriteError": "errors",
    "decode_write": "ops",
    "delete": "ops",
    "encode_write": "ops",
    "put": "ops",
    "validate_write": "ops",
}


__getattr__ = lazy_exports(__name__, _SUBMODULE_OF, globals())

__all__ = [
    "ApplyOutOfOrder",
    "ApplyResult",
    "InvalidWrite",
    "MalformedWrite",
    "RowOp",
    "StoreOptions",
    "TabletDataCorrupt",
    "TabletError",
    "TabletStateError",
    "TabletStore",
    "TabletStoreFailed",
    "WriteBatch",
    "WriteError",
    "decode_write",
    "delete",
    "encode_write",
    "put",
    "validate_write",
]
