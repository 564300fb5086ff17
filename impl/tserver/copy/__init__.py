"""Tablet copy (seed 001, "Follower Tablet Copy"): move a replica from a source server to a
destination server.

    api       RPC bodies, method names and errors of the source's copy service
    source    CopySessionManager: sessions pinning a consistent snapshot (WAL anchored,
              files held open) and serving it in checksummed chunks
    download  run_copy: the destination's verified, all-or-nothing download over the
              CopySource / CopyTarget seams; LocalCopyTarget, the durable local steps
    merge     merge_cmeta: the consensus-metadata merge rules (a pure function)
"""

from .api import (
    COPY_BEGIN_SESSION,
    COPY_END_SESSION,
    COPY_ERRORS,
    COPY_FETCH_DATA,
    COPY_KEEP_ALIVE,
    MAX_CHUNK,
    BadFetch,
    BeginTabletCopySession,
    CopySessionInfo,
    CopySourceUnavailable,
    DataChunk,
    EndTabletCopySession,
    FetchData,
    FileInfo,
    KeepAlive,
    NoSuchSession,
)
from .download import (
    CopyFailed,
    CopyPhase,
    CopyProgress,
    CopyResult,
    CopySource,
    CopyTarget,
    CopyTargetError,
    FileSink,
    LocalCopyTarget,
    LocalFileSink,
    run_copy,
)
from .merge import merge_cmeta
from .source import CopySessionManager

__all__ = [
    "COPY_BEGIN_SESSION", "COPY_END_SESSION", "COPY_ERRORS", "COPY_FETCH_DATA",
    "COPY_KEEP_ALIVE", "MAX_CHUNK", "BadFetch", "BeginTabletCopySession", "CopyFailed",
    "CopyPhase", "CopyProgress", "CopyResult", "CopySessionInfo", "CopySessionManager",
    "CopySource", "CopySourceUnavailable", "CopyTarget", "CopyTargetError", "DataChunk",
    "EndTabletCopySession", "FetchData", "FileInfo", "FileSink", "KeepAlive",
    "LocalCopyTarget", "LocalFileSink", "NoSuchSession", "merge_cmeta", "run_copy",
]
