"""The data of one tablet replica: the state machine Raft applies committed entries to.

Kudu's shape, reduced to (key bytes, value bytes) rows: a memory store (Kudu's MemRowSet)
takes the rows of applied writes; a flush writes it as one immutable, checksummed block
(a DiskRowSet, blocks.py) and commits it in the superblock; compaction merges the live blocks
into one; bootstrap reloads the blocks and Raft replays the WAL above the flushed OpId.

Layers, newest first (a read takes a key's value from the newest layer holding it, and a
delete marker, stored as the value None, hides every older layer)::

    active   the memory store: the rows of entries (flushed_index, applied_index]
    frozen   only during a flush: the memory store being written, still readable
    base     the live blocks merged oldest to newest: the rows as of flushed_opid

Each layer is a dict plus a sorted key list (`bisect`), so `get` is one lookup per layer and
a range scan of k rows costs O(log n + k + delete markers skipped), merging the layers with
`heapq.merge`; never O(all rows).

Invariants (D is about the disk, R about recovery, X about exactly-once):

D  The durable superblock's `live_blocks`, merged oldest to newest, are exactly the rows as
   of its `flushed_opid`, and its `client_results` are the client table as of that OpId.
   Each flush and compaction moves from one such superblock to the next with ONE atomic
   superblock write (metadata.py); that write is the commit point. Before it, a crash leaves
   the old superblock (the new block file is merely unreferenced); after it, the new one.
   Compaction does not change the rows, only how many blocks hold them.
R  The store at applied_index equals the durable state of D with the entries
   (flushed_index, applied_index] applied in order, because `apply` is deterministic in
   (state, entry). The caller garbage-collects the WAL only below the OpId a flush
   *returned*, so after any crash the WAL still holds every entry above the durable
   flushed_opid, and replaying them through `apply` rebuilds the same state and the same
   results (duplicates included) on every replica and after every restart.
X  The client table maps each client id to the last seq applied for it and that write's
   result (`ClientResult`). A batch with seq == the remembered seq is not applied again: the
   remembered result comes back with `duplicate=True`. A batch with a lower seq is not
   applied either and its result is no longer known: the answer is `stale=True` (and
   duplicate=True, ops_applied=0, index = this entry's index); the client sees "stale
   write" (Kudu's STALE error). A duplicate is recognised by (client_id, seq) alone, as in
   Kudu: a different batch under a used pair is the client's bug. The table is flushed with
   the rows (D), so a retry is recognised across flushes and restarts.

Applying a committed entry never raises for the entry's content: a batch that breaks a limit
(ops.py) or a payload that does not decode is *rejected* deterministically, identically on
every replica: applied_index advances, nothing changes, and the result carries `error`. A
rejected batch with a valid (client_id, seq) is remembered like any other (a retry gets the
same rejection). Only the caller's own mistakes raise: an index other than applied_index + 1
or a term below applied_term (ApplyOutOfOrder, nothing changes).

Block rows are ``[key, value]`` with value None for a delete marker, sorted by key. A flush
writes the memory store's rows, delete markers included where they hide a row of an older
block (a marker whose key no older block holds hides nothing and is dropped). Compaction
merges every live block, so it drops all markers. Both split their output into blocks of at
most `max_block_bytes` (disjoint key ranges) so a block always fits a codec frame; normally
a flush writes one block.

Superblock writes: the store re-reads the superblock before each write and changes only
`live_blocks`, `orphaned_blocks`, `flushed_opid` and `client_results` (`attrs.evolve`); it
never changes `data_state`. If the superblock is gone, not READY, or its live blocks or
flushed OpId are not what the store last wrote, someone else changed the tablet underneath:
TabletStateError, and nothing is written. Writers of one tablet's superblock must be
serialized by the caller (the shell stops the store before deleting or copying the tablet).

Failure: if a flush or compaction raises part way (an I/O error, a crash), the in-memory
view may no longer match the disk; the store marks itself failed and refuses everything
but reads (TabletStoreFailed). Reopen it from disk (`TabletStore.open`) and replay the WAL.

Threads: every method is safe to call from any thread. State changes and reads hold one
lock briefly; a flush or compaction holds a second lock (one at a time) for its disk I/O
but the state lock only to swap layers, so applies and reads proceed during the I/O.
Nothing here uses trio: the shell runs the blocking calls (open, flush, compact) in a
worker thread.

Block files live in the server's shared data/ directory. A crash during a flush or
compaction may leave an unreferenced block file; the store never sweeps them (only a
sweeper that reads every tablet's superblock may: BlockManager.unreferenced_blocks).

Limits (acceptable while tablets are small; later issues lift them):
* the whole tablet is in memory: `open` reads every live block into the base layer;
* inserting a new key into a layer's sorted key list is O(n) (a memmove), and merging a
  flushed memory store into the base costs O(base + flushed) per flush;
* the client table is never expired: it grows with the number of distinct client ids
  (Kudu expires idle clients; a deterministic expiry must be driven by replicated time).
"""

