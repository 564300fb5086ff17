"""Offline maintenance of one server directory: inspect it, purge its quarantine, wipe it.

The storage side of ``revivify local-replica list | purge-quarantine`` and ``revivify
tserver wipe`` (impl/cli/local.py). Everything goes through the Disk seam, so the crash
behaviour is tested on SimDisk; the callers take the root's lock (dirlock.py) first, since
purge and wipe are only correct on a directory no server is using.

Inspection (`inspect_directory`) is read-only and safe while a server runs (it may then see
a moment of a change in flight). Every tablet id found anywhere (a superblock, a cmeta, a
WAL directory, a quarantine directory) is listed; a file that does not read or verify is
reported with its path and error and the rest is listed all the same.

Purge (`plan_purge`, `execute_purge`) removes quarantine directories
``quarantine/<tablet>.<n>/`` and the data blocks only they reference: the blocks their
superblock copy lists (live or orphaned) that no superblock in ``tablet-meta/`` lists and no
quarantine directory that stays lists. Every live superblock must read, or nothing is
purged (a block it might list cannot be proven unreferenced). A quarantine directory is
kept, with the reason, when its superblock copy does not verify (what it references is
unknown), or when it belongs to a deletion startup has not finished yet (a DELETED
superblock while ``wals/<tablet>`` is still live: startup moves the WAL into the directory
the superblock names). The tombstone's superblock is not rewritten (it keeps its last
OpId and the path of the directory that was purged) and its cmeta stays: it keeps voting.

A purge is the spec's ``purge`` (decision 10 of spec/actions.py), one atomic step: the
next startup reports the tablet with no quarantine and its WAL ABSENT where it was
QUARANTINED, and the trace checker infers the purge from that. What the trace reports of
a quarantine is read through ``ServerLayout.quarantine_dirs`` (impl/tserver/lifecycle.py:
the newest directory's superblock and cmeta copies, and whether any directory holds a
WAL), so a purge takes a tablet's quarantine out of that listing in renames, each to a
trash name it does not match (``<tablet>.<n>.tmp.purge``: the temp marker keeps it out of
this module's listings too), before deleting anything in it: a crash never leaves a
listed directory holding part of its files. The tablet's newest directory goes last, and
if it holds no WAL while an older one does, that WAL first moves into it: until the last
rename the trace sees the quarantine as it was, after it none. Order, so that a crash at
any point leaves a state a second purge finishes:

    1. delete the trash an interrupted purge left (listed by ``plan_purge``); fsync
       ``quarantine/``
    2. unlink the blocks, fsync ``data/`` (a block is unlinked while the directory that
       references it is still listed: trash never references a block that exists)
    3. per tablet: the WAL into the newest directory when it has none (fsync both),
       then each directory renamed to its trash name, the newest last; fsync
       ``quarantine/`` (the commit point: renames in one directory persist in order)
    4. delete the trash trees, fsync ``quarantine/``

A crash after 3 leaves only trash, which no listing shows and the next purge removes.

Wipe (`check_wipe`, `wipe_directory`) clears the tree so that the next start formats the
directory with a new UUID. It keeps ``LOCK``, ``traces/`` (the old UUID's traces are the
history the trace checker needs: a wipe shows in them as a new UUID) and any entry that is
not one of revivify's names. A wipe is refused on a directory that is not a revivify data
directory: one whose instance file does not verify and which holds anything other than
revivify's names. The order makes every crash state safe: the old identity must never run
with a part of its replicas (its votes would be forgotten) and a new identity must never
inherit one:

    1. mkdir <root>/wipe.tmp.trash (from here on `open()` refuses the root while it has
       an instance file: WipeInterrupted)
    2. rename tablet-meta into the trash (all the tablets go at once), then consensus-meta,
       wals, data, quarantine; fsync root and trash
    3. delete the trash's subtrees; unlink temp files in the root; fsync
    4. rename the instance file into the trash, fsync the root: the commit point (the next
       start formats a new UUID)
    5. delete the trash, fsync the root

A wipe interrupted before 4 leaves the instance and the trash: the server refuses to start
and a second wipe finishes the job. After 4 only a trash holding the old instance file can
remain (a second wipe, or the next one, removes it).
"""

from __future__ import annotations

import os
import posixpath

import attrs

