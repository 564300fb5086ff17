"""The trace contract: the typed event records both sides use.

A trace line (``traces/README.md``) is an envelope (``Envelope``) whose ``args`` has the
shape of the event's args Struct (``ARGS_TYPES``) and whose ``state`` is a ``DurableState``
(null for server events). The writer (``revivify.impl.trace``) builds every line through
these Structs; the reader (``revivify.checker.traces``) decodes into them;
``traces/schema.json`` is generated from them (``revivify.contract.schema``).

This module imports neither the spec, the checker nor the implementation (an import-linter
contract): only ``msgspec`` and the standard library. Names here are the spec's names, as
strings; the checker maps them to the spec's codes.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import msgspec

SCHEMA_VERSION: Final = 4
# The versions the reader reads: the current one, and versions 2 and 3 (their lines lack
# what later versions added; the checks that need it skip them, see traces/README.md
# "Version 3"; version 4 only added the master events, so a version-3 line reads as is).
SUPPORTED_VERSIONS: Final = (2, 3, 4)
# What changed at each version, for the message that refuses an older trace.
SCHEMA_HISTORY: Final = {
    1: "version 1 (log_append without first_index; no step_down, config_commit, DAMAGED "
       "states or FAILED startup reasons)",
}

# The envelope's fields, in order, with their JSON types: the contract that
# traces/schema.json spells out, the Envelope Struct below (which the reader decodes into),
# and the writer in impl/ all follow this list (checked at import below and in
# tests/trace/test_reader.py). Both Spark plans decode lines with the same Structs (see
# checker/spark.py for why Spark's own JSON reader is not used).
ENVELOPE_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("v", "int"),
    ("node", "string"),
    ("inc", "int"),
    ("seq", "int"),
    ("lamport", "int"),
    ("wall_ns", "int"),
    ("tablet", "string?"),
    ("event", "string"),
    ("args", "object"),
    ("state", "object?"),
)

# Every event name, as a type (the checker's bulk decoder checks them with it): the
# tablet events, then the server events.
EventName = Literal[
    "create_tablet", "delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
    "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal", "delete_remove_cmeta",
    "delete_remove_superblock", "stc_accept", "stc_reject", "copy_begin", "copy_merge_cmeta",
    "copy_download_wal", "copy_download_block", "copy_blocks_done", "copy_mark_ready",
    "copy_start_replica", "copy_abort", "startup", "learn_term", "vote_granted",
    "vote_denied", "start_election", "become_leader", "step_down", "log_append", "commit",
    "config_commit", "config_change", "server_format", "server_start", "server_stop",
    "master_ready", "catalog_commit", "master_call",
]
# Server events (tablet null): the instance was formatted (a new UUID), an incarnation
# began, an incarnation ended cleanly (no frontier to guess at the next start).
SERVER_EVENTS: Final = ("server_format", "server_start", "server_stop")
# Master events (tablet null, no state; version 4), written by a master beside its catalog
# tablet's Raft events: the master passed the leader-ready gate with the catalog it rebuilt
# (``master_ready``), a catalog write committed (``catalog_commit``: the records it wrote),
# a call to a tablet server was released (``master_call``). The catalog spec
# (spec/catalog.py) says which are allowed when; traces/README.md "Master events".
MASTER_EVENTS: Final = ("master_ready", "catalog_commit", "master_call")
# The events whose tablet is null: a line's tablet must be null exactly for these.
NODE_EVENTS: Final = SERVER_EVENTS + MASTER_EVENTS
# The catalog tablet's id: its Raft events are a master's tablet events like any other.
CATALOG_TABLET: Final = "sys-catalog"
# Tablet events: exactly the spec's local actions minus crash, wipe and damage (a crash is
# inferred from the next incarnation; a wipe shows as a new node UUID; damage is inferred at
# a crash boundary from the DAMAGED state the next startup reports).
TABLET_EVENTS: Final = tuple(e for e in get_args(EventName) if e not in NODE_EVENTS)
# Spec actions no process logs.
UNLOGGED_ACTIONS: Final = ("crash", "wipe", "damage", "drop", "purge")
KNOWN_EVENTS: Final = frozenset(TABLET_EVENTS + NODE_EVENTS)


class Envelope(msgspec.Struct):
    """One line's envelope; ``args`` and ``state`` are kept as raw JSON."""

    v: int
    node: str
    inc: int
    seq: int
    lamport: int
    wall_ns: int
    tablet: str | None
    event: str
    args: msgspec.Raw
    state: msgspec.Raw = msgspec.Raw(b"null")


