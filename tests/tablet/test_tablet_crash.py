"""Crash tests: a flush, a compaction, and the shell's flush-then-compact, crashed before each
of their disk operations, every allowed outcome checked (tests/storage/test_storage_crash.py
explains the enumeration).

For every outcome: `open` succeeds (never TabletDataCorrupt: a crash cannot explain a bad
block), the rows equal the model either before or after the operation with applied_index the
matching flushed index, and replaying the log above that index gives back the full model and
the original results. The last test seeds a bug (the superblock committed before the block is
durable) and shows the enumeration catches it.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
from tablet_helpers import (
    ROOT,
    TABLET,
    SimDisk,
    explore_crashes,
    new_tablet_disk,
    open_store,
    put_batch,
)

from revivify.impl.storage import blocks as storage_blocks
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.tablet.errors import TabletDataCorrupt
from revivify.impl.tablet.ops import WriteBatch
from revivify.impl.tablet.store import ApplyResult, StoreOptions, TabletStore

STATES = 32
OPTIONS = StoreOptions(max_live_blocks=2)
Rows = list[tuple[bytes, bytes]]


@attrs.frozen
class Logged:
    index: int
    term: int
    batch: WriteBatch
    result: ApplyResult


class Scenario:
    """A prepared disk (some flushes done), the full log, and the model after each index."""

    def __init__(self, flushes: int, unflushed: int) -> None:
        self.disk = new_tablet_disk(torn_write_size=64)
        store = open_store(self.disk, OPTIONS)
        self.log: list[Logged] = []
        self.models: dict[int, Rows] = {0: []}
        model: dict[bytes, bytes] = {}
        index = 0
        for round_ in range(flushes + 1):
            for _ in range(3 if round_ < flushes else unflushed):
                index += 1
                rows: list[tuple[bytes, bytes | None]] = [
                    (b"k%d" % (index % 5), b"v%d" % index),
                    (b"k%d" % ((index + 2) % 5), None),
                ]
                # client "a" retries every other write: the log holds duplicates too
                seq = index if index % 2 else index - 1
                batch = put_batch("a", seq, rows)
                result = store.apply(index, 1 + index // 4, batch)
                if not result.duplicate:
                    for key, value in rows:
                        if value is None:
                            model.pop(key, None)
                        else:
                            model[key] = value
                self.log.append(Logged(index, 1 + index // 4, batch, result))
                self.models[index] = sorted(model.items())
            if round_ < flushes:
                store.flush()
        self.flushed_index = store.flushed_index
        self.live_before = store.live_blocks
        self.disk = self.disk.crash()

    def reopen_and_replay(self, disk: SimDisk) -> TabletStore:
        store = open_store(disk, OPTIONS)
        assert store.scan() == self.models[store.applied_index]
        for entry in self.log[store.applied_index :]:
            assert store.apply(entry.index, entry.term, entry.batch) == entry.result
        assert store.scan() == self.models[len(self.log)]
        return store


def _explore(
    scenario: Scenario, body: Callable[[TabletStore], object], allowed: set[int]
) -> list[int]:
    seen: list[int] = []

    def operation(disk: SimDisk) -> None:
        body(scenario.reopen_and_replay(disk))

    def check(outcome: SimDisk, point: int) -> None:
        try:
            store = scenario.reopen_and_replay(outcome)
        except TabletDataCorrupt as exc:
            raise AssertionError(f"point {point} ({outcome.crash_description}): {exc}") from exc
        assert store.flushed_index in allowed, (point, outcome.crash_description)
        seen.append(store.flushed_index)
        superblock = MetadataStore(ServerLayout(ROOT, outcome)).load_superblock(TABLET)
        assert superblock is not None and superblock.orphaned_blocks == ()

    report = explore_crashes(scenario.disk.clone, operation, check, states_per_point=STATES)
    assert report.crash_points > 5 and report.states_checked > report.crash_points
    return seen


def test_crash_during_flush() -> None:
    scenario = Scenario(flushes=1, unflushed=3)
    before, after = scenario.flushed_index, len(scenario.log)
    seen = _explore(scenario, lambda store: store.flush(), {before, after})
    assert {before, after} <= set(seen), "both outcomes should be reachable"


def test_crash_during_first_flush() -> None:
    scenario = Scenario(flushes=0, unflushed=4)
    seen = _explore(scenario, lambda store: store.flush(), {0, len(scenario.log)})
    assert set(seen) == {0, len(scenario.log)}


def test_crash_during_compaction() -> None:
    scenario = Scenario(flushes=3, unflushed=2)
    assert len(scenario.live_before) == 3
    flushed = scenario.flushed_index

    def compact(store: TabletStore) -> None:
        assert store.needs_compaction()
        assert len(store.compact()) == 1

    _explore(scenario, compact, {flushed})


def test_crash_during_flush_then_compaction() -> None:
    scenario = Scenario(flushes=2, unflushed=3)

    def flush_and_compact(store: TabletStore) -> None:
        store.flush()
        assert store.needs_compaction()
        store.compact()

    seen = _explore(scenario, flush_and_compact, {scenario.flushed_index, len(scenario.log)})
    assert set(seen) == {scenario.flushed_index, len(scenario.log)}


def _flush_without_fsync(blocks: storage_blocks.BlockManager, rows: object) -> str:
    """BUG: the block is renamed into place before its contents are durable."""
    block_id = storage_blocks._new_block_id()
    path = blocks.path(block_id)
    data = storage_blocks.encode_block(block_id, rows)  # type: ignore[arg-type]
    f = blocks.disk.open(path, create=True)
    f.pwrite(0, data)
    f.close()
    blocks.disk.fsync_dir(blocks.layout.data_dir)
    return block_id


def test_crash_enumeration_catches_a_seeded_flush_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = Scenario(flushes=1, unflushed=3)
    monkeypatch.setattr(storage_blocks.BlockManager, "flush", _flush_without_fsync)
    caught: list[str] = []

    def operation(disk: SimDisk) -> None:
        scenario.reopen_and_replay(disk).flush()

    def check(outcome: SimDisk, point: int) -> None:
        try:
            scenario.reopen_and_replay(outcome)
        except TabletDataCorrupt as exc:
            caught.append(f"point {point}: {exc}")

    explore_crashes(scenario.disk.clone, operation, check, states_per_point=STATES)
    assert caught, "the seeded bug (block not fsynced before commit) was not caught"