from .dirlock import LOCK
from .disk import TEMP_MARKER, Disk, OsDisk, is_temp_name, mkdir_durably, read_optional
from .errors import StorageError
from .layout import (
    CONSENSUS_META,
    DATA,
    INSTANCE,
    QDIR_CMETA,
    QDIR_SUPERBLOCK,
    QDIR_WAL,
    QUARANTINE,
    SUBDIRS,
    TABLET_META,
    TABLET_SCHEMA,
    WALS,
    WIPE_TRASH,
    ServerLayout,
    validate_name,
)
from .metafile import decode_cmeta, decode_instance, decode_superblock
from .values import ConsensusMeta, DataState, InstanceInfo, OpId, Superblock
from .wal import SEGMENT_NAME, salvage_last_opid

TRACES = "traces"  # the tablet server's default trace directory, <root>/traces
# A purge renames a quarantine directory <tablet>.<n> to <tablet>.<n> + this before it
# deletes the tree: no listing of quarantine directories matches the name (the temp
# marker; and "<n>.tmp.purge" is no number for ServerLayout.quarantine_dirs).
PURGE_TRASH_SUFFIX = f"{TEMP_MARKER}purge"


@attrs.frozen
class Problem:
    """A file or directory that could not be read or verified, and why."""

    path: str
    error: str


def _error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _names(disk: Disk, directory: str) -> list[str]:
    """Non-temp names in `directory`; [] if it does not exist."""
    if not disk.is_dir(directory):
        return []
    return [n for n in disk.listdir(directory) if not is_temp_name(n)]


def _opid(value: OpId | None) -> tuple[int, int] | None:
    return None if value is None else (value.term, value.index)


def parse_quarantine_name(name: str) -> tuple[str, int] | None:
    """``<tablet-id>.<n>`` -> (tablet id, n); None for any other name."""
    tablet_id, dot, number = name.rpartition(".")
    if not dot or not number.isdigit() or not tablet_id:
        return None
    try:
        validate_name(tablet_id)
    except StorageError:
        return None
    return tablet_id, int(number)


def _is_link(disk: Disk, path: str) -> bool:
    """A symbolic link on the real disk: removed as a leaf, never followed."""
    return isinstance(disk, OsDisk) and os.path.islink(path)


def tree_size(disk: Disk, path: str) -> tuple[int, int]:
    """(files, bytes) under `path` (a file counts itself; a symbolic link is one file of
    no bytes, not followed)."""
    if _is_link(disk, path):
        return 1, 0
    if not disk.is_dir(path):
        return 1, disk.file_size(path)
    files = size = 0
    for name in disk.listdir(path):
        f, s = tree_size(disk, posixpath.join(path, name))
        files += f
        size += s
    return files, size


def remove_tree(disk: Disk, path: str) -> tuple[int, int]:
    """Delete `path` (a file, or a directory and everything under it), children first;
    return the (files, bytes) removed. The caller fsyncs the parent of `path`: once the
    top entry's removal is durable, nothing under it is reachable. A symbolic link is
    unlinked, never followed."""
    if _is_link(disk, path):
        disk.unlink(path)
        return 1, 0
    if not disk.is_dir(path):
        size = disk.file_size(path)
        disk.unlink(path)
        return 1, size
    files = size = 0
    for name in disk.listdir(path):
        f, s = remove_tree(disk, posixpath.join(path, name))
        files += f
        size += s
    disk.rmdir(path)
    return files, size


# --------------------------------------------------------------------------- inspection


@attrs.frozen
class QuarantineDir:
    path: str
    tablet_id: str
    number: int
    superblock: bool  # holds the superblock copy
    cmeta: bool  # holds the cmeta copy
    wal: bool  # holds the quarantined WAL directory
    files: int
    bytes: int


@attrs.frozen
class WalInfo:
    segments: int
    last_opid: tuple[int, int] | None


@attrs.frozen
class TabletOnDisk:
    """One tablet id as the directory shows it."""

    tablet_id: str
    data_state: str  # DOES_NOT_EXIST (no superblock), READY, COPYING, DELETED, UNREADABLE
    superblock: Superblock | None
    cmeta: ConsensusMeta | None
    cmeta_state: str  # PRESENT, ABSENT, UNREADABLE
    wal: WalInfo | None
    live_blocks: int
    missing_blocks: int
    quarantine: tuple[QuarantineDir, ...]
    problems: tuple[Problem, ...]


