"""The server directory (seed 001, "Tablet directory structure"), on any Disk::

    <root>/instance                       server UUID + format time (metadata frame)
    <root>/tablet-meta/<tablet-id>        superblock; its presence means the tablet exists
    <root>/consensus-meta/<tablet-id>     consensus metadata (term, vote, committed config)
    <root>/wals/<tablet-id>/              WAL segments (wal.py)
    <root>/data/<block-id>                data blocks (blocks.py), shared by all tablets
    <root>/quarantine/<tablet-id>.<n>/    quarantined data of deleted tablets

Format order and why: every subdirectory is created and made durable (mkdir, fsync of the
parent) *before* the instance file is atomically written. The instance file is therefore the
commit point of `format`: if it exists, the whole tree exists; a crash mid-format leaves no
instance file and `open()` reports NotFormatted (running `format` again completes it).

The primitives later issues need for tablet deletion (seed 001 steps 2, 3, 5, 6) live here:
`new_quarantine_dir` (create QDIR durably), `copy_file_durably` (superblock / cmeta into
QDIR: temp, fsync, rename, fsync dir), and `move_dir_durably` (WAL dir into QDIR with one
atomic rename, then both parent directories fsynced).

One process at a time: on the real disk (`OsDisk`), `open()` and `format()` take the
exclusive lock of ``<root>/LOCK`` (dirlock.py) and the layout keeps it while it lives (the
server's lifetime); another process gets DirectoryLocked ("ROOT is in use by another process
(pid N)"). `release_lock()` lets it go early (the offline commands). Simulated disks take no
lock. `open()` also refuses (WipeInterrupted) a root that a wipe began emptying
(``<root>/wipe.tmp.trash`` next to the instance file): see offline.py.
"""

from __future__ import annotations

import os
import posixpath
import weakref

from .dirlock import LOCK, DirLock, lock_directory
from .disk import (
    Disk,
    OsDisk,
    atomic_replace,
    is_temp_name,
    makedirs_durably,
    mkdir_durably,
    parent_of,
    read_optional,
)
from .errors import AlreadyFormatted, InvalidName, NotFormatted, WipeInterrupted
from .metafile import decode_instance, encode_instance
from .values import InstanceInfo

INSTANCE = "instance"
TABLET_META = "tablet-meta"
CONSENSUS_META = "consensus-meta"
WALS = "wals"
DATA = "data"
QUARANTINE = "quarantine"
SUBDIRS = (TABLET_META, CONSENSUS_META, WALS, DATA, QUARANTINE)
# Per-tablet schema versions (impl/tserver/schema.py), made on the first AlterSchema. Not in
# SUBDIRS: a directory formatted before it existed opens unchanged. A wipe removes it too.
TABLET_SCHEMA = "tablet-schema"
# Names inside a quarantine directory <root>/quarantine/<tablet-id>.<n>/.
QDIR_SUPERBLOCK = "superblock"
QDIR_CMETA = "cmeta"
QDIR_WAL = "wal"
# A WAL directory that never was the replica's log: a tablet copy cut in its WAL phase left a
# partial download (the durable state says no WAL). The deletion moves it aside under this
# name, for forensics, where nothing reads it as the tombstone's WAL.
QDIR_PARTIAL_WAL = "wal.partial-download"
# A wipe (offline.py) moves the tree in here before deleting it; its presence next to an
# instance file means a wipe was interrupted. The temp marker keeps it out of every listing.
WIPE_TRASH = "wipe.tmp.trash"


def validate_name(name: str) -> str:
    """Refuse names that are not a single safe path component (tablet and block ids)."""
    if not name:
        raise InvalidName(name, "empty")
    if len(name.encode()) > 200:
        raise InvalidName(name, "longer than 200 bytes")
    if "/" in name or "\x00" in name:
        raise InvalidName(name, "contains '/' or NUL")
    if name.startswith("."):
        raise InvalidName(name, "starts with '.'")
    if is_temp_name(name):
        raise InvalidName(name, "contains the temporary-file marker")
    return name