from __future__ import annotations

import contextlib
import heapq
import threading
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import attrs

from ..storage.blocks import (
    BlockManager,
    finish_orphan_deletion,
    replace_live_blocks,
)
from ..storage.errors import BlockCorrupt, BlockNotFound, InvalidName, MetadataCorrupt
from ..storage.layout import ServerLayout
from ..storage.metadata import MetadataStore
from ..storage.values import ClientResult, DataState, OpId, Superblock
from .errors import (
    ApplyOutOfOrder,
    InvalidWrite,
    MalformedWrite,
    TabletDataCorrupt,
    TabletError,
    TabletStateError,
    TabletStoreFailed,
)
from .ops import WriteBatch, decode_write, validate_identity, validate_ops

ROW_OVERHEAD = 32
"""Bytes charged per row on top of its key and value (dict and list slots, block framing)."""

MAX_BLOCK_BYTES = 64 << 20


@attrs.frozen
class StoreOptions:
    """Tuning of one store; the defaults suit tablets of a few hundred MiB at most."""

    max_live_blocks: int = 8  # needs_compaction() once more blocks than this are live
    max_block_bytes: int = attrs.field(default=MAX_BLOCK_BYTES)  # split flushes beyond it

    @max_block_bytes.validator
    def _check(self, attribute: attrs.Attribute[int], value: int) -> None:
        if not 1 <= value <= 128 << 20:  # a block must fit a codec frame (256 MiB)
            raise ValueError(f"max_block_bytes must be 1..{128 << 20}, got {value}")


@attrs.frozen
class ApplyResult:
    """The outcome of applying one log entry (see invariant X in the module docstring).

    `index`: the log index whose application produced this outcome: this entry's, or for a
    duplicate the index that applied the original write. `ops_applied`: row ops applied by
    that write (0 if rejected or stale). `error`: set when the write was rejected (invalid
    batch or undecodable payload); nothing was applied.
    """

    index: int
    ops_applied: int
    duplicate: bool = False
    stale: bool = False
    error: str | None = None

    @property
    def rejected(self) -> bool:
        return self.error is not None