@attrs.frozen
class DirectoryReport:
    root: str
    instance: InstanceInfo | None
    instance_problem: Problem | None
    wipe_interrupted: bool
    tablets: tuple[TabletOnDisk, ...]
    unreferenced_blocks: tuple[str, ...]  # block files no superblock (live or quarantined) lists
    problems: tuple[Problem, ...]  # every problem, the tablets' included

    @property
    def formatted(self) -> bool:
        return self.instance is not None or self.instance_problem is not None


def read_instance(layout: ServerLayout) -> tuple[InstanceInfo | None, Problem | None]:
    """The instance file without taking the lock: (info, None), (None, None) if there is
    none, (None, problem) if it does not read or verify."""
    path = layout.instance_path
    try:
        data = read_optional(layout.disk, path)
        return (None, None) if data is None else (decode_instance(data, path=path), None)
    except (StorageError, OSError) as exc:
        return None, Problem(path, _error(exc))


def _read_superblock(disk: Disk, path: str, tablet_id: str | None) -> Superblock | None:
    """The superblock at `path` (None if absent); MetadataCorrupt / OSError if unusable."""
    data = read_optional(disk, path)
    if data is None:
        return None
    superblock = decode_superblock(data, path=path)
    if tablet_id is not None and superblock.tablet_id != tablet_id:
        raise StorageError(f"{path}: file names tablet {tablet_id!r} but holds tablet "
                           f"{superblock.tablet_id!r}")
    return superblock


def _read_cmeta(disk: Disk, path: str, tablet_id: str) -> ConsensusMeta | None:
    data = read_optional(disk, path)
    if data is None:
        return None
    cmeta = decode_cmeta(data, path=path)
    if cmeta.tablet_id != tablet_id:
        raise StorageError(f"{path}: file names tablet {tablet_id!r} but holds tablet "
                           f"{cmeta.tablet_id!r}")
    return cmeta


def quarantine_dirs(layout: ServerLayout, problems: list[Problem] | None = None
                    ) -> list[QuarantineDir]:
    """Every quarantine directory, by tablet id then number; other entries of
    ``quarantine/`` go to `problems` (and are never touched)."""
    disk = layout.disk
    found: list[QuarantineDir] = []
    for name in _names(disk, layout.quarantine_root):
        path = posixpath.join(layout.quarantine_root, name)
        parsed = parse_quarantine_name(name)
        if parsed is None or not disk.is_dir(path):
            if problems is not None:
                problems.append(Problem(path, "not a quarantine directory (<tablet>.<n>/)"))
            continue
        names = set(disk.listdir(path))
        files, size = tree_size(disk, path)
        found.append(QuarantineDir(path, parsed[0], parsed[1], QDIR_SUPERBLOCK in names,
                                   QDIR_CMETA in names, QDIR_WAL in names, files, size))
    return sorted(found, key=lambda q: (q.tablet_id, q.number))


def _wal_info(disk: Disk, wal_dir: str) -> WalInfo | None:
    if not disk.is_dir(wal_dir):
        return None
    segments = sum(1 for n in disk.listdir(wal_dir) if SEGMENT_NAME.match(n))
    last = salvage_last_opid(disk, wal_dir)
    return WalInfo(segments, _opid(last))


def inspect_directory(layout: ServerLayout) -> DirectoryReport:
    """Everything on disk, tablet by tablet; read-only (no lock: safe while a server runs).
    OSError only if the root itself cannot be listed."""
    disk = layout.disk
    disk.listdir(layout.root)  # the root must be a readable directory
    instance, instance_problem = read_instance(layout)
    problems: list[Problem] = [] if instance_problem is None else [instance_problem]
    ids = _tablet_ids(layout, problems)
    qdirs: list[QuarantineDir] = []
    try:
        qdirs = quarantine_dirs(layout, problems)
    except OSError as exc:
        problems.append(Problem(layout.quarantine_root, _error(exc)))
    ids.update(q.tablet_id for q in qdirs)

    # Every block a superblock lists, live or in a quarantined copy: the rest of data/ is
    # unreferenced.
    referenced: set[str] = set()
    tablets: list[TabletOnDisk] = []
    for tablet_id in sorted(ids):
        tablet = _inspect_tablet(layout, tablet_id, qdirs, referenced)
        problems.extend(tablet.problems)
        tablets.append(tablet)
    unreferenced: list[str] = []
    try:
        unreferenced = [b for b in _names(disk, layout.data_dir) if b not in referenced]
    except OSError as exc:
        problems.append(Problem(layout.data_dir, _error(exc)))
    return DirectoryReport(
        root=layout.root, instance=instance, instance_problem=instance_problem,
        wipe_interrupted=instance is not None
        and disk.exists(posixpath.join(layout.root, WIPE_TRASH)),
        tablets=tuple(tablets), unreferenced_blocks=tuple(unreferenced),
        problems=tuple(problems))