if tuple(Envelope.__struct_fields__) != tuple(n for n, _ in ENVELOPE_FIELDS):
    raise AssertionError("Envelope is out of step with ENVELOPE_FIELDS")


# ---------------------------------------------------------------------------------------
# Event arguments. Names are the spec's parameter names; server identities are UUID
# strings; enumerations are names (``SB_NAMES`` etc.). Extra facts (the caller of a
# StartTabletCopy, the cmeta merge's inputs and result) are checked against the replay.

SbName = Literal["DOES_NOT_EXIST", "DELETED", "COPYING", "READY"]
WalName = Literal["ABSENT", "LIVE", "QUARANTINED", "DAMAGED"]
BlocksName = Literal["ABSENT", "PARTIAL", "PRESENT", "DAMAGED"]
CaseName = Literal["NOTHING", "ROLL_FORWARD", "COPYING_TO_DELETED", "READY", "FAILED",
                   "TOMBSTONE"]
StcName = Literal["OK", "ALREADY_IN_PROGRESS", "ILLEGAL_STATE", "STALE_TERM",
                  "OPID_MISMATCH"]


class CmetaState(msgspec.Struct, forbid_unknown_fields=True):
    term: int
    voted_for: str | None
    config_index: int


class SuperblockState(msgspec.Struct, forbid_unknown_fields=True):
    data_state: SbName
    last_opid: tuple[int, int]
    qdir: bool


class WalState(msgspec.Struct, forbid_unknown_fields=True):
    location: WalName
    last_opid: tuple[int, int]


class QuarantineState(msgspec.Struct, forbid_unknown_fields=True):
    superblock: bool
    cmeta: bool


class DurableState(msgspec.Struct, forbid_unknown_fields=True):
    """The abstract durable state after a step (spec ``DURABLE_FIELDS``, uuid_gen implicit:
    a new UUID is a new key)."""

    superblock: SuperblockState
    cmeta: CmetaState | None
    wal: WalState
    blocks: BlocksName
    quarantine: QuarantineState | None


class _Args(msgspec.Struct, forbid_unknown_fields=True):
    pass


class NoArgs(_Args):
    pass


class CopyBeginArgs(_Args):
    """``source``: the UUID of the server the copy downloads from (an extra fact)."""

    source: str | None = None


class CopyAbortArgs(_Args):
    """``reason``: why the copy failed or was cancelled (free text, not checked)."""

    reason: str = ""


class CreateArgs(_Args):
    """``voters``: the UUIDs of the VOTER members of the tablet's first config (the global
    checks count votes and replicas against them)."""

    config_index: int
    voters: list[str]


class StcArgs(_Args):
    caller: str
    caller_term: int
    expected_state: SbName
    has_opid: bool
    opid_term: int
    opid_index: int
    answer: StcName


class StcRejectArgs(StcArgs):
    reason: StcName


class MergeArgs(_Args):
    remote_term: int
    remote_config_index: int
    local: CmetaState | None
    remote: CmetaState
    result: CmetaState


class DownloadWalArgs(_Args):
    remote_last_term: int
    remote_last_index: int


class StartupArgs(_Args):
    """``reason`` (free text: what failed verification) is given exactly when ``case`` is
    FAILED (checked by ``decode_args``)."""

    case: CaseName
    reason: str | None = None


class LearnTermArgs(_Args):
    t: int


class VoteArgs(_Args):
    candidate: str
    t: int
    cand_last_term: int
    cand_last_index: int


class ElectionArgs(_Args):
    me: str


class LeaderArgs(_Args):
    me: str
    t: int


class StepDownArgs(_Args):
    """No parameter; ``reason`` (free text: check-quorum, a transfer, an operator) is an
    optional extra fact, not checked."""

    reason: str | None = None


class AppendArgs(_Args):
    """A batch first_index..op_index written with one fsync; op_term is the last entry's.

    Version 3 adds ``prev_term`` (the term of the entry at first_index - 1 in the node's own
    log; 0 when first_index is 1) and ``terms`` (the batch's entry terms, run-length encoded
    as ``[[term, count], ...]`` in index order): both or neither (a version-2 line, or a
    writer whose log is abstract); ``decode_args`` checks their shape."""

    first_index: int
    op_term: int
    op_index: int
    prev_term: int | None = None
    terms: list[tuple[int, int]] | None = None


class CommitArgs(_Args):
    """Every index up to ``index`` is committed; op_term is the term of the entry at it."""

    index: int
    op_term: int


