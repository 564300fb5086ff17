"""A Hypothesis state machine: the store against a plain dict, with flushes, compactions and
crashes (reopen from the disk, then replay the log above the flushed index, as the tablet
server does with its WAL).

After a crash the rows must equal the model as of the last flush, and replaying the later
entries must give back the model and, entry by entry, the very same results (exactly-once
is deterministic: retries are recognised on replay exactly as they were the first time).
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from tablet_helpers import SimDisk, new_tablet_disk, open_store

from revivify.impl.tablet.ops import RowOp, WriteBatch, delete, put
from revivify.impl.tablet.store import ApplyResult, StoreOptions, TabletStore

OPTIONS = StoreOptions(max_live_blocks=2, max_block_bytes=150)  # small: splits, compactions

keys = st.binary(min_size=1, max_size=2).map(lambda b: bytes(x % 4 + 0x61 for x in b))
values = st.binary(max_size=24)
row_ops = st.one_of(st.builds(put, keys, values), st.builds(delete, keys))
clients = st.sampled_from(["alpha", "beta", "gamma"])
bounds = st.none() | keys


@attrs.frozen
class Entry:
    index: int
    term: int
    batch: WriteBatch | None  # None: a no-op entry
    result: ApplyResult | None


class TabletMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.disk: SimDisk = new_tablet_disk()
        self.store: TabletStore = open_store(self.disk, OPTIONS)
        self.model: dict[bytes, bytes] = {}
        self.flushed_model: dict[bytes, bytes] = {}
        self.flushed_index = 0
        self.log: list[Entry] = []
        self.term = 1
        self.seqs: dict[str, int] = {}
        self.last: dict[str, tuple[WriteBatch, ApplyResult]] = {}

    # ------------------------------------------------------------------ helpers

    def _apply(self, batch: WriteBatch | None) -> ApplyResult | None:
        index = len(self.log) + 1
        if batch is None:
            self.store.apply_noop(index, self.term)
            result = None
        else:
            result = self.store.apply(index, self.term, batch)
        self.log.append(Entry(index, self.term, batch, result))
        return result

    def _next_seq(self, client: str) -> int:
        self.seqs[client] = self.seqs.get(client, 0) + 1
        return self.seqs[client]

    # ------------------------------------------------------------------ writes

    @rule(client=clients, ops=st.lists(row_ops, max_size=6))
    def write(self, client: str, ops: list[RowOp]) -> None:
        batch = WriteBatch(client, self._next_seq(client), ops)
        result = self._apply(batch)
        assert result == ApplyResult(len(self.log), len(ops))
        for op in ops:
            if op.kind == "put":
                self.model[op.key] = op.value
            else:
                self.model.pop(op.key, None)
        self.last[client] = (batch, result)

    @rule(client=clients, ops=st.lists(row_ops, max_size=3))
    def invalid_write(self, client: str, ops: list[RowOp]) -> None:
        batch = WriteBatch(client, self._next_seq(client), [*ops, RowOp("put", b"", b"x")])
        result = self._apply(batch)
        assert result is not None and result.rejected and result.ops_applied == 0
        self.last[client] = (batch, result)

    @precondition(lambda self: bool(self.last))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(sorted(self.last)))
        batch, original = self.last[client]
        assert self._apply(batch) == attrs.evolve(original, duplicate=True)

    @precondition(lambda self: any(seq > 1 for seq in self.seqs.values()))
    @rule(data=st.data())
    def stale(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(sorted(c for c, s in self.seqs.items() if s > 1)))
        seq = data.draw(st.integers(0, self.seqs[client] - 1))
        result = self._apply(WriteBatch(client, seq, [put(b"stale", b"!")]))
        assert result == ApplyResult(len(self.log), 0, duplicate=True, stale=True)

    @rule()
    def noop(self) -> None:
        self._apply(None)

    @rule()
    def new_term(self) -> None:
        self.term += 1

    # ------------------------------------------------------------------ reads

    @rule(key=keys)
    def get(self, key: bytes) -> None:
        assert self.store.get(key) == self.model.get(key)

    @rule(start=bounds, end=bounds, limit=st.none() | st.integers(0, 5))
    def scan(self, start: bytes | None, end: bytes | None, limit: int | None) -> None:
        expected = [
            (k, v)
            for k, v in sorted(self.model.items())
            if (start is None or k >= start) and (end is None or k < end)
        ]
        if limit is not None:
            expected = expected[:limit]
        assert self.store.scan(start, end, limit) == expected

    # ------------------------------------------------------------------ maintenance

    @rule()
    def flush(self) -> None:
        opid = self.store.flush()
        assert (opid.index if opid else 0) == len(self.log)
        self.flushed_model = dict(self.model)
        self.flushed_index = len(self.log)
        assert self.store.memory_bytes == 0

    @rule()
    def compact(self) -> None:
        before = self.store.live_blocks
        needed = self.store.needs_compaction()
        live = self.store.compact()
        if len(before) > 1:
            assert set(live).isdisjoint(before)
            assert not any(self.disk.exists(f"/srv/data/{b}") for b in before)
        if needed:
            assert len(live) < len(before) and not self.store.needs_compaction()

    @rule()
    def crash(self) -> None:
        self.disk = self.disk.crash()
        self.store = open_store(self.disk, OPTIONS)
        assert self.store.applied_index == self.flushed_index
        assert self.store.scan() == sorted(self.flushed_model.items())
        for entry in self.log[self.flushed_index :]:
            if entry.batch is None:
                self.store.apply_noop(entry.index, entry.term)
            else:
                assert self.store.apply(entry.index, entry.term, entry.batch) == entry.result

    # ------------------------------------------------------------------ invariants

    @invariant()
    def rows_equal_the_model(self) -> None:
        assert self.store.scan() == sorted(self.model.items())
        assert self.store.applied_index == len(self.log)
        assert self.store.flushed_index == self.flushed_index

    @invariant()
    def superblock_matches(self) -> None:
        superblock = self.store._metadata.load_superblock(self.store.tablet_id)
        assert superblock is not None and superblock.live_blocks == self.store.live_blocks
        assert superblock.flushed_opid == self.store.flushed_opid
        assert superblock.orphaned_blocks == ()
        for block_id in superblock.live_blocks:
            assert self.disk.exists(f"/srv/data/{block_id}")


TestTabletMachine = TabletMachine.TestCase