def _tablet_ids(layout: ServerLayout, problems: list[Problem]) -> set[str]:
    """The tablet ids named in tablet-meta/, consensus-meta/ and wals/; a name that is not
    a valid id, or a directory that cannot be listed, is a problem."""
    ids: set[str] = set()
    for directory in (layout.tablet_meta_dir, layout.consensus_meta_dir, layout.wals_dir):
        try:
            for name in _names(layout.disk, directory):
                try:
                    ids.add(validate_name(name))
                except StorageError as exc:
                    problems.append(Problem(posixpath.join(directory, name), _error(exc)))
        except OSError as exc:
            problems.append(Problem(directory, _error(exc)))
    return ids


def _inspect_tablet(layout: ServerLayout, tablet_id: str, qdirs: list[QuarantineDir],
                    referenced: set[str]) -> TabletOnDisk:
    """One tablet's files: superblock, cmeta, WAL, blocks and quarantine directories, each
    one that does not read a problem of the tablet's. Adds the blocks its superblock and
    its quarantined copies list to `referenced`."""
    disk = layout.disk
    own: list[Problem] = []
    superblock: Superblock | None = None
    state = "DOES_NOT_EXIST"
    path = layout.superblock_path(tablet_id)
    try:
        superblock = _read_superblock(disk, path, tablet_id)
        if superblock is not None:
            state = superblock.data_state.value
    except (StorageError, OSError) as exc:
        state = "UNREADABLE"
        own.append(Problem(path, _error(exc)))
    cmeta: ConsensusMeta | None = None
    cmeta_state = "ABSENT"
    path = layout.cmeta_path(tablet_id)
    try:
        cmeta = _read_cmeta(disk, path, tablet_id)
        cmeta_state = "ABSENT" if cmeta is None else "PRESENT"
    except (StorageError, OSError) as exc:
        cmeta_state = "UNREADABLE"
        own.append(Problem(path, _error(exc)))
    wal: WalInfo | None = None
    try:
        wal = _wal_info(disk, layout.wal_dir(tablet_id))
    except OSError as exc:
        own.append(Problem(layout.wal_dir(tablet_id), _error(exc)))
    live = missing = 0
    if superblock is not None:
        live = len(superblock.live_blocks)
        referenced.update(superblock.live_blocks, superblock.orphaned_blocks)
        missing = sum(1 for b in superblock.live_blocks
                      if not disk.exists(posixpath.join(layout.data_dir, b)))
    mine = tuple(q for q in qdirs if q.tablet_id == tablet_id)
    for q in mine:
        if not q.superblock:
            continue
        copy_path = posixpath.join(q.path, QDIR_SUPERBLOCK)
        try:
            copy = _read_superblock(disk, copy_path, tablet_id)
        except (StorageError, OSError) as exc:
            own.append(Problem(copy_path, _error(exc)))
            continue
        if copy is not None:
            referenced.update(copy.live_blocks, copy.orphaned_blocks)
    return TabletOnDisk(tablet_id, state, superblock, cmeta, cmeta_state, wal, live, missing,
                        mine, tuple(own))


# --------------------------------------------------------------------------- purge


@attrs.frozen
class PurgeItem:
    """One quarantine directory to purge and the blocks that go with it."""

    qdir: QuarantineDir
    blocks: tuple[str, ...]  # block files only it references that exist: to delete
    block_bytes: int
    blocks_kept: int  # blocks it lists that something else still references
    blocks_absent: int  # blocks it lists that only it references, already gone


@attrs.frozen
class Skipped:
    path: str
    tablet_id: str
    reason: str


@attrs.frozen
class PurgePlan:
    root: str
    items: tuple[PurgeItem, ...]
    skipped: tuple[Skipped, ...]
    problems: tuple[Problem, ...]
    # Non-empty: purging is unsafe (a live superblock does not read); nothing may go.
    blocking: tuple[Problem, ...]
    # What an interrupted purge left in quarantine/ (no listing shows it): removed first.
    trash: tuple[str, ...] = ()

    @property
    def bytes_freed(self) -> int:
        return sum(i.qdir.bytes + i.block_bytes for i in self.items)


