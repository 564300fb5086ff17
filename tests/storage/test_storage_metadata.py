"""Layout, instance file, superblock and cmeta: round trips, corruption, crash safety."""

from __future__ import annotations

import posixpath
from typing import cast

import pytest
from storage_helpers import ROOT, formatted_disk

from revivify.impl.storage.disk import Disk, OsDisk, parent_of, temp_path_for, write_new_file
from revivify.impl.storage.errors import (
    AlreadyFormatted,
    CorruptionKind,
    InvalidName,
    MetadataCorrupt,
    NotFormatted,
)
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore, encode_superblock
from revivify.impl.storage.values import (
    ConsensusMeta,
    DataState,
    MemberType,
    OpId,
    RaftConfig,
    RaftPeer,
    Superblock,
)
from revivify.impl.testing import SimDisk, explore_crashes

SB_OLD = Superblock("tablet-a", DataState.READY, live_blocks=("b1", "b2"), table_name="t")
SB_NEW = Superblock(
    "tablet-a",
    DataState.DELETED,
    tombstone_last_opid=OpId(3, 17),
    quarantine_dir=f"{ROOT}/quarantine/tablet-a.1",
    live_blocks=(),
    orphaned_blocks=("b1", "b2"),
)
CMETA = ConsensusMeta(
    "tablet-a",
    current_term=5,
    voted_for="server-2",
    committed_config=RaftConfig(
        opid_index=12,
        peers=(
            RaftPeer("server-1", "127.0.0.1:7050"),
            RaftPeer("server-2", "127.0.0.1:7051", MemberType.NON_VOTER),
            RaftPeer("server-3", "127.0.0.1:7052", MemberType.PRE_VOTER),
        ),
    ),
)


class TestLayout:
    def test_format_then_open(self) -> None:
        disk = SimDisk()
        layout = ServerLayout(ROOT, disk)
        info = layout.format("server-1", 42)
        assert layout.open() == info
        reopened = ServerLayout(ROOT, disk.crash())
        assert reopened.open() == info
        for sub in ("tablet-meta", "consensus-meta", "wals", "data", "quarantine"):
            assert reopened.disk.is_dir(f"{ROOT}/{sub}")

    def test_open_unformatted_and_double_format(self) -> None:
        disk = SimDisk()
        layout = ServerLayout(ROOT, disk)
        with pytest.raises(NotFormatted) as exc:
            layout.open()
        assert exc.value.path == f"{ROOT}/instance"
        layout.format("server-1", 1)
        with pytest.raises(AlreadyFormatted):
            layout.format("server-1", 2)

    def test_corrupt_instance_reported_not_replaced(self) -> None:
        disk = formatted_disk()
        path = f"{ROOT}/instance"
        damaged = bytearray(disk.read_file(path))
        damaged[-1] ^= 0x40
        write_new_file(disk, path, bytes(damaged))
        with pytest.raises(MetadataCorrupt) as exc:
            ServerLayout(ROOT, disk).open()
        assert exc.value.path == path and exc.value.kind is CorruptionKind.CHECKSUM
        assert disk.read_file(path) == bytes(damaged)

    def test_format_crash_at_every_point_is_not_formatted_or_whole(self) -> None:
        def check(outcome: SimDisk, point: int) -> None:
            layout = ServerLayout(ROOT, outcome)
            try:
                layout.open()
            except NotFormatted:
                layout.format("server-1", 7)  # completing it must work
            assert layout.open().server_uuid == "server-1"
            for sub in ("tablet-meta", "consensus-meta", "wals", "data", "quarantine"):
                assert outcome.is_dir(f"{ROOT}/{sub}")

        explore_crashes(SimDisk, lambda d: ServerLayout(ROOT, d).format("server-1", 7), check)

    @pytest.mark.parametrize("bad", ["", "a/b", "..", ".hidden", "x.tmp.new", "a\x00b"])
    def test_invalid_tablet_ids_refused(self, bad: str) -> None:
        with pytest.raises(InvalidName):
            ServerLayout(ROOT, SimDisk()).superblock_path(bad)

    def test_quarantine_primitives(self) -> None:
        disk = formatted_disk()
        layout = ServerLayout(ROOT, disk)
        store = MetadataStore(layout)
        store.write_superblock(SB_OLD)
        disk.mkdir(layout.wal_dir("tablet-a"))
        disk.fsync_dir(layout.wals_dir)
        qdir = layout.new_quarantine_dir("tablet-a")
        assert qdir == f"{ROOT}/quarantine/tablet-a.1"
        assert layout.new_quarantine_dir("tablet-a") == f"{ROOT}/quarantine/tablet-a.2"
        copied = layout.copy_file_durably(layout.superblock_path("tablet-a"), qdir)
        layout.move_dir_durably(layout.wal_dir("tablet-a"), posixpath.join(qdir, "wals"))
        crashed = disk.crash()
        assert crashed.read_file(copied) == encode_superblock(SB_OLD)
        assert crashed.is_dir(posixpath.join(qdir, "wals"))
        assert not crashed.exists(layout.wal_dir("tablet-a"))
        assert ServerLayout(ROOT, crashed).quarantine_dirs("tablet-a") == [
            f"{ROOT}/quarantine/tablet-a.1",
            f"{ROOT}/quarantine/tablet-a.2",
        ]

    def test_stale_temps_removed_and_ignored(self) -> None:
        disk = formatted_disk()
        layout = ServerLayout(ROOT, disk)
        temp = temp_path_for(layout.superblock_path("tablet-a"))
        write_new_file(disk, temp, b"half")
        disk.fsync_dir(layout.tablet_meta_dir)
        assert layout.tablet_ids() == []
        assert MetadataStore(layout).load_superblock("tablet-a") is None
        assert layout.remove_stale_temps() == [temp]
        assert not disk.crash().exists(temp)