class _SortedRows:
    """A map key -> value (None: a delete marker) whose keys are also kept in a sorted list."""

    __slots__ = ("keys", "nbytes", "rows")

    def __init__(self) -> None:
        self.rows: dict[bytes, bytes | None] = {}
        self.keys: list[bytes] = []
        self.nbytes = 0  # keys + values + ROW_OVERHEAD per row

    @classmethod
    def from_dict(cls, rows: dict[bytes, bytes | None]) -> _SortedRows:
        layer = cls()
        layer.rows = rows
        layer.keys = sorted(rows)
        layer.nbytes = sum(_row_bytes(k, v) for k, v in rows.items())
        return layer

    def __len__(self) -> int:
        return len(self.rows)

    def set(self, key: bytes, value: bytes | None) -> None:
        if key in self.rows:
            self.nbytes -= _row_bytes(key, self.rows[key])
        else:
            insort(self.keys, key)
        self.rows[key] = value
        self.nbytes += _row_bytes(key, value)

    def range(self, start: bytes | None, end: bytes | None) -> Iterator[bytes]:
        """Keys k with start <= k < end (None: unbounded), in order, found by bisection."""
        keys = self.keys
        first = 0 if start is None else bisect_left(keys, start)
        stop = len(keys) if end is None else bisect_left(keys, end)
        for position in range(first, stop):
            yield keys[position]

    def merged_with(self, newer: _SortedRows) -> _SortedRows:
        """A new layer: this one (holding no delete markers) with `newer` applied over it.

        O(len(self) + len(newer)): one dict copy and one linear merge of sorted key lists.
        """
        rows = dict(self.rows)
        nbytes = self.nbytes
        added: list[bytes] = []  # sorted, because newer.keys is
        removed: set[bytes] = set()
        for key in newer.keys:
            value = newer.rows[key]
            existed = key in rows  # no delete markers here: present means a live row
            if existed:
                nbytes -= _row_bytes(key, rows[key])
            if value is None:
                if existed:
                    del rows[key]
                    removed.add(key)
            else:
                rows[key] = value
                nbytes += _row_bytes(key, value)
                if not existed:
                    added.append(key)
        keys = [k for k in self.keys if k not in removed] if removed else self.keys
        merged = _SortedRows()
        merged.rows = rows
        merged.keys = list(heapq.merge(keys, added)) if added else list(keys)
        merged.nbytes = nbytes
        return merged


def _row_bytes(key: bytes, value: bytes | None) -> int:
    return len(key) + (0 if value is None else len(value)) + ROW_OVERHEAD


def _tagged(keys: Iterator[bytes], rank: int) -> Iterator[tuple[bytes, int]]:
    for key in keys:
        yield key, rank