def plan_purge(layout: ServerLayout, tablet_id: str | None = None) -> PurgePlan:
    """What a purge of every quarantine directory (of `tablet_id` only, if given) removes.
    Read-only. OSError if a directory cannot be listed."""
    if tablet_id is not None:
        validate_name(tablet_id)
    live_refs, pending_roll_forward, blocking = _live_references(layout)
    problems: list[Problem] = []
    qdirs = quarantine_dirs(layout, problems)
    chosen, kept_refs, skipped = _choose_quarantine(layout, qdirs, tablet_id,
                                                    pending_roll_forward, problems)
    # A block goes with the first chosen directory that lists it, and only if nothing kept
    # (a live superblock, a directory not purged) lists it too.
    keep = live_refs | kept_refs
    claimed: set[str] = set()
    items = [_purge_item(layout, q, refs, keep, claimed) for q, refs in chosen]
    return PurgePlan(layout.root, tuple(items), tuple(skipped), tuple(problems),
                     tuple(blocking), tuple(purge_trash(layout)))


def _live_references(layout: ServerLayout) -> tuple[set[str], set[str], list[Problem]]:
    """The blocks live superblocks list, the tablets whose deletion startup has yet to
    finish, and the superblocks that do not read (any one blocks the purge)."""
    disk = layout.disk
    blocking: list[Problem] = []
    live_refs: set[str] = set()
    pending_roll_forward: set[str] = set()  # tablets whose deletion startup finishes
    for name in disk.listdir(layout.tablet_meta_dir):
        if is_temp_name(name):
            continue
        path = posixpath.join(layout.tablet_meta_dir, name)
        try:
            sb = _read_superblock(disk, path, name)
        except (StorageError, OSError) as exc:
            blocking.append(Problem(path, _error(exc)))
            continue
        if sb is None:
            continue
        live_refs.update(sb.live_blocks, sb.orphaned_blocks)
        if sb.data_state is DataState.DELETED and disk.is_dir(layout.wal_dir(name)):
            # Startup moves the WAL into the QDIR the superblock names (an absolute path,
            # which may not match this spelling of the root): keep all of the tablet's.
            pending_roll_forward.add(name)
    return live_refs, pending_roll_forward, blocking


def _choose_quarantine(layout: ServerLayout, qdirs: list[QuarantineDir],
                       tablet_id: str | None, pending_roll_forward: set[str],
                       problems: list[Problem]
                       ) -> tuple[list[tuple[QuarantineDir, frozenset[str]]], set[str],
                                  list[Skipped]]:
    """The directories to purge with the blocks each lists, the blocks of the ones kept,
    and the ones skipped with why (an unreadable superblock copy; a deletion not yet
    rolled forward)."""
    chosen: list[tuple[QuarantineDir, frozenset[str]]] = []
    kept_refs: set[str] = set()
    skipped: list[Skipped] = []
    for q in qdirs:
        refs: frozenset[str] = frozenset()
        unreadable: str | None = None
        if q.superblock:
            copy_path = posixpath.join(q.path, QDIR_SUPERBLOCK)
            try:
                copy = _read_superblock(layout.disk, copy_path, q.tablet_id)
            except (StorageError, OSError) as exc:
                unreadable = _error(exc)
                problems.append(Problem(copy_path, unreadable))
            else:
                if copy is not None:
                    refs = frozenset(copy.live_blocks + copy.orphaned_blocks)
        if tablet_id is not None and q.tablet_id != tablet_id:
            kept_refs |= refs
            continue
        if unreadable is not None:
            skipped.append(Skipped(q.path, q.tablet_id, f"its superblock copy does not "
                                                        f"read: {unreadable}"))
        elif q.tablet_id in pending_roll_forward:
            kept_refs |= refs
            skipped.append(Skipped(q.path, q.tablet_id, "its deletion is not finished (the "
                                   "WAL is still live): start the server once to roll it "
                                   "forward"))
        else:
            chosen.append((q, refs))
    return chosen, kept_refs, skipped


def _purge_item(layout: ServerLayout, q: QuarantineDir, refs: frozenset[str],
                keep: set[str], claimed: set[str]) -> PurgeItem:
    """One chosen directory and the block files that go with it (claimed: not again)."""
    mine = sorted(refs - keep - claimed)
    claimed.update(mine)
    present: list[str] = []
    size = absent = 0
    for block_id in mine:
        path = posixpath.join(layout.data_dir, block_id)
        if layout.disk.exists(path):
            present.append(block_id)
            size += layout.disk.file_size(path)
        else:
            absent += 1
    return PurgeItem(q, tuple(present), size, len(refs & keep), absent)