class TestMetadataStore:
    def test_round_trip_and_absence(self) -> None:
        layout = ServerLayout(ROOT, formatted_disk())
        store = MetadataStore(layout)
        assert store.load_superblock("tablet-a") is None  # DOES_NOT_EXIST
        assert store.load_cmeta("tablet-a") is None
        store.write_superblock(SB_NEW)
        store.write_cmeta(CMETA)
        crashed = MetadataStore(ServerLayout(ROOT, cast(SimDisk, layout.disk).crash()))
        assert crashed.load_superblock("tablet-a") == SB_NEW
        assert crashed.load_cmeta("tablet-a") == CMETA
        assert crashed.layout.tablet_ids() == ["tablet-a"]

    @pytest.mark.parametrize(
        ("damage", "kind", "reason"),
        [
            (lambda b: b[:10], CorruptionKind.TRUNCATED, "truncated at 10 of 16 header bytes"),
            (lambda b: b[:-3], CorruptionKind.TRUNCATED, "truncated at"),
            (lambda b: b"", CorruptionKind.TRUNCATED, "truncated at 0 of 16"),
            (lambda b: b"XXXX" + b[4:], CorruptionKind.BAD_MAGIC, "bad magic"),
            (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], CorruptionKind.CHECKSUM, "checksum"),
            (lambda b: b + b"\0", CorruptionKind.TRAILING_DATA, "trailing"),
        ],
    )
    def test_corruption_detected_with_path_and_reason(
        self, damage: object, kind: CorruptionKind, reason: str
    ) -> None:
        layout = ServerLayout(ROOT, formatted_disk())
        store = MetadataStore(layout)
        store.write_superblock(SB_OLD)
        path = layout.superblock_path("tablet-a")
        bad = damage(layout.disk.read_file(path))  # type: ignore[operator]
        write_new_file(layout.disk, path, bad)
        with pytest.raises(MetadataCorrupt) as exc:
            store.load_superblock("tablet-a")
        assert exc.value.path == path
        assert exc.value.kind is kind
        assert reason in exc.value.reason
        assert layout.disk.read_file(path) == bad  # evidence kept

    def test_unknown_version_reported(self) -> None:
        from revivify.impl.storage.codec import encode_value

        layout = ServerLayout(ROOT, formatted_disk())
        path = layout.superblock_path("tablet-a")
        write_new_file(layout.disk, path, encode_value(b"RVSB", 9, SB_OLD))
        with pytest.raises(MetadataCorrupt, match="unknown format version 9"):
            MetadataStore(layout).load_superblock("tablet-a")

    def test_wrong_tablet_in_file(self) -> None:
        layout = ServerLayout(ROOT, formatted_disk())
        store = MetadataStore(layout)
        store.write_cmeta(CMETA)
        layout.disk.rename(layout.cmeta_path("tablet-a"), layout.cmeta_path("tablet-b"))
        with pytest.raises(MetadataCorrupt, match="holds tablet 'tablet-a'"):
            store.load_cmeta("tablet-b")

    def test_real_os_disk(self, tmp_path: object) -> None:
        layout = ServerLayout(str(tmp_path), OsDisk())
        layout.format("server-9", 3)
        store = MetadataStore(layout)
        store.write_superblock(SB_NEW)
        store.write_cmeta(CMETA)
        again = MetadataStore(ServerLayout(str(tmp_path), OsDisk()))
        assert again.layout.open().server_uuid == "server-9"
        assert again.load_superblock("tablet-a") == SB_NEW
        assert again.load_cmeta("tablet-a") == CMETA