class TabletStore:
    """The rows of one tablet replica; build one with `TabletStore.open`."""

    def __init__(
        self,
        layout: ServerLayout,
        metadata: MetadataStore,
        blocks: BlockManager,
        superblock: Superblock,
        base: _SortedRows,
        options: StoreOptions,
    ) -> None:
        self._layout = layout
        self._metadata = metadata
        self._blocks = blocks
        self._tablet_id = superblock.tablet_id
        self._options = options
        self._lock = threading.Lock()  # the in-memory state below
        self._maintenance = threading.Lock()  # one flush or compaction at a time
        self._active = _SortedRows()
        self._frozen: _SortedRows | None = None
        self._base = base  # replaced (never mutated) by a flush, under both locks
        self._clients = {c.client_id: c for c in superblock.client_results}
        opid = superblock.flushed_opid
        self._flushed_opid = opid
        self._live_blocks = superblock.live_blocks
        self._applied_index = 0 if opid is None else opid.index
        self._applied_term = 0 if opid is None else opid.term
        self._failure: BaseException | None = None

    # ------------------------------------------------------------------ bootstrap

    @classmethod
    def open(
        cls,
        layout: ServerLayout,
        metadata: MetadataStore,
        blocks: BlockManager,
        tablet_id: str,
        options: StoreOptions | None = None,
    ) -> TabletStore:
        """Bootstrap from disk (Kudu's tablet bootstrap, without the WAL replay).

        Reads the superblock (it must exist and be READY), finishes any block deletion a
        crash interrupted, loads and verifies every live block, restores the client table.
        applied_index is then the flushed index: the caller replays the committed WAL
        entries above it through `apply*`. Raises TabletDataCorrupt (a corrupt superblock,
        a missing or corrupt live block, naming its path) or TabletStateError (no
        superblock, not READY); the caller marks the tablet FAILED with the error.
        """
        try:
            superblock = metadata.load_superblock(tablet_id)
        except MetadataCorrupt as exc:
            raise TabletDataCorrupt(exc.path, exc.reason) from exc
        if superblock is None:
            raise TabletStateError(tablet_id, "no superblock: the tablet does not exist here")
        if superblock.data_state is not DataState.READY:
            raise TabletStateError(
                tablet_id, f"data state is {superblock.data_state.value}, not READY"
            )
        _check_superblock(layout.superblock_path(tablet_id), superblock)
        if superblock.orphaned_blocks:
            superblock = finish_orphan_deletion(metadata, blocks, superblock)
        merged: dict[bytes, bytes | None] = {}
        for block_id in superblock.live_blocks:
            for key, value in _load_block(layout, blocks, superblock, block_id):
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        base = _SortedRows.from_dict(merged)
        return cls(layout, metadata, blocks, superblock, base, options or StoreOptions())

    # ------------------------------------------------------------------ properties

    @property
    def tablet_id(self) -> str:
        return self._tablet_id

    @property
    def options(self) -> StoreOptions:
        return self._options

    @property
    def applied_index(self) -> int:
        with self._lock:
            return self._applied_index

    @property
    def applied_term(self) -> int:
        with self._lock:
            return self._applied_term

    @property
    def flushed_opid(self) -> OpId | None:
        """The OpId of the last entry in the durable blocks (None: nothing flushed yet)."""
        with self._lock:
            return self._flushed_opid

    @property
    def flushed_index(self) -> int:
        with self._lock:
            return 0 if self._flushed_opid is None else self._flushed_opid.index

    @property
    def memory_bytes(self) -> int:
        """Estimated bytes of the rows not yet flushed (active and frozen memory stores)."""
        with self._lock:
            frozen = 0 if self._frozen is None else self._frozen.nbytes
            return self._active.nbytes + frozen

    @property
    def live_blocks(self) -> tuple[str, ...]:
        with self._lock:
            return self._live_blocks

    @property
    def failure(self) -> BaseException | None:
        """Why the store failed (a flush or compaction raised), or None."""
        with self._lock:
            return self._failure

    # ------------------------------------------------------------------ apply

    def apply(self, index: int, term: int, batch: WriteBatch) -> ApplyResult:
        """Apply the committed write at `index` (must be applied_index + 1); see invariant X."""
        with self._lock:
            self._check_next(index, term)
            result = self._apply_batch(index, batch)
            self._advance(index, term)
            return result

    def apply_payload(self, index: int, term: int, payload: bytes) -> ApplyResult:
        """Decode and apply a write entry; an undecodable payload is rejected, not raised."""
        try:
            batch = decode_write(payload)
        except MalformedWrite as exc:
            with self._lock:
                self._check_next(index, term)
                self._advance(index, term)
                return ApplyResult(index, 0, error=str(exc))
        return self.apply(index, term, batch)

    def apply_entry(
        self, index: int, term: int, kind: Literal["noop", "write", "config"], data: bytes
    ) -> ApplyResult | None:
        """Apply a committed Raft entry by kind (consensus's Entry.kind / Entry.data): a
        write goes through `apply_payload` and returns its result; noop and config only
        advance applied_index and return None."""
        if kind == "write":
            return self.apply_payload(index, term, data)
        if kind in ("noop", "config"):
            self.apply_noop(index, term)
            return None
        raise ValueError(f"unknown entry kind {kind!r}")

    def apply_noop(self, index: int, term: int) -> None:
        """A leader's no-op entry: only advances applied_index."""
        with self._lock:
            self._check_next(index, term)
            self._advance(index, term)

    def apply_config(self, index: int, term: int) -> None:
        """A configuration change entry (consensus's business): only advances applied_index."""
        self.apply_noop(index, term)

    def lookup_result(self, client_id: str, seq: int) -> ApplyResult | None:
        """What applying (client_id, seq) now would answer, without applying it: the
        remembered result (duplicate), or stale (its `index` is then the current
        applied_index); None for a seq not seen yet. A leader can answer a retry from this
        instead of replicating it again; `apply` deduplicates regardless."""
        with self._lock:
            known = self._clients.get(client_id)
            if known is None or seq > known.seq:
                return None
            return _duplicate_result(known, seq, self._applied_index)

    def client_result(self, client_id: str) -> ClientResult | None:
        """The remembered last write of `client_id`."""
        with self._lock:
            return self._clients.get(client_id)

    def _check_next(self, index: int, term: int) -> None:
        if self._failure is not None:
            raise TabletStoreFailed(self._tablet_id, self._failure)
        if index != self._applied_index + 1:
            raise ApplyOutOfOrder(
                self._tablet_id,
                f"expected index {self._applied_index + 1}",
                applied_index=self._applied_index,
                index=index,
                term=term,
            )
        if term < self._applied_term:
            raise ApplyOutOfOrder(
                self._tablet_id,
                f"term below the last applied term {self._applied_term}",
                applied_index=self._applied_index,
                index=index,
                term=term,
            )

    def _advance(self, index: int, term: int) -> None:
        self._applied_index = index
        self._applied_term = term

    def _apply_batch(self, index: int, batch: WriteBatch) -> ApplyResult:
        try:
            validate_identity(batch.client_id, batch.seq)
        except InvalidWrite as exc:  # nothing to remember it under
            return ApplyResult(index, 0, error=str(exc))
        known = self._clients.get(batch.client_id)
        if known is not None and batch.seq <= known.seq:
            return _duplicate_result(known, batch.seq, index)
        error: str | None = None
        try:
            validate_ops(batch.ops)
        except InvalidWrite as exc:
            error = str(exc)
            applied = 0
        else:
            active = self._active
            for op in batch.ops:
                active.set(op.key, op.value if op.kind == "put" else None)
            applied = len(batch.ops)
        self._clients[batch.client_id] = ClientResult(
            batch.client_id, batch.seq, index, applied, error
        )
        return ApplyResult(index, applied, error=error)

    # ------------------------------------------------------------------ reads

    def get(self, key: bytes) -> bytes | None:
        """The value at `key`, or None if absent or deleted."""
        with self._lock:
            for layer in self._layers():
                if key in layer.rows:
                    return layer.rows[key]
            return None

    def scan(
        self, start: bytes | None = None, end: bytes | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """Rows with start <= key < end (None: unbounded), in key order, at most `limit`."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        out: list[tuple[bytes, bytes]] = []
        if limit == 0:
            return out
        with self._lock:
            layers = self._layers()
            merged = heapq.merge(
                *(_tagged(layer.range(start, end), rank) for rank, layer in enumerate(layers))
            )
            previous: bytes | None = None
            for key, rank in merged:
                if key == previous:
                    continue  # a newer layer (lower rank, merged first) decided this key
                previous = key
                value = layers[rank].rows[key]
                if value is None:
                    continue
                out.append((key, value))
                if limit is not None and len(out) >= limit:
                    break
        return out

    def _layers(self) -> list[_SortedRows]:
        if self._frozen is None:
            return [self._active, self._base]
        return [self._active, self._frozen, self._base]

    # ------------------------------------------------------------------ flush

    def should_flush(self, threshold_bytes: int) -> bool:
        """True when the active memory store holds at least `threshold_bytes` (estimated)."""
        with self._lock:
            return len(self._active) > 0 and self._active.nbytes >= threshold_bytes

    def flush(self) -> OpId | None:
        """Write the memory store as a block and commit it with the flushed OpId and the
        client table in one superblock write (invariant D); return that OpId (None only if
        nothing was ever applied). The caller may then collect the WAL below its index.
        With nothing applied since the last flush, writes nothing and returns it again."""
        with self._maintenance:
            with self._lock:
                if self._failure is not None:
                    raise TabletStoreFailed(self._tablet_id, self._failure)
                previous = 0 if self._flushed_opid is None else self._flushed_opid.index
                if self._applied_index == previous:
                    return self._flushed_opid
                frozen = self._active
                self._active = _SortedRows()
                self._frozen = frozen
                opid = OpId(self._applied_term, self._applied_index)
                clients = tuple(sorted(self._clients.values(), key=lambda c: c.client_id))
            with self._failing():
                base = self._base  # stable: only replaced under the maintenance lock
                rows = [
                    (key, value)
                    for key in frozen.keys
                    if (value := frozen.rows[key]) is not None or key in base.rows
                ]
                new_ids = self._write_blocks(rows)
                current = self._current_superblock()
                updated = attrs.evolve(
                    current,
                    live_blocks=current.live_blocks + new_ids,
                    flushed_opid=opid,
                    client_results=clients,
                )
                self._metadata.write_superblock(updated)
                merged = base.merged_with(frozen)
            with self._lock:
                self._base = merged
                self._frozen = None
                self._flushed_opid = opid
                self._live_blocks = updated.live_blocks
            return opid

    # ------------------------------------------------------------------ compaction

    def needs_compaction(self) -> bool:
        """More live blocks than `max_live_blocks`, and merging them would mean fewer."""
        with self._lock:
            count = len(self._live_blocks)
            output = -(-self._base.nbytes // self._options.max_block_bytes)
            return (
                self._failure is None and count > self._options.max_live_blocks and (count > output)
            )

    def compact(self) -> tuple[str, ...]:
        """Merge every live block into one (more only beyond max_block_bytes), dropping all
        delete markers, and retire the old blocks by the deletion protocol
        (`replace_live_blocks`: one superblock write swaps them, then the files go).
        Returns the live blocks afterwards. The rows do not change."""
        with self._maintenance:
            with self._lock:
                if self._failure is not None:
                    raise TabletStoreFailed(self._tablet_id, self._failure)
                old = self._live_blocks
            if len(old) <= 1:
                return old
            with self._failing():
                base = self._base
                new_ids = self._write_blocks([(key, base.rows[key]) for key in base.keys])
                current = self._current_superblock()
                final = replace_live_blocks(self._metadata, self._blocks, current, old, new_ids)
            with self._lock:
                self._live_blocks = final.live_blocks
            return final.live_blocks

    # ------------------------------------------------------------------ helpers

    def _write_blocks(self, rows: Sequence[tuple[bytes, bytes | None]]) -> tuple[str, ...]:
        """Durably write `rows` (sorted) as blocks of at most max_block_bytes; not yet live."""
        ids: list[str] = []
        for chunk in _chunks(rows, self._options.max_block_bytes):
            ids.append(self._blocks.flush(chunk))
        return tuple(ids)

    def _current_superblock(self) -> Superblock:
        """The durable superblock, checked to be the one this store last wrote or read."""
        try:
            superblock = self._metadata.load_superblock(self._tablet_id)
        except MetadataCorrupt as exc:
            raise TabletDataCorrupt(exc.path, exc.reason) from exc
        if superblock is None:
            raise TabletStateError(self._tablet_id, "superblock disappeared under the store")
        if superblock.data_state is not DataState.READY:
            raise TabletStateError(
                self._tablet_id,
                f"data state changed to {superblock.data_state.value} under the store",
            )
        if (
            superblock.live_blocks != self._live_blocks
            or superblock.flushed_opid != self._flushed_opid
        ):
            raise TabletStateError(
                self._tablet_id,
                "superblock changed under the store: live blocks "
                f"{list(superblock.live_blocks)} flushed {superblock.flushed_opid}, expected "
                f"{list(self._live_blocks)} flushed {self._flushed_opid}",
            )
        return superblock

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """An exception inside marks the store failed; one that is not a TabletError is
        raised as TabletStoreFailed (the cause chained)."""
        try:
            yield
        except TabletError as exc:
            self._fail(exc)
            raise
        except Exception as exc:
            self._fail(exc)
            raise TabletStoreFailed(self._tablet_id, exc) from exc
        except BaseException as exc:
            self._fail(exc)
            raise

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = exc


def _duplicate_result(known: ClientResult, seq: int, index: int) -> ApplyResult:
    if seq == known.seq:
        return ApplyResult(known.index, known.ops_applied, duplicate=True, error=known.error)
    return ApplyResult(index, 0, duplicate=True, stale=True)


def _chunks(
    rows: Sequence[tuple[bytes, bytes | None]], max_bytes: int
) -> Iterable[Sequence[tuple[bytes, bytes | None]]]:
    start = 0
    size = 0
    for position, (key, value) in enumerate(rows):
        row = _row_bytes(key, value)
        if position > start and size + row > max_bytes:
            yield rows[start:position]
            start, size = position, 0
        size += row
    if start < len(rows):
        yield rows[start:]


def _check_superblock(path: str, superblock: Superblock) -> None:
    """Cross-field consistency of the tablet-data fields; TabletDataCorrupt if violated."""
    opid = superblock.flushed_opid
    seen: set[str] = set()
    for result in superblock.client_results:
        if result.client_id in seen:
            raise TabletDataCorrupt(path, f"client {result.client_id!r} listed twice")
        seen.add(result.client_id)
        if opid is None or result.index > opid.index:
            raise TabletDataCorrupt(
                path,
                f"client {result.client_id!r} result at index {result.index} is above "
                f"the flushed OpId {opid}",
            )
    both = set(superblock.live_blocks) & set(superblock.orphaned_blocks)
    if both or len(set(superblock.live_blocks)) != len(superblock.live_blocks):
        raise TabletDataCorrupt(
            path,
            f"live blocks {list(superblock.live_blocks)} repeat or "
            f"are also orphaned {sorted(both)}",
        )


def _load_block(
    layout: ServerLayout, blocks: BlockManager, superblock: Superblock, block_id: str
) -> list[tuple[bytes, bytes | None]]:
    """Read and verify live block `block_id`: checksum (storage) and row shape (here)."""
    try:
        path = blocks.path(block_id)
    except InvalidName as exc:
        raise TabletDataCorrupt(
            layout.superblock_path(superblock.tablet_id),
            f"live block id {block_id!r} is not a valid name: {exc.reason}",
            block_id=block_id,
        ) from exc
    try:
        raw = blocks.read(block_id)
    except BlockNotFound as exc:
        raise TabletDataCorrupt(
            exc.path, f"live block {block_id} is missing", block_id=block_id
        ) from exc
    except BlockCorrupt as exc:
        raise TabletDataCorrupt(
            exc.path,
            f"live block {block_id}: {exc.reason} (offset {exc.offset})",
            block_id=block_id,
        ) from exc
    rows: list[tuple[bytes, bytes | None]] = []
    previous: bytes | None = None
    for number, row in enumerate(raw):
        if len(row) != 2:
            raise TabletDataCorrupt(
                path, f"row {number} has {len(row)} fields, not 2", block_id=block_id
            )
        key, value = row
        if not isinstance(key, bytes) or not key:
            raise TabletDataCorrupt(
                path, f"row {number}: key is not non-empty bytes", block_id=block_id
            )
        if value is not None and not isinstance(value, bytes):
            raise TabletDataCorrupt(
                path, f"row {number}: value is not bytes or None", block_id=block_id
            )
        if previous is not None and key <= previous:
            raise TabletDataCorrupt(path, f"row {number}: keys out of order", block_id=block_id)
        previous = key
        rows.append((key, value))
    return rows
