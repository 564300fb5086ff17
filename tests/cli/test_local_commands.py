"""The commands on a server's directory (impl/cli/local.py, impl/storage/offline.py):
``revivify tserver wipe``, ``revivify local-replica list | purge-quarantine``, and the
directory lock they rely on (impl/storage/dirlock.py).

Real directories come from a real tablet server run in-process (two single-replica tablets,
flushed to data blocks; one deleted, so its quarantine is the server's own); the corner
cases are built with the storage API. The commands run in-process through ``main`` (exit
code, stdout, one-line stderr) and, where another process matters (the lock), as
``.venv/bin/revivify`` subprocesses.
"""

from __future__ import annotations

import gc
import json
import os
import posixpath
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from revivify.checker.local import check_paths
from revivify.impl.cli.main import main
from revivify.impl.client import create_tablet, delete_replica, open_tablet_client
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.storage.blocks import encode_block
from revivify.impl.storage.dirlock import held_here, lock_directory
from revivify.impl.storage.disk import OsDisk, atomic_replace
from revivify.impl.storage.errors import NotFormatted, WipeInterrupted
from revivify.impl.storage.layout import (
    QDIR_CMETA,
    QDIR_SUPERBLOCK,
    QDIR_WAL,
    ServerLayout,
)
from revivify.impl.storage.metadata import MetadataStore, encode_superblock
from revivify.impl.storage.offline import (
    PURGE_TRASH_SUFFIX,
    check_wipe,
    execute_purge,
    inspect_directory,
    plan_purge,
    wipe_directory,
)
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId, Superblock
from revivify.impl.testing import SimDisk, SimulatedCrash, explore_crashes
from revivify.impl.tserver.manager.shell import TabletManager
from revivify.impl.tserver.server import ServerOptions, open_tserver

pytestmark = pytest.mark.timeout(300)

REVIVIFY = str(Path(sys.executable).parent / "revivify")
LIVE, DEAD = "live", "dead"


# ---------------------------------------------------------------------------- helpers


class Run:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    def json(self) -> Any:
        return json.loads(self.out)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Run:
    code = main(list(args))
    captured = capsys.readouterr()
    result = Run(code, captured.out, captured.err)
    assert "Traceback" not in result.err
    if result.err:
        assert result.err.count("\n") == 1, result.err  # one line
    if "--json" in args and result.out:
        result.json()
    return result