# ----------------------------------------------------------------------- crash tests


def _replace_crash_check(old_bytes: bytes, new_bytes: bytes) -> object:
    def check(outcome: SimDisk, point: int) -> None:
        store = MetadataStore(ServerLayout(ROOT, outcome))
        loaded = store.load_superblock("tablet-a")  # never MetadataCorrupt
        assert loaded in (SB_OLD, SB_NEW), (point, outcome.crash_description)

    return check


def _prepared_disk() -> SimDisk:
    disk = formatted_disk(torn_write_size=64)
    MetadataStore(ServerLayout(ROOT, disk)).write_superblock(SB_OLD)
    return disk


def test_superblock_replace_crash_at_every_point_and_subset() -> None:
    base = _prepared_disk()
    report = explore_crashes(
        base.clone,
        lambda d: MetadataStore(ServerLayout(ROOT, d)).write_superblock(SB_NEW),
        _replace_crash_check(b"", b""),  # type: ignore[arg-type]
    )
    assert report.states_checked > report.crash_points

    # And after the operation returns, every outcome holds the new value.
    done = base.clone()
    MetadataStore(ServerLayout(ROOT, done)).write_superblock(SB_NEW)
    for outcome in done.crash_states():
        assert MetadataStore(ServerLayout(ROOT, outcome)).load_superblock("tablet-a") == SB_NEW


def _buggy_rename_before_fsync(disk: Disk, path: str, data: bytes) -> None:
    temp = temp_path_for(path)
    f = disk.open(temp, create=True)
    f.pwrite(0, data)
    disk.rename(temp, path)  # BUG: renamed before the data is durable
    disk.fsync_dir(parent_of(path))
    f.fsync()
    f.close()


def _buggy_no_dir_fsync(disk: Disk, path: str, data: bytes) -> None:
    temp = temp_path_for(path)
    write_new_file(disk, temp, data)
    disk.rename(temp, path)  # BUG: no fsync of the directory; "done" is not durable


@pytest.mark.parametrize("variant", [_buggy_rename_before_fsync, _buggy_no_dir_fsync])
def test_crash_enumeration_catches_broken_replace(variant: object) -> None:
    """Teeth: a replace that renames before fsync, or skips the directory fsync, is caught."""
    base = _prepared_disk()
    failures: list[str] = []

    def operation(d: SimDisk) -> None:
        layout = ServerLayout(ROOT, d)
        variant(d, layout.superblock_path("tablet-a"), encode_superblock(SB_NEW))  # type: ignore[operator]

    def check(outcome: SimDisk, point: int) -> None:
        store = MetadataStore(ServerLayout(ROOT, outcome))
        try:
            loaded = store.load_superblock("tablet-a")
        except MetadataCorrupt as exc:
            failures.append(f"half-written metadata visible: {exc}")
            return
        if loaded not in (SB_OLD, SB_NEW):
            failures.append(f"unexpected {loaded}")

    completed = {"value": False}

    def acknowledged_check(outcome: SimDisk, point: int) -> None:
        check(outcome, point)
        if completed["value"]:
            loaded = MetadataStore(ServerLayout(ROOT, outcome)).load_superblock("tablet-a")
            if loaded != SB_NEW:
                failures.append("acknowledged replace lost")

    explore_crashes(base.clone, operation, check)
    done = base.clone()
    operation(done)
    completed["value"] = True
    for outcome in done.crash_states():
        acknowledged_check(outcome, -1)
    assert failures, "the crash enumeration failed to catch a broken atomic replace"