class ConfigCommitArgs(_Args):
    """The committed config change entry at index ``config_index``, now in the cmeta;
    ``voters``: the UUIDs of that config's VOTER members."""

    config_index: int
    voters: list[str]


class ConfigChangeArgs(_Args):
    """A leader accepted a ChangeConfig, logged before the ``log_append`` of its config
    entry: ``cas_index`` is the committed config index the caller named (its
    compare-and-set, which must equal the leader's: the state's ``cmeta.config_index``),
    ``config_index`` the index the config entry takes (the leader's last index + 1).
    ``voters`` (an extra fact, not checked): the UUIDs of the new config's VOTER
    members."""

    cas_index: int
    config_index: int
    voters: list[str] | None = None


class FormatArgs(_Args):
    pass


class StartArgs(_Args):
    pass


class StopArgs(_Args):
    pass


# Master events. A catalog record as the checks need it: not the whole row (no schema
# columns), the fields the ordering contract and the fencing rules read.
CatalogTableState = Literal["PREPARING", "RUNNING", "ALTERING", "REMOVED"]
CatalogTabletState = Literal["CREATING", "RUNNING", "REPLACED", "DELETED"]
CallMethod = Literal["create_tablet", "delete_tablet", "alter_schema", "change_config"]


# ``version`` is the row's write count (impl/master/catalog.py C4: each write of a row
# holds its previous version + 1, 1 for a new row): along the committed catalog log a
# row's versions only grow, one write per version, so a rebuilt record at a lower version
# than a write committed at or below the rebuild's index is stale, and one at the same
# version must equal that write's record (ReadyHoldsCommittedRecords). 0: not given (a
# version-4 writer before it was added; the checks then compare presence only).


class CatalogTable(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    name: str
    state: CatalogTableState
    schema_version: int
    num_tablets: int
    version: int = 0


class CatalogTablet(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    table: str
    partition: int
    state: CatalogTabletState
    config_index: int  # the opid_index of the committed config the record holds
    peers: list[str]  # that config's members (UUIDs)
    version: int = 0


class MasterReadyArgs(_Args):
    """The gate opened: leader of the catalog in ``term``, every entry up to ``index``
    applied, and this catalog (every record) rebuilt from the rows alone."""

    term: int
    index: int
    tables: list[CatalogTable]
    tablets: list[CatalogTablet]


class CatalogCommitArgs(_Args):
    """One catalog write committed and applied at ``index`` (a ready leader's, of
    ``term``): the records it wrote, as they are after it. ``op`` names the operation."""

    term: int
    index: int
    op: str
    tables: list[CatalogTable]
    tablets: list[CatalogTablet]


class MasterCallArgs(_Args):
    """A call to a tablet server released by the ready leader of ``term`` (traced once,
    before its first attempt). ``mode`` and ``cas_config_index`` for delete_tablet,
    ``schema_version`` for alter_schema."""

    term: int
    method: CallMethod
    tablet: str
    dest: str
    mode: Literal["DELETED", "TOMBSTONE"] | None = None
    cas_config_index: int | None = None
    schema_version: int | None = None


ARGS_TYPES: Final[dict[str, type[_Args]]] = {
    "create_tablet": CreateArgs,
    "delete_shutdown": NoArgs, "delete_create_qdir": NoArgs, "delete_copy_superblock": NoArgs,
    "delete_mark_deleted": NoArgs, "delete_copy_cmeta": NoArgs, "delete_move_wal": NoArgs,
    "delete_remove_cmeta": NoArgs, "delete_remove_superblock": NoArgs,
    "copy_abort": CopyAbortArgs, "stc_accept": StcArgs, "stc_reject": StcRejectArgs,
    "copy_begin": CopyBeginArgs, "copy_merge_cmeta": MergeArgs,
    "copy_download_wal": DownloadWalArgs,
    "copy_download_block": NoArgs, "copy_blocks_done": NoArgs, "copy_mark_ready": NoArgs,
    "copy_start_replica": NoArgs, "startup": StartupArgs, "learn_term": LearnTermArgs,
    "vote_granted": VoteArgs, "vote_denied": VoteArgs, "start_election": ElectionArgs,
    "become_leader": LeaderArgs, "step_down": StepDownArgs, "log_append": AppendArgs,
    "commit": CommitArgs, "config_commit": ConfigCommitArgs,
    "config_change": ConfigChangeArgs,
    "server_format": FormatArgs, "server_start": StartArgs, "server_stop": StopArgs,
    "master_ready": MasterReadyArgs, "catalog_commit": CatalogCommitArgs,
    "master_call": MasterCallArgs,
}