def purge_trash(layout: ServerLayout) -> list[str]:
    """The trash an interrupted purge left in ``quarantine/``, sorted."""
    disk = layout.disk
    root = layout.quarantine_root
    if not disk.is_dir(root):
        return []
    return sorted(posixpath.join(root, n) for n in disk.listdir(root)
                  if n.endswith(PURGE_TRASH_SUFFIX))


def _to_trash(disk: Disk, path: str) -> str:
    """Rename a quarantine directory to its trash name (left unsynced: the caller fsyncs
    ``quarantine/``); return the trash path."""
    trash = path + PURGE_TRASH_SUFFIX
    if disk.exists(trash):  # not listed by the plan (a race with nothing): unlisted anyway
        remove_tree(disk, trash)
    disk.rename(path, trash)
    return trash


def execute_purge(layout: ServerLayout, plan: PurgePlan) -> PurgePlan:
    """Carry out `plan` (refused with StorageError if it is blocked) in the order of the
    module docstring: leftover trash, the blocks (fsync data/), each tablet's quarantine
    out of the listings in renames, the newest directory last (fsync quarantine/), then
    the trash trees (fsync quarantine/). Returns the plan."""
    if plan.blocking:
        raise StorageError("; ".join(f"{p.path}: {p.error}" for p in plan.blocking))
    disk = layout.disk
    root = layout.quarantine_root
    # 1. What an interrupted purge left: out of every listing already.
    leftovers = [t for t in plan.trash if disk.exists(t)]
    for trash in leftovers:
        remove_tree(disk, trash)
    if leftovers:
        disk.fsync_dir(root)
    # 2. The blocks, while the directories that reference them are still listed.
    unlinked = False
    for item in plan.items:
        for block_id in item.blocks:
            path = posixpath.join(layout.data_dir, block_id)
            if disk.exists(path):
                disk.unlink(path)
                unlinked = True
    if unlinked:
        disk.fsync_dir(layout.data_dir)
    # 3. Each tablet's directories out of the listings, the newest last (the items are in
    # (tablet, number) order).
    by_tablet: dict[str, list[str]] = {}
    for item in plan.items:
        if disk.exists(item.qdir.path):
            by_tablet.setdefault(item.qdir.tablet_id, []).append(item.qdir.path)
    trashed: list[str] = []
    for dirs in by_tablet.values():
        *older, newest = dirs
        newest_wal = posixpath.join(newest, QDIR_WAL)
        holder = next((d for d in reversed(older)
                       if disk.exists(posixpath.join(d, QDIR_WAL))), None)
        if holder is not None and not disk.exists(newest_wal):
            # The trace says QUARANTINED while any listed directory holds a WAL: keep one
            # in the directory that goes last.
            layout.move_dir_durably(posixpath.join(holder, QDIR_WAL), newest_wal)
        trashed += [_to_trash(disk, d) for d in (*older, newest)]
    if trashed:
        disk.fsync_dir(root)  # the commit point
    # 4. The trees.
    for trash in trashed:
        remove_tree(disk, trash)
    if trashed:
        disk.fsync_dir(root)
    return plan


# --------------------------------------------------------------------------- wipe


def _is_own_name(name: str) -> bool:
    """Names a revivify server root may hold."""
    if name in (INSTANCE, LOCK, TRACES, WIPE_TRASH, TABLET_SCHEMA, *SUBDIRS):
        return True
    return is_temp_name(name) and name.split(TEMP_MARKER, 1)[0] in (INSTANCE, *SUBDIRS)


@attrs.frozen
class WipeCheck:
    """What a wipe of `root` would find."""

    root: str
    instance: InstanceInfo | None
    instance_problem: Problem | None
    to_remove: tuple[str, ...]  # root entries the wipe removes
    kept: tuple[str, ...]  # root entries it keeps: LOCK, traces
    unknown: tuple[str, ...]  # entries that are not revivify's (kept too)

    @property
    def is_data_directory(self) -> bool:
        """A verified instance file, or nothing but revivify's names (an empty directory,
        an interrupted format or wipe, a corrupt instance file in a revivify tree)."""
        return self.instance is not None or not self.unknown


