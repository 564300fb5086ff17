"""Crash tests: every operation crashed before each disk operation, every allowed outcome.

For each of metadata replace, WAL append (concurrent writers), rollover, GC, recovery
itself, block flush and block deletion: no acknowledged append lost, no half-written
metadata visible, recovery never fails on a state a crash can produce. The last tests
seed bugs into the WAL and show the enumeration catches them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
from storage_helpers import ROOT, entries, formatted_disk

from revivify.impl.storage.blocks import (
    BlockManager,
    add_live_blocks,
    finish_orphan_deletion,
    retire_blocks,
)
from revivify.impl.storage.errors import WalCorrupt
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import DataState, Superblock
from revivify.impl.storage.wal import (
    Log,
    LogEntry,
    LogOptions,
    open_log,
    read_log_entries,
    recover_log,
)
from revivify.impl.testing import ExplorationReport, SimDisk, explore_crashes

TABLET = "tablet-a"
WAL = f"{ROOT}/wals/{TABLET}"
STATES = 32  # allowed outcomes checked per crash point (all of them when fewer)


def _options(segment_size: int = 1 << 14) -> LogOptions:
    return LogOptions(segment_size=segment_size, use_threads=False)


def _log_op(body: Callable[[Log], object], options: LogOptions) -> Callable[[SimDisk], None]:
    def operation(disk: SimDisk) -> None:
        async def main() -> None:
            async with open_log(disk, WAL, TABLET, options, create_if_missing=True) as log:
                await body(log)  # type: ignore[misc]

        trio.run(main)

    return operation


def _prepared_wal(count: int, options: LogOptions, torn: int = 48) -> SimDisk:
    disk = formatted_disk(torn_write_size=torn)

    async def body(log: Log) -> None:
        for index in range(1, count + 1):
            await log.append(entries(index, 1))

    _log_op(body, options)(disk)
    return disk.crash()


class WalWorkload:
    """Concurrent writers; remembers what was reserved and what was acknowledged."""

    def __init__(self, first: int, writers: int, rounds: int) -> None:
        self.first = first
        self.writers = writers
        self.rounds = rounds
        self.acked: list[int] = []
        self.reserved: list[LogEntry] = []

    def operation(self, options: LogOptions) -> Callable[[SimDisk], None]:
        inner = _log_op(self.run, options)

        def operation(disk: SimDisk) -> None:
            self.acked = []
            self.reserved = []
            inner(disk)

        return operation

    async def run(self, log: Log) -> None:
        next_index = [self.first]

        async def writer() -> None:
            for _ in range(self.rounds):
                batch = entries(next_index[0], 2)
                next_index[0] += 2
                self.reserved.extend(batch)
                await log.reserve(batch).wait()
                self.acked.extend(e.index for e in batch)

        async with trio.open_nursery() as nursery:
            for _ in range(self.writers):
                nursery.start_soon(writer)

    def check(self, outcome: SimDisk, prior: list[LogEntry]) -> None:
        recover_log(outcome, WAL, TABLET, create_if_missing=True)  # never WalCorrupt
        got = read_log_entries(outcome, WAL, TABLET) if outcome.exists(WAL) else []
        expected = prior + self.reserved
        assert got == expected[: len(got)], "recovered log is not a prefix of the appends"
        durable = {e.index for e in got}
        lost = [i for i in self.acked if i not in durable]
        assert not lost, f"acknowledged appends lost: {lost} ({outcome.crash_description})"
        # A second recovery of the recovered state is clean (recovery is idempotent).
        assert recover_log(outcome.crash(), WAL, TABLET).torn_tail is None


def _explore(
    base: SimDisk, operation: Callable[[SimDisk], None], check: Callable[[SimDisk, int], None]
) -> ExplorationReport:
    report = explore_crashes(base.clone, operation, check, states_per_point=STATES)
    assert report.crash_points > 5 and report.states_checked > report.crash_points
    return report


def test_wal_append_concurrent_writers() -> None:
    base = _prepared_wal(4, _options())
    prior = entries(1, 4)
    workload = WalWorkload(first=5, writers=4, rounds=5)
    _explore(
        base,
        workload.operation(_options()),
        lambda outcome, point: workload.check(outcome, prior),
    )


def test_wal_first_open_creates_log() -> None:
    base = formatted_disk(torn_write_size=48)
    workload = WalWorkload(first=1, writers=2, rounds=2)
    _explore(
        base,
        workload.operation(_options()),
        lambda outcome, point: workload.check(outcome, []),
    )


def test_wal_rollover() -> None:
    options = _options(segment_size=600)
    base = _prepared_wal(2, options)
    prior = entries(1, 2)
    workload = WalWorkload(first=3, writers=2, rounds=8)
    report = _explore(
        base,
        workload.operation(options),
        lambda outcome, point: workload.check(outcome, prior),
    )
    final = base.clone()
    workload.operation(options)(final)
    assert len([n for n in final.listdir(WAL) if n.startswith("wal-")]) >= 3, report


def test_wal_recovery_of_torn_tail_is_itself_crash_safe() -> None:
    # Build a state with an unclosed last segment holding a torn batch, then crash the
    # recovery (truncate, footer, new segment) at every point.
    base_disk = _prepared_wal(3, _options())
    workload = WalWorkload(first=4, writers=2, rounds=2)
    torn_states: list[SimDisk] = []
    for point in range(4, 30, 2):
        crashing = base_disk.clone()
        crashing.crash_after(point)
        try:
            workload.operation(_options())(crashing)
        except BaseException:
            if not crashing.crashed:
                raise
        torn_states += [s for s in crashing.crash_states(64) if _has_torn_tail(s)]
    assert torn_states, "expected some crash outcome with a torn tail"
    start = torn_states[-1]
    before = _entries_after_recovery(start)

    def check(outcome: SimDisk, point: int) -> None:
        assert _entries_after_recovery(outcome) == before

    _explore(start, _log_op(lambda log: trio.sleep(0), _options()), check)


def _has_torn_tail(disk: SimDisk) -> bool:
    return recover_log(disk.clone(), WAL, TABLET).torn_tail is not None


def _entries_after_recovery(disk: SimDisk) -> list[LogEntry]:
    probe = disk.clone()
    recover_log(probe, WAL, TABLET)
    return read_log_entries(probe, WAL, TABLET)


def test_wal_gc() -> None:
    options = _options(segment_size=700)
    base = _prepared_wal(40, options)
    all_entries = entries(1, 40)
    assert len([n for n in base.listdir(WAL) if n.startswith("wal-")]) >= 4
    retained_from = 25

    async def gc(log: Log) -> None:
        with log.anchor(retained_from, owner="copy-session"):
            await log.gc(up_to_index=1000)

    def check(outcome: SimDisk, point: int) -> None:
        report = recover_log(outcome, WAL, TABLET)
        assert report.last_opid is not None and report.last_opid.index == 40
        got = read_log_entries(outcome, WAL, TABLET)
        assert got == all_entries[len(all_entries) - len(got) :]
        assert got[0].index <= retained_from, "GC deleted past its anchor"

    _explore(base, _log_op(gc, options), check)


# ----------------------------------------------------------------------- blocks


def _block_base() -> tuple[SimDisk, Superblock]:
    disk = formatted_disk(torn_write_size=64)
    layout = ServerLayout(ROOT, disk)
    blocks = BlockManager(layout, new_id=_counter("blk"))
    store = MetadataStore(layout)
    ids = [blocks.flush([(i, f"row-{i}")]) for i in range(3)]
    superblock = add_live_blocks(store, Superblock(TABLET, DataState.READY), ids)
    return disk.crash(), superblock


def _counter(prefix: str) -> Callable[[], str]:
    state = [0]

    def next_id() -> str:
        state[0] += 1
        return f"{prefix}-{state[0]}"

    return next_id


def _check_blocks(outcome: SimDisk) -> Superblock:
    layout = ServerLayout(ROOT, outcome)
    store = MetadataStore(layout)
    superblock = store.load_superblock(TABLET)  # never MetadataCorrupt
    assert superblock is not None
    blocks = BlockManager(layout)
    for block_id in superblock.live_blocks:
        assert blocks.read(block_id)  # present and verifies
    finished = finish_orphan_deletion(store, blocks, superblock)  # the startup retry
    for block_id in superblock.orphaned_blocks:
        assert not blocks.exists(block_id)
    assert store.load_superblock(TABLET) == finished and not finished.orphaned_blocks
    return superblock


def test_block_flush() -> None:
    base, superblock = _block_base()

    def operation(disk: SimDisk) -> None:
        layout = ServerLayout(ROOT, disk)
        blocks = BlockManager(layout, new_id=_counter("new"))
        ids = [blocks.flush([(n, "x" * 30)]) for n in range(2)]
        add_live_blocks(MetadataStore(layout), superblock, ids)

    def check(outcome: SimDisk, point: int) -> None:
        loaded = _check_blocks(outcome)
        assert loaded.live_blocks in (
            superblock.live_blocks,
            (*superblock.live_blocks, "new-1", "new-2"),
        )

    _explore(base, operation, check)


def test_block_deletion() -> None:
    base, superblock = _block_base()
    victims = superblock.live_blocks[:2]

    def operation(disk: SimDisk) -> None:
        layout = ServerLayout(ROOT, disk)
        retire_blocks(MetadataStore(layout), BlockManager(layout), superblock, victims)

    def check(outcome: SimDisk, point: int) -> None:
        loaded = _check_blocks(outcome)
        assert set(loaded.live_blocks) | set(loaded.orphaned_blocks) >= set(
            superblock.live_blocks
        ) - set(victims)

    _explore(base, operation, check)


# ----------------------------------------------------------------------- teeth


def _publish_first(self: Log, old: object, prepared: object) -> None:
    self._publish(prepared)  # type: ignore[arg-type]  # BUG: new segment visible first
    self._finish_segment(old)  # type: ignore[arg-type]


def _write_without_sync(self: Log, active: object, offset: int, data: bytes) -> None:
    active.file.pwrite(offset, data)  # type: ignore[attr-defined]  # BUG: acked unsynced


@pytest.mark.parametrize(
    ("method", "bug"),
    [("_switch_segments", _publish_first), ("_write_and_sync", _write_without_sync)],
)
def test_crash_enumeration_catches_seeded_wal_bugs(
    monkeypatch: pytest.MonkeyPatch, method: str, bug: Callable[..., None]
) -> None:
    options = _options(segment_size=600)
    base = _prepared_wal(2, options)
    prior = entries(1, 2)
    workload = WalWorkload(first=3, writers=2, rounds=8)
    monkeypatch.setattr(Log, method, bug)
    caught: list[str] = []

    def check(outcome: SimDisk, point: int) -> None:
        try:
            workload.check(outcome, prior)
        except (AssertionError, WalCorrupt) as exc:
            caught.append(f"point {point}: {exc}")

    explore_crashes(base.clone, workload.operation(options), check, states_per_point=STATES)
    assert caught, f"seeded bug {bug.__name__} was not caught by the crash enumeration"