class ServerLayout:
    """Paths and directory-level primitives of one tablet server's data root."""

    def __init__(self, root: str, disk: Disk) -> None:
        self.root = root.rstrip("/") or "/"
        self.disk = disk
        self._lock: DirLock | None = None

    # ------------------------------------------------------------------ paths

    @property
    def instance_path(self) -> str:
        return posixpath.join(self.root, INSTANCE)

    @property
    def tablet_meta_dir(self) -> str:
        return posixpath.join(self.root, TABLET_META)

    @property
    def consensus_meta_dir(self) -> str:
        return posixpath.join(self.root, CONSENSUS_META)

    @property
    def wals_dir(self) -> str:
        return posixpath.join(self.root, WALS)

    @property
    def data_dir(self) -> str:
        return posixpath.join(self.root, DATA)

    @property
    def quarantine_root(self) -> str:
        return posixpath.join(self.root, QUARANTINE)

    def superblock_path(self, tablet_id: str) -> str:
        return posixpath.join(self.tablet_meta_dir, validate_name(tablet_id))

    def cmeta_path(self, tablet_id: str) -> str:
        return posixpath.join(self.consensus_meta_dir, validate_name(tablet_id))

    def wal_dir(self, tablet_id: str) -> str:
        return posixpath.join(self.wals_dir, validate_name(tablet_id))

    # ------------------------------------------------------------------ format / open

    def format(self, server_uuid: str, format_time_ns: int) -> InstanceInfo:
        """Create the directory tree, then (commit point) the instance file."""
        validate_name(server_uuid)
        makedirs_durably(self.disk, self.root)
        self.hold_lock()
        if self.disk.exists(self.instance_path):
            raise AlreadyFormatted(self.instance_path)
        for sub in SUBDIRS:
            mkdir_durably(self.disk, posixpath.join(self.root, sub))
        info = InstanceInfo(server_uuid=server_uuid, format_time_ns=format_time_ns)
        atomic_replace(self.disk, self.instance_path, encode_instance(info))
        return info

    def open(self) -> InstanceInfo:
        """Read the instance file (NotFormatted / MetadataCorrupt if missing / bad).

        On the real disk, first take the root's lock (DirectoryLocked if another process
        holds it); WipeInterrupted if a wipe of the root began and did not finish."""
        self.hold_lock()
        data = read_optional(self.disk, self.instance_path)
        if data is None:
            raise NotFormatted(self.instance_path)
        if self.disk.exists(posixpath.join(self.root, WIPE_TRASH)):
            raise WipeInterrupted(self.root)
        return decode_instance(data, path=self.instance_path)

    # ------------------------------------------------------------------ the lock

    @property
    def lock_path(self) -> str:
        return posixpath.join(self.root, LOCK)

    def hold_lock(self) -> None:
        """Take the root's exclusive lock if this layout does not hold it yet (real disk
        and an existing root only; a missing root has nothing to protect yet)."""
        if self._lock is not None or not isinstance(self.disk, OsDisk):
            return
        if not os.path.isdir(self.root):
            return
        lock = lock_directory(self.root)
        self._lock = lock
        weakref.finalize(self, lock.release)

    def release_lock(self) -> None:
        """Let the root's lock go (it is also let go when the layout is collected)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def remove_stale_temps(self) -> list[str]:
        """Delete temp files a crash left behind (never referenced by anything); return them.

        Only names carrying the temp marker are touched; corrupt real files stay.
        """
        removed: list[str] = []
        for directory in (self.root, self.tablet_meta_dir, self.consensus_meta_dir, self.data_dir):
            if not self.disk.is_dir(directory):
                continue
            stale = [n for n in self.disk.listdir(directory) if is_temp_name(n)]
            for name in stale:
                path = posixpath.join(directory, name)
                if self.disk.is_dir(path):
                    continue
                self.disk.unlink(path)
                removed.append(path)
            if stale:
                self.disk.fsync_dir(directory)
        return removed

    def tablet_ids(self) -> list[str]:
        """Tablets with a superblock (i.e. not DOES_NOT_EXIST), sorted."""
        return [n for n in self.disk.listdir(self.tablet_meta_dir) if not is_temp_name(n)]

    # ------------------------------------------------------------------ quarantine

    def quarantine_dirs(self, tablet_id: str) -> list[str]:
        """Existing quarantine directories of `tablet_id`, oldest first."""
        validate_name(tablet_id)
        prefix = tablet_id + "."
        found: list[tuple[int, str]] = []
        for name in self.disk.listdir(self.quarantine_root):
            suffix = name[len(prefix) :]
            if name.startswith(prefix) and suffix.isdigit():
                found.append((int(suffix), posixpath.join(self.quarantine_root, name)))
        return [path for _, path in sorted(found)]

    def new_quarantine_dir(self, tablet_id: str) -> str:
        """Create <root>/quarantine/<tablet-id>.<n>/ (next unused n) durably; return it."""
        existing = self.quarantine_dirs(tablet_id)
        number = 1 + (int(existing[-1].rsplit(".", 1)[1]) if existing else 0)
        path = posixpath.join(self.quarantine_root, f"{tablet_id}.{number}")
        mkdir_durably(self.disk, path)
        return path

    def copy_file_durably(self, src: str, dst_dir: str, name: str | None = None) -> str:
        """Copy `src` into `dst_dir` (as `name`, default its own name), atomically and
        durably. (A tablet's superblock and cmeta files share the tablet id as their name:
        a quarantine directory holds them as QDIR_SUPERBLOCK and QDIR_CMETA.)"""
        dst = posixpath.join(dst_dir, name or posixpath.basename(src))
        atomic_replace(self.disk, dst, self.disk.read_file(src))
        return dst

    def move_dir_durably(self, src: str, dst: str) -> None:
        """Move directory `src` to `dst` in one rename; fsync both parents."""
        self.disk.rename(src, dst)
        self.disk.fsync_dir(parent_of(dst))
        if parent_of(src) != parent_of(dst):
            self.disk.fsync_dir(parent_of(src))