def check_wipe(layout: ServerLayout) -> WipeCheck:
    """Read-only. OSError (FileNotFoundError, NotADirectoryError) if the root is unusable."""
    names = layout.disk.listdir(layout.root)
    instance, problem = read_instance(layout)
    remove = tuple(n for n in names if _is_own_name(n) and n not in (LOCK, TRACES))
    kept = tuple(n for n in names if n in (LOCK, TRACES))
    unknown = tuple(n for n in names if not _is_own_name(n))
    return WipeCheck(layout.root, instance, problem, remove, kept, unknown)


@attrs.frozen
class WipeResult:
    root: str
    old_uuid: str | None
    instance: bool  # an instance file was removed
    superblocks: int
    cmetas: int
    wals: int
    blocks: int
    quarantine_dirs: int
    files: int
    bytes: int
    kept: tuple[str, ...]


def _count(disk: Disk, directory: str, *, dirs_only: bool = False) -> int:
    names = _names(disk, directory)
    if dirs_only:
        return sum(1 for n in names if disk.is_dir(posixpath.join(directory, n)))
    return len(names)


def wipe_directory(layout: ServerLayout, check: WipeCheck) -> WipeResult:
    """Wipe the root `check` describes (see the module docstring for the order). The caller
    holds the root's lock and has refused anything but a data directory."""
    if not check.is_data_directory:
        raise StorageError(f"{layout.root} is not a revivify data directory")
    disk = layout.disk
    root = layout.root
    trash = posixpath.join(root, WIPE_TRASH)
    mkdir_durably(disk, trash)
    # 2. The subtrees into the trash, tablet-meta first: the old identity is disabled.
    for sub in (TABLET_META, CONSENSUS_META, WALS, DATA, QUARANTINE, TABLET_SCHEMA):
        src = posixpath.join(root, sub)
        if not disk.exists(src):
            continue
        dst = posixpath.join(trash, sub)
        if disk.exists(dst):  # left by an interrupted wipe; its own removal starts over
            remove_tree(disk, dst)
        disk.rename(src, dst)
        disk.fsync_dir(root)
        disk.fsync_dir(trash)
    counts = {
        "superblocks": _count(disk, posixpath.join(trash, TABLET_META)),
        "cmetas": _count(disk, posixpath.join(trash, CONSENSUS_META)),
        "wals": _count(disk, posixpath.join(trash, WALS), dirs_only=True),
        "blocks": _count(disk, posixpath.join(trash, DATA)),
        "quarantine_dirs": _count(disk, posixpath.join(trash, QUARANTINE), dirs_only=True),
    }
    # 3. Their contents, and temp files left in the root.
    files = size = 0
    for sub in (*SUBDIRS, TABLET_SCHEMA):
        path = posixpath.join(trash, sub)
        if disk.exists(path):
            f, s = remove_tree(disk, path)
            files, size = files + f, size + s
    for name in disk.listdir(root):
        if is_temp_name(name) and name != WIPE_TRASH and _is_own_name(name):
            f, s = remove_tree(disk, posixpath.join(root, name))
            files, size = files + f, size + s
    disk.fsync_dir(trash)
    disk.fsync_dir(root)
    # 4. The commit point: no instance file, the next start formats a new UUID.
    had_instance = disk.exists(layout.instance_path)
    if had_instance:
        disk.rename(layout.instance_path, posixpath.join(trash, INSTANCE))
        disk.fsync_dir(root)
    # 5. The trash itself.
    f, s = remove_tree(disk, trash)
    disk.fsync_dir(root)
    files, size = files + f, size + s
    kept = tuple(n for n in disk.listdir(root))
    return WipeResult(root, check.instance.server_uuid if check.instance else None,
                      had_instance, files=files, bytes=size, kept=kept, **counts)


__all__ = [
    "PURGE_TRASH_SUFFIX",
    "TRACES",
    "DirectoryReport",
    "Problem",
    "PurgeItem",
    "PurgePlan",
    "QuarantineDir",
    "Skipped",
    "TabletOnDisk",
    "WalInfo",
    "WipeCheck",
    "WipeResult",
    "check_wipe",
    "execute_purge",
    "inspect_directory",
    "parse_quarantine_name",
    "plan_purge",
    "purge_trash",
    "quarantine_dirs",
    "read_instance",
    "remove_tree",
    "tree_size",
    "wipe_directory",
]