def revivify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([REVIVIFY, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def files_under(root: str) -> set[str]:
    out: set[str] = set()
    for dirpath, _, names in os.walk(root):
        for name in names:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def data_blocks(root: str) -> set[str]:
    return set(os.listdir(os.path.join(root, "data")))


def superblock(root: str, tablet_id: str) -> Superblock:
    sb = MetadataStore(ServerLayout(root, OsDisk())).load_superblock(tablet_id)
    assert sb is not None
    return sb


def quarantined_copy(root: str, tablet_id: str) -> Superblock:
    from revivify.impl.storage.metadata import decode_superblock

    path = os.path.join(root, "quarantine", f"{tablet_id}.1", QDIR_SUPERBLOCK)
    with open(path, "rb") as f:
        return decode_superblock(f.read(), path=path)


async def _populate(root: str) -> str:
    """Two single-replica tablets with flushed blocks; DEAD deleted (tombstoned)."""
    options = ServerOptions(fs_root=root, rpc_port=0, tick_seconds=0.01, flush_threshold=64)
    async with open_tserver(options) as server:
        for tablet in (LIVE, DEAD):
            await create_tablet([server.address], 1, tablet)
            async with open_tablet_client([server.address], tablet) as client:
                for i in range(20):
                    await client.put(f"{tablet}-{i}".encode(), b"v" * 50)
        with trio.fail_after(30):
            while not all(server.metadata.load_superblock(t).live_blocks  # type: ignore[union-attr]
                          for t in (LIVE, DEAD)):
                await trio.sleep(0.02)
        await delete_replica(server.address, DEAD)
        return server.uuid


async def _serve_once(root: str) -> tuple[str, dict[str, str], dict[bytes, bytes]]:
    """Start a server on `root`: its UUID, its replicas' states, LIVE's rows (if running)."""
    options = ServerOptions(fs_root=root, rpc_port=0, tick_seconds=0.01)
    async with open_tserver(options) as server:
        states = {r.tablet_id: r.state for r in server._replica_infos()}
        rows: dict[bytes, bytes] = {}
        if states.get(LIVE) == "RUNNING":
            async with open_tablet_client([server.address], LIVE) as client:
                rows = dict(await client.scan(None, None, 1000))
        return server.uuid, states, rows


def serve_once(root: str) -> tuple[str, dict[str, str], dict[bytes, bytes]]:
    result = trio.run(_serve_once, root)
    gc.collect()  # the stopped server's layout lets the directory's lock go
    return result


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = str(tmp_path_factory.mktemp("golden") / "ts")
    uuid = trio.run(_populate, root)
    gc.collect()
    assert not held_here(root)
    return root, uuid


@pytest.fixture
def server_dir(golden: tuple[str, str], tmp_path: Path) -> Iterator[str]:
    """A fresh copy of the populated server directory (the server stopped)."""
    root = str(tmp_path / "ts")
    shutil.copytree(golden[0], root)
    yield root


# ---------------------------------------------------------------------------- list


def test_list_shows_every_tablet_on_disk(capsys: pytest.CaptureFixture[str],
                                         server_dir: str, golden: tuple[str, str]) -> None:
    before = files_under(server_dir)
    r = run(capsys, "local-replica", "list", "--fs-root", server_dir, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["server_uuid"] == golden[1]
    assert doc["problems"] == [] and doc["wipe_interrupted"] is False
    tablets = {t["tablet_id"]: t for t in doc["tablets"]}
    assert set(tablets) == {LIVE, DEAD}
    live, dead = tablets[LIVE], tablets[DEAD]
    assert live["data_state"] == "READY" and live["live_blocks"] >= 1
    assert live["wal"]["segments"] >= 1 and live["quarantine"] == []
    assert live["cmeta"]["term"] >= 1 and live["cmeta"]["voted_for"] == golden[1]
    assert live["cmeta"]["voters"] == [golden[1]]
    assert dead["data_state"] == "DELETED" and dead["wal"] is None
    assert dead["tombstone_last_opid"][1] >= 20  # the 20 writes, and more
    assert dead["cmeta"]["term"] >= 1  # the tombstone keeps its cmeta
    [q] = dead["quarantine"]
    assert q["path"].endswith("quarantine/dead.1")
    assert (q["superblock"], q["cmeta"], q["wal"]) == (True, True, True)
    # The superblock names the QDIR by its absolute path (here: in the golden copy's root).
    assert dead["quarantine_pointer"].endswith("/ts/quarantine/dead.1")
    text = run(capsys, "local-replica", "list", "--fs-root", server_dir)
    assert text.code == 0 and "DELETED" in text.out and "dead.1(SCW)" in text.out
    assert files_under(server_dir) == before  # read-only


def test_list_while_the_server_runs(server_dir: str) -> None:
    async def body() -> dict[str, Any]:
        options = ServerOptions(fs_root=server_dir, rpc_port=0, tick_seconds=0.01)
        async with open_tserver(options):
            out = await trio.to_thread.run_sync(
                lambda: revivify("local-replica", "list", "--fs-root", server_dir, "--json"))
            assert out.returncode == 0, out.stderr
            doc: dict[str, Any] = json.loads(out.stdout)
            return doc
    doc = trio.run(body)
    gc.collect()
    assert {t["tablet_id"] for t in doc["tablets"]} == {LIVE, DEAD}


def test_list_reports_a_corrupt_superblock_and_lists_the_others(
        capsys: pytest.CaptureFixture[str], server_dir: str) -> None:
    path = os.path.join(server_dir, "tablet-meta", LIVE)
    with open(path, "r+b") as f:
        f.seek(12)
        f.write(b"\xff\xff\xff")
    r = run(capsys, "local-replica", "list", "--fs-root", server_dir, "--json")
    assert r.code == 2
    assert path in r.err
    doc = r.json()
    tablets = {t["tablet_id"]: t for t in doc["tablets"]}
    assert tablets[LIVE]["data_state"] == "UNREADABLE"
    assert tablets[DEAD]["data_state"] == "DELETED"  # the others are listed all the same
    assert [p["path"] for p in doc["problems"]] == [path]


@pytest.mark.parametrize("args, needle", [
    (("local-replica",), "required"),
    (("local-replica", "list"), "--fs-root"),
    (("local-replica", "frob", "--fs-root", "/tmp"), "invalid choice"),
    (("local-replica", "purge-quarantine", "--fs-root", "/tmp", "--bogus"), "--bogus"),
    (("tserver", "wipe"), "--fs-root"),
    (("tserver", "wipe", "--fs-root", "/tmp", "--force"), "--force"),
])
def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                              needle: str) -> None:
    r = run(capsys, *args)
    assert r.code == 2 and needle in r.err


@pytest.mark.parametrize("command", [
    ("local-replica", "list"),
    ("local-replica", "purge-quarantine"),
    ("tserver", "wipe", "--yes"),
])
def test_missing_directory_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  command: tuple[str, ...]) -> None:
    missing = str(tmp_path / "nope")
    r = run(capsys, *command, "--fs-root", missing)
    assert r.code == 2 and missing in r.err and "no such directory" in r.err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    r = run(capsys, *command, "--fs-root", str(a_file))
    assert r.code == 2 and "not a directory" in r.err


def test_unformatted_directory_exit_2(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    for command in (("local-replica", "list"), ("local-replica", "purge-quarantine")):
        r = run(capsys, *command, "--fs-root", str(tmp_path))
        assert r.code == 2 and "not a revivify data directory" in r.err


# ---------------------------------------------------------------------------- purge


def test_purge_removes_the_quarantine_and_only_its_blocks(
        capsys: pytest.CaptureFixture[str], server_dir: str) -> None:
    live = set(superblock(server_dir, LIVE).live_blocks)
    copy = quarantined_copy(server_dir, DEAD)
    quarantined = set(copy.live_blocks) | set(copy.orphaned_blocks)
    blocks = data_blocks(server_dir)
    assert live <= blocks and quarantined <= blocks and quarantined
    assert not live & quarantined

    before = files_under(server_dir)
    dry = run(capsys, "local-replica", "purge-quarantine", "--fs-root", server_dir,
              "--dry-run", "--json")
    assert dry.code == 0, dry.err
    assert files_under(server_dir) == before  # a dry run removes nothing
    [planned] = dry.json()["tablets"]
    assert planned["tablet_id"] == DEAD and planned["blocks_removed"] == len(quarantined)

    r = run(capsys, "local-replica", "purge-quarantine", "--fs-root", server_dir, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["dry_run"] is False and doc["skipped"] == [] and doc["problems"] == []
    [tablet] = doc["tablets"]
    assert tablet == {**planned}  # the dry run said exactly this
    assert tablet["bytes_freed"] == doc["bytes_freed"] > 0
    assert data_blocks(server_dir) == blocks - quarantined  # exactly the quarantined ones
    assert os.listdir(os.path.join(server_dir, "quarantine")) == []
    # Live metadata untouched: the tombstone keeps its superblock and cmeta.
    assert superblock(server_dir, DEAD).data_state is DataState.DELETED
    assert os.path.exists(os.path.join(server_dir, "consensus-meta", DEAD))
    text = run(capsys, "local-replica", "purge-quarantine", "--fs-root", server_dir)
    assert text.code == 0 and "nothing to purge" in text.out

    # The server comes back: LIVE serves every row, DEAD is still a tombstone.
    _, states, rows = serve_once(server_dir)
    assert states == {LIVE: "RUNNING", DEAD: "TOMBSTONED"}
    assert rows == {f"{LIVE}-{i}".encode(): b"v" * 50 for i in range(20)}


def test_traces_after_a_purge_and_a_restart_are_clean(server_dir: str) -> None:
    """The spec's ``purge`` (decision 10): the checker infers it from the next startup,
    which reports the tombstone without its quarantine and its WAL ABSENT."""
    assert main(["local-replica", "purge-quarantine", "--fs-root", server_dir]) == 0
    serve_once(server_dir)
    report = check_paths([os.path.join(server_dir, "traces")])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert not bad, [f"{v.kind} {v.message}" for v in bad]


def _formatted(root: str) -> tuple[ServerLayout, MetadataStore]:
    layout = ServerLayout(root, OsDisk())
    layout.format("server-1", 1)
    layout.release_lock()
    return layout, MetadataStore(layout)


def _block(layout: ServerLayout, block_id: str) -> None:
    atomic_replace(layout.disk, posixpath.join(layout.data_dir, block_id),
                   encode_block(block_id, [[b"k", b"v" * 100]]))


def _quarantine(layout: ServerLayout, tablet_id: str, live: tuple[str, ...],
                orphaned: tuple[str, ...] = ()) -> str:
    qdir = layout.new_quarantine_dir(tablet_id)
    atomic_replace(layout.disk, posixpath.join(qdir, QDIR_SUPERBLOCK), encode_superblock(
        Superblock(tablet_id, DataState.READY, live_blocks=live, orphaned_blocks=orphaned)))
    return qdir


def test_purge_keeps_blocks_something_else_references(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    layout, store = _formatted(str(tmp_path / "ts"))
    for b in ("b1", "b2", "b3", "b4", "b5", "b6", "b7"):
        _block(layout, b)
    store.write_superblock(Superblock("t", DataState.READY, live_blocks=("b1", "b2")))
    store.write_superblock(Superblock("a", DataState.DELETED, OpId(1, 5)))
    store.write_superblock(Superblock("x", DataState.DELETED, OpId(1, 5)))
    _quarantine(layout, "a", ("b2", "b3"), ("b4",))  # b2 is live again elsewhere
    _quarantine(layout, "a", ("b6",))  # a second deletion of the same tablet
    _quarantine(layout, "x", ("b6", "b7"))  # b6 shared with a's: kept while x's stays
    # b5: no one references it (a crashed flush's leak): not the purge's business.
    r = run(capsys, "local-replica", "purge-quarantine", "--fs-root", layout.root,
            "--tablet", "a", "--json")
    assert r.code == 0, r.err
    [tablet] = r.json()["tablets"]
    assert tablet["tablet_id"] == "a" and len(tablet["dirs"]) == 2
    assert (tablet["blocks_removed"], tablet["blocks_kept"]) == (2, 2)
    assert data_blocks(layout.root) == {"b1", "b2", "b5", "b6", "b7"}
    assert os.listdir(layout.quarantine_root) == ["x.1"]
    r = run(capsys, "local-replica", "purge-quarantine", "--fs-root", layout.root, "--json")
    assert r.code == 0 and [t["tablet_id"] for t in r.json()["tablets"]] == ["x"]
    assert data_blocks(layout.root) == {"b1", "b2", "b5"}
    r = run(capsys, "local-replica", "purge-quarantine", "--fs-root", layout.root,
            "--tablet", "bad/name")
    assert r.code == 2 and "--tablet" in r.err


def test_purge_skips_a_corrupt_copy_and_purges_the_others(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    layout, _ = _formatted(str(tmp_path / "ts"))
    for b in ("b1", "b2"):
        _block(layout, b)
    bad = _quarantine(layout, "a", ("b1",))
    _quarantine(layout, "c", ("b2",))
    with open(posixpath.join(bad, QDIR_SUPERBLOCK), "r+b") as f:
        f.write(b"XXXX")
    r = run(capsys, "local-replica", "purge-quarantine", "--fs-root", layout.root, "--json")
    assert r.code == 2
    copy_path = posixpath.join(bad, QDIR_SUPERBLOCK)
    assert copy_path in r.err
    doc = r.json()
    assert [t["tablet_id"] for t in doc["tablets"]] == ["c"]
    assert [s["path"] for s in doc["skipped"]] == [bad]
    assert data_blocks(layout.root) == {"b1"} and os.path.isdir(bad)


def test_purge_refuses_when_a_live_superblock_is_corrupt(
        capsys: pytest.CaptureFixture[str], server_dir: str) -> None:
    path = os.path.join(server_dir, "tablet-meta", LIVE)
    with open(path, "r+b") as f:
        f.write(b"XXXX")
    before = files_under(server_dir)
    r = run(capsys, "local-replica", "purge-quarantine", "--fs-root", server_dir)
    assert r.code == 2 and path in r.err and "nothing purged" in r.err
    assert files_under(server_dir) == before


def test_purge_keeps_a_deletion_startup_has_not_finished(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    layout, store = _formatted(str(tmp_path / "ts"))
    _block(layout, "b1")
    qdir = _quarantine(layout, "a", ("b1",))
    store.write_superblock(Superblock("a", DataState.DELETED, OpId(1, 5), qdir))
    os.mkdir(layout.wal_dir("a"))  # crashed between deletion steps 4 and 6
    r = run(capsys, "local-replica", "purge-quarantine", "--fs-root", layout.root, "--json")
    assert r.code == 0
    doc = r.json()
    assert doc["tablets"] == [] and [s["path"] for s in doc["skipped"]] == [qdir]
    assert "roll it forward" in doc["skipped"][0]["reason"]
    assert data_blocks(layout.root) == {"b1"}


def _sim_quarantines() -> SimDisk:
    """A stopped server on SimDisk, everything durable: tablet "a" tombstoned twice (a.1
    holds its WAL; a.2 is a copy's undoing before its WAL came, so none), "b" once (a WAL
    of two segments), "t" live; each quarantine directory's copy lists one block."""
    disk = SimDisk()
    layout = ServerLayout("/srv", disk)
    layout.format("uuid", 1)
    store = MetadataStore(layout)
    store.write_cmeta(ConsensusMeta("t", 3, "uuid"))
    store.write_superblock(Superblock("t", DataState.READY, live_blocks=("t-b",)))
    _block(layout, "t-b")
    qdirs: dict[str, str] = {}
    for tablet, block, wal in (("a", "a-b1", True), ("a", "a-b2", False), ("b", "b-b1", True)):
        _block(layout, block)
        qdir = qdirs[tablet] = _quarantine(layout, tablet, (block,))
        atomic_replace(disk, posixpath.join(qdir, QDIR_CMETA), b"cmeta copy")
        if wal:
            disk.mkdir(posixpath.join(qdir, QDIR_WAL))
            for n in (1, 2):
                atomic_replace(disk, posixpath.join(qdir, QDIR_WAL, f"wal-{n:09d}"), b"ops")
    for tablet, qdir in qdirs.items():
        store.write_cmeta(ConsensusMeta(tablet, 3, "uuid"))
        store.write_superblock(Superblock(tablet, DataState.DELETED, OpId(1, 5), qdir))
    for path, content in disk.tree("/srv").items():
        if content is None:
            disk.fsync_dir(path)
    prepared = disk.crash()
    assert prepared.tree("/srv") == disk.tree("/srv")
    return prepared


View = dict[str, tuple[tuple[bool, bool] | None, str]]


def _trace_views(disk: SimDisk) -> View:
    """What a server's trace reports of each tablet's quarantine: the newest directory's
    superblock and cmeta copies, and where the WAL is at rest (the tablet server's own
    ``Lifecycle.quarantine_view`` and ``wal_at_rest``)."""
    reader = TabletManager.__new__(TabletManager)
    reader.host = types.SimpleNamespace(layout=ServerLayout("/srv", disk))  # type: ignore[assignment]
    return {t: (reader.quarantine_view(t), reader.wal_at_rest(t).value) for t in ("a", "b", "t")}


def _purge_sim(disk: SimDisk) -> None:
    layout = ServerLayout("/srv", disk)
    execute_purge(layout, plan_purge(layout))


BEFORE: View = {"a": ((True, True), "QUARANTINED"), "b": ((True, True), "QUARANTINED"),
                "t": (None, "ABSENT")}
PURGED: View = {t: (None, "ABSENT") for t in ("a", "b", "t")}


def _assert_purged(disk: SimDisk) -> None:
    layout = ServerLayout("/srv", disk)
    assert disk.listdir(layout.quarantine_root) == []
    assert sorted(disk.listdir(layout.data_dir)) == ["t-b"]
    assert _trace_views(disk) == PURGED
    for tablet in ("a", "b"):  # the tombstones keep their superblock and cmeta
        sb = MetadataStore(layout).load_superblock(tablet)
        assert sb is not None and sb.data_state is DataState.DELETED
        assert sb.tombstone_last_opid == OpId(1, 5)
        assert MetadataStore(layout).load_cmeta(tablet) is not None


def test_a_purge_is_one_step_for_the_trace_at_every_crash_point() -> None:
    """A crash anywhere in a purge leaves each tablet's quarantine, as the trace reports it,
    as it was or gone (the spec's ``purge`` is one step), never a directory holding part of
    its files, nor a newest directory without the WAL an older one held; a second purge
    finishes the job."""
    prepared = _sim_quarantines()
    assert _trace_views(prepared) == BEFORE
    seen: set[tuple[str, str]] = set()

    def check(disk: SimDisk, point: int) -> None:
        views = _trace_views(disk)
        for tablet, view in views.items():
            assert view in (BEFORE[tablet], PURGED[tablet]), (point, tablet, view,
                                                               disk.tree("/srv/quarantine"))
            seen.add((tablet, "before" if view == BEFORE[tablet] != PURGED[tablet]
                      else "purged"))
        _purge_sim(disk)
        _assert_purged(disk)

    report = explore_crashes(lambda: prepared.clone(), _purge_sim, check)
    assert report.crash_points > 10
    assert seen == {("a", "before"), ("a", "purged"), ("b", "before"), ("b", "purged"),
                    ("t", "purged")}


def test_a_purge_crashed_between_its_renames_and_its_deletes_is_finished_by_the_next(
        ) -> None:
    """The crash between the commit point (every quarantine directory renamed to its trash
    name, fsync'd) and the deletion of the trees: no listing shows the trash, the trace
    reports no quarantine, and the next purge removes the trash."""
    prepared = _sim_quarantines()
    # Where the first trash deletion happens: count the mutating operations before it.
    probe = prepared.clone()
    unlink = probe.unlink
    first: list[int] = []

    def counting_unlink(path: str) -> None:
        if PURGE_TRASH_SUFFIX in path and not first:
            first.append(probe.op_count)
        unlink(path)

    probe.unlink = counting_unlink  # type: ignore[method-assign]
    _purge_sim(probe)
    _assert_purged(probe)
    disk = prepared.clone()
    disk.crash_after(first[0])
    with pytest.raises(SimulatedCrash):
        _purge_sim(disk)
    after = disk.crash()  # nothing unsynced kept: the renames were fsync'd
    layout = ServerLayout("/srv", after)
    trash = sorted(after.listdir(layout.quarantine_root))
    assert trash == [f"a.1{PURGE_TRASH_SUFFIX}", f"a.2{PURGE_TRASH_SUFFIX}",
                     f"b.1{PURGE_TRASH_SUFFIX}"]
    # a.1's WAL moved into a.2 (the newest) before the renames.
    assert {n: sorted(after.listdir(posixpath.join(layout.quarantine_root, n)))
            for n in trash} == {
        trash[0]: sorted([QDIR_SUPERBLOCK, QDIR_CMETA]),
        trash[1]: sorted([QDIR_SUPERBLOCK, QDIR_CMETA, QDIR_WAL]),
        trash[2]: sorted([QDIR_SUPERBLOCK, QDIR_CMETA, QDIR_WAL])}
    assert _trace_views(after) == PURGED
    report = inspect_directory(layout)
    assert [t.quarantine for t in report.tablets] == [(), (), ()] and not report.problems
    plan = plan_purge(layout)
    assert plan.items == () and plan.trash == tuple(
        posixpath.join(layout.quarantine_root, n) for n in trash)
    execute_purge(layout, plan)
    _assert_purged(after)


# ---------------------------------------------------------------------------- wipe


def test_wipe_then_the_next_start_formats_a_new_uuid(
        capsys: pytest.CaptureFixture[str], server_dir: str, golden: tuple[str, str]) -> None:
    old = golden[1]
    (Path(server_dir) / "notes.txt").write_text("an operator's file")
    r = run(capsys, "tserver", "wipe", "--fs-root", server_dir, "--yes", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["old_uuid"] == old
    removed = doc["removed"]
    assert removed["instance"] is True
    assert (removed["superblocks"], removed["cmetas"], removed["wals"],
            removed["quarantine_dirs"]) == (2, 2, 1, 1)
    assert removed["blocks"] >= 2 and removed["files"] > 0 and removed["bytes"] > 0
    assert sorted(os.listdir(server_dir)) == ["LOCK", "notes.txt", "traces"]
    assert sorted(doc["kept"]) == ["LOCK", "notes.txt", "traces"]
    layout = ServerLayout(server_dir, OsDisk())
    with pytest.raises(NotFormatted):
        layout.open()
    layout.release_lock()

    new, states, _ = serve_once(server_dir)
    assert new != old and states == {}
    # The old UUID's traces stay (history for the checker); the wipe shows as a new UUID.
    traces = os.listdir(os.path.join(server_dir, "traces"))
    assert any(n.startswith(old) for n in traces) and any(n.startswith(new) for n in traces)
    report = check_paths([os.path.join(server_dir, "traces")])
    assert not [v for v in report.sorted() if v.severity != "warning"]
    # A second wipe of the new server.
    r = run(capsys, "tserver", "wipe", "--fs-root", server_dir, "--yes")
    assert r.code == 0 and new in r.out


def test_wipe_refuses_what_is_not_a_data_directory(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    (home / "data").mkdir()
    r = run(capsys, "tserver", "wipe", "--fs-root", str(home), "--yes")
    assert r.code == 1 and str(home) in r.err and "not a revivify data directory" in r.err
    assert sorted(os.listdir(home)) == ["data", "thesis.tex"]
    # A corrupt instance file next to foreign files: refused too.
    (home / "instance").write_bytes(b"garbage")
    r = run(capsys, "tserver", "wipe", "--fs-root", str(home), "--yes")
    assert r.code == 1 and "does not verify" in r.err
    assert sorted(os.listdir(home)) == ["data", "instance", "thesis.tex"]
    # An empty directory: nothing to do.
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(capsys, "tserver", "wipe", "--fs-root", str(empty), "--yes")
    assert r.code == 0 and "nothing to wipe" in r.out and os.listdir(empty) == []


def test_wipe_of_a_revivify_tree_with_a_corrupt_instance(
        capsys: pytest.CaptureFixture[str], server_dir: str) -> None:
    with open(os.path.join(server_dir, "instance"), "wb") as f:
        f.write(b"garbage")
    r = run(capsys, "tserver", "wipe", "--fs-root", server_dir, "--yes", "--json")
    assert r.code == 0
    assert r.json()["old_uuid"] is None and "old UUID is unknown" in r.err
    assert sorted(os.listdir(server_dir)) == ["LOCK", "traces"]


def test_wipe_never_follows_a_symbolic_link(capsys: pytest.CaptureFixture[str],
                                            server_dir: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("not the server's")
    os.symlink(elsewhere, os.path.join(server_dir, "quarantine", "dead.1", "link"))
    r = run(capsys, "tserver", "wipe", "--fs-root", server_dir, "--yes")
    assert r.code == 0, r.err
    assert (elsewhere / "precious").read_text() == "not the server's"
    assert sorted(os.listdir(server_dir)) == ["LOCK", "traces"]


def test_wipe_needs_yes_without_a_terminal(capsys: pytest.CaptureFixture[str],
                                           server_dir: str) -> None:
    before = files_under(server_dir)
    r = run(capsys, "tserver", "wipe", "--fs-root", server_dir)
    assert r.code == 2 and "--yes" in r.err
    assert files_under(server_dir) == before


def test_wipe_io_error_exit_1(capsys: pytest.CaptureFixture[str], server_dir: str,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: OsDisk, path: str) -> None:
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(OsDisk, "unlink", broken)
    r = run(capsys, "tserver", "wipe", "--fs-root", server_dir, "--yes")
    assert r.code == 1 and "I/O error" in r.err and "Permission denied" in r.err
    monkeypatch.undo()
    # Interrupted: the server refuses the directory; a second wipe finishes the job.
    layout = ServerLayout(server_dir, OsDisk())
    with pytest.raises(WipeInterrupted):
        layout.open()
    layout.release_lock()
    listed = run(capsys, "local-replica", "list", "--fs-root", server_dir, "--json")
    assert listed.json()["wipe_interrupted"] is True
    purge = run(capsys, "local-replica", "purge-quarantine", "--fs-root", server_dir)
    assert purge.code == 1 and "interrupted" in purge.err
    assert run(capsys, "tserver", "wipe", "--fs-root", server_dir, "--yes").code == 0
    assert sorted(os.listdir(server_dir)) == ["LOCK", "traces"]


def _sim_server() -> SimDisk:
    disk = SimDisk()
    layout = ServerLayout("/srv", disk)
    layout.format("old-uuid", 1)
    store = MetadataStore(layout)
    for t in ("t1", "t2", "t3"):
        store.write_cmeta(ConsensusMeta(t, 3, "old-uuid"))
        store.write_superblock(Superblock(t, DataState.READY, live_blocks=(f"{t}-b",)))
        atomic_replace(disk, posixpath.join(layout.data_dir, f"{t}-b"), encode_block(t, []))
        disk.mkdir(layout.wal_dir(t))
    qdir = layout.new_quarantine_dir("t1")
    atomic_replace(disk, posixpath.join(qdir, QDIR_CMETA), b"copy")
    disk.mkdir(posixpath.join(qdir, QDIR_WAL))
    return disk


def test_wipe_is_safe_at_every_crash_point() -> None:
    """After a crash anywhere in a wipe: the old identity never runs with a part of its
    tablets, and a new one never inherits any."""
    prepared = _sim_server()

    def wipe(disk: SimDisk) -> None:
        layout = ServerLayout("/srv", disk)
        wipe_directory(layout, check_wipe(layout))

    outcomes: set[str] = set()

    def check(disk: SimDisk, point: int) -> None:
        layout = ServerLayout("/srv", disk)
        try:
            info = layout.open()
        except WipeInterrupted:
            outcomes.add("interrupted")
            # A second wipe finishes it.
            wipe_directory(layout, check_wipe(layout))
            assert sorted(disk.listdir("/srv")) == []
            return
        except NotFormatted:
            outcomes.add("wiped")
            for sub in ("tablet-meta", "consensus-meta", "wals", "data", "quarantine"):
                path = posixpath.join("/srv", sub)
                assert not disk.exists(path) or disk.listdir(path) == [], (point, sub)
            return
        outcomes.add("intact")
        assert info.server_uuid == "old-uuid"
        assert layout.tablet_ids() == ["t1", "t2", "t3"], point

    report = explore_crashes(lambda: prepared.clone(), wipe, check)
    assert report.crash_points > 5
    assert outcomes == {"intact", "interrupted", "wiped"}


# ---------------------------------------------------------------------------- the lock


def test_the_lock_is_per_process_and_reentrant(tmp_path: Path) -> None:
    root = str(tmp_path)
    with lock_directory(root), lock_directory(root):
        assert held_here(root)
        probe = subprocess.run(
            [sys.executable, "-c",
             "import sys\n"
             "from revivify.impl.storage.dirlock import lock_directory\n"
             "from revivify.impl.storage.errors import DirectoryLocked\n"
             "try:\n    lock_directory(sys.argv[1])\nexcept DirectoryLocked as e:\n"
             "    print(e); sys.exit(3)\n", root],
            capture_output=True, text=True, timeout=60)
        assert probe.returncode == 3
        assert probe.stdout.strip() == f"{root} is in use by another process (pid {os.getpid()})"
    assert not held_here(root)


def test_a_second_server_refuses_a_directory_in_use(tmp_path: Path) -> None:
    root = str(tmp_path / "ts")
    os.mkdir(root)
    with lock_directory(root):
        out = subprocess.run([REVIVIFY, "tserver", "run", "--fs-root", root],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"{root} is in use by another process (pid {os.getpid()})" in out.stderr
    assert not os.path.exists(os.path.join(root, "instance"))  # it did not format


def test_commands_refuse_while_a_server_process_runs(tmp_path: Path) -> None:
    """Real processes: a running server holds its directory; wipe and purge (run as
    ``revivify`` subprocesses) refuse with exit 1 naming the path and the server's pid;
    once it stops, wipe goes ahead and the next start has a new UUID."""
    with ProcessCluster(str(tmp_path), 1) as c:
        s = c.start(0)
        old = s.uuid
        assert s.proc is not None
        pid = s.proc.pid
        root = s.fs_root
        for command in (("tserver", "wipe", "--yes"), ("local-replica", "purge-quarantine"),
                        ("local-replica", "purge-quarantine", "--dry-run")):
            out = revivify(*command, "--fs-root", root)
            assert out.returncode == 1, (command, out.stderr)
            assert f"{root} is in use by another process (pid {pid})" in out.stderr
            assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        listed = revivify("local-replica", "list", "--fs-root", root, "--json")
        assert listed.returncode == 0 and json.loads(listed.stdout)["server_uuid"] == old
        assert os.path.exists(os.path.join(root, "instance"))
        assert c.stop(0) == 0
        out = revivify("tserver", "wipe", "--fs-root", root, "--yes")
        assert out.returncode == 0, out.stderr
        assert old in out.stdout and "new UUID" in out.stdout
        new = c.start(0).uuid
        assert new != old
        assert c.stop(0) == 0
    report = check_paths([c.trace_dir])
    assert not [v for v in report.sorted() if v.severity != "warning"]
