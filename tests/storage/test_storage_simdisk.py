"""SimDisk: what survives a crash, and the enumeration of allowed crash outcomes."""

from __future__ import annotations

import pytest

from revivify.impl.storage.disk import atomic_replace
from revivify.impl.testing import SimDisk, SimulatedCrash, explore_crashes


def test_unsynced_write_is_lost_and_synced_write_kept() -> None:
    disk = SimDisk()
    disk.mkdir("/d")
    disk.fsync_dir("/")
    f = disk.open("/d/f", create=True)
    disk.fsync_dir("/d")
    f.pwrite(0, b"durable")
    f.fsync()
    f.pwrite(7, b"-volatile")
    assert disk.read_file("/d/f") == b"durable-volatile"
    assert disk.crash().read_file("/d/f") == b"durable"


def test_file_fsync_does_not_make_its_name_durable() -> None:
    disk = SimDisk()
    f = disk.open("/f", create=True)
    f.pwrite(0, b"data")
    f.fsync()
    assert not disk.crash().exists("/f")
    disk.fsync_dir("/")
    assert disk.crash().read_file("/f") == b"data"


def test_rename_before_fsync_can_expose_empty_file() -> None:
    disk = SimDisk()
    f = disk.open("/f.tmp", create=True)
    f.pwrite(0, b"new")
    disk.rename("/f.tmp", "/f")
    disk.fsync_dir("/")
    outcomes = {d.read_file("/f") for d in disk.crash_states()}
    assert outcomes == {b"", b"new"}


def test_crash_states_are_per_file_prefixes() -> None:
    disk = SimDisk()
    a = disk.open("/a", create=True)
    b = disk.open("/b", create=True)
    disk.fsync_dir("/")
    a.pwrite(0, b"1")
    a.pwrite(1, b"2")
    b.pwrite(0, b"x")
    states = {(d.read_file("/a"), d.read_file("/b")) for d in disk.crash_states()}
    assert states == {(a_, b_) for a_ in (b"", b"1", b"12") for b_ in (b"", b"x")}


def test_torn_writes_split_at_granularity() -> None:
    disk = SimDisk(torn_write_size=4)
    f = disk.open("/f", create=True)
    disk.fsync_dir("/")
    f.pwrite(2, b"abcdefgh")  # pieces: [2,4) [4,8) [8,10)
    contents = sorted(d.read_file("/f") for d in disk.crash_states())
    assert contents == [b"", b"\0\0ab", b"\0\0abcdef", b"\0\0abcdefgh"]


def test_namespace_ops_persist_in_order_per_directory() -> None:
    disk = SimDisk()
    disk.mkdir("/d")
    disk.fsync_dir("/")
    for name in ("a", "b", "c"):
        disk.open(f"/d/{name}", create=True)
    listings = {tuple(d.listdir("/d")) for d in disk.crash_states()}
    assert listings == {(), ("a",), ("a", "b"), ("a", "b", "c")}


def test_cross_directory_rename_is_atomic_and_synced_by_either_dir() -> None:
    disk = SimDisk()
    for d in ("/x", "/y"):
        disk.mkdir(d)
    f = disk.open("/x/f", create=True)
    f.pwrite(0, b"v")
    f.fsync()
    disk.fsync_dir("/")
    disk.fsync_dir("/x")
    disk.rename("/x/f", "/y/f")
    seen = {(d.exists("/x/f"), d.exists("/y/f")) for d in disk.crash_states()}
    assert seen == {(True, False), (False, True)}
    disk.fsync_dir("/y")
    crashed = disk.crash()
    assert not crashed.exists("/x/f")
    assert crashed.read_file("/y/f") == b"v"


def test_fsync_dir_persists_ops_ordered_before() -> None:
    disk = SimDisk()
    disk.mkdir("/x")
    disk.fsync_dir("/")
    disk.open("/x/a", create=True)  # op on /x
    disk.rename("/x/a", "/b")  # op on /x and /
    disk.fsync_dir("/")  # forces the rename, hence the create before it
    crashed = disk.crash()
    assert crashed.exists("/b")
    assert not crashed.exists("/x/a")


def test_crash_after_freezes_the_disk() -> None:
    disk = SimDisk()
    disk.crash_after(1)
    disk.mkdir("/a")
    with pytest.raises(SimulatedCrash):
        disk.mkdir("/b")
    with pytest.raises(SimulatedCrash):
        disk.listdir("/")
    assert disk.crashed
    # the crashed disk's outcomes are still inspectable
    assert sorted(d.exists("/a") for d in disk.crash_states()) == [False, True]


def test_crash_states_cap_samples_reproducibly() -> None:
    disk = SimDisk(torn_write_size=1)
    handles = [disk.open(f"/f{i}", create=True) for i in range(4)]
    disk.fsync_dir("/")
    for h in handles:
        h.pwrite(0, b"0123456789")
    first = [d.tree() for d in disk.crash_states(limit=30, seed=7)]
    again = [d.tree() for d in disk.crash_states(limit=30, seed=7)]
    assert len(first) == 30
    assert first == again
    assert {"/f0": b"", "/f1": b"", "/f2": b"", "/f3": b""} in first
    assert {f"/f{i}": b"0123456789" for i in range(4)} in first


def test_explore_crashes_visits_every_point() -> None:
    base = SimDisk()
    seen_points: list[int] = []

    def check(outcome: SimDisk, point: int) -> None:
        seen_points.append(point)
        if outcome.exists("/f"):
            assert outcome.read_file("/f") == b"payload"

    report = explore_crashes(base.clone, lambda d: atomic_replace(d, "/f", b"payload"), check)
    # create, truncate(0) is a no-op size change, pwrite, fsync, rename, fsync_dir
    assert report.completed_ops == report.crash_points - 1 >= 5
    assert sorted(set(seen_points)) == list(range(report.crash_points))
